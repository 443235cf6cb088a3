//! The `ptp` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(ptp::plugin::PtpPlugin::from_process_env())
}
