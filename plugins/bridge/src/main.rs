//! The `bridge` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(bridge::plugin::BridgePlugin::from_process_env())
}
