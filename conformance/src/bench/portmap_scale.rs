//! portmap alone, with many pods' rules already in the nat table: the ADD
//! (and DEL) of one more pod with no pods' rules present and with `pods`
//! pods' rules present, ours against the reference.
//!
//! The configuration names no `backend` (each side picks its own, iptables
//! here), or names one for both: with `nftables`, ours uses its nftables
//! backend while the reference 1.1.1, which has none, ignores the key and
//! stays on iptables; the rows say which backend each side used.
//!
//! portmap is called directly with a made-up prevResult, so no bridge,
//! veth or IPAM runs and the figure is the cost of portmap alone. Each side
//! gets its own fake host namespace, so the two rule sets never share a
//! table, and the sides alternate call by call so that drift of a shared
//! machine hits both alike.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use libcni::netns::NetNs;
use serde_json::json;

use super::chain::{median, Side};
use super::Row;
use crate::testnet::TestNetns;

/// Pod addresses come from this /16 and host ports from 20000 up, so the
/// pod count is bounded by the port range.
const MAX_PODS: usize = 40_000;
const FIRST_FILL_PORT: usize = 20_000;
/// The probe pod is deleted before the next one is added, so one port and
/// one address serve every probe.
const PROBE_PORT: u16 = 19_999;
const PROBE_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 88, 255, 250);
const NETWORK: &str = "portmap-scale";
/// The chains portmap creates once per host and keeps (both plugins keep
/// them after the last DEL); anything else named CNI-* is a leftover.
const SHARED_CHAINS: [&str; 3] = [
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-SETMARK",
    "CNI-HOSTPORT-MASQ",
];

#[derive(Debug, thiserror::Error)]
pub enum PortmapScaleError {
    #[error("{side:?} portmap {command} of {container} exited with {code}: stdout {stdout} stderr {stderr}")]
    Plugin {
        side: Side,
        command: String,
        container: String,
        code: i32,
        stdout: String,
        stderr: String,
    },
    #[error("cannot run {plugin}: {source}")]
    Spawn {
        plugin: String,
        source: std::io::Error,
    },
    #[error("at most {MAX_PODS} pods fit the address and port plan, not {0}")]
    TooManyPods(usize),
    #[error("netns: {0}")]
    NetNs(#[from] libcni::netns::NetNsError),
}

/// Raw figures, in milliseconds; arrays are [ours, reference].
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PortmapScaleFigures {
    pub pods: usize,
    pub rounds: usize,
    /// The `backend` key given to both sides, if any.
    pub requested_backend: Option<String>,
    /// The backend each side used.
    pub backend: [String; 2],
    pub empty_add_ms: [Vec<f64>; 2],
    pub empty_del_ms: [Vec<f64>; 2],
    pub full_add_ms: [Vec<f64>; 2],
    pub full_del_ms: [Vec<f64>; 2],
    /// ADD of fill pod i, with i pods' rules present.
    pub fill_add_ms: [Vec<f64>; 2],
    /// DEL of the fill pods, oldest first, with fewer and fewer present.
    pub teardown_del_ms: [Vec<f64>; 2],
    /// Chains and rules still in the nat table after every pod was
    /// deleted (should be empty).
    pub leftovers: [Vec<String>; 2],
}

/// One pod's attachment as portmap sees it.
struct Attachment {
    container_id: String,
    address: Ipv4Addr,
    host_port: u16,
}

impl Attachment {
    fn fill(n: usize) -> Attachment {
        // n < MAX_PODS, so both fit: 40000 / 250 < 256, 20000 + 40000 < 65536.
        let third = u8::try_from(n / 250).unwrap_or(u8::MAX);
        let fourth = u8::try_from(n % 250 + 2).unwrap_or(u8::MAX);
        Attachment {
            container_id: format!("pmscale-fill-{n}"),
            address: Ipv4Addr::new(10, 88, third, fourth),
            host_port: u16::try_from(FIRST_FILL_PORT + n).unwrap_or(u16::MAX),
        }
    }

    fn probe(phase: &str, round: usize) -> Attachment {
        Attachment {
            container_id: format!("pmscale-{phase}-{round}"),
            address: PROBE_ADDRESS,
            host_port: PROBE_PORT,
        }
    }
}

/// One side: its plugin, its fake host namespace (with a bridge routing
/// the pod subnet, as on a node) and the pod namespace every attachment
/// names (portmap never enters it, but CNI_NETNS must exist).
struct SideHost {
    side: Side,
    backend: Option<String>,
    plugin: PathBuf,
    plugin_dir: String,
    host: TestNetns,
    host_ns: NetNs,
    pod: TestNetns,
}

impl SideHost {
    fn new(
        side: Side,
        plugin_dir: &Path,
        backend: Option<&str>,
    ) -> Result<SideHost, PortmapScaleError> {
        let host = TestNetns::new("pm-host");
        host.ip(&["link", "add", "cni0", "type", "bridge"]);
        host.ip(&["addr", "add", "10.88.0.1/16", "dev", "cni0"]);
        host.ip(&["link", "set", "cni0", "up"]);
        let host_ns = NetNs::open(host.path())?;
        Ok(SideHost {
            side,
            backend: backend.map(str::to_string),
            plugin: plugin_dir.join("portmap"),
            plugin_dir: plugin_dir.display().to_string(),
            host,
            host_ns,
            pod: TestNetns::new("pm-pod"),
        })
    }

    fn config(&self, att: &Attachment) -> Vec<u8> {
        let mut conf = json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "portmap",
            "capabilities": {"portMappings": true},
            "snat": true,
            "runtimeConfig": {
                "portMappings": [
                    {"hostPort": att.host_port, "containerPort": 80, "protocol": "tcp"}
                ]
            },
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "cni0", "mac": "0a:58:0a:58:00:01"},
                    {"name": "vethpmscale", "mac": "0a:58:0a:58:00:02"},
                    {"name": "eth0", "mac": "0a:58:0a:58:00:03", "sandbox": self.pod.path()}
                ],
                "ips": [
                    {"address": format!("{}/16", att.address), "gateway": "10.88.0.1", "interface": 2}
                ]
            }
        });
        if let (Some(backend), Some(object)) = (&self.backend, conf.as_object_mut()) {
            object.insert("backend".into(), json!(backend));
        }
        serde_json::to_vec(&conf).unwrap_or_default()
    }

    /// Runs portmap once inside the fake host namespace and returns how
    /// long the process took, from spawn to exit.
    fn call(&self, command: &str, att: &Attachment) -> Result<Duration, PortmapScaleError> {
        let mut env = BTreeMap::new();
        env.insert("PATH", "/usr/sbin:/usr/bin:/sbin:/bin".to_string());
        env.insert("CNI_COMMAND", command.to_string());
        env.insert("CNI_CONTAINERID", att.container_id.clone());
        env.insert("CNI_NETNS", self.pod.path().display().to_string());
        env.insert("CNI_IFNAME", "eth0".to_string());
        env.insert("CNI_PATH", self.plugin_dir.clone());
        let stdin = self.config(att);
        let plugin = &self.plugin;
        // The plugin is a child of a thread inside the host namespace, so
        // it starts there, as a runtime on that host would start it. The
        // settle step runs there too: nf_tables keeps its deferred frees
        // per namespace.
        let (took, out) = self
            .host_ns
            .run(|| {
                super::settle();
                let start = Instant::now();
                let mut child = Command::new(plugin)
                    .env_clear()
                    .envs(&env)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()?;
                if let Some(mut input) = child.stdin.take() {
                    let _ = input.write_all(&stdin);
                }
                let out = child.wait_with_output()?;
                Ok::<_, std::io::Error>((start.elapsed(), out))
            })?
            .map_err(|source| PortmapScaleError::Spawn {
                plugin: plugin.display().to_string(),
                source,
            })?;
        if !out.status.success() {
            return Err(PortmapScaleError::Plugin {
                side: self.side,
                command: command.to_string(),
                container: att.container_id.clone(),
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(took)
    }

    fn stdout_of(&self, program: &str, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.host.exec(program, args).stdout).into_owned()
    }

    /// Which backend holds rules right now (call while a pod is attached).
    fn backend_in_use(&self) -> String {
        if self
            .stdout_of("iptables-save", &["-t", "nat"])
            .contains("CNI-HOSTPORT-DNAT")
        {
            "iptables".to_string()
        } else if self
            .stdout_of("nft", &["list", "tables"])
            .contains("cni_hostport")
        {
            "nftables".to_string()
        } else {
            "none found".to_string()
        }
    }

    /// Per-pod chains and rules still present in either family.
    fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for tool in ["iptables-save", "ip6tables-save"] {
            let saved = self.stdout_of(tool, &["-t", "nat"]);
            left.extend(
                per_pod_lines(&saved)
                    .into_iter()
                    .map(|line| format!("{tool}: {line}")),
            );
        }
        for family in ["ip", "ip6"] {
            let out = self
                .host
                .exec("nft", &["list", "table", family, "cni_hostport"]);
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains("dnat") {
                    left.push(format!("nft {family}: {}", line.trim()));
                }
            }
        }
        left
    }
}

/// Lines of an `iptables-save -t nat` listing that belong to some pod:
/// declarations of CNI-* chains other than the shared ones, and entries
/// of the top-level DNAT chain.
fn per_pod_lines(saved: &str) -> Vec<&str> {
    saved
        .lines()
        .filter(|line| {
            let chain = line
                .strip_prefix(':')
                .and_then(|l| l.split_whitespace().next());
            let pod_chain =
                chain.is_some_and(|c| c.starts_with("CNI-") && !SHARED_CHAINS.contains(&c));
            pod_chain || line.starts_with("-A CNI-HOSTPORT-DNAT ")
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Probe ADD+DEL rounds over both sides' empty and full hosts, rotating
/// which of the four goes first, so that the empty and the full figures
/// come from the same stretch of time.
fn probe_rounds(
    empty: &[SideHost; 2],
    full: &[SideHost; 2],
    rounds: usize,
    figs: &mut PortmapScaleFigures,
) -> Result<(), PortmapScaleError> {
    for round in 0..rounds {
        for k in 0..4 {
            let slot = (round + k) % 4;
            let i = slot % 2;
            let (host, phase, add_ms, del_ms) = if slot < 2 {
                (
                    &empty[i],
                    "empty",
                    &mut figs.empty_add_ms,
                    &mut figs.empty_del_ms,
                )
            } else {
                (
                    &full[i],
                    "full",
                    &mut figs.full_add_ms,
                    &mut figs.full_del_ms,
                )
            };
            let att = Attachment::probe(phase, round);
            add_ms[i].push(ms(host.call("ADD", &att)?));
            del_ms[i].push(ms(host.call("DEL", &att)?));
        }
    }
    Ok(())
}

/// Gives each side two fake hosts, adds `pods` pods to one of them,
/// measures the probe pod on all four alternately (measured one phase
/// after the other, the machine's drift between the phases moved the
/// ratio by 0.3-0.5), then deletes every pod and looks for leftovers.
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    pods: usize,
    rounds: usize,
    backend: Option<&str>,
) -> Result<(PortmapScaleFigures, Vec<Row>), PortmapScaleError> {
    if pods > MAX_PODS {
        return Err(PortmapScaleError::TooManyPods(pods));
    }
    let empty = [
        SideHost::new(Side::Ours, ours_dir, backend)?,
        SideHost::new(Side::Reference, reference_dir, backend)?,
    ];
    let sides = [
        SideHost::new(Side::Ours, ours_dir, backend)?,
        SideHost::new(Side::Reference, reference_dir, backend)?,
    ];
    let mut figs = PortmapScaleFigures {
        pods,
        rounds,
        requested_backend: backend.map(str::to_string),
        ..PortmapScaleFigures::default()
    };
    // The first ADD on a host creates the shared chains and jumps; keep it
    // out of the timing, and learn the backend while its rules are there.
    let warm = Attachment::probe("warm", 0);
    for (i, (empty_host, side)) in empty.iter().zip(&sides).enumerate() {
        empty_host.call("ADD", &warm)?;
        empty_host.call("DEL", &warm)?;
        side.call("ADD", &warm)?;
        figs.backend[i] = side.backend_in_use();
        side.call("DEL", &warm)?;
    }
    eprintln!("portmap-scale: adding {pods} pods per side");
    for n in 0..pods {
        for k in 0..2 {
            let i = (n + k) % 2;
            figs.fill_add_ms[i].push(ms(sides[i].call("ADD", &Attachment::fill(n))?));
        }
    }
    probe_rounds(&empty, &sides, rounds, &mut figs)?;
    eprintln!("portmap-scale: deleting {pods} pods per side");
    for n in 0..pods {
        for k in 0..2 {
            let i = (n + k) % 2;
            figs.teardown_del_ms[i].push(ms(sides[i].call("DEL", &Attachment::fill(n))?));
        }
    }
    for (i, side) in sides.iter().enumerate() {
        figs.leftovers[i] = side.leftovers();
        figs.leftovers[i].extend(empty[i].leftovers());
        if !figs.leftovers[i].is_empty() {
            eprintln!(
                "portmap-scale: {:?} left {} chains/rules after deleting every pod: {:?}",
                side.side,
                figs.leftovers[i].len(),
                figs.leftovers[i]
            );
        }
    }
    if figs.backend[0] != figs.backend[1] && backend.is_none() {
        eprintln!(
            "portmap-scale: the sides used different backends: ours {}, reference {}",
            figs.backend[0], figs.backend[1]
        );
    }
    let rows = rows(&figs);
    Ok((figs, rows))
}

fn rows(figs: &PortmapScaleFigures) -> Vec<Row> {
    let pods = figs.pods;
    let backend = if figs.backend[0] == figs.backend[1] {
        figs.backend[0].clone()
    } else {
        format!("ours {}, reference {}", figs.backend[0], figs.backend[1])
    };
    let med = |v: &[Vec<f64>; 2], i: usize| v.get(i).map(|s| median(s)).unwrap_or(f64::NAN);
    let mut rows = vec![
        Row::new(
            format!("portmap ADD, no rules ({backend}, median)"),
            med(&figs.empty_add_ms, 0),
            med(&figs.empty_add_ms, 1),
            "ms",
        ),
        Row::new(
            format!("portmap ADD, {pods} pods' rules ({backend}, median)"),
            med(&figs.full_add_ms, 0),
            med(&figs.full_add_ms, 1),
            "ms",
        ),
    ];
    for (i, side) in ["ours", "reference"].iter().enumerate() {
        rows.push(
            Row::new(
                format!(
                    "portmap {side} ({}): ADD with {pods} pods' rules vs none",
                    figs.backend[i]
                ),
                med(&figs.full_add_ms, i),
                med(&figs.empty_add_ms, i),
                "ms",
            )
            .with_target(1.2),
        );
    }
    rows.push(Row::new(
        format!("portmap DEL, no rules ({backend}, median)"),
        med(&figs.empty_del_ms, 0),
        med(&figs.empty_del_ms, 1),
        "ms",
    ));
    rows.push(Row::new(
        format!("portmap DEL, {pods} pods' rules ({backend}, median)"),
        med(&figs.full_del_ms, 0),
        med(&figs.full_del_ms, 1),
        "ms",
    ));
    for (i, side) in ["ours", "reference"].iter().enumerate() {
        rows.push(Row::new(
            format!(
                "portmap {side} ({}): DEL with {pods} pods' rules vs none",
                figs.backend[i]
            ),
            med(&figs.full_del_ms, i),
            med(&figs.empty_del_ms, i),
            "ms",
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_pod_lines_skip_shared_chains() {
        let saved = "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-DN-46138fe09de03b8d1578b - [0:0]\n\
            :CNI-HOSTPORT-DNAT - [0:0]\n:CNI-HOSTPORT-MASQ - [0:0]\n:CNI-HOSTPORT-SETMARK - [0:0]\n\
            -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\n\
            -A CNI-DN-46138fe09de03b8d1578b -p tcp -m tcp --dport 20001 -j DNAT --to-destination 10.88.0.5:80\n\
            -A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 20001 -j CNI-DN-46138fe09de03b8d1578b\n\
            -A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE\nCOMMIT\n";
        assert_eq!(
            per_pod_lines(saved),
            vec![
                ":CNI-DN-46138fe09de03b8d1578b - [0:0]",
                "-A CNI-HOSTPORT-DNAT -p tcp -m multiport --dports 20001 -j CNI-DN-46138fe09de03b8d1578b",
            ]
        );
        let clean = "*nat\n:CNI-HOSTPORT-DNAT - [0:0]\n\
            -A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT\nCOMMIT\n";
        assert!(per_pod_lines(clean).is_empty());
    }

    #[test]
    fn fill_attachments_are_distinct_and_in_range() {
        let mut addresses = std::collections::HashSet::new();
        let mut ports = std::collections::HashSet::new();
        for n in 0..MAX_PODS {
            let att = Attachment::fill(n);
            assert!(addresses.insert(att.address), "address of pod {n} repeats");
            assert!(ports.insert(att.host_port), "port of pod {n} repeats");
            assert_ne!(att.address, PROBE_ADDRESS);
            assert_ne!(att.host_port, PROBE_PORT);
            assert_ne!(att.address, Ipv4Addr::new(10, 88, 0, 1));
        }
    }
}
