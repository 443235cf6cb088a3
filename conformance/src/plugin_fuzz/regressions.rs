//! The inputs that once crashed or stalled a plugin (issue 32), made
//! again at the start of every run: each must now end in the error JSON
//! pinned here, not just in any error.
//!
//! - a 70,000-character link name (macvlan and vlan `master`, host-device
//!   `device`, tap `bridge`): netlink-packet-route panicked encoding it,
//!   and the plugins died of SIGABRT without an error JSON;
//! - cluster-ipam's `etcd.timeoutMs` of 2^63 against an endpoint that
//!   refuses: the call never returned, holding the node's store lock;
//! - `"routes": [null]` in host-local's ipam under macvlan: the
//!   reference's macvlan dies of a nil pointer; ours must answer code 7.

use std::time::Duration;

use serde_json::{json, Value};

use super::run::Outcome;

/// One replayed input and the answer it must get.
pub struct Regression {
    pub name: &'static str,
    pub plugin: &'static str,
    pub config: Value,
    /// The CNI error code the call must end with.
    pub code: u64,
    /// Text the error's `msg` must contain (the key at fault).
    pub msg_has: &'static str,
    /// The longest the answer may take (well below the 10 s hang limit,
    /// with room for a machine twice as slow with the other core busy).
    pub within: Duration,
}

/// The length of the names that crashed netlink-packet-route's encoder.
pub const LONG_NAME: usize = 70_000;

fn conf(plugin_keys: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "fuzznet-regression"});
    if let (Value::Object(c), Value::Object(keys)) = (&mut conf, plugin_keys) {
        c.extend(keys);
    }
    conf
}

fn static_ipam() -> Value {
    json!({"type": "static", "addresses": [{"address": "10.78.0.5/24"}]})
}

/// Every case of issue 32, in its order.
pub fn all() -> Vec<Regression> {
    let long = "m".repeat(LONG_NAME);
    let quick = Duration::from_secs(3);
    let name_case = |name, plugin, key: &'static str, extra: Value| {
        let mut keys = json!({"type": plugin});
        keys[key] = json!(long);
        if let (Value::Object(k), Value::Object(e)) = (&mut keys, extra) {
            k.extend(e);
        }
        Regression {
            name,
            plugin,
            config: conf(keys),
            code: 7,
            msg_has: key,
            within: quick,
        }
    };
    vec![
        name_case(
            "macvlan-master-70000",
            "macvlan",
            "master",
            json!({"ipam": static_ipam()}),
        ),
        name_case(
            "host-device-device-70000",
            "host-device",
            "device",
            json!({"ipam": static_ipam()}),
        ),
        name_case("tap-bridge-70000", "tap", "bridge", json!({})),
        name_case(
            "vlan-master-70000",
            "vlan",
            "master",
            json!({"vlanId": 100, "ipam": static_ipam()}),
        ),
        Regression {
            name: "cluster-ipam-timeout-2^63-refusing-endpoint",
            plugin: "cluster-ipam",
            // Port 1 of the sandbox's loopback: nothing listens there.
            config: conf(
                json!({"type": "cluster-ipam", "ipam": {"type": "cluster-ipam",
                "subnet": "10.79.0.0/16", "nodeName": "node-a",
                "etcd": {"endpoints": ["http://127.0.0.1:1"],
                "timeoutMs": 9_223_372_036_854_775_808u64}}}),
            ),
            code: 7,
            msg_has: "etcd.timeoutMs",
            within: quick,
        },
        Regression {
            name: "macvlan-host-local-routes-null",
            plugin: "macvlan",
            config: conf(json!({"type": "macvlan", "master": "eth0",
                "ipam": {"type": "host-local", "subnet": "10.77.9.0/24",
                    "dataDir": "/var/lib/cni/networks", "routes": [null]}})),
            code: 7,
            msg_has: "ipam.routes[0]",
            within: quick,
        },
    ]
}

/// Why `o` is not the answer `r` pins; `None` when it is.
pub fn verdict(r: &Regression, o: &Outcome) -> Option<String> {
    if o.elapsed > r.within {
        return Some(format!(
            "took {} ms, more than {} ms",
            o.elapsed.as_millis(),
            r.within.as_millis()
        ));
    }
    let Some(status) = o.status else {
        return Some("no answer: killed at the call limit".into());
    };
    if status.success() || status.code().is_none() {
        return Some(format!("{status}, not an error exit"));
    }
    let error: Value = match serde_json::from_slice(&o.stdout) {
        Ok(v) => v,
        Err(_) => return Some("no error JSON on stdout".into()),
    };
    let code = error.get("code").and_then(Value::as_u64);
    let msg = error.get("msg").and_then(Value::as_str).unwrap_or("");
    if code != Some(r.code) || !msg.contains(r.msg_has) {
        return Some(format!(
            "answered code {code:?} {msg:?}, not code {} naming {:?}",
            r.code, r.msg_has
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn outcome(status: i32, stdout: &str, ms: u64) -> Outcome {
        Outcome {
            status: Some(ExitStatus::from_raw(status)),
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
            elapsed: Duration::from_millis(ms),
        }
    }

    #[test]
    fn the_pinned_answer_passes_and_anything_else_fails() {
        let cases = all();
        let r = cases
            .iter()
            .find(|r| r.name == "macvlan-host-local-routes-null")
            .unwrap();
        let good = r#"{"code":7,"msg":"invalid ipam.routes[0]: null"}"#;
        assert_eq!(verdict(r, &outcome(1 << 8, good, 20)), None);
        assert_eq!(
            verdict(
                r,
                &outcome(1 << 8, r#"{"code":999,"msg":"ipam.routes[0]"}"#, 20)
            )
            .unwrap(),
            "answered code Some(999) \"ipam.routes[0]\", not code 7 naming \"ipam.routes[0]\""
        );
        assert_eq!(
            verdict(r, &outcome(1 << 8, r#"{"code":7,"msg":"bad"}"#, 20)).unwrap(),
            "answered code Some(7) \"bad\", not code 7 naming \"ipam.routes[0]\""
        );
        assert_eq!(
            verdict(r, &outcome(0, "{}", 20)).unwrap(),
            "exit status: 0, not an error exit"
        );
        assert_eq!(
            verdict(r, &outcome(6, "", 20)).unwrap(),
            "signal: 6 (SIGABRT), not an error exit"
        );
        assert_eq!(
            verdict(r, &outcome(1 << 8, good, 3001)).unwrap(),
            "took 3001 ms, more than 3000 ms"
        );
    }

    #[test]
    fn the_cases_carry_the_inputs_of_the_issue() {
        let cases = all();
        let names: Vec<&str> = cases.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), 6);
        let long = cases.iter().filter(|r| {
            r.config[r.msg_has]
                .as_str()
                .is_some_and(|s| s.len() == 70_000)
        });
        assert_eq!(long.count(), 4);
        let etcd = &cases[4].config["ipam"]["etcd"]["timeoutMs"];
        assert_eq!(etcd.as_u64(), Some(1 << 63));
        assert_eq!(cases[5].config["ipam"]["routes"], json!([null]));
    }
}
