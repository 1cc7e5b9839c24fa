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

//!
//! One file per topic: `phase` (`getPhase`, restart policies and rules), `conditions`, container
//! statuses (`container_statuses`), pod IPs (`ips`), volume mount statuses (`volume_mounts`), and the
//! end of a pod (`pod_end`: `TerminatePod`, the active deadline, deletion). This file puts them
//! together: [`generate`], [`generate_api_pod_status`], [`merge_pod_status`].

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resources;
use crate::apiserver::pod::ApiPod;
use crate::kubecontainer::{RuntimeContainerState, RuntimePodStatus};

mod conditions;
mod container_statuses;
mod ips;
mod kubelet_minor;
mod phase;
mod pod_end;
/// The pods and runtime statuses the unit tests of status generation, decisions and the syncLoop
/// build.
#[cfg(test)]
pub(crate) mod test_support;
mod volume_mounts;

pub use conditions::{
    all_containers_restarting_condition, any_active_regular_container_started, containers_ready_condition,
    containers_running_condition, initialized_condition, observed_generation, pod_sandbox_changed, ready_condition,
    ready_to_start_containers_condition, set_transition_time, should_all_containers_restart,
};
pub use container_statuses::LOST_INIT_CONTAINER_MESSAGE;
use ips::set_pod_and_host_ips;
pub use ips::{parse_ip_sloppy, sort_pod_ips};
pub use kubelet_minor::{Fit, InvalidKubeletVersion, KubeletMinor};
pub use phase::{RESTARTING_ALL_CONTAINERS, container_should_restart, get_phase, is_terminal};
pub use pod_end::{
    DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, IllegalTransition, active_deadline, check_container_state_transition,
    could_have_running_containers, has_pod_initialized, past_active_deadline, past_the_last_look,
    phase_set_by_terminate_pod, pod_can_be_deleted, pod_is_finished, terminate_pod,
};
pub use volume_mounts::supports_recursive_read_only;

use conditions::conditions;
use container_statuses::{Conversion, ListKind, container_statuses, truncate_messages};

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
/// (RestartAllContainersOnContainerExits, beta and on from 1.36).
pub const ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

/// Conditions the kubelet owns (`PodConditionsByKubelet`, 1.37 with its default gates); every other
/// type belongs to someone else. Which of them a kubelet of another minor owns:
/// [`KubeletMinor::owns_condition`]. The resize conditions are the kubelet's own record of resizes it
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
    /// The kubelet minor whose status is generated.
    pub kubelet: KubeletMinor,
    pub now: SystemTime,
}

/// A time with whole seconds, as the API shows it.
pub fn api_time(t: SystemTime) -> Time {
    let ts = k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    Time(k8s_openapi::jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
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

fn condition(type_: &str, status: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

pub use crate::apiserver::pod::MIRROR_POD_ANNOTATION;

/// A mirror pod: the apiserver's copy of a static pod the kubelet runs from a file or URL.
pub fn is_mirror_pod(pod: &ApiPod) -> bool {
    pod.is_mirror()
}

/// The kubelet-equivalent status of a pod: [`generate_api_pod_status`], then, once the pod is
/// finished ([`pod_is_finished`]), what `TerminatePod` makes of it. Past the kubelet's last look at
/// the pod ([`past_the_last_look`]) what the kubelet no longer generates stays as the apiserver
/// holds it: PodReadyToStartContainers once False; and where TerminatePod set the phase
/// ([`phase_set_by_terminate_pod`]), the whole status — generated again, its conditions would
/// follow the phase TerminatePod set (`PodFailed` for `ContainersNotReady`) and its pod resources
/// the terminal phase, neither of which the kubelet ever writes.
pub fn generate(input: &StatusInput<'_>) -> PodStatus {
    let last_look = input
        .pod
        .status
        .as_ref()
        .filter(|old| past_the_last_look(input.pod, input.runtime, old));
    if let Some(old) = last_look
        && phase_set_by_terminate_pod(input.pod, old)
    {
        // The sandbox as it was at the last look, unless that status was generated (by plegd)
        // while it still ran.
        let mut status = old.clone();
        if condition_status(old, POD_READY_TO_START_CONTAINERS) != Some("False") {
            keep_condition(
                &mut status,
                &generate_api_pod_status(input),
                POD_READY_TO_START_CONTAINERS,
            );
        }
        return status;
    }
    let mut status = generate_api_pod_status(input);
    if pod_is_finished(input.pod, input.runtime, status.phase.as_deref()) {
        terminate_pod(input.pod, &mut status);
    }
    if let Some(old) = last_look
        && condition_status(old, POD_READY_TO_START_CONTAINERS) == Some("False")
    {
        keep_condition(&mut status, old, POD_READY_TO_START_CONTAINERS);
    }
    status
}

fn condition_status<'a>(status: &'a PodStatus, type_: &str) -> Option<&'a str> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// `status`'s condition of `type_` as `from` has it (in place; appended where `status` has none).
fn keep_condition(status: &mut PodStatus, from: &PodStatus, type_: &str) {
    let Some(kept) = from.conditions.iter().flatten().find(|c| c.type_ == type_) else {
        return;
    };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = kept.clone(),
        None => conditions.push(kept.clone()),
    }
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
    let recursive_read_only = supports_recursive_read_only(pod, input.runtime, input.recursive_read_only_handlers);
    let conversion = Conversion {
        runtime_name: input.runtime_name,
        recursive_read_only,
        pod_restarting: input.kubelet.restart_all_containers()
            && should_all_containers_restart(pod, input.runtime, old),
        kubelet: input.kubelet,
    };

    let [mut container_list, mut init_list, mut ephemeral_list] =
        ListKind::ALL.map(|kind| container_statuses(pod, kind, kind.statuses(old), input.runtime, conversion));
    truncate_messages(
        pod,
        input.runtime,
        &mut [&mut container_list, &mut init_list, &mut ephemeral_list],
    );
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
    let mut phase = get_phase(pod, &all, pod_is_terminal, has_initialized, input.kubelet);
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
        extended_resource_claim_status: old.extended_resource_claim_status.clone(),
        node_allocatable_resource_claim_statuses: old.node_allocatable_resource_claim_statuses.clone(),
        ..PodStatus::default()
    };
    if deadline_exceeded {
        status.reason = Some(DEADLINE_EXCEEDED.to_owned());
        status.message = Some(DEADLINE_EXCEEDED_MESSAGE.to_owned());
    } else if old.phase.as_deref() == Some(phase) {
        status.reason = old.reason.clone();
        status.message = old.message.clone();
    }
    status.conditions = Some(conditions(
        pod,
        old,
        input.runtime,
        &all,
        phase,
        input.now,
        input.kubelet,
    ));

    set_pod_and_host_ips(&mut status, old, &input.runtime.ips, input.node_ips, spec.host_network);
    status.start_time = old.start_time.clone().or_else(|| Some(api_time(input.now)));
    if input.kubelet.pod_level_resources() {
        (status.resources, status.allocated_resources) =
            resources::pod_status_resources(spec, old.phase.as_deref(), old.resources.as_ref());
    }
    status.container_statuses = Some(container_list);
    status.init_container_statuses =
        (!spec.init_containers.is_empty() || old.init_container_statuses.is_some()).then_some(init_list);
    status.ephemeral_container_statuses =
        (!spec.ephemeral_containers.is_empty() || old.ephemeral_container_statuses.is_some()).then_some(ephemeral_list);
    merge_pod_status(
        old,
        status,
        could_have_running_containers(input.runtime),
        input.now,
        input.kubelet,
    )
}

/// The status manager's `mergePodStatus`: the conditions others own stay as the old status has
/// them, the kubelet's come from the new one (DisruptionTarget, shared, only once the pod
/// becomes terminal with nothing running); resourceClaimStatuses, extendedResourceClaimStatus and
/// nodeAllocatableResourceClaimStatuses are not the kubelet's. A pod
/// does not become terminal while it could have running containers (a sidecar still running
/// after an init container failed under Never, say): phase, reason and message stay the old
/// ones (an old status without a phase gives Pending: plegd never writes an empty phase). A
/// terminal phase has Ready and ContainersReady False.
pub fn merge_pod_status(
    old: &PodStatus,
    mut new: PodStatus,
    could_have_running: bool,
    now: SystemTime,
    kubelet: KubeletMinor,
) -> PodStatus {
    let to_terminal = !is_terminal(old.phase.as_deref()) && is_terminal(new.phase.as_deref());
    let mut merged: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !kubelet.owns_condition(&c.type_))
        .cloned()
        .collect();
    for c in new.conditions.take().into_iter().flatten() {
        if kubelet.owns_condition(&c.type_) {
            merged.push(c);
        } else if c.type_ == DISRUPTION_TARGET && to_terminal && !could_have_running {
            match merged.iter_mut().find(|m| m.type_ == c.type_) {
                Some(m) => *m = c,
                None => merged.push(c),
            }
        }
    }
    new.conditions = Some(merged);
    // Not the kubelet's: DRA's claims, as the old status has them.
    new.resource_claim_statuses = old.resource_claim_statuses.clone();
    new.extended_resource_claim_status = old.extended_resource_claim_status.clone();
    new.node_allocatable_resource_claim_statuses = old.node_allocatable_resource_claim_statuses.clone();
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
/// tests/status_e2e.rs), prober results, and in-place resize. What TestStaticPod checks — a mirror
/// pod's status comes from its static pod's runtime status — is checked by decide.rs'
/// `a_mirror_pod_is_written_only_from_its_static_pod` (phase.rs and pod_end.rs hold how a mirror
/// pod's phase and end differ).
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
mod tests;
