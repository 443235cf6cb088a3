#!/usr/bin/env bash
# Guest side of the vrf plugin's real-kernel test: run by the shared qemu
# harness (testing/qemu-guest) as /test/run.sh, as root, on a kernel with
# VRF devices (module vrf, loaded at boot). Each check prints
# `CHECK <name> PASS|FAIL <detail>`; `finish` prints ALL-DONE.
#
# The reference's vrf_test scenarios run twice, with the same setup: once
# with our plugin (/opt/cni/ours/vrf, checks named ours-*), once with the
# Debian reference (/opt/cni/reference/vrf, 1.1.1, checks named ref-*).
# Where the two differ on purpose, each side has its own check.
#
# Pods are namespaces with dummy links standing for the interfaces an
# earlier plugin of the chain made.
set -u
. /test/guest-lib.sh

for binary in /opt/cni/ours/vrf /opt/cni/reference/vrf; do
    if [ ! -x "$binary" ]; then
        fail setup-binaries "missing $binary"
        finish
        exit 0
    fi
done
pass setup-binaries "/opt/cni/ours/vrf /opt/cni/reference/vrf"

# conf NETNS IFNAME VRF [EXTRA-JSON]: a 1.0.0 configuration with a
# prevResult naming IFNAME in NETNS.
conf() {
    local extra=${4:-'{}'}
    jqc -n --arg ns "$1" --arg ifname "$2" --arg vrf "$3" --argjson extra "$extra" \
        '{cniVersion: "1.0.0", name: "vrfnet", type: "vrf", vrfname: $vrf,
          prevResult: {cniVersion: "1.0.0",
                       interfaces: [{name: $ifname, sandbox: $ns}],
                       ips: [{address: "10.0.0.2/24", interface: 0}]}} + $extra'
}
# vrf_call IMPL VERB POD IFNAME VRF [EXTRA]
vrf_call() {
    local extra=${6:-'{}'}
    cni_call "/opt/cni/$1/vrf" "$2" "/run/netns/$3" "$4" "ctr-$3-$4" "$(conf "/run/netns/$3" "$4" "$5" "$extra")"
}
master_of() { ip -n "$1" -j link show "$2" | jqc -r '.[0].master // "none"'; }
table_of() {
    local link
    link=$(ip -n "$1" -d -j link show "$2" 2>/dev/null) || { echo none; return; }
    jqc -r '.[0].linkinfo.info_data.table // "none"' <<<"$link"
}
v4_of() { ip -n "$1" -4 -j addr show dev "$2" | jqc -r '[.[].addr_info[] | select(.local) | .local] | join(",")'; }
v6_of() { ip -n "$1" -6 -j addr show dev "$2" scope global | jqc -r '[.[].addr_info[] | select(.local) | .local] | join(",")'; }
route_in() { ip -n "$1" -j route show table "$2" "$3" | jqc -r 'length'; }
route6_in() { ip -n "$1" -6 -j route show table "$2" "$3" | jqc -r 'length'; }

# pod NAME: a namespace with dummy0 (10.0.0.2/24, 2001:db8::2/64) and
# dummy1 (10.0.1.2/24, 2001:db8:1::2/64), each with a custom route.
pod() {
    netns_add "$1"
    ip -n "$1" link add dummy0 type dummy
    ip -n "$1" link add dummy1 type dummy
    ip -n "$1" addr add 10.0.0.2/24 dev dummy0
    ip -n "$1" addr add 10.0.1.2/24 dev dummy1
    ip -n "$1" addr add 2001:db8::2/64 dev dummy0 nodad
    ip -n "$1" addr add 2001:db8:1::2/64 dev dummy1 nodad
    ip -n "$1" link set dummy0 up
    ip -n "$1" link set dummy1 up
    ip -n "$1" route add 10.10.10.0/24 via 10.0.0.1 dev dummy0
    ip -n "$1" route add 10.11.11.0/24 via 10.0.1.1 dev dummy1
    ip -n "$1" -6 route add 1111:dddd::/80 dev dummy0
    ip -n "$1" -6 route add 1111:eeee::/80 dev dummy1
}

scenarios() {
    local i=$1 p
    # --- ADD: prevResult through, enslaved, addresses kept, routes moved ----
    p=$i-a
    pod "$p"
    vrf_call "$i" ADD "$p" dummy0 vrf0
    check_eq "$i-add" 0 "$cni_status"
    [ "$cni_status" = 0 ] || echo "$(cni_report)"
    # (the reference adds an empty "dns" object, as Go marshals it)
    check_eq "$i-prevresult-through" "$(conf "/run/netns/$p" dummy0 vrf0 | jqc -S .prevResult)" \
        "$(jqc -S 'if .dns == {} then del(.dns) else . end' <<<"$cni_out")"
    check_eq "$i-enslaved" vrf0 "$(master_of "$p" dummy0)"
    check_eq "$i-vrf-up" true "$(ip -n "$p" -j link show vrf0 | jqc '.[0].flags | index("UP") != null')"
    check_eq "$i-first-table" 1 "$(table_of "$p" vrf0)"
    check_eq "$i-v4-kept" 10.0.0.2 "$(v4_of "$p" dummy0)"
    check_eq "$i-v6-kept" 2001:db8::2 "$(v6_of "$p" dummy0)"
    routes_after_add="$(route_in "$p" 1 10.10.10.0/24) $(route_in "$p" main 10.10.10.0/24) $(route6_in "$p" 1 1111:dddd::/80) $(route6_in "$p" main 1111:dddd::/80)"
    if [ "$i" = ours ]; then
        check_eq ours-routes-moved "1 0 1 0" "$routes_after_add"
    else
        # 1.1.1 predates the route move: the enslaving drops them.
        check_eq reference-routes-dropped "0 0 0 0" "$routes_after_add"
    fi
    check_eq "$i-other-route-stays" "1 0" "$(route_in "$p" main 10.11.11.0/24) $(route_in "$p" 1 10.11.11.0/24)"
    check_eq "$i-local6-in-vrf" 1 \
        "$(ip -n "$p" -6 -j route show table 1 | jqc -r '[.[] | select(.type == "local" and .dst == "2001:db8::2")] | length')"
    cni_call "/opt/cni/$i/vrf" CHECK "/run/netns/$p" dummy0 "ctr-$p-dummy0" "$(conf "/run/netns/$p" dummy0 vrf0)"
    check_eq "$i-check" 0 "$cni_status"
    cni_call "/opt/cni/$i/vrf" CHECK "/run/netns/$p" dummy1 "ctr-$p-dummy1" "$(conf "/run/netns/$p" dummy1 vrf0)"
    if [ "$i" = ours ]; then
        check_contains ours-check-not-member "failed to find dummy1 associated to vrf vrf0" "$cni_out"
    else
        # 1.1.1's CHECK does not look at the membership.
        check_eq reference-check-not-member-passes 0 "$cni_status"
    fi
    # The second interface into another VRF: its own routes move there.
    vrf_call "$i" ADD "$p" dummy1 vrf1
    check_eq "$i-second-vrf" "vrf1 2" "$(master_of "$p" dummy1) $(table_of "$p" vrf1)"
    if [ "$i" = ours ]; then
        check_eq ours-second-routes-moved "1 0 1" \
            "$(route_in "$p" 2 10.11.11.0/24) $(route_in "$p" main 10.11.11.0/24) $(route6_in "$p" 2 1111:eeee::/80)"
    fi
    check_eq "$i-first-route-untouched" 0 "$(route_in "$p" 2 10.10.10.0/24)"

    # --- an interface that already has a master -------------------------------
    p=$i-m
    pod "$p"
    ip -n "$p" link add br0 type bridge
    ip -n "$p" link set dummy0 master br0
    vrf_call "$i" ADD "$p" dummy0 vrf0
    check_contains "$i-has-master" "has already a master set" "$cni_out"

    # --- two interfaces, same VRF / different VRFs / same IP, v4 and v6 --------
    p=$i-s
    pod "$p"
    vrf_call "$i" ADD "$p" dummy0 vrf0
    vrf_call "$i" ADD "$p" dummy1 vrf0
    check_eq "$i-same-vrf" "vrf0 vrf0" "$(master_of "$p" dummy0) $(master_of "$p" dummy1)"
    check_eq "$i-same-vrf-addresses" "10.0.0.2 10.0.1.2 2001:db8::2 2001:db8:1::2" \
        "$(v4_of "$p" dummy0) $(v4_of "$p" dummy1) $(v6_of "$p" dummy0) $(v6_of "$p" dummy1)"
    p=$i-d
    pod "$p"
    ip -n "$p" addr add 10.0.5.2/24 dev dummy0
    ip -n "$p" addr add 10.0.5.2/24 dev dummy1
    ip -n "$p" addr add 2001:db8:5::2/64 dev dummy0 nodad
    ip -n "$p" addr add 2001:db8:5::2/64 dev dummy1 nodad
    vrf_call "$i" ADD "$p" dummy0 vrf0
    vrf_call "$i" ADD "$p" dummy1 vrf1
    check_eq "$i-different-vrfs" "vrf0 vrf1" "$(master_of "$p" dummy0) $(master_of "$p" dummy1)"
    check_eq "$i-different-tables" "1 2" "$(table_of "$p" vrf0) $(table_of "$p" vrf1)"
    check_eq "$i-same-ip-kept" "10.0.0.2,10.0.5.2 10.0.1.2,10.0.5.2" "$(v4_of "$p" dummy0) $(v4_of "$p" dummy1)"
    check_contains "$i-same-ip6-kept" "2001:db8:5::2" "$(v6_of "$p" dummy0) $(v6_of "$p" dummy1)"
    check_eq "$i-same-ip6-both" 2 "$(for d in dummy0 dummy1; do v6_of "$p" "$d"; echo; done | grep -c 2001:db8:5::2)"

    # --- table conflicts ---------------------------------------------------------
    p=$i-t
    pod "$p"
    ip -n "$p" link add dummy2 type dummy
    ip -n "$p" link set dummy2 up
    vrf_call "$i" ADD "$p" dummy0 vrf0 '{"table": 100}'
    check_eq "$i-explicit-table" 100 "$(table_of "$p" vrf0)"
    vrf_call "$i" ADD "$p" dummy1 vrf0 '{"table": 100}'
    check_eq "$i-same-vrf-same-table" 0 "$cni_status"
    vrf_call "$i" ADD "$p" dummy2 vrf1 '{"table": 100}'
    check_eq "$i-different-vrf-same-table" "0 100" "$cni_status $(table_of "$p" vrf1)"
    ip -n "$p" link set dummy2 nomaster
    vrf_call "$i" ADD "$p" dummy2 vrf0 '{"table": 101}'
    check_contains "$i-table-conflict" "already exist with different routing table" "$cni_out"
    check_eq "$i-table-conflict-unchanged" "none 100" "$(master_of "$p" dummy2) $(table_of "$p" vrf0)"

    # --- DEL: the VRF goes with its last member ----------------------------------
    p=$i-r
    pod "$p"
    vrf_call "$i" ADD "$p" dummy0 vrf0
    vrf_call "$i" ADD "$p" dummy1 vrf0
    vrf_call "$i" DEL "$p" dummy0 vrf0
    check_eq "$i-del-first" "0 none vrf0" "$cni_status $(master_of "$p" dummy0) $(master_of "$p" dummy1)"
    check_eq "$i-vrf-kept-with-member" 1 "$(table_of "$p" vrf0)"
    vrf_call "$i" DEL "$p" dummy1 vrf0
    check_eq "$i-del-last" "0 none" "$cni_status $(table_of "$p" vrf0)"
    vrf_call "$i" DEL "$p" dummy1 vrf0
    check_eq "$i-del-twice" 0 "$cni_status"
    # The interface gone before DEL (deleted by its own plugin).
    vrf_call "$i" ADD "$p" dummy0 vrf0
    ip -n "$p" link del dummy0
    vrf_call "$i" DEL "$p" dummy0 vrf0
    del_missing_status=$cni_status
    del_missing_out=$cni_out
    del_missing_vrf=$(table_of "$p" vrf0)
    ip netns delete "$p"
    vrf_call "$i" DEL "$p" dummy1 vrf0
    check_eq "$i-del-netns-gone" 0 "$cni_status"
}

scenarios ours
# Deliberate difference: DEL succeeds when the interface is already gone,
# and deletes the VRF it left empty (upstream PR #1282).
check_eq ours-del-missing-interface 0 "$del_missing_status"
check_eq ours-del-missing-interface-vrf-gone none "$del_missing_vrf"
scenarios reference
check_contains reference-del-missing-interface "could not get link by name dummy0" "$del_missing_out"
check_eq reference-del-missing-interface-vrf-kept 1 "$del_missing_vrf"

# --- ours only: a failure after enslaving is undone ----------------------------
netns_add ours-u
ip -n ours-u link add dummy0 type dummy
ip -n ours-u addr add 10.0.0.2/24 dev dummy0
ip -n ours-u link set dummy0 up
ip -n ours-u route add 10.10.10.0/24 via 10.0.0.1 dev dummy0
# A route through a nexthop object: the kernel drops the nexthop with the
# enslaving cycle, so the route cannot be put back in the VRF table.
ip -n ours-u nexthop add id 5 via 10.0.0.1 dev dummy0
ip -n ours-u route add 10.20.0.0/16 nhid 5
vrf_call ours ADD ours-u dummy0 vrf0
check_contains undo-error "could not add route" "$cni_out"
check_eq undo-not-enslaved none "$(master_of ours-u dummy0)"
check_eq undo-vrf-deleted none "$(table_of ours-u vrf0)"
check_eq undo-route-back 1 "$(route_in ours-u main 10.10.10.0/24)"
check_eq undo-address-kept 10.0.0.2 "$(v4_of ours-u dummy0)"
# An onlink route keeps its flag in the VRF table.
netns_add ours-o
ip -n ours-o link add dummy0 type dummy
ip -n ours-o addr add 10.0.0.2/24 dev dummy0
ip -n ours-o link set dummy0 up
ip -n ours-o route add 10.30.0.0/16 via 192.0.2.1 dev dummy0 onlink
vrf_call ours ADD ours-o dummy0 vrf0
check_eq onlink-add 0 "$cni_status"
check_contains onlink-route-moved onlink "$(ip -n ours-o -j route show table 1 10.30.0.0/16)"

# --- ours only: 0.4.0 and 1.1.0, CHECK of the table ------------------------------
pod ours-v
for version in 0.4.0 1.1.0; do
    c=$(conf /run/netns/ours-v dummy0 vrf0 | jqc --arg v "$version" '.cniVersion = $v')
    cni_call /opt/cni/ours/vrf ADD /run/netns/ours-v dummy0 ctr-v "$c"
    check_eq "ours-add-$version" 0 "$cni_status"
    cni_call /opt/cni/ours/vrf CHECK /run/netns/ours-v dummy0 ctr-v "$c"
    check_eq "ours-check-$version" 0 "$cni_status"
    cni_call /opt/cni/ours/vrf DEL /run/netns/ours-v dummy0 ctr-v "$c"
    check_eq "ours-del-$version" "0 none" "$cni_status $(table_of ours-v vrf0)"
done
cni_call /opt/cni/ours/vrf ADD /run/netns/ours-v dummy0 ctr-v "$(conf /run/netns/ours-v dummy0 vrf0)"
cni_call /opt/cni/ours/vrf CHECK /run/netns/ours-v dummy0 ctr-v "$(conf /run/netns/ours-v dummy0 vrf0 '{"table": 7}')"
check_contains ours-check-table "uses routing table 1, the configuration says 7" "$cni_out"

finish
