#!/bin/bash
# The node agent's cost at rest (docs/node-agent.md, "Cost"): `cni-node run
# --interval 10s` beside Debian's containerd with no pods, both in a
# private network and mount namespace (tmpfs over /var/lib and /run/cni
# there, so the machine's own folders are untouched), on a bridge +
# host-local + portmap network whose cache and host-local store hold
# ATTACHMENTS attachments (written directly; their sandboxes do not exist,
# and --min-age 1000h keeps them all, so each pass sends GC with all of
# them valid, as on a node running that many pods). Prints the agent's CPU
# time and RSS over SECONDS and its last pass's duration.
#
# Usage (root): tools/cni-node/measure-idle.sh AGENT [SECONDS [ATTACHMENTS]]
# with AGENT the cni-node binary; the plugins are the workspace's debug
# build (cargo build -p bridge -p host-local -p portmap -p loopback).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
agent=$1; secs=${2:-120}; attachments=${3:-0}
w=$(mktemp -d /tmp/cnitest-agent.XXXXXX)
trap 'rm -rf "$w"' EXIT
mkdir -p $w/{conf,bin,root,state,opt,runc}
cat > $w/config.toml <<EOF
version = 2
root = "$w/root"
state = "$w/state"
[grpc]
  address = "$w/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$w/opt"
[plugins."io.containerd.grpc.v1.cri"]
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$w/bin"
    conf_dir = "$w/conf"
EOF
cat > $w/conf/10-idle.conflist <<EOF
{"cniVersion":"1.1.0","name":"idle","plugins":[{"type":"bridge","bridge":"cniidle0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.250.0.0/20"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}
EOF
for p in bridge host-local loopback portmap; do ln -s "$repo/target/debug/$p" "$w/bin/$p"; done
cat > $w/gen.py <<'PYEOF'
import base64, json, os, sys, ipaddress
n = int(sys.argv[1]); conf = open(sys.argv[2], 'rb').read()
os.makedirs('/var/lib/cni/results', exist_ok=True); os.makedirs('/var/lib/cni/networks/idle', exist_ok=True)
for i in range(n):
    cid = '%064x' % (0xc0ffee0000 + i)
    ip = str(ipaddress.ip_address('10.250.0.2') + i)
    entry = {"kind": "cniCacheV1", "containerId": cid, "config": base64.b64encode(conf).decode(), "ifName": "eth0", "networkName": "idle", "netns": "/run/netns/gone-%d" % i,
             "result": {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/gone-%d" % i}], "ips": [{"address": ip + "/20", "interface": 0}]}}
    with open('/var/lib/cni/results/idle-%s-eth0' % cid, 'w') as f: json.dump(entry, f)
    with open('/var/lib/cni/networks/idle/' + ip, 'w') as f: f.write(cid + '\r\neth0')
PYEOF
unshare --net --mount --propagation private --fork bash -c "
  ip link set lo up
  mount -t tmpfs cnitest /var/lib && mkdir -p /var/lib/cni && mount -t tmpfs cnitest /run/cni
  python3 $w/gen.py $attachments $w/conf/10-idle.conflist
  containerd --config $w/config.toml > $w/containerd.log 2>&1 & echo \$! > $w/containerd.pid
  for i in \$(seq 100); do [ -S $w/containerd.sock ] && break; sleep 0.1; done
  $agent run --cri-endpoint unix://$w/containerd.sock --conf-dir $w/conf --bin-dir $w/bin --cache-dir /var/lib/cni --interval 10s --min-age 1000h --metrics-port 19793 > $w/agent.log 2>&1 & echo \$! > $w/agent.pid
  wait" &
holder=$!
sleep 5
apid=$(cat $w/agent.pid)
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$apid/stat; }
c0=$(cpu); t0=$(date +%s.%N)
sleep "$secs"
c1=$(cpu); t1=$(date +%s.%N)
rss=$(awk '/VmRSS/{print $2}' /proc/$apid/status); hwm=$(awk '/VmHWM/{print $2}' /proc/$apid/status)
metrics=$(nsenter --target $apid --net curl -s http://127.0.0.1:19793/metrics | grep -vE "^#" | grep -E "pass|addresses" | head -12 || true)
echo "agent idle over $(echo "$t1 - $t0" | bc) s: CPU $(( (c1 - c0) * 1000 / ticks )) ms ($(echo "scale=3; ($c1 - $c0) * 100 / $ticks / ($t1 - $t0)" | bc) %), RSS ${rss} KiB, peak ${hwm} KiB"
echo "$metrics"
grep -vE "metrics on|: ready" $w/agent.log | head -5 || true
kill $(cat $w/agent.pid) $(cat $w/containerd.pid) 2>/dev/null || true
wait $holder 2>/dev/null || true
