//! Pure conversion from CRI v1 messages into plegd's snapshot types. No I/O, no logging: data the
//! runtime should not have sent is returned as [`BadData`] for the caller to log and count, and the
//! offending item is skipped. Nothing here panics on any input.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;

use crate::kubecontainer::{
    ANNOTATION_RESTART_COUNT, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
    RuntimeContainer, RuntimeContainerResources, RuntimeContainerState, RuntimeContainerStatus, RuntimeContainerUser,
    RuntimeLinuxContainerUser, RuntimePod, SandboxState, SandboxStatus, newest_sandbox_first,
};

/// A sandbox as a relist lists it, before grouping. Strings borrow from the runtime's answer where
/// they can (see `lists`); grouping copies what a pod record keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedSandbox<'a> {
    pub id: Cow<'a, str>,
    /// From the sandbox metadata; empty when the runtime sent none.
    pub uid: Cow<'a, str>,
    pub name: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub attempt: u32,
    /// A CRI `PodSandboxState` value, not yet checked.
    pub state: i32,
    pub created_at: i64,
}

/// A container as a relist lists it, before grouping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedContainer<'a> {
    pub id: Cow<'a, str>,
    /// The sandbox the container runs in.
    pub sandbox_id: Cow<'a, str>,
    /// From the container metadata.
    pub name: Cow<'a, str>,
    pub attempt: u32,
    /// A CRI `ContainerState` value, not yet checked.
    pub state: i32,
    pub created_at: i64,
    /// The kubelet's labels (empty when absent).
    pub pod_uid: Cow<'a, str>,
    pub pod_name: Cow<'a, str>,
    pub pod_namespace: Cow<'a, str>,
    pub container_name: Cow<'a, str>,
}

/// Something the runtime reported that plegd cannot use as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadData {
    /// A container without the `io.kubernetes.pod.uid` label: not a kubelet-style container, skipped.
    MissingPodUid { container_id: String },
    /// A sandbox without metadata or without a uid in it, skipped.
    MissingSandboxMetadata { sandbox_id: String },
    /// An item with an empty id, skipped.
    EmptyId,
    /// A state value outside the CRI enum; the item is kept with state unknown.
    UnknownState { id: String, value: i32 },
    /// A stop signal outside the CRI enum; the container is kept without one.
    UnknownSignal { id: String, value: i32 },
    /// An id reported twice (by two sandboxes, two containers, or one of each); the first is kept.
    DuplicateId { id: String },
    /// A negative timestamp; treated as unset.
    BadTimestamp { id: String, value: i64 },
    /// An item with a string that is not UTF-8, skipped.
    NotUtf8 { id: String },
    /// A string field of a status that is not UTF-8: text kept with U+FFFD for its bad bytes
    /// (`kept`), or a path, address or key left out (`src/runtime/statuses.rs`).
    NotUtf8Field {
        id: String,
        field: &'static str,
        kept: bool,
    },
    /// A file path plegd will not read (a termination message or log outside the node's
    /// directories); read as absent.
    RefusedPath { id: String, detail: String },
    /// A termination message whose read did not finish by its deadline (a node volume that does
    /// not answer); left out.
    ReadTimedOut { id: String, detail: String },
}

impl BadData {
    /// A short, stable name for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            BadData::MissingPodUid { .. } => "missing_pod_uid",
            BadData::MissingSandboxMetadata { .. } => "missing_sandbox_metadata",
            BadData::EmptyId => "empty_id",
            BadData::UnknownState { .. } => "unknown_state",
            BadData::UnknownSignal { .. } => "unknown_signal",
            BadData::DuplicateId { .. } => "duplicate_id",
            BadData::BadTimestamp { .. } => "bad_timestamp",
            BadData::NotUtf8 { .. } | BadData::NotUtf8Field { .. } => "not_utf8",
            BadData::RefusedPath { .. } => "refused_path",
            BadData::ReadTimedOut { .. } => "read_timeout",
        }
    }

    /// The runtime id the problem is about, if any.
    pub fn id(&self) -> &str {
        match self {
            BadData::MissingPodUid { container_id: id }
            | BadData::MissingSandboxMetadata { sandbox_id: id }
            | BadData::UnknownState { id, .. }
            | BadData::UnknownSignal { id, .. }
            | BadData::DuplicateId { id }
            | BadData::BadTimestamp { id, .. }
            | BadData::NotUtf8 { id }
            | BadData::NotUtf8Field { id, .. }
            | BadData::RefusedPath { id, .. }
            | BadData::ReadTimedOut { id, .. } => id,
            BadData::EmptyId => "",
        }
    }
}

impl std::fmt::Display for BadData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadData::MissingPodUid { container_id } => {
                write!(f, "container {container_id} has no {LABEL_POD_UID} label; skipped")
            }
            BadData::MissingSandboxMetadata { sandbox_id } => {
                write!(f, "sandbox {sandbox_id} has no metadata uid; skipped")
            }
            BadData::EmptyId => write!(f, "an item with an empty id; skipped"),
            BadData::UnknownState { id, value } => {
                write!(
                    f,
                    "{id} has state {value}, which is not a CRI v1 value; taken as unknown"
                )
            }
            BadData::UnknownSignal { id, value } => {
                write!(f, "{id} has stop signal {value}, which is not a CRI v1 value; left out")
            }
            BadData::DuplicateId { id } => write!(f, "id {id} reported twice; the first is kept"),
            BadData::BadTimestamp { id, value } => {
                write!(f, "{id} has negative timestamp {value}; taken as unset")
            }
            BadData::NotUtf8 { id } => write!(f, "{id} has a string that is not UTF-8; skipped"),
            BadData::NotUtf8Field { id, field, kept } => {
                let what = if *kept {
                    "kept with U+FFFD for its bad bytes"
                } else {
                    "not used"
                };
                write!(f, "{field} of {id} is not UTF-8; {what}")
            }
            BadData::RefusedPath { id, detail } | BadData::ReadTimedOut { id, detail } => write!(f, "{id}: {detail}"),
        }
    }
}

fn container_state(id: &str, value: i32, bad: &mut Vec<BadData>) -> RuntimeContainerState {
    match cri::ContainerState::try_from(value) {
        Ok(cri::ContainerState::ContainerCreated) => RuntimeContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => RuntimeContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => RuntimeContainerState::Exited,
        Ok(cri::ContainerState::ContainerUnknown) => RuntimeContainerState::Unknown,
        Err(_) => {
            bad.push(BadData::UnknownState {
                id: id.to_owned(),
                value,
            });
            RuntimeContainerState::Unknown
        }
    }
}

fn sandbox_state(id: &str, value: i32, bad: &mut Vec<BadData>) -> SandboxState {
    match cri::PodSandboxState::try_from(value) {
        Ok(cri::PodSandboxState::SandboxReady) => SandboxState::Ready,
        Ok(cri::PodSandboxState::SandboxNotready) => SandboxState::NotReady,
        Err(_) => {
            bad.push(BadData::UnknownState {
                id: id.to_owned(),
                value,
            });
            SandboxState::Unknown
        }
    }
}

/// A sandbox in the kubelet's container vocabulary: READY runs, NOTREADY has exited.
pub fn sandbox_as_container_state(state: SandboxState) -> RuntimeContainerState {
    match state {
        SandboxState::Ready => RuntimeContainerState::Running,
        SandboxState::NotReady => RuntimeContainerState::Exited,
        SandboxState::Unknown => RuntimeContainerState::Unknown,
    }
}

/// CRI nanoseconds to a time; 0 means unset.
pub fn nanos_to_time(id: &str, nanos: i64, bad: &mut Vec<BadData>) -> Option<SystemTime> {
    match nanos {
        0 => None,
        n if n < 0 => {
            bad.push(BadData::BadTimestamp {
                id: id.to_owned(),
                value: n,
            });
            None
        }
        n => UNIX_EPOCH.checked_add(Duration::from_nanos(n as u64)),
    }
}

fn take_label(labels: &mut HashMap<String, String>, key: &str) -> String {
    labels.remove(key).unwrap_or_default()
}

impl From<cri::PodSandbox> for ListedSandbox<'static> {
    fn from(s: cri::PodSandbox) -> Self {
        let meta = s.metadata.unwrap_or_default();
        ListedSandbox {
            id: s.id.into(),
            uid: meta.uid.into(),
            name: meta.name.into(),
            namespace: meta.namespace.into(),
            attempt: meta.attempt,
            state: s.state,
            created_at: s.created_at,
        }
    }
}

impl From<cri::Container> for ListedContainer<'static> {
    fn from(mut c: cri::Container) -> Self {
        let meta = c.metadata.take().unwrap_or_default();
        ListedContainer {
            pod_uid: take_label(&mut c.labels, LABEL_POD_UID).into(),
            pod_name: take_label(&mut c.labels, LABEL_POD_NAME).into(),
            pod_namespace: take_label(&mut c.labels, LABEL_POD_NAMESPACE).into(),
            container_name: take_label(&mut c.labels, LABEL_CONTAINER_NAME).into(),
            id: c.id.into(),
            sandbox_id: c.pod_sandbox_id.into(),
            name: meta.name.into(),
            attempt: meta.attempt,
            state: c.state,
            created_at: c.created_at,
        }
    }
}

/// Group a relist's sandboxes and containers into pods, as `kuberuntime.GetPods(all=true)` does:
/// sandboxes by their metadata uid, containers by their `io.kubernetes.pod.uid` label. A container
/// whose pod has no sandbox still makes a pod entry. Pods come out sorted by uid, and each pod's
/// containers and sandboxes by id: runtimes list in the order of their own maps, which can change
/// from one list to the next (containerd's does), and sorted records of a pod that did not change
/// compare item by item (`compute_events` relies on that to do nothing for quiet pods).
///
/// Items are added one at a time, every sandbox before any container, as the runtime listed them;
/// [`PodGrouping::into_pods`] gives the pods.
#[derive(Debug, Default)]
pub struct PodGrouping<'a> {
    pods: Vec<RuntimePod>,
    /// Where each pod uid's entry is in `pods`.
    index: HashMap<Cow<'a, str>, usize>,
    /// Every non-empty id added so far, skipped or not: an id seen again is a duplicate (the
    /// first occurrence wins). Ids and uids listed from an answer are borrowed from it, not copied.
    seen: HashSet<Cow<'a, str>>,
}

impl<'a> PodGrouping<'a> {
    /// Room for `pods` pods and `items` sandboxes and containers.
    pub fn with_capacity(pods: usize, items: usize) -> Self {
        PodGrouping {
            pods: Vec::with_capacity(pods),
            index: HashMap::with_capacity(pods),
            seen: HashSet::with_capacity(items),
        }
    }

    /// Whether `id` was added before; records it if not. An empty id is never a duplicate.
    #[expect(clippy::ptr_arg, reason = "cloned as a Cow: a borrowed id stays borrowed")]
    fn seen_before(&mut self, id: &Cow<'a, str>) -> bool {
        !id.is_empty() && !self.seen.insert(id.clone())
    }

    /// The pod entry of `uid`, made if this is its first item.
    #[expect(clippy::ptr_arg, reason = "cloned as a Cow: a borrowed uid stays borrowed")]
    fn pod(&mut self, uid: &Cow<'a, str>) -> &mut RuntimePod {
        let at = match self.index.get(uid.as_ref()) {
            Some(&at) => at,
            None => {
                self.pods.push(RuntimePod {
                    id: uid.clone().into_owned(),
                    ..RuntimePod::default()
                });
                self.index.insert(uid.clone(), self.pods.len() - 1);
                self.pods.len() - 1
            }
        };
        &mut self.pods[at]
    }

    /// Add a listed sandbox to its pod. One without an id or a metadata uid, or with an id seen
    /// before, is reported in `bad` and skipped.
    pub fn add_sandbox(&mut self, sandbox: ListedSandbox<'a>, bad: &mut Vec<BadData>) {
        let duplicate = self.seen_before(&sandbox.id);
        if sandbox.id.is_empty() {
            bad.push(BadData::EmptyId);
            return;
        }
        if sandbox.uid.is_empty() {
            bad.push(BadData::MissingSandboxMetadata {
                sandbox_id: sandbox.id.into_owned(),
            });
            return;
        }
        if duplicate {
            bad.push(BadData::DuplicateId {
                id: sandbox.id.into_owned(),
            });
            return;
        }
        let state = sandbox_as_container_state(sandbox_state(&sandbox.id, sandbox.state, bad));
        let pod = self.pod(&sandbox.uid);
        let listed = RuntimeContainer {
            id: sandbox.id.into_owned(),
            sandbox_id: String::new(),
            name: String::new(),
            state,
            created_at: sandbox.created_at,
            attempt: sandbox.attempt,
        };
        // The newest sandbox names the pod, as in the kubelet.
        if pod.name.is_empty() || pod.sandboxes.iter().all(|s| newest_sandbox_first(&listed, s).is_le()) {
            pod.name = sandbox.name.into_owned();
            pod.namespace = sandbox.namespace.into_owned();
        }
        pod.sandboxes.push(listed);
    }

    /// Add a listed container to its pod. One without an id or a pod-uid label, or with an id
    /// seen before, is reported in `bad` and skipped.
    pub fn add_container(&mut self, container: ListedContainer<'a>, bad: &mut Vec<BadData>) {
        let duplicate = self.seen_before(&container.id);
        if container.id.is_empty() {
            bad.push(BadData::EmptyId);
            return;
        }
        if container.pod_uid.is_empty() {
            bad.push(BadData::MissingPodUid {
                container_id: container.id.into_owned(),
            });
            return;
        }
        if duplicate {
            bad.push(BadData::DuplicateId {
                id: container.id.into_owned(),
            });
            return;
        }
        let state = container_state(&container.id, container.state, bad);
        let name = if container.container_name.is_empty() {
            container.name
        } else {
            container.container_name
        };
        let pod = self.pod(&container.pod_uid);
        if pod.name.is_empty() {
            pod.name = container.pod_name.into_owned();
            pod.namespace = container.pod_namespace.into_owned();
        }
        pod.containers.push(RuntimeContainer {
            id: container.id.into_owned(),
            sandbox_id: container.sandbox_id.into_owned(),
            name: name.into_owned(),
            state,
            created_at: container.created_at,
            attempt: container.attempt,
        });
    }

    /// The pods, sorted by uid, each pod's containers and sandboxes sorted by id.
    pub fn into_pods(self) -> Vec<RuntimePod> {
        let mut pods = self.pods;
        pods.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        for pod in &mut pods {
            // Ids are unique by now (duplicates were skipped).
            pod.containers.sort_unstable_by(|a, b| a.id.cmp(&b.id));
            pod.sandboxes.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
        pods
    }
}

/// Convert one `PodSandboxStatus`.
pub fn sandbox_status(status: cri::PodSandboxStatus, bad: &mut Vec<BadData>) -> SandboxStatus {
    let state = sandbox_state(&status.id, status.state, bad);
    let mut ips = Vec::new();
    let no_primary_ip = status.network.as_ref().is_some_and(|n| n.ip.is_empty());
    if let Some(network) = status.network {
        if !network.ip.is_empty() {
            ips.push(network.ip);
        }
        ips.extend(
            network
                .additional_ips
                .into_iter()
                .map(|ip| ip.ip)
                .filter(|ip| !ip.is_empty()),
        );
    }
    let host_network = status
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
    SandboxStatus {
        id: status.id,
        state,
        created_at: status.created_at,
        attempt: status.metadata.map(|m| m.attempt).unwrap_or_default(),
        ips,
        host_network,
        no_primary_ip,
        runtime_handler: status.runtime_handler,
    }
}

/// Convert one CRI `ContainerStatus`. The restart count comes from the kubelet's annotation when it is
/// there and parses, else from the CRI metadata attempt.
pub fn container_status(mut status: cri::ContainerStatus, bad: &mut Vec<BadData>) -> RuntimeContainerStatus {
    let state = container_state(&status.id, status.state, bad);
    let meta = status.metadata.take().unwrap_or_default();
    let mut name = take_label(&mut status.labels, LABEL_CONTAINER_NAME);
    if name.is_empty() {
        name = meta.name;
    }
    let restart_count = status
        .annotations
        .get(ANNOTATION_RESTART_COUNT)
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(meta.attempt);
    RuntimeContainerStatus {
        created_at: nanos_to_time(&status.id, status.created_at, bad),
        started_at: nanos_to_time(&status.id, status.started_at, bad),
        finished_at: nanos_to_time(&status.id, status.finished_at, bad),
        id: status.id,
        sandbox_id: String::new(),
        name,
        state,
        exit_code: status.exit_code,
        image: status.image.map(|i| i.image).unwrap_or_default(),
        image_id: if status.image_id.is_empty() {
            status.image_ref
        } else {
            status.image_id
        },
        reason: status.reason,
        message: status.message.into(),
        restart_count,
        resources: status.resources.as_ref().and_then(container_resources),
        user: status.user.map(|u| RuntimeContainerUser {
            linux: u.linux.map(|l| RuntimeLinuxContainerUser {
                uid: l.uid,
                gid: l.gid,
                supplemental_groups: l.supplemental_groups,
            }),
        }),
        // Set from the runtime's answer by the caller (`stop_signal`): CRI's message of the
        // k8s-cri crate predates the field.
        stop_signal: None,
        // Set by the status read, which knows whether the container exited (`termination`).
        termination_source: None,
    }
}

/// The API's names of CRI's `Signal` values, by number from 1 (`SIGNAL_SIGABRT`) to 65
/// (`SIGNAL_SIGRTMAX`): cri-api v0.37.2 api.proto and the kubelet's `signalNameToRuntimeEnum`
/// (pkg/kubelet/kuberuntime/helpers.go), whose keys are what `stopSignal` holds. 0 is
/// `SIGNAL_RUNTIME_DEFAULT`.
const SIGNALS: [&str; 65] = [
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPOLL",
    "SIGPROF",
    "SIGPWR",
    "SIGQUIT",
    "SIGSEGV",
    "SIGSTKFLT",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMAX-14",
    "SIGRTMAX-13",
    "SIGRTMAX-12",
    "SIGRTMAX-11",
    "SIGRTMAX-10",
    "SIGRTMAX-9",
    "SIGRTMAX-8",
    "SIGRTMAX-7",
    "SIGRTMAX-6",
    "SIGRTMAX-5",
    "SIGRTMAX-4",
    "SIGRTMAX-3",
    "SIGRTMAX-2",
    "SIGRTMAX-1",
    "SIGRTMAX",
];

/// A container's stop signal as CRI's `Signal` number gives it, by its API name; None for
/// `SIGNAL_RUNTIME_DEFAULT` (0: the runtime does not say) and, as bad data, for a number outside
/// the enum (never a guess: the kubelet would write an empty name there).
pub fn stop_signal(id: &str, value: i32, bad: &mut Vec<BadData>) -> Option<&'static str> {
    if value == 0 {
        return None;
    }
    let name = value
        .checked_sub(1)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| SIGNALS.get(i));
    if name.is_none() {
        bad.push(BadData::UnknownSignal {
            id: id.to_owned(),
            value,
        });
    }
    name.copied()
}

/// CFS shares worth one CPU, and the least the kernel accepts (`cm.SharesPerCPU`, `cm.MinShares`).
const SHARES_PER_CPU: i64 = 1024;
const MIN_SHARES: i64 = 2;

/// `sharesToMilliCPU` (kuberuntime, Linux): shares below the minimum mean no request.
pub fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    // Both positive: a ceiling division.
    let milli = (i128::from(shares) * 1000 + i128::from(SHARES_PER_CPU) - 1) / i128::from(SHARES_PER_CPU);
    i64::try_from(milli).unwrap_or(i64::MAX)
}

/// `quotaToMilliCPU` (kuberuntime, Linux): a quota of -1 is no limit. `period` must be positive.
pub fn quota_to_milli_cpu(quota: i64, period: i64) -> i64 {
    if quota == -1 || period <= 0 {
        return 0;
    }
    let milli = i128::from(quota) * 1000 / i128::from(period);
    i64::try_from(milli).unwrap_or(if milli < 0 { i64::MIN } else { i64::MAX })
}

/// `toKubeContainerResources` (Linux): the CPU request from the shares, the CPU limit from quota
/// and period, the memory limit; None when the runtime reports none of them.
fn container_resources(resources: &cri::ContainerResources) -> Option<RuntimeContainerResources> {
    let linux = resources.linux.as_ref()?;
    let positive = |v: i64| (v > 0).then_some(v);
    let out = RuntimeContainerResources {
        cpu_limit_milli: if linux.cpu_period > 0 {
            positive(quota_to_milli_cpu(linux.cpu_quota, linux.cpu_period))
        } else {
            None
        },
        cpu_request_milli: if linux.cpu_shares > 0 {
            positive(shares_to_milli_cpu(linux.cpu_shares))
        } else {
            None
        },
        memory_limit_bytes: positive(linux.memory_limit_in_bytes),
    };
    (out != RuntimeContainerResources::default()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole lists grouped, as a relist groups them one item at a time.
    fn group_pods<'a, S: Into<ListedSandbox<'a>>, C: Into<ListedContainer<'a>>>(
        sandboxes: impl IntoIterator<Item = S>,
        containers: impl IntoIterator<Item = C>,
        bad: &mut Vec<BadData>,
    ) -> Vec<RuntimePod> {
        let (sandboxes, containers) = (sandboxes.into_iter(), containers.into_iter());
        let mut grouping = PodGrouping::with_capacity(
            sandboxes.size_hint().0,
            sandboxes.size_hint().0 + containers.size_hint().0,
        );
        for sandbox in sandboxes {
            grouping.add_sandbox(sandbox.into(), bad);
        }
        for container in containers {
            grouping.add_container(container.into(), bad);
        }
        grouping.into_pods()
    }

    fn sandbox(id: &str, uid: &str, state: i32, created_at: i64) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: format!("pod-{uid}"),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state,
            created_at,
            ..Default::default()
        }
    }

    fn container(id: &str, uid: Option<&str>, name: &str, state: i32) -> cri::Container {
        let mut labels = HashMap::new();
        if let Some(uid) = uid {
            labels.insert(LABEL_POD_UID.to_owned(), uid.to_owned());
            labels.insert(LABEL_POD_NAME.to_owned(), format!("pod-{uid}"));
            labels.insert(LABEL_POD_NAMESPACE.to_owned(), "ns".to_owned());
        }
        labels.insert(LABEL_CONTAINER_NAME.to_owned(), name.to_owned());
        cri::Container {
            id: id.into(),
            pod_sandbox_id: "s".into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 2,
            }),
            state,
            labels,
            ..Default::default()
        }
    }

    #[test]
    fn groups_sandboxes_and_containers_by_pod_uid() {
        let mut bad = Vec::new();
        let pods = group_pods(
            vec![sandbox("s1", "u1", 0, 1), sandbox("s2", "u2", 1, 1)],
            vec![
                container("c1", Some("u1"), "app", 1),
                container("c3", Some("u3"), "orphan", 2),
            ],
            &mut bad,
        );
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(pods.len(), 3);
        assert_eq!(pods[0].id, "u1");
        assert_eq!(pods[0].sandboxes[0].state, RuntimeContainerState::Running);
        assert_eq!(pods[0].containers[0].name, "app");
        assert_eq!(pods[0].containers[0].attempt, 2);
        assert_eq!(pods[1].sandboxes[0].state, RuntimeContainerState::Exited);
        // A container whose pod has no sandbox still makes a pod, named from its labels.
        assert_eq!(pods[2].id, "u3");
        assert_eq!(pods[2].name, "pod-u3");
        assert!(pods[2].sandboxes.is_empty());
    }

    #[test]
    fn a_pods_containers_and_sandboxes_come_out_sorted_by_id() {
        let mut bad = Vec::new();
        // In the order a runtime's map may list them, different from one list to the next.
        let listed = |order: [usize; 3]| {
            let all = [
                container("c2", Some("u1"), "b", 1),
                container("c10", Some("u1"), "c", 1),
                container("c1", Some("u1"), "a", 1),
            ];
            order.map(|i| all[i].clone())
        };
        let first = group_pods(
            vec![sandbox("s2", "u1", 0, 2), sandbox("s1", "u1", 1, 1)],
            listed([0, 1, 2]),
            &mut bad,
        );
        let second = group_pods(
            vec![sandbox("s1", "u1", 1, 1), sandbox("s2", "u1", 0, 2)],
            listed([2, 0, 1]),
            &mut bad,
        );
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(first, second);
        let ids = |c: &[RuntimeContainer]| c.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&first[0].containers), ["c1", "c10", "c2"]);
        assert_eq!(ids(&first[0].sandboxes), ["s1", "s2"]);
    }

    #[test]
    fn bad_data_is_reported_and_skipped() {
        let mut bad = Vec::new();
        let no_meta = cri::PodSandbox {
            id: "s9".into(),
            ..Default::default()
        };
        let pods = group_pods(
            vec![
                sandbox("s1", "u1", 0, 1),
                sandbox("s1", "u1", 0, 1),
                no_meta,
                sandbox("", "u1", 0, 1),
            ],
            vec![
                container("c1", None, "nolabel", 1),
                container("c2", Some("u1"), "weird", 42),
                container("s1", Some("u1"), "clash", 1),
            ],
            &mut bad,
        );
        let kinds: Vec<_> = bad.iter().map(BadData::kind).collect();
        assert_eq!(
            kinds,
            [
                "duplicate_id",
                "missing_sandbox_metadata",
                "empty_id",
                "missing_pod_uid",
                "unknown_state",
                "duplicate_id"
            ]
        );
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].sandboxes.len(), 1);
        assert_eq!(pods[0].containers.len(), 1);
        assert_eq!(pods[0].containers[0].state, RuntimeContainerState::Unknown);
        for b in &bad {
            assert!(!b.to_string().is_empty());
        }
    }

    #[test]
    fn newest_sandbox_names_the_pod() {
        let mut bad = Vec::new();
        let mut old = sandbox("s1", "u1", 1, 1);
        old.metadata.as_mut().unwrap().name = "old".into();
        let mut new = sandbox("s2", "u1", 0, 5);
        new.metadata.as_mut().unwrap().name = "new".into();
        let pods = group_pods(vec![new.clone(), old.clone()], Vec::<cri::Container>::new(), &mut bad);
        assert_eq!(pods[0].name, "new");
        let pods = group_pods(vec![old, new], Vec::<cri::Container>::new(), &mut bad);
        assert_eq!(pods[0].name, "new");
    }

    #[test]
    fn the_higher_attempt_names_the_pod_whatever_its_creation() {
        // podSandboxByCreatedThenID: the attempt first, the creation time within one attempt.
        let mut bad = Vec::new();
        let mut retried = sandbox("s1", "u1", 1, 1);
        retried.metadata.as_mut().unwrap().name = "retried".into();
        retried.metadata.as_mut().unwrap().attempt = 1;
        let mut first = sandbox("s2", "u1", 0, 5);
        first.metadata.as_mut().unwrap().name = "first".into();
        for order in [vec![first.clone(), retried.clone()], vec![retried, first]] {
            let pods = group_pods(order, Vec::<cri::Container>::new(), &mut bad);
            assert_eq!(pods[0].name, "retried");
            let newest: Vec<&str> = pods[0].sandboxes_newest_first().iter().map(|s| s.id.as_str()).collect();
            assert_eq!(newest, ["s1", "s2"]);
        }
    }

    #[test]
    fn cpu_units_as_the_kubelet_reads_them() {
        // kuberuntime's helpers_linux_test.go: shares and quota back to millicores.
        for (shares, milli) in [
            (0, 0),
            (1, 0),
            (2, 2),
            (3, 3),
            (102, 100),
            (1024, 1000),
            (1025, 1001),
            (262144, 256000),
        ] {
            assert_eq!(shares_to_milli_cpu(shares), milli, "shares {shares}");
        }
        for (quota, period, milli) in [
            (-1, 100000, 0),
            (10000, 100000, 100),
            (50000, 100000, 500),
            (250000, 100000, 2500),
            (1000, 100000, 10),
            (5, 0, 0),
        ] {
            assert_eq!(quota_to_milli_cpu(quota, period), milli, "quota {quota}/{period}");
        }
        // Untrusted values do not overflow.
        assert_eq!(shares_to_milli_cpu(i64::MAX), 9_007_199_254_740_992_000);
        assert_eq!(quota_to_milli_cpu(i64::MAX, 1), i64::MAX);
        assert_eq!(quota_to_milli_cpu(i64::MIN, 1), i64::MIN);
    }

    /// CRI's `Signal` by number, to the names the API and the kubelet's `signalNameToRuntimeEnum`
    /// use: the ends of each run of the enum, the real-time ones with their offsets.
    #[test]
    fn stop_signals_by_number() {
        let mut bad = Vec::new();
        for (value, want) in [
            (1, Some("SIGABRT")),
            (13, Some("SIGKILL")),
            (18, Some("SIGQUIT")),
            (23, Some("SIGTERM")),
            (34, Some("SIGXFSZ")),
            (35, Some("SIGRTMIN")),
            (36, Some("SIGRTMIN+1")),
            (50, Some("SIGRTMIN+15")),
            (51, Some("SIGRTMAX-14")),
            (64, Some("SIGRTMAX-1")),
            (65, Some("SIGRTMAX")),
            (0, None),
        ] {
            assert_eq!(stop_signal("c1", value, &mut bad), want, "{value}");
        }
        assert!(bad.is_empty(), "{bad:?}");
        for value in [66, -1, i32::MIN, i32::MAX] {
            assert_eq!(stop_signal("c1", value, &mut bad), None, "{value}");
        }
        assert_eq!(bad.len(), 4);
        assert!(
            bad.iter().all(|b| b.kind() == "unknown_signal" && b.id() == "c1"),
            "{bad:?}"
        );
        assert_eq!(
            bad[0].to_string(),
            "c1 has stop signal 66, which is not a CRI v1 value; left out"
        );
    }

    #[test]
    fn resources_and_user_from_the_container_status() {
        let mut bad = Vec::new();
        let linux = |shares, quota, period, memory| cri::ContainerResources {
            linux: Some(cri::LinuxContainerResources {
                cpu_shares: shares,
                cpu_quota: quota,
                cpu_period: period,
                memory_limit_in_bytes: memory,
                ..Default::default()
            }),
            windows: None,
        };
        let status =
            |resources: Option<cri::ContainerResources>, user: Option<cri::ContainerUser>| cri::ContainerStatus {
                id: "c1".into(),
                resources,
                user,
                ..Default::default()
            };
        let got = container_status(status(Some(linux(102, 20000, 100000, 64 << 20)), None), &mut bad);
        assert_eq!(
            got.resources,
            Some(RuntimeContainerResources {
                cpu_request_milli: Some(100),
                cpu_limit_milli: Some(200),
                memory_limit_bytes: Some(64 << 20),
            })
        );
        assert_eq!(got.user, None);
        // No quota (-1), the minimum shares, no memory limit: nothing to report.
        let got = container_status(status(Some(linux(2, -1, 100000, 0)), None), &mut bad);
        assert_eq!(got.resources.and_then(|r| r.cpu_limit_milli), None);
        let got = container_status(status(Some(linux(0, 0, 0, 0)), None), &mut bad);
        assert_eq!(got.resources, None);
        let got = container_status(status(Some(cri::ContainerResources::default()), None), &mut bad);
        assert_eq!(got.resources, None);
        // A quota without a period is not a limit; negative values are not limits either.
        let got = container_status(status(Some(linux(-5, 50000, 0, -1)), None), &mut bad);
        assert_eq!(got.resources, None);

        let user = cri::ContainerUser {
            linux: Some(cri::LinuxContainerUser {
                uid: 1000,
                gid: 3000,
                supplemental_groups: vec![3000, 4000],
            }),
        };
        let got = container_status(status(None, Some(user)), &mut bad);
        assert_eq!(
            got.user,
            Some(RuntimeContainerUser {
                linux: Some(RuntimeLinuxContainerUser {
                    uid: 1000,
                    gid: 3000,
                    supplemental_groups: vec![3000, 4000],
                })
            })
        );
        let got = container_status(status(None, Some(cri::ContainerUser { linux: None })), &mut bad);
        assert_eq!(got.user, Some(RuntimeContainerUser { linux: None }));
        assert!(bad.is_empty());
    }

    #[test]
    fn container_status_conversion() {
        let mut bad = Vec::new();
        let mut annotations = HashMap::new();
        annotations.insert(ANNOTATION_RESTART_COUNT.to_owned(), "7".to_owned());
        let status = cri::ContainerStatus {
            id: "c1".into(),
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 1,
            }),
            state: cri::ContainerState::ContainerExited as i32,
            created_at: 1_000_000_000,
            started_at: 2_000_000_000,
            finished_at: -5,
            exit_code: 3,
            reason: "Error".into(),
            image_ref: "sha256:abc".into(),
            annotations,
            ..Default::default()
        };
        let with_id = cri::ContainerStatus {
            image_id: "sha256:def".into(),
            ..status.clone()
        };
        let s = container_status(status, &mut bad);
        // The kubelet's ImageID: the runtime's image_id where it fills one (containerd 2.3 on),
        // else its image_ref.
        assert_eq!(s.image_id, "sha256:abc");
        assert_eq!(container_status(with_id, &mut Vec::new()).image_id, "sha256:def");
        assert_eq!(s.name, "app");
        assert_eq!(s.restart_count, 7);
        assert_eq!(s.exit_code, 3);
        assert_eq!(s.state, RuntimeContainerState::Exited);
        assert_eq!(s.started_at, Some(UNIX_EPOCH + Duration::from_secs(2)));
        assert_eq!(s.finished_at, None);
        assert_eq!(
            bad,
            vec![BadData::BadTimestamp {
                id: "c1".into(),
                value: -5
            }]
        );

        // Without the annotation (or with garbage in it) the CRI attempt is the restart count.
        let status = cri::ContainerStatus {
            id: "c2".into(),
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 4,
            }),
            annotations: [(ANNOTATION_RESTART_COUNT.to_owned(), "x".to_owned())].into(),
            ..Default::default()
        };
        assert_eq!(container_status(status, &mut bad).restart_count, 4);
    }

    #[test]
    fn sandbox_status_ips_and_host_network() {
        let mut bad = Vec::new();
        let status = cri::PodSandboxStatus {
            id: "s1".into(),
            state: cri::PodSandboxState::SandboxReady as i32,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.1.0.2".into(),
                additional_ips: vec![cri::PodIp { ip: "fd00::2".into() }],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                }),
            }),
            ..Default::default()
        };
        let s = sandbox_status(status, &mut bad);
        assert_eq!(s.ips, vec!["10.1.0.2", "fd00::2"]);
        assert!(s.host_network);
        assert_eq!(s.state, SandboxState::Ready);
        let s = sandbox_status(
            cri::PodSandboxStatus {
                id: "x".into(),
                state: 9,
                ..Default::default()
            },
            &mut bad,
        );
        assert_eq!(s.state, SandboxState::Unknown);
        assert!(!s.host_network);
    }
}
