//! The `macvlan` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(macvlan::plugin::MacvlanPlugin::from_process_env())
}
