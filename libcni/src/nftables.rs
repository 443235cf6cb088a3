//! nf_tables over netlink: the few objects our plugins write (tables,
//! chains, rules built from a handful of expressions), committed as one batch
//! (one kernel transaction), and a dump of one chain's rules.
//!
//! Why not the `nft` binary: one process per operation costs milliseconds and
//! needs the binary installed. Why not a crate: the nf_tables crates for Rust
//! are GPL-licensed (rustables) or drive `nft` (nftables); what we need is
//! small enough to encode here.
//!
//! The expressions are encoded exactly as `nft` 1.0 encodes the equivalent
//! rule text, so that `nft list ruleset` prints our rules character for
//! character like the reference plugins' (which go through `nft`). Comments
//! are rule/chain/table userdata in libnftnl's TLV format.
//!
//! Everything works in the network namespace of the calling thread: the
//! socket is bound to the namespace it was created in.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

/// `NFPROTO_*` values used as the nfgenmsg family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Inet,
    Bridge,
}

impl Family {
    fn code(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Bridge => 7,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }
}

/// `NFPROTO_IPV4` / `NFPROTO_IPV6`, the values `meta nfproto` compares with.
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// `enum nft_meta_keys`.
pub const META_IIFNAME: u32 = 6;
pub const META_NFPROTO: u32 = 15;

/// `enum nft_payload_bases`.
pub const PAYLOAD_LL_HEADER: u32 = 0;
pub const PAYLOAD_NETWORK_HEADER: u32 = 1;

/// Hook numbers: `NF_INET_*`, and `NF_BR_*` (which share the values).
pub const HOOK_PREROUTING: u32 = 0;
pub const HOOK_POSTROUTING: u32 = 4;

/// The IFNAMSIZ-long field `nft` compares interface names in.
pub const IFNAMSIZ: usize = 16;

// nfnetlink framing.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNETLINK_V0: u8 = 0;

// enum nf_tables_msg_types.
const NFT_MSG_NEWTABLE: u8 = 0;
const NFT_MSG_NEWCHAIN: u8 = 3;
const NFT_MSG_GETCHAIN: u8 = 4;
const NFT_MSG_DELCHAIN: u8 = 5;
const NFT_MSG_NEWRULE: u8 = 6;
const NFT_MSG_GETRULE: u8 = 7;
const NFT_MSG_DELRULE: u8 = 8;
const NFT_MSG_GETGEN: u8 = 16;

// Attributes.
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_USERDATA: u16 = 6;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_CHAIN_USERDATA: u16 = 12;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_HANDLE: u16 = 3;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_LEN: u16 = 3;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;

const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

// Registers: the verdict register and the first 128-bit data register.
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;

// Verdict codes (`NF_*` and `NFT_*`).
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

/// libnftnl's `NFTNL_UDATA_{TABLE,CHAIN,RULE}_COMMENT`: all three are 0.
const UDATA_COMMENT: u8 = 0;

// Netlink header.
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_APPEND: u16 = 0x800;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

/// How often a dump the kernel flags as inconsistent is repeated.
const DUMP_ATTEMPTS: u32 = 5;

/// The kernel answers a batch while `send` runs; this only guards against
/// a reply that never comes.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum NfTablesError {
    #[error("nftables netlink socket: {op}: {source}")]
    Socket { op: &'static str, source: io::Error },
    #[error("nftables: {what}: {errno}{}", .message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        what: String,
        errno: Errno,
        /// The kernel's extended-ACK text, when it gave one.
        message: Option<String>,
    },
    #[error("nftables: malformed netlink reply: {0}")]
    Decode(String),
    #[error("nftables: dump of {0} still inconsistent after {DUMP_ATTEMPTS} attempts")]
    DumpInterrupted(String),
    #[error("nftables: {0}")]
    InvalidArgument(String),
}

impl NfTablesError {
    pub fn errno(&self) -> Option<Errno> {
        match self {
            NfTablesError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// A verdict, as the last expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

/// The expressions our rules are made of; every load goes to register 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load <key> => reg 1`
    Meta {
        key: u32,
    },
    /// `payload load <len>b @ <base> + <offset> => reg 1`
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    /// `bitwise reg 1 = (reg 1 & mask) ^ xor`, with a zero xor.
    Mask(Vec<u8>),
    /// `cmp eq|neq reg 1 <data>`
    Cmp {
        equal: bool,
        data: Vec<u8>,
    },
    Masquerade,
    Verdict(Verdict),
}

impl Expr {
    /// The expressions `nft` emits for `<field> ==|!= <addr>/<prefix>`:
    /// a byte-aligned prefix loads only its bytes, any other one loads the
    /// whole field and masks it.
    pub fn prefix_match(
        base: u32,
        offset: u32,
        network: &[u8],
        prefix: u8,
        equal: bool,
    ) -> Vec<Expr> {
        let prefix = usize::from(prefix).min(network.len() * 8);
        if prefix > 0 && prefix % 8 == 0 {
            let bytes = network.get(..prefix / 8).unwrap_or(network).to_vec();
            return vec![
                Expr::Payload {
                    base,
                    offset,
                    len: bytes.len() as u32,
                },
                Expr::Cmp { equal, data: bytes },
            ];
        }
        let mask: Vec<u8> = (0..network.len())
            .map(|i| {
                let bits = prefix.saturating_sub(i * 8).min(8);
                // bits is 0..=8, so the shift stays within u16.
                (0xff00u16 >> bits) as u8
            })
            .collect();
        let masked = network.iter().zip(&mask).map(|(b, m)| b & m).collect();
        vec![
            Expr::Payload {
                base,
                offset,
                len: network.len() as u32,
            },
            Expr::Mask(mask),
            Expr::Cmp {
                equal,
                data: masked,
            },
        ]
    }
}

/// A rule to append to a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub exprs: Vec<Expr>,
    pub comment: Option<Vec<u8>>,
}

/// A base chain's hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    pub chain_type: &'static str,
    pub hook: u32,
    pub priority: i32,
    /// Sent only when set; the kernel's default is accept.
    pub policy_accept: bool,
}

/// A rule as listed from the kernel: enough to find and delete it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRule {
    pub handle: u64,
    pub comment: Option<Vec<u8>>,
}

/// One message of a batch, before framing.
#[derive(Debug)]
struct Message {
    msg_type: u8,
    family: Family,
    flags: u16,
    attrs: Vec<u8>,
    /// What the message does, for error messages.
    what: String,
}

/// Operations the kernel applies all or none of.
#[derive(Debug, Default)]
pub struct Batch {
    messages: Vec<Message>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// `add table`: creates the table unless it exists.
    pub fn add_table(&mut self, family: Family, name: &str, comment: Option<&[u8]>) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_TABLE_NAME, name);
        if let Some(comment) = comment {
            put(&mut attrs, NFTA_TABLE_USERDATA, &comment_udata(comment));
        }
        self.push(
            NFT_MSG_NEWTABLE,
            family,
            NLM_F_CREATE,
            attrs,
            format!("add table {} {name}", family.name()),
        );
    }

    /// `add chain`: creates the chain unless it exists (with the same hook).
    pub fn add_chain(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        base: Option<BaseChain>,
        comment: Option<&[u8]>,
    ) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_CHAIN_TABLE, table);
        put_strz(&mut attrs, NFTA_CHAIN_NAME, name);
        if let Some(base) = base {
            let hook = nest_start(&mut attrs, NFTA_CHAIN_HOOK);
            put_be32(&mut attrs, NFTA_HOOK_HOOKNUM, base.hook);
            put(&mut attrs, NFTA_HOOK_PRIORITY, &base.priority.to_be_bytes());
            nest_end(&mut attrs, hook);
            if base.policy_accept {
                put(&mut attrs, NFTA_CHAIN_POLICY, &NF_ACCEPT.to_be_bytes());
            }
            put_strz(&mut attrs, NFTA_CHAIN_TYPE, base.chain_type);
        }
        if let Some(comment) = comment {
            put(&mut attrs, NFTA_CHAIN_USERDATA, &comment_udata(comment));
        }
        self.push(
            NFT_MSG_NEWCHAIN,
            family,
            NLM_F_CREATE,
            attrs,
            format!("add chain {} {table} {name}", family.name()),
        );
    }

    /// `delete chain`, with its rules; fails if the chain is missing or
    /// something still jumps to it.
    pub fn delete_chain(&mut self, family: Family, table: &str, name: &str) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_CHAIN_TABLE, table);
        put_strz(&mut attrs, NFTA_CHAIN_NAME, name);
        self.push(
            NFT_MSG_DELCHAIN,
            family,
            0,
            attrs,
            format!("delete chain {} {table} {name}", family.name()),
        );
    }

    /// `flush chain`: deletes every rule of the chain.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_RULE_TABLE, table);
        put_strz(&mut attrs, NFTA_RULE_CHAIN, chain);
        self.push(
            NFT_MSG_DELRULE,
            family,
            0,
            attrs,
            format!("flush chain {} {table} {chain}", family.name()),
        );
    }

    /// `add rule`: appends to the chain.
    pub fn add_rule(&mut self, family: Family, table: &str, chain: &str, rule: &Rule) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_RULE_TABLE, table);
        put_strz(&mut attrs, NFTA_RULE_CHAIN, chain);
        let list = nest_start(&mut attrs, NFTA_RULE_EXPRESSIONS);
        for expr in &rule.exprs {
            let elem = nest_start(&mut attrs, NFTA_LIST_ELEM);
            encode_expr(&mut attrs, expr);
            nest_end(&mut attrs, elem);
        }
        nest_end(&mut attrs, list);
        if let Some(comment) = &rule.comment {
            put(&mut attrs, NFTA_RULE_USERDATA, &comment_udata(comment));
        }
        let comment = rule
            .comment
            .as_deref()
            .map(|c| format!(" comment {:?}", String::from_utf8_lossy(c)))
            .unwrap_or_default();
        self.push(
            NFT_MSG_NEWRULE,
            family,
            NLM_F_CREATE | NLM_F_APPEND,
            attrs,
            format!("add rule {} {table} {chain}{comment}", family.name()),
        );
    }

    /// `delete rule ... handle N`.
    pub fn delete_rule(&mut self, family: Family, table: &str, chain: &str, handle: u64) {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_RULE_TABLE, table);
        put_strz(&mut attrs, NFTA_RULE_CHAIN, chain);
        put(&mut attrs, NFTA_RULE_HANDLE, &handle.to_be_bytes());
        self.push(
            NFT_MSG_DELRULE,
            family,
            0,
            attrs,
            format!(
                "delete rule {} {table} {chain} handle {handle}",
                family.name()
            ),
        );
    }

    fn push(&mut self, msg_type: u8, family: Family, flags: u16, attrs: Vec<u8>, what: String) {
        self.messages.push(Message {
            msg_type,
            family,
            flags,
            attrs,
            what,
        });
    }
}

fn encode_expr(buf: &mut Vec<u8>, expr: &Expr) {
    let name = match expr {
        Expr::Meta { .. } => "meta",
        Expr::Payload { .. } => "payload",
        Expr::Mask(_) => "bitwise",
        Expr::Cmp { .. } => "cmp",
        Expr::Masquerade => "masq",
        Expr::Verdict(_) => "immediate",
    };
    put_strz(buf, NFTA_EXPR_NAME, name);
    let data = nest_start(buf, NFTA_EXPR_DATA);
    match expr {
        Expr::Meta { key } => {
            put_be32(buf, NFTA_META_KEY, *key);
            put_be32(buf, NFTA_META_DREG, NFT_REG_1);
        }
        Expr::Payload { base, offset, len } => {
            put_be32(buf, NFTA_PAYLOAD_DREG, NFT_REG_1);
            put_be32(buf, NFTA_PAYLOAD_BASE, *base);
            put_be32(buf, NFTA_PAYLOAD_OFFSET, *offset);
            put_be32(buf, NFTA_PAYLOAD_LEN, *len);
        }
        Expr::Mask(mask) => {
            put_be32(buf, NFTA_BITWISE_SREG, NFT_REG_1);
            put_be32(buf, NFTA_BITWISE_DREG, NFT_REG_1);
            put_be32(buf, NFTA_BITWISE_LEN, mask.len() as u32);
            put_data_value(buf, NFTA_BITWISE_MASK, mask);
            put_data_value(buf, NFTA_BITWISE_XOR, &vec![0; mask.len()]);
        }
        Expr::Cmp { equal, data } => {
            put_be32(buf, NFTA_CMP_SREG, NFT_REG_1);
            // NFT_CMP_EQ = 0, NFT_CMP_NEQ = 1.
            put_be32(buf, NFTA_CMP_OP, u32::from(!*equal));
            put_data_value(buf, NFTA_CMP_DATA, data);
        }
        Expr::Masquerade => {}
        Expr::Verdict(verdict) => {
            put_be32(buf, NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
            let imm = nest_start(buf, NFTA_IMMEDIATE_DATA);
            let v = nest_start(buf, NFTA_DATA_VERDICT);
            let (code, chain) = match verdict {
                Verdict::Drop => (NF_DROP, None),
                Verdict::Return => (NFT_RETURN, None),
                Verdict::Jump(chain) => (NFT_JUMP, Some(chain)),
                Verdict::Goto(chain) => (NFT_GOTO, Some(chain)),
            };
            put(buf, NFTA_VERDICT_CODE, &code.to_be_bytes());
            if let Some(chain) = chain {
                put_strz(buf, NFTA_VERDICT_CHAIN, chain);
            }
            nest_end(buf, v);
            nest_end(buf, imm);
        }
    }
    nest_end(buf, data);
}

/// A comment as libnftnl stores it: one TLV (type, length, NUL-terminated
/// text). Callers keep comments well under the 255-byte TLV limit.
fn comment_udata(comment: &[u8]) -> Vec<u8> {
    let mut text = comment.to_vec();
    text.push(0);
    text.truncate(usize::from(u8::MAX));
    let mut tlv = vec![UDATA_COMMENT, text.len() as u8];
    tlv.extend_from_slice(&text);
    tlv
}

/// The comment TLV of a userdata blob, without its NUL.
fn comment_from_udata(mut udata: &[u8]) -> Option<Vec<u8>> {
    while let [kind, len, rest @ ..] = udata {
        let value = rest.get(..usize::from(*len))?;
        if *kind == UDATA_COMMENT {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return Some(text.to_vec());
        }
        udata = rest.get(usize::from(*len)..)?;
    }
    None
}

// ---- attribute encoding ----

fn put(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = (4 + payload.len()) as u16;
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    pad(buf);
}

fn put_strz(buf: &mut Vec<u8>, kind: u16, s: &str) {
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    put(buf, kind, &bytes);
}

fn put_be32(buf: &mut Vec<u8>, kind: u16, value: u32) {
    put(buf, kind, &value.to_be_bytes());
}

fn put_data_value(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let outer = nest_start(buf, kind);
    put(buf, NFTA_DATA_VALUE, value);
    nest_end(buf, outer);
}

fn nest_start(buf: &mut Vec<u8>, kind: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    start
}

fn nest_end(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u16;
    if let Some(field) = buf.get_mut(start..start + 2) {
        field.copy_from_slice(&len.to_ne_bytes());
    }
}

fn pad(buf: &mut Vec<u8>) {
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

/// Appends one netlink message: header, nfgenmsg, attributes.
fn frame(
    out: &mut Vec<u8>,
    msg_type: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let len = (NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len()) as u32;
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.push(family);
    out.push(NFNETLINK_V0);
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(attrs);
}

fn nft_type(msg: u8) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg)
}

// ---- decoding ----

/// Attributes of a message or nest, type (flags masked off) to payload.
fn parse_attrs(mut buf: &[u8]) -> Result<BTreeMap<u16, &[u8]>, NfTablesError> {
    let mut attrs = BTreeMap::new();
    while buf.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 {
            return Err(NfTablesError::Decode(format!("attribute length {len}")));
        }
        let payload = buf
            .get(4..len)
            .ok_or_else(|| NfTablesError::Decode(format!("attribute {kind} truncated")))?;
        attrs.insert(kind, payload);
        buf = buf.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(attrs)
}

/// One netlink message of a datagram.
struct RawMessage<'a> {
    msg_type: u16,
    flags: u16,
    seq: u32,
    /// Everything after the netlink header.
    body: &'a [u8],
}

fn split_messages(mut datagram: &[u8]) -> Result<Vec<RawMessage<'_>>, NfTablesError> {
    let mut messages = Vec::new();
    while datagram.len() >= NLMSG_HDRLEN {
        let word = |at: usize| {
            datagram
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
                .unwrap_or_default()
        };
        let half = |at: usize| {
            datagram
                .get(at..at + 2)
                .and_then(|b| b.try_into().ok())
                .map(u16::from_ne_bytes)
                .unwrap_or_default()
        };
        let len = word(0) as usize;
        if len < NLMSG_HDRLEN {
            return Err(NfTablesError::Decode(format!("message length {len}")));
        }
        let body = datagram
            .get(NLMSG_HDRLEN..len)
            .ok_or_else(|| NfTablesError::Decode("message truncated".into()))?;
        messages.push(RawMessage {
            msg_type: half(4),
            flags: half(6),
            seq: word(8),
            body,
        });
        datagram = datagram.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    Ok(messages)
}

/// The errno and extended-ACK text of an `NLMSG_ERROR` (errno 0 is an ACK).
fn parse_error(message: &RawMessage<'_>) -> Result<(i32, Option<String>), NfTablesError> {
    let code = message
        .body
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes)
        .ok_or_else(|| NfTablesError::Decode("short error message".into()))?;
    let mut text = None;
    if message.flags & NLM_F_ACK_TLVS != 0 {
        // With NETLINK_CAP_ACK the request is echoed as its header only.
        let tlvs = message.body.get(4 + NLMSG_HDRLEN..).unwrap_or_default();
        if let Some(msg) = parse_attrs(tlvs)?.get(&NLMSGERR_ATTR_MSG) {
            let msg = msg.strip_suffix(&[0]).unwrap_or(msg);
            text = Some(String::from_utf8_lossy(msg).into_owned());
        }
    }
    Ok((code, text))
}

/// A netfilter netlink socket in the calling thread's network namespace.
pub struct NfSocket {
    socket: Socket,
    sequence: u32,
    recv_buffer: Vec<u8>,
}

impl NfSocket {
    pub fn open() -> Result<NfSocket, NfTablesError> {
        let sock_err = |op| move |source| NfTablesError::Socket { op, source };
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(sock_err("socket"))?;
        socket
            .set_ext_ack(true)
            .map_err(sock_err("NETLINK_EXT_ACK"))?;
        socket
            .set_cap_ack(true)
            .map_err(sock_err("NETLINK_CAP_ACK"))?;
        setsockopt(
            &socket.as_fd(),
            sockopt::ReceiveTimeout,
            &TimeVal::new(RECEIVE_TIMEOUT.as_secs() as i64, 0),
        )
        .map_err(|e| NfTablesError::Socket {
            op: "SO_RCVTIMEO",
            source: e.into(),
        })?;
        socket.bind_auto().map_err(sock_err("bind"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(sock_err("connect"))?;
        // Distinct sequence numbers per process keep replies of an earlier
        // socket (there is none, but cheap insurance) from matching.
        let sequence = std::process::id().wrapping_mul(0x10000);
        Ok(NfSocket {
            socket,
            sequence,
            recv_buffer: Vec::with_capacity(32 * 1024),
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Whether nf_tables answers here: asks for the ruleset generation.
    pub fn probe(&mut self) -> Result<(), NfTablesError> {
        let seq = self.next_seq();
        let mut out = Vec::new();
        frame(
            &mut out,
            nft_type(NFT_MSG_GETGEN),
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            0,
            0,
            &[],
        );
        self.send(&out)?;
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.seq != seq || message.msg_type != NLMSG_ERROR {
                    continue;
                }
                let (code, text) = parse_error(&message)?;
                if code == 0 {
                    return Ok(());
                }
                return Err(NfTablesError::Kernel {
                    what: "get generation".into(),
                    errno: Errno::from_raw(-code),
                    message: text,
                });
            }
        }
    }

    /// Commits a batch as one transaction: all of it or, on the first
    /// error, none of it.
    pub fn commit(&mut self, batch: &Batch) -> Result<(), NfTablesError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        let begin = self.next_seq();
        frame(
            &mut out,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            begin,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        let mut pending: BTreeMap<u32, &str> = BTreeMap::new();
        for message in &batch.messages {
            let seq = self.next_seq();
            frame(
                &mut out,
                nft_type(message.msg_type),
                NLM_F_REQUEST | NLM_F_ACK | message.flags,
                seq,
                message.family.code(),
                0,
                &message.attrs,
            );
            pending.insert(seq, &message.what);
        }
        let end = self.next_seq();
        frame(
            &mut out,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            end,
            0,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        log::debug!("nftables: committing {} operations", pending.len());
        self.send(&out)?;

        // Every message asked for an ACK; the kernel queued all replies
        // (ACKs and errors) before send() returned.
        while !pending.is_empty() {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.msg_type != NLMSG_ERROR {
                    continue;
                }
                let (code, text) = parse_error(&message)?;
                let Some(what) = pending.remove(&message.seq) else {
                    if code != 0 && (message.seq == begin || message.seq == end) {
                        return Err(NfTablesError::Kernel {
                            what: "batch".into(),
                            errno: Errno::from_raw(-code),
                            message: text,
                        });
                    }
                    continue;
                };
                if code != 0 {
                    return Err(NfTablesError::Kernel {
                        what: what.to_string(),
                        errno: Errno::from_raw(-code),
                        message: text,
                    });
                }
            }
        }
        Ok(())
    }

    /// The rules of one chain, in order. A missing table or chain lists as
    /// no rules.
    pub fn list_rules(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<ListedRule>, NfTablesError> {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_RULE_TABLE, table);
        put_strz(&mut attrs, NFTA_RULE_CHAIN, chain);
        for _ in 0..DUMP_ATTEMPTS {
            let seq = self.next_seq();
            let mut out = Vec::new();
            frame(
                &mut out,
                nft_type(NFT_MSG_GETRULE),
                NLM_F_REQUEST | NLM_F_DUMP,
                seq,
                family.code(),
                0,
                &attrs,
            );
            self.send(&out)?;
            match self.read_rule_dump(seq, table, chain) {
                Ok(Some(rules)) => return Ok(rules),
                Ok(None) => log::debug!("nftables: rule dump interrupted, retrying"),
                Err(NfTablesError::Kernel {
                    errno: Errno::ENOENT,
                    ..
                }) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        Err(NfTablesError::DumpInterrupted(format!(
            "{} {table} {chain}",
            family.name()
        )))
    }

    /// `None` when the kernel flagged the dump as inconsistent.
    fn read_rule_dump(
        &mut self,
        seq: u32,
        table: &str,
        chain: &str,
    ) -> Result<Option<Vec<ListedRule>>, NfTablesError> {
        let mut rules = Vec::new();
        let mut interrupted = false;
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.seq != seq {
                    continue;
                }
                if message.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match message.msg_type {
                    NLMSG_DONE => return Ok((!interrupted).then_some(rules)),
                    NLMSG_ERROR => {
                        let (code, text) = parse_error(&message)?;
                        if code == 0 {
                            return Ok((!interrupted).then_some(rules));
                        }
                        return Err(NfTablesError::Kernel {
                            what: format!("list chain {table} {chain}"),
                            errno: Errno::from_raw(-code),
                            message: text,
                        });
                    }
                    _ => {
                        let attrs =
                            parse_attrs(message.body.get(NFGENMSG_LEN..).unwrap_or_default())?;
                        let same = |kind, want: &str| {
                            attrs
                                .get(&kind)
                                .map(|v| v.strip_suffix(&[0]).unwrap_or(v) == want.as_bytes())
                                .unwrap_or(false)
                        };
                        // Old kernels ignore the dump filter: check it here.
                        if !same(NFTA_RULE_TABLE, table) || !same(NFTA_RULE_CHAIN, chain) {
                            continue;
                        }
                        let handle = attrs
                            .get(&NFTA_RULE_HANDLE)
                            .and_then(|h| <[u8; 8]>::try_from(*h).ok())
                            .map(u64::from_be_bytes)
                            .ok_or_else(|| NfTablesError::Decode("rule without handle".into()))?;
                        let comment = attrs
                            .get(&NFTA_RULE_USERDATA)
                            .and_then(|u| comment_from_udata(u));
                        rules.push(ListedRule { handle, comment });
                    }
                }
            }
        }
    }

    /// Whether a chain exists.
    pub fn chain_exists(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<bool, NfTablesError> {
        let mut attrs = Vec::new();
        put_strz(&mut attrs, NFTA_CHAIN_TABLE, table);
        put_strz(&mut attrs, NFTA_CHAIN_NAME, chain);
        let seq = self.next_seq();
        let mut out = Vec::new();
        frame(
            &mut out,
            nft_type(NFT_MSG_GETCHAIN),
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            family.code(),
            0,
            &attrs,
        );
        self.send(&out)?;
        let mut found = false;
        loop {
            self.receive_datagram()?;
            for message in split_messages(&self.recv_buffer)? {
                if message.seq != seq {
                    continue;
                }
                if message.msg_type != NLMSG_ERROR {
                    found = true;
                    continue;
                }
                let (code, text) = parse_error(&message)?;
                return match code {
                    0 => Ok(found),
                    c if c == -(Errno::ENOENT as i32) => Ok(false),
                    c => Err(NfTablesError::Kernel {
                        what: format!("get chain {} {table} {chain}", family.name()),
                        errno: Errno::from_raw(-c),
                        message: text,
                    }),
                };
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), NfTablesError> {
        self.socket
            .send(bytes, 0)
            .map_err(|source| NfTablesError::Socket { op: "send", source })?;
        Ok(())
    }

    /// Reads one whole datagram into `recv_buffer`, growing it when the
    /// datagram is larger (a peek with `MSG_TRUNC` gives the real size).
    fn receive_datagram(&mut self) -> Result<(), NfTablesError> {
        let recv_err = |source| NfTablesError::Socket { op: "recv", source };
        loop {
            let size = match self
                .socket
                .recv(&mut &mut [0u8; 0][..], libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(size) => size,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(recv_err(e)),
            };
            self.recv_buffer.clear();
            self.recv_buffer.reserve(size);
            match self.socket.recv(&mut self.recv_buffer, 0) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(recv_err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_match_like_nft() {
        // 10.0.0.0/24: three bytes, no mask.
        let e = Expr::prefix_match(PAYLOAD_NETWORK_HEADER, 16, &[10, 0, 0, 0], 24, false);
        assert_eq!(
            e,
            vec![
                Expr::Payload {
                    base: 1,
                    offset: 16,
                    len: 3
                },
                Expr::Cmp {
                    equal: false,
                    data: vec![10, 0, 0]
                }
            ]
        );
        // 224.0.0.0/4: four bytes masked with f0000000.
        let e = Expr::prefix_match(PAYLOAD_NETWORK_HEADER, 16, &[224, 0, 0, 0], 4, true);
        assert_eq!(e[1], Expr::Mask(vec![0xf0, 0, 0, 0]));
        // 10.0.0.0/20: mask ff.ff.f0.00, data masked.
        let e = Expr::prefix_match(PAYLOAD_NETWORK_HEADER, 16, &[10, 0, 15, 1], 20, false);
        assert_eq!(e[1], Expr::Mask(vec![0xff, 0xff, 0xf0, 0]));
        assert_eq!(
            e[2],
            Expr::Cmp {
                equal: false,
                data: vec![10, 0, 0, 0]
            }
        );
        // /0: whole field, zero mask.
        let e = Expr::prefix_match(PAYLOAD_NETWORK_HEADER, 16, &[0, 0, 0, 0], 0, false);
        assert_eq!(e[1], Expr::Mask(vec![0, 0, 0, 0]));
        // Out-of-range prefixes are clamped, never panic.
        let e = Expr::prefix_match(PAYLOAD_NETWORK_HEADER, 16, &[1, 2, 3, 4], 200, true);
        assert_eq!(e.len(), 2);
    }

    #[test]
    fn comment_tlv_round_trip() {
        let tlv = comment_udata(b"macspoofchk-dummy-0-eth0");
        assert_eq!(tlv[0], 0);
        assert_eq!(tlv[1], 25);
        assert_eq!(tlv.last(), Some(&0));
        assert_eq!(
            comment_from_udata(&tlv).as_deref(),
            Some(&b"macspoofchk-dummy-0-eth0"[..])
        );
        // Truncated or foreign blobs decode to nothing rather than panic.
        assert_eq!(comment_from_udata(&[0, 9, b'a']), None);
        assert_eq!(comment_from_udata(&[1, 1, 0]), None);
        assert_eq!(comment_from_udata(&[]), None);
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(split_messages(&[4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(split_messages(&[200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_attrs(&[2, 0, 1, 0]).is_err());
        assert!(parse_attrs(&[40, 0, 1, 0, 1]).is_err());
    }
}
