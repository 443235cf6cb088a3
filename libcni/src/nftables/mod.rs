//! nf_tables over netlink, for every plugin of the suite: tables, chains
//! and rules built from a handful of expressions ([`Expr`]), committed as
//! one batch (one kernel transaction), and listings of a table's or a
//! chain's rules.
//!
//! Why not the `nft` binary: one process per operation costs milliseconds
//! and needs the binary installed. Why not an nf_tables crate: rustables is
//! GPL-3.0 and its expression set is closed (no `fib`), and the `nftables`
//! crate drives `nft`. Messages are built with `netlink-packet-netfilter`
//! (MIT, the same netlink stack as the rest of libcni); what it lacks is
//! hand-encoded in [`expr`] and [`userdata`], and said so there.
//!
//! Listings are read attribute by attribute ([`ListedRule`]): a rule another
//! program wrote, with expressions nothing here knows, lists like any other
//! (its [`ListedRule::expressions`] is `None`), and no kernel reply can make
//! this module panic.
//!
//! What a batch costs: when an nfnetlink socket closes, the kernel first
//! waits for every discarded nf_tables object of its namespace to be freed
//! after an RCU grace period (the `NETLINK_URELEASE` notifier flushes the
//! namespace's destroy work), whichever process's transaction discarded
//! them. Deleting a rule, flushing a chain that has rules, or sending
//! `add chain` for an existing chain (an update) leave such objects, and
//! the wait (about 4-16 ms on the test VM) would then be most of a plugin
//! call's time. So a dropped socket is parked and the plugin call ends
//! with one detached child closing every parked socket
//! ([`crate::detached`]). Callers still look first
//! ([`NfTablesSocket::get_chain`], [`NfTablesSocket::list_rules`]) and
//! leave out what is already in place: fewer discarded objects, less for
//! the kernel to free.
//!
//! Everything works in the network namespace of the calling thread: the
//! socket is bound to the namespace it was created in.

pub mod address;
mod batch;
pub mod expr;
pub mod iptables_nft;
pub mod userdata;

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use netlink_packet_core::{NetlinkBuffer, NLM_F_ACK, NLM_F_DUMP};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, GenMessage, NfTablesMessage, RuleAttribute, RuleMessage,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use nix::errno::Errno;

use crate::netlink::attributes::{self, attributes, be_u32, be_u64};
use crate::netlink::netfilter::NFGENMSG_LEN;
use crate::netlink::{BatchMessage, NetlinkError, NfnlSocket};

pub use address::{AddressField, AddressMatch};
pub use batch::{Batch, Rule};
pub use expr::{CmpOp, DataRegister, Expr, MetaKey, PayloadBase, Verdict};

/// `NFPROTO_IPV4` / `NFPROTO_IPV6`, the values `meta nfproto` compares with.
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// Hook numbers: `NF_INET_*`, and `NF_BR_*` (which share the values).
pub const HOOK_PREROUTING: u32 = 0;
pub const HOOK_OUTPUT: u32 = 3;
pub const HOOK_POSTROUTING: u32 = 4;

/// The IFNAMSIZ-long field `nft` compares exact interface names in.
pub const IFNAMSIZ: usize = 16;

/// How many times an operation that lists and then commits is tried: a
/// rule listed may be gone when the batch deletes it (another plugin call,
/// or a person, deleted it in between), and the commit then fails with
/// `ENOENT`. Listing again settles it.
pub const ATTEMPTS: u32 = 3;

const NFNL_SUBSYS_NFTABLES: u8 = 10;
const NFT_MSG_NEWCHAIN: u8 = 3;
const NFT_MSG_NEWRULE: u8 = 6;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_CHAIN_USE: u16 = 6;
/// `NF_ACCEPT`, as a chain policy.
const NF_ACCEPT: u32 = 1;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;

/// An nf_tables family (`NFPROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Ip,
    Ip6,
    Inet,
    Bridge,
}

impl Family {
    /// The name `nft` uses.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }

    pub fn nfproto(self) -> u8 {
        match self {
            Family::Ip => NFPROTO_IPV4,
            Family::Ip6 => NFPROTO_IPV6,
            Family::Inet => 1,
            Family::Bridge => 7,
        }
    }

    pub fn from_nfproto(code: u8) -> Option<Family> {
        [Family::Ip, Family::Ip6, Family::Inet, Family::Bridge]
            .into_iter()
            .find(|f| f.nfproto() == code)
    }

    fn proto(self) -> NetfilterProtoFamily {
        NetfilterProtoFamily::from(self.nfproto())
    }
}

/// Where a base chain hooks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// `HOOK_*`.
    pub number: u32,
    pub priority: i32,
}

/// What makes a chain a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    /// "filter", "nat", "route".
    pub chain_type: &'static str,
    pub hook: Hook,
    /// Sent only when set; the kernel's default is accept anyway.
    pub policy_accept: bool,
}

impl BaseChain {
    /// Whether `chain` already is this base chain, so that sending
    /// `add chain` again would change nothing (and only cost the update).
    pub fn is_in_place(&self, chain: &ListedChain) -> bool {
        chain.hook == Some(self.hook)
            && chain.chain_type.as_deref() == Some(self.chain_type)
            && (!self.policy_accept || chain.policy_accept == Some(true))
    }
}

/// A chain as the kernel has it. The fields of a base chain are `None`
/// for a regular chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedChain {
    pub hook: Option<Hook>,
    pub chain_type: Option<String>,
    /// Whether the policy is accept (`NF_ACCEPT`) rather than drop.
    pub policy_accept: Option<bool>,
    /// The kernel's use count: rules in the chain plus jumps and gotos to
    /// it. With the rules counted, it tells whether anything jumps here
    /// without listing the chains that might.
    pub use_count: u32,
}

/// A rule as listed from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub handle: u64,
    /// The raw userdata (see [`userdata`]); empty when there is none.
    pub userdata: Vec<u8>,
    /// The raw `NFTA_RULE_EXPRESSIONS`.
    expressions: Vec<u8>,
}

impl ListedRule {
    fn view(&self) -> ListedRuleRef<'_> {
        ListedRuleRef {
            family: self.family,
            table: Cow::Borrowed(&self.table),
            chain: Cow::Borrowed(&self.chain),
            handle: self.handle,
            userdata: &self.userdata,
            expressions: &self.expressions,
        }
    }

    /// The rule's comment, without its NUL.
    pub fn comment(&self) -> Option<&[u8]> {
        self.view().comment()
    }

    /// The expressions, when all of them are ones [`Expr`] describes as
    /// this module writes them; `None` for anything else.
    pub fn expressions(&self) -> Option<Vec<Expr>> {
        self.view().expressions()
    }

    /// The chain the rule jumps or goes to, read from its last expression
    /// alone, so it is found whatever else the rule holds.
    pub fn verdict_chain(&self) -> Option<String> {
        self.view().verdict_chain()
    }

    /// The raw `NFTA_RULE_EXPRESSIONS`, to compare a rule with one another
    /// program wrote.
    pub fn raw_expressions(&self) -> &[u8] {
        &self.expressions
    }
}

/// A rule of a listing while it is read, borrowing the kernel's message:
/// what [`NfTablesSocket::list_rules_where`] shows its filter, so that only
/// the rules kept are copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRuleRef<'a> {
    pub family: Family,
    pub table: Cow<'a, str>,
    pub chain: Cow<'a, str>,
    pub handle: u64,
    /// The raw userdata; empty when there is none.
    pub userdata: &'a [u8],
    expressions: &'a [u8],
}

impl<'a> ListedRuleRef<'a> {
    /// The rule's comment, without its NUL.
    pub fn comment(&self) -> Option<&'a [u8]> {
        userdata::find(self.userdata, userdata::COMMENT)
    }

    /// As [`ListedRule::expressions`].
    pub fn expressions(&self) -> Option<Vec<Expr>> {
        expr::decode_list(self.expressions)
    }

    /// As [`ListedRule::verdict_chain`].
    pub fn verdict_chain(&self) -> Option<String> {
        match expr::decode_last(self.expressions)? {
            Expr::Verdict(Verdict::Jump(chain) | Verdict::Goto(chain)) => Some(chain),
            _ => None,
        }
    }

    pub fn raw_expressions(&self) -> &'a [u8] {
        self.expressions
    }

    pub fn to_owned(&self) -> ListedRule {
        ListedRule {
            family: self.family,
            table: self.table.to_string(),
            chain: self.chain.to_string(),
            handle: self.handle,
            userdata: self.userdata.to_vec(),
            expressions: self.expressions.to_vec(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("nftables: {0}")]
pub struct NfTablesError(#[from] pub NetlinkError);

impl NfTablesError {
    /// The kernel's errno, when the kernel refused something.
    pub fn errno(&self) -> Option<Errno> {
        self.0.errno()
    }
}

/// Runs `operation` (a listing, then a commit of what the listing implies)
/// again when it fails with `ENOENT`, up to [`ATTEMPTS`] times in all.
pub fn retry_if_vanished<T, E: std::fmt::Display>(
    errno: impl Fn(&E) -> Option<Errno>,
    mut operation: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let mut attempt = 1;
    loop {
        match operation() {
            Err(e) if errno(&e) == Some(Errno::ENOENT) && attempt < ATTEMPTS => {
                log::debug!("nftables: {e}; listing again");
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A netfilter netlink socket speaking nf_tables, in the calling thread's
/// network namespace.
#[derive(Debug)]
pub struct NfTablesSocket {
    socket: NfnlSocket,
}

impl NfTablesSocket {
    pub fn open() -> Result<NfTablesSocket, NfTablesError> {
        Ok(NfTablesSocket {
            socket: NfnlSocket::open_current()?,
        })
    }

    /// Whether nf_tables answers here: asks for the ruleset generation,
    /// which lists nothing.
    pub fn probe(&mut self) -> Result<(), NfTablesError> {
        let request = message(
            NetfilterProtoFamily::Unspec,
            NfTablesMessage::GetGen(GenMessage {
                attributes: Vec::new(),
            }),
        );
        self.socket
            .request(request, NLM_F_ACK)
            .map_err(|e| e.context("get generation"))?;
        Ok(())
    }

    /// Commits a batch as one transaction: all of it or, on the first
    /// error, none of it. An empty batch sends nothing.
    pub fn commit(&mut self, batch: Batch) -> Result<(), NfTablesError> {
        if batch.is_empty() {
            return Ok(());
        }
        let control = |inner: ControlMessage| BatchMessage {
            message: NetfilterMessage::new(
                NetfilterHeader::new(
                    NetfilterProtoFamily::Unspec,
                    0,
                    u16::from(NFNL_SUBSYS_NFTABLES),
                ),
                inner,
            ),
            flags: 0,
            description: "batch".to_string(),
        };
        let mut messages = vec![control(ControlMessage::BatchBegin)];
        messages.extend(batch.into_messages());
        messages.push(control(ControlMessage::BatchEnd));
        log::debug!("nftables: committing {} operations", messages.len() - 2);
        Ok(self.socket.transaction(messages)?)
    }

    /// Closes the socket here and now, waiting for the frees pending in its
    /// namespace. A plain drop parks the socket instead (see
    /// [`crate::detached::park`]): for callers that want the kernel settled
    /// when they go on, such as a benchmark between two measurements.
    pub fn close_now(self) {
        self.socket.close_now();
    }

    /// The rules of `table` in `family`, of one chain or of all, in order.
    /// A missing table or chain lists as no rules.
    pub fn list_rules(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
    ) -> Result<Vec<ListedRule>, NfTablesError> {
        self.list_rules_where(family, table, chain, |_| true)
    }

    /// The rules [`list_rules`](Self::list_rules) would list for which
    /// `keep` holds. Rules are read in place and only those kept are
    /// copied: a chain with a rule per pod costs its reading, not an
    /// allocation per rule.
    pub fn list_rules_where(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
        mut keep: impl FnMut(&ListedRuleRef<'_>) -> bool,
    ) -> Result<Vec<ListedRule>, NfTablesError> {
        let mut filter = vec![RuleAttribute::Table(table.to_string())];
        if let Some(chain) = chain {
            filter.push(RuleAttribute::Chain(chain.to_string()));
        }
        let request = message(
            family.proto(),
            NfTablesMessage::GetRule(RuleMessage { attributes: filter }),
        );
        let listed = self
            .socket
            .request_fold(request, NLM_F_DUMP, Vec::new, |kept, raw| {
                let Some(rule) = listed_rule_in(raw) else {
                    return Ok(());
                };
                // Old kernels ignore the dump filter: check it here.
                if rule.family == family
                    && rule.table == table
                    && chain.is_none_or(|c| rule.chain == c)
                    && keep(&rule)
                {
                    kept.push(rule.to_owned());
                }
                Ok(())
            });
        match listed {
            Ok(listed) => Ok(listed),
            Err(e) if e.errno() == Some(Errno::ENOENT) => Ok(Vec::new()),
            Err(e) => {
                let what = chain.map(|c| format!(" {c}")).unwrap_or_default();
                Err(e
                    .context(format!("list {} {table}{what}", family.name()))
                    .into())
            }
        }
    }

    /// The chain, if it exists, with its hook when it is a base chain.
    pub fn get_chain(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Option<ListedChain>, NfTablesError> {
        let request = message(
            family.proto(),
            NfTablesMessage::GetChain(ChainMessage {
                attributes: vec![
                    ChainAttribute::Table(table.to_string()),
                    ChainAttribute::Name(chain.to_string()),
                ],
            }),
        );
        let replies = match self.socket.request(request, NLM_F_ACK) {
            Ok(replies) => replies,
            Err(e) if e.errno() == Some(Errno::ENOENT) => return Ok(None),
            Err(e) => {
                let what = format!("get chain {} {table} {chain}", family.name());
                return Err(e.context(what).into());
            }
        };
        Ok(replies
            .iter()
            .find(|r| r.subsystem == NFNL_SUBSYS_NFTABLES && r.message_type == NFT_MSG_NEWCHAIN)
            .map(|r| ListedChain {
                hook: chain_hook(&r.attributes),
                chain_type: attributes::find(&r.attributes, NFTA_CHAIN_TYPE)
                    .map(attributes::string),
                policy_accept: attributes::find(&r.attributes, NFTA_CHAIN_POLICY)
                    .and_then(be_u32)
                    .map(|policy| policy == NF_ACCEPT),
                use_count: attributes::find(&r.attributes, NFTA_CHAIN_USE)
                    .and_then(be_u32)
                    .unwrap_or(0),
            }))
    }
}

fn message(family: NetfilterProtoFamily, inner: NfTablesMessage) -> NetfilterMessage {
    NetfilterMessage::new(NetfilterHeader::new(family, 0, 0), inner)
}

/// A rule from a whole dump message (netlink header included); `None`
/// for another message or a rule without a handle.
fn listed_rule_in(raw: &[u8]) -> Option<ListedRuleRef<'_>> {
    // new_checked makes `payload` safe: the length fits the buffer.
    let header = NetlinkBuffer::new_checked(raw).ok()?;
    let [subsystem, message_type] = header.message_type().to_be_bytes();
    if subsystem != NFNL_SUBSYS_NFTABLES || message_type != NFT_MSG_NEWRULE {
        return None;
    }
    let payload = header.payload();
    let family = Family::from_nfproto(*payload.first()?)?;
    listed_rule(family, payload.get(NFGENMSG_LEN..)?)
}

/// A rule from a dump message's attributes; `None` without a handle.
fn listed_rule(family: Family, attrs: &[u8]) -> Option<ListedRuleRef<'_>> {
    let mut rule = ListedRuleRef {
        family,
        table: Cow::Borrowed(""),
        chain: Cow::Borrowed(""),
        handle: 0,
        userdata: &[],
        expressions: &[],
    };
    let mut handle = None;
    for (kind, value) in attributes(attrs) {
        match kind {
            NFTA_RULE_TABLE => rule.table = attributes::str_lossy(value),
            NFTA_RULE_CHAIN => rule.chain = attributes::str_lossy(value),
            NFTA_RULE_HANDLE => handle = be_u64(value),
            NFTA_RULE_EXPRESSIONS => rule.expressions = value,
            NFTA_RULE_USERDATA => rule.userdata = value,
            _ => {}
        }
    }
    rule.handle = handle?;
    Some(rule)
}

/// The hook number and priority of a listed chain, if it is a base chain.
fn chain_hook(attrs: &[u8]) -> Option<Hook> {
    let hook = attributes::find(attrs, NFTA_CHAIN_HOOK)?;
    let number = attributes::find(hook, NFTA_HOOK_HOOKNUM).and_then(be_u32)?;
    let priority = attributes::find(hook, NFTA_HOOK_PRIORITY).and_then(be_u32)?;
    Some(Hook {
        number,
        // The kernel sends the priority as a big-endian s32.
        priority: priority as i32,
    })
}
