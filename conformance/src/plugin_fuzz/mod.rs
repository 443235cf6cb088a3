//! Whole-plugin fuzzing: plugin executables called as a runtime calls them,
//! with mutated configs, `prevResult`s and `CNI_*` variables, for every
//! verb, inside a sandbox of its own (see [`sandbox`]). A call passes when
//! it prints a result or an error JSON and exits within 10 s; each failure
//! is written out as a replayable case. `plugin-fuzz --help` runs it.

pub mod mutate;
pub mod regressions;
pub mod rng;
pub mod run;
pub mod sandbox;
pub mod seeds;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use mutate::CniEnv;
use rng::Rng;
use run::{Failure, Outcome};
use seeds::Seed;

/// Plugins that read a `prevResult` in every verb (chained).
const CHAINED: &[&str] = &["portmap", "bandwidth", "firewall", "tuning", "sbr", "vrf"];
const VERBS: &[&str] = &[
    "ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "ADD", "DEL", "CHECK", "BOGUS",
];
/// Pod namespace is replaced this often (iterations), see [`sandbox::recycle_pod`].
const RECYCLE_EVERY: u64 = 150;

#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    #[error(transparent)]
    Run(#[from] run::RunError),
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    #[error("writing case {0}: {1}")]
    Case(PathBuf, std::io::Error),
    #[error("no plugin of {0} has a seed")]
    NoPlugins(PathBuf),
    #[error("reading case {0}: {1}")]
    Replay(PathBuf, String),
}

pub struct Options {
    pub dir: PathBuf,
    pub seed: u64,
    pub calls: u64,
    pub out: PathBuf,
    pub examples: PathBuf,
    /// Only these plugins (all with a seed when empty).
    pub only: Vec<String>,
    /// A live etcd's client URLs for the `cluster-ipam+etcd` seeds.
    pub etcd_endpoints: Vec<String>,
    /// rdma-sriov's test build on its simulated hardware.
    pub fake_rdma: Option<sandbox::FakeRdma>,
}

/// One call to make.
struct Call {
    plugin: String,
    verb: String,
    stdin: Vec<u8>,
    env: CniEnv,
    notes: Vec<String>,
}

#[derive(Default)]
pub struct Tally {
    pub calls: u64,
    pub passed: u64,
    /// Passed calls that exited 0 (a result, or a quiet DEL/CHECK/GC): how
    /// far past the parsers the run got.
    pub succeeded: u64,
    pub failed: BTreeMap<Failure, u64>,
    /// Wall time of the calls, for the per-plugin average in the summary.
    pub elapsed: std::time::Duration,
}

pub struct Fuzzer {
    opts: Options,
    seeds: BTreeMap<String, Vec<Seed>>,
    pub tally: BTreeMap<String, Tally>,
    iteration: u64,
}

impl Fuzzer {
    pub fn new(opts: Options) -> Result<Fuzzer, FuzzError> {
        let mut seeds: BTreeMap<String, Vec<Seed>> = BTreeMap::new();
        let live = seeds::live(
            opts.etcd_endpoints.first().map(String::as_str),
            opts.fake_rdma.is_some(),
        );
        for s in seeds::from_examples(&opts.examples)
            .into_iter()
            .chain(seeds::documented())
            .chain(live)
        {
            let present = executable(&opts, &s.plugin).is_file();
            let wanted = opts.only.is_empty() || opts.only.contains(&s.plugin);
            if present && wanted {
                seeds.entry(s.plugin.clone()).or_default().push(s);
            }
        }
        if seeds.is_empty() {
            return Err(FuzzError::NoPlugins(opts.dir.clone()));
        }
        let tally = seeds
            .keys()
            .map(|k| (k.clone(), Tally::default()))
            .collect();
        Ok(Fuzzer {
            opts,
            seeds,
            tally,
            iteration: 0,
        })
    }

    pub fn total(&self) -> u64 {
        self.tally.values().map(|t| t.calls).sum()
    }

    /// Replays the regression cases, then runs iterations until the
    /// budget of calls is spent.
    pub fn run(&mut self) -> Result<(), FuzzError> {
        self.regressions()?;
        while self.total() < self.opts.calls {
            if self.iteration > 0 && self.iteration.is_multiple_of(RECYCLE_EVERY) {
                sandbox::recycle_pod();
            }
            let before = self.total();
            self.one_iteration()?;
            self.iteration += 1;
            // A line now and then, so a long CI run shows it is moving.
            if before / 5000 != self.total() / 5000 {
                let failed: u64 = self.tally.values().flat_map(|t| t.failed.values()).sum();
                eprintln!(
                    "plugin-fuzz: {} calls, {failed} failed so far",
                    self.total()
                );
            }
        }
        Ok(())
    }

    /// Each case of [`regressions::all`] whose plugin is in the run, as an
    /// ADD, then a DEL of the same config (whatever it answers) so that
    /// nothing stays. A case without its pinned answer is a failure.
    fn regressions(&mut self) -> Result<(), FuzzError> {
        for r in regressions::all() {
            if !self.tally.contains_key(r.plugin) {
                continue;
            }
            let stdin = serde_json::to_vec(&r.config).unwrap_or_default();
            let call = Call {
                plugin: r.plugin.into(),
                verb: "ADD".into(),
                stdin: stdin.clone(),
                env: self.env("ADD", r.plugin),
                notes: vec![format!("regression {}", r.name)],
            };
            let path = executable(&self.opts, r.plugin);
            let outcome = run::call(&path, &call.env.vars, &call.stdin)?;
            let tally = self.tally.entry(r.plugin.into()).or_default();
            tally.calls += 1;
            tally.elapsed += outcome.elapsed;
            match regressions::verdict(&r, &outcome) {
                None => tally.passed += 1,
                Some(why) => {
                    eprintln!("plugin-fuzz: regression {} failed: {why}", r.name);
                    *tally.failed.entry(Failure::Regressed).or_default() += 1;
                    let dir = self.opts.out.join(format!("regression-{}", r.name));
                    write_case(&dir, &path, &call, &outcome, Failure::Regressed)?;
                }
            }
            let env = self.env("DEL", r.plugin);
            run::call(&path, &env.vars, &stdin)?;
        }
        Ok(())
    }

    fn one_iteration(&mut self) -> Result<(), FuzzError> {
        let mut rng = Rng::for_iteration(self.opts.seed, self.iteration);
        let plugins: Vec<&String> = self.seeds.keys().collect();
        let Some(plugin) = rng.pick(&plugins).map(|p| p.to_string()) else {
            return Ok(());
        };
        let Some(seed) = self.seeds.get(&plugin).and_then(|s| rng.pick(s)).cloned() else {
            return Ok(());
        };
        if rng.below(10) < 6 {
            let verb = rng.pick(VERBS).copied().unwrap_or("ADD");
            let call = self.mutated_call(&seed, verb, None, &mut rng);
            self.execute(call, 0).map(|_| ())
        } else {
            self.lifecycle(&seed, &mut rng)
        }
    }

    /// ADD (intact or mutated: a partial ADD), then CHECK and DEL with the
    /// ADD's result as prevResult, damaged or not, then a clean DEL.
    fn lifecycle(&mut self, seed: &Seed, rng: &mut Rng) -> Result<(), FuzzError> {
        let add = if rng.one_in(2) {
            self.clean_call(seed, "ADD", None)
        } else {
            self.mutated_call(seed, "ADD", None, rng)
        };
        let added = self.execute(add, 0)?;
        let prev = added
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .filter(|v| v.get("cniVersion").is_some())
            .unwrap_or_else(seeds::sample_prev_result);
        let check = self.mutated_call(seed, "CHECK", Some(&prev), rng);
        self.execute(check, 1)?;
        let del = self.mutated_call(seed, "DEL", Some(&prev), rng);
        self.execute(del, 2)?;
        let clean = self.clean_call(seed, "DEL", Some(&prev));
        self.execute(clean, 3).map(|_| ())
    }

    /// The `CNI_*` variables of a call, and the simulated hardware's
    /// knobs for rdma-sriov's test build.
    fn env(&self, verb: &str, plugin: &str) -> CniEnv {
        let netns = format!("/run/netns/{}", sandbox::POD_NETNS);
        let container = format!("{}-{}", sandbox::MARKER, self.iteration);
        let mut env = CniEnv::new(
            verb,
            &netns,
            "net1",
            &self.opts.dir.display().to_string(),
            &container,
        );
        if let (Some(fake), "rdma-sriov") = (&self.opts.fake_rdma, plugin) {
            env.vars
                .extend(fake.env.iter().map(|(k, v)| (*k, Some(v.clone()))));
        }
        env
    }

    fn clean_call(&self, seed: &Seed, verb: &str, prev: Option<&Value>) -> Call {
        let mut conf = seed.config.clone();
        let chained = CHAINED.contains(&seed.plugin.as_str());
        if let (Value::Object(m), Some(p)) = (&mut conf, prev.or((chained).then_some(&Value::Null)))
        {
            let p = if p.is_null() {
                seeds::sample_prev_result()
            } else {
                p.clone()
            };
            m.insert("prevResult".into(), p);
        }
        Call {
            plugin: seed.plugin.clone(),
            verb: verb.into(),
            stdin: serde_json::to_vec(&conf).unwrap_or_default(),
            env: self.env(verb, &seed.plugin),
            notes: vec!["clean".into()],
        }
    }

    fn mutated_call(&self, seed: &Seed, verb: &str, prev: Option<&Value>, rng: &mut Rng) -> Call {
        let mut conf = mutate::as_object(seed.config.clone());
        let mut notes = Vec::new();
        let chained = CHAINED.contains(&seed.plugin.as_str());
        if prev.is_some() || (chained && !rng.one_in(4)) || rng.one_in(6) {
            let sample = seeds::sample_prev_result();
            let damage = rng.one_in(2);
            notes.push(mutate::with_prev(
                &mut conf,
                prev.unwrap_or(&sample),
                rng,
                damage,
            ));
        }
        if verb == "GC" && rng.one_in(2) {
            if let Value::Object(m) = &mut conf {
                m.insert(
                    "cni.dev/valid-attachments".into(),
                    json!([{"containerID": "x", "ifname": "net1"}]),
                );
            }
        }
        for _ in 0..rng.below(4) {
            notes.push(mutate::mutate_tree(&mut conf, rng));
        }
        let mut stdin = serde_json::to_vec(&conf).unwrap_or_default();
        if rng.one_in(5) {
            notes.push(mutate::mutate_bytes(&mut stdin, rng));
        }
        let mut env = self.env(verb, &seed.plugin);
        if rng.one_in(3) {
            notes.push(env.mutate(rng));
        }
        Call {
            plugin: seed.plugin.clone(),
            verb: verb.into(),
            stdin,
            env,
            notes,
        }
    }

    /// Makes the call, counts it, writes it out if it failed; the outcome
    /// is returned when the call passed.
    fn execute(&mut self, call: Call, step: u32) -> Result<Option<Outcome>, FuzzError> {
        if self.total() >= self.opts.calls {
            return Ok(None);
        }
        let path = executable(&self.opts, &call.plugin);
        let outcome = run::call(&path, &call.env.vars, &call.stdin)?;
        let verdict = run::judge(&call.verb, &outcome);
        let tally = self.tally.entry(call.plugin.clone()).or_default();
        tally.calls += 1;
        tally.elapsed += outcome.elapsed;
        match verdict {
            None => {
                tally.passed += 1;
                if outcome.status.is_some_and(|s| s.success()) {
                    tally.succeeded += 1;
                }
                Ok(Some(outcome))
            }
            Some(f) => {
                *tally.failed.entry(f).or_default() += 1;
                let name = format!("{}-{}-{}-{}", call.plugin, self.iteration, step, f.name());
                write_case(&self.opts.out.join(name), &path, &call, &outcome, f)?;
                Ok(None)
            }
        }
    }

    /// One line per plugin: calls, passed, failures by kind.
    pub fn summary(&self) -> Vec<String> {
        self.tally
            .iter()
            .map(|(plugin, t)| {
                let kinds: Vec<String> = Failure::ALL
                    .iter()
                    .map(|f| format!("{}={}", f.name(), t.failed.get(f).copied().unwrap_or(0)))
                    .collect();
                let failed: u64 = t.failed.values().sum();
                format!(
                    "plugin-fuzz: {plugin:<13} calls={} passed={} (exit 0: {}) failed={failed} ({}) avg={} ms",
                    t.calls,
                    t.passed,
                    t.succeeded,
                    kinds.join(" "),
                    t.elapsed.as_millis() / u128::from(t.calls.max(1))
                )
            })
            .collect()
    }

    pub fn failed(&self) -> bool {
        self.tally.values().any(|t| !t.failed.is_empty())
    }
}

/// The executable of a seed's plugin: `cluster-ipam+etcd` is cluster-ipam
/// (a seed family counted apart), rdma-sriov the test build when the run
/// simulates its hardware.
fn executable(opts: &Options, plugin: &str) -> PathBuf {
    let name = plugin.split('+').next().unwrap_or(plugin);
    match &opts.fake_rdma {
        Some(fake) if name == "rdma-sriov" => fake.exe.clone(),
        _ => opts.dir.join(name),
    }
}

/// A failure's folder: `case.json` (plugin, verb, variables, verdict, exit
/// status, mutations), `stdin` (the exact bytes), `stdout`, `stderr`.
/// `plugin-fuzz --replay FOLDER` runs it again in a fresh sandbox.
fn write_case(
    dir: &Path,
    plugin: &Path,
    call: &Call,
    o: &Outcome,
    f: Failure,
) -> Result<(), FuzzError> {
    let err = |e| FuzzError::Case(dir.to_path_buf(), e);
    std::fs::create_dir_all(dir).map_err(err)?;
    let status = o
        .status
        .map(|s| format!("{s}"))
        .unwrap_or_else(|| "killed after 10 s".into());
    let case = json!({
        "plugin": plugin, "verb": call.verb, "failure": f.name(), "status": status,
        "elapsed_ms": o.elapsed.as_millis() as u64, "mutations": call.notes,
        "env": call.env.vars.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
    });
    let text = serde_json::to_vec_pretty(&case).unwrap_or_default();
    std::fs::write(dir.join("case.json"), text).map_err(err)?;
    std::fs::write(dir.join("stdin"), &call.stdin).map_err(err)?;
    std::fs::write(dir.join("stdout"), &o.stdout).map_err(err)?;
    std::fs::write(dir.join("stderr"), &o.stderr).map_err(err)
}

/// Runs a written case again; returns its verdict line.
pub fn replay(dir: &Path) -> Result<String, FuzzError> {
    let bad = |e: String| FuzzError::Replay(dir.to_path_buf(), e);
    let text = std::fs::read(dir.join("case.json")).map_err(|e| bad(e.to_string()))?;
    let case: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let stdin = std::fs::read(dir.join("stdin")).map_err(|e| bad(e.to_string()))?;
    let plugin = case["plugin"]
        .as_str()
        .ok_or_else(|| bad("no plugin".into()))?;
    let verb = case["verb"].as_str().unwrap_or("ADD");
    let mut env: Vec<(&str, Option<String>)> = Vec::new();
    for pair in case["env"].as_array().into_iter().flatten() {
        if let Some(k) = pair[0].as_str() {
            env.push((k, pair[1].as_str().map(str::to_string)));
        }
    }
    let o = run::call(Path::new(plugin), &env, &stdin)?;
    let verdict = run::judge(verb, &o).map(Failure::name).unwrap_or("pass");
    Ok(format!(
        "{verdict}: status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}
