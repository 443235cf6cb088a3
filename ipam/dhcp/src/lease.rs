//! A lease as the daemon keeps it: in memory while its maintenance runs,
//! and on disk (one file per client under the state directory, written
//! atomically) so that a restarted daemon resumes it. The reference keeps
//! leases in memory only and loses them on restart.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use ipnetwork::{IpNetwork, Ipv4Network};
use libcni::state_file;
use libcni::types::v100;
use libcni::SpecVersion;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::{Ack, Identity};
use crate::options::{self, SentOption};

pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/dhcp";

/// Everything needed to answer for a lease and to maintain it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub client_id: String,
    pub container_id: String,
    pub network: String,
    pub ifname: String,
    /// The namespace path as the plugin sent it (the host prefix is added
    /// when it is opened, so a record survives a change of prefix).
    pub netns: String,
    pub sent: Vec<SentOption>,
    pub requested: Vec<u8>,
    pub ip: Ipv4Addr,
    pub mask: Ipv4Addr,
    pub server: Ipv4Addr,
    pub server_mac: [u8; 6],
    pub lease_secs: u32,
    pub renew_secs: u32,
    pub rebind_secs: u32,
    /// Unix time of the last acknowledgement; T1, T2 and expiry count from it.
    pub bound_at: u64,
    /// The result handed to the plugin (the same on every Allocate).
    pub result: v100::Result,
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl LeaseRecord {
    /// The record of a new lease; `priority` is the routes' metric.
    pub fn new(identity: &Identity, who: &Who, ack: &Ack, priority: u32) -> LeaseRecord {
        let mut record = LeaseRecord {
            client_id: identity.client_id.clone(),
            container_id: who.container_id.clone(),
            network: who.network.clone(),
            ifname: identity.ifname.clone(),
            netns: who.netns.clone(),
            sent: identity.sent.clone(),
            requested: identity.requested.clone(),
            ip: ack.ip,
            mask: ack.mask,
            server: ack.server,
            server_mac: ack.server_mac,
            lease_secs: 0,
            renew_secs: 0,
            rebind_secs: 0,
            bound_at: ack.requested_at,
            result: v100::Result::new(),
        };
        record.result = result_of(ack, priority);
        record.rebound(ack);
        record
    }

    /// Takes the times of a new acknowledgement (renewal or rebinding).
    pub fn rebound(&mut self, ack: &Ack) {
        self.server = ack.server;
        self.server_mac = ack.server_mac;
        self.lease_secs = ack.lease_secs;
        self.renew_secs = ack.renew_secs.min(ack.lease_secs);
        self.rebind_secs = ack.rebind_secs.clamp(self.renew_secs, ack.lease_secs);
        self.bound_at = ack.requested_at;
    }

    pub fn renew_at(&self) -> u64 {
        self.bound_at + u64::from(self.renew_secs)
    }

    pub fn rebind_at(&self) -> u64 {
        self.bound_at + u64::from(self.rebind_secs)
    }

    pub fn expires_at(&self) -> u64 {
        self.bound_at + u64::from(self.lease_secs)
    }

    /// The acknowledgement this record stands for, to extend or release it.
    pub fn as_ack(&self) -> Ack {
        Ack {
            ip: self.ip,
            mask: self.mask,
            server: self.server,
            server_mac: self.server_mac,
            lease_secs: self.lease_secs,
            renew_secs: self.renew_secs,
            rebind_secs: self.rebind_secs,
            requested_at: self.bound_at,
            message: dhcproto::v4::Message::default(),
        }
    }

    pub fn identity(&self, host_prefix: &str) -> Identity {
        Identity {
            netns: PathBuf::from(format!("{host_prefix}{}", self.netns)),
            ifname: self.ifname.clone(),
            client_id: self.client_id.clone(),
            sent: self.sent.clone(),
            requested: self.requested.clone(),
        }
    }
}

/// The attachment a lease belongs to.
#[derive(Debug, Clone)]
pub struct Who {
    pub container_id: String,
    pub network: String,
    pub netns: String,
}

/// The CNI result of an acknowledgement: its address and the routes its
/// options give.
pub fn result_of(ack: &Ack, priority: u32) -> v100::Result {
    let prefix = u32::from(ack.mask).leading_ones() as u8;
    let address = Ipv4Network::new(ack.ip, prefix).unwrap_or_else(|_| Ipv4Network::from(ack.ip));
    let mut result = v100::Result::new();
    result.cni_version = SpecVersion::CURRENT;
    result.ips.push(v100::IpConfig {
        interface: None,
        address: IpNetwork::V4(address),
        gateway: options::first_router(ack.message.opts()).map(IpAddr::V4),
    });
    result.routes = options::routes_from(ack.message.opts(), priority);
    result
}

/// The lease files of one state directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Client IDs hold `/` and may be 254 bytes: files are named by hash.
    fn path(&self, client_id: &str) -> PathBuf {
        let digest = Sha256::digest(client_id.as_bytes());
        let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }

    pub fn save(&self, record: &LeaseRecord) -> io::Result<()> {
        let data = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        state_file::write_atomically(&self.path(&record.client_id), &data)
    }

    pub fn remove(&self, client_id: &str) -> io::Result<()> {
        state_file::remove_if_exists(&self.path(client_id))
    }

    /// Every readable record; unreadable files are logged and removed.
    pub fn load_all(&self) -> io::Result<Vec<LeaseRecord>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if state_file::is_temporary(&name) || !name.ends_with(".json") {
                continue;
            }
            let path = entry.path();
            match fs::read(&path).map_err(|e| e.to_string()).and_then(|data| {
                serde_json::from_slice::<LeaseRecord>(&data).map_err(|e| e.to_string())
            }) {
                Ok(record) => records.push(record),
                Err(e) => {
                    log::warn!("dropping unreadable lease file {}: {e}", path.display());
                    let _ = state_file::remove_if_exists(&path);
                }
            }
        }
        Ok(records)
    }
}

#[cfg(test)]
pub mod tests_support {
    use super::*;

    /// A lease record as a test would have stored it.
    pub fn record() -> LeaseRecord {
        let identity = Identity {
            netns: "/var/run/netns/x".into(),
            ifname: "eth0".into(),
            client_id: "c/n/eth0".into(),
            sent: Vec::new(),
            requested: vec![3, 1],
        };
        let who = Who {
            container_id: "c".into(),
            network: "n".into(),
            netns: "/var/run/netns/x".into(),
        };
        LeaseRecord::new(&identity, &who, &super::tests::ack(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dhcproto::v4::{DhcpOption, Message};

    pub(super) fn ack() -> Ack {
        let mut message = Message::default();
        message
            .opts_mut()
            .insert(DhcpOption::Router(vec!["192.168.1.1".parse().unwrap()]));
        Ack {
            ip: "192.168.1.5".parse().unwrap(),
            mask: "255.255.255.0".parse().unwrap(),
            server: "192.168.1.1".parse().unwrap(),
            server_mac: [2, 0, 0, 0, 0, 1],
            lease_secs: 120,
            renew_secs: 60,
            rebind_secs: 105,
            requested_at: 1000,
            message,
        }
    }

    #[test]
    fn result_and_times() {
        let record = super::tests_support::record();
        assert_eq!(record.result.ips[0].address.to_string(), "192.168.1.5/24");
        assert_eq!(
            record.result.ips[0].gateway,
            Some("192.168.1.1".parse().unwrap())
        );
        assert_eq!(record.result.routes.len(), 1);
        assert_eq!(
            (record.renew_at(), record.rebind_at(), record.expires_at()),
            (1060, 1105, 1120)
        );

        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        store.save(&record).unwrap();
        assert_eq!(store.load_all().unwrap(), std::slice::from_ref(&record));
        fs::write(dir.path().join("broken.json"), b"{").unwrap();
        assert_eq!(store.load_all().unwrap().len(), 1);
        assert!(!dir.path().join("broken.json").exists());
        store.remove(&record.client_id).unwrap();
        assert!(store.load_all().unwrap().is_empty());
        store.remove(&record.client_id).unwrap();
    }
}
