use etcd_cluster::*;
use std::time::Instant;
fn main() {
    for _ in 0..20 {
        let t = Instant::now();
        let c = EtcdCluster::start(3, ClusterOptions::default()).unwrap();
        if t.elapsed().as_millis() > 1800 { println!("slow {:?} {:?}", t.elapsed(), std::time::SystemTime::now()); std::process::exit(0); }
        drop(c);
    }
}
