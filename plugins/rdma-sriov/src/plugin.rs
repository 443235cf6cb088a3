//! The plugin: its hardware backends, where a call keeps its state, and the
//! verbs wired to the skeleton. Each verb has its own module ([`crate::add`],
//! [`crate::del`], [`crate::check`], [`crate::gc`], [`crate::status`]);
//! what DEL, GC and a failed ADD share is in [`crate::teardown`].

use std::path::PathBuf;
use std::sync::Arc;

use libcni::device::{Sysfs, DEFAULT_SYSFS_ROOT};
use libcni::invoke::{Delegator, Exec, PluginEnv, RawExec};
use libcni::netlink::rdma::{NetlinkRdmaOps, RdmaOps};
use libcni::plugin_conf::PluginConf;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;

use crate::alloc::{Allocations, VfLock};
use crate::error::PluginError;
use crate::knobs::Knobs;
use crate::pf::{NetlinkPfOps, PfLinkOps};
use crate::state::{AttachmentState, StateStore, DEFAULT_STATE_DIR};
use crate::verbs::{PortQuery, VerbsPortQuery};
use crate::{add, check, del, gc, status};

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
    #[cfg(feature = "fake-hardware")]
    pub fn fake(backend: Arc<crate::fake::FakeBackend>) -> Backends {
        Backends {
            pf: backend.clone(),
            rdma: backend.clone(),
            ports: backend,
        }
    }

    /// The simulated machine when [`crate::knobs::FAKE_OPS_ENV`] names a
    /// world file, the kernel otherwise.
    #[cfg(feature = "fake-hardware")]
    pub fn from_knobs(knobs: &Knobs) -> Backends {
        match &knobs.fake_world {
            Some(path) => {
                log::warn!(
                    "test mode: PF, RDMA and verbs operations go to the simulated machine in {}",
                    path.display()
                );
                Backends::fake(Arc::new(crate::fake::FakeBackend::with_file(path)))
            }
            None => Backends::real(),
        }
    }

    /// The kernel: a build without the `fake-hardware` feature has nothing
    /// else.
    #[cfg(not(feature = "fake-hardware"))]
    pub fn from_knobs(_knobs: &Knobs) -> Backends {
        Backends::real()
    }
}

/// Where one call keeps and finds things.
pub(crate) struct Context {
    pub state_dir: PathBuf,
    pub sysfs: Sysfs,
    pub store: StateStore,
    pub allocs: Allocations,
}

/// The `rdma-sriov` plugin.
pub struct RdmaSriov {
    pub(crate) backends: Backends,
    pub(crate) knobs: Knobs,
    exec: Arc<dyn Exec>,
    pub(crate) env: PluginEnv,
}

/// The configuration's `stateDir` and `sysfsRoot`: test keys. With Multus
/// the configuration is a namespace user's, and a state folder of theirs
/// would let them plant the records DEL acts on, so the shipped build
/// (without the `fake-hardware` feature) ignores both; the
/// administrator's environment knobs ([`crate::knobs`]) work in every
/// build.
fn config_locations(
    state_dir: Option<PathBuf>,
    sysfs_root: Option<PathBuf>,
) -> (Option<PathBuf>, Option<PathBuf>) {
    if cfg!(feature = "fake-hardware") {
        return (state_dir, sysfs_root);
    }
    if state_dir.is_some() || sysfs_root.is_some() {
        log::warn!(
            "stateDir and sysfsRoot are test keys, ignored in this build; \
             set RDMA_SRIOV_STATE_DIR or RDMA_SRIOV_SYSFS_ROOT in the runtime's environment instead"
        );
    }
    (None, None)
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
    pub(crate) fn context(
        &self,
        state_dir: Option<PathBuf>,
        sysfs_root: Option<PathBuf>,
    ) -> Context {
        let (state_dir, sysfs_root) = config_locations(state_dir, sysfs_root);
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

    pub(crate) fn delegator(&self, env: &PluginEnv) -> Delegator<Arc<dyn Exec>> {
        Delegator::new(self.exec.clone(), env.clone())
    }

    /// The environment of an IPAM call made for another attachment than
    /// this call's (GC, reclaim).
    pub(crate) fn attachment_env(&self, state: &AttachmentState) -> PluginEnv {
        self.env
            .clone()
            .with("CNI_CONTAINERID", &state.container_id)
            .with("CNI_IFNAME", &state.ifname)
            .with("CNI_NETNS", "")
            .with("CNI_ARGS", "")
    }

    /// An attachment's record with its VF locked; `None` when there is no
    /// record (also when another run finished with it while we waited).
    pub(crate) fn load_and_lock(
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
        Ok(ctx
            .store
            .load(network, container_id, ifname)?
            .map(|state| (state, lock)))
    }
}

/// The IPAM plugin type of a configuration, when it has one.
pub(crate) fn ipam_type(conf: &PluginConf) -> Option<String> {
    conf.ipam
        .as_ref()
        .map(|i| i.ipam_type.clone())
        .filter(|t| !t.is_empty())
}

/// The IPAM plugin type of a configuration kept in a state record.
pub(crate) fn ipam_type_of_value(netconf: &serde_json::Value) -> Option<String> {
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
        add::add(self, args).map(AnyResult::V1)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), PluginError> {
        del::del(self, args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), PluginError> {
        check::check(self, args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), PluginError> {
        gc::gc(self, args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), PluginError> {
        status::status(self, args)
    }
}
