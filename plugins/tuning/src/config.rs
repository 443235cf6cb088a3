//! The plugin's configuration: its own keys, the three places a MAC can
//! come from, and `args.cni`, merged the way the reference merges them, then
//! checked whole before anything is changed.
//!
//! Precedence (lowest first): the config keys, `CNI_ARGS` `MAC`, the `mac`
//! capability (`runtimeConfig.mac`), `args.cni.*`. `args.cni.sysctl` entries
//! are merged into `sysctl` (the reference panics when the config has no
//! `sysctl` object; here the merge simply starts from an empty one).
//!
//! Unlike the reference, which finds a bad MAC, MTU or sysctl key only when
//! it applies it (after earlier sysctls are already written), every value is
//! validated here, so a refused configuration changes nothing.

use std::fmt;
use std::path::PathBuf;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use libcni::args::ArgsError;
use libcni::confine::{ConfineError, Place, Places};
use libcni::go_compat::{self, GoStruct};
use libcni::hwaddr;
use libcni::skel::CmdArgs;

use crate::error::TuningError;

/// Where saved link settings go when `dataDir` is not given.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

/// The `CNI_ARGS` key of a MAC override.
const MAC_ARG: &str = "MAC";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("duplicated sysctl keys are not allowed: {0:?}")]
    DuplicateSysctl(String),
    #[error("invalid net sysctl key: {key:?}: {reason}")]
    InvalidSysctlKey { key: String, reason: &'static str },
    #[error("invalid MAC address {0:?}: expected six, eight or twenty hex octets such as 02:00:00:00:00:01")]
    InvalidMac(String),
    #[error("invalid mtu {0}: must be between 0 (leave unchanged) and {max}", max = u32::MAX)]
    InvalidMtu(i64),
    #[error("invalid txQLen {0}: must be between 0 and {max}", max = u32::MAX)]
    InvalidTxQueueLen(i64),
    /// `dataDir` outside the state folders: DEL restores from and GC
    /// deletes in it, so a namespace user must not choose it freely.
    #[error(transparent)]
    Confine(#[from] ConfineError),
}

/// One sysctl to write: the key as configured and the file it names,
/// relative to `/proc/sys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlSetting {
    pub key: String,
    pub path: String,
    pub value: String,
}

/// A hardware address as configured and as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mac {
    pub bytes: Vec<u8>,
}

impl Mac {
    /// The kernel's (and Go's) spelling: lower-case hex with colons.
    pub fn text(&self) -> String {
        libcni::netlink::format_mac(&self.bytes)
    }
}

/// The validated configuration of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningConf {
    pub data_dir: PathBuf,
    /// In configuration order (the reference's order is a Go map's, random).
    pub sysctls: Vec<SysctlSetting>,
    pub mac: Option<Mac>,
    /// Only `true` does something: `false` leaves the flag alone in ADD (and
    /// requires it off in CHECK), as in the reference.
    pub promisc: bool,
    /// `None` for 0, "leave unchanged".
    pub mtu: Option<u32>,
    pub allmulti: Option<bool>,
    pub tx_queue_len: Option<u32>,
}

/// The configuration keys as written (`null` reads as absent, as in Go).
/// Keys are matched as Go's decoder matches them ([`go_compat`]): the
/// reference's tests send `RuntimeConfig`, and of a key given twice the
/// last wins. Decoded from the text, not from a `Value`, which would lose
/// the order of the sysctl keys and the second of two equal ones.
#[derive(Debug, Default)]
pub struct RawConf {
    /// The settings; `args.cni` may name each of them again.
    link: LinkKeys,
    pub data_dir: Option<String>,
    runtime_config: Option<RuntimeConfig>,
    args: Option<ArgsSection>,
}

impl GoStruct for RawConf {
    /// [`LinkKeys::FIELDS`] first, then the keys of the top level only.
    const FIELDS: &'static [&'static str] = &[
        "sysctl",
        "mac",
        "promisc",
        "mtu",
        "allmulti",
        "txQLen",
        "dataDir",
        "runtimeConfig",
        "args",
    ];

    fn decode_field<'de, A: MapAccess<'de>>(
        &mut self,
        index: usize,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match index.checked_sub(LinkKeys::FIELDS.len()) {
            None => self.link.decode_field(index, map)?,
            Some(0) => self.data_dir = map.next_value()?,
            Some(1) => self.runtime_config = map.next_value()?,
            Some(_) => self.args = map.next_value()?,
        }
        Ok(())
    }
}

/// The settings a configuration names at its top level and again in
/// `args.cni`, where each key that is present replaces the configured
/// value.
#[derive(Debug, Default)]
struct LinkKeys {
    sysctl: Option<SysctlEntries>,
    mac: Option<String>,
    promisc: Option<bool>,
    mtu: Option<i64>,
    allmulti: Option<bool>,
    tx_queue_len: Option<i64>,
}

impl GoStruct for LinkKeys {
    const FIELDS: &'static [&'static str] =
        &["sysctl", "mac", "promisc", "mtu", "allmulti", "txQLen"];

    fn decode_field<'de, A: MapAccess<'de>>(
        &mut self,
        index: usize,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match index {
            0 => self.sysctl = map.next_value()?,
            1 => self.mac = map.next_value()?,
            2 => self.promisc = map.next_value()?,
            3 => self.mtu = map.next_value()?,
            4 => self.allmulti = map.next_value()?,
            _ => self.tx_queue_len = map.next_value()?,
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct RuntimeConfig {
    mac: Option<String>,
}

impl GoStruct for RuntimeConfig {
    const FIELDS: &'static [&'static str] = &["mac"];

    fn decode_field<'de, A: MapAccess<'de>>(
        &mut self,
        _: usize,
        map: &mut A,
    ) -> Result<(), A::Error> {
        self.mac = map.next_value()?;
        Ok(())
    }
}

/// `args`, of which only `args.cni` is read.
#[derive(Debug, Default)]
struct ArgsSection {
    cni: Option<LinkKeys>,
}

impl GoStruct for ArgsSection {
    const FIELDS: &'static [&'static str] = &["cni"];

    fn decode_field<'de, A: MapAccess<'de>>(
        &mut self,
        _: usize,
        map: &mut A,
    ) -> Result<(), A::Error> {
        self.cni = map.next_value()?;
        Ok(())
    }
}

/// Serde entry points of the structs above, all through
/// [`go_compat::deserialize_struct`].
macro_rules! deserialize_as_go_struct {
    ($($name:ident),*) => {$(
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                go_compat::deserialize_struct(deserializer)
            }
        }
    )*};
}
deserialize_as_go_struct!(RawConf, LinkKeys, RuntimeConfig, ArgsSection);

/// A `sysctl` object in the order written. A key given twice is kept
/// aside (a map would silently keep the last value) so that the
/// configuration can be refused with the key named.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct SysctlEntries {
    entries: Vec<(String, String)>,
    duplicates: Vec<String>,
}

impl<'de> Deserialize<'de> for SysctlEntries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = SysctlEntries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of sysctl keys to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SysctlEntries, A::Error> {
                let mut sysctls = SysctlEntries::default();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    if sysctls.entries.iter().any(|(k, _)| *k == key) {
                        sysctls.duplicates.push(key);
                    } else {
                        sysctls.entries.push((key, value));
                    }
                }
                Ok(sysctls)
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

impl SysctlEntries {
    /// Entries of `other` replace equal keys in place, new ones go last.
    fn merge(&mut self, other: SysctlEntries) {
        self.duplicates.extend(other.duplicates);
        for (key, value) in other.entries {
            match self.entries.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => self.entries.push((key, value)),
            }
        }
    }
}

/// Decodes the plugin's keys from the configuration bytes. The bytes, not
/// the already-decoded JSON value, because a value keeps only the last of
/// two equal keys and the reference refuses duplicated sysctl keys.
pub fn decode(stdin: &[u8]) -> Result<RawConf, ConfigError> {
    libcni::plugin_conf::decode_slice_with_path(stdin).map_err(ConfigError::Decode)
}

/// The data directory of a decoded configuration: the default, or a
/// folder inside the state folders ([`Place::State`]: /var/lib/cni,
/// /run/cni, or what the node's policy allows). With Multus the key is a
/// namespace user's, and DEL restores link settings from, and GC deletes
/// files in, this folder.
pub fn data_dir(raw: &RawConf) -> Result<PathBuf, ConfigError> {
    match raw.data_dir.as_deref() {
        None | Some("") => Ok(PathBuf::from(DEFAULT_DATA_DIR)),
        Some(dir) => {
            let dir = PathBuf::from(dir);
            Places::node()?.confine("dataDir", Place::State, &dir)?;
            Ok(dir)
        }
    }
}

/// Decodes, merges and validates the configuration of an ADD or CHECK.
pub fn parse(args: &CmdArgs) -> Result<TuningConf, TuningError> {
    let raw = decode(&args.stdin_data)?;
    let env_mac = env_mac(args)?;
    Ok(resolve(raw, env_mac.as_deref(), &args.ifname)?)
}

/// The `MAC` of `CNI_ARGS`, if any (other keys need `IgnoreUnknown`).
fn env_mac(args: &CmdArgs) -> Result<Option<String>, ArgsError> {
    let parsed = args.parse_args(&[MAC_ARG])?;
    Ok(parsed.get(MAC_ARG).map(str::to_string))
}

/// Applies the precedence rules and validates every value.
fn resolve(raw: RawConf, env_mac: Option<&str>, ifname: &str) -> Result<TuningConf, ConfigError> {
    let data_dir = data_dir(&raw)?;
    let mut sysctl = raw.link.sysctl.unwrap_or_default();
    let mut mac = raw.link.mac.unwrap_or_default();
    let mut promisc = raw.link.promisc.unwrap_or(false);
    let mut mtu = raw.link.mtu.unwrap_or(0);
    let mut allmulti = raw.link.allmulti;
    let mut tx_queue_len = raw.link.tx_queue_len;

    // An empty override is no override, except in args.cni where the
    // reference takes whatever is present.
    if let Some(m) = env_mac.filter(|m| !m.is_empty()) {
        mac = m.to_string();
    }
    if let Some(m) = raw
        .runtime_config
        .and_then(|rc| rc.mac)
        .filter(|m| !m.is_empty())
    {
        mac = m;
    }
    if let Some(cni) = raw.args.and_then(|a| a.cni) {
        if let Some(extra) = cni.sysctl {
            sysctl.merge(extra);
        }
        if let Some(m) = cni.mac {
            mac = m;
        }
        if let Some(p) = cni.promisc {
            promisc = p;
        }
        if let Some(m) = cni.mtu {
            mtu = m;
        }
        if cni.allmulti.is_some() {
            allmulti = cni.allmulti;
        }
        if cni.tx_queue_len.is_some() {
            tx_queue_len = cni.tx_queue_len;
        }
    }

    if let Some(key) = sysctl.duplicates.into_iter().next() {
        return Err(ConfigError::DuplicateSysctl(key));
    }
    let sysctls = sysctl
        .entries
        .into_iter()
        .map(|(key, value)| {
            let path = sysctl_path(&key, ifname)?;
            Ok(SysctlSetting { key, path, value })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let mac = match mac.as_str() {
        "" => None,
        text => Some(Mac {
            bytes: hwaddr::parse(text).ok_or_else(|| ConfigError::InvalidMac(text.to_string()))?,
        }),
    };
    let mtu = match u32::try_from(mtu) {
        Ok(0) => None,
        Ok(mtu) => Some(mtu),
        Err(_) => return Err(ConfigError::InvalidMtu(mtu)),
    };
    let tx_queue_len = tx_queue_len
        .map(|len| u32::try_from(len).map_err(|_| ConfigError::InvalidTxQueueLen(len)))
        .transpose()?;
    Ok(TuningConf {
        data_dir,
        sysctls,
        mac,
        promisc,
        mtu,
        allmulti,
        tx_queue_len,
    })
}

/// The file a sysctl key names, relative to `/proc/sys`.
///
/// As in the reference: every `.` becomes `/` (so `net.ipv4.ip_forward`
/// and `net/ipv4/ip_forward` are the same key), then the first `IFNAME`
/// becomes `CNI_IFNAME` (the only way to name an interface with a dot in
/// its name), and the result must lie under `net/`, the part of `/proc/sys`
/// that belongs to the container's network namespace. Keys for other
/// interfaces of the namespace and for `all`/`default` are allowed, as in
/// the reference.
///
/// Stricter than the reference: it cleans the joined path, so a key with
/// `..` (which the dot rule turns into `//`) or a stray separator still
/// resolves, to a file under `net/` or to one that does not exist. Here
/// such keys are refused outright; only one leading separator is accepted
/// (`/net/ipv4/ip_forward` works in the reference and is a natural way to
/// write a path).
pub fn sysctl_path(key: &str, ifname: &str) -> Result<String, ConfigError> {
    let invalid = |reason| ConfigError::InvalidSysctlKey {
        key: key.to_string(),
        reason,
    };
    if key.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    let slashed = key.replace('.', "/").replacen("IFNAME", ifname, 1);
    let relative = slashed.strip_prefix('/').unwrap_or(&slashed);
    let components: Vec<&str> = relative.split('/').collect();
    if components
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return Err(invalid(
            "it has an empty path component (\"..\", \"//\" or a separator at the end); \
             write keys as net.ipv4.conf.IFNAME.rp_filter or net/ipv4/conf/IFNAME/rp_filter",
        ));
    }
    if components.len() < 2 || components[0] != "net" {
        return Err(invalid(
            "only net.* sysctls, which belong to the container's network namespace, may be set",
        ));
    }
    Ok(relative.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve_json(conf: serde_json::Value, env_mac: Option<&str>) -> TuningConf {
        let raw = decode(&serde_json::to_vec(&conf).unwrap()).unwrap();
        resolve(raw, env_mac, "eth0").unwrap()
    }

    fn resolve_err(conf: &str) -> ConfigError {
        match decode(conf.as_bytes()) {
            Err(e) => e,
            Ok(raw) => resolve(raw, None, "eth0").unwrap_err(),
        }
    }

    #[test]
    fn defaults_change_nothing() {
        let conf = resolve_json(json!({"name": "n", "type": "tuning"}), None);
        assert_eq!(conf.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert!(conf.sysctls.is_empty());
        assert!(crate::link::requested(&conf).is_empty());
        let conf = resolve_json(json!({"dataDir": "", "mtu": 0, "mac": null}), None);
        assert_eq!(conf.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert!(crate::link::requested(&conf).is_empty());
        // txQLen 0 is a value (a queue of length 0), not "unset".
        let conf = resolve_json(json!({"txQLen": 0}), None);
        assert_eq!(conf.tx_queue_len, Some(0));
    }

    #[test]
    fn mac_precedence_is_conf_then_cni_args_then_runtime_config_then_args_cni() {
        let base = json!({"mac": "02:00:00:00:00:01"});
        let pick = |conf: serde_json::Value, env: Option<&str>| {
            resolve_json(conf, env).mac.map(|m| m.text())
        };
        assert_eq!(pick(base.clone(), None).unwrap(), "02:00:00:00:00:01");
        assert_eq!(
            pick(base.clone(), Some("02:00:00:00:00:02")).unwrap(),
            "02:00:00:00:00:02"
        );
        // An empty CNI_ARGS value is no override.
        assert_eq!(pick(base.clone(), Some("")).unwrap(), "02:00:00:00:00:01");
        let mut with_rc = base.clone();
        with_rc["runtimeConfig"] = json!({"mac": "02:00:00:00:00:03"});
        assert_eq!(
            pick(with_rc.clone(), Some("02:00:00:00:00:02")).unwrap(),
            "02:00:00:00:00:03"
        );
        let mut with_args = with_rc.clone();
        with_args["args"] = json!({"cni": {"mac": "02:00:00:00:00:04"}});
        assert_eq!(
            pick(with_args, Some("02:00:00:00:00:02")).unwrap(),
            "02:00:00:00:00:04"
        );
        // An empty args.cni.mac clears it, as in the reference.
        let mut cleared = with_rc;
        cleared["args"] = json!({"cni": {"mac": ""}});
        assert_eq!(pick(cleared, None), None);
    }

    #[test]
    fn keys_match_as_in_go_so_the_reference_tests_runtime_config_is_read() {
        // The reference's tests send `RuntimeConfig`.
        let conf = resolve_json(
            json!({"mac": "02:00:00:00:00:01", "RuntimeConfig": {"MAC": "c2:11:22:33:44:77"}}),
            None,
        );
        assert_eq!(conf.mac.unwrap().text(), "c2:11:22:33:44:77");
        let conf = resolve_json(
            json!({"MTU": 1400, "TxQLen": 5, "Args": {"CNI": {"Promisc": true}}, "DATADIR": "/run/cni/d"}),
            None,
        );
        assert_eq!(
            (conf.mtu, conf.tx_queue_len, conf.promisc),
            (Some(1400), Some(5), true)
        );
        assert_eq!(conf.data_dir, PathBuf::from("/run/cni/d"));
        // Outside the state folders: code 7, naming the key.
        let raw = decode(br#"{"dataDir": "/etc"}"#).unwrap();
        let e = data_dir(&raw).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "dataDir \"/etc\" is outside the folders allowed for state (/var/lib/cni, /run/cni)"
            ),
            "{e}"
        );
        // Of a key given twice, in any spelling, the last wins (Go's rule).
        let text =
            r#"{"mtu": 1400, "MTU": 1500, "sysctl": {"net.a.b": "1"}, "Sysctl": {"net.c.d": "2"}}"#;
        let conf = resolve(decode(text.as_bytes()).unwrap(), None, "eth0").unwrap();
        assert_eq!(conf.mtu, Some(1500));
        let keys: Vec<_> = conf.sysctls.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["net.c.d"]);
    }

    #[test]
    fn args_cni_overrides_each_field_and_merges_sysctls() {
        // Raw text: the order written is the order applied.
        let text = r#"{
            "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1", "net.core.somaxconn": "100"},
            "promisc": false, "mtu": 1400, "allmulti": false, "txQLen": 10,
            "args": {"cni": {
                "sysctl": {"net.core.somaxconn": "200", "net.ipv4.ip_forward": "1"},
                "promisc": true, "mtu": 1300, "allmulti": true, "txQLen": 20
            }}
        }"#;
        let conf = resolve(decode(text.as_bytes()).unwrap(), None, "eth0").unwrap();
        let sysctls: Vec<_> = conf
            .sysctls
            .iter()
            .map(|s| (s.path.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            sysctls,
            [
                ("net/ipv4/conf/eth0/arp_notify", "1"),
                ("net/core/somaxconn", "200"),
                ("net/ipv4/ip_forward", "1"),
            ]
        );
        assert!(conf.promisc);
        assert_eq!(conf.mtu, Some(1300));
        assert_eq!(conf.allmulti, Some(true));
        assert_eq!(conf.tx_queue_len, Some(20));
        // args.cni.sysctl without a sysctl object (the reference panics).
        let conf = resolve_json(
            json!({"args": {"cni": {"sysctl": {"net.core.x": "1"}}}}),
            None,
        );
        assert_eq!(conf.sysctls.len(), 1);
    }

    #[test]
    fn duplicated_sysctl_keys_are_refused() {
        let e =
            resolve_err(r#"{"sysctl": {"net.core.somaxconn": "1", "net.core.somaxconn": "2"}}"#);
        assert!(
            matches!(&e, ConfigError::DuplicateSysctl(k) if k == "net.core.somaxconn"),
            "{e:?}"
        );
        assert!(e.to_string().contains("duplicated"), "{e}");
        let e = resolve_err(r#"{"args": {"cni": {"sysctl": {"net.a.b": "1", "net.a.b": "1"}}}}"#);
        assert!(matches!(e, ConfigError::DuplicateSysctl(_)), "{e:?}");
    }

    #[test]
    fn mtu_and_txqlen_pass_at_u32_max_and_fail_past_it() {
        use libcni::error::ToCniError;
        let conf = resolve_json(
            json!({"mtu": 4_294_967_295u64, "txQLen": 4_294_967_295u64}),
            None,
        );
        assert_eq!(
            (conf.mtu, conf.tx_queue_len),
            (Some(u32::MAX), Some(u32::MAX))
        );
        let e = resolve_err(r#"{"mtu": 4294967296}"#);
        assert_eq!(
            e.to_string(),
            "invalid mtu 4294967296: must be between 0 (leave unchanged) and 4294967295"
        );
        assert_eq!(
            crate::error::TuningError::Config(e).to_cni_error().code,
            libcni::error::ErrorCode::InvalidNetworkConfig
        );
        let e = resolve_err(r#"{"txQLen": 4294967296}"#);
        assert_eq!(
            e.to_string(),
            "invalid txQLen 4294967296: must be between 0 and 4294967295"
        );
        assert_eq!(
            crate::error::TuningError::Config(e).to_cni_error().code,
            libcni::error::ErrorCode::InvalidNetworkConfig
        );
    }

    #[test]
    fn wrong_types_and_values_are_refused() {
        for (conf, want) in [
            (r#"{"sysctl": {"net.core.somaxconn": 5}}"#, "Decode"),
            (r#"{"sysctl": ["net.core.somaxconn"]}"#, "Decode"),
            (r#"{"mtu": "1500"}"#, "Decode"),
            (r#"{"promisc": "yes"}"#, "Decode"),
            (r#"{"mtu": -1}"#, "InvalidMtu"),
            (r#"{"mtu": 4294967296}"#, "InvalidMtu"),
            (r#"{"txQLen": -5}"#, "InvalidTxQueueLen"),
            (r#"{"args": {"cni": {"txQLen": -5}}}"#, "InvalidTxQueueLen"),
            (r#"{"mac": "02:00:00:00:00"}"#, "InvalidMac"),
            (
                r#"{"runtimeConfig": {"mac": "zz:00:00:00:00:01"}}"#,
                "InvalidMac",
            ),
            (
                r#"{"sysctl": {"kernel.hostname": "x"}}"#,
                "InvalidSysctlKey",
            ),
        ] {
            let e = resolve_err(conf);
            assert!(format!("{e:?}").starts_with(want), "{conf}: {e:?}");
        }
    }

    #[test]
    fn sysctl_keys_map_to_files_under_net() {
        for (key, path) in [
            ("net.ipv4.ip_forward", "net/ipv4/ip_forward"),
            ("net/ipv4/ip_forward", "net/ipv4/ip_forward"),
            ("/net/ipv4/ip_forward", "net/ipv4/ip_forward"),
            (
                "net.ipv4.conf.IFNAME.rp_filter",
                "net/ipv4/conf/eth0/rp_filter",
            ),
            (
                "net/ipv4/conf/other0/rp_filter",
                "net/ipv4/conf/other0/rp_filter",
            ),
            (
                "net.ipv4.conf.all.log_martians",
                "net/ipv4/conf/all/log_martians",
            ),
        ] {
            assert_eq!(sysctl_path(key, "eth0").unwrap(), path, "{key}");
        }
        // Only the first IFNAME is replaced; a dotted ifname stays one component.
        assert_eq!(
            sysctl_path("net.ipv4.conf.IFNAME.IFNAME", "eth0.100").unwrap(),
            "net/ipv4/conf/eth0.100/IFNAME"
        );
    }

    #[test]
    fn sysctl_keys_that_leave_net_or_need_cleaning_are_refused() {
        for key in [
            "net.ipv4.conf.eth0/../../../kernel.x",
            "net/../kernel/hostname",
            "net/../../etc/passwd",
            "kernel.hostname",
            "kernel/hostname",
            "vm.swappiness",
            "net",
            "net.",
            "net..ipv4.ip_forward",
            "net//ipv4/ip_forward",
            "net.ipv4.ip_forward.",
            "//net/ipv4/ip_forward",
            "netfoo.x",
            "",
            "net.ipv4\0.x",
            "IFNAME.x",
        ] {
            let e = sysctl_path(key, "eth0").unwrap_err();
            assert!(
                e.to_string().starts_with("invalid net sysctl key"),
                "{key:?}: {e}"
            );
        }
    }
}
