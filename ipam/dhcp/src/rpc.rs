//! The plugin–daemon protocol: Go `net/rpc` over HTTP on a unix socket,
//! the protocol of the reference plugin and daemon, so that either half can
//! be the Go one during an upgrade.
//!
//! A connection starts with `CONNECT /_goRPC_ HTTP/1.0` and a blank line,
//! answered by `HTTP/1.0 200 Connected to Go RPC` and a blank line. Then
//! each call is two gob values each way: the request header
//! `{ServiceMethod, Seq}` and the arguments (`skel.CmdArgs`), then the
//! response header `{ServiceMethod, Seq, Error}` and the reply
//! (`current.Result`, or an empty struct when there is none or on error).
//!
//! Methods: `DHCP.Allocate` and `DHCP.Release` (reference), and this
//! daemon's own `DHCP.Check`, `DHCP.GC` and `DHCP.Status`, which the Go
//! daemon answers with "rpc: can't find method" ([`RpcError::is_unknown_method`]).

use std::io::{self, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::path::Path;

use ipnetwork::IpNetwork;
use libcni::types::{v100, Route};
use libcni::SpecVersion;

use crate::gob::{Decoder, Encoder, GobError, SliceType, StructType, Type, Value};

pub const METHOD_ALLOCATE: &str = "DHCP.Allocate";
pub const METHOD_RELEASE: &str = "DHCP.Release";
pub const METHOD_CHECK: &str = "DHCP.Check";
pub const METHOD_GC: &str = "DHCP.GC";
pub const METHOD_STATUS: &str = "DHCP.Status";

const RPC_PATH: &str = "/_goRPC_";
const CONNECTED: &str = "200 Connected to Go RPC";
/// Longest HTTP head either side accepts before the gob stream starts.
const MAX_HEAD_BYTES: usize = 4096;

pub static REQUEST_HEADER: StructType = StructType {
    name: "Request",
    fields: &[("ServiceMethod", Type::String), ("Seq", Type::Uint)],
};

pub static RESPONSE_HEADER: StructType = StructType {
    name: "Response",
    fields: &[
        ("ServiceMethod", Type::String),
        ("Seq", Type::Uint),
        ("Error", Type::String),
    ],
};

/// `skel.CmdArgs` (`NetnsOverride` is newer than the Debian reference,
/// whose decoder skips it).
pub static CMD_ARGS: StructType = StructType {
    name: "CmdArgs",
    fields: &[
        ("ContainerID", Type::String),
        ("Netns", Type::String),
        ("IfName", Type::String),
        ("Args", Type::String),
        ("Path", Type::String),
        ("NetnsOverride", Type::String),
        ("StdinData", Type::Bytes),
    ],
};

/// What a reply without contents is (Go's `struct{}`).
pub static EMPTY: StructType = StructType {
    name: "struct {}",
    fields: &[],
};

/// `net.IPNet`; `net.IP` and `net.IPMask` are byte slices on the wire.
static IP_NET: StructType = StructType {
    name: "IPNet",
    fields: &[("IP", Type::Bytes), ("Mask", Type::Bytes)],
};

static IP_CONFIG: StructType = StructType {
    name: "IPConfig",
    fields: &[("Address", Type::Struct(&IP_NET)), ("Gateway", Type::Bytes)],
};

static IP_CONFIGS: SliceType = SliceType {
    name: "[]*types100.IPConfig",
    elem: Type::Struct(&IP_CONFIG),
};

/// `types.Route`; older Go decoders skip `Priority` and `Scope`.
static ROUTE: StructType = StructType {
    name: "Route",
    fields: &[
        ("Dst", Type::Struct(&IP_NET)),
        ("GW", Type::Bytes),
        ("Priority", Type::Int),
        ("Scope", Type::Int),
    ],
};

static ROUTES: SliceType = SliceType {
    name: "[]*types.Route",
    elem: Type::Struct(&ROUTE),
};

/// The version a reply's result claims: the Go plugins of before CNI 1.1
/// convert results from 1.0.0 but not from 1.1.0, and both versions have
/// the same result shape.
const WIRE_RESULT_VERSION: &str = "1.0.0";

/// `types100.Result` as far as the daemon fills it.
pub static RESULT: StructType = StructType {
    name: "Result",
    fields: &[
        ("CNIVersion", Type::String),
        ("IPs", Type::Slice(&IP_CONFIGS)),
        ("Routes", Type::Slice(&ROUTES)),
    ],
};

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("{0}")]
    Dial(#[source] io::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Gob(#[from] GobError),
    #[error("unexpected answer from the DHCP daemon: {0}")]
    Protocol(String),
    /// The daemon's own error text.
    #[error("{0}")]
    Remote(String),
}

impl RpcError {
    /// The daemon does not have the method (a Go daemon asked for one of
    /// this daemon's own methods).
    pub fn is_unknown_method(&self) -> bool {
        matches!(self, RpcError::Remote(msg)
            if msg.starts_with("rpc: can't find method") || msg.starts_with("rpc: can't find service"))
    }
}

/// The arguments of a call: the plugin's `skel.CmdArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallArgs {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: String,
    pub stdin_data: Vec<u8>,
}

impl CallArgs {
    pub fn to_value(&self) -> Value {
        let text = |name: &str, value: &str| (name.to_string(), Value::String(value.to_string()));
        Value::Struct(vec![
            text("ContainerID", &self.container_id),
            text("Netns", &self.netns),
            text("IfName", &self.ifname),
            text("Args", &self.args),
            text("Path", &self.path),
            ("StdinData".into(), Value::Bytes(self.stdin_data.clone())),
        ])
    }

    pub fn from_value(value: &Value) -> CallArgs {
        CallArgs {
            container_id: value.text("ContainerID"),
            netns: value.text("Netns"),
            ifname: value.text("IfName"),
            args: value.text("Args"),
            path: value.text("Path"),
            stdin_data: value.bytes("StdinData"),
        }
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn ip_net_value(network: IpNetwork) -> Value {
    Value::Struct(vec![
        ("IP".into(), Value::Bytes(ip_bytes(network.ip()))),
        ("Mask".into(), Value::Bytes(ip_bytes(network.mask()))),
    ])
}

/// A Go `net.IP` (4 or 16 bytes; 16 bytes of a mapped IPv4 address are
/// that IPv4 address, as in Go).
fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(bytes);
            let v6 = Ipv6Addr::from(octets);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// A Go `net.IPNet`: the mask must be a prefix of the address's family.
fn ip_net_from_value(value: &Value) -> Result<IpNetwork, RpcError> {
    let bad = || RpcError::Protocol(format!("not an IP network: {value:?}"));
    let ip = ip_from_bytes(&value.bytes("IP")).ok_or_else(bad)?;
    let mask = value.bytes("Mask");
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let prefix = match (ip, mask.len()) {
        (IpAddr::V4(_), 4) | (IpAddr::V6(_), 16) => ones,
        (IpAddr::V4(_), 16) => ones.saturating_sub(96),
        _ => return Err(bad()),
    };
    IpNetwork::new(ip, u8::try_from(prefix).map_err(|_| bad())?).map_err(|_| bad())
}

pub fn result_to_value(result: &v100::Result) -> Value {
    let ips = result
        .ips
        .iter()
        .map(|ip| {
            Value::Struct(vec![
                ("Address".into(), ip_net_value(ip.address)),
                (
                    "Gateway".into(),
                    Value::Bytes(ip.gateway.map(ip_bytes).unwrap_or_default()),
                ),
            ])
        })
        .collect();
    let routes = result
        .routes
        .iter()
        .map(|route| {
            Value::Struct(vec![
                ("Dst".into(), ip_net_value(route.dst)),
                (
                    "GW".into(),
                    Value::Bytes(route.gw.map(ip_bytes).unwrap_or_default()),
                ),
                ("Priority".into(), Value::Int(i64::from(route.priority))),
                (
                    "Scope".into(),
                    Value::Int(route.scope.map(i64::from).unwrap_or(0)),
                ),
            ])
        })
        .collect();
    Value::Struct(vec![
        (
            "CNIVersion".into(),
            Value::String(WIRE_RESULT_VERSION.to_string()),
        ),
        ("IPs".into(), Value::List(ips)),
        ("Routes".into(), Value::List(routes)),
    ])
}

/// A `current.Result` from either daemon (fields it lacks are empty).
pub fn result_from_value(value: &Value) -> Result<v100::Result, RpcError> {
    let mut result = v100::Result::new();
    result.cni_version = SpecVersion::CURRENT;
    for ip in value.list("IPs") {
        let address = ip
            .field("Address")
            .ok_or_else(|| RpcError::Protocol("an IP without an address".into()))
            .and_then(ip_net_from_value)?;
        result.ips.push(v100::IpConfig {
            interface: None,
            address,
            gateway: ip_from_bytes(&ip.bytes("Gateway")),
        });
    }
    for route in value.list("Routes") {
        let dst = route
            .field("Dst")
            .ok_or_else(|| RpcError::Protocol("a route without a destination".into()))
            .and_then(ip_net_from_value)?;
        let mut entry = Route::new(dst, ip_from_bytes(&route.bytes("GW")));
        entry.priority = route
            .int("Priority")
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0);
        entry.scope = route
            .int("Scope")
            .and_then(|s| u8::try_from(s).ok())
            .filter(|s| *s != 0);
        result.routes.push(entry);
    }
    Ok(result)
}

/// Reads an HTTP head (up to its blank line) byte by byte, so that nothing
/// of the gob stream after it is consumed.
fn read_head(stream: &mut impl Read) -> io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !(head.ends_with(b"\n\n") || head.ends_with(b"\r\n\r\n")) {
        if head.len() > MAX_HEAD_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "HTTP head too long",
            ));
        }
        if stream.read(&mut byte)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// One call to the daemon at `socket`: connect, CONNECT, the call, close.
pub fn call(socket: &Path, method: &str, args: &CallArgs) -> Result<Value, RpcError> {
    let mut stream = UnixStream::connect(socket).map_err(RpcError::Dial)?;
    stream.write_all(format!("CONNECT {RPC_PATH} HTTP/1.0\n\n").as_bytes())?;
    let head = read_head(&mut stream)?;
    let status_line = head.lines().next().unwrap_or("");
    let status = status_line.split_once(' ').map(|(_, s)| s).unwrap_or("");
    if status.trim_end() != CONNECTED {
        return Err(RpcError::Protocol(format!(
            "unexpected HTTP response: {status_line}"
        )));
    }
    let mut encoder = Encoder::new();
    let header = Value::Struct(vec![
        ("ServiceMethod".into(), Value::String(method.to_string())),
        ("Seq".into(), Value::Uint(0)),
    ]);
    let mut out = encoder.encode(Type::Struct(&REQUEST_HEADER), &header)?;
    out.extend(encoder.encode(Type::Struct(&CMD_ARGS), &args.to_value())?);
    stream.write_all(&out)?;

    let mut decoder = Decoder::new(BufReader::new(&stream));
    let eof = || RpcError::Protocol("connection closed before the reply".into());
    let response = decoder.next_value()?.ok_or_else(eof)?;
    let reply = decoder.next_value()?.ok_or_else(eof)?;
    let error = response.text("Error");
    if !error.is_empty() {
        return Err(RpcError::Remote(error));
    }
    Ok(reply)
}

/// A method's answer: the reply value and its type, or the error text.
pub type Reply = Result<(Type, Value), String>;

/// Serves one connection: the HTTP CONNECT, then calls until the client
/// closes. `handle` gets the method name and the decoded arguments.
pub fn serve(
    mut stream: UnixStream,
    handle: &dyn Fn(&str, &Value) -> Reply,
) -> Result<(), RpcError> {
    let head = read_head(&mut stream)?;
    let request_line = head.lines().next().unwrap_or("");
    if !request_line.starts_with("CONNECT ") {
        stream.write_all(
            b"HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n405 must CONNECT\n",
        )?;
        return Ok(());
    }
    stream.write_all(format!("HTTP/1.0 {CONNECTED}\n\n").as_bytes())?;
    let mut decoder = Decoder::new(BufReader::new(stream.try_clone()?));
    let mut encoder = Encoder::new();
    loop {
        let Some(header) = decoder.next_value()? else {
            return Ok(());
        };
        let args = decoder
            .next_value()?
            .ok_or_else(|| RpcError::Protocol("request without arguments".into()))?;
        let method = header.text("ServiceMethod");
        let (error, reply_type, reply) = match handle(&method, &args) {
            Ok((ty, value)) => (String::new(), ty, value),
            Err(msg) => (msg, Type::Struct(&EMPTY), Value::Struct(Vec::new())),
        };
        let response = Value::Struct(vec![
            ("ServiceMethod".into(), Value::String(method)),
            ("Seq".into(), Value::Uint(header.uint("Seq"))),
            ("Error".into(), Value::String(error)),
        ]);
        let mut out = encoder.encode(Type::Struct(&RESPONSE_HEADER), &response)?;
        out.extend(encoder.encode(reply_type, &reply)?);
        stream.write_all(&out)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_round_trip() {
        let mut result = v100::Result::new();
        result.ips.push(v100::IpConfig {
            interface: None,
            address: "192.168.1.5/24".parse().unwrap(),
            gateway: Some("192.168.1.1".parse().unwrap()),
        });
        let mut link = Route::new("10.0.0.0/8".parse().unwrap(), None);
        link.scope = Some(253);
        link.priority = 100;
        result.routes.push(link);
        result.routes.push(Route::new(
            "0.0.0.0/0".parse().unwrap(),
            Some("192.168.1.1".parse().unwrap()),
        ));
        let value = result_to_value(&result);
        let mut encoder = Encoder::new();
        let bytes = encoder.encode(Type::Struct(&RESULT), &value).unwrap();
        let decoded = Decoder::new(&bytes[..]).next_value().unwrap().unwrap();
        let back = result_from_value(&decoded).unwrap();
        assert_eq!(back.ips, result.ips);
        assert_eq!(back.routes, result.routes);
    }

    #[test]
    fn go_ip_forms() {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(ip_from_bytes(&mapped), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(ip_from_bytes(&[1, 2, 3]), None);
        let net = Value::Struct(vec![
            ("IP".into(), Value::Bytes(mapped.to_vec())),
            (
                "Mask".into(),
                Value::Bytes(
                    [0xff; 16][..]
                        .iter()
                        .take(12)
                        .copied()
                        .chain([255, 255, 255, 0])
                        .collect(),
                ),
            ),
        ]);
        assert_eq!(
            ip_net_from_value(&net).unwrap(),
            "10.0.0.1/24".parse().unwrap()
        );
    }

    #[test]
    fn unknown_method_texts() {
        assert!(RpcError::Remote("rpc: can't find method DHCP.GC".into()).is_unknown_method());
        assert!(!RpcError::Remote("no more tries".into()).is_unknown_method());
    }
}
