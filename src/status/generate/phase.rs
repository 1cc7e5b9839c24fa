//! The pod phase: `getPhase` (kubelet_pods.go) and the restart policies and rules it reads
//! (`ContainerShouldRestart`, `FindMatchingContainerRestartRule`, `AllContainersCouldRestart`),
//! and whether a phase is terminal.

use k8s_openapi::api::core::v1::{ContainerRestartRule, ContainerStateTerminated, ContainerStatus};

use super::{
    FAILED, KubeletMinor, PENDING, RUNNING, SUCCEEDED, find, is_mirror_pod, last_terminated, running, terminated,
    waiting,
};
use crate::apiserver::pod::{ApiContainer, ApiPod};

/// The reason the kubelet gives a container it removed to restart all of a pod's containers
/// (RestartAllContainersOnContainerExits): such a container restarts, whatever its exit code.
pub const RESTARTING_ALL_CONTAINERS: &str = "RestartingAllContainers";

/// `ContainerShouldRestart` (pkg/api/v1/pod/util.go, ContainerRestartRules): with a restart
/// policy of its own, a container's first restart rule that matches the exit code decides
/// (`Restart` restarts it, and `RestartAllContainers` where the kubelet restarts all containers:
/// [`KubeletMinor::restart_all_containers`]; in 1.35 such a rule falls back to the policy), then
/// its own policy; without one, the pod's (`Always` when unset).
pub fn container_should_restart(
    container: &ApiContainer,
    pod_policy: Option<&str>,
    exit_code: i32,
    kubelet: KubeletMinor,
) -> bool {
    if let Some(policy) = container.restart_policy.as_deref() {
        if let Some(rule) = matching_restart_rule(container, exit_code)
            && (rule.action == "Restart" || (rule.action == "RestartAllContainers" && kubelet.restart_all_containers()))
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
pub(super) fn matching_restart_rule(container: &ApiContainer, exit_code: i32) -> Option<&ContainerRestartRule> {
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
/// the kubelet removed it to restart all containers (a reason only a kubelet that restarts all
/// containers reads).
pub(super) fn restartable(
    container: &ApiContainer,
    pod: &ApiPod,
    t: &ContainerStateTerminated,
    kubelet: KubeletMinor,
) -> bool {
    container_should_restart(container, pod.spec.restart_policy.as_deref(), t.exit_code, kubelet)
        || (kubelet.restart_all_containers() && t.reason.as_deref() == Some(RESTARTING_ALL_CONTAINERS))
}

/// `getPhase` (the same in kubelets 1.35 to 1.37 but for the restart-all rule; ContainerRestartRules on). `statuses` holds regular and init
/// container statuses. A regular init container that failed and does not restart fails the pod;
/// once every regular container stopped, the pod runs on while one of them restarts.
pub fn get_phase(
    pod: &ApiPod,
    statuses: &[ContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
    kubelet: KubeletMinor,
) -> &'static str {
    let init = &pod.spec.init_containers;
    let containers = &pod.spec.containers;

    let (mut pending_restartable_init, mut pending_regular_init, mut failed_init_not_restartable) = (0, 0, 0);
    for c in init.iter().filter(|c| !c.is_restartable_init()) {
        match find(statuses, &c.name) {
            None => pending_regular_init += 1,
            Some(s) if running(s) => pending_regular_init += 1,
            Some(s) if let Some(t) = terminated(s) => {
                if t.exit_code != 0 && !restartable(c, pod, t, kubelet) {
                    failed_init_not_restartable += 1;
                }
            }
            Some(s) if waiting(s) => match last_terminated(s) {
                Some(t) if t.exit_code != 0 && !restartable(c, pod, t, kubelet) => failed_init_not_restartable += 1,
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
                if !restartable(c, pod, t, kubelet) {
                    stopped_not_restartable += 1;
                }
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            Some(s) if waiting(s) => match last_terminated(s) {
                Some(t) => {
                    stopped += 1;
                    if !restartable(c, pod, t, kubelet) {
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

/// `AllContainersCouldRestart`: some container (regular or init) has a `RestartAllContainers` rule,
/// where the kubelet restarts all containers (never in 1.35: its callers are behind that gate).
pub(super) fn all_containers_could_restart(pod: &ApiPod, kubelet: KubeletMinor) -> bool {
    kubelet.restart_all_containers()
        && pod
            .spec
            .containers
            .iter()
            .chain(&pod.spec.init_containers)
            .flat_map(|c| c.restart_policy_rules.iter())
            .any(|r| r.action == "RestartAllContainers")
}

/// Whether a phase is terminal: Succeeded or Failed, which never change again.
pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some(SUCCEEDED | FAILED))
}

#[cfg(test)]
mod tests;
