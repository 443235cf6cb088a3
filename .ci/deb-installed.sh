# Sourced by .ci/install-deps and .ci/arm64-gnu-env.
#
# deb_installed PKG: whether Debian package PKG is installed. A bare name
# means the machine's own architecture (or an Architecture: all package); a
# name with :ARCH means that architecture. Why not `dpkg -s PKG`: once a
# foreign architecture is added (arm64, for the cross-built rdma-sriov), a
# Multi-Arch: same package installed for both (libibverbs-dev, libc6-dev)
# makes `dpkg -s PKG` fail as ambiguous, which read as "missing".
deb_installed() {
    local names
    case "$1" in
        *:*) names=("$1") ;;
        *) names=("$1:$(dpkg --print-architecture)" "$1:all") ;;
    esac
    # Read whole, not piped into `grep -q`: under pipefail, grep leaving
    # early would fail the pipeline with dpkg-query's SIGPIPE.
    local status
    status=$(dpkg-query -W -f='${db:Status-Abbrev}\n' "${names[@]}" 2>/dev/null || true)
    [[ $'\n'"$status" == *$'\n'ii* ]]
}
