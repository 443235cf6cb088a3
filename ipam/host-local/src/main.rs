//! The `host-local` binary: the plugin behind the CNI skeleton.

fn main() {
    libcni::skel::plugin_main(host_local::HostLocal)
}
