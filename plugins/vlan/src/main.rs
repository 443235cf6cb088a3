//! The `vlan` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(vlan::plugin::VlanPlugin::from_process_env())
}
