//! The `vrf` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(vrf::plugin::VrfPlugin)
}
