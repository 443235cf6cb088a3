//! The `ipvlan` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(ipvlan::plugin::IpvlanPlugin::from_process_env())
}
