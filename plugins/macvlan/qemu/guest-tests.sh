#!/usr/bin/env bash
# Guest side of the macvlan plugin's real-kernel test: run by the shared qemu
# harness (testing/qemu-guest) as /test/run.sh, as root, on a stock Debian
# kernel (macvlan, ipvlan, 8021q, dummy, bridge and netdevsim loaded at
# boot). Each check prints `CHECK <name> PASS|FAIL <detail>`; `finish`
# prints ALL-DONE.
#
# What it shows, mode by mode, with traffic where a mode is about traffic:
#   bridge    two pods on a dummy parent reach each other with no wire at all;
#   private   two pods do not, not even through a switch that reflects
#             frames back (hairpin), which is what private is for;
#   vepa      two pods reach each other only through that reflecting switch
#             (its port counts their packets), and not once hairpin is off;
#   passthru  the pod takes a netdevsim port whole (its MAC, promiscuous
#             parent, no second macvlan on it; all put back on DEL), and
#             reaches a peer across a veth parent;
#   source    the pod receives nothing until the peer's MAC is on its
#             source list, then it does; CHECK holds with the list filled.
# Then the chain every RoCE rail runs behind its link, tuning and sbr, on a
# vlan and on an ipvlan interface: the MTU, MAC, promisc and ARP sysctls
# set, the rail's own routing table used for traffic from its address,
# CHECK of each, and DEL putting everything back.
#
# Expects in the guest: /usr/local/bin/{macvlan,vlan,ipvlan,tuning,sbr,
# host-local} (CNI_PATH is /usr/local/bin), bash, iproute2's ip, jq,
# busybox ping.
set -u
. /test/guest-lib.sh

missing=""
for binary in macvlan vlan ipvlan tuning sbr host-local; do
    [ -x "/usr/local/bin/$binary" ] || missing="$missing /usr/local/bin/$binary"
done
if [ -z "$missing" ]; then
    pass setup-binaries "macvlan vlan ipvlan tuning sbr host-local in /usr/local/bin"
else
    fail setup-binaries "missing:$missing (give run.sh the binaries)"
    finish
    exit 0
fi

ipam_dir=/run/cni/macvlan-ipam

# conf TYPE NETWORK SUBNET EXTRA-JSON: a network configuration with
# host-local IPAM on SUBNET, EXTRA merged in (deeply: EXTRA's
# `ipam.routes` joins the IPAM section).
conf() {
    jqc -n --arg type "$1" --arg net "$2" --arg subnet "$3" --arg dir "$ipam_dir" \
        --argjson extra "$4" \
        '{cniVersion: "1.0.0", name: $net, type: $type,
          ipam: {type: "host-local", dataDir: $dir, ranges: [[{subnet: $subnet}]]}}
         * $extra'
}
pod_link() { ip -n "$1" -d -j link show "$2" 2>/dev/null | jqc '.[0] // empty'; }
pod_ping() { ip netns exec "$1" ping -c 2 -W 2 "$2" >/dev/null 2>&1; }
pod_addr() { jqc -r '.ips[0].address | split("/")[0]' <<<"$1"; }
leases() { ls "$ipam_dir/$1" 2>/dev/null | grep -c '^10\.'; }
# add NAME PLUGIN POD CONFIG: ADD into POD as net1 (check NAME), the
# result in result_NAME with `-` as `_` (add bridge-add-1 ... sets
# result_bridge_add_1).
add() {
    cni_call "$2" ADD "/run/netns/$3" net1 "ctr-$3" "$4"
    printf -v "result_${1//-/_}" '%s' "$cni_out"
    check_eq "$1" 0 "$cni_status"
    [ "$cni_status" = 0 ] || echo "  $(cni_report)"
}
del() { # PLUGIN POD CONFIG
    cni_call "$1" DEL "/run/netns/$2" net1 "ctr-$2" "$3"
}

for pod in b1 b2 p1 p2 v1 v2 pt1 pt2 s1 tv ti; do netns_add "$pod"; done

# --- bridge: siblings on a dummy parent talk without any wire ------------------
ip link add dummy1 type dummy
ip link set dummy1 up
bridge_conf=$(conf macvlan bridgenet 10.70.1.0/24 '{"master": "dummy1", "mode": "bridge"}')
add bridge-add-1 macvlan b1 "$bridge_conf"
add bridge-add-2 macvlan b2 "$bridge_conf"
check_eq bridge-link-mode bridge "$(pod_link b1 net1 | jqc -r '.linkinfo.info_data.mode')"
if pod_ping b1 "$(pod_addr "$result_bridge_add_2")"; then
    pass bridge-pods-reach "b1 reaches b2 on dummy1 (no wire: the macvlan bridge forwards)"
else
    fail bridge-pods-reach "$(ip -n b1 addr 2>&1)"
fi

# --- a switch that reflects frames back to the port they came from ----------
# Two parents, vp0 (vepa pods) and pp0 (private pods), are veths whose peers
# are ports of bridge br0 in namespace `switch`, with hairpin on.
netns_add switch
ip -n switch link add br0 type bridge
ip -n switch link set br0 up
for parent in vp0 pp0; do
    ip link add "$parent" type veth peer name "$parent-sw" netns switch
    ip link set "$parent" up
    ip -n switch link set "$parent-sw" master br0
    ip -n switch link set "$parent-sw" type bridge_slave hairpin on
    ip -n switch link set "$parent-sw" up
done

private_conf=$(conf macvlan privatenet 10.70.2.0/24 '{"master": "pp0", "mode": "private"}')
add private-add-1 macvlan p1 "$private_conf"
add private-add-2 macvlan p2 "$private_conf"
check_eq private-link-mode private "$(pod_link p1 net1 | jqc -r '.linkinfo.info_data.mode')"
if pod_ping p1 "$(pod_addr "$result_private_add_2")"; then
    fail private-pods-isolated "p1 reached p2 although both are private (hairpin switch)"
else
    pass private-pods-isolated "p1 cannot reach p2, even through a hairpin switch"
fi

vepa_conf=$(conf macvlan vepanet 10.70.3.0/24 '{"master": "vp0", "mode": "vepa"}')
add vepa-add-1 macvlan v1 "$vepa_conf"
add vepa-add-2 macvlan v2 "$vepa_conf"
check_eq vepa-link-mode vepa "$(pod_link v1 net1 | jqc -r '.linkinfo.info_data.mode')"
switch_rx() { ip -n switch -s -j link show vp0-sw | jqc '.[0].stats64.rx.packets'; }
before=$(switch_rx)
if pod_ping v1 "$(pod_addr "$result_vepa_add_2")"; then
    pass vepa-pods-reach-via-switch "v1 reaches v2 through the hairpin switch"
else
    fail vepa-pods-reach-via-switch "$(ip -n v1 addr 2>&1)"
fi
after=$(switch_rx)
if [ "$after" -ge $((before + 4)) ]; then
    pass vepa-traffic-crossed-switch "switch port received $((after - before)) packets"
else
    fail vepa-traffic-crossed-switch "switch port received $((after - before)) packets (want at least 4: 2 requests, 2 replies)"
fi
ip -n switch link set vp0-sw type bridge_slave hairpin off
ip -n v1 neigh flush dev net1
if pod_ping v1 "$(pod_addr "$result_vepa_add_2")"; then
    fail vepa-isolated-without-hairpin "v1 reached v2 with hairpin off: frames did not go out the parent"
else
    pass vepa-isolated-without-hairpin "v1 cannot reach v2 once the switch stops reflecting"
fi
cni_call macvlan CHECK /run/netns/v1 net1 ctr-v1 "$(with_prev "$vepa_conf" "$result_vepa_add_1")"
check_eq vepa-check 0 "$cni_status"

# --- passthru: the pod takes a whole NIC port ---------------------------------
echo "30 1" >/sys/bus/netdevsim/new_device
nsim_port=""
for _ in $(seq 50); do
    nsim_port=$(ls /sys/bus/netdevsim/devices/netdevsim30/net 2>/dev/null | head -n 1)
    [ -n "$nsim_port" ] && break
    sleep 0.1
done
if [ -n "$nsim_port" ]; then
    pass passthru-setup-port "netdevsim port $nsim_port"
else
    fail passthru-setup-port "no netdevsim port appeared"
fi
ip link set "$nsim_port" up
port_mac=$(ip -j link show "$nsim_port" | jqc -r '.[0].address')
port_promiscuity() { ip -d -j link show "$nsim_port" | jqc '.[0].promiscuity'; }
passthru_conf=$(conf macvlan passthrunet 10.70.4.0/24 "$(jqc -n --arg m "$nsim_port" '{master: $m, mode: "passthru"}')")
add passthru-add macvlan pt1 "$passthru_conf"
pt_link=$(pod_link pt1 net1)
check_eq passthru-link-mode passthru "$(jqc -r '.linkinfo.info_data.mode' <<<"$pt_link")"
check_eq passthru-takes-port-mac "$port_mac" "$(jqc -r .address <<<"$pt_link")"
check_eq passthru-result-mac "$port_mac" "$(jqc -r '.interfaces[0].mac' <<<"$result_passthru_add")"
check_eq passthru-port-promiscuous 1 "$(port_promiscuity)"
before=$(leases passthrunet)
cni_call macvlan ADD /run/netns/pt2 net1 ctr-pt2 \
    "$(conf macvlan passthrunet 10.70.4.0/24 "$(jqc -n --arg m "$nsim_port" '{master: $m, mode: "bridge"}')")"
if [ "$cni_status" != 0 ] && [ -z "$(pod_link pt2 net1)" ] && [ "$(leases passthrunet)" = "$before" ]; then
    pass passthru-port-taken "a second macvlan on the port is refused, nothing left: $cni_out"
else
    fail passthru-port-taken "$(cni_report); pt2 link: $(pod_link pt2 net1); leases $(leases passthrunet), before $before"
fi
cni_call macvlan CHECK /run/netns/pt1 net1 ctr-pt1 "$(with_prev "$passthru_conf" "$result_passthru_add")"
check_eq passthru-check 0 "$cni_status"
del macvlan pt1 "$passthru_conf"
check_eq passthru-del 0 "$cni_status"
check_eq passthru-del-port-stays "$nsim_port" "$(ip -j link show "$nsim_port" | jqc -r '.[0].ifname')"
check_eq passthru-del-promiscuity-restored 0 "$(port_promiscuity)"
# Traffic: a passthru pod on a veth parent reaches the peer beyond it.
netns_add wire
ip link add wp0 type veth peer name wp0-peer netns wire
ip link set wp0 up
ip -n wire link set wp0-peer up
ip -n wire addr add 10.70.5.1/24 dev wp0-peer
passthru_wire_conf=$(conf macvlan passthruwire 10.70.5.0/24 '{"master": "wp0", "mode": "passthru"}')
add passthru-wire-add macvlan pt2 "$passthru_wire_conf"
if pod_ping pt2 10.70.5.1; then
    pass passthru-traffic "pt2 reaches 10.70.5.1 beyond its parent wp0"
else
    fail passthru-traffic "$(ip -n pt2 addr 2>&1)"
fi

# --- source: only frames from listed source MACs come in ------------------------
ip link add sp0 type veth peer name sp0-peer netns wire
ip link set sp0 up
ip -n wire link set sp0-peer up
ip -n wire addr add 10.70.6.1/24 dev sp0-peer
peer_mac=$(ip -n wire -j link show sp0-peer | jqc -r '.[0].address')
source_conf=$(conf macvlan sourcenet 10.70.6.0/24 '{"master": "sp0", "mode": "source"}')
add source-add macvlan s1 "$source_conf"
check_eq source-link-mode source "$(pod_link s1 net1 | jqc -r '.linkinfo.info_data.mode')"
if pod_ping s1 10.70.6.1; then
    fail source-unlisted-no-traffic "s1 reached 10.70.6.1 with an empty source list"
else
    pass source-unlisted-no-traffic "nothing from $peer_mac comes in while the list is empty"
fi
ip -n s1 link set net1 type macvlan macaddr add "$peer_mac"
ip -n s1 neigh flush dev net1
if pod_ping s1 10.70.6.1; then
    pass source-listed-traffic "s1 reaches 10.70.6.1 once $peer_mac is listed"
else
    fail source-listed-traffic "$(ip -n s1 -d link show net1 2>&1)"
fi
cni_call macvlan CHECK /run/netns/s1 net1 ctr-s1 "$(with_prev "$source_conf" "$result_source_add")"
check_eq source-check 0 "$cni_status"

# --- DEL of every mode leaves the parents and no lease --------------------------
del macvlan b1 "$bridge_conf"; del macvlan b2 "$bridge_conf"
del macvlan p1 "$private_conf"; del macvlan p2 "$private_conf"
del macvlan v1 "$vepa_conf"; del macvlan v2 "$vepa_conf"
del macvlan pt2 "$passthru_wire_conf"
del macvlan s1 "$source_conf"
left=""
for pod in b1 b2 p1 p2 v1 v2 pt2 s1; do
    [ -z "$(pod_link "$pod" net1)" ] || left="$left $pod"
done
check_eq modes-del-links-gone "" "$left"
check_eq modes-del-leases-gone 0 \
    "$(($(leases bridgenet) + $(leases privatenet) + $(leases vepanet) + $(leases passthrunet) + $(leases passthruwire) + $(leases sourcenet)))"
check_eq modes-del-parents-stay "dummy1 pp0 sp0 vp0 wp0" \
    "$(ip -j link show | jqc -r '[.[].ifname | select(. == "dummy1" or . == "vp0" or . == "pp0" or . == "wp0" or . == "sp0")] | sort | join(" ")')"

# --- tuning and sbr chained behind a vlan and an ipvlan rail ---------------------
# Namespace `gw` is the rail's gateway: 10.80.0.1 on VLAN 200 of tp0's peer,
# 10.81.0.1 on ip0's peer, and a far address 10.99.9.9 on its loopback that
# a pod reaches only through its rail's own table (sbr leaves the main
# table without a default route).
netns_add gw
ip -n gw link set lo up
ip -n gw addr add 10.99.9.9/32 dev lo
ip link add tp0 type veth peer name tp0-gw netns gw
ip link set tp0 up
ip -n gw link set tp0-gw up
ip -n gw link add link tp0-gw name tp0-gw.200 type vlan id 200
ip -n gw link set tp0-gw.200 up
ip -n gw addr add 10.80.0.1/24 dev tp0-gw.200
ip link add ip0 type veth peer name ip0-gw netns gw
ip link set ip0 up
ip -n gw link set ip0-gw up
ip -n gw addr add 10.81.0.1/24 dev ip0-gw
ip netns exec gw sysctl -q -w net.ipv4.ip_forward=1

# chain_check NAME POD PLUGIN CONFIG PREV: CHECK of one chained plugin.
chain_check() {
    cni_call "$3" CHECK "/run/netns/$2" net1 "ctr-$2" "$(with_prev "$4" "$5")"
    check_eq "$1" 0 "$cni_status"
    [ "$cni_status" = 0 ] || echo "  $(cni_report)"
}
# pod_sysctl POD KEY
pod_sysctl() { ip netns exec "$1" sysctl -n "$2" 2>&1; }
# rule_table POD ADDRESS: the table of the rule from ADDRESS.
rule_table() { ip -n "$1" -j rule show | jqc -r --arg a "$2" '[.[] | select(.src == $a) | .table] | join(" ")'; }

# vlan rail: MTU, MAC, promisc and the ARP sysctls from tuning, then sbr.
vlan_conf=$(conf vlan vlanrail 10.80.0.0/24 '{"master": "tp0", "vlanId": 200,
    "ipam": {"routes": [{"dst": "0.0.0.0/0", "gw": "10.80.0.1"}]}}')
tuned_mac=c2:11:22:33:44:55
vlan_tuning=$(jqc -n --arg mac "$tuned_mac" '{cniVersion: "1.0.0", name: "vlanrail", type: "tuning",
    mtu: 1400, promisc: true, mac: $mac,
    sysctl: {"net.ipv4.conf.net1.arp_ignore": "1", "net.ipv4.conf.net1.arp_announce": "2"}}')
rail_sbr() { jqc -n --arg n "$1" '{cniVersion: "1.0.0", name: $n, type: "sbr"}'; }
add tv-vlan-add vlan tv "$vlan_conf"
vlan_mac=$(pod_link tv net1 | jqc -r .address)
vlan_mtu=$(pod_link tv net1 | jqc -r .mtu)
cni_call tuning ADD /run/netns/tv net1 ctr-tv "$(with_prev "$vlan_tuning" "$result_tv_vlan_add")"
check_eq tv-tuning-add 0 "$cni_status"
tv_tuned=$cni_out
tv_link=$(pod_link tv net1)
check_eq tv-tuning-mtu 1400 "$(jqc -r .mtu <<<"$tv_link")"
check_eq tv-tuning-mac "$tuned_mac" "$(jqc -r .address <<<"$tv_link")"
check_eq tv-tuning-result-mac "$tuned_mac" "$(jqc -r '.interfaces[0].mac' <<<"$tv_tuned")"
check_eq tv-tuning-promisc 1 "$(jqc -r .promiscuity <<<"$tv_link")"
check_eq tv-tuning-sysctls "1 2" \
    "$(pod_sysctl tv net.ipv4.conf.net1.arp_ignore) $(pod_sysctl tv net.ipv4.conf.net1.arp_announce)"
tv_sbr=$(rail_sbr vlanrail)
cni_call sbr ADD /run/netns/tv net1 ctr-tv "$(with_prev "$tv_sbr" "$tv_tuned")"
check_eq tv-sbr-add 0 "$cni_status"
tv_final=$cni_out
tv_addr=$(pod_addr "$tv_final")
check_eq tv-sbr-rule 100 "$(rule_table tv "$tv_addr")"
check_contains tv-sbr-table-default "default via 10.80.0.1 dev net1" "$(ip -n tv route show table 100)"
check_eq tv-sbr-main-no-default "" "$(ip -n tv route show default)"
if ip netns exec tv ping -c 2 -W 2 -I "$tv_addr" 10.99.9.9 >/dev/null 2>&1; then
    pass tv-rail-traffic "from $tv_addr to 10.99.9.9 through table 100 over VLAN 200"
else
    fail tv-rail-traffic "$(ip -n tv rule 2>&1; ip -n tv route show table all 2>&1)"
fi
chain_check tv-vlan-check tv vlan "$vlan_conf" "$tv_final"
chain_check tv-tuning-check tv tuning "$vlan_tuning" "$tv_final"
chain_check tv-sbr-check tv sbr "$tv_sbr" "$tv_final"
# DEL in the runtime's order: last plugin first.
cni_call sbr DEL /run/netns/tv net1 ctr-tv "$(with_prev "$tv_sbr" "$tv_final")"
check_eq tv-sbr-del 0 "$cni_status"
check_eq tv-sbr-del-rule-gone "" "$(rule_table tv "$tv_addr")"
cni_call tuning DEL /run/netns/tv net1 ctr-tv "$(with_prev "$vlan_tuning" "$tv_final")"
check_eq tv-tuning-del 0 "$cni_status"
tv_link=$(pod_link tv net1)
check_eq tv-tuning-del-restored "$vlan_mtu $vlan_mac 0" \
    "$(jqc -r '"\(.mtu) \(.address) \(.promiscuity)"' <<<"$tv_link")"
cni_call vlan DEL /run/netns/tv net1 ctr-tv "$(with_prev "$vlan_conf" "$tv_final")"
check_eq tv-vlan-del 0 "$cni_status"
check_eq tv-vlan-del-link-gone "" "$(pod_link tv net1)"

# ipvlan rail: the ARP sysctls from tuning (an ipvlan has its parent's MAC),
# then sbr.
ipvlan_conf=$(conf ipvlan ipvlanrail 10.81.0.0/24 '{"master": "ip0", "mode": "l2",
    "ipam": {"routes": [{"dst": "0.0.0.0/0", "gw": "10.81.0.1"}]}}')
ipvlan_tuning=$(jqc -n '{cniVersion: "1.0.0", name: "ipvlanrail", type: "tuning",
    sysctl: {"net.ipv4.conf.net1.arp_ignore": "1", "net.ipv4.conf.net1.arp_announce": "2",
             "net.ipv4.conf.net1.rp_filter": "2"}}')
add ti-ipvlan-add ipvlan ti "$ipvlan_conf"
cni_call tuning ADD /run/netns/ti net1 ctr-ti "$(with_prev "$ipvlan_tuning" "$result_ti_ipvlan_add")"
check_eq ti-tuning-add 0 "$cni_status"
ti_tuned=$cni_out
check_eq ti-tuning-sysctls "1 2 2" \
    "$(pod_sysctl ti net.ipv4.conf.net1.arp_ignore) $(pod_sysctl ti net.ipv4.conf.net1.arp_announce) $(pod_sysctl ti net.ipv4.conf.net1.rp_filter)"
ti_sbr=$(rail_sbr ipvlanrail)
cni_call sbr ADD /run/netns/ti net1 ctr-ti "$(with_prev "$ti_sbr" "$ti_tuned")"
check_eq ti-sbr-add 0 "$cni_status"
ti_final=$cni_out
ti_addr=$(pod_addr "$ti_final")
check_eq ti-sbr-rule 100 "$(rule_table ti "$ti_addr")"
if ip netns exec ti ping -c 2 -W 2 -I "$ti_addr" 10.99.9.9 >/dev/null 2>&1; then
    pass ti-rail-traffic "from $ti_addr to 10.99.9.9 through table 100 over the ipvlan"
else
    fail ti-rail-traffic "$(ip -n ti rule 2>&1; ip -n ti route show table all 2>&1)"
fi
chain_check ti-ipvlan-check ti ipvlan "$ipvlan_conf" "$ti_final"
chain_check ti-tuning-check ti tuning "$ipvlan_tuning" "$ti_final"
chain_check ti-sbr-check ti sbr "$ti_sbr" "$ti_final"
cni_call sbr DEL /run/netns/ti net1 ctr-ti "$(with_prev "$ti_sbr" "$ti_final")"
check_eq ti-sbr-del 0 "$cni_status"
check_eq ti-sbr-del-rule-gone "" "$(rule_table ti "$ti_addr")"
cni_call tuning DEL /run/netns/ti net1 ctr-ti "$(with_prev "$ipvlan_tuning" "$ti_final")"
check_eq ti-tuning-del 0 "$cni_status"
cni_call ipvlan DEL /run/netns/ti net1 ctr-ti "$(with_prev "$ipvlan_conf" "$ti_final")"
check_eq ti-ipvlan-del 0 "$cni_status"
check_eq ti-ipvlan-del-link-gone "" "$(pod_link ti net1)"
check_eq rails-del-leases-gone 0 "$(($(leases vlanrail) + $(leases ipvlanrail)))"

finish
