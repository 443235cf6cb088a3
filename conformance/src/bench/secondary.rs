//! Plugins one at a time: ADD+DEL of one attachment, ours against the
//! reference plugin of the same name, and the peak RSS of the ADD. Two
//! groups use it: the plugins of secondary networks ([`PLUGINS`]) and the
//! rest of the reference suite's main and meta plugins ([`REST`]).
//!
//! Each round gets a fresh pod (made outside the timing), so that what a
//! plugin leaves on purpose after DEL (sbr moves the interface's routes into
//! its table and does not move them back, as the reference does) never
//! changes the next round. The plugins run inside a fake host namespace of
//! their side, where the links they need (a macvlan master, the device
//! host-device moves) are made once.
//!
//! A third side runs an empty program in the plugin's place (it reads its
//! input, prints `{}` and exits: [`EmptyProgram`]), timed the same way in
//! the same rounds: the floor that starting and ending any process costs
//! under this harness on this machine, which no plugin can go below. It
//! has no target; it tells how much of a ratio is the machine's.

use std::path::{Path, PathBuf};

use libcni::netns::NetNs;
use serde_json::{json, Value};

use super::{settle, Row, StateRoot};
use crate::measure::{run_ok, run_ok_timed, summarize, MeasureError};
use crate::testnet::TestNetns;

/// The plugins this group measures, in report order. ipvlan and vlan are
/// missing because this kernel has neither link type.
pub const PLUGINS: [&str; 5] = ["macvlan", "host-device", "static", "tuning", "sbr"];

/// The `rest` group: ptp on its own with host-local; bandwidth and
/// firewall chained behind a veth pod as bridge or ptp would leave it
/// (bandwidth shapes both directions, so it makes its ifb too; firewall
/// uses its iptables backend in the fake host). dummy and vrf are missing
/// because this kernel has neither link type.
pub const REST: [&str; 3] = ["ptp", "bandwidth", "firewall"];

/// The host end of a chained plugin's pod veth: a new name each round,
/// since the kernel removes the previous round's with its pod netns only
/// after the netns is gone, asynchronously.
fn pod_host_veth(pod: &TestNetns) -> String {
    let hash = pod.name().bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("bench-pv{:07x}", hash & 0x0fff_ffff)
}

const MASTER: &str = "bench-m0";
const DEVICE: &str = "bench-hd0";
const POD_ADDRESS: &str = "10.98.0.5/24";
const GATEWAY: &str = "10.98.0.1";

#[derive(Debug, thiserror::Error)]
pub enum SecondaryError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error(transparent)]
    NetNs(#[from] libcni::netns::NetNsError),
    #[error("{plugin}: {what}")]
    Setup { plugin: String, what: String },
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SecondaryFigures {
    pub plugin: String,
    /// [ours, reference] ADD+DEL times, ms.
    pub add_del_ms: [Vec<f64>; 2],
    /// ADD+DEL times of an empty program in the plugin's place, ms (empty
    /// where it could not be built: see [`EmptyProgram`]).
    pub empty_program_add_del_ms: Vec<f64>,
    /// [ours, reference] peak RSS of ADD, KiB.
    pub add_rss_kib: [u64; 2],
}

/// One side: its plugin directory, fake host and state folder.
struct Side {
    dir: PathBuf,
    host: TestNetns,
    host_ns: NetNs,
    state: PathBuf,
}

impl Side {
    fn new(plugin: &str, dir: &Path, tag: &str, work: &Path) -> Result<Side, SecondaryError> {
        let host = TestNetns::new(tag);
        let host_ns = NetNs::open(host.path())?;
        let state = work.join(tag);
        std::fs::create_dir_all(&state).map_err(|e| setup(plugin, format!("state dir: {e}")))?;
        let side = Side {
            dir: dir.to_path_buf(),
            host,
            host_ns,
            state,
        };
        // Both ends of a veth stay in the host: one is the macvlan master
        // or the device to move, the other keeps its carrier up.
        let link = match plugin {
            "macvlan" => Some(MASTER),
            "host-device" => Some(DEVICE),
            _ => None,
        };
        if let Some(link) = link {
            let peer = format!("{link}p");
            side.host
                .ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
            side.host.ip(&["link", "set", link, "up"]);
            side.host.ip(&["link", "set", &peer, "up"]);
        }
        Ok(side)
    }

    /// A pod as the plugin expects it: for the chained plugins an `eth0`
    /// (with its address and default route for sbr), as the plugin before
    /// them leaves it.
    fn pod(&self, plugin: &str) -> TestNetns {
        let pod = TestNetns::new("bench-sec");
        if matches!(plugin, "bandwidth" | "firewall") {
            // The pod's eth0 with its peer in the fake host, as bridge or
            // ptp leaves it.
            let host_veth = pod_host_veth(&pod);
            self.host.ip(&[
                "link",
                "add",
                &host_veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &pod.path().display().to_string(),
            ]);
            self.host.ip(&["link", "set", &host_veth, "up"]);
            pod.ip(&["address", "add", POD_ADDRESS, "dev", "eth0"]);
            pod.ip(&["link", "set", "eth0", "up"]);
        }
        if matches!(plugin, "tuning" | "sbr") {
            pod.ip(&[
                "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
            ]);
            pod.ip(&["link", "set", "eth0p", "up"]);
            pod.ip(&["link", "set", "eth0", "up"]);
            if plugin == "sbr" {
                pod.ip(&["address", "add", POD_ADDRESS, "dev", "eth0"]);
                pod.ip(&["route", "add", "default", "via", GATEWAY, "dev", "eth0"]);
            }
        }
        pod
    }

    fn conf(&self, plugin: &str, pod: &TestNetns) -> Value {
        let prev = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
            "ips": [{"address": POD_ADDRESS, "gateway": GATEWAY, "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": GATEWAY}],
        });
        let chained_prev = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": pod_host_veth(pod)},
                {"name": "eth0", "sandbox": pod.path()},
            ],
            "ips": [{"address": POD_ADDRESS, "gateway": GATEWAY, "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": GATEWAY}],
        });
        let name = format!("bench-{plugin}");
        // 1.0.0: the highest version both sides speak.
        match plugin {
            "macvlan" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "macvlan",
                "master": MASTER, "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.98.0.0/24"}]],
                    "dataDir": self.state.join("leases"),
                },
            }),
            "host-device" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "host-device", "device": DEVICE,
            }),
            "static" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "static",
                "ipam": {
                    "type": "static",
                    "addresses": [{"address": POD_ADDRESS, "gateway": GATEWAY}],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }),
            "tuning" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "tuning",
                "mtu": 1400, "promisc": true,
                "sysctl": {"net.ipv4.conf.eth0.arp_ignore": "1"},
                "dataDir": self.state.join("tuning"),
                "prevResult": prev,
            }),
            "ptp" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "ptp", "ipMasq": true, "mtu": 1400,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.98.0.0/24"}]],
                    "dataDir": self.state.join("leases"),
                },
            }),
            "bandwidth" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "bandwidth",
                "ingressRate": 100_000_000u64, "ingressBurst": 1_000_000u64,
                "egressRate": 100_000_000u64, "egressBurst": 1_000_000u64,
                "prevResult": chained_prev,
            }),
            "firewall" => json!({
                "cniVersion": "1.0.0", "name": name, "type": "firewall", "backend": "iptables",
                "prevResult": chained_prev,
            }),
            _ => json!({"cniVersion": "1.0.0", "name": name, "type": "sbr", "prevResult": prev}),
        }
    }

    /// One call inside the side's fake host (plugins are children of the
    /// thread that starts them, so that thread enters the host first):
    /// timed, or (`measure` = [`Measure::PeakRss`]) for its peak RSS.
    fn call(
        &self,
        plugin: &str,
        command: &str,
        pod: &TestNetns,
        cid: &str,
        conf: &[u8],
        measure: Measure,
    ) -> Result<Cost, SecondaryError> {
        let netns = pod.path().display().to_string();
        let cni_path = self.dir.display().to_string();
        let policy = crate::testnet::scratch_policy().display().to_string();
        let env = [
            // The bench's scratch dataDir is allowed by the tests' policy.
            (libcni::confine::POLICY_ENV, policy.as_str()),
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", cni_path.as_str()),
            // ptp's ipMasq and firewall run iptables, as under a runtime.
            ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        ];
        let program = self.dir.join(plugin);
        Ok(self.host_ns.run(|| {
            settle();
            match measure {
                Measure::Time => run_ok_timed(&program, &env, conf).map(Cost::Wall),
                Measure::PeakRss => {
                    run_ok(&program, &env, conf).map(|c| Cost::RssKib(c.max_rss_kib))
                }
            }
        })??)
    }
}

/// What a call is run for: the two need different ways of starting the
/// plugin (see [`run_ok_timed`]).
#[derive(Clone, Copy)]
enum Measure {
    Time,
    PeakRss,
}

enum Cost {
    Wall(std::time::Duration),
    RssKib(u64),
}

/// Rounds before the timed ones, run for peak RSS (and so that the page
/// cache holds both binaries before timing starts).
const RSS_ROUNDS: usize = 3;

fn setup(plugin: &str, what: String) -> SecondaryError {
    SecondaryError::Setup {
        plugin: plugin.to_string(),
        what,
    }
}

/// Measures `plugin` from both directories, alternating which side goes
/// first each round.
pub fn measure(
    plugin: &str,
    ours_dir: &Path,
    reference_dir: &Path,
    rounds: usize,
    state: &StateRoot,
) -> Result<(SecondaryFigures, Vec<Row>), SecondaryError> {
    let work = state
        .work_dir(&format!("cni-bench-{plugin}"))
        .map_err(|e| {
            setup(
                plugin,
                format!("state dir under {}: {e}", state.dir.display()),
            )
        })?;
    let sides = [
        Side::new(plugin, ours_dir, "bench-sec-o", &work)?,
        Side::new(plugin, reference_dir, "bench-sec-r", &work)?,
    ];
    // The floor: its own fake host, pods and input like the others'.
    let empty = match EmptyProgram::build(plugin) {
        Ok(empty) => Some((Side::new(plugin, empty.dir(), "bench-sec-e", &work)?, empty)),
        Err(reason) => {
            eprintln!("{plugin}: no empty-program floor rows: {reason}");
            None
        }
    };
    let mut figs = SecondaryFigures {
        plugin: plugin.to_string(),
        ..SecondaryFigures::default()
    };
    for round in 0..RSS_ROUNDS + rounds {
        let measure = if round < RSS_ROUNDS {
            Measure::PeakRss
        } else {
            Measure::Time
        };
        // Ours, the reference and the floor take turns going first.
        for k in 0..3 {
            let i = (round + k) % 3;
            let side = match (i, &empty) {
                (0 | 1, _) => &sides[i],
                (_, Some((side, _))) => side,
                (_, None) => continue,
            };
            let pod = side.pod(plugin);
            let conf = serde_json::to_vec(&side.conf(plugin, &pod)).unwrap_or_default();
            let cid = format!("bench-{plugin}-{round}");
            let add = side.call(plugin, "ADD", &pod, &cid, &conf, measure)?;
            let del = side.call(plugin, "DEL", &pod, &cid, &conf, measure)?;
            match (add, del) {
                (Cost::Wall(add), Cost::Wall(del)) => {
                    let ms = (add + del).as_secs_f64() * 1e3;
                    match figs.add_del_ms.get_mut(i) {
                        Some(times) => times.push(ms),
                        None => figs.empty_program_add_del_ms.push(ms),
                    }
                }
                (Cost::RssKib(add), _) => {
                    if let Some(peak) = figs.add_rss_kib.get_mut(i) {
                        *peak = (*peak).max(add);
                    }
                }
                (Cost::Wall(_), Cost::RssKib(_)) => {}
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let med = |v: &[f64]| {
        summarize(
            &v.iter()
                .map(|m| std::time::Duration::from_secs_f64(m / 1e3))
                .collect::<Vec<_>>(),
        )
        .median_ms
    };
    let mut rows = vec![
        Row::new(
            format!("{plugin} ADD+DEL (median)"),
            med(&figs.add_del_ms[0]),
            med(&figs.add_del_ms[1]),
            "ms",
        )
        .with_target(0.25),
        Row::new(
            format!("{plugin} ADD peak RSS"),
            figs.add_rss_kib[0] as f64 / 1024.0,
            figs.add_rss_kib[1] as f64 / 1024.0,
            "MiB",
        )
        .with_target(0.5),
    ];
    if !figs.empty_program_add_del_ms.is_empty() {
        let floor = med(&figs.empty_program_add_del_ms);
        let [ours, reference] = [med(&figs.add_del_ms[0]), med(&figs.add_del_ms[1])];
        rows.push(Row::new(
            format!("{plugin} ADD+DEL, an empty program in its place (median)"),
            floor,
            reference,
            "ms",
        ));
        rows.push(Row::new(
            format!("{plugin} ADD+DEL above the empty program's (median)"),
            ours - floor,
            reference - floor,
            "ms",
        ));
    }
    Ok((figs, rows))
}

/// A program that does nothing a plugin must not also do: reads its input,
/// prints `{}` and exits 0, statically linked (as our plugins are, so no
/// dynamic loader's work counts against the floor). Built from C with the
/// machine's `cc` at bench time, since a Rust program would add the
/// standard library's start-up, which is part of what is measured; a
/// machine without a C compiler and static libc gets no floor rows.
struct EmptyProgram {
    dir: tempfile::TempDir,
}

impl EmptyProgram {
    const SOURCE: &'static str = "#include <unistd.h>\n\
        int main(void) { char b[4096]; while (read(0, b, sizeof b) > 0) {} \
        return write(1, \"{}\\n\", 3) == 3 ? 0 : 1; }\n";

    /// The program, named `plugin`, in a folder of its own under the
    /// temporary directory (not the state root: /dev/shm may forbid exec).
    fn build(plugin: &str) -> Result<EmptyProgram, String> {
        let dir = tempfile::Builder::new()
            .prefix("cni-bench-empty-")
            .tempdir()
            .map_err(|e| format!("temporary folder: {e}"))?;
        let source = dir.path().join("empty.c");
        std::fs::write(&source, Self::SOURCE).map_err(|e| format!("{}: {e}", source.display()))?;
        let out = std::process::Command::new("cc")
            .args(["-O2", "-static", "-o"])
            .arg(dir.path().join(plugin))
            .arg(&source)
            .output()
            .map_err(|e| format!("cannot run cc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cc -static failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(EmptyProgram { dir })
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// The floor program reads all its input (a writer never sees EPIPE),
    /// prints `{}` and exits 0, under the plugin's name, statically linked.
    #[test]
    fn empty_program_reads_its_input_and_prints_an_empty_object() {
        let empty = EmptyProgram::build("tuning")
            .unwrap_or_else(|e| panic!("needs cc and a static libc (Debian: gcc, libc6-dev): {e}"));
        let program = empty.dir().join("tuning");
        let mut child = Command::new(&program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = vec![b'x'; 64 * 1024];
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        assert_eq!(out.stdout, b"{}\n");
        assert!(!has_interpreter(&std::fs::read(&program).unwrap()));
        // The check itself: Debian's coreutils are dynamically linked.
        assert!(has_interpreter(&std::fs::read("/bin/true").unwrap()));
    }

    /// Whether a 64-bit little-endian ELF image names a dynamic loader
    /// (has a PT_INTERP program header).
    fn has_interpreter(elf: &[u8]) -> bool {
        assert_eq!(&elf[..4], b"\x7fELF");
        let u16_at = |at: usize| usize::from(u16::from_le_bytes([elf[at], elf[at + 1]]));
        let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
        let (entry_size, entries) = (u16_at(0x36), u16_at(0x38));
        (0..entries).any(|i| {
            let at = phoff + i * entry_size;
            u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3
        })
    }
}
