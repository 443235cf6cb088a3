//! Mutations of a config (its values, its structure, its bytes) and of the
//! `CNI_*` variables a runtime sets.

use serde_json::{json, Map, Value};

use super::rng::Rng;

/// A FIFO the sandbox creates: opening it for reading blocks until a
/// writer comes, so a plugin that opens a path without care hangs on it.
pub const FIFO: &str = "/tmp/cnitest-fuzz-fifo";

/// A path inside the pod namespace's folder that is not a namespace.
const NOT_NETNS: &[&str] = &[
    "/dev/zero",
    FIFO,
    "/tmp",
    "/proc/self/ns/pid",
    "/nonexistent/ns",
    "relative/ns",
    "",
];

fn long(n: usize) -> String {
    "a".repeat(n)
}

/// Values at and past the limits of every kind of key.
fn hostile_value(rng: &mut Rng) -> Value {
    match rng.below(24) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(0),
        // 2^63 and past: does not fit an i64, and 2^64 not a u64.
        4 => serde_json::from_str("9223372036854775808").unwrap_or(Value::Null),
        5 => serde_json::from_str("18446744073709551616").unwrap_or(Value::Null),
        6 => json!(i64::MIN),
        7 => json!(u64::MAX),
        8 => json!(1e308),
        9 => json!(4294967296u64),
        10 => json!(65536),
        11 => json!(long(70_000)),
        12 => json!(long(16)),
        13 => json!(long(15)),
        14 => json!("eth0\n\u{1}\u{7f}"),
        15 => json!("a\u{0}b"),
        16 => json!("../../../etc/passwd"),
        17 => json!(*rng
            .pick(&["/dev/zero", FIFO, "/proc/self/mem", "/", "."])
            .unwrap_or(&"/")),
        18 => json!(""),
        19 => json!([]),
        20 => json!({}),
        21 => json!("1500"),
        22 => json!([Value::Null]),
        _ => json!(-9.5),
    }
}

/// Every path (keys and indexes) of `v`, parents before children.
fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(Step::Key(k.clone()));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn at<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, step| match step {
        Step::Key(k) => cur.get_mut(k.as_str()),
        Step::Index(i) => cur.get_mut(*i),
    })
}

fn random_path(v: &Value, rng: &mut Rng) -> Vec<Step> {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    rng.pick(&all).cloned().unwrap_or_default()
}

/// Replaces one value (anywhere but the root) with a hostile one.
fn mutate_value(conf: &mut Value, rng: &mut Rng) -> String {
    let path = random_path(conf, rng);
    if path.is_empty() {
        return "none".into();
    }
    let name = describe(&path);
    let new = hostile_value(rng);
    let shown = short(&new);
    if let Some(slot) = at(conf, &path) {
        *slot = new;
    }
    format!("value {name}={shown}")
}

/// Drops one key of some object of the config.
fn drop_key(conf: &mut Value, rng: &mut Rng) -> String {
    let path = random_path(conf, rng);
    let name = describe(&path);
    match (path.split_last(), at(conf, &path)) {
        (Some((Step::Key(k), parent)), _) => {
            if let Some(Value::Object(m)) = at(conf, parent) {
                m.remove(k);
            }
            format!("drop {name}")
        }
        _ => "none".into(),
    }
}

/// Adds a documented key of any plugin, with a hostile value, at the top.
fn add_key(conf: &mut Value, rng: &mut Rng) -> String {
    const KEYS: &[&str] = &[
        "master",
        "device",
        "bridge",
        "vrfname",
        "pf",
        "mtu",
        "vlan",
        "vlanId",
        "table",
        "ipam",
        "prevResult",
        "runtimeConfig",
        "args",
        "dataDir",
        "sysctl",
        "mac",
        "ingressRate",
        "egressBurst",
        "markMasqBit",
        "etcd",
        "blockSize",
        "lockTimeoutMs",
        "ranges",
        "routes",
        "dns",
        "capabilities",
        "txQLen",
        "kernelpath",
        "sysfsRoot",
    ];
    let key = rng.pick(KEYS).copied().unwrap_or("mtu");
    let value = hostile_value(rng);
    let shown = short(&value);
    if let Value::Object(m) = conf {
        m.insert(key.to_string(), value);
    }
    format!("add {key}={shown}")
}

fn describe(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => format!(".{}", short_str(k)),
            Step::Index(i) => format!("[{i}]"),
        })
        .collect()
}

fn short_str(s: &str) -> String {
    s.chars()
        .take(40)
        .collect::<String>()
        .escape_debug()
        .to_string()
}

fn short(v: &Value) -> String {
    short_str(&v.to_string())
}

/// One mutation of the JSON tree.
pub fn mutate_tree(conf: &mut Value, rng: &mut Rng) -> String {
    match rng.below(5) {
        0 | 1 => mutate_value(conf, rng),
        2 => drop_key(conf, rng),
        3 => add_key(conf, rng),
        _ => {
            // Past serde_json's limit of 128, yet shallow enough for the
            // harness's own recursive walks; thousands of levels come from
            // the raw-byte nesting of mutate_bytes.
            let depth = 100 + rng.below(160);
            let path = random_path(conf, rng);
            if let Some(slot) = at(conf, &path) {
                *slot = nested(depth);
            }
            format!("nest {} depth={depth}", describe(&path))
        }
    }
}

/// An array nested `depth` levels, built without recursion.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| Value::Array(vec![inner]))
}

/// Byte-level damage to the serialized config: the parser sees what the
/// tree cannot hold (duplicate keys, truncation, invalid UTF-8, nesting
/// past the serializer's own limits).
pub fn mutate_bytes(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    let at = rng.below(bytes.len().max(1));
    match rng.below(6) {
        0 => {
            bytes.truncate(at);
            format!("truncate at {at}")
        }
        1 => {
            if let Some(b) = bytes.get_mut(at) {
                *b = rng.below(256) as u8;
            }
            format!("byte {at}")
        }
        2 => {
            bytes.splice(at..at, [0xff, 0xfe, 0xc3]);
            format!("invalid utf-8 at {at}")
        }
        3 => duplicate_key(bytes, rng),
        4 => {
            let depth = 1000 + rng.below(5000);
            let mut raw = br#"{"deep":"#.to_vec();
            raw.extend(std::iter::repeat_n(b'[', depth));
            raw.extend(std::iter::repeat_n(b']', depth));
            raw.push(b',');
            raw.extend_from_slice(bytes.get(1..).unwrap_or_default());
            *bytes = raw;
            format!("raw nesting depth={depth}")
        }
        _ => {
            bytes.clear();
            "empty stdin".into()
        }
    }
}

/// Puts a second `type`, `name`, `cniVersion` or `ipam` key first in the
/// top object: which one wins is the parser's choice.
fn duplicate_key(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    let key = rng
        .pick(&[
            r#""type":"bridge","#,
            r#""name":"","#,
            r#""cniVersion":"9.9.9","#,
            r#""ipam":{},"#,
            r#""type":null,"#,
        ])
        .copied()
        .unwrap_or(r#""name":"","#);
    if bytes.first() == Some(&b'{') {
        bytes.splice(1..1, key.bytes());
    }
    format!("duplicate {key}")
}

/// The `CNI_*` variables of one call, in a fixed order; `None` leaves the
/// variable unset.
pub struct CniEnv {
    pub vars: Vec<(&'static str, Option<String>)>,
}

impl CniEnv {
    pub fn new(verb: &str, netns: &str, ifname: &str, cni_path: &str, container: &str) -> Self {
        CniEnv {
            vars: vec![
                ("CNI_COMMAND", Some(verb.to_string())),
                ("CNI_CONTAINERID", Some(container.to_string())),
                ("CNI_NETNS", Some(netns.to_string())),
                ("CNI_IFNAME", Some(ifname.to_string())),
                ("CNI_PATH", Some(cni_path.to_string())),
                (
                    "CNI_ARGS",
                    Some("IgnoreUnknown=1;K8S_POD_NAME=fz".to_string()),
                ),
            ],
        }
    }

    /// Damages one variable (never CNI_COMMAND: the verb is chosen apart).
    pub fn mutate(&mut self, rng: &mut Rng) -> String {
        let idx = 1 + rng.below(self.vars.len() - 1);
        let Some((name, slot)) = self.vars.get_mut(idx) else {
            return "none".into();
        };
        let new = match rng.below(7) {
            0 => None,
            1 => Some(String::new()),
            2 => Some(long(70_000)),
            3 => Some("a\u{1}b\nc\u{7f}/:".to_string()),
            4 => Some(long(16)),
            5 if *name == "CNI_NETNS" => rng.pick(NOT_NETNS).map(|s| s.to_string()),
            5 if *name == "CNI_ARGS" => Some("=;;a=b=c;IP=300.1.1.1;MAC=zz;K8S_POD_NAME".into()),
            _ => Some("../..".to_string()),
        };
        let shown = new
            .as_deref()
            .map(short_str)
            .unwrap_or_else(|| "<unset>".into());
        *slot = new;
        format!("env {name}={shown}")
    }
}

/// Sets `prevResult` to `prev`, or to a damaged copy of it.
pub fn with_prev(conf: &mut Value, prev: &Value, rng: &mut Rng, damage: bool) -> String {
    let mut prev = prev.clone();
    let note = if damage {
        mutate_tree(&mut prev, rng)
    } else {
        "intact".into()
    };
    if let Value::Object(m) = conf {
        m.insert("prevResult".into(), prev);
    }
    format!("prevResult {note}")
}

/// A config object, even when the seed was not one.
pub fn as_object(conf: Value) -> Value {
    match conf {
        Value::Object(_) => conf,
        _ => Value::Object(Map::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin_fuzz::seeds;

    fn mutated(seed: u64) -> Vec<u8> {
        let mut rng = Rng::for_iteration(seed, 0);
        let mut out = Vec::new();
        for s in seeds::documented() {
            let mut conf = s.config.clone();
            for _ in 0..3 {
                mutate_tree(&mut conf, &mut rng);
            }
            let mut bytes = serde_json::to_vec(&conf).unwrap();
            mutate_bytes(&mut bytes, &mut rng);
            out.extend(bytes);
        }
        out
    }

    #[test]
    fn mutations_replay_from_the_seed() {
        assert_eq!(mutated(42), mutated(42));
        assert_ne!(mutated(42), mutated(43));
    }

    #[test]
    fn deep_nesting_is_built_without_recursion() {
        let mut v = nested(5000);
        let mut depth = 0;
        while let Value::Array(mut a) = v {
            v = a.pop().unwrap_or(Value::Null);
            depth += 1;
        }
        assert_eq!(depth, 5000);
    }
}
