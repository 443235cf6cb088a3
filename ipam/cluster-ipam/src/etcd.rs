//! The pool's etcd side: one blocking facade over the etcd v3 client, used
//! only when a call must talk to etcd (a block claim, a requested address
//! outside the node's blocks, GC, STATUS without local room).
//!
//! Why etcd-client on a current-thread tokio runtime: it is the kept v3
//! client of the Rust ecosystem (gRPC over tonic, rustls for TLS, so the
//! static musl build links no OpenSSL). Its cost is paid only by calls that
//! reach etcd: the runtime is built lazily, and an ADD inside the node's
//! blocks never constructs it. Measured (docs/cluster-ipam.md): the
//! shipped binary is four times host-local's, its VERSION as fast, and an
//! ADD inside a block within 1.2x host-local's, the difference being the
//! start-up relocations the client's code brings.
//!
//! Every request has the call's one deadline (`etcd.timeoutMs` from the
//! first request). Endpoints are asked in an order that starts at one that
//! depends on the node name; a refused connection, a member without a
//! leader (`require_leader`), or a request that fails in transport moves
//! to the next endpoint at once, and one that has not answered within its
//! share of the deadline is joined by the next (`Etcd::call`). Every
//! operation here is safe to repeat: a
//! transaction whose answer was lost is found out by its compare failing,
//! and the caller then reads what is there.

use std::future::Future;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, KvClient,
    TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use ipnetwork::IpNetwork;
use libcni::config_file::{self, PEM_CAP};
use libcni::confine::{ConfineError, Place, Places};
use serde::{Deserialize, Serialize};

use crate::config::{EtcdConfig, Grid};
use crate::keys::PoolKeys;
use crate::tls_probe::{self, TlsPem};

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint answered within the deadline; `outcomes` says what
    /// each one did.
    #[error("etcd unreachable within {timeout:?} ({outcomes})")]
    Unreachable { timeout: Duration, outcomes: String },
    /// etcd answered and refused: credentials, permissions, a request it
    /// finds invalid.
    #[error("etcd at {endpoint} refused the request: {message}")]
    Refused { endpoint: String, message: String },
    /// The TLS handshake failed: a wrong CA, a missing or untrusted
    /// client certificate. Waiting would not help.
    #[error("TLS with etcd at {endpoint} failed (check etcd.caFile, etcd.certFile, etcd.keyFile): {message}")]
    Tls { endpoint: String, message: String },
    #[error("failed to read etcd.{key} {path}: {source}")]
    File {
        key: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// The configuration names a credential file that can never be read as
    /// one: a link or something other than a regular file, or too large.
    #[error("etcd.{key} {path} cannot be used: {why}")]
    UnusableFile {
        key: &'static str,
        path: String,
        why: String,
    },
    #[error("failed to start the etcd client runtime: {0}")]
    Runtime(std::io::Error),
    #[error("etcd holds an unreadable value under {key}: {detail}")]
    BadValue { key: String, detail: String },
}

/// The value of a block key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockValue {
    pub node: String,
}

/// The value of an address key: who asked for the address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpValue {
    pub node: String,
    pub container_id: String,
    pub ifname: String,
}

/// The value of a node's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    pub leases: u64,
    pub blocks: u64,
    /// Unix seconds.
    pub updated: u64,
}

/// A claimed block as etcd has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedBlock {
    pub cidr: IpNetwork,
    pub node: String,
    pub create_revision: i64,
}

/// A reserved address as etcd has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedIp {
    pub ip: IpAddr,
    pub owner: IpValue,
}

/// One network's pool at one revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub revision: i64,
    /// The etcd cluster that answered.
    pub cluster_id: u64,
    /// The `pool` key's value, when written.
    pub grid: Option<Vec<u8>>,
    pub blocks: Vec<ClaimedBlock>,
    pub ips: Vec<ReservedIp>,
}

/// What a request for an address outside the node's blocks came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpReservation {
    /// Reserved now, or found already reserved by this very attachment.
    Reserved,
    /// Inside a block of a node.
    InBlock { block: IpNetwork, node: String },
    /// Reserved by another attachment.
    Taken(IpValue),
    /// The pool's grid in etcd is not this configuration's.
    GridMismatch(Vec<u8>),
}

/// What a block claim came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Ours, created at this revision.
    Claimed(i64),
    /// Something changed since the snapshot: read again.
    Lost,
}

/// A connection to one network's pool. Blocking; owns its runtime.
pub struct Etcd {
    runtime: tokio::runtime::Runtime,
    config: EtcdConfig,
    options: ConnectOptions,
    /// The TLS files, for asking a member why it closed a connection.
    tls: Option<TlsPem>,
    /// Endpoint indexes in the order this node tries them.
    order: Vec<usize>,
    /// Position in `order` of the endpoint in use.
    at: usize,
    client: Option<Client>,
    deadline: Instant,
    /// The etcd cluster's ID, from the first answer that carried it.
    cluster_id: Option<u64>,
}

/// A credential file's bytes, bounded (`cap`) and regular files only,
/// opened inside the credential folders without following links: the
/// path is a configuration value, and the bytes go to the endpoint the
/// configuration names.
fn read_file(key: &'static str, path: &std::path::Path, cap: u64) -> Result<Vec<u8>, EtcdError> {
    let read = Places::node()
        .and_then(|places| places.confine(key, Place::Credentials, path))
        .and_then(|confined| confined.read_bounded(cap))
        .map_err(|e| match e {
            ConfineError::Io { source, .. } => source,
            // The configuration was checked against the same places.
            other => std::io::Error::other(other),
        });
    read.map_err(|source| {
        let path = path.display().to_string();
        // What the file is, as opposed to whether it could be read now:
        // no retry makes a link, a FIFO or a 1 GiB file a credential, so
        // these are the configuration's fault (code 7), not I/O (5).
        if source.raw_os_error() == Some(nix::libc::ELOOP) {
            EtcdError::UnusableFile {
                key,
                path,
                why: "it is reached through a symbolic link, which is not followed inside the credential folders".into(),
            }
        } else if source.kind() == std::io::ErrorKind::InvalidInput {
            EtcdError::UnusableFile {
                key,
                path,
                why: source.to_string(),
            }
        } else {
            EtcdError::File { key, path, source }
        }
    })
}

fn connect_options(config: &EtcdConfig) -> Result<(ConnectOptions, Option<TlsPem>), EtcdError> {
    let mut options = ConnectOptions::new()
        .with_require_leader(true)
        .with_connect_timeout(config.timeout)
        .with_timeout(config.timeout);
    if let (Some(user), Some(path)) = (&config.username, &config.password_file) {
        let password = read_file("passwordFile", path, config_file::PASSWORD_CAP)?;
        let password = String::from_utf8_lossy(&password);
        options = options.with_user(user.clone(), password.trim_end_matches(['\r', '\n']));
    }
    if !config.uses_tls() {
        return Ok((options, None));
    }
    let mut tls = TlsOptions::new();
    let mut pem = TlsPem::default();
    if let Some(ca) = &config.ca_file {
        let ca = read_file("caFile", ca, PEM_CAP)?;
        tls = tls.ca_certificate(Certificate::from_pem(&ca));
        pem.ca = Some(ca);
    }
    if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
        let (cert, key) = (
            read_file("certFile", cert, PEM_CAP)?,
            read_file("keyFile", key, PEM_CAP)?,
        );
        tls = tls.identity(Identity::from_pem(&cert, &key));
        pem.identity = Some((cert, key));
    }
    Ok((options.with_tls(tls), Some(pem)))
}

/// The whole cause chain of an error: tonic's transport errors say what
/// failed (refused, TLS handshake) only in their sources.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Whether another endpoint (or the same one, later) may do better.
fn is_transient(error: &etcd_client::Error) -> bool {
    use tonic::Code;
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Aborted
                | Code::Internal
                | Code::ResourceExhausted
                | Code::Cancelled
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// The shortest share of the deadline an endpoint has to itself before
/// the next one is asked too.
const MIN_SHARE: Duration = Duration::from_millis(50);
/// The pause before asking again once every endpoint has failed, and the
/// shortest time between asks once every endpoint has been asked.
const ROUND_PAUSE: Duration = Duration::from_millis(100);
/// The longest a member is given to say why it closed a TLS connection.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// One endpoint during a call.
#[derive(Debug, Clone, Default)]
struct Asked {
    /// Requests sent and not answered yet.
    in_flight: usize,
    /// When it was last asked or last failed; `None` before the first ask.
    last: Option<Instant>,
    /// Its last failure.
    failure: Option<String>,
    /// Whether it was asked why it closed a TLS connection.
    probed: bool,
}

impl Asked {
    fn outcome(&self) -> String {
        match (self.last, self.in_flight, &self.failure) {
            (None, _, _) => "not asked in time".to_string(),
            (Some(_), 0, Some(failure)) => failure.clone(),
            (Some(_), _, Some(failure)) => format!("no answer in time (before: {failure})"),
            (Some(_), _, None) => "no answer in time".to_string(),
        }
    }
}

/// The endpoint to ask next: the first not yet asked in this node's order
/// from `first`, else the one asked or failed longest ago.
fn next_to_ask(asked: &[Asked], first: usize) -> Option<usize> {
    let n = asked.len();
    let in_order = (0..n).map(|k| (first + k) % n);
    if let Some(pos) = in_order.clone().find(|&pos| asked[pos].last.is_none()) {
        return Some(pos);
    }
    in_order
        .filter_map(|pos| asked[pos].last.map(|at| (at, pos)))
        .min()
        .map(|(_, pos)| pos)
}

fn spread(node: &str, n: usize) -> usize {
    let sum: usize = node.bytes().map(usize::from).sum();
    if n == 0 {
        0
    } else {
        sum % n
    }
}

impl Etcd {
    /// Prepares a connection; nothing is sent until the first request. The
    /// deadline of every request starts now.
    pub fn new(config: &EtcdConfig, node: &str) -> Result<Etcd, EtcdError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(EtcdError::Runtime)?;
        let (options, tls) = connect_options(config)?;
        let n = config.endpoints.len();
        let first = spread(node, n);
        Ok(Etcd {
            runtime,
            config: config.clone(),
            options,
            tls,
            order: (0..n).map(|i| (first + i) % n).collect(),
            at: 0,
            client: None,
            deadline: Instant::now() + config.timeout,
            cluster_id: None,
        })
    }

    /// Runs `op` on one endpoint after another until one answers or the
    /// deadline passes, without giving up on the ones still asked.
    ///
    /// An endpoint that has not answered within its share of the deadline
    /// stays asked while the next one is asked too, and the first answer
    /// wins: a partitioned member (no answer ever) then costs one share,
    /// and a live member waiting out a leader election still answers when
    /// the new leader is in, instead of being cut off at its share. Once
    /// every endpoint has been asked, the one asked longest ago is asked
    /// again every half share: a follower that forwarded a write to a
    /// leader that died has lost it and answers only at etcd's own request
    /// timeout, far past ours, while a fresh request after the election
    /// goes through. Asking twice is safe for the reasons in the module
    /// docs: a copy whose answer is not taken is a request whose answer
    /// was lost.
    fn call<T, F, Fut>(&mut self, op: F) -> Result<T, EtcdError>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_client(|client| op(client.kv_client()))
    }

    /// As [`Etcd::call`], with the whole client (leases).
    fn call_client<T, F, Fut>(&mut self, op: F) -> Result<T, EtcdError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let n = self.order.len();
        let count = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let start = Instant::now();
        // Every endpoint is asked at least once, even past the deadline's
        // edge (a call late in a plugin run may find little time left).
        let deadline = self.deadline.max(start + MIN_SHARE * count);
        let share = ((deadline - start) / count).max(MIN_SHARE);
        let reask = (share / 2).max(ROUND_PAUSE);
        let first = self.at;
        let cached = self.client.take();
        let (options, endpoints, order) = (&self.options, &self.config.endpoints, &self.order);
        let tls = self.tls.as_ref();
        let url = |pos: usize| {
            order
                .get(pos)
                .and_then(|&i| endpoints.get(i))
                .map_or("", String::as_str)
        };
        let op = &op;
        let attempt = |pos: usize, client: Option<Client>| async move {
            let result = async {
                let client = match client {
                    Some(client) => client,
                    None => Client::connect([url(pos)], Some(options.clone())).await?,
                };
                let value = op(client.clone()).await?;
                Ok::<_, etcd_client::Error>((value, client))
            }
            .await;
            (pos, result)
        };

        let settled = self.runtime.block_on(async {
            let mut asked = vec![Asked::default(); n];
            let mut in_flight = FuturesUnordered::new();
            let mut cached = cached;
            let mut next_ask = Instant::now();
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(asked);
                }
                if now >= next_ask {
                    let first_round = asked.iter().any(|a| a.last.is_none());
                    if let Some(pos) = next_to_ask(&asked, first) {
                        asked[pos].in_flight += 1;
                        asked[pos].last = Some(now);
                        let client = if pos == first { cached.take() } else { None };
                        in_flight.push(attempt(pos, client));
                    }
                    next_ask = now + if first_round { share } else { reask };
                }
                let wake = tokio::time::Instant::from_std(next_ask.min(deadline));
                let answer = if in_flight.is_empty() {
                    tokio::time::sleep_until(wake).await;
                    None
                } else {
                    tokio::time::timeout_at(wake, in_flight.next())
                        .await
                        .ok()
                        .flatten()
                };
                let Some((pos, result)) = answer else {
                    continue;
                };
                let error = match result {
                    Ok((value, client)) => return Ok(Ok((pos, value, client))),
                    Err(error) => error,
                };
                let endpoint = url(pos).to_string();
                let text = chain(&error);
                if tls_probe::is_tls_failure(&text) {
                    return Ok(Err(EtcdError::Tls {
                        endpoint,
                        message: text,
                    }));
                }
                if let Some(pem) = tls.filter(|_| !asked[pos].probed) {
                    if tls_probe::closed_under_us(&text) {
                        // Once per endpoint and call; the other requests
                        // wait meanwhile, which only a failing call pays.
                        asked[pos].probed = true;
                        let left = deadline.saturating_duration_since(Instant::now());
                        let wait = left.clamp(MIN_SHARE, PROBE_WAIT);
                        if let Some(refusal) = tls_probe::refusal(&endpoint, pem, wait).await {
                            return Ok(Err(EtcdError::Tls {
                                endpoint,
                                message: format!("{text}; a new handshake to see why: {refusal}"),
                            }));
                        }
                    }
                }
                if !is_transient(&error) {
                    return Ok(Err(EtcdError::Refused {
                        endpoint,
                        message: text,
                    }));
                }
                log::debug!("etcd at {endpoint} failed, asking another endpoint: {text}");
                let now = Instant::now();
                asked[pos].in_flight = asked[pos].in_flight.saturating_sub(1);
                asked[pos].last = Some(now);
                asked[pos].failure = Some(text);
                if asked.iter().any(|a| a.last.is_none()) {
                    next_ask = now;
                } else if in_flight.is_empty() {
                    // Every endpoint failed: a short pause, so a cluster in
                    // an election is not hammered.
                    next_ask = now + ROUND_PAUSE;
                }
            }
        });
        match settled {
            Ok(Ok((pos, value, client))) => {
                self.at = pos;
                self.client = Some(client);
                Ok(value)
            }
            Ok(Err(refusal)) => Err(refusal),
            Err(asked) => {
                let outcomes = asked
                    .iter()
                    .enumerate()
                    .map(|(pos, state)| format!("{}: {}", url(pos), state.outcome()))
                    .collect::<Vec<_>>()
                    .join("; ");
                Err(EtcdError::Unreachable {
                    timeout: self.config.timeout,
                    outcomes,
                })
            }
        }
    }

    /// Starts the deadline of the requests that follow again (`etcd.timeoutMs`
    /// from now): for a long-lived user such as the node heartbeat.
    pub fn renew_deadline(&mut self) {
        self.deadline = Instant::now() + self.config.timeout;
    }

    /// The ID of the etcd cluster the endpoints reach: known from the
    /// first answer, else asked with a count-only read of `key`.
    pub fn cluster_id(&mut self, key: &str) -> Result<u64, EtcdError> {
        if let Some(id) = self.cluster_id {
            return Ok(id);
        }
        let key = key.to_string();
        let response = self.call(|mut kv| {
            let key = key.clone();
            async move { kv.get(key, Some(GetOptions::new().with_count_only())).await }
        })?;
        let id = response.header().map_or(0, |h| h.cluster_id());
        self.cluster_id = Some(id);
        Ok(id)
    }

    /// The pool, its blocks and its reserved addresses at one revision.
    pub fn snapshot(&mut self, keys: &PoolKeys) -> Result<Snapshot, EtcdError> {
        let txn = Txn::new().and_then([
            TxnOp::get(keys.pool(), None),
            TxnOp::get(keys.blocks(), Some(GetOptions::new().with_prefix())),
            TxnOp::get(keys.ips(), Some(GetOptions::new().with_prefix())),
        ]);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        let mut snapshot = Snapshot {
            revision: response.header().map_or(0, |h| h.revision()),
            cluster_id: response.header().map_or(0, |h| h.cluster_id()),
            ..Snapshot::default()
        };
        self.cluster_id = Some(snapshot.cluster_id);
        let gets: Vec<_> = response
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .collect();
        if let Some(pool) = gets.first().and_then(|g| g.kvs().first()) {
            snapshot.grid = Some(pool.value().to_vec());
        }
        for kv in gets.get(1).map(|g| g.kvs()).unwrap_or_default() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let cidr = keys
                .parse_block(kv.key())
                .ok_or_else(|| EtcdError::BadValue {
                    key: key.clone(),
                    detail: "not a block key".into(),
                })?;
            let value: BlockValue =
                serde_json::from_slice(kv.value()).map_err(|e| EtcdError::BadValue {
                    key: key.clone(),
                    detail: e.to_string(),
                })?;
            snapshot.blocks.push(ClaimedBlock {
                cidr,
                node: value.node,
                create_revision: kv.create_revision(),
            });
        }
        for kv in gets.get(2).map(|g| g.kvs()).unwrap_or_default() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let ip = keys.parse_ip(kv.key()).ok_or_else(|| EtcdError::BadValue {
                key: key.clone(),
                detail: "not an address key".into(),
            })?;
            let owner: IpValue =
                serde_json::from_slice(kv.value()).map_err(|e| EtcdError::BadValue {
                    key,
                    detail: e.to_string(),
                })?;
            snapshot.ips.push(ReservedIp { ip, owner });
        }
        Ok(snapshot)
    }

    /// The compare that holds the pool to `grid`, and the put that writes
    /// it when nobody has.
    fn grid_guard(keys: &PoolKeys, grid: Grid, written: bool) -> (Compare, Option<TxnOp>) {
        if written {
            (
                Compare::value(keys.pool(), CompareOp::Equal, grid.to_value()),
                None,
            )
        } else {
            (
                Compare::create_revision(keys.pool(), CompareOp::Equal, 0),
                Some(TxnOp::put(keys.pool(), grid.to_value(), None)),
            )
        }
    }

    /// Claims `block` for `node` if, since `snapshot`, nobody has claimed
    /// it, the grid is still `grid` and no address of the block has been
    /// reserved.
    pub fn claim(
        &mut self,
        keys: &PoolKeys,
        grid: Grid,
        snapshot: &Snapshot,
        block: IpNetwork,
        node: &str,
    ) -> Result<Claim, EtcdError> {
        let (grid_compare, grid_put) = Self::grid_guard(keys, grid, snapshot.grid.is_some());
        let (ips_start, ips_end) = keys.ip_range(block);
        let value = block_value(node);
        let mut puts = vec![TxnOp::put(keys.block(block), value, None)];
        puts.extend(grid_put);
        let txn = Txn::new()
            .when([
                grid_compare,
                Compare::create_revision(keys.block(block), CompareOp::Equal, 0),
                Compare::mod_revision(ips_start, CompareOp::Less, snapshot.revision + 1)
                    .with_range(ips_end),
            ])
            .and_then(puts);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        Ok(if response.succeeded() {
            Claim::Claimed(response.header().map_or(0, |h| h.revision()))
        } else {
            Claim::Lost
        })
    }

    /// Reserves `ip` (of block `block` in the grid) for `owner`, unless a
    /// node holds that block or someone else holds the address.
    pub fn reserve_ip(
        &mut self,
        keys: &PoolKeys,
        grid: Grid,
        grid_written: bool,
        ip: IpAddr,
        block: IpNetwork,
        owner: &IpValue,
    ) -> Result<IpReservation, EtcdError> {
        let (grid_compare, grid_put) = Self::grid_guard(keys, grid, grid_written);
        let value = ip_value(owner);
        let mut puts = vec![TxnOp::put(keys.ip(ip), value.clone(), None)];
        puts.extend(grid_put);
        let txn = Txn::new()
            .when([
                grid_compare,
                Compare::create_revision(keys.block(block), CompareOp::Equal, 0),
                Compare::create_revision(keys.ip(ip), CompareOp::Equal, 0),
            ])
            .and_then(puts)
            .or_else([
                TxnOp::get(keys.pool(), None),
                TxnOp::get(keys.block(block), None),
                TxnOp::get(keys.ip(ip), None),
            ]);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        if response.succeeded() {
            return Ok(IpReservation::Reserved);
        }
        let gets: Vec<_> = response
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                _ => None,
            })
            .collect();
        for kv in gets {
            let key = kv.key();
            if key == keys.pool().as_bytes() {
                if kv.value() != grid.to_value().as_bytes() {
                    return Ok(IpReservation::GridMismatch(kv.value().to_vec()));
                }
            } else if key == keys.block(block).as_bytes() {
                let holder: BlockValue =
                    serde_json::from_slice(kv.value()).map_err(|e| EtcdError::BadValue {
                        key: keys.block(block),
                        detail: e.to_string(),
                    })?;
                return Ok(IpReservation::InBlock {
                    block,
                    node: holder.node,
                });
            } else if kv.value() == value.as_bytes() {
                // Our own earlier request, whose answer was lost.
                return Ok(IpReservation::Reserved);
            } else {
                let holder: IpValue =
                    serde_json::from_slice(kv.value()).map_err(|e| EtcdError::BadValue {
                        key: keys.ip(ip),
                        detail: e.to_string(),
                    })?;
                return Ok(IpReservation::Taken(holder));
            }
        }
        // The pool key was written between our read and the request: the
        // caller reads it again.
        Ok(IpReservation::GridMismatch(Vec::new()))
    }

    /// Deletes the reservation of `ip` if `owner` still holds it. True
    /// when the key is gone afterwards (deleted now or never there).
    pub fn release_ip(
        &mut self,
        keys: &PoolKeys,
        ip: IpAddr,
        owner: &IpValue,
    ) -> Result<bool, EtcdError> {
        let txn = Txn::new()
            .when([Compare::value(
                keys.ip(ip),
                CompareOp::Equal,
                ip_value(owner),
            )])
            .and_then([TxnOp::delete(keys.ip(ip), None)])
            .or_else([TxnOp::get(keys.ip(ip), None)]);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        if response.succeeded() {
            return Ok(true);
        }
        let held_by_other = response.op_responses().into_iter().any(|r| match r {
            TxnOpResponse::Get(get) => !get.kvs().is_empty(),
            _ => false,
        });
        Ok(!held_by_other)
    }

    /// Gives `block` back if it is still the claim created at `revision`.
    pub fn release_block(
        &mut self,
        keys: &PoolKeys,
        block: IpNetwork,
        revision: i64,
    ) -> Result<bool, EtcdError> {
        let txn = Txn::new()
            .when([Compare::create_revision(
                keys.block(block),
                CompareOp::Equal,
                revision,
            )])
            .and_then([TxnOp::delete(keys.block(block), None)]);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        Ok(response.succeeded())
    }

    /// Writes the node's report.
    pub fn report(
        &mut self,
        keys: &PoolKeys,
        node: &str,
        report: NodeReport,
    ) -> Result<(), EtcdError> {
        let value = serde_json::to_string(&report).unwrap_or_default();
        let key = keys.node(node);
        self.call(|mut kv| {
            let (key, value) = (key.clone(), value.clone());
            async move { kv.put(key, value, None).await }
        })?;
        Ok(())
    }

    /// A new lease of `ttl` seconds; its ID.
    pub fn grant(&mut self, ttl: i64) -> Result<i64, EtcdError> {
        let response =
            self.call_client(|client| async move { client.lease_client().grant(ttl, None).await })?;
        Ok(response.id())
    }

    /// Refreshes lease `id` once; false when etcd no longer has it (it
    /// expired).
    pub fn keep_alive_once(&mut self, id: i64) -> Result<bool, EtcdError> {
        self.call_client(|client| async move {
            match client.lease_client().keep_alive(id).await {
                Ok(_) => Ok(true),
                // What the client says for a TTL of 0: the lease is gone.
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Revokes lease `id` (its keys go with it).
    pub fn revoke(&mut self, id: i64) -> Result<(), EtcdError> {
        self.call_client(|client| async move { client.lease_client().revoke(id).await })?;
        Ok(())
    }

    /// Writes `key` attached to lease `id`: it is deleted when the lease
    /// expires.
    pub fn put_with_lease(&mut self, key: &str, value: &str, id: i64) -> Result<(), EtcdError> {
        let (key, value) = (key.to_string(), value.to_string());
        self.call(|mut kv| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                kv.put(
                    key,
                    value,
                    Some(etcd_client::PutOptions::new().with_lease(id)),
                )
                .await
            }
        })?;
        Ok(())
    }

    /// Every key under `prefix` with its value and create revision (the
    /// operator command).
    pub fn list(&mut self, prefix: &str) -> Result<Vec<(String, Vec<u8>, i64)>, EtcdError> {
        let prefix = prefix.to_string();
        let response = self.call(|mut kv| {
            let prefix = prefix.clone();
            async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
        })?;
        Ok(response
            .kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                    kv.create_revision(),
                )
            })
            .collect())
    }

    /// Deletes `key` if it is still the one created at `revision`.
    pub fn delete_if(&mut self, key: &str, revision: i64) -> Result<bool, EtcdError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, revision)])
            .and_then([TxnOp::delete(key, None)]);
        let response = self.call(|mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        Ok(response.succeeded())
    }
}

/// A block key's value: fixed bytes for a node.
pub fn block_value(node: &str) -> String {
    serde_json::to_string(&BlockValue {
        node: node.to_string(),
    })
    .unwrap_or_default()
}

/// An address key's value: fixed bytes for an owner (struct field order),
/// which release compares.
pub fn ip_value(owner: &IpValue) -> String {
    serde_json::to_string(owner).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked_at(at: Instant) -> Asked {
        Asked {
            in_flight: 1,
            last: Some(at),
            ..Asked::default()
        }
    }

    #[test]
    fn endpoints_not_asked_come_first_in_the_nodes_order_then_the_longest_waiting() {
        let t0 = Instant::now();
        let mut asked = vec![Asked::default(); 3];
        assert_eq!(next_to_ask(&asked, 2), Some(2));
        asked[2] = asked_at(t0);
        assert_eq!(next_to_ask(&asked, 2), Some(0));
        asked[0] = asked_at(t0 + Duration::from_millis(10));
        assert_eq!(next_to_ask(&asked, 2), Some(1));
        asked[1] = Asked {
            in_flight: 0,
            last: Some(t0 + Duration::from_millis(20)),
            failure: Some("refused".into()),
            ..Asked::default()
        };
        // Everyone asked: the one asked longest ago, even if still in flight.
        assert_eq!(next_to_ask(&asked, 2), Some(2));
        assert_eq!(next_to_ask(&[], 0), None);
    }

    #[test]
    fn each_endpoints_outcome_says_what_it_did() {
        let t0 = Instant::now();
        assert_eq!(Asked::default().outcome(), "not asked in time");
        assert_eq!(asked_at(t0).outcome(), "no answer in time");
        let failed = Asked {
            in_flight: 0,
            last: Some(t0),
            failure: Some("connection refused".into()),
            ..Asked::default()
        };
        assert_eq!(failed.outcome(), "connection refused");
        let again = Asked {
            in_flight: 1,
            ..failed
        };
        assert_eq!(
            again.outcome(),
            "no answer in time (before: connection refused)"
        );
    }
}
