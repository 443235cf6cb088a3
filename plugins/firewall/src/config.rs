//! The plugin's own keys, read the way the reference's Go decoder reads
//! them (keys matched exactly or else case-insensitively, `null` as
//! absent), and the attachment tag that marks the rules of one attachment.
//!
//! Where this plugin decides differently from the reference:
//! - `backend` accepts `nftables` too, and any other non-empty value is an
//!   error (code 7). The reference takes an unknown value for "choose for
//!   me", so a typo (`"iptable"`) silently lands the rules in firewalld on
//!   one host and in iptables on the next; a config written for this
//!   plugin with `nftables` would do the same under the reference.
//! - `ingressPolicy` is checked before anything changes (the reference
//!   finds an unknown value only after the backend wrote its rules).
//! - `iptablesAdminChainName` must be a name iptables accepts (1 to 28
//!   bytes, no blanks, not a built-in target); the reference passes it on
//!   and fails half way through.

use libcni::go_compat::{self, Shape};
use libcni::plugin_conf::PluginConf;
use serde_json::Value;

const KEYS: Shape = Shape::Object(&[
    ("backend", Shape::Leaf),
    ("iptablesAdminChainName", Shape::Leaf),
    ("firewalldZone", Shape::Leaf),
    ("ingressPolicy", Shape::Leaf),
]);

pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
pub const DEFAULT_ZONE: &str = "trusted";
/// `XT_EXTENSION_MAXNAMELEN` less its NUL: the longest chain name.
const MAX_CHAIN_NAME: usize = 28;
/// `XT_MAX_COMMENT_LEN` less its NUL: the longest `-m comment` text, also
/// kept as the limit of the nftables comments so both backends tag alike.
pub const MAX_COMMENT_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to load netconf: {key} must be a string")]
    NotAString { key: &'static str },
    #[error(
        "unknown backend {0:?}: expected \"iptables\", \"nftables\" or \"firewalld\", or no backend for the automatic choice"
    )]
    UnknownBackend(String),
    #[error("unknown ingress policy: {0:?}")]
    UnknownIngressPolicy(String),
    #[error(
        "invalid iptablesAdminChainName {0:?}: a chain name has 1 to 28 characters, no blanks, and is not an iptables target"
    )]
    InvalidAdminChain(String),
    #[error("network name {0:?} is too long to tag the rules of its attachments")]
    NetworkNameTooLong(String),
}

/// Which firewall the rules go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// No `backend` (or `""`): see [`crate::backend::choose`].
    Auto,
    Iptables,
    Nftables,
    Firewalld,
}

/// What other bridges may reach a container on the bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressPolicy {
    /// Anyone (the default): no rules.
    Open,
    /// Only the same bridge; other bridges with a policy are cut off.
    SameBridge,
    /// Not even the same bridge.
    Isolated,
}

impl IngressPolicy {
    pub fn name(self) -> &'static str {
        match self {
            IngressPolicy::Open => "open",
            IngressPolicy::SameBridge => "same-bridge",
            IngressPolicy::Isolated => "isolated",
        }
    }
}

/// The configuration keys of firewall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirewallConf {
    pub backend: BackendChoice,
    pub admin_chain: String,
    pub zone: String,
    pub ingress_policy: IngressPolicy,
}

impl FirewallConf {
    pub fn from_conf(conf: &PluginConf) -> Result<FirewallConf, ConfigError> {
        let folded = go_compat::fold_keys(conf.raw(), &KEYS);
        let text = |key: &'static str| -> Result<String, ConfigError> {
            match folded.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(ConfigError::NotAString { key }),
            }
        };
        let backend = match text("backend")?.as_str() {
            "" => BackendChoice::Auto,
            "iptables" => BackendChoice::Iptables,
            "nftables" => BackendChoice::Nftables,
            "firewalld" => BackendChoice::Firewalld,
            other => return Err(ConfigError::UnknownBackend(other.to_string())),
        };
        let ingress_policy = match text("ingressPolicy")?.as_str() {
            "" | "open" => IngressPolicy::Open,
            "same-bridge" => IngressPolicy::SameBridge,
            "isolated" => IngressPolicy::Isolated,
            other => return Err(ConfigError::UnknownIngressPolicy(other.to_string())),
        };
        let mut admin_chain = text("iptablesAdminChainName")?;
        if admin_chain.is_empty() {
            admin_chain = DEFAULT_ADMIN_CHAIN.to_string();
        }
        if !is_valid_chain_name(&admin_chain) {
            return Err(ConfigError::InvalidAdminChain(admin_chain));
        }
        let mut zone = text("firewalldZone")?;
        if zone.is_empty() {
            zone = DEFAULT_ZONE.to_string();
        }
        // Every tag starts with the network's name; one that cannot fit
        // is refused here rather than when the first rule is written.
        if tag_prefix(&conf.name).len() > MAX_COMMENT_LEN / 2 {
            return Err(ConfigError::NetworkNameTooLong(conf.name.clone()));
        }
        Ok(FirewallConf {
            backend,
            admin_chain,
            zone,
            ingress_policy,
        })
    }
}

fn is_valid_chain_name(name: &str) -> bool {
    const TARGETS: [&str; 4] = ["ACCEPT", "DROP", "RETURN", "QUEUE"];
    !name.is_empty()
        && name.len() <= MAX_CHAIN_NAME
        && !name.starts_with('-')
        && !name.starts_with('!')
        && name.chars().all(|c| c.is_ascii_graphic() && c != '"')
        && !TARGETS.contains(&name)
}

/// The start of every tag of network `network`: what GC looks for.
pub fn tag_prefix(network: &str) -> String {
    format!("cni firewall net={network} ")
}

/// The comment that marks the rules of one attachment (network, container,
/// interface): the names as they are when they fit the comment, else a
/// hash of container and interface after the network's name, so that GC
/// still tells the networks apart. No quotes: `nft list ruleset` prints a
/// comment between quotes without escaping any inside, and its output
/// must read back with `nft -f`. Network names and container IDs cannot
/// hold blanks, so the words cannot run into each other.
pub fn attachment_tag(network: &str, container_id: &str, ifname: &str) -> String {
    let plain = format!("{}id={container_id} if={ifname}", tag_prefix(network));
    if plain.len() <= MAX_COMMENT_LEN {
        return plain;
    }
    let digest = libcni::nftables::userdata::fingerprint(&format!("{container_id}/{ifname}"));
    format!("{}hash={digest}", tag_prefix(network))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> Result<FirewallConf, ConfigError> {
        let conf = PluginConf::from_slice(json.as_bytes()).unwrap();
        FirewallConf::from_conf(&conf)
    }

    #[test]
    fn defaults_and_case_insensitive_keys() {
        let c = conf(r#"{"cniVersion":"1.0.0","name":"n","type":"firewall"}"#).unwrap();
        assert_eq!(c.backend, BackendChoice::Auto);
        assert_eq!(c.admin_chain, "CNI-ADMIN");
        assert_eq!(c.zone, "trusted");
        assert_eq!(c.ingress_policy, IngressPolicy::Open);
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"firewall","Backend":"nftables",
                "IPTABLESADMINCHAINNAME":"CNI-foobar","firewalldzone":"public","ingressPolicy":"isolated"}"#,
        )
        .unwrap();
        assert_eq!(c.backend, BackendChoice::Nftables);
        assert_eq!(c.admin_chain, "CNI-foobar");
        assert_eq!(c.zone, "public");
        assert_eq!(c.ingress_policy, IngressPolicy::Isolated);
    }

    #[test]
    fn bad_values_are_refused() {
        let base = r#"{"cniVersion":"1.0.0","name":"n","type":"firewall","#;
        assert_eq!(
            conf(&format!(r#"{base}"backend":"iptable"}}"#)).unwrap_err(),
            ConfigError::UnknownBackend("iptable".into())
        );
        assert_eq!(
            conf(&format!(r#"{base}"ingressPolicy":"closed"}}"#))
                .unwrap_err()
                .to_string(),
            "unknown ingress policy: \"closed\""
        );
        assert!(matches!(
            conf(&format!(r#"{base}"backend":5}}"#)),
            Err(ConfigError::NotAString { key: "backend" })
        ));
        for chain in ["has space", "ACCEPT", "-j", &"X".repeat(29)] {
            assert!(
                matches!(
                    conf(&format!(r#"{base}"iptablesAdminChainName":{chain:?}}}"#)),
                    Err(ConfigError::InvalidAdminChain(_))
                ),
                "{chain}"
            );
        }
    }

    #[test]
    fn tags_fit_a_comment_and_keep_the_network() {
        let tag = attachment_tag("net", "c1", "eth0");
        assert_eq!(tag, "cni firewall net=net id=c1 if=eth0");
        let long = attachment_tag("net", &"a".repeat(300), "eth0");
        assert!(long.len() <= MAX_COMMENT_LEN);
        assert!(long.starts_with(&tag_prefix("net")));
        assert_ne!(long, attachment_tag("net", &"a".repeat(301), "eth0"));
    }
}
