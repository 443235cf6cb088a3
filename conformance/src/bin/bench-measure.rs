//! `bench-measure time|rss PROGRAM`: runs PROGRAM once with this process's
//! environment and stdin, and prints one line, `ns=<wall> exit=<code>`
//! (`time`) or `ns=<wall> rss_kib=<ru_maxrss> exit=<code>` (`rss`).
//!
//! The `secondary-guest` bench runs it inside the qemu guest, whose busybox
//! has no tool that reports a child's peak RSS. It starts the program the
//! way the host bench does ([`conformance::measure`]: as a runtime does for
//! time, by fork for RSS), after the same [`conformance::bench::settle`],
//! so the guest figures are taken like the host's. Exits 0 whenever it
//! measured, whatever PROGRAM's status; 2 when it could not run it.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use conformance::measure::{run_ok_timed, run_once, MeasureError};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, program) = match args.as_slice() {
        [mode, program] if mode == "time" || mode == "rss" => (mode.as_str(), program),
        _ => {
            eprintln!(
                "usage: bench-measure time|rss PROGRAM  (stdin and environment go to PROGRAM)"
            );
            return ExitCode::from(2);
        }
    };
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("bench-measure: reading stdin: {e}");
        return ExitCode::from(2);
    }
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let program = Path::new(program);
    conformance::bench::settle();
    let line = if mode == "rss" {
        run_once(program, &env, &stdin).map(|cost| {
            format!(
                "ns={} rss_kib={} exit={}",
                cost.wall.as_nanos(),
                cost.max_rss_kib,
                cost.exit_code
            )
        })
    } else {
        match run_ok_timed(program, &env, &stdin) {
            Ok(wall) => Ok(format!("ns={} exit=0", wall.as_nanos())),
            Err(MeasureError::Failed { code, .. }) => Ok(format!("ns=0 exit={code}")),
            Err(e) => Err(e),
        }
    };
    match line {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-measure: {e}");
            ExitCode::from(2)
        }
    }
}
