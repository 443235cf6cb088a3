//! Policy routing rules (`ip rule`): `RTM_NEWRULE`, `RTM_DELRULE` and
//! `RTM_GETRULE` over [`RouteSocket`].
//!
//! A rule as listed ([`Rule`]) keeps the message the kernel sent, and
//! deleting it sends that message back: the kernel then matches every
//! selector of it, priority included, so a rule that only shares the
//! source and table with it is never taken by mistake (this is how
//! `ip rule flush` deletes too).
//!
//! [`RouteSocket`]: super::RouteSocket

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_ECHO, NLM_F_EXCL};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;

use super::route::{IpFamily, Rtnetlink};
use super::socket::{NetlinkError, NetlinkSocket};

/// `RT_TABLE_UNSPEC`: no table.
pub const RT_TABLE_UNSPEC: u32 = 0;
/// `RT_TABLE_DEFAULT`, `RT_TABLE_MAIN`, `RT_TABLE_LOCAL`: the tables the
/// kernel's own rules look up.
pub const RT_TABLE_DEFAULT: u32 = 253;
pub const RT_TABLE_MAIN: u32 = 254;
pub const RT_TABLE_LOCAL: u32 = 255;

/// A rule to add: `from <source> to <destination> lookup <table>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub family: IpFamily,
    /// The sources it applies to; `None` is all.
    pub source: Option<IpNetwork>,
    /// The destinations it applies to; `None` is all.
    pub destination: Option<IpNetwork>,
    pub table: u32,
    /// `None` lets the kernel choose: just above the first rule after
    /// priority 0 (32765 on a fresh namespace), so each rule added that way
    /// comes before the ones added earlier.
    pub priority: Option<u32>,
}

impl RuleSpec {
    /// `from <source> lookup <table>`, priority left to the kernel.
    pub fn from_source(source: IpNetwork, table: u32) -> RuleSpec {
        RuleSpec {
            family: IpFamily::of_network(&source),
            source: Some(source),
            destination: None,
            table,
            priority: None,
        }
    }
}

/// A rule as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: IpFamily,
    /// 0 for the kernel's first rule (`lookup local`).
    pub priority: u32,
    pub source: Option<IpNetwork>,
    pub destination: Option<IpNetwork>,
    /// The table looked up; [`RT_TABLE_UNSPEC`] for rules that look up
    /// none (`goto`, `blackhole`, ...).
    pub table: u32,
    pub action: RuleAction,
    /// `not` before the selectors.
    pub inverted: bool,
    pub iif: Option<String>,
    pub oif: Option<String>,
    pub fwmark: Option<u32>,
    /// Exactly what the kernel sent, for [`NetlinkSocket::del_rule`].
    message: RuleMessage,
}

impl NetlinkSocket<Rtnetlink> {
    /// Adds a rule and returns it as the kernel made it (priority
    /// included), from the kernel's echo of the new rule; `None` if the
    /// kernel sent no echo. An identical rule (same priority too) fails
    /// with `EEXIST`; without a priority, the kernel picks a new one, so the
    /// same rule can be added twice.
    pub fn add_rule(&mut self, spec: &RuleSpec) -> Result<Option<Rule>, NetlinkError> {
        let msg = rule_message(spec)?;
        let replies = self
            .request(
                RouteNetlinkMessage::NewRule(msg),
                NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK | NLM_F_ECHO,
            )
            .map_err(|e| e.context(format!("add rule {}", describe(spec))))?;
        Ok(replies.into_iter().find_map(|reply| match reply {
            RouteNetlinkMessage::NewRule(msg) => parse_rule(msg),
            _ => None,
        }))
    }

    /// Deletes a listed rule, matching every selector the kernel reported.
    pub fn del_rule(&mut self, rule: &Rule) -> Result<(), NetlinkError> {
        self.request_ack(RouteNetlinkMessage::DelRule(rule.message.clone()), 0)
            .map_err(|e| e.context(format!("delete rule {}", rule.describe())))
    }

    /// Deletes the first rule (lowest priority) that matches `spec`; fields
    /// left `None` match anything. `ENOENT` when none does.
    pub fn del_rule_matching(&mut self, spec: &RuleSpec) -> Result<(), NetlinkError> {
        let msg = rule_message(spec)?;
        self.request_ack(RouteNetlinkMessage::DelRule(msg), 0)
            .map_err(|e| e.context(format!("delete rule {}", describe(spec))))
    }

    /// Rules of one family, or of both with `None`, in the kernel's order
    /// (by priority).
    pub fn list_rules(&mut self, family: Option<IpFamily>) -> Result<Vec<Rule>, NetlinkError> {
        let mut rules = Vec::new();
        let families = match family {
            Some(family) => vec![family],
            None => vec![IpFamily::V4, IpFamily::V6],
        };
        for family in families {
            let mut msg = RuleMessage::default();
            msg.header.family = address_family(family);
            let replies = match self.request(RouteNetlinkMessage::GetRule(msg), NLM_F_DUMP) {
                Ok(replies) => replies,
                // A kernel without IPv6 has no IPv6 rules.
                Err(e) if family == IpFamily::V6 && e.errno() == Some(Errno::EAFNOSUPPORT) => {
                    continue
                }
                Err(e) => return Err(e.context("list rules")),
            };
            rules.extend(replies.into_iter().filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRule(msg) => parse_rule(msg),
                _ => None,
            }));
        }
        Ok(rules)
    }
}

impl Rule {
    /// `<priority>: from <source> lookup <table>`, as `ip rule` shows it.
    pub fn describe(&self) -> String {
        let mut text = format!("{}: ", self.priority);
        if self.inverted {
            text.push_str("not ");
        }
        match self.source {
            Some(source) => text.push_str(&format!("from {source}")),
            None => text.push_str("from all"),
        }
        if let Some(destination) = self.destination {
            text.push_str(&format!(" to {destination}"));
        }
        if let Some(fwmark) = self.fwmark {
            text.push_str(&format!(" fwmark {fwmark:#x}"));
        }
        if let Some(iif) = &self.iif {
            text.push_str(&format!(" iif {iif}"));
        }
        if let Some(oif) = &self.oif {
            text.push_str(&format!(" oif {oif}"));
        }
        match self.action {
            RuleAction::ToTable => text.push_str(&format!(" lookup {}", self.table)),
            other => text.push_str(&format!(" action {other:?}")),
        }
        text
    }
}

fn describe(spec: &RuleSpec) -> String {
    let source = spec
        .source
        .map_or_else(|| "all".to_string(), |s| s.to_string());
    let mut text = format!("from {source}");
    if let Some(destination) = spec.destination {
        text.push_str(&format!(" to {destination}"));
    }
    text.push_str(&format!(" lookup {}", spec.table));
    if let Some(priority) = spec.priority {
        text.push_str(&format!(" priority {priority}"));
    }
    text
}

fn address_family(family: IpFamily) -> AddressFamily {
    match family {
        IpFamily::V4 => AddressFamily::Inet,
        IpFamily::V6 => AddressFamily::Inet6,
    }
}

/// The kernel refuses a prefix with host bits set.
fn network_address(network: IpNetwork) -> IpAddr {
    match network {
        IpNetwork::V4(n) => IpAddr::V4(n.network()),
        IpNetwork::V6(n) => IpAddr::V6(n.network()),
    }
}

fn rule_message(spec: &RuleSpec) -> Result<RuleMessage, NetlinkError> {
    for network in [spec.source, spec.destination].into_iter().flatten() {
        if IpFamily::of_network(&network) != spec.family {
            return Err(NetlinkError::InvalidArgument(format!(
                "rule selector {network} is not in the rule's family {:?}",
                spec.family
            )));
        }
    }
    let mut msg = RuleMessage::default();
    msg.header.family = address_family(spec.family);
    msg.header.action = RuleAction::ToTable;
    // The header holds 8 bits; larger ids go in FRA_TABLE alone.
    msg.header.table = u8::try_from(spec.table).unwrap_or(0);
    if spec.table != RT_TABLE_UNSPEC {
        msg.attributes.push(RuleAttribute::Table(spec.table));
    }
    if let Some(source) = spec.source {
        msg.header.src_len = source.prefix();
        msg.attributes
            .push(RuleAttribute::Source(network_address(source)));
    }
    if let Some(destination) = spec.destination {
        msg.header.dst_len = destination.prefix();
        msg.attributes
            .push(RuleAttribute::Destination(network_address(destination)));
    }
    if let Some(priority) = spec.priority {
        msg.attributes.push(RuleAttribute::Priority(priority));
    }
    Ok(msg)
}

fn parse_rule(msg: RuleMessage) -> Option<Rule> {
    let family = match msg.header.family {
        AddressFamily::Inet => IpFamily::V4,
        AddressFamily::Inet6 => IpFamily::V6,
        _ => return None,
    };
    let mut rule = Rule {
        family,
        priority: 0,
        source: None,
        destination: None,
        table: u32::from(msg.header.table),
        action: msg.header.action,
        inverted: msg.header.flags.contains(RuleFlags::Invert),
        iif: None,
        oif: None,
        fwmark: None,
        message: msg.clone(),
    };
    for attribute in msg.attributes {
        match attribute {
            RuleAttribute::Source(ip) => {
                rule.source = IpNetwork::new(ip, msg.header.src_len).ok();
            }
            RuleAttribute::Destination(ip) => {
                rule.destination = IpNetwork::new(ip, msg.header.dst_len).ok();
            }
            RuleAttribute::Priority(priority) => rule.priority = priority,
            RuleAttribute::Table(table) => rule.table = table,
            RuleAttribute::Iifname(name) => rule.iif = Some(name),
            RuleAttribute::Oifname(name) => rule.oif = Some(name),
            RuleAttribute::FwMark(mark) => rule.fwmark = Some(mark),
            _ => {}
        }
    }
    Some(rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;
    use crate::netlink::RouteSocket;

    #[test]
    fn large_table_ids_go_in_the_attribute_only() {
        let spec = RuleSpec::from_source("10.1.2.3/32".parse().unwrap(), 5000);
        let msg = rule_message(&spec).unwrap();
        assert_eq!(msg.header.table, 0);
        assert_eq!(msg.header.src_len, 32);
        assert!(msg.attributes.contains(&RuleAttribute::Table(5000)));
        let spec = RuleSpec::from_source("fd00::1/128".parse().unwrap(), 100);
        let msg = rule_message(&spec).unwrap();
        assert_eq!(msg.header.table, 100);
        assert_eq!(msg.header.family, AddressFamily::Inet6);
    }

    #[test]
    fn selectors_of_the_other_family_are_refused() {
        let mut spec = RuleSpec::from_source("10.1.2.3/32".parse().unwrap(), 100);
        spec.destination = Some("fd00::/64".parse().unwrap());
        assert!(matches!(
            rule_message(&spec),
            Err(NetlinkError::InvalidArgument(_))
        ));
    }

    /// Add, list, delete against the kernel, in a namespace of its own.
    #[test]
    fn rules_round_trip_through_the_kernel() {
        in_private_netns(|| {
            let mut socket = RouteSocket::open_current().unwrap();
            let before = socket.list_rules(None).unwrap();
            // The kernel's own rules: local, main, default for IPv4 and
            // local, main for IPv6.
            assert!(before.iter().any(|r| r.table == RT_TABLE_LOCAL));
            assert!(before.iter().any(|r| r.table == RT_TABLE_MAIN));

            let first = socket
                .add_rule(&RuleSpec::from_source("10.1.2.3/32".parse().unwrap(), 100))
                .unwrap()
                .expect("the kernel echoes a new rule");
            assert_eq!(first.priority, 32765);
            assert_eq!(first.table, 100);
            assert_eq!(first.source, Some("10.1.2.3/32".parse().unwrap()));
            // Without a priority, the next rule comes before the first.
            let second = socket
                .add_rule(&RuleSpec::from_source("10.1.2.4/32".parse().unwrap(), 5000))
                .unwrap()
                .unwrap();
            assert_eq!(second.priority, 32764);
            assert_eq!(second.table, 5000);
            let v6 = socket
                .add_rule(&RuleSpec::from_source("fd00::5/128".parse().unwrap(), 101))
                .unwrap()
                .unwrap();
            assert_eq!(v6.family, IpFamily::V6);

            let listed = socket.list_rules(None).unwrap();
            assert!(listed.contains(&first), "{listed:?}");
            assert!(listed.contains(&second));
            assert!(listed.contains(&v6));
            assert_eq!(
                socket.list_rules(Some(IpFamily::V6)).unwrap().len(),
                before.iter().filter(|r| r.family == IpFamily::V6).count() + 1
            );

            socket.del_rule(&first).unwrap();
            let e = socket.del_rule(&first).unwrap_err();
            assert!(e.is_not_found(), "{e}");
            socket
                .del_rule_matching(&RuleSpec::from_source("10.1.2.4/32".parse().unwrap(), 5000))
                .unwrap();
            socket.del_rule(&v6).unwrap();
            assert_eq!(socket.list_rules(None).unwrap(), before);
        });
    }
}
