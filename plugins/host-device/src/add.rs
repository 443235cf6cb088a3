//! ADD: the host device into the container as `CNI_IFNAME`, with its RDMA
//! devices in exclusive mode, then IPAM, then the device-info file.
//!
//! Every change is recorded as an [`Undo`] when it is made; a failure
//! undoes them last first, so a failed ADD leaves the host as it was and
//! releases the address (the reference keeps the device in the pod when
//! IPAM or the interface setup fails). The state file goes first, so even
//! a crash leaves DEL what it needs.

use std::fs;
use std::path::PathBuf;

use libcni::device_info::{self, PciDeviceInfo, Written};
use libcni::iface::{configure_iface, Announce};
use libcni::lock::FileLock;
use libcni::netlink::RouteSocket;
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::types::{v100, AnyResult};
use libcni::version::SpecVersion;

use crate::config::NetConf;
use crate::error::HostDeviceError;
use crate::lookup::{find_host_link, LookupError};
use crate::plugin::{lock_device, open_netns, store, HostDevice};
use crate::rdma;
use crate::state::{AttachmentState, DeviceInfoChange, SavedLink, StateStore, STATE_VERSION};
use crate::transfer::{move_into_pod, move_out_of_pod, saved_link, Sides};

/// One change to take back.
#[derive(Debug)]
enum Undo {
    RemoveState,
    /// The link is in the pod as `ifname`.
    ReturnLink {
        saved: SavedLink,
    },
    ReturnRdma {
        devices: Vec<String>,
    },
    ReleaseIpam {
        plugin: String,
    },
    /// The file as it was before (`None`: there was none).
    DeviceInfo {
        path: PathBuf,
        before: Option<Vec<u8>>,
    },
}

/// The namespaces and sockets of one ADD.
struct Call<'a> {
    plugin: &'a HostDevice,
    args: &'a CmdArgs,
    conf: NetConf,
    store: StateStore,
    pod_ns: NetNs,
    /// Opened when the device moves (not in DPDK mode).
    sockets: Option<Sockets>,
    /// Held from the lookup to the end of ADD, rollback included.
    device_lock: Option<FileLock>,
}

struct Sockets {
    host_ns: NetNs,
    host: RouteSocket,
    pod: RouteSocket,
}

impl Sockets {
    fn sides<'s>(&'s mut self, pod_ns: &'s NetNs) -> Sides<'s> {
        Sides {
            host: &mut self.host,
            host_ns: &self.host_ns,
            pod: &mut self.pod,
            pod_ns,
        }
    }
}

pub fn add(plugin: &HostDevice, args: &CmdArgs) -> Result<AnyResult, HostDeviceError> {
    let conf = NetConf::load(&args.conf, &plugin.sysfs)?;
    let pod_ns = open_netns(&args.netns)?;
    let mut call = Call {
        plugin,
        args,
        store: store(&conf, args),
        conf,
        pod_ns,
        sockets: None,
        device_lock: None,
    };
    let mut undo = Vec::new();
    let outcome = call.run(&mut undo);
    if outcome.is_err() {
        for step in undo.into_iter().rev() {
            call.undo(step);
        }
    }
    outcome
}

impl Call<'_> {
    fn run(&mut self, undo: &mut Vec<Undo>) -> Result<AnyResult, HostDeviceError> {
        let args = self.args;
        let dpdk = self.plugin.dpdk_mode(&self.conf);
        let mut state = AttachmentState {
            version: STATE_VERSION,
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
            netns: args.netns.clone(),
            dpdk,
            host_link: None,
            pci_address: None,
            rdma_devices: Vec::new(),
            device_info: None,
            device_info_file: self.conf.device_info_file.clone(),
        };
        let mut interface = v100::Interface {
            name: args.ifname.clone(),
            sandbox: args.netns.clone(),
            ..v100::Interface::default()
        };
        if dpdk {
            log::info!(
                "PCI device {} is bound to a userspace driver (DPDK): nothing to move",
                self.conf.pci_function.as_deref().unwrap_or("(none)")
            );
            state.pci_address = self.conf.pci_function.clone();
            self.store.save(&state)?;
            undo.push(Undo::RemoveState);
        } else {
            let sockets = self.sockets.insert(Sockets {
                host_ns: NetNs::current_thread().map_err(|source| HostDeviceError::NetNs {
                    path: "the plugin's own".into(),
                    source,
                })?,
                host: RouteSocket::open_current()?,
                pod: RouteSocket::open_in(&self.pod_ns)?,
            });
            let selector = self
                .conf
                .selector
                .as_ref()
                .ok_or(crate::config::ConfigError::NoSelector)?;
            let found = find_host_link(&mut sockets.host, &self.plugin.sysfs, selector)?;
            self.device_lock = Some(lock_device(&self.conf, &found.name)?);
            // Another call may have taken it while this one waited.
            let link = sockets
                .host
                .link_by_index(found.index)?
                .filter(|link| link.name == found.name)
                .ok_or_else(|| LookupError::NotFound(selector.describe()))?;
            let alias = sockets
                .host
                .link_identity(link.index)?
                .and_then(|identity| identity.alias);
            let saved = saved_link(&link, alias);
            state.pci_address = self.plugin.sysfs.pci_of_netdev(&link.name);
            state.rdma_devices = rdma::devices_to_move(
                self.plugin.rdma.as_ref(),
                &self.plugin.sysfs,
                &sockets.host_ns,
                &link.name,
            )?;
            state.host_link = Some(saved.clone());
            self.store.save(&state)?;
            undo.push(Undo::RemoveState);

            let moved = move_into_pod(&mut sockets.sides(&self.pod_ns), &saved, &args.ifname)
                .map_err(HostDeviceError::Transfer)?;
            log::info!(
                "moved {} into {} as {}",
                saved.name,
                args.netns,
                args.ifname
            );
            undo.push(Undo::ReturnLink { saved });
            interface.mac = moved.mac_string();

            rdma::move_all(
                self.plugin.rdma.as_ref(),
                &state.rdma_devices,
                &sockets.host_ns,
                &self.pod_ns,
                &args.ifname,
                "move into the container",
            )?;
            if !state.rdma_devices.is_empty() {
                log::info!(
                    "moved RDMA device {} into the container with {}",
                    libcni::logging::joined(&state.rdma_devices),
                    args.ifname
                );
            }
            undo.push(Undo::ReturnRdma {
                devices: state.rdma_devices.clone(),
            });
        }
        if args.version() >= SpecVersion::V1_1_0 {
            interface.pci_id = state.pci_address.clone().unwrap_or_default();
        }

        let mut result = v100::Result::new();
        result.interfaces.push(interface);
        if let Some(plugin) = self.conf.ipam_type.clone() {
            let ipam_result = self
                .plugin
                .delegator(args)
                .add(&plugin, args.conf.bytes())
                .map_err(|source| HostDeviceError::Ipam {
                    action: "IPAM ADD",
                    plugin: plugin.clone(),
                    source,
                })?;
            undo.push(Undo::ReleaseIpam { plugin });
            let mut ipam =
                v100::Result::try_from(ipam_result).map_err(HostDeviceError::IpamResult)?;
            if ipam.ips.is_empty() {
                return Err(HostDeviceError::IpamNoIps);
            }
            for ip in &mut ipam.ips {
                // Every address is for the one interface.
                ip.interface = Some(0);
            }
            result.ips = ipam.ips;
            result.routes = ipam.routes;
            // The configuration's dns replaces the IPAM's, even when
            // empty, as in the reference.
            result.dns = self.conf.dns.clone();
            if let Some(sockets) = self.sockets.as_mut() {
                configure_iface(
                    &self.pod_ns,
                    &mut sockets.pod,
                    &args.ifname,
                    &result,
                    Announce::default(),
                )?;
            }
        }

        if let (Some(path), Some(pci)) = (&self.conf.device_info_file, &state.pci_address) {
            let before = read_if_present(path)?;
            let info = PciDeviceInfo {
                pci_address: pci.clone(),
                rdma_device: state.rdma_devices.first().cloned(),
                ..PciDeviceInfo::default()
            };
            undo.push(Undo::DeviceInfo {
                path: path.clone(),
                before,
            });
            let written = device_info::write_pci(path, &info)?;
            // A file we left alone is not ours to restore or remove.
            state.device_info = match written {
                Written::Created => Some(DeviceInfoChange::Created),
                Written::Updated => Some(DeviceInfoChange::Updated),
                Written::LeftAlone => None,
            };
            self.store.save(&state)?;
        }

        // A result the configuration's version cannot express (no IP for
        // 0.1.0/0.2.0) fails here, while the changes can still be undone,
        // not in the skeleton after they are done.
        let result = AnyResult::V1(result);
        result
            .clone()
            .convert_to(args.version())
            .map_err(|source| HostDeviceError::ResultNotExpressible {
                version: args.version().to_string(),
                source,
            })?;
        Ok(result)
    }

    fn undo(&mut self, step: Undo) {
        let args = self.args;
        let failed = match step {
            Undo::RemoveState => self
                .store
                .remove(&args.container_id, &args.ifname)
                .err()
                .map(|e| e.to_string()),
            Undo::ReturnLink { saved } => self.sockets.as_mut().and_then(|sockets| {
                let pod_link = match sockets.pod.link_by_name(&args.ifname) {
                    Ok(Some(link)) => link,
                    Ok(None) => {
                        return Some(format!("{:?} is no longer in the container", args.ifname))
                    }
                    Err(e) => return Some(e.to_string()),
                };
                move_out_of_pod(&mut sockets.sides(&self.pod_ns), &pod_link, &saved)
                    .err()
                    .map(|e| e.to_string())
            }),
            Undo::ReturnRdma { devices } => self.sockets.as_ref().and_then(|sockets| {
                rdma::move_all(
                    self.plugin.rdma.as_ref(),
                    &devices,
                    &self.pod_ns,
                    &sockets.host_ns,
                    &args.ifname,
                    "move back to the host",
                )
                .err()
                .map(|e| e.to_string())
            }),
            Undo::ReleaseIpam { plugin } => self
                .plugin
                .delegator(args)
                .del(&plugin, args.conf.bytes())
                .err()
                .map(|e| e.to_string()),
            Undo::DeviceInfo { path, before } => match before {
                // In place, so the file keeps the mode the runtime reads it
                // with.
                Some(bytes) => fs::write(&path, bytes).err().map(|e| e.to_string()),
                None => device_info::remove(&path).err().map(|e| e.to_string()),
            },
        };
        if let Some(e) = failed {
            log::warn!("undoing a failed ADD of {}: {e}", args.ifname);
        }
    }
}

fn read_if_present(path: &std::path::Path) -> Result<Option<Vec<u8>>, HostDeviceError> {
    match device_info::read_file(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(device_info::DeviceInfoError::Read {
            path: path.to_path_buf(),
            source,
        }
        .into()),
    }
}
