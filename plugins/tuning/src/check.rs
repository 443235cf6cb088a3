//! CHECK: the sysctls and link attributes are still as configured.
//!
//! As the reference: every configured sysctl, then the interface's MAC,
//! promiscuous mode (in both directions: `promisc` false or absent requires
//! it off), MTU when set, all-multicast and queue length when set. The
//! allowlist is not consulted. Differences from the reference: sysctl
//! values are compared with their whitespace normalised (the kernel prints
//! `net.ipv4.ip_local_port_range` with a tab, a configuration usually has a
//! space), and MACs as addresses rather than strings (an upper-case MAC in
//! the configuration never passes the reference's CHECK).

use libcni::netlink::{format_mac, RouteSocket};
use libcni::netns::NetNs;
use libcni::skel::CmdArgs;
use libcni::sysctl;
use libcni::types::v100;

use crate::config::{self, TuningConf};
use crate::error::TuningError;

pub fn check(args: &CmdArgs) -> Result<(), TuningError> {
    let conf = config::parse(args)?;
    let prev = args
        .conf
        .prev_result()?
        .ok_or(TuningError::PrevResultMissing)?;
    v100::Result::try_from(prev).map_err(TuningError::PrevResult)?;
    let netns = NetNs::open(&args.netns).map_err(|e| TuningError::netns(&args.netns, e))?;
    // On this thread, moved there and back: see `add`.
    netns
        .enter_briefly(|| verify(&args.ifname, &conf))
        .map_err(|e| TuningError::netns(&args.netns, e))?
}

/// Runs inside the container's namespace.
fn verify(ifname: &str, conf: &TuningConf) -> Result<(), TuningError> {
    for setting in &conf.sysctls {
        let current = match sysctl::get(&setting.path) {
            Ok(value) => value,
            Err(e) if e.is_not_found() => {
                return Err(TuningError::SysctlMissing {
                    key: setting.key.clone(),
                    path: setting.path.clone(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        if !same_words(&setting.value, &current) {
            return Err(mismatch(
                "value",
                format!("{}/{}", sysctl::PROC_SYS, setting.path),
                &setting.value,
                &current,
            ));
        }
    }

    let mut socket = RouteSocket::open_current()?;
    let attrs = socket
        .link_attrs(ifname)?
        .ok_or_else(|| TuningError::LinkMissing(ifname.to_string()))?;
    if let Some(mac) = &conf.mac {
        if mac.bytes != attrs.mac {
            return Err(mismatch(
                "Ethernet",
                ifname,
                mac.text(),
                format_mac(&attrs.mac),
            ));
        }
    }
    if conf.promisc != attrs.promisc {
        return Err(mismatch("promisc", ifname, conf.promisc, attrs.promisc));
    }
    if let Some(mtu) = conf.mtu.filter(|mtu| *mtu != attrs.mtu) {
        return Err(mismatch("MTU", ifname, mtu, attrs.mtu));
    }
    if let Some(on) = conf.allmulti.filter(|on| *on != attrs.allmulti) {
        return Err(mismatch("all-multicast mode", ifname, on, attrs.allmulti));
    }
    if let Some(len) = conf.tx_queue_len.filter(|len| *len != attrs.tx_queue_len) {
        return Err(mismatch(
            "Transmit Queue Length",
            ifname,
            len,
            attrs.tx_queue_len,
        ));
    }
    Ok(())
}

fn mismatch(
    setting: &'static str,
    subject: impl Into<String>,
    configured: impl ToString,
    current: impl ToString,
) -> TuningError {
    TuningError::Mismatch {
        setting,
        subject: subject.into(),
        configured: configured.to_string(),
        current: current.to_string(),
    }
}

/// Equal once runs of whitespace are taken as one separator.
fn same_words(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_does_not_matter_but_words_do() {
        assert!(same_words("32768 60999", "32768\t60999"));
        assert!(same_words("1\n", "1"));
        assert!(!same_words("1", "0"));
        assert!(!same_words("32768 60999", "32768"));
    }
}
