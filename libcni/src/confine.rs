//! Where a network configuration may point the plugins at host files.
//!
//! With Multus a namespace user writes the whole configuration, so a key
//! naming a host path the plugin writes, deletes, chmods, or reads and
//! sends elsewhere would make that user root on the node. Such a key is
//! accepted only inside its place's default folders ([`Place::defaults`])
//! or inside folders the node's administrator allows in a node-local
//! policy file ([`POLICY_PATH`], format in [`Policy`]; docs/security.md).
//!
//! The check is lexical first (absolute, no `.` or `..`, under an allowed
//! folder), then every open resolves the rest of the path beneath the
//! allowed folder without following any symbolic link: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or, on kernels before 5.6
//! (`ENOSYS`), one `O_NOFOLLOW` open per component. The allowed folder's
//! own path is the administrator's and may hold links (`/var/run`).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde::Deserialize;

use crate::error::{CniError, ErrorCode, ToCniError};

mod folder;
pub use folder::confine_folder;

/// The node's policy file: root-owned, not writable by group or others.
pub const POLICY_PATH: &str = "/etc/cni/cni-rs-policy.json";
/// Another policy file, set in the runtime's environment (the
/// administrator's, never the network configuration's): tests use it.
pub const POLICY_ENV: &str = "CNI_RS_POLICY_FILE";
/// Set by [`override_policy_file`].
static POLICY_OVERRIDE: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// For tests that run a plugin inside their own process (no environment
/// of its own): [`Places::node`] reads `path` from now on. Nothing a
/// network configuration sets reaches this.
#[doc(hidden)]
pub fn override_policy_file(path: &Path) {
    if let Ok(mut slot) = POLICY_OVERRIDE.lock() {
        *slot = Some(path.to_path_buf());
    }
}

/// A policy file is a few lines.
const POLICY_CAP: u64 = 64 * 1024;

/// What a key's path is for; each place has its default folders and its
/// policy setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `logFile`.
    Logs,
    /// `runtimeConfig.CNIDeviceInfoFile`.
    DeviceInfo,
    /// State folders (`dataDir`, `stateDir`).
    State,
    /// Credential files sent elsewhere (`passwordFile`, `caFile`, ...).
    Credentials,
}

impl Place {
    /// The policy file's name for the place (`"allow": {"logs": [...]}`).
    pub fn setting(self) -> &'static str {
        match self {
            Place::Logs => "logs",
            Place::DeviceInfo => "deviceInfo",
            Place::State => "state",
            Place::Credentials => "credentials",
        }
    }

    /// The folders allowed without a policy file.
    pub fn defaults(self) -> &'static [&'static str] {
        match self {
            Place::Logs => &["/var/log/cni-rs"],
            // Multus and the device plugins write here; /var/run is a link
            // to /run on current systems, and either spelling is used.
            Place::DeviceInfo => &[
                "/var/run/k8s.cni.cncf.io/devinfo",
                "/run/k8s.cni.cncf.io/devinfo",
            ],
            Place::State => &["/var/lib/cni", "/run/cni"],
            Place::Credentials => &["/etc/cni/cluster-ipam"],
        }
    }
}

/// The policy file: `{"allow": {"logs": ["/srv/log"], "state": [...],
/// "deviceInfo": [...], "credentials": [...]}, "clusterIpam": {...}}`.
/// Every folder is absolute and free of `.` and `..`; unknown keys are
/// errors (a misspelt setting must not silently allow nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub allow: Allow,
    /// cluster-ipam's etcd settings pinned for every network of the node.
    #[serde(default, rename = "clusterIpam")]
    pub cluster_ipam: Option<EtcdPin>,
}

/// etcd settings the administrator pins (`"clusterIpam": {...}`): a
/// configuration naming another value for a pinned key is refused, one
/// leaving it out gets the pinned value. What is not pinned stays the
/// configuration's. Credentials pinned without `endpoints` and `prefix`
/// are refused: a configuration could then send them to its own endpoint
/// or use them on other keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdPin {
    pub endpoints: Option<Vec<String>>,
    pub prefix: Option<String>,
    pub node_name: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
}

impl EtcdPin {
    fn check(&self) -> Result<(), String> {
        if self.endpoints.as_ref().is_some_and(Vec::is_empty) {
            return Err("clusterIpam.endpoints must list at least one endpoint".into());
        }
        let files = [
            ("caFile", &self.ca_file),
            ("certFile", &self.cert_file),
            ("keyFile", &self.key_file),
            ("passwordFile", &self.password_file),
        ];
        for (key, file) in files {
            if file.as_deref().is_some_and(|f| !is_plain_absolute(f)) {
                return Err(format!(
                    "clusterIpam.{key} must be an absolute path without \".\" or \"..\""
                ));
            }
        }
        let credentials = files.iter().any(|(_, f)| f.is_some()) || self.username.is_some();
        if credentials && (self.endpoints.is_none() || self.prefix.is_none()) {
            return Err(
                "clusterIpam pins credentials but not both endpoints and prefix: \
                 a configuration could send them elsewhere or use them on other keys"
                    .into(),
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    #[serde(default)]
    pub logs: Vec<PathBuf>,
    #[serde(default, rename = "deviceInfo")]
    pub device_info: Vec<PathBuf>,
    #[serde(default)]
    pub state: Vec<PathBuf>,
    #[serde(default)]
    pub credentials: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error(
        "{key} {path:?} is outside the folders allowed for {setting} ({allowed}); \
         the node's administrator can allow a folder with \"allow\": {{\"{setting}\": [\"/folder\"]}} in {policy}"
    )]
    Outside {
        key: String,
        path: PathBuf,
        setting: &'static str,
        allowed: String,
        policy: String,
    },
    /// Shared by every configuration: a plugin's files there could meet
    /// another network's, and its cleanup would remove theirs.
    #[error(
        "{key} {path:?} is itself one of the folders allowed for {setting}, \
         which other networks share; name a folder inside it"
    )]
    AllowedFolderItself {
        key: String,
        path: PathBuf,
        setting: &'static str,
    },
    #[error("{key} {path:?} must be an absolute path without \".\" or \"..\" components")]
    NotPlain { key: String, path: PathBuf },
    #[error(
        "{key} {path:?} is reached through a symbolic link or a file, \
         which is not followed inside the allowed folders"
    )]
    Link { key: String, path: PathBuf },
    #[error("policy file {path}: {reason}")]
    Policy { path: String, reason: String },
    #[error("{key} {path:?}: {source}")]
    Io {
        key: String,
        path: PathBuf,
        source: io::Error,
    },
}

impl ToCniError for ConfineError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            ConfineError::Io { .. } => ErrorCode::Io,
            _ => ErrorCode::InvalidNetworkConfig,
        };
        CniError::new(code, self.to_string())
    }
}

/// The allowed folders of this node: defaults plus the policy file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    policy: Policy,
    policy_path: String,
}

/// Defaults only, as with no policy file at [`POLICY_PATH`].
impl Default for Places {
    fn default() -> Self {
        Places::with_policy(Policy::default(), POLICY_PATH)
    }
}

impl Places {
    /// The node's places: the policy file named by [`POLICY_ENV`] in the
    /// environment, else [`POLICY_PATH`]; no file means defaults only.
    pub fn node() -> Result<Places, ConfineError> {
        let overridden = POLICY_OVERRIDE.lock().ok().and_then(|p| p.clone());
        let path = overridden
            .or_else(|| std::env::var_os(POLICY_ENV).map(PathBuf::from))
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from(POLICY_PATH));
        Places::load(&path)
    }

    /// The places of the policy file at `path`.
    ///
    /// One configuration may have several confined keys, each checked
    /// through [`Places::node`]: the places of the last file read are kept
    /// for the process (a plugin call) with what identifies that version
    /// of the file ([`Stamp`]), so a second key costs an open and an fstat
    /// instead of a read and a parse. A changed file (a daemon's later
    /// call) has another stamp and is read again.
    pub fn load(path: &Path) -> Result<Places, ConfineError> {
        let shown = path.display().to_string();
        let bad = |reason: String| ConfineError::Policy {
            path: shown.clone(),
            reason,
        };
        let opened =
            crate::config_file::open_for_reading(path, crate::config_file::Symlinks::Refuse);
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Places {
                    policy: Policy::default(),
                    policy_path: shown,
                })
            }
            Err(e) => return Err(bad(e.to_string())),
        };
        let meta = file.metadata().map_err(|e| bad(e.to_string()))?;
        let stamp = Stamp::of(&meta);
        if let Some(places) = loaded(path, &stamp) {
            return Ok(places);
        }
        // Whoever may write the policy may write anywhere as root.
        if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(bad(format!(
                "must be owned by root and not writable by group or others \
                 (owner {}, mode {:o})",
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
        #[cfg(test)]
        POLICY_READS.with(|n| n.set(n.get() + 1));
        let bytes = crate::config_file::read_bounded_file(file, path, POLICY_CAP)
            .map_err(|e| bad(e.to_string()))?;
        let policy = Policy::parse(&bytes).map_err(bad)?;
        let places = Places {
            policy,
            policy_path: shown,
        };
        remember(path, stamp, &places);
        Ok(places)
    }

    /// The policy read (defaults only when there was no file).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The policy file's path, for messages.
    pub fn policy_path(&self) -> &str {
        &self.policy_path
    }

    /// Places with `policy` (tests, fuzzing).
    pub fn with_policy(policy: Policy, policy_path: &str) -> Places {
        Places {
            policy,
            policy_path: policy_path.to_string(),
        }
    }

    /// The folders `place` allows, defaults first.
    pub fn allowed(&self, place: Place) -> Vec<PathBuf> {
        let extra = match place {
            Place::Logs => &self.policy.allow.logs,
            Place::DeviceInfo => &self.policy.allow.device_info,
            Place::State => &self.policy.allow.state,
            Place::Credentials => &self.policy.allow.credentials,
        };
        place
            .defaults()
            .iter()
            .map(PathBuf::from)
            .chain(extra.iter().cloned())
            .collect()
    }

    /// `path`, named by configuration key `key`, if it is inside one of
    /// `place`'s folders (not the folder itself).
    pub fn confine(&self, key: &str, place: Place, path: &Path) -> Result<Confined, ConfineError> {
        if !is_plain_absolute(path) {
            return Err(ConfineError::NotPlain {
                key: key.to_string(),
                path: path.to_path_buf(),
            });
        }
        let allowed = self.allowed(place);
        let mut is_allowed_folder = false;
        for base in &allowed {
            if let Ok(rel) = path.strip_prefix(base) {
                if rel.as_os_str().is_empty() {
                    // Another allowed folder may still hold it (one
                    // allowed folder inside another).
                    is_allowed_folder = true;
                    continue;
                }
                return Ok(Confined {
                    key: key.to_string(),
                    base: base.clone(),
                    rel: rel.to_path_buf(),
                });
            }
        }
        if is_allowed_folder {
            return Err(ConfineError::AllowedFolderItself {
                key: key.to_string(),
                path: path.to_path_buf(),
                setting: place.setting(),
            });
        }
        Err(ConfineError::Outside {
            key: key.to_string(),
            path: path.to_path_buf(),
            setting: place.setting(),
            allowed: allowed
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            policy: self.policy_path.clone(),
        })
    }
}

/// What tells one version of the policy file from another without
/// reading it: the file itself (device, inode) and its size and change
/// times (an edit, a replacement, a chmod or chown each move ctime).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether a later change is sure to move the stamp. File times tick
    /// with the kernel's coarse clock (a jiffy, up to 10 ms): a file
    /// changed again within that tick, to the same size, keeps its stamp.
    /// A stamp less than two whole seconds old is therefore not trusted
    /// (as git treats a "racily clean" file).
    fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        now.saturating_sub(self.ctime.0.max(self.mtime.0)) >= 2
    }
}

/// The last policy file this process read, its stamp and its places.
static LOADED: std::sync::Mutex<Option<(PathBuf, Stamp, Places)>> = std::sync::Mutex::new(None);

fn loaded(path: &Path, stamp: &Stamp) -> Option<Places> {
    let slot = LOADED.lock().ok()?;
    match &*slot {
        Some((p, s, places)) if p == path && s == stamp => Some(places.clone()),
        _ => None,
    }
}

fn remember(path: &Path, stamp: Stamp, places: &Places) {
    if !stamp.settled() {
        return;
    }
    if let Ok(mut slot) = LOADED.lock() {
        *slot = Some((path.to_path_buf(), stamp, places.clone()));
    }
}

impl Policy {
    /// Parses and checks a policy file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Policy, String> {
        let policy: Policy = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let allow = &policy.allow;
        for folder in allow
            .logs
            .iter()
            .chain(&allow.device_info)
            .chain(&allow.state)
            .chain(&allow.credentials)
        {
            if !is_plain_absolute(folder) || folder == Path::new("/") {
                return Err(format!(
                    "{folder:?} must be an absolute folder other than / without \".\" or \"..\""
                ));
            }
        }
        if let Some(pin) = &policy.cluster_ipam {
            pin.check()?;
        }
        Ok(policy)
    }
}

/// Absolute, and only normal components after the root.
fn is_plain_absolute(path: &Path) -> bool {
    let mut components = path.components();
    components.next() == Some(Component::RootDir)
        && components.all(|c| matches!(c, Component::Normal(_)))
        && !path.as_os_str().as_encoded_bytes().contains(&0)
}

/// A path found inside an allowed folder: every operation resolves
/// [`Confined::relative`] beneath the folder without following links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    key: String,
    base: PathBuf,
    rel: PathBuf,
}

impl Confined {
    /// The whole path, as configured.
    pub fn path(&self) -> PathBuf {
        self.base.join(&self.rel)
    }

    /// The allowed folder it is in.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The part beneath the allowed folder.
    pub fn relative(&self) -> &Path {
        &self.rel
    }

    fn io_error(&self, source: io::Error) -> ConfineError {
        ConfineError::Io {
            key: self.key.clone(),
            path: self.path(),
            source,
        }
    }

    /// Opens the file with `flags` (`O_CREAT` creates it with `mode`);
    /// with `create_parents`, missing folders between the allowed folder
    /// (created too) and the file are made with `dir_mode`.
    pub fn open(
        &self,
        flags: OFlags,
        mode: u32,
        create_parents: Option<u32>,
    ) -> Result<File, ConfineError> {
        (|| {
            let base = open_base(&self.base, create_parents)?;
            if let Some(dir_mode) = create_parents {
                make_parents(&base, &self.rel, dir_mode)?;
            }
            open_beneath(&base, &self.rel, flags, Mode::from_raw_mode(mode)).map(File::from)
        })()
        .map_err(|e| self.io_error(e))
    }

    /// The file's bytes, at most `cap` of them, refusing what is not a
    /// regular file ([`crate::config_file::read_bounded_file`]).
    pub fn read_bounded(&self, cap: u64) -> Result<Vec<u8>, ConfineError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let file = self.open(flags, 0, None)?;
        crate::config_file::read_bounded_file(file, &self.path(), cap).map_err(|e| self.io_error(e))
    }

    /// The folder holding the file, opened beneath the allowed folder,
    /// and the file's name in it: for `*at` calls (atomic replacement,
    /// removal) that must not follow links either.
    pub fn parent(&self) -> Result<(OwnedFd, &OsStr), ConfineError> {
        self.parent_with(None)
    }

    /// As [`Confined::parent`], making missing folders (the allowed one
    /// included) with `dir_mode` first.
    pub fn parent_creating(&self, dir_mode: u32) -> Result<(OwnedFd, &OsStr), ConfineError> {
        self.parent_with(Some(dir_mode))
    }

    fn parent_with(&self, create: Option<u32>) -> Result<(OwnedFd, &OsStr), ConfineError> {
        (|| {
            let base = open_base(&self.base, create)?;
            if let Some(dir_mode) = create {
                make_parents(&base, &self.rel, dir_mode)?;
            }
            let name = self
                .rel
                .file_name()
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
            let parent = match self.rel.parent() {
                Some(p) if !p.as_os_str().is_empty() => open_beneath(
                    &base,
                    p,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?,
                _ => base,
            };
            Ok((parent, name))
        })()
        .map_err(|e| self.io_error(e))
    }

    /// Removes the file (not a folder); one already gone is fine.
    pub fn remove(&self) -> Result<(), ConfineError> {
        let (parent, name) = match self.parent() {
            Ok(found) => found,
            Err(ConfineError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        match rustix::fs::unlinkat(&parent, name, rustix::fs::AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(self.io_error(e.into())),
        }
    }
}

/// A number another process cannot guess, for temporary names: a file
/// made with `O_EXCL` under it cannot have been planted in advance.
pub fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std seeds RandomState from the OS's random source.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// The allowed folder, opened as a path (made first when `create` says
/// with which mode).
fn open_base(base: &Path, create: Option<u32>) -> io::Result<OwnedFd> {
    if let Some(mode) = create {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(base)?;
    }
    Ok(rustix::fs::open(
        base,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Makes the missing folders of `rel`'s parent beneath `base`, refusing
/// links.
fn make_parents(base: &OwnedFd, rel: &Path, mode: u32) -> io::Result<()> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut dir = base.as_fd().try_clone_to_owned()?;
    for component in parent.components() {
        match rustix::fs::mkdirat(&dir, component.as_os_str(), Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        dir = rustix::fs::openat(
            &dir,
            component.as_os_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// Policy files this thread has read (not taken from [`LOADED`]).
    static POLICY_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
thread_local! {
    /// Tests take the per-component walk, as on kernels without openat2.
    static FORCE_WALK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn openat2_missing() -> bool {
    #[cfg(test)]
    if FORCE_WALK.with(std::cell::Cell::get) {
        return true;
    }
    false
}

/// Opens `rel` beneath `base` without following any symbolic link and
/// without leaving `base`.
fn open_beneath(base: &OwnedFd, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC;
    if !openat2_missing() {
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(base, rel, flags, mode, resolve) {
            Err(rustix::io::Errno::NOSYS) => {}
            other => return Ok(other?),
        }
    }
    walk_beneath(base, rel, flags, mode)
}

/// The fallback of [`open_beneath`]: every component opened with
/// `O_NOFOLLOW` (the lexical check already refused `..`).
fn walk_beneath(base: &OwnedFd, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let components: Vec<_> = rel.components().collect();
    let Some((last, folders)) = components.split_last() else {
        return Err(io::ErrorKind::InvalidInput.into());
    };
    let mut dir = base.as_fd().try_clone_to_owned()?;
    for folder in folders {
        let Component::Normal(name) = folder else {
            return Err(io::ErrorKind::InvalidInput.into());
        };
        dir = rustix::fs::openat(
            &dir,
            *name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
    }
    let Component::Normal(name) = last else {
        return Err(io::ErrorKind::InvalidInput.into());
    };
    Ok(rustix::fs::openat(
        &dir,
        *name,
        flags | OFlags::NOFOLLOW,
        mode,
    )?)
}

#[cfg(test)]
mod tests;
