//! Seed configurations: every plugin entry of the files in
//! conflist-examples/ as a single-plugin config, and one config per plugin
//! naming its documented keys (docs/configuration.md), so mutations reach
//! every key a parser reads.

use std::path::Path;

use serde_json::{json, Value};

/// The uplinks the seeds name as masters and devices; the sandbox creates
/// them as veth pairs in its own network namespace.
pub const UPLINKS: &[&str] = &["eth0", "eth1", "ens1f0np0", "ens3f0np0", "ens2f1np1"];

/// One seed: the plugin it is for and its config.
#[derive(Clone)]
pub struct Seed {
    pub plugin: String,
    pub config: Value,
}

/// The seeds of conflist-examples/ (`dir`): a `.conflist`'s entries each
/// become a config with the list's `name` and `cniVersion`; a `.conf` is
/// taken as it is. Unreadable files are skipped: the documented seeds
/// still cover every plugin.
pub fn from_examples(dir: &Path) -> Vec<Seed> {
    let mut files: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => return Vec::new(),
    };
    files.sort();
    let mut seeds = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(conf) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        seeds.extend(split_conflist(&conf));
    }
    seeds
}

fn split_conflist(conf: &Value) -> Vec<Seed> {
    let Some(plugins) = conf.get("plugins").and_then(Value::as_array) else {
        return plugin_of(conf).into_iter().collect();
    };
    plugins
        .iter()
        .filter_map(|p| {
            let mut p = p.clone();
            let obj = p.as_object_mut()?;
            for key in ["name", "cniVersion"] {
                if let Some(v) = conf.get(key) {
                    obj.insert(key.to_string(), v.clone());
                }
            }
            plugin_of(&p)
        })
        .collect()
}

fn plugin_of(conf: &Value) -> Option<Seed> {
    let plugin = conf.get("type")?.as_str()?.to_string();
    Some(Seed {
        plugin,
        config: conf.clone(),
    })
}

fn host_local() -> Value {
    json!({"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/24",
        "rangeStart": "10.77.0.10", "rangeEnd": "10.77.0.200", "gateway": "10.77.0.1"}],
        [{"subnet": "fd77::/64"}]], "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/var/lib/cni/networks", "lockTimeoutMs": 1000})
}

fn static_ipam() -> Value {
    json!({"type": "static", "addresses": [{"address": "10.78.0.5/24", "gateway": "10.78.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.78.0.1"}],
        "dns": {"nameservers": ["10.78.0.53"], "domain": "x", "search": ["a"], "options": ["ndots:1"]}})
}

fn cluster_ipam() -> Value {
    json!({"type": "cluster-ipam", "subnet": "10.79.0.0/16", "blockSize": 26, "blockSize6": 122,
        "nodeName": "node-a", "dataDir": "/var/lib/cni/cluster-ipam", "lockTimeoutMs": 1000,
        "etcd": {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/cni", "timeoutMs": 500,
            "username": "u", "passwordFile": "/tmp/pw", "caFile": "/tmp/ca",
            "certFile": "/tmp/c", "keyFile": "/tmp/k"}})
}

/// Documented keys of the interface plugins.
fn interface_seeds() -> Vec<Value> {
    vec![
        json!({"type": "loopback"}),
        json!({"type": "bridge", "bridge": "cni-fz0", "isGateway": true, "isDefaultGateway": false,
            "forceAddress": false, "ipMasq": true, "ipMasqBackend": "nftables", "mtu": 1500,
            "hairpinMode": true, "promiscMode": false, "vlan": 10, "preserveDefaultVlan": true,
            "vlanTrunk": [{"id": 20}, {"minID": 30, "maxID": 40}], "enabledad": false,
            "macspoofchk": true, "disableContainerInterface": false, "portIsolation": false,
            "ipam": host_local()}),
        json!({"type": "ptp", "ipMasq": true, "mtu": 1400, "ipam": host_local()}),
        json!({"type": "macvlan", "master": "eth0", "mode": "bridge", "mtu": 1400,
            "linkInContainer": false, "mac": "02:00:00:00:00:01", "ipam": static_ipam()}),
        json!({"type": "ipvlan", "master": "eth0", "mode": "l2", "mtu": 1400,
            "linkInContainer": false, "ipam": host_local()}),
        json!({"type": "vlan", "master": "eth0", "vlanId": 100, "mtu": 1400,
            "linkInContainer": false, "ipam": static_ipam()}),
        json!({"type": "host-device", "device": "eth1", "hwaddr": "02:00:00:00:00:02",
            "kernelpath": "/sys/devices/virtual/net/eth1", "pciBusID": "0000:00:00.0",
            "ipam": static_ipam()}),
        json!({"type": "dummy", "ipam": static_ipam()}),
        json!({"type": "tap", "mac": "02:00:00:00:00:03", "mtu": 1500, "selinuxContext": "",
            "multiQueue": true, "owner": 0, "group": 0, "bridge": "cni-fz0", "ipam": static_ipam()}),
        json!({"type": "rdma-sriov", "pf": "ens1f0np0", "deviceID": "0000:3b:00.2",
            "vlan": 0, "spoofchk": "off", "trust": "on", "link_state": "auto",
            "min_tx_rate": 0, "max_tx_rate": 0, "sysfsRoot": "/sys", "ipam": host_local()}),
    ]
}

/// Documented keys of the chained plugins (a prevResult is added by the
/// driver) and of the IPAM plugins run on their own.
fn chained_and_ipam_seeds() -> Vec<Value> {
    vec![
        json!({"type": "portmap", "snat": true, "markMasqBit": 13, "backend": "nftables",
            "externalSetMarkChain": null, "masqAll": false, "conditionsV4": ["-s", "1.1.1.1"],
            "capabilities": {"portMappings": true}, "runtimeConfig": {"portMappings": [
                {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "10.77.0.1"}]}}),
        json!({"type": "bandwidth", "ingressRate": 1000000, "ingressBurst": 100000,
            "egressRate": 1000000, "egressBurst": 100000, "shapedSubnets": ["10.0.0.0/8"],
            "runtimeConfig": {"bandwidth": {"ingressRate": 8000, "ingressBurst": 8000}}}),
        json!({"type": "firewall", "backend": "iptables", "iptablesAdminChainName": "CNI-ADMIN",
            "firewalldZone": "trusted", "ingressPolicy": "isolated"}),
        json!({"type": "tuning", "mtu": 1400, "txQLen": 1000, "promisc": true, "allmulti": true,
            "mac": "02:00:00:00:00:04", "sysctl": {"net.ipv4.conf.IFNAME.forwarding": "1"},
            "dataDir": "/var/lib/cni/tuning"}),
        json!({"type": "sbr", "table": 100}),
        json!({"type": "vrf", "vrfname": "vrf-fz", "table": 1001}),
        host_local(),
        static_ipam(),
        json!({"type": "dhcp", "daemonSocketPath": "/run/cni/dhcp.sock",
            "request": [{"option": "subnet-mask"}], "provide": [{"option": "host-name", "value": "x"}]}),
        cluster_ipam(),
    ]
}

/// An IPAM plugin run on its own reads the `ipam` section of a network
/// config, as a runtime's delegate call gives it: its documented keys go
/// there (at the top they only ever met "missing 'ipam' key").
fn as_network(conf: Value) -> Value {
    const IPAM: &[&str] = &["host-local", "static", "dhcp", "cluster-ipam"];
    match conf.get("type").and_then(Value::as_str) {
        Some(t) if IPAM.contains(&t) => json!({"type": t, "ipam": conf}),
        _ => conf,
    }
}

/// One seed per plugin, every documented key set to a working value.
pub fn documented() -> Vec<Seed> {
    interface_seeds()
        .into_iter()
        .chain(chained_and_ipam_seeds())
        .map(as_network)
        .filter_map(|mut c| {
            let obj = c.as_object_mut()?;
            obj.insert("cniVersion".into(), json!("1.0.0"));
            obj.insert("name".into(), json!("fuzznet"));
            plugin_of(&c)
        })
        .collect()
}

/// Seeds that reach past the parsers: cluster-ipam with a valid etcd
/// section, against an endpoint that refuses (always) and against the
/// run's live etcd (`etcd`, counted as `cluster-ipam+etcd`); rdma-sriov on
/// the simulated machine (`fake_rdma`, see [`super::sandbox::FakeRdma`]).
pub fn live(etcd: Option<&str>, fake_rdma: bool) -> Vec<Seed> {
    let cluster = |name: &str, endpoint: &str, subnet: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "cluster-ipam",
            "ipam": {"type": "cluster-ipam", "ranges": [[{"subnet": subnet}], [{"subnet": "fd79::/112"}]],
            "nodeName": "node-a", "dataDir": "/var/lib/cni/cluster-ipam", "lockTimeoutMs": 3000,
            "etcd": {"endpoints": [endpoint], "prefix": "/cni-fuzz", "timeoutMs": 2000}}})
    };
    // Port 1 of the sandbox's loopback: nothing listens there.
    let mut seeds = vec![Seed {
        plugin: "cluster-ipam".into(),
        config: cluster("fuzznet-refused", "http://127.0.0.1:1", "10.79.0.0/16"),
    }];
    if let Some(endpoint) = etcd {
        seeds.push(Seed {
            plugin: "cluster-ipam+etcd".into(),
            config: cluster("fuzznet-etcd", endpoint, "10.80.0.0/16"),
        });
    }
    if fake_rdma {
        for selector in [
            json!({"deviceID": "0000:3b:00.2"}),
            json!({"pf": "ens1f0np0"}),
        ] {
            let mut config = json!({"cniVersion": "1.0.0", "name": "fuzznet-rdma",
                "type": "rdma-sriov", "vlan": 100, "vlanQoS": 1, "spoofchk": "on",
                "trust": "off", "link_state": "enable", "max_tx_rate": 1000, "mtu": 1500,
                "rail": {"table": 101}, "ipam": host_local()});
            if let (Value::Object(c), Value::Object(s)) = (&mut config, selector) {
                c.extend(s);
            }
            seeds.push(Seed {
                plugin: "rdma-sriov".into(),
                config,
            });
        }
    }
    seeds
}

/// The prevResult a chained plugin gets when no ADD of this run made one.
pub fn sample_prev_result() -> Value {
    json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "cni-fz0", "mac": "02:00:00:00:00:10"},
            {"name": "eth0", "mac": "02:00:00:00:00:11", "sandbox": "/run/netns/cnitest-fuzz-pod"}],
        "ips": [{"address": "10.77.0.10/24", "gateway": "10.77.0.1", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}],
        "dns": {"nameservers": ["10.77.0.53"]}})
}
