//! `cnitool validate`: explains why a node's CNI setup would not work,
//! where runtimes only say "no networks found in /etc/cni/net.d".
//!
//! Everything goes to one stream (stdout), one finding per line:
//! `ok:`, `note:`, `warning:` or `PROBLEM:`, a `fix:` line under each
//! warning and problem, and a closing summary line. The exit status is 0
//! when no problem was found (warnings alone do not fail) and 1 otherwise.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use libcni::conf::{self, NetworkConfigList};
use libcni::invoke::PluginInfo;
use libcni::network_footprint::{collisions, Footprint};
use libcni::runtime::CniConfig;
use libcni::version::{Semver, SpecVersion};
use serde_json::Value;

/// What validation found, as text for a person.
pub struct Report {
    /// Every finding, one per line, then the summary line.
    pub text: String,
    pub problems: usize,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems == 0
    }
}

struct Writer {
    text: String,
    problems: usize,
    warnings: usize,
}

impl Writer {
    fn ok(&mut self, line: impl AsRef<str>) {
        let _ = writeln!(self.text, "ok: {}", line.as_ref());
    }

    fn note(&mut self, line: impl AsRef<str>) {
        let _ = writeln!(self.text, "note: {}", line.as_ref());
    }

    fn warning(&mut self, line: impl AsRef<str>, fix: impl AsRef<str>) {
        self.warnings += 1;
        let _ = writeln!(
            self.text,
            "warning: {}\n  fix: {}",
            line.as_ref(),
            fix.as_ref()
        );
    }

    fn problem(&mut self, line: impl AsRef<str>, fix: impl AsRef<str>) {
        self.problems += 1;
        let _ = writeln!(
            self.text,
            "PROBLEM: {}\n  fix: {}",
            line.as_ref(),
            fix.as_ref()
        );
    }
}

const CONFIG_EXTENSIONS: [&str; 3] = [".conflist", ".conf", ".json"];

pub fn run(cni: &CniConfig, dir: &Path, network: Option<&str>) -> Report {
    let mut w = Writer {
        text: String::new(),
        problems: 0,
        warnings: 0,
    };
    check_plugin_path(&mut w, cni.path());
    match network {
        Some(name) => match conf::load_network_conf(dir, name) {
            Ok(list) => check_list(&mut w, cni, &list, None),
            Err(e) => {
                let files = explain_folder(&mut w, dir);
                let blockers = unparsable_files(&files);
                for (file, err) in &blockers {
                    w.problem(
                        format!("{}: {err}", file.display()),
                        format!(
                            "runtimes stop at the first file they cannot parse, so this file hides network {name:?}: fix or remove it"
                        ),
                    );
                }
                if blockers.is_empty() && !files.is_empty() {
                    let names = network_names(&files);
                    let known = if names.is_empty() {
                        "none of its files names a network".to_string()
                    } else {
                        format!("the networks there are {}", names.join(", "))
                    };
                    w.problem(
                        format!("network {name:?}: {e}"),
                        format!(
                            "{known}; use one of those names, or put a file whose \"name\" is {name:?} in {} (see conflist-examples/)",
                            dir.display()
                        ),
                    );
                }
            }
        },
        None => {
            let files = explain_folder(&mut w, dir);
            let mut names = BTreeSet::new();
            let mut footprints = Vec::new();
            for file in files {
                if let Some(list) = check_file(&mut w, cni, &file, &mut names) {
                    let raw: Value = serde_json::from_slice(&list.bytes).unwrap_or(Value::Null);
                    let label = format!("network {:?} ({})", list.name, file.display());
                    footprints.push((label, Footprint::of(&raw)));
                }
            }
            for collision in collisions(&footprints) {
                w.warning(
                    collision,
                    "give each network a bridge and an address range of its own: on one node, a bridge shared with another subnet fails the second network's ADD (\"already has an IP address different from\"), and overlapping ranges hand out one address twice",
                );
            }
        }
    }
    let summary = match (w.problems, w.warnings) {
        (0, 0) => "no problems found".to_string(),
        (p, wn) => format!(
            "{} found",
            counted(p, "problem") + ", " + &counted(wn, "warning")
        ),
    };
    let _ = writeln!(w.text, "{summary}");
    Report {
        text: w.text,
        problems: w.problems,
    }
}

fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn check_plugin_path(w: &mut Writer, path: &[PathBuf]) {
    if path.is_empty() {
        w.problem(
            "CNI_PATH is not set, so no plugin can be found",
            "set CNI_PATH to the plugin directory, e.g. CNI_PATH=/opt/cni/bin",
        );
        return;
    }
    for dir in path {
        if !dir.is_dir() {
            w.problem(
                format!("CNI_PATH entry {} is not a directory", dir.display()),
                "create it and install the plugin binaries there, or fix CNI_PATH",
            );
        }
    }
}

/// Says what is wrong with the folder as a whole and returns its config
/// files in the order a runtime reads them.
fn explain_folder(w: &mut Writer, dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            w.problem(
                format!("config folder {} does not exist", dir.display()),
                format!(
                    "create it and put a .conflist in it (mkdir -p {0}; cp conflist-examples/10-k8s-bridge-portmap.conflist {0}/), or point NETCONFPATH elsewhere",
                    dir.display()
                ),
            );
            return Vec::new();
        }
        Err(e) => {
            w.problem(
                format!("cannot read config folder {}: {e}", dir.display()),
                "run as a user that can read it (runtimes run as root)",
            );
            return Vec::new();
        }
    };
    let mut configs = Vec::new();
    let mut others = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if CONFIG_EXTENSIONS.iter().any(|ext| name.ends_with(ext)) {
            configs.push(path);
        } else {
            others.push(name);
        }
    }
    configs.sort_by_key(|p| read_order(p));
    if configs.is_empty() {
        let found = if others.is_empty() {
            "it is empty".to_string()
        } else {
            others.sort();
            format!("it holds only {}", others.join(", "))
        };
        w.problem(
            format!("no network configuration in {}: {found}", dir.display()),
            "CNI configs must be files ending in .conflist, .conf or .json; copy one from conflist-examples/",
        );
    } else if !others.is_empty() {
        others.sort();
        w.note(format!(
            "ignored (not .conflist/.conf/.json): {}",
            others.join(", ")
        ));
    }
    configs
}

/// Runtimes read .conflist files first, then .conf and .json, each sorted
/// by name.
fn read_order(path: &Path) -> (bool, PathBuf) {
    let is_list = path.extension().is_some_and(|e| e == "conflist");
    (!is_list, path.to_path_buf())
}

fn load_file(file: &Path) -> Result<NetworkConfigList, conf::ConfError> {
    if file.extension().is_some_and(|e| e == "conflist") {
        conf::conflist_from_file(file)
    } else {
        conf::plugin_conf_from_file(file).and_then(|p| conf::conflist_from_conf(&p))
    }
}

/// The config files (in the order a runtime reads them) that a runtime
/// looking for a network fails on, with the error.
pub fn unparsable_files(files: &[PathBuf]) -> Vec<(PathBuf, conf::ConfError)> {
    files
        .iter()
        .filter_map(|f| load_file(f).err().map(|e| (f.clone(), e)))
        .collect()
}

/// The config files of `dir` in the order a runtime reads them.
pub fn config_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            !p.is_dir()
                && p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .is_some_and(|n| CONFIG_EXTENSIONS.iter().any(|ext| n.ends_with(ext)))
        })
        .collect();
    files.sort_by_key(|p| read_order(p));
    files
}

/// The network names the parsable files give, in reading order.
pub fn network_names(files: &[PathBuf]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    files
        .iter()
        .filter_map(|f| load_file(f).ok())
        .map(|l| l.name)
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// Checks one file; returns its network when a runtime would load it.
fn check_file(
    w: &mut Writer,
    cni: &CniConfig,
    file: &Path,
    names: &mut BTreeSet<String>,
) -> Option<NetworkConfigList> {
    let list = match load_file(file) {
        Ok(list) => list,
        Err(e) => {
            w.problem(
                format!("{}: {e}", file.display()),
                "fix the JSON (a .conflist needs \"name\", \"cniVersion\" and a non-empty \"plugins\" list whose entries have \"type\"; a .conf is one plugin object with \"name\" and \"type\")",
            );
            return None;
        }
    };
    if !names.insert(list.name.clone()) {
        w.problem(
            format!(
                "{}: network name {:?} is used by an earlier file, so this one is never loaded",
                file.display(),
                list.name
            ),
            "give every network a unique \"name\"",
        );
        return None;
    }
    check_list(w, cni, &list, Some(file));
    Some(list)
}

/// A binary a network runs: one of its plugins or a delegate one names.
struct Binary {
    /// How the config names it: `plugin "bridge"`, `IPAM plugin
    /// "host-local" (ipam.type of bridge)`.
    role: String,
    plugin_type: String,
}

/// The binaries a list runs, plugins and their delegates, in order.
fn binaries(list: &NetworkConfigList) -> Vec<Binary> {
    let mut out = Vec::new();
    for plugin in &list.plugins {
        let ty = plugin.plugin_type();
        out.push(Binary {
            role: format!("plugin {ty:?}"),
            plugin_type: ty.to_string(),
        });
        // The spec's delegate is the IPAM plugin; flannel names its
        // main plugin under `delegate`.
        for key in ["ipam", "delegate"] {
            let Some(delegate) = plugin.raw().get(key).and_then(|s| s.get("type")) else {
                continue;
            };
            let Some(delegate) = delegate.as_str().filter(|t| !t.is_empty()) else {
                continue;
            };
            let what = if key == "ipam" {
                "IPAM plugin"
            } else {
                "plugin"
            };
            out.push(Binary {
                role: format!("{what} {delegate:?} ({key}.type of {ty})"),
                plugin_type: delegate.to_string(),
            });
        }
    }
    out
}

/// How the version a list runs at was chosen, from the file's own keys.
struct VersionChoice {
    /// `cniVersion` as written; `None` when the key is missing or empty.
    written: Option<String>,
    /// `cniVersions` as written; empty when the key is missing.
    listed: Vec<String>,
    /// The version plugins get (`""` read as 0.1.0).
    chosen: String,
}

impl VersionChoice {
    fn of(list: &NetworkConfigList) -> VersionChoice {
        let raw: Value = serde_json::from_slice(&list.bytes).unwrap_or(Value::Null);
        let written = raw["cniVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string);
        let listed = raw["cniVersions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let chosen = if list.cni_version.is_empty() {
            SpecVersion::V0_1_0.as_str().to_string()
        } else {
            list.cni_version.clone()
        };
        VersionChoice {
            written,
            listed,
            chosen,
        }
    }
}

fn check_list(w: &mut Writer, cni: &CniConfig, list: &NetworkConfigList, file: Option<&Path>) {
    let origin = file
        .map(|f| format!(" ({})", f.display()))
        .unwrap_or_default();
    let net = format!("network {:?}{origin}", list.name);
    let before = w.problems;
    let choice = VersionChoice::of(list);
    if choice.written.is_none() && choice.listed.is_empty() {
        w.warning(
            format!(
                "{net}: no \"cniVersion\", so its plugins run at 0.1.0, the spec's version for a config without one (0.1.0 results have no interfaces, no CHECK, GC or STATUS)"
            ),
            "add \"cniVersion\": \"1.0.0\" (or the highest version all its plugins support; `cnitool version PLUGIN` lists them)",
        );
    }
    if !choice.listed.is_empty() {
        w.note(format!(
            "{net}: runs at {}: the highest of \"cniVersion\" ({}) and \"cniVersions\" ({}) that this runtime speaks (cnitool: up to {}); runtimes choose by what they speak, not by what the plugins support",
            choice.chosen,
            choice.written.as_deref().unwrap_or("none"),
            choice.listed.join(", "),
            SpecVersion::CURRENT.as_str()
        ));
    }

    let mut infos: Vec<(Binary, PluginInfo)> = Vec::new();
    for binary in binaries(list) {
        if let Some(info) = probe(w, cni, &net, &binary) {
            infos.push((binary, info));
        }
    }
    let lacking: Vec<&(Binary, PluginInfo)> = infos
        .iter()
        .filter(|(_, info)| !info.supports(&choice.chosen))
        .collect();
    let common = highest_common_version(infos.iter().map(|(_, i)| i));
    match lacking.as_slice() {
        [] => {}
        [(binary, info)] => w.problem(
            format!(
                "{net}: {} does not support version {} (it supports {})",
                binary.role,
                choice.chosen,
                info.supported_versions.join(", ")
            ),
            version_fix(&choice, common.as_deref(), &infos),
        ),
        several => {
            let each: Vec<String> = several
                .iter()
                .map(|(binary, info)| {
                    let highest = highest_common_version(std::iter::once(info));
                    format!(
                        "{} (up to {})",
                        binary.role,
                        highest.as_deref().unwrap_or("none")
                    )
                })
                .collect();
            w.problem(
                format!(
                    "{net}: version {} is not supported by {}",
                    choice.chosen,
                    each.join(", ")
                ),
                version_fix(&choice, common.as_deref(), &infos),
            );
        }
    }
    if w.problems == before {
        let types: Vec<String> = binaries(list).into_iter().map(|b| b.plugin_type).collect();
        w.ok(format!(
            "{net}: version {}, plugins {}",
            choice.chosen,
            types.join(", ")
        ));
    }
}

/// What to change when a binary lacks the chosen version.
fn version_fix(
    choice: &VersionChoice,
    common: Option<&str>,
    infos: &[(Binary, PluginInfo)],
) -> String {
    let Some(common) = common else {
        let types: Vec<&str> = infos.iter().map(|(b, _)| b.plugin_type.as_str()).collect();
        return format!(
            "these plugins ({}) share no spec version: install versions of them that do",
            types.join(", ")
        );
    };
    let mut changes = Vec::new();
    if choice.written.as_deref().is_some_and(|v| newer(v, common)) {
        changes.push(format!("set \"cniVersion\" to {common}"));
    }
    let too_new: Vec<&str> = choice
        .listed
        .iter()
        .filter(|v| newer(v, common))
        .map(String::as_str)
        .collect();
    if !too_new.is_empty() {
        changes.push(format!(
            "remove {} from \"cniVersions\"",
            too_new.join(", ")
        ));
    }
    if changes.is_empty() {
        // Only an empty version (0.1.0) can be older than every plugin's.
        changes.push(format!("set \"cniVersion\" to {common}"));
    }
    let why = if too_new.is_empty() {
        String::new()
    } else {
        " (a runtime takes the highest listed version it speaks, whatever the plugins support)"
            .to_string()
    };
    format!(
        "{}{why}: {common} is the highest version every plugin here supports; or install plugins that support {}",
        changes.join(" and "),
        choice.chosen
    )
}

fn newer(version: &str, than: &str) -> bool {
    match (version.parse::<Semver>(), than.parse::<Semver>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

/// The highest version every one of `infos` lists.
fn highest_common_version<'a>(infos: impl Iterator<Item = &'a PluginInfo>) -> Option<String> {
    let mut common: Option<BTreeSet<String>> = None;
    for info in infos {
        let these: BTreeSet<String> = info.supported_versions.iter().cloned().collect();
        common = Some(match common {
            None => these,
            Some(c) => c.intersection(&these).cloned().collect(),
        });
    }
    common?
        .into_iter()
        .filter_map(|v| v.parse::<Semver>().ok().map(|s| (s, v)))
        .max_by_key(|(s, _)| *s)
        .map(|(_, v)| v)
}

/// Finds a binary in CNI_PATH, checks it can run and asks its versions.
fn probe(w: &mut Writer, cni: &CniConfig, net: &str, binary: &Binary) -> Option<PluginInfo> {
    let ty = &binary.plugin_type;
    let found = cni.path().iter().map(|d| d.join(ty)).find(|p| p.is_file());
    let Some(path) = found else {
        w.problem(
            format!(
                "{net}: {} not found in CNI_PATH ({})",
                binary.role,
                join_paths(cni.path())
            ),
            format!("install the {ty} binary into one of those directories (e.g. /opt/cni/bin)"),
        );
        return None;
    };
    let executable = std::fs::metadata(&path)
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    if !executable {
        w.problem(
            format!("{net}: {} is not executable", path.display()),
            format!("chmod 0755 {}", path.display()),
        );
        return None;
    }
    match cni.get_version_info(ty) {
        Ok(info) => Some(info),
        Err(e) => {
            w.problem(
                format!("{net}: VERSION of {} failed: {e}", binary.role),
                format!(
                    "run `CNI_COMMAND=VERSION {}` by hand to see why",
                    path.display()
                ),
            );
            None
        }
    }
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(versions: &[&str]) -> PluginInfo {
        PluginInfo {
            cni_version: "1.0.0".into(),
            supported_versions: versions.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn highest_common_version_is_semver_ordered() {
        let a = info(&["0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        let b = info(&["0.4.0", "1.0.0"]);
        assert_eq!(
            highest_common_version([&a, &b].into_iter()).as_deref(),
            Some("1.0.0")
        );
        let c = info(&["0.2.0"]);
        assert_eq!(highest_common_version([&a, &c].into_iter()), None);
        assert_eq!(highest_common_version(std::iter::empty()), None);
    }

    #[test]
    fn versions_compare_as_numbers() {
        assert!(newer("1.10.0", "1.9.0"));
        assert!(!newer("1.0.0", "1.0.0"));
        assert!(!newer("x", "1.0.0"));
    }
}
