//! NetNs::run, the route socket and sysctls against the real kernel, inside
//! namespaces each test creates and removes (`ip netns add/del`), so the
//! machine's own network is never touched.

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use libcni::netlink::{IpFamily, LinkInfo, NetlinkError, Route, RouteSocket, VethPair};
use libcni::netns::{NetNs, NetNsError};
use libcni::sysctl::{self, SysctlError};
use nix::errno::Errno;
use serde_json::Value;

/// Removes the named namespace on drop, even when the test panicked.
struct NetnsName(String);

impl Drop for NetnsName {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A fresh named namespace. `ns` is declared first so its file is closed
/// before the name is removed.
struct TestNetns {
    ns: NetNs,
    name: NetnsName,
}

impl TestNetns {
    fn new() -> TestNetns {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = NetnsName(format!("cnitest-{}-{n}", std::process::id()));
        let status = Command::new("ip")
            .args(["netns", "add", &name.0])
            .status()
            .unwrap();
        assert!(status.success(), "ip netns add {}", name.0);
        let ns = NetNs::open(format!("/run/netns/{}", name.0)).unwrap();
        TestNetns { ns, name }
    }

    fn name(&self) -> &str {
        &self.name.0
    }

    fn socket(&self) -> RouteSocket {
        RouteSocket::open_in(&self.ns).unwrap()
    }

    /// `ip -n <ns> -j <args>` parsed; `None` when ip fails (e.g. no such link).
    fn ip_json(&self, args: &[&str]) -> Option<Value> {
        let out = Command::new("ip")
            .args(["-n", self.name(), "-j"])
            .args(args)
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        Some(serde_json::from_slice(&out.stdout).unwrap())
    }

    fn ip_link(&self, name: &str) -> Option<Value> {
        let v = self.ip_json(&["-d", "link", "show", "dev", name])?;
        v.as_array().and_then(|a| a.first().cloned())
    }
}

fn mac_str(mac: &[u8]) -> String {
    libcni::netlink::format_mac(mac)
}

fn errno(e: &NetlinkError) -> Errno {
    e.errno()
        .unwrap_or_else(|| panic!("expected a kernel errno, got {e}"))
}

#[test]
fn run_executes_in_the_target_namespace_only() {
    let t = TestNetns::new();
    let host = NetNs::current_thread().unwrap().identity().unwrap();
    let target = t.ns.identity().unwrap();
    assert_ne!(host, target);

    let inside =
        t.ns.run(|| NetNs::current_thread().unwrap().identity().unwrap())
            .unwrap();
    assert_eq!(inside, target);
    // The caller never moved.
    assert_eq!(NetNs::current_thread().unwrap().identity().unwrap(), host);
    // What the worker sees is the target's network, not the host's.
    let links =
        t.ns.run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap())
            .unwrap();
    let names: Vec<&str> = links
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"]);
}

#[test]
fn panic_in_closure_is_an_error_and_caller_stays_home() {
    let t = TestNetns::new();
    let host = NetNs::current_thread().unwrap().identity().unwrap();
    let e =
        t.ns.run(|| -> () { panic!("inside the netns") })
            .unwrap_err();
    match &e {
        NetNsError::Thread { path, msg } => {
            assert!(msg.contains("inside the netns"), "{msg}");
            assert_eq!(path, t.ns.path());
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(NetNs::current_thread().unwrap().identity().unwrap(), host);
}

#[test]
fn socket_stays_bound_to_its_namespace_from_any_thread() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    let mut sock_a = a.socket();
    sock_a
        .create_veth_pair(&VethPair {
            name: "only-in-a",
            peer_name: "only-in-b",
            peer_netns: Some(b.ns.as_fd()),
            ..Default::default()
        })
        .unwrap();

    // Used from this (host) thread, the socket still answers for A.
    let names = |links: Vec<LinkInfo>| {
        let mut n: Vec<String> = links.into_iter().map(|l| l.name).collect();
        n.sort();
        n
    };
    assert_eq!(names(sock_a.list_links().unwrap()), ["lo", "only-in-a"]);
    let lo = sock_a.link_by_name("lo").unwrap().unwrap();
    assert_eq!(lo.index, 1);
    assert_eq!(lo.kind, None);

    // And from another thread, B's socket sees B only.
    let sock_b = b.socket();
    let b_names = std::thread::spawn(move || {
        let mut sock_b = sock_b;
        sock_b.list_links().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(names(b_names), ["lo", "only-in-b"]);

    // Nothing leaked to the host.
    let mut host = RouteSocket::open_current().unwrap();
    assert_eq!(host.link_by_name("only-in-a").unwrap(), None);
    assert_eq!(host.link_by_name("only-in-b").unwrap(), None);
}

#[test]
fn veth_pair_is_born_with_its_peer_in_the_other_namespace() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    let mut sock_a = a.socket();
    let mut sock_b = b.socket();
    let mac = [0x0a, 0x58, 0x0a, 0x01, 0x00, 0x02];
    let peer_mac = [0x0a, 0x58, 0x0a, 0x01, 0x00, 0x03];
    sock_a
        .create_veth_pair(&VethPair {
            name: "eth0",
            peer_name: "veth-b",
            peer_netns: Some(b.ns.as_fd()),
            mtu: Some(1400),
            mac: Some(&mac),
            peer_mac: Some(&peer_mac),
            master: None,
        })
        .unwrap();

    let ours = sock_a.link_by_name("eth0").unwrap().unwrap();
    assert_eq!(ours.kind.as_deref(), Some("veth"));
    assert_eq!(ours.mtu, 1400);
    assert_eq!(ours.mac, mac);
    assert_eq!(ours.mac_string(), "0a:58:0a:01:00:02");
    assert!(!ours.up);
    assert!(sock_a.link_by_name("veth-b").unwrap().is_none());

    let peer = sock_b.link_by_name("veth-b").unwrap().unwrap();
    assert_eq!(peer.kind.as_deref(), Some("veth"));
    assert_eq!(peer.mac, peer_mac);
    assert_eq!(
        peer.parent,
        Some(ours.index),
        "peer's IFLA_LINK is our index"
    );
    assert_eq!(
        sock_b.link_by_index(peer.index).unwrap().unwrap().name,
        "veth-b"
    );

    // The same, seen by iproute2.
    let ip_a = a.ip_link("eth0").unwrap();
    assert_eq!(ip_a["mtu"], 1400);
    assert_eq!(ip_a["address"], mac_str(&mac));
    assert_eq!(ip_a["linkinfo"]["info_kind"], "veth");
    let ip_b = b.ip_link("veth-b").unwrap();
    assert_eq!(ip_b["mtu"], 1400);
    assert_eq!(ip_b["address"], mac_str(&peer_mac));
    assert!(b.ip_link("eth0").is_none());

    // Deleting one end removes the pair.
    sock_a.delete_link("eth0").unwrap();
    assert!(sock_a.link_by_name("eth0").unwrap().is_none());
    assert!(sock_b.link_by_name("veth-b").unwrap().is_none());
}

#[test]
fn link_settings_round_trip() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    let mut sock = a.socket();
    sock.create_bridge("br-test", Some(1450), false).unwrap();
    sock.create_veth_pair(&VethPair {
        name: "port0",
        peer_name: "port0-peer",
        ..Default::default()
    })
    .unwrap();
    let bridge = sock.link_by_name("br-test").unwrap().unwrap();
    assert_eq!(bridge.kind.as_deref(), Some("bridge"));
    assert_eq!(bridge.mtu, 1450);
    let ip_br = a.ip_link("br-test").unwrap();
    assert_eq!(ip_br["linkinfo"]["info_data"]["vlan_filtering"], 0);

    let port = sock.link_by_name("port0").unwrap().unwrap();
    sock.set_master(port.index, Some(bridge.index)).unwrap();
    sock.set_mtu("port0", 1300).unwrap();
    sock.set_mac(port.index, &[0x02, 0, 0, 0, 0, 0x42]).unwrap();
    sock.set_link_up("port0").unwrap();
    sock.set_link_up(bridge.index).unwrap();
    let port = sock.link_by_index(port.index).unwrap().unwrap();
    assert_eq!(port.master, Some(bridge.index));
    assert_eq!(port.mtu, 1300);
    assert_eq!(port.mac_string(), "02:00:00:00:00:42");
    assert!(port.up);
    let ip_port = a.ip_link("port0").unwrap();
    assert_eq!(ip_port["master"], "br-test");
    assert!(ip_port["flags"]
        .as_array()
        .unwrap()
        .contains(&Value::from("UP")));

    sock.set_master("port0", None).unwrap();
    sock.set_link_down(port.index).unwrap();
    sock.set_name(port.index, "renamed0").unwrap();
    let renamed = sock.link_by_index(port.index).unwrap().unwrap();
    assert_eq!(renamed.name, "renamed0");
    assert_eq!(renamed.master, None);
    assert!(!renamed.up);

    // Move the peer into B by fd.
    sock.set_netns_fd("port0-peer", b.ns.as_fd()).unwrap();
    assert!(sock.link_by_name("port0-peer").unwrap().is_none());
    assert!(b.ip_link("port0-peer").is_some());
}

/// `master` puts the first end into the bridge as the pair is created; the
/// peer, born in another namespace, is no port of anything.
#[test]
fn veth_pair_is_born_a_port_of_the_bridge() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    let mut sock = a.socket();
    sock.create_bridge("br-born", None, false).unwrap();
    let bridge = sock.link_by_name("br-born").unwrap().unwrap();
    sock.create_veth_pair(&VethPair {
        name: "born0",
        peer_name: "born0-peer",
        peer_netns: Some(b.ns.as_fd()),
        master: Some(bridge.index),
        ..Default::default()
    })
    .unwrap();
    let port = sock.link_by_name("born0").unwrap().unwrap();
    assert_eq!(port.master, Some(bridge.index));
    assert_eq!(a.ip_link("born0").unwrap()["master"], "br-born");
    let peer = b.socket().link_by_name("born0-peer").unwrap().unwrap();
    assert_eq!(peer.master, None);

    // A master that does not exist fails the whole request: no half pair.
    let err = sock
        .create_veth_pair(&VethPair {
            name: "born1",
            peer_name: "born1-peer",
            master: Some(999_999),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(errno(&err), Errno::ENODEV | Errno::EINVAL),
        "{err}"
    );
    assert!(sock.link_by_name("born1").unwrap().is_none());
    assert!(sock.link_by_name("born1-peer").unwrap().is_none());
}

#[test]
fn vlan_filtering_bridge_matches_iproute2() {
    // Some kernels lack CONFIG_BRIDGE_VLAN_FILTERING (this machine's does):
    // whatever iproute2 gets, we must get too.
    let a = TestNetns::new();
    let reference = Command::new("ip")
        .args(["-n", a.name(), "link", "add", "br-ref", "type", "bridge"])
        .args(["vlan_filtering", "1"])
        .output()
        .unwrap();
    let mut sock = a.socket();
    let ours = sock.create_bridge("br-vlan", None, true);
    if reference.status.success() {
        ours.unwrap();
        let ip_br = a.ip_link("br-vlan").unwrap();
        assert_eq!(ip_br["linkinfo"]["info_data"]["vlan_filtering"], 1);
    } else {
        assert!(
            String::from_utf8_lossy(&reference.stderr).contains("not supported"),
            "{reference:?}"
        );
        assert_eq!(errno(&ours.unwrap_err()), Errno::EOPNOTSUPP);
        assert!(sock.link_by_name("br-vlan").unwrap().is_none());
    }
}

#[test]
fn kernel_errors_carry_their_errno() {
    let a = TestNetns::new();
    let mut sock = a.socket();
    sock.create_bridge("br-dup", None, false).unwrap();
    let e = sock.create_bridge("br-dup", None, false).unwrap_err();
    assert_eq!(errno(&e), Errno::EEXIST);
    assert!(e.is_exists());
    assert!(e.to_string().contains("br-dup"), "{e}");

    let e = sock
        .create_veth_pair(&VethPair {
            name: "br-dup",
            peer_name: "x-peer",
            ..Default::default()
        })
        .unwrap_err();
    assert!(e.is_exists(), "{e}");

    assert!(sock.link_by_name("no-such-link").unwrap().is_none());
    assert!(sock.link_by_index(4242).unwrap().is_none());
    let e = sock.set_link_up("no-such-link").unwrap_err();
    assert_eq!(errno(&e), Errno::ENODEV);
    assert!(e.is_not_found());
    let e = sock.delete_link(4242u32).unwrap_err();
    assert_eq!(errno(&e), Errno::ENODEV);
    let e = sock
        .add_address(4242, "10.0.0.1/24".parse().unwrap())
        .unwrap_err();
    assert_eq!(errno(&e), Errno::ENODEV);

    // A refused value comes back with the kernel's reason (extended ACK).
    sock.create_veth_pair(&VethPair {
        name: "v0",
        peer_name: "v0-peer",
        ..Default::default()
    })
    .unwrap();
    let e = sock.set_mtu("v0", 10).unwrap_err();
    assert_eq!(errno(&e), Errno::EINVAL);
    match e {
        NetlinkError::Context { source, .. } => match *source {
            NetlinkError::Kernel { message, .. } => {
                assert!(message.is_some_and(|m| m.to_lowercase().contains("mtu")))
            }
            other => panic!("unexpected {other}"),
        },
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn addresses_add_list_delete() {
    let a = TestNetns::new();
    let mut sock = a.socket();
    sock.create_veth_pair(&VethPair {
        name: "eth0",
        peer_name: "eth0-peer",
        ..Default::default()
    })
    .unwrap();
    let eth0 = sock.link_by_name("eth0").unwrap().unwrap().index;
    let v4 = "10.1.0.2/24".parse().unwrap();
    let v6 = "2001:db8::2/64".parse().unwrap();
    sock.add_address(eth0, v4).unwrap();
    sock.add_address(eth0, v6).unwrap();
    sock.add_address(1, "127.0.0.2/8".parse().unwrap()).unwrap();

    let listed = sock.list_addresses(Some(eth0)).unwrap();
    assert!(listed.iter().all(|a| a.index == eth0), "{listed:?}");
    let nets: Vec<_> = listed.iter().map(|a| a.address).collect();
    assert!(nets.contains(&v4), "{nets:?}");
    assert!(nets.contains(&v6), "{nets:?}");
    assert!(!nets.contains(&"127.0.0.2/8".parse().unwrap()));
    let all = sock.list_addresses(None).unwrap();
    assert!(all.iter().any(|a| a.index == 1));

    let ip = a.ip_json(&["addr", "show", "dev", "eth0"]).unwrap();
    let infos = ip[0]["addr_info"].as_array().unwrap();
    let v4_info = infos.iter().find(|i| i["local"] == "10.1.0.2").unwrap();
    assert_eq!(v4_info["prefixlen"], 24);
    assert_eq!(v4_info["broadcast"], "10.1.0.255");
    assert!(infos
        .iter()
        .any(|i| i["local"] == "2001:db8::2" && i["prefixlen"] == 64));

    let e = sock.add_address(eth0, v4).unwrap_err();
    assert_eq!(errno(&e), Errno::EEXIST);

    sock.del_address(eth0, v4).unwrap();
    let nets: Vec<_> = sock
        .list_addresses(Some(eth0))
        .unwrap()
        .into_iter()
        .map(|a| a.address)
        .collect();
    assert!(!nets.contains(&v4));
    assert!(nets.contains(&v6));
    let e = sock.del_address(eth0, v4).unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn routes_add_append_list_delete() {
    let a = TestNetns::new();
    let mut sock = a.socket();
    sock.create_veth_pair(&VethPair {
        name: "eth0",
        peer_name: "eth0-peer",
        ..Default::default()
    })
    .unwrap();
    let eth0 = sock.link_by_name("eth0").unwrap().unwrap().index;
    sock.set_link_up(eth0).unwrap();
    sock.set_link_up("eth0-peer").unwrap();
    sock.add_address(eth0, "10.1.0.2/24".parse().unwrap())
        .unwrap();

    let mut route = Route::new("10.9.0.0/16".parse().unwrap());
    route.gateway = Some("10.1.0.1".parse().unwrap());
    route.oif = Some(eth0);
    route.priority = Some(100);
    route.mtu = Some(1300);
    sock.add_route(&route).unwrap();
    assert!(sock.add_route(&route).unwrap_err().is_exists());

    let mut default = Route::new("0.0.0.0/0".parse().unwrap());
    default.gateway = Some("10.1.0.1".parse().unwrap());
    sock.add_route(&default).unwrap();

    let mut in_table = Route::new("10.20.0.0/16".parse().unwrap());
    in_table.oif = Some(eth0);
    in_table.table = Some(1000);
    in_table.scope = Some(253);
    sock.add_route(&in_table).unwrap();

    // A second path to the same destination and metric needs APPEND.
    let mut second = route.clone();
    second.gateway = Some("10.1.0.3".parse().unwrap());
    assert!(sock.add_route(&second).unwrap_err().is_exists());
    sock.append_route(&second).unwrap();

    let routes = sock.list_routes(Some(IpFamily::V4)).unwrap();
    let found = routes
        .iter()
        .find(|r| r.destination == route.destination && r.gateway == route.gateway)
        .unwrap();
    assert_eq!(found.oif, Some(eth0));
    assert_eq!(found.priority, Some(100));
    assert_eq!(found.mtu, Some(1300));
    assert_eq!(found.table, Some(254));
    assert!(routes.iter().any(|r| r.gateway == second.gateway));
    assert!(routes
        .iter()
        .any(|r| r.destination.prefix() == 0 && r.gateway == default.gateway));
    let t = routes
        .iter()
        .find(|r| r.destination == in_table.destination)
        .unwrap();
    assert_eq!((t.table, t.scope), (Some(1000), Some(253)));
    assert!(routes.iter().all(|r| r.destination.is_ipv4()));

    let ip = a.ip_json(&["route", "show", "10.9.0.0/16"]).unwrap();
    let ip_routes = ip.as_array().unwrap();
    assert_eq!(ip_routes.len(), 2, "{ip}");
    assert!(ip_routes
        .iter()
        .any(|r| r["gateway"] == "10.1.0.1" && r["metric"] == 100 && r["dev"] == "eth0"));
    let ip = a.ip_json(&["route", "show", "default"]).unwrap();
    assert_eq!(ip[0]["gateway"], "10.1.0.1");
    let ip = a.ip_json(&["route", "show", "table", "1000"]).unwrap();
    assert_eq!(ip[0]["dst"], "10.20.0.0/16");
    assert_eq!(ip[0]["scope"], "link");

    // IPv6.
    sock.add_address(eth0, "2001:db8::2/64".parse().unwrap())
        .unwrap();
    let mut v6 = Route::new("2001:db8:1::/48".parse().unwrap());
    v6.oif = Some(eth0);
    sock.add_route(&v6).unwrap();
    let v6_routes = sock.list_routes(Some(IpFamily::V6)).unwrap();
    assert!(v6_routes.iter().any(|r| r.destination == v6.destination));
    assert!(v6_routes.iter().all(|r| !r.destination.is_ipv4()));

    sock.del_route(&route).unwrap();
    sock.del_route(&second).unwrap();
    let after = sock.list_routes(Some(IpFamily::V4)).unwrap();
    assert!(!after.iter().any(|r| r.destination == route.destination));
    let e = sock.del_route(&route).unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn large_dump_spans_many_datagrams() {
    let a = TestNetns::new();
    let mut sock = a.socket();
    for i in 0..60 {
        sock.create_veth_pair(&VethPair {
            name: &format!("va{i}"),
            peer_name: &format!("vb{i}"),
            ..Default::default()
        })
        .unwrap();
    }
    let links = sock.list_links().unwrap();
    assert_eq!(links.len(), 121);
    let mut indexes: Vec<u32> = links.iter().map(|l| l.index).collect();
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), 121);
    // The socket is still in step afterwards.
    assert_eq!(sock.link_by_name("vb59").unwrap().unwrap().name, "vb59");
}

#[test]
fn sysctl_in_a_namespace_writes_once() {
    let a = TestNetns::new();
    const KEY: &str = "net/ipv4/conf/lo/arp_notify";
    let host_before = sysctl::get(KEY).unwrap();
    let (first, second, trimmed, value) =
        a.ns.run(|| {
            let before = sysctl::get(KEY).unwrap();
            assert_eq!(before, "0");
            (
                sysctl::set(KEY, "1").unwrap(),
                sysctl::set(KEY, "1").unwrap(),
                sysctl::set(KEY, " 1\n").unwrap(),
                sysctl::get(KEY).unwrap(),
            )
        })
        .unwrap();
    assert!(first, "first set writes");
    assert!(!second, "same value is not written again");
    assert!(!trimmed, "comparison ignores whitespace");
    assert_eq!(value, "1");

    let out = Command::new("ip")
        .args(["netns", "exec", a.name(), "cat"])
        .arg(format!("/proc/sys/{KEY}"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    assert_eq!(sysctl::get(KEY).unwrap(), host_before, "host untouched");

    let e =
        a.ns.run(|| sysctl::set("net/../kernel/hostname", "x"))
            .unwrap();
    assert!(matches!(e, Err(SysctlError::InvalidPath { .. })));
    let e = sysctl::set("/proc/sys/net/ipv4/ip_forward", "1").unwrap_err();
    assert!(matches!(e, SysctlError::InvalidPath { .. }));
}

#[test]
fn ping_across_a_veth_pair_configured_through_the_api() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    let mut sock_a = a.socket();
    let mut sock_b = b.socket();
    sock_a
        .create_veth_pair(&VethPair {
            name: "eth0",
            peer_name: "eth0",
            peer_netns: Some(b.ns.as_fd()),
            mtu: Some(1500),
            ..Default::default()
        })
        .unwrap();
    for (sock, ip) in [(&mut sock_a, "10.77.0.1/24"), (&mut sock_b, "10.77.0.2/24")] {
        let eth0 = sock.link_by_name("eth0").unwrap().unwrap().index;
        sock.add_address(eth0, ip.parse().unwrap()).unwrap();
        sock.set_link_up(eth0).unwrap();
        sock.set_link_up("lo").unwrap();
    }
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            a.name(),
            "ping",
            "-c",
            "1",
            "-W",
            "5",
            "10.77.0.2",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // And nothing answers at an address nobody has.
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            a.name(),
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "10.77.0.3",
        ])
        .output()
        .unwrap();
    assert!(!ping.status.success());
}
