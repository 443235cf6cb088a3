//! The `portmap` binary: see the library crate.

fn main() {
    libcni::skel::plugin_main(portmap::PortmapPlugin)
}
