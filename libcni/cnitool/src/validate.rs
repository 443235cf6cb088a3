//! `cnitool validate`: explains why a node's CNI setup would not work,
//! where runtimes only say "no networks found in /etc/cni/net.d".

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use libcni::conf::{self, NetworkConfigList};
use libcni::runtime::CniConfig;

/// What validation found, as text for a person.
pub struct Report {
    pub text: String,
    pub ok: bool,
    pub problems: usize,
}

struct Writer {
    text: String,
    problems: usize,
}

impl Writer {
    fn ok(&mut self, line: impl AsRef<str>) {
        let _ = writeln!(self.text, "ok: {}", line.as_ref());
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
    };
    check_plugin_path(&mut w, cni.path());
    match network {
        Some(name) => match conf::load_network_conf(dir, name) {
            Ok(list) => check_list(&mut w, cni, &list, None),
            Err(e) => {
                let files = explain_folder(&mut w, dir);
                let blockers = unparsable_conflists(&files);
                for (file, err) in &blockers {
                    w.problem(
                        format!("{}: {err}", file.display()),
                        format!(
                            "runtimes stop at the first .conflist they cannot parse, so this file hides network {name:?}: fix or remove it"
                        ),
                    );
                }
                if blockers.is_empty() {
                    w.problem(
                        format!("network {name:?}: {e}"),
                        format!(
                            "put a file whose \"name\" is {name:?} in {} (see conflist-examples/)",
                            dir.display()
                        ),
                    );
                }
            }
        },
        None => {
            let files = explain_folder(&mut w, dir);
            let mut names = BTreeSet::new();
            for file in files {
                check_file(&mut w, cni, &file, &mut names);
            }
        }
    }
    let ok = w.problems == 0;
    Report {
        text: w.text,
        ok,
        problems: w.problems,
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
    // Runtimes read .conflist files first, then .conf and .json, each
    // sorted by name.
    configs.sort_by_key(|p| {
        let is_list = p.extension().is_some_and(|e| e == "conflist");
        (!is_list, p.clone())
    });
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
        let _ = writeln!(
            w.text,
            "note: ignored (not .conflist/.conf/.json): {}",
            others.join(", ")
        );
    }
    configs
}

/// The .conflist files a runtime would fail on while looking for a network.
fn unparsable_conflists(files: &[PathBuf]) -> Vec<(PathBuf, conf::ConfError)> {
    files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "conflist"))
        .filter_map(|f| conf::conflist_from_file(f).err().map(|e| (f.clone(), e)))
        .collect()
}

fn check_file(w: &mut Writer, cni: &CniConfig, file: &Path, names: &mut BTreeSet<String>) {
    let is_list = file.extension().is_some_and(|e| e == "conflist");
    let list = if is_list {
        conf::conflist_from_file(file)
    } else {
        conf::plugin_conf_from_file(file).and_then(|p| conf::conflist_from_conf(&p))
    };
    let list = match list {
        Ok(list) => list,
        Err(e) => {
            w.problem(
                format!("{}: {e}", file.display()),
                "fix the JSON (a .conflist needs \"name\", \"cniVersion\" and a non-empty \"plugins\" list whose entries have \"type\"; a .conf is one plugin object with \"name\" and \"type\")",
            );
            return;
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
        return;
    }
    check_list(w, cni, &list, Some(file));
}

fn check_list(w: &mut Writer, cni: &CniConfig, list: &NetworkConfigList, file: Option<&Path>) {
    let origin = file
        .map(|f| format!(" ({})", f.display()))
        .unwrap_or_default();
    let before = w.problems;
    for plugin in &list.plugins {
        let ty = plugin.plugin_type();
        let found = cni.path().iter().map(|d| d.join(ty)).find(|p| p.is_file());
        let Some(path) = found else {
            w.problem(
                format!(
                    "network {:?}{origin}: plugin {ty:?} not found in CNI_PATH ({})",
                    list.name,
                    join_paths(cni.path())
                ),
                format!(
                    "install the {ty} binary into one of those directories (e.g. /opt/cni/bin)"
                ),
            );
            continue;
        };
        let executable = std::fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        if !executable {
            w.problem(
                format!(
                    "network {:?}{origin}: {} is not executable",
                    list.name,
                    path.display()
                ),
                format!("chmod 0755 {}", path.display()),
            );
            continue;
        }
        match cni.get_version_info(ty) {
            Ok(info) => {
                let wanted = if list.cni_version.is_empty() {
                    "0.1.0"
                } else {
                    list.cni_version.as_str()
                };
                if !info.supports(wanted) {
                    w.problem(
                        format!(
                            "network {:?}{origin}: plugin {ty} does not support cniVersion {wanted} (it supports {})",
                            list.name,
                            info.supported_versions.join(", ")
                        ),
                        "set \"cniVersion\" to a version every plugin supports, or list several in \"cniVersions\"",
                    );
                }
            }
            Err(e) => w.problem(
                format!(
                    "network {:?}{origin}: VERSION of {ty} failed: {e}",
                    list.name
                ),
                format!(
                    "run `CNI_COMMAND=VERSION {}` by hand to see why",
                    path.display()
                ),
            ),
        }
    }
    if w.problems == before {
        let types: Vec<&str> = list.plugins.iter().map(|p| p.plugin_type()).collect();
        w.ok(format!(
            "network {:?}{origin}: cniVersion {}, plugins {}",
            list.name,
            list.cni_version,
            types.join(", ")
        ));
    }
}

fn join_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}
