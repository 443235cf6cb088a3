//! `plugin-fuzz`: whole-plugin fuzzing of a folder of CNI plugins (see
//! `conformance::plugin_fuzz`). Needs root: it re-executes itself in a
//! private mount and network namespace, where all the calls happen.
//!
//! `plugin-fuzz --seed N --calls M [--dir D]` replays a run exactly (the
//! mutations depend on the seed alone); `--replay CASE` re-runs one
//! written failure.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use conformance::plugin_fuzz::{self, sandbox, Fuzzer, Options};

#[derive(Parser)]
#[command(
    name = "plugin-fuzz",
    about = "Whole-plugin fuzzing of a folder of CNI plugins"
)]
struct Args {
    /// Folder of plugin executables.
    #[arg(long, default_value = "target/x86_64-unknown-linux-musl/release")]
    dir: PathBuf,
    /// The run's seed: same seed, same calls.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many plugin calls to make.
    #[arg(long, default_value_t = 2000)]
    calls: u64,
    /// Where failures are written (default target/plugin-fuzz/seed-N).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The conflist examples used as seeds.
    #[arg(long, default_value = "conflist-examples")]
    examples: PathBuf,
    /// Only these plugins (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Re-run one written failure (a folder of the output) and print it.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Start one etcd member (/usr/bin/etcd) inside the sandbox and add
    /// cluster-ipam seeds that use it (counted as `cluster-ipam+etcd`).
    #[arg(long)]
    etcd: bool,
    /// rdma-sriov built with its test-only fake-hardware feature
    /// (target/debug/rdma-sriov after `cargo build -p rdma-sriov
    /// --features fake-hardware`), run on a simulated SR-IOV machine.
    #[arg(long)]
    rdma_sriov: Option<PathBuf>,
    /// Split the calls over this many sandboxes run side by side (job `j`
    /// has seed `seed + j`, its share of the calls, and writes to
    /// `OUT/job-j`). The calls mostly wait on the kernel, so jobs shorten
    /// the wall time on a machine with little CPU to spare.
    #[arg(long, default_value_t = 1)]
    jobs: u64,
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = if std::env::var_os(sandbox::INSIDE).is_some() {
        inside(args)
    } else {
        outside(args)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("plugin-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

/// On the machine: checks the folders, runs the sandboxed fuzzer, times it
/// (wall and the CPU of everything it ran) and compares the machine before
/// and after.
fn outside(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let dir = absolute(&args.dir);
    let out = absolute(
        &args
            .out
            .clone()
            .unwrap_or_else(|| format!("target/plugin-fuzz/seed-{}", args.seed).into()),
    );
    std::fs::create_dir_all(&out)?;
    let out = absolute(&out);
    for p in [&dir, &out] {
        sandbox::check_visible(p)?;
    }
    let mut forwarded: Vec<String> = vec![
        "--dir".into(),
        dir.display().to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--calls".into(),
        args.calls.to_string(),
        "--out".into(),
        out.display().to_string(),
        "--examples".into(),
        absolute(&args.examples).display().to_string(),
    ];
    if !args.only.is_empty() {
        forwarded.extend(["--only".into(), args.only.join(",")]);
    }
    if let Some(r) = &args.replay {
        forwarded.extend(["--replay".into(), absolute(r).display().to_string()]);
    }
    if args.etcd {
        forwarded.push("--etcd".into());
    }
    if let Some(exe) = &args.rdma_sriov {
        let exe = absolute(exe);
        if !exe.is_file() {
            return Err(format!("--rdma-sriov {}: no such file", exe.display()).into());
        }
        sandbox::check_visible(&exe)?;
        forwarded.extend(["--rdma-sriov".into(), exe.display().to_string()]);
    }
    let before = sandbox::HostSnapshot::take();
    let start = Instant::now();
    let code = if args.jobs > 1 && args.replay.is_none() {
        run_jobs(&args, &forwarded, &out)?
    } else {
        sandbox::reexec(&forwarded)?
    };
    let wall = start.elapsed();
    let (user, sys) = children_cpu();
    eprintln!(
        "plugin-fuzz: wall {:.1} s, CPU user {user:.1} s + sys {sys:.1} s",
        wall.as_secs_f64()
    );
    let (ours, others) = sandbox::HostSnapshot::take().new_since(&before);
    // Other engineers' builds and tests share the machine: their files
    // are counted, not listed (the first few show what they are).
    if !others.is_empty() {
        eprintln!(
            "plugin-fuzz: {} items appeared on the machine during the run, none naming it (e.g. {})",
            others.len(),
            others.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        );
    }
    for item in &ours {
        eprintln!("plugin-fuzz: LEFT ON THE MACHINE: {item}");
    }
    let leaked = !ours.is_empty();
    Ok(ExitCode::from(if leaked {
        1
    } else {
        u8::try_from(code).unwrap_or(1)
    }))
}

/// Runs `args.jobs` sandboxes at once, each with its own seed, share of
/// the calls and output folder, its output in `OUT/job-j.log`; prints the
/// logs one after the other and returns the worst exit code.
fn run_jobs(
    args: &Args,
    forwarded: &[String],
    out: &Path,
) -> Result<i32, Box<dyn std::error::Error>> {
    let jobs = args.jobs;
    let mut handles = Vec::new();
    for j in 0..jobs {
        let seed = args.seed.wrapping_add(j);
        let calls = args.calls / jobs + u64::from(j < args.calls % jobs);
        let job_out = out.join(format!("job-{j}"));
        std::fs::create_dir_all(&job_out)?;
        let mut job_args = forwarded.to_vec();
        for (flag, value) in [
            ("--seed", seed.to_string()),
            ("--calls", calls.to_string()),
            ("--out", job_out.display().to_string()),
        ] {
            if let Some(i) = job_args.iter().position(|a| a == flag) {
                job_args[i + 1] = value;
            }
        }
        let log = out.join(format!("job-{j}.log"));
        let header = format!(
            "=== job {j}: --seed {seed} --calls {calls} --out {}",
            job_out.display()
        );
        handles.push((
            header,
            log.clone(),
            std::thread::spawn(move || sandbox::reexec_logged(&job_args, &log)),
        ));
    }
    let mut worst = 0;
    for (header, log, handle) in handles {
        let code = handle.join().map_err(|_| "a job's thread panicked")??;
        println!("{header} (exit {code})");
        print!("{}", std::fs::read_to_string(&log).unwrap_or_default());
        worst = worst.max(code);
    }
    Ok(worst)
}

/// User and system CPU seconds of the waited-for descendants.
fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// In the sandbox: prepares it and runs the calls (or one replay).
fn inside(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| "target/plugin-fuzz".into());
    sandbox::prepare(&out)?;
    if let Some(case) = &args.replay {
        println!("{}", plugin_fuzz::replay(case)?);
        return Ok(ExitCode::SUCCESS);
    }
    // Kept until the run ends; dropping it stops the member.
    let etcd = if args.etcd {
        let cluster = etcd_cluster::EtcdCluster::start(1, etcd_cluster::ClusterOptions::default())?;
        eprintln!("plugin-fuzz: etcd at {}", cluster.endpoints().join(","));
        Some(cluster)
    } else {
        None
    };
    let fake_rdma = match &args.rdma_sriov {
        Some(exe) => Some(sandbox::fake_rdma(exe)?),
        None => None,
    };
    let mut fuzzer = Fuzzer::new(Options {
        dir: args.dir.clone(),
        seed: args.seed,
        calls: args.calls,
        out: args
            .out
            .clone()
            .unwrap_or_else(|| "target/plugin-fuzz".into()),
        examples: args.examples.clone(),
        only: args.only.clone(),
        etcd_endpoints: etcd.as_ref().map(|c| c.endpoints()).unwrap_or_default(),
        fake_rdma,
    })?;
    fuzzer.run()?;
    for line in fuzzer.summary() {
        println!("{line}");
    }
    println!(
        "plugin-fuzz: {} calls, seed {}, plugins from {}",
        fuzzer.total(),
        args.seed,
        args.dir.display()
    );
    Ok(if fuzzer.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
