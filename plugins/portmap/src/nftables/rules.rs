//! nf_tables rules as data: what a rule matches and does, how `nft list`
//! prints it (for tests against the reference's expected dumps), and the
//! netlink expressions the kernel gets.
//!
//! The expressions are the ones `nft` itself generates for the same rule
//! text (checked with `nft --debug=netlink`), so `nft list ruleset` shows
//! our rules exactly as it shows the reference's.

use std::fmt::Write as _;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::DefaultNla;
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, ExpressionAttribute, Expressions, Immediate, ListAttribute, Meta,
    MetaKey, Operator, Payload, Register, Verdict, VerdictAttribute,
};

use crate::config::Protocol;
use crate::Family;

/// Where an address or port is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Source,
    Destination,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Neq,
}

/// One match of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// `ip saddr 10.0.0.0/8`, `ip6 daddr != 2001:db8::1`.
    Address {
        direction: Direction,
        op: CmpOp,
        network: IpNetwork,
    },
    /// `tcp dport 8080`.
    DestinationPort { protocol: Protocol, port: u16 },
    /// `iifname "eth0"`, `oifname != "veth*"` (a trailing `*` is a prefix).
    InterfaceName {
        direction: Direction,
        op: CmpOp,
        name: String,
        prefix: bool,
    },
    /// `fib daddr type local`.
    LocalDestination,
}

/// What a rule does when it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Jump(&'static str),
    DnatTo { address: IpAddr, port: u16 },
    Masquerade,
}

/// One rule of a chain in table `cni_hostport` of `family`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub family: Family,
    pub chain: &'static str,
    pub matchers: Vec<Matcher>,
    pub action: Action,
    /// The rule comment: the container ID, as the reference writes it.
    pub comment: Option<String>,
}

// Linux uapi values (nf_tables.h, netfilter.h, rtnetlink.h).
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFTA_FIB_DREG: u16 = 1;
const NFTA_FIB_RESULT: u16 = 2;
const NFTA_FIB_FLAGS: u16 = 3;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 1 << 1;
const RTN_LOCAL: u32 = 2;
const NFTA_NAT_TYPE: u16 = 1;
const NFTA_NAT_FAMILY: u16 = 2;
const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
const NFTA_NAT_FLAGS: u16 = 7;
const NFT_NAT_DNAT: u32 = 1;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 1 << 1;
const NFPROTO_IPV4: u32 = 2;
const NFPROTO_IPV6: u32 = 10;
const NFT_REG_1: u32 = 1;
const NFT_REG_2: u32 = 2;
/// `IFNAMSIZ`: an exact interface name is compared with its NUL padding.
const IFNAMSIZ: usize = 16;

impl Family {
    /// The keyword of the family's address matches (`ip`, `ip6`).
    pub fn nft_keyword(self) -> &'static str {
        match self {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    }

    /// Offset and length of the source address in the network header.
    fn address_field(self, direction: Direction) -> (u32, u32) {
        match (self, direction) {
            (Family::V4, Direction::Source) => (12, 4),
            (Family::V4, Direction::Destination) => (16, 4),
            (Family::V6, Direction::Source) => (8, 16),
            (Family::V6, Direction::Destination) => (24, 16),
        }
    }

    fn nfproto(self) -> u32 {
        match self {
            Family::V4 => NFPROTO_IPV4,
            Family::V6 => NFPROTO_IPV6,
        }
    }
}

fn op_text(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "",
        CmpOp::Neq => "!= ",
    }
}

fn address_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

impl Matcher {
    /// The match as `nft list` prints it.
    pub fn nft_text(&self, family: Family) -> String {
        match self {
            Matcher::Address {
                direction,
                op,
                network,
            } => {
                let field = match direction {
                    Direction::Source => "saddr",
                    Direction::Destination => "daddr",
                };
                let full = network.prefix() == family.max_prefix();
                let value = if full {
                    network.ip().to_string()
                } else {
                    format!("{}/{}", network.network(), network.prefix())
                };
                format!("{} {field} {}{value}", family.nft_keyword(), op_text(*op))
            }
            Matcher::DestinationPort { protocol, port } => format!("{protocol} dport {port}"),
            Matcher::InterfaceName {
                direction,
                op,
                name,
                prefix,
            } => {
                let keyword = match direction {
                    Direction::Source => "iifname",
                    Direction::Destination => "oifname",
                };
                let star = if *prefix { "*" } else { "" };
                format!("{keyword} {}\"{name}{star}\"", op_text(*op))
            }
            Matcher::LocalDestination => "fib daddr type local".to_string(),
        }
    }

    fn expressions(&self, family: Family, out: &mut Vec<ListAttribute<ExpressionAttribute>>) {
        match self {
            Matcher::Address {
                direction,
                op,
                network,
            } => {
                let (offset, len) = family.address_field(*direction);
                out.push(payload(NFT_PAYLOAD_NETWORK_HEADER, offset, len));
                if network.prefix() < family.max_prefix() {
                    let mask = match network.mask() {
                        IpAddr::V4(m) => m.octets().to_vec(),
                        IpAddr::V6(m) => m.octets().to_vec(),
                    };
                    out.push(bitwise_mask(len, mask));
                }
                out.push(cmp(*op, address_bytes(network.network())));
            }
            Matcher::DestinationPort { protocol, port } => {
                out.push(meta_load(MetaKey::L4Proto));
                out.push(cmp(CmpOp::Eq, vec![protocol.number()]));
                out.push(payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2));
                out.push(cmp(CmpOp::Eq, port.to_be_bytes().to_vec()));
            }
            Matcher::InterfaceName {
                direction,
                op,
                name,
                prefix,
            } => {
                let key = match direction {
                    Direction::Source => MetaKey::Iifname,
                    Direction::Destination => MetaKey::Oifname,
                };
                out.push(meta_load(key));
                let mut value = name.as_bytes().to_vec();
                if !*prefix {
                    value.resize(IFNAMSIZ, 0);
                }
                out.push(cmp(*op, value));
            }
            Matcher::LocalDestination => {
                out.push(other_expression(
                    "fib",
                    vec![
                        u32_attribute(NFTA_FIB_DREG, NFT_REG_1),
                        u32_attribute(NFTA_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE),
                        u32_attribute(NFTA_FIB_FLAGS, NFTA_FIB_F_DADDR),
                    ],
                ));
                // The address type is stored in host byte order.
                out.push(cmp(CmpOp::Eq, RTN_LOCAL.to_ne_bytes().to_vec()));
            }
        }
    }
}

impl Action {
    pub fn nft_text(&self) -> String {
        match self {
            Action::Jump(chain) => format!("jump {chain}"),
            Action::DnatTo { address, port } => match address {
                IpAddr::V4(v4) => format!("dnat to {v4}:{port}"),
                IpAddr::V6(v6) => format!("dnat to [{v6}]:{port}"),
            },
            Action::Masquerade => "masquerade".to_string(),
        }
    }

    fn expressions(&self, family: Family, out: &mut Vec<ListAttribute<ExpressionAttribute>>) {
        match self {
            Action::Jump(chain) => out.push(ListAttribute::from(Expressions::Immediate(vec![
                Immediate::DestinationRegister(Register::Verdict),
                Immediate::Data(DataAttribute::Verdict(vec![
                    VerdictAttribute::Code(Verdict::Jump),
                    VerdictAttribute::Chain(chain.to_string()),
                ])),
            ]))),
            Action::DnatTo { address, port } => {
                out.push(immediate(Register::Reg1, address_bytes(*address)));
                out.push(immediate(Register::Reg2, port.to_be_bytes().to_vec()));
                out.push(other_expression(
                    "nat",
                    vec![
                        u32_attribute(NFTA_NAT_TYPE, NFT_NAT_DNAT),
                        u32_attribute(NFTA_NAT_FAMILY, family.nfproto()),
                        u32_attribute(NFTA_NAT_REG_ADDR_MIN, NFT_REG_1),
                        u32_attribute(NFTA_NAT_REG_PROTO_MIN, NFT_REG_2),
                        u32_attribute(NFTA_NAT_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED),
                    ],
                ));
            }
            Action::Masquerade => out.push(other_expression("masq", Vec::new())),
        }
    }
}

impl RuleSpec {
    /// The rule as `nft list` prints it: `tcp dport 8080 dnat to 10.0.0.2:80
    /// comment "cid"`.
    pub fn nft_text(&self) -> String {
        let mut text = String::new();
        for matcher in &self.matchers {
            text.push_str(&matcher.nft_text(self.family));
            text.push(' ');
        }
        text.push_str(&self.action.nft_text());
        if let Some(comment) = &self.comment {
            let _ = write!(text, " comment \"{comment}\"");
        }
        text
    }

    /// The `add rule` line of an `nft -f` script for this rule.
    pub fn nft_add_line(&self, table: &str) -> String {
        format!(
            "add rule {} {table} {} {}",
            self.family.nft_keyword(),
            self.chain,
            self.nft_text()
        )
    }

    /// The rule's netlink expressions.
    pub fn expressions(&self) -> Vec<ListAttribute<ExpressionAttribute>> {
        let mut out = Vec::new();
        for matcher in &self.matchers {
            matcher.expressions(self.family, &mut out);
        }
        self.action.expressions(self.family, &mut out);
        out
    }
}

fn payload(base: u32, offset: u32, len: u32) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(Expressions::Payload(vec![
        Payload::DestinationRegister(Register::Reg1),
        Payload::Base(base),
        Payload::Offset(offset),
        Payload::Len(len),
    ]))
}

fn bitwise_mask(len: u32, mask: Vec<u8>) -> ListAttribute<ExpressionAttribute> {
    let zeros = vec![0u8; mask.len()];
    ListAttribute::from(Expressions::Bitwise(vec![
        Bitwise::SourceRegister(Register::Reg1),
        Bitwise::DestinationRegister(Register::Reg1),
        Bitwise::Length(len),
        Bitwise::Mask(DataAttribute::Value(mask)),
        Bitwise::Xor(DataAttribute::Value(zeros)),
    ]))
}

fn cmp(op: CmpOp, value: Vec<u8>) -> ListAttribute<ExpressionAttribute> {
    let operator = match op {
        CmpOp::Eq => Operator::Equal,
        CmpOp::Neq => Operator::NotEqual,
    };
    ListAttribute::from(Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(operator),
        Cmp::Data(DataAttribute::Value(value)),
    ]))
}

fn meta_load(key: MetaKey) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(Expressions::Meta(vec![
        Meta::DestinationRegister(Register::Reg1),
        Meta::Key(key),
    ]))
}

fn immediate(register: Register, value: Vec<u8>) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(Expressions::Immediate(vec![
        Immediate::DestinationRegister(register),
        Immediate::Data(DataAttribute::Value(value)),
    ]))
}

/// An expression the netlink library has no type for (`fib`, `nat`,
/// `masq`): its name and raw attributes.
fn other_expression(name: &str, attributes: Vec<DefaultNla>) -> ListAttribute<ExpressionAttribute> {
    ListAttribute::from(Expressions::Other {
        expression_type: name.to_string(),
        attributes,
    })
}

/// nf_tables integers are big-endian.
fn u32_attribute(kind: u16, value: u32) -> DefaultNla {
    DefaultNla::new(kind, value.to_be_bytes().to_vec())
}

#[cfg(test)]
mod tests;
