#!/usr/bin/env bash
# Runs every command of README.md exactly as written, the way a new user on
# a fresh host would: all ```sh blocks, in order, as one bash script
# (errexit, pipefail, each command echoed), from the repository's root, as
# root.
#
# The machine is left as it was: the script runs in a mount namespace and a
# network namespace of its own (unshare). In the mount namespace /etc, /opt,
# /usr/local, /var/lib and /run are overlays whose writes land in a scratch
# folder, and the paths the README installs to (/etc/cni, /opt/cni,
# /var/lib/cni, /usr/local/bin/cnitool, /run/netns) are removed there
# first, so the commands meet a fresh host: no /opt/cni/bin, no conflist, no
# cnitool. /sys is remounted for the new network namespace, so plugins see
# its links, not the host's. The build output (target/) is the checkout's
# own, as for a user building in place.
#
# A README block that must not run has no business in a manual that says
# "run this"; blocks of other kinds (```text, ```json) are not run, and a
# ```bash, ```shell or ```console block is refused, so no command escapes
# the check by its fence.
#
# Usage: .ci/readme-commands.sh [README]   (default README.md)
set -euo pipefail
cd "$(dirname "$0")/.."

readme=${1:-README.md}
if [ "$(id -u)" -ne 0 ]; then
    echo "readme-commands: needs root (mount and network namespaces)" >&2
    exit 1
fi

bad=$(grep -nE '^[[:space:]]*```[[:space:]]*(bash|shell|console|zsh)[[:space:]]*$' "$readme" || true)
if [ -n "$bad" ]; then
    echo "readme-commands: $readme has shell blocks not fenced as sh (run them or make them text):" >&2
    echo "$bad" >&2
    exit 1
fi

scratch=$(mktemp -d /tmp/readme-commands.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# The blocks: lines between a ```sh fence and the next ``` fence.
script="$scratch/readme.sh"
{
    echo 'set -euxo pipefail'
    awk '
        /^```sh[[:space:]]*$/ { inside = 1; printf "\n# --- README.md line %d\n", NR; next }
        /^```/ && inside      { inside = 0; next }
        inside                { print }
    ' "$readme"
} > "$script"
blocks=$(grep -c '^# --- README.md line' "$script" || true)
if [ "$blocks" -eq 0 ]; then
    echo "readme-commands: no \`\`\`sh blocks in $readme" >&2
    exit 1
fi
echo "readme-commands: $blocks blocks from $readme, run in a scratch root ($scratch)"

# Inside the namespaces: overlays, a fresh host's view, then the README.
inner=$(cat <<'INNER'
set -euo pipefail
scratch=$1
script=$2
for dir in /etc /opt /usr/local /var/lib /run; do
    name=${dir//\//_}
    mkdir -p "$scratch/upper$name" "$scratch/work$name"
    mount -t overlay overlay \
        -o "lowerdir=$dir,upperdir=$scratch/upper$name,workdir=$scratch/work$name" "$dir"
done
# A fresh host: none of what the README installs or creates exists.
rm -rf /etc/cni /opt/cni /var/lib/cni /usr/local/bin/cnitool /usr/local/bin/cluster-ipam-admin \
    /run/netns /run/cni
mount -t sysfs sysfs /sys
ip link set lo up
export PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
bash "$script"
INNER
)
start=$(date +%s)
unshare --mount --net --propagation private bash -c "$inner" readme-commands "$scratch" "$script"
echo "readme-commands: every README command ran ($(($(date +%s) - start)) s)"
