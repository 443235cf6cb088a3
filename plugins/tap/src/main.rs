//! The `tap` CNI plugin binary; the work is in the library crate.

fn main() {
    // Started by the plugin itself to make a tap in an SELinux context
    // (see tap::tuntap).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(status) = tap::tuntap::helper_main(&args) {
        std::process::exit(status);
    }
    libcni::skel::plugin_main(tap::plugin::TapPlugin::from_process_env())
}
