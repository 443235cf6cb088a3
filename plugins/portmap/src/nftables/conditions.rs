//! `conditionsV4`/`conditionsV6` for the nftables backend.
//!
//! The reference pastes the conditions into `nft` rule text, so any nft
//! expression works there. This backend talks netlink and has no nft
//! parser; it understands the conditions that restrict which traffic is
//! published, and refuses anything else with a configuration error rather
//! than guessing:
//!
//! - `ip saddr|daddr [==|!=] <address>[/<prefix>]` (`ip6` for IPv6);
//! - `[meta] iifname|oifname [==|!=] <name>` where the name may be quoted
//!   and may end in `*` (prefix match).
//!
//! The list is joined with spaces first, as the reference does, so
//! `["ip", "saddr", "10.0.0.0/8"]` and `["ip saddr 10.0.0.0/8"]` are the
//! same condition.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::IpFamily;

use super::rules::{nft_keyword, CmpOp, Direction, Matcher};

/// The longest interface name the kernel accepts.
const MAX_IFNAME_LEN: usize = 15;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported nftables condition in {key} at {at:?}: {reason} (supported: \"{keyword} saddr|daddr [!=] <address>[/<prefix>]\", \"[meta] iifname|oifname [!=] <name>[*]\")")]
pub struct ConditionError {
    pub key: &'static str,
    pub keyword: &'static str,
    pub at: String,
    pub reason: String,
}

/// The matchers for `conditions`, for rules of `family`.
pub fn parse_conditions(
    conditions: &[String],
    family: IpFamily,
) -> Result<Vec<Matcher>, ConditionError> {
    let key = match family {
        IpFamily::V4 => "conditionsV4",
        IpFamily::V6 => "conditionsV6",
    };
    let text = conditions.join(" ");
    let error = |at: &str, reason: &str| ConditionError {
        key,
        keyword: nft_keyword(family),
        at: at.to_string(),
        reason: reason.to_string(),
    };
    let tokens = tokenize(&text).map_err(|reason| error(&text, &reason))?;
    let mut matchers = Vec::new();
    let mut rest = tokens.as_slice();
    while let Some((first, tail)) = rest.split_first() {
        let (selector, tail) = if first == "meta" {
            match tail.split_first() {
                Some((selector, tail)) => (selector.as_str(), tail),
                None => return Err(error(first, "meta needs a key")),
            }
        } else {
            (first.as_str(), tail)
        };
        match selector {
            "ip" | "ip6" => {
                if selector != nft_keyword(family) {
                    return Err(error(selector, "wrong address family for these conditions"));
                }
                let (field, tail) = tail
                    .split_first()
                    .ok_or_else(|| error(selector, "missing saddr or daddr"))?;
                let direction = match field.as_str() {
                    "saddr" => Direction::Source,
                    "daddr" => Direction::Destination,
                    other => return Err(error(other, "only saddr and daddr are supported")),
                };
                let (op, tail) = operator(tail);
                let (value, tail) = tail
                    .split_first()
                    .ok_or_else(|| error(field, "missing address"))?;
                let network = parse_network(value, family)
                    .ok_or_else(|| error(value, "not an address or prefix of this family"))?;
                matchers.push(Matcher::Address {
                    direction,
                    op,
                    network,
                });
                rest = tail;
            }
            "iifname" | "oifname" => {
                let direction = if selector == "iifname" {
                    Direction::Source
                } else {
                    Direction::Destination
                };
                let (op, tail) = operator(tail);
                let (value, tail) = tail
                    .split_first()
                    .ok_or_else(|| error(selector, "missing interface name"))?;
                let (name, prefix) = match value.strip_suffix('*') {
                    Some(head) => (head, true),
                    None => (value.as_str(), false),
                };
                if name.len() > MAX_IFNAME_LEN || (name.is_empty() && !prefix) {
                    return Err(error(value, "not a valid interface name"));
                }
                matchers.push(Matcher::InterfaceName {
                    direction,
                    op,
                    name: name.to_string(),
                    prefix,
                });
                rest = tail;
            }
            other => return Err(error(other, "unknown expression")),
        }
    }
    Ok(matchers)
}

fn operator(tokens: &[String]) -> (CmpOp, &[String]) {
    match tokens.split_first() {
        Some((op, tail)) if op == "!=" => (CmpOp::Neq, tail),
        Some((op, tail)) if op == "==" || op == "eq" => (CmpOp::Eq, tail),
        Some((op, tail)) if op == "ne" => (CmpOp::Neq, tail),
        _ => (CmpOp::Eq, tokens),
    }
}

fn parse_network(text: &str, family: IpFamily) -> Option<IpNetwork> {
    let network = match text.parse::<IpNetwork>() {
        Ok(n) => n,
        Err(_) => IpNetwork::from(text.parse::<IpAddr>().ok()?),
    };
    (IpFamily::of(network.ip()) == family).then_some(network)
}

/// Splits on whitespace; `"..."` is one token without its quotes.
fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut has_current = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if has_current {
                    tokens.push(std::mem::take(&mut current));
                    has_current = false;
                }
            }
            '"' => {
                has_current = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(other) => current.push(other),
                        None => return Err("unterminated quote".to_string()),
                    }
                }
            }
            other => {
                has_current = true;
                current.push(other);
            }
        }
    }
    if has_current {
        tokens.push(current);
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn text(matchers: &[Matcher], family: IpFamily) -> Vec<String> {
        matchers.iter().map(|m| m.nft_text(family)).collect()
    }

    #[test]
    fn reference_examples_parse() {
        let m = parse_conditions(&strings(&["ip", "saddr", "1.2.3.4"]), IpFamily::V4).unwrap();
        assert_eq!(text(&m, IpFamily::V4), ["ip saddr 1.2.3.4"]);
        let m = parse_conditions(&strings(&["ip6", "saddr", "12::34"]), IpFamily::V6).unwrap();
        assert_eq!(text(&m, IpFamily::V6), ["ip6 saddr 12::34"]);
    }

    #[test]
    fn joined_and_split_forms_are_the_same() {
        let split = parse_conditions(
            &strings(&["ip", "daddr", "!=", "10.0.0.0/8", "iifname", "\"eth0\""]),
            IpFamily::V4,
        )
        .unwrap();
        let joined = parse_conditions(
            &strings(&["ip daddr != 10.0.0.0/8 iifname \"eth0\""]),
            IpFamily::V4,
        )
        .unwrap();
        assert_eq!(split, joined);
        assert_eq!(
            text(&joined, IpFamily::V4),
            ["ip daddr != 10.0.0.0/8", "iifname \"eth0\""]
        );
    }

    #[test]
    fn interface_prefix_and_meta_keyword() {
        let m = parse_conditions(&strings(&["meta oifname != veth*"]), IpFamily::V6).unwrap();
        assert_eq!(
            m,
            [Matcher::InterfaceName {
                direction: Direction::Destination,
                op: CmpOp::Neq,
                name: "veth".to_string(),
                prefix: true,
            }]
        );
        assert_eq!(text(&m, IpFamily::V6), ["oifname != \"veth*\""]);
    }

    #[test]
    fn empty_conditions_give_no_matchers() {
        assert!(parse_conditions(&[], IpFamily::V4).unwrap().is_empty());
        assert!(parse_conditions(&strings(&[""]), IpFamily::V4)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn unsupported_or_malformed_conditions_are_refused() {
        for (conditions, family) in [
            (vec!["a", "b"], IpFamily::V4),
            (vec!["ip6 saddr ::1"], IpFamily::V4),
            (vec!["ip saddr 2001:db8::1"], IpFamily::V4),
            (vec!["ip protocol tcp"], IpFamily::V4),
            (vec!["ip saddr"], IpFamily::V4),
            (vec!["iifname \"eth0"], IpFamily::V4),
            (vec!["iifname averyveryverylongname"], IpFamily::V4),
            (vec!["meta"], IpFamily::V4),
            (vec!["tcp dport 80"], IpFamily::V6),
        ] {
            let e = parse_conditions(&strings(&conditions), family).unwrap_err();
            assert!(
                e.to_string().contains("unsupported nftables condition"),
                "{e}"
            );
        }
    }
}
