//! How the suite drives each plugin type on its own: the configuration it
//! gets, the interface name, what a chained plugin gets as prevResult, and
//! how to see that ADD took effect and DEL undid it.

use serde_json::{json, Value};

use super::sandbox::{kernel_makes_link, Netns, SandboxError};
use super::scene::{result_at, Scene, BRIDGE, GATEWAY, SUBNET};
use super::shape::{normalize_result, result_addresses};

/// A plugin type the suite exercises directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Loopback,
    HostLocal,
    Bridge,
    Portmap,
    /// A macvlan link on a master in the fake host ([`MACVLAN_MASTER`]).
    Macvlan,
    /// An l2 ipvlan link on a master in the fake host ([`IPVLAN_MASTER`]).
    Ipvlan,
    /// VLAN [`VLAN_ID`] on a master in the fake host ([`VLAN_MASTER`]).
    Vlan,
    /// Moves a link of the fake host ([`HOST_DEVICE`]) into the pod.
    HostDevice,
    /// IPAM that hands out the address its configuration names.
    Static,
    /// Chained after a plugin that gave the pod `eth0`.
    Tuning,
    /// Chained after a plugin that gave the pod `eth0` with an address.
    Sbr,
    /// A veth pair with host routes, addresses from host-local.
    Ptp,
    /// A tap device in the pod, addresses from host-local.
    Tap,
    /// A dummy link in the pod, addresses from host-local.
    Dummy,
    /// Chained after a plugin that gave the pod `eth0` whose veth peer is in
    /// the fake host ([`Subject::host_peer`]), as bridge or ptp leave it.
    Bandwidth,
    /// Chained after a plugin that gave the pod an address; its iptables
    /// backend writes into the fake host.
    Firewall,
    /// Chained after a plugin that gave the pod `eth0` with an address.
    Vrf,
}

/// The master link of the macvlan scenarios, made in each fake host.
pub const MACVLAN_MASTER: &str = "suite-m0";
/// The master link of the ipvlan scenarios, made in each fake host.
pub const IPVLAN_MASTER: &str = "suite-i0";
/// The master link of the vlan scenarios, made in each fake host.
pub const VLAN_MASTER: &str = "suite-v0";
/// The VLAN id of the vlan scenarios' links.
pub const VLAN_ID: u64 = 100;
/// The link host-device scenarios move, made in each fake host.
pub const HOST_DEVICE: &str = "suite-hd0";
/// The address `static` scenarios configure, and the chained plugins'
/// prevResult gives the pod.
pub const POD_ADDRESS: &str = "10.99.0.5/24";
/// What `tuning` scenarios set on the pod's interface.
pub const TUNED_MTU: u64 = 1400;
const TUNED_SYSCTL: &str = "net.ipv4.conf.eth0.arp_ignore";
/// The table `sbr` picks first when the pod has no rules of its own.
const SBR_TABLE: &str = "100";
/// The VRF `vrf` scenarios put the pod's eth0 in.
const VRF_NAME: &str = "suite-vrf0";
/// The rate and burst of every direction in `bandwidth` scenarios.
const BANDWIDTH_RATE: u64 = 100_000_000;
const BANDWIDTH_BURST: u64 = 1_000_000;

/// The host port `portmap` scenarios publish.
pub const HOST_PORT: u16 = 18080;
pub const CONTAINER_PORT: u16 = 8080;

impl Subject {
    pub fn for_plugin(name: &str) -> Option<Subject> {
        match name {
            "loopback" => Some(Subject::Loopback),
            "host-local" => Some(Subject::HostLocal),
            "bridge" => Some(Subject::Bridge),
            "portmap" => Some(Subject::Portmap),
            "macvlan" => Some(Subject::Macvlan),
            "ipvlan" => Some(Subject::Ipvlan),
            "vlan" => Some(Subject::Vlan),
            "host-device" => Some(Subject::HostDevice),
            "static" => Some(Subject::Static),
            "tuning" => Some(Subject::Tuning),
            "sbr" => Some(Subject::Sbr),
            "ptp" => Some(Subject::Ptp),
            "tap" => Some(Subject::Tap),
            "dummy" => Some(Subject::Dummy),
            "bandwidth" => Some(Subject::Bandwidth),
            "firewall" => Some(Subject::Firewall),
            "vrf" => Some(Subject::Vrf),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Subject::Loopback => "loopback",
            Subject::HostLocal => "host-local",
            Subject::Bridge => "bridge",
            Subject::Portmap => "portmap",
            Subject::Macvlan => "macvlan",
            Subject::Ipvlan => "ipvlan",
            Subject::Vlan => "vlan",
            Subject::HostDevice => "host-device",
            Subject::Static => "static",
            Subject::Tuning => "tuning",
            Subject::Sbr => "sbr",
            Subject::Ptp => "ptp",
            Subject::Tap => "tap",
            Subject::Dummy => "dummy",
            Subject::Bandwidth => "bandwidth",
            Subject::Firewall => "firewall",
            Subject::Vrf => "vrf",
        }
    }

    pub fn network(self) -> String {
        format!("suite-{}", self.name())
    }

    pub fn ifname(self) -> &'static str {
        match self {
            Subject::Loopback => "lo",
            _ => "eth0",
        }
    }

    /// Whether the plugin opens CNI_NETNS (so a bad path must fail it).
    pub fn enters_netns(self) -> bool {
        matches!(
            self,
            Subject::Loopback
                | Subject::Bridge
                | Subject::Macvlan
                | Subject::Ipvlan
                | Subject::Vlan
                | Subject::HostDevice
                | Subject::Tuning
                | Subject::Sbr
                | Subject::Ptp
                | Subject::Tap
                | Subject::Dummy
                | Subject::Bandwidth
                | Subject::Vrf
        )
    }

    /// Whether the plugin takes values from CNI_ARGS (and so must refuse
    /// unknown keys unless `IgnoreUnknown` is set, as the reference does).
    pub fn reads_cni_args(self) -> bool {
        matches!(
            self,
            Subject::HostLocal
                | Subject::Bridge
                | Subject::Macvlan
                | Subject::Static
                | Subject::Tuning
                // Through their IPAM plugin, which reads them.
                | Subject::HostDevice
                | Subject::Ipvlan
                | Subject::Vlan
                | Subject::Ptp
                | Subject::Dummy
                // The MAC, and its IPAM's keys.
                | Subject::Tap
        )
    }

    /// Whether the plugin's ADD needs a prevResult (a chained plugin), so
    /// that versions without prevResult (below 0.3.0) cannot be run.
    pub fn needs_prev_result(self) -> bool {
        matches!(
            self,
            Subject::Portmap
                | Subject::Tuning
                | Subject::Sbr
                | Subject::Bandwidth
                | Subject::Firewall
                | Subject::Vrf
        )
    }

    /// The plugin's configuration at `version` (prevResult not included).
    pub fn conf(self, scene: &Scene, version: &str) -> Value {
        let name = self.network();
        match self {
            Subject::Loopback => json!({"cniVersion": version, "name": name, "type": "loopback"}),
            Subject::HostLocal => json!({
                "cniVersion": version, "name": name, "type": "host-local",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Bridge => json!({
                "cniVersion": version, "name": name, "type": "bridge",
                "bridge": BRIDGE, "isGateway": true,
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Portmap => json!({
                "cniVersion": version, "name": name, "type": "portmap",
                "capabilities": {"portMappings": true},
                "runtimeConfig": {"portMappings": [
                    {"hostPort": HOST_PORT, "containerPort": CONTAINER_PORT, "protocol": "tcp"}
                ]},
            }),
            Subject::Macvlan => json!({
                "cniVersion": version, "name": name, "type": "macvlan",
                "master": MACVLAN_MASTER, "mode": "bridge",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Ipvlan => json!({
                "cniVersion": version, "name": name, "type": "ipvlan",
                "master": IPVLAN_MASTER, "mode": "l2",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Vlan => json!({
                "cniVersion": version, "name": name, "type": "vlan",
                "master": VLAN_MASTER, "vlanId": VLAN_ID,
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::HostDevice => json!({
                "cniVersion": version, "name": name, "type": "host-device",
                "device": HOST_DEVICE,
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Static => json!({
                "cniVersion": version, "name": name, "type": "static",
                "ipam": {
                    "type": "static",
                    "addresses": [{"address": POD_ADDRESS, "gateway": GATEWAY}],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }),
            Subject::Tuning => json!({
                "cniVersion": version, "name": name, "type": "tuning",
                "mtu": TUNED_MTU, "promisc": true,
                "sysctl": {TUNED_SYSCTL: "1"},
                "dataDir": scene.work.join("tuning"),
            }),
            Subject::Sbr => json!({"cniVersion": version, "name": name, "type": "sbr"}),
            Subject::Ptp => json!({
                "cniVersion": version, "name": name, "type": "ptp",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Tap => json!({
                "cniVersion": version, "name": name, "type": "tap",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Dummy => json!({
                "cniVersion": version, "name": name, "type": "dummy",
                "ipam": scene.ipam(SUBNET),
            }),
            Subject::Bandwidth => json!({
                "cniVersion": version, "name": name, "type": "bandwidth",
                "ingressRate": BANDWIDTH_RATE, "ingressBurst": BANDWIDTH_BURST,
                "egressRate": BANDWIDTH_RATE, "egressBurst": BANDWIDTH_BURST,
            }),
            Subject::Firewall => json!({
                "cniVersion": version, "name": name, "type": "firewall", "backend": "iptables",
            }),
            Subject::Vrf => json!({
                "cniVersion": version, "name": name, "type": "vrf", "vrfname": VRF_NAME,
            }),
        }
    }

    /// The link the scenarios need in the fake host: the master of a
    /// macvlan, ipvlan or vlan link, or the device host-device moves.
    fn host_link(self) -> Option<&'static str> {
        match self {
            Subject::Macvlan => Some(MACVLAN_MASTER),
            Subject::Ipvlan => Some(IPVLAN_MASTER),
            Subject::Vlan => Some(VLAN_MASTER),
            Subject::HostDevice => Some(HOST_DEVICE),
            Subject::Loopback
            | Subject::HostLocal
            | Subject::Bridge
            | Subject::Portmap
            | Subject::Static
            | Subject::Tuning
            | Subject::Sbr
            | Subject::Ptp
            | Subject::Tap
            | Subject::Dummy
            | Subject::Bandwidth
            | Subject::Firewall
            | Subject::Vrf => None,
        }
    }

    /// The link type the scenarios make that a kernel may lack, as
    /// `ip link add link PARENT name NAME type ...` takes it.
    pub fn kernel_link_type(self) -> Option<&'static [&'static str]> {
        match self {
            Subject::Ipvlan => Some(&["ipvlan", "mode", "l2"]),
            Subject::Vlan => Some(&["vlan", "id", "1"]),
            Subject::Dummy => Some(&["dummy"]),
            Subject::Vrf => Some(&["vrf", "table", "10"]),
            Subject::Loopback
            | Subject::HostLocal
            | Subject::Bridge
            | Subject::Portmap
            | Subject::Macvlan
            | Subject::HostDevice
            | Subject::Static
            | Subject::Tuning
            | Subject::Sbr
            | Subject::Ptp
            | Subject::Tap
            | Subject::Bandwidth
            | Subject::Firewall => None,
        }
    }

    /// Why the scenarios cannot run on this kernel: `Ok(Some(reason))`
    /// when it cannot make the subject's link type (tried in a scratch
    /// namespace), `Ok(None)` when it can or none is needed, `Err` when
    /// the probe itself could not be set up.
    pub fn missing_kernel_support(self) -> Result<Option<String>, SandboxError> {
        let Some(link_type) = self.kernel_link_type() else {
            return Ok(None);
        };
        Ok(if kernel_makes_link(link_type)? {
            None
        } else {
            Some(format!(
                "this kernel cannot make {} links (`ip link add ... type {}` in a scratch netns: \
                 Unknown device type); they run on a kernel that has them, such as the qemu \
                 guest of conformance/tests/qemu_suite.rs",
                link_type[0],
                link_type.join(" ")
            ))
        })
    }

    /// What the pod and the fake host must hold before the plugin runs:
    /// the macvlan, ipvlan or vlan master, or host-device's device, in the
    /// host; for the chained plugins, the `eth0`
    /// their prevResult names (a veth whose peer stays in the pod), with
    /// its address for `sbr`, as the plugin before them would leave it.
    pub fn prepare(self, scene: &Scene, pod: &Netns) -> Result<(), String> {
        let ip = |ns: &Netns, args: &[&str]| ns.ip(args).map(|_| ()).map_err(|e| e.to_string());
        match self {
            Subject::Macvlan | Subject::Ipvlan | Subject::Vlan | Subject::HostDevice => {
                let Some(link) = self.host_link() else {
                    return Ok(());
                };
                if !scene.has_link(&scene.host, link)? {
                    // The peer's name is new each time: host-device moves
                    // the link into a pod, and the next scenario of the
                    // same host makes another while that peer still lives.
                    static NEXT: std::sync::atomic::AtomicU32 =
                        std::sync::atomic::AtomicU32::new(0);
                    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let peer = format!("suite-sp{n}");
                    ip(
                        &scene.host,
                        &["link", "add", link, "type", "veth", "peer", "name", &peer],
                    )?;
                    ip(&scene.host, &["link", "set", link, "up"])?;
                    ip(&scene.host, &["link", "set", &peer, "up"])?;
                }
                Ok(())
            }
            Subject::Bandwidth => {
                if scene.has_link(pod, "eth0")? {
                    return Ok(());
                }
                let peer = Subject::host_peer(pod);
                ip(
                    &scene.host,
                    &[
                        "link",
                        "add",
                        &peer,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        "eth0",
                        "netns",
                        pod.name(),
                    ],
                )?;
                ip(&scene.host, &["link", "set", &peer, "up"])?;
                ip(pod, &["link", "set", "eth0", "up"])?;
                ip(pod, &["address", "add", POD_ADDRESS, "dev", "eth0"])
            }
            Subject::Tuning | Subject::Sbr | Subject::Vrf => {
                if scene.has_link(pod, "eth0")? {
                    return Ok(());
                }
                ip(
                    pod,
                    &[
                        "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
                    ],
                )?;
                ip(pod, &["link", "set", "eth0p", "up"])?;
                ip(pod, &["link", "set", "eth0", "up"])?;
                if matches!(self, Subject::Sbr | Subject::Vrf) {
                    ip(pod, &["address", "add", POD_ADDRESS, "dev", "eth0"])?;
                    ip(
                        pod,
                        &["route", "add", "default", "via", GATEWAY, "dev", "eth0"],
                    )?;
                }
                Ok(())
            }
            Subject::Loopback
            | Subject::HostLocal
            | Subject::Bridge
            | Subject::Portmap
            | Subject::Static
            | Subject::Ptp
            | Subject::Tap
            | Subject::Dummy
            | Subject::Firewall => Ok(()),
        }
    }

    /// The fake host's end of a `bandwidth` pod's eth0: named after the
    /// pod, so the prevResult can name it too.
    fn host_peer(pod: &Netns) -> String {
        // FNV-1a of the pod's name, 8 hex digits: `suite-bw` + 7 fits the
        // 15 bytes of a link name.
        let hash = pod.name().bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        format!("suite-bw{:07x}", hash & 0x0fff_ffff)
    }

    /// What a chained plugin gets from the plugin before it: a result
    /// naming the pod's interface and an address, in `version`'s layout.
    pub fn prev_result(self, version: &str, pod: &Netns) -> Result<Option<Value>, String> {
        if !self.needs_prev_result() {
            return Ok(None);
        }
        let mac = match self {
            // The chained plugins read or change the real link: name its MAC.
            Subject::Tuning | Subject::Sbr | Subject::Vrf | Subject::Bandwidth => pod
                .link("eth0")
                .map_err(|e| e.to_string())?
                .and_then(|l| l["address"].as_str().map(str::to_string))
                .ok_or("no eth0 in the pod")?,
            _ => "0a:58:0a:63:00:05".to_string(),
        };
        let v1 = if self == Subject::Bandwidth {
            // bandwidth finds the host end among the interfaces without a
            // sandbox, as bridge and ptp list it.
            json!({
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": Subject::host_peer(pod)},
                    {"name": "eth0", "mac": mac, "sandbox": pod.path_string()},
                ],
                "ips": [{"address": POD_ADDRESS, "gateway": GATEWAY, "interface": 1}],
                "routes": [{"dst": "0.0.0.0/0", "gw": GATEWAY}],
            })
        } else {
            json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "mac": mac, "sandbox": pod.path_string()}],
                "ips": [{"address": POD_ADDRESS, "gateway": GATEWAY, "interface": 0}],
                "routes": [{"dst": "0.0.0.0/0", "gw": GATEWAY}],
            })
        };
        result_at(version, &v1).map(Some)
    }

    /// The configuration of one attachment, with prevResult, as a
    /// runtime sends it. Each vlan attachment gets a VLAN id of its own: a
    /// master holds each id once, and a pod netns an earlier scenario
    /// deleted may still hold its link (and id) for a moment, since the
    /// kernel destroys a netns's links asynchronously.
    pub fn conf_with_prev(
        self,
        scene: &Scene,
        version: &str,
        pod: &Netns,
    ) -> Result<Value, String> {
        self.prepare(scene, pod)?;
        let mut conf = self.conf(scene, version);
        if self == Subject::Vlan {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // 802.1Q ids go up to 4094.
            conf["vlanId"] = json!(VLAN_ID + n % (4094 - VLAN_ID));
        }
        if let Some(prev) = self.prev_result(version, pod)? {
            conf["prevResult"] = prev;
        }
        Ok(conf)
    }

    /// Whether ADD of `conf` did what it should, seen from outside the
    /// plugin.
    pub fn verify_added(
        self,
        scene: &Scene,
        pod: &Netns,
        version: &str,
        conf: &Value,
        result: &Value,
    ) -> Result<String, String> {
        match self {
            Subject::Loopback => {
                let lo = pod
                    .link("lo")
                    .map_err(|e| e.to_string())?
                    .ok_or("no lo in the pod")?;
                let up = lo["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"));
                if up {
                    Ok("lo is up in the pod".into())
                } else {
                    Err(format!("lo is not up in the pod: {lo}"))
                }
            }
            Subject::HostLocal => {
                let addrs = result_addresses(result);
                let leased = scene.leased(&self.network());
                let ip = addrs
                    .first()
                    .and_then(|a| a.split('/').next())
                    .ok_or_else(|| format!("no address in the result {result}"))?;
                if leased.iter().any(|l| l == ip) {
                    Ok(format!("leased {ip}"))
                } else {
                    Err(format!("result gives {ip} but the store holds {leased:?}"))
                }
            }
            Subject::Bridge => {
                let addrs = result_addresses(result);
                let want = addrs
                    .first()
                    .ok_or_else(|| format!("no address in the result {result}"))?;
                let have = pod.addresses("eth0").map_err(|e| e.to_string())?;
                if !have.contains(want) {
                    return Err(format!("pod eth0 has {have:?}, result says {want}"));
                }
                if !scene.has_link(&scene.host, BRIDGE)? {
                    return Err(format!("no bridge {BRIDGE} in the host"));
                }
                Ok(format!("pod eth0 has {want}"))
            }
            Subject::Portmap => {
                let prev = self
                    .prev_result(version, pod)?
                    .ok_or("no prevResult for portmap")?;
                if normalize_result(result) == normalize_result(&prev) {
                    Ok("prevResult passed through".into())
                } else {
                    Err(format!("result {result} differs from prevResult {prev}"))
                }
            }
            Subject::Macvlan => {
                let want = result_addresses(result)
                    .first()
                    .cloned()
                    .ok_or_else(|| format!("no address in the result {result}"))?;
                let link = pod
                    .ip_json(&["-d", "link", "show", "eth0"])
                    .map_err(|e| e.to_string())?;
                let info = &link[0]["linkinfo"];
                if info["info_kind"] != "macvlan" || info["info_data"]["mode"] != "bridge" {
                    return Err(format!("pod eth0 is not a bridge-mode macvlan: {link}"));
                }
                let have = pod.addresses("eth0").map_err(|e| e.to_string())?;
                if !have.contains(&want) {
                    return Err(format!("pod eth0 has {have:?}, result says {want}"));
                }
                Ok(format!("pod eth0 is a macvlan with {want}"))
            }
            Subject::Ipvlan => {
                let link = sublink_added(pod, result, "ipvlan")?;
                let data = &link["linkinfo"]["info_data"];
                if data["mode"] != "l2" {
                    return Err(format!("pod eth0 is not an l2 ipvlan: {link}"));
                }
                // An ipvlan link has its parent's MAC.
                let master = scene
                    .host
                    .link(IPVLAN_MASTER)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no {IPVLAN_MASTER} in the host"))?;
                if link["address"] != master["address"] {
                    return Err(format!(
                        "pod eth0 has MAC {}, its master {}",
                        link["address"], master["address"]
                    ));
                }
                Ok(
                    "pod eth0 is an l2 ipvlan with the master's MAC and the result's address"
                        .into(),
                )
            }
            Subject::Vlan => {
                let link = sublink_added(pod, result, "vlan")?;
                let data = &link["linkinfo"]["info_data"];
                if data["id"] != conf["vlanId"] || data["protocol"] != "802.1Q" {
                    return Err(format!(
                        "pod eth0 is not 802.1Q VLAN {}: {link}",
                        conf["vlanId"]
                    ));
                }
                Ok(format!(
                    "pod eth0 is VLAN {} with the result's address",
                    conf["vlanId"]
                ))
            }
            Subject::HostDevice => {
                let want = result_addresses(result)
                    .first()
                    .cloned()
                    .ok_or_else(|| format!("no address in the result {result}"))?;
                if scene.has_link(&scene.host, HOST_DEVICE)? {
                    return Err(format!("{HOST_DEVICE} is still in the host"));
                }
                let have = pod.addresses("eth0").map_err(|e| e.to_string())?;
                if !have.contains(&want) {
                    return Err(format!("pod eth0 has {have:?}, result says {want}"));
                }
                Ok(format!("{HOST_DEVICE} is the pod's eth0 with {want}"))
            }
            Subject::Static => {
                let addrs = result_addresses(result);
                if addrs.first().map(String::as_str) == Some(POD_ADDRESS) {
                    Ok(format!("gave {POD_ADDRESS}"))
                } else {
                    Err(format!(
                        "result gives {addrs:?}, config names {POD_ADDRESS}"
                    ))
                }
            }
            Subject::Tuning => {
                let link = pod
                    .link("eth0")
                    .map_err(|e| e.to_string())?
                    .ok_or("no eth0 in the pod")?;
                let promisc = link["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "PROMISC"));
                if link["mtu"] != TUNED_MTU || !promisc {
                    return Err(format!(
                        "pod eth0 is not tuned (mtu {TUNED_MTU}, promisc): {link}"
                    ));
                }
                let sysctl = pod
                    .exec("sysctl", &["-n", TUNED_SYSCTL])
                    .map_err(|e| e.to_string())?;
                if sysctl.trim() != "1" {
                    return Err(format!("{TUNED_SYSCTL} is {sysctl:?} in the pod, not 1"));
                }
                Ok("mtu, promisc and sysctl set".into())
            }
            Subject::Sbr => {
                let ip = POD_ADDRESS.split('/').next().unwrap_or_default();
                if !sbr_rule_present(pod, ip)? {
                    return Err(format!("no rule from {ip} to table {SBR_TABLE} in the pod"));
                }
                let table = pod
                    .ip(&["route", "show", "table", SBR_TABLE])
                    .map_err(|e| e.to_string())?;
                if !table.contains(&format!("default via {GATEWAY}")) {
                    return Err(format!("table {SBR_TABLE} has no default route: {table:?}"));
                }
                Ok(format!(
                    "rule from {ip} to table {SBR_TABLE} with its default route"
                ))
            }
            Subject::Ptp => {
                let link = sublink_added(pod, result, "veth")?;
                let ip = super::scene::first_ipv4(result)
                    .ok_or_else(|| format!("no IPv4 address in the result {result}"))?;
                // All of the pod's traffic goes through the host end, which
                // has a route back to the pod's address alone.
                let routes = scene
                    .host
                    .ip(&["route", "show", &format!("{ip}/32")])
                    .map_err(|e| e.to_string())?;
                if !routes.contains("dev veth") {
                    return Err(format!("no host route to {ip}/32 over a veth: {routes:?}"));
                }
                Ok(format!(
                    "pod eth0 is a veth ({}) with {ip}, host route to {ip}/32",
                    link["address"]
                ))
            }
            Subject::Tap => {
                sublink_added(pod, result, "tun")?;
                Ok("pod eth0 is a tap with the result's address".into())
            }
            Subject::Dummy => {
                sublink_added(pod, result, "dummy")?;
                Ok("pod eth0 is a dummy link with the result's address".into())
            }
            Subject::Bandwidth => {
                let peer = Subject::host_peer(pod);
                let qdiscs = scene
                    .host
                    .exec("tc", &["qdisc", "show", "dev", &peer])
                    .map_err(|e| e.to_string())?;
                if !qdiscs.contains("qdisc tbf") {
                    return Err(format!("no tbf on the host end {peer}: {qdiscs:?}"));
                }
                let ifbs = host_ifbs(&scene.host)?;
                if ifbs.is_empty() {
                    return Err("no ifb device in the host for egress".into());
                }
                Ok(format!("tbf on {peer}, egress through {}", ifbs.join(",")))
            }
            Subject::Firewall => {
                let rules = firewall_rules(scene)?;
                if rules.is_empty() {
                    return Err(format!("no filter rule admits {POD_ADDRESS} in the host"));
                }
                Ok(format!("{} filter rules for the pod", rules.len()))
            }
            Subject::Vrf => {
                let link = pod
                    .link("eth0")
                    .map_err(|e| e.to_string())?
                    .ok_or("no eth0 in the pod")?;
                if link["master"] != VRF_NAME {
                    return Err(format!("pod eth0 is not in {VRF_NAME}: {link}"));
                }
                Ok(format!("pod eth0 is in VRF {VRF_NAME}"))
            }
        }
    }

    /// Whether DEL undid what ADD did.
    pub fn verify_deleted(self, scene: &Scene, pod: &Netns) -> Result<String, String> {
        match self {
            Subject::Loopback | Subject::Portmap | Subject::Static => Ok(String::new()),
            Subject::Macvlan | Subject::Ipvlan | Subject::Vlan => {
                if scene.has_link(pod, "eth0")? {
                    return Err("pod still has eth0".into());
                }
                let leased = scene.leased(&self.network());
                if !leased.is_empty() {
                    return Err(format!("leases left: {leased:?}"));
                }
                if let Some(master) = self.host_link() {
                    if !scene.has_link(&scene.host, master)? {
                        return Err(format!("the master {master} is gone from the host"));
                    }
                }
                Ok("eth0 and lease gone, the master stays".into())
            }
            Subject::HostDevice => {
                if scene.has_link(pod, "eth0")? {
                    return Err("pod still has eth0".into());
                }
                if !scene.has_link(&scene.host, HOST_DEVICE)? {
                    return Err(format!("{HOST_DEVICE} is not back in the host"));
                }
                let leased = scene.leased(&self.network());
                if !leased.is_empty() {
                    return Err(format!("leases left: {leased:?}"));
                }
                Ok(format!("{HOST_DEVICE} back in the host, lease gone"))
            }
            Subject::Tuning => {
                // What ADD changed is put back; the sysctl stays, as the
                // reference leaves it.
                let link = pod
                    .link("eth0")
                    .map_err(|e| e.to_string())?
                    .ok_or("no eth0 in the pod")?;
                let promisc = link["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "PROMISC"));
                if link["mtu"] == TUNED_MTU || promisc {
                    return Err(format!("pod eth0 still tuned: {link}"));
                }
                Ok("mtu and promisc restored".into())
            }
            Subject::Sbr => {
                let ip = POD_ADDRESS.split('/').next().unwrap_or_default();
                if sbr_rule_present(pod, ip)? {
                    return Err(format!("the rule from {ip} is still in the pod"));
                }
                Ok("rule gone".into())
            }
            Subject::Tap | Subject::Dummy => {
                if scene.has_link(pod, "eth0")? {
                    return Err("pod still has eth0".into());
                }
                let leased = scene.leased(&self.network());
                if !leased.is_empty() {
                    return Err(format!("leases left: {leased:?}"));
                }
                Ok("eth0 and lease gone".into())
            }
            Subject::Bandwidth => {
                let ifbs = host_ifbs(&scene.host)?;
                if !ifbs.is_empty() {
                    return Err(format!("ifb devices left in the host: {ifbs:?}"));
                }
                Ok("ifb gone".into())
            }
            Subject::Firewall => {
                let rules = firewall_rules(scene)?;
                if !rules.is_empty() {
                    return Err(format!("rules for the pod left: {rules:?}"));
                }
                Ok("the pod's rules gone".into())
            }
            Subject::Vrf => {
                if scene.has_link(pod, VRF_NAME)? {
                    return Err(format!("{VRF_NAME} is still in the pod (no member left)"));
                }
                let link = pod
                    .link("eth0")
                    .map_err(|e| e.to_string())?
                    .ok_or("no eth0 in the pod")?;
                if link.get("master").is_some() {
                    return Err(format!("pod eth0 still has a master: {link}"));
                }
                Ok("eth0 out of the VRF, the VRF gone".into())
            }
            Subject::HostLocal => {
                let leased = scene.leased(&self.network());
                if leased.is_empty() {
                    Ok("lease released".into())
                } else {
                    Err(format!("leases left: {leased:?}"))
                }
            }
            Subject::Bridge | Subject::Ptp => {
                if scene.has_link(pod, "eth0")? {
                    return Err("pod still has eth0".into());
                }
                let leased = scene.leased(&self.network());
                if !leased.is_empty() {
                    return Err(format!("leases left: {leased:?}"));
                }
                // A scenario before this one may have deleted its pod netns;
                // the kernel destroys that netns's veths asynchronously
                // (cleanup_net runs from a workqueue), so give such leftovers
                // a bounded moment. A veth our DEL left behind stays, since
                // this pod's netns still exists, and still fails the check.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
                let mut veths = scene.host_veths()?;
                while !veths.is_empty() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    veths = scene.host_veths()?;
                }
                if !veths.is_empty() {
                    return Err(format!("host veths left: {veths:?}"));
                }
                Ok("eth0, veth and lease gone".into())
            }
        }
    }
}

/// The pod's `eth0` (`ip -d -j link`) when it is a link of `kind` with the
/// result's first address.
fn sublink_added(pod: &Netns, result: &Value, kind: &str) -> Result<Value, String> {
    let want = result_addresses(result)
        .first()
        .cloned()
        .ok_or_else(|| format!("no address in the result {result}"))?;
    let links = pod
        .ip_json(&["-d", "link", "show", "eth0"])
        .map_err(|e| e.to_string())?;
    let link = links[0].clone();
    if link["linkinfo"]["info_kind"] != kind {
        return Err(format!("pod eth0 is not a {kind} link: {links}"));
    }
    let have = pod.addresses("eth0").map_err(|e| e.to_string())?;
    if !have.contains(&want) {
        return Err(format!("pod eth0 has {have:?}, result says {want}"));
    }
    Ok(link)
}

/// Whether the pod has a policy rule from `ip` to sbr's first table.
fn sbr_rule_present(pod: &Netns, ip: &str) -> Result<bool, String> {
    let rules = pod.ip_json(&["rule", "show"]).map_err(|e| e.to_string())?;
    Ok(rules.as_array().is_some_and(|rules| {
        rules
            .iter()
            .any(|r| r["src"] == ip && r["table"] == SBR_TABLE)
    }))
}

/// The ifb devices of `host` (bandwidth's egress side).
pub(super) fn host_ifbs(host: &Netns) -> Result<Vec<String>, String> {
    let links = host
        .ip_json(&["-d", "link", "show", "type", "ifb"])
        .map_err(|e| e.to_string())?;
    Ok(links
        .as_array()
        .map(|links| {
            links
                .iter()
                .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// The fake host's filter-table rules that name the pod's address (the
/// firewall plugin's iptables backend).
fn firewall_rules(scene: &Scene) -> Result<Vec<String>, String> {
    let ip = POD_ADDRESS.split('/').next().unwrap_or_default();
    let saved = scene
        .host
        .exec("iptables-save", &["-t", "filter"])
        .map_err(|e| e.to_string())?;
    Ok(saved
        .lines()
        .filter(|l| l.starts_with("-A ") && l.contains(&format!(" {ip}/32 ")))
        .map(str::to_string)
        .collect())
}
