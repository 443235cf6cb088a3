//! Checks the Debian reference plugins (containernetworking-plugins 1.1.1
//! in /usr/lib/cni) are known to fail, each with the reason. They are
//! reported as `known`, not as failures, when the suite runs against the
//! reference; against any other directory they count like every check.

/// A check that fails for a known, understood reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownIssue {
    /// The check's id, exactly as the report prints it.
    pub check_id: &'static str,
    pub reason: &'static str,
}

/// Which known-issue list applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KnownIssues {
    /// The reference list when the directory is /usr/lib/cni, else none.
    Auto,
    /// The Debian reference plugins' list.
    Reference,
    None,
}

const OWN_NETNS: &str = "its skeleton predates the CNI 1.1 check that refuses the plugin's own \
     netns as CNI_NETNS (code 8), so ADD configures the host itself";

const LOOPBACK_LAYOUT: &str = "loopback 1.1.1 prints its 1.0.0-layout result under the \
     requested older version (`interfaces` in 0.1.0/0.2.0, no `ips[].version` in 0.3.x/0.4.0); \
     fixed upstream later";

const PORTMAP_CHECK: &str = "portmap CHECK fails for every IPv4-only pod: it checks an IPv6 \
     DNAT chain it never created (`could not check ipv6 dnat: chain CNI-DN-... not found`)";

const SBR_DEL_NETNS: &str = "sbr DEL locks and enters CNI_NETNS before anything else, so it \
     fails when the netns is gone (`unknown FS magic`, after creating an empty file at that \
     path) or empty (`no such file or directory`)";

const HOST_DEVICE_DEL: &str = "host-device 1.1.1 DEL enters CNI_NETNS and looks for CNI_IFNAME \
     there before anything else, so it fails when the interface is not there (`failed to find \
     \"eth0\": Link not found`) or the netns is gone, and then skips IPAM DEL (the lease leaks); \
     the later failures of the DEL scenarios follow from that";

const CHECK_MAIN_TABLE: &str = "macvlan CHECK looks for the route to the pod's subnet in the main \
     table only; sbr, chained after it as on every RDMA rail, has moved that route into the \
     interface's own table, so CHECK of a macvlan + sbr network always fails (`Failed to find \
     Gateway`)";

const HOST_DEVICE_ROUTE_GW: &str = "host-device CHECK compares an IPAM route given without `gw` \
     with the route ADD installed through the range's gateway, and fails (`Expected Route \
     {Dst:{IP:192.168.0.0 Mask:ffff0000} GW:<nil>} not found in routing table`)";

const BANDWIDTH_OWN_NETNS: &str = "bandwidth 1.1.1 looks for the container interface's veth peer \
     before any netns check, and in the plugin's own netns reports `container interface ... has \
     no veth peer` (999) instead of refusing the netns (8)";

const VRF_OWN_NETNS: &str = "vrf 1.1.1 looks for CNI_IFNAME before any netns check, and in the \
     plugin's own netns reports `cmdAdd failed: could not get link by name ...` (999) instead of \
     refusing the netns (8)";

const FIREWALL_DEL_NO_PREV: &str = "firewall removes a container's rules only for the addresses \
     of the prevResult it gets on DEL; a runtime that lost its cache sends none, and the \
     rules stay (ours also finds them by container ID)";

/// The Debian reference plugins' known issues.
pub const REFERENCE: &[KnownIssue] = &[
    KnownIssue {
        check_id: "loopback: 0.1.0 ADD gives a 0.1.0 result",
        reason: LOOPBACK_LAYOUT,
    },
    KnownIssue {
        check_id: "loopback: 0.2.0 ADD gives a 0.2.0 result",
        reason: LOOPBACK_LAYOUT,
    },
    KnownIssue {
        check_id: "loopback: 0.3.0 ADD gives a 0.3.0 result",
        reason: LOOPBACK_LAYOUT,
    },
    KnownIssue {
        check_id: "loopback: 0.3.1 ADD gives a 0.3.1 result",
        reason: LOOPBACK_LAYOUT,
    },
    KnownIssue {
        check_id: "loopback: 0.4.0 ADD gives a 0.4.0 result",
        reason: LOOPBACK_LAYOUT,
    },
    KnownIssue {
        check_id: "loopback: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "host-local: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "bridge: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "portmap: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "macvlan: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    // ipvlan and vlan show only on a kernel with their link types (the
    // qemu guest of tests/qemu_suite.rs): there ADD makes `ownif0` in the
    // plugin's own namespace.
    KnownIssue {
        check_id: "ipvlan: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "vlan: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "static: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "tuning: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "sbr: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "ptp: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "bandwidth: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: BANDWIDTH_OWN_NETNS,
    },
    KnownIssue {
        check_id: "firewall: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "vrf: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: VRF_OWN_NETNS,
    },
    KnownIssue {
        check_id: "firewall: DEL without prevResult succeeds and undoes ADD",
        reason: FIREWALL_DEL_NO_PREV,
    },
    KnownIssue {
        check_id: "sbr: DEL with the netns gone succeeds and releases what ADD took",
        reason: SBR_DEL_NETNS,
    },
    KnownIssue {
        check_id: "sbr: second DEL with CNI_NETNS empty and no prevResult succeeds",
        reason: SBR_DEL_NETNS,
    },
    KnownIssue {
        check_id: "host-device: 0.1.0 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: 0.2.0 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: 0.3.0 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: 0.3.1 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: 0.4.0 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: 1.0.0 DEL again succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: bad input: CNI_NETNS that is the plugin's own netns -> code 8",
        reason: OWN_NETNS,
    },
    KnownIssue {
        check_id: "host-device: DEL with the netns gone succeeds and releases what ADD took",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: DEL without prevResult succeeds and undoes ADD",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: second DEL with CNI_NETNS empty and no prevResult succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "host-device: DEL of an attachment never added succeeds",
        reason: HOST_DEVICE_DEL,
    },
    KnownIssue {
        check_id: "example 80-macvlan-roce-rail.conflist: CHECK succeeds",
        reason: CHECK_MAIN_TABLE,
    },
    KnownIssue {
        check_id: "example 81-host-device-rdma.conflist: CHECK succeeds",
        reason: HOST_DEVICE_ROUTE_GW,
    },
    KnownIssue {
        check_id: "portmap: 0.4.0 CHECK right after ADD succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "portmap: 1.0.0 CHECK right after ADD succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "chain bridge+portmap 1.0.0, keys hostPort/containerPort/protocol (Podman, kubelet conflists): portmap CHECK right after ADD succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "chain bridge+portmap 1.0.0, keys HostPort/ContainerPort/Protocol/HostIP (containerd): portmap CHECK right after ADD succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "example 16-bridge-portmap-bandwidth.conflist: CHECK succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "example 10-k8s-bridge-portmap.conflist: CHECK succeeds",
        reason: PORTMAP_CHECK,
    },
    KnownIssue {
        check_id: "example 30-bridge-vlan.conflist: ADD fails naming CONFIG_BRIDGE_VLAN_FILTERING (this kernel has no bridge VLAN filtering)",
        reason: "bridge fails as it must, but with `could not add \"cni-vl0\": operation not supported`, \
                 which does not say that the kernel lacks bridge VLAN filtering",
    },
    KnownIssue {
        check_id: "example 40-bridge-l2-only.conflist: CHECK succeeds",
        reason: "bridge CHECK delegates to IPAM even when the config has none (`\"ipam\": {}`) and \
                 fails with `no plugin name provided`",
    },
];

impl KnownIssues {
    /// The issues that apply to the plugins in `dir`.
    pub fn resolve(self, dir: &std::path::Path) -> (&'static str, Vec<KnownIssue>) {
        let reference = || {
            (
                "Debian containernetworking-plugins 1.1.1",
                REFERENCE.to_vec(),
            )
        };
        match self {
            KnownIssues::Reference => reference(),
            KnownIssues::None => ("none", Vec::new()),
            KnownIssues::Auto => {
                let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
                if canonical == std::path::Path::new(crate::testnet::REFERENCE_DIR) {
                    reference()
                } else {
                    ("none", Vec::new())
                }
            }
        }
    }
}
