//! The verbs: ADD, DEL, CHECK, GC and STATUS.
//!
//! ADD writes the attachment's state before its first change and records
//! each step as it is taken; a failure then runs the same teardown DEL
//! runs, driven by that record, so a half-done ADD leaves nothing behind
//! (the reference sriov-cni leaves a partial PF-side configuration).

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use libcni::invoke::{Delegator, Exec, PluginEnv, RawExec};
use libcni::netlink::{format_mac, LinkInfo, RouteSocket};
use libcni::netns::{NetNs, NetNsError};
use libcni::plugin_conf::PluginConf;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};
use nix::errno::Errno;

use crate::addressing;
use crate::alloc::{netns_alive, AllocError, AllocationRecord, Allocations, VfLock};
use crate::config::{DeviceSelector, Locations, NetConf};
use crate::error::PluginError;
use crate::fake::FakeBackend;
use crate::hwaddr::MacAddr;
use crate::knobs::Knobs;
use crate::netdev::{self, NetdevError};
use crate::pf::{NetlinkPfOps, PfLinkOps, VfSetting};
use crate::rdma::{RdmaError, RdmaNetnsMode, RdmaOps};
use crate::rdma_netlink::NetlinkRdmaOps;
use crate::state::{
    AttachmentState, NetdevLocation, RdmaAttachment, StateStore, DEFAULT_STATE_DIR, STATE_VERSION,
};
use crate::sysfs::{Sysfs, VfDevice, DEFAULT_SYSFS_ROOT};
use crate::verbs::{PortQuery, PortState, VerbsPortQuery};

/// Read-backs of an administrative MAC: some PF drivers apply it
/// asynchronously (sriov-cni polls too).
const MAC_VERIFY_ATTEMPTS: u32 = 10;
const MAC_VERIFY_PAUSE: Duration = Duration::from_millis(50);

/// The RDMA port CHECK looks at: VFs have one.
const RDMA_PORT: u8 = 1;

/// The hardware-facing operations.
#[derive(Clone)]
pub struct Backends {
    pub pf: Arc<dyn PfLinkOps>,
    pub rdma: Arc<dyn RdmaOps>,
    pub ports: Arc<dyn PortQuery>,
}

impl Backends {
    /// The kernel: rtnetlink, RDMA netlink and libibverbs.
    pub fn real() -> Backends {
        Backends {
            pf: Arc::new(NetlinkPfOps::new()),
            rdma: Arc::new(NetlinkRdmaOps),
            ports: Arc::new(VerbsPortQuery),
        }
    }

    /// All three served by one simulated machine (tests).
    pub fn fake(backend: Arc<FakeBackend>) -> Backends {
        Backends {
            pf: backend.clone(),
            rdma: backend.clone(),
            ports: backend,
        }
    }

    /// The fake when [`crate::knobs::FAKE_OPS_ENV`] names a world file,
    /// the kernel otherwise.
    pub fn from_knobs(knobs: &Knobs) -> Backends {
        match &knobs.fake_world {
            Some(path) => {
                log::warn!(
                    "test mode: PF, RDMA and verbs operations go to the simulated machine in {}",
                    path.display()
                );
                Backends::fake(Arc::new(FakeBackend::with_file(path)))
            }
            None => Backends::real(),
        }
    }
}

/// Where this call keeps and finds things.
struct Context {
    state_dir: PathBuf,
    sysfs: Sysfs,
    store: StateStore,
    allocs: Allocations,
}

/// How a teardown releases the IPAM allocation.
struct IpamRelease<'a> {
    plugin: String,
    netconf: Vec<u8>,
    env: &'a PluginEnv,
}

/// The `rdma-sriov` plugin.
pub struct RdmaSriov {
    backends: Backends,
    knobs: Knobs,
    exec: Arc<dyn Exec>,
    env: PluginEnv,
}

impl RdmaSriov {
    /// `env` is the environment delegates inherit (the plugin's own, with
    /// its CNI_* variables).
    pub fn new(backends: Backends, knobs: Knobs, exec: Arc<dyn Exec>, env: PluginEnv) -> RdmaSriov {
        RdmaSriov {
            backends,
            knobs,
            exec,
            env,
        }
    }

    /// What the binary runs with.
    pub fn from_process_env() -> RdmaSriov {
        let knobs = Knobs::from_process_env();
        let backends = Backends::from_knobs(&knobs);
        RdmaSriov::new(
            backends,
            knobs,
            Arc::new(RawExec::new()),
            PluginEnv::from_process(),
        )
    }

    /// Configuration key, then knob, then default.
    fn context(&self, state_dir: Option<PathBuf>, sysfs_root: Option<PathBuf>) -> Context {
        let state_dir = state_dir
            .or_else(|| self.knobs.state_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let sysfs_root = sysfs_root
            .or_else(|| self.knobs.sysfs_root.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SYSFS_ROOT));
        Context {
            store: StateStore::new(&state_dir),
            allocs: Allocations::new(&state_dir),
            sysfs: Sysfs::new(sysfs_root),
            state_dir,
        }
    }

    fn delegator(&self, env: &PluginEnv) -> Delegator<Arc<dyn Exec>> {
        Delegator::new(self.exec.clone(), env.clone())
    }

    /// The first VF of `pf` that no live pod holds and no other run has
    /// locked, returned locked.
    fn pick_free_vf(&self, ctx: &Context, pf: &str) -> Result<(VfDevice, VfLock), PluginError> {
        for (index, pci) in ctx.sysfs.vfs_of_pf(pf)? {
            let held = matches!(ctx.allocs.read(&pci), Ok(Some(r)) if netns_alive(&r.netns));
            if held {
                continue;
            }
            let Ok(lock) = VfLock::acquire(&ctx.state_dir, &pci, Duration::ZERO) else {
                continue;
            };
            if self.reclaim_if_stale(ctx, &pci)?.is_some() {
                continue;
            }
            match ctx.sysfs.vf(&pci) {
                Ok(vf) => {
                    log::info!("pf {pf}: picked free VF {index} ({pci})");
                    return Ok((vf, lock));
                }
                Err(e) => log::info!("pf {pf}: skipping VF {index} ({pci}): {e}"),
            }
        }
        Err(PluginError::NoFreeVf { pf: pf.to_string() })
    }

    /// The live holder of VF `pci`, if any. A holder whose netns is gone is
    /// stale: its attachment is torn down (the VF gets back its name, MAC,
    /// MTU and PF-side settings of before that pod, and the address is
    /// released) and its record dropped. Call with the VF locked.
    fn reclaim_if_stale(
        &self,
        ctx: &Context,
        pci: &str,
    ) -> Result<Option<AllocationRecord>, PluginError> {
        let Some(record) = ctx.allocs.read(pci)? else {
            return Ok(None);
        };
        if netns_alive(&record.netns) {
            return Ok(Some(record));
        }
        log::info!(
            "VF {pci}: reclaiming it from {}, whose netns is gone",
            record.describe()
        );
        if !record.container_id.is_empty() {
            if let Some(mut stale) =
                ctx.store
                    .load(&record.network, &record.container_id, &record.ifname)?
            {
                let env = self.attachment_env(&stale);
                let release = ipam_type_of_value(&stale.netconf).map(|plugin| IpamRelease {
                    plugin,
                    netconf: serde_json::to_vec(&stale.netconf).unwrap_or_default(),
                    env: &env,
                });
                let problems = self.teardown(ctx, &mut stale, release);
                if !problems.is_empty() {
                    ctx.store.save(&stale)?;
                    return Err(PluginError::Teardown(problems));
                }
                ctx.store
                    .remove(&stale.network, &stale.container_id, &stale.ifname)?;
            }
        }
        ctx.allocs.remove(pci)?;
        Ok(None)
    }

    /// The environment of an IPAM call made for another attachment than
    /// this call's (GC, reclaim).
    fn attachment_env(&self, state: &AttachmentState) -> PluginEnv {
        self.env
            .clone()
            .with("CNI_CONTAINERID", &state.container_id)
            .with("CNI_IFNAME", &state.ifname)
            .with("CNI_NETNS", "")
            .with("CNI_ARGS", "")
    }

    /// Which RDMA device goes with the VF, and whether it moves. Checked
    /// before anything changes.
    fn plan_rdma(
        &self,
        allow_shared: bool,
        vf: &VfDevice,
        host: &NetNs,
    ) -> Result<RdmaAttachment, PluginError> {
        let mode = self.backends.rdma.netns_mode()?;
        if mode == RdmaNetnsMode::Shared && !allow_shared {
            return Err(PluginError::SharedMode);
        }
        let device = match &vf.rdma_device {
            Some(device) => device.clone(),
            None => {
                // Auxiliary-bus (SF) and soft-RoCE devices are not under the
                // PCI device in sysfs: find the one bound to the netdev.
                let netdev = vf.netdev.clone().unwrap_or_default();
                self.backends
                    .rdma
                    .devices(host)?
                    .into_iter()
                    .find(|d| d.is_bound_to(&netdev))
                    .map(|d| d.name)
                    .ok_or_else(|| PluginError::NoRdmaDevice {
                        pci: vf.pci.clone(),
                        netdev,
                    })?
            }
        };
        Ok(RdmaAttachment {
            device,
            move_with_pod: mode == RdmaNetnsMode::Exclusive,
            in_pod: false,
        })
    }

    /// Applies one PF-side setting; a MAC is read back until the PF shows
    /// it.
    fn apply_vf_setting(&self, vf: &VfDevice, setting: &VfSetting) -> Result<(), PluginError> {
        let pf = &self.backends.pf;
        pf.set_vf(&vf.pf_name, vf.vf_index, setting)?;
        if let VfSetting::Mac { mac } = setting {
            let mut reported = MacAddr::ZERO;
            for attempt in 0..MAC_VERIFY_ATTEMPTS {
                reported = pf.vf_state(&vf.pf_name, vf.vf_index)?.admin_mac;
                if reported == *mac {
                    return Ok(());
                }
                if attempt + 1 < MAC_VERIFY_ATTEMPTS {
                    thread::sleep(MAC_VERIFY_PAUSE);
                }
            }
            return Err(PluginError::MacNotApplied {
                pf: vf.pf_name.clone(),
                vf: vf.vf_index,
                mac: mac.to_string(),
                reported: reported.to_string(),
            });
        }
        Ok(())
    }

    /// Everything ADD changes, each step recorded in `state` first.
    #[allow(clippy::too_many_arguments)]
    fn setup(
        &self,
        ctx: &Context,
        conf: &NetConf,
        args: &CmdArgs,
        vf: &VfDevice,
        pod: &NetNs,
        host: &NetNs,
        state: &mut AttachmentState,
    ) -> Result<v100::Result, PluginError> {
        for setting in conf.vf_settings() {
            state.applied.push(setting.clone());
            ctx.store.save(state)?;
            self.apply_vf_setting(vf, &setting)?;
            log::debug!("{} vf {}: {setting}", vf.pf_name, vf.vf_index);
        }

        // The RDMA device moves before its netdev: a device that cannot
        // move is then refused with its own error before the netdev is
        // touched, and a soft-RoCE device (unregistered by the kernel when
        // its netdev leaves) is still there to be refused.
        if let Some(rdma) = state.rdma.clone().filter(|r| r.move_with_pod) {
            if let Some(r) = state.rdma.as_mut() {
                r.in_pod = true;
            }
            ctx.store.save(state)?;
            self.backends
                .rdma
                .move_device(&rdma.device, host, pod)
                .map_err(|source| {
                    if source.errno() == Some(Errno::EOPNOTSUPP) {
                        PluginError::RdmaMoveUnsupported {
                            device: rdma.device.clone(),
                            driver: ctx
                                .sysfs
                                .rdma_driver(&rdma.device)
                                .unwrap_or_else(|| "(unknown driver)".to_string()),
                        }
                    } else {
                        PluginError::RdmaMove {
                            device: rdma.device.clone(),
                            netns: args.netns.clone(),
                            source,
                        }
                    }
                })?;
            log::info!("RDMA device {} moved to {}", rdma.device, args.netns);
        }

        let mut pod_link: Option<(RouteSocket, LinkInfo)> = None;
        if let Some(netdev_name) = &vf.netdev {
            let mut host_socket = RouteSocket::open_current()?;
            let link = netdev::find_in_host(&mut host_socket, &ctx.sysfs, &vf.pci, &[])?
                .ok_or_else(|| NetdevError::NotInHost(netdev_name.clone()))?;
            let host_name = link.name.clone();
            state.host_netdev = Some(netdev::host_netdev(&link));
            let temp = netdev::temp_name();
            state.netdev_location = Some(NetdevLocation::Host { name: temp.clone() });
            ctx.store.save(state)?;
            netdev::rename_down(&mut host_socket, link.index, &temp)?;
            state.netdev_location = Some(NetdevLocation::Pod { name: temp.clone() });
            ctx.store.save(state)?;
            netdev::move_link(&mut host_socket, link.index, pod.as_fd(), &args.netns)?;
            let mut pod_socket = RouteSocket::open_in(pod)?;
            let index = netdev::rename_in_pod(&mut pod_socket, &temp, &args.ifname)?;
            state.netdev_location = Some(NetdevLocation::Pod {
                name: args.ifname.clone(),
            });
            ctx.store.save(state)?;
            let link =
                netdev::configure_in_pod(&mut pod_socket, index, &args.ifname, conf.mac, conf.mtu)?;
            log::info!(
                "VF {} netdev {host_name} is {} in {}",
                vf.pci,
                args.ifname,
                args.netns
            );
            pod_link = Some((pod_socket, link));
        }

        let mut result = v100::Result::new();
        if let Some(ipam) = ipam_type(&args.conf) {
            state.ipam_allocated = true;
            ctx.store.save(state)?;
            let ipam_result = match self.delegator(&self.env).add(&ipam, args.conf.bytes()) {
                Ok(r) => r,
                Err(e) => {
                    // A failed IPAM ADD cleans up after itself (host-local
                    // releases what it reserved); nothing is owed.
                    state.ipam_allocated = false;
                    return Err(e.into());
                }
            };
            let ipam_result = v100::Result::try_from(ipam_result)?;
            if ipam_result.ips.is_empty() {
                return Err(PluginError::IpamNoIps);
            }
            result.ips = ipam_result
                .ips
                .into_iter()
                .map(|mut ip| {
                    ip.interface = Some(0);
                    ip
                })
                .collect();
            result.routes = ipam_result.routes;
            result.dns = ipam_result.dns;
        }

        let (mac, mtu) = match &mut pod_link {
            Some((socket, link)) => {
                addressing::configure(socket, link.index, &result)?;
                (link.mac_string(), link.mtu)
            }
            // No netdev: the administrative MAC is the VF's address.
            None => {
                let admin = conf.mac.unwrap_or(state.original_vf.admin_mac);
                let text = if admin.is_zero() {
                    String::new()
                } else {
                    admin.to_string()
                };
                (text, 0)
            }
        };
        result.interfaces.push(v100::Interface {
            name: args.ifname.clone(),
            mac: mac.clone(),
            mtu,
            sandbox: args.netns.clone(),
            pci_id: vf.pci.clone(),
            ..v100::Interface::default()
        });

        state.pod_mac = mac.parse().ok();
        state.addresses = result.ips.iter().map(|ip| ip.address).collect();
        state.complete = true;
        ctx.store.save(state)?;
        ctx.allocs.write(
            &vf.pci,
            &AllocationRecord {
                netns: args.netns.clone(),
                network: args.conf.name.clone(),
                container_id: args.container_id.clone(),
                ifname: args.ifname.clone(),
            },
        )?;
        Ok(result)
    }

    /// Undoes what `state` records, in the reverse order of ADD, doing all
    /// it can and returning what failed. Steps that succeed are cleared
    /// from `state`, so a later attempt only retries the rest.
    fn teardown(
        &self,
        ctx: &Context,
        state: &mut AttachmentState,
        ipam: Option<IpamRelease<'_>>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let host = match NetNs::current_thread() {
            Ok(host) => host,
            Err(e) => return vec![e.to_string()],
        };
        let pod = match NetNs::open(&state.netns) {
            Ok(pod) => Some(pod),
            // Gone (or only an unmounted file left): the kernel has already
            // returned physical netdevs and RDMA devices to the host.
            Err(e @ (NetNsError::NotExist { .. } | NetNsError::NotNetNs { .. })) => {
                log::info!("pod netns is gone ({e}); releasing from the host side");
                None
            }
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };

        if state.ipam_allocated {
            match ipam {
                Some(release) => {
                    match self
                        .delegator(release.env)
                        .del(&release.plugin, &release.netconf)
                    {
                        Ok(()) => state.ipam_allocated = false,
                        Err(e) => problems.push(format!("IPAM DEL: {e}")),
                    }
                }
                None => state.ipam_allocated = false,
            }
        }

        if let Some(location) = state.netdev_location.clone() {
            match self.return_netdev(ctx, state, &location, pod.as_ref(), &host) {
                Ok(()) => state.netdev_location = None,
                Err(e) => problems.push(format!("VF netdev: {e}")),
            }
        }

        if let Some(rdma) = state.rdma.as_mut().filter(|r| r.in_pod) {
            match &pod {
                Some(pod) => match self.backends.rdma.devices(pod) {
                    Ok(devices) if devices.iter().any(|d| d.name == rdma.device) => {
                        match self.backends.rdma.move_device(&rdma.device, pod, &host) {
                            Ok(()) => {
                                log::info!("RDMA device {} back in the host", rdma.device);
                                rdma.in_pod = false;
                            }
                            Err(e) => problems.push(format!(
                                "failed to restore RDMA device {} to the host netns: {e}",
                                rdma.device
                            )),
                        }
                    }
                    // Never got there, or already back.
                    Ok(_) => rdma.in_pod = false,
                    // ib_core gone since ADD: there is no device to move.
                    Err(e @ RdmaError::Unavailable { .. }) => {
                        log::warn!("RDMA device {} not restored: {e}", rdma.device);
                        rdma.in_pod = false;
                    }
                    Err(e) => problems.push(format!("RDMA devices of the pod netns: {e}")),
                },
                None => rdma.in_pod = false,
            }
        }

        let mut restored: Vec<&VfSetting> = Vec::new();
        let mut pf_failed = false;
        for setting in state.applied.iter().rev() {
            if restored.iter().any(|s| s.same_kind(setting)) {
                continue;
            }
            restored.push(setting);
            match setting.restore_from(&state.original_vf) {
                Some(original) => {
                    if let Err(e) = self
                        .backends
                        .pf
                        .set_vf(&state.pf, state.vf_index, &original)
                    {
                        pf_failed = true;
                        problems.push(format!("restore {original}: {e}"));
                    }
                }
                None => log::warn!(
                    "{} vf {}: cannot restore {setting}: the PF never reported its original value",
                    state.pf,
                    state.vf_index
                ),
            }
        }
        if !pf_failed {
            state.applied.clear();
        }

        match ctx.allocs.read(&state.pci) {
            Ok(Some(record))
                if record.is_owned_by(&state.network, &state.container_id, &state.ifname) =>
            {
                if let Err(e) = ctx.allocs.remove(&state.pci) {
                    problems.push(e.to_string());
                }
            }
            Ok(_) => {}
            Err(e) => problems.push(e.to_string()),
        }
        problems
    }

    /// Brings the VF netdev back to the host as it was.
    fn return_netdev(
        &self,
        ctx: &Context,
        state: &AttachmentState,
        location: &NetdevLocation,
        pod: Option<&NetNs>,
        host: &NetNs,
    ) -> Result<(), PluginError> {
        let Some(original) = &state.host_netdev else {
            return Ok(());
        };
        let mut hints: Vec<String> = Vec::new();
        match location {
            NetdevLocation::Pod { name } => {
                if let Some(pod) = pod {
                    let mut pod_socket = RouteSocket::open_in(pod)?;
                    if let Some(temp) =
                        netdev::send_back_from_pod(&mut pod_socket, name, host.as_fd())?
                    {
                        hints.push(temp);
                    }
                }
            }
            NetdevLocation::Host { name } => hints.push(name.clone()),
        }
        let hint_refs: Vec<&str> = hints.iter().map(String::as_str).collect();
        let mut host_socket = RouteSocket::open_current()?;
        match netdev::find_in_host(&mut host_socket, &ctx.sysfs, &state.pci, &hint_refs)? {
            Some(link) => {
                netdev::restore_in_host(&mut host_socket, &link, original)?;
                log::info!(
                    "VF {} netdev back in the host as {}",
                    state.pci,
                    original.name
                );
                Ok(())
            }
            None => {
                // Unbound or being rebound: nothing is left to give back.
                log::warn!(
                    "VF {} netdev not found in the host or the pod; it was not restored",
                    state.pci
                );
                Ok(())
            }
        }
    }

    fn load_and_lock(
        &self,
        ctx: &Context,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<(AttachmentState, VfLock)>, PluginError> {
        let Some(state) = ctx.store.load(network, container_id, ifname)? else {
            return Ok(None);
        };
        let lock = VfLock::acquire(&ctx.state_dir, &state.pci, self.knobs.lock_timeout)?;
        // Another run may have finished with it while we waited.
        Ok(ctx
            .store
            .load(network, container_id, ifname)?
            .map(|state| (state, lock)))
    }
}

/// The IPAM plugin type of a configuration, when it has one.
fn ipam_type(conf: &PluginConf) -> Option<String> {
    conf.ipam
        .as_ref()
        .map(|i| i.ipam_type.clone())
        .filter(|t| !t.is_empty())
}

fn ipam_type_of_value(netconf: &serde_json::Value) -> Option<String> {
    netconf
        .get("ipam")
        .and_then(|i| i.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

impl Plugin for RdmaSriov {
    type Error = PluginError;

    fn about(&self) -> String {
        skel::about_string("rdma-sriov", env!("CARGO_PKG_VERSION"))
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, PluginError> {
        let conf = NetConf::parse(&args.conf, &args.args)?;
        let ctx = self.context(conf.state_dir.clone(), conf.sysfs_root.clone());
        let pod = NetNs::open(&args.netns)?;
        let host = NetNs::current_thread()?;
        let network = &args.conf.name;
        if ctx
            .store
            .load(network, &args.container_id, &args.ifname)?
            .is_some()
        {
            return Err(PluginError::AttachmentExists {
                network: network.clone(),
                container_id: args.container_id.clone(),
                ifname: args.ifname.clone(),
            });
        }

        // In pf mode the PF lock is held to the end, so concurrent picks
        // from one PF cannot choose the same VF.
        let (vf, _pf_lock, _vf_lock) = match &conf.device {
            DeviceSelector::Pci(pci) => {
                let lock = VfLock::acquire(&ctx.state_dir, pci, self.knobs.lock_timeout)?;
                if let Some(holder) = self.reclaim_if_stale(&ctx, pci)? {
                    return Err(AllocError::AlreadyAllocated {
                        pci: pci.clone(),
                        owner: holder.describe(),
                    }
                    .into());
                }
                let vf = ctx.sysfs.vf(pci)?;
                if let Some(expected) = &conf.expected_pf {
                    if &vf.pf_name != expected {
                        return Err(PluginError::WrongPf {
                            pci: pci.clone(),
                            actual: vf.pf_name,
                            expected: expected.clone(),
                        });
                    }
                }
                (vf, None, lock)
            }
            DeviceSelector::Pf(pf) => {
                let pf_lock =
                    VfLock::acquire(&ctx.state_dir, &format!("pf-{pf}"), self.knobs.lock_timeout)?;
                let (vf, lock) = self.pick_free_vf(&ctx, pf)?;
                (vf, Some(pf_lock), lock)
            }
        };

        let rdma = match vf.userspace_driver() {
            Some(driver) => {
                log::info!(
                    "VF {} is bound to {driver}: no netdev, no RDMA move",
                    vf.pci
                );
                None
            }
            None => Some(self.plan_rdma(conf.allow_shared_rdma_netns, &vf, &host)?),
        };
        let original_vf = self.backends.pf.vf_state(&vf.pf_name, vf.vf_index)?;
        let mut state = AttachmentState {
            version: STATE_VERSION,
            network: network.clone(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
            netns: args.netns.clone(),
            pci: vf.pci.clone(),
            pf: vf.pf_name.clone(),
            vf_index: vf.vf_index,
            userspace_driver: vf.userspace_driver().map(str::to_string),
            host_netdev: None,
            netdev_location: None,
            original_vf,
            applied: Vec::new(),
            rdma,
            ipam_allocated: false,
            netconf: args.conf.raw().clone(),
            pod_mac: None,
            addresses: Vec::new(),
            complete: false,
        };
        ctx.store.save(&state)?;

        match self.setup(&ctx, &conf, args, &vf, &pod, &host, &mut state) {
            Ok(result) => Ok(AnyResult::V1(result)),
            Err(error) => {
                log::warn!("ADD failed, undoing: {error}");
                let release = ipam_type(&args.conf).map(|plugin| IpamRelease {
                    plugin,
                    netconf: args.conf.bytes().to_vec(),
                    env: &self.env,
                });
                let problems = self.teardown(&ctx, &mut state, release);
                if problems.is_empty() {
                    if let Err(e) =
                        ctx.store
                            .remove(&state.network, &state.container_id, &state.ifname)
                    {
                        log::warn!("{e}");
                    }
                    Err(error)
                } else {
                    // Kept for a later DEL to finish the job.
                    if let Err(e) = ctx.store.save(&state) {
                        log::warn!("{e}");
                    }
                    Err(PluginError::RollbackFailed {
                        error: Box::new(error),
                        problems,
                    })
                }
            }
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), PluginError> {
        let locations = Locations::from_conf(&args.conf);
        let ctx = self.context(locations.state_dir, locations.sysfs_root);
        let Some((mut state, _lock)) =
            self.load_and_lock(&ctx, &args.conf.name, &args.container_id, &args.ifname)?
        else {
            // Nothing of ours is left, but the address may be (an ADD that
            // died before its state was written, or a second DEL).
            if let Some(plugin) = ipam_type(&args.conf) {
                self.delegator(&self.env).del(&plugin, args.conf.bytes())?;
            }
            return Ok(());
        };
        let release = match ipam_type(&args.conf) {
            Some(plugin) => Some(IpamRelease {
                plugin,
                netconf: args.conf.bytes().to_vec(),
                env: &self.env,
            }),
            None => ipam_type_of_value(&state.netconf).map(|plugin| IpamRelease {
                plugin,
                netconf: serde_json::to_vec(&state.netconf).unwrap_or_default(),
                env: &self.env,
            }),
        };
        let problems = self.teardown(&ctx, &mut state, release);
        if problems.is_empty() {
            ctx.store
                .remove(&state.network, &state.container_id, &state.ifname)?;
            Ok(())
        } else {
            ctx.store.save(&state)?;
            Err(PluginError::Teardown(problems))
        }
    }

    fn check(&self, args: &CmdArgs) -> Result<(), PluginError> {
        let locations = Locations::from_conf(&args.conf);
        let ctx = self.context(locations.state_dir, locations.sysfs_root);
        let state = ctx
            .store
            .load(&args.conf.name, &args.container_id, &args.ifname)?
            .ok_or_else(|| {
                PluginError::Check(format!(
                    "no state for {}/{} on network {:?}: was ADD run?",
                    args.container_id, args.ifname, args.conf.name
                ))
            })?;
        if !state.complete {
            return Err(PluginError::Check(
                "the attachment's ADD did not complete".to_string(),
            ));
        }
        let pod = NetNs::open(&args.netns)?;

        // What ADD reported: the runtime's prevResult, else our record.
        let mut expected_mac = state.pod_mac;
        let mut expected_ips = state.addresses.clone();
        if let Some(prev) = args.conf.prev_result()? {
            let prev = v100::Result::try_from(prev)?;
            if let Some(index) = prev
                .interfaces
                .iter()
                .position(|i| i.name == args.ifname && i.sandbox == args.netns)
            {
                expected_mac = prev.interfaces.get(index).and_then(|i| i.mac.parse().ok());
                expected_ips = prev
                    .ips
                    .iter()
                    .filter(|ip| ip.interface == Some(index))
                    .map(|ip| ip.address)
                    .collect();
            }
        }

        let current = self.backends.pf.vf_state(&state.pf, state.vf_index)?;
        for setting in &state.applied {
            if !setting.is_in_effect(&current) {
                return Err(PluginError::Check(format!(
                    "{} vf {}: {setting} is no longer in effect",
                    state.pf, state.vf_index
                )));
            }
        }

        if state.userspace_driver.is_none() {
            let mut socket = RouteSocket::open_in(&pod)?;
            let link = socket.link_by_name(&args.ifname)?.ok_or_else(|| {
                PluginError::Check(format!(
                    "interface {} not found in netns {}",
                    args.ifname, args.netns
                ))
            })?;
            if let Some(mac) = expected_mac {
                if MacAddr::from_slice(&link.mac) != Some(mac) {
                    return Err(PluginError::Check(format!(
                        "interface {} has MAC {}, expected {mac}",
                        args.ifname,
                        format_mac(&link.mac)
                    )));
                }
            }
            if !link.up {
                return Err(PluginError::Check(format!(
                    "interface {} is down",
                    args.ifname
                )));
            }
            let present: Vec<_> = socket
                .list_addresses(Some(link.index))?
                .into_iter()
                .map(|a| a.address)
                .collect();
            for ip in &expected_ips {
                if !present.contains(ip) {
                    return Err(PluginError::Check(format!(
                        "interface {} lacks address {ip}",
                        args.ifname
                    )));
                }
            }
        }

        if let Some(rdma) = &state.rdma {
            if rdma.move_with_pod {
                let devices = self.backends.rdma.devices(&pod)?;
                if !devices.iter().any(|d| d.name == rdma.device) {
                    return Err(PluginError::Check(format!(
                        "RDMA device {} is not in netns {}",
                        rdma.device, args.netns
                    )));
                }
            }
            let port = self
                .backends
                .ports
                .port_state(&pod, &rdma.device, RDMA_PORT)?;
            if port != PortState::Active {
                return Err(PluginError::Check(format!(
                    "RDMA device {} port {RDMA_PORT} is {port}, expected ACTIVE",
                    rdma.device
                )));
            }
        }

        if let Some(plugin) = ipam_type(&args.conf) {
            self.delegator(&self.env)
                .check(&plugin, args.conf.bytes())?;
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), PluginError> {
        let locations = Locations::from_conf(&args.conf);
        let ctx = self.context(locations.state_dir, locations.sysfs_root);
        let network = &args.conf.name;
        let valid: HashSet<(&str, &str)> = args
            .conf
            .valid_attachments
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        let mut problems = Vec::new();
        for entry in ctx.store.list(network) {
            let state = match entry {
                Ok(state) => state,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            if valid.contains(&(state.container_id.as_str(), state.ifname.as_str())) {
                continue;
            }
            let (mut state, _lock) =
                match self.load_and_lock(&ctx, network, &state.container_id, &state.ifname) {
                    Ok(Some(found)) => found,
                    Ok(None) => continue,
                    Err(e) => {
                        problems.push(e.to_string());
                        continue;
                    }
                };
            log::info!(
                "GC: releasing {}/{} (VF {})",
                state.container_id,
                state.ifname,
                state.pci
            );
            let env = self.attachment_env(&state);
            let release = ipam_type_of_value(&state.netconf).map(|plugin| IpamRelease {
                plugin,
                netconf: serde_json::to_vec(&state.netconf).unwrap_or_default(),
                env: &env,
            });
            let mut failed = self.teardown(&ctx, &mut state, release);
            if failed.is_empty() {
                if let Err(e) = ctx
                    .store
                    .remove(&state.network, &state.container_id, &state.ifname)
                {
                    failed.push(e.to_string());
                }
            } else if let Err(e) = ctx.store.save(&state) {
                failed.push(e.to_string());
            }
            problems.extend(
                failed
                    .into_iter()
                    .map(|p| format!("{}/{}: {p}", state.container_id, state.ifname)),
            );
        }

        // Records of this network whose attachment has no state and is not
        // valid any more (left by a run that died after writing them).
        for pci in ctx.allocs.list() {
            let Ok(Some(record)) = ctx.allocs.read(&pci) else {
                continue;
            };
            let orphan = record.network == *network
                && !valid.contains(&(record.container_id.as_str(), record.ifname.as_str()))
                && matches!(
                    ctx.store
                        .load(network, &record.container_id, &record.ifname),
                    Ok(None)
                );
            if orphan {
                if let Err(e) = ctx.allocs.remove(&pci) {
                    problems.push(e.to_string());
                }
            }
        }

        if let Some(plugin) = ipam_type(&args.conf) {
            if let Err(e) = self.delegator(&self.env).gc(&plugin, args.conf.bytes()) {
                problems.push(format!("IPAM GC: {e}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(PluginError::Teardown(problems))
        }
    }

    fn status(&self, args: &CmdArgs) -> Result<(), PluginError> {
        let locations = Locations::from_conf(&args.conf);
        match self.backends.rdma.netns_mode() {
            Ok(RdmaNetnsMode::Shared) if !locations.allow_shared_rdma_netns => {
                return Err(PluginError::SharedMode)
            }
            Ok(_) => {}
            Err(e) => return Err(PluginError::Unavailable(e.to_string())),
        }
        let has_device_id = args
            .conf
            .raw()
            .get("deviceID")
            .and_then(|v| v.as_str())
            .is_some_and(|s| !s.is_empty());
        if let (Some(pf), false) = (&locations.pf, has_device_id) {
            let ctx = self.context(locations.state_dir.clone(), locations.sysfs_root.clone());
            let vfs = ctx
                .sysfs
                .vfs_of_pf(pf)
                .map_err(|e| PluginError::Unavailable(e.to_string()))?;
            let free = vfs.iter().any(|(_, pci)| {
                ctx.allocs
                    .read(pci)
                    .map(|record| record.is_none_or(|r| !netns_alive(&r.netns)))
                    .unwrap_or(false)
            });
            if !free {
                return Err(PluginError::Unavailable(format!(
                    "no free VF on PF {pf:?} ({} VFs, all allocated)",
                    vfs.len()
                )));
            }
        }
        if let Some(plugin) = ipam_type(&args.conf) {
            self.delegator(&self.env)
                .status(&plugin, args.conf.bytes())?;
        }
        Ok(())
    }
}
