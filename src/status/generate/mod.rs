//! Status generation: from the pod ([`ApiPod`]: spec, and the status the apiserver holds) and the
//! runtime status in the cache, compute the kubelet-equivalent API `PodStatus` (`generateAPIPodStatus`,
//! `getPhase`, `convertToAPIContainerStatuses`, `status/generate.go`). Pure: no I/O, time is a parameter.
//!
//! Where plegd differs, on purpose: it has no prober. A running container is ready (and started)
//! unless the pod declares a readiness (startup) probe for it; then plegd keeps whatever the status
//! already says for that same container id, since readiness belongs to whoever runs the probe, and
//! reports false for a new container. It has no image-pull or crash-loop back-off reasons either
//! (it does not start containers), so a container with no runtime status yet is waiting with
//! ContainerCreating / PodInitializing.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerRestartRule, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus, VolumeMount, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resources;
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus, SandboxState};
use crate::pod::{ApiContainer, ApiPod};

pub const PENDING: &str = "Pending";
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

pub const POD_SCHEDULED: &str = "PodScheduled";
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
pub const INITIALIZED: &str = "Initialized";
pub const CONTAINERS_READY: &str = "ContainersReady";
pub const READY: &str = "Ready";
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// plegd's own condition: every regular container is running.
pub const CONTAINERS_RUNNING: &str = "plegd.io/ContainersRunning";

pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// A pod restarting all its containers after one exited under a `RestartAllContainers` rule
/// (RestartAllContainersOnContainerExits, beta and on in 1.37).
pub const ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

/// Conditions the kubelet owns (`PodConditionsByKubelet`, 1.37 with its default gates); every other
/// type belongs to someone else. The resize conditions are the kubelet's own record of resizes it
/// is making: plegd resizes nothing, so in `full` mode it writes none and keeps none.
pub const KUBELET_CONDITIONS: [&str; 8] = [
    POD_SCHEDULED,
    POD_READY_TO_START_CONTAINERS,
    INITIALIZED,
    CONTAINERS_READY,
    READY,
    POD_RESIZE_PENDING,
    POD_RESIZE_IN_PROGRESS,
    ALL_CONTAINERS_RESTARTING,
];

/// PodReadyToStartContainers False: the reason, and the message per cause `PodSandboxChanged`
/// finds (pkg/kubelet/types/constants.go, 1.37).
pub const POD_SANDBOX_NOT_READY: &str = "PodSandboxNotReady";
pub const NO_POD_SANDBOX: &str = "no pod sandbox exists";
pub const MULTIPLE_SANDBOXES: &str = "multiple pod sandboxes are ready and need to be reconciled";
pub const SANDBOX_NOT_READY: &str = "pod sandbox is not ready";
pub const NETWORK_NAMESPACE_MODE_CHANGED: &str = "network namespace mode changed and sandbox needs to be recreated";
pub const NO_IP_ADDRESS: &str = "pod sandbox has no IP address";

/// The message of a container the kubelet removed to restart all containers.
pub const RESTARTING_ALL_CONTAINERS_MESSAGE: &str = "The container is removed because RestartAllContainers in place";

/// Termination messages of all containers together stay within this many bytes.
pub const MAX_TERMINATION_MESSAGES: usize = 12 * 1024;

const CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// Everything status generation looks at.
pub struct StatusInput<'a> {
    /// The pod as the apiserver has it: spec, and the status last written.
    pub pod: &'a ApiPod,
    /// The runtime status from the cache.
    pub runtime: &'a RuntimePodStatus,
    /// The runtime's name, the scheme of container ids (`containerd://…`).
    pub runtime_name: &'a str,
    /// The node's IPs, primary first.
    pub node_ips: &'a [String],
    /// The runtime handlers that support recursive read-only mounts; None when unknown.
    pub recursive_read_only_handlers: Option<&'a [String]>,
    /// Write containers' `stopSignal`, as a kubelet with the ContainerStopSignals gate on does.
    pub stop_signals: bool,
    pub now: SystemTime,
}

/// A time with whole seconds, as the API shows it.
pub fn api_time(t: SystemTime) -> Time {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    Time(k8s_openapi::jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

/// A time the runtime reported, as `convertContainerStatus` writes it: `time.Unix(0, t)`, so a
/// runtime that reports none (0, or a value refused as bad data) gives the Unix epoch, not no time.
fn runtime_time(t: Option<SystemTime>) -> Time {
    api_time(t.unwrap_or(SystemTime::UNIX_EPOCH))
}

fn find<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

fn running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref())
}

fn waiting(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.waiting.is_some())
}

fn last_terminated(s: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref())
}

/// The reason the kubelet gives a container it removed to restart all of a pod's containers
/// (RestartAllContainersOnContainerExits): such a container restarts, whatever its exit code.
pub const RESTARTING_ALL_CONTAINERS: &str = "RestartingAllContainers";

/// `ContainerShouldRestart` (pkg/api/v1/pod/util.go, ContainerRestartRules): with a restart
/// policy of its own, a container's first restart rule that matches the exit code decides
/// (`Restart` and `RestartAllContainers` both restart it), then its own policy; without one, the
/// pod's (`Always` when unset).
pub fn container_should_restart(container: &ApiContainer, pod_policy: Option<&str>, exit_code: i32) -> bool {
    if let Some(policy) = container.restart_policy.as_deref() {
        if let Some(rule) = matching_restart_rule(container, exit_code)
            && matches!(rule.action.as_str(), "Restart" | "RestartAllContainers")
        {
            return true;
        }
        match policy {
            "Always" => return true,
            "OnFailure" => return exit_code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match pod_policy {
        Some("OnFailure") => exit_code != 0,
        Some("Never") => false,
        _ => true,
    }
}

/// `FindMatchingContainerRestartRule`: the first rule whose exit codes match (`In`: the code is
/// listed; `NotIn`: it is not). Rules without exit codes or with another operator never match.
fn matching_restart_rule(container: &ApiContainer, exit_code: i32) -> Option<&ContainerRestartRule> {
    container.restart_policy_rules.iter().find(|rule| {
        let Some(codes) = &rule.exit_codes else { return false };
        let listed = codes.values.iter().flatten().any(|c| *c == exit_code);
        match codes.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        }
    })
}

/// Whether a container that ended as `t` restarts: by its restart rules and policies, or because
/// the kubelet removed it to restart all containers.
fn restartable(container: &ApiContainer, pod: &ApiPod, t: &ContainerStateTerminated) -> bool {
    container_should_restart(container, pod.spec.restart_policy.as_deref(), t.exit_code)
        || t.reason.as_deref() == Some(RESTARTING_ALL_CONTAINERS)
}

/// `getPhase` (kubelet 1.37, ContainerRestartRules on). `statuses` holds regular and init
/// container statuses. A regular init container that failed and does not restart fails the pod;
/// once every regular container stopped, the pod runs on while one of them restarts.
pub fn get_phase(
    pod: &ApiPod,
    statuses: &[ContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> &'static str {
    let init = &pod.spec.init_containers;
    let containers = &pod.spec.containers;

    let (mut pending_restartable_init, mut pending_regular_init, mut failed_init_not_restartable) = (0, 0, 0);
    for c in init.iter().filter(|c| !c.is_restartable_init()) {
        match find(statuses, &c.name) {
            None => pending_regular_init += 1,
            Some(s) if running(s) => pending_regular_init += 1,
            Some(s) if let Some(t) = terminated(s) => {
                if t.exit_code != 0 && !restartable(c, pod, t) {
                    failed_init_not_restartable += 1;
                }
            }
            Some(s) if waiting(s) => match last_terminated(s) {
                Some(t) if t.exit_code != 0 && !restartable(c, pod, t) => failed_init_not_restartable += 1,
                Some(_) => {}
                None => pending_regular_init += 1,
            },
            Some(_) => pending_regular_init += 1,
        }
    }

    let (mut unknown, mut running_n, mut waiting_n, mut stopped, mut stopped_not_restartable, mut succeeded) =
        (0, 0, 0, 0, 0, 0);
    for c in init.iter().filter(|c| c.is_restartable_init()) {
        match find(statuses, &c.name) {
            None => unknown += 1,
            Some(s) if running(s) => {
                if s.started != Some(true) {
                    pending_restartable_init += 1;
                }
                running_n += 1;
            }
            Some(s) if terminated(s).is_some() => {}
            Some(s) if waiting(s) => {
                if last_terminated(s).is_none() {
                    pending_restartable_init += 1;
                    waiting_n += 1;
                }
            }
            Some(_) => {
                pending_restartable_init += 1;
                unknown += 1;
            }
        }
    }
    for c in containers {
        match find(statuses, &c.name) {
            None => unknown += 1,
            Some(s) if running(s) => running_n += 1,
            Some(s) if let Some(t) = terminated(s) => {
                stopped += 1;
                if !restartable(c, pod, t) {
                    stopped_not_restartable += 1;
                }
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            Some(s) if waiting(s) => match last_terminated(s) {
                Some(t) => {
                    stopped += 1;
                    if !restartable(c, pod, t) {
                        stopped_not_restartable += 1;
                    }
                }
                None => waiting_n += 1,
            },
            Some(_) => unknown += 1,
        }
    }

    if failed_init_not_restartable > 0 {
        return FAILED;
    }
    if pending_regular_init > 0 || (pending_restartable_init > 0 && !pod_has_initialized) || waiting_n > 0 {
        return PENDING;
    }
    if running_n > 0 && unknown == 0 {
        return RUNNING;
    }
    if running_n == 0 && stopped > 0 && unknown == 0 {
        // A terminal pod's containers do not restart, whatever the policy (a static pod's phase
        // is not made terminal here: upstream's TODO kubernetes#116484; plegd sees a static pod
        // as its mirror pod).
        if pod_is_terminal && !is_mirror_pod(pod) {
            return if stopped == succeeded { SUCCEEDED } else { FAILED };
        }
        if stopped != stopped_not_restartable {
            // At least one container is restarting.
            return RUNNING;
        }
        return if stopped == succeeded { SUCCEEDED } else { FAILED };
    }
    PENDING
}

fn condition(type_: &str, status: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

/// Go's `%s` of a string slice: `[a b c]`.
fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

/// `GenerateContainersReadyCondition`.
pub fn containers_ready_condition(pod: &ApiPod, statuses: Option<&[ContainerStatus]>, phase: &str) -> PodCondition {
    let Some(statuses) = statuses else {
        return condition(CONTAINERS_READY, false, Some("UnknownContainerStatuses"), None);
    };
    let init = &pod.spec.init_containers;
    let (mut unknown, mut unready) = (Vec::new(), Vec::new());
    for c in init
        .iter()
        .filter(|c| c.is_restartable_init())
        .chain(&pod.spec.containers)
    {
        match find(statuses, &c.name) {
            Some(s) if !s.ready => unready.push(c.name.clone()),
            Some(_) => {}
            None => unknown.push(c.name.clone()),
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition(CONTAINERS_READY, false, Some("PodCompleted"), None);
    }
    if phase == FAILED {
        return condition(CONTAINERS_READY, false, Some("PodFailed"), None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_list(&unknown)));
    }
    if !unready.is_empty() {
        messages.push(format!("containers with unready status: {}", go_list(&unready)));
    }
    if messages.is_empty() {
        condition(CONTAINERS_READY, true, None, None)
    } else {
        condition(
            CONTAINERS_READY,
            false,
            Some("ContainersNotReady"),
            Some(messages.join(", ")),
        )
    }
}

/// `GeneratePodReadyCondition`: ContainersReady, then every readiness gate must be True.
pub fn ready_condition(
    pod: &ApiPod,
    conditions: &[PodCondition],
    statuses: Option<&[ContainerStatus]>,
    phase: &str,
) -> PodCondition {
    let containers_ready = containers_ready_condition(pod, statuses, phase);
    if containers_ready.status != "True" {
        return PodCondition {
            type_: READY.to_owned(),
            ..containers_ready
        };
    }
    let gates = &pod.spec.readiness_gates;
    let mut messages = Vec::new();
    for gate in gates {
        match conditions.iter().find(|c| &c.type_ == gate) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate \"{gate}\" does not exist."
            )),
            Some(c) if c.status != "True" => messages.push(format!(
                "the status of pod readiness gate \"{gate}\" is not \"True\", but {}",
                c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        condition(READY, true, None, None)
    } else {
        condition(READY, false, Some("ReadinessGatesNotReady"), Some(messages.join(", ")))
    }
}

/// `HasAnyRegularContainerStarted`: a regular container's state is running or terminated.
fn any_regular_container_started(pod: &ApiPod, statuses: &[ContainerStatus]) -> bool {
    pod.spec
        .containers
        .iter()
        .any(|c| find(statuses, &c.name).is_some_and(|s| running(s) || terminated(s).is_some()))
}

/// `HasAnyActiveRegularContainerStarted`: the active sandbox (the newest, while ready) has a
/// regular container, in any state. A pod whose sandbox was recreated initializes again.
pub fn any_active_regular_container_started(pod: &ApiPod, runtime: &RuntimePodStatus) -> bool {
    runtime
        .active_container_statuses()
        .any(|s| pod.spec.containers.iter().any(|c| c.name == s.name))
}

/// `GeneratePodInitializedCondition` (1.37): once the old status said Initialized, it stays so
/// (RestartAllContainersOnContainerExits: a pod restarting in place re-runs its init containers).
pub fn initialized_condition(
    pod: &ApiPod,
    old_conditions: &[PodCondition],
    statuses: Option<&[ContainerStatus]>,
    phase: &str,
) -> PodCondition {
    let init = &pod.spec.init_containers;
    // No statuses at all (nil upstream, not an empty list) with init containers to wait for.
    let statuses = match statuses {
        Some(statuses) => statuses,
        None if init.is_empty() => &[],
        None => return condition(INITIALIZED, false, Some("UnknownContainerStatuses"), None),
    };
    let (mut unknown, mut incomplete) = (Vec::new(), Vec::new());
    for c in init {
        let Some(s) = find(statuses, &c.name) else {
            unknown.push(c.name.clone());
            continue;
        };
        // A sidecar is done once started; another init container once ready (exited with 0).
        let done = if c.is_restartable_init() {
            s.started == Some(true)
        } else {
            s.ready
        };
        if !done {
            incomplete.push(c.name.clone());
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition(INITIALIZED, true, Some("PodCompleted"), None);
    }
    // A regular container that started means the pod initialized before, even while a sidecar
    // restarts now.
    if any_regular_container_started(pod, statuses) {
        return condition(INITIALIZED, true, None, None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_list(&unknown)));
    }
    if !incomplete.is_empty() {
        messages.push(format!("containers with incomplete status: {}", go_list(&incomplete)));
    }
    let was_initialized = old_conditions
        .iter()
        .any(|c| c.type_ == INITIALIZED && c.status == "True");
    if messages.is_empty() || was_initialized {
        condition(INITIALIZED, true, None, None)
    } else {
        condition(
            INITIALIZED,
            false,
            Some("ContainersNotInitialized"),
            Some(messages.join(", ")),
        )
    }
}

/// `PodSandboxChanged` (pkg/kubelet/kuberuntime/util/util.go, 1.37): why the pod needs a new
/// sandbox, checked in upstream's order; None when it needs none. A sandbox that reports no network
/// status at all is not taken to lack an IP.
pub fn pod_sandbox_changed(pod: &ApiPod, runtime: &RuntimePodStatus) -> Option<&'static str> {
    let host_network = pod.spec.host_network;
    let Some(newest) = runtime.sandbox_statuses.first() else {
        return Some(NO_POD_SANDBOX);
    };
    let ready = runtime
        .sandbox_statuses
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    if ready > 1 {
        Some(MULTIPLE_SANDBOXES)
    } else if newest.state != SandboxState::Ready {
        Some(SANDBOX_NOT_READY)
    } else if newest.host_network != host_network {
        Some(NETWORK_NAMESPACE_MODE_CHANGED)
    } else if !host_network && newest.no_primary_ip {
        Some(NO_IP_ADDRESS)
    } else {
        None
    }
}

/// `GeneratePodReadyToStartContainersCondition` (1.37): True when the pod needs no new sandbox;
/// else False, reason PodSandboxNotReady, the cause as its message.
pub fn ready_to_start_containers_condition(pod: &ApiPod, runtime: &RuntimePodStatus) -> PodCondition {
    match pod_sandbox_changed(pod, runtime) {
        None => condition(POD_READY_TO_START_CONTAINERS, true, None, None),
        Some(why) => condition(
            POD_READY_TO_START_CONTAINERS,
            false,
            Some(POD_SANDBOX_NOT_READY),
            Some(why.to_owned()),
        ),
    }
}

/// `ShouldAllContainersRestart` (pkg/kubelet/container/helpers.go, 1.37): the old status says all
/// containers are restarting, or a container (init or regular) whose newest runtime instance
/// exited, or whose old status is terminated, matches a `RestartAllContainers` rule.
pub fn should_all_containers_restart(pod: &ApiPod, runtime: &RuntimePodStatus, old: &PodStatus) -> bool {
    let restarting = old
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == ALL_CONTAINERS_RESTARTING && c.status == "True");
    if restarting {
        return true;
    }
    let restarts_all = |c: &ApiContainer, code: i32| {
        matching_restart_rule(c, code).is_some_and(|r| r.action == "RestartAllContainers")
    };
    let old_statuses = old
        .init_container_statuses
        .iter()
        .flatten()
        .chain(old.container_statuses.iter().flatten());
    let old_statuses: Vec<&ContainerStatus> = old_statuses.collect();
    pod.spec.init_containers.iter().chain(&pod.spec.containers).any(|c| {
        let newest = runtime
            .container_statuses
            .iter()
            .filter(|s| s.name == c.name)
            .max_by_key(|s| s.created_at);
        if newest.is_some_and(|s| s.state == RuntimeContainerState::Exited && restarts_all(c, s.exit_code)) {
            return true;
        }
        old_statuses
            .iter()
            .filter(|s| s.name == c.name)
            .filter_map(|s| terminated(s))
            .any(|t| restarts_all(c, t.exit_code))
    })
}

/// `GenerateAllContainersRestartingCondition` (1.37), for a pod with a `RestartAllContainers`
/// rule: True while its containers are being removed to restart; it carries no observedGeneration.
pub fn all_containers_restarting_condition(
    pod: &ApiPod,
    runtime: &RuntimePodStatus,
    old: &PodStatus,
    phase: &str,
) -> PodCondition {
    match phase {
        SUCCEEDED => return condition(ALL_CONTAINERS_RESTARTING, false, Some("PodCompleted"), None),
        FAILED => return condition(ALL_CONTAINERS_RESTARTING, false, Some("PodFailed"), None),
        _ => {}
    }
    let cleaned_up = !runtime.container_statuses.iter().any(|s| {
        pod.spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .any(|c| c.name == s.name)
    });
    if !should_all_containers_restart(pod, runtime, old) || cleaned_up {
        return condition(ALL_CONTAINERS_RESTARTING, false, None, None);
    }
    condition(
        ALL_CONTAINERS_RESTARTING,
        true,
        Some("RestartAllContainersStarted"),
        Some("container exited with restart policy rule".to_owned()),
    )
}

/// plegd's `plegd.io/ContainersRunning`: True when every regular container runs. Otherwise the first
/// container that does not run gives the reason (OOMKilled, ContainerDied, ContainerRemoved,
/// ContainerNotStarted) and the message names each one.
pub fn containers_running_condition(pod: &ApiPod, statuses: &[ContainerStatus]) -> PodCondition {
    let mut reason = None;
    let mut messages = Vec::new();
    for c in &pod.spec.containers {
        let s = find(statuses, &c.name);
        if s.is_some_and(running) {
            continue;
        }
        let (why, message) = match s {
            Some(s) if let Some(t) = terminated(s) => {
                let why = if t.reason.as_deref() == Some("OOMKilled") {
                    "OOMKilled"
                } else {
                    "ContainerDied"
                };
                let r = t.reason.as_deref().unwrap_or("");
                (
                    why,
                    format!(
                        "container {} exited with code {}{}",
                        c.name,
                        t.exit_code,
                        if r.is_empty() { String::new() } else { format!(" ({r})") }
                    ),
                )
            }
            Some(s) if last_terminated(s).is_some_and(|t| t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN)) => (
                "ContainerRemoved",
                format!("container {} is gone from the runtime", c.name),
            ),
            Some(s) if let Some(t) = last_terminated(s) => {
                let why = if t.reason.as_deref() == Some("OOMKilled") {
                    "OOMKilled"
                } else {
                    "ContainerDied"
                };
                (
                    why,
                    format!(
                        "container {} exited with code {} and has not restarted",
                        c.name, t.exit_code
                    ),
                )
            }
            _ => ("ContainerNotStarted", format!("container {} has not started", c.name)),
        };
        reason.get_or_insert(why);
        messages.push(message);
    }
    match reason {
        None => condition(CONTAINERS_RUNNING, true, Some("AllContainersRunning"), None),
        Some(why) => condition(CONTAINERS_RUNNING, false, Some(why), Some(messages.join("; "))),
    }
}

/// One runtime status in API form (`convertContainerStatus`, 1.37 with
/// RestartAllContainersOnContainerExits on): from the old status of the name come its volume mounts,
/// a restart count never lower, and its last termination (the old state's when the container id
/// changed, else the old last state) — the runtime may no longer hold the instance that ended.
fn convert(
    cs: &RuntimeContainerStatus,
    old: Option<&ContainerStatus>,
    runtime_name: &str,
    pod_restarting: bool,
) -> ContainerStatus {
    let container_id = format!("{runtime_name}://{}", cs.id);
    let mut status = ContainerStatus {
        name: cs.name.clone(),
        // A count from the runtime beyond what the API holds stays at the API's largest.
        restart_count: i32::try_from(cs.restart_count).unwrap_or(i32::MAX),
        image: cs.image.clone(),
        image_id: cs.image_ref.clone(),
        container_id: Some(container_id.clone()),
        // The CRI does not know volume names: the mounts the status listed stay as they were.
        volume_mounts: old.and_then(|o| o.volume_mounts.clone()),
        ..ContainerStatus::default()
    };
    if let Some(old) = old {
        status.restart_count = status.restart_count.max(old.restart_count);
        let last = if old.container_id != status.container_id {
            terminated(old).or_else(|| last_terminated(old))
        } else {
            last_terminated(old)
        };
        status.last_state = last.map(|t| ContainerState {
            terminated: Some(t.clone()),
            ..ContainerState::default()
        });
    }
    let state = match cs.state {
        RuntimeContainerState::Running => {
            // A new instance after a terminated one the runtime did not count.
            if let Some(old) = old
                && terminated(old).is_some()
                && old.restart_count >= i32::try_from(cs.restart_count).unwrap_or(i32::MAX)
            {
                status.restart_count = old.restart_count.saturating_add(1);
            }
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(runtime_time(cs.started_at)),
                }),
                ..ContainerState::default()
            }
        }
        RuntimeContainerState::Created => ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..ContainerState::default()
        },
        RuntimeContainerState::Exited => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: cs.exit_code,
                reason: (!cs.reason.is_empty()).then(|| cs.reason.clone()),
                message: (!cs.message.is_empty()).then(|| cs.message.clone()),
                started_at: Some(runtime_time(cs.started_at)),
                finished_at: Some(runtime_time(cs.finished_at)),
                container_id: Some(container_id),
                signal: None,
            }),
            ..ContainerState::default()
        },
        RuntimeContainerState::Unknown if old.is_some_and(running) => {
            status.restart_count = old.map_or(0, |o| o.restart_count).saturating_add(1);
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(
                        if pod_restarting {
                            RESTARTING_ALL_CONTAINERS
                        } else {
                            CONTAINER_STATUS_UNKNOWN
                        }
                        .to_owned(),
                    ),
                    message: Some("The container could not be located when the pod was terminated".to_owned()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }
        }
        RuntimeContainerState::Unknown => ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..ContainerState::default()
        },
    };
    status.state = Some(state);
    status
}

/// Whether the runtime handler of the pod supports recursive read-only mounts
/// (`runtimeClassSupportsRecursiveReadOnlyMounts`): the handler its newest sandbox runs under, or,
/// before it has one, the default handler when it names no RuntimeClass. None when plegd cannot
/// tell: the runtime could not be asked, or the pod's RuntimeClass is not resolved yet (plegd does
/// not read RuntimeClasses).
pub fn supports_recursive_read_only(
    pod: &ApiPod,
    runtime: &RuntimePodStatus,
    handlers: Option<&[String]>,
) -> Option<bool> {
    let handler = match runtime.sandbox_statuses.first() {
        Some(sandbox) => sandbox.runtime_handler.as_str(),
        None if pod.spec.runtime_class_name.is_none() => "",
        None => return None,
    };
    Some(handlers?.iter().any(|h| h == handler))
}

/// `containerStatuses[].volumeMounts` (RecursiveReadOnlyMounts), from the spec, for a status the
/// runtime has not reported yet: name, path and readOnly, and for a read-only mount whether it is
/// recursively read-only (`resolveRecursiveReadOnly`; Disabled where that fails, as the kubelet
/// logs and goes on). None when a mount asks for it where plegd cannot tell whether the runtime
/// supports it: nothing is written rather than a guess.
fn volume_mount_statuses(spec: &ApiContainer, supported: Option<bool>) -> Option<Vec<VolumeMountStatus>> {
    if spec.volume_mounts.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(spec.volume_mounts.len());
    for m in &spec.volume_mounts {
        let read_only = m.read_only.unwrap_or(false);
        let mut status = VolumeMountStatus {
            name: m.name.clone(),
            mount_path: m.mount_path.clone(),
            read_only: m.read_only,
            ..VolumeMountStatus::default()
        };
        if read_only {
            // Whether the answer depends on the runtime's support, which plegd may not know.
            let asks = resolve_recursive_read_only(m, true) != resolve_recursive_read_only(m, false);
            let supported = if asks { supported? } else { false };
            let enabled = resolve_recursive_read_only(m, supported).unwrap_or(false);
            status.recursive_read_only = Some(if enabled { "Enabled" } else { "Disabled" }.to_owned());
        }
        out.push(status);
    }
    Some(out)
}

/// `resolveRecursiveReadOnly`: whether a mount is made recursively read-only, or why it cannot be.
fn resolve_recursive_read_only(m: &VolumeMount, runtime_supports: bool) -> Result<bool, String> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if !m.read_only.unwrap_or(false) {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not read-only",
            m.name
        ));
    }
    if let Some(propagation) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {propagation:?}",
            m.name
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            m.name
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

/// Which list of the pod's containers a status list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Regular,
    Init,
    Ephemeral,
}

/// The message upstream gives an init container whose runtime status is gone once the pod has
/// initialized (kubernetes#131317, Kubernetes 1.35).
pub const LOST_INIT_CONTAINER_MESSAGE: &str = "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally";

/// `HasAnyRegularContainerCreated`: the newest runtime status of some regular container is
/// created, running or exited.
fn any_regular_container_created(pod: &ApiPod, runtime: &RuntimePodStatus) -> bool {
    pod.spec.containers.iter().any(|c| {
        runtime
            .container_statuses
            .iter()
            .filter(|s| s.name == c.name)
            .max_by_key(|s| s.created_at)
            .is_some_and(|s| s.state != RuntimeContainerState::Unknown)
    })
}

/// `convertToAPIContainerStatuses` for one list of containers, then what the prober manager's
/// `UpdatePodStatus` sets (`started`, `ready`). Regular and ephemeral statuses come out sorted by
/// name, init container statuses in spec order (the status manager's `normalizeStatus`).
/// What converting a pod's container statuses needs besides the lists: the runtime's name, whether
/// its handler supports recursive read-only mounts, and whether the pod restarts all containers
/// (`ShouldAllContainersRestart`).
#[derive(Clone, Copy)]
struct Conversion<'a> {
    runtime_name: &'a str,
    recursive_read_only: Option<bool>,
    pod_restarting: bool,
}

fn container_statuses(
    pod: &ApiPod,
    specs: &[ApiContainer],
    kind: ListKind,
    previous: &[ContainerStatus],
    runtime: &RuntimePodStatus,
    conversion: Conversion<'_>,
) -> Vec<ContainerStatus> {
    let Conversion {
        runtime_name,
        recursive_read_only,
        pod_restarting,
    } = conversion;
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let default_reason = if pod.spec.init_containers.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let mut statuses: BTreeMap<&str, ContainerStatus> = BTreeMap::new();
    for c in specs {
        let mut status = ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(default_reason.to_owned()),
                    message: None,
                }),
                ..ContainerState::default()
            }),
            volume_mounts: volume_mount_statuses(c, recursive_read_only),
            ..ContainerStatus::default()
        };
        if let Some(old) = find(previous, &c.name) {
            if terminated(old).is_some() {
                status = old.clone();
            } else {
                status.restart_count = old.restart_count;
                status.last_state = old.last_state.clone();
            }
        }
        statuses.insert(c.name.as_str(), status);
    }

    // A container that was running and has vanished from the runtime terminated, code unknown.
    // Only ever from a successful read: the syncLoop never generates from a failed one.
    for c in specs {
        if runtime.container_statuses.iter().any(|s| s.name == c.name) {
            continue;
        }
        let Some(old) = find(previous, &c.name) else { continue };
        // Removed by the kubelet to restart all containers: waiting, its last state says so.
        if pod_restarting && !waiting(old) {
            let Some(status) = statuses.get_mut(c.name.as_str()) else {
                continue;
            };
            let (reason, message) = (
                RESTARTING_ALL_CONTAINERS.to_owned(),
                RESTARTING_ALL_CONTAINERS_MESSAGE.to_owned(),
            );
            status.state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: Some(message.clone()),
                }),
                ..ContainerState::default()
            });
            status.last_state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(reason),
                    message: Some(message),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            });
            status.restart_count = old.restart_count.saturating_add(1);
            continue;
        }
        if terminated(old).is_some() || !running(old) {
            continue;
        }
        let Some(status) = statuses.get_mut(c.name.as_str()) else {
            continue;
        };
        let is_default = status
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some(default_reason));
        if !is_default || last_terminated(status).is_some() {
            continue;
        }
        status.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some(CONTAINER_STATUS_UNKNOWN.to_owned()),
                message: Some(
                    "The container could not be located when the pod was deleted.  The container used to be Running"
                        .to_owned(),
                ),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
        if !deleting {
            status.restart_count = status.restart_count.saturating_add(1);
        }
    }

    // Newest first: the newest runtime status of a name is its state, the one before its lastState.
    let mut by_age: Vec<&RuntimeContainerStatus> = runtime.container_statuses.iter().collect();
    by_age.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for cs in by_age {
        let Some(spec) = specs.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let count = seen.entry(spec.name.as_str()).or_default();
        if *count >= 2 {
            continue;
        }
        let old = find(previous, &cs.name);
        let mut status = convert(cs, old, runtime_name, pod_restarting);
        if *count == 0 {
            // Every container the runtime reported, of any kind (`GetContainerSpec`; ephemeral
            // containers have no resources: `{}`).
            resources::set_runtime_fields(&mut status, cs, spec.resources.as_deref(), old);
            statuses.insert(spec.name.as_str(), status);
        } else if let Some(newest) = statuses.get_mut(spec.name.as_str()) {
            newest.last_state = status.state;
        }
        *count += 1;
    }

    // An init container the runtime no longer has, in a pod whose regular containers were
    // created, completed (kubernetes#131317): it does not run again.
    if kind == ListKind::Init && any_regular_container_created(pod, runtime) {
        for c in specs.iter().filter(|c| !c.is_restartable_init()) {
            if runtime.container_statuses.iter().any(|s| s.name == c.name) {
                continue;
            }
            if let Some(status) = statuses.get_mut(c.name.as_str())
                && status.state.as_ref().is_some_and(|s| s.waiting.is_some())
            {
                status.state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".to_owned()),
                        message: Some(LOST_INIT_CONTAINER_MESSAGE.to_owned()),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                });
            }
        }
    }

    for c in specs {
        if let Some(status) = statuses.get_mut(c.name.as_str()) {
            set_started_and_ready(c, kind, status, find(previous, &c.name));
        }
    }
    match kind {
        ListKind::Init => specs.iter().filter_map(|c| statuses.remove(c.name.as_str())).collect(),
        // Sorted by name, as the status manager leaves them.
        ListKind::Regular | ListKind::Ephemeral => statuses.into_values().collect(),
    }
}

/// What the kubelet's prober manager sets (`UpdatePodStatus`), for plegd, which has no prober (see
/// the module documentation). Regular containers and sidecars: started once running (with a
/// startup probe: what the status already said for the same container id), ready once started
/// (with a readiness probe: likewise). Other init containers: started while running, ready once
/// they exited with success. Ephemeral containers: neither is set.
fn set_started_and_ready(
    spec: &ApiContainer,
    kind: ListKind,
    status: &mut ContainerStatus,
    old: Option<&ContainerStatus>,
) {
    if kind == ListKind::Ephemeral {
        status.started = None;
        status.ready = false;
        return;
    }
    let same_container = old.filter(|o| o.container_id.is_some() && o.container_id == status.container_id);
    let is_running = running(status);
    let probed = kind == ListKind::Regular || spec.is_restartable_init();
    let started =
        is_running && (!probed || !spec.startup_probe || same_container.and_then(|o| o.started).unwrap_or(false));
    status.started = Some(started);
    status.ready = if probed {
        started && (!spec.readiness_probe || same_container.is_some_and(|o| o.ready))
    } else {
        terminated(status).is_some_and(|t| t.exit_code == 0)
    };
}

/// Keep the termination messages of all containers within [`MAX_TERMINATION_MESSAGES`] bytes
/// (`normalizeStatus`): each gets an equal share.
fn truncate_messages(lists: &mut [&mut Vec<ContainerStatus>]) {
    let total: usize = lists.iter().map(|l| l.len()).sum();
    if total == 0 {
        return;
    }
    let share = MAX_TERMINATION_MESSAGES / total;
    for list in lists.iter_mut() {
        for status in list.iter_mut() {
            for state in [status.state.as_mut(), status.last_state.as_mut()]
                .into_iter()
                .flatten()
            {
                if let Some(msg) = state.terminated.as_mut().and_then(|t| t.message.as_mut())
                    && msg.len() > share
                {
                    let mut cut = share;
                    while !msg.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    msg.truncate(cut);
                }
            }
        }
    }
}

/// Parse an IP as Go's `netutils.ParseIPSloppy` does: IPv4 parts may have leading zeros, read as
/// decimal (`010.000.000.001` is 10.0.0.1). None for anything that is not an IP.
pub fn parse_ip_sloppy(ip: &str) -> Option<IpAddr> {
    if let Ok(parsed) = ip.parse::<IpAddr>() {
        return Some(parsed);
    }
    let mut octets = [0u8; 4];
    let mut parts = ip.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then(|| IpAddr::from(octets))
}

/// `sortPodIPs`: the runtime's IPs parsed and written in canonical form, then the first of the
/// node's primary family (IPv4 when the node has no IP) and the first of the other. Whatever does
/// not parse is left out.
pub fn sort_pod_ips(ips: &[String], node_ips: &[String]) -> Vec<String> {
    let primary_v6 = node_ips
        .first()
        .and_then(|ip| parse_ip_sloppy(ip))
        .is_some_and(|ip| ip.is_ipv6());
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| parse_ip_sloppy(ip)).collect();
    let mut out = Vec::new();
    out.extend(
        parsed
            .iter()
            .find(|ip| ip.is_ipv6() == primary_v6)
            .map(IpAddr::to_string),
    );
    out.extend(
        parsed
            .iter()
            .find(|ip| ip.is_ipv6() != primary_v6)
            .map(IpAddr::to_string),
    );
    out
}

/// The kubelet's own conditions (`generateAPIPodStatus`) in its order: PodReadyToStartContainers,
/// Initialized, Ready, ContainersReady, PodScheduled; [`merge_pod_status`] puts every condition
/// others own (DisruptionTarget among them) before them, as they are. plegd's own
/// `plegd.io/ContainersRunning` is added by the caller when its mode writes it. lastTransitionTime
/// moves only when a condition's status changes.
fn conditions(
    pod: &ApiPod,
    old: &PodStatus,
    runtime: &RuntimePodStatus,
    all: &[ContainerStatus],
    phase: &str,
    now: SystemTime,
) -> Vec<PodCondition> {
    let old_conditions = old.conditions.as_deref().unwrap_or_default();
    let statuses = Some(all);
    // Readiness gates are conditions others own: read from the old status.
    let mut out = vec![
        ready_to_start_containers_condition(pod, runtime),
        initialized_condition(pod, old_conditions, statuses, phase),
        ready_condition(pod, old_conditions, statuses, phase),
        containers_ready_condition(pod, statuses, phase),
        condition(POD_SCHEDULED, true, None, None),
    ];
    let generation = observed_generation(pod);
    for c in &mut out {
        c.observed_generation = generation;
    }
    if all_containers_could_restart(pod) {
        out.push(all_containers_restarting_condition(pod, runtime, old, phase));
    }
    for c in &mut out {
        set_transition_time(c, old_conditions, now);
    }
    out
}

/// The generation of the spec a status was made from (PodObservedGenerationTracking, GA in 1.35):
/// `status.observedGeneration` and each condition the kubelet writes carry the pod's
/// `metadata.generation` (`CalculatePodStatusObservedGeneration`). A pod without one (0) gets none.
pub fn observed_generation(pod: &ApiPod) -> Option<i64> {
    // A mirror pod's status is its static pod's, whose spec (a file) has no generation.
    if pod.is_mirror() {
        return None;
    }
    pod.metadata.generation.filter(|g| *g != 0)
}

/// `updateLastTransitionTime`: the previous lastTransitionTime while a condition's status is
/// unchanged (as the old condition has it, even none), else now.
pub fn set_transition_time(c: &mut PodCondition, old: &[PodCondition], now: SystemTime) {
    c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Some(api_time(now)),
    };
}

/// A status the kubelet's status manager refuses (`checkContainerStateTransition`): a container
/// that terminated and may not restart would run or wait again. Nothing is written for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("terminated {kind} {name} attempted illegal transition to non-terminated state")]
pub struct IllegalTransition {
    /// "container" or "init container".
    pub kind: &'static str,
    pub name: String,
}

/// `checkContainerStateTransition` (status_manager.go, with ContainerRestartRules): a terminated
/// container that does not restart (`ContainerShouldRestart` of its exit code: its own rules and
/// policy, else the pod's) may not leave the terminated state. Sidecars always may; under a pod
/// policy of `Always`, or when some container may restart all of them, every container may.
pub fn check_container_state_transition(
    old: &PodStatus,
    new: &PodStatus,
    pod: &ApiPod,
) -> Result<(), IllegalTransition> {
    if pod.spec.restart_policy.as_deref().unwrap_or("Always") == "Always" || all_containers_could_restart(pod) {
        return Ok(());
    }
    let lists = [
        (
            "container",
            &old.container_statuses,
            &new.container_statuses,
            &pod.spec.containers,
        ),
        (
            "init container",
            &old.init_container_statuses,
            &new.init_container_statuses,
            &pod.spec.init_containers,
        ),
    ];
    for (kind, old_list, new_list, specs) in lists {
        for old_status in old_list.as_deref().unwrap_or_default() {
            let Some(t) = terminated(old_status) else { continue };
            let spec = specs.iter().find(|c| c.name == old_status.name);
            let may_restart =
                spec.is_some_and(|c| (kind == "init container" && c.is_restartable_init()) || restartable(c, pod, t));
            if may_restart {
                continue;
            }
            if let Some(new_status) = find(new_list.as_deref().unwrap_or_default(), &old_status.name)
                && terminated(new_status).is_none()
            {
                return Err(IllegalTransition {
                    kind,
                    name: new_status.name.clone(),
                });
            }
        }
    }
    Ok(())
}

/// `AllContainersCouldRestart`: some container (regular or init) has a `RestartAllContainers` rule.
fn all_containers_could_restart(pod: &ApiPod) -> bool {
    pod.spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .flat_map(|c| c.restart_policy_rules.iter())
        .any(|r| r.action == "RestartAllContainers")
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some(SUCCEEDED | FAILED))
}

/// Whether the pod could still have running containers: a container the runtime reports as not
/// exited. The kubelet asks its pod workers (`PodCouldHaveRunningContainers`: true until it has
/// stopped the pod's containers); plegd stops nothing, so it asks the runtime. The sandbox is not
/// counted: no kubelet may be there to stop it, and a finished Job must still complete.
///
/// A container that is only created can run only once started, and a runtime starts no container
/// in a sandbox that is not ready: one created in a stopped (or vanished) sandbox never runs.
pub fn could_have_running_containers(runtime: &RuntimePodStatus) -> bool {
    runtime.container_statuses.iter().any(|c| match c.state {
        RuntimeContainerState::Exited => false,
        RuntimeContainerState::Created => runtime
            .sandbox_statuses
            .iter()
            .any(|s| s.id == c.sandbox_id && s.state == SandboxState::Ready),
        RuntimeContainerState::Running | RuntimeContainerState::Unknown => true,
    })
}

const UNKNOWN_AT_TERMINATION: &str = "The container could not be located when the pod was terminated";

fn terminated_unknown() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(CONTAINER_STATUS_UNKNOWN.to_owned()),
            message: Some(UNKNOWN_AT_TERMINATION.to_owned()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

/// The status manager's `hasPodInitialized`: a pod without init containers, one with a regular
/// container that ever left waiting, or whose last init container completed (a sidecar: runs
/// and has started) has initialized. Upstream reads the pod's status as the apiserver has it;
/// plegd reads the status it just generated, which holds that evidence and anything newer.
pub fn has_pod_initialized(pod: &ApiPod, status: &PodStatus) -> bool {
    if pod.spec.init_containers.is_empty() {
        return true;
    }
    let regular = status.container_statuses.as_deref().unwrap_or_default();
    if regular.iter().any(|c| last_terminated(c).is_some() || !waiting(c)) {
        return true;
    }
    let init = status.init_container_statuses.as_deref().unwrap_or_default();
    let Some(last) = init.last() else { return false };
    // `GetContainerByIndex`: the spec container at the same index, and only if the names agree.
    let Some(spec) = pod
        .spec
        .init_containers
        .get(init.len() - 1)
        .filter(|c| c.name == last.name)
    else {
        return false;
    };
    if spec.is_restartable_init() {
        return running(last) && last.started == Some(true);
    }
    last_terminated(last).is_some_and(|t| t.exit_code == 0) || terminated(last).is_some_and(|t| t.exit_code == 0)
}

/// The status manager's `initializedContainers`: the init container statuses up to the last one
/// that ever started (not waiting, or waiting after a termination); at least the first.
fn initialized_containers(init: &[ContainerStatus]) -> usize {
    init.iter()
        .rposition(|c| !waiting(c) || last_terminated(c).is_some())
        .map_or(init.len().min(1), |i| i + 1)
}

/// The status manager's `TerminatePod`, applied once the pod is finished (terminal or deleted, and
/// nothing of it can run): a container with no terminated state is terminated with
/// ContainerStatusUnknown (137) — regular containers only once the pod has initialized, init
/// containers up to the last one that started — and a phase that is not terminal becomes Failed.
pub fn terminate_pod(pod: &ApiPod, status: &mut PodStatus) {
    let initialized = has_pod_initialized(pod, status);
    if initialized && let Some(list) = status.container_statuses.as_mut() {
        for c in list.iter_mut().filter(|c| terminated(c).is_none()) {
            c.state = Some(terminated_unknown());
        }
    }
    if let Some(list) = status.init_container_statuses.as_mut() {
        let started = initialized_containers(list);
        for c in list[..started].iter_mut().filter(|c| terminated(c).is_none()) {
            c.state = Some(terminated_unknown());
        }
    }
    // A static pod's phase is left as it is (upstream: `!kubetypes.IsStaticPod(pod)`).
    if !is_terminal(status.phase.as_deref()) && !is_mirror_pod(pod) {
        status.phase = Some(FAILED.to_owned());
    }
}

/// The reason and message of a pod past its `activeDeadlineSeconds` (active_deadline.go).
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// When the pod's active deadline passes: its start time plus `activeDeadlineSeconds`; None
/// without either (a pod the kubelet has not started yet has no deadline running).
pub fn active_deadline(pod: &ApiPod, start_time: Option<&Time>) -> Option<SystemTime> {
    let seconds = u64::try_from(pod.spec.active_deadline_seconds?).ok()?;
    let start = SystemTime::from(start_time?.0);
    Some(
        start
            .checked_add(std::time::Duration::from_secs(seconds))
            .unwrap_or(start),
    )
}

/// `pastActiveDeadline` (active_deadline.go): the pod has been active for at least its deadline.
pub fn past_active_deadline(pod: &ApiPod, start_time: Option<&Time>, now: SystemTime) -> bool {
    active_deadline(pod, start_time).is_some_and(|deadline| now >= deadline)
}

/// Whether the pod is finished, as the kubelet's pod worker decides it before `SyncTerminatedPod`:
/// it is deleted or its phase is terminal, and a successful runtime read shows nothing of it that
/// could still run.
pub fn pod_is_finished(pod: &ApiPod, runtime: &RuntimePodStatus, phase: Option<&str>) -> bool {
    (pod.metadata.deletion_timestamp.is_some() || is_terminal(phase)) && !could_have_running_containers(runtime)
}

/// Whether a finished pod may be deleted from the apiserver (the status manager's `canBeDeleted`):
/// it is finished, it is not a mirror pod (the kubelet deletes those through their static pod's
/// config), and what plegd can see of its resources is released — no sandbox of it is ready. The
/// kubelet also waits for its volumes to be unmounted and its cgroups removed, which plegd cannot
/// see (README: "The end of a pod").
pub fn pod_can_be_deleted(pod: &ApiPod, runtime: &RuntimePodStatus, phase: Option<&str>) -> bool {
    pod_is_finished(pod, runtime, phase)
        && !is_mirror_pod(pod)
        && !runtime.sandbox_statuses.iter().any(|s| s.state == SandboxState::Ready)
}

pub use crate::pod::MIRROR_POD_ANNOTATION;

/// A mirror pod: the apiserver's copy of a static pod the kubelet runs from a file or URL.
pub fn is_mirror_pod(pod: &ApiPod) -> bool {
    pod.is_mirror()
}

/// The kubelet-equivalent status of a pod: [`generate_api_pod_status`], then, once the pod is
/// finished ([`pod_is_finished`]), what `TerminatePod` makes of it.
pub fn generate(input: &StatusInput<'_>) -> PodStatus {
    let mut status = generate_api_pod_status(input);
    if pod_is_finished(input.pod, input.runtime, status.phase.as_deref()) {
        terminate_pod(input.pod, &mut status);
    }
    status
}

/// `generateAPIPodStatus` followed by the status manager's `mergePodStatus` and normalisation.
/// Terminal phases never change back, and a transition to one waits while containers could still
/// run. The pod is terminal (getPhase's `podIsTerminal`) when it is deleted and nothing of it runs.
pub fn generate_api_pod_status(input: &StatusInput<'_>) -> PodStatus {
    let pod = input.pod;
    let no_status;
    let old = match &pod.status {
        Some(status) => status,
        None => {
            no_status = PodStatus::default();
            &no_status
        }
    };
    let spec = &pod.spec;
    let init = &spec.init_containers;
    let has_init = !init.is_empty();
    let ephemeral = &spec.ephemeral_containers;
    let recursive_read_only = supports_recursive_read_only(pod, input.runtime, input.recursive_read_only_handlers);
    let conversion = Conversion {
        runtime_name: input.runtime_name,
        recursive_read_only,
        pod_restarting: should_all_containers_restart(pod, input.runtime, old),
    };

    let mut container_list = container_statuses(
        pod,
        &spec.containers,
        ListKind::Regular,
        old.container_statuses.as_deref().unwrap_or_default(),
        input.runtime,
        conversion,
    );
    let mut init_list = container_statuses(
        pod,
        init,
        ListKind::Init,
        old.init_container_statuses.as_deref().unwrap_or_default(),
        input.runtime,
        conversion,
    );
    let mut ephemeral_list = container_statuses(
        pod,
        ephemeral,
        ListKind::Ephemeral,
        old.ephemeral_container_statuses.as_deref().unwrap_or_default(),
        input.runtime,
        conversion,
    );
    truncate_messages(&mut [&mut container_list, &mut init_list, &mut ephemeral_list]);
    if !input.stop_signals {
        for status in container_list
            .iter_mut()
            .chain(&mut init_list)
            .chain(&mut ephemeral_list)
        {
            status.stop_signal = None;
        }
    }

    let all: Vec<ContainerStatus> = container_list.iter().chain(init_list.iter()).cloned().collect();
    let has_initialized = any_active_regular_container_started(pod, input.runtime);
    let nothing_running = !input
        .runtime
        .container_statuses
        .iter()
        .any(|s| s.state == RuntimeContainerState::Running);
    let pod_is_terminal = pod.metadata.deletion_timestamp.is_some() && nothing_running;
    let mut phase = get_phase(pod, &all, pod_is_terminal, has_initialized);
    // A terminal phase never changes again, not even to the other terminal phase.
    match old.phase.as_deref() {
        Some(SUCCEEDED) => phase = SUCCEEDED,
        Some(FAILED) => phase = FAILED,
        _ => {}
    }
    // The active deadline handler's `ShouldEvict`: past its deadline a pod that is not terminal
    // fails (the kubelet then stops its containers; until they are stopped, mergePodStatus keeps
    // the phase it had).
    let deadline_exceeded =
        !is_terminal(old.phase.as_deref()) && past_active_deadline(pod, old.start_time.as_ref(), input.now);
    if deadline_exceeded {
        phase = FAILED;
    }

    let mut status = PodStatus {
        phase: Some(phase.to_owned()),
        // Never lowered (updateStatusInternal: "prevent sending unnecessary patches").
        observed_generation: observed_generation(pod).max(old.observed_generation),
        qos_class: old.qos_class.clone(),
        nominated_node_name: old.nominated_node_name.clone(),
        resource_claim_statuses: old.resource_claim_statuses.clone(),
        ..PodStatus::default()
    };
    if deadline_exceeded {
        status.reason = Some(DEADLINE_EXCEEDED.to_owned());
        status.message = Some(DEADLINE_EXCEEDED_MESSAGE.to_owned());
    } else if old.phase.as_deref() == Some(phase) {
        status.reason = old.reason.clone();
        status.message = old.message.clone();
    }
    status.conditions = Some(conditions(pod, old, input.runtime, &all, phase, input.now));

    let mut pod_ips = sort_pod_ips(&input.runtime.ips, input.node_ips);
    let host_ips = sort_pod_ips(input.node_ips, input.node_ips);
    if spec.host_network {
        // The node's primary IP when the runtime gave none; on a dual-stack node, its IP of the
        // other family when the runtime gave one family only (kubernetes#105320).
        if pod_ips.is_empty() {
            pod_ips.extend(host_ips.first().cloned());
        }
        if let ([only], [_, second]) = (pod_ips.as_slice(), host_ips.as_slice())
            && only.contains(':') != second.contains(':')
        {
            pod_ips.push(second.clone());
        }
    }
    if pod_ips.is_empty() {
        // A pod whose sandbox is gone keeps the IPs it had.
        status.pod_ip = old.pod_ip.clone();
        status.pod_ips = old.pod_ips.clone();
    } else {
        status.pod_ip = pod_ips.first().cloned();
        status.pod_ips = Some(pod_ips.into_iter().map(|ip| PodIP { ip }).collect());
    }
    if let Some(first) = host_ips.first() {
        status.host_ip = Some(first.clone());
        status.host_ips = Some(host_ips.into_iter().map(|ip| HostIP { ip }).collect());
    }
    status.start_time = old.start_time.clone().or_else(|| Some(api_time(input.now)));
    (status.resources, status.allocated_resources) =
        resources::pod_status_resources(spec, old.phase.as_deref(), old.resources.as_ref());
    status.container_statuses = Some(container_list);
    status.init_container_statuses = (has_init || old.init_container_statuses.is_some()).then_some(init_list);
    status.ephemeral_container_statuses =
        (!ephemeral.is_empty() || old.ephemeral_container_statuses.is_some()).then_some(ephemeral_list);
    merge_pod_status(old, status, could_have_running_containers(input.runtime), input.now)
}

/// The status manager's `mergePodStatus`: the conditions others own stay as the old status has
/// them, the kubelet's come from the new one (DisruptionTarget, shared, only once the pod
/// becomes terminal with nothing running); resourceClaimStatuses are not the kubelet's. A pod
/// does not become terminal while it could have running containers (a sidecar still running
/// after an init container failed under Never, say): phase, reason and message stay the old
/// ones (an old status without a phase gives Pending: plegd never writes an empty phase). A
/// terminal phase has Ready and ContainersReady False.
pub fn merge_pod_status(old: &PodStatus, mut new: PodStatus, could_have_running: bool, now: SystemTime) -> PodStatus {
    let to_terminal = !is_terminal(old.phase.as_deref()) && is_terminal(new.phase.as_deref());
    let mut merged: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    for c in new.conditions.take().into_iter().flatten() {
        if KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            merged.push(c);
        } else if c.type_ == DISRUPTION_TARGET && to_terminal && !could_have_running {
            match merged.iter_mut().find(|m| m.type_ == c.type_) {
                Some(m) => *m = c,
                None => merged.push(c),
            }
        }
    }
    new.conditions = Some(merged);
    new.resource_claim_statuses = old.resource_claim_statuses.clone();
    if to_terminal && could_have_running {
        new.phase = Some(old.phase.clone().unwrap_or_else(|| PENDING.to_owned()));
        new.reason = old.reason.clone();
        new.message = old.message.clone();
    }
    if let Some(phase @ (SUCCEEDED | FAILED)) = new.phase.as_deref() {
        let reason = if phase == SUCCEEDED {
            "PodCompleted"
        } else {
            "PodFailed"
        };
        let conditions = new.conditions.get_or_insert_with(Vec::new);
        let is_true = |type_: &str| conditions.iter().any(|c| c.type_ == type_ && c.status == "True");
        if is_true(READY) || is_true(CONTAINERS_READY) {
            // `UpdatePodCondition` of both: replaced where present, appended where not.
            for type_ in [CONTAINERS_READY, READY] {
                let c = PodCondition {
                    last_transition_time: Some(api_time(now)),
                    observed_generation: new.observed_generation,
                    ..condition(type_, false, Some(reason), None)
                };
                match conditions.iter_mut().find(|o| o.type_ == type_) {
                    Some(o) if o.status == c.status => {
                        *o = PodCondition {
                            last_transition_time: o.last_transition_time.clone(),
                            ..c
                        }
                    }
                    Some(o) => *o = c,
                    None => conditions.push(c),
                }
            }
        }
    }
    new
}

/// Unit tests. The upstream tables are ported as `upstream_*` tests, every case; what a case
/// cannot express is named in the test's own documentation. Of the status manager's tests
/// (status_manager_test.go), TestTerminatePod, TestTerminatePodWaiting,
/// TestTerminatePod_DefaultUnknownStatus, TestTerminatePod_EnsurePodPhaseIsTerminal and
/// TestMergePodStatus are ported. What TestNewStatusPreservesPodStartTime,
/// TestChangedStatusKeepsStartTime, TestUnchangedStatusPreservesLastTransitionTime,
/// TestChangedStatusUpdatesLastTransitionTime and TestStatusNormalizationEnforcesMaxBytes check is
/// checked here by `a_running_pod_in_full` (start and transition times stay),
/// `conditions_of_others_are_kept_and_transition_times_follow_status` and
/// `termination_messages_share_12_kib`. The rest test machinery plegd does not have: the status
/// cache and its versions (TestNewStatus, TestChangedStatus, TestUnchangedStatus,
/// TestStaleUpdates, TestStatusEquality), its GET-then-PATCH sync (TestSyncPod,
/// TestSyncPodIgnoresNotFound, TestSyncPodChecksMismatchedUID, TestSyncPodNoDeadlock; plegd
/// patches against the informer's copy with a uid precondition, tested in manager.rs and
/// tests/status_e2e.rs), static and mirror pods, prober results, and in-place resize.
///
/// Of Kubernetes 1.36's additions: the getPhase tables of container restart policies and rules
/// (`TestPodPhaseWithContainerRestartPolicy`, `…InitContainers`, `TestPodPhaseWithRestartAllContainers`),
/// `TestContainerHasRestartablePolicy` and `TestFindMatchingContainerRestartRule` (util_test.go),
/// `TestResolveRecursiveReadOnly` and `TestActiveDeadlineHandler`, every case. Of 1.37's: the
/// PodReadyToStartContainers rows with their reasons and messages, the new ContainersReady and
/// Initialized rows, `TestGenerateAllContainersRestartingCondition`, and
/// `TestConvertToAPIContainerStatuses`' rows with RestartAllContainersOnContainerExits on (the
/// kubelet removes the containers; plegd reports what that leaves). Not expressed:
/// `TestConvertToAPIContainerStatusesWithImageVolumeDigest` (ImageVolumeWithDigest, alpha), and
/// `TestIsContainerRestartable` (the kubelet's cgroup decision; plegd has none). Upstream has no
/// observedGeneration table beyond `CalculatePodStatusObservedGeneration`'s gate cases (locked on
/// since 1.35): `observed_generation_is_the_pods_generation` checks what the kubelet writes.
#[cfg(test)]
pub(crate) mod tests;
