//! Checks of one plugin on its own, called directly as a runtime calls it:
//! VERSION, every verb at every version it claims, bad input, the DEL
//! cases runtimes produce, and GC.

use serde_json::{json, Value};

use super::probe::Plugin;
use super::report::Report;
use super::sandbox::{Call, Netns, Reply};
use super::scene::Scene;
use super::shape::check_result_shape;
use super::subject::Subject;

/// The outcome of one step, for `?` inside a check.
type Step<T> = Result<T, String>;

fn setup<T, E: std::fmt::Display>(r: Result<T, E>) -> Step<T> {
    r.map_err(|e| format!("setup failed: {e}"))
}

fn id(plugin: &Plugin, what: &str) -> String {
    format!("{}: {what}", plugin.name)
}

// ----- VERSION -----

pub fn version_checks(report: &mut Report, plugin: &Plugin) {
    report.check(
        id(
            plugin,
            "VERSION prints cniVersion and the supported versions",
        ),
        (|| {
            let v = plugin.version_reply.clone()?;
            if v["cniVersion"].as_str().is_none() {
                return Err(format!("no cniVersion in {v}"));
            }
            if plugin.versions.is_empty() {
                return Err(format!("no known spec version in supportedVersions: {v}"));
            }
            let mut note = format!("claims {}", plugin.versions.join(", "));
            if !plugin.unknown_versions.is_empty() {
                note.push_str(&format!(
                    "; versions unknown to the suite: {}",
                    plugin.unknown_versions.join(", ")
                ));
            }
            Ok(note)
        })(),
    );
    report.check(
        id(plugin, "VERSION ignores what stdin holds"),
        (|| {
            let reply = setup(
                Call::new("VERSION")
                    .stdin_raw(b"not json")
                    .run(&plugin.path),
            )?;
            let v = reply.result()?;
            if v["supportedVersions"] == plugin.version_reply.clone()?["supportedVersions"] {
                Ok(String::new())
            } else {
                Err(format!("answered {v}"))
            }
        })(),
    );
    report.check(
        id(
            plugin,
            "VERSION answers a runtime's probe (CNI_NETNS, CNI_IFNAME, CNI_PATH = dummy)",
        ),
        (|| {
            // What Podman and Go libcni send before each ADD.
            let reply = setup(
                Call::new("VERSION")
                    .var("CNI_CONTAINERID", "")
                    .var("CNI_NETNS", "dummy")
                    .var("CNI_IFNAME", "dummy")
                    .var("CNI_PATH", "dummy")
                    .stdin_json(&json!({"cniVersion": "1.1.0"}))
                    .run(&plugin.path),
            )?;
            reply.result().map(|_| String::new())
        })(),
    );
    report.check(
        id(
            plugin,
            "no CNI_COMMAND: exits 0 naming the supported versions on stderr",
        ),
        (|| {
            let reply = setup(Call::new("").run(&plugin.path))?;
            reply.success()?;
            let highest = plugin.highest().unwrap_or("0.1.0");
            if reply.stderr.contains(highest) {
                Ok(String::new())
            } else {
                Err(format!(
                    "stderr does not list {highest}: {:?}",
                    reply.stderr
                ))
            }
        })(),
    );
}

// ----- every verb at every claimed version -----

pub fn verb_checks(report: &mut Report, plugin: &Plugin, subject: Subject) {
    for version in plugin.versions.clone() {
        let vid = |what: &str| id(plugin, &format!("{version} {what}"));
        let scene = match Scene::new("verb", &plugin.dir()) {
            Ok(s) => s,
            Err(e) => {
                report.check(vid("ADD, CHECK, DEL"), Err(format!("setup failed: {e}")));
                continue;
            }
        };
        let pod = match scene.pod("verb") {
            Ok(p) => p,
            Err(e) => {
                report.check(vid("ADD, CHECK, DEL"), Err(format!("setup failed: {e}")));
                continue;
            }
        };
        let cid = format!("suite-{}-{}", subject.name(), version.replace('.', ""));
        let conf = match subject.conf_with_prev(&scene, version, &pod) {
            Ok(c) => c,
            Err(e) => {
                report.check(vid("ADD, CHECK, DEL"), Err(format!("setup failed: {e}")));
                continue;
            }
        };
        let call = |command: &str, conf: &Value| {
            scene
                .call(command, &cid, &pod.path_string(), subject.ifname())
                .stdin_json(conf)
        };

        let added = (|| -> Step<Value> {
            let reply = scene.run(plugin, &call("ADD", &conf))?;
            let result = reply.result()?;
            check_result_shape(version, &result)?;
            Ok(result)
        })();
        report.check(
            vid(&format!("ADD gives a {version} result")),
            added.as_ref().map(|_| String::new()).map_err(Clone::clone),
        );
        let Ok(result) = added else {
            // Still clean up what a half-done ADD may have left.
            let _ = scene.run(plugin, &call("DEL", &conf));
            continue;
        };
        report.check(
            vid("ADD takes effect"),
            subject.verify_added(&scene, &pod, version, &conf, &result),
        );

        let mut with_prev = conf.clone();
        if version_at_least(version, "0.4.0") {
            // From 0.4.0 the runtime sends the ADD result to CHECK and DEL.
            with_prev["prevResult"] = result.clone();
            report.check(
                vid("CHECK right after ADD succeeds"),
                scene
                    .run(plugin, &call("CHECK", &with_prev))
                    .and_then(|r| r.silent_success().map(|_| String::new())),
            );
        } else {
            report.check(
                vid("CHECK is refused below 0.4.0 (code 1)"),
                scene
                    .run(plugin, &call("CHECK", &conf))
                    .and_then(|r| expect_code(&r, 1)),
            );
        }
        report.check(
            vid("DEL undoes ADD"),
            (|| {
                scene
                    .run(plugin, &call("DEL", &with_prev))?
                    .silent_success()?;
                subject.verify_deleted(&scene, &pod)
            })(),
        );
        report.check(
            vid("DEL again succeeds"),
            scene
                .run(plugin, &call("DEL", &with_prev))
                .and_then(|r| r.silent_success().map(|_| String::new())),
        );
        if version == "1.1.0" {
            report.check(
                vid("STATUS succeeds"),
                scene
                    .run(
                        plugin,
                        &scene
                            .bare_call("STATUS")
                            .stdin_json(&subject.conf(&scene, version)),
                    )
                    .and_then(|r| r.silent_success().map(|_| String::new())),
            );
        }
    }
    // GC and STATUS exist from 1.1.0 on; a config of an older version
    // must not be taken as a request.
    if let Some(older) = plugin.highest_up_to("1.0.0") {
        for verb in ["GC", "STATUS"] {
            report.check(
                id(plugin, &format!("{verb} with a {older} config is refused")),
                (|| {
                    let scene = setup(Scene::new("old", &plugin.dir()))?;
                    let conf = subject.conf(&scene, older);
                    let reply = scene.run(plugin, &scene.bare_call(verb).stdin_json(&conf))?;
                    let err = reply.error()?;
                    Ok(format!("code {}", err.code))
                })(),
            );
        }
    }
}

pub fn version_at_least(version: &str, min: &str) -> bool {
    let index = |v: &str| crate::testnet::ALL_VERSIONS.iter().position(|a| *a == v);
    match (index(version), index(min)) {
        (Some(a), Some(b)) => a >= b,
        _ => false,
    }
}

/// An error object with exactly `code`.
fn expect_code(reply: &Reply, code: u64) -> Step<String> {
    let err = reply.error()?;
    if err.code == code {
        Ok(format!("code {code}"))
    } else {
        Err(format!(
            "code {} ({}), expected {code}",
            err.code,
            err.text().trim()
        ))
    }
}

// ----- bad input -----

/// One bad input and what the plugin must answer.
struct BadInput {
    what: &'static str,
    call: Call,
    expect: Expect,
}

enum Expect {
    /// This code, and the message (or details) contains each text.
    Code(u64, Vec<String>),
    /// An error object with any code, whose text contains each text.
    AnyCode(Vec<String>),
}

pub fn bad_input_checks(report: &mut Report, plugin: &Plugin, subject: Subject) {
    let Some(version) = plugin.highest() else {
        return;
    };
    let dir = plugin.dir();
    let (scene, pod) = match Scene::new("bad", &dir).and_then(|s| {
        let p = s.pod("bad")?;
        Ok((s, p))
    }) {
        Ok(v) => v,
        Err(e) => {
            report.check(id(plugin, "bad input"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let conf = match subject.conf_with_prev(&scene, version, &pod) {
        Ok(c) => c,
        Err(e) => {
            report.check(id(plugin, "bad input"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let cid = format!("suite-bad-{}", subject.name());
    let good = || {
        scene
            .call("ADD", &cid, &pod.path_string(), subject.ifname())
            .stdin_json(&conf)
    };
    let mut renamed = conf.clone();
    renamed["name"] = json!("bad name!");
    let mut future = conf.clone();
    future["cniVersion"] = json!("9.9.9");
    let mut cases = vec![
        BadInput {
            what: "empty stdin -> code 6",
            call: good().stdin_raw(b""),
            expect: Expect::Code(6, vec![]),
        },
        BadInput {
            what: "invalid JSON on stdin -> code 6",
            call: good().stdin_raw(b"{\"cniVersion\": "),
            expect: Expect::Code(6, vec![]),
        },
        BadInput {
            what: "config without a network name -> code 7",
            call: good().stdin_raw(b"{}"),
            expect: Expect::Code(7, vec![]),
        },
        BadInput {
            what: "network name with invalid characters -> code 7",
            call: good().stdin_json(&renamed),
            expect: Expect::Code(7, vec![]),
        },
        BadInput {
            what: "unsupported cniVersion 9.9.9 -> code 1",
            call: good().stdin_json(&future),
            expect: Expect::Code(1, vec!["9.9.9".into()]),
        },
        BadInput {
            what: "unknown CNI_COMMAND -> code 4",
            call: good().var("CNI_COMMAND", "FROB"),
            expect: Expect::Code(4, vec!["FROB".into()]),
        },
        BadInput {
            what: "lower-case CNI_COMMAND `add` -> code 4",
            call: good().var("CNI_COMMAND", "add"),
            expect: Expect::Code(4, vec![]),
        },
        BadInput {
            what: "container ID with invalid characters -> code 4",
            call: good().var("CNI_CONTAINERID", "bad id!"),
            expect: Expect::Code(4, vec![]),
        },
        BadInput {
            what: "interface name of 16 bytes -> code 4",
            call: good().var("CNI_IFNAME", "abcdefghijklmnop"),
            expect: Expect::Code(4, vec![]),
        },
        BadInput {
            what: "interface name with `/` -> code 4",
            call: good().var("CNI_IFNAME", "et/h0"),
            expect: Expect::Code(4, vec![]),
        },
        BadInput {
            what: "interface name `.` -> code 4",
            call: good().var("CNI_IFNAME", "."),
            expect: Expect::Code(4, vec![]),
        },
    ];
    for var in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"] {
        cases.push(BadInput {
            what: match var {
                "CNI_CONTAINERID" => "ADD without CNI_CONTAINERID -> code 4 naming it",
                "CNI_NETNS" => "ADD without CNI_NETNS -> code 4 naming it",
                "CNI_IFNAME" => "ADD without CNI_IFNAME -> code 4 naming it",
                _ => "ADD without CNI_PATH -> code 4 naming it",
            },
            call: good().without(var),
            expect: Expect::Code(4, vec![var.to_string()]),
        });
    }
    if subject.enters_netns() {
        cases.push(BadInput {
            what: "CNI_NETNS that does not exist -> error naming it",
            call: good().var("CNI_NETNS", MISSING_NETNS),
            expect: Expect::AnyCode(vec!["cnitest-no-such-netns".into()]),
        });
        cases.push(BadInput {
            what: "CNI_NETNS that is not a netns (/etc/hostname) -> error naming it",
            call: good().var("CNI_NETNS", "/etc/hostname"),
            expect: Expect::AnyCode(vec!["/etc/hostname".into()]),
        });
    }
    // The plugin's own namespace (the fake host it runs in): adding a pod
    // interface there would wreck the host's network.
    cases.push(BadInput {
        what: "CNI_NETNS that is the plugin's own netns -> code 8",
        call: scene
            .call(
                "ADD",
                &format!("{cid}-own"),
                &scene.host.path_string(),
                "ownif0",
            )
            .stdin_json(&conf),
        expect: Expect::Code(8, vec![]),
    });
    if subject.reads_cni_args() {
        cases.push(BadInput {
            what: "CNI_ARGS with an unknown key and no IgnoreUnknown -> error naming it",
            call: good().var("CNI_ARGS", "SUITE_UNKNOWN_KEY=1"),
            expect: Expect::AnyCode(vec!["SUITE_UNKNOWN_KEY".into()]),
        });
    }
    for case in cases {
        let result = (|| -> Step<String> {
            let reply = scene.run(plugin, &case.call);
            remove_stray_netns_file(MISSING_NETNS);
            let reply = reply?;
            // Whatever an ADD that wrongly succeeded made must go again.
            if reply.code == 0 {
                let _ = scene.run(plugin, &case.call.clone().var("CNI_COMMAND", "DEL"));
            }
            match &case.expect {
                Expect::Code(code, texts) => {
                    let note = expect_code(&reply, *code)?;
                    must_mention(&reply, texts)?;
                    Ok(note)
                }
                Expect::AnyCode(texts) => {
                    let err = reply.error()?;
                    must_mention(&reply, texts)?;
                    Ok(format!("code {}", err.code))
                }
            }
        })();
        report.check(id(plugin, &format!("bad input: {}", case.what)), result);
    }
    if !subject.reads_cni_args() {
        report.check(
            id(
                plugin,
                "CNI_ARGS with unknown keys (it takes none) is accepted",
            ),
            (|| {
                let call = good().var("CNI_ARGS", "SUITE_UNKNOWN_KEY=1;K8S_POD_NAME=x");
                let reply = scene.run(plugin, &call)?;
                let res = reply.result().map(|_| String::new());
                let _ = scene.run(plugin, &call.clone().var("CNI_COMMAND", "DEL"));
                res
            })(),
        );
    }
}

/// A netns path that does not exist, for the bad-input checks.
const MISSING_NETNS: &str = "/run/netns/cnitest-no-such-netns";

/// Removes a plain file a plugin created at a netns path that was gone
/// (the reference sbr opens CNI_NETNS with O_CREAT to lock it), so that it
/// is not taken for a namespace the suite leaked. A real namespace (an
/// nsfs mount) is left alone.
fn remove_stray_netns_file(path: &str) {
    use nix::sys::statfs::{statfs, NSFS_MAGIC};
    let is_nsfs = statfs(path).is_ok_and(|s| s.filesystem_type() == NSFS_MAGIC);
    if !is_nsfs && std::path::Path::new(path).is_file() {
        let _ = std::fs::remove_file(path);
    }
}

fn must_mention(reply: &Reply, texts: &[String]) -> Step<()> {
    let err = reply.error()?;
    for t in texts {
        if !err.text().contains(t.as_str()) {
            return Err(format!(
                "error does not mention {t:?}: {}",
                err.text().trim()
            ));
        }
    }
    Ok(())
}

// ----- DEL as runtimes really send it -----

pub fn del_checks(report: &mut Report, plugin: &Plugin, subject: Subject) {
    let Some(version) = plugin.highest() else {
        return;
    };
    let dir = plugin.dir();
    let scene = match Scene::new("del", &dir) {
        Ok(s) => s,
        Err(e) => {
            report.check(id(plugin, "DEL cases"), Err(format!("setup failed: {e}")));
            return;
        }
    };
    let ifname = subject.ifname();

    // ADD into a pod, then its namespace goes away before DEL.
    report.check(
        id(
            plugin,
            "DEL with the netns gone succeeds and releases what ADD took",
        ),
        (|| {
            let pod = setup(scene.pod("del"))?;
            let path = pod.path_string();
            let conf = subject.conf_with_prev(&scene, version, &pod)?;
            let cid = format!("suite-del-gone-{}", subject.name());
            let result = scene
                .run(
                    plugin,
                    &scene.call("ADD", &cid, &path, ifname).stdin_json(&conf),
                )?
                .result()?;
            pod.delete();
            let mut with_prev = conf.clone();
            if version_at_least(version, "0.4.0") {
                with_prev["prevResult"] = result;
            }
            let reply = scene.run(
                plugin,
                &scene
                    .call("DEL", &cid, &path, ifname)
                    .stdin_json(&with_prev),
            );
            remove_stray_netns_file(&path);
            reply?.silent_success()?;
            no_lease_left(&scene, subject)
        })(),
    );

    if version_at_least(version, "0.4.0") {
        report.check(
            id(plugin, "DEL without prevResult succeeds and undoes ADD"),
            (|| {
                let pod = setup(scene.pod("del"))?;
                let conf = subject.conf_with_prev(&scene, version, &pod)?;
                let cid = format!("suite-del-noprev-{}", subject.name());
                let call = |cmd: &str| scene.call(cmd, &cid, &pod.path_string(), ifname);
                scene
                    .run(plugin, &call("ADD").stdin_json(&conf))?
                    .result()?;
                // A chained plugin's own configuration carries no
                // prevResult on DEL when the runtime lost its cache.
                let mut bare = conf.clone();
                if let Some(o) = bare.as_object_mut() {
                    o.remove("prevResult");
                }
                scene
                    .run(plugin, &call("DEL").stdin_json(&bare))?
                    .silent_success()?;
                subject.verify_deleted(&scene, &pod)
            })(),
        );
    }

    report.check(
        id(
            plugin,
            "second DEL with CNI_NETNS empty and no prevResult succeeds",
        ),
        (|| {
            let pod = setup(scene.pod("del"))?;
            let conf = subject.conf_with_prev(&scene, version, &pod)?;
            let cid = format!("suite-del-twice-{}", subject.name());
            let result = scene
                .run(
                    plugin,
                    &scene
                        .call("ADD", &cid, &pod.path_string(), ifname)
                        .stdin_json(&conf),
                )?
                .result()?;
            let mut with_prev = conf.clone();
            if version_at_least(version, "0.4.0") {
                with_prev["prevResult"] = result;
            }
            scene
                .run(
                    plugin,
                    &scene
                        .call("DEL", &cid, &pod.path_string(), ifname)
                        .stdin_json(&with_prev),
                )?
                .silent_success()?;
            pod.delete();
            let mut bare = conf.clone();
            if let Some(o) = bare.as_object_mut() {
                o.remove("prevResult");
            }
            scene
                .run(
                    plugin,
                    &scene.call("DEL", &cid, "", ifname).stdin_json(&bare),
                )?
                .silent_success()?;
            no_lease_left(&scene, subject)
        })(),
    );

    report.check(
        id(plugin, "DEL of an attachment never added succeeds"),
        (|| {
            let pod = setup(scene.pod("del"))?;
            let mut conf = subject.conf_with_prev(&scene, version, &pod)?;
            if let Some(o) = conf.as_object_mut() {
                o.remove("prevResult");
            }
            scene
                .run(
                    plugin,
                    &scene
                        .call("DEL", "suite-never-added", &pod.path_string(), ifname)
                        .stdin_json(&conf),
                )?
                .silent_success()
                .map(|_| String::new())
        })(),
    );
}

fn no_lease_left(scene: &Scene, subject: Subject) -> Step<String> {
    let leased = scene.leased(&subject.network());
    if leased.is_empty() {
        Ok(String::new())
    } else {
        Err(format!("leases left: {leased:?}"))
    }
}

// ----- GC -----

/// The valid-attachments list GC gets.
fn attachments(valid: &[(&str, &str)]) -> Value {
    Value::Array(
        valid
            .iter()
            .map(|(c, i)| json!({"containerID": c, "ifname": i}))
            .collect(),
    )
}

pub fn gc_checks(report: &mut Report, plugin: &Plugin, subject: Subject) {
    if !plugin.claims("1.1.0") {
        report.skip(
            id(plugin, "GC with cni.dev/valid-attachments"),
            "the plugin does not claim spec 1.1.0 (GC is 1.1.0)",
        );
        return;
    }
    let dir = plugin.dir();
    match subject {
        Subject::HostLocal
        | Subject::Bridge
        | Subject::Macvlan
        | Subject::Ipvlan
        | Subject::Vlan
        | Subject::HostDevice
        | Subject::Ptp
        | Subject::Tap
        | Subject::Dummy => {
            for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
                let what = if key == "cni.dev/valid-attachments" {
                    "GC with cni.dev/valid-attachments releases only stale leases".to_string()
                } else {
                    "GC with the older key cni.dev/attachments releases only stale leases"
                        .to_string()
                };
                report.check(
                    id(plugin, &what),
                    (|| {
                        let scene = setup(Scene::new("gc", &dir))?;
                        let keep = setup(scene.pod("gck"))?;
                        let stale = setup(scene.pod("gcs"))?;
                        let conf = subject.conf(&scene, "1.1.0");
                        let mut ips = Vec::new();
                        for (cid, pod) in [("suite-gc-keep", &keep), ("suite-gc-stale", &stale)] {
                            // Each pod's own attachment: host-device needs a
                            // device per pod, vlan a VLAN id per pod.
                            let attachment = subject.conf_with_prev(&scene, "1.1.0", pod)?;
                            let r = scene
                                .run(plugin, &scene.call("ADD", cid, &pod.path_string(), "eth0").stdin_json(&attachment))?
                                .result()?;
                            ips.push(super::scene::first_ipv4(&r).ok_or("no IPv4 in result")?.to_string());
                        }
                        let mut gc = conf.clone();
                        gc[key] = attachments(&[("suite-gc-keep", "eth0")]);
                        scene.run(plugin, &scene.bare_call("GC").stdin_json(&gc))?.silent_success()?;
                        let leased = scene.leased(&subject.network());
                        if leased != vec![ips[0].clone()] {
                            return Err(format!(
                                "after GC the store holds {leased:?}; expected only {} (kept), not {} (stale)",
                                ips[0], ips[1]
                            ));
                        }
                        Ok(format!("kept {}, released {}", ips[0], ips[1]))
                    })(),
                );
            }
        }
        Subject::Loopback
        | Subject::Static
        | Subject::Tuning
        | Subject::Sbr
        | Subject::Bandwidth
        | Subject::Firewall
        | Subject::Vrf => {
            report.check(
                id(plugin, "GC with cni.dev/valid-attachments succeeds"),
                (|| {
                    let scene = setup(Scene::new("gc", &dir))?;
                    let mut gc = subject.conf(&scene, "1.1.0");
                    gc["cni.dev/valid-attachments"] = attachments(&[]);
                    scene
                        .run(plugin, &scene.bare_call("GC").stdin_json(&gc))?
                        .silent_success()
                        .map(|_| String::new())
                })(),
            );
        }
        // portmap's GC needs real traffic to observe: see the capability
        // scenarios.
        Subject::Portmap => {}
    }
}

/// loopback given a prevResult must hand it on unchanged.
pub fn loopback_passthrough(report: &mut Report, plugin: &Plugin) {
    let Some(version) = plugin.highest().filter(|v| version_at_least(v, "0.3.0")) else {
        return;
    };
    report.check(
        id(
            plugin,
            &format!("{version} ADD with a prevResult passes it through"),
        ),
        (|| {
            let dir = plugin.dir();
            let scene = setup(Scene::new("lopass", &dir))?;
            let pod = setup(scene.pod("lopass"))?;
            let prev = Subject::Portmap
                .prev_result(version, &pod)?
                .ok_or("no prevResult")?;
            let mut conf = Subject::Loopback.conf(&scene, version);
            conf["prevResult"] = prev.clone();
            let call = scene.call("ADD", "suite-lo-pass", &pod.path_string(), "lo");
            let result = scene
                .run(plugin, &call.clone().stdin_json(&conf))?
                .result()?;
            let _ = scene.run(plugin, &call.var("CNI_COMMAND", "DEL").stdin_json(&conf));
            if super::shape::normalize_result(&result) == super::shape::normalize_result(&prev) {
                Ok(String::new())
            } else {
                Err(format!("result {result} differs from prevResult {prev}"))
            }
        })(),
    );
}

/// Keeps the pod of a check alive for the length of a closure.
pub fn with_pod<T>(scene: &Scene, tag: &str, f: impl FnOnce(&Netns) -> Step<T>) -> Step<T> {
    let pod = setup(scene.pod(tag))?;
    f(&pod)
}
