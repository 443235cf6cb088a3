#!/usr/bin/env bash
# Installs what the conformance suite's runtime tests need on Debian 12:
# Podman with runc (crun 1.8 fails on hybrid cgroup hosts), a static busybox
# as a container root filesystem, the Debian Go toolchain and Go libcni to
# build the Go cnitool offline, dpkg-dev for `apt-get source`, and the
# reference plugins. Idempotent: installed packages are left as they are.
set -euo pipefail

pkgs=(podman runc conmon golang-github-containers-common busybox-static
      golang-go golang-github-appc-cni-dev dpkg-dev
      containernetworking-plugins iproute2 iptables nftables iputils-ping)
missing=()
for pkg in "${pkgs[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "runtime dependencies ready: $(podman --version), $(runc --version | sed -n 1p), $(go version)"
