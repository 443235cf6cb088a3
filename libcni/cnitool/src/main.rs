//! `cnitool`: runs a CNI network configuration against a network namespace
//! by hand, compatible with the Go tool of the same name (same commands,
//! variables and container ID), plus `version` and `validate`.

mod validate;

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use libcni::conf::{self, NetworkConfigList};
use libcni::runtime::{CniConfig, RuntimeConf, RuntimeError};
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};

/// Where configurations are read from when NETCONFPATH is not set.
const DEFAULT_NETCONF_PATH: &str = "/etc/cni/net.d";
const DEFAULT_IFNAME: &str = "eth0";

#[derive(Parser)]
#[command(
    name = "cnitool",
    version,
    about = "Add, check or delete a network namespace's attachment to a CNI network",
    after_help = "Environment: NETCONFPATH (default /etc/cni/net.d), CNI_PATH (plugin directories, \
                  ':'-separated), CAP_ARGS (JSON object of capability arguments), CNI_ARGS \
                  (K=V;K=V), CNI_IFNAME (default eth0), CNI_CACHE_DIR (default /var/lib/cni)."
)]
struct Cli {
    /// Interface name inside the namespace [env: CNI_IFNAME; default eth0].
    #[arg(short = 'i', long = "ifname", global = true)]
    ifname: Option<String>,
    /// Directory of the result cache.
    #[arg(long, global = true, env = "CNI_CACHE_DIR", default_value = libcni::cache::DEFAULT_CACHE_DIR)]
    cache_dir: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach the namespace to the network and print the result.
    Add { network: String, netns: PathBuf },
    /// Check the namespace's attachment to the network.
    Check { network: String, netns: PathBuf },
    /// Detach the namespace from the network.
    Del { network: String, netns: PathBuf },
    /// Delete every cached attachment of the network and garbage-collect
    /// its plugins.
    Gc {
        network: String,
        /// Accepted for compatibility with the Go tool; not used.
        netns: Option<PathBuf>,
    },
    /// Ask the network's plugins whether they are ready for ADD.
    Status {
        network: String,
        /// Accepted for compatibility with the Go tool; not used.
        netns: Option<PathBuf>,
    },
    /// Print the spec versions a plugin supports.
    Version { plugin: String },
    /// Check that a network's (or every network's) plugins exist, are
    /// executable and support its version, and explain broken configs.
    Validate { network: Option<String> },
}

#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error(transparent)]
    Conf(#[from] conf::ConfError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("CAP_ARGS is not a JSON object: {0}")]
    CapArgs(String),
    #[error("invalid CNI_ARGS pair {0:?}")]
    CniArgsPair(String),
    #[error("cannot make {path:?} absolute: {source}")]
    NetnsPath {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Validation(String),
}

impl ToolError {
    fn code(&self) -> Option<u32> {
        match self {
            ToolError::Runtime(e) => e.code().map(|c| c.as_u32()),
            _ => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.code() {
                Some(code) => eprintln!("{e} (CNI error code {code})"),
                None => eprintln!("{e}"),
            }
            ExitCode::FAILURE
        }
    }
}

fn env_string(key: &str) -> Option<String> {
    std::env::var_os(key).map(|v| v.to_string_lossy().into_owned())
}

fn netconf_dir() -> PathBuf {
    env_string("NETCONFPATH")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_NETCONF_PATH))
}

/// CNI_PATH split on ':' with empty entries dropped.
fn plugin_path() -> Vec<PathBuf> {
    split_path(std::env::var_os("CNI_PATH").unwrap_or_default())
}

fn split_path(raw: OsString) -> Vec<PathBuf> {
    std::env::split_paths(&raw)
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

fn run(cli: Cli) -> Result<(), ToolError> {
    let cni = CniConfig::new(plugin_path()).with_cache_dir(&cli.cache_dir);
    let ifname = cli
        .ifname
        .or_else(|| env_string("CNI_IFNAME").filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_IFNAME.to_string());
    match cli.command {
        Cmd::Add { network, netns } => {
            let (list, rt) = attachment(&network, &netns, &ifname)?;
            let result = cni.add_network_list(&list, &rt)?;
            let out = result.to_pretty_json();
            print!("{}", String::from_utf8_lossy(&out));
            Ok(())
        }
        Cmd::Check { network, netns } => {
            let (list, rt) = attachment(&network, &netns, &ifname)?;
            Ok(cni.check_network_list(&list, &rt)?)
        }
        Cmd::Del { network, netns } => {
            let (list, rt) = attachment(&network, &netns, &ifname)?;
            Ok(cni.del_network_list(&list, &rt)?)
        }
        Cmd::Gc { network, .. } => {
            let list = conf::load_network_conf(&netconf_dir(), &network)?;
            // Like the Go tool: no valid-attachment list, so every cached
            // attachment of the network is stale.
            Ok(cni.gc_network_list(&list, None)?)
        }
        Cmd::Status { network, .. } => {
            let list = conf::load_network_conf(&netconf_dir(), &network)?;
            Ok(cni.get_status_network_list(&list)?)
        }
        Cmd::Version { plugin } => {
            let info = cni.get_version_info(&plugin)?;
            println!("{}", info.supported_versions.join(", "));
            Ok(())
        }
        Cmd::Validate { network } => {
            let report = validate::run(&cni, &netconf_dir(), network.as_deref());
            print!("{}", report.text);
            if report.ok {
                Ok(())
            } else {
                Err(ToolError::Validation(format!(
                    "{} problem(s) found",
                    report.problems
                )))
            }
        }
    }
}

/// The network config and runtime arguments of an add/check/del.
fn attachment(
    network: &str,
    netns: &Path,
    ifname: &str,
) -> Result<(NetworkConfigList, RuntimeConf), ToolError> {
    let list = conf::load_network_conf(&netconf_dir(), network)?;
    let netns = absolute(netns)?;
    let netns_str = netns.to_string_lossy().into_owned();
    let rt = RuntimeConf {
        container_id: container_id(&netns_str),
        netns: netns_str,
        ifname: ifname.to_string(),
        args: parse_cni_args(&env_string("CNI_ARGS").unwrap_or_default())?,
        capability_args: parse_cap_args(&env_string("CAP_ARGS").unwrap_or_default())?,
    };
    Ok((list, rt))
}

/// The Go tool's container ID: `cnitool-` and the first 10 bytes of the
/// SHA-512 of the absolute netns path, in hex.
fn container_id(abs_netns: &str) -> String {
    let digest = Sha512::digest(abs_netns.as_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

/// Absolute and lexically cleaned, without resolving links (as Go's
/// `filepath.Abs`), so the container ID matches the Go tool's.
fn absolute(path: &Path) -> Result<PathBuf, ToolError> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| ToolError::NetnsPath {
                path: path.to_path_buf(),
                source,
            })?
            .join(path)
    };
    let mut clean = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::Normal(part) => clean.push(part),
            Component::ParentDir => {
                clean.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(clean)
}

fn parse_cni_args(raw: &str) -> Result<Vec<(String, String)>, ToolError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    raw.split(';')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ToolError::CniArgsPair(pair.to_string())),
        })
        .collect()
}

fn parse_cap_args(raw: &str) -> Result<Map<String, Value>, ToolError> {
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ToolError::CapArgs(format!("got {other}"))),
        Err(e) => Err(ToolError::CapArgs(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_id_matches_the_go_tool() {
        assert_eq!(
            container_id("/var/run/netns/x"),
            "cnitool-4acf487154af9777be71"
        );
    }

    #[test]
    fn netns_paths_are_made_absolute_and_clean() {
        assert_eq!(
            absolute(Path::new("/var/run/netns/../netns/./x")).unwrap(),
            PathBuf::from("/var/run/netns/x")
        );
        let rel = absolute(Path::new("x")).unwrap();
        assert!(rel.is_absolute());
        assert!(rel.ends_with("x"));
    }

    #[test]
    fn cni_args_pairs() {
        assert_eq!(
            parse_cni_args("IP=10.0.0.5;IgnoreUnknown=1").unwrap(),
            vec![
                ("IP".to_string(), "10.0.0.5".to_string()),
                ("IgnoreUnknown".to_string(), "1".to_string())
            ]
        );
        assert!(parse_cni_args("").unwrap().is_empty());
        for bad in ["IP", "=1", "IP=", "A=1;;B=2"] {
            assert!(
                matches!(parse_cni_args(bad), Err(ToolError::CniArgsPair(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn cap_args_must_be_an_object() {
        let m = parse_cap_args(
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#,
        )
        .unwrap();
        assert!(m.contains_key("portMappings"));
        assert!(parse_cap_args("").unwrap().is_empty());
        assert!(parse_cap_args("[1]").is_err());
        assert!(parse_cap_args("{").is_err());
    }

    #[test]
    fn cni_path_drops_empty_entries() {
        assert_eq!(
            split_path(OsString::from("/a::/b:")),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
    }
}
