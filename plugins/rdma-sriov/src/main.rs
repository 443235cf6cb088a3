//! The `rdma-sriov` CNI plugin binary; see the library for what it does.

fn main() {
    libcni::skel::plugin_main(rdma_sriov::RdmaSriov::from_process_env())
}
