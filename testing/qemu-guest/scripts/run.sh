#!/usr/bin/env bash
# Boots the kernel prepared by prepare.sh under qemu (software emulation, no
# network) and runs a guest test script in it, with the given binaries.
#
# Usage: run.sh CACHE_DIR TEST_SCRIPT [BINARY...] [--into GUEST_DIR BINARY...]...
#
# Each BINARY goes to /usr/local/bin/<its file name> in the guest, or, after
# `--into GUEST_DIR`, to GUEST_DIR/<its file name> (an absolute path), with
# the shared libraries ldd lists for it; so two binaries of one name (our
# plugin and the reference's) can both be in a run, each in its folder. The
# guest's copies lose their debug sections (strip --strip-debug): a debug
# build is mostly debug info, and the whole archive is unpacked into the
# guest's memory. The guest's init runs TEST_SCRIPT with
# bash (as /test/run.sh, next to /test/guest-lib.sh from this directory) and
# powers off. The console goes to stdout and to
# CACHE_DIR/logs/<the script's path, / as _>.log. The test script prints one
# line per check, `CHECK <name> PASS|FAIL <detail>`, and `ALL-DONE` at its
# end. Exits 0 only when at least one check ran, none failed and ALL-DONE
# came.
#
# Nothing in CACHE_DIR is changed but the log, so runs of several crates can
# share one cache at the same time. The console is judged from this run's
# own copy; the log is replaced when the run ends, so two runs of one script
# at once leave the log of the one that ended last.
#
# Environment: QEMU_TIMEOUT (seconds, default 300), QEMU_MEMORY (default 1G).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=initramfs-lib.sh
. "$here/initramfs-lib.sh"

usage="usage: $0 CACHE_DIR TEST_SCRIPT [BINARY...] [--into GUEST_DIR BINARY...]..."
[ "$#" -ge 2 ] || { echo "$usage" >&2; exit 2; }
cache=$(cd "$1" && pwd)
script=$2
shift 2
[ -f "$script" ] || { echo "run: no test script $script" >&2; exit 2; }
for f in vmlinuz initramfs-base.cpio.gz; do
    [ -e "$cache/$f" ] || { echo "run: $cache/$f missing: run prepare.sh first" >&2; exit 2; }
done
# The binaries as "GUEST_PATH HOST_PATH" pairs, checked before anything is built.
placed=()
guest_dir=/usr/local/bin
while [ "$#" -gt 0 ]; do
    if [ "$1" = --into ]; then
        [ "$#" -ge 2 ] || { echo "$usage" >&2; exit 2; }
        case "$2" in
            /*) ;;
            *) echo "run: --into $2: the guest folder must be an absolute path" >&2; exit 2 ;;
        esac
        case "/$2/" in
            */../*) echo "run: --into $2: no .. in the guest folder" >&2; exit 2 ;;
        esac
        guest_dir=${2%/}
        shift 2
        continue
    fi
    binary=$1
    shift
    [ -f "$binary" ] && [ -x "$binary" ] || { echo "run: $binary is not an executable file" >&2; exit 2; }
    placed+=("$guest_dir/$(basename "$binary")" "$binary")
done

work=$(mktemp -d "$cache/run.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The binaries and the test script ride in a second cpio archive; the kernel
# unpacks concatenated archives in order into one root.
root=$work/root
mkdir -p "$root/test" "$root/usr/local/bin"
mirror_top_links "$root"
for ((i = 0; i < ${#placed[@]}; i += 2)); do
    guest_path=${placed[i]}
    [ ! -e "$root$guest_path" ] || { echo "run: two binaries for $guest_path" >&2; exit 2; }
    copy_with_libs "$root" "${placed[i + 1]}" "$guest_path"
    strip --strip-debug "$root$guest_path"
done
drop_top_links "$root"
cp "$script" "$root/test/run.sh"
cp "$here/guest-lib.sh" "$root/test/guest-lib.sh"
make_cpio "$root" "$work/test.cpio.gz"
# Read once, here: a prepare.sh of another crate replaces the base archive
# by rename, never in place.
cat "$cache/initramfs-base.cpio.gz" "$work/test.cpio.gz" >"$work/initrd"

mkdir -p "$cache/logs"
script_path=$(realpath "$script")
log=$cache/logs/$(printf '%s' "${script_path#/}" | tr '/' '_').log
console=$work/console.log
# /dev/kvm may exist but does not work on these machines: always TCG.
# loglevel=1 keeps kernel messages from splitting CHECK lines on the console;
# a kernel oops panics and the panic reboots, which -no-reboot turns into exit.
set +e
timeout --foreground -k 10 "${QEMU_TIMEOUT:-300}" \
    qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m "${QEMU_MEMORY:-1G}" \
    -nographic -no-reboot -nic none \
    -kernel "$cache/vmlinuz" -initrd "$work/initrd" \
    -append "console=ttyS0 loglevel=1 panic=-1 oops=panic rdinit=/init" \
    </dev/null 2>&1 | tr -d '\r' | tee "$console"
qemu_status=${PIPESTATUS[0]}
set -e

cp "$console" "$log.tmp.$$"
mv "$log.tmp.$$" "$log"
checks=$(grep -c '^CHECK [^ ]* \(PASS\|FAIL\)' "$console" || true)
failed=$(grep -c '^CHECK [^ ]* FAIL' "$console" || true)
echo "run: qemu exit $qemu_status, $checks checks, $failed failed (console in $log)" >&2
if [ "$qemu_status" -eq 124 ]; then
    echo "run: timed out after ${QEMU_TIMEOUT:-300} s" >&2
    exit 1
fi
if ! grep -q '^ALL-DONE$' "$console"; then
    echo "run: the guest script did not finish (no ALL-DONE)" >&2
    exit 1
fi
if [ "$checks" -eq 0 ] || [ "$failed" -ne 0 ]; then
    exit 1
fi
