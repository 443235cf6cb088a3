# Guest side of the `secondary-guest` bench (secondary_guest.rs), run by the
# qemu harness (testing/qemu-guest) as /test/run.sh. The host puts above
# this text: `rounds` (timed rounds), `rss_rounds` (rounds run first, for
# peak RSS), `plugins` (names, in report order) and `version_plugin` (one
# both sides have, whose VERSION call is timed last; empty for none).
#
# Expects our plugins (and host-local) in /opt/cni/ours, the reference's in
# /opt/cni/reference (a plugin missing there is measured for ours only) and
# /usr/local/bin/bench-measure, which runs one plugin call and prints
# `ns=... [rss_kib=...] exit=...`. Prints one line per call,
# `BENCH plugin=P side=S round=R verb=V mode=time|rss ns=... exit=...`,
# which the host reads, and one CHECK per plugin and side: PASS when every
# call of every round exited 0.
#
# As on the host, each side calls its plugins from a fake host namespace of
# its own (bh-ours, bh-reference), where master0 (one end of a veth whose
# other end stays beside it) is the ipvlan and vlan parent; every round
# gets a fresh pod namespace, made outside the timing; a plugin's pods are
# removed together after its last round.
set -u
. /test/guest-lib.sh

measure=/usr/local/bin/bench-measure
if [ ! -x "$measure" ]; then
    fail setup-binaries "missing $measure"
    finish
    exit 0
fi

for side in ours reference; do
    netns_add "bh-$side"
    ip -n "bh-$side" link add master0 type veth peer name master0p
    ip -n "bh-$side" link set master0 up
    ip -n "bh-$side" link set master0p up
    mkdir -p "/run/cni/bench-state/$side"
done
wait_netns_cleanup

# conf PLUGIN SIDE POD: the network configuration of one call (1.0.0, the
# highest version both sides speak), as the plugins' own tests set them up.
conf() {
    local ipam
    ipam=$(printf '{"type":"host-local","ranges":[[{"subnet":"10.98.0.0/24"}]],"dataDir":"/run/cni/bench-state/%s/leases"}' "$2")
    case $1 in
        ipvlan)
            printf '{"cniVersion":"1.0.0","name":"bench-ipvlan","type":"ipvlan","master":"master0","ipam":%s}' "$ipam" ;;
        vlan)
            printf '{"cniVersion":"1.0.0","name":"bench-vlan","type":"vlan","master":"master0","vlanId":100,"ipam":%s}' "$ipam" ;;
        dummy)
            printf '{"cniVersion":"1.0.0","name":"bench-dummy","type":"dummy","ipam":%s}' "$ipam" ;;
        vrf)
            # Chained: the pod's eth0 as the plugin before it leaves it.
            printf '{"cniVersion":"1.0.0","name":"bench-vrf","type":"vrf","vrfname":"vrf-bench","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/%s"}],"ips":[{"address":"10.98.0.5/24","interface":0}]}}' "$3" ;;
    esac
}

# Waits until the kernel has freed the namespaces deleted before: it tears
# them down on a workqueue afterwards, which on the guest's one emulated CPU
# takes hundreds of ms each and would run inside whatever call is timed
# next. Done when the slab count of live net_namespace objects has not
# changed for 5 looks in a row (at most 60 s).
wait_netns_cleanup() {
    local last now steady=0 looks=0
    last=$(awk '$1 == "net_namespace" {print $2}' /proc/slabinfo 2>/dev/null)
    while [ "$steady" -lt 5 ] && [ "$looks" -lt 300 ]; do
        sleep 0.2
        now=$(awk '$1 == "net_namespace" {print $2}' /proc/slabinfo 2>/dev/null)
        if [ "$now" = "$last" ]; then steady=$((steady + 1)); else steady=0; fi
        last=$now
        looks=$((looks + 1))
    done
}

# pod PLUGIN NAME: a fresh pod namespace; vrf's gets the eth0 it enslaves.
pod() {
    netns_add "$2"
    if [ "$1" = vrf ]; then
        ip -n "$2" link add eth0 type dummy
        ip -n "$2" addr add 10.98.0.5/24 dev eth0
        ip -n "$2" link set eth0 up
    fi
}

for plugin in $plugins; do
    sides=(ours)
    [ -x "/opt/cni/reference/$plugin" ] && sides+=(reference)
    declare -A broken=()
    # The plugin's pods, deleted together after its last round, for the
    # reason wait_netns_cleanup gives.
    pods=()
    for ((round = 0; round < rss_rounds + rounds; round++)); do
        mode=time
        [ "$round" -lt "$rss_rounds" ] && mode=rss
        # The side that goes first alternates round by round.
        for ((k = 0; k < ${#sides[@]}; k++)); do
            side=${sides[(round + k) % ${#sides[@]}]}
            [ -n "${broken[$side]:-}" ] && continue
            name=bp-$plugin-$side-$round
            pod "$plugin" "$name"
            pods+=("$name")
            c=$(conf "$plugin" "$side" "$name")
            for verb in ADD DEL; do
                out=$(printf '%s' "$c" | CNI_COMMAND=$verb CNI_NETNS=/run/netns/$name \
                    CNI_IFNAME=eth0 CNI_CONTAINERID=bench-$plugin-$round \
                    CNI_PATH=/opt/cni/$side PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                    ip netns exec "bh-$side" "$measure" "$mode" "/opt/cni/$side/$plugin" 2>&1)
                echo "BENCH plugin=$plugin side=$side round=$round verb=$verb mode=$mode $(one_line "$out")"
                case $out in
                    *" exit=0") ;;
                    *)
                        # Once more, to show what the plugin said.
                        CNI_PATH=/opt/cni/$side cni_call "/opt/cni/$side/$plugin" "$verb" \
                            "/run/netns/$name" eth0 "bench-$plugin-$round" "$c"
                        fail "bench-$plugin-$side" "round $round $verb: $out; again: $(cni_report)"
                        broken[$side]=1
                        break
                        ;;
                esac
            done
        done
    done
    for name in "${pods[@]}"; do ip netns del "$name"; done
    wait_netns_cleanup
    for side in "${sides[@]}"; do
        [ -n "${broken[$side]:-}" ] ||
            pass "bench-$plugin-$side" "$rss_rounds rss and $rounds timed rounds"
    done
    unset broken
done

# The floor under every figure above: a call that only starts the plugin
# and prints its versions, both sides, alternating.
if [ -n "$version_plugin" ]; then
    bad=""
    for ((round = 0; round < rounds; round++)); do
        for k in 0 1; do
            sides=(ours reference)
            side=${sides[(round + k) % 2]}
            out=$(printf '{"cniVersion":"1.0.0"}' | CNI_COMMAND=VERSION \
                PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                ip netns exec "bh-$side" "$measure" time "/opt/cni/$side/$version_plugin" 2>&1)
            echo "BENCH plugin=$version_plugin side=$side round=$round verb=VERSION mode=time $(one_line "$out")"
            case $out in *" exit=0") ;; *) bad="$bad $side round $round: $out;" ;; esac
        done
    done
    if [ -z "$bad" ]; then
        pass "bench-version-$version_plugin" "$rounds rounds per side"
    else
        fail "bench-version-$version_plugin" "$bad"
    fi
fi
finish
