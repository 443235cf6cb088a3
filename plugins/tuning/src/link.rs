//! Link attributes as values: what ADD sets, what it saves, and what DEL
//! (or a failed ADD) puts back, each one netlink request.

use libcni::netlink::{format_mac, LinkAttrs, NetlinkError, RouteSocket};

use crate::config::TuningConf;
use crate::saved::SavedLink;

/// One attribute of the container interface and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSetting {
    Mac(Vec<u8>),
    Promisc(bool),
    Mtu(u32),
    Allmulti(bool),
    TxQueueLen(u32),
}

/// `mtu 9000`, `mac 02:00:00:00:00:01`, `promisc on`: for log lines.
impl std::fmt::Display for LinkSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on_off = |on: bool| if on { "on" } else { "off" };
        match self {
            LinkSetting::Mac(mac) => write!(f, "mac {}", format_mac(mac)),
            LinkSetting::Promisc(on) => write!(f, "promisc {}", on_off(*on)),
            LinkSetting::Mtu(mtu) => write!(f, "mtu {mtu}"),
            LinkSetting::Allmulti(on) => write!(f, "allmulti {}", on_off(*on)),
            LinkSetting::TxQueueLen(len) => write!(f, "txqueuelen {len}"),
        }
    }
}

impl LinkSetting {
    pub fn apply(&self, socket: &mut RouteSocket, index: u32) -> Result<(), NetlinkError> {
        match self {
            LinkSetting::Mac(mac) => socket.set_mac(index, mac),
            LinkSetting::Promisc(on) => socket.set_promisc(index, *on),
            LinkSetting::Mtu(mtu) => socket.set_mtu(index, *mtu),
            LinkSetting::Allmulti(on) => socket.set_allmulti(index, *on),
            LinkSetting::TxQueueLen(len) => socket.set_tx_queue_len(index, *len),
        }
    }

    /// The same attribute with the link's current value.
    pub fn current(&self, attrs: &LinkAttrs) -> LinkSetting {
        match self {
            LinkSetting::Mac(_) => LinkSetting::Mac(attrs.mac.clone()),
            LinkSetting::Promisc(_) => LinkSetting::Promisc(attrs.promisc),
            LinkSetting::Mtu(_) => LinkSetting::Mtu(attrs.mtu),
            LinkSetting::Allmulti(_) => LinkSetting::Allmulti(attrs.allmulti),
            LinkSetting::TxQueueLen(_) => LinkSetting::TxQueueLen(attrs.tx_queue_len),
        }
    }

    /// Records this value in a saved-settings object.
    fn save_into(&self, saved: &mut SavedLink) {
        match self {
            LinkSetting::Mac(mac) => saved.mac = Some(format_mac(mac)),
            LinkSetting::Promisc(on) => saved.promisc = Some(*on),
            LinkSetting::Mtu(mtu) => saved.mtu = Some(*mtu),
            LinkSetting::Allmulti(on) => saved.allmulti = Some(*on),
            LinkSetting::TxQueueLen(len) => saved.tx_queue_len = Some(*len),
        }
    }
}

/// What ADD sets, in the reference's order: MAC, promiscuous mode (only
/// ever switched on), MTU, all-multicast, queue length.
pub fn requested(conf: &TuningConf) -> Vec<LinkSetting> {
    let mut settings = Vec::new();
    if let Some(mac) = &conf.mac {
        settings.push(LinkSetting::Mac(mac.bytes.clone()));
    }
    if conf.promisc {
        settings.push(LinkSetting::Promisc(true));
    }
    if let Some(mtu) = conf.mtu {
        settings.push(LinkSetting::Mtu(mtu));
    }
    if let Some(on) = conf.allmulti {
        settings.push(LinkSetting::Allmulti(on));
    }
    if let Some(len) = conf.tx_queue_len {
        settings.push(LinkSetting::TxQueueLen(len));
    }
    settings
}

/// The current values of the `requested` attributes, to save.
pub fn originals(requested: &[LinkSetting], attrs: &LinkAttrs, network: &str) -> SavedLink {
    let mut saved = SavedLink {
        network: Some(network.to_string()),
        ..SavedLink::default()
    };
    for setting in requested {
        setting.current(attrs).save_into(&mut saved);
    }
    saved
}

/// What DEL puts back, in the reference's order: MTU, MAC, promiscuous
/// mode, all-multicast, queue length. A saved MAC that does not parse is
/// returned apart: it can never be restored.
pub fn restores(saved: &SavedLink) -> (Vec<LinkSetting>, Option<String>) {
    let mut settings = Vec::new();
    let mut bad_mac = None;
    if let Some(mtu) = saved.mtu.filter(|m| *m != 0) {
        settings.push(LinkSetting::Mtu(mtu));
    }
    if let Some(text) = saved.mac.as_deref().filter(|m| !m.is_empty()) {
        match libcni::hwaddr::parse(text) {
            Some(mac) => settings.push(LinkSetting::Mac(mac)),
            None => bad_mac = Some(text.to_string()),
        }
    }
    if let Some(on) = saved.promisc {
        settings.push(LinkSetting::Promisc(on));
    }
    if let Some(on) = saved.allmulti {
        settings.push(LinkSetting::Allmulti(on));
    }
    if let Some(len) = saved.tx_queue_len {
        settings.push(LinkSetting::TxQueueLen(len));
    }
    (settings, bad_mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mac;
    use std::path::PathBuf;

    fn attrs() -> LinkAttrs {
        LinkAttrs {
            index: 2,
            name: "eth0".into(),
            mac: vec![2, 0, 0, 0, 0, 1],
            mtu: 1500,
            promisc: false,
            allmulti: true,
            tx_queue_len: 1000,
        }
    }

    #[test]
    fn requested_settings_and_their_originals_round_trip_through_the_file() {
        let conf = TuningConf {
            data_dir: PathBuf::from("/x"),
            sysctls: Vec::new(),
            mac: Some(Mac {
                bytes: vec![2, 0, 0, 0, 0, 9],
            }),
            promisc: true,
            mtu: Some(9000),
            allmulti: Some(false),
            tx_queue_len: Some(5),
        };
        let wanted = requested(&conf);
        assert_eq!(
            wanted,
            [
                LinkSetting::Mac(vec![2, 0, 0, 0, 0, 9]),
                LinkSetting::Promisc(true),
                LinkSetting::Mtu(9000),
                LinkSetting::Allmulti(false),
                LinkSetting::TxQueueLen(5),
            ]
        );
        let saved = originals(&wanted, &attrs(), "net1");
        assert_eq!(saved.mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(saved.network.as_deref(), Some("net1"));
        let (back, bad) = restores(&saved);
        assert_eq!(bad, None);
        assert_eq!(
            back,
            [
                LinkSetting::Mtu(1500),
                LinkSetting::Mac(vec![2, 0, 0, 0, 0, 1]),
                LinkSetting::Promisc(false),
                LinkSetting::Allmulti(true),
                LinkSetting::TxQueueLen(1000),
            ]
        );
    }

    #[test]
    fn only_requested_attributes_are_saved_and_promisc_false_requests_nothing() {
        let conf = TuningConf {
            data_dir: PathBuf::from("/x"),
            sysctls: Vec::new(),
            mac: None,
            promisc: false,
            mtu: Some(1400),
            allmulti: None,
            tx_queue_len: None,
        };
        let saved = originals(&requested(&conf), &attrs(), "n");
        assert_eq!(
            saved,
            SavedLink {
                mtu: Some(1500),
                network: Some("n".into()),
                ..SavedLink::default()
            }
        );
        let (back, bad) = restores(&SavedLink {
            mac: Some("nonsense".into()),
            mtu: Some(0),
            ..SavedLink::default()
        });
        assert!(back.is_empty());
        assert_eq!(bad.as_deref(), Some("nonsense"));
    }
}
