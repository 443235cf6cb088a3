//! The plugin: what every verb shares, GC and STATUS. ADD, DEL and CHECK
//! have their own modules.

use std::sync::Arc;
use std::time::Duration;

use libcni::device::{is_userspace_driver, BusDevice, Sysfs};
use libcni::invoke::{Delegator, PluginEnv, RawExec};
use libcni::lock::{FileLock, LockError, LockWait};
use libcni::netlink::rdma::{NetlinkRdmaOps, RdmaOps};
use libcni::netns::NetNs;
use libcni::plugin_conf::{GcAttachment, LEGACY_ATTACHMENTS_KEY, VALID_ATTACHMENTS_KEY};
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::config::NetConf;
use crate::error::HostDeviceError;
use crate::state::StateStore;
use crate::{add, check, del};

/// The `host-device` plugin.
pub struct HostDevice {
    pub(crate) sysfs: Sysfs,
    pub(crate) rdma: Arc<dyn RdmaOps>,
    /// The environment IPAM plugins inherit, besides this call's `CNI_*`.
    base_env: PluginEnv,
}

impl HostDevice {
    pub fn new(sysfs: Sysfs, rdma: Arc<dyn RdmaOps>, base_env: PluginEnv) -> HostDevice {
        HostDevice {
            sysfs,
            rdma,
            base_env,
        }
    }

    /// The binary's: `/sys`, the kernel's RDMA netlink, the process
    /// environment.
    pub fn from_process_env() -> HostDevice {
        HostDevice::new(
            Sysfs::default(),
            Arc::new(NetlinkRdmaOps),
            PluginEnv::from_process(),
        )
    }

    /// Runs IPAM plugins with this call's variables, whatever the process
    /// environment holds (the same for the binary; in-process tests differ).
    pub(crate) fn delegator(&self, args: &CmdArgs) -> Delegator {
        let path: Vec<String> = args.path.iter().map(|p| p.display().to_string()).collect();
        let env = self
            .base_env
            .clone()
            .with("CNI_CONTAINERID", &args.container_id)
            .with("CNI_NETNS", &args.netns)
            .with("CNI_IFNAME", &args.ifname)
            .with("CNI_ARGS", &args.args)
            .with("CNI_PATH", path.join(":"));
        Delegator::new(RawExec::new(), env)
    }

    /// DPDK mode: the PCI function the configuration names is bound to a
    /// userspace driver, so it has no netdev and nothing moves. Without a
    /// PCI function, the reference's `DPDKMode` key decides.
    pub(crate) fn dpdk_mode(&self, conf: &NetConf) -> bool {
        match &conf.pci_function {
            Some(pci) => self
                .sysfs
                .driver(&BusDevice::pci(pci))
                .is_some_and(|driver| is_userspace_driver(&driver)),
            None => conf.dpdk_mode_key,
        }
    }
}

/// Opens the container's namespace, with the path in the error.
pub(crate) fn open_netns(path: &str) -> Result<NetNs, HostDeviceError> {
    NetNs::open(path).map_err(|source| HostDeviceError::NetNs {
        path: path.to_string(),
        source,
    })
}

/// How long a call waits for another one working on the same device.
const DEVICE_LOCK_WAIT: LockWait = LockWait {
    timeout: Duration::from_secs(10),
    holder: "another host-device call on this device",
};

/// Serialises the calls that move one host device (two pods handed the
/// same device at once would otherwise interleave their renames and
/// moves). Keyed by the device's host name, which is what ADD looks up
/// and DEL restores; one lock file per name under `dataDir/locks`.
pub(crate) fn lock_device(conf: &NetConf, host_name: &str) -> Result<FileLock, HostDeviceError> {
    let path = conf
        .data_dir
        .join("locks")
        .join(format!("{host_name}.lock"));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| LockError::Open {
            path: path.clone(),
            source,
        })?;
    }
    Ok(FileLock::acquire(&path, DEVICE_LOCK_WAIT)?)
}

/// The state store of this configuration's network.
pub(crate) fn store(conf: &NetConf, args: &CmdArgs) -> StateStore {
    StateStore::new(&conf.data_dir, &args.conf.name)
}

impl Plugin for HostDevice {
    type Error = HostDeviceError;

    fn about(&self) -> String {
        skel::about_string("host-device", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, HostDeviceError> {
        add::add(self, args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), HostDeviceError> {
        del::del(self, args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), HostDeviceError> {
        check::check(self, args)
    }

    /// IPAM GC, then the devices of attachments the runtime no longer
    /// lists: each is returned to the host as DEL would (its address is
    /// IPAM GC's business). Without a list of valid attachments at all
    /// (the Go cnitool sends none), only IPAM is asked.
    fn gc(&self, args: &CmdArgs) -> Result<(), HostDeviceError> {
        let conf = NetConf::load_lenient(&args.conf)?;
        if let Some(plugin) = &conf.ipam_type {
            self.delegator(args)
                .gc(plugin, args.conf.bytes())
                .map_err(|source| HostDeviceError::Ipam {
                    action: "IPAM GC",
                    plugin: plugin.clone(),
                    source,
                })?;
        }
        let raw = args.conf.raw();
        if raw.get(VALID_ATTACHMENTS_KEY).is_none() && raw.get(LEGACY_ATTACHMENTS_KEY).is_none() {
            return Ok(());
        }
        let valid = &args.conf.valid_attachments;
        let store = store(&conf, args);
        let mut first_error = None;
        for state in store.list()? {
            let key = GcAttachment {
                container_id: state.container_id.clone(),
                ifname: state.ifname.clone(),
            };
            if valid.contains(&key) {
                continue;
            }
            log::info!(
                "GC: attachment {}/{} is gone; returning its device",
                state.container_id,
                state.ifname
            );
            if let Err(e) = del::release_attachment(self, &conf, &store, &state) {
                // The first error is returned (and logged by the skeleton);
                // later ones only here, so each appears once.
                match first_error {
                    Some(_) => log::warn!("GC of {}/{}: {e}", state.container_id, state.ifname),
                    None => first_error = Some(e),
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), HostDeviceError> {
        let conf = NetConf::load_lenient(&args.conf)?;
        if let Some(plugin) = &conf.ipam_type {
            self.delegator(args)
                .status(plugin, args.conf.bytes())
                .map_err(|source| HostDeviceError::Ipam {
                    action: "IPAM STATUS",
                    plugin: plugin.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}
