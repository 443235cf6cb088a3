use etcd_cluster::*;
use std::time::Instant;
fn main() {
    let mut v = vec![];
    for _ in 0..10 {
        let t = Instant::now();
        let c = EtcdCluster::start(3, ClusterOptions::default()).unwrap();
        v.push(t.elapsed().as_millis());
        drop(c);
    }
    println!("{v:?}");
}
