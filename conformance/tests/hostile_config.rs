//! Hostile configurations (issue 28): what a namespace user who writes a
//! NetworkAttachmentDefinition (or a pod's annotations) could ask of the
//! plugins. [`CASES`] is a table; one runner ([`run_case`]) runs each
//! case's plugin call against a fresh scratch root holding an `allowed/`
//! tree (the folders of the node policy the call names) and an `outside/`
//! tree (the node's own files: a root SSH key file, a docker credential,
//! another network's state and leases, a FIFO), with links from the first
//! into the second. For our plugins it asserts the CNI code, a fragment of
//! the message (or of stderr, for a refused log setting), an optional
//! extra check, and that a snapshot of `outside/` (entries, bytes, modes,
//! owners, link targets) is the same before and after.
//!
//! The same table runs against the Debian reference plugins in
//! `/usr/lib/cni` where they have the plugin and the key: their result is
//! recorded, not asserted (they refuse little of this), and written beside
//! ours as a markdown table (`hostile-config.md` in the test's target
//! temporary folder, and on stderr) for docs/security.md.
//!
//! Every call runs inside a network namespace of the test standing for the
//! node (`ip netns exec`), so a plugin that gets as far as the node's
//! links or netfilter rules (the reference portmap does) changes only
//! that namespace. `CNI_NETNS` names no namespace, so nothing reaches a
//! pod, except for the cases marked `pod`, which get a namespace of the
//! test holding a veth `eth0`.
//!
//! The plugins are the workspace's built binaries ([`bin_dir`]: the build
//! `CNI_TEST_BIN_DIR` names, else the test's own target folder): build
//! them first (`cargo build` of the plugins named in [`CASES`]); a missing
//! one fails the test.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conformance::testnet::{bin_dir, TestNetns, REFERENCE_DIR};
use serde_json::{json, Value};

/// A reference plugin still running after this is recorded as hung and
/// killed (a FIFO opened for reading blocks for ever). Ours must finish
/// within it too: every case is refused before any wait.
const HANG: Duration = Duration::from_secs(10);

/// The scratch root of one case.
struct Scratch {
    dir: tempfile::TempDir,
    /// The pod namespace's path for `pod` cases, else one that does not
    /// exist.
    netns: String,
}

impl Scratch {
    fn new(netns: String) -> Scratch {
        let scratch = Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
            netns,
        };
        let (a, o) = (scratch.allowed(), scratch.outside());
        for folder in ["logs", "state/tuning", "state/hostdev", "devinfo", "creds"] {
            fs::create_dir_all(a.join(folder)).expect("allowed folder");
        }
        for folder in ["tuning", "leases/hostile"] {
            fs::create_dir_all(o.join(folder)).expect("outside folder");
        }
        write_mode(
            &o.join("authorized_keys"),
            b"ssh-ed25519 AAAA admin\n",
            0o600,
        );
        write_mode(&o.join("config.json"), br#"{"auths":{}}"#, 0o600);
        // Another network's saved tuning state, named as tuning names it.
        let saved = json!({"mtu": 1500, "network": "hostile"}).to_string();
        write_mode(&o.join("tuning/victim_eth0.json"), saved.as_bytes(), 0o600);
        // A lease of the attachment the calls name, in host-local's
        // layout: a DEL that follows the configuration removes it.
        write_mode(
            &o.join("leases/hostile/10.78.0.5"),
            b"hostile-ctr\r\neth0",
            0o644,
        );
        write_mode(&o.join("resolv.conf"), b"nameserver 192.0.2.53\n", 0o644);
        let fifo = nix::sys::stat::Mode::S_IRWXU;
        nix::unistd::mkfifo(&o.join("fifo"), fifo).expect("fifo");
        nix::unistd::mkfifo(&a.join("creds/fifo.pem"), fifo).expect("fifo");
        nix::unistd::mkfifo(&a.join("logs/fifo.log"), fifo).expect("fifo");
        // Links inside the allowed folders pointing out of them.
        let links = [
            ("authorized_keys", "logs/link.log"),
            ("config.json", "devinfo/link.json"),
            ("tuning/victim_eth0.json", "state/tuning/linked_eth0.json"),
            ("", "logs/outdir"),
            ("leases", "state/leaselink"),
            ("config.json", "creds/link.pem"),
            ("tuning", "state/tuninglink"),
        ];
        for (target, link) in links {
            symlink(o.join(target), a.join(link)).expect("link");
        }
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

    fn a(&self, rel: &str) -> String {
        self.allowed().join(rel).display().to_string()
    }

    fn o(&self, rel: &str) -> String {
        self.outside().join(rel).display().to_string()
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

/// What changed in `outside/`, for the report: `+new`, `-gone`, `~changed`.
fn changes(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (path, what) in after {
        match before.get(path) {
            None => out.push(format!("+{}", path.display())),
            Some(old) if old != what => out.push(format!("~{}", path.display())),
            Some(_) => {}
        }
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        out.push(format!("-{}", path.display()));
    }
    out
}

/// Whether the reference has the case's plugin and key.
#[derive(Clone, Copy)]
enum Reference {
    Runs,
    /// Not run: why (no such plugin or key).
    Lacks(&'static str),
}

type Text = fn(&Scratch) -> String;
type Conf = fn(&Scratch) -> Value;
type Env = fn(&Scratch) -> Vec<(&'static str, String)>;
type Check = fn(&Scratch) -> Result<(), String>;

/// One hostile call and what must come of it.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    plugin: &'static str,
    command: &'static str,
    conf: Conf,
    /// Variables over the defaults (`CNI_IFNAME=eth0`, ...).
    env: Env,
    /// The CNI error code; 0 for success.
    code: u64,
    /// Text the error message (or, for a log setting, stderr) contains.
    says: Text,
    reference: Reference,
    /// A further check after our call.
    check: Option<Check>,
    /// The call gets a pod namespace holding a veth `eth0`.
    pod: bool,
}

fn no_env(_: &Scratch) -> Vec<(&'static str, String)> {
    Vec::new()
}

/// A case refused with `code`, the message containing `says`.
const fn case(
    name: &'static str,
    plugin: &'static str,
    command: &'static str,
    conf: Conf,
    code: u64,
    says: Text,
) -> Case {
    Case {
        name,
        plugin,
        command,
        conf,
        env: no_env,
        code,
        says,
        reference: Reference::Runs,
        check: None,
        pod: false,
    }
}

impl Case {
    const fn env(self, env: Env) -> Case {
        Case { env, ..self }
    }

    const fn lacks(self, why: &'static str) -> Case {
        Case {
            reference: Reference::Lacks(why),
            ..self
        }
    }

    const fn check(self, check: Check) -> Case {
        Case {
            check: Some(check),
            ..self
        }
    }

    const fn pod(self) -> Case {
        Case { pod: true, ..self }
    }
}

const NO_LOG_KEYS: &str = "no log keys";
const NO_CLUSTER_IPAM: &str = "no cluster-ipam";
const NO_RDMA_SRIOV: &str = "no rdma-sriov";
const NO_DATA_DIR: &str = "no dataDir key";

// Configurations.

fn loopback_logging(log_file: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "loopback",
           "logLevel": "debug", "logFile": log_file})
}

/// cluster-ipam's leases go to the scratch root's state folder, never to
/// the node's default one (a call refused on a credential read has opened
/// its store already).
fn cluster_ipam(s: &Scratch, etcd: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "macvlan",
           "ipam": {"type": "cluster-ipam", "ranges": [[{"subnet": "10.77.0.0/24"}]],
                    "nodeName": "n1", "etcd": etcd, "dataDir": s.a("state/cipam")}})
}

fn https(s: &Scratch, more: Value) -> Value {
    let mut etcd = json!({"endpoints": ["https://192.0.2.1:2379"]});
    for (k, v) in more.as_object().into_iter().flatten() {
        etcd[k] = v.clone();
    }
    cluster_ipam(s, etcd)
}

fn host_local(ipam: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.1.0", "name": "hostile", "type": "macvlan",
           "ipam": {"type": "host-local", "subnet": "10.78.0.0/24"},
           "cni.dev/valid-attachments": []});
    for (k, v) in ipam.as_object().into_iter().flatten() {
        conf["ipam"][k] = v.clone();
    }
    conf
}

/// host-local at 1.0.0, the highest version the reference speaks.
fn host_local_10(ipam: Value) -> Value {
    let mut conf = host_local(ipam);
    conf["cniVersion"] = json!("1.0.0");
    conf
}

fn host_local_data(dir: String) -> Value {
    host_local_10(json!({ "dataDir": dir }))
}

/// The leases of a call that gets past `resolvConf` (the reference's) go
/// to the scratch root's state folder, never to the node's default one.
fn host_local_resolv(s: &Scratch, path: Value) -> Value {
    host_local_10(json!({ "resolvConf": path, "dataDir": s.a("state/leases") }))
}

fn tuning_gc(data_dir: Value) -> Value {
    json!({"cniVersion": "1.1.0", "name": "hostile", "type": "tuning", "dataDir": data_dir,
           "cni.dev/valid-attachments": []})
}

fn tuning_del(data_dir: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "tuning", "dataDir": data_dir})
}

fn tuning_sysctl(s: &Scratch, sysctl: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "tuning", "sysctl": sysctl,
           "logFile": s.a("logs/tuning.log"), "logLevel": "info",
           "dataDir": s.a("state/tuning"),
           "prevResult": {"cniVersion": "1.0.0",
                          "interfaces": [{"name": "eth0", "sandbox": s.netns}]}})
}

fn host_device(more: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "hostile", "type": "host-device"});
    for (k, v) in more.as_object().into_iter().flatten() {
        conf[k] = v.clone();
    }
    conf
}

fn rdma_del(device_info: String) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "rdma-sriov",
           "deviceID": "0000:af:00.2",
           "runtimeConfig": {"CNIDeviceInfoFile": device_info}})
}

fn rdma_state(s: &Scratch) -> Vec<(&'static str, String)> {
    vec![("RDMA_SRIOV_STATE_DIR", s.a("state/rdma"))]
}

fn prev_with_ip() -> Value {
    json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}],
           "ips": [{"address": "10.1.0.2/24", "interface": 0}]})
}

fn portmap(more: Value) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "hostile", "type": "portmap",
           "runtimeConfig": {"portMappings":
               [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
           "prevResult": prev_with_ip()});
    for (k, v) in more.as_object().into_iter().flatten() {
        conf[k] = v.clone();
    }
    conf
}

fn firewall_admin(chain: &str) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "firewall", "backend": "iptables",
           "iptablesAdminChainName": chain, "prevResult": prev_with_ip()})
}

fn dhcp(socket: String) -> Value {
    json!({"cniVersion": "1.0.0", "name": "hostile", "type": "macvlan",
           "ipam": {"type": "dhcp", "daemonSocketPath": socket}})
}

fn ifname_esc(_: &Scratch) -> Vec<(&'static str, String)> {
    vec![("CNI_IFNAME", "eth0\u{1b}[2J".to_string())]
}

fn ifname_newline(_: &Scratch) -> Vec<(&'static str, String)> {
    vec![("CNI_IFNAME", "eth0\nFORGED".to_string())]
}

fn ifname_dotdot(_: &Scratch) -> Vec<(&'static str, String)> {
    vec![("CNI_IFNAME", "../../x".to_string())]
}

fn ifname_long(_: &Scratch) -> Vec<(&'static str, String)> {
    vec![("CNI_IFNAME", "abcdefghijklmnopq".to_string())]
}

fn outside_text(s: &Scratch, rel: &str) -> String {
    format!("{:?}", s.outside().join(rel))
}

/// The tuning log holds one line per record: the value's line break is
/// written as `\n`, so the SSH key never starts a line.
fn log_has_no_forged_line(s: &Scratch) -> Result<(), String> {
    let log = fs::read_to_string(s.allowed().join("logs/tuning.log"))
        .map_err(|e| format!("no tuning log: {e}"))?;
    if !log.contains("1\\nssh-ed25519") {
        return Err(format!("the value is not in the log escaped:\n{log}"));
    }
    match log.lines().find(|l| l.starts_with("ssh-ed25519")) {
        Some(line) => Err(format!("a forged line: {line:?}")),
        None => Ok(()),
    }
}

/// The failed ADD rolled the sysctl back: the kernel had taken `1` of
/// the value before the short write was seen.
fn log_escaped_and_sysctl_restored(s: &Scratch) -> Result<(), String> {
    log_has_no_forged_line(s)?;
    let name = Path::new(&s.netns)
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no pod namespace")?;
    let out = Command::new("ip")
        .args(["netns", "exec", name, "cat"])
        .arg("/proc/sys/net/ipv4/conf/eth0/arp_ignore")
        .output()
        .map_err(|e| format!("cannot read the pod's arp_ignore: {e}"))?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "0" => Ok(()),
        other => Err(format!(
            "arp_ignore is {other:?} after the failed ADD, not 0"
        )),
    }
}

/// The link in tuning's dataDir and the file it points at are still there
/// (checked through the snapshot for the target; here for the link).
fn gc_left_the_link(s: &Scratch) -> Result<(), String> {
    let link = s.allowed().join("state/tuning/linked_eth0.json");
    match fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() => Ok(()),
        other => Err(format!("the link is gone or changed: {other:?}")),
    }
}

/// No message to look for (a success).
fn nothing(_: &Scratch) -> String {
    String::new()
}

/// The table. Findings are issue 28's numbers.
const CASES: &[Case] = &[
    // Finding 1: log files, and what reaches log lines.
    case(
        "finding 1: logFile names root's authorized_keys",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(s.o("authorized_keys"))),
        3,
        |s| {
            format!(
                "logFile {} is outside the folders allowed for logs",
                outside_text(s, "authorized_keys")
            )
        },
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile through a link inside the log folder",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(s.a("logs/link.log"))),
        3,
        |s| format!("cannot open log file {}", s.a("logs/link.log")),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile through a linked folder inside the log folder",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(s.a("logs/outdir/authorized_keys"))),
        3,
        |_| "cannot open log file".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile with ..",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(format!("{}/../../outside/x", s.a("logs")))),
        3,
        |_| "must be an absolute path without \".\" or \"..\" components".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile relative",
        "loopback",
        "CHECK",
        |_| loopback_logging(json!("x.log")),
        3,
        |_| "logFile \"x.log\" must be an absolute path".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile the log folder itself",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(s.a("logs"))),
        3,
        |_| "is itself one of the folders allowed for logs".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile in a folder whose name only starts like the log folder's",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(format!("{}-evil/x.log", s.a("logs")))),
        3,
        |_| "is outside the folders allowed for logs".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile with a NUL",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(format!("{}/x\u{0}.log", s.a("logs")))),
        3,
        |_| "must be an absolute path".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile /dev/null",
        "loopback",
        "CHECK",
        |_| loopback_logging(json!("/dev/null")),
        3,
        |_| "logFile \"/dev/null\" is outside the folders allowed for logs".into(),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "logFile a FIFO inside the log folder (no hang)",
        "loopback",
        "CHECK",
        |s| loopback_logging(json!(s.a("logs/fifo.log"))),
        3,
        |s| format!("cannot open log file {}", s.a("logs/fifo.log")),
    )
    .lacks(NO_LOG_KEYS),
    case(
        "finding 1: a sysctl value with a line break (short write; the log escapes it)",
        "tuning",
        "ADD",
        |s| {
            tuning_sysctl(
                s,
                json!({"net.ipv4.conf.eth0.arp_ignore": "1\nssh-ed25519 AAAA x"}),
            )
        },
        999,
        |_| "short write: 2 of 20 bytes taken".into(),
    )
    .check(log_escaped_and_sysctl_restored)
    .pod(),
    // Finding 2: device-info files.
    case(
        "finding 2: rdma-sriov DEL of a device-info path outside",
        "rdma-sriov",
        "DEL",
        |s| rdma_del(s.o("config.json")),
        0,
        nothing,
    )
    .env(rdma_state)
    .lacks(NO_RDMA_SRIOV),
    case(
        "rdma-sriov DEL of a device-info link inside the device-info folder",
        "rdma-sriov",
        "DEL",
        |s| rdma_del(s.a("devinfo/link.json")),
        0,
        nothing,
    )
    .env(rdma_state)
    .lacks(NO_RDMA_SRIOV),
    case(
        "rdma-sriov DEL of a device-info path climbing out by ..",
        "rdma-sriov",
        "DEL",
        |s| rdma_del(format!("{}/../../outside/config.json", s.a("devinfo"))),
        0,
        nothing,
    )
    .env(rdma_state)
    .lacks(NO_RDMA_SRIOV),
    // Finding 3: credentials.
    case(
        "finding 3: etcd password over http",
        "cluster-ipam",
        "ADD",
        |s| {
            cluster_ipam(
                s,
                json!({"endpoints": ["http://192.0.2.1:2379"], "username": "root",
                                "passwordFile": s.a("creds/pw")}),
            )
        },
        7,
        |_| "a password is only sent over TLS".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "finding 3: etcd credential file outside the credential folders",
        "cluster-ipam",
        "ADD",
        |s| https(s, json!({"caFile": s.o("config.json")})),
        7,
        |s| {
            format!(
                "ipam.etcd.caFile {} is outside the folders allowed for credentials",
                outside_text(s, "config.json")
            )
        },
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "etcd certFile outside the credential folders",
        "cluster-ipam",
        "ADD",
        |s| {
            https(
                s,
                json!({"caFile": s.a("creds/ca.pem"), "certFile": s.o("config.json"),
                         "keyFile": s.a("creds/key.pem")}),
            )
        },
        7,
        |_| "ipam.etcd.certFile".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "etcd passwordFile relative",
        "cluster-ipam",
        "ADD",
        |s| {
            https(
                s,
                json!({"caFile": s.a("creds/ca.pem"), "username": "root", "passwordFile": "pw"}),
            )
        },
        7,
        |_| "ipam.etcd.passwordFile \"pw\" must be an absolute path".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "etcd caFile climbing out of the credential folder by ..",
        "cluster-ipam",
        "ADD",
        |s| {
            https(
                s,
                json!({"caFile": format!("{}/../../outside/config.json", s.a("creds"))}),
            )
        },
        7,
        |_| "ipam.etcd.caFile".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "etcd keyFile /proc/self/environ",
        "cluster-ipam",
        "ADD",
        |s| {
            https(
                s,
                json!({"caFile": s.a("creds/ca.pem"), "certFile": s.a("creds/cert.pem"),
                         "keyFile": "/proc/self/environ"}),
            )
        },
        7,
        |_| "ipam.etcd.keyFile \"/proc/self/environ\" is outside".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    // Read when the client is built: a file-system error (5), not 7.
    case(
        "etcd caFile a link inside the credential folder",
        "cluster-ipam",
        "ADD",
        |s| https(s, json!({"caFile": s.a("creds/link.pem")})),
        7,
        |_| "link.pem cannot be used: it is reached through a symbolic link".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "etcd caFile a FIFO inside the credential folder (no hang)",
        "cluster-ipam",
        "ADD",
        |s| https(s, json!({"caFile": s.a("creds/fifo.pem")})),
        7,
        |_| "fifo.pem cannot be used: ".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    // Finding 5: unbounded reads.
    case(
        "finding 5: etcd passwordFile /dev/zero",
        "cluster-ipam",
        "ADD",
        |s| {
            https(
                s,
                json!({"caFile": "/dev/zero", "username": "root", "passwordFile": "/dev/zero"}),
            )
        },
        7,
        |_| "ipam.etcd.caFile \"/dev/zero\" is outside the folders allowed".into(),
    )
    .lacks(NO_CLUSTER_IPAM),
    case(
        "finding 5: resolvConf /dev/zero",
        "host-local",
        "ADD",
        |s| host_local_resolv(s, json!("/dev/zero")),
        7,
        |_| "/dev/zero is a character device, not a regular file".into(),
    ),
    case(
        "finding 5: resolvConf a FIFO",
        "host-local",
        "ADD",
        |s| host_local_resolv(s, json!(s.o("fifo"))),
        7,
        |_| "is a FIFO, not a regular file".into(),
    ),
    case(
        "resolvConf a folder",
        "host-local",
        "ADD",
        |s| host_local_resolv(s, json!(s.outside())),
        7,
        |_| "is a directory, not a regular file".into(),
    ),
    case(
        "resolvConf /dev/null",
        "host-local",
        "ADD",
        |s| host_local_resolv(s, json!("/dev/null")),
        7,
        |_| "/dev/null is a character device, not a regular file".into(),
    ),
    // Finding 6 and state folders: tuning, host-device, host-local.
    case(
        "finding 6: tuning GC in a dataDir outside the state folders",
        "tuning",
        "GC",
        |s| tuning_gc(json!(s.o("tuning"))),
        7,
        |s| {
            format!(
                "dataDir {} is outside the folders allowed for state",
                outside_text(s, "tuning")
            )
        },
    ),
    case(
        "tuning GC never follows a link in its own dataDir",
        "tuning",
        "GC",
        |s| tuning_gc(json!(s.a("state/tuning"))),
        0,
        nothing,
    )
    .check(gc_left_the_link),
    case(
        "tuning GC with a dataDir that is a link to another network's state",
        "tuning",
        "GC",
        |s| tuning_gc(json!(s.a("state/tuninglink"))),
        7,
        |_| "is reached through a symbolic link or a file".into(),
    ),
    case(
        "tuning DEL with a dataDir that is a link to another network's state",
        "tuning",
        "DEL",
        |s| tuning_del(json!(s.a("state/tuninglink"))),
        7,
        |_| "is reached through a symbolic link or a file".into(),
    )
    .env(|_| {
        vec![
            ("CNI_IFNAME", "eth0".to_string()),
            ("CNI_CONTAINERID", "victim".to_string()),
        ]
    }),
    case(
        "tuning DEL with a dataDir climbing out by ..",
        "tuning",
        "DEL",
        |s| tuning_del(json!(format!("{}/../../outside/tuning", s.a("state")))),
        7,
        |_| "dataDir".into(),
    ),
    case(
        "tuning GC in a folder under /etc (refused before any I/O)",
        "tuning",
        "GC",
        |_| tuning_gc(json!("/etc/cni-rs-hostile-test-absent")),
        7,
        |_| {
            "dataDir \"/etc/cni-rs-hostile-test-absent\" is outside the folders allowed for state"
                .into()
        },
    ),
    case(
        "tuning DEL with a relative dataDir",
        "tuning",
        "DEL",
        |_| tuning_del(json!("state/tuning")),
        7,
        |_| "dataDir \"state/tuning\" must be an absolute path".into(),
    ),
    case(
        "tuning DEL with a dataDir outside the state folders",
        "tuning",
        "DEL",
        |s| tuning_del(json!(s.outside())),
        7,
        |_| "is outside the folders allowed for state".into(),
    ),
    case(
        "tuning GC with a dataDir climbing out of the state folders by ..",
        "tuning",
        "GC",
        |s| tuning_gc(json!(format!("{}/../../outside/tuning", s.a("state")))),
        7,
        |_| "must be an absolute path without".into(),
    ),
    case(
        "tuning GC with a state folder itself as dataDir",
        "tuning",
        "GC",
        |s| tuning_gc(json!(s.a("state"))),
        7,
        |_| "is itself one of the folders allowed for state, which other networks share".into(),
    ),
    case(
        "host-device DEL with a dataDir outside the state folders",
        "host-device",
        "DEL",
        |s| host_device(json!({"device": "eth9", "dataDir": s.o("tuning")})),
        7,
        |s| {
            format!(
                "dataDir {} is outside the folders allowed for state",
                outside_text(s, "tuning")
            )
        },
    )
    .lacks(NO_DATA_DIR),
    case(
        "host-device DEL with a dataDir that is a link inside the state folder",
        "host-device",
        "DEL",
        |s| host_device(json!({"device": "eth9", "dataDir": s.a("state/tuninglink")})),
        7,
        |_| "is reached through a symbolic link or a file".into(),
    )
    .lacks(NO_DATA_DIR),
    case(
        "host-device ADD with a relative dataDir",
        "host-device",
        "ADD",
        |_| host_device(json!({"device": "eth9", "dataDir": "state"})),
        7,
        |_| "dataDir \"state\" must be an absolute path".into(),
    )
    .lacks(NO_DATA_DIR),
    case(
        "host-local ADD with a dataDir outside the state folders",
        "host-local",
        "ADD",
        |s| host_local_data(s.o("leases")),
        7,
        |s| {
            format!(
                "ipam.dataDir {} is outside the folders allowed for state",
                outside_text(s, "leases")
            )
        },
    ),
    case(
        "host-local DEL with a dataDir outside (another network's lease)",
        "host-local",
        "DEL",
        |s| host_local_data(s.o("leases")),
        7,
        |_| "is outside the folders allowed for state".into(),
    ),
    case(
        "host-local CHECK with a dataDir outside",
        "host-local",
        "CHECK",
        |s| host_local_data(s.o("leases")),
        7,
        |_| "is outside the folders allowed for state".into(),
    ),
    case(
        "host-local GC with a dataDir outside",
        "host-local",
        "GC",
        |s| host_local(json!({"dataDir": s.o("leases")})),
        7,
        |_| "is outside the folders allowed for state".into(),
    ),
    case(
        "host-local ADD with a dataDir that is a link inside the state folder",
        "host-local",
        "ADD",
        |s| host_local_data(s.a("state/leaselink")),
        7,
        |_| "is reached through a symbolic link or a file".into(),
    ),
    case(
        "host-local DEL with a dataDir that is a link inside the state folder",
        "host-local",
        "DEL",
        |s| host_local_data(s.a("state/leaselink")),
        7,
        |_| "is reached through a symbolic link or a file".into(),
    ),
    case(
        "host-local ADD with a dataDir climbing out by ..",
        "host-local",
        "ADD",
        |s| host_local_data(format!("{}/../../outside/leases", s.a("state"))),
        7,
        |_| "ipam.dataDir".into(),
    ),
    case(
        "host-local ADD with a relative dataDir",
        "host-local",
        "ADD",
        |_| host_local_data("leases".into()),
        7,
        |_| "ipam.dataDir \"leases\" must be an absolute path".into(),
    ),
    // Finding 7: interface names and iptables values.
    case(
        "finding 7: CNI_IFNAME with an escape sequence",
        "host-local",
        "ADD",
        |s| host_local_data(s.a("state/leases")),
        4,
        |_| "interface name contains control characters".into(),
    )
    .env(ifname_esc),
    case(
        "CNI_IFNAME with a line break",
        "host-local",
        "ADD",
        |s| host_local_data(s.a("state/leases")),
        4,
        |_| "interface name contains / or : or whitespace characters".into(),
    )
    .env(ifname_newline),
    case(
        "CNI_IFNAME with ..",
        "tuning",
        "DEL",
        |s| tuning_del(json!(s.a("state/tuning"))),
        4,
        |_| "interface name contains / or : or whitespace characters".into(),
    )
    .env(ifname_dotdot),
    case(
        "CNI_IFNAME of 17 characters",
        "host-local",
        "ADD",
        |s| host_local_data(s.a("state/leases")),
        4,
        |_| "interface name is too long".into(),
    )
    .env(ifname_long),
    case(
        "finding 7: portmap externalSetMarkChain with a line break",
        "portmap",
        "ADD",
        |_| portmap(json!({"externalSetMarkChain": "KUBE-MARK-MASQ\n-A INPUT -j ACCEPT"})),
        7,
        |_| "invalid externalSetMarkChain".into(),
    ),
    case(
        "portmap conditionsV4 with a line break",
        "portmap",
        "ADD",
        |_| portmap(json!({"conditionsV4": ["-s", "1.2.3.4\n-A INPUT -j ACCEPT"]})),
        7,
        |_| "invalid conditionsV4: a condition contains a line break or NUL".into(),
    ),
    case(
        "firewall iptablesAdminChainName with a line break",
        "firewall",
        "ADD",
        |_| firewall_admin("CNI-ADMIN\n-A INPUT -j ACCEPT"),
        7,
        |_| "invalid iptablesAdminChainName".into(),
    ),
    case(
        "firewall iptablesAdminChainName of 38 characters",
        "firewall",
        "ADD",
        |_| firewall_admin("CNI-ADMIN-AAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        7,
        |_| "a chain name has 1 to 28 characters".into(),
    ),
    // Interface and device keys.
    case(
        "bridge name with a line break",
        "bridge",
        "ADD",
        |_| json!({"cniVersion": "1.0.0", "name": "hostile", "type": "bridge", "bridge": "br\nx", "ipam": {}}),
        7,
        |_| "invalid bridge \"br\\nx\"".into(),
    ),
    case(
        "macvlan master with ..",
        "macvlan",
        "ADD",
        |_| json!({"cniVersion": "1.0.0", "name": "hostile", "type": "macvlan", "master": "../x", "ipam": {}}),
        7,
        |_| "invalid master \"../x\"".into(),
    ),
    case(
        "vrf vrfname with a /",
        "vrf",
        "ADD",
        |_| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "vrf", "vrfname": "../vrf",
                   "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/x"}]}})
        },
        7,
        |_| "invalid vrfname \"../vrf\"".into(),
    ),
    case(
        "host-device pciBusID climbing out of sysfs",
        "host-device",
        "ADD",
        |_| host_device(json!({"pciBusID": "../../../../etc"})),
        7,
        |_| "pciBusID \"../../../../etc\" is not a PCI address".into(),
    ),
    case(
        "host-device device with ..",
        "host-device",
        "ADD",
        |_| host_device(json!({"device": "../../etc"})),
        7,
        |_| "invalid device \"../../etc\"".into(),
    ),
    // Finding 4: test keys in the shipped build.
    case(
        "finding 4: rdma-sriov stateDir and sysfsRoot naming outside/",
        "rdma-sriov",
        "DEL",
        |s| {
            json!({"cniVersion": "1.0.0", "name": "hostile", "type": "rdma-sriov",
                   "deviceID": "0000:af:00.2", "stateDir": s.o("rdma"), "sysfsRoot": s.o("")})
        },
        0,
        nothing,
    )
    .env(rdma_state)
    .lacks(NO_RDMA_SRIOV),
    // Finding 8's key: where the dhcp plugin sends the configuration.
    case(
        "finding 8: dhcp daemonSocketPath outside the state folders",
        "dhcp",
        "ADD",
        |s| dhcp(s.o("config.json")),
        7,
        |s| {
            format!(
                "ipam.daemonSocketPath {} is outside the folders allowed for state",
                outside_text(s, "config.json")
            )
        },
    ),
    case(
        "dhcp daemonSocketPath a link inside the state folder",
        "dhcp",
        "DEL",
        |s| dhcp(s.a("state/leaselink")),
        7,
        |_| "ipam.daemonSocketPath".into(),
    ),
];

/// What one run printed and returned.
struct Outcome {
    /// `None`: killed after [`HANG`].
    exit: Option<i32>,
    stdout: String,
    stderr: String,
    changed: Vec<String>,
}

impl Outcome {
    /// The spec code: 0 for success, else the printed code (`u64::MAX`
    /// when none could be read).
    fn code(&self) -> u64 {
        match self.exit {
            Some(0) => 0,
            _ => serde_json::from_str::<Value>(&self.stdout)
                .ok()
                .and_then(|v| v["code"].as_u64())
                .unwrap_or(u64::MAX),
        }
    }

    /// One cell of the report.
    fn summary(&self) -> String {
        let mut text = match self.exit {
            None => format!("hung, killed after {} s", HANG.as_secs()),
            Some(0) => "exit 0".to_string(),
            Some(_) => {
                let msg = serde_json::from_str::<Value>(&self.stdout)
                    .ok()
                    .and_then(|v| v["msg"].as_str().map(str::to_string))
                    .unwrap_or_default();
                let msg: String = msg.chars().take(70).collect();
                format!("code {}: {}", self.code(), msg.replace('|', "/"))
            }
        };
        if !self.changed.is_empty() {
            text.push_str(&format!("; outside/ changed: {}", self.changed.join(" ")));
        }
        text.replace('\n', "\\n")
    }
}

/// Runs `case` with the plugin in `dir` inside `host`, in a fresh scratch
/// root; `pod` is the pod namespace for `pod` cases.
fn run_case(case: &Case, dir: &Path, host: &TestNetns, pod: &TestNetns) -> (Outcome, Scratch) {
    let netns = if case.pod {
        pod.path().display().to_string()
    } else {
        "/run/netns/cnitest-hostile-does-not-exist".to_string()
    };
    let scratch = Scratch::new(netns.clone());
    let before = scratch.snapshot();
    let mut cmd = Command::new("ip");
    // A relative path lands in the scratch root, never in the test's
    // working folder.
    cmd.current_dir(scratch.dir.path())
        .args(["netns", "exec", host.name()])
        .arg(dir.join(case.plugin))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", case.command)
        .env("CNI_CONTAINERID", "hostile-ctr")
        .env("CNI_NETNS", &netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", dir)
        .env(libcni::confine::POLICY_ENV, scratch.policy())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in (case.env)(&scratch) {
        cmd.env(key, value);
    }
    let stdin = serde_json::to_vec(&(case.conf)(&scratch)).expect("config");
    let (exit, stdout, stderr) = run_bounded(cmd, &stdin);
    let changed = changes(&before, &scratch.snapshot());
    let outcome = Outcome {
        exit,
        stdout,
        stderr,
        changed,
    };
    (outcome, scratch)
}

/// Runs `cmd` with `stdin`, killing it after [`HANG`].
fn run_bounded(mut cmd: Command, stdin: &[u8]) -> (Option<i32>, String, String) {
    let mut child = cmd.spawn().expect("spawn ip netns exec");
    if let Some(mut input) = child.stdin.take() {
        // The plugin may exit before reading: ignore EPIPE.
        let _ = input.write_all(stdin);
    }
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }),
    );
    let deadline = Instant::now() + HANG;
    let exit = loop {
        match child.try_wait().expect("wait") {
            Some(status) => break Some(status.code().unwrap_or(-1)),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let stdout = readers.0.join().unwrap_or_default();
    let stderr = readers.1.join().unwrap_or_default();
    (exit, stdout, stderr)
}

/// Our result against the case; `Err` says what is wrong.
fn judge(case: &Case, out: &Outcome, scratch: &Scratch) -> Result<(), String> {
    if !out.changed.is_empty() {
        return Err(format!("outside/ changed: {:?}", out.changed));
    }
    let says = (case.says)(scratch);
    let text = format!("{}\n{}", out.stdout, out.stderr);
    if out.code() != case.code || !text.contains(&says) {
        return Err(format!(
            "code {} (want {}), wanted {says:?} in:\n{text}",
            out.code(),
            case.code
        ));
    }
    match case.check {
        Some(check) => check(scratch),
        None => Ok(()),
    }
}

/// A pod namespace with a veth `eth0` (its peer `eth1` beside it).
fn pod_netns() -> TestNetns {
    let pod = TestNetns::new("hostp");
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ]);
    pod
}

#[test]
fn the_table_has_every_finding_and_at_least_50_cases() {
    assert!(CASES.len() >= 50, "{} cases", CASES.len());
    for finding in 1..=8 {
        let tag = format!("finding {finding}:");
        assert!(
            CASES.iter().any(|c| c.name.starts_with(&tag)),
            "no case for {tag}"
        );
    }
    let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len(), "two cases share a name");
}

#[test]
fn hostile_configurations_change_nothing_outside_the_allowed_places() {
    let ours = bin_dir();
    let host = TestNetns::new("hostile");
    let pod = pod_netns();
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    for case in CASES {
        let plugin = ours.join(case.plugin);
        assert!(
            plugin.exists(),
            "{} is not built: cargo build -p {}",
            plugin.display(),
            case.plugin
        );
        let (out, scratch) = run_case(case, &ours, &host, &pod);
        eprintln!("{}: {}", case.name, out.summary());
        if let Err(why) = judge(case, &out, &scratch) {
            failures.push(format!("{}: {why}", case.name));
        }
        rows.push((case, out.summary()));
    }
    // The reference beside ours: recorded, not asserted.
    let reference = Path::new(REFERENCE_DIR);
    let mut table = String::from("| case | ours | reference (Debian 1.1.1) |\n|---|---|---|\n");
    for (case, ours) in rows {
        let theirs = match case.reference {
            Reference::Lacks(why) => why.to_string(),
            Reference::Runs if !reference.join(case.plugin).exists() => {
                format!("no {} in {REFERENCE_DIR}", case.plugin)
            }
            Reference::Runs => run_case(case, reference, &host, &pod).0.summary(),
        };
        let name = format!("{} ({} {})", case.name, case.plugin, case.command);
        table.push_str(&format!("| {name} | {ours} | {theirs} |\n"));
    }
    eprintln!("\n{table}");
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-config.md");
    if let Err(e) = fs::write(&report, &table) {
        eprintln!("cannot write {}: {e}", report.display());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
