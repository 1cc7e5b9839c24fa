//! The end of a pod: the status manager's `checkContainerStateTransition`, `TerminatePod` and
//! `hasPodInitialized`, the active deadline (active_deadline.go), and when a pod is finished and
//! may be deleted (the pod worker, `canBeDeleted`).

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::phase::{all_containers_could_restart, is_terminal, restartable};
use super::{
    CONTAINER_STATUS_UNKNOWN, CONTAINERS_READY, FAILED, KubeletMinor, find, is_mirror_pod, last_terminated, running,
    terminated, waiting,
};
use crate::apiserver::pod::ApiPod;
use crate::kubecontainer::{RuntimeContainerState, RuntimePodStatus, SandboxState};

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
/// policy of `Always`, or when some container may restart all of them (from 1.36), every container may.
pub fn check_container_state_transition(
    old: &PodStatus,
    new: &PodStatus,
    pod: &ApiPod,
    kubelet: KubeletMinor,
) -> Result<(), IllegalTransition> {
    if pod.spec.restart_policy.as_deref().unwrap_or("Always") == "Always" || all_containers_could_restart(pod, kubelet)
    {
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
            let may_restart = spec.is_some_and(|c| {
                (kind == "init container" && c.is_restartable_init()) || restartable(c, pod, t, kubelet)
            });
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

/// Whether the pod is past the kubelet's last look at it: `old`, the status the apiserver holds,
/// is terminal, and the pod is finished ([`pod_is_finished`]) with no sandbox ready. The kubelet's
/// pod worker stops a pod's containers and its sandbox, generates the status once more
/// (`SyncTerminatingPod`, `SyncTerminatedPod`) and ends with `TerminatePod`; after that it never
/// generates the pod's status again, whatever the runtime shows: the sandbox's removal (its
/// PodReadyToStartContainers stays "pod sandbox is not ready"), the containers' removal.
pub fn past_the_last_look(pod: &ApiPod, runtime: &RuntimePodStatus, old: &PodStatus) -> bool {
    is_terminal(old.phase.as_deref())
        && pod_is_finished(pod, runtime, old.phase.as_deref())
        && !runtime.sandbox_statuses.iter().any(|s| s.state == SandboxState::Ready)
}

/// Whether `old`'s terminal phase is TerminatePod's own: TerminatePod copies the status the
/// kubelet last generated and sets only the phase and the states of containers that did not
/// terminate. A status generated with a terminal phase says so in ContainersReady (`PodFailed`,
/// `PodCompleted`, `GenerateContainersReadyCondition`); one whose ContainersReady says anything else
/// was generated for a pod not yet terminal — deleted before its containers ran, say — and its
/// phase came after, from TerminatePod, which then has nothing left to change.
pub fn phase_set_by_terminate_pod(pod: &ApiPod, old: &PodStatus) -> bool {
    let generated_terminal = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONTAINERS_READY)
        .is_none_or(|c| matches!(c.reason.as_deref(), Some("PodFailed" | "PodCompleted")));
    if !is_terminal(old.phase.as_deref()) || generated_terminal {
        return false;
    }
    let mut terminated = old.clone();
    terminate_pod(pod, &mut terminated);
    terminated == *old
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
/// see (docs/operating.md: "The end of a pod").
pub fn pod_can_be_deleted(pod: &ApiPod, runtime: &RuntimePodStatus, phase: Option<&str>) -> bool {
    pod_is_finished(pod, runtime, phase)
        && !is_mirror_pod(pod)
        && !runtime.sandbox_statuses.iter().any(|s| s.state == SandboxState::Ready)
}

#[cfg(test)]
mod tests;
