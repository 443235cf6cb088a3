//! The one rule for tests that cannot run on a machine: they say so, and
//! under `.ci/run` they fail instead.
//!
//! A test that needs a tool, package or privilege the machine lacks (the
//! reference plugins, iptables-nft, firewalld, containerd...) may skip on a
//! developer's machine, printing `SKIPPED` and why. In CI that would let a
//! missing install step pass unseen, so `.ci/run` exports [`NO_SKIP_VAR`]
//! and every such test turns its skip into a failure through [`skip`].
//! Compiled into the library (not `cfg(test)`) because the tests of every
//! crate of the workspace call it; it is a few lines and runs no code of its
//! own in a plugin.

/// Set (to anything but empty, `0` or `false`) by `.ci/run`: no test may
/// skip.
pub const NO_SKIP_VAR: &str = "CNI_TEST_NO_SKIP";

/// Whether skipping is refused (see [`NO_SKIP_VAR`]).
pub fn skips_refused() -> bool {
    refused_by(std::env::var(NO_SKIP_VAR).ok().as_deref())
}

fn refused_by(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Reports that `test` cannot run here because of `why`: prints
/// `SKIPPED <test>: <why>` and returns, so the caller returns and passes;
/// panics instead when [`skips_refused`].
#[track_caller]
pub fn skip(test: &str, why: &str) {
    skip_unless(skips_refused(), test, why);
}

#[track_caller]
fn skip_unless(refused: bool, test: &str, why: &str) {
    if refused {
        panic!("{test} cannot run here and {NO_SKIP_VAR} refuses skips: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    // The variable itself is not set here: tests run in threads of one
    // process, and others read the environment meanwhile.
    #[test]
    fn values_that_refuse_skips() {
        for (value, refused) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("false"), false),
            (Some("1"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(refused_by(value), refused, "{NO_SKIP_VAR}={value:?}");
        }
    }

    #[test]
    fn a_refused_skip_panics_naming_the_test_and_why() {
        skip_unless(false, "t", "a test of the rule: returns");
        let panicked = std::panic::catch_unwind(|| skip_unless(true, "t", "why")).unwrap_err();
        let text = panicked
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            text,
            "t cannot run here and CNI_TEST_NO_SKIP refuses skips: why"
        );
    }
}
