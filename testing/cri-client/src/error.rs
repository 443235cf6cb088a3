use std::path::PathBuf;

/// What can go wrong while running containerd or talking CRI to it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot build the tokio runtime for the CRI client: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot connect to the CRI socket {socket}: {source}")]
    Connect {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("CRI {call} failed: {status}")]
    Rpc {
        call: &'static str,
        status: Box<tonic::Status>,
    },
    #[error("CRI {call} answered without {field}")]
    MissingField {
        call: &'static str,
        field: &'static str,
    },
    #[error("cannot encode the image's {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} failed ({status}): {stderr}")]
    Command {
        program: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("containerd did not open {socket} within {seconds} s; its log:\n{log}")]
    NotReady {
        socket: PathBuf,
        seconds: u64,
        log: String,
    },
    #[error("containerd exited ({status}) before it was ready; its log:\n{log}")]
    Exited {
        status: std::process::ExitStatus,
        log: String,
    },
    #[error("cannot signal process {pid}: {source}")]
    Signal {
        pid: i32,
        #[source]
        source: nix::Error,
    },
}

impl Error {
    /// Whether the call failed because containerd was not there to answer
    /// (killed, restarting): the caller may retry once it is back, as
    /// kubelet does. A call cut off mid-flight by a SIGKILL comes back as
    /// Unavailable, or as Unknown naming the broken transport.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Connect { .. } => true,
            Error::Rpc { status, .. } => match status.code() {
                tonic::Code::Unavailable | tonic::Code::Cancelled => true,
                tonic::Code::Unknown => {
                    let message = status.message();
                    message.contains("transport") || message.contains("connection")
                }
                _ => false,
            },
            Error::Runtime(_)
            | Error::MissingField { .. }
            | Error::Encode { .. }
            | Error::Io { .. }
            | Error::Command { .. }
            | Error::NotReady { .. }
            | Error::Exited { .. }
            | Error::Signal { .. } => false,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}
