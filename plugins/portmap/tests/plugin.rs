//! The plugin as a runtime sees it, in namespaces: verbs, errors, backend
//! detection, GC, CHECK, concurrent first ADDs, and DEL through the
//! libcni runtime without capability arguments.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use conformance::testnet::{PluginCall, PluginOutcome, TestNetns, REFERENCE_DIR};
use serde_json::{json, Value};

fn one_mapping() -> Value {
    json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}])
}

fn call(host: &TestNetns, command: &str, id: &str, conf: &Value) -> PluginOutcome {
    run_portmap(
        &portmap_bin(),
        host,
        command,
        id,
        Path::new("/run/netns/does-not-matter"),
        conf,
    )
}

fn nft_ruleset(host: &TestNetns) -> String {
    ns_cmd(host, "nft", &["list", "ruleset"])
}

fn iptables_rules(host: &TestNetns) -> String {
    normalize_save(&ns_cmd(host, "iptables-save", &["-t", "nat"]))
}

/// A directory with `iptables-save` and `iptables-restore` that only
/// leave a mark when run, to prove no process was started.
struct FakeIptables {
    dir: tempfile::TempDir,
}

impl FakeIptables {
    fn new() -> FakeIptables {
        let dir = tempfile::tempdir().unwrap();
        for tool in [
            "iptables-save",
            "iptables-restore",
            "ip6tables-save",
            "ip6tables-restore",
        ] {
            let path = dir.path().join(tool);
            let marker = dir.path().join("ran");
            std::fs::write(
                &path,
                format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        FakeIptables { dir }
    }

    fn path_var(&self) -> String {
        format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            self.dir.path().display()
        )
    }

    fn ran(&self) -> bool {
        self.dir.path().join("ran").exists()
    }
}

#[test]
fn no_port_mappings_means_no_work() {
    let host = TestNetns::new("pmnw");
    let fake = FakeIptables::new();
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", None);
    for mappings in [json!([]), Value::Null] {
        let mut conf = portmap_conf(None, &prev, mappings);
        if conf["runtimeConfig"]["portMappings"].is_null() {
            conf.as_object_mut().unwrap().remove("runtimeConfig");
        }
        for command in ["ADD", "DEL", "CHECK"] {
            let out = PluginCall::new(command)
                .var("PATH", fake.path_var())
                .attachment("ctr-nw", Path::new("/run/netns/x"), "eth0")
                .stdin_json(&conf)
                .in_netns(&host)
                .run(&portmap_bin());
            out.assert_ok();
            if command == "ADD" {
                assert_eq!(out.json(), prev);
            }
        }
    }
    assert!(!fake.ran(), "an iptables tool was started");
    assert_eq!(nft_ruleset(&host).trim(), "", "nftables was written to");

    // The control: with a mapping, auto-detection does run the tool in
    // PATH (and, as it fails, falls back to nftables).
    let conf = portmap_conf(None, &prev, one_mapping());
    PluginCall::new("ADD")
        .var("PATH", fake.path_var())
        .attachment("ctr-nw", Path::new("/run/netns/x"), "eth0")
        .stdin_json(&conf)
        .in_netns(&host)
        .run(&portmap_bin())
        .assert_ok();
    assert!(fake.ran());
    assert!(nft_ruleset(&host).contains("comment \"ctr-nw\""));
}

/// Runs our plugin where no iptables program can be executed: a private
/// mount namespace covers the xtables binaries with a plain file.
struct NftOnlyHost {
    dir: tempfile::TempDir,
    wrapper: PathBuf,
}

impl NftOnlyHost {
    fn new() -> NftOnlyHost {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("not-a-program");
        std::fs::write(&plain, "").unwrap();
        let mut mounts = String::new();
        for binary in [
            "/usr/sbin/xtables-nft-multi",
            "/usr/sbin/xtables-legacy-multi",
        ] {
            if Path::new(binary).exists() {
                mounts.push_str(&format!("mount --bind {} {binary} && ", plain.display()));
            }
        }
        let wrapper = dir.path().join("portmap-without-iptables");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec unshare --mount --propagation private -- sh -c '{mounts}exec {}'\n",
                portmap_bin().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        NftOnlyHost { dir, wrapper }
    }

    fn run(&self, host: &TestNetns, command: &str, conf: &Value) -> PluginOutcome {
        let _ = &self.dir;
        PluginCall::new(command)
            .attachment("ctr-nft-only", Path::new("/run/netns/x"), "eth0")
            .stdin_json(conf)
            .in_netns(host)
            .run(&self.wrapper)
    }
}

#[test]
fn hosts_with_only_nftables_work_and_status_reports_missing_iptables() {
    let host = TestNetns::new("pmno");
    let only_nft = NftOnlyHost::new();
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", Some("fd00:99::2/64"));

    let status = |backend: Option<&str>| {
        let mut conf = json!({"cniVersion": "1.1.0", "name": "test", "type": "portmap"});
        if let Some(backend) = backend {
            conf["backend"] = json!(backend);
        }
        only_nft.run(&host, "STATUS", &conf)
    };
    let out = status(Some("iptables"));
    assert_eq!(out.error_code(), 50, "{}", out.stdout);
    assert!(out.json()["msg"]
        .as_str()
        .unwrap()
        .contains("iptables backend is not usable"));
    status(None).assert_ok();
    status(Some("nftables")).assert_ok();

    // Auto-detection picks nftables; DEL finds the rules again.
    let conf = portmap_conf(None, &prev, one_mapping());
    only_nft.run(&host, "ADD", &conf).assert_ok();
    let rules = nft_ruleset(&host);
    // Per family: the DNAT rule and the masquerade rules (two for IPv4).
    assert_eq!(
        count_lines(&rules, "comment \"ctr-nft-only\""),
        5,
        "{rules}"
    );
    only_nft.run(&host, "CHECK", &conf).assert_ok();
    only_nft.run(&host, "DEL", &conf).assert_ok();
    assert!(!nft_ruleset(&host).contains("ctr-nft-only"));

    // With iptables back, STATUS for iptables is fine.
    let conf =
        json!({"cniVersion": "1.1.0", "name": "test", "type": "portmap", "backend": "iptables"});
    PluginCall::new("STATUS")
        .stdin_json(&conf)
        .in_netns(&host)
        .run(&portmap_bin())
        .assert_ok();
}

#[test]
fn auto_detection_prefers_iptables_when_it_works() {
    let host = TestNetns::new("pmad");
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", None);
    call(
        &host,
        "ADD",
        "ctr-auto",
        &portmap_conf(None, &prev, one_mapping()),
    )
    .assert_ok();
    assert!(iptables_rules(&host).contains("id: \\\"ctr-auto\\\""));
    assert!(!nft_ruleset(&host).contains("cni_hostport"));
    call(
        &host,
        "DEL",
        "ctr-auto",
        &portmap_conf(None, &prev, one_mapping()),
    )
    .assert_ok();
    assert!(!iptables_rules(&host).contains("ctr-auto"));
}

#[test]
fn configuration_errors_have_code_7() {
    let host = TestNetns::new("pmce");
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", None);
    let mut no_prev = portmap_conf(Some(Backend::Nftables), &prev, one_mapping());
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let out = call(&host, "ADD", "ctr-e", &no_prev);
    assert_eq!(out.error_code(), 7);
    assert_eq!(out.json()["msg"], "must be called as chained plugin");
    let out = call(&host, "CHECK", "ctr-e", &no_prev);
    assert_eq!(out.error_code(), 7);
    assert_eq!(out.json()["msg"], "Required prevResult missing");

    let cases = [
        (
            portmap_conf(
                Some(Backend::Nftables),
                &prev,
                json!([{"hostPort": 0, "containerPort": 80}]),
            ),
            "Invalid host port number: 0",
        ),
        (
            {
                let mut c = portmap_conf(None, &prev, one_mapping());
                c["markMasqBit"] = json!(40);
                c
            },
            "MasqMarkBit must be between 0 and 31",
        ),
        (
            {
                let mut c = portmap_conf(Some(Backend::Nftables), &prev, one_mapping());
                c["conditionsV4"] = json!(["ip", "protocol", "tcp"]);
                c
            },
            "unsupported nftables condition in conditionsV4",
        ),
        (
            {
                let mut c = portmap_conf(Some(Backend::Iptables), &prev, one_mapping());
                c["conditionsV4"] = json!(["ip", "saddr", "1.2.3.4"]);
                c
            },
            "iptables backend was requested but configuration contains nftables-specific options [conditionsV4]",
        ),
    ];
    for (conf, message) in cases {
        let out = call(&host, "ADD", "ctr-e", &conf);
        assert_eq!(out.error_code(), 7, "{}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap().to_string();
        assert!(msg.contains(message), "{msg:?} lacks {message:?}");
    }
    // Nothing was written by any of them.
    assert!(!nft_ruleset(&host).contains("cni_hostport"));
}

fn check_and_gc(backend: Backend) {
    let host = TestNetns::new("pmcg");
    let v4_only = fake_result("/run/netns/x", "10.99.0.2/24", None);
    let conf = |mappings: Value| portmap_conf(Some(backend), &v4_only, mappings);

    // CHECK of an IPv4-only pod (the reference fails it on the IPv6 chain).
    call(&host, "CHECK", "ctr-1", &conf(one_mapping())).error_code();
    call(&host, "ADD", "ctr-1", &conf(one_mapping())).assert_ok();
    call(&host, "CHECK", "ctr-1", &conf(one_mapping())).assert_ok();
    let other_port = json!([{"hostPort": 9999, "containerPort": 80, "protocol": "tcp"}, {"hostPort": 9998, "containerPort": 80}]);
    let out = call(&host, "CHECK", "ctr-1", &conf(other_port));
    assert_eq!(out.error_code(), 999, "{}", out.stdout);

    for (id, network) in [("ctr-2", "test"), ("ctr-3", "test"), ("ctr-4", "other")] {
        let mut c = portmap_conf(
            Some(backend),
            &fake_result("/run/netns/x", "10.99.0.3/24", Some("fd00:99::3/64")),
            json!([{"hostPort": 7000, "containerPort": 70, "protocol": "udp"}]),
        );
        c["name"] = json!(network);
        call(&host, "ADD", id, &c).assert_ok();
    }
    let rules = |h: &TestNetns| match backend {
        Backend::Nftables => nft_ruleset(h),
        Backend::Iptables => format!(
            "{}{}",
            iptables_rules(h),
            normalize_save(&ns_cmd(h, "ip6tables-save", &["-t", "nat"]))
        ),
    };
    let before = rules(&host);
    for id in ["ctr-1", "ctr-2", "ctr-3", "ctr-4"] {
        assert!(before.contains(id), "{id} missing before GC");
    }

    let gc = json!({
        "cniVersion": "1.1.0",
        "name": "test",
        "type": "portmap",
        "backend": backend.name(),
        "cni.dev/valid-attachments": [{"containerID": "ctr-1", "ifname": "eth0"}],
    });
    PluginCall::new("GC")
        .stdin_json(&gc)
        .in_netns(&host)
        .run(&portmap_bin())
        .assert_ok();
    let after = rules(&host);
    assert!(
        after.contains("ctr-1"),
        "valid attachment removed:\n{after}"
    );
    assert!(
        after.contains("ctr-4"),
        "other network's rules removed:\n{after}"
    );
    assert!(
        !after.contains("ctr-2") && !after.contains("ctr-3"),
        "{after}"
    );
    call(&host, "CHECK", "ctr-1", &conf(one_mapping())).assert_ok();

    call(&host, "DEL", "ctr-1", &conf(one_mapping())).assert_ok();
    let out = call(&host, "CHECK", "ctr-1", &conf(one_mapping()));
    assert_eq!(out.error_code(), 999);
}

#[test]
fn check_and_gc_nftables() {
    check_and_gc(Backend::Nftables);
}

#[test]
fn check_and_gc_iptables() {
    check_and_gc(Backend::Iptables);
}

/// Eight simultaneous first ADDs on a fresh node must all succeed and
/// leave exactly one of each shared jump rule.
fn concurrent_first_adds(backend: Backend) {
    for _trial in 0..3 {
        let host = TestNetns::new("pmcc");
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|i| {
                    let host = &host;
                    scope.spawn(move || {
                        let prev = fake_result(
                            "/run/netns/x",
                            &format!("10.99.0.{}/24", i + 10),
                            Some(&format!("fd00:99::{}/64", i + 10)),
                        );
                        let mappings =
                            json!([{"hostPort": 8000 + i, "containerPort": 80, "protocol": "tcp"}]);
                        call(
                            host,
                            "ADD",
                            &format!("ctr-c{i}"),
                            &portmap_conf(Some(backend), &prev, mappings),
                        )
                    })
                })
                .collect();
            for worker in workers {
                worker.join().unwrap().assert_ok();
            }
        });
        match backend {
            Backend::Nftables => {
                for family in ["ip", "ip6"] {
                    let chain = |name: &str| {
                        ns_cmd(
                            &host,
                            "nft",
                            &["list", "chain", family, "cni_hostport", name],
                        )
                    };
                    assert_eq!(count_lines(&chain("prerouting"), "jump hostports_all"), 1);
                    assert_eq!(count_lines(&chain("output"), "jump hostports_all"), 1);
                    assert_eq!(count_lines(&chain("hostports_all"), "jump"), 2);
                    assert_eq!(count_lines(&chain("hostports"), "dnat to"), 8);
                }
            }
            Backend::Iptables => {
                for tool in ["iptables-save", "ip6tables-save"] {
                    let rules = ns_cmd(&host, tool, &["-t", "nat"]);
                    for chain in ["PREROUTING", "OUTPUT"] {
                        let jump =
                            format!("-A {chain} -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT");
                        assert_eq!(count_lines(&rules, &jump), 1, "{rules}");
                    }
                    assert_eq!(count_lines(&rules, "-A POSTROUTING "), 1, "{rules}");
                    assert_eq!(count_lines(&rules, "-A CNI-HOSTPORT-SETMARK "), 1);
                    assert_eq!(count_lines(&rules, "-A CNI-HOSTPORT-MASQ "), 1);
                    assert_eq!(count_lines(&rules, ":CNI-DN-"), 8);
                    assert_eq!(count_lines(&rules, "-A CNI-HOSTPORT-DNAT "), 8);
                }
            }
        }
    }
}

#[test]
fn concurrent_first_adds_nftables() {
    concurrent_first_adds(Backend::Nftables);
}

#[test]
fn concurrent_first_adds_iptables() {
    concurrent_first_adds(Backend::Iptables);
}

/// The libcni runtime sends the capability arguments cached at ADD when
/// DEL comes without them (as containerd's second DEL does); portmap
/// then removes its rules.
#[test]
fn runtime_del_without_capability_args_removes_the_rules() {
    use libcni::netns::NetNs;
    use libcni::runtime::{CniConfig, RuntimeConf};

    let topo = Topology::new();
    let pod_ns = TestNetns::new("pmrt");
    let plugins = tempfile::tempdir().unwrap();
    for reference in ["bridge", "host-local"] {
        std::os::unix::fs::symlink(
            Path::new(REFERENCE_DIR).join(reference),
            plugins.path().join(reference),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(portmap_bin(), plugins.path().join("portmap")).unwrap();
    let ipam = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": "rtnet",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isDefaultGateway": true, "hairpinMode": true,
             "ipam": {"type": "host-local", "subnet": "10.88.0.0/16",
                      "dataDir": ipam.path().display().to_string()}},
            {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}}
        ]
    });
    let list = libcni::conf::conflist_from_bytes(&serde_json::to_vec(&conflist).unwrap()).unwrap();
    let cni = CniConfig::new(vec![plugins.path().to_path_buf()]).with_cache_dir(cache.path());
    let mut rt = RuntimeConf {
        container_id: "ctr-rt".to_string(),
        netns: pod_ns.path().display().to_string(),
        ifname: "eth0".to_string(),
        ..RuntimeConf::default()
    };
    rt.capability_args
        .insert("portMappings".to_string(), one_mapping());

    let host = NetNs::open(topo.host.path()).unwrap();
    // Plugins inherit the namespace of the thread that starts them.
    host.run(|| cni.add_network_list(&list, &rt).map(|_| ()))
        .unwrap()
        .unwrap();
    let _server = EchoServer::start(&pod_ns.path(), 80, "rt-pod");
    assert_eq!(
        tcp_get(&topo.outside.path(), addr(HOST_V4, 8080)).unwrap(),
        "rt-pod"
    );

    let mut del_rt = rt.clone();
    del_rt.capability_args = Default::default();
    del_rt.netns = String::new();
    host.run(|| cni.del_network_list(&list, &del_rt))
        .unwrap()
        .unwrap();
    assert!(!nft_ruleset(&topo.host).contains("ctr-rt"));
    assert!(tcp_get(&topo.outside.path(), addr(HOST_V4, 8080)).is_err());
}

/// A runtime may repeat ADD without DEL (the spec forbids it, yet a retry
/// after a timeout happens). iptables replaces the container's rules (the
/// reference recreates its chain). nftables, like the reference's, adds a
/// second copy: finding the first would mean listing every container's
/// rules on each ADD. Either way one DEL removes them all.
fn repeated_add(backend: Backend) {
    let host = TestNetns::new("pmra");
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", Some("fd00:99::2/64"));
    let conf = portmap_conf(Some(backend), &prev, one_mapping());
    let rules = || ruleset(&host, backend);
    call(&host, "ADD", "ctr-twice", &conf).assert_ok();
    let once = rules();
    call(&host, "ADD", "ctr-twice", &conf).assert_ok();
    let twice = rules();
    match backend {
        Backend::Iptables => assert_eq!(twice, once),
        Backend::Nftables => assert_eq!(
            twice.matches("ctr-twice").count(),
            2 * once.matches("ctr-twice").count(),
            "{twice}"
        ),
    }
    call(&host, "DEL", "ctr-twice", &conf).assert_ok();
    assert!(!rules().contains("ctr-twice"));
}

#[test]
fn repeated_add_nftables() {
    repeated_add(Backend::Nftables);
}

#[test]
fn repeated_add_replaces_iptables() {
    repeated_add(Backend::Iptables);
}

/// A pod with hundreds of port mappings makes one batch of thousands of
/// rules: more than a netlink socket's default buffers take in one
/// datagram (`EMSGSIZE` on send) or acknowledge at once (`ENOBUFS`). ADD,
/// CHECK and DEL all work, and DEL leaves nothing.
fn many_mappings(backend: Backend) {
    let host = TestNetns::new("pmmany");
    let prev = fake_result("/run/netns/x", "10.99.0.2/24", Some("fd00:99::2/64"));
    let mappings: Vec<Value> = (0..500)
        .map(|n| json!({"hostPort": 30000 + n, "containerPort": 8000 + n, "protocol": "tcp"}))
        .collect();
    let conf = portmap_conf(Some(backend), &prev, Value::from(mappings));
    let rules = || ruleset(&host, backend);
    call(&host, "ADD", "ctr-many", &conf).assert_ok();
    let added = rules();
    for n in [30000, 30250, 30499] {
        // One DNAT per family for each mapping.
        let dnat = added
            .lines()
            .filter(|l| l.contains(&format!("dport {n} ")))
            .filter(|l| l.contains("DNAT") || l.contains("dnat"))
            .count();
        assert_eq!(dnat, 2, "port {n} in\n{added}");
    }
    call(&host, "CHECK", "ctr-many", &conf).assert_ok();
    call(&host, "DEL", "ctr-many", &conf).assert_ok();
    let left = rules();
    assert!(!left.contains("dport 30"), "{left}");
    assert!(!left.contains("ctr-many"), "{left}");
}

#[test]
fn many_mappings_nftables() {
    many_mappings(Backend::Nftables);
}

#[test]
fn many_mappings_iptables() {
    many_mappings(Backend::Iptables);
}
