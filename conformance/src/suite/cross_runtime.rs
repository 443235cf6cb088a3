//! Cross-runtime checks: the same network run by two runtimes, Go libcni
//! (the reference `cnitool`, built from Debian's source package) and our
//! libcni (our `cnitool`), over our plugins and over the reference
//! plugins. Both runtimes must get the same result, publish the port, and
//! read each other's result cache (Go libcni's `cniCacheV1` format).
//!
//! Each run happens in a fake host namespace. The Go tool keeps its cache
//! in /var/lib/cni with no way to move it, so every tool run gets a
//! private mount namespace (`ip netns exec` makes one) with a tmpfs over
//! /var/lib and the scenario's cache folder bound to /var/lib/cni: nothing
//! is written to the machine's own /var/lib.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::known_issues::KnownIssue;
use super::report::Report;
use super::sandbox::{tcp_fetch, wait_with_timeout, Netns, TcpResponder, PLUGIN_TIMEOUT};
use super::scene::{Scene, BRIDGE};
use super::shape::{check_result_shape, normalize_result};
use super::subject::{CONTAINER_PORT, HOST_PORT};

type Step<T> = Result<T, String>;

fn setup<T, E: std::fmt::Display>(r: Result<T, E>) -> Step<T> {
    r.map_err(|e| format!("setup failed: {e}"))
}

/// The inputs of a cross-runtime run.
#[derive(Debug, Clone)]
pub struct CrossOptions {
    pub ours: PathBuf,
    pub reference: PathBuf,
    pub cnitool: PathBuf,
    pub go_cnitool: PathBuf,
    pub echo: bool,
}

const PORTMAP_CHECK: &str = "the reference portmap's CHECK fails for every IPv4-only pod: it \
     checks an IPv6 DNAT chain it never created";

/// Checks of this run that fail because of the reference plugins.
pub const KNOWN: &[KnownIssue] = &[
    KnownIssue {
        check_id: "reference plugins via Go cnitool: check succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "reference plugins via our cnitool: check succeeds",
        reason: PORTMAP_CHECK,
    },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Go,
    Ours,
}

impl Tool {
    fn label(self) -> &'static str {
        match self {
            Tool::Go => "Go cnitool",
            Tool::Ours => "our cnitool",
        }
    }
}

struct Side<'a> {
    label: &'static str,
    dir: &'a Path,
}

/// The network both tools run: what a Kubernetes node runs, at 1.0.0
/// (the highest the Go tool's libcni and the reference plugins speak).
fn network(scene: &Scene, name: &str, with_portmap: bool) -> Value {
    let mut plugins = vec![json!({
        "type": "bridge", "bridge": BRIDGE, "isGateway": true, "ipMasq": true,
        "ipam": scene.ipam(super::scene::SUBNET),
    })];
    if with_portmap {
        plugins
            .push(json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}));
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

/// Runs a cnitool verb in the scenario's fake host with a private
/// /var/lib/cni; returns stdout.
fn cnitool(
    opts: &CrossOptions,
    tool: Tool,
    scene: &Scene,
    verb: &str,
    net: &str,
    pod: &str,
) -> Step<String> {
    let binary = match tool {
        Tool::Go => &opts.go_cnitool,
        Tool::Ours => &opts.cnitool,
    };
    let cache = scene.work.join("cache");
    setup(std::fs::create_dir_all(&cache))?;
    let script = "mount -t tmpfs tmpfs /var/lib && mkdir /var/lib/cni && \
                  mount --bind \"$0\" /var/lib/cni && exec \"$@\"";
    let child = Command::new("ip")
        .args(["netns", "exec", scene.host.name(), "sh", "-c", script])
        .arg(&cache)
        .arg(binary)
        .args([verb, net, pod])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NETCONFPATH", scene.work.join("net.d"))
        .env("CNI_PATH", &scene.dir)
        .env(
            "CAP_ARGS",
            json!({"portMappings": [{"hostPort": HOST_PORT, "containerPort": CONTAINER_PORT, "protocol": "tcp"}]})
                .to_string(),
        )
        .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web-0")
        // Both tools pass their environment on to the plugins: the tests'
        // node policy allows the scene's scratch lease folder (host-local's
        // dataDir is confined to the state folders).
        .env(libcni::confine::POLICY_ENV, crate::testnet::scratch_policy())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let reply = wait_with_timeout(child, b"", PLUGIN_TIMEOUT, &binary.display().to_string())
        .map_err(|e| e.to_string())?;
    if reply.code != 0 {
        return Err(format!(
            "{} {verb} exited {}: {}",
            tool.label(),
            reply.code,
            reply.stderr.trim()
        ));
    }
    Ok(reply.stdout)
}

fn write_network(scene: &Scene, value: &Value) -> Step<()> {
    let dir = scene.work.join("net.d");
    setup(std::fs::create_dir_all(&dir))?;
    let name = value["name"].as_str().unwrap_or("net");
    setup(std::fs::write(
        dir.join(format!("10-{name}.conflist")),
        value.to_string(),
    ))
}

fn leftovers(scene: &Scene, network: &str, pod: Option<&Netns>) -> Step<String> {
    let leased = scene.leased(network);
    let veths = scene.host_veths()?;
    let cached = std::fs::read_dir(scene.work.join("cache/results"))
        .map(|d| d.count())
        .unwrap_or(0);
    let pod_eth0 = match pod {
        Some(p) => scene.has_link(p, "eth0")?,
        None => false,
    };
    if leased.is_empty() && veths.is_empty() && cached == 0 && !pod_eth0 {
        Ok(String::new())
    } else {
        Err(format!(
            "leases {leased:?}, host veths {veths:?}, cache files {cached}, pod eth0 {pod_eth0}"
        ))
    }
}

const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);

/// ADD, traffic, CHECK and DEL of one side with one tool; the normalised
/// ADD result when it got that far.
fn full_run(report: &mut Report, opts: &CrossOptions, side: &Side, tool: Tool) -> Option<Value> {
    let id = |what: &str| format!("{} via {}: {what}", side.label, tool.label());
    let prepared = (|| -> Step<(Scene, Netns, TcpResponder)> {
        let scene = setup(Scene::new("xrt", side.dir))?;
        write_network(&scene, &network(&scene, "suite-x", true))?;
        let pod = setup(scene.pod("xrt"))?;
        let server = setup(TcpResponder::start(
            &pod,
            CONTAINER_PORT,
            "hello from the pod",
        ))?;
        Ok((scene, pod, server))
    })();
    let (scene, pod, _server) = match prepared {
        Ok(v) => v,
        Err(e) => {
            report.check(id("add"), Err(e));
            return None;
        }
    };
    let pod_path = pod.path_string();
    let added = cnitool(opts, tool, &scene, "add", "suite-x", &pod_path).and_then(|out| {
        let v: Value =
            serde_json::from_str(&out).map_err(|e| format!("add printed no JSON ({e}): {out}"))?;
        check_result_shape("1.0.0", &v)?;
        Ok(v)
    });
    report.check(
        id("add prints a 1.0.0 result"),
        added.as_ref().map(|_| String::new()).map_err(Clone::clone),
    );
    let Ok(result) = added else {
        let _ = cnitool(opts, tool, &scene, "del", "suite-x", &pod_path);
        return None;
    };
    report.check(
        id("the published port reaches the pod"),
        match tcp_fetch(&scene.host, IpAddr::V4(GATEWAY_IP), HOST_PORT) {
            Ok(got) if got == "hello from the pod" => Ok(String::new()),
            Ok(got) => Err(format!("answered {got:?}")),
            Err(e) => Err(e),
        },
    );
    report.check(
        id("check succeeds"),
        cnitool(opts, tool, &scene, "check", "suite-x", &pod_path).map(|_| String::new()),
    );
    report.check(
        id("del succeeds and leaves nothing behind"),
        cnitool(opts, tool, &scene, "del", "suite-x", &pod_path)
            .and_then(|_| leftovers(&scene, "suite-x", Some(&pod))),
    );
    Some(normalize_result(&result))
}

/// One tool adds, the other checks and deletes from its cache.
fn cache_interop(report: &mut Report, opts: &CrossOptions, side: &Side, adder: Tool, other: Tool) {
    let id = format!(
        "{}: {} checks and deletes what {} added (reading its cache)",
        side.label,
        other.label(),
        adder.label()
    );
    report.check(
        id,
        (|| {
            let scene = setup(Scene::new("xcache", side.dir))?;
            // No portmap: this is about the cache, not portmap's CHECK.
            write_network(&scene, &network(&scene, "suite-c", false))?;
            let pod = setup(scene.pod("xcache"))?;
            let path = pod.path_string();
            cnitool(opts, adder, &scene, "add", "suite-c", &path)?;
            cnitool(opts, other, &scene, "check", "suite-c", &path)?;
            // A CHECK without the cached result would not know the
            // addresses; now break the attachment and CHECK must notice.
            setup(pod.ip(&["link", "set", "eth0", "down"]))?;
            setup(pod.ip(&["addr", "flush", "dev", "eth0"]))?;
            if cnitool(opts, other, &scene, "check", "suite-c", &path).is_ok() {
                return Err(
                    "check passed with the pod's address removed: was the cached result read?"
                        .into(),
                );
            }
            cnitool(opts, other, &scene, "del", "suite-c", &path)?;
            leftovers(&scene, "suite-c", Some(&pod))
        })(),
    );
}

pub fn run(opts: &CrossOptions) -> Report {
    if opts.echo {
        println!(
            "cross-runtime: Go cnitool {}, our cnitool {}; our plugins {}, reference plugins {}",
            opts.go_cnitool.display(),
            opts.cnitool.display(),
            opts.ours.display(),
            opts.reference.display()
        );
    }
    let mut report = Report::new(KNOWN.to_vec(), opts.echo);
    for (what, path) in [
        ("Go cnitool", &opts.go_cnitool),
        ("our cnitool", &opts.cnitool),
    ] {
        if !path.is_file() {
            report.check(
                format!("{what} at {}", path.display()),
                Err(
                    "not found (build it: conformance/scripts/build-go-cnitool.sh, cargo build)"
                        .into(),
                ),
            );
            return report;
        }
    }
    let sides = [
        Side {
            label: "our plugins",
            dir: &opts.ours,
        },
        Side {
            label: "reference plugins",
            dir: &opts.reference,
        },
    ];
    for side in &sides {
        let go = full_run(&mut report, opts, side, Tool::Go);
        let ours = full_run(&mut report, opts, side, Tool::Ours);
        report.check(
            format!(
                "{}: Go cnitool and our cnitool get the same ADD result",
                side.label
            ),
            match (go, ours) {
                (Some(a), Some(b)) if a == b => Ok(String::new()),
                (Some(a), Some(b)) => Err(format!("Go cnitool: {a}; ours: {b}")),
                _ => Err("an ADD failed (see above)".into()),
            },
        );
        cache_interop(&mut report, opts, side, Tool::Go, Tool::Ours);
        cache_interop(&mut report, opts, side, Tool::Ours, Tool::Go);
    }
    report
}
