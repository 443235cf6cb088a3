use etcd_cluster::*;
use std::time::Instant;
fn main() {
    for (n, tls) in [(1, false), (3, false), (1, true), (3, true)] {
    let mut v = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        let c = EtcdCluster::start(n, ClusterOptions { tls, auth: None }).unwrap();
        v.push(t.elapsed().as_millis());
        drop(c);
    }
    v.sort();
    println!("{n} tls={tls}: min {} median {} max {}", v[0], v[10], v[19]);
    }
}
