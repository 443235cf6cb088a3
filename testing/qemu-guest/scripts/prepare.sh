#!/usr/bin/env bash
# Prepares the shared qemu test guest: a Debian bookworm 6.1 kernel, its
# modules, an out-of-tree netdevsim.ko and a busybox initramfs with bash,
# iproute2, jq, libibverbs (rxe provider) and the kernel modules guest tests
# use. Test binaries and scripts are not part of it: run.sh adds them per run.
#
# Usage: prepare.sh [CACHE_DIR]
#   CACHE_DIR  defaults to <repo>/target/qemu-guest, shared by every crate.
#
# Idempotent: the kernel packages are downloaded, unpacked and netdevsim is
# built once per kernel version; the base initramfs is rebuilt only when this
# script, the guest init, the module list or the host tools it copies change.
# The kernel packages are unpacked with dpkg -x and never installed on the
# host. Needs root (apt-get) on Debian bookworm.
#
# Concurrent calls wait for each other on CACHE_DIR/prepare.lock (flock,
# at most QEMU_GUEST_LOCK_TIMEOUT seconds, default 1200). The Rust harness
# holds that lock itself and says so with QEMU_GUEST_LOCKED=1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cache=${1:-$repo/target/qemu-guest}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

if [ "${QEMU_GUEST_LOCKED:-}" != 1 ]; then
    wait_s=${QEMU_GUEST_LOCK_TIMEOUT:-1200}
    status=0
    QEMU_GUEST_LOCKED=1 flock -w "$wait_s" -E 75 "$cache/prepare.lock" "$0" "$cache" || status=$?
    if [ "$status" = 75 ]; then
        printf 'prepare: error: another preparation held %s for %s s (QEMU_GUEST_LOCK_TIMEOUT)\n' \
            "$cache/prepare.lock" "$wait_s" >&2
    fi
    exit "$status"
fi

# shellcheck source=initramfs-lib.sh
. "$here/initramfs-lib.sh"

log() { printf 'prepare: %s\n' "$*" >&2; }
die() { printf 'prepare: error: %s\n' "$*" >&2; exit 1; }

# --- host packages -----------------------------------------------------------
# qemu-system-x86: the emulator; busybox-static: the guest's shell tools;
# kmod: depmod for the guest module tree; cpio: the initramfs;
# gcc-12 + make: the netdevsim build (the Debian 6.1 headers ask for gcc-12);
# xz-utils: the linux-source tarball; iproute2 (ip, rdma, bridge), jq,
# ibverbs-utils (ibv_devinfo), ibverbs-providers (rxe) and libibverbs1:
# copied into the guest together with their shared libraries; binutils:
# run.sh strips the debug sections of the binaries it puts in the guest.
host_packages=(qemu-system-x86 busybox-static kmod cpio gcc-12 make xz-utils
    iproute2 jq ibverbs-utils ibverbs-providers libibverbs1 binutils)
missing=()
for pkg in "${host_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
apt_updated=no
apt_update() {
    if [ "$apt_updated" = no ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        apt_updated=yes
    fi
}
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "needs root to install: ${missing[*]}"
    apt_update
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >&2
fi

# --- kernel version ------------------------------------------------------------
# The kernel is the one bookworm's linux-image-amd64 currently depends on (the
# security archive keeps only its newest build, so no version is pinned here).
# kernel.env is written once the kernel and netdevsim are in the cache; from
# then on runs stay on that kernel and need no network.
kernel_env=$cache/kernel.env
if [ -f "$kernel_env" ]; then
    # shellcheck source=/dev/null
    . "$kernel_env"
else
    candidate() { apt-cache policy linux-image-amd64 2>/dev/null | awk '/Candidate:/ {print $2}'; }
    version=$(candidate)
    if [ -z "$version" ] || [ "$version" = "(none)" ]; then
        apt_update
        version=$(candidate)
    fi
    [ -n "$version" ] && [ "$version" != "(none)" ] ||
        die "apt knows no linux-image-amd64 (is this Debian bookworm?)"
    abi=$(apt-cache show "linux-image-amd64=$version" |
        sed -n 's/^Depends:.*linux-image-\(6\.1\.0-[0-9]*\)-amd64.*/\1/p' | head -n 1)
    [ -n "$abi" ] || die "cannot find the kernel ABI linux-image-amd64 $version depends on"
fi
kver=$abi-amd64
log "kernel $kver (package version $version)"

# --- kernel image, headers, netdevsim ------------------------------------------------
# The packages are downloaded only for the stages still to do and deleted once
# unpacked or built: what stays is the unpacked image (kernel + modules).
debs=$cache/debs
kernel_root=$cache/kernel
headers_root=$cache/headers
headers_dir=$headers_root/usr/src/linux-headers-$kver
netdevsim_ko=$kernel_root/lib/modules/$kver/extra/netdevsim.ko
vmlinuz=$kernel_root/boot/vmlinuz-$kver

deb_file() { ls "$debs/$1"_"${version//:/%3a}"_*.deb 2>/dev/null | head -n 1; }
download() { # package...
    local pkg wanted=()
    for pkg in "$@"; do
        [ -n "$(deb_file "$pkg")" ] || wanted+=("$pkg=$version")
    done
    [ "${#wanted[@]}" -gt 0 ] || return 0
    mkdir -p "$debs"
    log "downloading ${wanted[*]}"
    # Downloading as root into a root-owned cache: apt's _apt sandbox user
    # could not write there.
    (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${wanted[@]}" >&2) || {
        apt_update
        (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${wanted[@]}" >&2)
    } || die "cannot download ${wanted[*]}: if the archive no longer has $version, remove $cache to start over"
}

if [ ! -f "$kernel_root/.done-$version" ]; then
    download "linux-image-$kver-unsigned"
    log "unpacking the kernel image"
    rm -rf "$kernel_root"
    dpkg -x "$(deb_file "linux-image-$kver-unsigned")" "$kernel_root"
    touch "$kernel_root/.done-$version"
    rm -f "$(deb_file "linux-image-$kver-unsigned")"
fi
[ -f "$vmlinuz" ] || die "no $vmlinuz in the image package"

# Debian builds its kernels without CONFIG_NETDEVSIM: build it out of tree from
# the matching source, against the unpacked headers.
if [ ! -f "$netdevsim_ko" ]; then
    build_packages=("linux-headers-$kver" "linux-headers-$abi-common" "linux-kbuild-6.1" "linux-source-6.1")
    download "${build_packages[@]}"
    log "unpacking the kernel headers"
    rm -rf "$headers_root"
    for pkg in "linux-headers-$kver" "linux-headers-$abi-common" "linux-kbuild-6.1"; do
        dpkg -x "$(deb_file "$pkg")" "$headers_root"
    done
    # The flavour's Makefile includes the common one by absolute /usr/src path;
    # every other link in the tree is relative and stays inside the cache.
    sed -i "s|^include /usr/src/|include $headers_root/usr/src/|" "$headers_dir/Makefile"

    netdevsim_src=$cache/netdevsim-src
    rm -rf "$netdevsim_src"
    mkdir -p "$netdevsim_src"
    log "extracting drivers/net/netdevsim from linux-source-6.1"
    dpkg-deb --fsys-tarfile "$(deb_file linux-source-6.1)" |
        tar -xO ./usr/src/linux-source-6.1.tar.xz |
        tar -xJ -C "$netdevsim_src" --strip-components=4 linux-source-6.1/drivers/net/netdevsim
    log "building netdevsim.ko"
    make -s -C "$headers_dir" M="$netdevsim_src" CONFIG_NETDEVSIM=m -j"$(nproc)" modules >&2
    mkdir -p "$(dirname "$netdevsim_ko")"
    cp "$netdevsim_src/netdevsim.ko" "$netdevsim_ko.tmp"
    mv "$netdevsim_ko.tmp" "$netdevsim_ko"
    depmod -b "$kernel_root" "$kver"
    for pkg in "${build_packages[@]}"; do rm -f "$(deb_file "$pkg")"; done
    rm -rf "$headers_root" "$netdevsim_src"
fi
[ -f "$kernel_root/lib/modules/$kver/modules.dep" ] || depmod -b "$kernel_root" "$kver"
rmdir "$debs" 2>/dev/null || true
if [ ! -f "$kernel_env" ]; then
    printf 'version=%s\nabi=%s\n' "$version" "$abi" >"$kernel_env.tmp"
    mv "$kernel_env.tmp" "$kernel_env"
fi

# --- base initramfs ------------------------------------------------------------------
# The modules the guest's init loads at boot, in this order, with their
# modules.dep closure: the link types and devices guest tests use.
# rdma_rxe asks the crypto API for "crc32" when a link is added, a
# dependency modules.dep does not know: the crc32 modules come first.
guest_modules=(8021q ipvlan macvlan dummy vrf bridge veth netdevsim
    crc32_generic crc32-pclmul ib_uverbs rdma_rxe)
# Host tools copied with their shared libraries; busybox fills in the rest.
guest_tools=(bash ip rdma bridge tc jq ibv_devinfo ibv_devices)

host_tool_versions=$(dpkg-query -W bash iproute2 jq ibverbs-utils ibverbs-providers \
    libibverbs1 busybox-static libc6 2>/dev/null | tr '\n' ' ')
base_key=$( (cat "$here/prepare.sh" "$here/init" "$here/initramfs-lib.sh"
    echo "$kver $version $host_tool_versions") |
    sha256sum | cut -d' ' -f1)
base_cpio=$cache/initramfs-base.cpio.gz
if [ "$(cat "$cache/initramfs-base.key" 2>/dev/null)" != "$base_key" ] || [ ! -f "$base_cpio" ]; then
    log "building the base initramfs"
    root=$cache/rootfs-base
    rm -rf "$root"
    mkdir -p "$root"
    mirror_top_links "$root"
    mkdir -p "$root"/{dev,proc,sys,tmp,run,var,etc,root,mnt,usr/local/bin}
    ln -s ../run "$root/var/run"

    # Real tools first; busybox applets only where no real tool of that name is
    # copied (busybox's own ip applet would otherwise shadow iproute2's).
    for tool in "${guest_tools[@]}"; do
        path=$(command -v "$tool") || die "host tool $tool not found"
        copy_with_libs "$root" "$(readlink -f "$path")" "/usr/bin/$tool"
    done
    cp /bin/busybox "$root/usr/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
    done

    # libibverbs loads providers by dlopen from the directory named in
    # /etc/libibverbs.d/*.driver: only rxe is needed.
    provider=""
    for candidate in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do
        if [ -f "$candidate" ]; then provider=$candidate; fi
    done
    [ -n "$provider" ] || die "no librxe provider (ibverbs-providers)"
    copy_with_libs "$root" "$provider"
    copy_file "$root" /etc/libibverbs.d/rxe.driver

    # Kernel modules: the closure of guest_modules over modules.dep.
    moddir=/lib/modules/$kver
    declare -A wanted=()
    pending=()
    for module in "${guest_modules[@]}"; do
        rel=$(awk -F: -v m="$module" '{n=$1; sub(/.*\//, "", n); sub(/\.ko(\..*)?$/, "", n);
            gsub(/-/, "_", n); mm=m; gsub(/-/, "_", mm); if (n == mm) {print $1; exit}}' \
            "$kernel_root$moddir/modules.dep")
        [ -n "$rel" ] || die "module $module not in the kernel package"
        pending+=("$rel")
    done
    while [ "${#pending[@]}" -gt 0 ]; do
        rel=${pending[0]}
        pending=("${pending[@]:1}")
        [ -z "${wanted[$rel]:-}" ] || continue
        wanted[$rel]=1
        for dep in $(awk -F: -v r="$rel" '$1 == r {print $2; exit}' "$kernel_root$moddir/modules.dep"); do
            pending+=("$dep")
        done
    done
    for rel in "${!wanted[@]}"; do
        mkdir -p "$root$moddir/$(dirname "$rel")"
        cp "$kernel_root$moddir/$rel" "$root$moddir/$rel"
    done
    cp "$kernel_root$moddir"/modules.{order,builtin,builtin.modinfo} "$root$moddir/"
    depmod -b "$root" "$kver"

    cp "$here/init" "$root/init"
    chmod 755 "$root/init"
    printf 'root:x:0:0:root:/root:/usr/bin/bash\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    printf '%s\n' "$kver" >"$root/etc/guest-kernel-release"
    printf '%s\n' "${guest_modules[@]}" >"$root/etc/guest-modules"

    make_cpio "$root" "$base_cpio"
    rm -rf "$root"
    printf '%s\n' "$base_key" >"$cache/initramfs-base.key.tmp"
    mv "$cache/initramfs-base.key.tmp" "$cache/initramfs-base.key"
fi

# Replaced atomically: a run.sh of another crate may be starting a guest.
if [ "$(readlink "$cache/vmlinuz" 2>/dev/null)" != "$vmlinuz" ]; then
    ln -sfn "$vmlinuz" "$cache/vmlinuz.tmp"
    mv -T "$cache/vmlinuz.tmp" "$cache/vmlinuz"
fi
log "ready in $cache"
