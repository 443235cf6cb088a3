//! Where `ipam.daemonSocketPath` may point (issue 28). The plugin runs as
//! root and sends the attachment (with the configuration's options) to
//! whatever listens on that socket, opening with an HTTP `CONNECT`: with
//! Multus a namespace user writes the key, so it is accepted only inside
//! the state folders (`/run/cni` holds the default `/run/cni/dhcp.sock`;
//! `/var/lib/cni`; more in the node policy's `"state"`), its folder
//! reached beneath the allowed one without a link, and the socket itself
//! not a link. A missing folder or socket is left to the dial (the daemon
//! is not running: code 11, as before).

use std::io;
use std::path::Path;

use libcni::confine::{ConfineError, Place, Places};
use nix::sys::stat::SFlag;

/// The configuration key, as errors name it.
pub const KEY: &str = "ipam.daemonSocketPath";

/// Refuses a socket path outside the state folders or reached through a
/// link; the dial that follows uses the path as given.
pub fn confine(socket: &str) -> Result<(), ConfineError> {
    let path = Path::new(socket);
    let confined = Places::default()
        .confine(KEY, Place::State, path)
        .or_else(|_| Places::node()?.confine(KEY, Place::State, path))?;
    let link = || ConfineError::Link {
        key: KEY.to_string(),
        path: path.to_path_buf(),
    };
    let (folder, name) = match confined.parent() {
        Ok(found) => found,
        Err(ConfineError::Io { source, .. }) => {
            return match source.raw_os_error().map(nix::errno::Errno::from_raw) {
                Some(nix::errno::Errno::ENOENT) => Ok(()),
                Some(nix::errno::Errno::ELOOP)
                | Some(nix::errno::Errno::ENOTDIR)
                | Some(nix::errno::Errno::EXDEV) => Err(link()),
                _ => Err(ConfineError::Io {
                    key: KEY.to_string(),
                    path: path.to_path_buf(),
                    source,
                }),
            }
        }
        Err(e) => return Err(e),
    };
    match nix::sys::stat::fstatat(&folder, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits() => Err(link()),
        Ok(_) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(ConfineError::Io {
            key: KEY.to_string(),
            path: path.to_path_buf(),
            source: io::Error::from(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_socket_is_accepted_without_a_policy() {
        // Nothing at /run/cni/dhcp.sock on a test machine, or the daemon's
        // socket: either way accepted.
        confine(crate::config::DEFAULT_SOCKET_PATH).unwrap();
    }

    #[test]
    fn a_socket_outside_the_state_folders_is_refused() {
        let e = confine("/run/containerd/containerd.sock").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "ipam.daemonSocketPath \"/run/containerd/containerd.sock\" is outside the folders allowed for state"
            ),
            "{e}"
        );
        let e = confine("dhcp.sock").unwrap_err();
        assert!(e.to_string().contains("must be an absolute path"), "{e}");
    }
}
