//! Making a persistent tap with the tun driver's ioctls on `/dev/net/tun`.
//!
//! rtnetlink cannot create tun/tap devices (the driver refuses
//! `RTM_NEWLINK`), so the tap is made as `ip tuntap add` makes it:
//! `TUNSETIFF` creates the device and attaches this file to it,
//! `TUNSETOWNER` and `TUNSETGROUP` say who may attach later without
//! `CAP_NET_ADMIN` (with both set, a process must match both; left out,
//! the tap has no owner and only processes with that capability in the
//! namespace may attach), `TUNSETPERSIST` keeps it when the file closes.
//! Until that last step the device lives only as long as the file, so any
//! failure leaves nothing behind. The device is made in the namespace of
//! the calling thread.
//!
//! The name asked for ends in `%d`: the kernel then always creates a new
//! device and puts the lowest free number there. A plain name would
//! attach to an existing tap of that name instead of failing.
//!
//! ## `selinuxContext`
//!
//! SELinux labels a tun device with the context of the process that
//! creates it, and checks that label whenever a process attaches to the
//! tap later (`tun_socket` permissions such as `attach_queue` and
//! `relabelfrom`/`relabelto` on open). So the context asked for must be
//! the creator's. A process cannot simply switch its own context (that is
//! a `dyntransition`, which policies rarely grant and which could not be
//! undone), but it may ask for one for its next `exec`
//! (`/proc/thread-self/attr/exec`), as the reference does before running
//! `ip tuntap`. Here the plugin runs itself ([`HELPER_FLAG`]): a thread in
//! the container's namespace sets the exec context and starts the
//! plugin's own binary, which makes the tap in that context and exits.
//! The rest (rename, MTU, MAC, bridge, addresses) is done by the plugin
//! over netlink: it does not change the device's label.
//!
//! On a node without SELinux the context cannot be honoured; ADD then
//! fails (code 50) before making anything, rather than create a tap under
//! the wrong label. This machine has no SELinux: the labelled path is
//! tested up to the helper run without a context.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use libcni::error::{CniError, ErrorCode, ToCniError};

/// The tun driver's control device.
pub const TUN_DEVICE: &str = "/dev/net/tun";

/// The argument that makes the plugin binary the labelled tap maker
/// instead of a CNI plugin (see the module docs); followed by the
/// template, `0`/`1` for multi-queue, the owner and the group (`-` for
/// none).
pub const HELPER_FLAG: &str = "--cni-tap-create";

/// Where a thread asks for the SELinux context of its next exec.
const EXEC_CONTEXT: &str = "/proc/thread-self/attr/exec";
/// Present when SELinux is enabled on the node.
const SELINUX_ENFORCE: &str = "/sys/fs/selinux/enforce";

/// One tap to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapSpec {
    /// A name ending in `%d`, at most 15 bytes.
    pub template: String,
    pub multi_queue: bool,
    pub owner: Option<u32>,
    pub group: Option<u32>,
}

impl TapSpec {
    /// The `TUNSETIFF` flags of the reference's ioctl path: a tap with a
    /// virtio-net header; a multi-queue tap also drops the packet
    /// information header. (A process attaching later sets these two
    /// features for itself; only `IFF_MULTI_QUEUE` binds it.)
    fn flags(&self) -> libc::c_short {
        let mut flags = libc::IFF_TAP | libc::IFF_VNET_HDR;
        if self.multi_queue {
            flags |= libc::IFF_MULTI_QUEUE | libc::IFF_NO_PI;
        }
        // All flags are below 0x8000.
        flags as libc::c_short
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TunError {
    #[error("this node has no tun device ({TUN_DEVICE}: {0}); load the \"tun\" kernel module")]
    NoTunDevice(#[source] io::Error),
    #[error("cannot open {TUN_DEVICE}: {0}")]
    Open(#[source] io::Error),
    #[error("tap name {0:?} does not fit in 15 bytes")]
    NameTooLong(String),
    #[error("failed to create tap: {op} {name:?}: {source}")]
    Ioctl {
        op: &'static str,
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("selinuxContext {0:?} is set, but SELinux is not enabled on this node ({SELINUX_ENFORCE} is missing): the tap would not carry that context")]
    SelinuxAbsent(String),
    #[error("failed to set the SELinux exec context {context:?}: {source}")]
    ExecContext {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("failed to run {exe} to create the tap in SELinux context {context:?}: {source}")]
    HelperSpawn {
        exe: String,
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("creating the tap in SELinux context {context:?} failed ({status}): {stderr}")]
    HelperFailed {
        context: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

impl ToCniError for TunError {
    fn to_cni_error(&self) -> CniError {
        let code = match self {
            // The node cannot serve this configuration as it stands.
            TunError::NoTunDevice(_) | TunError::SelinuxAbsent(_) => ErrorCode::NotAvailable,
            TunError::NameTooLong(_) => ErrorCode::InvalidEnvironment,
            TunError::Open(_)
            | TunError::Ioctl { .. }
            | TunError::ExecContext { .. }
            | TunError::HelperSpawn { .. }
            | TunError::HelperFailed { .. } => ErrorCode::Internal,
        };
        CniError::new(code, self.to_string())
    }
}

/// Creates the tap in the calling thread's namespace (see the module
/// docs) and returns the name the kernel gave it.
pub fn create_persistent_tap(spec: &TapSpec) -> Result<String, TunError> {
    let tun = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(TUN_DEVICE)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TunError::NoTunDevice(e),
            _ => TunError::Open(e),
        })?;
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    let template = spec.template.as_bytes();
    if template.len() >= request.ifr_name.len() {
        return Err(TunError::NameTooLong(spec.template.clone()));
    }
    for (slot, byte) in request.ifr_name.iter_mut().zip(template) {
        *slot = *byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = spec.flags();
    let failed = |op: &'static str, name: &str| {
        let source = io::Error::last_os_error();
        TunError::Ioctl {
            op,
            name: name.to_string(),
            source,
        }
    };
    // SAFETY: TUNSETIFF reads and writes one ifreq, which outlives the
    // call; the name is NUL-terminated (checked length, zeroed rest).
    if unsafe { libc::ioctl(tun.as_raw_fd(), libc::TUNSETIFF, &mut request) } < 0 {
        return Err(failed("TUNSETIFF", &spec.template));
    }
    // SAFETY: the kernel wrote a NUL-terminated name of at most
    // IFNAMSIZ - 1 bytes into the zeroed array.
    let name = unsafe { CStr::from_ptr(request.ifr_name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    set(&tun, libc::TUNSETOWNER, spec.owner, "TUNSETOWNER", &name)?;
    set(&tun, libc::TUNSETGROUP, spec.group, "TUNSETGROUP", &name)?;
    set(&tun, libc::TUNSETPERSIST, Some(1), "TUNSETPERSIST", &name)?;
    Ok(name)
}

/// One integer-valued tun ioctl, skipped for `None`.
fn set(
    tun: &File,
    request: libc::Ioctl,
    value: Option<u32>,
    op: &'static str,
    name: &str,
) -> Result<(), TunError> {
    let Some(value) = value else {
        return Ok(());
    };
    // SAFETY: these ioctls take their argument by value.
    if unsafe { libc::ioctl(tun.as_raw_fd(), request, libc::c_ulong::from(value)) } < 0 {
        return Err(TunError::Ioctl {
            op,
            name: name.to_string(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Whether SELinux is enabled on the node.
pub fn selinux_enabled() -> bool {
    Path::new(SELINUX_ENFORCE).exists()
}

/// The helper's command line for `spec`, after [`HELPER_FLAG`].
fn helper_args(spec: &TapSpec) -> Vec<OsString> {
    let id = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    vec![
        HELPER_FLAG.into(),
        spec.template.clone().into(),
        if spec.multi_queue { "1" } else { "0" }.into(),
        id(spec.owner).into(),
        id(spec.group).into(),
    ]
}

/// Creates the tap by running `exe` (the plugin's own binary) as the
/// helper, in the calling thread's namespace, under SELinux context
/// `context` when given (see the module docs). Returns the tap's name.
pub fn create_with_helper(
    exe: &Path,
    spec: &TapSpec,
    context: Option<&str>,
) -> Result<String, TunError> {
    let label = context.unwrap_or("");
    if let Some(context) = context {
        set_exec_context(context)?;
    }
    // The child starts from this thread, so it inherits the thread's
    // namespace and exec context.
    let output = Command::new(exe)
        .args(helper_args(spec))
        .env_clear()
        .stdin(Stdio::null())
        .output();
    if context.is_some() {
        // The thread ends after this; cleared anyway so nothing else it
        // might start gets the context.
        if let Err(e) = set_exec_context("") {
            log::warn!("cannot clear the SELinux exec context: {e}");
        }
    }
    let output = output.map_err(|source| TunError::HelperSpawn {
        exe: exe.display().to_string(),
        context: label.to_string(),
        source,
    })?;
    if !output.status.success() {
        return Err(TunError::HelperFailed {
            context: label.to_string(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn set_exec_context(context: &str) -> Result<(), TunError> {
    OpenOptions::new()
        .write(true)
        .open(EXEC_CONTEXT)
        .and_then(|mut file| file.write_all(context.as_bytes()))
        .map_err(|source| TunError::ExecContext {
            context: context.to_string(),
            source,
        })
}

/// The helper's side: when the process was started with [`HELPER_FLAG`],
/// creates the tap, prints its name and returns the exit status; `None`
/// for a normal plugin run.
pub fn helper_main(args: &[OsString]) -> Option<i32> {
    if args.get(1).map(OsString::as_os_str) != Some(OsStr::new(HELPER_FLAG)) {
        return None;
    }
    let spec = match parse_helper_args(&args[2..]) {
        Some(spec) => spec,
        None => {
            eprintln!("usage: {HELPER_FLAG} TEMPLATE 0|1 OWNER|- GROUP|-");
            return Some(2);
        }
    };
    match create_persistent_tap(&spec) {
        Ok(name) => {
            println!("{name}");
            Some(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Some(1)
        }
    }
}

fn parse_helper_args(args: &[OsString]) -> Option<TapSpec> {
    let [template, multi_queue, owner, group] = args else {
        return None;
    };
    let id = |v: &OsString| -> Option<Option<u32>> {
        match v.to_str()? {
            "-" => Some(None),
            text => text.parse().ok().map(Some),
        }
    };
    Some(TapSpec {
        template: template.to_str()?.to_string(),
        multi_queue: match multi_queue.to_str()? {
            "0" => false,
            "1" => true,
            _ => return None,
        },
        owner: id(owner)?,
        group: id(group)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_arguments_round_trip() {
        for spec in [
            TapSpec {
                template: "tap0123abcd%d".into(),
                multi_queue: true,
                owner: Some(1000),
                group: None,
            },
            TapSpec {
                template: "x%d".into(),
                multi_queue: false,
                owner: None,
                group: Some(0),
            },
        ] {
            let args = helper_args(&spec);
            assert_eq!(args[0], HELPER_FLAG);
            assert_eq!(parse_helper_args(&args[1..]), Some(spec));
        }
        let bad: Vec<OsString> = ["t%d", "2", "-", "-"].iter().map(Into::into).collect();
        assert_eq!(parse_helper_args(&bad), None);
        let short: Vec<OsString> = ["t%d"].iter().map(Into::into).collect();
        assert_eq!(parse_helper_args(&short), None);
    }

    #[test]
    fn not_a_helper_run_without_the_flag() {
        let args: Vec<OsString> = vec!["tap".into()];
        assert_eq!(helper_main(&args), None);
    }

    #[test]
    fn flags_are_a_tap_with_vnet_header() {
        let mut spec = TapSpec {
            template: "t%d".into(),
            multi_queue: false,
            owner: None,
            group: None,
        };
        let flags = i32::from(spec.flags());
        assert_eq!(flags, libc::IFF_TAP | libc::IFF_VNET_HDR);
        spec.multi_queue = true;
        assert_ne!(i32::from(spec.flags()) & libc::IFF_MULTI_QUEUE, 0);
    }
}
