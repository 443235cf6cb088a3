//! nf_tables rules as data: what a rule matches and does, how `nft list`
//! prints it (for tests against the reference's expected dumps), and the
//! expressions ([`Expr`]) the kernel gets.
//!
//! The expressions print, in `nft list ruleset`, exactly as the
//! reference's rules do.

use std::fmt::Write as _;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::nftables::{
    AddressField, AddressMatch, DataRegister, Expr, MetaKey, Verdict, IFNAMSIZ,
};
use libcni::IpFamily;

use crate::config::Protocol;

pub use libcni::nftables::CmpOp;

/// Where an address or port is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Source,
    Destination,
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
    pub family: IpFamily,
    pub chain: &'static str,
    pub matchers: Vec<Matcher>,
    pub action: Action,
    /// The rule comment: the container ID, as the reference writes it.
    pub comment: Option<String>,
}

/// `RTN_LOCAL` (rtnetlink.h), the route type `fib daddr type local` wants.
const RTN_LOCAL: u32 = 2;

/// The keyword of the family's address matches (`ip`, `ip6`): the name of
/// its nf_tables family.
pub(crate) fn nft_keyword(family: IpFamily) -> &'static str {
    libcni::nftables::Family::from(family).name()
}

/// The header field of an address match.
fn address_field(direction: Direction) -> AddressField {
    match direction {
        Direction::Source => AddressField::Source,
        Direction::Destination => AddressField::Destination,
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
    pub fn nft_text(&self, family: IpFamily) -> String {
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
                let full = network.prefix() == family.bits();
                let value = if full {
                    network.ip().to_string()
                } else {
                    format!("{}/{}", network.network(), network.prefix())
                };
                format!("{} {field} {}{value}", nft_keyword(family), op_text(*op))
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

    /// The family is the rule's; an address match takes its own from its
    /// network, which is always of the rule's family.
    fn expressions(&self, _family: IpFamily, out: &mut Vec<Expr>) {
        match self {
            Matcher::Address {
                direction,
                op,
                network,
            } => {
                // The whole address, masked when the prefix is shorter:
                // `nft list` prints it as it prints nft's own encoding,
                // and rules written before keep comparing equal.
                out.extend(
                    AddressMatch::new(address_field(*direction), *op, *network)
                        .whole_address_expressions(),
                );
            }
            Matcher::DestinationPort { protocol, port } => {
                out.extend(Expr::l4proto_is(protocol.number()));
                out.extend(Expr::destination_port_is(*port));
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
                out.push(Expr::Meta(key));
                let mut value = name.as_bytes().to_vec();
                // An exact name is compared with its NUL padding.
                if !*prefix {
                    value.resize(IFNAMSIZ, 0);
                }
                out.push(Expr::Cmp {
                    op: *op,
                    data: value,
                });
            }
            Matcher::LocalDestination => {
                out.push(Expr::FibDaddrType);
                // The address type is stored in host byte order.
                out.push(Expr::Cmp {
                    op: CmpOp::Eq,
                    data: RTN_LOCAL.to_ne_bytes().to_vec(),
                });
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

    fn expressions(&self, family: IpFamily, out: &mut Vec<Expr>) {
        match self {
            Action::Jump(chain) => out.push(Expr::Verdict(Verdict::Jump(chain.to_string()))),
            Action::DnatTo { address, port } => {
                out.push(Expr::Immediate {
                    register: DataRegister::Reg1,
                    data: address_bytes(*address),
                });
                out.push(Expr::Immediate {
                    register: DataRegister::Reg2,
                    data: port.to_be_bytes().to_vec(),
                });
                out.push(Expr::Dnat {
                    family: libcni::nftables::Family::from(family),
                });
            }
            Action::Masquerade => out.push(Expr::Masquerade),
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
            nft_keyword(self.family),
            self.chain,
            self.nft_text()
        )
    }

    /// The rule's expressions.
    pub fn expressions(&self) -> Vec<Expr> {
        let mut out = Vec::new();
        for matcher in &self.matchers {
            matcher.expressions(self.family, &mut out);
        }
        self.action.expressions(self.family, &mut out);
        out
    }
}

#[cfg(test)]
mod tests;
