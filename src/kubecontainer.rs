//! The runtime's view of pods, in the kubelet's vocabulary (its package `pkg/kubelet/container`,
//! "kubecontainer"): a [`RuntimePod`] groups the sandboxes and containers ([`RuntimeContainer`]) of
//! one pod uid as a relist lists them, and a [`RuntimePodStatus`] is the full status of one pod as
//! read from the runtime on demand. Every type here is named `Runtime…` (or `Sandbox…`) so that it
//! is never mistaken for the API object of the same idea (k8s-openapi's `Pod`, `PodStatus`,
//! `ContainerStatus`, … and plegd's [`crate::pod::ApiPod`]).
//!
//! Plain data: nothing here does I/O or knows CRI or the apiserver. The `runtime` stage fills these
//! types from CRI answers; the PLEG diffs them; status generation turns them into API statuses.

use std::time::SystemTime;

use serde::Serialize;

/// Label the kubelet puts on every container and sandbox: the pod's uid.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Label with the pod's name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Label with the pod's namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Label with the container's name in the pod spec.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Annotation with the container's restart count.
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

/// A pod's uid as the runtime reports it.
pub type PodUid = String;

/// A container's state as the kubelet models it (`kubecontainer.State`). Sandboxes use it too:
/// a READY sandbox is `Running`, a NOTREADY one `Exited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl RuntimeContainerState {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeContainerState::Created => "created",
            RuntimeContainerState::Running => "running",
            RuntimeContainerState::Exited => "exited",
            RuntimeContainerState::Unknown => "unknown",
        }
    }
}

/// One container or sandbox as listed by a relist (cheap: no status call). Its image is not kept:
/// nothing reads it from a listing; a status read reports it (`RuntimeContainerStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    pub id: String,
    /// The sandbox a container runs in; empty for sandboxes.
    pub sandbox_id: String,
    /// The container's name in the pod spec; empty for sandboxes.
    pub name: String,
    pub state: RuntimeContainerState,
    /// Creation time in nanoseconds since the epoch, as CRI reports it.
    pub created_at: i64,
    /// CRI metadata attempt.
    pub attempt: u32,
}

/// The containers and sandboxes of one pod uid, as one relist saw them (`kubecontainer.Pod`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimePod {
    pub id: PodUid,
    pub name: String,
    pub namespace: String,
    pub containers: Vec<RuntimeContainer>,
    pub sandboxes: Vec<RuntimeContainer>,
}

impl RuntimePod {
    pub fn find_container(&self, id: &str) -> Option<&RuntimeContainer> {
        self.containers.iter().find(|c| c.id == id)
    }

    pub fn find_sandbox(&self, id: &str) -> Option<&RuntimeContainer> {
        self.sandboxes.iter().find(|c| c.id == id)
    }

    /// A container or a sandbox with this id.
    pub fn find_any(&self, id: &str) -> Option<&RuntimeContainer> {
        self.find_container(id).or_else(|| self.find_sandbox(id))
    }
}

/// The state of a pod sandbox in a full status read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Ready,
    NotReady,
    Unknown,
}

/// Status of one pod sandbox (`runtimeapi.PodSandboxStatus`, trimmed to what plegd uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxStatus {
    pub id: String,
    pub state: SandboxState,
    /// Creation time in nanoseconds since the epoch.
    pub created_at: i64,
    pub attempt: u32,
    /// The primary IP first, then additional ones.
    pub ips: Vec<String>,
    /// True when the sandbox shares the node's network namespace.
    pub host_network: bool,
    /// True when the runtime reported a network status whose primary IP is empty (a sandbox that
    /// reports no network status at all is not taken to lack an IP: `PodSandboxChanged`).
    pub no_primary_ip: bool,
    /// The runtime handler it runs under (`""`: the runtime's default).
    pub runtime_handler: String,
}

/// Full status of one container (`kubecontainer.Status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeContainerStatus {
    pub id: String,
    /// The sandbox it runs in, from the relist (CRI's container status does not say).
    pub sandbox_id: String,
    pub name: String,
    pub state: RuntimeContainerState,
    pub created_at: Option<SystemTime>,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub exit_code: i32,
    pub image: String,
    pub image_ref: String,
    pub reason: String,
    pub message: String,
    pub restart_count: u32,
    /// The resources the runtime applied, as far as CRI reports them (`toKubeContainerResources`);
    /// None when it reports none.
    pub resources: Option<RuntimeContainerResources>,
    /// The identity the container's first process started with, when the runtime reports it
    /// (containerd 2.x does; `toKubeContainerUser`).
    pub user: Option<RuntimeContainerUser>,
    /// The signal that stops the container, by its API name (`SIGTERM`, `SIGRTMIN+1`), when the
    /// runtime reports one (`runtimeSignalToString`); None for CRI's `RUNTIME_DEFAULT` (a runtime
    /// that does not report it) or a value outside CRI's enum.
    pub stop_signal: Option<&'static str>,
}

/// The resources a runtime reports it applied to a container, in the kubelet's units
/// (`kubecontainer.ContainerResources`): CPU in millicores, memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RuntimeContainerResources {
    /// From the CFS shares (`sharesToMilliCPU`).
    pub cpu_request_milli: Option<i64>,
    /// From the CFS quota and period (`quotaToMilliCPU`).
    pub cpu_limit_milli: Option<i64>,
    pub memory_limit_bytes: Option<i64>,
}

/// The user identity of a container's first process (`kubecontainer.ContainerUser`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RuntimeContainerUser {
    /// None when the runtime reports a user without its Linux part.
    pub linux: Option<RuntimeLinuxContainerUser>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RuntimeLinuxContainerUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

/// Full status of one pod as read from the runtime (`kubecontainer.PodStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct RuntimePodStatus {
    pub id: PodUid,
    pub name: String,
    pub namespace: String,
    /// Pod IPs; kept from the previous status when the pod's sandbox is gone (see `pleg`).
    pub ips: Vec<String>,
    pub container_statuses: Vec<RuntimeContainerStatus>,
    /// Newest sandbox first.
    pub sandbox_statuses: Vec<SandboxStatus>,
}

impl RuntimePodStatus {
    /// The status of the container with this id, if the status read found it.
    pub fn find_container(&self, id: &str) -> Option<&RuntimeContainerStatus> {
        self.container_statuses.iter().find(|c| c.id == id)
    }

    /// The sandbox containers run in now: the newest one, while it is ready (`activePodSandboxID`
    /// of kuberuntime's `GetPodStatus`).
    pub fn active_sandbox(&self) -> Option<&SandboxStatus> {
        self.sandbox_statuses.first().filter(|s| s.state == SandboxState::Ready)
    }

    /// The statuses of the containers of the active sandbox (`ActiveContainerStatuses`).
    pub fn active_container_statuses(&self) -> impl Iterator<Item = &RuntimeContainerStatus> {
        let active = self.active_sandbox().map(|s| s.id.as_str());
        self.container_statuses
            .iter()
            .filter(move |c| active.is_some_and(|id| id == c.sandbox_id))
    }
}
