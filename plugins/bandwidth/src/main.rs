//! `bandwidth`: a chained plugin that limits a container's traffic with
//! token bucket (tbf) qdiscs on the host side of its veth, a drop-in for
//! the reference plugin (same keys, messages, device names and qdiscs).
//!
//! - ADD ([`add`]): traffic towards the container (`ingressRate`,
//!   `ingressBurst`) is shaped by a tbf at the root of the host veth;
//!   traffic from the container (`egressRate`, `egressBurst`) arrives at
//!   the host veth's ingress, where a u32 filter redirects it (mirred) to
//!   an ifb device `bwp…` whose root tbf shapes it. The ifb is added to
//!   the result.
//! - DEL ([`del`]): deletes the ifb by name; needs no namespace.
//! - CHECK ([`check`]): the tbfs (rate, limit, buffer) and filters are
//!   there as configured.
//! - GC ([`gc`]): deletes this network's ifbs of attachments no longer
//!   valid, recognised by their alias.
//! - STATUS: the kernel's traffic control clock must be readable.
//!
//! # `unshapedSubnets` and `shapedSubnets`
//!
//! Either list (not both) says which traffic the limits apply to: all but
//! the traffic exchanged with the unshaped subnets, or only the traffic
//! exchanged with the shaped ones. A subnet is always the remote side:
//! matched as the source address of traffic towards the container and as
//! the destination of traffic from it. IPv4 and IPv6 subnets mix freely.
//!
//! Without a list the layout is the reference's exactly. With one:
//!
//! ```text
//! towards the container (host veth root):
//!   htb 1: default 1:2 (unshapedSubnets) or 1:1 (shapedSubnets)
//!   ├── class 1:1  uncapped (100 Gbit/s)       ← unshaped traffic
//!   └── class 1:2  uncapped, leaf tbf 2:       ← shaped traffic
//!   u32 filters on 1: (prio 1 IPv4, prio 2 IPv6), one per subnet,
//!   source address → 1:1 (unshapedSubnets) or 1:2 (shapedSubnets)
//!
//! from the container (host veth ingress ffff:, then ifb root tbf 1:):
//!   unshapedSubnets: u32 per subnet on the destination address with no
//!     action (classification ends, the packet goes on unshaped), then
//!     prio 3: everything else → mirred redirect to the ifb
//!   shapedSubnets: u32 per subnet on the destination address → mirred
//!     redirect to the ifb; the rest is never redirected
//! ```
//!
//! Why these pieces: besides what the reference needs (tbf, ingress, u32,
//! mirred) they add only htb. The test machine's kernel, like many
//! trimmed ones, lacks prio and the generic actions (gact), so a pass
//! verdict is a u32 match without action. The tbf stays the shaper in both
//! layouts, so rate, burst and queue limit mean the same with and without
//! subnets, and CHECK compares the same three numbers; the HTB classes
//! only sort packets (their rate is far above any veth). The egress side needs no classes: choosing
//! what is redirected to the ifb is choosing what is shaped. The kernel
//! logs once per tbf leaf that htb finds it "non-work-conserving", which
//! is what a shaper is.
//!
//! # Differences from the reference
//!
//! - The redirect filter carries one mirred action; the reference's
//!   netlink library adds a second (`pass`) that no packet reaches.
//! - A failed ADD takes back the qdiscs and the ifb it made.
//! - A `prevResult` is required also when there is nothing to shape (the
//!   reference dereferences nil there); a rate below 8 bit/s (0 bytes/s)
//!   is refused with code 7 rather than by the kernel.
//! - Configuration errors are code 7, not 999; the messages are the same.
//! - The host veth must be a veth whose peer is the container interface,
//!   not only a link with the peer's index.
//! - CHECK also fails when a tbf is missing from its place or the redirect
//!   and subnet filters differ (the reference stops at the first qdisc that
//!   is no tbf and never reads filters).
//! - The ifb carries an alias naming network and container, which GC
//!   needs; the reference has no GC.

mod add;
mod check;
mod config;
mod del;
mod error;
mod gc;
mod host;
mod shaping;
mod tbf;

use libcni::netlink::tc::PschedClock;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::types::AnyResult;
use libcni::SpecVersion;

use crate::error::BandwidthError;

/// The reference supports 0.3.0 and later: results before it have no
/// interfaces to find the host veth in.
const VERSIONS: [SpecVersion; 5] = [
    SpecVersion::V0_3_0,
    SpecVersion::V0_3_1,
    SpecVersion::V0_4_0,
    SpecVersion::V1_0_0,
    SpecVersion::V1_1_0,
];

struct Bandwidth;

impl Plugin for Bandwidth {
    type Error = BandwidthError;

    fn about(&self) -> String {
        skel::about_string("bandwidth", env!("CARGO_PKG_VERSION"))
    }

    fn supported_versions(&self) -> &[SpecVersion] {
        &VERSIONS
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, BandwidthError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), BandwidthError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), BandwidthError> {
        check::check(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), BandwidthError> {
        gc::gc(args)
    }

    /// Shaping needs the kernel's traffic control, whose clock every tbf
    /// is computed with.
    fn status(&self, _args: &CmdArgs) -> Result<(), BandwidthError> {
        PschedClock::read()
            .map(|_| ())
            .map_err(|e| BandwidthError::Unavailable(e.to_string()))
    }
}

fn main() {
    skel::plugin_main(Bandwidth)
}
