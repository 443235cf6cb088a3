#!/usr/bin/env bash
# Guest side of conformance/tests/qemu_suite.rs: runs the conformance suite
# in the shared qemu guest (testing/qemu-guest), whose kernel has the link
# types this machine's kernel lacks (ipvlan, 802.1Q vlan), as /test/run.sh,
# as root.
#
# Expects /usr/local/bin/conformance and one or both plugin folders:
# /opt/cni/ours (our plugins) and /opt/cni/reference (the Debian reference
# plugins, under their plugin names: the suite finds plugins by type name).
# Each folder present is run through the suite's plugin scenarios (verbs,
# bad input, DEL cases, GC); every line of its report is printed with the
# prefix `SUITE-ours ` or `SUITE-reference `, for the host to judge line by
# line. The CHECK lines say only that the guest had what the suite calls,
# that each run reached its closing line and that it exited 0 (for the
# reference, with its known-issue list).
set -u
. /test/guest-lib.sh

if [ -x /usr/local/bin/conformance ] && { [ -d /opt/cni/ours ] || [ -d /opt/cni/reference ]; }; then
    pass setup-binaries "conformance; plugins: $(ls /opt/cni/* 2>/dev/null | tr '\n' ' ')"
else
    fail setup-binaries "need /usr/local/bin/conformance and /opt/cni/ours or /opt/cni/reference"
    finish
    exit 0
fi

# What the suite runs besides the plugins: iproute2's ip (netns, links,
# addresses, rules), sysctl and cat inside pods (ip netns exec).
missing=""
for tool in ip sysctl cat; do
    command -v "$tool" >/dev/null || missing="$missing $tool"
done
if [ -z "$missing" ] && ip -V 2>&1 | grep -q iproute2; then
    pass setup-guest-tools "ip (iproute2), sysctl, cat"
else
    fail setup-guest-tools "missing:$missing; ip -V: $(ip -V 2>&1)"
fi
# A bad-input scenario passes a plain file as CNI_NETNS: the host's
# /etc/hostname, which the guest does not have by itself.
[ -e /etc/hostname ] || echo guest >/etc/hostname

# run_suite SET DIR KNOWN_ISSUES FINISHED_CHECK PASSES_CHECK
run_suite() {
    local set=$1 dir=$2 known=$3 started status closing
    if [ ! -d "$dir" ]; then
        return 0
    fi
    started=$(date +%s)
    # The types this machine's kernel lacks (conformance/tests/qemu_suite.rs
    # TYPES); host-local serves as their IPAM, its own scenarios run on the
    # host.
    conformance suite "$dir" --only verbs,bad-input,del,gc --types ipvlan,vlan,dummy,vrf \
        --known-issues "$known" \
        >/tmp/suite-"$set".out 2>/tmp/suite-"$set".err
    status=$?
    sed "s/^/SUITE-$set /" /tmp/suite-"$set".out
    echo "SUITE-TIME $set $(($(date +%s) - started)) s"
    closing=$(tail -n 1 /tmp/suite-"$set".out)
    if printf '%s' "$closing" | grep -Eq '^[0-9]+ passed, [0-9]+ failed'; then
        pass "$4" "$closing"
    else
        fail "$4" "no closing line; stderr: $(tail -c 300 /tmp/suite-"$set".err)"
    fi
    check_eq "$5" 0 "$status"
}

run_suite ours /opt/cni/ours none suite-ours-finished suite-ours-passes
run_suite reference /opt/cni/reference reference suite-reference-finished suite-reference-passes

finish
