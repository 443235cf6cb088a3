# Helpers for guest test scripts (sourced by bash inside the qemu guest).
# Every check prints exactly one line: `CHECK <name> PASS|FAIL <detail>`;
# run.sh on the host counts them. Details are kept on one line.

one_line() { printf '%s' "$*" | tr '\n\t' '  ' | cut -c1-400; }

pass() { # name detail...
    echo "CHECK $1 PASS $(one_line "${*:2}")"
}
fail() { # name detail...
    echo "CHECK $1 FAIL $(one_line "${*:2}")"
    failures=$((${failures:-0} + 1))
}

# check_eq NAME EXPECTED ACTUAL
check_eq() {
    if [ "$2" = "$3" ]; then
        pass "$1" "$3"
    else
        fail "$1" "expected [$2] got [$3]"
    fi
}

# check_contains NAME NEEDLE HAYSTACK
check_contains() {
    case "$3" in
        *"$2"*) pass "$1" "$3" ;;
        *) fail "$1" "expected to contain [$2], got [$3]" ;;
    esac
}

# check_cmd NAME COMMAND...: passes when the command exits 0.
check_cmd() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then
        pass "$name" "$out"
    else
        fail "$name" "exit $?: $* : $out"
    fi
}

# run_cmd VAR COMMAND...: runs a command, stores its combined output in VAR,
# returns its exit status.
run_cmd() {
    local __var=$1 __out __status
    shift
    __out=$("$@" 2>&1)
    __status=$?
    printf -v "$__var" '%s' "$__out"
    return "$__status"
}

jqc() { jq -M -c "$@"; }

# cni_call PLUGIN VERB NETNS IFNAME CONTAINERID CONFIG: runs a plugin (a
# name in /usr/local/bin, where run.sh puts the test's binaries, or a path)
# as a runtime does; its stdout goes to $cni_out, stderr to $cni_err, exit
# status to $cni_status. CNI_PATH is the guest's /usr/local/bin unless the
# caller set another.
cni_call() {
    local errfile=/tmp/cni_call.stderr plugin=$1
    case "$plugin" in */*) ;; *) plugin=/usr/local/bin/$plugin ;; esac
    cni_out=$(printf '%s' "$6" | CNI_COMMAND="$2" CNI_NETNS="$3" CNI_IFNAME="$4" \
        CNI_CONTAINERID="$5" CNI_PATH="${CNI_PATH:-/usr/local/bin}" "$plugin" 2>"$errfile")
    cni_status=$?
    cni_err=$(cat "$errfile")
}
cni_report() { echo "exit $cni_status stdout: $cni_out stderr: $cni_err"; }

# with_prev CONFIG RESULT: CONFIG with RESULT as its prevResult (for CHECK).
with_prev() { jqc --argjson prev "$2" '. + {prevResult: $prev}' <<<"$1"; }

# netns_add NAME: a namespace with lo up, at /run/netns/NAME.
netns_add() { ip netns add "$1" && ip -n "$1" link set lo up; }

# Called last: the host requires this marker to trust the run.
finish() {
    echo "SUMMARY failures=${failures:-0}"
    echo "ALL-DONE"
}
