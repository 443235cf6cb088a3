//! Folders a configuration names for a plugin's own files (`dataDir`):
//! inside a place's folders, and reached beneath the allowed folder
//! without following any symbolic link, so a link inside an allowed
//! folder cannot lead the plugin's writes, reads and deletions out of it.
//! The plugin then works by path in the folder, which only root can
//! change (no plugin makes links).

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::{make_parents, open_base, open_beneath, ConfineError, Confined, Place, Places};

/// `folder`, named by configuration key `key`, if it lies inside one of
/// `place`'s folders (the defaults are checked first, without reading the
/// policy file) and is reached from that folder without a link. With
/// `create` (a folder mode), missing folders are made on the way;
/// otherwise a missing folder is `Ok` (nothing of the plugin's is there).
pub fn confine_folder(
    key: &str,
    place: Place,
    folder: &Path,
    create: Option<u32>,
) -> Result<(), ConfineError> {
    let confined = match Places::default().confine(key, place, folder) {
        Ok(confined) => confined,
        Err(_) => Places::node()?.confine(key, place, folder)?,
    };
    match confined.open_folder(create) {
        Ok(_) => Ok(()),
        Err(ConfineError::Io { source, .. })
            if create.is_none() && source.kind() == io::ErrorKind::NotFound =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl Confined {
    /// Opens the path as a folder (`O_PATH`) beneath the allowed folder
    /// without following links, making it and the folders on the way
    /// with mode `create` first when given. A link or a file on the way
    /// is [`ConfineError::Link`].
    pub fn open_folder(&self, create: Option<u32>) -> Result<OwnedFd, ConfineError> {
        let open = |base: &OwnedFd| {
            open_beneath(
                base,
                &self.rel,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )
        };
        let opened = (|| {
            // Most calls find the folder made by an earlier one: open it
            // first and make folders only when something is missing (each
            // call is a fresh process, and the walk that makes them costs
            // a dozen system calls).
            let existing = open_base(&self.base, None).and_then(|base| open(&base));
            let mode = match (existing, create) {
                (Ok(fd), _) => return Ok(fd),
                (Err(e), Some(mode)) if e.kind() == io::ErrorKind::NotFound => mode,
                (Err(e), _) => return Err(e),
            };
            let base = open_base(&self.base, Some(mode))?;
            // The parents of a name inside the folder: the folder too.
            make_parents(&base, &self.rel.join("x"), mode)?;
            open(&base)
        })();
        opened.map_err(|source| {
            use rustix::io::Errno;
            // openat2 says ELOOP (or EXDEV); the O_NOFOLLOW walk, and
            // mkdirat over a link, ENOTDIR or EEXIST-then-ENOTDIR.
            let raw = source.raw_os_error().map(Errno::from_raw_os_error);
            if matches!(
                raw,
                Some(Errno::LOOP) | Some(Errno::NOTDIR) | Some(Errno::XDEV)
            ) {
                ConfineError::Link {
                    key: self.key.clone(),
                    path: self.path(),
                }
            } else {
                self.io_error(source)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use super::*;
    use crate::confine::{Allow, Policy};

    fn places(allowed: &Path) -> Places {
        let policy = Policy {
            allow: Allow {
                state: vec![allowed.to_path_buf()],
                ..Allow::default()
            },
            ..Policy::default()
        };
        Places::with_policy(policy, "/test/policy.json")
    }

    fn open(places: &Places, path: &Path, create: Option<u32>) -> Result<OwnedFd, ConfineError> {
        places
            .confine("dataDir", Place::State, path)?
            .open_folder(create)
    }

    #[test]
    fn a_folder_is_made_and_opened_beneath_the_allowed_one() {
        let tmp = tempfile::tempdir().unwrap();
        let allowed = tmp.path().join("allowed");
        let p = places(&allowed);
        let folder = allowed.join("a/b");
        let e = open(&p, &folder, None).unwrap_err();
        let ConfineError::Io { source, .. } = e else {
            panic!("{e}")
        };
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        open(&p, &folder, Some(0o700)).unwrap();
        assert!(folder.is_dir());
        open(&p, &folder, None).unwrap();
    }

    #[test]
    fn a_link_on_the_way_is_refused_with_code_7_and_nothing_is_made_beyond_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (allowed, outside) = (tmp.path().join("allowed"), tmp.path().join("outside"));
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        symlink(&outside, allowed.join("link")).unwrap();
        let p = places(&allowed);
        for (path, create) in [
            (allowed.join("link"), None),
            (allowed.join("link"), Some(0o755)),
            (allowed.join("link/deeper"), Some(0o755)),
            (allowed.join("link/deeper"), None),
        ] {
            let e = open(&p, &path, create).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "dataDir {path:?} is reached through a symbolic link or a file, \
                     which is not followed inside the allowed folders"
                )
            );
            assert_eq!(
                crate::error::ToCniError::to_cni_error(&e).code,
                crate::error::ErrorCode::InvalidNetworkConfig
            );
        }
        let made: Vec<PathBuf> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(made.is_empty(), "{made:?}");
    }

    #[test]
    fn the_walk_without_openat2_refuses_links_too() {
        super::super::FORCE_WALK.with(|f| f.set(true));
        let tmp = tempfile::tempdir().unwrap();
        let allowed = tmp.path().join("allowed");
        std::fs::create_dir_all(allowed.join("real")).unwrap();
        symlink(allowed.join("real"), allowed.join("link")).unwrap();
        let p = places(&allowed);
        open(&p, &allowed.join("real"), None).unwrap();
        let e = open(&p, &allowed.join("link"), None).unwrap_err();
        assert!(matches!(e, ConfineError::Link { .. }), "{e}");
        super::super::FORCE_WALK.with(|f| f.set(false));
    }
}
