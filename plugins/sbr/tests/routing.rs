//! ADD, CHECK and DEL of the built sbr in a pod with two rails: the rules
//! and tables in the kernel, and where traffic really goes.

mod common;

use common::*;
use serde_json::json;

/// The reference test's first case, on real rails: net1's routes move to
/// table 100 with a default route via rail B, one rule from net1's
/// address; eth0's routes stay in main.
#[test]
fn add_gives_the_interface_a_table_and_a_rule() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    let out = call(PLUGIN, "ADD", &pod.path(), &conf);
    out.assert_ok();
    assert_eq!(
        out.json(),
        conf["prevResult"],
        "the previous result is passed on"
    );

    assert_eq!(
        pod.pod.ip(&["-4", "rule"]),
        format!(
            "0:\tfrom all lookup local\n\
             32765:\tfrom {POD_B} lookup 100\n\
             32766:\tfrom all lookup main\n\
             32767:\tfrom all lookup default\n"
        )
    );
    assert_eq!(
        pod.table("-4", "100"),
        format!(
            "default via {RAIL_B} dev net1 \n\
             10.20.1.0/24 dev net1 proto kernel scope link src {POD_B} \n\
             {BEHIND_B} via {RAIL_B} dev net1 \n"
        )
    );
    assert_eq!(
        pod.table("-4", "main"),
        format!(
            "default via {RAIL_A} dev eth0 \n\
             10.10.1.0/24 dev eth0 proto kernel scope link src {POD_A} \n"
        ),
        "net1's routes leave main, eth0's stay"
    );
    // IPv6 link-local routes of net1 move too (no source, no gateway).
    assert!(pod.table("-6", "100").contains("fe80::/64 dev net1"));
    assert!(!pod.table("-6", "main").contains("net1"));

    let check = call(PLUGIN, "CHECK", &pod.path(), &conf);
    check.assert_ok();

    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert_eq!(pod.rules(), KERNEL_RULES);
    assert_eq!(pod.table("-4", "100"), "");
    assert_eq!(pod.table("-6", "100"), "");
}

/// Traffic from net1's address leaves by net1 and reaches rail B; traffic
/// without a chosen source follows the main table out of eth0 to rail A.
#[test]
fn sourced_traffic_takes_its_own_interface() {
    let pod = Pod::new(Layout::default());
    // Before sbr: everything to the far address leaves by eth0. From
    // net1's address the ping fails: rail A has no route back to it.
    assert_eq!(rail_that_answers(&pod, FAR, None), Some('A'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), None);

    call(PLUGIN, "ADD", &pod.path(), &default_conf(&pod)).assert_ok();

    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));
    assert_eq!(rail_that_answers(&pod, FAR, None), Some('A'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_A)), Some('A'));
    // Rail B's own address is now reachable from net1's address only:
    // the main table no longer routes net1's subnet.
    assert!(pod.ping(RAIL_B, Some(POD_B)));
    assert!(!pod.ping(RAIL_B, None));
    // net1's gateway route went with it into table 100.
    let lookup = pod
        .pod
        .ip(&["-4", "route", "get", "10.21.0.1", "from", POD_B]);
    assert!(
        lookup.contains(&format!("via {RAIL_B} dev net1 table 100")),
        "{lookup}"
    );
    let lookup = pod.pod.ip(&["-4", "route", "get", "10.21.0.1"]);
    assert!(lookup.contains("dev eth0"), "{lookup}");

    call(PLUGIN, "DEL", &pod.path(), &default_conf(&pod)).assert_ok();
    // What DEL leaves: no rule, so net1's address falls back to main.
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), None);
}

/// IPv4 and IPv6 on net1: a table per address (100 for the first, 101 for
/// the second), and IPv6 traffic from net1's address reaches rail B.
#[test]
fn dual_stack_gets_a_table_per_address() {
    let pod = Pod::new(Layout {
        ipv6: true,
        ..Layout::default()
    });
    let prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B6}/64"), Some(RAIL_B6)),
        ],
    );
    let conf = sbr_conf("1.0.0", Some(prev), json!({}));
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();

    assert!(pod
        .pod
        .ip(&["-4", "rule"])
        .contains(&format!("32765:\tfrom {POD_B} lookup 100")));
    assert!(pod
        .pod
        .ip(&["-6", "rule"])
        .contains(&format!("32765:\tfrom {POD_B6} lookup 101")));
    assert!(pod
        .table("-4", "100")
        .starts_with(&format!("default via {RAIL_B} dev net1")));
    let v6 = pod.table("-6", "101");
    assert!(
        v6.contains(&format!("default via {RAIL_B6} dev net1")),
        "{v6}"
    );
    assert!(v6.contains("fd20::/64 dev net1 proto kernel"), "{v6}");
    // Routes with neither source nor gateway go to every address's table,
    // as in the reference.
    assert!(pod.table("-6", "100").contains("fd20::/64 dev net1"));

    assert_eq!(rail_that_answers(&pod, FAR6, Some(POD_B6)), Some('B'));
    assert_eq!(rail_that_answers(&pod, FAR6, None), Some('A'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));

    call(PLUGIN, "CHECK", &pod.path(), &conf).assert_ok();
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert_eq!(pod.rules(), KERNEL_RULES);
    assert_eq!(pod.table("-4", "100"), "");
    assert_eq!(pod.table("-6", "100"), "");
    assert_eq!(pod.table("-6", "101"), "");
}

/// The reference test's two-address case: the second address (index past
/// the interface list) gets table 101, and its rule comes first.
#[test]
fn two_addresses_of_one_interface() {
    let pod = Pod::new(Layout {
        second_address: true,
        ..Layout::default()
    });
    let mut prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B2}/24"), Some(RAIL_B2)),
        ],
    );
    prev["ips"][1]["interface"] = json!(1);
    let conf = sbr_conf("1.0.0", Some(prev), json!({}));
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();

    let rules = pod.source_rules();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(rules[0]["src"], POD_B2);
    assert_eq!(rules[0]["table"], "101");
    assert_eq!(rules[1]["src"], POD_B);
    assert_eq!(rules[1]["table"], "100");
    let t100 = pod.table("-4", "100");
    let t101 = pod.table("-4", "101");
    assert!(
        t100.starts_with(&format!("default via {RAIL_B} dev net1")),
        "{t100}"
    );
    assert!(t100.contains(&format!(
        "10.20.1.0/24 dev net1 proto kernel scope link src {POD_B}"
    )));
    assert!(!t100.contains("10.20.101.0/24"), "{t100}");
    assert!(
        t101.starts_with(&format!("default via {RAIL_B2} dev net1")),
        "{t101}"
    );
    assert!(t101.contains(&format!(
        "10.20.101.0/24 dev net1 proto kernel scope link src {POD_B2}"
    )));
    // The gateway route via rail B's first address goes with the first.
    assert!(t100.contains(BEHIND_B) && !t101.contains(BEHIND_B));

    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B2)), Some('B'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));

    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert!(pod.source_rules().is_empty());
    assert_eq!(pod.table("-4", "100"), "");
    assert_eq!(pod.table("-4", "101"), "");
}

/// A default route already on net1 in main ends up once in the table.
#[test]
fn an_existing_default_route_of_the_interface() {
    let pod = Pod::new(Layout::default());
    pod.pod.ip(&[
        "route", "add", "default", "via", RAIL_B, "dev", "net1", "metric", "100",
    ]);
    call(PLUGIN, "ADD", &pod.path(), &default_conf(&pod)).assert_ok();
    let table = pod.table("-4", "100");
    assert!(
        table.contains(&format!("default via {RAIL_B} dev net1 \n")),
        "{table}"
    );
    assert!(
        table.contains(&format!("default via {RAIL_B} dev net1 metric 100")),
        "{table}"
    );
    assert!(!pod.table("-4", "main").contains("net1"));
    assert_eq!(rail_that_answers(&pod, FAR, None), Some('A'));
}

/// Table ids in use (by a rule, or by routes without a rule) are skipped.
#[test]
fn used_table_ids_are_skipped() {
    let pod = Pod::new(Layout::default());
    pod.pod.ip(&["rule", "add", "fwmark", "7", "lookup", "100"]);
    pod.pod.ip(&[
        "route",
        "add",
        "unreachable",
        "10.99.0.0/16",
        "table",
        "101",
    ]);
    call(PLUGIN, "ADD", &pod.path(), &default_conf(&pod)).assert_ok();
    let rules = pod.source_rules();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["table"], "102");
    assert!(pod.table("-4", "102").contains("default via"));

    call(PLUGIN, "DEL", &pod.path(), &default_conf(&pod)).assert_ok();
    assert_eq!(pod.table("-4", "102"), "");
    // What was not sbr's stays.
    assert!(pod.pod.ip(&["rule"]).contains("fwmark 0x7 lookup 100"));
    assert!(pod.table("-4", "101").contains("unreachable 10.99.0.0/16"));
}

/// `gateways`: the static IPv4 gateway replaces the result's; the IPv6
/// one replaces the IPv6 gateway only.
#[test]
fn static_gateways_replace_the_result_gateways() {
    let pod = Pod::new(Layout {
        ipv6: true,
        ..Layout::default()
    });
    let prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B6}/64"), Some("fd20::ffff")),
        ],
    );
    let conf = sbr_conf(
        "1.0.0",
        Some(prev),
        json!({"gateways": ["10.20.1.254", "fd20::1"]}),
    );
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    assert!(pod
        .table("-4", "100")
        .starts_with("default via 10.20.1.254 dev net1"));
    assert!(pod
        .table("-6", "101")
        .contains(&format!("default via {RAIL_B6} dev net1")));
    assert!(!pod.all_routes().contains("fd20::ffff"));
    // The IPv6 static gateway is rail B itself: traffic flows.
    assert_eq!(rail_that_answers(&pod, FAR6, Some(POD_B6)), Some('B'));
    call(PLUGIN, "CHECK", &pod.path(), &conf).assert_ok();
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert!(pod.source_rules().is_empty());

    // Only an IPv4 static gateway: the IPv6 address keeps its own.
    let prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[(&format!("{POD_B6}/64"), Some(RAIL_B6))],
    );
    let conf = sbr_conf("1.0.0", Some(prev), json!({"gateways": ["10.20.1.254"]}));
    // The first ADD moved net1's routes out of main: bring the prefix back.
    pod.pod
        .ip(&["-6", "route", "replace", "fd20::/64", "dev", "net1"]);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    let rules = pod.source_rules();
    let table = rules[0]["table"].as_str().unwrap();
    assert!(pod
        .table("-6", table)
        .contains(&format!("default via {RAIL_B6} dev net1")));
}

/// `addSourceHints`: net1's subnet stays in main with a source hint and
/// link scope, so unsourced traffic to it still goes out of net1; the
/// other routes move as usual.
#[test]
fn source_hints_keep_the_subnet_in_main() {
    let pod = Pod::new(Layout::default());
    let conf = sbr_conf(
        "1.0.0",
        default_conf(&pod).get("prevResult").cloned(),
        json!({"addSourceHints": true}),
    );
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    let main = pod.table("-4", "main");
    assert!(
        main.contains(&format!("10.20.1.0/24 dev net1 scope link src {POD_B}")),
        "{main}"
    );
    assert!(!main.contains(BEHIND_B), "{main}");
    let table = pod.table("-4", "100");
    assert!(table.starts_with(&format!("default via {RAIL_B} dev net1")));
    assert!(table.contains("10.20.1.0/24 dev net1"));
    assert_eq!(pod.source_rules().len(), 1);

    // Unsourced traffic to net1's subnet now stays on net1.
    assert!(pod.ping(RAIL_B, None));
    assert_eq!(rail_that_answers(&pod, FAR, None), Some('A'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));
    call(PLUGIN, "CHECK", &pod.path(), &conf).assert_ok();

    // CHECK notices the hint gone.
    pod.pod.ip(&[
        "route",
        "del",
        "10.20.1.0/24",
        "dev",
        "net1",
        "table",
        "main",
    ]);
    let out = call(PLUGIN, "CHECK", &pod.path(), &conf);
    assert_eq!(out.error_code(), 999);
    assert!(out.stdout.contains("src 10.20.1.2"), "{}", out.stdout);
}

/// `table`: rules into the operator's table and nothing else; DEL removes
/// those rules and leaves the operator's routes.
#[test]
fn a_configured_table_gets_the_rules_only() {
    let pod = Pod::new(Layout {
        second_address: true,
        ..Layout::default()
    });
    let routes_before = pod.all_routes();
    let mut prev = prev_result(
        "1.0.0",
        &pod.path(),
        &[
            (&format!("{POD_B}/24"), Some(RAIL_B)),
            (&format!("{POD_B2}/24"), Some(RAIL_B2)),
        ],
    );
    prev["ips"][1]["interface"] = json!(1);
    let conf = sbr_conf(
        "1.0.0",
        Some(prev),
        json!({"table": 5000, "gateways": ["ignored in table mode"]}),
    );
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    let rules = pod.source_rules();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert!(rules.iter().all(|r| r["table"] == "5000"));
    assert_eq!(pod.all_routes(), routes_before, "routes untouched");

    // The operator's table makes the rules route.
    pod.pod.ip(&[
        "route", "add", "default", "via", RAIL_B, "dev", "net1", "table", "5000",
    ]);
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));
    call(PLUGIN, "CHECK", &pod.path(), &conf).assert_ok();

    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    assert!(pod.source_rules().is_empty());
    assert!(pod.table("-4", "5000").contains("default via"));
}

/// DEL with `table` deletes the rules of that table only.
#[test]
fn del_with_a_table_leaves_other_tables_rules() {
    let pod = Pod::new(Layout::default());
    pod.pod
        .ip(&["rule", "add", "from", POD_B, "lookup", "7000"]);
    let conf = sbr_conf(
        "1.0.0",
        default_conf(&pod).get("prevResult").cloned(),
        json!({"table": 5000}),
    );
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    assert_eq!(pod.source_rules().len(), 2);
    call(PLUGIN, "DEL", &pod.path(), &conf).assert_ok();
    let rules = pod.source_rules();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["table"], "7000");
}

/// CHECK fails once the rule or the default route is gone.
#[test]
fn check_finds_what_is_missing() {
    let pod = Pod::new(Layout::default());
    let conf = default_conf(&pod);
    call(PLUGIN, "ADD", &pod.path(), &conf).assert_ok();
    call(PLUGIN, "CHECK", &pod.path(), &conf).assert_ok();

    pod.pod.ip(&["route", "del", "default", "table", "100"]);
    let out = call(PLUGIN, "CHECK", &pod.path(), &conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.stdout.contains("no default route via 10.20.1.1"),
        "{}",
        out.stdout
    );

    pod.pod.ip(&["rule", "del", "from", POD_B, "lookup", "100"]);
    let out = call(PLUGIN, "CHECK", &pod.path(), &conf);
    assert_eq!(out.error_code(), 999);
    assert!(
        out.stdout.contains("no rule from 10.20.1.2/32"),
        "{}",
        out.stdout
    );

    let with_table = sbr_conf(
        "1.0.0",
        conf.get("prevResult").cloned(),
        json!({"table": 5000}),
    );
    let out = call(PLUGIN, "CHECK", &pod.path(), &with_table);
    assert_eq!(out.error_code(), 999);
    assert!(out.stdout.contains("lookup 5000"), "{}", out.stdout);

    // Nothing to compare with is the configuration's fault (7); the
    // interface gone since ADD is a finding like the others (999), where
    // ADD calls an ifname the pod lacks a bad CNI_IFNAME (4).
    let bare = sbr_conf("1.0.0", None, json!({}));
    let out = call(PLUGIN, "CHECK", &pod.path(), &bare);
    assert_eq!(out.error_code(), 7, "{}", out.stdout);
    pod.pod.ip(&["link", "del", "net1"]);
    let out = call(PLUGIN, "CHECK", &pod.path(), &conf);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert!(
        out.stdout.contains("Cannot find network interface net1"),
        "{}",
        out.stdout
    );
}

/// Two interfaces of one pod, one sbr each: each gets its own table.
#[test]
fn one_call_per_interface() {
    let pod = Pod::new(Layout::default());
    let conf_b = default_conf(&pod);
    let mut prev_a = prev_result(
        "1.0.0",
        &pod.path(),
        &[(&format!("{POD_A}/24"), Some(RAIL_A))],
    );
    prev_a["interfaces"][0]["name"] = json!("eth0");
    let conf_a = sbr_conf("1.0.0", Some(prev_a), json!({}));
    call(PLUGIN, "ADD", &pod.path(), &conf_b).assert_ok();
    call_ifname(PLUGIN, "ADD", &pod.path(), "eth0", &conf_a).assert_ok();
    let rules = pod.source_rules();
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(rules[0]["src"], POD_A);
    assert_eq!(rules[0]["table"], "101");
    assert_eq!(rules[1]["src"], POD_B);
    assert_eq!(rules[1]["table"], "100");
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_A)), Some('A'));
    assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));

    // DEL of one leaves the other.
    call_ifname(PLUGIN, "DEL", &pod.path(), "eth0", &conf_a).assert_ok();
    let rules = pod.source_rules();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["src"], POD_B);
    assert!(pod.table("-4", "100").contains("default via"));
    assert_eq!(pod.table("-4", "101"), "");
}

/// Two ADDs for two interfaces of one pod at the same moment (a runtime
/// attaching both rails in parallel) never take the same table: the
/// namespace lock makes the table choice and its use one step.
#[test]
fn concurrent_calls_take_distinct_tables() {
    for _ in 0..5 {
        let pod = Pod::new(Layout::default());
        let conf_b = default_conf(&pod);
        let mut prev_a = prev_result(
            "1.0.0",
            &pod.path(),
            &[(&format!("{POD_A}/24"), Some(RAIL_A))],
        );
        prev_a["interfaces"][0]["name"] = json!("eth0");
        let conf_a = sbr_conf("1.0.0", Some(prev_a), json!({}));
        let path = pod.path();
        std::thread::scope(|scope| {
            let a = scope.spawn(|| call_ifname(PLUGIN, "ADD", &path, "eth0", &conf_a));
            let b = scope.spawn(|| call(PLUGIN, "ADD", &path, &conf_b));
            for outcome in [a.join(), b.join()] {
                outcome.expect("call thread").assert_ok();
            }
        });
        let mut tables: Vec<String> = pod
            .source_rules()
            .iter()
            .map(|r| r["table"].as_str().unwrap_or_default().to_string())
            .collect();
        tables.sort();
        assert_eq!(tables, ["100", "101"]);
        assert_eq!(rail_that_answers(&pod, FAR, Some(POD_A)), Some('A'));
        assert_eq!(rail_that_answers(&pod, FAR, Some(POD_B)), Some('B'));
    }
}
