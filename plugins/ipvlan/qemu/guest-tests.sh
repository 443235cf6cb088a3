#!/usr/bin/env bash
# Guest side of the ipvlan plugin's real-kernel test: run by the shared
# qemu harness (testing/qemu-guest) as /test/run.sh, as root, on a kernel
# with ipvlan (module loaded at boot). Each check prints
# `CHECK <name> PASS|FAIL <detail>`; `finish` prints ALL-DONE.
#
# Expects in the guest: /usr/local/bin/ipvlan, /usr/local/bin/host-local and
# /usr/local/bin/static (CNI_PATH is /usr/local/bin), bash, iproute2's ip, jq, busybox ping.
#
# Topology: the guest's own namespace is the "host". Each ipvlan mode gets
# its own parent, since the kernel keeps one mode per parent: master0 (l2),
# master1 (l3), master2 (l3s), each one end of a veth whose other end is in
# namespace `peer`; master3 lives inside pod8 (linkInContainer); master4
# (MTU 1200) is the parent of the inherited-MTU check. The peer
# has 10.62.0.1/24 on master0's link and 10.65.0.1/24 on master3's. Pods
# are namespaces.
set -u
. /test/guest-lib.sh

missing=""
for binary in ipvlan host-local static; do
    [ -x "/usr/local/bin/$binary" ] || missing="$missing /usr/local/bin/$binary"
done
if [ -z "$missing" ]; then
    pass setup-binaries "/usr/local/bin/ipvlan /usr/local/bin/host-local /usr/local/bin/static"
else
    fail setup-binaries "missing:$missing (give run.sh the binaries)"
    finish
    exit 0
fi

ipam_dir=/run/cni/ipvlan-ipam
network=ipvlnet
leases=$ipam_dir/$network

netns_add peer
for pod in pod1 pod2 pod3 pod4 pod5 pod6 pod7 pod8 pod9 pod10 pod11; do netns_add "$pod"; done
for n in 0 1 2; do
    ip link add "master$n" type veth peer name "peer$n" netns peer
    ip link set "master$n" up
    ip -n peer link set "peer$n" up
done
ip -n peer addr add 10.62.0.1/24 dev peer0
ip -n pod8 link add master3 type veth peer name peer3 netns peer
ip -n pod8 link set master3 up
ip -n peer link set peer3 up
ip -n peer addr add 10.65.0.1/24 dev peer3

# conf SUBNET EXTRA-JSON: an l2 network on master0 with host-local.
conf() {
    jqc -n --arg dir "$ipam_dir" --arg net "$network" --arg subnet "$1" --argjson extra "$2" \
        '{cniVersion: "1.0.0", name: $net, type: "ipvlan", master: "master0",
          ipam: {type: "host-local", dataDir: $dir, ranges: [[{subnet: $subnet}]]}} + $extra'
}
pod_link() { ip -n "$1" -d -j link show "$2" 2>/dev/null | jqc -c '.[0] // empty'; }
pod_ping() { ip netns exec "$1" ping -c 1 -W 2 "$2" >/dev/null 2>&1; }
pod_ip() { ip -n "$1" -j addr show dev net1 | jqc -r '.[0].addr_info[] | select(.family == "inet") | .local'; }
lease_count() { ls "$leases" 2>/dev/null | grep -c '^10\.'; }
master_mac() { ip -j link show "$1" | jqc -r '.[0].address'; }

# --- l2: ADD, result, traffic to the peer and between pods, CHECK -----------
conf1=$(conf 10.62.0.0/24 '{"mode": "l2"}')
cni_call ipvlan ADD /run/netns/pod1 net1 ctr1 "$conf1"
check_eq l2-add 0 "$cni_status"
[ "$cni_status" = 0 ] || fail l2-add-output "$(cni_report)"
add1=$cni_out
link1=$(pod_link pod1 net1)
check_eq l2-link-kind ipvlan "$(jqc -r '.linkinfo.info_kind' <<<"$link1")"
check_eq l2-link-mode l2 "$(jqc -r '.linkinfo.info_data.mode' <<<"$link1")"
check_eq l2-link-shares-master-mac "$(master_mac master0)" "$(jqc -r .address <<<"$link1")"
check_eq l2-result-mac "$(master_mac master0)" "$(jqc -r '.interfaces[0].mac' <<<"$add1")"
check_eq l2-result-sandbox /run/netns/pod1 "$(jqc -r '.interfaces[0].sandbox' <<<"$add1")"
check_eq l2-result-ip "$(pod_ip pod1)/24" "$(jqc -r '.ips[0].address' <<<"$add1")"
check_eq l2-no-temp-links "" "$( (ip -br link; ip -n pod1 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"
if pod_ping pod1 10.62.0.1; then
    pass l2-traffic-peer "pod1 reaches the peer 10.62.0.1"
else
    fail l2-traffic-peer "$(ip -n pod1 addr 2>&1)"
fi
cni_call ipvlan ADD /run/netns/pod2 net1 ctr2 "$conf1"
check_eq l2-add-second 0 "$cni_status"
if pod_ping pod2 "$(pod_ip pod1)"; then
    pass l2-traffic-pods "pod2 reaches pod1 on the same parent"
else
    fail l2-traffic-pods "pod1 $(pod_ip pod1) from pod2 $(pod_ip pod2)"
fi
cni_call ipvlan CHECK /run/netns/pod1 net1 ctr1 "$(with_prev "$conf1" "$add1")"
check_eq l2-check 0 "$cni_status"
cni_call ipvlan CHECK /run/netns/pod1 net1 ctr1 "$(with_prev "$(conf 10.62.0.0/24 '{"mode": "l3"}')" "$add1")"
check_contains l2-check-wrong-mode "IPVlan mode l2 does not match expected value: l3" "$cni_out"
cni_call ipvlan CHECK /run/netns/pod1 net1 ctr1 \
    "$(with_prev "$conf1" "$(jqc '.interfaces[0].mac = "02:00:00:00:00:99"' <<<"$add1")")"
check_eq l2-check-wrong-mac-code 999 "$(jqc -r .code <<<"$cni_out")"
check_contains l2-check-wrong-mac "doesn't match the MAC found" "$cni_out"

# --- l3 and l3s: each on its own parent, pods reach each other --------------
for mode in l3 l3s; do
    case $mode in
        l3) master=master1 subnet=10.63.0.0/24 pods="pod3 pod4" ;;
        l3s) master=master2 subnet=10.64.0.0/24 pods="pod5 pod6" ;;
    esac
    mconf=$(conf "$subnet" "{\"mode\": \"$mode\", \"master\": \"$master\"}")
    status=""
    for pod in $pods; do
        cni_call ipvlan ADD "/run/netns/$pod" net1 "ctr-$pod" "$mconf"
        status="$status$cni_status"
        [ "$cni_status" = 0 ] && eval "add_$pod=\$cni_out"
    done
    check_eq "$mode-add" 00 "$status"
    set -- $pods
    check_eq "$mode-link-mode" "$mode" "$(pod_link "$1" net1 | jqc -r '.linkinfo.info_data.mode')"
    if pod_ping "$1" "$(pod_ip "$2")"; then
        pass "$mode-traffic-pods" "$1 reaches $2"
    else
        fail "$mode-traffic-pods" "$1 cannot reach $2 ($(pod_ip "$2"))"
    fi
    prev_var=add_$1
    cni_call ipvlan CHECK "/run/netns/$1" net1 "ctr-$1" "$(with_prev "$mconf" "${!prev_var}")"
    check_eq "$mode-check" 0 "$cni_status"
done
# The names the loop above reports, for the harness's list of checks:
# l3-add l3-link-mode l3-traffic-pods l3-check
# l3s-add l3s-link-mode l3s-traffic-pods l3s-check

# --- chained: master and addresses from the prevResult ----------------------
chained=$(jqc -n --arg net "$network" \
    '{cniVersion: "1.0.0", name: $net, type: "ipvlan",
      prevResult: {cniVersion: "1.0.0", interfaces: [{name: "master0"}],
                   ips: [{address: "10.62.0.50/24", gateway: "10.62.0.1", interface: 0}],
                   routes: [{dst: "0.0.0.0/0"}]}}')
cni_call ipvlan ADD /run/netns/pod7 net1 ctr7 "$chained"
check_eq chained-add 0 "$cni_status"
check_eq chained-address 10.62.0.50 "$(pod_ip pod7)"
check_eq chained-result-interfaces '["net1"]' "$(jqc '[.interfaces[].name]' <<<"$cni_out")"
check_eq chained-default-route 10.62.0.1 "$(ip -n pod7 -j route show default | jqc -r '.[0].gateway')"
if pod_ping pod7 10.62.0.1; then
    pass chained-traffic "pod7 reaches the peer"
else
    fail chained-traffic "$(ip -n pod7 addr 2>&1)"
fi
cni_call ipvlan CHECK /run/netns/pod7 net1 ctr7 "$(with_prev "$(jqc 'del(.prevResult)' <<<"$chained")" "$cni_out")"
check_eq chained-check 0 "$cni_status"
cni_call ipvlan DEL /run/netns/pod7 net1 ctr7 "$chained"
check_eq chained-del 0 "$cni_status"
check_eq chained-del-link-gone "" "$(pod_link pod7 net1)"

# --- no master: the default route's link ---------------------------------
ip addr add 10.62.0.2/24 dev master0
ip route add default via 10.62.0.1 dev master0
cni_call ipvlan ADD /run/netns/pod9 net1 ctr9 "$(conf 10.62.0.0/24 '{}' | jqc 'del(.master)')"
check_eq default-master-add 0 "$cni_status"
check_eq default-master-parent "$(ip -j link show master0 | jqc '.[0].ifindex')" \
    "$(pod_link pod9 net1 | jqc '.link_index')"
ip route del default
ip addr del 10.62.0.2/24 dev master0

# --- linkInContainer ----------------------------------------------------------
conf8=$(conf 10.65.0.0/24 '{"master": "master3", "linkInContainer": true}')
cni_call ipvlan ADD /run/netns/pod8 net1 ctr8 "$conf8"
check_eq lic-add 0 "$cni_status"
check_eq lic-link-parent master3 "$(pod_link pod8 net1 | jqc -r .link)"
if pod_ping pod8 10.65.0.1; then
    pass lic-traffic "pod8 reaches 10.65.0.1 through master3"
else
    fail lic-traffic "$(ip -n pod8 addr 2>&1)"
fi
cni_call ipvlan CHECK /run/netns/pod8 net1 ctr8 "$(with_prev "$conf8" "$cni_out")"
check_eq lic-check 0 "$cni_status"

# --- MTU ------------------------------------------------------------------------
cni_call ipvlan ADD /run/netns/pod10 net1 ctr10 "$(conf 10.62.0.0/24 '{"mtu": 1400}')"
check_eq mtu-add 0 "$cni_status"
check_eq mtu-on-link 1400 "$(pod_link pod10 net1 | jqc -r .mtu)"
cni_call ipvlan DEL /run/netns/pod10 net1 ctr10 "$(conf 10.62.0.0/24 '{}')"
before=$(lease_count)
cni_call ipvlan ADD /run/netns/pod10 net1 ctr10 "$(conf 10.62.0.0/24 '{"mtu": 1600}')"
check_eq mtu-too-big-code 7 "$(jqc -r .code <<<"$cni_out")"
check_eq mtu-too-big-nothing-left "" "$(pod_link pod10 net1)"
check_eq mtu-too-big-no-lease "$before" "$(lease_count)"
# Without "mtu" the link takes its parent's: master4 (MTU 1200), its own
# parent since the kernel keeps one ipvlan mode per parent.
ip link add master4 mtu 1200 type veth peer name peer4 netns peer
ip link set master4 up
ip -n peer link set peer4 up
conf11=$(conf 10.62.0.0/24 '{"master": "master4"}')
cni_call ipvlan ADD /run/netns/pod11 net1 ctr11 "$conf11"
check_eq mtu-inherited-add 0 "$cni_status"
check_eq mtu-inherited 1200 "$(pod_link pod11 net1 | jqc -r .mtu)"
cni_call ipvlan DEL /run/netns/pod11 net1 ctr11 "$conf11"
check_eq mtu-inherited-del 0 "$cni_status"
check_eq mtu-inherited-link-gone "" "$(pod_link pod11 net1)"

# --- rollback: a failure after IPAM ADD leaves nothing ------------------------
before=$(lease_count)
bad_route=$(conf 10.62.0.0/24 '{}' | jqc '.ipam.routes = [{"dst": "10.99.0.0/16", "gw": "10.200.0.1"}]')
cni_call ipvlan ADD /run/netns/pod10 net1 ctr10 "$bad_route"
check_contains rollback-error "failed to add route" "$cni_out"
check_eq rollback-no-link "" "$(pod_link pod10 net1)$( (ip -br link; ip -n pod10 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"
check_eq rollback-no-lease "$before" "$(lease_count)"

# --- IPAM without addresses: refused, the link deleted again ---------------
cni_call ipvlan ADD /run/netns/pod10 net1 ctr10 "$(conf 10.62.0.0/24 '{}' | jqc '.ipam = {"type": "static"}')"
check_eq no-ips-code 999 "$(jqc -r .code <<<"$cni_out")"
check_contains no-ips-msg "IPAM plugin returned missing IP config" "$cni_out"
check_eq no-ips-nothing-left "" "$(pod_link pod10 net1)$( (ip -br link; ip -n pod10 -br link) | awk '$1 ~ /^veth[0-9a-f]{8}/')"

# --- every other spec version: the result's layout, CHECK, DEL ------------------
netns_add podv
check_spec_versions ipvlan "$(conf 10.62.0.0/24 '{}')" podv net1 ctrv

# --- DEL ------------------------------------------------------------------------
address1=$(pod_ip pod1)
cni_call ipvlan DEL /run/netns/pod1 net1 ctr1 "$conf1"
check_eq del-status 0 "$cni_status"
check_eq del-link-gone "" "$(pod_link pod1 net1)"
check_eq del-lease-gone no "$([ -e "$leases/$address1" ] && echo yes || echo no)"
check_eq del-master-stays master0 "$(ip -j link show master0 | jqc -r '.[0].ifname')"
cni_call ipvlan DEL /run/netns/pod1 net1 ctr1 "$conf1"
check_eq del-twice 0 "$cni_status"
ip netns delete pod2
cni_call ipvlan DEL /run/netns/pod2 net1 ctr2 "$conf1"
check_eq del-netns-gone 0 "$cni_status"
ip netns delete pod8
cni_call ipvlan DEL /run/netns/pod8 net1 ctr8 "$conf8"
check_eq del-netns-gone-link-in-container 0 "$cni_status"
# No master and no default route any more: DEL still works.
cni_call ipvlan DEL /run/netns/pod9 net1 ctr9 "$(conf 10.62.0.0/24 '{}' | jqc 'del(.master)')"
check_eq del-without-master 0 "$cni_status"
check_eq del-without-master-link-gone "" "$(pod_link pod9 net1)"

finish
