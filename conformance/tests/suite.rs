//! The conformance suite binary run against our plugins (everything must
//! pass), against the Debian reference plugins (everything but the listed
//! known issues must pass, and every listed issue must still show), and
//! against a broken plugin (the suite must notice).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use conformance::suite::kernel_skip_id;
use conformance::suite::known_issues::REFERENCE;
use conformance::suite::probe::KNOWN_TYPES;
use conformance::suite::subject::Subject;
use conformance::testnet::{bin_dir, REFERENCE_DIR};

const SUITE: &str = env!("CARGO_BIN_EXE_conformance");

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("conflist-examples")
}

struct Run {
    code: i32,
    stdout: String,
}

impl Run {
    fn lines_starting(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    fn closing_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

fn suite(args: &[&str]) -> Run {
    let out = Command::new(SUITE)
        .arg("suite")
        .args(args)
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    };
    eprintln!("{}", run.stdout);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    run
}

/// What this kernel lets the suite run: the plugin types whose link type
/// it cannot make (found by the suite's own probe, run here again), and
/// the one `skip` line the suite must print for each. Nothing else may be
/// skipped: a kernel with ipvlan and vlan runs them in full.
struct KernelGaps {
    lacking: Vec<&'static str>,
    skip_lines: Vec<String>,
}

fn kernel_gaps() -> KernelGaps {
    let mut gaps = KernelGaps {
        lacking: Vec::new(),
        skip_lines: Vec::new(),
    };
    for name in KNOWN_TYPES {
        let Some(subject) = Subject::for_plugin(name) else {
            continue;
        };
        let missing = subject
            .missing_kernel_support()
            .unwrap_or_else(|e| panic!("cannot probe the kernel for {name}'s link type: {e}"));
        if let Some(reason) = missing {
            gaps.lacking.push(name);
            gaps.skip_lines
                .push(format!("skip  {} -- {reason}", kernel_skip_id(name)));
        }
    }
    gaps
}

fn our_plugins() -> PathBuf {
    let dir = bin_dir();
    // Every type the suite has scenarios for, examples included.
    for plugin in KNOWN_TYPES {
        assert!(
            dir.join(plugin).is_file(),
            "{} is not built in {}: run `cargo build --workspace` first",
            plugin,
            dir.display()
        );
    }
    dir
}

#[test]
fn everything_passes_against_our_plugins() {
    let dir = our_plugins();
    let examples = examples_dir();
    let run = suite(&[
        dir.to_str().unwrap(),
        "--examples",
        examples.to_str().unwrap(),
    ]);
    assert_eq!(run.lines_starting("FAIL"), Vec::<&str>::new());
    assert_eq!(run.lines_starting("known"), Vec::<&str>::new());
    // Only what this kernel provably cannot run is skipped.
    let gaps = kernel_gaps();
    assert_eq!(run.lines_starting("skip"), gaps.skip_lines);
    assert_eq!(run.code, 0);
    let passed = run.lines_starting("ok").len();
    assert!(passed > 250, "only {passed} checks ran");
    if gaps.skip_lines.is_empty() {
        assert_eq!(run.closing_line(), format!("{passed} passed, 0 failed"));
    } else {
        assert_eq!(
            run.closing_line(),
            format!(
                "{passed} passed, 0 failed, {} skipped",
                gaps.skip_lines.len()
            )
        );
    }

    // Every spec version and verb of every plugin the kernel can run was
    // exercised.
    let plugins = [
        "loopback",
        "host-local",
        "bridge",
        "portmap",
        "macvlan",
        "ipvlan",
        "vlan",
        "host-device",
        "static",
        "tuning",
        "sbr",
        "ptp",
        "tap",
        "dummy",
    ];
    for plugin in plugins.iter().filter(|p| !gaps.lacking.contains(p)) {
        for version in conformance::testnet::ALL_VERSIONS {
            let add = format!("ok    {plugin}: {version} ADD gives a {version} result");
            assert!(run.stdout.contains(&add), "missing: {add}");
        }
        assert!(run
            .stdout
            .contains(&format!("ok    {plugin}: 1.1.0 STATUS succeeds")));
    }
    // The types whose scenarios the guest suite (qemu_suite.rs) no longer
    // repeats run them in full here: DEL at every version and with the
    // netns gone, and GC lease by lease where an IPAM lease is involved.
    for plugin in [
        "macvlan",
        "host-device",
        "static",
        "tuning",
        "sbr",
        "host-local",
    ] {
        for version in conformance::testnet::ALL_VERSIONS {
            let del = format!("ok    {plugin}: {version} DEL undoes ADD");
            assert!(run.stdout.contains(&del), "missing: {del}");
        }
        let gone = format!("ok    {plugin}: DEL with the netns gone");
        assert!(run.stdout.contains(&gone), "missing: {gone}");
    }
    for plugin in ["macvlan", "host-device", "host-local"] {
        let gc =
            format!("ok    {plugin}: GC with cni.dev/valid-attachments releases only stale leases");
        assert!(run.stdout.contains(&gc), "missing: {gc}");
    }
    // The chained plugins that start at a later spec version, from there.
    for (plugin, versions) in [
        ("bandwidth", &conformance::testnet::ALL_VERSIONS[2..]),
        ("firewall", &conformance::testnet::ALL_VERSIONS[4..]),
        ("vrf", &conformance::testnet::ALL_VERSIONS[3..]),
    ] {
        if gaps.lacking.contains(&plugin) {
            continue;
        }
        for version in versions {
            let add = format!("ok    {plugin}: {version} ADD gives a {version} result");
            assert!(run.stdout.contains(&add), "missing: {add}");
        }
    }
    // Every example file was validated and run.
    for file in std::fs::read_dir(&examples).unwrap() {
        let name = file.unwrap().file_name().into_string().unwrap();
        for what in ["parses", "validates against the plugins"] {
            let line = format!("ok    example {name}: {what}");
            assert!(run.stdout.contains(&line), "missing: {line}");
        }
        let ran = run.stdout.lines().any(|l| {
            l.starts_with(&format!("ok    example {name}: ADD succeeds"))
                || l.starts_with(&format!("ok    example {name}: ADD fails naming"))
        });
        assert!(ran, "{name} was not run");
    }
    assert!(run.stdout.contains(
        "ok    example 60-rdma-sriov.conflist: ADD succeeds, with every example before it attached (with rdma-sriov's test-only fake knobs"
    ));
}

#[test]
fn the_reference_passes_except_the_listed_known_issues() {
    if !Path::new(REFERENCE_DIR).join("bridge").is_file() {
        libcni::test_skip::skip(
            "the_reference_passes_except_the_listed_known_issues",
            &format!("the reference plugins are not installed in {REFERENCE_DIR} (package containernetworking-plugins)"),
        );
        return;
    }
    let examples = examples_dir();
    let run = suite(&[REFERENCE_DIR, "--examples", examples.to_str().unwrap()]);
    assert_eq!(run.lines_starting("FAIL"), Vec::<&str>::new());
    assert_eq!(run.code, 0);
    // Each listed issue shows, and nothing else is excused.
    let mut known: Vec<String> = run
        .lines_starting("known ")
        .iter()
        .map(|l| {
            l.trim_start_matches("known ")
                .split(" -- known issue")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    known.sort();
    // The issues of a plugin this kernel cannot run cannot show here
    // (qemu_suite.rs sees them on a kernel that has its link type).
    let gaps = kernel_gaps();
    let mut listed: Vec<String> = REFERENCE
        .iter()
        .map(|k| k.check_id.to_string())
        .filter(|id| {
            !gaps
                .lacking
                .iter()
                .any(|p| id.starts_with(&format!("{p}: ")))
        })
        .collect();
    listed.sort();
    assert_eq!(known, listed);
    // What cannot apply is said, not hidden: no GC or STATUS before 1.1.0,
    // no rdma-sriov.
    let skipped = run.lines_starting("skip");
    // Debian's 1.1.1 has no dummy or tap: no skip line for a plugin it
    // does not ship.
    for (plugin, line) in gaps.lacking.iter().zip(&gaps.skip_lines) {
        if Path::new(REFERENCE_DIR).join(plugin).is_file() {
            assert!(skipped.contains(&line.as_str()), "missing: {line}");
        }
    }
    assert!(skipped
        .iter()
        .any(|l| l.contains("example 60-rdma-sriov.conflist") && l.contains("has no rdma-sriov")));
    // Every example that names only the reference's plugins runs on it
    // (conflist-examples/ offers it no version above 1.0.0).
    for file in std::fs::read_dir(&examples).unwrap() {
        let name = file.unwrap().file_name().into_string().unwrap();
        if !name.contains("rdma-sriov") {
            assert!(
                !skipped
                    .iter()
                    .any(|l| l.contains(&format!("example {name}"))),
                "{name} skipped on the reference"
            );
        }
    }
    let passed = run.lines_starting("ok").len();
    assert_eq!(
        run.closing_line(),
        format!("{passed} passed, 0 failed, {} skipped", skipped.len())
    );
}

#[test]
fn a_plugin_that_does_nothing_fails_the_suite() {
    // A "loopback" that claims every version but succeeds silently at
    // everything else: the suite must fail it, line by line.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("loopback");
    std::fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$CNI_COMMAND\" = VERSION ]; then\n\
         echo '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.3.1\",\"1.0.0\",\"1.1.0\"]}'\nfi\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = suite(&[dir.path().to_str().unwrap(), "--only", "verbs,bad-input"]);
    assert_eq!(run.code, 1);
    let failed = run.lines_starting("FAIL");
    for expected in [
        "FAIL  loopback: 1.0.0 ADD gives a 1.0.0 result",
        "FAIL  loopback: bad input: empty stdin -> code 6",
        "FAIL  loopback: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        "FAIL  loopback: 0.3.1 ADD gives a 0.3.1 result",
        "FAIL  loopback: bad input: ADD without CNI_NETNS -> code 4 naming it",
        "FAIL  loopback: no CNI_COMMAND: exits 0 naming the supported versions on stderr",
    ] {
        assert!(
            failed.iter().any(|l| l.starts_with(expected)),
            "missing: {expected}"
        );
    }
    assert!(run
        .closing_line()
        .ends_with(&format!("{} failed", failed.len())));
}

#[test]
fn an_empty_directory_is_a_failure_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let run = suite(&[dir.path().to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert_eq!(run.closing_line(), "0 passed, 1 failed");
}
