#!/usr/bin/env bash
# Guest side of the vlan plugin's real-kernel test: run by the shared qemu
# harness (testing/qemu-guest) as /test/run.sh, as root, on a kernel with
# 802.1Q links (module 8021q, loaded at boot). Each check prints
# `CHECK <name> PASS|FAIL <detail>`; `finish` prints ALL-DONE.
#
# Expects in the guest: /usr/local/bin/vlan, /usr/local/bin/host-local and
# /usr/local/bin/static (CNI_PATH is /usr/local/bin), bash, iproute2's ip, jq, busybox ping.
#
# Topology: the guest's own namespace is the "host", with master0, one end
# of a veth whose other end (peer0) is in namespace `peer`, standing for
# the switch port: peer0.100 (10.60.0.1/24) and peer0.400 (10.64.0.1/24)
# are its VLANs. Pods are namespaces. A pod reaches the peer only through
# a link tagged with the peer's VLAN id.
set -u
. /test/guest-lib.sh

missing=""
for binary in vlan host-local static; do
    [ -x "/usr/local/bin/$binary" ] || missing="$missing /usr/local/bin/$binary"
done
if [ -z "$missing" ]; then
    pass setup-binaries "/usr/local/bin/vlan /usr/local/bin/host-local /usr/local/bin/static"
else
    fail setup-binaries "missing:$missing (give run.sh the binaries)"
    finish
    exit 0
fi

ipam_dir=/run/cni/vlan-ipam
network=vlannet
leases=$ipam_dir/$network

netns_add peer
for pod in pod1 pod2 pod3 pod4 pod5 pod6; do netns_add "$pod"; done
ip link add master0 type veth peer name peer0 netns peer
ip link set master0 up
ip -n peer link set peer0 up
for vid in 100 400; do
    ip -n peer link add link peer0 name "peer0.$vid" type vlan id "$vid"
    ip -n peer link set "peer0.$vid" up
done
ip -n peer addr add 10.60.0.1/24 dev peer0.100
# VLAN 400 lives on a second master, inside pod4 (linkInContainer).
ip -n pod4 link add master1 type veth peer name peer1 netns peer
ip -n pod4 link set master1 up
ip -n peer link set peer1 up
ip -n peer link add link peer1 name peer1.400 type vlan id 400
ip -n peer link set peer1.400 up
ip -n peer addr add 10.64.0.1/24 dev peer1.400

# conf SUBNET GATEWAY EXTRA-JSON: a network configuration (VLAN 100 on
# master0 unless EXTRA says otherwise).
conf() {
    jqc -n --arg dir "$ipam_dir" --arg net "$network" --arg subnet "$1" --arg gw "$2" \
        --argjson extra "$3" \
        '{cniVersion: "1.0.0", name: $net, type: "vlan", master: "master0", vlanId: 100,
          ipam: {type: "host-local", dataDir: $dir,
                 ranges: [[{subnet: $subnet, gateway: $gw}]],
                 routes: [{dst: "0.0.0.0/0"}]}} + $extra'
}
pod_link() { ip -n "$1" -d -j link show "$2" 2>/dev/null | jqc -c '.[0] // empty'; }
pod_ping() { ip netns exec "$1" ping -c 1 -W 2 "$2" >/dev/null 2>&1; }
lease_count() { ls "$leases" 2>/dev/null | grep -c '^10\.' ; }

# --- ADD, traffic, CHECK --------------------------------------------------------
conf1=$(conf 10.60.0.0/24 10.60.0.1 '{}')
cni_call vlan ADD /run/netns/pod1 net1 ctr1 "$conf1"
check_eq add-status 0 "$cni_status"
[ "$cni_status" = 0 ] || fail add-output "$(cni_report)"
add1=$cni_out
link1=$(pod_link pod1 net1)
check_eq add-link-kind vlan "$(jqc -r '.linkinfo.info_kind' <<<"$link1")"
check_eq add-link-id 100 "$(jqc -r '.linkinfo.info_data.id' <<<"$link1")"
check_eq add-link-protocol 802.1Q "$(jqc -r '.linkinfo.info_data.protocol' <<<"$link1")"
check_eq add-link-up true "$(jqc '.flags | index("UP") != null' <<<"$link1")"
check_eq add-result-mac "$(jqc -r .address <<<"$link1")" "$(jqc -r '.interfaces[0].mac' <<<"$add1")"
check_eq add-result-sandbox /run/netns/pod1 "$(jqc -r '.interfaces[0].sandbox' <<<"$add1")"
address1=$(jqc -r '.ips[0].address' <<<"$add1")
check_contains add-result-ip 10.60.0. "$address1"
check_eq add-address-on-link "$address1" \
    "$(ip -n pod1 -j addr show dev net1 | jqc -r '.[0].addr_info[] | select(.family == "inet") | "\(.local)/\(.prefixlen)"')"
check_eq add-default-route 10.60.0.1 "$(ip -n pod1 -j route show default | jqc -r '.[0].gateway')"
# No temporary link left anywhere.
check_eq add-no-temp-links "" "$( (ip -br link; ip -n pod1 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"
# No ARP/ND notify on a VLAN link, as in the reference (macvlan and
# ipvlan set them).
check_eq add-no-arp-notify 0 "$(ip netns exec pod1 cat /proc/sys/net/ipv4/conf/net1/arp_notify)"
if pod_ping pod1 10.60.0.1; then
    pass traffic-tagged "pod1 reaches 10.60.0.1 over VLAN 100"
else
    fail traffic-tagged "pod1 cannot reach 10.60.0.1: $(ip -n pod1 route 2>&1)"
fi

cni_call vlan CHECK /run/netns/pod1 net1 ctr1 "$(with_prev "$conf1" "$add1")"
check_eq check-ok 0 "$cni_status"
cni_call vlan CHECK /run/netns/pod1 net1 ctr1 \
    "$(with_prev "$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 101}')" "$add1")"
check_contains check-wrong-vlan-id "has VLAN id 100, the configuration says 101" "$cni_out"
cni_call vlan CHECK /run/netns/pod1 net1 ctr1 \
    "$(with_prev "$conf1" "$(jqc '.interfaces[0].mac = "02:00:00:00:00:99"' <<<"$add1")")"
check_eq check-wrong-mac-code 999 "$(jqc -r .code <<<"$cni_out")"
check_contains check-wrong-mac "doesn't match the MAC found" "$cni_out"

# --- VLAN isolation: another VLAN id does not reach VLAN 100 ----------------
conf3=$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 300}')
cni_call vlan ADD /run/netns/pod3 net1 ctr3 "$conf3"
check_eq isolation-add 0 "$cni_status"
if pod_ping pod3 10.60.0.1; then
    fail isolation-vlan-300 "pod3 (VLAN 300) reached 10.60.0.1 on VLAN 100"
else
    pass isolation-vlan-300 "pod3 (VLAN 300) cannot reach VLAN 100"
fi

# --- one VLAN id per parent: a second link for VLAN 100 is refused ------------
before=$(lease_count)
cni_call vlan ADD /run/netns/pod5 net1 ctr5 "$conf1"
check_eq vlan-id-in-use-code 999 "$(jqc -r .code <<<"$cni_out")"
check_contains vlan-id-in-use-msg "the parent already has a VLAN link with id 100" "$cni_out"
check_eq vlan-id-in-use-nothing-left "" "$(pod_link pod5 net1)$( (ip -br link; ip -n pod5 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"
check_eq vlan-id-in-use-no-lease "$before" "$(lease_count)"

# --- MTU ----------------------------------------------------------------------
conf2=$(conf 10.60.0.0/24 10.60.0.1 '{"mtu": 1400, "vlanId": 101}')
cni_call vlan ADD /run/netns/pod2 net1 ctr2 "$conf2"
check_eq mtu-add 0 "$cni_status"
check_eq mtu-on-link 1400 "$(pod_link pod2 net1 | jqc -r .mtu)"
add2=$cni_out
cni_call vlan CHECK /run/netns/pod2 net1 ctr2 "$(with_prev "$conf2" "$add2")"
check_eq mtu-check 0 "$cni_status"
cni_call vlan CHECK /run/netns/pod2 net1 ctr2 \
    "$(with_prev "$(conf 10.60.0.0/24 10.60.0.1 '{"mtu": 1300, "vlanId": 101}')" "$add2")"
check_contains check-wrong-mtu "has MTU 1400, the configuration says 1300" "$cni_out"
# Without "mtu" the link takes its master's (master2: 1200).
ip link add master2 mtu 1200 type veth peer name peer2 netns peer
ip link set master2 up
conf6=$(conf 10.60.0.0/24 10.60.0.1 '{"master": "master2", "vlanId": 500}')
cni_call vlan ADD /run/netns/pod6 net1 ctr6 "$conf6"
check_eq mtu-inherited-add 0 "$cni_status"
check_eq mtu-inherited 1200 "$(pod_link pod6 net1 | jqc -r .mtu)"
cni_call vlan DEL /run/netns/pod6 net1 ctr6 "$conf6"
check_eq mtu-inherited-del 0 "$cni_status"
before=$(lease_count)
cni_call vlan ADD /run/netns/pod5 net1 ctr5 "$(conf 10.60.0.0/24 10.60.0.1 '{"mtu": 1600}')"
check_eq mtu-too-big-code 7 "$(jqc -r .code <<<"$cni_out")"
check_contains mtu-too-big-msg "invalid MTU 1600, must be [0, master MTU(1500)]" "$cni_out"
check_eq mtu-too-big-nothing-left "" "$(pod_link pod5 net1)"
check_eq mtu-too-big-no-lease "$before" "$(lease_count)"

# --- IPAM without addresses: refused, the link deleted again ---------------
conf7=$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 103}' | jqc '.ipam = {"type": "static"}')
cni_call vlan ADD /run/netns/pod5 net1 ctr5 "$conf7"
check_eq no-ips-code 999 "$(jqc -r .code <<<"$cni_out")"
check_contains no-ips-msg "IPAM plugin returned missing IP config" "$cni_out"
check_eq no-ips-nothing-left "" "$(pod_link pod5 net1)$( (ip -br link; ip -n pod5 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"

# --- IPAM ADD failing: the reference's words, the link deleted again -------
conf8=$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 104}' | jqc '.ipam.type = "no-such-ipam"')
cni_call vlan ADD /run/netns/pod5 net1 ctr5 "$conf8"
check_contains ipam-add-failed-msg 'failed to execute IPAM delegate \"no-such-ipam\"' "$cni_out"
check_eq ipam-add-failed-nothing-left "" "$(pod_link pod5 net1)$( (ip -br link; ip -n pod5 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"

# --- linkInContainer -------------------------------------------------------------
conf4=$(conf 10.64.0.0/24 10.64.0.1 '{"master": "master1", "vlanId": 400, "linkInContainer": true}')
cni_call vlan ADD /run/netns/pod4 net1 ctr4 "$conf4"
check_eq lic-add 0 "$cni_status"
check_eq lic-link-parent master1 "$(pod_link pod4 net1 | jqc -r .link)"
if pod_ping pod4 10.64.0.1; then
    pass lic-traffic "pod4 reaches 10.64.0.1 over VLAN 400 of master1"
else
    fail lic-traffic "$(ip -n pod4 addr 2>&1)"
fi
cni_call vlan CHECK /run/netns/pod4 net1 ctr4 "$(with_prev "$conf4" "$cni_out")"
check_eq lic-check 0 "$cni_status"

# --- rollback: a failure after IPAM ADD leaves nothing ------------------------
before=$(lease_count)
bad_route=$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 102}' |
    jqc '.ipam.routes = [{"dst": "10.99.0.0/16", "gw": "10.200.0.1"}]')
cni_call vlan ADD /run/netns/pod5 net1 ctr5 "$bad_route"
check_contains rollback-error "failed to add route" "$cni_out"
check_eq rollback-no-link "" "$(pod_link pod5 net1)"
check_eq rollback-no-lease "$before" "$(lease_count)"

# --- every other spec version: the result's layout, CHECK, DEL ------------------
netns_add podv
check_spec_versions vlan "$(conf 10.60.0.0/24 10.60.0.1 '{"vlanId": 600}')" podv net1 ctrv

# --- DEL ------------------------------------------------------------------------
cni_call vlan DEL /run/netns/pod1 net1 ctr1 "$conf1"
check_eq del-status 0 "$cni_status"
check_eq del-link-gone "" "$(pod_link pod1 net1)"
check_eq del-lease-gone no "$([ -e "$leases/${address1%/*}" ] && echo yes || echo no)"
check_eq del-master-stays master0 "$(ip -j link show master0 | jqc -r '.[0].ifname')"
cni_call vlan DEL /run/netns/pod1 net1 ctr1 "$conf1"
check_eq del-twice 0 "$cni_status"
ip netns delete pod2
cni_call vlan DEL /run/netns/pod2 net1 ctr2 "$conf2"
check_eq del-netns-gone 0 "$cni_status"
ip netns delete pod4
cni_call vlan DEL /run/netns/pod4 net1 ctr4 "$conf4"
check_eq del-netns-gone-link-in-container 0 "$cni_status"
cni_call vlan DEL /run/netns/pod3 net1 ctr3 "$conf3"
check_eq del-all-leases-released 0 "$(lease_count)"

finish
