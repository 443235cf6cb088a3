//! The `cluster-ipam` binary: the plugin behind the CNI skeleton.

fn main() {
    libcni::skel::plugin_main(cluster_ipam::ClusterIpam)
}
