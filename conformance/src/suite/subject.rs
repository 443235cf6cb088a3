//! How the suite drives each plugin type on its own: the configuration it
//! gets, the interface name, what a chained plugin gets as prevResult, and
//! how to see that ADD took effect and DEL undid it.

use serde_json::{json, Value};

use super::sandbox::Netns;
use super::scene::{result_at, Scene, BRIDGE, GATEWAY, SUBNET};
use super::shape::{normalize_result, result_addresses};

/// A plugin type the suite exercises directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    Loopback,
    HostLocal,
    Bridge,
    Portmap,
}

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
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Subject::Loopback => "loopback",
            Subject::HostLocal => "host-local",
            Subject::Bridge => "bridge",
            Subject::Portmap => "portmap",
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
        matches!(self, Subject::Loopback | Subject::Bridge)
    }

    /// Whether the plugin takes values from CNI_ARGS (and so must refuse
    /// unknown keys unless `IgnoreUnknown` is set, as the reference does).
    pub fn reads_cni_args(self) -> bool {
        matches!(self, Subject::HostLocal | Subject::Bridge)
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
        }
    }

    /// What a chained plugin gets from the plugin before it: a result
    /// naming the pod's interface and an address, in `version`'s layout.
    pub fn prev_result(self, version: &str, pod: &Netns) -> Result<Option<Value>, String> {
        if self != Subject::Portmap {
            return Ok(None);
        }
        let v1 = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:63:00:05", "sandbox": pod.path_string()}],
            "ips": [{"address": "10.99.0.5/24", "gateway": GATEWAY, "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": GATEWAY}],
        });
        result_at(version, &v1).map(Some)
    }

    /// The configuration with prevResult, as a runtime sends it.
    pub fn conf_with_prev(
        self,
        scene: &Scene,
        version: &str,
        pod: &Netns,
    ) -> Result<Value, String> {
        let mut conf = self.conf(scene, version);
        if let Some(prev) = self.prev_result(version, pod)? {
            conf["prevResult"] = prev;
        }
        Ok(conf)
    }

    /// Whether ADD did what it should, seen from outside the plugin.
    pub fn verify_added(
        self,
        scene: &Scene,
        pod: &Netns,
        version: &str,
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
        }
    }

    /// Whether DEL undid what ADD did.
    pub fn verify_deleted(self, scene: &Scene, pod: &Netns) -> Result<String, String> {
        match self {
            Subject::Loopback | Subject::Portmap => Ok(String::new()),
            Subject::HostLocal => {
                let leased = scene.leased(&self.network());
                if leased.is_empty() {
                    Ok("lease released".into())
                } else {
                    Err(format!("leases left: {leased:?}"))
                }
            }
            Subject::Bridge => {
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
