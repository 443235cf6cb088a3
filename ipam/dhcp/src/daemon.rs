//! `dhcp daemon`: holds the leases and keeps them alive.
//!
//! Flags (Go's flag syntax, `-x value`, `-x=value`, `--x`):
//! `-pidfile` (absolute), `-hostprefix` (prepended to the socket path and
//! every namespace path), `-socketpath` (default `/run/cni/dhcp.sock`),
//! `-timeout` (10s, one exchange), `-resendmax` (62s, longest retry delay),
//! `-resendtimeout` (208s, an acquisition's whole budget), `-broadcast`
//! (accepted; this client always asks for broadcast replies while it has
//! no address, which is what the flag was for), and this daemon's own
//! `-statedir` (default `/var/lib/cni/dhcp`) where leases are kept across
//! restarts. With systemd socket activation (`LISTEN_FDS`) the one socket
//! passed is used.
//!
//! Each lease has a maintenance thread: bound until T1, then renewing
//! (unicast, retried) until T2, then rebinding (broadcast) until expiry,
//! when the interface is set down and the lease dropped (as at once when
//! the server answers a renewal with DHCPNAK). It stops, keeping
//! nothing, when the namespace or interface is gone.
//!
//! Differences from the reference: leases persist (a restarted daemon
//! resumes those whose interface still exists); a lease whose maintenance
//! ended is dropped, so the next Allocate acquires a new one (the reference
//! keeps it and blocks the next call for that client); `DHCP.Check`,
//! `DHCP.GC` and `DHCP.Status` exist.

use nix::unistd::Gid;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use libcni::plugin_conf::PluginConf;
use nix::sys::signal::{SigSet, Signal};

use crate::client::{self, ClientError, Extend, Identity, Timing};
use crate::config::{DhcpConfig, DEFAULT_SOCKET_PATH};
use crate::gob::{Type, Value};
use crate::lease::{self, LeaseRecord, Store, Who, DEFAULT_STATE_DIR};
use crate::options;
use crate::rpc::{self, CallArgs, Reply, EMPTY, RESULT};

/// The first socket systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;
/// Retries while renewing or rebinding wait half the time left, at least this.
const MIN_EXTEND_RETRY: Duration = Duration::from_secs(1);
/// ... and at most this, so that a server back up is found soon.
const MAX_EXTEND_RETRY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct Flags {
    pub pidfile: String,
    pub host_prefix: String,
    pub socket_path: String,
    /// `-socketgroup`: a group name or number; empty is root only.
    pub socket_group: String,
    pub state_dir: String,
    pub timing: Timing,
    pub broadcast: bool,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            pidfile: String::new(),
            host_prefix: String::new(),
            socket_path: String::new(),
            socket_group: String::new(),
            state_dir: DEFAULT_STATE_DIR.to_string(),
            timing: Timing {
                timeout: Duration::from_secs(10),
                resend_max: Duration::from_secs(62),
                resend_timeout: Duration::from_secs(208),
            },
            broadcast: false,
        }
    }
}

const USAGE: &str = "Usage of daemon:
  -broadcast
    \tbroadcast DHCP leases
  -hostprefix string
    \toptional prefix to host root
  -pidfile string
    \toptional path to write daemon PID to
  -resendmax duration
    \toptional dhcp client resend max duration (default 1m2s)
  -resendtimeout duration
    \toptional dhcp client resend timeout duration (default 3m28s)
  -socketgroup string
    \tgroup (name or number) whose processes may use the socket: 0660 and
    \tserved when their effective group is it (default: root only, 0600)
  -socketpath string
    \toptional dhcp server socketpath
  -statedir string
    \tdirectory where leases are kept across restarts (default \"/var/lib/cni/dhcp\")
  -timeout duration
    \toptional dhcp client timeout duration (default 10s)
";

/// A Go duration: `300ms`, `1.5h`, `2h45m`, `10s` (a bare `0` too).
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Parses the flags after `daemon` as Go's flag package does: `-name`,
/// `--name`, `-name=value` or `-name value`; booleans take no separate
/// value; parsing stops at `--` or the first non-flag.
pub fn parse_flags(args: &[String]) -> Result<Flags, String> {
    let mut flags = Flags::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            break;
        }
        let body = arg.strip_prefix("--").unwrap_or(&arg[1..]);
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if name == "broadcast" {
            flags.broadcast = match inline.as_deref() {
                None | Some("1" | "t" | "T" | "true" | "TRUE" | "True") => true,
                Some("0" | "f" | "F" | "false" | "FALSE" | "False") => false,
                Some(v) => {
                    return Err(format!(
                        "invalid boolean value {v:?} for -broadcast: parse error"
                    ))
                }
            };
            continue;
        }
        let known = [
            "pidfile",
            "hostprefix",
            "socketpath",
            "socketgroup",
            "statedir",
            "timeout",
            "resendmax",
            "resendtimeout",
        ];
        if name == "h" || name == "help" {
            return Err(String::new());
        }
        if !known.contains(&name) {
            return Err(format!("flag provided but not defined: -{name}"));
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                i += 1;
                v.clone()
            }
        };
        let duration = |v: &str| {
            parse_go_duration(v)
                .ok_or_else(|| format!("invalid value {v:?} for flag -{name}: parse error"))
        };
        match name {
            "pidfile" => flags.pidfile = value,
            "hostprefix" => flags.host_prefix = value,
            "socketpath" => flags.socket_path = value,
            "socketgroup" => flags.socket_group = value,
            "statedir" => flags.state_dir = value,
            "timeout" => flags.timing.timeout = duration(&value)?,
            "resendmax" => flags.timing.resend_max = duration(&value)?,
            _ => flags.timing.resend_timeout = duration(&value)?,
        }
    }
    Ok(flags)
}

/// A lease with a running maintenance thread.
struct Active {
    record: Mutex<LeaseRecord>,
    stop: Mutex<Option<mpsc::Sender<()>>>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked thread leaves the data as consistent as it was (every
    // update is one assignment), so the poison is ignored.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Daemon {
    flags: Flags,
    store: Store,
    leases: Mutex<HashMap<String, Arc<Active>>>,
    /// Clients with a call in progress: one call per client at a time.
    busy: Mutex<HashSet<String>>,
    idle: Condvar,
}

/// Holds a client's turn; released on drop.
struct Turn<'a> {
    daemon: &'a Daemon,
    client_id: String,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.daemon.busy).remove(&self.client_id);
        self.daemon.idle.notify_all();
    }
}

impl Daemon {
    pub fn new(flags: Flags) -> Arc<Daemon> {
        let store = Store::new(&flags.state_dir);
        Arc::new(Daemon {
            flags,
            store,
            leases: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashSet::new()),
            idle: Condvar::new(),
        })
    }

    fn turn(&self, client_id: &str) -> Turn<'_> {
        let mut busy = lock(&self.busy);
        while busy.contains(client_id) {
            busy = self.idle.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        busy.insert(client_id.to_string());
        Turn {
            daemon: self,
            client_id: client_id.to_string(),
        }
    }

    fn netns_path(&self, netns: &str) -> PathBuf {
        PathBuf::from(format!("{}{netns}", self.flags.host_prefix))
    }

    /// Resumes the maintenance of the stored leases whose interface still
    /// exists; the others are forgotten.
    pub fn resume(self: &Arc<Daemon>) {
        let records = match self.store.load_all() {
            Ok(records) => records,
            Err(e) => {
                log::error!("cannot read leases in {}: {e}", self.store.dir().display());
                return;
            }
        };
        for record in records {
            if !client::link_exists(&self.netns_path(&record.netns), &record.ifname) {
                log::info!(
                    "{}: interface {} in {} is gone, lease of {} dropped",
                    record.client_id,
                    record.ifname,
                    record.netns,
                    record.ip
                );
                let _ = self.store.remove(&record.client_id);
                continue;
            }
            log::info!("{}: resuming lease of {}", record.client_id, record.ip);
            self.start(record);
        }
    }

    fn start(self: &Arc<Daemon>, record: LeaseRecord) {
        let client_id = record.client_id.clone();
        let (stop_tx, stop_rx) = mpsc::channel();
        let active = Arc::new(Active {
            record: Mutex::new(record),
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(None),
        });
        lock(&self.leases).insert(client_id.clone(), active.clone());
        let daemon = self.clone();
        let worker = active.clone();
        let spawned = thread::Builder::new()
            .name("dhcp-lease".into())
            .spawn(move || daemon.maintain(&worker, &stop_rx));
        match spawned {
            Ok(handle) => *lock(&active.thread) = Some(handle),
            Err(e) => log::error!("{client_id}: cannot start lease maintenance: {e}"),
        }
    }

    /// Drops a lease whose maintenance ended by itself.
    fn forget(&self, active: &Arc<Active>) {
        let client_id = lock(&active.record).client_id.clone();
        let mut leases = lock(&self.leases);
        if leases
            .get(&client_id)
            .is_some_and(|current| Arc::ptr_eq(current, active))
        {
            leases.remove(&client_id);
            let _ = self.store.remove(&client_id);
        }
    }

    /// The maintenance loop of one lease; returns when stopped, or when the
    /// lease ends (interface gone, or expired).
    fn maintain(&self, active: &Arc<Active>, stop: &mpsc::Receiver<()>) {
        let timeout = self.flags.timing.timeout;
        loop {
            let record = lock(&active.record).clone();
            let identity = record.identity(&self.flags.host_prefix);
            if !client::link_exists(&identity.netns, &identity.ifname) {
                log::info!(
                    "{}: interface gone, stopping maintenance of {}",
                    record.client_id,
                    record.ip
                );
                self.forget(active);
                return;
            }
            let now = lease::unix_now();
            if now >= record.expires_at() {
                log::warn!("{}: lease of {} expired", record.client_id, record.ip);
                if let Err(e) = client::set_link_down(&identity.netns, &identity.ifname) {
                    log::warn!("{}: {e}", record.client_id);
                }
                self.forget(active);
                return;
            }
            let wait = if now < record.renew_at() {
                Duration::from_secs(record.renew_at() - now)
            } else {
                let how = if now < record.rebind_at() {
                    Extend::Renew
                } else {
                    Extend::Rebind
                };
                match client::extend(&identity, &record.as_ack(), how, timeout) {
                    Ok(ack) if ack.ip == record.ip => {
                        let mut updated = lock(&active.record);
                        updated.rebound(&ack);
                        if let Err(e) = self.store.save(&updated) {
                            log::error!("{}: cannot save lease: {e}", updated.client_id);
                        }
                        log::info!(
                            "{}: lease of {} extended ({how:?}) for {} s",
                            updated.client_id,
                            updated.ip,
                            updated.lease_secs
                        );
                        continue;
                    }
                    Ok(ack) => {
                        // A server answering with another address has no
                        // lease for this one: it is lost at expiry.
                        log::warn!(
                            "{}: server offered {} instead of {}",
                            record.client_id,
                            ack.ip,
                            record.ip
                        );
                    }
                    Err(ClientError::Nak) => {
                        // RFC 2131 4.4.5: a NAK ends the lease at once.
                        log::warn!(
                            "{}: server refused to extend {} (DHCPNAK)",
                            record.client_id,
                            record.ip
                        );
                        if let Err(e) = client::set_link_down(&identity.netns, &identity.ifname) {
                            log::warn!("{}: {e}", record.client_id);
                        }
                        self.forget(active);
                        return;
                    }
                    Err(e) => log::warn!("{}: {how:?} failed: {e}", record.client_id),
                }
                let next = if how == Extend::Renew {
                    record.rebind_at()
                } else {
                    record.expires_at()
                };
                let left = Duration::from_secs(next.saturating_sub(lease::unix_now()));
                (left / 2).clamp(MIN_EXTEND_RETRY, MAX_EXTEND_RETRY)
            };
            match stop.recv_timeout(wait) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Stops a lease's maintenance and sends DHCPRELEASE (failures logged).
    fn release_active(&self, active: &Arc<Active>) {
        if let Some(stop) = lock(&active.stop).take() {
            let _ = stop.send(());
        }
        if let Some(handle) = lock(&active.thread).take() {
            let _ = handle.join();
        }
        let record = lock(&active.record).clone();
        let identity = record.identity(&self.flags.host_prefix);
        match client::release(&identity, &record.as_ack()) {
            Ok(()) => log::info!("{}: released {}", record.client_id, record.ip),
            Err(e) => log::warn!("{}: release of {} failed: {e}", record.client_id, record.ip),
        }
        if let Err(e) = self.store.remove(&record.client_id) {
            log::error!("{}: cannot remove lease file: {e}", record.client_id);
        }
    }

    fn call_parts(&self, args: &CallArgs) -> Result<(DhcpConfig, Who, String), String> {
        let config = DhcpConfig::load(&args.stdin_data, &args.args).map_err(|e| e.to_string())?;
        let network = network_name(&args.stdin_data)?;
        let client_id = options::client_id(&args.container_id, &network, &args.ifname);
        let who = Who {
            container_id: args.container_id.clone(),
            network,
            netns: args.netns.clone(),
        };
        Ok((config, who, client_id))
    }

    pub fn allocate(self: &Arc<Daemon>, args: &CallArgs) -> Reply {
        let (config, who, client_id) = self.call_parts(args)?;
        let _turn = self.turn(&client_id);
        if let Some(active) = lock(&self.leases).get(&client_id).cloned() {
            let record = lock(&active.record).clone();
            return Ok((Type::Struct(&RESULT), rpc::result_to_value(&record.result)));
        }
        let identity = Identity {
            netns: self.netns_path(&args.netns),
            ifname: args.ifname.clone(),
            client_id: client_id.clone(),
            sent: config.sent.clone(),
            requested: config.requested.clone(),
        };
        let ack = client::acquire(&identity, self.flags.timing).map_err(|e| e.to_string())?;
        let record = LeaseRecord::new(&identity, &who, &ack, config.priority);
        log::info!(
            "{client_id}: leased {}/{} for {} s",
            ack.ip,
            ack.mask,
            ack.lease_secs
        );
        if let Err(e) = self.store.save(&record) {
            // Served anyway: only a restart would lose it, as with the reference.
            log::error!("{client_id}: cannot save lease: {e}");
        }
        let result = record.result.clone();
        self.start(record);
        Ok((Type::Struct(&RESULT), rpc::result_to_value(&result)))
    }

    pub fn release(&self, args: &CallArgs) -> Reply {
        let network = network_name(&args.stdin_data)?;
        let client_id = options::client_id(&args.container_id, &network, &args.ifname);
        let _turn = self.turn(&client_id);
        let active = lock(&self.leases).remove(&client_id);
        match active {
            Some(active) => self.release_active(&active),
            None => {
                let _ = self.store.remove(&client_id);
            }
        }
        Ok(empty())
    }

    pub fn check(&self, args: &CallArgs) -> Reply {
        let network = network_name(&args.stdin_data)?;
        let client_id = options::client_id(&args.container_id, &network, &args.ifname);
        let active = lock(&self.leases).get(&client_id).cloned();
        match active {
            Some(active) => {
                let record = lock(&active.record).clone();
                Ok((Type::Struct(&RESULT), rpc::result_to_value(&record.result)))
            }
            None => Err(format!("no DHCP lease for {client_id:?}")),
        }
    }

    /// Releases the leases of the network that the runtime no longer lists.
    pub fn gc(&self, args: &CallArgs) -> Reply {
        let conf = PluginConf::from_slice(&args.stdin_data).map_err(|e| e.to_string())?;
        let valid: HashSet<(String, String)> = conf
            .valid_attachments
            .iter()
            .map(|a| (a.container_id.clone(), a.ifname.clone()))
            .collect();
        let stale: Vec<String> = lock(&self.leases)
            .iter()
            .filter_map(|(client_id, active)| {
                let record = lock(&active.record);
                let keep = record.network != conf.name
                    || valid.contains(&(record.container_id.clone(), record.ifname.clone()));
                (!keep).then(|| client_id.clone())
            })
            .collect();
        for client_id in stale {
            let _turn = self.turn(&client_id);
            let active = lock(&self.leases).remove(&client_id);
            if let Some(active) = active {
                log::info!("{client_id}: not a valid attachment, releasing");
                self.release_active(&active);
            }
        }
        Ok(empty())
    }

    fn handle(self: &Arc<Daemon>, method: &str, args: &Value) -> Reply {
        let args = CallArgs::from_value(args);
        match method {
            rpc::METHOD_ALLOCATE => self.allocate(&args),
            rpc::METHOD_RELEASE => self.release(&args),
            rpc::METHOD_CHECK => self.check(&args),
            rpc::METHOD_GC => self.gc(&args),
            rpc::METHOD_STATUS => Ok(empty()),
            // net/rpc's wording, which plugins test for.
            _ => Err(format!("rpc: can't find method {method}")),
        }
    }
}

fn empty() -> (Type, Value) {
    (Type::Struct(&EMPTY), Value::Struct(Vec::new()))
}

/// The network name of a configuration (part of the client ID).
fn network_name(stdin: &[u8]) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_slice(stdin).map_err(|e| format!("failed to load netconf: {e}"))?;
    Ok(value
        .get("name")
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string())
}

/// The listening socket: systemd's, or a new one at the socket path.
fn listener(flags: &Flags, group: Option<Gid>) -> Result<(UnixListener, Option<PathBuf>), String> {
    // As systemd's protocol says, the sockets are ours only when
    // LISTEN_PID names this process (not a parent that passed the
    // variables on).
    let for_us = std::env::var("LISTEN_PID").is_ok_and(|pid| pid == std::process::id().to_string());
    if let Some(count) = std::env::var("LISTEN_FDS").ok().filter(|_| for_us) {
        let count: i32 = count
            .parse()
            .map_err(|_| format!("invalid LISTEN_FDS {count:?}"))?;
        if count > 1 {
            return Err(format!(
                "Too many ({count}) FDs passed through socket activation"
            ));
        }
        if count == 1 {
            // SAFETY: systemd passes an open listening socket as fd 3 and
            // nothing else in this process owns it.
            let listener = unsafe { UnixListener::from_raw_fd(LISTEN_FDS_START) };
            return Ok((listener, None));
        }
    }
    let socket_path = if flags.socket_path.is_empty() {
        DEFAULT_SOCKET_PATH
    } else {
        &flags.socket_path
    };
    let path = PathBuf::from(format!("{}{socket_path}", flags.host_prefix));
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("Error creating socket directory {}: {e}", dir.display()))?;
    }
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("Error removing old socket {}: {e}", path.display())),
    }
    let listener = bind_private(&path, group)
        .map_err(|e| format!("Error getting listener: {}: {e}", path.display()))?;
    Ok((listener, Some(path)))
}

/// Binds the socket 0600 whatever the daemon's umask: whoever can connect
/// can make the daemon (root) run DHCP in any namespace path. The umask is
/// set around the bind, so the socket is never more open, and the mode is
/// set explicitly after it; only the main thread runs at this point.
fn bind_private(path: &Path, group: Option<Gid>) -> io::Result<UnixListener> {
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound?;
    // The group first, then the group's bits: never open to a group
    // that is not the configured one.
    let mode = match group {
        Some(gid) => {
            nix::unistd::chown(path, None, Some(gid)).map_err(io::Error::from)?;
            GROUP_SOCKET_MODE
        }
        None => SOCKET_MODE,
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// The socket's mode: root (the runtime) only.
pub const SOCKET_MODE: u32 = 0o600;
/// The socket's mode with `-socketgroup`: root and that group.
pub const GROUP_SOCKET_MODE: u32 = 0o660;

/// `-socketgroup`'s group: a number, or a name in `/etc/group`; empty is
/// none.
fn socket_group(value: &str) -> Result<Option<Gid>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    if let Ok(number) = value.parse::<u32>() {
        return Ok(Some(Gid::from_raw(number)));
    }
    // /etc/group itself rather than NSS: a statically linked glibc build
    // crashes in getgrnam (NSS modules cannot be loaded), and a group for
    // a root daemon's socket is a local one.
    let text = fs::read_to_string("/etc/group")
        .map_err(|e| format!("-socketgroup {value:?}: cannot read /etc/group: {e}"))?;
    let gid = text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let gid = fields.nth(1)?;
        (name == value).then(|| gid.parse::<u32>().ok()).flatten()
    });
    match gid {
        Some(gid) => Ok(Some(Gid::from_raw(gid))),
        None => Err(format!(
            "-socketgroup {value:?}: no such group in /etc/group"
        )),
    }
}

/// Whether the peer may be served: only uid 0 (the runtime runs plugins
/// as root). Checked on every connection, whatever the socket's mode
/// (systemd's socket, or one an administrator opened up).
fn peer_allowed(stream: &UnixStream, group: Option<Gid>) -> Result<(), String> {
    let creds = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    let in_group = group.is_some_and(|gid| gid.as_raw() == creds.gid());
    if creds.uid() != 0 && !in_group {
        let who = match group {
            Some(gid) => format!("root and group {gid}"),
            None => "root".to_string(),
        };
        return Err(format!(
            "refused a connection from uid {} gid {} (pid {}): only {who} are served",
            creds.uid(),
            creds.gid(),
            creds.pid()
        ));
    }
    Ok(())
}

fn write_pidfile(path: &str) -> Result<(), String> {
    if !Path::new(path).is_absolute() {
        return Err(format!("Error writing pidfile {path:?}: path not absolute"));
    }
    fs::write(path, std::process::id().to_string())
        .map_err(|e| format!("Error writing pidfile {path:?}: {e}"))
}

/// Removes the socket and the pidfile on SIGINT or SIGTERM, then exits.
/// Leases stay on disk for the next start.
fn handle_signals(socket: Option<PathBuf>, pidfile: String) -> Result<(), String> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals
        .thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Ok(signal) = signals.wait() {
                log::info!("received {signal}, exiting");
            }
            if let Some(socket) = socket {
                let _ = fs::remove_file(socket);
            }
            if !pidfile.is_empty() {
                let _ = fs::remove_file(&pidfile);
            }
            std::process::exit(0);
        })
        .map_err(|e| format!("cannot start signal thread: {e}"))?;
    Ok(())
}

fn serve_connection(daemon: &Arc<Daemon>, stream: UnixStream) {
    let handle = |method: &str, args: &Value| daemon.handle(method, args);
    if let Err(e) = rpc::serve(stream, &handle) {
        log::warn!("RPC connection: {e}");
    }
}

/// `dhcp daemon [flags]`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    env_logger::Builder::new()
        .filter_level(log::LevelFilter::Info)
        .parse_default_env()
        .init();
    let flags = match parse_flags(args) {
        Ok(flags) => flags,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            eprint!("{USAGE}");
            return 2;
        }
    };
    if flags.broadcast {
        log::info!("-broadcast: replies are always broadcast while no address is held");
    }
    if !flags.pidfile.is_empty() {
        if let Err(msg) = write_pidfile(&flags.pidfile) {
            log::error!("{msg}");
            return 1;
        }
    }
    let group = match socket_group(&flags.socket_group) {
        Ok(group) => group,
        Err(msg) => {
            log::error!("{msg}");
            return 1;
        }
    };
    let (listener, socket) = match listener(&flags, group) {
        Ok(found) => found,
        Err(msg) => {
            log::error!("{msg}");
            return 1;
        }
    };
    // Blocked before any other thread starts, so that all inherit the mask.
    if let Err(msg) = handle_signals(socket, flags.pidfile.clone()) {
        log::error!("{msg}");
        return 1;
    }
    let daemon = Daemon::new(flags);
    daemon.resume();
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(msg) = peer_allowed(&stream, group) {
                    log::warn!("{msg}");
                    continue;
                }
                let daemon = daemon.clone();
                let spawned = thread::Builder::new()
                    .name("dhcp-rpc".into())
                    .spawn(move || serve_connection(&daemon, stream));
                if let Err(e) = spawned {
                    log::error!("cannot serve a connection: {e}");
                }
            }
            Err(e) => log::warn!("accept: {e}"),
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m2s"), Some(Duration::from_secs(62)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("s"), None);
        assert_eq!(parse_go_duration("5x"), None);
    }

    #[test]
    fn go_flag_syntax() {
        let flags = parse_flags(&strings(&[
            "-socketpath",
            "/tmp/d.sock",
            "--timeout=2s",
            "-resendmax",
            "8s",
            "--resendtimeout",
            "10s",
            "-broadcast",
            "-statedir=/tmp/state",
            "-hostprefix",
            "/host",
        ]))
        .unwrap();
        assert_eq!(flags.socket_path, "/tmp/d.sock");
        assert_eq!(flags.timing.timeout, Duration::from_secs(2));
        assert_eq!(flags.timing.resend_max, Duration::from_secs(8));
        assert_eq!(flags.timing.resend_timeout, Duration::from_secs(10));
        assert!(flags.broadcast);
        assert_eq!(flags.state_dir, "/tmp/state");
        assert_eq!(flags.host_prefix, "/host");
        let defaults = parse_flags(&[]).unwrap();
        assert_eq!(defaults.timing.timeout, Duration::from_secs(10));
        assert_eq!(defaults.timing.resend_max, Duration::from_secs(62));
        assert_eq!(defaults.timing.resend_timeout, Duration::from_secs(208));
        assert_eq!(
            parse_flags(&strings(&["-nope"])).unwrap_err(),
            "flag provided but not defined: -nope"
        );
        assert_eq!(
            parse_flags(&strings(&["-timeout"])).unwrap_err(),
            "flag needs an argument: -timeout"
        );
        assert!(parse_flags(&strings(&["-timeout", "ten"])).is_err());
        assert!(parse_flags(&strings(&["-broadcast=maybe"])).is_err());
    }

    #[test]
    fn host_prefix_goes_before_namespace_paths() {
        let flags = Flags {
            host_prefix: "/host".into(),
            ..Flags::default()
        };
        let daemon = Daemon::new(flags);
        assert_eq!(
            daemon.netns_path("/run/netns/a"),
            PathBuf::from("/host/run/netns/a")
        );
        let record_identity = |prefix: &str| {
            let mut record = crate::lease::tests_support::record();
            record.netns = "/proc/1/ns/net".into();
            record.identity(prefix).netns
        };
        assert_eq!(
            record_identity("/host"),
            PathBuf::from("/host/proc/1/ns/net")
        );
        assert_eq!(record_identity(""), PathBuf::from("/proc/1/ns/net"));
    }

    #[test]
    fn pidfile_must_be_absolute() {
        assert_eq!(
            write_pidfile("run/x.pid").unwrap_err(),
            "Error writing pidfile \"run/x.pid\": path not absolute"
        );
    }
}
