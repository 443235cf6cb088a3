//! `cnitool`: runs a CNI network configuration against a network namespace
//! by hand, compatible with the Go tool of the same name (same commands,
//! variables and container ID), plus `version` and `validate`.

mod validate;

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use libcni::conf::{self, NetworkConfigList};
use libcni::runtime::{CniConfig, RuntimeConf, RuntimeError};
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};

/// Where configurations are read from when NETCONFPATH is not set.
const DEFAULT_NETCONF_PATH: &str = "/etc/cni/net.d";
const DEFAULT_IFNAME: &str = "eth0";

const ENVIRONMENT_HELP: &str = "\
Environment:
  NETCONFPATH    folder of network configurations [default: /etc/cni/net.d]
  CNI_PATH       plugin directories, ':'-separated (required; e.g. /opt/cni/bin)
  CAP_ARGS       capability arguments as a JSON object, e.g. {\"portMappings\":[...]}
  CNI_ARGS       extra arguments for the plugins, K=V;K=V
  CNI_IFNAME     interface name in the namespace when -i is not given [default: eth0]
  CNI_CACHE_DIR  result cache folder when --cache-dir is not given [default: /var/lib/cni]

Exit status: 0 on success, 1 when the operation failed or `validate` found a
problem, 2 for a command line cnitool cannot parse.";

#[derive(Parser)]
#[command(
    name = "cnitool",
    version,
    about = "Add, check or delete a network namespace's attachment to a CNI network",
    after_help = ENVIRONMENT_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// Where an attachment is: the network and the namespace, as the Go tool
/// takes them, plus the options that only an attachment has.
#[derive(Args)]
struct Attachment {
    /// The network's name: the "name" of a configuration file in
    /// NETCONFPATH (`cnitool validate` lists them).
    network: String,
    /// The pod's network namespace: a path such as
    /// /var/run/netns/pod1 (made by `ip netns add pod1`).
    netns: PathBuf,
    /// Interface name inside the namespace [default: CNI_IFNAME, else eth0].
    #[arg(short = 'i', long = "ifname")]
    ifname: Option<String>,
    #[command(flatten)]
    cache: CacheDir,
}

#[derive(Args)]
struct CacheDir {
    /// Folder of the result cache, where ADD's results are kept for CHECK,
    /// DEL and GC.
    #[arg(
        long = "cache-dir",
        env = "CNI_CACHE_DIR",
        hide_env_values = true,
        default_value = libcni::cache::DEFAULT_CACHE_DIR
    )]
    dir: PathBuf,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach the namespace to the network and print the result.
    Add(Attachment),
    /// Check the namespace's attachment to the network.
    Check(Attachment),
    /// Detach the namespace from the network.
    Del(Attachment),
    /// Delete every cached attachment of the network and garbage-collect
    /// its plugins.
    Gc {
        /// The network's name: the "name" of a configuration file in
        /// NETCONFPATH.
        network: String,
        /// Accepted for compatibility with the Go tool; not used.
        netns: Option<PathBuf>,
        #[command(flatten)]
        cache: CacheDir,
    },
    /// Ask the network's plugins whether they are ready for ADD.
    Status {
        /// The network's name: the "name" of a configuration file in
        /// NETCONFPATH.
        network: String,
        /// Accepted for compatibility with the Go tool; not used.
        netns: Option<PathBuf>,
    },
    /// Print which file a plugin name runs, what it says it is, and the
    /// spec versions it supports.
    Version {
        /// The plugin's binary name, looked up in CNI_PATH (e.g. bridge).
        plugin: String,
    },
    /// Check that a network's (or every network's) plugins and their IPAM
    /// plugins exist, are executable and support the version the network
    /// runs at, and explain broken configs.
    #[command(
        long_about = "Check that a network's (or every network's) plugins and their IPAM plugins \
exist, are executable and support the version the network runs at, and explain broken configs.

Everything goes to standard output, one finding per line: `ok:`, `note:`, `warning:` or \
`PROBLEM:`, with a `fix:` line under each warning and problem, then a summary line. The exit \
status is 0 when no problem was found (warnings alone do not fail) and 1 when one was."
    )]
    Validate {
        /// The network to check (its "name"); every file in NETCONFPATH
        /// when left out.
        network: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error(transparent)]
    Conf(#[from] conf::ConfError),
    #[error("{source} ({hint})")]
    NetworkNotFound {
        source: conf::ConfError,
        hint: String,
    },
    #[error(
        "cannot load network {network:?}: {}: {source} (runtimes stop at the first configuration \
         file they cannot parse, so this one breaks every network after it; run `cnitool validate` \
         to see every problem)",
        .file.display()
    )]
    BrokenFile {
        network: String,
        file: PathBuf,
        source: conf::ConfError,
    },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("CNI_PATH is not set, so no plugin can be found: set it to the plugin directory, e.g. CNI_PATH=/opt/cni/bin")]
    NoPluginPath,
    #[error("cannot run {}: {source}", .path.display())]
    RunPlugin {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CAP_ARGS is not a JSON object: {0}")]
    CapArgs(String),
    #[error("invalid CNI_ARGS pair {0:?}")]
    CniArgsPair(String),
    #[error("cannot make {path:?} absolute: {source}")]
    NetnsPath {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ToolError {
    fn code(&self) -> Option<u32> {
        match self {
            ToolError::Runtime(e) => e.code().map(|c| c.as_u32()),
            ToolError::Conf(_)
            | ToolError::NetworkNotFound { .. }
            | ToolError::BrokenFile { .. }
            | ToolError::NoPluginPath
            | ToolError::RunPlugin { .. }
            | ToolError::CapArgs(_)
            | ToolError::CniArgsPair(_)
            | ToolError::NetnsPath { .. } => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(status) => status,
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

/// The runtime for a command that runs plugins: CNI_PATH must name where.
fn runtime(cache_dir: Option<&Path>) -> Result<CniConfig, ToolError> {
    let path = plugin_path();
    if path.is_empty() {
        return Err(ToolError::NoPluginPath);
    }
    let cni = CniConfig::new(path);
    Ok(match cache_dir {
        Some(dir) => cni.with_cache_dir(dir),
        None => cni,
    })
}

fn run(cli: Cli) -> Result<ExitCode, ToolError> {
    match cli.command {
        Cmd::Add(at) => {
            let cni = runtime(Some(&at.cache.dir))?;
            let (list, rt) = attachment(&at)?;
            let result = cni.add_network_list(&list, &rt)?;
            let out = result.to_pretty_json();
            print!("{}", String::from_utf8_lossy(&out));
        }
        Cmd::Check(at) => {
            let cni = runtime(Some(&at.cache.dir))?;
            let (list, rt) = attachment(&at)?;
            cni.check_network_list(&list, &rt)?;
        }
        Cmd::Del(at) => {
            let cni = runtime(Some(&at.cache.dir))?;
            let (list, rt) = attachment(&at)?;
            cni.del_network_list(&list, &rt)?;
        }
        Cmd::Gc { network, cache, .. } => {
            let cni = runtime(Some(&cache.dir))?;
            let list = load_network(&network)?;
            // Like the Go tool: no valid-attachment list, so every cached
            // attachment of the network is stale.
            cni.gc_network_list(&list, None)?;
        }
        Cmd::Status { network, .. } => {
            let cni = runtime(None)?;
            let list = load_network(&network)?;
            cni.get_status_network_list(&list)?;
        }
        Cmd::Version { plugin } => {
            let cni = runtime(None)?;
            let path = libcni::invoke::find_in_path(&plugin, cni.path())
                .map_err(|e| ToolError::Runtime(e.into()))?;
            let about = about_text(&path)?;
            let info = cni.get_version_info(&plugin)?;
            println!("plugin: {}", path.display());
            if !about.is_empty() {
                println!("about: {about}");
            }
            println!(
                "supported spec versions: {}",
                info.supported_versions.join(", ")
            );
        }
        Cmd::Validate { network } => {
            // No CNI_PATH is one of the things validate explains.
            let cni = CniConfig::new(plugin_path());
            let report = validate::run(&cni, &netconf_dir(), network.as_deref());
            print!("{}", report.text);
            if !report.ok() {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a plugin prints when run without CNI_COMMAND (its name, version
/// and implementation), first line only; empty when it prints nothing.
fn about_text(path: &Path) -> Result<String, ToolError> {
    let out = std::process::Command::new(path)
        .env_remove("CNI_COMMAND")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| ToolError::RunPlugin {
            path: path.to_path_buf(),
            source,
        })?;
    let text = String::from_utf8_lossy(&out.stderr);
    Ok(text.lines().next().unwrap_or_default().trim().to_string())
}

/// Network `name` from NETCONFPATH, with an error that names the file in
/// the way when another file is broken, and lists the networks there are
/// when none has the name.
fn load_network(name: &str) -> Result<NetworkConfigList, ToolError> {
    let dir = netconf_dir();
    let err = match conf::load_network_conf(&dir, name) {
        Ok(list) => return Ok(list),
        Err(e) => e,
    };
    let files = validate::config_files(&dir);
    match err {
        conf::ConfError::NotFound { .. } => {
            let names = validate::network_names(&files);
            let hint = if names.is_empty() {
                "no file there names a network; run `cnitool validate`".to_string()
            } else {
                format!("the networks there are {}", names.join(", "))
            };
            Err(ToolError::NetworkNotFound { source: err, hint })
        }
        conf::ConfError::NoConfigsFound { .. } | conf::ConfError::ReadDir { .. } => {
            Err(ToolError::Conf(err))
        }
        other => match validate::unparsable_files(&files).into_iter().next() {
            Some((file, source)) => Err(ToolError::BrokenFile {
                network: name.to_string(),
                file,
                source,
            }),
            None => Err(ToolError::Conf(other)),
        },
    }
}

/// The network config and runtime arguments of an add/check/del.
fn attachment(at: &Attachment) -> Result<(NetworkConfigList, RuntimeConf), ToolError> {
    let list = load_network(&at.network)?;
    let netns = absolute(&at.netns)?;
    let netns_str = netns.to_string_lossy().into_owned();
    let ifname = at
        .ifname
        .clone()
        .or_else(|| env_string("CNI_IFNAME").filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_IFNAME.to_string());
    let rt = RuntimeConf {
        container_id: container_id(&netns_str),
        netns: netns_str,
        ifname,
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
