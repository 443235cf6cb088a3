#!/usr/bin/env bash
# Guest side of the dummy plugin's real-kernel test: run by the shared qemu
# harness (testing/qemu-guest) as /test/run.sh, as root, on a kernel with
# dummy links (module dummy, loaded at boot). Each check prints
# `CHECK <name> PASS|FAIL <detail>`; `finish` prints ALL-DONE.
#
# Expects /usr/local/bin/dummy and /usr/local/bin/host-local (CNI_PATH is
# /usr/local/bin). Pods are namespaces; the guest's own namespace is the
# "host".
set -u
. /test/guest-lib.sh

missing=""
for binary in dummy host-local; do
    [ -x "/usr/local/bin/$binary" ] || missing="$missing /usr/local/bin/$binary"
done
if [ -z "$missing" ]; then
    pass setup-binaries "/usr/local/bin/dummy /usr/local/bin/host-local"
else
    fail setup-binaries "missing:$missing"
    finish
    exit 0
fi

ipam_dir=/run/cni/dummy-ipam
network=dummynet
leases=$ipam_dir/$network
echo "nameserver 10.58.0.53" >/tmp/dummy-resolv.conf

# conf VERSION [EXTRA-JSON]: a network configuration.
conf() {
    local extra=${2:-'{}'}
    jqc -n --arg v "$1" --arg dir "$ipam_dir" --arg net "$network" --argjson extra "$extra" \
        '{cniVersion: $v, name: $net, type: "dummy",
          ipam: {type: "host-local", dataDir: $dir, resolvConf: "/tmp/dummy-resolv.conf",
                 ranges: [[{subnet: "10.58.0.0/24", gateway: "10.58.0.1"}]],
                 routes: [{dst: "10.99.0.0/16"}]}} * $extra'
}
pod_link() { ip -n "$1" -d -j link show "$2" 2>/dev/null | jqc -c '.[0] // empty'; }
lease_count() { ls "$leases" 2>/dev/null | grep -c '^10\.'; }
pod_v4() { ip -n "$1" -j addr show dev "$2" | jqc -r '.[0].addr_info[] | select(.family == "inet") | "\(.local)/\(.prefixlen)"'; }

# --- every spec version: ADD, CHECK, DEL, DEL again ---------------------------
# A link of the same name in the "host" does not matter: the dummy is made
# in the pod directly.
ip link add dummy0 type dummy 2>/dev/null || true
for version in 0.1.0 0.2.0 0.3.0 0.3.1 0.4.0 1.0.0 1.1.0; do
    tag=v${version//./}
    netns_add "pod-$tag"
    c=$(conf "$version")
    cni_call dummy ADD "/run/netns/pod-$tag" dummy0 "ctr-$tag" "$c"
    check_eq "$tag-add" 0 "$cni_status"
    [ "$cni_status" = 0 ] || echo "$(cni_report)"
    result=$cni_out
    link=$(pod_link "pod-$tag" dummy0)
    check_eq "$tag-kind" dummy "$(jqc -r '.linkinfo.info_kind' <<<"$link")"
    check_eq "$tag-up" true "$(jqc '.flags | index("UP") != null' <<<"$link")"
    address=$(pod_v4 "pod-$tag" dummy0)
    check_contains "$tag-address" 10.58.0. "$address"
    case $version in
        0.1.0 | 0.2.0)
            check_eq "$tag-result-ip" "$address" "$(jqc -r '.ip4.ip' <<<"$result")"
            check_eq "$tag-result-no-ip6" null "$(jqc -r '.ip6' <<<"$result")"
            ;;
        *)
            check_eq "$tag-result-ip" "$address" "$(jqc -r '.ips[0].address' <<<"$result")"
            check_eq "$tag-result-mac" "$(jqc -r .address <<<"$link")" \
                "$(jqc -r '.interfaces[0].mac' <<<"$result")"
            check_eq "$tag-result-sandbox" "/run/netns/pod-$tag" \
                "$(jqc -r '.interfaces[0].sandbox' <<<"$result")"
            ;;
    esac
    # IPAM's routes and DNS are kept in the result and on the link.
    check_eq "$tag-result-dns" 10.58.0.53 "$(jqc -r '.dns.nameservers[0]' <<<"$result")"
    check_eq "$tag-route" 10.58.0.1 \
        "$(ip -n "pod-$tag" -j route show 10.99.0.0/16 | jqc -r '.[0].gateway')"
    case $version in
        0.1.0 | 0.2.0 | 0.3.0 | 0.3.1)
            cni_call dummy CHECK "/run/netns/pod-$tag" dummy0 "ctr-$tag" "$(with_prev "$c" "$result")"
            check_contains "$tag-check-refused" "does not allow CHECK" "$cni_out"
            ;;
        *)
            cni_call dummy CHECK "/run/netns/pod-$tag" dummy0 "ctr-$tag" "$(with_prev "$c" "$result")"
            check_eq "$tag-check" 0 "$cni_status"
            ;;
    esac
    cni_call dummy DEL "/run/netns/pod-$tag" dummy0 "ctr-$tag" "$c"
    check_eq "$tag-del" 0 "$cni_status"
    check_eq "$tag-del-link-gone" "" "$(pod_link "pod-$tag" dummy0)"
    check_eq "$tag-del-lease-gone" 0 "$(lease_count)"
    cni_call dummy DEL "/run/netns/pod-$tag" dummy0 "ctr-$tag" "$c"
    check_eq "$tag-del-twice" 0 "$cni_status"
done
check_eq host-dummy0-untouched dummy0 "$(ip -j link show dummy0 | jqc -r '.[0].ifname')"

# --- CHECK finds what differs --------------------------------------------------
netns_add podc
c=$(conf 1.0.0)
cni_call dummy ADD /run/netns/podc dummy0 ctrc "$c"
check_eq check-setup 0 "$cni_status"
result=$cni_out
wrong_mac=$(jqc '.interfaces[0].mac = "02:00:00:00:00:99"' <<<"$result")
cni_call dummy CHECK /run/netns/podc dummy0 ctrc "$(with_prev "$c" "$wrong_mac")"
check_contains check-wrong-mac "doesn't match the MAC found" "$cni_out"
ip -n podc link set dummy0 down
cni_call dummy CHECK /run/netns/podc dummy0 ctrc "$(with_prev "$c" "$result")"
check_contains check-down "Interface dummy0 is down" "$cni_out"
ip -n podc link set dummy0 up
ip -n podc route add 10.99.0.0/16 via 10.58.0.1 2>/dev/null
ip -n podc addr flush dev dummy0
cni_call dummy CHECK /run/netns/podc dummy0 ctrc "$(with_prev "$c" "$result")"
check_contains check-address-missing "Failed to match addr" "$cni_out"
cni_call dummy CHECK /run/netns/podc dummy0 ctrc "$c"
check_contains check-no-prev "Required prevResult missing" "$cni_out"
# A link of another kind under the name (ctrc: IPAM CHECK finds its lease).
netns_add podk
ip -n podk link add dummy0 type bridge
cni_call dummy CHECK /run/netns/podk dummy0 ctrc "$(with_prev "$c" "$(jqc '.interfaces[0].sandbox = "/run/netns/podk"' <<<"$result")")"
check_contains check-wrong-kind "not of type dummy" "$cni_out"
cni_call dummy DEL /run/netns/podc dummy0 ctrc "$c"
check_eq check-cleanup 0 "$cni_status"

# --- ADD refuses a taken name and undoes a failure after IPAM ----------------------
before=$(lease_count)
cni_call dummy ADD /run/netns/podk dummy0 ctrk "$c"
check_contains taken-name-msg "already exists" "$cni_out"
check_eq taken-name-kept bridge "$(pod_link podk dummy0 | jqc -r '.linkinfo.info_kind')"
check_eq taken-name-no-lease "$before" "$(lease_count)"
netns_add podr
bad_route=$(conf 1.0.0 '{"ipam": {"routes": [{"dst": "10.98.0.0/16", "gw": "10.200.0.1"}]}}')
cni_call dummy ADD /run/netns/podr dummy0 ctrr "$bad_route"
check_contains rollback-error "failed to add route" "$cni_out"
check_eq rollback-no-link "" "$(pod_link podr dummy0)"
check_eq rollback-no-lease "$before" "$(lease_count)"

# --- DEL with the netns gone, GC, STATUS -------------------------------------------
netns_add podg
c=$(conf 1.1.0)
cni_call dummy ADD /run/netns/podg dummy0 ctrg "$c"
check_eq gone-setup 0 "$cni_status"
ip netns delete podg
cni_call dummy DEL /run/netns/podg dummy0 ctrg "$c"
check_eq del-netns-gone 0 "$cni_status"
check_eq del-netns-gone-lease 0 "$(lease_count)"
netns_add podh
cni_call dummy ADD /run/netns/podh dummy0 ctrh "$c"
check_eq gc-setup 1 "$(lease_count)"
cni_call dummy GC "" "" "" "$(jqc '. + {"cni.dev/valid-attachments": [{containerID: "ctrh", ifname: "dummy0"}]}' <<<"$c")"
check_eq gc-keeps-valid 1 "$(lease_count)"
cni_call dummy GC "" "" "" "$(jqc '. + {"cni.dev/valid-attachments": []}' <<<"$c")"
check_eq gc-collects-stale 0 "$(lease_count)"
cni_call dummy STATUS "" "" "" "$c"
check_eq status-ok 0 "$cni_status"

finish
