//! bridge + firewall as a runtime chains them (bridge ADD, its result as
//! firewall's prevResult), in a fake host with two networks, foo
//! (10.88.3.0/24) and bar (10.88.4.0/24), and three containers: the
//! reference's firewall_integ_test, for both rule backends, checked by
//! ping; and a host whose forwarding is closed (iptables FORWARD policy
//! DROP, or the nftables forward chain's policy drop), where a container
//! reaches another only once firewall admitted it.
//!
//! Needs the workspace's bridge and host-local (built on demand).

mod common;

use std::path::{Path, PathBuf};

use common::{Fixture, PLUGIN};
use conformance::testnet::{workspace_plugin, PluginCall, TestNetns};
use serde_json::{json, Value};

struct Network {
    name: &'static str,
    bridge: &'static str,
    subnet: &'static str,
}

const FOO: Network = Network {
    name: "foo",
    bridge: "cnifoo0",
    subnet: "10.88.3.0/24",
};
const BAR: Network = Network {
    name: "bar",
    bridge: "cnibar0",
    subnet: "10.88.4.0/24",
};

/// A fake host with its IPAM store; containers are added per test.
struct Host {
    fx: Fixture,
    data_dir: tempfile::TempDir,
    bridge: PathBuf,
}

/// A container attached by bridge (and maybe firewall).
struct Container {
    netns: TestNetns,
    id: String,
    network: &'static Network,
    bridge_result: Value,
}

impl Container {
    fn ip(&self) -> String {
        let address = self.bridge_result["ips"][0]["address"]
            .as_str()
            .unwrap_or_else(|| panic!("no address in {}", self.bridge_result));
        address.split('/').next().unwrap_or_default().to_string()
    }

    fn pings(&self, other: &Container) -> bool {
        self.netns.ping(&other.ip())
    }
}

impl Host {
    fn new(tag: &str) -> Host {
        // host-local is found by bridge on CNI_PATH, the workspace's dir.
        workspace_plugin("host-local");
        let fx = Fixture::new(tag);
        // Bridged frames go through iptables/nftables forward (the
        // same-bridge and isolated policies need that), in this namespace.
        fx.sysctl("net.bridge.bridge-nf-call-iptables", "1");
        fx.sysctl("net.ipv4.ip_forward", "1");
        Host {
            fx,
            data_dir: tempfile::tempdir().unwrap(),
            bridge: workspace_plugin("bridge"),
        }
    }

    fn call(&self, command: &str, conf: &Value, c: &Container) -> PluginCall {
        PluginCall::new(command)
            .attachment(&c.id, &c.netns.path(), "eth0")
            .var("DBUS_SYSTEM_BUS_ADDRESS", &self.fx.system_bus)
            .stdin_json(conf)
            .in_netns(&self.fx.host)
    }

    fn bridge_conf(&self, network: &Network) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": network.name,
            "type": "bridge",
            "bridge": network.bridge,
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": self.data_dir.path().display().to_string(),
                "ranges": [[{"subnet": network.subnet}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        })
    }

    fn attach(&self, tag: &str, network: &'static Network) -> Container {
        let netns = TestNetns::new(tag);
        let mut container = Container {
            id: netns.name().to_string(),
            netns,
            network,
            bridge_result: Value::Null,
        };
        let out = self
            .call("ADD", &self.bridge_conf(network), &container)
            .run(&self.bridge);
        out.assert_ok();
        container.bridge_result = out.json();
        container
    }

    fn firewall_conf(&self, c: &Container, backend: &str, policy: &str) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": c.network.name,
            "type": "firewall",
            "backend": backend,
            "ingressPolicy": policy,
            "prevResult": c.bridge_result,
        })
    }

    fn firewall(&self, command: &str, c: &Container, backend: &str, policy: &str) {
        self.call(command, &self.firewall_conf(c, backend, policy), c)
            .run(Path::new(PLUGIN))
            .assert_ok();
    }
}

fn policies(backend: &str) {
    let host = Host::new(&format!("fwint-{}", &backend[..3]));
    let foo1 = host.attach("fwint-foo1", &FOO);
    let foo2 = host.attach("fwint-foo2", &FOO);
    let bar1 = host.attach("fwint-bar1", &BAR);
    // Without firewall the host routes between the networks.
    assert!(foo1.pings(&bar1), "{backend}: no route between foo and bar");
    for c in [&foo1, &foo2, &bar1] {
        host.firewall("ADD", c, backend, "same-bridge");
    }
    assert!(
        foo1.pings(&foo2),
        "{backend}: same-bridge cut foo off itself"
    );
    assert!(
        !foo1.pings(&bar1),
        "{backend}: same-bridge let foo reach bar"
    );
    assert!(
        !bar1.pings(&foo1),
        "{backend}: same-bridge let bar reach foo"
    );
    // isolated cuts the bridge off itself too.
    host.firewall("ADD", &foo2, backend, "isolated");
    assert!(
        !foo1.pings(&foo2),
        "{backend}: isolated let foo1 reach foo2"
    );
    // CHECK of each attachment passes, and DEL leaves the policy.
    for c in [&foo1, &foo2, &bar1] {
        host.firewall("CHECK", c, backend, "same-bridge");
        host.firewall("DEL", c, backend, "same-bridge");
    }
    assert!(
        !foo1.pings(&bar1),
        "{backend}: DEL removed the ingress policy"
    );
}

#[test]
fn ingress_policies_with_iptables() {
    policies("iptables");
}

#[test]
fn ingress_policies_with_nftables() {
    policies("nftables");
}

fn admission(backend: &str, close: impl Fn(&Fixture)) {
    let host = Host::new(&format!("fwadm-{}", &backend[..3]));
    close(&host.fx);
    let foo1 = host.attach("fwadm-foo1", &FOO);
    let bar1 = host.attach("fwadm-bar1", &BAR);
    assert!(!foo1.pings(&bar1), "{backend}: the closed host forwarded");
    // foo1 admitted: it may open connections, and gets the replies.
    host.firewall("ADD", &foo1, backend, "open");
    assert!(
        foo1.pings(&bar1),
        "{backend}: admitted foo1 cannot reach bar1"
    );
    assert!(
        !bar1.pings(&foo1),
        "{backend}: bar1 reached foo1 unadmitted"
    );
    host.firewall("ADD", &bar1, backend, "open");
    assert!(
        bar1.pings(&foo1),
        "{backend}: admitted bar1 cannot reach foo1"
    );
    // DEL takes foo1's admission back.
    host.firewall("DEL", &foo1, backend, "open");
    assert!(
        !foo1.pings(&bar1),
        "{backend}: foo1 still admitted after DEL"
    );
}

#[test]
fn closed_forwarding_admits_only_admitted_containers_iptables() {
    admission("iptables", |fx| {
        let out = fx.host.exec("iptables", &["-P", "FORWARD", "DROP"]);
        assert!(out.status.success(), "{out:?}");
    });
}

#[test]
fn closed_forwarding_admits_only_admitted_containers_nftables() {
    admission("nftables", |fx| {
        // The operator closes the plugin's forward chain before any ADD;
        // the plugin keeps an existing chain's policy.
        fx.nft(&["add", "table", "inet", "cni_plugins_firewall"]);
        fx.nft(&[
            "add",
            "chain",
            "inet",
            "cni_plugins_firewall",
            "forward",
            "{ type filter hook forward priority filter; policy drop; }",
        ]);
    });
}
