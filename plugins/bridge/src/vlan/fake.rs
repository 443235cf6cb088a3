//! A recording [`BridgeVlans`] for unit tests.
//!
//! It stands in for the kernel's bridge VLAN table because the machine the
//! suite is developed on has no `CONFIG_BRIDGE_VLAN_FILTERING`: there every
//! real VLAN request fails with `EOPNOTSUPP` (the integration tests check
//! that failure and its rollback). The fake keeps a VLAN table per port so
//! tests can assert both the calls and the resulting membership.

use std::collections::BTreeMap;

use libcni::netlink::NetlinkError;
use nix::errno::Errno;

use super::BridgeVlans;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanCall {
    List(u32),
    Add {
        port: u32,
        vid: u16,
        pvid_untagged: bool,
    },
    Del {
        port: u32,
        vid: u16,
    },
}

/// One VLAN entry of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub pvid: bool,
    pub untagged: bool,
}

impl Entry {
    pub const ACCESS: Entry = Entry {
        pvid: true,
        untagged: true,
    };
    pub const TAGGED: Entry = Entry {
        pvid: false,
        untagged: false,
    };
}

/// VLAN membership of a port: vid => flags.
pub type PortTable = BTreeMap<u16, Entry>;

#[derive(Debug, Default)]
pub struct RecordingVlans {
    pub calls: Vec<VlanCall>,
    pub tables: BTreeMap<u32, PortTable>,
    /// Makes every call fail as a kernel without VLAN filtering does.
    pub unsupported: bool,
}

impl RecordingVlans {
    /// A port as the kernel creates it on a filtering bridge: VLAN 1, PVID
    /// and untagged.
    pub fn with_new_port(mut self, port: u32) -> Self {
        self.tables
            .insert(port, BTreeMap::from([(1, Entry::ACCESS)]));
        self
    }

    fn refuse(&self) -> Result<(), NetlinkError> {
        if self.unsupported {
            Err(NetlinkError::Kernel {
                errno: Errno::EOPNOTSUPP,
                message: None,
            })
        } else {
            Ok(())
        }
    }
}

impl BridgeVlans for RecordingVlans {
    fn port_vids(&mut self, port: u32) -> Result<Vec<u16>, NetlinkError> {
        self.calls.push(VlanCall::List(port));
        self.refuse()?;
        Ok(self
            .tables
            .get(&port)
            .map(|t| t.keys().copied().collect())
            .unwrap_or_default())
    }

    fn add_port_vid(
        &mut self,
        port: u32,
        vid: u16,
        pvid_untagged: bool,
    ) -> Result<(), NetlinkError> {
        self.calls.push(VlanCall::Add {
            port,
            vid,
            pvid_untagged,
        });
        self.refuse()?;
        let table = self.tables.entry(port).or_default();
        if pvid_untagged {
            // A port has one PVID: the kernel moves it.
            for entry in table.values_mut() {
                entry.pvid = false;
            }
        }
        let entry = if pvid_untagged {
            Entry::ACCESS
        } else {
            Entry::TAGGED
        };
        table.insert(vid, entry);
        Ok(())
    }

    fn del_port_vid(&mut self, port: u32, vid: u16) -> Result<(), NetlinkError> {
        self.calls.push(VlanCall::Del { port, vid });
        self.refuse()?;
        match self.tables.get_mut(&port).and_then(|t| t.remove(&vid)) {
            Some(_) => Ok(()),
            None => Err(NetlinkError::Kernel {
                errno: Errno::ENOENT,
                message: None,
            }),
        }
    }
}
