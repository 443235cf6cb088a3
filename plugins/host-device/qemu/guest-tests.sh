#!/usr/bin/env bash
# host-device in the qemu guest (testing/qemu-guest), on devices this
# machine's kernel lacks:
#
# - netdevsim ports stand for physical NICs: they have no link kind, so when
#   a pod's namespace is destroyed the kernel gives them back to the initial
#   namespace (under their pod name, alias kept) instead of destroying them
#   as it does a veth. They carry no traffic, so no ping here (the host
#   tests ping across a veth).
# - soft-RoCE (rxe0 on veth0) for the RDMA lookup on a real kernel: RDMA
#   netlink reports rxe0 bound to veth0, sysfs names its driver, and since
#   rxe cannot change namespace (its driver lacks what the kernel needs) the
#   plugin leaves it and moves the netdev. No RDMA device here can move.
#
# Each check prints `CHECK <name> PASS|FAIL <detail>`; tests/qemu.rs lists
# the names it requires.
set -u
. /test/guest-lib.sh

state_dir=/var/lib/cni/hd-state
leases=/run/cni/hd-leases
hl_ipam='{"type":"host-local","dataDir":"/run/cni/hd-leases","ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10"}]]}'

# conf EXTRA-JSON: a host-device configuration with EXTRA's keys.
conf() {
    jqc -n --argjson extra "$1" --arg s "$state_dir" \
        '{cniVersion: "1.1.0", name: "hdq", type: "host-device", dataDir: $s, logLevel: "info"} + $extra'
}
hd() { cni_call host-device "$@"; }

# link_field NETNS|"" LINK JQ-FILTER: a field of `ip -j -d link show LINK`.
link_field() {
    local ns=()
    [ -n "$1" ] && ns=(-n "$1")
    ip "${ns[@]}" -j -d link show "$2" 2>/dev/null | jqc -r ".[0]$3"
}
# link_summary NETNS|"" LINK: "mac mtu up alias" of a link.
link_summary() {
    local ns=()
    [ -n "$1" ] && ns=(-n "$1")
    ip "${ns[@]}" -j -d link show "$2" 2>/dev/null |
        jqc -r '.[0] | "\(.address) \(.mtu) \(.flags | index("UP") != null) \(.ifalias // "-")"'
}
leases_held() { ls "$leases/hdq" 2>/dev/null | grep -c '^10\.' ; }
state_files() { ls "$state_dir/hdq" 2>/dev/null | tr '\n' ' '; }
# wait_for COMMAND...: up to 10 s for COMMAND to succeed.
wait_for() {
    for _ in $(seq 100); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

check_cmd setup-binaries test -x /usr/local/bin/host-device -a -x /usr/local/bin/host-local \
    -a -x /usr/local/bin/static

# --- R: RDMA lookup on a real kernel (soft-RoCE) -------------------------------
# Exclusive mode can be set only while no other namespace exists: first.
ip link add veth0 type veth peer name veth1
ip link set veth0 up
ip link set veth1 up
if run_cmd out rdma link add rxe0 type rxe netdev veth0; then
    check_contains setup-rxe rxe0 "$(rdma dev show 2>&1)"
else
    fail setup-rxe "$out"
fi
mode_out=$(rdma system set netns exclusive 2>&1)
check_contains setup-rdma-exclusive "netns exclusive" "$(rdma system show 2>&1) $mode_out"
netns_add pod-r
hd ADD /run/netns/pod-r net1 ctr-r "$(conf '{"device": "veth0"}')"
if [ "$cni_status" = 0 ] &&
    [[ $cni_err == *'RDMA device rxe0 (rdma_rxe) cannot change namespace'* ]]; then
    pass rdma-soft-device-found-and-left "$cni_err"
else
    fail rdma-soft-device-found-and-left "$(cni_report)"
fi
check_eq rdma-netdev-moved veth0 "$(link_field pod-r net1 .ifalias)"
# Kernel fact: the rxe device is unregistered once its netdev leaves.
if rdma dev show 2>&1 | grep -q rxe0; then
    fail fact-rxe-gone-with-its-netdev "$(rdma dev show 2>&1)"
else
    pass fact-rxe-gone-with-its-netdev "$(rdma dev show 2>&1)"
fi
hd DEL /run/netns/pod-r net1 ctr-r "$(conf '{"device": "veth0"}')"
if [ "$cni_status" = 0 ] && [ "$(link_field "" veth0 .ifname)" = veth0 ]; then
    pass rdma-del "veth0 back"
else
    fail rdma-del "$(cni_report)"
fi
ip netns del pod-r

# --- netdevsim ports ------------------------------------------------------------
echo "11 2" >/sys/bus/netdevsim/new_device
nsim=/sys/bus/netdevsim/devices/netdevsim11
ports_ready() { [ "$(ls $nsim/net 2>/dev/null | wc -l)" = 2 ]; }
wait_for ports_ready
# (No process substitution: the guest has no /dev/fd.)
ports=($(ls $nsim/net | sort))
p0=${ports[0]:-none}
p1=${ports[1]:-none}
ip link set "$p0" address 02:00:00:11:00:01 mtu 1400
ip link set "$p0" up
ip link set "$p1" address 02:00:00:11:00:02
check_eq setup-netdevsim-ports "02:00:00:11:00:01 1400 true -" "$(link_summary "" "$p0")"
check_eq fact-nsim-has-no-link-kind null "$(link_field "" "$p0" .linkinfo.info_kind)"
home="02:00:00:11:00:01 1400 true -"

# --- A: by name, static IPAM, CHECK, DEL restores MAC and MTU -------------------
netns_add pod-a
conf_a=$(conf "{\"device\": \"$p0\", \"ipam\": {\"type\": \"static\", \"addresses\": [{\"address\": \"10.1.0.5/24\"}]}}")
hd ADD /run/netns/pod-a net1 ctr-a "$conf_a"
result_a=$cni_out
if [ "$cni_status" = 0 ]; then pass name-add "$cni_out"; else fail name-add "$(cni_report)"; fi
check_eq name-in-pod "02:00:00:11:00:01 1400 true $p0" "$(link_summary pod-a net1)"
check_eq name-gone-from-host "" "$(link_field "" "$p0" .ifname)"
check_eq name-result-mac 02:00:00:11:00:01 "$(jqc -r '.interfaces[0].mac' <<<"$result_a")"
check_contains name-address 10.1.0.5/24 "$(ip -n pod-a -br addr show net1)"
check_eq name-state-returns-to-host true \
    "$(jqc -r '.hostLink.returnsToHost' "$state_dir/hdq/ctr-a@net1.json" 2>&1)"
hd CHECK /run/netns/pod-a net1 ctr-a "$(with_prev "$conf_a" "$result_a")"
if [ "$cni_status" = 0 ]; then pass name-check ok; else fail name-check "$(cni_report)"; fi
ip -n pod-a link set net1 down
ip -n pod-a link set net1 address 02:00:00:11:00:99 mtu 1300
ip -n pod-a link set net1 up
hd DEL /run/netns/pod-a net1 ctr-a "$conf_a"
if [ "$cni_status" = 0 ]; then pass name-del ok; else fail name-del "$(cni_report)"; fi
check_eq name-del-restored "$home" "$(link_summary "" "$p0")"
check_eq name-del-state-gone "" "$(state_files)"
hd DEL /run/netns/pod-a net1 ctr-a "$conf_a"
if [ "$cni_status" = 0 ]; then pass name-del-twice ok; else fail name-del-twice "$(cni_report)"; fi

# --- B: the pod's namespace is destroyed: the kernel returns the device ----------
netns_add pod-b
conf_b=$(conf "{\"device\": \"$p0\", \"ipam\": $hl_ipam}")
hd ADD /run/netns/pod-b net1 ctr-b "$conf_b"
if [ "$cni_status" = 0 ]; then pass refund-add ok; else fail refund-add "$(cni_report)"; fi
check_eq refund-lease-taken 1 "$(leases_held)"
ip -n pod-b link set net1 mtu 1300
ip netns del pod-b
if wait_for ip link show net1; then
    pass fact-nsim-returns-under-pod-name "$(link_summary "" net1)"
else
    fail fact-nsim-returns-under-pod-name "$(ip -br link)"
fi
check_eq fact-returned-with-alias "$p0" "$(link_field "" net1 .ifalias)"
hd DEL /run/netns/pod-b net1 ctr-b "$conf_b"
if [ "$cni_status" = 0 ]; then pass refund-del ok; else fail refund-del "$(cni_report)"; fi
check_eq refund-restored "$home" "$(link_summary "" "$p0")"
check_eq refund-lease-released 0 "$(leases_held)"
check_eq refund-state-gone "" "$(state_files)"

# --- C: DEL right after the namespace is deleted, before the kernel is done ------
netns_add pod-c
hd ADD /run/netns/pod-c net1 ctr-c "$conf_b"
ip netns del pod-c
hd DEL /run/netns/pod-c net1 ctr-c "$conf_b"
if [ "$cni_status" = 0 ]; then pass race-del ok; else fail race-del "$(cni_report)"; fi
check_eq race-restored "$home" "$(link_summary "" "$p0")"
check_eq race-lease-released 0 "$(leases_held)"

# --- D: kernelpath: the device directory's net/ entries, first one -------------
kernel_path=$(readlink -f $nsim)
netns_add pod-d
conf_d=$(conf "{\"kernelpath\": \"$kernel_path\"}")
hd ADD /run/netns/pod-d net1 ctr-d "$conf_d"
if [ "$cni_status" = 0 ]; then pass kernelpath-add "$kernel_path"; else fail kernelpath-add "$(cni_report)"; fi
check_eq kernelpath-first-port "$p0" "$(link_field pod-d net1 .ifalias)"
hd DEL /run/netns/pod-d net1 ctr-d "$conf_d"
check_eq kernelpath-del "$home" "$(link_summary "" "$p0")"

# --- E: hwaddr ----------------------------------------------------------------------
conf_e=$(conf '{"hwaddr": "02:00:00:11:00:02"}')
hd ADD /run/netns/pod-d net1 ctr-e "$conf_e"
if [ "$cni_status" = 0 ]; then pass hwaddr-add ok; else fail hwaddr-add "$(cni_report)"; fi
check_eq hwaddr-port "$p1" "$(link_field pod-d net1 .ifalias)"
hd DEL /run/netns/pod-d net1 ctr-e "$conf_e"
check_eq hwaddr-del "$p1" "$(link_field "" "$p1" .ifname)"

# --- F: the host name is taken while the device is in the pod ---------------------
conf_f=$(conf "{\"device\": \"$p0\"}")
hd ADD /run/netns/pod-d net1 ctr-f "$conf_f"
ip link add "$p0" type dummy
hd DEL /run/netns/pod-d net1 ctr-f "$conf_f"
if [ "$cni_status" != 0 ] && [[ $cni_out == *"another interface of that name"* ]]; then
    pass taken-del-fails "$cni_out"
else
    fail taken-del-fails "$(cni_report)"
fi
check_eq taken-stays-in-pod "02:00:00:11:00:01 1400 true $p0" "$(link_summary pod-d net1)"
ip link del "$p0"
hd DEL /run/netns/pod-d net1 ctr-f "$conf_f"
if [ "$cni_status" = 0 ]; then pass taken-del-after ok; else fail taken-del-after "$(cni_report)"; fi
check_eq taken-restored "$home" "$(link_summary "" "$p0")"

# --- G: GC returns the device of an attachment whose namespace is gone ------------
netns_add pod-g
hd ADD /run/netns/pod-g net1 ctr-g "$conf_f"
hd ADD /run/netns/pod-d net2 ctr-h "$(conf "{\"device\": \"$p1\"}")"
ip netns del pod-g
wait_for ip link show net1
gc_conf=$(jqc '. + {"cni.dev/valid-attachments": [{"containerID": "ctr-h", "ifname": "net2"}]}' <<<"$conf_f")
hd GC "" "" "" "$gc_conf"
if [ "$cni_status" = 0 ]; then pass gc ok; else fail gc "$(cni_report)"; fi
check_eq gc-restored "$home" "$(link_summary "" "$p0")"
check_eq gc-keeps-listed "$p1" "$(link_field pod-d net2 .ifalias)"
check_eq gc-state-left "ctr-h@net2.json " "$(state_files)"
hd DEL /run/netns/pod-d net2 ctr-h "$(conf "{\"device\": \"$p1\"}")"
check_eq gc-del-listed "$p1" "$(link_field "" "$p1" .ifname)"

finish
