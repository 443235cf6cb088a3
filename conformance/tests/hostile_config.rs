//! Hostile configurations (issue 28): what a namespace user who writes a
//! NetworkAttachmentDefinition could ask of the built plugins. Each case
//! runs one plugin call against a scratch root holding an `allowed/` tree
//! (the node policy's folders) and an `outside/` tree (the node's own
//! files: a root SSH key file, a docker credential, another network's
//! state), and asserts the exit code and message, and that a snapshot of
//! `outside/` (entries, bytes, modes, owners, link targets) is the same
//! before and after.
//!
//! The plugins are the workspace's built binaries ([`bin_dir`]): build them
//! first (`cargo build -p loopback -p tuning -p host-local -p cluster-ipam
//! -p rdma-sriov`); a missing one fails the test.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use conformance::testnet::{bin_dir, PluginCall};
use serde_json::{json, Value};

/// The scratch root of one case.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let scratch = Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let (a, o) = (scratch.allowed(), scratch.outside());
        for folder in ["logs", "state/tuning", "devinfo", "creds"] {
            fs::create_dir_all(a.join(folder)).expect("allowed folder");
        }
        fs::create_dir_all(o.join("tuning")).expect("outside folder");
        write_mode(
            &o.join("authorized_keys"),
            b"ssh-ed25519 AAAA admin\n",
            0o600,
        );
        write_mode(&o.join("config.json"), br#"{"auths":{}}"#, 0o600);
        // Another network's saved tuning state, named as tuning names it.
        let saved = json!({"mtu": 1500, "network": "hostile"}).to_string();
        write_mode(&o.join("tuning/victim_eth0.json"), saved.as_bytes(), 0o600);
        nix::unistd::mkfifo(&o.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        // Links inside the allowed folders pointing out of them.
        symlink(o.join("authorized_keys"), a.join("logs/link.log")).expect("link");
        symlink(o.join("config.json"), a.join("devinfo/link.json")).expect("link");
        symlink(
            o.join("tuning/victim_eth0.json"),
            a.join("state/tuning/linked_eth0.json"),
        )
        .expect("link");
        symlink(&o, a.join("logs/outdir")).expect("link");
        let policy = json!({"allow": {
            "logs": [a.join("logs")], "state": [a.join("state")],
            "deviceInfo": [a.join("devinfo")], "credentials": [a.join("creds")],
        }});
        write_mode(&scratch.policy(), policy.to_string().as_bytes(), 0o644);
        scratch
    }

    fn allowed(&self) -> PathBuf {
        self.dir.path().join("allowed")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.json")
    }

    /// `outside/`, entry by entry: what no call may change.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut entries = BTreeMap::new();
        walk(&self.outside(), &self.outside(), &mut entries);
        entries
    }
}

fn write_mode(path: &Path, bytes: &[u8], mode: u32) {
    fs::write(path, bytes).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn walk(root: &Path, dir: &Path, entries: &mut BTreeMap<PathBuf, String>) {
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let kind = meta.file_type();
        let what = if kind.is_symlink() {
            format!("link {}", fs::read_link(&path).expect("readlink").display())
        } else if kind.is_dir() {
            walk(root, &path, entries);
            "dir".to_string()
        } else if kind.is_file() {
            format!("file {:?}", fs::read(&path).expect("read"))
        } else {
            "other".to_string()
        };
        let rel = path.strip_prefix(root).expect("inside").to_path_buf();
        entries.insert(
            rel,
            format!(
                "{what} mode {:o} owner {}:{}",
                meta.mode(),
                meta.uid(),
                meta.gid()
            ),
        );
    }
}

/// One hostile call and what must come of it.
struct Case {
    name: &'static str,
    plugin: &'static str,
    command: &'static str,
    conf: fn(&Scratch) -> Value,
    env: fn(&Scratch) -> Vec<(&'static str, String)>,
    /// The CNI error code; 0 for success.
    code: u64,
    /// Text the error message (or, for a log setting, stderr) contains.
    says: fn(&Scratch) -> String,
}

fn no_env(_: &Scratch) -> Vec<(&'static str, String)> {
    Vec::new()
}

fn loopback_logging(log_file: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "loopback",
           "logLevel": "debug", "logFile": log_file})
}

fn cluster_ipam(etcd: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "macvlan",
           "ipam": {"type": "cluster-ipam", "ranges": [[{"subnet": "10.77.0.0/24"}]],
                    "nodeName": "n1", "etcd": etcd}})
}

fn host_local_resolv(path: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "macvlan",
           "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "resolvConf": path}})
}

fn tuning_gc(data_dir: Value) -> Value {
    json!({"cniVersion": "1.1.0", "name": "hostile", "type": "tuning", "dataDir": data_dir,
           "cni.dev/valid-attachments": []})
}

fn outside_text(s: &Scratch, rel: &str) -> String {
    format!("{:?}", s.outside().join(rel))
}

const CASES: &[Case] = &[
    Case {
        name: "finding 1: logFile names root's authorized_keys",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| loopback_logging(json!(s.outside().join("authorized_keys"))),
        env: no_env,
        code: 3,
        says: |s| {
            format!(
                "logFile {} is outside the folders allowed for logs",
                outside_text(s, "authorized_keys")
            )
        },
    },
    Case {
        name: "logFile through a link inside the log folder",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| loopback_logging(json!(s.allowed().join("logs/link.log"))),
        env: no_env,
        code: 3,
        says: |s| {
            format!(
                "cannot open log file {}",
                s.allowed().join("logs/link.log").display()
            )
        },
    },
    Case {
        name: "logFile through a linked folder inside the log folder",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| loopback_logging(json!(s.allowed().join("logs/outdir/authorized_keys"))),
        env: no_env,
        code: 3,
        says: |_| "cannot open log file".to_string(),
    },
    Case {
        name: "logFile with ..",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| {
            loopback_logging(json!(format!(
                "{}/logs/../../outside/x",
                s.allowed().display()
            )))
        },
        env: no_env,
        code: 3,
        says: |_| "must be an absolute path without \".\" or \"..\" components".to_string(),
    },
    Case {
        name: "logFile relative",
        plugin: "loopback",
        command: "CHECK",
        conf: |_| loopback_logging(json!("x.log")),
        env: no_env,
        code: 3,
        says: |_| "logFile \"x.log\" must be an absolute path".to_string(),
    },
    Case {
        name: "finding 2: rdma-sriov DEL of a device-info path outside",
        plugin: "rdma-sriov",
        command: "DEL",
        conf: |s| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "rdma-sriov",
                   "deviceID": "0000:af:00.2",
                   "runtimeConfig": {"CNIDeviceInfoFile": s.outside().join("config.json")}})
        },
        env: |s| {
            vec![(
                "RDMA_SRIOV_STATE_DIR",
                s.allowed().join("state/rdma").display().to_string(),
            )]
        },
        code: 0,
        says: |_| String::new(),
    },
    Case {
        name: "finding 3: etcd password over http",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(
                json!({"endpoints": ["http://192.0.2.1:2379"], "username": "root",
                                "passwordFile": s.allowed().join("creds/pw")}),
            )
        },
        env: no_env,
        code: 7,
        says: |_| "a password is only sent over TLS".to_string(),
    },
    Case {
        name: "finding 3: etcd credential file outside the credential folders",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(json!({"endpoints": ["https://192.0.2.1:2379"],
                                "caFile": s.outside().join("config.json")}))
        },
        env: no_env,
        code: 7,
        says: |s| {
            format!(
                "ipam.etcd.caFile {} is outside the folders allowed for credentials",
                outside_text(s, "config.json")
            )
        },
    },
    Case {
        name: "finding 5: etcd passwordFile /dev/zero",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |_| {
            cluster_ipam(
                json!({"endpoints": ["https://192.0.2.1:2379"], "caFile": "/dev/zero",
                                "username": "root", "passwordFile": "/dev/zero"}),
            )
        },
        env: no_env,
        code: 7,
        says: |_| "ipam.etcd.caFile \"/dev/zero\" is outside the folders allowed".to_string(),
    },
    Case {
        name: "finding 5: resolvConf /dev/zero",
        plugin: "host-local",
        command: "ADD",
        conf: |_| host_local_resolv(json!("/dev/zero")),
        env: no_env,
        code: 7,
        says: |_| "/dev/zero is a character device, not a regular file".to_string(),
    },
    Case {
        name: "finding 5: resolvConf a FIFO",
        plugin: "host-local",
        command: "ADD",
        conf: |s| host_local_resolv(json!(s.outside().join("fifo"))),
        env: no_env,
        code: 7,
        says: |_| "is a FIFO, not a regular file".to_string(),
    },
    Case {
        name: "finding 6: tuning GC in a dataDir outside the state folders",
        plugin: "tuning",
        command: "GC",
        conf: |s| tuning_gc(json!(s.outside().join("tuning"))),
        env: no_env,
        code: 7,
        says: |s| {
            format!(
                "dataDir {} is outside the folders allowed for state",
                outside_text(s, "tuning")
            )
        },
    },
    Case {
        name: "tuning GC never follows a link in its own dataDir",
        plugin: "tuning",
        command: "GC",
        conf: |s| tuning_gc(json!(s.allowed().join("state/tuning"))),
        env: no_env,
        code: 0,
        says: |_| String::new(),
    },
    Case {
        name: "tuning DEL with a dataDir climbing out by ..",
        plugin: "tuning",
        command: "DEL",
        conf: |s| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "tuning",
                   "dataDir": format!("{}/state/../../outside/tuning", s.allowed().display())})
        },
        env: no_env,
        code: 7,
        says: |_| "dataDir".to_string(),
    },
    Case {
        name: "etcd certFile outside the credential folders",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(json!({"endpoints": ["https://192.0.2.1:2379"],
                                "caFile": s.allowed().join("creds/ca.pem"),
                                "certFile": s.outside().join("config.json"),
                                "keyFile": s.allowed().join("creds/key.pem")}))
        },
        env: no_env,
        code: 7,
        says: |_| "ipam.etcd.certFile".to_string(),
    },
    Case {
        name: "etcd passwordFile relative",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(json!({"endpoints": ["https://192.0.2.1:2379"],
                                "caFile": s.allowed().join("creds/ca.pem"),
                                "username": "root", "passwordFile": "pw"}))
        },
        env: no_env,
        code: 7,
        says: |_| "ipam.etcd.passwordFile \"pw\" must be an absolute path".to_string(),
    },
    Case {
        name: "resolvConf a folder",
        plugin: "host-local",
        command: "ADD",
        conf: |s| host_local_resolv(json!(s.outside())),
        env: no_env,
        code: 7,
        says: |_| "is a directory, not a regular file".to_string(),
    },
    Case {
        name: "tuning GC in a folder under /etc (refused before any I/O)",
        plugin: "tuning",
        command: "GC",
        conf: |_| tuning_gc(json!("/etc/cni-rs-hostile-test-absent")),
        env: no_env,
        code: 7,
        says: |_| {
            "dataDir \"/etc/cni-rs-hostile-test-absent\" is outside the folders allowed for state"
                .to_string()
        },
    },
    Case {
        name: "tuning DEL with a relative dataDir",
        plugin: "tuning",
        command: "DEL",
        conf: |_| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "tuning",
                   "dataDir": "state/tuning"})
        },
        env: no_env,
        code: 7,
        says: |_| "dataDir \"state/tuning\" must be an absolute path".to_string(),
    },
    Case {
        name: "tuning DEL with a dataDir outside the state folders",
        plugin: "tuning",
        command: "DEL",
        conf: |s| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "tuning",
                   "dataDir": s.outside()})
        },
        env: no_env,
        code: 7,
        says: |_| "is outside the folders allowed for state".to_string(),
    },
    Case {
        name: "logFile the log folder itself",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| loopback_logging(json!(s.allowed().join("logs"))),
        env: no_env,
        code: 3,
        says: |_| "is outside the folders allowed for logs".to_string(),
    },
    Case {
        name: "logFile in a folder whose name only starts like the log folder's",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| {
            loopback_logging(json!(format!(
                "{}-evil/x.log",
                s.allowed().join("logs").display()
            )))
        },
        env: no_env,
        code: 3,
        says: |_| "is outside the folders allowed for logs".to_string(),
    },
    Case {
        name: "logFile with a NUL",
        plugin: "loopback",
        command: "CHECK",
        conf: |s| {
            loopback_logging(json!(format!(
                "{}/x\u{0}.log",
                s.allowed().join("logs").display()
            )))
        },
        env: no_env,
        code: 3,
        says: |_| "must be an absolute path".to_string(),
    },
    Case {
        name: "logFile /dev/null",
        plugin: "loopback",
        command: "CHECK",
        conf: |_| loopback_logging(json!("/dev/null")),
        env: no_env,
        code: 3,
        says: |_| "logFile \"/dev/null\" is outside the folders allowed for logs".to_string(),
    },
    Case {
        name: "rdma-sriov DEL of a device-info link inside the device-info folder",
        plugin: "rdma-sriov",
        command: "DEL",
        conf: |s| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "rdma-sriov",
                   "deviceID": "0000:af:00.2",
                   "runtimeConfig": {"CNIDeviceInfoFile": s.allowed().join("devinfo/link.json")}})
        },
        env: |s| {
            vec![(
                "RDMA_SRIOV_STATE_DIR",
                s.allowed().join("state/rdma").display().to_string(),
            )]
        },
        code: 0,
        says: |_| String::new(),
    },
    Case {
        name: "etcd caFile climbing out of the credential folder by ..",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(json!({"endpoints": ["https://192.0.2.1:2379"],
                "caFile": format!("{}/creds/../../outside/config.json", s.allowed().display())}))
        },
        env: no_env,
        code: 7,
        says: |_| "ipam.etcd.caFile".to_string(),
    },
    Case {
        name: "etcd keyFile /proc/self/environ",
        plugin: "cluster-ipam",
        command: "ADD",
        conf: |s| {
            cluster_ipam(json!({"endpoints": ["https://192.0.2.1:2379"],
                                "caFile": s.allowed().join("creds/ca.pem"),
                                "certFile": s.allowed().join("creds/cert.pem"),
                                "keyFile": "/proc/self/environ"}))
        },
        env: no_env,
        code: 7,
        says: |_| "ipam.etcd.keyFile \"/proc/self/environ\" is outside".to_string(),
    },
    Case {
        name: "resolvConf /dev/null",
        plugin: "host-local",
        command: "ADD",
        conf: |_| host_local_resolv(json!("/dev/null")),
        env: no_env,
        code: 7,
        says: |_| "/dev/null is a character device, not a regular file".to_string(),
    },
    Case {
        name: "tuning GC with a dataDir climbing out of the state folders by ..",
        plugin: "tuning",
        command: "GC",
        conf: |s| {
            tuning_gc(json!(format!(
                "{}/state/../../outside/tuning",
                s.allowed().display()
            )))
        },
        env: no_env,
        code: 7,
        says: |_| "must be an absolute path without".to_string(),
    },
    Case {
        name: "tuning GC with a state folder itself as dataDir",
        plugin: "tuning",
        command: "GC",
        conf: |s| tuning_gc(json!(s.allowed().join("state"))),
        env: no_env,
        code: 7,
        says: |_| "is outside the folders allowed for state".to_string(),
    },
];

fn run(case: &Case, scratch: &Scratch) -> conformance::testnet::PluginOutcome {
    let plugin = bin_dir().join(case.plugin);
    assert!(
        plugin.exists(),
        "{} is not built: cargo build -p {}",
        plugin.display(),
        case.plugin
    );
    let mut call = PluginCall::new(case.command)
        .var("CNI_CONTAINERID", "hostile-ctr")
        .var("CNI_NETNS", "/run/netns/cnitest-hostile-does-not-exist")
        .var("CNI_IFNAME", "eth0")
        .var(
            libcni::confine::POLICY_ENV,
            scratch.policy().display().to_string(),
        )
        .stdin_json(&(case.conf)(scratch));
    for (key, value) in (case.env)(scratch) {
        call = call.var(key, value);
    }
    call.run(&plugin)
}

#[test]
fn hostile_configurations_change_nothing_outside_the_allowed_places() {
    let mut failures = Vec::new();
    for case in CASES {
        let scratch = Scratch::new();
        let before = scratch.snapshot();
        let out = run(case, &scratch);
        let after = scratch.snapshot();
        if before != after {
            failures.push(format!(
                "{}: outside/ changed: {before:?} -> {after:?}",
                case.name
            ));
        }
        let code = if out.code == 0 { 0 } else { out.error_code() };
        eprintln!(
            "{}: exit {} code {code}: {}",
            case.name,
            out.code,
            out.stdout.trim()
        );
        let says = (case.says)(&scratch);
        let text = format!("{}\n{}", out.stdout, out.stderr);
        if code != case.code || !text.contains(&says) {
            failures.push(format!(
                "{}: code {code} (want {}), wanted {says:?} in:\n{text}",
                case.name, case.code
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
