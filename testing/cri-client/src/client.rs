//! CRI v1 calls on containerd's socket, made the way kubelet makes them for
//! a pod's sandbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::Error;

/// How long one CRI call may take before the client gives up: a sandbox
/// start on a loaded 2-core machine takes well under a second, so this only
/// bounds a hung runtime.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A blocking CRI client: one per thread, each with its own
/// current-thread runtime (the test's workers are plain threads).
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    service: RuntimeServiceClient<Channel>,
}

/// One host port forwarded to the pod (CRI `PortMapping`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub protocol: cri::Protocol,
    pub container_port: u16,
    pub host_port: u16,
    /// Empty for every host address.
    pub host_ip: String,
}

/// What kubelet puts in a PodSandboxConfig for a pod on the pod network.
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub attempt: u32,
    pub port_mappings: Vec<PortMapping>,
    pub labels: HashMap<String, String>,
    /// Folder for the pod's logs (kubelet's `/var/log/pods/<ns>_<name>_<uid>`).
    pub log_directory: PathBuf,
}

/// The parts of PodSandboxStatus the tests look at.
#[derive(Debug, Clone)]
pub struct SandboxInfo {
    pub id: String,
    pub state: cri::PodSandboxState,
    /// The pod's primary IP, as the CNI result gave it to containerd.
    pub ip: String,
    pub metadata: cri::PodSandboxMetadata,
    /// containerd's verbose info (`info` key), JSON: it holds the sandbox's
    /// pid and its network namespace path.
    pub verbose_info: Option<serde_json::Value>,
}

impl CriClient {
    /// Connects to the CRI socket (containerd's gRPC address).
    pub fn connect(socket: &Path) -> Result<CriClient, Error> {
        let runtime = cni_node::cri::blocking_runtime().map_err(Error::Runtime)?;
        let channel =
            cni_node::cri::connect_unix(&runtime, socket, CALL_TIMEOUT).map_err(|source| {
                Error::Connect {
                    socket: socket.to_path_buf(),
                    source,
                }
            })?;
        Ok(CriClient {
            runtime,
            service: RuntimeServiceClient::new(channel),
        })
    }

    /// CRI Version: the runtime's name and version.
    pub fn version(&mut self) -> Result<cri::VersionResponse, Error> {
        let request = cri::VersionRequest {
            version: "v1".to_string(),
        };
        let reply = self
            .runtime
            .block_on(self.service.version(request))
            .map_err(|s| rpc("Version", s))?;
        Ok(reply.into_inner())
    }

    /// CRI Status: the runtime's conditions, NetworkReady among them
    /// (containerd 2 sets it from the CNI STATUS of its networks).
    pub fn network_condition(&mut self) -> Result<cri::RuntimeCondition, Error> {
        let request = cri::StatusRequest { verbose: false };
        let reply = self
            .runtime
            .block_on(self.service.status(request))
            .map_err(|s| rpc("Status", s))?;
        reply
            .into_inner()
            .status
            .into_iter()
            .flat_map(|status| status.conditions)
            .find(|condition| condition.r#type == "NetworkReady")
            .ok_or_else(|| {
                rpc(
                    "Status",
                    tonic::Status::not_found("no NetworkReady condition"),
                )
            })
    }

    /// RunPodSandbox for a pod on the pod network (network namespace mode
    /// POD), as kubelet sends it; returns the sandbox ID.
    pub fn run_pod_sandbox(&mut self, pod: &PodSpec) -> Result<String, Error> {
        let config = sandbox_config(pod);
        let request = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let reply = self
            .runtime
            .block_on(self.service.run_pod_sandbox(request))
            .map_err(|s| rpc("RunPodSandbox", s))?;
        Ok(reply.into_inner().pod_sandbox_id)
    }

    /// PodSandboxStatus with containerd's verbose info.
    pub fn pod_sandbox_status(&mut self, id: &str) -> Result<SandboxInfo, Error> {
        let request = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        let reply = self
            .runtime
            .block_on(self.service.pod_sandbox_status(request))
            .map_err(|s| rpc("PodSandboxStatus", s))?
            .into_inner();
        let status = reply.status.ok_or(Error::MissingField {
            call: "PodSandboxStatus",
            field: "status",
        })?;
        let ip = status
            .network
            .as_ref()
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        let state = cri::PodSandboxState::try_from(status.state)
            .unwrap_or(cri::PodSandboxState::SandboxNotready);
        let verbose_info = reply
            .info
            .get("info")
            .and_then(|text| serde_json::from_str(text).ok());
        Ok(SandboxInfo {
            id: status.id,
            state,
            ip,
            metadata: status.metadata.unwrap_or_default(),
            verbose_info,
        })
    }

    /// StopPodSandbox: containerd stops the sandbox and tears its network
    /// down (CNI DEL with the namespace and the cached result).
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let request = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.runtime
            .block_on(self.service.stop_pod_sandbox(request))
            .map_err(|s| rpc("StopPodSandbox", s))?;
        Ok(())
    }

    /// RemovePodSandbox: containerd deletes the sandbox (and, 1.6, sends
    /// one more CNI DEL without a namespace).
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), Error> {
        let request = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.runtime
            .block_on(self.service.remove_pod_sandbox(request))
            .map_err(|s| rpc("RemovePodSandbox", s))?;
        Ok(())
    }

    /// ListPodSandbox, optionally only those carrying every given label.
    pub fn list_pod_sandboxes(
        &mut self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>, Error> {
        let request = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: labels,
                ..Default::default()
            }),
        };
        let reply = self
            .runtime
            .block_on(self.service.list_pod_sandbox(request))
            .map_err(|s| rpc("ListPodSandbox", s))?;
        Ok(reply.into_inner().items)
    }

    /// Stops and removes every sandbox the runtime knows, returning how
    /// many there were.
    pub fn remove_all_sandboxes(&mut self) -> Result<usize, Error> {
        let sandboxes = self.list_pod_sandboxes(HashMap::new())?;
        for sandbox in &sandboxes {
            self.stop_pod_sandbox(&sandbox.id)?;
            self.remove_pod_sandbox(&sandbox.id)?;
        }
        Ok(sandboxes.len())
    }
}

fn rpc(call: &'static str, status: tonic::Status) -> Error {
    Error::Rpc {
        call,
        status: Box::new(status),
    }
}

fn sandbox_config(pod: &PodSpec) -> cri::PodSandboxConfig {
    let port_mappings = pod
        .port_mappings
        .iter()
        .map(|m| cri::PortMapping {
            protocol: m.protocol as i32,
            container_port: i32::from(m.container_port),
            host_port: i32::from(m.host_port),
            host_ip: m.host_ip.clone(),
        })
        .collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            attempt: pod.attempt,
        }),
        hostname: pod.name.clone(),
        log_directory: pod.log_directory.display().to_string(),
        dns_config: None,
        port_mappings,
        labels: pod.labels.clone(),
        annotations: HashMap::new(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Pod as i32,
                    pid: cri::NamespaceMode::Pod as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        windows: None,
    }
}
