//! The runtime's view of pods, in the kubelet's vocabulary (its package `pkg/kubelet/container`,
//! "kubecontainer"): a [`RuntimePod`] groups the sandboxes and containers ([`RuntimeContainer`]) of
//! one pod uid as a relist lists them, and a [`RuntimePodStatus`] is the full status of one pod as
//! read from the runtime on demand. Every type here is named `Runtime…` (or `Sandbox…`) so that it
//! is never mistaken for the API object of the same idea (k8s-openapi's `Pod`, `PodStatus`,
//! `ContainerStatus`, … and plegd's [`crate::apiserver::pod::ApiPod`]).
//!
//! Plain data: nothing here does I/O or knows CRI or the apiserver. The `runtime` stage fills these
//! types from CRI answers; the PLEG diffs them; status generation turns them into API statuses.
//! Beside them, [`cache`]: the newest runtime status of each pod (the kubelet's `container/cache.go`),
//! written by the relister and read by the syncLoop.

pub mod cache;

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

/// Text as a container left it: bytes that need not be UTF-8. A termination message is the last
/// 4 KiB of a file (or 2 KiB of a log) and can start or end inside a character, and a container
/// may write anything. The kubelet keeps such text as a Go string of the same bytes, cuts it by
/// bytes (`normalizeStatus`'s share of 12 KiB), and only its JSON encoder replaces what is not
/// UTF-8, each invalid byte by one U+FFFD. plegd keeps the bytes until the same cut
/// ([`RawText::to_api_string`]), so that what it writes is what the kubelet writes, byte for byte.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawText(Vec<u8>);

impl RawText {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Append bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    /// The text as the API shows it: at most its first `max` bytes, a cut inside a character
    /// left as it falls, then each byte that is not UTF-8 as U+FFFD ([`go_json_string`]).
    pub fn to_api_string(&self, max: usize) -> String {
        go_json_string(&self.0[..self.0.len().min(max)])
    }
}

impl From<Vec<u8>> for RawText {
    fn from(bytes: Vec<u8>) -> Self {
        RawText(bytes)
    }
}

impl From<String> for RawText {
    fn from(s: String) -> Self {
        RawText(s.into_bytes())
    }
}

impl From<&str> for RawText {
    fn from(s: &str) -> Self {
        RawText(s.as_bytes().to_vec())
    }
}

impl std::fmt::Debug for RawText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&go_json_string(&self.0), f)
    }
}

impl std::fmt::Display for RawText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&go_json_string(&self.0))
    }
}

impl PartialEq<str> for RawText {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for RawText {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<String> for RawText {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
    }
}

impl Serialize for RawText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&go_json_string(&self.0))
    }
}

/// Bytes as Go's `encoding/json` writes a string of them: UTF-8 as it is, and each byte that does
/// not start a valid UTF-8 sequence (`utf8.DecodeRuneInString` returns `RuneError`, size 1) as one
/// U+FFFD. A character cut after two of its three bytes is two replacement characters, where
/// Rust's `from_utf8_lossy` writes one: each invalid chunk here counts its bytes.
pub fn go_json_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

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

    /// The pod's sandboxes in the kubelet's order, newest first ([`newest_sandbox_first`]).
    pub fn sandboxes_newest_first(&self) -> Vec<&RuntimeContainer> {
        let mut sandboxes: Vec<&RuntimeContainer> = self.sandboxes.iter().collect();
        sandboxes.sort_by(|a, b| newest_sandbox_first(a, b));
        sandboxes
    }
}

/// The kubelet's order of a pod's sandboxes, newest first (`podSandboxByCreatedThenID` of the
/// kubelets 1.36 and 1.37): the higher attempt first, then the later creation, then the smaller
/// id. Its first sandbox is the pod's: its IPs, its readiness, its name. (The kubelet 1.35 orders
/// by attempt alone and leaves the sandboxes of one attempt in the order the runtime listed them;
/// this order is one of those.)
pub fn newest_sandbox_first(a: &RuntimeContainer, b: &RuntimeContainer) -> std::cmp::Ordering {
    b.attempt
        .cmp(&a.attempt)
        .then(b.created_at.cmp(&a.created_at))
        .then_with(|| a.id.cmp(&b.id))
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
    /// The kubelet's ImageID: the runtime's `image_id` (CRI's field since Kubernetes 1.30), else its
    /// `image_ref` where it leaves `image_id` empty (older runtimes), as `toKubeContainerStatus`.
    pub image_id: String,
    pub reason: String,
    /// The runtime's message, then `": "` and the termination message read from the container's
    /// file or log — bytes, which need not be UTF-8 (see [`RawText`]).
    pub message: RawText,
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
    /// Where its termination message is read from once it exits, kept from a read that found it
    /// not exited: an exit taken from the runtime's exit event is written into the pod's last
    /// status read with it (`pleg`), without asking the runtime again. None once it exited (its
    /// message is read then), and for a container with no message file and no log to fall back to.
    #[serde(skip)]
    pub termination_source: Option<TerminationMessageSource>,
}

/// Where a container's termination message is read from (`getTerminationMessage`): the host side
/// of the mount at its `terminationMessagePath`, and its log where its policy is
/// `FallbackToLogsOnError` (read only after a failed exit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminationMessageSource {
    pub file: Option<String>,
    pub logs_on_error: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go 1.26's `json.Marshal` of each string gives, read back (`go run`: one U+FFFD per
    /// byte `utf8.DecodeRuneInString` cannot decode).
    #[test]
    fn text_is_written_as_gos_json_encoder_writes_it() {
        let r = "\u{FFFD}";
        for (bytes, want) in [
            (&b"abc"[..], "abc".to_owned()),
            (b"Gr\xc3", format!("Gr{r}")),
            (b"\xe2\x82", r.repeat(2)),
            (b"\xe2\x82\xacx", "€x".to_owned()),
            (b"\xf0\x9f\x98", r.repeat(3)),
            (b"\xf0\x9f\x98\x80", "😀".to_owned()),
            (b"\x80\x80a", format!("{r}{r}a")),
            (b"\xed\xa0\x80", r.repeat(3)),
            (b"\xff", r.to_owned()),
            (b"a\xc3\xbc\xc3", format!("aü{r}")),
            (b"\xbc\xc3\xbcok", format!("{r}üok")),
            (b"\xf4\x90\x80\x80", r.repeat(4)),
            (b"\xc0\xaf", r.repeat(2)),
        ] {
            assert_eq!(go_json_string(bytes), want, "{bytes:x?}");
        }
    }

    #[test]
    fn raw_text_is_cut_by_bytes_before_it_is_encoded() {
        let text = RawText::from("ok Grüß");
        assert_eq!(text.to_api_string(100), "ok Grüß");
        // "ü" is c3 bc: a cut after c3 leaves half a character, one U+FFFD.
        assert_eq!(text.to_api_string(6), "ok Gr\u{FFFD}");
        assert_eq!(text.to_api_string(7), "ok Grü");
        assert_eq!(text.to_api_string(0), "");
        let mut euro = RawText::from("€€");
        assert_eq!(euro.to_api_string(5), "€\u{FFFD}\u{FFFD}");
        euro.push(b"\xff");
        assert_eq!(format!("{euro:?}"), "\"€€\u{FFFD}\"");
        assert_eq!(serde_json::to_string(&euro).unwrap(), "\"€€\u{FFFD}\"");
    }

    /// kuberuntime's `podSandboxByCreatedThenID` (1.36, 1.37), case by case.
    #[test]
    fn sandboxes_are_ordered_as_the_kubelet_orders_them() {
        let sandbox = |id: &str, attempt: u32, created_at: i64| RuntimeContainer {
            id: id.into(),
            sandbox_id: String::new(),
            name: String::new(),
            state: RuntimeContainerState::Exited,
            created_at,
            attempt,
        };
        let pod = RuntimePod {
            sandboxes: vec![
                sandbox("a-old-first", 0, 10),
                sandbox("b-retried-early-clock", 1, 5),
                sandbox("d-tie", 0, 20),
                sandbox("c-tie", 0, 20),
            ],
            ..RuntimePod::default()
        };
        let order: Vec<&str> = pod.sandboxes_newest_first().iter().map(|s| s.id.as_str()).collect();
        // The higher attempt first even when created earlier; within an attempt the later
        // creation first; the same creation by id.
        assert_eq!(order, ["b-retried-early-clock", "c-tie", "d-tie", "a-old-first"]);
    }
}
