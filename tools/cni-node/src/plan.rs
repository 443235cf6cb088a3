//! The decision of a GC pass, without I/O: from what the runtime lists and
//! what the node holds, which attachments of each network are valid, which
//! are released, and which networks are left alone and why.
//!
//! Safety over tidiness: an attachment is released only when the runtime
//! answered, does not list its container in any state, and the attachment
//! is at least `min_age` old. A network about which the agent cannot tell
//! (the runtime did not answer, no configuration to run GC with, a listed
//! sandbox holding an address of the network without a cache entry for
//! it) releases nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use libcni::runtime::GcAttachment;

/// A sandbox the runtime lists. Its ID is the CNI container ID (containerd
/// and CRI-O both use the sandbox ID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    /// CRI's state, for the logs only: every state keeps its attachments.
    pub ready: bool,
}

/// One attachment the node holds something for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    pub container_id: String,
    pub ifname: String,
    /// How long ago the attachment was made: the cache file's mtime (the
    /// runtime writes it when the ADD finished), or for a lease, the lease
    /// file's (written when the address was reserved). `None` when it
    /// cannot be told: then it is kept as if young.
    pub age: Option<Duration>,
}

/// What the node holds for one network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkView {
    /// The runtime's cached attachments (libcni's result cache).
    pub cached: Vec<Held>,
    /// Holders named by the network's plugin state without a cache entry
    /// (host-local leases): an ADD in flight, or one cut short by a crash.
    pub uncached: Vec<Held>,
    /// A configuration to run GC and DEL with was found (the conflist
    /// folder, else a cache entry's copy).
    pub has_config: bool,
    /// The configuration sets `disableGC`.
    pub gc_disabled: bool,
}

/// Why a network is left alone this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// ListPodSandbox did not answer: the agent cannot tell live from dead.
    RuntimeUnknown(String),
    NoConfig,
    GcDisabled,
    /// A listed sandbox holds an address of the network but has no cache
    /// entry for it: the runtime's record of the network is incomplete.
    ListedWithoutCache {
        container_id: String,
        ifname: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::RuntimeUnknown(why) => {
                write!(f, "the runtime's sandboxes are unknown ({why})")
            }
            Refusal::NoConfig => write!(
                f,
                "no configuration of the network in the conflist folder or the cache"
            ),
            Refusal::GcDisabled => write!(f, "the network's configuration sets disableGC"),
            Refusal::ListedWithoutCache {
                container_id,
                ifname,
            } => write!(
                f,
                "sandbox {container_id} is listed and holds an address of the network \
                 ({ifname}) but has no cache entry for it"
            ),
        }
    }
}

/// One attachment to release.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub container_id: String,
    pub ifname: String,
    /// It has a cache entry: released by DEL with the cached arguments,
    /// then the entry is removed. Without one, only the plugins' GC
    /// releases it.
    pub cached: bool,
}

/// The decision for one network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Refuse(Refusal),
    Collect {
        /// Sent to the plugins as `cni.dev/valid-attachments`, sorted.
        valid: Vec<GcAttachment>,
        /// Sorted by container ID and ifname.
        release: Vec<Release>,
    },
}

/// Decides every network: `sandboxes` is the runtime's listing, or why it
/// failed.
pub fn decide(
    sandboxes: &Result<Vec<Sandbox>, String>,
    networks: &BTreeMap<String, NetworkView>,
    min_age: Duration,
) -> BTreeMap<String, Decision> {
    networks
        .iter()
        .map(|(name, view)| {
            let decision = match sandboxes {
                Err(why) => Decision::Refuse(Refusal::RuntimeUnknown(why.clone())),
                Ok(list) => {
                    let listed: BTreeSet<&str> = list.iter().map(|s| s.id.as_str()).collect();
                    let guard = listed_guard(&listed, networks);
                    with_guard(decide_network(&listed, view, min_age), &guard)
                }
            };
            (name.clone(), decision)
        })
        .collect()
}

/// The interface name runtimes give a pod's first network.
pub const DEFAULT_IFNAME: &str = "eth0";

/// Attachments every network's GC names valid: each listed sandbox with
/// `eth0` and every interface name the node holds for it in any network.
/// Plugins that match GC by container and interface (host-local,
/// cluster-ipam) then keep what a listed sandbox holds in a network even
/// where the agent sees no cache entry or lease of it there (a cache kept
/// elsewhere, an IPAM whose store the agent does not read). Naming an
/// attachment that does not exist costs nothing.
fn listed_guard(
    listed: &BTreeSet<&str>,
    networks: &BTreeMap<String, NetworkView>,
) -> BTreeSet<(String, String)> {
    let mut guard: BTreeSet<(String, String)> = listed
        .iter()
        .map(|id| (id.to_string(), DEFAULT_IFNAME.to_string()))
        .collect();
    for view in networks.values() {
        for held in view.cached.iter().chain(&view.uncached) {
            if listed.contains(held.container_id.as_str()) {
                guard.insert((held.container_id.clone(), held.ifname.clone()));
            }
        }
    }
    guard
}

fn with_guard(decision: Decision, guard: &BTreeSet<(String, String)>) -> Decision {
    match decision {
        Decision::Collect { valid, release } => {
            let mut all: BTreeSet<(String, String)> = valid
                .into_iter()
                .map(|a| (a.container_id, a.ifname))
                .collect();
            all.extend(guard.iter().cloned());
            Decision::Collect {
                valid: all
                    .into_iter()
                    .map(|(container_id, ifname)| GcAttachment {
                        container_id,
                        ifname,
                    })
                    .collect(),
                release,
            }
        }
        refused => refused,
    }
}

fn decide_network(listed: &BTreeSet<&str>, view: &NetworkView, min_age: Duration) -> Decision {
    if !view.has_config {
        return Decision::Refuse(Refusal::NoConfig);
    }
    if view.gc_disabled {
        return Decision::Refuse(Refusal::GcDisabled);
    }
    let cached_keys: BTreeSet<(&str, &str)> = view
        .cached
        .iter()
        .map(|h| (h.container_id.as_str(), h.ifname.as_str()))
        .collect();
    let uncached: Vec<&Held> = view
        .uncached
        .iter()
        .filter(|h| !cached_keys.contains(&(h.container_id.as_str(), h.ifname.as_str())))
        .collect();
    if let Some(h) = uncached
        .iter()
        .find(|h| listed.contains(h.container_id.as_str()))
    {
        return Decision::Refuse(Refusal::ListedWithoutCache {
            container_id: h.container_id.clone(),
            ifname: h.ifname.clone(),
        });
    }
    let keep = |h: &Held| listed.contains(h.container_id.as_str()) || is_young(h.age, min_age);
    let mut valid = BTreeSet::new();
    let mut release = BTreeSet::new();
    let all = view
        .cached
        .iter()
        .map(|h| (h, true))
        .chain(uncached.into_iter().map(|h| (h, false)));
    for (held, cached) in all {
        if keep(held) {
            valid.insert((held.container_id.clone(), held.ifname.clone()));
        } else {
            release.insert(Release {
                container_id: held.container_id.clone(),
                ifname: held.ifname.clone(),
                cached,
            });
        }
    }
    Decision::Collect {
        valid: valid
            .into_iter()
            .map(|(container_id, ifname)| GcAttachment {
                container_id,
                ifname,
            })
            .collect(),
        release: release.into_iter().collect(),
    }
}

fn is_young(age: Option<Duration>, min_age: Duration) -> bool {
    age.is_none_or(|age| age < min_age)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN_AGE: Duration = Duration::from_secs(300);
    const OLD: Option<Duration> = Some(Duration::from_secs(3600));
    const YOUNG: Option<Duration> = Some(Duration::from_secs(10));

    fn held(cid: &str, ifname: &str, age: Option<Duration>) -> Held {
        Held {
            container_id: cid.into(),
            ifname: ifname.into(),
            age,
        }
    }

    fn view(cached: Vec<Held>, uncached: Vec<Held>) -> NetworkView {
        NetworkView {
            cached,
            uncached,
            has_config: true,
            gc_disabled: false,
        }
    }

    fn listed(ids: &[(&str, bool)]) -> Result<Vec<Sandbox>, String> {
        Ok(ids
            .iter()
            .map(|(id, ready)| Sandbox {
                id: id.to_string(),
                ready: *ready,
            })
            .collect())
    }

    fn one(
        sandboxes: &Result<Vec<Sandbox>, String>,
        v: NetworkView,
    ) -> (Decision, BTreeMap<String, Decision>) {
        let networks = BTreeMap::from([("net".to_string(), v)]);
        let all = decide(sandboxes, &networks, MIN_AGE);
        (all["net"].clone(), all)
    }

    fn att(cid: &str, ifname: &str) -> GcAttachment {
        GcAttachment {
            container_id: cid.into(),
            ifname: ifname.into(),
        }
    }

    fn rel(cid: &str, ifname: &str, cached: bool) -> Release {
        Release {
            container_id: cid.into(),
            ifname: ifname.into(),
            cached,
        }
    }

    #[test]
    fn old_unlisted_attachments_are_released_listed_ones_kept_in_any_state() {
        let v = view(
            vec![
                held("dead", "eth0", OLD),
                held("ready", "eth0", OLD),
                held("notready", "eth0", OLD),
                held("ready", "net1", OLD),
            ],
            vec![held("crashed", "eth0", OLD)],
        );
        let (d, _) = one(&listed(&[("ready", true), ("notready", false)]), v);
        assert_eq!(
            d,
            Decision::Collect {
                valid: vec![
                    att("notready", "eth0"),
                    att("ready", "eth0"),
                    att("ready", "net1")
                ],
                release: vec![rel("crashed", "eth0", false), rel("dead", "eth0", true)],
            }
        );
    }

    #[test]
    fn young_or_ageless_attachments_are_kept_and_named_valid() {
        let v = view(
            vec![
                held("fresh", "eth0", YOUNG),
                held("unknown", "eth0", None),
                held("edge", "eth0", Some(MIN_AGE)),
            ],
            vec![held("inflight", "eth0", YOUNG)],
        );
        let (d, _) = one(&listed(&[]), v);
        assert_eq!(
            d,
            Decision::Collect {
                valid: vec![
                    att("fresh", "eth0"),
                    att("inflight", "eth0"),
                    att("unknown", "eth0")
                ],
                // Exactly min_age old is old enough.
                release: vec![rel("edge", "eth0", true)],
            }
        );
    }

    #[test]
    fn an_unanswered_listing_refuses_every_network() {
        let networks = BTreeMap::from([
            ("a".to_string(), view(vec![held("x", "eth0", OLD)], vec![])),
            ("b".to_string(), view(vec![], vec![])),
        ]);
        let all = decide(&Err("connection refused".into()), &networks, MIN_AGE);
        assert_eq!(all.len(), 2);
        for d in all.values() {
            assert_eq!(
                d,
                &Decision::Refuse(Refusal::RuntimeUnknown("connection refused".into()))
            );
        }
    }

    #[test]
    fn a_listed_sandbox_holding_a_lease_without_cache_refuses_only_its_network() {
        let networks = BTreeMap::from([
            (
                "a".to_string(),
                view(
                    vec![held("dead", "eth0", OLD)],
                    vec![held("live", "net1", OLD)],
                ),
            ),
            (
                "b".to_string(),
                view(vec![held("dead", "eth0", OLD)], vec![]),
            ),
        ]);
        let all = decide(&listed(&[("live", true)]), &networks, MIN_AGE);
        assert_eq!(
            all["a"],
            Decision::Refuse(Refusal::ListedWithoutCache {
                container_id: "live".into(),
                ifname: "net1".into()
            })
        );
        assert_eq!(
            all["b"],
            Decision::Collect {
                // Listed: named valid with eth0 and the net1 it holds in
                // network a.
                valid: vec![att("live", "eth0"), att("live", "net1")],
                release: vec![rel("dead", "eth0", true)]
            }
        );
    }

    #[test]
    fn a_lease_of_a_cached_attachment_counts_once_as_cached() {
        let v = view(
            vec![held("dead", "eth0", OLD), held("live", "eth0", OLD)],
            vec![held("dead", "eth0", OLD), held("live", "eth0", OLD)],
        );
        let (d, _) = one(&listed(&[("live", false)]), v);
        assert_eq!(
            d,
            Decision::Collect {
                valid: vec![att("live", "eth0")],
                release: vec![rel("dead", "eth0", true)]
            }
        );
    }

    #[test]
    fn networks_without_config_or_with_gc_disabled_are_left_alone() {
        let mut v = view(vec![held("dead", "eth0", OLD)], vec![]);
        v.has_config = false;
        assert_eq!(
            one(&listed(&[]), v.clone()).0,
            Decision::Refuse(Refusal::NoConfig)
        );
        v.has_config = true;
        v.gc_disabled = true;
        assert_eq!(
            one(&listed(&[]), v).0,
            Decision::Refuse(Refusal::GcDisabled)
        );
    }

    #[test]
    fn listed_sandboxes_are_named_valid_in_every_network() {
        // Network b sees nothing of the listed sandbox (its cache kept
        // elsewhere); its GC still names it with eth0 and net2, the
        // interface it holds in network a.
        let networks = BTreeMap::from([
            (
                "a".to_string(),
                view(vec![held("pod", "net2", OLD)], vec![]),
            ),
            (
                "b".to_string(),
                view(vec![held("gone", "eth0", OLD)], vec![]),
            ),
        ]);
        let all = decide(&listed(&[("pod", true)]), &networks, MIN_AGE);
        assert_eq!(
            all["b"],
            Decision::Collect {
                valid: vec![att("pod", "eth0"), att("pod", "net2")],
                release: vec![rel("gone", "eth0", true)]
            }
        );
    }

    #[test]
    fn refusals_say_why_in_words() {
        assert_eq!(
            Refusal::ListedWithoutCache {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }
            .to_string(),
            "sandbox c1 is listed and holds an address of the network (eth0) but has no cache entry for it"
        );
        assert_eq!(
            Refusal::RuntimeUnknown("timeout".into()).to_string(),
            "the runtime's sandboxes are unknown (timeout)"
        );
    }
}
