//! host-local's address use per range, for the metrics: how many
//! addresses a range can hand out and how many lease files it has.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::conf::NetworkConfigList;
use serde_json::Value;

use crate::scan;

/// One range of a host-local section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeUse {
    pub network: String,
    /// The range's subnet as written, with its start and end when given
    /// (`10.1.0.0/24`, `10.1.0.0/24 10.1.0.10-10.1.0.20`).
    pub range: String,
    pub used: u64,
    pub free: u64,
}

/// Every host-local range of the network with its use.
pub fn range_use(network: &str, config: &NetworkConfigList) -> Vec<RangeUse> {
    let leased: Vec<IpAddr> = scan::host_local_dirs(network, config)
        .iter()
        .flat_map(|dir| scan::lease_files(dir))
        .map(|(_, ip)| ip)
        .collect();
    config
        .plugins
        .iter()
        .filter_map(|p| p.raw().get("ipam"))
        .filter(|ipam| ipam.get("type").and_then(Value::as_str) == Some("host-local"))
        .flat_map(ranges)
        .map(|r| {
            let used = leased.iter().filter(|ip| r.contains(**ip)).count() as u64;
            RangeUse {
                network: network.to_string(),
                range: r.label.clone(),
                used,
                free: r.capacity().saturating_sub(used),
            }
        })
        .collect()
}

/// A range as host-local allocates from it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    label: String,
    start: u128,
    end: u128,
    gateway: Option<u128>,
    v4: bool,
}

impl Range {
    fn contains(&self, ip: IpAddr) -> bool {
        let (n, v4) = number(ip);
        v4 == self.v4 && n >= self.start && n <= self.end
    }

    /// Addresses from start to end, the gateway (never handed out) aside.
    fn capacity(&self) -> u64 {
        let span = self.end.saturating_sub(self.start).saturating_add(1);
        let gateway = self
            .gateway
            .is_some_and(|g| g >= self.start && g <= self.end);
        u64::try_from(span - u128::from(gateway)).unwrap_or(u64::MAX)
    }
}

fn number(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), true),
        IpAddr::V6(v6) => (u128::from(v6), false),
    }
}

/// The ranges of an `ipam` section (`ranges`, or the old top-level
/// `subnet`). A range that does not parse is left out: the plugin refuses
/// it too.
fn ranges(ipam: &Value) -> Vec<Range> {
    let mut objects: Vec<&Value> = ipam
        .get("ranges")
        .and_then(Value::as_array)
        .map(|sets| sets.iter().filter_map(Value::as_array).flatten().collect())
        .unwrap_or_default();
    if objects.is_empty() && ipam.get("subnet").is_some() {
        objects.push(ipam);
    }
    objects.into_iter().filter_map(range).collect()
}

fn range(obj: &Value) -> Option<Range> {
    let text = |key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let subnet: IpNetwork = text("subnet")?.parse().ok()?;
    let v4 = subnet.is_ipv4();
    let (net, _) = number(subnet.network());
    let (last, _) = number(subnet.broadcast_or_last());
    let addr = |key: &str| -> Option<Option<u128>> {
        match text(key) {
            None => Some(None),
            Some(s) => {
                let (n, is_v4) = number(s.parse().ok()?);
                (is_v4 == v4).then_some(Some(n))
            }
        }
    };
    // host-local's defaults: from the address after the network's to the
    // last (IPv4: the one before the broadcast address); gateway the
    // first address.
    let start = addr("rangeStart")?.unwrap_or(net + 1);
    let end = addr("rangeEnd")?.unwrap_or(if v4 { last.saturating_sub(1) } else { last });
    let gateway = addr("gateway")?.or(Some(net + 1));
    if start > end {
        return None;
    }
    let mut label = subnet.to_string();
    if text("rangeStart").is_some() || text("rangeEnd").is_some() {
        label = format!("{label} {}-{}", show(start, v4), show(end, v4));
    }
    Some(Range {
        label,
        start,
        end,
        gateway,
        v4,
    })
}

fn show(n: u128, v4: bool) -> String {
    if v4 {
        std::net::Ipv4Addr::from(u32::try_from(n).unwrap_or(0)).to_string()
    } else {
        std::net::Ipv6Addr::from(n).to_string()
    }
}

trait LastAddress {
    fn broadcast_or_last(&self) -> IpAddr;
}

impl LastAddress for IpNetwork {
    fn broadcast_or_last(&self) -> IpAddr {
        match self {
            IpNetwork::V4(n) => IpAddr::V4(n.broadcast()),
            IpNetwork::V6(n) => {
                let host_bits = 128 - u32::from(n.prefix());
                let mask = if host_bits == 128 {
                    u128::MAX
                } else {
                    (1u128 << host_bits) - 1
                };
                IpAddr::V6(std::net::Ipv6Addr::from(u128::from(n.network()) | mask))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ipam: Value, data_dir: &std::path::Path) -> NetworkConfigList {
        let mut ipam = ipam;
        ipam["type"] = "host-local".into();
        ipam["dataDir"] = data_dir.display().to_string().into();
        let conf = serde_json::json!({"cniVersion": "1.1.0", "name": "n", "plugins": [
            {"type": "bridge", "ipam": ipam}]});
        libcni::conf::conflist_from_bytes(conf.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn ranges_count_their_leases_and_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("n");
        std::fs::create_dir_all(&store).unwrap();
        for ip in ["10.1.0.2", "10.1.0.3", "10.2.0.15", "fd00::5"] {
            std::fs::write(store.join(ip), "c\r\neth0").unwrap();
        }
        std::fs::write(store.join("last_reserved_ip.0"), "10.1.0.3").unwrap();
        let conf = list(
            serde_json::json!({"ranges": [
                [{"subnet": "10.1.0.0/24"}],
                [{"subnet": "10.2.0.0/24", "rangeStart": "10.2.0.10", "rangeEnd": "10.2.0.19"}],
                [{"subnet": "fd00::/120"}]
            ]}),
            dir.path(),
        );
        let uses = range_use("n", &conf);
        let got: Vec<(&str, u64, u64)> = uses
            .iter()
            .map(|u| (u.range.as_str(), u.used, u.free))
            .collect();
        assert_eq!(
            got,
            vec![
                // .1 (gateway) to .254: 253 addresses.
                ("10.1.0.0/24", 2, 251),
                // .10 to .19, gateway .1 outside.
                ("10.2.0.0/24 10.2.0.10-10.2.0.19", 1, 9),
                // ::1 to ::ff, gateway ::1.
                ("fd00::/120", 1, 253),
            ]
        );
    }

    #[test]
    fn unusable_ranges_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let conf = list(
            serde_json::json!({"ranges": [[
                {"subnet": "not-a-subnet"},
                {"subnet": "10.3.0.0/24", "rangeStart": "10.3.0.50", "rangeEnd": "10.3.0.40"},
                {"subnet": "10.4.0.0/24", "rangeStart": "fd00::1"}
            ]]}),
            dir.path(),
        );
        assert_eq!(range_use("n", &conf), Vec::new());
    }
}
