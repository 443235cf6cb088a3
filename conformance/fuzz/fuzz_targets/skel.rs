//! The plugin skeleton (`libcni::skel::run_with`) over any environment and
//! standard input, with a plugin that does nothing but echo a result.
//!
//! Input: `KEY=VALUE` lines (the environment) up to the first empty line;
//! the rest is stdin. The skeleton must never panic (its last-resort
//! catch turns a panic into a "plugin panicked" error, which fails here),
//! must exit 0 or 1, and must print the spec's error object on failure.
//!
//! Variables are pinned so that no input makes the fuzzer touch the
//! machine: `CNI_LOG_FILE` is `/dev/null` (it takes precedence over a
//! `logFile` in the configuration) and `CNI_LOG_LEVEL` is `off`, and
//! `CNI_NETNS` becomes a path under a folder that does not exist unless it
//! is empty or one of a few known harmless paths.

#![no_main]

use std::collections::BTreeMap;

use libcni::error::{CniError, ErrorCode, ToCniError};
use libcni::skel::{run_with, CmdArgs, Plugin};
use libcni::types::{v100, AnyResult};
use libfuzzer_sys::fuzz_target;

#[derive(Debug)]
struct FuzzError(String);

impl std::fmt::Display for FuzzError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ToCniError for FuzzError {
    fn to_cni_error(&self) -> CniError {
        CniError::new(ErrorCode::Internal, self.0.clone())
    }
}

/// ADD returns the prevResult when there is one (so its conversion to the
/// configuration's version is exercised), else a fixed result.
struct EchoPlugin;

impl Plugin for EchoPlugin {
    type Error = FuzzError;

    fn about(&self) -> String {
        "CNI fuzz plugin".to_string()
    }

    fn add(&self, args: &CmdArgs) -> Result<AnyResult, FuzzError> {
        if let Some(prev) = args
            .conf
            .prev_result()
            .map_err(|e| FuzzError(e.to_string()))?
        {
            return Ok(prev);
        }
        let fixed = serde_json::json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:00:00:02", "sandbox": "/x"}],
            "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.0.0.10"]}
        });
        let result: v100::Result =
            serde_json::from_value(fixed).map_err(|e| FuzzError(e.to_string()))?;
        Ok(AnyResult::V1(result))
    }

    fn del(&self, _args: &CmdArgs) -> Result<(), FuzzError> {
        Ok(())
    }
}

const SAFE_NETNS: [&str; 3] = ["/proc/self/ns/net", "/etc/hostname", "/nonexistent"];

fn split_input(data: &[u8]) -> (BTreeMap<String, String>, &[u8]) {
    let mut env = BTreeMap::new();
    let mut rest = data;
    while let Some(end) = rest.iter().position(|b| *b == b'\n') {
        let (line, tail) = rest.split_at(end);
        rest = &tail[1..];
        if line.is_empty() {
            break;
        }
        let line = String::from_utf8_lossy(line);
        let (key, value) = line.split_once('=').unwrap_or((&line, ""));
        env.insert(key.to_string(), value.to_string());
    }
    if let Some(netns) = env.get_mut("CNI_NETNS") {
        if !netns.is_empty() && !SAFE_NETNS.contains(&netns.as_str()) {
            *netns = format!("/nonexistent-cni-fuzz/{}", netns.replace('/', "_"));
        }
    }
    env.insert("CNI_LOG_FILE".to_string(), "/dev/null".to_string());
    // The first call installs the process logger; "off" keeps the
    // fuzzer's own output readable.
    env.insert("CNI_LOG_LEVEL".to_string(), "off".to_string());
    (env, rest)
}

fuzz_target!(|data: &[u8]| {
    let (env, stdin) = split_input(data);
    let mut input = stdin;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let status = run_with(&EchoPlugin, &env, &mut input, &mut stdout, &mut stderr);
    let printed = String::from_utf8_lossy(&stdout);
    assert!(
        !printed.contains("plugin panicked"),
        "the skeleton panicked: {printed}"
    );
    match status {
        0 => {
            if !stdout.is_empty() {
                serde_json::from_slice::<serde_json::Value>(&stdout)
                    .unwrap_or_else(|e| panic!("success output is not JSON ({e}): {printed}"));
            }
        }
        1 => {
            let error: serde_json::Value = serde_json::from_slice(&stdout)
                .unwrap_or_else(|e| panic!("error output is not JSON ({e}): {printed}"));
            assert!(error["code"].is_u64(), "error without a code: {printed}");
        }
        other => panic!("exit status {other}"),
    }
});
