//! Why an etcd member closed a TLS connection under the client.
//!
//! With TLS 1.3 the client's half of the handshake ends before the server
//! has checked the client's certificate: a member that refuses the
//! certificate sends its alert after the client has started writing, and
//! whether the gRPC client then reads the alert or a broken pipe is a race
//! (seen in CI on a loaded machine: an untrusted certificate came out as
//! "etcd unreachable", code 11, instead of a configuration error). A fresh
//! handshake that only reads, never writes, always gets the alert. It runs
//! only after a TLS connection was closed under a request, so a working
//! call never pays for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// The PEM files of a TLS configuration, as read when the client was set
/// up (the probe sees what the client saw).
#[derive(Clone, Default)]
pub struct TlsPem {
    pub ca: Option<Vec<u8>>,
    /// Certificate chain and private key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key's bytes.
        f.debug_struct("TlsPem")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// A handshake refused by either side. tonic hands rustls' errors over
/// only as boxed sources (and the server's alert as text), so the cause
/// chain's text is what tells them from a refused connection.
pub fn is_tls_failure(chain: &str) -> bool {
    let text = chain.to_ascii_lowercase();
    ["certificate", "unknownissuer", "handshake", "alert"]
        .iter()
        .any(|word| text.contains(word))
}

/// Whether a request's failure says the peer closed the connection, the
/// way a certificate refusal can surface under TLS 1.3.
pub fn closed_under_us(chain: &str) -> bool {
    let text = chain.to_ascii_lowercase();
    [
        "broken pipe",
        "connection reset",
        "reset by peer",
        "unexpected eof",
        "closed",
    ]
    .iter()
    .any(|word| text.contains(word))
}

/// `host` and `port` of an `https://` endpoint; `None` for anything else.
fn host_port(endpoint: &str) -> Option<(String, u16)> {
    let rest = endpoint.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

fn client_config(pem: &TlsPem) -> Option<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.ca.as_deref()?) {
        roots.add(cert.ok()?).ok()?;
    }
    if roots.is_empty() {
        return None;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    match &pem.identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let key = PrivateKeyDer::from_pem_slice(key).ok()?;
            builder.with_client_auth_cert(chain, key).ok()
        }
        None => Some(builder.with_no_client_auth()),
    }
}

/// The TLS refusal `endpoint` gives a fresh handshake with `pem` within
/// `wait`, as rustls words it; `None` when it gives none (it accepts the
/// handshake, cannot be reached, or says nothing in time). Files that
/// cannot be parsed give `None` too: the client's own error names them.
pub async fn refusal(endpoint: &str, pem: &TlsPem, wait: Duration) -> Option<String> {
    let (host, port) = host_port(endpoint)?;
    let config = client_config(pem)?;
    let name = ServerName::try_from(host.clone()).ok()?;
    let probe = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        let mut tls = match TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
        {
            Ok(tls) => tls,
            Err(error) => return Some(error.to_string()),
        };
        // The server's verdict on the client certificate comes after the
        // client's Finished: read it. A server that accepted sends session
        // tickets (read and skipped by rustls) and then waits for a request.
        let mut buf = [0u8; 64];
        match tls.read(&mut buf).await {
            Err(error) => Some(error.to_string()),
            Ok(_) => None,
        }
    };
    let found = tokio::time::timeout(wait, probe).await.ok().flatten()?;
    is_tls_failure(&found).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_give_host_and_port_only_for_https() {
        assert_eq!(
            host_port("https://127.0.0.1:2379"),
            Some(("127.0.0.1".into(), 2379))
        );
        assert_eq!(
            host_port("https://[fd00::1]:2379/"),
            Some(("fd00::1".into(), 2379))
        );
        assert_eq!(
            host_port("https://etcd-0.example:443"),
            Some(("etcd-0.example".into(), 443))
        );
        assert_eq!(host_port("http://127.0.0.1:2379"), None);
        assert_eq!(host_port("https://127.0.0.1"), None);
    }

    #[test]
    fn only_a_closed_connection_is_probed() {
        assert!(closed_under_us(
            "transport error: stream closed because of a broken pipe"
        ));
        assert!(closed_under_us("Connection reset by peer (os error 104)"));
        assert!(!closed_under_us(
            "tcp connect error: Connection refused (os error 111)"
        ));
        assert!(!closed_under_us("etcdserver: no leader"));
    }

    #[test]
    fn unreadable_files_give_no_probe() {
        let pem = TlsPem {
            ca: Some(b"not a certificate".to_vec()),
            identity: None,
        };
        // No certificate in the CA file: nothing to trust, so no probe.
        assert!(client_config(&pem).is_none());
        assert!(client_config(&TlsPem::default()).is_none());
    }
}
