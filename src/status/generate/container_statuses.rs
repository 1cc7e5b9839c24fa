//! Container statuses: the runtime's statuses in API form (`convertToAPIContainerStatuses`,
//! `convertContainerStatus`), what the prober manager sets (`started`, `ready`), the lost init
//! containers of kubernetes#131317, and the termination messages' share (`normalizeStatus`).

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::super::resources;
use super::phase::RESTARTING_ALL_CONTAINERS;
use super::volume_mounts::volume_mount_statuses;
use super::{
    CONTAINER_STATUS_UNKNOWN, KubeletMinor, MAX_TERMINATION_MESSAGES, RESTARTING_ALL_CONTAINERS_MESSAGE, api_time,
    find, last_terminated, running, terminated, waiting,
};
use crate::apiserver::pod::{ApiContainer, ApiPod};
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus, go_json_string};

/// A time the runtime reported, as `convertContainerStatus` writes it: `time.Unix(0, t)`, so a
/// runtime that reports none (0, or a value refused as bad data) gives the Unix epoch, not no time.
fn runtime_time(t: Option<SystemTime>) -> Time {
    api_time(t.unwrap_or(SystemTime::UNIX_EPOCH))
}

/// One runtime status in API form (`convertContainerStatus`): from the old status of the name come
/// its volume mounts and, where the kubelet restarts all containers
/// ([`KubeletMinor::restart_all_containers`], from 1.36), a restart count never lower and its last
/// termination (the old state's when the container id changed, else the old last state) — the
/// runtime may no longer hold the instance that ended. In 1.35 the count and the last state are
/// the runtime's alone.
fn convert(
    cs: &RuntimeContainerStatus,
    old: Option<&ContainerStatus>,
    runtime_name: &str,
    pod_restarting: bool,
    kubelet: KubeletMinor,
) -> ContainerStatus {
    let container_id = format!("{runtime_name}://{}", cs.id);
    let mut status = ContainerStatus {
        name: cs.name.clone(),
        // A count from the runtime beyond what the API holds stays at the API's largest.
        restart_count: i32::try_from(cs.restart_count).unwrap_or(i32::MAX),
        image: cs.image.clone(),
        image_id: cs.image_id.clone(),
        container_id: Some(container_id.clone()),
        // The CRI does not know volume names: the mounts the status listed stay as they were.
        volume_mounts: old.and_then(|o| o.volume_mounts.clone()),
        ..ContainerStatus::default()
    };
    if let Some(old) = old.filter(|_| kubelet.restart_all_containers()) {
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
            // A new instance after a terminated one the runtime did not count (from 1.36).
            if let Some(old) = old
                && kubelet.restart_all_containers()
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
                // Whole here; cut to its share by bytes in `truncate_messages`.
                message: (!cs.message.is_empty()).then(|| cs.message.to_api_string(usize::MAX)),
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

/// Which list of the pod's containers a status list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListKind {
    Regular,
    Init,
    Ephemeral,
}

impl ListKind {
    /// Every list, in the order generation builds them.
    pub(super) const ALL: [ListKind; 3] = [ListKind::Regular, ListKind::Init, ListKind::Ephemeral];

    /// The pod's containers of this kind.
    pub(super) fn specs(self, pod: &ApiPod) -> &[ApiContainer] {
        match self {
            ListKind::Regular => &pod.spec.containers,
            ListKind::Init => &pod.spec.init_containers,
            ListKind::Ephemeral => &pod.spec.ephemeral_containers,
        }
    }

    /// The statuses of this kind a pod status holds.
    pub(super) fn statuses(self, status: &PodStatus) -> &[ContainerStatus] {
        match self {
            ListKind::Regular => status.container_statuses.as_deref(),
            ListKind::Init => status.init_container_statuses.as_deref(),
            ListKind::Ephemeral => status.ephemeral_container_statuses.as_deref(),
        }
        .unwrap_or_default()
    }
}

/// The message upstream gives an init container whose runtime status is gone once the pod has
/// initialized (kubernetes#131317, Kubernetes 1.36).
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

/// What converting a pod's container statuses needs besides the lists: the runtime's name, whether
/// its handler supports recursive read-only mounts, and whether the pod restarts all containers
/// (`ShouldAllContainersRestart`).
#[derive(Clone, Copy)]
pub(super) struct Conversion<'a> {
    pub(super) runtime_name: &'a str,
    pub(super) recursive_read_only: Option<bool>,
    pub(super) pod_restarting: bool,
    pub(super) kubelet: KubeletMinor,
}

/// The statuses of one list being built, by container name.
type Statuses<'a> = BTreeMap<&'a str, ContainerStatus>;

/// `convertToAPIContainerStatuses` for the pod's containers of one `kind`, then what the prober
/// manager's `UpdatePodStatus` sets (`started`, `ready`); `previous` is the list of that kind the
/// old status holds. Its passes, in upstream's order: [`waiting_statuses`],
/// [`vanished_containers`], [`runtime_statuses`], [`lost_init_containers`] (init containers only),
/// [`set_started_and_ready`]. Regular and ephemeral statuses come out sorted by name, init
/// container statuses in spec order (the status manager's `normalizeStatus`).
pub(super) fn container_statuses(
    pod: &ApiPod,
    kind: ListKind,
    previous: &[ContainerStatus],
    runtime: &RuntimePodStatus,
    conversion: Conversion<'_>,
) -> Vec<ContainerStatus> {
    let specs = kind.specs(pod);
    let default_reason = if pod.spec.init_containers.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let mut statuses = waiting_statuses(specs, previous, default_reason, conversion.recursive_read_only);
    vanished_containers(
        pod,
        specs,
        previous,
        runtime,
        conversion.pod_restarting,
        default_reason,
        &mut statuses,
    );
    runtime_statuses(specs, previous, runtime, conversion, &mut statuses);
    if kind == ListKind::Init
        && conversion.kubelet.lost_init_containers_completed()
        && any_regular_container_created(pod, runtime)
    {
        lost_init_containers(specs, runtime, &mut statuses);
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

/// Every container of the list waiting with `default_reason` (ContainerCreating, or
/// PodInitializing in a pod with init containers), its volume mounts from the spec; a container
/// the old status has keeps its restart count and last state, a terminated one its whole status.
fn waiting_statuses<'a>(
    specs: &'a [ApiContainer],
    previous: &[ContainerStatus],
    default_reason: &str,
    recursive_read_only: Option<bool>,
) -> Statuses<'a> {
    let mut statuses = Statuses::new();
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
    statuses
}

/// A container that was running and has vanished from the runtime terminated, code unknown
/// (ContainerStatusUnknown in its last state; counted as a restart unless the pod is being
/// deleted); one the kubelet removed to restart all containers waits, its last state says so.
/// Only ever from a successful read: the syncLoop never generates from a failed one.
fn vanished_containers(
    pod: &ApiPod,
    specs: &[ApiContainer],
    previous: &[ContainerStatus],
    runtime: &RuntimePodStatus,
    pod_restarting: bool,
    default_reason: &str,
    statuses: &mut Statuses<'_>,
) {
    let deleting = pod.metadata.deletion_timestamp.is_some();
    for c in specs {
        if runtime.container_statuses.iter().any(|s| s.name == c.name) {
            continue;
        }
        let Some(old) = find(previous, &c.name) else { continue };
        let Some(status) = statuses.get_mut(c.name.as_str()) else {
            continue;
        };
        // Removed by the kubelet to restart all containers: waiting, its last state says so.
        if pod_restarting && !waiting(old) {
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
}

/// The runtime's statuses of the list's containers, newest first: the newest of a name is its
/// state (with the fields read from the runtime's container: resources, user, stop signal), the
/// one before it its last state; older ones are not looked at.
fn runtime_statuses<'a>(
    specs: &'a [ApiContainer],
    previous: &[ContainerStatus],
    runtime: &RuntimePodStatus,
    conversion: Conversion<'_>,
    statuses: &mut Statuses<'a>,
) {
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
        let mut status = convert(
            cs,
            old,
            conversion.runtime_name,
            conversion.pod_restarting,
            conversion.kubelet,
        );
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
}

/// An init container the runtime no longer has, in a pod whose regular containers were created,
/// completed (kubernetes#131317, from 1.36: [`KubeletMinor::lost_init_containers_completed`]): it
/// does not run again. Sidecars are left as they are.
fn lost_init_containers(specs: &[ApiContainer], runtime: &RuntimePodStatus, statuses: &mut Statuses<'_>) {
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

/// `normalizeStatus`' cut of termination messages: each container of the pod's spec (regular, init
/// and ephemeral) gets an equal share of [`MAX_TERMINATION_MESSAGES`] bytes, and a message longer
/// than its share keeps its first share of bytes — cut as bytes, inside a character if it falls
/// there, then written as Go's JSON encoder writes it (each byte that is not UTF-8 one U+FFFD,
/// [`crate::kubecontainer::RawText`]). A message of a container the runtime still has is cut from the runtime's own
/// bytes, as the kubelet cuts the message it read; one that came from the old status (the runtime
/// no longer has that instance, or a message of the kubelet's own) is cut from the API's text.
pub(super) fn truncate_messages(pod: &ApiPod, runtime: &RuntimePodStatus, lists: &mut [&mut Vec<ContainerStatus>]) {
    let share = termination_message_share(pod);
    for list in lists.iter_mut() {
        for status in list.iter_mut() {
            for state in [status.state.as_mut(), status.last_state.as_mut()]
                .into_iter()
                .flatten()
            {
                let Some(terminated) = state.terminated.as_mut() else {
                    continue;
                };
                let Some(message) = terminated.message.as_mut() else {
                    continue;
                };
                let from_runtime = terminated
                    .container_id
                    .as_deref()
                    .and_then(|id| id.split_once("://"))
                    .and_then(|(_, id)| runtime.find_container(id))
                    .filter(|c| c.state == RuntimeContainerState::Exited)
                    .map(|c| &c.message)
                    .filter(|raw| raw.to_api_string(usize::MAX) == *message);
                match from_runtime {
                    Some(raw) => *message = raw.to_api_string(share),
                    None if message.len() > share => *message = go_json_string(&message.as_bytes()[..share]),
                    None => {}
                }
            }
        }
    }
}

/// Each container's share of [`MAX_TERMINATION_MESSAGES`]: the whole for a pod of no container.
pub fn termination_message_share(pod: &ApiPod) -> usize {
    let containers = pod.spec.containers.len() + pod.spec.init_containers.len() + pod.spec.ephemeral_containers.len();
    MAX_TERMINATION_MESSAGES / containers.max(1)
}

#[cfg(test)]
mod tests;
