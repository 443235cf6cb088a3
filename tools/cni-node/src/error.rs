//! What can stop a pass (or the agent) from running at all. Failures of
//! one network are not errors of the pass: they are logged, counted and
//! leave that network's attachments in place.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("CRI endpoint {0:?} is not a unix socket path (unix:///path)")]
    Endpoint(String),
    #[error("cannot build the tokio runtime for the CRI client: {0}")]
    TokioRuntime(#[source] std::io::Error),
    #[error("cannot connect to the CRI socket {}: {message}", .socket.display())]
    CriConnect { socket: PathBuf, message: String },
    #[error("CRI ListPodSandbox on {} failed ({code}): {message}", .socket.display())]
    CriList {
        socket: PathBuf,
        code: String,
        message: String,
    },
    #[error("cannot read the conflist folder: {0}")]
    ConfDir(#[source] libcni::conf::ConfError),
    #[error("cannot read the result cache: {0}")]
    Cache(#[source] libcni::cache::CacheError),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the report: {0}")]
    Output(#[source] std::io::Error),
}
