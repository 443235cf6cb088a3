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
/// Version 1.0.0 because the Debian reference stops there. `backend`, when
/// given, goes to the bridge's `ipMasqBackend` and portmap's `backend`; the
/// reference 1.1.1 knows neither key, ignores them and stays on iptables.
fn conflist(side: Side, work: &Path, portmap: bool, backend: Option<&str>) -> Value {
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
    if let Some(backend) = backend {
        plugins[0]["ipMasqBackend"] = backend.into();
        if let Some(portmap) = plugins.get_mut(1) {
            portmap["backend"] = backend.into();
        }
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

impl Network {
    pub(crate) fn new(
        side: Side,
        plugin_dir: &Path,
        work: &Path,
        portmap: bool,
        backend: Option<&str>,
    ) -> Result<Network, ChainError> {
        let work = work.join(format!("{side:?}"));
        std::fs::create_dir_all(&work)?;
        let bytes =
            serde_json::to_vec(&conflist(side, &work, portmap, backend)).unwrap_or_default();
        let list = conf::conflist_from_bytes(&bytes).map_err(|e| ChainError::Op {
            side,
            what: "config".into(),
            msg: e.to_string(),
        })?;
        // The bench's scratch dataDir is allowed by the tests' policy.
        let env = libcni::invoke::PluginEnv::from_process().with(
            libcni::confine::POLICY_ENV,
            crate::testnet::scratch_policy(),
        );
        let cni = CniConfig::new(vec![plugin_dir.to_path_buf()])
            .with_cache_dir(work.join("cache"))
            .with_base_env(env);
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
    /// The backend named to both sides' bridge and portmap, if any.
    pub requested_backend: Option<String>,
    pub one_pod_add_ms: [Vec<f64>; 2],
    pub one_pod_del_ms: [Vec<f64>; 2],
    /// Per side, per series: ADD time of pod i when i pods are already
    /// attached.
    pub growth_add_ms: [Vec<Vec<f64>>; 2],
    pub growth_del_ms: [Vec<Vec<f64>>; 2],
    /// Per side: each series' own last-20 / first-20 ratio, to show the
    /// spread that the pooled ratio of the report evens out.
    pub growth_series_ratios: [Vec<f64>; 2],
}

/// How many pods at each end of a growth series are compared.
const GROWTH_END: usize = 20;

/// The growth ratio over several series of one side: the median ADD time of
/// the last `GROWTH_END` pods of every series, pooled, over the same for the
/// first `GROWTH_END`. Pooling rather than one series because a single
/// series on this kind of machine moved the ratio by up to 0.3 between runs
/// of the same binaries (its first 20 pods' median alone moved by 1 ms).
pub fn pooled_growth_ratio(series: &[Vec<f64>]) -> Option<(f64, f64)> {
    let usable: Vec<&Vec<f64>> = series
        .iter()
        .filter(|s| s.len() >= 2 * GROWTH_END)
        .collect();
    if usable.is_empty() {
        return None;
    }
    let first: Vec<f64> = usable
        .iter()
        .flat_map(|s| s[..GROWTH_END].iter().copied())
        .collect();
    let last: Vec<f64> = usable
        .iter()
        .flat_map(|s| s[s.len() - GROWTH_END..].iter().copied())
        .collect();
    Some((median(&first), median(&last)))
}

/// The median of each pod index across series, for the chart.
pub fn pointwise_median(series: &[Vec<f64>]) -> Vec<f64> {
    let len = series.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            let at: Vec<f64> = series.iter().map(|s| s[i]).collect();
            median(&at)
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let d: Vec<Duration> = v.iter().map(|m| Duration::from_secs_f64(m / 1e3)).collect();
    summarize(&d).median_ms
}

/// A timed call on one side's network, run inside its host namespace.
type NetworkCall<'a> = dyn Fn(&Network) -> Result<Duration, ChainError> + Sync + 'a;

/// One growth series of one side: untimed warm-up pods, then `pods` pods
/// added one by one and deleted in the same order. Returns the ADD and the
/// DEL times in milliseconds.
fn growth_series_of(
    net: &Network,
    in_host: &dyn Fn(&NetworkCall) -> Result<Duration, ChainError>,
    pods: usize,
    portmap: bool,
) -> Result<(Vec<f64>, Vec<f64>), ChainError> {
    // A few untimed pods first: the first calls after a pause are slower
    // (caches, the kernel's slabs), which would flatter the growth ratio by
    // raising the first 20.
    super::wait_for_namespace_cleanup();
    for n in 0..GROWTH_WARM_UP {
        let pod = TestNetns::new("bench-gw");
        let rt = net.runtime_conf(&pod, 900 + n, portmap);
        in_host(&|net| net.add(&rt))?;
        in_host(&|net| net.del(&rt))?;
    }
    super::wait_for_namespace_cleanup();
    let mut attached = Vec::with_capacity(pods);
    let mut adds = Vec::with_capacity(pods);
    for n in 0..pods {
        let pod = TestNetns::new("bench-gp");
        let rt = net.runtime_conf(&pod, 1000 + n, portmap);
        adds.push(ms(in_host(&|net| net.add(&rt))?));
        attached.push((pod, rt));
    }
    let mut dels = Vec::with_capacity(pods);
    for (_, rt) in &attached {
        dels.push(ms(in_host(&|net| net.del(rt))?));
    }
    Ok((adds, dels))
}

/// How much of the chain benchmark to run.
#[derive(Debug, Clone, Copy)]
pub struct ChainRuns {
    /// One-pod ADD+DEL rounds per side.
    pub rounds: usize,
    /// Pods per growth series.
    pub growth_pods: usize,
    /// Growth series per side.
    pub growth_series: usize,
}

/// Runs each side inside a fresh fake host namespace of its own.
pub fn measure(
    ours_dir: &Path,
    reference_dir: &Path,
    runs: ChainRuns,
    portmap: bool,
    backend: Option<&str>,
    state: &StateRoot,
) -> Result<(ChainFigures, Vec<Row>), ChainError> {
    let ChainRuns {
        rounds,
        growth_pods,
        growth_series,
    } = runs;
    let hosts = [
        TestNetns::new("bench-host-o"),
        TestNetns::new("bench-host-r"),
    ];
    let host_nss = [NetNs::open(hosts[0].path())?, NetNs::open(hosts[1].path())?];
    let work = state.work_dir("cni-bench")?;
    let nets = [
        Network::new(Side::Ours, ours_dir, &work, portmap, backend)?,
        Network::new(Side::Reference, reference_dir, &work, portmap, backend)?,
    ];
    // Plugins are children of the thread that runs them, so each side's
    // calls run on a thread inside its host namespace (the timing starts
    // inside it).
    let in_host = |i: usize, f: &NetworkCall| host_nss[i].run(|| f(&nets[i]))?;
    let mut figs = ChainFigures {
        portmap,
        requested_backend: backend.map(str::to_string),
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
        // Several series per side, the sides taking turns series by series
        // (which goes first alternates), so drift over the run lands on both.
        for series in 0..growth_series {
            for k in 0..2 {
                let i = (series + k) % 2;
                let (adds, dels) =
                    growth_series_of(&nets[i], &|f| in_host(i, f), growth_pods, portmap)?;
                figs.growth_add_ms[i].push(adds);
                figs.growth_del_ms[i].push(dels);
            }
        }
        for i in 0..2 {
            figs.growth_series_ratios[i] = figs.growth_add_ms[i]
                .iter()
                .filter_map(|s| pooled_growth_ratio(std::slice::from_ref(s)))
                .map(|(first, last)| last / first)
                .collect();
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    drop(hosts);

    let plugins = if portmap {
        "bridge+host-local+portmap"
    } else {
        "bridge+host-local"
    };
    // Says what was asked, not what each side did with it: a reference
    // other than Debian's 1.1.1 (`--reference`) may honour the key.
    let what = match backend {
        Some(backend) => format!("{plugins} ({backend} backends requested)"),
        None => plugins.to_string(),
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
    let pooled = |series: &[Vec<f64>]| -> Vec<f64> { series.iter().flatten().copied().collect() };
    if let (Some((o_first, o_last)), Some((r_first, r_last))) = (
        pooled_growth_ratio(&figs.growth_add_ms[0]),
        pooled_growth_ratio(&figs.growth_add_ms[1]),
    ) {
        let series = figs.growth_add_ms[0].len().min(figs.growth_add_ms[1].len());
        for (side, first, last) in [("ours", o_first, o_last), ("reference", r_first, r_last)] {
            rows.push(
                Row::new(
                    format!(
                        "{what}: {side} ADD, last {GROWTH_END} of {growth_pods} vs first {GROWTH_END} ({series} series pooled)"
                    ),
                    last,
                    first,
                    "ms",
                )
                .with_target(1.2),
            );
        }
        rows.push(Row::new(
            format!("{what}: ADD with up to {growth_pods} pods (median)"),
            median(&pooled(&figs.growth_add_ms[0])),
            median(&pooled(&figs.growth_add_ms[1])),
            "ms",
        ));
        rows.push(Row::new(
            format!("{what}: DEL with up to {growth_pods} pods (median)"),
            median(&pooled(&figs.growth_del_ms[0])),
            median(&pooled(&figs.growth_del_ms[1])),
            "ms",
        ));
    }
    Ok((figs, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(first: f64, last: f64, len: usize) -> Vec<f64> {
        (0..len)
            .map(|i| if i < len / 2 { first } else { last })
            .collect()
    }

    #[test]
    fn the_growth_ratio_pools_the_ends_of_every_series() {
        // Three series growing 2 -> 3, 4 -> 4 and 1 -> 5: the pooled first
        // 20s are twenty each of 2, 4 and 1 (median 2), the last 20s twenty
        // each of 3, 4 and 5 (median 4); no single series says 2 -> 4.
        let got = pooled_growth_ratio(&[
            series(2.0, 3.0, 60),
            series(4.0, 4.0, 60),
            series(1.0, 5.0, 60),
        ]);
        assert_eq!(got, Some((2.0, 4.0)));
    }

    #[test]
    fn series_too_short_to_have_two_ends_are_left_out() {
        assert_eq!(pooled_growth_ratio(&[series(1.0, 2.0, 39)]), None);
        assert_eq!(
            pooled_growth_ratio(&[series(1.0, 2.0, 39), series(2.0, 3.0, 40)]),
            Some((2.0, 3.0))
        );
        assert_eq!(pooled_growth_ratio(&[]), None);
    }

    #[test]
    fn the_chart_line_is_the_median_at_each_pod_and_as_long_as_the_shortest_series() {
        let got = pointwise_median(&[vec![1.0, 5.0, 9.0], vec![2.0, 6.0], vec![3.0, 4.0, 1.0]]);
        assert_eq!(got, vec![2.0, 5.0]);
        assert!(pointwise_median(&[]).is_empty());
    }

    #[test]
    fn a_named_backend_goes_to_the_bridge_and_to_portmap() {
        let work = Path::new("/nonexistent");
        let both = conflist(Side::Ours, work, true, Some("nftables"));
        assert_eq!(both["plugins"][0]["ipMasqBackend"], "nftables");
        assert_eq!(both["plugins"][1]["backend"], "nftables");
        let bridge_only = conflist(Side::Reference, work, false, Some("nftables"));
        assert_eq!(bridge_only["plugins"][0]["ipMasqBackend"], "nftables");
        assert_eq!(bridge_only["plugins"].as_array().map(Vec::len), Some(1));
        let default = conflist(Side::Ours, work, true, None);
        assert!(default["plugins"][0].get("ipMasqBackend").is_none());
        assert!(default["plugins"][1].get("backend").is_none());
    }
}
