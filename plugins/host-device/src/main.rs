//! The `host-device` CNI plugin binary; the work is in the library crate.

fn main() {
    libcni::skel::plugin_main(host_device::plugin::HostDevice::from_process_env())
}
