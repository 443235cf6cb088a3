//! The expressions rules are made of, as values: what a plugin writes, and
//! what a listed rule is read back as when all its expressions are known.
//!
//! Each one is the kernel expression `nft` emits for the equivalent rule
//! text, so `nft list ruleset` prints our rules as it prints rules `nft`
//! made. Loads and compares use register 1 (the 128-bit `NFT_REG_1`);
//! `dnat` takes its address from register 1 and its port from register 2.
//!
//! `payload`, `meta`, `bitwise`, `cmp` and `immediate` are encoded and
//! decoded with `netlink-packet-netfilter`'s types. The crate has no type
//! for `fib`, `nat`, `masq`, `counter`, `match` and `target`: those are
//! hand-encoded here as raw attributes (`Expressions::Other`), with the
//! values of `include/uapi/linux/netfilter/nf_tables.h`.
//!
//! `counter`, `match` and `target` are what iptables-nft writes: every rule
//! it makes counts, and `-m comment` / `-j MASQUERADE` become x_tables
//! extensions run through nf_tables' compat layer (`xt match` / `xt
//! target` with the extension's own info struct).

use netlink_packet_core::{
    parse_string, DefaultNla, Nla, NlaBuffer, NlasIterator, Parseable, NLA_TYPE_MASK,
};
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, Immediate, ListAttribute, Meta,
    Operator, Payload, Register, Verdict as NftVerdict, VerdictAttribute,
};

use super::Family;
use crate::netlink::attributes::be_u32;

pub use netlink_packet_netfilter::nftables::MetaKey;

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_BITWISE_DATA: u16 = 7;
const NFTA_FIB_DREG: u16 = 1;
const NFTA_FIB_RESULT: u16 = 2;
const NFTA_FIB_FLAGS: u16 = 3;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 1 << 1;
const NFTA_NAT_TYPE: u16 = 1;
const NFTA_NAT_FAMILY: u16 = 2;
const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
const NFTA_NAT_REG_ADDR_MAX: u16 = 4;
const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
const NFTA_NAT_REG_PROTO_MAX: u16 = 6;
const NFTA_NAT_FLAGS: u16 = 7;
const NFT_NAT_DNAT: u32 = 1;
/// The kernel adds this flag itself when a rule has an address register.
const NF_NAT_RANGE_MAP_IPS: u32 = 1 << 0;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 1 << 1;
const NFTA_CT_DREG: u16 = 1;
const NFTA_CT_KEY: u16 = 2;
/// `NFT_CT_STATE`: the connection's state bits (`NF_CT_STATE_*_BIT`).
const NFT_CT_STATE: u32 = 0;
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;
/// `NFTA_MATCH_NAME`/`_REV`/`_INFO`, and the same numbers for `NFTA_TARGET_*`.
const NFTA_XT_NAME: u16 = 1;
const NFTA_XT_REV: u16 = 2;
const NFTA_XT_INFO: u16 = 3;
const NFT_REG_1: u32 = 1;
const NFT_REG_2: u32 = 2;
/// Verdict codes of `include/uapi/linux/netfilter.h` that the crate's
/// `Verdict` has no name for.
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;

/// `NF_CT_STATE_BIT(IP_CT_ESTABLISHED)`: a bit of what [`Expr::CtState`]
/// loads.
pub const CT_STATE_ESTABLISHED: u32 = 1 << 1;
/// `NF_CT_STATE_BIT(IP_CT_RELATED)`.
pub const CT_STATE_RELATED: u32 = 1 << 2;

/// Where a payload load reads from (`enum nft_payload_bases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    LinkLayer,
    Network,
    Transport,
}

impl PayloadBase {
    fn code(self) -> u32 {
        match self {
            PayloadBase::LinkLayer => 0,
            PayloadBase::Network => 1,
            PayloadBase::Transport => 2,
        }
    }

    fn from_code(code: u32) -> Option<PayloadBase> {
        match code {
            0 => Some(PayloadBase::LinkLayer),
            1 => Some(PayloadBase::Network),
            2 => Some(PayloadBase::Transport),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Neq,
}

/// A data register an `immediate` loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataRegister {
    Reg1,
    Reg2,
}

impl DataRegister {
    fn register(self) -> Register {
        match self {
            DataRegister::Reg1 => Register::Reg1,
            DataRegister::Reg2 => Register::Reg2,
        }
    }
}

/// A verdict, as the last expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load <key> => reg 1`
    Meta(MetaKey),
    /// `payload load <len>b @ <base> header + <offset> => reg 1`
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
    },
    /// `bitwise reg 1 = (reg 1 & <mask>) ^ 0`
    Mask(Vec<u8>),
    /// `cmp eq|neq reg 1 <data>`
    Cmp { op: CmpOp, data: Vec<u8> },
    /// `immediate reg <n> <data>`
    Immediate {
        register: DataRegister,
        data: Vec<u8>,
    },
    /// `immediate reg 0 <verdict>`
    Verdict(Verdict),
    /// `fib daddr type => reg 1`: the route type (`RTN_*`, host byte
    /// order) of the destination address.
    FibDaddrType,
    /// `nat dnat <family> addr reg 1 proto reg 2`
    Dnat { family: Family },
    /// `masq`
    Masquerade,
    /// `ct load state => reg 1`: the conntrack state bits of the packet's
    /// connection (see [`CT_STATE_ESTABLISHED`], [`CT_STATE_RELATED`]), in
    /// host byte order, to be masked and compared (`ct state
    /// established,related`).
    CtState,
    /// `counter`: how many packets and bytes the rule matched. Written
    /// from zero; any counts read back as the same expression.
    Counter,
    /// `match <name> rev <revision>`: an x_tables match, `info` being its
    /// info struct exactly as the kernel module takes it.
    XtMatch {
        name: String,
        revision: u32,
        info: Vec<u8>,
    },
    /// `target <name> rev <revision>`: an x_tables target.
    XtTarget {
        name: String,
        revision: u32,
        info: Vec<u8>,
    },
}

impl Expr {
    /// The kernel's name of the expression.
    pub fn name(&self) -> &'static str {
        match self {
            Expr::Meta(_) => "meta",
            Expr::Payload { .. } => "payload",
            Expr::Mask(_) => "bitwise",
            Expr::Cmp { .. } => "cmp",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::FibDaddrType => "fib",
            Expr::CtState => "ct",
            Expr::Dnat { .. } => "nat",
            Expr::Masquerade => "masq",
            Expr::Counter => "counter",
            Expr::XtMatch { .. } => "match",
            Expr::XtTarget { .. } => "target",
        }
    }

    /// `meta l4proto <protocol>` (`IPPROTO_*`): what `nft` writes before a
    /// port match and iptables-nft writes for `-p`.
    pub fn l4proto_is(protocol: u8) -> Vec<Expr> {
        vec![
            Expr::Meta(MetaKey::L4Proto),
            Expr::Cmp {
                op: CmpOp::Eq,
                data: vec![protocol],
            },
        ]
    }

    /// The transport header's destination port equals `port` (`th dport`,
    /// and iptables' `--dport` of the tcp and udp matches).
    pub fn destination_port_is(port: u16) -> Vec<Expr> {
        vec![
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
            },
            Expr::Cmp {
                op: CmpOp::Eq,
                data: port.to_be_bytes().to_vec(),
            },
        ]
    }

    /// The expressions `nft` emits for `<field> ==|!= <network>/<prefix>`
    /// where the field is `network.len()` bytes at `offset`: a byte-aligned
    /// prefix loads only its bytes, any other one loads the whole field and
    /// masks it. Prefixes past the field's length are clamped.
    pub fn prefix_match(
        base: PayloadBase,
        offset: u32,
        network: &[u8],
        prefix: u8,
        op: CmpOp,
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
                Expr::Cmp { op, data: bytes },
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
            Expr::Cmp { op, data: masked },
        ]
    }

    /// The expression as a `NFTA_LIST_ELEM` of a rule.
    pub fn encode(&self) -> ListAttribute<ExpressionAttribute> {
        let expressions = match self {
            Expr::Meta(key) => Expressions::Meta(vec![
                Meta::DestinationRegister(Register::Reg1),
                Meta::Key(*key),
            ]),
            Expr::Payload { base, offset, len } => Expressions::Payload(vec![
                Payload::DestinationRegister(Register::Reg1),
                Payload::Base(base.code()),
                Payload::Offset(*offset),
                Payload::Len(*len),
            ]),
            Expr::Mask(mask) => Expressions::Bitwise(vec![
                Bitwise::SourceRegister(Register::Reg1),
                Bitwise::DestinationRegister(Register::Reg1),
                Bitwise::Length(mask.len() as u32),
                Bitwise::Mask(DataAttribute::Value(mask.clone())),
                Bitwise::Xor(DataAttribute::Value(vec![0; mask.len()])),
            ]),
            Expr::Cmp { op, data } => Expressions::Cmp(vec![
                Cmp::SourceRegister(Register::Reg1),
                Cmp::Op(match op {
                    CmpOp::Eq => Operator::Equal,
                    CmpOp::Neq => Operator::NotEqual,
                }),
                Cmp::Data(DataAttribute::Value(data.clone())),
            ]),
            Expr::Immediate { register, data } => Expressions::Immediate(vec![
                Immediate::DestinationRegister(register.register()),
                Immediate::Data(DataAttribute::Value(data.clone())),
            ]),
            Expr::Verdict(verdict) => {
                let (code, chain) = match verdict {
                    Verdict::Accept => (NftVerdict::Other(NF_ACCEPT), None),
                    Verdict::Drop => (NftVerdict::Other(NF_DROP), None),
                    Verdict::Return => (NftVerdict::Return, None),
                    Verdict::Jump(chain) => (NftVerdict::Jump, Some(chain)),
                    Verdict::Goto(chain) => (NftVerdict::Goto, Some(chain)),
                };
                let mut attrs = vec![VerdictAttribute::Code(code)];
                if let Some(chain) = chain {
                    attrs.push(VerdictAttribute::Chain(chain.clone()));
                }
                Expressions::Immediate(vec![
                    Immediate::DestinationRegister(Register::Verdict),
                    Immediate::Data(DataAttribute::Verdict(attrs)),
                ])
            }
            Expr::FibDaddrType => other(
                "fib",
                &[
                    (NFTA_FIB_DREG, NFT_REG_1),
                    (NFTA_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE),
                    (NFTA_FIB_FLAGS, NFTA_FIB_F_DADDR),
                ],
            ),
            Expr::Dnat { family } => other(
                "nat",
                &[
                    (NFTA_NAT_TYPE, NFT_NAT_DNAT),
                    (NFTA_NAT_FAMILY, u32::from(family.nfproto())),
                    (NFTA_NAT_REG_ADDR_MIN, NFT_REG_1),
                    (NFTA_NAT_REG_PROTO_MIN, NFT_REG_2),
                    (NFTA_NAT_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED),
                ],
            ),
            Expr::Masquerade => other("masq", &[]),
            Expr::CtState => other(
                "ct",
                &[(NFTA_CT_DREG, NFT_REG_1), (NFTA_CT_KEY, NFT_CT_STATE)],
            ),
            Expr::Counter => Expressions::Other {
                expression_type: "counter".to_string(),
                attributes: vec![
                    DefaultNla::new(NFTA_COUNTER_BYTES, 0u64.to_be_bytes().to_vec()),
                    DefaultNla::new(NFTA_COUNTER_PACKETS, 0u64.to_be_bytes().to_vec()),
                ],
            },
            Expr::XtMatch {
                name,
                revision,
                info,
            } => xt("match", name, *revision, info),
            Expr::XtTarget {
                name,
                revision,
                info,
            } => xt("target", name, *revision, info),
        };
        ListAttribute::from(expressions)
    }
}

/// An expression the crate has no type for: its name and big-endian `u32`
/// attributes (nf_tables' integers are big-endian).
fn other(name: &str, attributes: &[(u16, u32)]) -> Expressions {
    Expressions::Other {
        expression_type: name.to_string(),
        attributes: attributes
            .iter()
            .map(|(kind, value)| DefaultNla::new(*kind, value.to_be_bytes().to_vec()))
            .collect(),
    }
}

/// An x_tables extension: its name (NUL-terminated, as the kernel wants
/// it), revision and info struct.
fn xt(kind: &str, name: &str, revision: u32, info: &[u8]) -> Expressions {
    let mut name = name.as_bytes().to_vec();
    name.push(0);
    Expressions::Other {
        expression_type: kind.to_string(),
        attributes: vec![
            DefaultNla::new(NFTA_XT_NAME, name),
            DefaultNla::new(NFTA_XT_REV, revision.to_be_bytes().to_vec()),
            DefaultNla::new(NFTA_XT_INFO, info.to_vec()),
        ],
    }
}

/// A listed rule's `NFTA_RULE_EXPRESSIONS`, when every expression in it is
/// one of [`Expr`] exactly as this module writes it; `None` otherwise
/// (another program's expression, an attribute this module does not set),
/// which callers treat as "not a rule of ours".
pub(crate) fn decode_list(bytes: &[u8]) -> Option<Vec<Expr>> {
    NlasIterator::new(bytes)
        .map(|nla| decode(parse_element(&nla.ok()?)?))
        .collect()
}

/// The last expression of a rule, if it is one of [`Expr`].
pub(crate) fn decode_last(bytes: &[u8]) -> Option<Expr> {
    let nla = NlasIterator::new(bytes).last()?.ok()?;
    decode(parse_element(&nla)?)
}

/// One `NFTA_LIST_ELEM` of a rule's expressions: its `NFTA_EXPR_DATA` as
/// the crate's attribute types, picked by `NFTA_EXPR_NAME`.
///
/// The crate's own parser for a list element (`ListAttribute::<
/// ExpressionAttribute>::parse`) builds an error context with
/// `format!("... {:?}", buf)` of the whole expression for every attribute
/// it reads, error or not: Debug-printing each byte of every rule listed.
/// DEL lists POSTROUTING, one rule per pod, and at 200 pods that printing
/// took 15-20 ms of a bridge DEL built for musl (whose memcpy is slower
/// for the many small copies). This walks the same attributes with the
/// same per-attribute parsers and prints nothing.
fn parse_element<T: AsRef<[u8]> + ?Sized>(element: &NlaBuffer<&T>) -> Option<Expressions> {
    if element.kind() & NLA_TYPE_MASK != NFTA_LIST_ELEM {
        return None;
    }
    let (mut name, mut data) = (None, None);
    for nla in NlasIterator::new(element.value()) {
        let nla = nla.ok()?;
        match nla.kind() & NLA_TYPE_MASK {
            NFTA_EXPR_NAME => name = Some(parse_string(nla.value()).ok()?),
            NFTA_EXPR_DATA => data = Some(nla),
            _ => return None,
        }
    }
    let data = data?;
    let data = data.value();
    Some(match name?.as_str() {
        "bitwise" => Expressions::Bitwise(each_with_data(
            data,
            &[NFTA_BITWISE_MASK, NFTA_BITWISE_XOR, NFTA_BITWISE_DATA],
            |kind, value| match kind {
                NFTA_BITWISE_MASK => Bitwise::Mask(value),
                NFTA_BITWISE_XOR => Bitwise::Xor(value),
                _ => Bitwise::Data(value),
            },
        )?),
        "cmp" => Expressions::Cmp(each_with_data(data, &[NFTA_CMP_DATA], |_, value| {
            Cmp::Data(value)
        })?),
        "immediate" => {
            Expressions::Immediate(each_with_data(data, &[NFTA_IMMEDIATE_DATA], |_, value| {
                Immediate::Data(value)
            })?)
        }
        "lookup" => Expressions::Lookup(each(data)?),
        "meta" => Expressions::Meta(each(data)?),
        "payload" => Expressions::Payload(each(data)?),
        other => Expressions::Other {
            expression_type: other.to_string(),
            attributes: each::<DefaultNla>(data)?,
        },
    })
}

/// Every attribute of an expression's data, through the crate's parser.
fn each<A>(data: &[u8]) -> Option<Vec<A>>
where
    A: for<'b> Parseable<NlaBuffer<&'b [u8]>>,
{
    NlasIterator::new(data)
        .map(|nla| A::parse(&nla.ok()?).ok())
        .collect()
}

/// Like [`each`], except that the attributes of `data_kinds` (each holding
/// an `NFTA_DATA_*`) are parsed here and given to `wrap`: the crate's
/// parsers for those print the attribute into their error context too.
fn each_with_data<A>(
    data: &[u8],
    data_kinds: &[u16],
    wrap: impl Fn(u16, DataAttribute) -> A,
) -> Option<Vec<A>>
where
    A: for<'b> Parseable<NlaBuffer<&'b [u8]>>,
{
    NlasIterator::new(data)
        .map(|nla| {
            let nla = nla.ok()?;
            let kind = nla.kind() & NLA_TYPE_MASK;
            if !data_kinds.contains(&kind) {
                return A::parse(&nla).ok();
            }
            let inner = NlaBuffer::new_checked(nla.value()).ok()?;
            Some(wrap(kind, DataAttribute::parse(&inner).ok()?))
        })
        .collect()
}

fn decode(data: Expressions) -> Option<Expr> {
    match data {
        Expressions::Meta(attrs) => {
            let mut key = None;
            for attr in attrs {
                match attr {
                    Meta::DestinationRegister(Register::Reg1) => {}
                    Meta::Key(k) => key = Some(k),
                    _ => return None,
                }
            }
            key.map(Expr::Meta)
        }
        Expressions::Payload(attrs) => {
            let (mut base, mut offset, mut len) = (None, None, None);
            for attr in attrs {
                match attr {
                    Payload::DestinationRegister(Register::Reg1) => {}
                    Payload::Base(b) => base = PayloadBase::from_code(b),
                    Payload::Offset(o) => offset = Some(o),
                    Payload::Len(l) => len = Some(l),
                    _ => return None,
                }
            }
            Some(Expr::Payload {
                base: base?,
                offset: offset?,
                len: len?,
            })
        }
        Expressions::Bitwise(attrs) => {
            let (mut mask, mut xor_is_zero, mut len) = (None, false, None);
            let (mut sreg, mut dreg) = (false, false);
            for attr in attrs {
                match attr {
                    Bitwise::SourceRegister(Register::Reg1) => sreg = true,
                    Bitwise::DestinationRegister(Register::Reg1) => dreg = true,
                    Bitwise::Length(l) => len = Some(l),
                    Bitwise::Mask(DataAttribute::Value(m)) => mask = Some(m),
                    Bitwise::Xor(DataAttribute::Value(x)) => {
                        xor_is_zero = x.iter().all(|b| *b == 0)
                    }
                    // NFT_BITWISE_BOOL (mask and xor), which kernels dump.
                    Bitwise::Op(0) => {}
                    _ => return None,
                }
            }
            let mask = mask?;
            (sreg && dreg && xor_is_zero && len == Some(mask.len() as u32))
                .then_some(Expr::Mask(mask))
        }
        Expressions::Cmp(attrs) => {
            let (mut sreg, mut op, mut data) = (false, None, None);
            for attr in attrs {
                match attr {
                    Cmp::SourceRegister(Register::Reg1) => sreg = true,
                    Cmp::Op(Operator::Equal) => op = Some(CmpOp::Eq),
                    Cmp::Op(Operator::NotEqual) => op = Some(CmpOp::Neq),
                    Cmp::Data(DataAttribute::Value(d)) => data = Some(d),
                    _ => return None,
                }
            }
            sreg.then_some(Expr::Cmp {
                op: op?,
                data: data?,
            })
        }
        Expressions::Immediate(attrs) => {
            let (mut register, mut value, mut verdict) = (None, None, None);
            for attr in attrs {
                match attr {
                    Immediate::DestinationRegister(r) => register = Some(r),
                    Immediate::Data(DataAttribute::Value(v)) => value = Some(v),
                    Immediate::Data(DataAttribute::Verdict(v)) => verdict = Some(v),
                    _ => return None,
                }
            }
            match (register?, value, verdict) {
                (Register::Verdict, None, Some(attrs)) => decode_verdict(attrs).map(Expr::Verdict),
                (Register::Reg1, Some(data), None) => Some(Expr::Immediate {
                    register: DataRegister::Reg1,
                    data,
                }),
                (Register::Reg2, Some(data), None) => Some(Expr::Immediate {
                    register: DataRegister::Reg2,
                    data,
                }),
                _ => None,
            }
        }
        Expressions::Other {
            expression_type,
            attributes,
        } => {
            let raw: Vec<(u16, Vec<u8>)> = attributes
                .iter()
                .map(|a| {
                    let mut value = vec![0u8; a.value_len()];
                    a.emit_value(&mut value);
                    (a.kind() & NLA_TYPE_MASK, value)
                })
                .collect();
            match expression_type.as_str() {
                "counter" => decode_counter(&raw),
                "match" | "target" => decode_xt(&expression_type, &raw),
                _ => {
                    let values: Option<Vec<(u16, u32)>> =
                        raw.iter().map(|(k, v)| Some((*k, be_u32(v)?))).collect();
                    decode_other(&expression_type, &values?)
                }
            }
        }
        _ => None,
    }
}

fn decode_verdict(attrs: Vec<VerdictAttribute>) -> Option<Verdict> {
    let (mut code, mut chain) = (None, None);
    for attr in attrs {
        match attr {
            VerdictAttribute::Code(c) => code = Some(c),
            VerdictAttribute::Chain(c) => chain = Some(c),
            _ => return None,
        }
    }
    match (code?, chain) {
        (NftVerdict::Other(NF_ACCEPT), None) => Some(Verdict::Accept),
        (NftVerdict::Other(NF_DROP), None) => Some(Verdict::Drop),
        (NftVerdict::Return, None) => Some(Verdict::Return),
        (NftVerdict::Jump, Some(chain)) => Some(Verdict::Jump(chain)),
        (NftVerdict::Goto, Some(chain)) => Some(Verdict::Goto(chain)),
        _ => None,
    }
}

/// `counter` with its two 64-bit counts (whatever they are by now).
fn decode_counter(raw: &[(u16, Vec<u8>)]) -> Option<Expr> {
    raw.iter()
        .all(|(k, v)| matches!(*k, NFTA_COUNTER_BYTES | NFTA_COUNTER_PACKETS) && v.len() == 8)
        .then_some(Expr::Counter)
}

/// `match` / `target` with name, revision and info.
fn decode_xt(kind: &str, raw: &[(u16, Vec<u8>)]) -> Option<Expr> {
    let (mut name, mut revision, mut info) = (None, None, None);
    for (k, v) in raw {
        match *k {
            NFTA_XT_NAME => {
                let text = v.strip_suffix(&[0]).unwrap_or(v);
                name = Some(String::from_utf8(text.to_vec()).ok()?);
            }
            NFTA_XT_REV => revision = Some(be_u32(v)?),
            NFTA_XT_INFO => info = Some(v.clone()),
            _ => return None,
        }
    }
    let (name, revision, info) = (name?, revision?, info?);
    Some(if kind == "match" {
        Expr::XtMatch {
            name,
            revision,
            info,
        }
    } else {
        Expr::XtTarget {
            name,
            revision,
            info,
        }
    })
}

/// `fib`, `nat` and `masq` from their attributes as the kernel dumps them.
fn decode_other(name: &str, values: &[(u16, u32)]) -> Option<Expr> {
    let get = |kind: u16| values.iter().find(|(k, _)| *k == kind).map(|(_, v)| *v);
    let only = |known: &[u16]| values.iter().all(|(k, _)| known.contains(k));
    match name {
        "masq" if values.is_empty() => Some(Expr::Masquerade),
        "ct" if only(&[NFTA_CT_DREG, NFTA_CT_KEY])
            && get(NFTA_CT_DREG) == Some(NFT_REG_1)
            && get(NFTA_CT_KEY) == Some(NFT_CT_STATE) =>
        {
            Some(Expr::CtState)
        }
        "fib"
            if only(&[NFTA_FIB_DREG, NFTA_FIB_RESULT, NFTA_FIB_FLAGS])
                && get(NFTA_FIB_DREG) == Some(NFT_REG_1)
                && get(NFTA_FIB_RESULT) == Some(NFT_FIB_RESULT_ADDRTYPE)
                && get(NFTA_FIB_FLAGS) == Some(NFTA_FIB_F_DADDR) =>
        {
            Some(Expr::FibDaddrType)
        }
        "nat" => {
            let known = [
                NFTA_NAT_TYPE,
                NFTA_NAT_FAMILY,
                NFTA_NAT_REG_ADDR_MIN,
                NFTA_NAT_REG_ADDR_MAX,
                NFTA_NAT_REG_PROTO_MIN,
                NFTA_NAT_REG_PROTO_MAX,
                NFTA_NAT_FLAGS,
            ];
            let family = match get(NFTA_NAT_FAMILY) {
                Some(code) => Family::from_nfproto(u8::try_from(code).ok()?)?,
                None => return None,
            };
            // The kernel dumps a max register equal to the min one, and
            // the address flag it adds itself.
            let flags = get(NFTA_NAT_FLAGS).unwrap_or(0) & !NF_NAT_RANGE_MAP_IPS;
            (only(&known)
                && get(NFTA_NAT_TYPE) == Some(NFT_NAT_DNAT)
                && get(NFTA_NAT_REG_ADDR_MIN) == Some(NFT_REG_1)
                && get(NFTA_NAT_REG_ADDR_MAX).is_none_or(|r| r == NFT_REG_1)
                && get(NFTA_NAT_REG_PROTO_MIN) == Some(NFT_REG_2)
                && get(NFTA_NAT_REG_PROTO_MAX).is_none_or(|r| r == NFT_REG_2)
                && flags == NF_NAT_RANGE_PROTO_SPECIFIED
                && matches!(family, Family::Ip | Family::Ip6))
            .then_some(Expr::Dnat { family })
        }
        _ => None,
    }
}

/// Reads a raw `NFTA_EXPR_DATA` value, for tests that compare with what
/// `nft` sends.
#[cfg(test)]
pub(crate) fn data_attributes(element: &[u8]) -> Vec<(u16, Vec<u8>)> {
    use crate::netlink::attributes::attributes;
    let Some((_, data)) = attributes(element).find(|(kind, _)| *kind == 2) else {
        return Vec::new();
    };
    attributes(data).map(|(k, v)| (k, v.to_vec())).collect()
}

/// The bytes of one encoded expression (`NFTA_LIST_ELEM` value).
#[cfg(test)]
pub(crate) fn encoded_element(expr: &Expr) -> Vec<u8> {
    use netlink_packet_core::Emitable;
    let element = expr.encode();
    let mut bytes = vec![0u8; element.buffer_len()];
    element.emit(&mut bytes);
    netlink_packet_core::NlaBuffer::new_checked(&bytes[..])
        .map(|nla| nla.value().to_vec())
        .unwrap_or_default()
}
