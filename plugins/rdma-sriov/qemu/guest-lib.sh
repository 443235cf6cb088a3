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

# Called last: the host requires this marker to trust the run.
finish() {
    echo "SUMMARY failures=${failures:-0}"
    echo "ALL-DONE"
}
