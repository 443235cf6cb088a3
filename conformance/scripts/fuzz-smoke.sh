#!/usr/bin/env bash
# Builds the cargo-fuzz targets of conformance/fuzz and runs each one
# briefly from its seeds (conformance/fuzz/seeds/<target>/): the skeleton,
# every plugin's configuration parsing, result conversion and the
# host-local store reader. Fails on the first crash, panic or sanitizer
# report; libFuzzer leaves the input in conformance/fuzz/artifacts/<target>/
# (replay it with `cargo fuzz run --fuzz-dir conformance/fuzz <target>
# <file>`), and every crash found becomes a regression test in the crate
# that owns the code.
#
# Usage: fuzz-smoke.sh [TARGET...]   (default: every target)
#   FUZZ_SECONDS  how long each target runs (default 20)
#
# The toolchain is stable: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass the
# unstable compiler flags it needs (sanitizer, coverage instrumentation).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never
export RUSTC_BOOTSTRAP=1

seconds="${FUZZ_SECONDS:-20}"
fuzz_dir=conformance/fuzz

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir "$fuzz_dir")
fi

# The fuzz crate has its own lock file (it is outside the workspace).
# cargo fuzz has no --locked, so this fails here, before building, when
# that lock no longer matches the crates it names (it had fallen behind
# libcni's dependencies once without anyone noticing).
cargo metadata --locked --format-version 1 --manifest-path "$fuzz_dir/Cargo.toml" >/dev/null

# Optimised, with debug assertions and overflow checks, AddressSanitizer.
flags=(--fuzz-dir "$fuzz_dir" --release --debug-assertions)
cargo fuzz build "${flags[@]}"

work=$(mktemp -d)
cleanup() {
    rm -rf "$work"
    # The host-local store target's data folders (one per process).
    rm -rf /dev/shm/cni-fuzz-store-* "${TMPDIR:-/tmp}"/cni-fuzz-store-*
}
trap cleanup EXIT

for target in "${targets[@]}"; do
    corpus="$work/$target"
    mkdir -p "$corpus"
    echo "=== fuzz $target for ${seconds}s"
    if ! cargo fuzz run "${flags[@]}" "$target" "$corpus" "$fuzz_dir/seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$work/$target.log" 2>&1; then
        tail -n 60 "$work/$target.log"
        echo "fuzz target $target crashed; input in $fuzz_dir/artifacts/$target/"
        exit 1
    fi
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$target.log" || true
done
echo "fuzz smoke passed: ${targets[*]}"
