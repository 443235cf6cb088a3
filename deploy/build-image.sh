#!/usr/bin/env bash
# Builds the install image of the DaemonSet (deploy/kubernetes/daemonset.yaml)
# offline, as an OCI archive: no registry is contacted and no base image is
# pulled (FROM scratch). Needs buildah (Debian package) and root.
#
#   deploy/build-image.sh [--with-rdma-sriov] [--no-build] [OUTPUT.tar]
#
# The image holds:
#   /usr/bin/cni-installer   the install step (entrypoint; `install` by default)
#   /usr/bin/cnitool         for checking a node (docs/kubernetes.md)
#   /usr/bin/cni-node        the node agent, the DaemonSet's main container
#                            (docs/node-agent.md)
#   /opt/cni-rs/bin/         the plugins of `cargo plugins` and SHA256SUMS
#   /LICENSE
# Every binary is static (musl), so nothing else is needed in the image.
# --with-rdma-sriov adds rdma-sriov, built for the host target: it links
# libibverbs dynamically, which the node (rdma-core) provides, not the image.
#
# --no-build takes the binaries as they are in target/ (built before).
# Prints the archive's path on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

with_rdma_sriov=false
build=true
output=""
for arg in "$@"; do
    case "$arg" in
        --with-rdma-sriov) with_rdma_sriov=true ;;
        --no-build) build=false ;;
        -*) echo "usage: $0 [--with-rdma-sriov] [--no-build] [OUTPUT.tar]" >&2; exit 2 ;;
        *) output="$arg" ;;
    esac
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
work=target/cni-image
output=${output:-$work/cni-rs-installer-$version.tar}
musl=target/x86_64-unknown-linux-musl/release
log() { echo "build-image: $*" >&2; }

# The shipped plugin set is the one `cargo plugins` builds (.cargo/config.toml).
mapfile -t plugins < <(sed -n 's/^plugins = "\(.*\)"$/\1/p' .cargo/config.toml \
    | grep -o -- '-p [a-z0-9-]*' | cut -c4-)
[ "${#plugins[@]}" -gt 0 ] || { log "no plugin list in .cargo/config.toml"; exit 1; }

if $build; then
    log "building (release, musl): the plugins, cni-installer, cnitool, cni-node"
    cargo plugins --locked >&2
    cargo build --release --locked --target x86_64-unknown-linux-musl \
        -p cni-installer -p cnitool -p cni-node >&2
    if $with_rdma_sriov; then
        cargo build --release --locked -p rdma-sriov >&2
    fi
fi

rootfs=$work/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/opt/cni-rs/bin"
install -m 0755 "$musl/cni-installer" "$musl/cnitool" "$musl/cni-node" "$rootfs/usr/bin/"
for plugin in "${plugins[@]}"; do
    install -m 0755 "$musl/$plugin" "$rootfs/opt/cni-rs/bin/"
done
if $with_rdma_sriov; then
    install -m 0755 target/release/rdma-sriov "$rootfs/opt/cni-rs/bin/"
fi
install -m 0644 LICENSE "$rootfs/LICENSE"

# A scratch image runs only static programs; the plugins are promised
# static too (no library of the node is needed), rdma-sriov excepted.
for binary in "$rootfs"/usr/bin/* "$rootfs"/opt/cni-rs/bin/*; do
    [ "$(basename "$binary")" = rdma-sriov ] && continue
    if readelf --program-headers "$binary" | grep -q INTERP; then
        log "$binary is linked dynamically; the image needs static binaries"
        exit 1
    fi
done
(cd "$rootfs/opt/cni-rs/bin" && sha256sum -- *) > "$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$rootfs/opt/cni-rs/bin/SHA256SUMS"

# buildah's own storage under target/, so the machine's image store is
# neither read nor changed; vfs needs no overlay mounts.
store=$work/buildah
mkdir -p "$store"
buildah=(buildah --root "$PWD/$store/root" --runroot "$PWD/$store/run" --storage-driver vfs)
container=$("${buildah[@]}" from scratch)
trap '"${buildah[@]}" rm "$container" >/dev/null 2>&1 || true' EXIT
"${buildah[@]}" copy "$container" "$rootfs/" / >/dev/null
"${buildah[@]}" config \
    --entrypoint '["/usr/bin/cni-installer"]' \
    --cmd install \
    --workingdir / \
    --label org.opencontainers.image.title=cni-rs-installer \
    --label org.opencontainers.image.description="Installs the cni-rs CNI plugins into /opt/cni/bin of a node" \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    "$container"
mkdir -p "$(dirname "$output")"
rm -f "$output"
# --timestamp 0: the same binaries give the same image, whenever built.
"${buildah[@]}" commit --quiet --format oci --timestamp 0 --rm "$container" \
    "oci-archive:$output:cni-rs/installer:$version" >/dev/null
trap - EXIT
log "image cni-rs/installer:$version in $output ($(du -h "$output" | cut -f1))"
echo "$output"
