//! Pod ADD and DEL through the same runtime (our libcni) for our plugins
//! and the reference plugins, side by side, the sides alternating pod by
//! pod.
//!
//! Each side gets its own fake host namespace as well as its own network
//! (bridge name, subnet, lease folder), as on a node that runs one suite:
//! in a shared namespace each side's ADD also paid for the other side's
//! pods (nf_tables validates the whole `nat` table at every commit, the
//! reference's iptables lists it), and the settle step before each call
//! flushes only its own namespace's deferred nf_tables frees.

use std::path::Path;
use std::time::{Duration, Instant};

use libcni::conf::{self, NetworkConfigList};
use libcni::netns::NetNs;
use libcni::runtime::{CniConfig, RuntimeConf};
use serde_json::{json, Value};

use super::{Row, StateRoot};
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

/// Untimed ADD+DEL cycles before each side's growth series.
const GROWTH_WARM_UP: usize = 5;

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

/// Runs each side inside a fresh fake host namespace of its own.
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    rounds: usize,
    growth_pods: usize,
    portmap: bool,
    state: &StateRoot,
) -> Result<(ChainFigures, Vec<Row>), ChainError> {
    let hosts = [
        TestNetns::new("bench-host-o"),
        TestNetns::new("bench-host-r"),
    ];
    let host_nss = [NetNs::open(hosts[0].path())?, NetNs::open(hosts[1].path())?];
    let work = state.work_dir("cni-bench")?;
    let nets = [
        Network::new(Side::Ours, ours_dir, &work, portmap)?,
        Network::new(Side::Reference, reference_dir, &work, portmap)?,
    ];
    // Plugins are children of the thread that runs them, so each side's
    // calls run on a thread inside its host namespace (the timing starts
    // inside it).
    let in_host = |i: usize, f: &(dyn Fn(&Network) -> Result<Duration, ChainError> + Sync)| {
        host_nss[i].run(|| f(&nets[i]))?
    };
    let mut figs = ChainFigures {
        portmap,
        ..ChainFigures::default()
    };
    // Warm-up: the first ADD creates the bridge and shared rules.
    for (i, net) in nets.iter().enumerate() {
        let pod = TestNetns::new("bench-warm");
        let rt = net.runtime_conf(&pod, 0, portmap);
        in_host(i, &|net| net.add(&rt))?;
        in_host(i, &|net| net.del(&rt))?;
    }
    for round in 0..rounds {
        for k in 0..2 {
            // Alternate which side goes first.
            let i = (round + k) % 2;
            let pod = TestNetns::new("bench-pod");
            let rt = nets[i].runtime_conf(&pod, round + 1, portmap);
            figs.one_pod_add_ms[i].push(ms(in_host(i, &|net| net.add(&rt))?));
            figs.one_pod_del_ms[i].push(ms(in_host(i, &|net| net.del(&rt))?));
        }
    }
    if growth_pods > 0 {
        // One side at a time, each on a node holding only its own pods, as
        // the target says ("the 200th pod" of a suite). Interleaved, every
        // call also waited for the kernel work of the other side's pods:
        // the bridge floods each new pod's IPv6 link-local multicast (MLD
        // reports, router solicitations) to every port, from kernel
        // workers that hold RTNL for the sending, and the reference's host
        // veths add route-table walks per port; all of it grows with the
        // other side's pods and lands on this side's next netlink request.
        for (i, net) in nets.iter().enumerate() {
            // A few untimed pods first: the first calls after a pause are
            // slower (caches, the kernel's slabs), which would flatter the
            // growth ratio by raising the first 20.
            super::wait_for_namespace_cleanup();
            for n in 0..GROWTH_WARM_UP {
                let pod = TestNetns::new("bench-gw");
                let rt = net.runtime_conf(&pod, 900 + n, portmap);
                in_host(i, &|net| net.add(&rt))?;
                in_host(i, &|net| net.del(&rt))?;
            }
            super::wait_for_namespace_cleanup();
            let mut pods = Vec::with_capacity(growth_pods);
            for n in 0..growth_pods {
                let pod = TestNetns::new("bench-gp");
                let rt = net.runtime_conf(&pod, 1000 + n, portmap);
                figs.growth_add_ms[i].push(ms(in_host(i, &|net| net.add(&rt))?));
                pods.push((pod, rt));
            }
            for (_, rt) in &pods {
                figs.growth_del_ms[i].push(ms(in_host(i, &|net| net.del(rt))?));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    drop(hosts);

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
