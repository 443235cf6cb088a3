//! The conformance suite: points at a directory of CNI plugins and checks
//! that they behave as the spec and real runtimes need, printing one line
//! per check and a closing `N passed, N failed` line.
//!
//! It knows the plugin types of [`probe::KNOWN_TYPES`] and exercises those
//! the directory has, at every spec version each claims (its VERSION
//! answer decides). A type whose link this kernel cannot make (ipvlan and
//! vlan on some kernels) gets its VERSION checks and one `skip` line for
//! the rest, with the reason. Everything runs in
//! network namespaces the suite creates (a fake host per scenario, where
//! the plugins run, and pods), with leases and caches in private folders:
//! the machine's own network is never touched.

pub mod chain_checks;
pub mod cross_runtime;
pub mod examples;
pub mod known_issues;
pub mod plugin_checks;
pub mod podman;
pub mod probe;
pub mod report;
pub mod sandbox;
pub mod scene;
pub mod shape;
pub mod subject;

use std::path::PathBuf;

use known_issues::KnownIssues;
use probe::Catalogue;
use report::Report;
use subject::Subject;

/// Which parts of the suite run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    /// VERSION, and every verb at every claimed version.
    Verbs,
    /// Bad input: error codes and messages.
    BadInput,
    /// DEL as runtimes send it (netns gone, no prevResult, twice).
    Del,
    /// GC with cni.dev/valid-attachments.
    Gc,
    /// prevResult chaining and capability arguments (portMappings, ips, mac).
    Chain,
    /// What containerd's CRI plugin sends.
    Containerd,
    /// Every file of the examples folder.
    Examples,
}

impl Group {
    pub const ALL: [Group; 7] = [
        Group::Verbs,
        Group::BadInput,
        Group::Del,
        Group::Gc,
        Group::Chain,
        Group::Containerd,
        Group::Examples,
    ];
}

#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// The directory of plugin binaries under test.
    pub plugins: PathBuf,
    /// Configuration files to validate and run (conflist-examples/).
    pub examples: Option<PathBuf>,
    pub groups: Vec<Group>,
    /// The plugin types whose own scenarios run (empty: every type found).
    /// The other plugins of the folder still serve as delegates (IPAM) and
    /// in the chain and example groups.
    pub types: Vec<String>,
    pub known_issues: KnownIssues,
    /// Print each line as it is recorded.
    pub echo: bool,
}

/// The id of the one line that stands for every scenario of a plugin
/// whose link type this kernel lacks (see
/// [`Subject::missing_kernel_support`]): `skip` with the reason, or `FAIL`
/// when the probe could not tell.
pub fn kernel_skip_id(plugin: &str) -> String {
    format!("{plugin}: ADD, CHECK, DEL, bad input and GC scenarios")
}

/// Runs the suite and returns the report (its lines were printed as they
/// came when `echo` is set).
pub fn run(opts: &SuiteOptions) -> Report {
    let (issue_set, issues) = opts.known_issues.resolve(&opts.plugins);
    if opts.echo {
        println!(
            "conformance suite: plugins in {}; known-issue list: {issue_set}",
            opts.plugins.display()
        );
    }
    let mut report = Report::new(issues, opts.echo);
    let cat = Catalogue::probe(&opts.plugins);
    if cat.plugins.is_empty() {
        report.check(
            format!("plugins in {}", opts.plugins.display()),
            Err(format!("none of {} found", probe::KNOWN_TYPES.join(", "))),
        );
        return report;
    }
    let wants = |g: Group| opts.groups.contains(&g);
    let scenario_groups = [Group::Verbs, Group::BadInput, Group::Del, Group::Gc];
    let wants_type = |name: &str| opts.types.is_empty() || opts.types.iter().any(|t| t == name);
    for plugin in cat.plugins.iter().filter(|p| wants_type(&p.name)) {
        let Some(subject) = Subject::for_plugin(&plugin.name) else {
            continue;
        };
        if wants(Group::Verbs) {
            plugin_checks::version_checks(&mut report, plugin);
        }
        if scenario_groups.into_iter().any(wants) {
            match subject.missing_kernel_support() {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    report.skip(kernel_skip_id(&plugin.name), reason);
                    continue;
                }
                Err(e) => {
                    report.check(
                        kernel_skip_id(&plugin.name),
                        Err(format!(
                            "cannot tell whether this kernel has the link type: {e}"
                        )),
                    );
                    continue;
                }
            }
        }
        if wants(Group::Verbs) {
            plugin_checks::verb_checks(&mut report, plugin, subject);
            if subject == Subject::Loopback {
                plugin_checks::loopback_passthrough(&mut report, plugin);
            }
        }
        if wants(Group::BadInput) {
            plugin_checks::bad_input_checks(&mut report, plugin, subject);
        }
        if wants(Group::Del) {
            plugin_checks::del_checks(&mut report, plugin, subject);
        }
        if wants(Group::Gc) {
            plugin_checks::gc_checks(&mut report, plugin, subject);
        }
    }
    if wants(Group::Chain) {
        chain_checks::port_mapping_checks(&mut report, &cat);
        chain_checks::capability_checks(&mut report, &cat);
    }
    if wants(Group::Containerd) {
        chain_checks::containerd_checks(&mut report, &cat);
    }
    if wants(Group::Examples) {
        if let Some(dir) = &opts.examples {
            examples::example_checks(&mut report, &cat, dir);
        }
    }
    report
}
