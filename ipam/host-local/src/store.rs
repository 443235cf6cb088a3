//! The lease store: one directory per network, laid out exactly as the
//! reference lays it out, so a node can switch between the two in place.
//!
//! ```text
//! <dataDir>/<network>/
//!     lock                  flock'ed by every operation that reads or writes leases
//!     <ip>                  one lease: "<containerID>\r\n<ifname>", mode 0600
//!     last_reserved_ip.<n>  the address range set <n> reserved last
//!     .host-local-index/    ours only: see the `index` module
//! ```
//!
//! Every read and write of leases happens through a [`LockedStore`], which
//! holds the lock; the type system keeps unlocked code away from them.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use libcni::plugin_conf::is_valid_cni_name;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, AT_FDCWD};
use nix::unistd::linkat;

use crate::index::{Index, LAST_RESERVED_PREFIX};
use crate::lease::{Attachment, LeaseOwner};
use libcni::lock::{FileLock, LockError, LockWait};

/// Lease files are a few dozen bytes; reading stops well past that.
const MAX_LEASE_FILE: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Also what keeps a network name from steering paths out of `dataDir`.
    #[error("invalid network name {0:?}: it must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")]
    InvalidNetworkName(String),
    #[error("failed to {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl StoreError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError {
        let path = path.to_path_buf();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    }
}

/// One network's lease directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    lock_timeout: Duration,
}

/// What a store operation cost; lets tests check that lookups stay off the
/// full directory read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Full reads of the network directory.
    pub directory_scans: usize,
    /// Index rebuilds (each also counts a scan).
    pub index_rebuilds: usize,
}

/// A lease found by a full read of the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ip: IpAddr,
    /// `None` for an empty file.
    pub owner: Option<LeaseOwner>,
}

/// What GC did.
#[derive(Debug, Default)]
pub struct GcReport {
    pub released: Vec<Lease>,
    pub kept: usize,
    pub errors: Vec<StoreError>,
}

impl Store {
    /// Opens the directory of `network` under `data_dir`, creating it (mode
    /// 0755) as needed. The name is checked before any path is built from
    /// it.
    pub fn open(
        data_dir: &Path,
        network: &str,
        lock_timeout: Duration,
    ) -> Result<Store, StoreError> {
        if !is_valid_cni_name(network) {
            return Err(StoreError::InvalidNetworkName(network.to_string()));
        }
        let dir = data_dir.join(network);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(StoreError::io("create store directory", &dir))?;
        Ok(Store { dir, lock_timeout })
    }

    /// Like [`Store::open`] but creates nothing: `None` when the network
    /// directory does not exist.
    pub fn open_existing(
        data_dir: &Path,
        network: &str,
        lock_timeout: Duration,
    ) -> Result<Option<Store>, StoreError> {
        if !is_valid_cni_name(network) {
            return Err(StoreError::InvalidNetworkName(network.to_string()));
        }
        let dir = data_dir.join(network);
        match fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(Some(Store { dir, lock_timeout })),
            Ok(_) => Err(StoreError::Io {
                action: "open store directory",
                path: dir,
                source: io::Error::from(io::ErrorKind::NotADirectory),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("open store directory", &dir)(e)),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the lock (bounded wait) and brings the index up to date.
    /// `range_sets` is the number of range sets of the configuration, for
    /// the `last_reserved_ip.<n>` files.
    pub fn lock(&self, range_sets: usize) -> Result<LockedStore<'_>, StoreError> {
        let wait = LockWait {
            timeout: self.lock_timeout,
            // The reference host-local takes the same lock.
            holder: "another host-local",
        };
        let lock = FileLock::acquire(&self.dir.join("lock"), wait)?;
        let mut locked = LockedStore {
            store: self,
            index: Index::open(&self.dir).ok(),
            range_sets,
            changed: false,
            rebuilt: false,
            stats: StoreStats::default(),
            _lock: lock,
        };
        if let Some(index) = &locked.index {
            if !index.is_current().unwrap_or(false) {
                locked.rebuild_index()?;
            }
        }
        Ok(locked)
    }

    /// True when nobody holds `ip`. Read without the lock: for STATUS, which
    /// is advisory.
    pub fn is_free(&self, ip: IpAddr) -> Result<bool, StoreError> {
        let path = self.lease_path(ip);
        match fs::symlink_metadata(&path) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(StoreError::io("look up lease", &path)(e)),
        }
    }

    /// The address range set `set_idx` reserved last. Anything unreadable
    /// only costs the round-robin position, as in the reference.
    pub fn last_reserved_ip(&self, set_idx: usize) -> Option<IpAddr> {
        let mut text = String::new();
        File::open(self.last_reserved_path(set_idx))
            .ok()?
            .take(MAX_LEASE_FILE)
            .read_to_string(&mut text)
            .ok()?;
        text.trim()
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical())
    }

    fn lease_path(&self, ip: IpAddr) -> PathBuf {
        self.dir.join(ip.to_string())
    }

    fn last_reserved_path(&self, set_idx: usize) -> PathBuf {
        self.dir.join(format!("{LAST_RESERVED_PREFIX}{set_idx}"))
    }
}

/// The store with its lock held. Dropping it records the index stamp (when
/// anything changed) and then unlocks.
#[derive(Debug)]
pub struct LockedStore<'a> {
    store: &'a Store,
    /// `None` when the index cannot be used: every lookup reads the
    /// directory.
    index: Option<Index>,
    range_sets: usize,
    changed: bool,
    /// The index was rebuilt under this hold of the lock.
    rebuilt: bool,
    stats: StoreStats,
    // Declared last: released after `Drop::drop` has written the stamp.
    _lock: FileLock,
}

impl Drop for LockedStore<'_> {
    fn drop(&mut self) {
        if self.changed {
            if let Some(index) = &self.index {
                // A stamp that fails to be written only costs a rebuild on
                // the next call.
                let _ = index.write_stamp(self.range_sets);
            }
        }
    }
}

impl LockedStore<'_> {
    pub fn stats(&self) -> StoreStats {
        self.stats
    }

    /// True when lookups go through the index (false: directory reads).
    pub fn uses_index(&self) -> bool {
        self.index.is_some()
    }

    pub fn last_reserved_ip(&self, set_idx: usize) -> Option<IpAddr> {
        self.store.last_reserved_ip(set_idx)
    }

    /// Reserves `ip` for `attachment`. `Ok(false)` when someone holds it.
    pub fn reserve(
        &mut self,
        attachment: &Attachment,
        ip: IpAddr,
        set_idx: usize,
    ) -> Result<bool, StoreError> {
        let path = self.store.lease_path(ip);
        // A cheap probe first, so a walk over taken addresses does not
        // rewrite the index for each of them.
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(false);
        }
        let owner = LeaseOwner::for_attachment(attachment);
        let hinted = self.add_hint(&owner, ip)?;
        let undo_hint = |this: &mut Self| {
            if hinted {
                this.remove_hints(&owner, &[ip]);
            }
        };

        match create_lease(
            &self.store.dir,
            &path,
            attachment.lease_content().as_bytes(),
        ) {
            Ok(true) => self.changed = true,
            Ok(false) => {
                undo_hint(self);
                return Ok(false);
            }
            Err(e) => {
                undo_hint(self);
                return Err(StoreError::io("create lease file", &path)(e));
            }
        }

        let last_path = self.store.last_reserved_path(set_idx);
        if let Err(e) = write_replace(&last_path, ip.to_string().as_bytes()) {
            let _ = fs::remove_file(&path);
            undo_hint(self);
            return Err(StoreError::io("write", &last_path)(e));
        }
        Ok(true)
    }

    /// Every address `attachment` holds: its own leases and legacy leases
    /// of its container.
    pub fn leases_of(&mut self, attachment: &Attachment) -> Result<Vec<IpAddr>, StoreError> {
        let mut ips = self.held_by(&LeaseOwner::for_attachment(attachment))?;
        ips.extend(self.held_by(&LeaseOwner::legacy_for(attachment))?);
        Ok(ips)
    }

    /// True when `attachment` holds any address (CHECK).
    pub fn holds_any(&mut self, attachment: &Attachment) -> Result<bool, StoreError> {
        Ok(!self
            .held_by(&LeaseOwner::for_attachment(attachment))?
            .is_empty()
            || !self
                .held_by(&LeaseOwner::legacy_for(attachment))?
                .is_empty())
    }

    /// Releases everything `attachment` holds; when it holds nothing under
    /// its own name, the legacy leases of its container (as the reference
    /// does). Returns the released addresses; unknown attachments release
    /// nothing and are no error.
    pub fn release(&mut self, attachment: &Attachment) -> Result<Vec<IpAddr>, StoreError> {
        let exact = LeaseOwner::for_attachment(attachment);
        let ips = self.held_by(&exact)?;
        if !ips.is_empty() {
            return self.remove_leases(&exact, &ips);
        }
        let legacy = LeaseOwner::legacy_for(attachment);
        let ips = self.held_by(&legacy)?;
        self.remove_leases(&legacy, &ips)
    }

    /// Releases `ips` if `attachment` holds them: the undo of a failed ADD,
    /// which must not touch what the attachment held before.
    pub fn release_ips(
        &mut self,
        attachment: &Attachment,
        ips: &[IpAddr],
    ) -> Result<Vec<IpAddr>, StoreError> {
        let owner = LeaseOwner::for_attachment(attachment);
        let mut owned = Vec::new();
        for &ip in ips {
            if self.read_owner(ip)?.as_ref() == Some(&owner) {
                owned.push(ip);
            }
        }
        self.remove_leases(&owner, &owned)
    }

    /// Removes every lease whose holder `keep` rejects (empty lease files
    /// name nobody and go too), continuing past errors. Also rebuilds the
    /// index from what it read.
    pub fn gc(&mut self, keep: impl Fn(&LeaseOwner) -> bool) -> Result<GcReport, StoreError> {
        let leases = self.scan()?;
        let mut report = GcReport::default();
        let mut holdings: BTreeMap<LeaseOwner, Vec<IpAddr>> = BTreeMap::new();
        for lease in leases {
            let keep_it = lease.owner.as_ref().is_some_and(&keep);
            if !keep_it {
                let path = self.store.lease_path(lease.ip);
                match fs::remove_file(&path) {
                    Ok(()) => {
                        self.changed = true;
                        report.released.push(lease);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => report
                        .errors
                        .push(StoreError::io("remove lease file", &path)(e)),
                }
            } else {
                report.kept += 1;
            }
            if let Some(owner) = lease.owner {
                holdings.entry(owner).or_default().push(lease.ip);
            }
        }
        if let Some(index) = &self.index {
            if index.rebuild(&holdings).is_ok() {
                self.changed = true;
            } else {
                // Unusable now; the stamp stays stale, so it is rebuilt later.
                self.index = None;
            }
        }
        Ok(report)
    }

    /// Reads every lease of the directory (GC and index rebuilds only).
    pub fn scan(&mut self) -> Result<Vec<Lease>, StoreError> {
        self.stats.directory_scans += 1;
        let dir = &self.store.dir;
        let mut leases = Vec::new();
        for dirent in fs::read_dir(dir).map_err(StoreError::io("read store directory", dir))? {
            let dirent = dirent.map_err(StoreError::io("read store directory", dir))?;
            let Some(ip) = dirent
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<IpAddr>().ok())
            else {
                continue;
            };
            // Only regular files are leases; the reference skips
            // directories and never creates anything else.
            if !dirent.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            match read_lease(&dirent.path()) {
                Ok(Some(content)) => leases.push(Lease {
                    ip,
                    owner: LeaseOwner::parse(&content),
                }),
                Ok(None) => {}
                Err(e) => return Err(StoreError::io("read lease file", &dirent.path())(e)),
            }
        }
        Ok(leases)
    }

    /// What the index lists for `owner` (unverified); `None` when there is
    /// no usable index. A damaged entry makes the whole index suspect, so it
    /// is rebuilt first: overwriting it would drop hints of live leases.
    fn listed(&mut self, owner: &LeaseOwner) -> Result<Option<Vec<IpAddr>>, StoreError> {
        let damaged = match &self.index {
            None => return Ok(None),
            Some(index) => match index.entry(owner) {
                Ok(ips) => return Ok(Some(ips)),
                Err(_) => true,
            },
        };
        if damaged {
            self.rebuild_index()?;
        }
        // A successful rebuild rewrote or removed every entry.
        Ok(self
            .index
            .as_ref()
            .map(|index| index.entry(owner).unwrap_or_default()))
    }

    /// The verified addresses of `owner`.
    fn held_by(&mut self, owner: &LeaseOwner) -> Result<Vec<IpAddr>, StoreError> {
        let Some(listed) = self.listed(owner)? else {
            return self.held_by_scan(owner);
        };
        let mut verified = Vec::new();
        let mut changed_hands = false;
        for &ip in &listed {
            match self.read_owner(ip)? {
                Some(found) if found == *owner => verified.push(ip),
                Some(_) => changed_hands = true,
                // Gone: released elsewhere, or a crash before the lease
                // was created.
                None => {}
            }
        }
        if changed_hands && !self.rebuilt {
            // The stamp rules out anyone else creating or removing files
            // since the index was complete, so a lease naming another
            // holder was rewritten in place (by hand, say): that holder's
            // entry is missing too. Read everything once.
            self.rebuild_index()?;
            return self.held_by(owner);
        }
        if verified.len() != listed.len() {
            if let Some(index) = &self.index {
                // Prune hints whose lease is gone or changed hands; failing
                // to is harmless, they are verified on every read.
                if index.set_entry(owner, &verified).is_ok() {
                    self.changed = true;
                }
            }
        }
        Ok(verified)
    }

    fn held_by_scan(&mut self, owner: &LeaseOwner) -> Result<Vec<IpAddr>, StoreError> {
        Ok(self
            .scan()?
            .into_iter()
            .filter(|l| l.owner.as_ref() == Some(owner))
            .map(|l| l.ip)
            .collect())
    }

    fn read_owner(&self, ip: IpAddr) -> Result<Option<LeaseOwner>, StoreError> {
        let path = self.store.lease_path(ip);
        match read_lease(&path) {
            Ok(content) => Ok(content.and_then(|c| LeaseOwner::parse(&c))),
            Err(e) => Err(StoreError::io("read lease file", &path)(e)),
        }
    }

    /// Lists `ip` for `owner` ahead of creating its lease. `Ok(false)` when
    /// nothing was added (no index, or already listed).
    fn add_hint(&mut self, owner: &LeaseOwner, ip: IpAddr) -> Result<bool, StoreError> {
        let Some(mut ips) = self.listed(owner)? else {
            return Ok(false);
        };
        if ips.contains(&ip) {
            return Ok(false);
        }
        ips.push(ip);
        let Some(index) = &self.index else {
            return Ok(false);
        };
        let result = index.set_entry(owner, &ips);
        self.changed = true;
        result.map_err(StoreError::io("update the lease index in", &self.store.dir))?;
        Ok(true)
    }

    /// Drops `ips` from the entry of `owner`, best effort: a hint left
    /// behind is verified before every use.
    fn remove_hints(&mut self, owner: &LeaseOwner, ips: &[IpAddr]) {
        let Ok(Some(mut listed)) = self.listed(owner) else {
            return;
        };
        listed.retain(|ip| !ips.contains(ip));
        if let Some(index) = &self.index {
            let _ = index.set_entry(owner, &listed);
            self.changed = true;
        }
    }

    fn remove_leases(
        &mut self,
        owner: &LeaseOwner,
        ips: &[IpAddr],
    ) -> Result<Vec<IpAddr>, StoreError> {
        let mut released = Vec::new();
        let mut first_error = None;
        for &ip in ips {
            let path = self.store.lease_path(ip);
            match fs::remove_file(&path) {
                Ok(()) => released.push(ip),
                Err(e) if e.kind() == io::ErrorKind::NotFound => released.push(ip),
                Err(e) => {
                    first_error.get_or_insert(StoreError::io("remove lease file", &path)(e));
                }
            }
        }
        if !released.is_empty() {
            self.changed = true;
            self.remove_hints(owner, &released);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }

    fn rebuild_index(&mut self) -> Result<(), StoreError> {
        let leases = self.scan()?;
        self.stats.index_rebuilds += 1;
        self.rebuilt = true;
        let mut holdings: BTreeMap<LeaseOwner, Vec<IpAddr>> = BTreeMap::new();
        for lease in leases {
            if let Some(owner) = lease.owner {
                holdings.entry(owner).or_default().push(lease.ip);
            }
        }
        match &self.index {
            Some(index) if index.rebuild(&holdings).is_ok() => self.changed = true,
            _ => self.index = None,
        }
        Ok(())
    }
}

/// Reads a lease file; `None` when it does not exist.
fn read_lease(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut content = Vec::new();
    file.take(MAX_LEASE_FILE).read_to_end(&mut content)?;
    Ok(Some(content))
}

/// The fallback's temporary lease, in the network directory; the name is
/// no address, so no reader takes it for a lease.
const LEASE_TMP: &str = ".host-local-lease.tmp";

/// Creates the lease file `path` (in `dir`) holding `content`, all at once:
/// it appears complete or not at all. Creating it empty and writing after
/// (as the reference does) leaves, when the process is killed in between,
/// an empty lease that names nobody: DEL cannot find it and the address
/// stays taken until a GC. `Ok(false)` when the address is taken.
fn create_lease(dir: &Path, path: &Path, content: &[u8]) -> io::Result<bool> {
    match create_lease_from_tmpfile(dir, path, content) {
        Err(e) if tmpfile_unusable(&e) => create_lease_from_named_tmp(dir, path, content),
        other => other,
    }
}

/// An unnamed file (`O_TMPFILE`) written, then linked under its name: a
/// crash at any point leaves nothing behind.
fn create_lease_from_tmpfile(dir: &Path, path: &Path, content: &[u8]) -> io::Result<bool> {
    let mut file = OpenOptions::new()
        .write(true)
        .custom_flags(OFlag::O_TMPFILE.bits())
        .mode(0o600)
        .open(dir)?;
    file.write_all(content)?;
    // Linking an unnamed file by its /proc path needs no privilege
    // (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
    let proc_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    match linkat(
        AT_FDCWD,
        proc_path.as_path(),
        AT_FDCWD,
        path,
        AtFlags::AT_SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(true),
        Err(Errno::EEXIST) => Ok(false),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// File systems without `O_TMPFILE` (or a process without /proc) take the
/// named-file way.
fn tmpfile_unusable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL | Errno::ENOENT)
    )
}

/// A named temporary file written, then hard-linked under the lease's
/// name (which fails if the address is taken). The store lock makes the
/// temporary name ours alone; a crash can leave it behind, never a lease.
fn create_lease_from_named_tmp(dir: &Path, path: &Path, content: &[u8]) -> io::Result<bool> {
    let tmp = dir.join(LEASE_TMP);
    let linked = write_replace(&tmp, content).and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Replaces a small file's content in place (mode 0600 when created), as
/// the reference writes `last_reserved_ip.<n>`.
fn write_replace(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content)
}

#[cfg(test)]
mod tests;
