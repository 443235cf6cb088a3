use etcd_cluster::*;
use std::time::Instant;
fn main() {
    for (n, tls) in [(1, false), (3, false), (3, false), (3, false), (3, false), (3, false), (1, true), (3, true)] {
        let t = Instant::now();
        let c = EtcdCluster::start(n, ClusterOptions { tls, auth: None }).unwrap();
        let e = t.elapsed();
        let t = Instant::now();
        drop(c);
        println!("{n} members tls={tls}: start {e:?}, drop {:?}", t.elapsed());
    }
}
