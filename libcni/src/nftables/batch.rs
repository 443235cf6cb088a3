//! A batch: nf_tables operations the kernel applies all or none of.

use netlink_packet_core::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, Hook, HookNumber, NfTablesMessage, RuleAttribute, RuleMessage,
    TableAttribute, TableMessage,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage};

use super::expr::Expr;
use super::{userdata, BaseChain, Family};
use crate::netlink::BatchMessage;

/// `NF_ACCEPT`, the chain policy.
const NF_ACCEPT: u32 = 1;

/// A rule to append to a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub exprs: Vec<Expr>,
    /// Userdata records (see [`userdata`]); `None` sends none.
    pub userdata: Option<Vec<u8>>,
    /// The layer-4 protocol the rule matches, for x_tables extensions that
    /// check it (`NFTA_RULE_COMPAT`; multiport refuses a rule without
    /// tcp, udp, sctp or dccp). The kernel does not list it back.
    pub compat_protocol: Option<u8>,
}

impl Rule {
    pub fn new(exprs: Vec<Expr>) -> Rule {
        Rule {
            exprs,
            userdata: None,
            compat_protocol: None,
        }
    }

    /// With the protocol x_tables extensions see (what iptables-nft sends
    /// for `-p`).
    pub fn with_compat_protocol(self, protocol: u8) -> Rule {
        Rule {
            compat_protocol: Some(protocol),
            ..self
        }
    }

    /// With a comment, as `nft … comment "<comment>"` writes it.
    pub fn with_comment(self, comment: &[u8]) -> Rule {
        Rule {
            userdata: Some(userdata::comment(comment)),
            ..self
        }
    }
}

/// Operations committed together by
/// [`NfTablesSocket::commit`](super::NfTablesSocket::commit). Creations
/// never use `NLM_F_EXCL`: an existing table or chain is left as it is.
#[derive(Debug, Default)]
pub struct Batch {
    messages: Vec<BatchMessage<NetfilterMessage>>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages so far, in order (with the flags they are sent with).
    pub fn messages(&self) -> &[BatchMessage<NetfilterMessage>] {
        &self.messages
    }

    pub(super) fn into_messages(self) -> Vec<BatchMessage<NetfilterMessage>> {
        self.messages
    }

    /// `add table`: creates the table unless it exists. An existing table
    /// is not touched (no flags are sent), which costs the kernel nothing.
    pub fn add_table(&mut self, family: Family, name: &str, userdata: Option<Vec<u8>>) {
        let mut attributes = vec![TableAttribute::Name(name.to_string())];
        if let Some(userdata) = userdata {
            attributes.push(TableAttribute::UserData(userdata));
        }
        self.push(
            family,
            NfTablesMessage::NewTable(TableMessage { attributes }),
            NLM_F_CREATE,
            format!("add table {} {name}", family.name()),
        );
    }

    /// `add chain`: creates the chain unless it exists. Sending it for an
    /// existing chain is an update, which the kernel pays for when the
    /// socket closes (see the module docs): callers that can tell leave
    /// existing chains out.
    pub fn add_chain(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        base: Option<BaseChain>,
        userdata: Option<Vec<u8>>,
    ) {
        let mut attributes = chain_of(table, name);
        if let Some(base) = base {
            attributes.push(ChainAttribute::Hook(vec![
                Hook::Number(HookNumber::Other(base.hook.number)),
                // The kernel reads the priority as a big-endian s32.
                Hook::Priority(base.hook.priority as u32),
            ]));
            if base.policy_accept {
                attributes.push(ChainAttribute::Policy(NF_ACCEPT));
            }
            attributes.push(ChainAttribute::Type(base.chain_type.to_string()));
        }
        if let Some(userdata) = userdata {
            attributes.push(ChainAttribute::UserData(userdata));
        }
        self.push(
            family,
            NfTablesMessage::NewChain(ChainMessage { attributes }),
            NLM_F_CREATE,
            format!("add chain {} {table} {name}", family.name()),
        );
    }

    /// `delete chain`, with its rules; fails if the chain is missing or
    /// something still jumps to it.
    pub fn delete_chain(&mut self, family: Family, table: &str, name: &str) {
        let attributes = chain_of(table, name);
        let description = format!("delete chain {} {table} {name}", family.name());
        let message = NfTablesMessage::DeleteChain(ChainMessage { attributes });
        self.push(family, message, 0, description);
    }

    /// `flush chain`: a rule deletion naming only the chain deletes every
    /// rule of it.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) {
        let attributes = rules_of(table, chain);
        let description = format!("flush chain {} {table} {chain}", family.name());
        let message = NfTablesMessage::DeleteRule(RuleMessage { attributes });
        self.push(family, message, 0, description);
    }

    /// `add rule`: appends to the chain.
    pub fn add_rule(&mut self, family: Family, table: &str, chain: &str, rule: &Rule) {
        let mut attributes = rules_of(table, chain);
        attributes.push(RuleAttribute::Expressions(
            rule.exprs.iter().map(Expr::encode).collect(),
        ));
        attributes.extend(compat_of(rule));
        let comment = rule
            .userdata
            .as_deref()
            .and_then(|u| userdata::find(u, userdata::COMMENT))
            .map(|c| format!(" comment {:?}", String::from_utf8_lossy(c)))
            .unwrap_or_default();
        if let Some(userdata) = &rule.userdata {
            attributes.push(RuleAttribute::UserData(userdata.clone()));
        }
        self.push(
            family,
            NfTablesMessage::NewRule(RuleMessage { attributes }),
            NLM_F_CREATE | NLM_F_APPEND,
            format!("add rule {} {table} {chain}{comment}", family.name()),
        );
    }

    /// `insert rule`: the rule goes first in the chain.
    pub fn insert_rule(&mut self, family: Family, table: &str, chain: &str, rule: &Rule) {
        let mut attributes = rules_of(table, chain);
        attributes.push(RuleAttribute::Expressions(
            rule.exprs.iter().map(Expr::encode).collect(),
        ));
        attributes.extend(compat_of(rule));
        if let Some(userdata) = &rule.userdata {
            attributes.push(RuleAttribute::UserData(userdata.clone()));
        }
        self.push(
            family,
            NfTablesMessage::NewRule(RuleMessage { attributes }),
            NLM_F_CREATE,
            format!("insert rule {} {table} {chain}", family.name()),
        );
    }

    /// `delete rule … handle <handle>`.
    pub fn delete_rule(&mut self, family: Family, table: &str, chain: &str, handle: u64) {
        let mut attributes = rules_of(table, chain);
        attributes.push(RuleAttribute::Handle(handle));
        let description = format!(
            "delete rule {} {table} {chain} handle {handle}",
            family.name()
        );
        let message = NfTablesMessage::DeleteRule(RuleMessage { attributes });
        self.push(family, message, 0, description);
    }

    fn push(&mut self, family: Family, message: NfTablesMessage, flags: u16, description: String) {
        self.messages.push(BatchMessage {
            message: NetfilterMessage::new(NetfilterHeader::new(family.proto(), 0, 0), message),
            // Every operation is acknowledged, so the kernel's answer names
            // the one that failed.
            flags: flags | NLM_F_ACK,
            description,
        });
    }
}

/// `NFTA_RULE_COMPAT`: `NFTA_RULE_COMPAT_PROTO` and `_FLAGS` (no
/// inversion), when the rule names a protocol.
fn compat_of(rule: &Rule) -> Option<RuleAttribute> {
    const NFTA_RULE_COMPAT_PROTO: u16 = 1;
    const NFTA_RULE_COMPAT_FLAGS: u16 = 2;
    let protocol = u32::from(rule.compat_protocol?);
    Some(RuleAttribute::Compat(vec![
        netlink_packet_core::DefaultNla::new(
            NFTA_RULE_COMPAT_PROTO,
            protocol.to_be_bytes().to_vec(),
        ),
        netlink_packet_core::DefaultNla::new(NFTA_RULE_COMPAT_FLAGS, 0u32.to_be_bytes().to_vec()),
    ]))
}

/// The attributes naming a chain.
fn chain_of(table: &str, name: &str) -> Vec<ChainAttribute> {
    vec![
        ChainAttribute::Table(table.to_string()),
        ChainAttribute::Name(name.to_string()),
    ]
}

/// The attributes naming the rules of a chain (all of them, or one with a
/// handle added).
fn rules_of(table: &str, chain: &str) -> Vec<RuleAttribute> {
    vec![
        RuleAttribute::Table(table.to_string()),
        RuleAttribute::Chain(chain.to_string()),
    ]
}
