//! Churn: 16 workers add and delete pods on one network (bridge +
//! host-local + portmap, one mapping per pod) as fast as they can. No ADD
//! or DEL may fail, no address may be held by two live pods at any moment,
//! and nothing may be left at the end.
//!
//! Pods: `RESILIENCE_CHURN_PODS` per backend, else 160 (1000 with
//! `RESILIENCE_LONG=1`); the iptables and nftables backends each get a run.

mod resilience_common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use conformance::testnet::TestNetns;
use resilience_common::*;

const WORKERS: usize = 16;

fn churn(backend: Backend, tag: &str, subnet: &str) {
    let pods = count("RESILIENCE_CHURN_PODS", 160, 1000);
    let host = TestHost::new(tag, subnet);
    // The first ADD creates the bridge and the shared chains; what exists
    // after it and its DEL is what every later check may find.
    {
        let pod = TestNetns::new("rc-w");
        let rt = host.runtime_conf("churn-warm", &pod, 19999);
        host.add(backend, &rt).unwrap();
        host.del(backend, &rt).unwrap();
    }
    let baseline = TestHost::chains(&host.firewall());

    // Address -> the live pod that holds it.
    let live: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                let guard = FailFlag(&failed);
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= pods || failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let id = format!("churn-{n}");
                    let pod = TestNetns::new("rc-p");
                    let rt = host.runtime_conf(&id, &pod, 20000 + n as u16);
                    let result = host
                        .add(backend, &rt)
                        .unwrap_or_else(|e| panic!("{backend} ADD {id}: {e}"));
                    let ips = result_ips(&result);
                    assert_eq!(ips.len(), 1, "{id}: {result:?}");
                    {
                        let mut live = live.lock().unwrap();
                        for ip in &ips {
                            if let Some(holder) = live.insert(ip.clone(), id.clone()) {
                                panic!("{backend}: {ip} given to {id} while {holder} holds it");
                            }
                        }
                        peak.fetch_max(live.len(), Ordering::SeqCst);
                    }
                    // The pod must have it, too.
                    let addrs = pod.ip(&["-4", "-o", "addr", "show", "dev", IFNAME]);
                    assert!(addrs.contains(&format!("{}/", ips[0])), "{id}: {addrs}");
                    // Pods live a while (0 to 49 ms, spread evenly), so
                    // that many hold addresses at once while others come
                    // and go.
                    std::thread::sleep(Duration::from_millis((n as u64 * 7919) % 50));
                    // Forgotten before DEL: once DEL releases it, another
                    // pod may rightly get it.
                    {
                        let mut live = live.lock().unwrap();
                        for ip in &ips {
                            live.remove(ip);
                        }
                    }
                    host.del(backend, &rt)
                        .unwrap_or_else(|e| panic!("{backend} DEL {id}: {e}"));
                }
                guard.disarm();
            });
        }
    });
    println!(
        "{backend}: {pods} pods by {WORKERS} workers in {:?}, up to {} live at once",
        started.elapsed(),
        peak.load(Ordering::SeqCst)
    );
    let left = host.leftovers(&["churn-"], &baseline);
    assert!(left.is_empty(), "{backend} churn left: {left:#?}");
}

/// Tells the other workers to stop when this one panics.
struct FailFlag<'a>(&'a AtomicBool);

impl FailFlag<'_> {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for FailFlag<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn churn_with_iptables_keeps_addresses_unique_and_leaves_nothing() {
    churn(Backend::Iptables, "rc-ipt", "10.234.0.0/24");
}

#[test]
fn churn_with_nftables_keeps_addresses_unique_and_leaves_nothing() {
    churn(Backend::Nftables, "rc-nft", "10.235.0.0/24");
}
