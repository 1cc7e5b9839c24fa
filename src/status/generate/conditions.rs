//! The pod conditions the kubelet writes (status/generate.go: `GenerateContainersReadyCondition`,
//! `GeneratePodReadyCondition`, `GeneratePodInitializedCondition`,
//! `GeneratePodReadyToStartContainersCondition`, `GenerateAllContainersRestartingCondition`), plegd's
//! own `plegd.io/ContainersRunning`, their observedGeneration and lastTransitionTime.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};

use super::phase::{all_containers_could_restart, matching_restart_rule};
use super::{
    ALL_CONTAINERS_RESTARTING, CONTAINER_STATUS_UNKNOWN, CONTAINERS_READY, CONTAINERS_RUNNING, FAILED, INITIALIZED,
    KubeletMinor, MULTIPLE_SANDBOXES, NETWORK_NAMESPACE_MODE_CHANGED, NO_IP_ADDRESS, NO_POD_SANDBOX,
    POD_READY_TO_START_CONTAINERS, POD_SANDBOX_NOT_READY, POD_SCHEDULED, READY, SANDBOX_NOT_READY, SUCCEEDED, api_time,
    condition, find, last_terminated, running, terminated,
};
use crate::apiserver::pod::{ApiContainer, ApiPod};
use crate::kubecontainer::{RuntimeContainerState, RuntimePodStatus, SandboxState};

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

/// `GeneratePodInitializedCondition`: where the kubelet restarts all containers
/// ([`KubeletMinor::restart_all_containers`], from 1.36), once the old status said Initialized, it
/// stays so (a pod restarting in place re-runs its init containers); in 1.35 it follows its init
/// containers.
pub fn initialized_condition(
    pod: &ApiPod,
    old_conditions: &[PodCondition],
    statuses: Option<&[ContainerStatus]>,
    phase: &str,
    kubelet: KubeletMinor,
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
    let was_initialized = kubelet.restart_all_containers()
        && old_conditions
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

/// `GeneratePodReadyToStartContainersCondition`: True when the pod needs no new sandbox; else
/// False, from 1.37 with the reason PodSandboxNotReady and the cause as its message
/// ([`KubeletMinor::ready_to_start_reason`]), before with neither.
pub fn ready_to_start_containers_condition(
    pod: &ApiPod,
    runtime: &RuntimePodStatus,
    kubelet: KubeletMinor,
) -> PodCondition {
    match pod_sandbox_changed(pod, runtime) {
        None => condition(POD_READY_TO_START_CONTAINERS, true, None, None),
        Some(_) if !kubelet.ready_to_start_reason() => condition(POD_READY_TO_START_CONTAINERS, false, None, None),
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

/// The kubelet's own conditions (`generateAPIPodStatus`) in its order: PodReadyToStartContainers,
/// Initialized, Ready, ContainersReady, PodScheduled; [`merge_pod_status`] puts every condition
/// others own (DisruptionTarget among them) before them, as they are. plegd's own
/// `plegd.io/ContainersRunning` is added by the caller when its mode writes it. lastTransitionTime
/// moves only when a condition's status changes.
pub(super) fn conditions(
    pod: &ApiPod,
    old: &PodStatus,
    runtime: &RuntimePodStatus,
    all: &[ContainerStatus],
    phase: &str,
    now: SystemTime,
    kubelet: KubeletMinor,
) -> Vec<PodCondition> {
    let old_conditions = old.conditions.as_deref().unwrap_or_default();
    let statuses = Some(all);
    // Readiness gates are conditions others own: read from the old status.
    let mut out = vec![
        ready_to_start_containers_condition(pod, runtime, kubelet),
        initialized_condition(pod, old_conditions, statuses, phase, kubelet),
        ready_condition(pod, old_conditions, statuses, phase),
        containers_ready_condition(pod, statuses, phase),
        condition(POD_SCHEDULED, true, None, None),
    ];
    let generation = observed_generation(pod);
    for c in &mut out {
        c.observed_generation = generation;
    }
    if all_containers_could_restart(pod, kubelet) {
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

#[cfg(test)]
mod tests;
