//! The scenarios both rule backends must pass, written once. A backend's
//! test file implements [`RuleBackend`] (what its rules look like and how
//! to read them) and calls `run_scenarios!(ItsType)`, which makes one
//! `#[test]` per scenario in a module `scenario`: a scenario added here
//! runs for both backends, and one left out of the list is dead code, which
//! clippy refuses.
//!
//! Needs `mod common;` declared before it in the test crate.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

/// One attachment: its network, container and addresses (without prefix).
pub struct Attachment {
    pub network: String,
    pub id: String,
    pub v4: String,
    pub v6: String,
}

impl Attachment {
    pub fn new(network: &str, id: &str, v4: &str, v6: &str) -> Attachment {
        Attachment {
            network: network.to_string(),
            id: id.to_string(),
            v4: v4.to_string(),
            v6: v6.to_string(),
        }
    }

    /// The reference test's attachment: [`NETWORK`], [`CONTAINER_ID`],
    /// [`V4`] and [`V6`].
    pub fn first() -> Attachment {
        Attachment::new(NETWORK, CONTAINER_ID, V4, V6)
    }

    /// Its ADD configuration for `backend`.
    fn conf(&self, backend: &str, version: &str) -> Value {
        let mut c = with_prev(
            conf(version, json!({ "backend": backend })),
            prev_result(version, &self.v4, &self.v6),
        );
        c["name"] = json!(self.network);
        c
    }

    fn add(&self, fx: &Fixture, backend: &str) {
        fx.call_for("ADD", &self.conf(backend, "1.1.0"), &self.id, IFNAME)
            .run(Path::new(PLUGIN))
            .assert_ok();
    }
}

/// What a scenario needs to know of a backend: its rule text and how the
/// host's rules are read stay in the backend's test file.
pub trait RuleBackend {
    /// The configuration's `backend`.
    const NAME: &'static str;
    /// The start of the fixtures' namespace names.
    const TAG: &'static str;
    /// CHECK's error once [`RuleBackend::remove_entry_jump`] ran.
    const MISSING_JUMP: &'static str;
    /// CHECK's error once the first attachment's rules are gone: the first
    /// rule CHECK looks for is the one admitting replies to [`V4`].
    const MISSING_RULE: &'static str;

    /// The chains and jumps every ADD leaves, with admin chain `admin`,
    /// are in place (and stay after DEL).
    fn assert_chains(fx: &Fixture, admin: &str, context: &str);
    /// The rules admitting `at`'s addresses are in place, with what
    /// names the attachment.
    fn assert_admitted(fx: &Fixture, at: &Attachment, context: &str);
    /// Whether any rule or chain of this backend names `text`.
    fn mentions(fx: &Fixture, text: &str) -> bool;
    /// Everything this backend wrote, to compare before and after.
    fn snapshot(fx: &Fixture) -> String;
    /// How often each table of the backend holds the jump into the
    /// plugin's rules.
    fn entry_jumps(fx: &Fixture) -> Vec<usize>;
    /// Removes that jump, the way an administrator would.
    fn remove_entry_jump(fx: &Fixture);
    /// The same-bridge isolation of `bridge` is there once, and is met
    /// before the admission.
    fn assert_isolation(fx: &Fixture, bridge: &str);
    /// Whether `bridge`'s isolation drop is still there.
    fn isolation_kept(fx: &Fixture, bridge: &str) -> bool;
    /// Whether the other rule backend's tables are untouched.
    fn other_backend_untouched(fx: &Fixture) -> bool;
}

/// One `#[test]` per scenario for backend type `$backend` (in scope in the
/// calling file), in a module `scenario`.
macro_rules! run_scenarios {
    ($backend:ident) => {
        run_scenarios!(@tests $backend;
            add_writes_the_ruleset_idempotently,
            custom_admin_chain,
            add_check_del_leaves_the_chains_only,
            check_names_a_missing_jump,
            del_without_prev_result_finds_the_attachment,
            gc_removes_invalid_attachments_of_its_network,
            status_reports_a_usable_backend,
            bad_input_changes_nothing,
            concurrent_adds_keep_every_rule,
            same_bridge_isolation_is_written_once_and_kept,
        );
    };
    (@tests $backend:ident; $($scenario:ident),* $(,)?) => {
        mod scenario {
            $(
                #[test]
                fn $scenario() {
                    crate::scenarios::$scenario::<super::$backend>();
                }
            )*
        }
    };
}

fn fixture<B: RuleBackend>(what: &str) -> Fixture {
    Fixture::new(&format!("{}-{what}", B::TAG))
}

/// Nothing in any table, of either backend.
fn nothing_written(fx: &Fixture) -> bool {
    fx.rules("iptables-save").is_empty()
        && fx.rules("ip6tables-save").is_empty()
        && fx.nft_table().is_empty()
}

/// ADD passes the prevResult through and writes the chains and the
/// attachment's rules, in both families, and nothing in the other
/// backend; a second ADD changes nothing.
pub fn add_writes_the_ruleset_idempotently<B: RuleBackend>() {
    for version in VERSIONS {
        let fx = fixture::<B>("add");
        let conf = Attachment::first().conf(B::NAME, version);
        let out = fx.run("ADD", &conf);
        out.assert_ok();
        let result = out.json();
        assert_eq!(result["cniVersion"], version);
        assert_eq!(ips_of(&result), ips_of(&conf["prevResult"]), "{version}");
        B::assert_chains(&fx, "CNI-ADMIN", version);
        B::assert_admitted(&fx, &Attachment::first(), version);
        assert!(B::other_backend_untouched(&fx), "{version}");

        let before = B::snapshot(&fx);
        fx.run("ADD", &conf).assert_ok();
        assert_eq!(
            before,
            B::snapshot(&fx),
            "{version}: second ADD changed the rules"
        );
    }
}

/// `iptablesAdminChainName` replaces CNI-ADMIN, for either backend.
pub fn custom_admin_chain<B: RuleBackend>() {
    for version in VERSIONS {
        let fx = fixture::<B>("admin");
        let mut conf = Attachment::first().conf(B::NAME, version);
        conf["iptablesAdminChainName"] = json!("CNI-foobar");
        fx.run("ADD", &conf).assert_ok();
        B::assert_chains(&fx, "CNI-foobar", version);
        assert!(B::mentions(&fx, "CNI-foobar"), "{version}");
        assert!(!B::mentions(&fx, "CNI-ADMIN"), "{version}");
    }
}

/// ADD, CHECK, DEL: the chains and jumps stay, the attachment's rules go;
/// a second DEL succeeds; CHECK then names the first missing rule.
pub fn add_check_del_leaves_the_chains_only<B: RuleBackend>() {
    for version in VERSIONS {
        let fx = fixture::<B>("del");
        let conf = Attachment::first().conf(B::NAME, version);
        fx.run("ADD", &conf).assert_ok();
        fx.run("CHECK", &conf).assert_ok();
        assert!(B::mentions(&fx, V4) && B::mentions(&fx, V6), "{version}");
        fx.run("DEL", &conf).assert_ok();
        B::assert_chains(&fx, "CNI-ADMIN", version);
        for address in [V4, V6] {
            assert!(
                !B::mentions(&fx, address),
                "{version}: rules of {address} left"
            );
        }
        fx.run("DEL", &conf).assert_ok();
        let out = fx.run("CHECK", &conf);
        assert_eq!(out.error_code(), 999, "{version}: {}", out.stdout);
        assert_eq!(out.json()["msg"], B::MISSING_RULE, "{version}");
    }
}

/// CHECK fails on a missing jump, and says which.
pub fn check_names_a_missing_jump<B: RuleBackend>() {
    let fx = fixture::<B>("chk");
    let conf = Attachment::first().conf(B::NAME, "1.0.0");
    fx.run("ADD", &conf).assert_ok();
    B::remove_entry_jump(&fx);
    let out = fx.run("CHECK", &conf);
    assert_eq!(out.error_code(), 999, "{}", out.stdout);
    assert_eq!(out.json()["msg"], B::MISSING_JUMP);
}

/// DEL without a prevResult finds the attachment's rules by what names
/// it; before any ADD (no chains, no table) it succeeds.
pub fn del_without_prev_result_finds_the_attachment<B: RuleBackend>() {
    let fx = fixture::<B>("delnp");
    let bare = conf("1.0.0", json!({ "backend": B::NAME }));
    fx.run("DEL", &bare).assert_ok();
    fx.run("ADD", &Attachment::first().conf(B::NAME, "1.0.0"))
        .assert_ok();
    B::assert_admitted(&fx, &Attachment::first(), "after ADD");
    assert!(B::mentions(&fx, V4) && B::mentions(&fx, V6));
    fx.run("DEL", &bare).assert_ok();
    for address in [V4, V6] {
        assert!(!B::mentions(&fx, address), "rules of {address} left");
    }
}

/// GC removes the rules of attachments of this network not in the valid
/// list, and leaves the valid ones and other networks' alone.
pub fn gc_removes_invalid_attachments_of_its_network<B: RuleBackend>() {
    let fx = fixture::<B>("gc");
    let keep = Attachment::new(NETWORK, "keep", "10.0.0.2", "2001:db8::2");
    let stale = Attachment::new(NETWORK, "stale", "10.0.0.3", "2001:db8::3");
    let other = Attachment::new("othernet", "other", "10.0.0.4", "2001:db8::4");
    for at in [&keep, &stale, &other] {
        at.add(&fx, B::NAME);
    }
    assert!(B::mentions(&fx, &stale.v4) && B::mentions(&fx, &stale.v6));
    let gc = json!({
        "cniVersion": "1.1.0", "name": NETWORK, "type": "firewall", "backend": B::NAME,
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": IFNAME}],
    });
    fx.run("GC", &gc).assert_ok();
    B::assert_admitted(&fx, &keep, "valid attachment after GC");
    B::assert_admitted(&fx, &other, "other network after GC");
    for address in [&stale.v4, &stale.v6] {
        assert!(!B::mentions(&fx, address), "GC left {address}");
    }
}

/// STATUS succeeds where the backend works, and writes nothing.
pub fn status_reports_a_usable_backend<B: RuleBackend>() {
    let fx = fixture::<B>("st");
    fx.run("STATUS", &conf("1.1.0", json!({ "backend": B::NAME })))
        .assert_ok();
    assert!(nothing_written(&fx));
}

/// Bad input is refused with its code and changes nothing.
pub fn bad_input_changes_nothing<B: RuleBackend>() {
    let fx = fixture::<B>("bad");
    let prev = prev_result("1.0.0", V4, V6);
    let with = |extra: Value| {
        let mut keys = json!({ "backend": B::NAME });
        if let (Some(keys), Some(extra)) = (keys.as_object_mut(), extra.as_object()) {
            keys.extend(extra.clone());
        }
        conf("1.0.0", keys)
    };
    let cases = [
        (
            with_prev(with(json!({"ingressPolicy": "closed"})), prev.clone()),
            7,
            "unknown ingress policy: \"closed\"",
        ),
        (
            with_prev(with(json!({"backend": "iptable"})), prev.clone()),
            7,
            "unknown backend \"iptable\"",
        ),
        (with(json!({})), 7, "missing prevResult from earlier plugin"),
        (
            with_prev(
                with(json!({"ingressPolicy": "same-bridge"})),
                json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}),
            ),
            7,
            "interface needs to be set for ingress policy \"same-bridge\"",
        ),
        (
            with_prev(
                with(json!({"iptablesAdminChainName": "bad name"})),
                prev.clone(),
            ),
            7,
            "invalid iptablesAdminChainName",
        ),
        (
            with_prev(conf("0.3.1", json!({ "backend": B::NAME })), prev.clone()),
            1,
            "",
        ),
    ];
    for (conf, code, message) in cases {
        let out = fx.run("ADD", &conf);
        assert_eq!(out.error_code(), code, "{conf}: {}", out.stdout);
        let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
        assert!(msg.starts_with(message), "{msg}");
        assert!(nothing_written(&fx), "{conf}");
    }
}

/// Concurrent ADDs into a fresh host (every one sees the chains missing)
/// all keep their rules: the host lock orders them, and no declaration of
/// a chain empties another call's rules.
pub fn concurrent_adds_keep_every_rule<B: RuleBackend>() {
    let fx = fixture::<B>("par");
    let attachments: Vec<_> = (2..10)
        .map(|n| {
            Attachment::new(
                NETWORK,
                &format!("par{n}"),
                &format!("10.0.0.{n}"),
                &format!("2001:db8::{n}"),
            )
        })
        .collect();
    let calls: Vec<_> = attachments
        .iter()
        .map(|at| fx.call_for("ADD", &at.conf(B::NAME, "1.0.0"), &at.id, IFNAME))
        .collect();
    std::thread::scope(|scope| {
        for call in &calls {
            scope.spawn(move || call.run(Path::new(PLUGIN)).assert_ok().code);
        }
    });
    for at in &attachments {
        B::assert_admitted(&fx, at, &at.id);
    }
    let jumps = B::entry_jumps(&fx);
    assert!(
        !jumps.is_empty() && jumps.iter().all(|n| *n == 1),
        "jumps per table: {jumps:?}"
    );
}

/// ingressPolicy same-bridge: a second ADD adds no isolation rule, the
/// isolation is met before the admission, and DEL leaves it (the bridge
/// may be shared) while taking the admission back.
pub fn same_bridge_isolation_is_written_once_and_kept<B: RuleBackend>() {
    let fx = fixture::<B>("pol");
    let bridge = "cni-br9";
    let mut conf = Attachment::first().conf(B::NAME, "1.1.0");
    conf["ingressPolicy"] = json!("same-bridge");
    conf["prevResult"]["interfaces"] = json!([{"name": bridge}, {"name": IFNAME}]);
    fx.run("ADD", &conf).assert_ok();
    fx.run("ADD", &conf).assert_ok();
    B::assert_isolation(&fx, bridge);
    B::assert_admitted(&fx, &Attachment::first(), "same-bridge");
    fx.run("DEL", &conf).assert_ok();
    assert!(B::isolation_kept(&fx, bridge), "DEL removed the isolation");
    assert!(!B::mentions(&fx, V4), "DEL left the admission");
}
