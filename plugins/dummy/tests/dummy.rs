//! The built `dummy` binary, run as a runtime runs it, in namespaces this
//! test makes, with our `host-local` as IPAM (built on demand by
//! `workspace_plugin`).
//!
//! This machine's kernel has no dummy links, so what runs here is what
//! needs none: configuration errors at every version, DEL (twice, without
//! the netns, without CNI_NETNS), GC and STATUS through IPAM, and ADD
//! refused by the kernel with a code-50 error naming the module and
//! nothing left behind (no link, no lease). Should the kernel have dummy
//! links, the same test checks the whole ADD/CHECK/DEL instead. The real
//! kernel runs are in the qemu guest (`qemu/guest-tests.sh`).

use std::path::PathBuf;

use conformance::testnet::{
    workspace_plugin, HostLocalStore, PluginCall, PluginOutcome, TestNetns, ALL_VERSIONS,
};
use serde_json::{json, Value};

const PLUGIN: &str = env!("CARGO_BIN_EXE_dummy");
const NETWORK: &str = "dummynet";
const CONTAINER_ID: &str = "ctr-dummy";
const IFNAME: &str = "dummy0";

struct Fixture {
    pod: TestNetns,
    store: HostLocalStore,
    cni_path: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let host_local = workspace_plugin("host-local");
        Fixture {
            pod: TestNetns::new(tag),
            store: HostLocalStore::new(NETWORK),
            cni_path: host_local.parent().unwrap().to_path_buf(),
        }
    }

    fn conf(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": NETWORK,
            "type": "dummy",
            "ipam": self.store.ipam(json!({"subnet": "10.57.0.0/24"})),
        })
    }

    fn call(&self, command: &str, conf: &Value) -> PluginOutcome {
        PluginCall::new(command)
            .var("CNI_PATH", self.cni_path.display().to_string())
            .attachment(CONTAINER_ID, &self.pod.path(), IFNAME)
            .stdin_json(conf)
            .run(PLUGIN.as_ref())
    }

    /// Lease files host-local holds for the network.
    fn leases(&self) -> Vec<String> {
        self.store.leases()
    }

    /// A lease for the attachment, taken by host-local directly (as if an
    /// ADD had run before the namespace went away).
    fn take_lease(&self, conf: &Value) {
        PluginCall::new("ADD")
            .attachment(CONTAINER_ID, &self.pod.path(), IFNAME)
            .var("CNI_PATH", self.cni_path.display().to_string())
            .stdin_json(&json!({
                "cniVersion": conf["cniVersion"],
                "name": NETWORK,
                "ipam": conf["ipam"],
            }))
            .run(&self.cni_path.join("host-local"))
            .assert_ok();
        assert_eq!(self.leases().len(), 1);
    }
}

/// Whether this kernel makes dummy links (checked in a scratch namespace).
fn kernel_has_dummy() -> bool {
    let ns = TestNetns::new("dmy-probe");
    ns.exec("ip", &["link", "add", "probe0", "type", "dummy"])
        .status
        .success()
}

fn without_ipam(version: &str) -> Value {
    json!({"cniVersion": version, "name": NETWORK, "type": "dummy"})
}

#[test]
fn ipam_is_required_with_the_reference_message_at_every_version() {
    let f = Fixture::new("dmy-noipam");
    for version in ALL_VERSIONS {
        let mut commands = vec!["ADD"];
        if version >= "0.4.0" {
            commands.push("CHECK");
        }
        if version == "1.1.0" {
            commands.push("STATUS");
        }
        for command in commands {
            let out = f.call(command, &without_ipam(version));
            assert_eq!(out.error_code(), 7, "{version} {command}: {}", out.stdout);
            assert_eq!(
                out.json()["msg"],
                "dummy interface requires an IPAM configuration",
                "{version} {command}"
            );
        }
        // An empty IPAM type is no IPAM either.
        let mut conf = without_ipam(version);
        conf["ipam"] = json!({});
        assert_eq!(f.call("ADD", &conf).error_code(), 7, "{version}");
        // DEL of such a configuration has only the link to delete.
        f.call("DEL", &without_ipam(version)).assert_ok();
    }
    assert_eq!(f.pod.links(), vec!["lo"]);
}

#[test]
fn add_on_this_kernel_is_clean_either_way() {
    let f = Fixture::new("dmy-add");
    for version in ALL_VERSIONS {
        let conf = f.conf(version);
        let out = f.call("ADD", &conf);
        if kernel_has_dummy() {
            out.assert_ok();
            let result = out.json();
            let link = &f.pod.ip_json(&["-d", "link", "show", IFNAME])[0];
            assert_eq!(link["linkinfo"]["info_kind"], "dummy");
            if version >= "0.3.0" {
                assert_eq!(result["interfaces"][0]["mac"], link["address"]);
            }
            f.call("DEL", &conf).assert_ok();
        } else {
            assert_eq!(out.error_code(), 50, "{version}: {}", out.stdout);
            let msg = out.json()["msg"].as_str().unwrap().to_string();
            assert!(
                msg.contains("no dummy links") && msg.contains("\"dummy\" kernel module"),
                "{msg}"
            );
        }
        assert_eq!(f.pod.links(), vec!["lo"], "{version}");
        assert!(f.leases().is_empty(), "{version}: {:?}", f.leases());
    }
}

#[test]
fn add_into_a_missing_or_wrong_netns_fails_with_the_netns_codes() {
    let f = Fixture::new("dmy-ns");
    let conf = f.conf("1.0.0");
    let out = PluginCall::new("ADD")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(
            CONTAINER_ID,
            "/run/netns/cnitest-dmy-absent".as_ref(),
            IFNAME,
        )
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 3, "{}", out.stdout);
    let out = PluginCall::new("ADD")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(CONTAINER_ID, "/etc/hostname".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    assert_eq!(out.error_code(), 4, "{}", out.stdout);
    assert!(f.leases().is_empty());
}

#[test]
fn del_releases_the_lease_with_the_netns_gone_and_is_idempotent() {
    let f = Fixture::new("dmy-del");
    let conf = f.conf("1.0.0");
    f.take_lease(&conf);
    // Nothing in the pod to delete: DEL still releases the lease.
    f.call("DEL", &conf).assert_ok();
    assert!(f.leases().is_empty());
    f.call("DEL", &conf).assert_ok();

    f.take_lease(&conf);
    let gone = PluginCall::new("DEL")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(CONTAINER_ID, "/run/netns/cnitest-dmy-gone".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    gone.assert_ok();
    assert!(f.leases().is_empty());

    // containerd's second DEL: no CNI_NETNS at all.
    f.take_lease(&conf);
    PluginCall::new("DEL")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .var("CNI_CONTAINERID", CONTAINER_ID)
        .var("CNI_IFNAME", IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref())
        .assert_ok();
    assert!(f.leases().is_empty());

    // A path that is not a namespace is not "gone": an error, code 4.
    let wrong = PluginCall::new("DEL")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .attachment(CONTAINER_ID, "/etc/hostname".as_ref(), IFNAME)
        .stdin_json(&conf)
        .run(PLUGIN.as_ref());
    assert_eq!(wrong.error_code(), 4, "{}", wrong.stdout);
}

#[test]
fn gc_and_status_go_to_ipam() {
    let f = Fixture::new("dmy-gc");
    let conf = f.conf("1.1.0");
    PluginCall::new("STATUS")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .stdin_json(&conf)
        .run(PLUGIN.as_ref())
        .assert_ok();
    f.take_lease(&conf);
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": CONTAINER_ID, "ifname": IFNAME}]);
    let call = |conf: &Value| {
        PluginCall::new("GC")
            .var("CNI_PATH", f.cni_path.display().to_string())
            .stdin_json(conf)
            .run(PLUGIN.as_ref())
    };
    call(&gc).assert_ok();
    assert_eq!(f.leases().len(), 1, "a valid attachment keeps its lease");
    gc["cni.dev/valid-attachments"] = json!([]);
    call(&gc).assert_ok();
    assert!(f.leases().is_empty(), "a stale lease is collected");
    // A missing IPAM binary is IPAM's error, reported by STATUS.
    let mut broken = conf.clone();
    broken["ipam"]["type"] = json!("no-such-ipam");
    let out = PluginCall::new("STATUS")
        .var("CNI_PATH", f.cni_path.display().to_string())
        .stdin_json(&broken)
        .run(PLUGIN.as_ref());
    assert_ne!(out.code, 0);
    assert!(out.stdout.contains("no-such-ipam"), "{}", out.stdout);
}
