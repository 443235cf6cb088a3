//! The plugin's verbs, wired to the skeleton.
//!
//! Spec versions from 0.3.1, as the reference (a chained plugin needs a
//! prevResult), plus 1.1.0. GC has nothing to collect (the plugin keeps
//! no state: a VRF goes with its last member's DEL) and STATUS nothing to
//! wait for: both succeed, as the reference's skeleton answers them.

use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;
use libcni::version::SpecVersion;

use crate::error::VrfError;
use crate::{add, check, del};

const VERSIONS: [SpecVersion; 4] = [
    SpecVersion::V0_3_1,
    SpecVersion::V0_4_0,
    SpecVersion::V1_0_0,
    SpecVersion::V1_1_0,
];

pub struct VrfPlugin;

impl Plugin for VrfPlugin {
    type Error = VrfError;

    fn about(&self) -> String {
        skel::about_string("vrf", env!("CARGO_PKG_VERSION"))
    }

    fn supported_versions(&self) -> &[SpecVersion] {
        &VERSIONS
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, VrfError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), VrfError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), VrfError> {
        check::check(args)
    }
}
