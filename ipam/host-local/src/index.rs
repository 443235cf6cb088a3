//! The attachment index: which addresses each holder has, without reading
//! the whole store.
//!
//! # Why an index
//!
//! The reference finds an attachment's leases by reading every file of the
//! network directory, on every ADD (duplicate check), DEL and CHECK; its
//! cost grows with the number of leases (3 ms empty, 12.5 ms with 1000
//! leases on the project's machines). Allocation itself needs no lookup by
//! holder: the walk starts after `last_reserved_ip.<n>` and creates lease
//! files with `O_EXCL`, which costs one probe per address tried. What needs
//! the lookup is "which addresses does (container ID, ifname) hold", and
//! that is what this index answers.
//!
//! # Layout
//!
//! `<dataDir>/<network>/.host-local-index/` holds one entry file per holder,
//! named `<containerID>:<ifname>` (`<containerID>:` for a legacy lease that
//! names the container only; a SHA-256 name `~<hex>` when the holder read
//! from a lease file is not a safe file name). An entry lists the holder
//! and its addresses. A `stamp` file records what the store looked like
//! when the index was last known to be complete (see below).
//!
//! The reference never trips over these files: it walks the whole network
//! directory, subdirectories included, but only compares file contents
//! (and its newer GC only considers files whose name is an address);
//! every file here starts with `#`, which no container ID can, so no
//! content ever equals a lease's, and no name here parses as an address.
//! Its layout stays exactly as it was; deleting this directory at any time
//! is harmless (it is rebuilt).
//!
//! # Entries are hints
//!
//! The lease files stay the only truth. An address listed in an entry
//! counts only after its lease file has been read and names the same
//! holder, so an entry left behind by a lease removed elsewhere (the
//! reference's DEL, an administrator) can never release or report an
//! address that belongs to someone else. Our own writes keep "every lease we
//! create is listed": the entry gains the address *before* the lease file is
//! created, and loses it only *after* the lease file is gone; a crash in
//! between leaves a stale hint, never a missing one.
//!
//! # Completeness: the stamp
//!
//! What the index can miss are leases created by someone that does not
//! know about it: the reference plugin during a migration or a roll-back,
//! a restored backup, an administrator. A miss matters (an unreleased
//! lease leaks an address; a missed duplicate lets an attachment hold two),
//! so the index is only trusted while the store has provably not been
//! touched by anyone else since we last brought it up to date. At the end
//! of every operation that changed anything, still under the lock, the
//! stamp records:
//! - the network directory's device, inode, ctime and mtime (nanoseconds):
//!   creating, removing or renaming any file in it changes them;
//! - the same for the index directory, so entries lost or added behind our
//!   back are noticed too;
//! - the content of `last_reserved_ip.<n>` for each range set: the
//!   reference rewrites it on every allocation.
//!
//! Every operation starts, under the lock, by comparing the store with the
//! stamp. Any difference (or a missing or unreadable stamp) means someone
//! else was here: the index is rebuilt from one full read of the directory,
//! then trusted again. So the full read happens once after a foreign
//! change, not on every call, and never in the steady state of a node that
//! runs only this plugin.
//!
//! Timestamps alone could miss a change made within the same clock tick as
//! our stamp on file systems with coarse timestamps; kernels since 6.13
//! give ext4, xfs, btrfs and tmpfs fine-grained ctimes once a ctime has
//! been read (which taking the stamp does), so the next change always
//! shows. The `last_reserved_ip` contents cover foreign allocations even on
//! a coarse clock: the reference could only write back the same value by
//! reserving the very address we reserved last, which would first have to
//! be released.
//!
//! The stamp does not cover file contents. Two signs found while reading
//! send an operation to the full read as well: an entry that does not
//! parse (rewriting it would drop hints of live leases), and a hint whose
//! lease names another holder (with the stamp current, only an in-place
//! rewrite of a lease, which no plugin does, can cause that; the new
//! holder's entry is then missing). An in-place rewrite that no hint leads
//! to stays unseen until the next foreign change or GC.
//!
//! Operations that cannot use the index (it cannot be created, say on a
//! read-only store) fall back to reading the directory, as the reference
//! does, and leave the stamp alone, so the index is rebuilt when it becomes
//! usable again.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use libcni::plugin_conf::is_valid_cni_name;
use sha2::{Digest, Sha256};

use crate::lease::{is_valid_ifname, LeaseOwner};

/// The index directory, inside the network directory.
pub const INDEX_DIR: &str = ".host-local-index";
/// The prefix of the reference's round-robin files.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";

const STAMP_FILE: &str = "stamp";
const TMP_FILE: &str = "tmp";
const ENTRY_HEADER: &str = "#host-local attachment index v1";
const STAMP_HEADER: &str = "#host-local index stamp v1";
/// Plain entry names stay well under NAME_MAX (255).
const MAX_PLAIN_NAME: usize = 200;
/// Index files are tiny; anything bigger is not ours.
const MAX_INDEX_FILE: u64 = 64 * 1024;

/// The index directory of one network directory.
#[derive(Debug)]
pub struct Index {
    store_dir: PathBuf,
    dir: PathBuf,
}

impl Index {
    /// Opens (creating if needed) the index of `store_dir`.
    pub fn open(store_dir: &Path) -> io::Result<Index> {
        let dir = store_dir.join(INDEX_DIR);
        match fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        Ok(Index {
            store_dir: store_dir.to_path_buf(),
            dir,
        })
    }

    /// True when the store is as the stamp recorded it.
    pub fn is_current(&self) -> io::Result<bool> {
        let stamp = match read_small(&self.dir.join(STAMP_FILE)) {
            Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(None) => return Ok(false),
            Err(e) => return Err(e),
        };
        let ids: Vec<usize> = stamp
            .lines()
            .filter_map(|l| l.strip_prefix("last "))
            .filter_map(|rest| rest.split(' ').next())
            .filter_map(|id| id.parse().ok())
            .collect();
        Ok(self.fingerprint(&ids)? == stamp)
    }

    /// Records the current state of the store as the one the index is
    /// complete for; `range_sets` says which `last_reserved_ip` files count.
    pub fn write_stamp(&self, range_sets: usize) -> io::Result<()> {
        let path = self.dir.join(STAMP_FILE);
        // Created before the fingerprint is taken: creating a file changes
        // the directory's ctime, rewriting one does not.
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        let ids: Vec<usize> = (0..range_sets.max(1)).collect();
        let text = self.fingerprint(&ids)?;
        file.set_len(0)?;
        file.write_all(text.as_bytes())
    }

    fn fingerprint(&self, last_reserved_ids: &[usize]) -> io::Result<String> {
        let store = fs::metadata(&self.store_dir)?;
        let index = fs::metadata(&self.dir)?;
        let mut text = format!(
            "{STAMP_HEADER}\nstore {} {} {}.{} {}.{}\nindex {} {} {}.{} {}.{}\n",
            store.dev(),
            store.ino(),
            store.ctime(),
            store.ctime_nsec(),
            store.mtime(),
            store.mtime_nsec(),
            index.dev(),
            index.ino(),
            index.ctime(),
            index.ctime_nsec(),
            index.mtime(),
            index.mtime_nsec(),
        );
        for id in last_reserved_ids {
            let path = self.store_dir.join(format!("{LAST_RESERVED_PREFIX}{id}"));
            let value = match read_small(&path)? {
                Some(bytes) => {
                    let value = String::from_utf8_lossy(&bytes).trim().to_string();
                    if value.is_empty() || value.contains(char::is_whitespace) {
                        "?".to_string()
                    } else {
                        value
                    }
                }
                None => "-".to_string(),
            };
            text.push_str(&format!("last {id} {value}\n"));
        }
        Ok(text)
    }

    /// The addresses the entry of `owner` lists (unverified).
    pub fn entry(&self, owner: &LeaseOwner) -> io::Result<Vec<IpAddr>> {
        let Some(bytes) = read_small(&self.dir.join(entry_name(owner)))? else {
            return Ok(Vec::new());
        };
        parse_entry(&String::from_utf8_lossy(&bytes), owner).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("index entry for {owner:?} is damaged"),
            )
        })
    }

    /// Replaces the entry of `owner`; an empty list removes it.
    pub fn set_entry(&self, owner: &LeaseOwner, ips: &[IpAddr]) -> io::Result<()> {
        let path = self.dir.join(entry_name(owner));
        if ips.is_empty() {
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = self.dir.join(TMP_FILE);
        let written = write_new(&tmp, format_entry(owner, ips).as_bytes())
            .and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Makes the index list exactly `holdings`, from a full read of the
    /// store.
    pub fn rebuild(&self, holdings: &BTreeMap<LeaseOwner, Vec<IpAddr>>) -> io::Result<()> {
        let wanted: BTreeSet<String> = holdings.keys().map(entry_name).collect();
        for dirent in fs::read_dir(&self.dir)? {
            let dirent = dirent?;
            let name = dirent.file_name().to_string_lossy().into_owned();
            if name == STAMP_FILE || wanted.contains(&name) {
                continue;
            }
            match fs::remove_file(dirent.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        for (owner, ips) in holdings {
            if self.entry(owner).ok().as_deref() != Some(ips.as_slice()) {
                self.set_entry(owner, ips)?;
            }
        }
        Ok(())
    }

    #[cfg(test)]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The entry file name of `owner`: readable when safe, hashed otherwise.
fn entry_name(owner: &LeaseOwner) -> String {
    let id = owner.container_id();
    let ifname = owner.ifname().unwrap_or("");
    let ifname_ok = match owner.ifname() {
        None => true,
        Some(name) => is_valid_ifname(name),
    };
    if is_valid_cni_name(id) && ifname_ok && id.len() + ifname.len() < MAX_PLAIN_NAME {
        return format!("{id}:{ifname}");
    }
    let mut hasher = Sha256::new();
    hasher.update(id.as_bytes());
    hasher.update(match owner.ifname() {
        Some(_) => b"\n+".as_slice(),
        None => b"\n-".as_slice(),
    });
    hasher.update(ifname.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("~{hex}")
}

/// The header line, the holder line, then one address per line.
fn format_entry(owner: &LeaseOwner, ips: &[IpAddr]) -> String {
    let mut text = format!("{ENTRY_HEADER}\n{}\n", owner_line(owner));
    for ip in ips {
        text.push_str(&ip.to_string());
        text.push('\n');
    }
    text
}

/// The holder as one line; Rust's debug quoting keeps line breaks and
/// other odd characters of a foreign lease's content on that line.
fn owner_line(owner: &LeaseOwner) -> String {
    match owner {
        LeaseOwner::Attachment {
            container_id,
            ifname,
        } => format!("attachment {container_id:?} {ifname:?}"),
        LeaseOwner::Container(id) => format!("container {id:?}"),
    }
}

fn parse_entry(text: &str, owner: &LeaseOwner) -> Option<Vec<IpAddr>> {
    let mut lines = text.lines();
    if lines.next()? != ENTRY_HEADER || lines.next()? != owner_line(owner) {
        return None;
    }
    lines.map(|l| l.parse::<IpAddr>().ok()).collect()
}

/// Reads a file that should be small; `None` when it does not exist.
fn read_small(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(MAX_INDEX_FILE).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Writes a fresh file (replacing a leftover one).
fn write_new(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn att(id: &str, ifname: &str) -> LeaseOwner {
        LeaseOwner::Attachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entry_names() {
        assert_eq!(entry_name(&att("abc", "eth0")), "abc:eth0");
        assert_eq!(entry_name(&LeaseOwner::Container("abc".into())), "abc:");
        // Holders read from foreign lease files may hold anything.
        for odd in [
            att("../x", "eth0"),
            att("a", "b/c"),
            LeaseOwner::Container("a b\nc".into()),
        ] {
            let name = entry_name(&odd);
            assert!(name.starts_with('~') && name.len() == 65, "{name}");
        }
        assert_ne!(
            entry_name(&att("a b", "x")),
            entry_name(&LeaseOwner::Container("a b".into()))
        );
        let long = "a".repeat(250);
        assert!(entry_name(&att(&long, "eth0")).starts_with('~'));
        // No name is ever an address, so the reference's GC leaves them.
        assert!(entry_name(&att("10.0.0.1", "eth0"))
            .parse::<IpAddr>()
            .is_err());
        assert!(entry_name(&LeaseOwner::Container("10.0.0.1".into()))
            .parse::<IpAddr>()
            .is_err());
    }

    #[test]
    fn entries_round_trip_and_start_with_a_hash() {
        let store = tempfile::tempdir().unwrap();
        let index = Index::open(store.path()).unwrap();
        let owner = att("abc", "eth0");
        assert_eq!(index.entry(&owner).unwrap(), Vec::<IpAddr>::new());
        let ips = [ip("10.0.0.2"), ip("2001:db8::2")];
        index.set_entry(&owner, &ips).unwrap();
        assert_eq!(index.entry(&owner).unwrap(), ips);
        let raw = fs::read_to_string(index.dir().join("abc:eth0")).unwrap();
        assert!(raw.starts_with('#'));
        index.set_entry(&owner, &[]).unwrap();
        assert!(!index.dir().join("abc:eth0").exists());
        index.set_entry(&owner, &[]).unwrap();
        let odd = LeaseOwner::Container("x\r\ny".into());
        index.set_entry(&odd, &ips).unwrap();
        assert_eq!(index.entry(&odd).unwrap(), ips);
    }

    #[test]
    fn damaged_entry_is_an_error() {
        let store = tempfile::tempdir().unwrap();
        let index = Index::open(store.path()).unwrap();
        let owner = att("abc", "eth0");
        fs::write(index.dir().join("abc:eth0"), "garbage").unwrap();
        assert!(index.entry(&owner).is_err());
        fs::write(
            index.dir().join("abc:eth0"),
            format!("{ENTRY_HEADER}\nattachment \"abc\" \"eth0\"\nnot-an-ip\n"),
        )
        .unwrap();
        assert!(index.entry(&owner).is_err());
    }

    #[test]
    fn stamp_notices_changes_to_the_store_and_the_index() {
        let store = tempfile::tempdir().unwrap();
        let index = Index::open(store.path()).unwrap();
        assert!(!index.is_current().unwrap(), "no stamp yet");
        index.write_stamp(2).unwrap();
        assert!(index.is_current().unwrap());

        fs::write(store.path().join("10.0.0.5"), "x\r\neth0").unwrap();
        assert!(!index.is_current().unwrap(), "lease created");
        index.write_stamp(2).unwrap();
        fs::remove_file(store.path().join("10.0.0.5")).unwrap();
        assert!(!index.is_current().unwrap(), "lease removed");
        index.write_stamp(2).unwrap();

        fs::write(index.dir().join("abc:eth0"), "x").unwrap();
        assert!(
            !index.is_current().unwrap(),
            "entry created behind our back"
        );
        index.write_stamp(2).unwrap();

        fs::write(store.path().join("last_reserved_ip.1"), "10.0.0.9").unwrap();
        index.write_stamp(2).unwrap();
        assert!(index.is_current().unwrap());
        // Rewriting an existing file does not change the directory: the
        // recorded content does.
        fs::write(store.path().join("last_reserved_ip.1"), "10.0.0.10").unwrap();
        assert!(!index.is_current().unwrap(), "last_reserved_ip rewritten");

        index.write_stamp(2).unwrap();
        fs::write(index.dir().join(STAMP_FILE), "junk").unwrap();
        assert!(!index.is_current().unwrap(), "damaged stamp");
    }

    #[test]
    fn rebuild_replaces_everything_but_the_stamp() {
        let store = tempfile::tempdir().unwrap();
        let index = Index::open(store.path()).unwrap();
        index
            .set_entry(&att("old", "eth0"), &[ip("10.0.0.3")])
            .unwrap();
        index.write_stamp(1).unwrap();
        let mut holdings = BTreeMap::new();
        holdings.insert(att("new", "eth0"), vec![ip("10.0.0.4")]);
        holdings.insert(LeaseOwner::Container("legacy".into()), vec![ip("10.0.0.5")]);
        index.rebuild(&holdings).unwrap();
        assert_eq!(
            index.entry(&att("old", "eth0")).unwrap(),
            Vec::<IpAddr>::new()
        );
        assert_eq!(index.entry(&att("new", "eth0")).unwrap(), [ip("10.0.0.4")]);
        assert_eq!(
            index
                .entry(&LeaseOwner::Container("legacy".into()))
                .unwrap(),
            [ip("10.0.0.5")]
        );
        let mut names: Vec<String> = fs::read_dir(index.dir())
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["legacy:", "new:eth0", "stamp"]);
    }
}
