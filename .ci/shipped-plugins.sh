# Sourced by .ci/run and .ci/release: the shipped plugin set is the
# `cargo plugins` alias of .cargo/config.toml (each package builds the
# binary of its name), read from there so that the scripts and the alias
# cannot drift.
# Usage: mapfile -t plugins < <(shipped_plugins)
shipped_plugins() {
    sed -n 's/^plugins = "\(.*\)"$/\1/p' .cargo/config.toml \
        | grep -o -- '-p [A-Za-z0-9_-]*' | cut -d' ' -f2
}
