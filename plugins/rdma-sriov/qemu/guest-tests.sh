#!/usr/bin/env bash
# Guest side of the qemu layer: runs as /test/run.sh inside the shared test
# guest (testing/qemu-guest/scripts/run.sh), as root, on a Debian 6.1 kernel. Each check prints
# `CHECK <name> PASS|FAIL <detail>`; the last line is ALL-DONE.
#
# Real kernel state, faked topology: netdevsim gives a PF whose VF settings
# are kernel state, but its VFs have no PCI functions and no netdevs. A small
# fake sysfs tree (RDMA_SRIOV_SYSFS_ROOT) describes four VFs of that PF:
#   vf0, vf1  bound to vfio-pci: no netdev, PF-side settings only;
#   vf2       netdev veth2, RDMA device rxe0 listed under the VF in sysfs;
#   vf3       netdev veth0, no RDMA device in sysfs: the plugin must find
#             rxe0 through RDMA netlink, as the device bound to veth0.
# Every netlink call the plugin makes (PF VF settings, link moves, RDMA
# netns mode, device dump, device move, libibverbs port query) goes to the
# guest kernel.
set -u
. /test/guest-lib.sh

plugin=/usr/local/bin/rdma-sriov
pf=nsimpf0
num_vfs=4
fakesys=/tmp/fakesys
statedir=/tmp/rdma-sriov-state
network=rdmanet

# --- setup -------------------------------------------------------------------
modules_out=""
# rdma_rxe asks the crypto API for crc32 when a link is added: load it first.
for module in netdevsim veth crc32_generic crc32-pclmul ib_uverbs rdma_rxe; do
    out=$(modprobe "$module" 2>&1) || modules_out="$modules_out $module: $out;"
done
if [ -z "$modules_out" ]; then
    pass setup-modules "$(lsmod | awk 'NR > 1 {print $1}' | tr '\n' ' ')"
else
    fail setup-modules "$modules_out"
fi

nsim_dev=/sys/bus/netdevsim/devices/netdevsim10
echo "10 1" >/sys/bus/netdevsim/new_device
for _ in $(seq 50); do
    [ -n "$(ls "$nsim_dev/net" 2>/dev/null)" ] && break
    sleep 0.1
done
ip link set "$(ls "$nsim_dev/net" | head -n 1)" name "$pf"
ip link set "$pf" up
echo "$num_vfs" >"$nsim_dev/sriov_numvfs"
check_eq setup-netdevsim-vfs "$num_vfs" "$(ip -j link show "$pf" | jqc '.[0].vfinfo_list | length')"

# veth0 carries soft-RoCE rxe0 (its peer veth1 gives it carrier); veth2 is
# the netdev of vf2.
ip link add veth0 type veth peer name veth1
ip link add veth2 type veth peer name veth3
for link in veth0 veth1 veth2 veth3; do ip link set "$link" up; done
rdma link add rxe0 type rxe netdev veth0
check_contains setup-rxe-link "state ACTIVE" "$(rdma link show rxe0/1 2>&1)"

if [ -x "$plugin" ]; then
    pass plugin-binary "$plugin"
else
    fail plugin-binary "no $plugin in the guest: give prepare.sh the binary"
    finish
    exit 0
fi

devices=$fakesys/bus/pci/devices
pf_pci=0000:00:10.0
vf_pci() { echo "0000:00:10.$(($1 + 1))"; }
mkdir -p "$devices/$pf_pci/net/$pf" "$fakesys/class/net/$pf" \
    "$fakesys/bus/pci/drivers/vfio-pci" "$fakesys/bus/pci/drivers/mlx5_core"
ln -s "../../../bus/pci/devices/$pf_pci" "$fakesys/class/net/$pf/device"
echo "$num_vfs" >"$devices/$pf_pci/sriov_numvfs"
for vf in 0 1 2 3; do
    mkdir -p "$devices/$(vf_pci $vf)"
    ln -s "../$(vf_pci $vf)" "$devices/$pf_pci/virtfn$vf"
    ln -s "../$pf_pci" "$devices/$(vf_pci $vf)/physfn"
done
for vf in 0 1; do
    ln -s ../../bus/pci/drivers/vfio-pci "$devices/$(vf_pci $vf)/driver"
done
for vf in 2 3; do
    ln -s ../../bus/pci/drivers/mlx5_core "$devices/$(vf_pci $vf)/driver"
done
mkdir -p "$devices/$(vf_pci 2)/net/veth2" "$devices/$(vf_pci 2)/infiniband/rxe0" \
    "$devices/$(vf_pci 3)/net/veth0"
# RDMA driver names come from the real class directory.
ln -s /sys/class/infiniband "$fakesys/class/infiniband"

# --- helpers -------------------------------------------------------------------
# cni VERB NETNS IFNAME CONTAINERID CONFIG: runs the plugin; its stdout goes
# to $cni_out, stderr to $cni_err, exit status to $cni_status.
cni() {
    local errfile=/tmp/cni.stderr
    # -u: never the simulated backend, always the guest kernel.
    cni_out=$(printf '%s' "$5" | env -u RDMA_SRIOV_FAKE_PF_OPS CNI_COMMAND="$1" CNI_NETNS="$2" CNI_IFNAME="$3" \
        CNI_CONTAINERID="$4" CNI_PATH=/opt/cni/bin \
        RDMA_SRIOV_SYSFS_ROOT="$fakesys" RDMA_SRIOV_STATE_DIR="$statedir" \
        RDMA_SRIOV_LOCK_TIMEOUT_MS=2000 "$plugin" 2>"$errfile")
    cni_status=$?
    cni_err=$(cat "$errfile")
}
cni_report() { echo "exit $cni_status stdout: $cni_out stderr: $cni_err"; }

# conf KEY-VALUE-JSON: a network configuration with extra keys.
conf() {
    jqc -n --arg net "$network" --argjson extra "$1" \
        '{cniVersion: "1.1.0", name: $net, type: "rdma-sriov"} + $extra'
}

vf_json() { ip -j link show "$pf" | jqc ".[0].vfinfo_list[$1]"; }
# The fields the plugin sets, in a fixed order, for comparisons.
vf_fields() {
    vf_json "$1" | jqc '{address, vlan: (.vlan_list[0].vlan // 0), qos: (.vlan_list[0].qos // 0),
        protocol: (.vlan_list[0].protocol // "802.1Q"), max_tx: .rate.max_tx,
        min_tx: .rate.min_tx, spoofchk, trust, link_state}'
}
state_files() { find "$statedir/attachments" -name '*.json' 2>/dev/null | sort | tr '\n' ' '; }
netns_add() { ip netns add "$1" && ip -n "$1" link set lo up; }
link_in() { ip -n "$1" -j link show "$2" 2>/dev/null | jqc -r '.[0].address // empty'; }

# --- A: PF-side VF settings on netdevsim, VF bound to vfio-pci ------------------
netns_add pod-a
pod_a=/run/netns/pod-a
# Non-default originals, so that "restored" cannot pass by accident.
ip link set "$pf" vf 0 mac 02:00:00:00:00:aa vlan 7 qos 1 spoofchk on trust off \
    min_tx_rate 5 max_tx_rate 50 state disable
vf0_before=$(vf_fields 0)
others_before=$(ip -j link show "$pf" | jqc '[.[0].vfinfo_list[1:][]]')
conf_a=$(conf "{\"deviceID\": \"$(vf_pci 0)\", \"mac\": \"02:11:22:33:44:55\",
    \"vlan\": 100, \"vlanQoS\": 3, \"vlanProto\": \"802.1ad\", \"spoofchk\": \"off\",
    \"trust\": \"on\", \"min_tx_rate\": 10, \"max_tx_rate\": 100, \"link_state\": \"enable\"}")

cni ADD "$pod_a" net1 ctr-a "$conf_a"
if [ "$cni_status" = 0 ]; then
    pass pf-add "$cni_out"
else
    fail pf-add "$(cni_report)"
fi
check_eq pf-add-result-mac 02:11:22:33:44:55 "$(jqc -r '.interfaces[0].mac' <<<"$cni_out")"
check_eq pf-add-result-pci "$(vf_pci 0)" "$(jqc -r '.interfaces[0].pciID' <<<"$cni_out")"
vf0=$(vf_json 0)
check_eq pf-add-mac 02:11:22:33:44:55 "$(jqc -r .address <<<"$vf0")"
check_eq pf-add-vlan-qos "100/3" "$(jqc -r '"\(.vlan_list[0].vlan)/\(.vlan_list[0].qos)"' <<<"$vf0")"
check_eq pf-add-vlan-proto 802.1ad "$(jqc -r '.vlan_list[0].protocol // "802.1Q"' <<<"$vf0")"
check_eq pf-add-rate "10/100" "$(jqc -r '"\(.rate.min_tx)/\(.rate.max_tx)"' <<<"$vf0")"
check_eq pf-add-spoofchk false "$(jqc -r .spoofchk <<<"$vf0")"
check_eq pf-add-trust true "$(jqc -r .trust <<<"$vf0")"
check_eq pf-add-link-state enable "$(jqc -r .link_state <<<"$vf0")"

cni CHECK "$pod_a" net1 ctr-a "$(jqc --argjson prev "$cni_out" '. + {prevResult: $prev}' <<<"$conf_a")"
if [ "$cni_status" = 0 ]; then pass pf-check "in effect"; else fail pf-check "$(cni_report)"; fi

# Someone changes the VF behind the plugin's back: CHECK must notice.
ip link set "$pf" vf 0 trust off
cni CHECK "$pod_a" net1 ctr-a "$conf_a"
if [ "$cni_status" != 0 ] && [[ $cni_out == *trust* ]]; then
    pass pf-check-detects-drift "$cni_out"
else
    fail pf-check-detects-drift "$(cni_report)"
fi
ip link set "$pf" vf 0 trust on

# The VF is taken while pod-a is alive.
netns_add pod-a2
cni ADD /run/netns/pod-a2 net1 ctr-a2 "$conf_a"
if [ "$cni_status" != 0 ] && [ "$(vf_json 0 | jqc -r .address)" = 02:11:22:33:44:55 ]; then
    pass pf-add-busy-vf-refused "$cni_out"
else
    fail pf-add-busy-vf-refused "$(cni_report)"
fi
ip netns del pod-a2

cni DEL "$pod_a" net1 ctr-a "$conf_a"
if [ "$cni_status" = 0 ]; then pass pf-del "ok"; else fail pf-del "$(cni_report)"; fi
check_eq pf-del-restores "$vf0_before" "$(vf_fields 0)"
check_eq pf-other-vfs-untouched "$others_before" "$(ip -j link show "$pf" | jqc '[.[0].vfinfo_list[1:][]]')"
check_eq pf-del-state-removed "" "$(state_files)"
cni DEL "$pod_a" net1 ctr-a "$conf_a"
if [ "$cni_status" = 0 ]; then pass pf-del-again "ok"; else fail pf-del-again "$(cni_report)"; fi

# --- B: a setting the kernel refuses rolls back the ones already applied --------
# netdevsim has no ndo_set_vf_guid: the GUID, applied last, fails with
# EOPNOTSUPP after mac, vlan, rate, spoofchk and trust went through.
ip link set "$pf" vf 1 spoofchk on state disable
vf1_before=$(vf_fields 1)
conf_b=$(conf "{\"deviceID\": \"$(vf_pci 1)\", \"mac\": \"02:22:22:22:22:22\",
    \"vlan\": 200, \"vlanQoS\": 5, \"spoofchk\": \"off\", \"trust\": \"on\",
    \"max_tx_rate\": 300, \"link_state\": \"enable\", \"guid\": \"00:11:22:33:44:55:66:77\"}")
cni ADD "$pod_a" net1 ctr-b "$conf_b"
if [ "$cni_status" != 0 ]; then
    pass pf-add-refused-by-kernel "$cni_out"
else
    fail pf-add-refused-by-kernel "ADD succeeded: $cni_out"
fi
check_eq pf-rollback-restores "$vf1_before" "$(vf_fields 1)"
check_eq pf-rollback-state-removed "" "$(state_files)"
conf_b_ok=$(jqc 'del(.guid)' <<<"$conf_b")
cni ADD "$pod_a" net1 ctr-b "$conf_b_ok"
if [ "$cni_status" = 0 ] && [ "$(vf_json 1 | jqc -r .address)" = 02:22:22:22:22:22 ]; then
    pass pf-add-after-rollback "$cni_out"
else
    fail pf-add-after-rollback "$(cni_report)"
fi
cni DEL "$pod_a" net1 ctr-b "$conf_b_ok"
check_eq pf-del-after-rollback "0 $vf1_before" "$cni_status $(vf_fields 1)"
ip netns del pod-a

# --- C: RDMA in shared mode (the kernel's default) ---------------------------------
check_contains rdma-mode-initially-shared "netns shared" "$(rdma system show 2>&1)"
status_conf=$(conf "{\"pf\": \"$pf\"}")
cni STATUS "" "" "" "$status_conf"
if [ "$cni_status" != 0 ] && [ "$(jqc -r .code <<<"$cni_out")" = 50 ] &&
    [[ $cni_out == *shared* ]]; then
    pass rdma-status-refuses-shared "$cni_out"
else
    fail rdma-status-refuses-shared "$(cni_report)"
fi
cni STATUS "" "" "" "$(conf "{\"pf\": \"$pf\", \"allowSharedRdmaNetns\": true}")"
if [ "$cni_status" = 0 ]; then
    pass rdma-status-shared-allowed "ok"
else
    fail rdma-status-shared-allowed "$(cni_report)"
fi

netns_add pod-c
pod_c=/run/netns/pod-c
veth2_mac=$(ip -j link show veth2 | jqc -r '.[0].address')
vf2_before=$(vf_fields 2)
conf_c=$(conf "{\"deviceID\": \"$(vf_pci 2)\", \"mac\": \"02:33:33:33:33:33\", \"vlan\": 300}")
cni ADD "$pod_c" net1 ctr-c "$conf_c"
if [ "$cni_status" != 0 ] && [[ $cni_out == *shared* ]] && [ "$(link_in pod-c net1)" = "" ] &&
    [ "$(vf_fields 2)" = "$vf2_before" ]; then
    pass rdma-add-refuses-shared "$cni_out"
else
    fail rdma-add-refuses-shared "$(cni_report)"
fi

conf_c_shared=$(jqc '. + {allowSharedRdmaNetns: true}' <<<"$conf_c")
cni ADD "$pod_c" net1 ctr-c "$conf_c_shared"
add_c_out=$cni_out
if [ "$cni_status" = 0 ]; then pass rdma-shared-add "$cni_out"; else fail rdma-shared-add "$(cni_report)"; fi
check_eq rdma-shared-add-netdev-in-pod 02:33:33:33:33:33 "$(link_in pod-c net1)"
check_eq rdma-shared-add-pf-vlan 300 "$(vf_json 2 | jqc -r '.vlan_list[0].vlan')"
check_contains rdma-shared-add-device-stays "rxe0" "$(rdma dev show 2>&1)"

# CHECK asks libibverbs, from inside the pod's netns, for port 1 of rxe0.
cni CHECK "$pod_c" net1 ctr-c "$(jqc --argjson prev "$add_c_out" '. + {prevResult: $prev}' <<<"$conf_c_shared")"
if [ "$cni_status" = 0 ]; then
    pass rdma-check-port-active "$(ip netns exec pod-c ibv_devinfo -d rxe0 2>&1 | grep -m1 'state:')"
else
    fail rdma-check-port-active "$(cni_report)"
fi
# Without carrier on veth0 the rxe port goes DOWN: CHECK must say so.
ip link set veth1 down
for _ in $(seq 30); do
    rdma link show rxe0/1 | grep -q 'state DOWN' && break
    sleep 0.1
done
cni CHECK "$pod_c" net1 ctr-c "$conf_c_shared"
if [ "$cni_status" != 0 ] && [[ $cni_out == *rxe0* ]] && [[ $cni_out == *DOWN* ]]; then
    pass rdma-check-detects-port-down "$cni_out"
else
    fail rdma-check-detects-port-down "$(cni_report) rdma: $(rdma link show rxe0/1 2>&1)"
fi
ip link set veth1 up
for _ in $(seq 30); do
    rdma link show rxe0/1 | grep -q 'state ACTIVE' && break
    sleep 0.1
done

cni DEL "$pod_c" net1 ctr-c "$conf_c_shared"
if [ "$cni_status" = 0 ]; then pass rdma-shared-del "ok"; else fail rdma-shared-del "$(cni_report)"; fi
check_eq rdma-shared-del-netdev-back "$veth2_mac" "$(ip -j link show veth2 2>/dev/null | jqc -r '.[0].address')"
check_eq rdma-shared-del-pf-restored "$vf2_before" "$(vf_fields 2)"
check_eq rdma-shared-del-state-removed "" "$(state_files)"

# vf3: sysfs lists no RDMA device under it; RDMA netlink shows rxe0 bound to
# its netdev veth0. The attachment record must name rxe0.
conf_d=$(conf "{\"deviceID\": \"$(vf_pci 3)\", \"allowSharedRdmaNetns\": true}")
cni ADD "$pod_c" net1 ctr-d "$conf_d"
if [ "$cni_status" = 0 ] && grep -q '"rxe0"' $(state_files) /dev/null; then
    pass rdma-netdev-to-device-mapping "$(jqc -c '.rdma' $(state_files) 2>&1)"
else
    fail rdma-netdev-to-device-mapping "$(cni_report) state: $(cat $(state_files) /dev/null)"
fi
# A kernel fact the plugin has to live with: moving an rxe device's netdev to
# another namespace unregisters the rxe device.
if rdma dev show 2>&1 | grep -q rxe0; then
    fail fact-rxe-dies-with-netdev-move "rxe0 still present: $(rdma dev show 2>&1)"
else
    pass fact-rxe-dies-with-netdev-move "rdma dev: $(rdma dev show 2>&1)"
fi
cni CHECK "$pod_c" net1 ctr-d "$conf_d"
if [ "$cni_status" != 0 ] && [[ $cni_out == *rxe0* ]]; then
    pass rdma-check-missing-device "$cni_out"
else
    fail rdma-check-missing-device "$(cni_report)"
fi
cni DEL "$pod_c" net1 ctr-d "$conf_d"
if [ "$cni_status" = 0 ] && [ -n "$(ip -j link show veth0 2>/dev/null | jqc -r '.[0].address')" ]; then
    pass rdma-mapped-del "veth0 back in the host"
else
    fail rdma-mapped-del "$(cni_report)"
fi
ip link set veth0 up
rdma link add rxe0 type rxe netdev veth0
ip netns del pod-c

# --- D: RDMA in exclusive mode --------------------------------------------------------
# Accepted only while no other netns exists; namespaces are freed
# asynchronously after `ip netns del`.
mode_out=""
for _ in $(seq 50); do
    mode_out=$(rdma system set netns exclusive 2>&1) && break
    sleep 0.2
done
check_contains setup-rdma-exclusive "netns exclusive" "$(rdma system show 2>&1) $mode_out"

cni STATUS "" "" "" "$status_conf"
if [ "$cni_status" = 0 ]; then pass rdma-status-exclusive "ok"; else fail rdma-status-exclusive "$(cni_report)"; fi

netns_add pod-e
pod_e=/run/netns/pod-e
vf2_before=$(vf_fields 2)
cni ADD "$pod_e" net1 ctr-e "$conf_c"
if [ "$cni_status" != 0 ] && [[ $cni_out == *EOPNOTSUPP* ]] && [[ $cni_out == *rdma_rxe* ]] &&
    [[ $cni_out == *rxe0* ]]; then
    pass rdma-move-eopnotsupp "$cni_out"
else
    fail rdma-move-eopnotsupp "$(cni_report)"
fi
check_eq rdma-move-rollback-netdev "$veth2_mac" "$(ip -j link show veth2 2>/dev/null | jqc -r '.[0].address')"
check_eq rdma-move-rollback-pf "$vf2_before" "$(vf_fields 2)"
check_eq rdma-move-rollback-state "" "$(state_files)"
check_contains rdma-move-device-stays "rxe0" "$(rdma dev show 2>&1)"

# vf3 again, now in exclusive mode: rxe0 is found through veth0 and must move
# with the pod. Whatever the order of the moves, rxe0 cannot follow (the
# kernel refuses the move, or unregisters rxe0 once veth0 leaves the host):
# ADD must fail naming rxe0 and give veth0 and the VF settings back.
vf3_before=$(vf_fields 3)
veth0_mac=$(ip -j link show veth0 | jqc -r '.[0].address')
cni ADD "$pod_e" net1 ctr-f "$(conf "{\"deviceID\": \"$(vf_pci 3)\", \"vlan\": 400}")"
if [ "$cni_status" != 0 ] && [[ $cni_out == *rxe0* ]]; then
    pass rdma-exclusive-mapped-add-fails "$cni_out"
else
    fail rdma-exclusive-mapped-add-fails "$(cni_report)"
fi
check_eq rdma-exclusive-mapped-rollback \
    "$veth0_mac $vf3_before" \
    "$(ip -j link show veth0 2>/dev/null | jqc -r '.[0].address') $(vf_fields 3)"
check_eq rdma-exclusive-mapped-rollback-state "" "$(state_files)"
ip netns del pod-e

finish
