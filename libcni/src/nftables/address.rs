//! A match on the source or destination address of the IP header, typed:
//! the family and field give the header offset and width, the network's
//! prefix gives what part of the address is compared. The one home of the
//! IP header's address offsets for every nftables and iptables-nft writer.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::expr::{CmpOp, Expr, PayloadBase};
use crate::IpFamily;

/// Which address of the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressField {
    Source,
    Destination,
}

impl AddressField {
    /// Offset of the address in the family's network header.
    pub fn offset(self, family: IpFamily) -> u32 {
        match (family, self) {
            (IpFamily::V4, AddressField::Source) => 12,
            (IpFamily::V4, AddressField::Destination) => 16,
            (IpFamily::V6, AddressField::Source) => 8,
            (IpFamily::V6, AddressField::Destination) => 24,
        }
    }
}

/// `ip|ip6 saddr|daddr ==|!= <network>/<prefix>`; the family is the
/// network's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressMatch {
    pub field: AddressField,
    pub op: CmpOp,
    pub network: IpNetwork,
}

impl AddressMatch {
    pub fn new(field: AddressField, op: CmpOp, network: IpNetwork) -> AddressMatch {
        AddressMatch { field, op, network }
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of_network(&self.network)
    }

    fn network_bytes(&self) -> Vec<u8> {
        match self.network.network() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        }
    }

    /// The expressions `nft` itself emits (and iptables-nft too): a
    /// byte-aligned prefix loads only its bytes, any other prefix loads
    /// the whole address and masks it.
    pub fn expressions(&self) -> Vec<Expr> {
        Expr::prefix_match(
            PayloadBase::Network,
            self.field.offset(self.family()),
            &self.network_bytes(),
            self.network.prefix(),
            self.op,
        )
    }

    /// Another encoding `nft list` prints the same way: the whole address
    /// is loaded, and masked whenever the prefix is shorter than it.
    pub fn whole_address_expressions(&self) -> Vec<Expr> {
        let family = self.family();
        let mut exprs = vec![Expr::Payload {
            base: PayloadBase::Network,
            offset: self.field.offset(family),
            len: u32::from(family.bits() / 8),
        }];
        if self.network.prefix() < family.bits() {
            let mask = match self.network.mask() {
                IpAddr::V4(m) => m.octets().to_vec(),
                IpAddr::V6(m) => m.octets().to_vec(),
            };
            exprs.push(Expr::Mask(mask));
        }
        exprs.push(Expr::Cmp {
            op: self.op,
            data: self.network_bytes(),
        });
        exprs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(offset: u32, len: u32) -> Expr {
        Expr::Payload {
            base: PayloadBase::Network,
            offset,
            len,
        }
    }

    #[test]
    fn offsets_of_the_ip_headers() {
        let net = |s: &str| -> IpNetwork { s.parse().unwrap() };
        let m = AddressMatch::new(AddressField::Source, CmpOp::Eq, net("10.1.2.3/32"));
        assert_eq!(m.expressions()[0], payload(12, 4));
        let m = AddressMatch::new(AddressField::Destination, CmpOp::Eq, net("10.1.2.3/32"));
        assert_eq!(m.expressions()[0], payload(16, 4));
        let m = AddressMatch::new(AddressField::Source, CmpOp::Eq, net("fd00::1/128"));
        assert_eq!(m.expressions()[0], payload(8, 16));
        let m = AddressMatch::new(AddressField::Destination, CmpOp::Eq, net("fd00::1/128"));
        assert_eq!(m.expressions()[0], payload(24, 16));
    }

    #[test]
    fn the_two_encodings() {
        let m = AddressMatch::new(
            AddressField::Destination,
            CmpOp::Neq,
            "10.1.2.3/8".parse().unwrap(),
        );
        assert_eq!(
            m.expressions(),
            [
                payload(16, 1),
                Expr::Cmp {
                    op: CmpOp::Neq,
                    data: vec![10]
                }
            ]
        );
        assert_eq!(
            m.whole_address_expressions(),
            [
                payload(16, 4),
                Expr::Mask(vec![255, 0, 0, 0]),
                Expr::Cmp {
                    op: CmpOp::Neq,
                    data: vec![10, 0, 0, 0]
                }
            ]
        );
        let host = AddressMatch::new(
            AddressField::Source,
            CmpOp::Eq,
            "fd00::1/128".parse().unwrap(),
        );
        assert_eq!(host.whole_address_expressions(), host.expressions());
    }
}
