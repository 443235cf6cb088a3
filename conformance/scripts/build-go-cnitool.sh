#!/usr/bin/env bash
# Builds the Go reference `cnitool` offline from Debian's source package
# golang-github-appc-cni, against Debian's Go libcni (golang-github-appc-cni-dev)
# and Debian's Go, in GOPATH mode (module mode needs a module proxy).
#
# The source is fetched with `apt-get source` through a private sources
# list (a deb-src line for the mirror this machine already uses): the
# machine's own apt configuration is never changed. Everything lands under
# target/go-cnitool/ (not committed); a built binary is reused.
#
# Usage: build-go-cnitool.sh [OUT_DIR]   (prints the binary's path last)
set -euo pipefail
cd "$(dirname "$0")/../.."

out=$(realpath -m "${1:-target/go-cnitool}")
bin="$out/cnitool"
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi

bash conformance/scripts/install-runtime-deps.sh >&2

work="$out/work"
rm -rf "$work"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"

# The mirror and release the machine's apt already uses for Debian main.
. /etc/os-release
codename="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(TARGET_OF)' \
             'Created-By: Packages' |
         awk -v rel="$codename" '$2 == rel && $3 == "main" && $4 == "deb" && !found { print $1; found = 1 }')
if [ -z "$mirror" ]; then
    echo "no apt source for $codename main is configured; cannot fetch golang-github-appc-cni" >&2
    exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb-src [signed-by=$keyring] $mirror $codename main" > "$work/apt/sources.list"

apt_private=(
    -o "Dir::Etc::sourcelist=$work/apt/sources.list"
    -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache=$work/apt/cache"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_private[@]}" -q update >&2
(cd "$work/src" && apt-get "${apt_private[@]}" -q source golang-github-appc-cni >&2)

srcdir=""
for dir in "$work"/src/golang-github-appc-cni-*/; do
    [ -d "$dir" ] && srcdir="${dir%/}" && break
done
if [ -z "$srcdir" ] || ! compgen -G "$srcdir/cnitool/*.go" >/dev/null; then
    echo "no cnitool sources in the golang-github-appc-cni source package" >&2
    exit 1
fi

gopath="$work/gopath"
mkdir -p "$gopath/src/cnitool"
cp "$srcdir"/cnitool/*.go "$gopath/src/cnitool/"
rm -f "$gopath"/src/cnitool/*_test.go
GO111MODULE=off GOPROXY=off GOPATH="$gopath:/usr/share/gocode" \
    GOCACHE="$work/gocache" go build -o "$bin.tmp" cnitool >&2
mv "$bin.tmp" "$bin"
rm -rf "$work"
echo "$bin"
