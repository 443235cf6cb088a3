//! Which packet-filter backend works here: the one probe behind the
//! automatic backend choice of the plugins that write firewall rules
//! (bridge's `ipMasqBackend`, portmap's `backend`) and their STATUS.
//!
//! iptables comes in two flavours, told apart by the save program
//! ([`Programs::is_iptables_nft`]): iptables-nft stores its rules in
//! nf_tables, so it works exactly when nf_tables answers (asked in-process,
//! no program is started); legacy iptables works when its save program
//! prints the `nat` table, which the caller may keep as its first reading.
//! Every probe works in the network namespace of the calling thread.

use crate::error::ErrorCode;
use crate::iptables::{CommandError, Programs, SavedTable};
use crate::nftables::iptables_nft::NAT_TABLE;
use crate::nftables::{NfTablesError, NfTablesSocket};
use crate::IpFamily;

/// The flavour of a family's iptables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IptablesFlavour {
    /// iptables-nft: rules live in nf_tables.
    Nft,
    /// iptables-legacy: rules live in the xtables kernel tables.
    Legacy,
}

impl IptablesFlavour {
    pub fn of(programs: &Programs) -> IptablesFlavour {
        if programs.is_iptables_nft() {
            IptablesFlavour::Nft
        } else {
            IptablesFlavour::Legacy
        }
    }
}

/// Why a family's iptables does not work here.
#[derive(Debug, thiserror::Error)]
pub enum IptablesUnusable {
    /// iptables-nft, and nf_tables does not answer.
    #[error(transparent)]
    NfTables(#[from] NfTablesError),
    /// Legacy iptables, and its save program failed.
    #[error(transparent)]
    Command(#[from] CommandError),
}

impl IptablesUnusable {
    /// The spec code of the underlying failure: the runner's for the save
    /// program, 999 for nf_tables.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            IptablesUnusable::NfTables(_) => ErrorCode::Internal,
            IptablesUnusable::Command(e) => e.error_code(),
        }
    }
}

/// What a successful iptables probe learnt.
#[derive(Debug)]
pub struct IptablesProbe {
    pub flavour: IptablesFlavour,
    /// Legacy only: the `nat` table as read by the probe, current until
    /// something writes to it.
    pub nat_table: Option<SavedTable>,
}

/// Whether `programs`' iptables works here (see the module text).
pub fn probe_iptables(programs: &Programs) -> Result<IptablesProbe, IptablesUnusable> {
    let flavour = IptablesFlavour::of(programs);
    let nat_table = match flavour {
        IptablesFlavour::Nft => {
            probe_nftables()?;
            None
        }
        IptablesFlavour::Legacy => Some(programs.read(NAT_TABLE)?),
    };
    Ok(IptablesProbe { flavour, nat_table })
}

/// Whether the IPv4 iptables works here: the test both plugins' automatic
/// backend choice makes.
pub fn probe_host_iptables() -> Result<IptablesProbe, IptablesUnusable> {
    probe_iptables(&Programs::of(IpFamily::V4))
}

/// Whether nf_tables answers here (asks for the ruleset generation, which
/// lists nothing).
pub fn probe_nftables() -> Result<(), NfTablesError> {
    NfTablesSocket::open()?.probe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_support::in_private_netns;

    /// In a fresh namespace both flavours work: iptables-nft by nf_tables
    /// answering (no table read), legacy by reading its `nat` table, which
    /// the probe hands back.
    #[test]
    fn both_flavours_usable_in_a_fresh_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("xtables.lock");
        let nft =
            Programs::of(IpFamily::V4).with_names("iptables-nft-save", "iptables-nft-restore");
        let legacy = Programs::of(IpFamily::V4)
            .with_names("iptables-legacy-save", "iptables-legacy-restore")
            .with_env("XTABLES_LOCKFILE", &lock.display().to_string());
        in_private_netns(|| {
            probe_nftables().unwrap();
            let probe = probe_iptables(&nft).unwrap();
            assert_eq!(probe.flavour, IptablesFlavour::Nft);
            assert!(probe.nat_table.is_none());
            let probe = probe_iptables(&legacy).unwrap();
            assert_eq!(probe.flavour, IptablesFlavour::Legacy);
            assert!(probe.nat_table.is_some());
        });
    }

    /// A save program that does not exist makes legacy iptables unusable,
    /// with the runner's error and its code.
    #[test]
    fn missing_save_program_is_unusable() {
        let programs = Programs::of(IpFamily::V4)
            .with_names("cnitest-no-such-iptables-save", "cnitest-no-such-restore");
        assert_eq!(IptablesFlavour::of(&programs), IptablesFlavour::Legacy);
        let err = probe_iptables(&programs).unwrap_err();
        assert!(matches!(
            err,
            IptablesUnusable::Command(CommandError::NotFound { .. })
        ));
        assert_eq!(
            err.to_string(),
            CommandError::NotFound {
                program: "cnitest-no-such-iptables-save".into()
            }
            .to_string()
        );
    }
}
