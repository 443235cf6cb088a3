#!/usr/bin/env bash
# Boots the kernel prepared by prepare.sh under qemu (software emulation, no
# network) and runs a guest test script in it.
#
# Usage: run.sh CACHE_DIR TEST_SCRIPT
#
# The guest's init runs TEST_SCRIPT with bash (as /test/run.sh, next to
# /test/guest-lib.sh from this directory) and powers off. The console goes to
# stdout and to CACHE_DIR/last-run.log. The test script prints one line per
# check, `CHECK <name> PASS|FAIL <detail>`, and `ALL-DONE` at its end.
# Exits 0 only when at least one check ran, none failed and ALL-DONE came.
#
# Environment: QEMU_TIMEOUT (seconds, default 300), QEMU_MEMORY (default 1G).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[ "$#" -eq 2 ] || { echo "usage: $0 CACHE_DIR TEST_SCRIPT" >&2; exit 2; }
cache=$(cd "$1" && pwd)
script=$2
[ -f "$script" ] || { echo "run: no test script $script" >&2; exit 2; }
for f in vmlinuz initramfs-base.cpio.gz; do
    [ -e "$cache/$f" ] || { echo "run: $cache/$f missing: run prepare.sh first" >&2; exit 2; }
done

work=$(mktemp -d "$cache/run.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The test script rides in a third cpio archive; the kernel unpacks
# concatenated archives in order into one root.
mkdir -p "$work/root/test"
cp "$script" "$work/root/test/run.sh"
cp "$here/guest-lib.sh" "$work/root/test/guest-lib.sh"
(cd "$work/root" && find . -print0 | cpio --null -o -H newc --owner=0:0 --quiet) |
    gzip -1 >"$work/test.cpio.gz"
archives=("$cache/initramfs-base.cpio.gz")
[ -f "$cache/initramfs-plugin.cpio.gz" ] && archives+=("$cache/initramfs-plugin.cpio.gz")
archives+=("$work/test.cpio.gz")
cat "${archives[@]}" >"$work/initrd"

log=$cache/last-run.log
# /dev/kvm may exist but does not work on these machines: always TCG.
# loglevel=1 keeps kernel messages from splitting CHECK lines on the console;
# a kernel oops panics and the panic reboots, which -no-reboot turns into exit.
set +e
timeout --foreground -k 10 "${QEMU_TIMEOUT:-300}" \
    qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m "${QEMU_MEMORY:-1G}" \
    -nographic -no-reboot -nic none \
    -kernel "$cache/vmlinuz" -initrd "$work/initrd" \
    -append "console=ttyS0 loglevel=1 panic=-1 oops=panic rdinit=/init" \
    </dev/null 2>&1 | tr -d '\r' | tee "$log"
qemu_status=${PIPESTATUS[0]}
set -e

checks=$(grep -c '^CHECK [^ ]* \(PASS\|FAIL\)' "$log" || true)
failed=$(grep -c '^CHECK [^ ]* FAIL' "$log" || true)
echo "run: qemu exit $qemu_status, $checks checks, $failed failed" >&2
if [ "$qemu_status" -eq 124 ]; then
    echo "run: timed out after ${QEMU_TIMEOUT:-300} s" >&2
    exit 1
fi
if ! grep -q '^ALL-DONE$' "$log"; then
    echo "run: the guest script did not finish (no ALL-DONE)" >&2
    exit 1
fi
if [ "$checks" -eq 0 ] || [ "$failed" -ne 0 ]; then
    exit 1
fi
