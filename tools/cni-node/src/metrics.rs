//! The agent's metrics in the Prometheus text format (OpenMetrics, as
//! prometheus-client encodes it), served by hyper on 127.0.0.1:
//! `/metrics`, and `/healthz` for the DaemonSet's liveness probe.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::error::Error;
use crate::leases::RangeUse;
use crate::pass::{Outcome, PassReport};
use crate::status::NetStatus;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every metric of the agent; cheap handles, shared with the server.
pub struct Metrics {
    registry: Registry,
    passes: Family<Labels, Counter>,
    released: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    network_ready: Family<Labels, Gauge>,
    network_status_code: Family<Labels, Gauge>,
    last_pass: Gauge<f64, AtomicU64>,
    last_duration: Gauge<f64, AtomicU64>,
    leases: Family<Labels, Gauge>,
    heartbeat_alive: Family<Labels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cni_node");
        let m = Metrics {
            registry: Registry::default(),
            passes: Family::default(),
            released: Family::default(),
            errors: Family::default(),
            network_ready: Family::default(),
            network_status_code: Family::default(),
            last_pass: Gauge::default(),
            last_duration: Gauge::default(),
            leases: Family::default(),
            heartbeat_alive: Family::default(),
        };
        registry.register(
            "gc_passes",
            "GC passes, by outcome (ran, runtime_unreachable, failed)",
            m.passes.clone(),
        );
        registry.register(
            "released_attachments",
            "Attachments released by GC, by network and plugin of its chain",
            m.released.clone(),
        );
        registry.register(
            "errors",
            "Failures, by kind (runtime, scan, gc, del, heartbeat)",
            m.errors.clone(),
        );
        registry.register(
            "network_ready",
            "1 when the network's plugins answer STATUS with success",
            m.network_ready.clone(),
        );
        registry.register(
            "network_status_code",
            "The CNI error code of the network's STATUS (0 when ready, -1 when no plugin answered)",
            m.network_status_code.clone(),
        );
        registry.register(
            "last_pass_timestamp_seconds",
            "When the last GC pass started (Unix time)",
            m.last_pass.clone(),
        );
        registry.register(
            "last_pass_duration_seconds",
            "How long the last GC pass took",
            m.last_duration.clone(),
        );
        registry.register(
            "host_local_addresses",
            "host-local addresses per network and range, by state (used, free)",
            m.leases.clone(),
        );
        registry.register(
            "cluster_ipam_node_alive",
            "1 while the node's cluster-ipam heartbeat reaches etcd, 0 when its last beat failed, by network and node",
            m.heartbeat_alive.clone(),
        );
        Metrics { registry, ..m }
    }

    /// A pass that ran (or found the runtime unreachable).
    pub fn record_pass(&self, report: &PassReport) {
        let outcome = if report.runtime_error.is_some() {
            self.errors
                .get_or_create(&labels(&[("kind", "runtime")]))
                .inc();
            "runtime_unreachable"
        } else {
            "ran"
        };
        self.passes
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
        for released in report.released() {
            for plugin in &released.plugins {
                self.released
                    .get_or_create(&labels(&[
                        ("network", &released.network),
                        ("plugin", plugin),
                    ]))
                    .inc();
            }
        }
        for outcome in report.networks.values() {
            match outcome {
                Outcome::GcFailed(_) => {
                    self.errors.get_or_create(&labels(&[("kind", "gc")])).inc();
                }
                Outcome::Collected { errors, .. } => {
                    self.errors
                        .get_or_create(&labels(&[("kind", "del")]))
                        .inc_by(errors.len() as u64);
                }
                Outcome::Refused(_) => {}
            }
        }
        let started = report
            .started
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.last_pass.set(started);
        self.last_duration.set(report.duration.as_secs_f64());
    }

    /// A pass that could not look at the node at all.
    pub fn record_failed_pass(&self) {
        self.passes
            .get_or_create(&labels(&[("outcome", "failed")]))
            .inc();
        self.errors
            .get_or_create(&labels(&[("kind", "scan")]))
            .inc();
    }

    /// The networks' STATUS now (networks gone from the folder drop out).
    pub fn record_status(&self, statuses: &BTreeMap<String, NetStatus>) {
        self.network_ready.clear();
        self.network_status_code.clear();
        for (name, status) in statuses {
            let l = labels(&[("network", name)]);
            let (ready, code) = match status {
                NetStatus::Ready => (1, 0),
                NetStatus::NotReady { code, .. } => (0, code.map_or(-1, i64::from)),
            };
            self.network_ready.get_or_create(&l).set(ready);
            self.network_status_code.get_or_create(&l).set(code);
        }
    }

    /// The outcome of a heartbeat's last beat.
    pub fn record_heartbeat(&self, network: &str, node: &str, alive: bool) {
        self.heartbeat_alive
            .get_or_create(&labels(&[("network", network), ("node", node)]))
            .set(i64::from(alive));
    }

    /// A heartbeat stopped (network gone, or the agent exiting).
    pub fn forget_heartbeat(&self, network: &str, node: &str) {
        self.heartbeat_alive
            .remove(&labels(&[("network", network), ("node", node)]));
    }

    pub fn record_heartbeat_error(&self) {
        self.errors
            .get_or_create(&labels(&[("kind", "heartbeat")]))
            .inc();
    }

    pub fn record_leases(&self, uses: &[RangeUse]) {
        self.leases.clear();
        for u in uses {
            for (state, n) in [("used", u.used), ("free", u.free)] {
                self.leases
                    .get_or_create(&labels(&[
                        ("network", &u.network),
                        ("range", &u.range),
                        ("state", state),
                    ]))
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

/// The content type of prometheus-client's text encoding.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A metrics server running on its own thread.
pub struct Server {
    pub addr: SocketAddr,
}

/// Binds `addr` now (so a taken port is an error at start), then serves
/// on a thread of its own with a current-thread runtime.
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<Server, Error> {
    let bind_err = |source| Error::Metrics {
        addr: addr.to_string(),
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let runtime = crate::cri::blocking_runtime().map_err(bind_err)?;
    std::thread::Builder::new()
        .name("metrics".to_string())
        .spawn(move || runtime.block_on(accept_loop(listener, metrics)))
        .map_err(bind_err)?;
    Ok(Server { addr: local })
}

async fn accept_loop(listener: std::net::TcpListener, metrics: Arc<Metrics>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("metrics server: {e}");
            return;
        }
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                log::warn!("metrics server: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(respond(&req, &metrics)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                log::debug!("metrics server: connection: {e}");
            }
        });
    }
}

fn respond(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&hyper::Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, metrics.encode()),
        (&hyper::Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        (&hyper::Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /metrics or /healthz\n".to_string(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::Released;
    use crate::plan::Refusal;
    use std::io::{Read, Write};
    use std::time::{Duration, UNIX_EPOCH};

    /// One HTTP/1.1 request on a fresh connection; the whole response.
    fn get(addr: SocketAddr, method: &str, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    fn report() -> PassReport {
        let released = |cid: &str| Released {
            network: "net1".into(),
            container_id: cid.into(),
            ifname: "eth0".into(),
            plugins: vec!["bridge".into(), "portmap".into()],
        };
        PassReport {
            runtime_error: None,
            networks: BTreeMap::from([
                (
                    "net1".to_string(),
                    Outcome::Collected {
                        released: vec![released("a"), released("b")],
                        kept: 1,
                        errors: vec!["DEL failed".into()],
                    },
                ),
                ("net2".to_string(), Outcome::GcFailed("boom".into())),
                ("net3".to_string(), Outcome::Refused(Refusal::NoConfig)),
            ]),
            configs: BTreeMap::new(),
            started: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            duration: Duration::from_millis(250),
        }
    }

    #[test]
    fn the_endpoint_serves_what_passes_recorded() {
        let metrics = Arc::new(Metrics::new());
        let server = serve(SocketAddr::from(([127, 0, 0, 1], 0)), metrics.clone()).unwrap();
        metrics.record_pass(&report());
        metrics.record_status(&BTreeMap::from([
            ("net1".to_string(), NetStatus::Ready),
            (
                "net2".to_string(),
                NetStatus::NotReady {
                    code: Some(50),
                    message: "full".into(),
                },
            ),
        ]));
        metrics.record_leases(&[RangeUse {
            network: "net1".into(),
            range: "10.1.0.0/24".into(),
            used: 3,
            free: 250,
        }]);

        let response = get(server.addr, "GET", "/metrics");
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains(&format!("content-type: {CONTENT_TYPE}\r\n")));
        for line in [
            "cni_node_gc_passes_total{outcome=\"ran\"} 1",
            "cni_node_released_attachments_total{network=\"net1\",plugin=\"bridge\"} 2",
            "cni_node_released_attachments_total{network=\"net1\",plugin=\"portmap\"} 2",
            "cni_node_errors_total{kind=\"gc\"} 1",
            "cni_node_errors_total{kind=\"del\"} 1",
            "cni_node_network_ready{network=\"net1\"} 1",
            "cni_node_network_ready{network=\"net2\"} 0",
            "cni_node_network_status_code{network=\"net2\"} 50",
            "cni_node_last_pass_timestamp_seconds 1800000000.0",
            "cni_node_last_pass_duration_seconds 0.25",
            "cni_node_host_local_addresses{network=\"net1\",range=\"10.1.0.0/24\",state=\"used\"} 3",
            "cni_node_host_local_addresses{network=\"net1\",range=\"10.1.0.0/24\",state=\"free\"} 250",
        ] {
            assert!(
                response.lines().any(|l| l == line),
                "no line {line:?} in:\n{response}"
            );
        }
        assert!(response.trim_end().ends_with("# EOF"), "{response}");

        // A network gone from STATUS drops out of the gauges.
        metrics.record_status(&BTreeMap::from([("net1".to_string(), NetStatus::Ready)]));
        let response = get(server.addr, "GET", "/metrics");
        assert!(!response.contains("network=\"net2\"} 0"), "{response}");

        let health = get(server.addr, "GET", "/healthz");
        assert!(health.starts_with("HTTP/1.1 200 OK\r\n") && health.ends_with("\r\n\r\nok\n"));
        assert!(get(server.addr, "GET", "/").starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(
            get(server.addr, "POST", "/metrics").starts_with("HTTP/1.1 405 Method Not Allowed\r\n")
        );
    }

    #[test]
    fn heartbeats_show_alive_failing_and_drop_out_when_stopped() {
        let metrics = Metrics::new();
        metrics.record_heartbeat("rail0", "node-a", true);
        metrics.record_heartbeat("rail1", "node-a", true);
        metrics.record_heartbeat("rail1", "node-a", false);
        metrics.record_heartbeat_error();
        let text = metrics.encode();
        for line in [
            "cni_node_cluster_ipam_node_alive{network=\"rail0\",node=\"node-a\"} 1",
            "cni_node_cluster_ipam_node_alive{network=\"rail1\",node=\"node-a\"} 0",
            "cni_node_errors_total{kind=\"heartbeat\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in:\n{text}"
            );
        }
        metrics.forget_heartbeat("rail0", "node-a");
        assert!(!metrics.encode().contains("network=\"rail0\""));
    }

    #[test]
    fn a_taken_port_is_an_error_naming_it() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let Err(err) = serve(addr, Arc::new(Metrics::new())) else {
            panic!("bound a taken port");
        };
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("cannot serve metrics on {addr}: ")),
            "{text}"
        );
    }
}
