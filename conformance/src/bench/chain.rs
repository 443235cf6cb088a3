//! Pod ADD and DEL through the same runtime (our libcni) for our plugins
//! and the reference plugins, side by side, inside a fake host namespace.
//!
//! Each side gets its own network (bridge name, subnet, lease folder), so
//! the two never share state, and the sides alternate pod by pod.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libcni::conf::{self, NetworkConfigList};
use libcni::netns::NetNs;
use libcni::runtime::{CniConfig, RuntimeConf};
use serde_json::{json, Value};

use super::Row;
use crate::measure::summarize;
use crate::testnet::TestNetns;

/// Which plugin directory a measurement ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Side {
    Ours,
    Reference,
}

#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("{side:?} {what}: {msg}")]
    Op {
        side: Side,
        what: String,
        msg: String,
    },
    #[error("netns: {0}")]
    NetNs(#[from] libcni::netns::NetNsError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// One side's network: its config and runtime.
pub(crate) struct Network {
    side: Side,
    list: NetworkConfigList,
    cni: CniConfig,
}

/// The chain a Kubernetes node runs: bridge + host-local (+ portmap).
/// Version 1.0.0 because the Debian reference stops there.
fn conflist(side: Side, work: &Path, portmap: bool) -> Value {
    let (name, bridge, subnet) = match side {
        Side::Ours => ("bench-ours", "cnibench-o", "10.201.0.0/16"),
        Side::Reference => ("bench-ref", "cnibench-r", "10.202.0.0/16"),
    };
    let mut plugins = vec![json!({
        "type": "bridge",
        "bridge": bridge,
        "isGateway": true,
        "ipMasq": true,
        "hairpinMode": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": work.join("leases")
        }
    })];
    if portmap {
        plugins.push(json!({
            "type": "portmap",
            "capabilities": {"portMappings": true},
            "snat": true
        }));
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

impl Network {
    pub(crate) fn new(
        side: Side,
        plugin_dir: &Path,
        work: &Path,
        portmap: bool,
    ) -> Result<Network, ChainError> {
        let work = work.join(format!("{side:?}"));
        std::fs::create_dir_all(&work)?;
        let bytes = serde_json::to_vec(&conflist(side, &work, portmap)).unwrap_or_default();
        let list = conf::conflist_from_bytes(&bytes).map_err(|e| ChainError::Op {
            side,
            what: "config".into(),
            msg: e.to_string(),
        })?;
        let cni = CniConfig::new(vec![plugin_dir.to_path_buf()]).with_cache_dir(work.join("cache"));
        Ok(Network { side, list, cni })
    }

    pub(crate) fn runtime_conf(&self, pod: &TestNetns, index: usize, portmap: bool) -> RuntimeConf {
        let mut rt = RuntimeConf {
            container_id: format!("bench-{:?}-{index}", self.side).to_lowercase(),
            netns: pod.path().display().to_string(),
            ifname: "eth0".into(),
            ..RuntimeConf::default()
        };
        if portmap {
            let host_port = 20000 + index as u64;
            rt.capability_args.insert(
                "portMappings".into(),
                json!([{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]),
            );
        }
        rt
    }

    /// ADD, returning its time and the first address of the result.
    pub(crate) fn add_with_ip(
        &self,
        rt: &RuntimeConf,
    ) -> Result<(Duration, Option<String>), ChainError> {
        let t = Instant::now();
        let result = self
            .cni
            .add_network_list(&self.list, rt)
            .map_err(|e| self.fail("ADD", e))?;
        let took = t.elapsed();
        let ip = result.to_value()["ips"][0]["address"]
            .as_str()
            .map(str::to_string);
        Ok((took, ip))
    }

    pub(crate) fn add(&self, rt: &RuntimeConf) -> Result<Duration, ChainError> {
        super::settle();
        let t = Instant::now();
        self.cni
            .add_network_list(&self.list, rt)
            .map_err(|e| self.fail("ADD", e))?;
        Ok(t.elapsed())
    }

    pub(crate) fn del(&self, rt: &RuntimeConf) -> Result<Duration, ChainError> {
        super::settle();
        let t = Instant::now();
        self.cni
            .del_network_list(&self.list, rt)
            .map_err(|e| self.fail("DEL", e))?;
        Ok(t.elapsed())
    }

    fn fail(&self, what: &str, e: impl std::fmt::Display) -> ChainError {
        ChainError::Op {
            side: self.side,
            what: what.to_string(),
            msg: e.to_string(),
        }
    }
}

/// Raw figures of the chain benchmarks, in milliseconds.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ChainFigures {
    pub portmap: bool,
    pub one_pod_add_ms: [Vec<f64>; 2],
    pub one_pod_del_ms: [Vec<f64>; 2],
    /// ADD time of pod i when i pods are already attached.
    pub growth_add_ms: [Vec<f64>; 2],
    pub growth_del_ms: [Vec<f64>; 2],
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let d: Vec<Duration> = v.iter().map(|m| Duration::from_secs_f64(m / 1e3)).collect();
    summarize(&d).median_ms
}

/// Runs everything inside a fresh fake host namespace.
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    rounds: usize,
    growth_pods: usize,
    portmap: bool,
) -> Result<(ChainFigures, Vec<Row>), ChainError> {
    let host = TestNetns::new("bench-host");
    let host_ns = NetNs::open(host.path())?;
    let work = tempfile_dir()?;
    let ours_dir = ours_dir.to_path_buf();
    let reference_dir = reference_dir.to_path_buf();
    let work_path = work.clone();
    // Plugins are children of this thread, so they start in its netns.
    let figs = host_ns.run(move || -> Result<ChainFigures, ChainError> {
        let nets = [
            Network::new(Side::Ours, &ours_dir, &work_path, portmap)?,
            Network::new(Side::Reference, &reference_dir, &work_path, portmap)?,
        ];
        let mut figs = ChainFigures {
            portmap,
            ..ChainFigures::default()
        };
        // Warm-up: the first ADD creates the bridge and shared rules.
        for net in &nets {
            let pod = TestNetns::new("bench-warm");
            let rt = net.runtime_conf(&pod, 0, portmap);
            net.add(&rt)?;
            net.del(&rt)?;
        }
        for round in 0..rounds {
            for k in 0..2 {
                // Alternate which side goes first.
                let i = (round + k) % 2;
                let pod = TestNetns::new("bench-pod");
                let rt = nets[i].runtime_conf(&pod, round + 1, portmap);
                figs.one_pod_add_ms[i].push(ms(nets[i].add(&rt)?));
                figs.one_pod_del_ms[i].push(ms(nets[i].del(&rt)?));
            }
        }
        if growth_pods > 0 {
            let mut pods: [Vec<(TestNetns, RuntimeConf)>; 2] = [Vec::new(), Vec::new()];
            for n in 0..growth_pods {
                for k in 0..2 {
                    let i = (n + k) % 2;
                    let pod = TestNetns::new("bench-gp");
                    let rt = nets[i].runtime_conf(&pod, 1000 + n, portmap);
                    figs.growth_add_ms[i].push(ms(nets[i].add(&rt)?));
                    pods[i].push((pod, rt));
                }
            }
            let [ours_pods, ref_pods] = &pods;
            for (n, pair) in ours_pods.iter().zip(ref_pods.iter()).enumerate() {
                let both = [pair.0, pair.1];
                for k in 0..2 {
                    let i = (n + k) % 2;
                    let (_, rt) = both[i];
                    figs.growth_del_ms[i].push(ms(nets[i].del(rt)?));
                }
            }
        }
        Ok(figs)
    })??;
    let _ = std::fs::remove_dir_all(&work);
    drop(host);

    let what = if portmap {
        "bridge+host-local+portmap"
    } else {
        "bridge+host-local"
    };
    let mut rows = Vec::new();
    let (o_add, r_add) = (
        median(&figs.one_pod_add_ms[0]),
        median(&figs.one_pod_add_ms[1]),
    );
    let (o_del, r_del) = (
        median(&figs.one_pod_del_ms[0]),
        median(&figs.one_pod_del_ms[1]),
    );
    rows.push(Row::new(
        format!("{what}: one-pod ADD (median)"),
        o_add,
        r_add,
        "ms",
    ));
    rows.push(Row::new(
        format!("{what}: one-pod DEL (median)"),
        o_del,
        r_del,
        "ms",
    ));
    rows.push(
        Row::new(
            format!("{what}: ADD + DEL"),
            o_add + o_del,
            r_add + r_del,
            "ms",
        )
        .with_target(if portmap { 0.2 } else { 0.25 }),
    );
    if growth_pods >= 40 {
        for (i, side) in ["ours", "reference"].iter().enumerate() {
            let adds = &figs.growth_add_ms[i];
            let first = median(&adds[..20]);
            let last = median(&adds[adds.len() - 20..]);
            rows.push(
                Row::new(
                    format!("{what}: {side} ADD, last 20 of {growth_pods} vs first 20"),
                    last,
                    first,
                    "ms",
                )
                .with_target(1.2),
            );
        }
        rows.push(Row::new(
            format!("{what}: ADD with up to {growth_pods} pods (median)"),
            median(&figs.growth_add_ms[0]),
            median(&figs.growth_add_ms[1]),
            "ms",
        ));
        rows.push(Row::new(
            format!("{what}: DEL with up to {growth_pods} pods (median)"),
            median(&figs.growth_del_ms[0]),
            median(&figs.growth_del_ms[1]),
            "ms",
        ));
    }
    Ok((figs, rows))
}

pub(crate) fn tempfile_dir() -> Result<PathBuf, std::io::Error> {
    let dir = std::env::temp_dir().join(format!("cni-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
