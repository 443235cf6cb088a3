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

# check_spec_versions PLUGIN CONFIG NETNS IFNAME CONTAINERID: ADD, CHECK
# and DEL of CONFIG in every spec version but 1.0.0 (the scripts' own), in
# NETNS (a namespace of its own, left empty). Checks, per VERSION:
# versions-VERSION-add, -layout (the result is VERSION's: 0.1.0 and 0.2.0
# `ip4`, no `interfaces`; `ips[].version` only in 0.3.x and 0.4.0;
# `interfaces[].mtu` only in 1.1.0, the link's), -check (before 0.4.0 the
# spec has no CHECK: code 1), -del (the link gone).
check_spec_versions() {
    local plugin=$1 conf=$2 netns=$3 ifname=$4 container=$5 version vconf result mtu layout
    for version in 0.1.0 0.2.0 0.3.0 0.3.1 0.4.0 1.1.0; do
        vconf=$(jqc --arg v "$version" '.cniVersion = $v' <<<"$conf")
        cni_call "$plugin" ADD "/run/netns/$netns" "$ifname" "$container" "$vconf"
        check_eq "versions-$version-add" 0 "$cni_status"
        [ "$cni_status" = 0 ] || fail "versions-$version-add-output" "$(cni_report)"
        result=$cni_out
        mtu=$(ip -n "$netns" -j link show "$ifname" 2>/dev/null | jqc '.[0].mtu')
        case "$version" in
        0.1.0 | 0.2.0)
            layout=$(jqc --arg v "$version" \
                '.cniVersion == $v and (.ip4.ip | type == "string") and (has("interfaces") | not)' <<<"$result") ;;
        *)
            layout=$(jqc --arg v "$version" --arg ifname "$ifname" --arg ns "/run/netns/$netns" \
                --argjson mtu "${mtu:-null}" '
                .cniVersion == $v and .interfaces[0].name == $ifname
                and .interfaces[0].sandbox == $ns and .ips[0].interface == 0
                and (.ips[0] | has("version")) == ($v | test("^0\\.[34]\\."))
                and .interfaces[0].mtu == (if $v == "1.1.0" then $mtu else null end)' <<<"$result") ;;
        esac
        check_eq "versions-$version-layout" true "$layout"
        [ "$layout" = true ] || fail "versions-$version-layout-result" "$result"
        cni_call "$plugin" CHECK "/run/netns/$netns" "$ifname" "$container" "$(with_prev "$vconf" "$result")"
        case "$version" in
        0.4.0 | 1.1.0) check_eq "versions-$version-check" 0 "$cni_status" ;;
        *) check_eq "versions-$version-check" "1 config version does not allow CHECK" \
            "$(jqc -r '"\(.code) \(.msg)"' <<<"$cni_out")" ;;
        esac
        cni_call "$plugin" DEL "/run/netns/$netns" "$ifname" "$container" "$vconf"
        check_eq "versions-$version-del" "0 gone" \
            "$cni_status $(ip -n "$netns" link show "$ifname" >/dev/null 2>&1 && echo there || echo gone)"
    done
}

# Called last: the host requires this marker to trust the run.
finish() {
    echo "SUMMARY failures=${failures:-0}"
    echo "ALL-DONE"
}
