//! The runtime's sandboxes over CRI v1 (ListPodSandbox), on its unix
//! socket. The channel code is shared with the test harness
//! (testing/cri-client), which connects the same way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::Error;
use crate::plan::Sandbox;

/// containerd's CRI socket, the default endpoint.
pub const CONTAINERD_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// CRI-O's, tried when containerd's is missing and no endpoint was given.
pub const CRIO_ENDPOINT: &str = "unix:///var/run/crio/crio.sock";

/// How long connecting and ListPodSandbox may take: a runtime answers in
/// milliseconds; a hung one must not hang the pass (which then releases
/// nothing).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The socket path of a `unix://` endpoint (or a bare absolute path, as
/// crictl accepts).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, Error> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(Error::Endpoint(endpoint.to_string()))
    }
}

/// The socket to use: the given endpoint's, else containerd's, else
/// CRI-O's when only that one exists.
pub fn choose_socket(given: Option<&str>) -> Result<PathBuf, Error> {
    if let Some(endpoint) = given {
        return socket_path(endpoint);
    }
    let containerd = socket_path(CONTAINERD_ENDPOINT)?;
    let crio = socket_path(CRIO_ENDPOINT)?;
    if !containerd.exists() && crio.exists() {
        Ok(crio)
    } else {
        Ok(containerd)
    }
}

/// A gRPC channel to a unix socket, on `runtime`. The URI is required by
/// tonic but unused: the connector dials the socket whatever it says.
pub fn connect_unix(
    runtime: &tokio::runtime::Runtime,
    socket: &Path,
    timeout: Duration,
) -> Result<Channel, tonic::transport::Error> {
    let path = socket.to_path_buf();
    let endpoint = Endpoint::from_static("http://cri.invalid")
        .timeout(timeout)
        .connect_timeout(timeout);
    runtime.block_on(
        endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        })),
    )
}

/// A current-thread runtime for the blocking CRI calls.
pub fn blocking_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
}

/// Every sandbox the runtime knows, in every state (no filter).
pub fn list_sandboxes(socket: &Path) -> Result<Vec<Sandbox>, Error> {
    let runtime = blocking_runtime().map_err(Error::TokioRuntime)?;
    let channel = connect_unix(&runtime, socket, CALL_TIMEOUT).map_err(|e| Error::CriConnect {
        socket: socket.to_path_buf(),
        message: error_chain(&e),
    })?;
    let mut service = RuntimeServiceClient::new(channel);
    let reply = runtime
        .block_on(service.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }))
        .map_err(|status| Error::CriList {
            socket: socket.to_path_buf(),
            message: status.message().to_string(),
            code: status.code().to_string(),
        })?;
    Ok(reply
        .into_inner()
        .items
        .into_iter()
        .map(|s| Sandbox {
            ready: s.state == cri::PodSandboxState::SandboxReady as i32,
            id: s.id,
        })
        .collect())
}

/// An error and its sources on one line (tonic's transport error says
/// only "transport error" at the top).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // Some layers repeat their source's text in their own.
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_unix_sockets() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/var/run/crio/crio.sock").unwrap(),
            PathBuf::from("/var/run/crio/crio.sock")
        );
        for bad in ["tcp://127.0.0.1:1234", "unix://relative.sock", ""] {
            let err = socket_path(bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("CRI endpoint {bad:?} is not a unix socket path (unix:///path)")
            );
        }
    }

    #[test]
    fn a_given_endpoint_wins() {
        assert_eq!(
            choose_socket(Some("unix:///tmp/x.sock")).unwrap(),
            PathBuf::from("/tmp/x.sock")
        );
    }

    #[test]
    fn a_missing_socket_is_a_connect_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("none.sock");
        let err = list_sandboxes(&socket).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot connect to the CRI socket {}: ",
                socket.display()
            )),
            "{text}"
        );
        assert!(text.contains("No such file or directory"), "{text}");
    }
}
