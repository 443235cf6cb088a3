//! MAC spoof check on the host end of a container's veth (nftables bridge family).
//!
//! Frames entering the bridge from the container's veth pass only with the
//! container's MAC as source, in the reference's layout (table `bridge nat`):
//!
//! ```text
//! chain PREROUTING { type filter hook prerouting priority -300; policy accept;
//!     iifname "<host veth>" jump cni-br-iface-<id>-<if> comment "macspoofchk-<id>-<if>" }
//! chain cni-br-iface-<id>-<if> { jump cni-br-iface-<id>-<if>-mac comment "…" }
//! chain cni-br-iface-<id>-<if>-mac {
//!     ether saddr <mac> return comment "…"
//!     drop comment "…" }
//! ```
//!
//! The reference takes two `nft` transactions for setup and two for
//! teardown; here each is one batch over netlink, preceded by a listing of
//! `PREROUTING` so that a repeated setup replaces its jump instead of
//! adding a second one. A `PREROUTING` already as wanted (hook, type,
//! policy accept) is not sent again: that would be a chain update, which
//! makes the kernel wait for an RCU grace period when the socket closes
//! (see [`libcni::nftables`]).

use libcni::nftables::{
    retry_if_vanished, BaseChain, Batch, CmpOp, Expr, Family, Hook, MetaKey, NfTablesError,
    NfTablesSocket, PayloadBase, Rule, Verdict, HOOK_PREROUTING, IFNAMSIZ,
};

pub const TABLE: &str = "nat";
pub const PREROUTING_CHAIN: &str = "PREROUTING";
/// `type filter hook prerouting priority -300` (`NF_BR_PRI_NAT_DST_BRIDGED`,
/// the priority of ebtables' nat PREROUTING); `policy accept`.
const PREROUTING: BaseChain = BaseChain {
    chain_type: "filter",
    hook: Hook {
        number: HOOK_PREROUTING,
        priority: -300,
    },
    policy_accept: true,
};

#[derive(Debug, thiserror::Error)]
pub enum SpoofCheckError {
    #[error("spoof check: invalid MAC address {0:?}")]
    InvalidMac(String),
    #[error("spoof check: invalid interface name {0:?}")]
    InvalidInterface(String),
    #[error("failed to setup spoof-check: {0}")]
    Setup(NfTablesError),
    #[error("failed to teardown spoof-check: {0}")]
    Teardown(NfTablesError),
}

impl libcni::error::ToCniError for SpoofCheckError {
    fn to_cni_error(&self) -> libcni::CniError {
        let code = match self {
            SpoofCheckError::InvalidMac(_) | SpoofCheckError::InvalidInterface(_) => {
                libcni::ErrorCode::InvalidNetworkConfig
            }
            SpoofCheckError::Setup(_) | SpoofCheckError::Teardown(_) => libcni::ErrorCode::Internal,
        };
        libcni::CniError::new(code, self.to_string())
    }
}

/// The rule comment identifying one attachment.
pub fn rule_comment(container_id: &str, ifname: &str) -> String {
    format!("macspoofchk-{container_id}-{ifname}")
}

/// The attachment's first chain; the MAC chain adds `-mac`.
pub fn iface_chain(container_id: &str, ifname: &str) -> String {
    format!("cni-br-iface-{container_id}-{ifname}")
}

pub fn mac_chain(container_id: &str, ifname: &str) -> String {
    format!("{}-mac", iface_chain(container_id, ifname))
}

/// Installs the check: only `container_mac` may enter the bridge from
/// `host_veth`. Doing it again for the same attachment replaces the rules.
pub fn setup(
    container_id: &str,
    ifname: &str,
    host_veth: &str,
    container_mac: &str,
) -> Result<(), SpoofCheckError> {
    let mac = parse_mac(container_mac)?;
    let iifname = interface_field(host_veth)?;
    let comment = rule_comment(container_id, ifname).into_bytes();
    let iface = iface_chain(container_id, ifname);
    let mac_chain = mac_chain(container_id, ifname);
    let rule = |exprs| Rule::new(exprs).with_comment(&comment);
    let mut socket = NfTablesSocket::open().map_err(SpoofCheckError::Setup)?;
    retry_if_vanished(NfTablesError::errno, || {
        let old_jumps = prerouting_rules(&mut socket, &comment)?;
        let prerouting = socket.get_chain(Family::Bridge, TABLE, PREROUTING_CHAIN)?;
        let mut batch = Batch::new();
        batch.add_table(Family::Bridge, TABLE, None);
        if !prerouting.is_some_and(|chain| PREROUTING.is_in_place(&chain)) {
            batch.add_chain(
                Family::Bridge,
                TABLE,
                PREROUTING_CHAIN,
                Some(PREROUTING),
                None,
            );
        }
        batch.add_chain(Family::Bridge, TABLE, &iface, None, None);
        batch.add_chain(Family::Bridge, TABLE, &mac_chain, None, None);
        batch.flush_chain(Family::Bridge, TABLE, &iface);
        batch.flush_chain(Family::Bridge, TABLE, &mac_chain);
        for handle in old_jumps {
            batch.delete_rule(Family::Bridge, TABLE, PREROUTING_CHAIN, handle);
        }
        batch.add_rule(
            Family::Bridge,
            TABLE,
            PREROUTING_CHAIN,
            &rule(vec![
                Expr::Meta(MetaKey::Iifname),
                Expr::Cmp {
                    op: CmpOp::Eq,
                    data: iifname.clone(),
                },
                Expr::Verdict(Verdict::Jump(iface.clone())),
            ]),
        );
        batch.add_rule(
            Family::Bridge,
            TABLE,
            &iface,
            &rule(vec![Expr::Verdict(Verdict::Jump(mac_chain.clone()))]),
        );
        batch.add_rule(
            Family::Bridge,
            TABLE,
            &mac_chain,
            &rule(vec![
                // ether saddr: link-layer header bytes 6..12.
                Expr::Payload {
                    base: PayloadBase::LinkLayer,
                    offset: 6,
                    len: 6,
                },
                Expr::Cmp {
                    op: CmpOp::Eq,
                    data: mac.to_vec(),
                },
                Expr::Verdict(Verdict::Return),
            ]),
        );
        batch.add_rule(
            Family::Bridge,
            TABLE,
            &mac_chain,
            &rule(vec![Expr::Verdict(Verdict::Drop)]),
        );
        socket.commit(batch)
    })
    .map_err(SpoofCheckError::Setup)
}

/// Removes the check: the `PREROUTING` jumps with this attachment's
/// comment and both of its chains. Table and base chain stay. Missing
/// pieces are fine.
pub fn teardown(container_id: &str, ifname: &str) -> Result<(), SpoofCheckError> {
    let comment = rule_comment(container_id, ifname).into_bytes();
    let iface = iface_chain(container_id, ifname);
    let mac_chain = mac_chain(container_id, ifname);
    let mut socket = NfTablesSocket::open().map_err(SpoofCheckError::Teardown)?;
    retry_if_vanished(NfTablesError::errno, || {
        let mut batch = Batch::new();
        for handle in prerouting_rules(&mut socket, &comment)? {
            batch.delete_rule(Family::Bridge, TABLE, PREROUTING_CHAIN, handle);
        }
        // The iface chain first: its rule is what still jumps to the MAC chain.
        for chain in [&iface, &mac_chain] {
            if socket.get_chain(Family::Bridge, TABLE, chain)?.is_some() {
                batch.delete_chain(Family::Bridge, TABLE, chain);
            }
        }
        socket.commit(batch)
    })
    .map_err(SpoofCheckError::Teardown)
}

/// Handles of the `PREROUTING` rules carrying `comment`.
fn prerouting_rules(
    socket: &mut NfTablesSocket,
    comment: &[u8],
) -> Result<Vec<u64>, NfTablesError> {
    Ok(socket
        .list_rules_where(Family::Bridge, TABLE, Some(PREROUTING_CHAIN), |r| {
            r.comment() == Some(comment)
        })?
        .into_iter()
        .map(|r| r.handle)
        .collect())
}

/// The container's MAC, in any of Go's forms for 6 bytes.
fn parse_mac(text: &str) -> Result<[u8; 6], SpoofCheckError> {
    libcni::hwaddr::parse_ethernet(text)
        .ok_or_else(|| SpoofCheckError::InvalidMac(text.to_string()))
}

/// The interface name as `nft` compares it: NUL-padded to IFNAMSIZ.
fn interface_field(name: &str) -> Result<Vec<u8>, SpoofCheckError> {
    if name.is_empty() || name.len() >= IFNAMSIZ || name.contains('\0') {
        return Err(SpoofCheckError::InvalidInterface(name.to_string()));
    }
    let mut field = name.as_bytes().to_vec();
    field.resize(IFNAMSIZ, 0);
    Ok(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_reference() {
        assert_eq!(rule_comment("dummy-0", "eth0"), "macspoofchk-dummy-0-eth0");
        assert_eq!(iface_chain("dummy-0", "eth0"), "cni-br-iface-dummy-0-eth0");
        assert_eq!(
            mac_chain("dummy-0", "eth0"),
            "cni-br-iface-dummy-0-eth0-mac"
        );
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:00:00:00:01").unwrap(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(
            parse_mac("AA-bb-CC-dd-EE-ff").unwrap(),
            [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
        );
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            // An address, but not an Ethernet one.
            "02:00:00:00:00:01:02:03",
            "2:0:0:0:0:1",
            "zz:00:00:00:00:01",
            "é:",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn interface_names() {
        assert_eq!(interface_field("veth1234").unwrap().len(), IFNAMSIZ);
        assert!(interface_field("").is_err());
        assert!(interface_field("a-name-too-long").is_ok());
        assert!(interface_field("a-name-too-long!").is_err());
    }
}
