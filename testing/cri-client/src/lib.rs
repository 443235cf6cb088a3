//! A test harness that drives containerd's CRI as kubelet does, so that the
//! suite's plugins are exercised by the real runtime rather than by an
//! imitation of its calls.
//!
//! - [`Containerd`] starts Debian's containerd (1.6, or the 2.x that
//!   `.ci/install-deps` unpacks from Debian's unstable suite) with a private root, state
//!   dir, socket and config inside a network namespace the test made, and
//!   stops it by PID (also when the test fails).
//! - [`CriClient`] speaks CRI v1 (the `k8s-cri` bindings over tonic) on the
//!   containerd socket: RunPodSandbox, PodSandboxStatus, StopPodSandbox,
//!   RemovePodSandbox, ListPodSandbox.
//! - [`oci_image`] writes the sandbox image the test imports: an OCI
//!   archive built from busybox-static, so nothing is pulled.

mod client;
mod containerd;
mod error;
pub mod oci_image;

pub use client::{CriClient, PodSpec, PortMapping, SandboxInfo};
pub use containerd::{Containerd, ContainerdConfig, Release, CONTAINERD2_ROOT};
pub use error::Error;
pub use k8s_cri::v1 as cri;
