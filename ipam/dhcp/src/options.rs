//! DHCP options: the names the configuration may use, the options sent to
//! the server, and the routes read from an acknowledgement.

use std::net::{IpAddr, Ipv4Addr};

use dhcproto::v4::{DhcpOption, DhcpOptions, OptionCode};
use ipnetwork::{IpNetwork, Ipv4Network};
use libcni::types::Route;

/// `RT_SCOPE_LINK`: a classless route without a gateway is on-link.
const SCOPE_LINK: u8 = 253;
/// Values of `provide` options are single DHCP options: one length byte.
pub const MAX_OPTION_VALUE_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// Go's `strconv.ParseUint` texts, as the reference prints them.
    #[error("Can not parse option {option:?}: Can not parse option: strconv.ParseUint: parsing {option:?}: {reason}")]
    Name {
        option: String,
        reason: &'static str,
    },
    #[error("value too long for option {option:?}: {value:?}")]
    ValueTooLong { option: String, value: String },
}

/// The option code a configuration name stands for: one of the reference's
/// names, or a decimal number 0 to 255.
pub fn parse_option_name(option: &str) -> Result<u8, OptionError> {
    let named = match option {
        "dhcp-client-identifier" => Some(61),
        "subnet-mask" => Some(1),
        "routers" => Some(3),
        "host-name" => Some(12),
        "user-class" => Some(77),
        "vendor-class-identifier" => Some(60),
        _ => None,
    };
    if let Some(code) = named {
        return Ok(code);
    }
    let name_error = |reason| OptionError::Name {
        option: option.to_string(),
        reason,
    };
    // Go's ParseUint: decimal digits only (an optional '+' is not allowed).
    if option.is_empty() || !option.bytes().all(|b| b.is_ascii_digit()) {
        return Err(name_error("invalid syntax"));
    }
    option
        .parse::<u8>()
        .map_err(|_| name_error("value out of range"))
}

/// An option the client sends, with its value as given (always a string).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentOption {
    pub code: u8,
    pub value: Vec<u8>,
}

/// The reference sends the client identifier as type 0 ("not a hardware
/// address") followed by `<containerID>/<network>/<ifname>`, cut to the
/// 255 bytes an option can hold.
pub fn client_id(container_id: &str, network: &str, ifname: &str) -> String {
    let mut id = format!("{container_id}/{network}/{ifname}");
    let mut cut = id.len().min(254);
    while !id.is_char_boundary(cut) {
        cut -= 1;
    }
    id.truncate(cut);
    id
}

pub fn client_id_option(client_id: &str) -> Vec<u8> {
    let mut value = vec![0u8];
    value.extend_from_slice(client_id.as_bytes());
    value
}

/// Puts the sent options into a message's options; option 55 lists
/// `requested`.
pub fn add_sent_options(opts: &mut DhcpOptions, sent: &[SentOption], requested: &[u8]) {
    for option in sent {
        opts.insert(DhcpOption::Unknown(dhcproto::v4::UnknownOption::new(
            OptionCode::from(option.code),
            option.value.clone(),
        )));
    }
    if !requested.is_empty() {
        opts.insert(DhcpOption::ParameterRequestList(
            requested.iter().map(|c| OptionCode::from(*c)).collect(),
        ));
    }
}

/// The classful network of a destination of option 33 (RFC 2132 5.8
/// routes carry no mask): class A /8, B /16, C /24; others are host routes.
fn classful(dst: Ipv4Addr) -> Ipv4Network {
    let first = dst.octets()[0];
    let prefix = match first {
        0..=127 => 8,
        128..=191 => 16,
        192..=223 => 24,
        _ => 32,
    };
    // A prefix up to 32 is always valid.
    Ipv4Network::new(dst, prefix)
        .map(|n| Ipv4Network::new(n.network(), prefix).unwrap_or(n))
        .unwrap_or_else(|_| Ipv4Network::from(dst))
}

/// The routes an acknowledgement gives, as the reference builds them: the
/// classless routes (121) alone when present, else the static routes (33)
/// and a default route through the first router.
pub fn routes_from(opts: &DhcpOptions, priority: u32) -> Vec<Route> {
    let mut routes = Vec::new();
    if let Some(DhcpOption::ClasslessStaticRoute(classless)) =
        opts.get(OptionCode::ClasslessStaticRoute)
    {
        for (dst, gw) in classless {
            let dst = IpNetwork::V4(
                Ipv4Network::new(dst.network(), dst.prefix_len())
                    .unwrap_or_else(|_| Ipv4Network::from(dst.network())),
            );
            let mut route = if gw.is_unspecified() {
                let mut r = Route::new(dst, None);
                r.scope = Some(SCOPE_LINK);
                r
            } else {
                Route::new(dst, Some(IpAddr::V4(*gw)))
            };
            route.priority = priority;
            routes.push(route);
        }
        return routes;
    }
    if let Some(DhcpOption::StaticRoutingTable(table)) = opts.get(OptionCode::StaticRoutingTable) {
        for (dst, gw) in table {
            let mut route = Route::new(IpNetwork::V4(classful(*dst)), Some(IpAddr::V4(*gw)));
            route.priority = priority;
            routes.push(route);
        }
    }
    if let (Some(router), Ok(any)) = (
        first_router(opts),
        Ipv4Network::new(Ipv4Addr::UNSPECIFIED, 0),
    ) {
        let mut route = Route::new(IpNetwork::V4(any), Some(IpAddr::V4(router)));
        route.priority = priority;
        routes.push(route);
    }
    routes
}

pub fn first_router(opts: &DhcpOptions) -> Option<Ipv4Addr> {
    match opts.get(OptionCode::Router) {
        Some(DhcpOption::Router(routers)) => routers.first().copied(),
        _ => None,
    }
}

pub fn subnet_mask(opts: &DhcpOptions) -> Option<Ipv4Addr> {
    match opts.get(OptionCode::SubnetMask) {
        Some(DhcpOption::SubnetMask(mask)) => Some(*mask),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::{Decodable, Decoder};

    fn decode_options(bytes: &[u8]) -> DhcpOptions {
        let mut raw = bytes.to_vec();
        raw.push(255);
        DhcpOptions::decode(&mut Decoder::new(&raw)).unwrap()
    }

    /// The reference's option-33 vector: 10.0.0.0 via 10.1.2.3 and
    /// 192.168.1.0 via 192.168.2.3 are a class A and a class C network.
    #[test]
    fn static_routes_are_classful() {
        let opts = decode_options(&[
            33, 16, 10, 0, 0, 0, 10, 1, 2, 3, 192, 168, 1, 0, 192, 168, 2, 3,
        ]);
        let routes = routes_from(&opts, 0);
        let pairs: Vec<(String, String)> = routes
            .iter()
            .map(|r| {
                (
                    r.dst.to_string(),
                    r.gw.map(|g| g.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("10.0.0.0/8".to_string(), "10.1.2.3".to_string()),
                ("192.168.1.0/24".to_string(), "192.168.2.3".to_string())
            ]
        );
        assert_eq!(
            classful("172.16.5.0".parse().unwrap()).to_string(),
            "172.16.0.0/16"
        );
        assert_eq!(
            classful("224.0.0.1".parse().unwrap()).to_string(),
            "224.0.0.1/32"
        );
    }

    #[test]
    fn default_route_through_first_router_with_priority() {
        let opts = decode_options(&[3, 8, 192, 168, 1, 1, 192, 168, 1, 2]);
        let routes = routes_from(&opts, 50);
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(routes[0].gw, Some("192.168.1.1".parse().unwrap()));
        assert_eq!(routes[0].priority, 50);
    }

    /// Option 121 replaces 33 and the router; a 0.0.0.0 gateway is on-link.
    #[test]
    fn classless_routes_win() {
        let opts = decode_options(&[
            3, 4, 192, 168, 1, 1, // router
            33, 8, 10, 0, 0, 0, 10, 1, 2, 3, // static
            121, 13, 24, 10, 9, 8, 0, 0, 0, 0, // 10.9.8.0/24 on-link
            0, 192, 168, 1, 254, // default via .254
        ]);
        let routes = routes_from(&opts, 0);
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0].dst.to_string(), "10.9.8.0/24");
        assert_eq!(routes[0].gw, None);
        assert_eq!(routes[0].scope, Some(SCOPE_LINK));
        assert_eq!(routes[1].dst.to_string(), "0.0.0.0/0");
        assert_eq!(routes[1].gw, Some("192.168.1.254".parse().unwrap()));
    }

    #[test]
    fn option_names() {
        assert_eq!(parse_option_name("host-name"), Ok(12));
        assert_eq!(parse_option_name("12"), Ok(12));
        assert_eq!(parse_option_name("dhcp-client-identifier"), Ok(61));
        assert_eq!(parse_option_name("subnet-mask"), Ok(1));
        assert_eq!(parse_option_name("routers"), Ok(3));
        assert_eq!(parse_option_name("user-class"), Ok(77));
        assert_eq!(parse_option_name("vendor-class-identifier"), Ok(60));
        assert_eq!(parse_option_name("0"), Ok(0));
        assert_eq!(parse_option_name("255"), Ok(255));
        assert_eq!(
            parse_option_name("doNotparseMe").unwrap_err().to_string(),
            "Can not parse option \"doNotparseMe\": Can not parse option: strconv.ParseUint: parsing \"doNotparseMe\": invalid syntax"
        );
        assert_eq!(
            parse_option_name("256").unwrap_err().to_string(),
            "Can not parse option \"256\": Can not parse option: strconv.ParseUint: parsing \"256\": value out of range"
        );
        assert!(parse_option_name("").is_err());
        assert!(parse_option_name("-1").is_err());
        assert!(parse_option_name("+1").is_err());
    }

    #[test]
    fn client_id_is_cut_to_254_bytes() {
        assert_eq!(client_id("c1", "net", "eth0"), "c1/net/eth0");
        let long = "x".repeat(300);
        assert_eq!(client_id(&long, "net", "eth0").len(), 254);
        assert_eq!(client_id_option("a"), [0, b'a']);
    }
}
