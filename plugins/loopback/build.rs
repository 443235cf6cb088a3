// Links the plugin binary as a static PIE against glibc.
//
// A runtime execs a plugin once per CNI call, so what a run touches while
// starting is most of its memory cost. Linked dynamically, over a third of
// a plugin's peak RSS was ld.so, libc.so and libgcc_s pages mapped while the
// loader loaded and relocated them (loopback VERSION: 2.4-2.7 MiB dynamic,
// 1.5-1.7 MiB static with the same profile).
//
// rustc's own switch for this, `-C target-feature=+crt-static`, can only be
// given through RUSTFLAGS. Without an explicit `--target` that also applies
// to build scripts and proc-macros, which cannot be static; with one, cargo
// moves the output out of target/{debug,release}. So this script links
// statically by itself: it passes `-static-pie` for the package's binaries
// (and their unit-test harness; not the library or the integration tests,
// which run the binaries as built) and puts first on the library search
// path a directory holding the static archives under the names rustc asks
// for (`-lc`, `-lgcc_s`, ...). The linker looks for lib<name>.so and then
// lib<name>.a in one directory before the next, so these archives win over
// the system's shared libraries even though rustc asks for dynamic linking.
//
// Trade-off: a fixed glibc bug reaches the plugins only when they are
// rebuilt, not when the system's libc6 is upgraded. Static glibc cannot load
// NSS or iconv modules; the plugins use neither (no user, group or host name
// lookups). ASLR, RELRO and BIND_NOW stay as in the dynamic build.
//
// The other plugins' build.rs include this file, so it must stay free of
// inner attributes and `//!` comments.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The glibc libraries std asks the linker for on linux-gnu.
const GLIBC_LIBS: &[&str] = &["c", "m", "rt", "pthread", "dl", "util"];

/// First glibc whose static-PIE start-up applies packed relative
/// relocations (DT_RELR).
const GLIBC_WITH_RELR: (u32, u32) = (2, 36);

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Err(why) = link_statically() {
        println!("cargo:warning=plugin binaries are linked dynamically: {why}");
    }
}

fn link_statically() -> Result<(), String> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "musl" {
        // The musl targets link statically by themselves: x86_64 as a
        // static PIE, whose start code (rcrt1.o, musl 1.2.4 and later)
        // applies packed relative relocations too; packed, the table the
        // start-up reads shrinks to a few hundred bytes (cluster-ipam:
        // 83 KiB of RELA, 3475 entries, each read at every start; see
        // docs/cluster-ipam.md). aarch64 links a static executable at a
        // fixed address (rustc's target has no static-PIE mode), which has
        // no relative relocations to pack; the option is harmless there.
        // The release build for aarch64 links with rust-lld itself
        // (.cargo/config.toml), which takes linker options bare; a C
        // compiler driver wants them behind -Wl.
        let linker = env::var("RUSTC_LINKER").unwrap_or_default();
        let linker_name = Path::new(&linker)
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        if linker_name.contains("lld") && !linker_name.contains("clang") {
            println!("cargo:rustc-link-arg-bins=-zpack-relative-relocs");
        } else {
            println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        }
        println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
        return Ok(());
    }
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return Ok(());
    }
    if var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|feature| feature == "crt-static")
    {
        // rustc links statically already.
        return Ok(());
    }
    if var("TARGET") != var("HOST") {
        return Err("cross build: the host's static glibc would not fit the target".into());
    }
    let linker = env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    // -static-pie's start file; missing where glibc lacks static-PIE support.
    find_file(&linker, "rcrt1.o")?;
    let libgcc = find_file(&linker, "libgcc.a")?;
    let libgcc_eh = find_file(&linker, "libgcc_eh.a")?;
    let dir = PathBuf::from(var("OUT_DIR")).join("static-libs");
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for lib in GLIBC_LIBS {
        let name = format!("lib{lib}.a");
        let archive = find_file(&linker, &name)?;
        let inputs: &[&Path] = if *lib == "c" {
            // libc calls into libgcc (soft float, unwinding) and rustc
            // names libgcc first; a group lets an order-sensitive linker
            // (GNU ld) go back to it, as gcc's own -static does.
            &[&archive, &libgcc, &libgcc_eh]
        } else {
            &[&archive]
        };
        write_group(&dir.join(&name), inputs)?;
    }
    // rustc asks for the shared unwinder; its static form is libgcc_eh,
    // which needs libgcc.
    write_group(&dir.join("libgcc_s.a"), &[&libgcc_eh, &libgcc])?;

    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
    println!("cargo:rustc-link-arg-bins=-static-pie");
    if glibc_version().is_some_and(|v| v >= GLIBC_WITH_RELR) {
        // The relocations a PIE applies to itself at start-up, packed: the
        // table, read on every run, shrinks from ~70 KiB to ~1 KiB (bridge
        // VERSION peak RSS: 1.7 -> 1.6 MiB).
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    Ok(())
}

/// Where the C toolchain finds `name`, as it would when linking.
fn find_file(linker: &str, name: &str) -> Result<PathBuf, String> {
    let output = Command::new(linker)
        .arg(format!("-print-file-name={name}"))
        .output()
        .map_err(|e| format!("running {linker}: {e}"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    // The compiler prints the bare name back when it finds nothing.
    if path.is_absolute() && path.exists() {
        Ok(path)
    } else {
        Err(format!("{name} not found (libc6-dev installs it)"))
    }
}

/// Writes, under an archive's name, a linker script that stands for
/// `inputs`: a linker reads a file that is not an archive as a script.
fn write_group(path: &Path, inputs: &[&Path]) -> Result<(), String> {
    let mut script = String::from("GROUP (");
    for input in inputs {
        script.push_str(&format!(" \"{}\"", input.display()));
    }
    script.push_str(" )\n");
    // Written aside and renamed over, so that whatever was at `path` (an
    // older build's symlink to a system archive, say) is replaced, never
    // written through.
    let fresh = path.with_extension("tmp");
    fs::write(&fresh, script)
        .and_then(|()| fs::rename(&fresh, path))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The host's glibc version, which is the one linked in a native build.
fn glibc_version() -> Option<(u32, u32)> {
    let output = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&output.stdout);
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    let minor = minor.split('.').next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
