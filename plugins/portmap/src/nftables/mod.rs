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
//! Messages are built with `netlink-packet-netfilter` (MIT, the same
//! netlink stack as libcni), whose `Expressions::Other` carries the
//! expressions it has no type for (`fib`, `nat`, `masq`). rustables 0.9,
//! the other candidate, cannot express `fib` through its public API (its
//! expression enum is closed) and is GPL-3.0.
//!
//! Every transaction ends, when its socket closes, with the kernel
//! waiting for the transaction's objects to be freed after an RCU grace
//! period (the `NETLINK_URELEASE` notifier flushes nf_tables' destroy
//! work). That wait, about 10 ms on the test VM, is most of an ADD's or
//! DEL's time; every nftables client (the `nft` binary included) pays it.
//!
//! Rules also carry the network name in a second userdata record (type
//! [`UDATA_NETWORK`]) that `nft` and the reference ignore: GC uses it to
//! touch only its own network's rules, and DEL to leave alone a container
//! of the same ID in another network. Rules without it (made by the
//! reference) are removed by DEL by comment alone, as the reference does.

pub mod conditions;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, GenMessage, Hook, HookNumber, InetHookNumber, NfTablesMessage,
    RuleAttribute, RuleMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use nix::errno::Errno;
use sha2::{Digest, Sha512};

use crate::config::{ContainerIps, PortMapConf};
use crate::nfnetlink::{attribute_string, attributes, BatchMessage, NfnlError, NfnlSocket};
use crate::Family;
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

/// `NFTNL_UDATA_RULE_COMMENT` / `NFTNL_UDATA_TABLE_COMMENT`.
const UDATA_COMMENT: u8 = 0;
/// Our record with the network name; far above libnftnl's own types
/// (0 and 1 today), which `nft` skips when it does not know them.
pub const UDATA_NETWORK: u8 = 0xc0;
/// Our record with the fingerprint of a base chain rule.
pub const UDATA_SPEC: u8 = 0xc1;
/// `NFT_USERDATA_MAXLEN`.
const MAX_USERDATA: usize = 256;

const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_USERDATA: u16 = 7;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// `NF_IP_PRI_NAT_DST` ("dstnat") and `NF_IP_PRI_NAT_SRC` ("srcnat").
const DSTNAT_PRIORITY: i32 = -100;
const SRCNAT_PRIORITY: i32 = 100;

/// A transaction deleting listed rules fails with ENOENT when one of them
/// went away in between (another DEL of the same container); it is then
/// listed and tried again.
const ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error(transparent)]
    Condition(#[from] ConditionError),
    #[error("unable to set up nftables rules for port mappings: {0}")]
    Apply(#[source] NfnlError),
    #[error("error deleting nftables rules: {0}")]
    Delete(#[source] NfnlError),
    #[error("could not list rules in table {TABLE}: {0}")]
    List(#[source] NfnlError),
    #[error("cannot open nftables netlink socket: {0}")]
    Open(#[source] NfnlError),
    #[error("nftables is not usable: {0}")]
    Unusable(#[source] NfnlError),
    #[error("container ID of {0} bytes is too long for an nftables rule comment")]
    CommentTooLong(usize),
    #[error("missing hostport rules in {0:?} chain")]
    MissingRules(&'static str),
}

impl NftError {
    pub fn is_config(&self) -> bool {
        matches!(self, NftError::Condition(_))
    }
}

fn protocol_family(family: Family) -> NetfilterProtoFamily {
    match family {
        Family::V4 => NetfilterProtoFamily::IPv4,
        Family::V6 => NetfilterProtoFamily::IPv6,
    }
}

fn message(family: NetfilterProtoFamily, inner: NfTablesMessage) -> NetfilterMessage {
    NetfilterMessage::new(NetfilterHeader::new(family, 0, 0), inner)
}

/// Userdata records: type, length, value.
fn push_record(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    out.push(kind);
    out.push(value.len() as u8);
    out.extend_from_slice(value);
}

fn nul_terminated(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// The userdata of a container rule: the comment `nft` shows, then the
/// network name when it fits.
pub fn rule_userdata(comment: &str, network: &str) -> Result<Vec<u8>, NftError> {
    let comment = nul_terminated(comment);
    if comment.len() > usize::from(u8::MAX) || comment.len() + 2 > MAX_USERDATA {
        return Err(NftError::CommentTooLong(comment.len() - 1));
    }
    let mut out = Vec::with_capacity(MAX_USERDATA);
    push_record(&mut out, UDATA_COMMENT, &comment);
    let network = nul_terminated(network);
    if network.len() <= usize::from(u8::MAX) && out.len() + 2 + network.len() <= MAX_USERDATA {
        push_record(&mut out, UDATA_NETWORK, &network);
    } else {
        log::warn!("network name too long to be recorded in the rule; GC will not see the rule");
    }
    Ok(out)
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

pub fn parse_rule_userdata(mut bytes: &[u8]) -> RuleTags {
    let mut tags = RuleTags::default();
    while let [kind, len, rest @ ..] = bytes {
        let Some(value) = rest.get(..usize::from(*len)) else {
            break;
        };
        let text = || {
            let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
            String::from_utf8_lossy(value.get(..end).unwrap_or_default()).into_owned()
        };
        match *kind {
            UDATA_COMMENT => tags.comment = Some(text()),
            UDATA_NETWORK => tags.network = Some(text()),
            UDATA_SPEC => tags.spec = Some(text()),
            _ => {}
        }
        bytes = rest.get(usize::from(*len)..).unwrap_or_default();
    }
    tags
}

/// What a base chain rule says, as a short hash of its text: a rule
/// carrying the fingerprint of the rule an ADD would write needs no
/// rewriting.
pub fn spec_fingerprint(rule: &RuleSpec) -> String {
    let digest = Sha512::digest(format!("{} {}", rule.chain, rule.nft_text()).as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

fn spec_userdata(rule: &RuleSpec) -> Vec<u8> {
    let mut out = Vec::new();
    push_record(
        &mut out,
        UDATA_SPEC,
        &nul_terminated(&spec_fingerprint(rule)),
    );
    out
}

/// A rule of our table as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    pub family: Family,
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

    fn delete_message(&self) -> BatchMessage {
        BatchMessage {
            message: message(
                protocol_family(self.family),
                NfTablesMessage::DeleteRule(RuleMessage {
                    attributes: vec![
                        RuleAttribute::Table(TABLE.to_string()),
                        RuleAttribute::Chain(self.chain.clone()),
                        RuleAttribute::Handle(self.handle),
                    ],
                }),
            ),
            flags: 0,
        }
    }
}

/// A chain of our table as the kernel has it: the hook number and
/// priority of a base chain, `None` for a regular chain.
pub type ExistingChains = BTreeMap<String, Option<(u32, i32)>>;

/// Everything an ADD writes for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyPlan {
    pub family: Family,
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
        let family = Family::of(container.ip());
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
            if family == Family::V4 && !conf.masq_all {
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
    fn setup_messages(
        &self,
        listed: &[ListedRule],
        existing: &ExistingChains,
    ) -> Vec<BatchMessage> {
        let family = protocol_family(self.family);
        let mut out = Vec::new();
        let mut table_comment = Vec::new();
        push_record(
            &mut table_comment,
            UDATA_COMMENT,
            &nul_terminated(TABLE_COMMENT),
        );
        // Creating an existing table is free; creating an existing chain
        // is not (see `base_chains_current`), so chains already in place
        // with the right hook are left out.
        out.push(BatchMessage {
            message: message(
                family,
                NfTablesMessage::NewTable(TableMessage {
                    attributes: vec![
                        TableAttribute::Name(TABLE.to_string()),
                        TableAttribute::UserData(table_comment),
                    ],
                }),
            ),
            flags: NLM_F_CREATE,
        });
        let mut chains: Vec<(&str, Option<(InetHookNumber, i32)>)> = vec![
            (HOSTPORTS_CHAIN, None),
            (HOSTIP_HOSTPORTS_CHAIN, None),
            (HOSTPORTS_ALL_CHAIN, None),
            (
                PREROUTING_CHAIN,
                Some((InetHookNumber::PreRouting, DSTNAT_PRIORITY)),
            ),
            (
                OUTPUT_CHAIN,
                Some((InetHookNumber::LocalOut, DSTNAT_PRIORITY)),
            ),
        ];
        if self.snat {
            chains.push((
                MASQUERADING_CHAIN,
                Some((InetHookNumber::PostRouting, SRCNAT_PRIORITY)),
            ));
        }
        for (chain, hook) in chains {
            let wanted = hook.map(|(number, priority)| (u32::from(number), priority));
            if existing.get(chain) != Some(&wanted) {
                out.push(new_chain(family, chain, hook));
            }
        }
        if self.base_chains_current(listed) {
            return out;
        }
        // Emptied and refilled in the same transaction, so concurrent
        // ADDs always leave exactly one copy of each rule.
        for chain in [HOSTPORTS_ALL_CHAIN, PREROUTING_CHAIN, OUTPUT_CHAIN] {
            out.push(flush_chain(family, chain));
        }
        for rule in &self.base_rules {
            out.push(new_rule(rule, Some(spec_userdata(rule))));
        }
        out
    }
}

/// The hook number and priority of a listed chain, if it is a base chain.
fn chain_hook(attrs: &[u8]) -> Option<(u32, i32)> {
    let (_, hook) = attributes(attrs).find(|(kind, _)| *kind == NFTA_CHAIN_HOOK)?;
    let mut number = None;
    let mut priority = None;
    for (kind, value) in attributes(hook) {
        let value = <[u8; 4]>::try_from(value).ok();
        match kind {
            NFTA_HOOK_HOOKNUM => number = value.map(u32::from_be_bytes),
            NFTA_HOOK_PRIORITY => priority = value.map(i32::from_be_bytes),
            _ => {}
        }
    }
    Some((number?, priority?))
}

fn new_chain(
    family: NetfilterProtoFamily,
    name: &str,
    hook: Option<(InetHookNumber, i32)>,
) -> BatchMessage {
    let mut attributes = vec![
        ChainAttribute::Table(TABLE.to_string()),
        ChainAttribute::Name(name.to_string()),
    ];
    if let Some((number, priority)) = hook {
        attributes.push(ChainAttribute::Hook(vec![
            Hook::Number(HookNumber::Inet(number)),
            // The kernel reads the priority as a big-endian s32.
            Hook::Priority(priority as u32),
        ]));
        attributes.push(ChainAttribute::Type("nat".to_string()));
    }
    BatchMessage {
        message: message(
            family,
            NfTablesMessage::NewChain(ChainMessage { attributes }),
        ),
        // No NLM_F_EXCL: an existing chain is left as it is.
        flags: NLM_F_CREATE,
    }
}

/// A rule deletion naming only the chain empties the chain.
fn flush_chain(family: NetfilterProtoFamily, chain: &str) -> BatchMessage {
    BatchMessage {
        message: message(
            family,
            NfTablesMessage::DeleteRule(RuleMessage {
                attributes: vec![
                    RuleAttribute::Table(TABLE.to_string()),
                    RuleAttribute::Chain(chain.to_string()),
                ],
            }),
        ),
        flags: 0,
    }
}

fn new_rule(rule: &RuleSpec, userdata: Option<Vec<u8>>) -> BatchMessage {
    let mut attributes = vec![
        RuleAttribute::Table(TABLE.to_string()),
        RuleAttribute::Chain(rule.chain.to_string()),
        RuleAttribute::Expressions(rule.expressions()),
    ];
    if let Some(userdata) = userdata {
        attributes.push(RuleAttribute::UserData(userdata));
    }
    BatchMessage {
        message: message(
            protocol_family(rule.family),
            NfTablesMessage::NewRule(RuleMessage { attributes }),
        ),
        flags: NLM_F_CREATE | NLM_F_APPEND,
    }
}

/// The nftables backend over one netlink socket.
#[derive(Debug)]
pub struct NftMapper {
    socket: NfnlSocket,
}

impl NftMapper {
    pub fn open() -> Result<NftMapper, NftError> {
        Ok(NftMapper {
            socket: NfnlSocket::open().map_err(NftError::Open)?,
        })
    }

    /// Whether nf_tables answers here (asks for the ruleset generation,
    /// which lists nothing).
    pub fn probe(&mut self) -> Result<(), NftError> {
        self.socket
            .request_ack(message(
                NetfilterProtoFamily::Unspec,
                NfTablesMessage::GetGen(GenMessage {
                    attributes: Vec::new(),
                }),
            ))
            .map_err(NftError::Unusable)
    }

    /// The rules of table `cni_hostport` in both families: one dump per
    /// family, filtered by the kernel to this table. (With a table filter
    /// the kernel dumps only the first matching table, so an unspecified
    /// family would miss `ip6`.)
    pub fn list_rules(&mut self) -> Result<Vec<ListedRule>, NftError> {
        let mut rules = Vec::new();
        for family in Family::ALL {
            rules.extend(self.list_family_rules(family)?);
        }
        Ok(rules)
    }

    fn list_family_rules(&mut self, family: Family) -> Result<Vec<ListedRule>, NftError> {
        let request = message(
            protocol_family(family),
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(TABLE.to_string())],
            }),
        );
        let replies = match self.socket.dump(request) {
            Ok(replies) => replies,
            Err(e) if e.errno() == Some(Errno::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(NftError::List(e)),
        };
        let mut rules = Vec::new();
        for reply in replies {
            if reply.message_type != (NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE) {
                continue;
            }
            let reply_family = match reply.family {
                NFPROTO_IPV4 => Family::V4,
                NFPROTO_IPV6 => Family::V6,
                _ => continue,
            };
            if reply_family != family {
                continue;
            }
            let mut table = String::new();
            let mut chain = String::new();
            let mut handle = None;
            let mut userdata: &[u8] = &[];
            for (kind, value) in attributes(&reply.attributes) {
                match kind {
                    NFTA_RULE_TABLE => table = attribute_string(value),
                    NFTA_RULE_CHAIN => chain = attribute_string(value),
                    NFTA_RULE_HANDLE => {
                        handle = <[u8; 8]>::try_from(value).ok().map(u64::from_be_bytes)
                    }
                    NFTA_RULE_USERDATA => userdata = value,
                    _ => {}
                }
            }
            let Some(handle) = handle else { continue };
            if table != TABLE {
                continue;
            }
            let tags = parse_rule_userdata(userdata);
            rules.push(ListedRule {
                family,
                chain,
                handle,
                comment: tags.comment,
                network: tags.network,
                spec: tags.spec,
            });
        }
        Ok(rules)
    }

    /// Our chains in `family` that exist, with their hooks: one small
    /// request per chain, so nothing else of the ruleset is read.
    pub fn existing_chains(&mut self, family: Family) -> Result<ExistingChains, NftError> {
        let mut chains = ExistingChains::new();
        for name in [
            HOSTPORTS_CHAIN,
            HOSTIP_HOSTPORTS_CHAIN,
            HOSTPORTS_ALL_CHAIN,
            PREROUTING_CHAIN,
            OUTPUT_CHAIN,
            MASQUERADING_CHAIN,
        ] {
            let request = message(
                protocol_family(family),
                NfTablesMessage::GetChain(ChainMessage {
                    attributes: vec![
                        ChainAttribute::Table(TABLE.to_string()),
                        ChainAttribute::Name(name.to_string()),
                    ],
                }),
            );
            let replies = match self.socket.get(request) {
                Ok(replies) => replies,
                Err(e) if e.errno() == Some(Errno::ENOENT) => continue,
                Err(e) => return Err(NftError::List(e)),
            };
            for reply in replies {
                if reply.message_type != (NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWCHAIN) {
                    continue;
                }
                chains.insert(name.to_string(), chain_hook(&reply.attributes));
            }
        }
        Ok(chains)
    }

    /// One transaction per family set: the table and chains, the base
    /// chains refilled, the container's old rules (a repeated ADD) removed
    /// and its new rules added.
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
        let mut attempt = 1;
        loop {
            let listed = self.list_rules()?;
            let mut existing = Vec::new();
            for plan in &plans {
                existing.push(self.existing_chains(plan.family)?);
            }
            let stale: Vec<&ListedRule> = listed
                .iter()
                .filter(|r| r.belongs_to(&conf.network, container_id))
                .collect();
            let mut messages = Vec::new();
            for (plan, existing) in plans.iter().zip(&existing) {
                messages.extend(plan.setup_messages(&listed, existing));
            }
            messages.extend(stale.iter().map(|r| r.delete_message()));
            for plan in &plans {
                for rule in &plan.container_rules {
                    messages.push(new_rule(rule, Some(userdata.clone())));
                }
            }
            // ENOENT: something listed went away meanwhile (a rule deleted,
            // the table flushed by hand); look again.
            match self.socket.transaction(messages) {
                Err(e) if e.errno() == Some(Errno::ENOENT) && attempt < ATTEMPTS => {
                    attempt += 1;
                }
                result => return result.map_err(NftError::Apply),
            }
        }
    }

    /// Deletes the container's rules in both families; nothing to delete
    /// (or no table) is success.
    pub fn unforward(&mut self, network: &str, container_id: &str) -> Result<(), NftError> {
        self.delete_where(|r| r.belongs_to(network, container_id))
    }

    /// Deletes the rules this network made for containers not in `valid`.
    pub fn gc(&mut self, network: &str, valid: &BTreeSet<String>) -> Result<(), NftError> {
        self.delete_where(|r| {
            CONTAINER_CHAINS.contains(&r.chain.as_str())
                && r.network.as_deref() == Some(network)
                && r.comment.as_ref().is_some_and(|c| !valid.contains(c))
        })
    }

    fn delete_where(&mut self, doomed: impl Fn(&ListedRule) -> bool) -> Result<(), NftError> {
        let mut attempt = 1;
        loop {
            let messages: Vec<BatchMessage> = self
                .list_rules()?
                .iter()
                .filter(|r| doomed(r))
                .map(ListedRule::delete_message)
                .collect();
            if messages.is_empty() {
                return Ok(());
            }
            match self.socket.transaction(messages) {
                Err(e) if e.errno() == Some(Errno::ENOENT) && attempt < ATTEMPTS => attempt += 1,
                result => return result.map_err(NftError::Delete),
            }
        }
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
                let wanted = if family == Family::V4 && !conf.masq_all {
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
