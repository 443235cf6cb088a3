#!/usr/bin/env bash
# bridge's VLAN settings against a kernel with bridge VLAN filtering: runs as
# /test/run.sh in the shared test guest (testing/qemu-guest), as root, with
# the bridge and host-local binaries in /usr/local/bin. Each check prints
# `CHECK <name> PASS|FAIL <detail>`; the last line is ALL-DONE.
#
# One bridge, cnibr0, and pods (namespaces) on it:
#   pa1, pa2  vlan 100 with isGateway: access ports, gateway on cnibr0.100
#   pb1, pb2  vlan 200, same subnet as VLAN 100: reach each other, not VLAN 100
#   pt        vlanTrunk 100, 300, 400-402 (native VLAN 1): reaches VLAN 100
#             through an 802.1Q link in the pod, not VLAN 200
#   pm        vlan 100 and vlanTrunk 300: untagged traffic is VLAN 100
#   pp        vlan 500 with preserveDefaultVlan: VLAN 1 stays on the port
#   p6a, p6b  vlan 600, dual stack, isDefaultGateway: both gateways on
#             cnibr0.600, default routes through them
# Kernel state is read with `bridge -j vlan show` and `ip -j`; traffic with
# ping between the namespaces.
set -u
. /test/guest-lib.sh

br=cnibr0
ipam_dir=/run/cni/bridge-vlan-ipam

# conf NAME EXTRA-JSON [IPAM-RANGE-START IPAM-RANGE-END]: a bridge network
# on cnibr0 in 10.1.0.0/24; without a range it has no IPAM (layer 2 only).
conf() {
    local ipam=null
    if [ "$#" -ge 4 ]; then
        ipam=$(jqc -n --arg start "$3" --arg last "$4" --arg dir "$ipam_dir" \
            '{type: "host-local", dataDir: $dir,
              ranges: [[{subnet: "10.1.0.0/24", rangeStart: $start, rangeEnd: $last}]]}')
    fi
    jqc -n --arg name "$1" --arg br "$br" --argjson extra "$2" --argjson ipam "$ipam" \
        '{cniVersion: "1.1.0", name: $name, type: "bridge", bridge: $br}
         + (if $ipam == null then {} else {ipam: $ipam} end) + $extra'
}

# add POD CONFIG: ADD of eth0 in a new namespace POD; result in $cni_out.
add() {
    netns_add "$1"
    cni_call bridge ADD "/run/netns/$1" eth0 "ctr-$1" "$2"
}
del() { cni_call bridge DEL "/run/netns/$1" eth0 "ctr-$1" "$2"; }

# The VLAN entries of bridge port DEV, one word per VLAN: `100:PVID,Egress Untagged`
# becomes `100:pvid,untagged`, a tagged VLAN is just `300:`.
port_vlans() {
    bridge -j vlan show dev "$1" 2>/dev/null | jqc -r --arg dev "$1" \
        '[.[] | select(.ifname == $dev) | .vlans[] |
          "\(.vlan):" + ([(.flags // [])[] | if . == "PVID" then "pvid"
             elif . == "Egress Untagged" then "untagged" else . end] | join(","))] | join(" ")'
}
host_veth() { jqc -r '.interfaces[1].name' <<<"$1"; }
pod_ip() { jqc -r '.ips[0].address' <<<"$1" | cut -d/ -f1; }
# can_ping POD ADDRESS: three tries, one second each.
can_ping() {
    local ping=ping
    case "$2" in *:*) ping=ping6 ;; esac
    ip netns exec "$1" "$ping" -c 1 -w 3 -W 1 "$2" >/dev/null 2>&1
}
# ping_check NAME POD ADDRESS yes|no
ping_check() {
    local outcome=no
    if can_ping "$2" "$3"; then outcome=yes; fi
    check_eq "$1" "$4" "$outcome"
}

for binary in bridge host-local; do
    if [ ! -x "/usr/local/bin/$binary" ]; then
        fail setup-binaries "no /usr/local/bin/$binary in the guest"
        finish
        exit 0
    fi
done
pass setup-binaries "bridge and host-local in /usr/local/bin"

# --- vlan 100 with isGateway: the 4-interface result ---------------------------
net100=$(conf vlan100 '{"vlan": 100, "isGateway": true}' 10.1.0.10 10.1.0.19)
add pa1 "$net100"
pa1_result=$cni_out
if [ "$cni_status" = 0 ]; then pass vlan-gw-add "$cni_out"; else fail vlan-gw-add "$(cni_report)"; fi
check_eq bridge-vlan-filtering 1 \
    "$(ip -j -d link show "$br" | jqc '.[0].linkinfo.info_data.vlan_filtering')"
check_eq vlan-gw-result-interfaces "$br veth eth0 $br.100" \
    "$(jqc -r '[.interfaces[].name | if startswith("veth") then "veth" else . end] | join(" ")' <<<"$pa1_result")"
check_eq vlan-gw-result-sandbox "/run/netns/pa1" "$(jqc -r '.interfaces[2].sandbox' <<<"$pa1_result")"
check_eq vlan-gw-result-ip "10.1.0.10/24 gw 10.1.0.1 if 2" \
    "$(jqc -r '.ips[0] | "\(.address) gw \(.gateway) if \(.interface)"' <<<"$pa1_result")"
check_eq vlan-gw-result-macs "$(ip -j link show "$br.100" | jqc -r '.[0].address') $(ip -n pa1 -j link show eth0 | jqc -r '.[0].address')" \
    "$(jqc -r '"\(.interfaces[3].mac) \(.interfaces[2].mac)"' <<<"$pa1_result")"
check_eq vlan-gw-address-on-vlan-iface "10.1.0.1/24" \
    "$(ip -j addr show dev "$br.100" | jqc -r '[.[0].addr_info[] | select(.family == "inet") | "\(.local)/\(.prefixlen)"] | join(" ")')"
check_eq vlan-gw-no-address-on-bridge "" \
    "$(ip -j addr show dev "$br" | jqc -r '[.[0].addr_info[] | select(.family == "inet") | .local] | join(" ")')"
pa1_veth=$(host_veth "$pa1_result")
check_eq vlan-access-port "100:pvid,untagged" "$(port_vlans "$pa1_veth")"
# The bridge port of the gateway: the peer of cnibr0.100.
gw_port=$(ip -j link show "$br.100" | jqc -r '.[0].link // empty')
check_eq vlan-gw-port "$br 100:pvid,untagged" \
    "$(ip -j link show "$gw_port" 2>/dev/null | jqc -r '.[0].master') $(port_vlans "$gw_port")"
check_eq vlan-gw-forwarding 1 "$(cat /proc/sys/net/ipv4/ip_forward)"

cni_call bridge CHECK /run/netns/pa1 eth0 ctr-pa1 "$(with_prev "$net100" "$pa1_result")"
if [ "$cni_status" = 0 ]; then pass vlan-gw-check "ok"; else fail vlan-gw-check "$(cni_report)"; fi

# A second pod of the network, at 0.4.0: the gateway interface is reused.
gw_mac=$(ip -j link show "$br.100" | jqc -r '.[0].address')
add pa2 "$(jqc '.cniVersion = "0.4.0"' <<<"$net100")"
pa2_result=$cni_out
if [ "$cni_status" = 0 ]; then pass vlan-gw-add-040 "$cni_out"; else fail vlan-gw-add-040 "$(cni_report)"; fi
check_eq vlan-gw-result-040 "4 $br.100 $gw_mac 2" \
    "$(jqc -r '"\(.interfaces | length) \(.interfaces[3].name) \(.interfaces[3].mac) \(.ips[0].interface)"' <<<"$pa2_result")"
check_eq vlan-gw-reused 1 "$(ip -j link show | jqc "[.[] | select(.ifname == \"$br.100\")] | length")"
pa1_ip=$(pod_ip "$pa1_result")
pa2_ip=$(pod_ip "$pa2_result")
ping_check traffic-same-vlan pa1 "$pa2_ip" yes
ping_check traffic-to-vlan-gateway pa2 10.1.0.1 yes

# --- vlan 200 in the same subnet: a separate layer-2 segment ---------------------
net200=$(conf vlan200 '{"vlan": 200}' 10.1.0.20 10.1.0.29)
add pb1 "$net200"
pb1_result=$cni_out
if [ "$cni_status" = 0 ]; then pass vlan200-add "$cni_out"; else fail vlan200-add "$(cni_report)"; fi
check_eq vlan200-result-interfaces 3 "$(jqc '.interfaces | length' <<<"$pb1_result")"
check_eq vlan200-access-port "200:pvid,untagged" "$(port_vlans "$(host_veth "$pb1_result")")"
add pb2 "$net200"
pb2_result=$cni_out
pb1_ip=$(pod_ip "$pb1_result")
ping_check traffic-vlan200-pods pb1 "$(pod_ip "$pb2_result")" yes
ping_check traffic-across-vlans-blocked pb1 "$pa1_ip" no
ping_check traffic-other-vlan-gateway-blocked pb1 10.1.0.1 no

# --- trunk: tagged 100, 300, 400-402, native VLAN 1 ---------------------------------
nettrunk=$(conf trunk '{"vlanTrunk": [{"id": 100}, {"id": 300}, {"minID": 400, "maxID": 402}]}')
add pt "$nettrunk"
pt_result=$cni_out
if [ "$cni_status" = 0 ]; then pass trunk-add "$cni_out"; else fail trunk-add "$(cni_report)"; fi
check_eq trunk-port "1:pvid,untagged 100: 300: 400: 401: 402:" "$(port_vlans "$(host_veth "$pt_result")")"
# Tagged frames of VLAN 100 from the pod reach the access port of pa1.
ip -n pt link add link eth0 name eth0.100 type vlan id 100
ip -n pt addr add 10.1.0.50/24 dev eth0.100
ip -n pt link set eth0.100 up
ping_check traffic-trunk-tagged-100 pt "$pa1_ip" yes
ip -n pt link del eth0.100
# VLAN 200 is not in the trunk.
ip -n pt link add link eth0 name eth0.200 type vlan id 200
ip -n pt addr add 10.1.0.60/24 dev eth0.200
ip -n pt link set eth0.200 up
ping_check traffic-trunk-tagged-200-blocked pt "$pb1_ip" no
ip -n pt link del eth0.200
cni_call bridge CHECK /run/netns/pt eth0 ctr-pt "$(with_prev "$nettrunk" "$pt_result")"
if [ "$cni_status" = 0 ]; then pass trunk-check "ok"; else fail trunk-check "$(cni_report)"; fi

# --- vlan and vlanTrunk together -----------------------------------------------------
netmix=$(conf mixed '{"vlan": 100, "vlanTrunk": [{"id": 300}]}')
add pm "$netmix"
pm_result=$cni_out
if [ "$cni_status" = 0 ]; then pass mixed-add "$cni_out"; else fail mixed-add "$(cni_report)"; fi
check_eq mixed-port "100:pvid,untagged 300:" "$(port_vlans "$(host_veth "$pm_result")")"
ip -n pm addr add 10.1.0.80/24 dev eth0
ping_check traffic-mixed-untagged-is-100 pm "$pa1_ip" yes

# --- preserveDefaultVlan ------------------------------------------------------------
netpreserve=$(conf preserve '{"vlan": 500, "preserveDefaultVlan": true}')
add pp "$netpreserve"
pp_result=$cni_out
if [ "$cni_status" = 0 ]; then pass preserve-add "$cni_out"; else fail preserve-add "$(cni_report)"; fi
# VLAN 1 stays a member (egress untagged); the PVID moved to 500.
check_eq preserve-port "1:untagged 500:pvid,untagged" "$(port_vlans "$(host_veth "$pp_result")")"
# The same without preserveDefaultVlan: VLAN 1 is gone (checked on pa1 above
# too, the reference's default).
add pq "$(conf nopreserve '{"vlan": 500}')"
check_eq no-preserve-port "500:pvid,untagged" "$(port_vlans "$(host_veth "$cni_out")")"

# --- dual stack, isDefaultGateway ---------------------------------------------------
net600=$(jqc -n --arg br "$br" --arg dir "$ipam_dir" \
    '{cniVersion: "1.1.0", name: "dual600", type: "bridge", bridge: $br, vlan: 600,
      isDefaultGateway: true,
      ipam: {type: "host-local", dataDir: $dir,
             ranges: [[{subnet: "10.6.0.0/24"}], [{subnet: "fd00:6::/64"}]]}}')
add p6a "$net600"
p6a_result=$cni_out
if [ "$cni_status" = 0 ]; then pass dual-add "$cni_out"; else fail dual-add "$(cni_report)"; fi
check_eq dual-result-interfaces "4 $br.600" \
    "$(jqc -r '"\(.interfaces | length) \(.interfaces[3].name)"' <<<"$p6a_result")"
check_eq dual-gateway-addresses "10.6.0.1/24 fd00:6::1/64" \
    "$(ip -j addr show dev "$br.600" | jqc -r '[.[0].addr_info[] | select(.scope == "global") | "\(.local)/\(.prefixlen)"] | join(" ")')"
check_eq dual-default-routes "10.6.0.1 fd00:6::1" \
    "$(ip -n p6a -4 -j route show default | jqc -r '.[0].gateway') $(ip -n p6a -6 -j route show default | jqc -r '.[0].gateway')"
check_eq dual-port "600:pvid,untagged" "$(port_vlans "$(host_veth "$p6a_result")")"
add p6b "$net600"
p6b_result=$cni_out
ping_check traffic-dual-gateway-v4 p6a 10.6.0.1 yes
ping_check traffic-dual-gateway-v6 p6a fd00:6::1 yes
ping_check traffic-dual-pods-v6 p6a "$(jqc -r '.ips[1].address' <<<"$p6b_result" | cut -d/ -f1)" yes
cni_call bridge CHECK /run/netns/p6b eth0 ctr-p6b "$(with_prev "$net600" "$p6b_result")"
if [ "$cni_status" = 0 ]; then pass dual-check "ok"; else fail dual-check "$(cni_report)"; fi

# --- DEL ----------------------------------------------------------------------------
del pa1 "$net100"
if [ "$cni_status" = 0 ]; then pass vlan-gw-del "ok"; else fail vlan-gw-del "$(cni_report)"; fi
check_eq vlan-gw-del-host-veth-gone "" "$(ip -j link show "$pa1_veth" 2>/dev/null | jqc -r '.[0].ifname // empty')"
check_eq vlan-gw-del-lease-released "" "$(ls "$ipam_dir/vlan100" 2>/dev/null | grep -x 10.1.0.10)"
check_eq vlan-gw-del-gateway-stays "10.1.0.1" \
    "$(ip -j addr show dev "$br.100" | jqc -r '[.[0].addr_info[] | select(.family == "inet") | .local] | join(" ")')"
ping_check traffic-gateway-after-del pa2 10.1.0.1 yes
del pa1 "$net100"
if [ "$cni_status" = 0 ]; then pass vlan-gw-del-again "ok"; else fail vlan-gw-del-again "$(cni_report)"; fi

# --- a gateway interface that outlived its bridge --------------------------------
# cnibr9 is deleted by hand while cnibr9.700 and its port end live on,
# detached; the next ADD makes the bridge again and must put the port end
# back on it (in VLAN 700), or the new pod has no gateway.
net700=$(jqc -n --arg dir "$ipam_dir" \
    '{cniVersion: "1.1.0", name: "vlan700", type: "bridge", bridge: "cnibr9",
      vlan: 700, isGateway: true,
      ipam: {type: "host-local", dataDir: $dir, ranges: [[{subnet: "10.7.0.0/24"}]]}}')
add pr1 "$net700"
gw_port=$(ip -j link show "cnibr9.700" | jqc -r '.[0].link // empty')
ip link del cnibr9
check_eq rebuilt-bridge-gateway-detached "" \
    "$(ip -j link show "$gw_port" | jqc -r '.[0].master // empty')"
add pr2 "$net700"
if [ "$cni_status" = 0 ]; then pass rebuilt-bridge-add "ok"; else fail rebuilt-bridge-add "$(cni_report)"; fi
check_eq rebuilt-bridge-gateway-port "cnibr9 700:pvid,untagged" \
    "$(ip -j link show "$gw_port" | jqc -r '.[0].master // empty') $(port_vlans "$gw_port")"
ping_check rebuilt-bridge-traffic-gateway pr2 10.7.0.1 yes

finish
