#!/usr/bin/env bash
# The harness's own guest script: every link type and device the guest
# kernel is there for can be created, and a binary given to run.sh runs
# from /usr/local/bin with its libraries.
set -u
. /test/guest-lib.sh

check_eq kernel-release "$(cat /etc/guest-kernel-release)" "$(uname -r)"

# link_check CHECK LINK KIND IP-LINK-ADD-ARGS...: `ip link add` makes LINK,
# of kind KIND.
link_check() {
    local check=$1 link=$2 kind=$3
    shift 3
    if run_cmd out ip link add "$@"; then
        check_eq "$check" "$kind" "$(ip -j -d link show "$link" | jqc -r '.[0].linkinfo.info_kind')"
    else
        fail "$check" "ip link add $*: $out"
    fi
}
ip link add veth0 type veth peer name veth1
ip link add veth2 type veth peer name veth3
link_check link-vlan veth0.100 vlan link veth0 name veth0.100 type vlan id 100
link_check link-ipvlan ipv0 ipvlan link veth2 name ipv0 type ipvlan mode l2
link_check link-macvlan mv0 macvlan link veth0 name mv0 type macvlan mode bridge
# The dummy module makes dummy0 when it loads.
link_check link-dummy dummy1 dummy name dummy1 type dummy
link_check link-vrf vrf0 vrf name vrf0 type vrf table 10

ip link add br0 type bridge vlan_filtering 1
check_eq bridge-vlan-filtering 1 \
    "$(ip -j -d link show br0 | jqc '.[0].linkinfo.info_data.vlan_filtering')"
ip link set veth1 master br0
bridge vlan add dev veth1 vid 42
check_contains bridge-vlan-entry 42 "$(bridge -j vlan show dev veth1 | jqc '[.[].vlans[].vlan]')"

echo "10 1" >/sys/bus/netdevsim/new_device
for _ in $(seq 50); do
    [ -n "$(ls /sys/bus/netdevsim/devices/netdevsim10/net 2>/dev/null)" ] && break
    sleep 0.1
done
check_eq netdevsim-port 1 "$(ls /sys/bus/netdevsim/devices/netdevsim10/net 2>/dev/null | wc -l)"

ip link set veth0 up
ip link set veth1 up
if run_cmd out rdma link add rxe0 type rxe netdev veth0; then
    check_contains rdma-rxe rxe0 "$(rdma dev show 2>&1)"
else
    fail rdma-rxe "$out"
fi

check_contains binary-runs flock "$(/usr/local/bin/flock --version 2>&1)"
check_eq cni-path /usr/local/bin "$CNI_PATH"

finish
