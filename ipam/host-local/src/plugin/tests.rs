use super::*;

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use crate::error::CODE_DUPLICATE_ALLOCATION;
use libcni::error::{ErrorCode, ToCniError};

fn ipam(data: &Path, ranges: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "mynet",
           "ipam": {"type": "host-local", "dataDir": data, "ranges": ranges}})
}

fn leases(data: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(data.join("mynet"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<IpAddr>().is_ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn addresses(result: &v100::Result) -> Vec<String> {
    result.ips.iter().map(|ip| ip.address.to_string()).collect()
}

#[test]
fn whitespace_around_the_container_id_is_trimmed() {
    // The reference's "ignores whitespace in disk files": the library
    // trims as the reference does (the skeleton refuses such IDs before).
    let tmp = tempfile::tempdir().unwrap();
    let config = IpamConfig::from_value(
        &ipam(tmp.path(), json!([[{"subnet": "10.1.2.0/24"}]])),
        None,
    )
    .unwrap();
    let attachment = Attachment::new("   dummy\n ", "eth0").unwrap();
    let result = add(&config, &attachment).unwrap();
    assert_eq!(addresses(&result), ["10.1.2.2/24"]);
    let lease = tmp.path().join("mynet").join("10.1.2.2");
    assert_eq!(fs::read_to_string(&lease).unwrap(), "dummy\r\neth0");
    del(&config.store, &attachment).unwrap();
    assert!(!lease.exists());
}

#[test]
fn a_failed_add_gives_back_only_what_it_reserved() {
    let tmp = tempfile::tempdir().unwrap();
    let one_set = IpamConfig::from_value(
        &ipam(tmp.path(), json!([[{"subnet": "10.1.2.0/24"}]])),
        None,
    )
    .unwrap();
    let a = Attachment::new("a", "eth0").unwrap();
    add(&one_set, &a).unwrap();
    // Two sets: the first gives a new address, the second holds a's
    // earlier one, so a is a duplicate there.
    let two_sets = IpamConfig::from_value(
        &ipam(
            tmp.path(),
            json!([[{"subnet": "10.1.3.0/24"}], [{"subnet": "10.1.2.0/30"}]]),
        ),
        None,
    )
    .unwrap();
    let e = add(&two_sets, &a).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Other(CODE_DUPLICATE_ALLOCATION), "{e}");
    // 10.1.3.2 was reserved, then given back; a's earlier 10.1.2.2 stays
    // (the reference would release every lease of a here).
    assert_eq!(leases(tmp.path()), ["10.1.2.2"]);
    let e = add(&one_set, &a).unwrap_err();
    assert_eq!(
        e.to_cni_error().code,
        ErrorCode::Other(CODE_DUPLICATE_ALLOCATION)
    );
    assert_eq!(
        leases(tmp.path()),
        ["10.1.2.2"],
        "the duplicate ADD released nothing"
    );
}

#[test]
fn the_same_requested_address_twice_is_one_request() {
    let tmp = tempfile::tempdir().unwrap();
    let mut conf = ipam(tmp.path(), json!([[{"subnet": "10.1.2.0/24"}]]));
    conf["args"] = json!({"cni": {"ips": ["10.1.2.9", "10.1.2.9/24"]}});
    let config = IpamConfig::from_value(&conf, Some("10.1.2.9")).unwrap();
    let result = add(&config, &Attachment::new("a", "eth0").unwrap()).unwrap();
    assert_eq!(addresses(&result), ["10.1.2.9/24"]);
}

#[test]
fn an_unfulfilled_request_releases_everything_reserved() {
    let tmp = tempfile::tempdir().unwrap();
    let mut conf = ipam(
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8::/64"}]]),
    );
    conf["args"] = json!({"cni": {"ips": ["10.1.2.9", "10.1.2.10", "192.168.0.1"]}});
    let config = IpamConfig::from_value(&conf, None).unwrap();
    let e = add(&config, &Attachment::new("a", "eth0").unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to allocate all requested IPs: 10.1.2.10 192.168.0.1"
    );
    assert!(leases(tmp.path()).is_empty());
}

#[test]
fn result_carries_gateway_routes_and_dns() {
    let tmp = tempfile::tempdir().unwrap();
    let resolv = tmp.path().join("resolv.conf");
    fs::write(&resolv, "nameserver 192.0.2.3\nsearch example.com\n").unwrap();
    let mut conf = ipam(
        tmp.path(),
        json!([[{"subnet": "10.1.2.0/24", "gateway": "10.1.2.254"}]]),
    );
    conf["ipam"]["resolvConf"] = json!(resolv);
    conf["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0", "gw": "10.1.2.254"}]);
    let config = IpamConfig::from_value(&conf, None).unwrap();
    let result = add(&config, &Attachment::new("a", "eth0").unwrap()).unwrap();
    assert_eq!(result.cni_version, SpecVersion::CURRENT);
    // The walk starts at .1 (the default start), which is not the gateway.
    assert_eq!(addresses(&result), ["10.1.2.1/24"]);
    assert_eq!(result.ips[0].gateway, Some("10.1.2.254".parse().unwrap()));
    assert_eq!(result.ips[0].interface, None);
    assert_eq!(result.routes, config.routes);
    assert_eq!(result.dns.nameservers, ["192.0.2.3"]);
    assert_eq!(result.dns.search, ["example.com"]);
}

#[test]
fn verbs_other_than_add_create_no_store() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let config =
        IpamConfig::from_value(&ipam(&data, json!([[{"subnet": "10.1.2.0/24"}]])), None).unwrap();
    let a = Attachment::new("a", "eth0").unwrap();
    del(&config.store, &a).unwrap();
    assert!(matches!(check(&config, &a), Err(Error::NotFound(_))));
    gc(&config.store, &[]).unwrap();
    status(&config).unwrap();
    assert!(!data.exists());
}

#[test]
fn status_reports_a_full_set() {
    let tmp = tempfile::tempdir().unwrap();
    let config = IpamConfig::from_value(
        &ipam(
            tmp.path(),
            json!([[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.9.0.0/29"}]]),
        ),
        None,
    )
    .unwrap();
    for i in 0..5 {
        status(&config).unwrap();
        add(&config, &Attachment::new(&format!("p{i}"), "eth0").unwrap()).unwrap();
    }
    let e = status(&config).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotAvailable);
    assert_eq!(
        e.to_string(),
        "no IP addresses available in range set 1: 10.9.0.1-10.9.0.6"
    );
    del(&config.store, &Attachment::new("p3", "eth0").unwrap()).unwrap();
    status(&config).unwrap();
}

#[test]
fn gc_keeps_the_legacy_lease_of_a_valid_container() {
    let tmp = tempfile::tempdir().unwrap();
    let config = IpamConfig::from_value(
        &ipam(tmp.path(), json!([[{"subnet": "10.1.2.0/24"}]])),
        None,
    )
    .unwrap();
    add(&config, &Attachment::new("a", "eth0").unwrap()).unwrap();
    fs::write(tmp.path().join("mynet").join("10.1.2.50"), "b").unwrap();
    fs::write(tmp.path().join("mynet").join("10.1.2.51"), "c").unwrap();
    gc(&config.store, &[("b", "eth0")]).unwrap();
    assert_eq!(leases(tmp.path()), ["10.1.2.50"]);
}
