//! The nftables backend, in-process over netlink: table `cni_hostport` in
//! families `ip` and `ip6`, with the reference plugin's chains and rules.
//!
//! ```text
//! prerouting (nat, dstnat) / output (nat, dstnat):
//!     <conditions> fib daddr type local jump hostports_all
//! hostports_all: jump hostip_hostports; jump hostports
//! hostip_hostports: empty (kept for rules of old reference versions)
//! hostports: [ip daddr <hostIP>] tcp dport 8080 dnat to <container>:80 comment "<id>"
//! masquerading (nat, srcnat):
//!     ip saddr <container> ip daddr <container> masquerade comment "<id>"
//!     ip saddr 127.0.0.1 ip daddr <container> masquerade comment "<id>"
//! ```
//!
//! Every ADD, DEL and GC is one nf_tables transaction. The shared chains
//! are created without `NLM_F_EXCL` (so creating an existing chain is not
//! an error), and the base chains are flushed and refilled inside the
//! same transaction, so concurrent first ADDs end with exactly one jump
//! rule each. Container rules are found by their comment, the container
//! ID, after listing only this table's rules, never the whole ruleset.
//!
//! Tables, chains, rules and listings go through libcni's nf_tables layer
//! ([`libcni::nftables`]); this module holds the plan.
//!
//! A transaction that deletes rules, or "creates" a chain that exists,
//! ends, when its socket closes, with the kernel waiting for an RCU grace
//! period (see [`libcni::nftables`]); that wait is most of a DEL's time.
//! An ADD avoids it when nothing shared changes: existing chains are not
//! sent again, and base chain rules carry a fingerprint
//! ([`userdata::FINGERPRINT`]) of what they say, so current ones are not
//! rewritten.
//!
//! Rules also carry the network name in a second userdata record
//! ([`userdata::NETWORK`]) that `nft` and the reference ignore: GC uses it
//! to touch only its own network's rules, and DEL to leave alone a
//! container of the same ID in another network. Rules without it (made by
//! the reference) are removed by DEL by comment alone, as the reference
//! does.

pub mod conditions;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::IpNetwork;
use libcni::error::ErrorCode;
use libcni::nftables::userdata::{self, Userdata};
use libcni::nftables::{
    retry_if_vanished, BaseChain, Batch, Hook, NfTablesError, NfTablesSocket, Rule, HOOK_OUTPUT,
    HOOK_POSTROUTING, HOOK_PREROUTING,
};
use libcni::IpFamily;
use nix::errno::Errno;

use crate::config::{ContainerIps, PortMapConf};
use conditions::{parse_conditions, ConditionError};
use rules::{Action, Direction, Matcher, RuleSpec};

pub const TABLE: &str = "cni_hostport";
pub const TABLE_COMMENT: &str = "CNI portmap plugin";
pub const HOSTPORTS_CHAIN: &str = "hostports";
/// Used for host-IP rules by old reference versions; kept, and emptied of
/// a container's rules on DEL.
pub const HOSTIP_HOSTPORTS_CHAIN: &str = "hostip_hostports";
pub const HOSTPORTS_ALL_CHAIN: &str = "hostports_all";
pub const PREROUTING_CHAIN: &str = "prerouting";
pub const OUTPUT_CHAIN: &str = "output";
pub const MASQUERADING_CHAIN: &str = "masquerading";

/// The chains holding per-container rules.
pub const CONTAINER_CHAINS: [&str; 3] =
    [HOSTPORTS_CHAIN, HOSTIP_HOSTPORTS_CHAIN, MASQUERADING_CHAIN];

/// `NF_IP_PRI_NAT_DST` ("dstnat") and `NF_IP_PRI_NAT_SRC` ("srcnat").
const DSTNAT_PRIORITY: i32 = -100;
const SRCNAT_PRIORITY: i32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error(transparent)]
    Condition(#[from] ConditionError),
    #[error("unable to set up nftables rules for port mappings: {0}")]
    Apply(#[source] NfTablesError),
    #[error("error deleting nftables rules: {0}")]
    Delete(#[source] NfTablesError),
    #[error("could not list rules in table {TABLE}: {0}")]
    List(#[source] NfTablesError),
    #[error("cannot open nftables netlink socket: {0}")]
    Open(#[source] NfTablesError),
    #[error("nftables is not usable: {0}")]
    Unusable(#[source] NfTablesError),
    #[error("container ID of {0} bytes is too long for an nftables rule comment")]
    CommentTooLong(usize),
    #[error("missing hostport rules in {0:?} chain")]
    MissingRules(&'static str),
}

impl NftError {
    pub fn is_config(&self) -> bool {
        self.error_code() == ErrorCode::InvalidNetworkConfig
    }

    /// The spec code: 7 for a condition the configuration got wrong, 999
    /// for what the host refused.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            NftError::Condition(_) => ErrorCode::InvalidNetworkConfig,
            NftError::Apply(_)
            | NftError::Delete(_)
            | NftError::List(_)
            | NftError::Open(_)
            | NftError::Unusable(_)
            | NftError::CommentTooLong(_)
            | NftError::MissingRules(_) => ErrorCode::Internal,
        }
    }

    fn errno(&self) -> Option<Errno> {
        match self {
            NftError::Apply(e)
            | NftError::Delete(e)
            | NftError::List(e)
            | NftError::Open(e)
            | NftError::Unusable(e) => e.errno(),
            _ => None,
        }
    }
}

/// The userdata of a container rule: the comment `nft` shows, then the
/// network name when it fits.
pub fn rule_userdata(comment: &str, network: &str) -> Result<Vec<u8>, NftError> {
    let mut data = Userdata::new();
    if !data.push_text(userdata::COMMENT, comment) {
        return Err(NftError::CommentTooLong(comment.len()));
    }
    if !data.push_text(userdata::NETWORK, network) {
        log::warn!("network name too long to be recorded in the rule; GC will not see the rule");
    }
    Ok(data.into_bytes())
}

/// The records of a rule's userdata this plugin reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleTags {
    /// The comment `nft` shows (the container ID on container rules).
    pub comment: Option<String>,
    /// The network that made a container rule.
    pub network: Option<String>,
    /// The fingerprint of a base chain rule ([`spec_fingerprint`]).
    pub spec: Option<String>,
}

pub fn parse_rule_userdata(bytes: &[u8]) -> RuleTags {
    let text = |kind| userdata::find(bytes, kind).map(userdata::text);
    RuleTags {
        comment: text(userdata::COMMENT),
        network: text(userdata::NETWORK),
        spec: text(userdata::FINGERPRINT),
    }
}

/// Whether the `kind` text record of `userdata` can read as `wanted` (as
/// [`userdata::text`] reads it): a byte comparison, which only leaves the
/// decision to that reading when the record is not valid UTF-8.
fn may_be_text(userdata: &[u8], kind: u8, wanted: &str) -> bool {
    let Some(value) = userdata::find(userdata, kind) else {
        return false;
    };
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    let value = value.get(..end).unwrap_or_default();
    match std::str::from_utf8(value) {
        Ok(text) => text == wanted,
        Err(_) => true,
    }
}

/// What a base chain rule says, as a short hash of its text: a rule
/// carrying the fingerprint of the rule an ADD would write needs no
/// rewriting.
pub fn spec_fingerprint(rule: &RuleSpec) -> String {
    userdata::fingerprint(&format!("{} {}", rule.chain, rule.nft_text()))
}

fn spec_userdata(rule: &RuleSpec) -> Vec<u8> {
    let mut data = Userdata::new();
    // 32 hex digits always fit.
    data.push_text(userdata::FINGERPRINT, &spec_fingerprint(rule));
    data.into_bytes()
}

/// A rule of our table as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    pub family: IpFamily,
    pub chain: String,
    pub handle: u64,
    pub comment: Option<String>,
    pub network: Option<String>,
    pub spec: Option<String>,
}

impl ListedRule {
    /// Whether this is a rule of `container_id` in `network`: its comment
    /// is the ID and it names no other network.
    fn belongs_to(&self, network: &str, container_id: &str) -> bool {
        self.comment.as_deref() == Some(container_id)
            && self.network.as_deref().is_none_or(|n| n == network)
            && CONTAINER_CHAINS.contains(&self.chain.as_str())
    }

    fn delete(&self, batch: &mut Batch) {
        batch.delete_rule(
            libcni::nftables::Family::from(self.family),
            TABLE,
            &self.chain,
            self.handle,
        );
    }
}

/// A chain of our table as the kernel has it: the hook number and
/// priority of a base chain, `None` for a regular chain.
pub type ExistingChains = BTreeMap<String, Option<(u32, i32)>>;

/// Everything an ADD writes for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyPlan {
    pub family: IpFamily,
    pub snat: bool,
    /// The rules of `hostports_all`, `prerouting` and `output`, which
    /// replace those chains' contents.
    pub base_rules: Vec<RuleSpec>,
    /// The container's rules in `hostports` and `masquerading`.
    pub container_rules: Vec<RuleSpec>,
}

impl FamilyPlan {
    /// The rules of the reference for a container at `container`.
    pub fn new(
        conf: &PortMapConf,
        container_id: &str,
        container: IpNetwork,
    ) -> Result<FamilyPlan, ConditionError> {
        let family = IpFamily::of(container.ip());
        let mut entry_matchers = parse_conditions(conf.conditions(family), family)?;
        entry_matchers.push(Matcher::LocalDestination);

        let base = |chain, matchers, action| RuleSpec {
            family,
            chain,
            matchers,
            action,
            comment: None,
        };
        let base_rules = vec![
            base(
                HOSTPORTS_ALL_CHAIN,
                Vec::new(),
                Action::Jump(HOSTIP_HOSTPORTS_CHAIN),
            ),
            base(
                HOSTPORTS_ALL_CHAIN,
                Vec::new(),
                Action::Jump(HOSTPORTS_CHAIN),
            ),
            base(
                PREROUTING_CHAIN,
                entry_matchers.clone(),
                Action::Jump(HOSTPORTS_ALL_CHAIN),
            ),
            base(
                OUTPUT_CHAIN,
                entry_matchers,
                Action::Jump(HOSTPORTS_ALL_CHAIN),
            ),
        ];

        let comment = Some(container_id.to_string());
        let mut container_rules = Vec::new();
        for mapping in conf.mappings_for(family) {
            let mut matchers = Vec::new();
            if let Some(destination) = mapping.destination() {
                matchers.push(Matcher::Address {
                    direction: Direction::Destination,
                    op: rules::CmpOp::Eq,
                    network: IpNetwork::from(destination),
                });
            }
            matchers.push(Matcher::DestinationPort {
                protocol: mapping.protocol,
                port: mapping.host_port,
            });
            container_rules.push(RuleSpec {
                family,
                chain: HOSTPORTS_CHAIN,
                matchers,
                action: Action::DnatTo {
                    address: container.ip(),
                    port: mapping.container_port,
                },
                comment: comment.clone(),
            });
        }
        if conf.snat {
            // Hairpin (the container reaching itself through the host
            // port) and, for IPv4, localhost need masquerading to work.
            let host = IpNetwork::from(container.ip());
            let source = if conf.masq_all {
                IpNetwork::new(family.unspecified(), 0).unwrap_or(host)
            } else {
                host
            };
            let mut sources = vec![source];
            if family == IpFamily::V4 && !conf.masq_all {
                sources.push(IpNetwork::from(IpAddr::V4(Ipv4Addr::LOCALHOST)));
            }
            for source in sources {
                container_rules.push(RuleSpec {
                    family,
                    chain: MASQUERADING_CHAIN,
                    matchers: vec![
                        Matcher::Address {
                            direction: Direction::Source,
                            op: rules::CmpOp::Eq,
                            network: source,
                        },
                        Matcher::Address {
                            direction: Direction::Destination,
                            op: rules::CmpOp::Eq,
                            network: host,
                        },
                    ],
                    action: Action::Masquerade,
                    comment: comment.clone(),
                });
            }
        }
        Ok(FamilyPlan {
            family,
            snat: conf.snat,
            base_rules,
            container_rules,
        })
    }

    /// Whether the base chains of this family already hold exactly the
    /// rules this plan would write (by their fingerprints, in order).
    fn base_chains_current(&self, listed: &[ListedRule]) -> bool {
        [HOSTPORTS_ALL_CHAIN, PREROUTING_CHAIN, OUTPUT_CHAIN]
            .iter()
            .all(|chain| {
                let present: Vec<Option<&str>> = listed
                    .iter()
                    .filter(|r| r.family == self.family && r.chain == *chain)
                    .map(|r| r.spec.as_deref())
                    .collect();
                let wanted: Vec<String> = self
                    .base_rules
                    .iter()
                    .filter(|r| r.chain == *chain)
                    .map(spec_fingerprint)
                    .collect();
                present.len() == wanted.len()
                    && present
                        .iter()
                        .zip(&wanted)
                        .all(|(p, w)| *p == Some(w.as_str()))
            })
    }

    /// The table, the chains `existing` lacks, and, unless `listed` shows
    /// them current, the base chains' fresh contents.
    ///
    /// Deleting rules, or "creating" a chain that exists (an update),
    /// leaves objects for the kernel to free after an RCU grace period,
    /// and closing the socket waits for that (about 10 ms on the test
    /// VM, more than all the rest of an ADD); so both happen only when
    /// something has to change.
    fn add_setup(&self, batch: &mut Batch, listed: &[ListedRule], existing: &ExistingChains) {
        let family = libcni::nftables::Family::from(self.family);
        // Creating an existing table is free; creating an existing chain
        // is not (see `base_chains_current`), so chains already in place
        // with the right hook are left out.
        batch.add_table(
            family,
            TABLE,
            Some(userdata::comment(TABLE_COMMENT.as_bytes())),
        );
        let mut chains: Vec<(&str, Option<Hook>)> = vec![
            (HOSTPORTS_CHAIN, None),
            (HOSTIP_HOSTPORTS_CHAIN, None),
            (HOSTPORTS_ALL_CHAIN, None),
            (
                PREROUTING_CHAIN,
                Some(nat_hook(HOOK_PREROUTING, DSTNAT_PRIORITY)),
            ),
            (OUTPUT_CHAIN, Some(nat_hook(HOOK_OUTPUT, DSTNAT_PRIORITY))),
        ];
        if self.snat {
            chains.push((
                MASQUERADING_CHAIN,
                Some(nat_hook(HOOK_POSTROUTING, SRCNAT_PRIORITY)),
            ));
        }
        for (chain, hook) in chains {
            let wanted = hook.map(|h| (h.number, h.priority));
            if existing.get(chain) != Some(&wanted) {
                let base = hook.map(|hook| BaseChain {
                    chain_type: "nat",
                    hook,
                    policy_accept: false,
                });
                batch.add_chain(family, TABLE, chain, base, None);
            }
        }
        if self.base_chains_current(listed) {
            return;
        }
        // Emptied and refilled in the same transaction, so concurrent
        // ADDs always leave exactly one copy of each rule.
        for chain in [HOSTPORTS_ALL_CHAIN, PREROUTING_CHAIN, OUTPUT_CHAIN] {
            batch.flush_chain(family, TABLE, chain);
        }
        for rule in &self.base_rules {
            add_rule(batch, rule, Some(spec_userdata(rule)));
        }
    }
}

fn nat_hook(number: u32, priority: i32) -> Hook {
    Hook { number, priority }
}

fn add_rule(batch: &mut Batch, rule: &RuleSpec, userdata: Option<Vec<u8>>) {
    batch.add_rule(
        libcni::nftables::Family::from(rule.family),
        TABLE,
        rule.chain,
        &Rule {
            exprs: rule.expressions(),
            userdata,
            compat_protocol: None,
        },
    );
}

/// The nftables backend over one netlink socket.
#[derive(Debug)]
pub struct NftMapper {
    socket: NfTablesSocket,
}

impl NftMapper {
    pub fn open() -> Result<NftMapper, NftError> {
        Ok(NftMapper {
            socket: NfTablesSocket::open().map_err(NftError::Open)?,
        })
    }

    /// Whether nf_tables answers here (asks for the ruleset generation,
    /// which lists nothing).
    pub fn probe(&mut self) -> Result<(), NftError> {
        self.socket.probe().map_err(NftError::Unusable)
    }

    /// The rules of table `cni_hostport` in both families: one dump per
    /// family, filtered by the kernel to this table. (With a table filter
    /// the kernel dumps only the first matching table, so an unspecified
    /// family would miss `ip6`.)
    pub fn list_rules(&mut self) -> Result<Vec<ListedRule>, NftError> {
        self.list_rules_tagged(|_| true)
    }

    /// [`list_rules`](Self::list_rules), keeping only the rules whose
    /// userdata `may_keep` accepts.
    fn list_rules_tagged(
        &mut self,
        mut may_keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<Vec<ListedRule>, NftError> {
        let mut rules = Vec::new();
        for family in IpFamily::ALL {
            rules.extend(self.list_where(family, None, &mut may_keep)?);
        }
        Ok(rules)
    }

    /// The rules of `chain` (of the whole table with `None`) in `family`;
    /// a missing table or chain lists as no rules.
    fn list(&mut self, family: IpFamily, chain: Option<&str>) -> Result<Vec<ListedRule>, NftError> {
        self.list_where(family, chain, |_| true)
    }

    /// [`list`](Self::list) of the rules whose raw userdata `may_keep`
    /// accepts: the per-container chains hold a rule per mapping of every
    /// pod, and DEL and GC read them through this filter so that the rules
    /// of other pods are not copied.
    fn list_where(
        &mut self,
        family: IpFamily,
        chain: Option<&str>,
        mut may_keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<Vec<ListedRule>, NftError> {
        let listed = self
            .socket
            .list_rules_where(libcni::nftables::Family::from(family), TABLE, chain, |r| {
                may_keep(r.userdata)
            })
            .map_err(NftError::List)?;
        Ok(listed
            .into_iter()
            .map(|rule| {
                let tags = parse_rule_userdata(&rule.userdata);
                ListedRule {
                    family,
                    chain: rule.chain,
                    handle: rule.handle,
                    comment: tags.comment,
                    network: tags.network,
                    spec: tags.spec,
                }
            })
            .collect())
    }

    /// Our chains in `family` that exist, with their hooks: one small
    /// request per chain, so nothing else of the ruleset is read.
    pub fn existing_chains(&mut self, family: IpFamily) -> Result<ExistingChains, NftError> {
        let mut chains = ExistingChains::new();
        for name in [
            HOSTPORTS_CHAIN,
            HOSTIP_HOSTPORTS_CHAIN,
            HOSTPORTS_ALL_CHAIN,
            PREROUTING_CHAIN,
            OUTPUT_CHAIN,
            MASQUERADING_CHAIN,
        ] {
            let chain = self
                .socket
                .get_chain(libcni::nftables::Family::from(family), TABLE, name)
                .map_err(NftError::List)?;
            if let Some(chain) = chain {
                let hook = chain.hook.map(|h| (h.number, h.priority));
                chains.insert(name.to_string(), hook);
            }
        }
        Ok(chains)
    }

    /// One transaction per family set: the table and chains, and the base
    /// chains refilled where they are not current, then the container's
    /// rules added.
    ///
    /// Only the base chains are listed (a few rules each), never the
    /// per-container chains, so an ADD costs the same with 500 pods'
    /// rules as with none. As in the reference, an earlier copy of this
    /// container's rules (a second ADD without DEL, which the spec
    /// forbids) is not looked for: DEL removes every copy.
    pub fn forward(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), NftError> {
        let plans = ips
            .iter()
            .map(|(_, ip)| FamilyPlan::new(conf, container_id, ip))
            .collect::<Result<Vec<_>, _>>()?;
        let userdata = rule_userdata(container_id, &conf.network)?;
        // ENOENT: something listed went away meanwhile (a rule deleted,
        // the table flushed by hand); look again.
        retry_if_vanished(NftError::errno, || {
            let mut batch = Batch::new();
            for plan in &plans {
                let existing = self.existing_chains(plan.family)?;
                let mut listed = Vec::new();
                for chain in [HOSTPORTS_ALL_CHAIN, PREROUTING_CHAIN, OUTPUT_CHAIN] {
                    if existing.contains_key(chain) {
                        listed.extend(self.list(plan.family, Some(chain))?);
                    }
                }
                plan.add_setup(&mut batch, &listed, &existing);
            }
            for plan in &plans {
                for rule in &plan.container_rules {
                    add_rule(&mut batch, rule, Some(userdata.clone()));
                }
            }
            self.socket.commit(batch).map_err(NftError::Apply)
        })
    }

    /// Deletes the container's rules in both families; nothing to delete
    /// (or no table) is success.
    pub fn unforward(&mut self, network: &str, container_id: &str) -> Result<(), NftError> {
        self.delete_where(
            |userdata| may_be_text(userdata, userdata::COMMENT, container_id),
            |r| r.belongs_to(network, container_id),
        )
    }

    /// Deletes the rules this network made for containers not in `valid`.
    pub fn gc(&mut self, network: &str, valid: &BTreeSet<String>) -> Result<(), NftError> {
        self.delete_where(
            |userdata| may_be_text(userdata, userdata::NETWORK, network),
            |r| {
                CONTAINER_CHAINS.contains(&r.chain.as_str())
                    && r.network.as_deref() == Some(network)
                    && r.comment.as_ref().is_some_and(|c| !valid.contains(c))
            },
        )
    }

    /// Deletes the rules for which `doomed` holds, reading only those
    /// whose userdata `may_be_doomed` accepts.
    fn delete_where(
        &mut self,
        may_be_doomed: impl Fn(&[u8]) -> bool,
        doomed: impl Fn(&ListedRule) -> bool,
    ) -> Result<(), NftError> {
        retry_if_vanished(NftError::errno, || {
            let mut batch = Batch::new();
            let listed = self.list_rules_tagged(&may_be_doomed)?;
            for rule in listed.iter().filter(|r| doomed(r)) {
                rule.delete(&mut batch);
            }
            self.socket.commit(batch).map_err(NftError::Delete)
        })
    }

    /// Counts the container's rules, as the reference does: one per
    /// mapping of the family in `hostports`, and the masquerade rules.
    pub fn check(
        &mut self,
        conf: &PortMapConf,
        container_id: &str,
        ips: &ContainerIps,
    ) -> Result<(), NftError> {
        let rules = self.list_rules()?;
        for (family, _) in ips.iter() {
            let count = |chain: &str| {
                rules
                    .iter()
                    .filter(|r| {
                        r.family == family
                            && r.chain == chain
                            && r.belongs_to(&conf.network, container_id)
                    })
                    .count()
            };
            let in_chain = |chain: &str| {
                rules
                    .iter()
                    .filter(|r| r.family == family && r.chain == chain)
                    .count()
            };
            if count(HOSTPORTS_CHAIN) < conf.mappings_for(family).count() {
                return Err(NftError::MissingRules(HOSTPORTS_CHAIN));
            }
            if conf.snat {
                let wanted = if family == IpFamily::V4 && !conf.masq_all {
                    2
                } else {
                    1
                };
                if count(MASQUERADING_CHAIN) < wanted {
                    return Err(NftError::MissingRules(MASQUERADING_CHAIN));
                }
            }
            for (chain, wanted) in [
                (PREROUTING_CHAIN, 1),
                (OUTPUT_CHAIN, 1),
                (HOSTPORTS_ALL_CHAIN, 2),
            ] {
                if in_chain(chain) < wanted {
                    return Err(NftError::MissingRules(chain));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
