//! What plegd writes for a pod, decided in one pure step: [`decide`] takes the status mode, the
//! pod as the informer has it, plegd's own last write of it, a runtime status read successfully and
//! the time, and says whether to write (and what), to compare (shadow mode) or to skip (and why).
//! The syncLoop decides only *when* to sync a pod and the status manager only *how* to write; the
//! rule for which copy of the pod's status is the apiserver's newest ([`apiserver_status`]) is
//! here, once, for both.
//!
//! A status whose runtime read failed never reaches this step: [`decide`] takes a
//! [`RuntimePodStatus`], and the syncLoop hands it only what a successful read gave
//! (`cache::CachedStatus::read`, which answers a failed read with its error).

use std::borrow::Cow;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use super::StatusMode;
use super::compare::{Difference, Probed, differences, mark_deleted_instances};
use super::gate::{GATE_RELEASED, own_condition};
use super::generate::{
    CONTAINERS_RUNNING, DISRUPTION_TARGET, IllegalTransition, KUBELET_CONDITIONS, KubeletMinor, StatusInput,
    active_deadline, check_container_state_transition, containers_running_condition, generate, is_terminal,
    observed_generation, pod_can_be_deleted, set_transition_time,
};
use crate::apiserver::pod::ApiPod;
use crate::kubecontainer::RuntimePodStatus;

/// What a status is generated with besides the pod and its runtime status: facts of this node and
/// of its runtime, learnt at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// The runtime's name, the scheme of container ids (`containerd://…`).
    pub runtime_name: String,
    /// The node's IPs, primary first (hostIP, and podIPs of host-network pods).
    pub node_ips: Vec<String>,
    /// The runtime handlers that support recursive read-only mounts, as the runtime reported them
    /// at start; None when it could not be asked.
    pub recursive_read_only_handlers: Option<Vec<String>>,
    /// Write containers' `stopSignal` (the kubelet's ContainerStopSignals feature gate).
    pub stop_signals: bool,
    /// The kubelet minor whose status is generated: the node's kubelet's (`--kubelet-version`, or
    /// the Node's `kubeletVersion`).
    pub kubelet: KubeletMinor,
}

/// plegd's own last write of a pod's status: what the apiserver answered the PATCH with, and the
/// resourceVersion it gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct LastWrite {
    pub status: PodStatus,
    pub resource_version: String,
}

impl LastWrite {
    /// Whether this write is newer than the informer's copy of `pod` (the informer has not seen it
    /// yet): then it, not the informer's copy, is what the apiserver holds.
    pub fn ahead_of(&self, pod: &ApiPod) -> bool {
        older(pod.metadata.resource_version.as_deref(), &self.resource_version)
    }
}

/// Whether resourceVersion `a` is older than `b`. resourceVersions are opaque, but every apiserver
/// in use gives increasing integers; anything else compares as "not older".
fn older(a: Option<&str>, b: &str) -> bool {
    match (a.and_then(|a| a.parse::<u64>().ok()), b.parse::<u64>().ok()) {
        (Some(a), Some(b)) => a < b,
        (None, Some(_)) => true,
        _ => false,
    }
}

/// The pod's status as the apiserver holds it, as far as plegd knows: its own last write while the
/// informer's copy is older than that write, else the informer's copy. The base both of status
/// generation and of the patch that writes it. The second value is whether it is the informer's copy.
pub fn apiserver_status<'a>(pod: &'a ApiPod, last_write: Option<&'a LastWrite>) -> (Option<&'a PodStatus>, bool) {
    match last_write {
        Some(write) if write.ahead_of(pod) => (Some(&write.status), false),
        _ => (pod.status.as_ref(), true),
    }
}

/// What to do with a pod's generated status.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Hand `status` to the status manager; once it is on the apiserver, delete the pod (full mode,
    /// a deleted pod that is finished: the kubelet status manager's `canBeDeleted`).
    Write {
        status: Box<PodStatus>,
        delete_when_written: bool,
    },
    /// Shadow mode: nothing is written; these fields of the generated status differ from the
    /// apiserver's.
    Shadow { differences: Vec<Difference> },
    /// Nothing is written, for this reason.
    Skip(Skip),
}

/// Why nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// The status manager's `checkContainerStateTransition` (full mode): the update is aborted.
    #[error(transparent)]
    IllegalTransition(#[from] IllegalTransition),
    /// A mirror pod whose annotation names a runtime pod of another name: not its static pod. The
    /// kubelet's `IsMirrorPodOf` matches the full name as well as the hash; a status of some other
    /// pod is never written to it.
    #[error("mirror pod names static pod {runtime_uid}, but the runtime runs that as {namespace}/{name}")]
    NotItsStaticPod {
        runtime_uid: String,
        namespace: String,
        name: String,
    },
}

/// For a mirror pod, whether `runtime` is its static pod's: the same namespace and name (the
/// runtime's status of a pod it does not know, which names none, is the static pod's absence).
/// Every other pod's runtime status is its own by its uid.
fn is_static_pod_of(pod: &ApiPod, runtime: &RuntimePodStatus) -> Result<(), Skip> {
    let names = |namespace: &str, name: &str| {
        runtime.namespace.is_empty()
            || runtime.name.is_empty()
            || (pod.metadata.namespace.as_deref() == Some(namespace) && pod.metadata.name.as_deref() == Some(name))
    };
    if !pod.is_mirror() || names(&runtime.namespace, &runtime.name) {
        return Ok(());
    }
    Err(Skip::NotItsStaticPod {
        runtime_uid: runtime.id.clone(),
        namespace: runtime.namespace.clone(),
        name: runtime.name.clone(),
    })
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: Action,
    /// When the pod's active deadline passes, if that is ahead and the pod is not terminal: it is
    /// synced then (the kubelet's `ShouldSync` of the active deadline handler).
    pub deadline: Option<SystemTime>,
    /// Whether the status was generated from the informer's copy of the pod (not from plegd's own
    /// newer write): only then do the same inputs give the same status next time.
    pub from_informer: bool,
    /// The kubelet-equivalent status plegd generated (whatever the mode writes of it); None when
    /// nothing was generated.
    pub generated: Option<Box<PodStatus>>,
}

/// Decide what plegd writes for `pod` (the informer's copy) from its runtime status `runtime`, read
/// successfully, and plegd's own `last_write` of it. A mirror pod's runtime status is its static
/// pod's ([`ApiPod::runtime_uid`]): its status follows the static pod's containers, is never forced
/// terminal, and the pod is never deleted (the kubelet deletes mirror pods through their config).
pub fn decide(
    mode: StatusMode,
    node: &NodeFacts,
    pod: &ApiPod,
    last_write: Option<&LastWrite>,
    runtime: &RuntimePodStatus,
    now: SystemTime,
) -> Decision {
    let (base_status, from_informer) = apiserver_status(pod, last_write);
    if let Err(skip) = is_static_pod_of(pod, runtime) {
        return Decision {
            action: Action::Skip(skip),
            deadline: None,
            from_informer,
            generated: None,
        };
    }
    // Generate from plegd's own last write while the informer has not caught up with it (only then
    // is the pod copied).
    let base: Cow<'_, ApiPod> = if from_informer {
        Cow::Borrowed(pod)
    } else {
        Cow::Owned(ApiPod {
            status: base_status.cloned(),
            ..pod.clone()
        })
    };
    let generated = generate(&StatusInput {
        pod: &base,
        runtime,
        runtime_name: &node.runtime_name,
        node_ips: &node.node_ips,
        recursive_read_only_handlers: node.recursive_read_only_handlers.as_deref(),
        stop_signals: node.stop_signals,
        kubelet: node.kubelet,
        now,
    });
    let deadline = (!is_terminal(generated.phase.as_deref()))
        .then(|| active_deadline(&base, generated.start_time.as_ref()))
        .flatten()
        .filter(|deadline| *deadline > now);
    let decision = |action, generated: PodStatus| Decision {
        action,
        deadline,
        from_informer,
        generated: Some(Box::new(generated)),
    };
    if mode.checks_state_transitions()
        && let Err(illegal) = check_container_state_transition(
            base.status.as_ref().unwrap_or(&Default::default()),
            &generated,
            &base,
            node.kubelet,
        )
    {
        return decision(Action::Skip(illegal.into()), generated);
    }
    let status = match mode {
        StatusMode::Shadow => {
            let actual = pod.status.clone().unwrap_or_default();
            let mut differences = differences(&actual, &generated, &Probed::of(pod));
            if !node.kubelet.restart_all_containers() {
                mark_deleted_instances(&mut differences, |id| {
                    runtime.container_statuses.iter().any(|c| c.id == id)
                });
            }
            return decision(Action::Shadow { differences }, generated);
        }
        StatusMode::Conditions => conditions_status(&base, &generated, now),
        StatusMode::Full => full_status(&base, generated.clone(), now),
    };
    let delete_when_written = mode.deletes_finished_pods()
        && pod.metadata.deletion_timestamp.is_some()
        && pod_can_be_deleted(&base, runtime, generated.phase.as_deref());
    decision(
        Action::Write {
            status: Box::new(status),
            delete_when_written,
        },
        generated,
    )
}

/// Whether the informer's `new` copy of a pod changes what [`decide`] makes of the same runtime
/// status, other than through the status itself: another pod under the name, a deletion
/// (`deletionTimestamp`), a new `metadata.generation` (written back as `observedGeneration`), a
/// spec change (containers, restart policy, readiness gates, the deadline, ...), or another static
/// pod behind a mirror pod. The syncLoop syncs such a change at once from the runtime status it has
/// cached; any other change (plegd's own writes coming back, someone else's status) waits for a
/// newer runtime status, as the kubelet's pod workers do. In shadow mode a new status is compared at
/// once: it is what plegd compares with (the kubelet's write). A copy of a pod the apiserver is
/// removing changes nothing plegd would write ([`removal_drops_write`]).
pub fn informer_change_matters(mode: StatusMode, old: &ApiPod, new: &ApiPod) -> bool {
    if removal_drops_write(mode, new) {
        return false;
    }
    (mode == StatusMode::Shadow && old.status != new.status)
        || old.metadata.uid != new.metadata.uid
        || old.metadata.generation != new.metadata.generation
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.is_mirror() != new.is_mirror()
        || old.runtime_uid() != new.runtime_uid()
        || old.spec != new.spec
}

/// Whether, in `mode`, nothing is written to this copy of a pod because the apiserver removes the
/// pod with it ([`ApiPod::being_removed`]): in conditions mode, where a kubelet manages the pods
/// (shadow mode writes nothing anyway). The kubelet's status
/// manager sends the DELETE that removes a pod whose removal failed after its grace-0 copy was
/// stored (`canBeDeleted`), so plegd's write would only be answered 404. In full mode plegd is
/// that status manager: its write goes on, and so does its DELETE, whose retry after a timeout
/// may find the pod stored with grace 0 already.
pub fn removal_drops_write(mode: StatusMode, pod: &ApiPod) -> bool {
    mode.writes() && !mode.deletes_finished_pods() && pod.being_removed()
}

/// plegd's own condition for `pod`, from the container statuses it generated; or, where the
/// readiness gate was released on the pod (`plegd release-gates`), the released condition as it is:
/// plegd never arms a released gate again (the pod's readiness is the kubelet's alone until the pod
/// is created anew).
fn running_condition(pod: &ApiPod, generated: &PodStatus) -> PodCondition {
    if let Some(released) = own_condition(pod.status.as_ref()).filter(|c| c.reason.as_deref() == Some(GATE_RELEASED)) {
        return released.clone();
    }
    let statuses = generated.container_statuses.as_deref().unwrap_or_default();
    PodCondition {
        observed_generation: observed_generation(pod),
        ..containers_running_condition(pod, statuses)
    }
}

/// Conditions mode: the apiserver's status with only plegd's own condition put in, by type.
fn conditions_status(pod: &ApiPod, generated: &PodStatus, now: SystemTime) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    merge_condition(&mut conditions, running_condition(pod, generated), now);
    status.conditions = Some(conditions);
    status
}

/// Full mode: the generated status, with plegd's own condition in it.
fn full_status(pod: &ApiPod, generated: PodStatus, now: SystemTime) -> PodStatus {
    let mut running = running_condition(pod, &generated);
    let mut status = generated;
    let mut conditions = status.conditions.take().unwrap_or_default();
    // The generated list kept the old plegd condition as "someone else's"; replace it.
    conditions.retain(|c| c.type_ != CONTAINERS_RUNNING);
    let old = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    set_transition_time(&mut running, &old, now);
    conditions.push(running);
    status.conditions = Some(conditions);
    status
}

/// The status to send, merged at write time with the apiserver's `newest` copy (the kubelet's
/// status manager does the same in `syncPod` → `mergePodStatus`, against the pod it has just
/// read): a status decided earlier, and queued or retried since, must not undo what another writer
/// put in meanwhile.
/// - conditions mode: the newest copy, with only plegd's own condition taken from `wanted`;
/// - full mode: `wanted`, but every condition plegd and the kubelet do not own, and
///   `resourceClaimStatuses`, as the newest copy has them; `DisruptionTarget` (shared) from
///   `wanted` only where the newest copy has none;
/// - shadow mode writes nothing: `wanted` as it is.
///
/// A condition taken from `wanted` keeps the newest copy's lastTransitionTime while its status is
/// the same there.
pub fn rebase(mode: StatusMode, newest: &PodStatus, wanted: &PodStatus) -> PodStatus {
    let newest_conditions = newest.conditions.as_deref().unwrap_or_default();
    let wanted_conditions = wanted.conditions.as_deref().unwrap_or_default();
    let with_time = |c: &PodCondition| {
        let mut c = c.clone();
        if let Some(o) = newest_conditions.iter().find(|o| o.type_ == c.type_)
            && o.status == c.status
            && o.last_transition_time.is_some()
        {
            c.last_transition_time = o.last_transition_time.clone();
        }
        c
    };
    // Orders are kept: the newest copy's in conditions mode, `wanted`'s in full mode, so that a
    // write that changes nothing sends nothing.
    match mode {
        StatusMode::Shadow => wanted.clone(),
        StatusMode::Conditions => {
            let mut conditions = newest_conditions.to_vec();
            for c in wanted_conditions.iter().filter(|c| c.type_ == CONTAINERS_RUNNING) {
                match conditions.iter_mut().find(|o| o.type_ == c.type_) {
                    Some(o) => *o = with_time(c),
                    None => conditions.push(with_time(c)),
                }
            }
            PodStatus {
                conditions: Some(conditions),
                ..newest.clone()
            }
        }
        StatusMode::Full => {
            // Every condition a kubelet of some minor owns: one that a kubelet of the node's minor does
            // not own (AllContainersRestarting before 1.36) is in `wanted` as the old status had it.
            let owned = |type_: &str| type_ == CONTAINERS_RUNNING || KUBELET_CONDITIONS.contains(&type_);
            let newest_of = |type_: &str| newest_conditions.iter().find(|n| n.type_ == type_);
            let mut conditions: Vec<PodCondition> = wanted_conditions
                .iter()
                .filter_map(|c| {
                    if owned(&c.type_) {
                        Some(with_time(c))
                    } else if c.type_ == DISRUPTION_TARGET && newest_of(DISRUPTION_TARGET).is_none() {
                        Some(c.clone())
                    } else {
                        // Someone else's: as the newest copy has it, or gone with it.
                        newest_of(&c.type_).cloned()
                    }
                })
                .collect();
            for n in newest_conditions {
                if !owned(&n.type_) && !conditions.iter().any(|c| c.type_ == n.type_) {
                    conditions.push(n.clone());
                }
            }
            PodStatus {
                conditions: Some(conditions),
                resource_claim_statuses: newest.resource_claim_statuses.clone(),
                extended_resource_claim_status: newest.extended_resource_claim_status.clone(),
                node_allocatable_resource_claim_statuses: newest.node_allocatable_resource_claim_statuses.clone(),
                ..wanted.clone()
            }
        }
    }
}

/// Put `condition` into `conditions` by type (replacing one of the same type), keeping its
/// lastTransitionTime unless its status changed.
pub fn merge_condition(conditions: &mut Vec<PodCondition>, mut condition: PodCondition, now: SystemTime) {
    set_transition_time(&mut condition, conditions, now);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::{RuntimeContainerState, SandboxState};
    use crate::status::generate::test_support::{
        at, condition_of, pod_with, ready_sandbox, runtime_status, sandbox, terminated_status,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node() -> NodeFacts {
        NodeFacts {
            runtime_name: "containerd".into(),
            node_ips: vec!["192.0.2.10".into()],
            recursive_read_only_handlers: Some(Vec::new()),
            stop_signals: false,
            kubelet: KubeletMinor::V1_37,
        }
    }

    fn running() -> RuntimePodStatus {
        RuntimePodStatus {
            id: "u1".into(),
            ips: vec!["10.1.0.5".into()],
            container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        }
    }

    /// The app container exited (code 3) and the pod's sandbox is stopped.
    fn exited() -> RuntimePodStatus {
        RuntimePodStatus {
            id: "u1".into(),
            container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Exited, 10)],
            sandbox_statuses: vec![sandbox("s1", SandboxState::NotReady, 1)],
            ..RuntimePodStatus::default()
        }
    }

    /// A pod the kubelet (or another component) wrote a condition of its own to.
    fn pod(policy: &str) -> ApiPod {
        let mut pod = pod_with(&["app"], vec![], policy);
        pod.metadata.resource_version = Some("10".into());
        pod.status = Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "example.com/Gate".into(),
                status: "True".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    fn deleted(mut pod: ApiPod) -> ApiPod {
        pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        pod
    }

    fn write_of(decision: &Decision) -> (&PodStatus, bool) {
        match &decision.action {
            Action::Write {
                status,
                delete_when_written,
            } => (status, *delete_when_written),
            other => panic!("not a write: {other:?}"),
        }
    }

    /// Per mode, what is written for the same pod and runtime status.
    #[test]
    fn each_mode_writes_its_own_share() {
        let pod = pod("Always");
        let cases: [(StatusMode, &str, Option<&str>, bool); 2] = [
            // Conditions: the apiserver's status, plegd's condition merged in by type.
            (StatusMode::Conditions, "conditions", Some("Pending"), true),
            // Full: the generated status, plegd's condition in it, others' kept.
            (StatusMode::Full, "full", Some("Running"), true),
        ];
        for (mode, name, phase, others_kept) in cases {
            let decision = decide(mode, &node(), &pod, None, &running(), at(100));
            let (status, delete) = write_of(&decision);
            assert_eq!(status.phase.as_deref(), phase, "{name}");
            assert_eq!(condition_of(status, CONTAINERS_RUNNING).status, "True", "{name}");
            let others = status.conditions.as_deref().unwrap_or_default();
            assert_eq!(
                others.iter().any(|c| c.type_ == "example.com/Gate"),
                others_kept,
                "{name}"
            );
            assert!(!delete, "{name}: a running pod is never deleted");
            assert!(decision.from_informer && decision.deadline.is_none(), "{name}");
        }
        let shadow = decide(StatusMode::Shadow, &node(), &pod, None, &running(), at(100));
        let Action::Shadow { differences } = &shadow.action else {
            panic!("shadow writes nothing: {shadow:?}")
        };
        let paths: Vec<&str> = differences.iter().map(|d| d.path.as_str()).collect();
        assert!(paths.contains(&"phase"), "{paths:?}");
        assert!(paths.contains(&"containerStatuses[app]"), "{paths:?}");
    }

    /// Only full mode deletes, and only a deleted pod that is finished with nothing of it ready.
    #[test]
    fn a_finished_deleted_pod_is_deleted_once_written_in_full_mode_only() {
        let table: [(StatusMode, bool, RuntimePodStatus, bool); 6] = [
            (StatusMode::Full, true, exited(), true),
            (StatusMode::Full, false, exited(), false),
            (StatusMode::Full, true, running(), false),
            (StatusMode::Conditions, true, exited(), false),
            (StatusMode::Conditions, false, exited(), false),
            (StatusMode::Conditions, true, running(), false),
        ];
        for (i, (mode, is_deleted, runtime, want)) in table.into_iter().enumerate() {
            let pod = if is_deleted {
                deleted(pod("Never"))
            } else {
                pod("Never")
            };
            let decision = decide(mode, &node(), &pod, None, &runtime, at(100));
            assert_eq!(write_of(&decision).1, want, "case {i} ({})", mode.as_str());
        }
    }

    /// checkContainerStateTransition, in full mode only: a terminated container of a pod that does
    /// not restart it may not run again.
    #[test]
    fn an_illegal_transition_is_skipped_in_full_mode() {
        let mut pod = pod("Never");
        pod.status.as_mut().unwrap().container_statuses = Some(vec![terminated_status("app", 1)]);
        let full = decide(StatusMode::Full, &node(), &pod, None, &running(), at(100));
        assert!(
            matches!(&full.action, Action::Skip(Skip::IllegalTransition(t)) if t.name == "app"),
            "{full:?}"
        );
        let conditions = decide(StatusMode::Conditions, &node(), &pod, None, &running(), at(100));
        write_of(&conditions);
    }

    /// The base is plegd's own last write while the informer has not seen it, else the informer's copy.
    #[test]
    fn the_newer_of_the_informers_copy_and_plegds_last_write_is_the_base() {
        let pod = pod("Always");
        let write = |rv: &str| LastWrite {
            status: PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "example.com/Written".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            },
            resource_version: rv.into(),
        };
        for (rv, ahead) in [("11", true), ("10", false), ("9", false), ("not-a-number", false)] {
            let last = write(rv);
            assert_eq!(last.ahead_of(&pod), ahead, "rv {rv}");
            let (base, from_informer) = apiserver_status(&pod, Some(&last));
            assert_eq!(from_informer, !ahead, "rv {rv}");
            assert_eq!(
                base.and_then(|s| s.phase.as_deref()),
                Some(if ahead { "Running" } else { "Pending" })
            );
            let decision = decide(StatusMode::Conditions, &node(), &pod, Some(&last), &running(), at(100));
            assert_eq!(decision.from_informer, !ahead, "rv {rv}");
            let (status, _) = write_of(&decision);
            let kept = if ahead {
                "example.com/Written"
            } else {
                "example.com/Gate"
            };
            condition_of(status, kept);
        }
        let mut unversioned = pod.clone();
        unversioned.metadata.resource_version = None;
        assert!(
            write("3").ahead_of(&unversioned),
            "a copy without a version is older than any write"
        );
    }

    /// A pod with activeDeadlineSeconds is synced again when its deadline passes, while it is ahead
    /// and the pod is not terminal.
    #[test]
    fn the_active_deadline_ahead_is_reported() {
        let mut pod = pod("Always");
        pod.spec.active_deadline_seconds = Some(60);
        pod.status.as_mut().unwrap().start_time = Some(crate::status::generate::api_time(at(100)));
        let ahead = decide(StatusMode::Full, &node(), &pod, None, &running(), at(120));
        assert_eq!(ahead.deadline, Some(at(160)));
        let passed = decide(StatusMode::Full, &node(), &pod, None, &running(), at(200));
        assert_eq!(passed.deadline, None, "already passed");
        let mut ended = pod.clone();
        ended.status.as_mut().unwrap().phase = Some("Failed".into());
        let terminal = decide(StatusMode::Full, &node(), &ended, None, &exited(), at(120));
        assert_eq!(terminal.deadline, None, "a terminal pod has no deadline to wait for");
    }

    /// A mirror pod takes the runtime status of its static pod (the same namespace and name),
    /// is never deleted nor forced terminal, and is never written from another pod's status.
    #[test]
    fn a_mirror_pod_is_written_only_from_its_static_pod() {
        let mirror = |policy: &str| {
            let mut pod = pod(policy);
            pod.metadata.namespace = Some("kube-system".into());
            pod.metadata.name = Some("etcd-n1".into());
            pod.metadata.uid = Some("m1".into());
            pod.metadata.annotations =
                Some([(crate::apiserver::pod::MIRROR_POD_ANNOTATION.to_owned(), "u1".to_owned())].into());
            pod
        };
        let of = |namespace: &str, name: &str, mut runtime: RuntimePodStatus| {
            runtime.namespace = namespace.into();
            runtime.name = name.into();
            runtime
        };
        let ok = decide(
            StatusMode::Conditions,
            &node(),
            &mirror("Always"),
            None,
            &of("kube-system", "etcd-n1", running()),
            at(100),
        );
        assert_eq!(condition_of(write_of(&ok).0, CONTAINERS_RUNNING).status, "True");
        // Its static pod has stopped and the mirror pod is deleted: finished, but neither deleted
        // nor forced Failed (a static pod's phase under Always stays Running).
        let stopped = decide(
            StatusMode::Full,
            &node(),
            &deleted(mirror("Always")),
            None,
            &of("kube-system", "etcd-n1", exited()),
            at(100),
        );
        let (status, delete) = write_of(&stopped);
        assert!(!delete, "a mirror pod is never deleted");
        assert_eq!(status.phase.as_deref(), Some("Running"), "{status:?}");
        // The runtime runs that uid as another pod: nothing is written.
        let other = decide(
            StatusMode::Conditions,
            &node(),
            &mirror("Always"),
            None,
            &of("default", "web", running()),
            at(100),
        );
        assert!(
            matches!(&other.action, Action::Skip(Skip::NotItsStaticPod { name, .. }) if name == "web"),
            "{other:?}"
        );
        // The runtime does not know the uid (a status that names no pod): the static pod is not running.
        let absent = decide(
            StatusMode::Conditions,
            &node(),
            &mirror("Always"),
            None,
            &RuntimePodStatus::default(),
            at(100),
        );
        assert_eq!(condition_of(write_of(&absent).0, CONTAINERS_RUNNING).status, "False");
        // Only mirror pods are matched by name: a regular pod's runtime status is its own by uid.
        let regular = decide(
            StatusMode::Conditions,
            &node(),
            &pod("Always"),
            None,
            &of("default", "web", running()),
            at(100),
        );
        write_of(&regular);
    }

    /// Which informer changes are synced at once: what decide() reads besides the status.
    #[test]
    fn an_informer_change_matters_when_decide_reads_it() {
        let old = pod("Always");
        let changed = |change: fn(&mut ApiPod)| {
            let mut new = old.clone();
            new.metadata.resource_version = Some("11".into());
            change(&mut new);
            informer_change_matters(StatusMode::Full, &old, &new)
        };
        type Change = fn(&mut ApiPod);
        let table: [(&str, Change, bool); 10] = [
            ("nothing but the version", |_| {}, false),
            (
                "deleted with grace period 0 (full mode: plegd is what removes it, should the removal fail)",
                |p| {
                    *p = deleted(p.clone());
                    p.metadata.deletion_grace_period_seconds = Some(0);
                },
                true,
            ),
            (
                "the status (plegd's own write coming back)",
                |p| p.status.as_mut().unwrap().phase = Some("Running".into()),
                false,
            ),
            (
                "a label",
                |p| p.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into()),
                false,
            ),
            ("deleted", |p| *p = deleted(p.clone()), true),
            ("a new generation", |p| p.metadata.generation = Some(2), true),
            (
                "the restart policy",
                |p| p.spec.restart_policy = Some("Never".into()),
                true,
            ),
            (
                "a readiness gate",
                |p| p.spec.readiness_gates = vec!["example.com/gate".into()],
                true,
            ),
            (
                "made a mirror pod",
                |p| {
                    p.metadata.annotations = Some(
                        [(
                            crate::apiserver::pod::MIRROR_POD_ANNOTATION.to_owned(),
                            "hash".to_owned(),
                        )]
                        .into(),
                    )
                },
                true,
            ),
            (
                "another pod under the name",
                |p| p.metadata.uid = Some("u2".into()),
                true,
            ),
        ];
        for (case, change, matters) in table {
            assert_eq!(changed(change), matters, "{case}");
        }
        // Where a kubelet manages the pods, a copy the apiserver removes the pod with changes nothing
        // plegd writes; one a finalizer holds does.
        let mut removing = deleted(old.clone());
        removing.metadata.deletion_grace_period_seconds = Some(0);
        removing.metadata.generation = Some(2);
        assert!(!informer_change_matters(StatusMode::Conditions, &old, &removing));
        removing.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        assert!(informer_change_matters(StatusMode::Conditions, &old, &removing));
        // Shadow mode compares with the apiserver's status: someone's new status is compared at once.
        let mut written = old.clone();
        written.status.as_mut().unwrap().phase = Some("Running".into());
        assert!(informer_change_matters(StatusMode::Shadow, &old, &written));
        assert!(!informer_change_matters(StatusMode::Conditions, &old, &written));
    }

    #[test]
    fn a_released_gate_is_never_armed_again() {
        let mut pod = pod("Always");
        let released = crate::status::gate::released(None, at(1)).unwrap();
        pod.status = Some(PodStatus {
            conditions: Some(vec![released.clone()]),
            ..PodStatus::default()
        });
        for mode in [StatusMode::Conditions, StatusMode::Full] {
            let decision = decide(mode, &node(), &pod, None, &exited(), at(9));
            let (status, _) = write_of(&decision);
            assert_eq!(
                condition_of(status, CONTAINERS_RUNNING),
                &released,
                "{mode:?}: a dead container does not make it False again"
            );
        }
    }

    #[test]
    fn merge_condition_replaces_by_type_and_keeps_the_transition_time() {
        let condition = |status: &str| PodCondition {
            type_: CONTAINERS_RUNNING.into(),
            status: status.into(),
            ..PodCondition::default()
        };
        let mut conditions = Vec::new();
        merge_condition(&mut conditions, condition("True"), at(10));
        merge_condition(&mut conditions, condition("True"), at(20));
        assert_eq!(conditions.len(), 1);
        let first = conditions[0].last_transition_time.clone();
        merge_condition(&mut conditions, condition("False"), at(30));
        assert_eq!(conditions.len(), 1);
        assert_ne!(conditions[0].last_transition_time, first, "a changed status moves it");
    }

    /// A status decided from an older copy and written later: what another writer put in since
    /// stays, in every mode (the kubelet merges at write time, `syncPod` → `mergePodStatus`).
    #[test]
    fn a_late_write_keeps_what_others_wrote_since() {
        let cond = |type_: &str, status: &str, time: u64| PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(crate::status::generate::api_time(at(time))),
            ..PodCondition::default()
        };
        let types = |s: &PodStatus| -> Vec<(String, String)> {
            let mut v: Vec<_> = s
                .conditions
                .iter()
                .flatten()
                .map(|c| (c.type_.clone(), c.status.clone()))
                .collect();
            v.sort();
            v
        };
        // plegd decided from a copy with Ready True; since then the kubelet wrote Ready False, a
        // controller added DisruptionTarget and a gate of its own, and the phase moved on.
        let wanted = PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![cond("Ready", "True", 1), cond(CONTAINERS_RUNNING, "False", 5)]),
            ..PodStatus::default()
        };
        let newest = PodStatus {
            phase: Some("Failed".into()),
            conditions: Some(vec![
                cond("Ready", "False", 3),
                cond(DISRUPTION_TARGET, "True", 3),
                cond("example.com/Gate", "True", 3),
                cond(CONTAINERS_RUNNING, "False", 2),
            ]),
            ..PodStatus::default()
        };
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());

        let conditions = rebase(StatusMode::Conditions, &newest, &wanted);
        assert_eq!(
            conditions.phase.as_deref(),
            Some("Failed"),
            "the kubelet's fields are the newest"
        );
        assert_eq!(
            types(&conditions),
            vec![
                s("DisruptionTarget", "True"),
                s("Ready", "False"),
                s("example.com/Gate", "True"),
                s(CONTAINERS_RUNNING, "False")
            ]
        );
        let running = conditions
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == CONTAINERS_RUNNING)
            .unwrap();
        assert_eq!(
            running.last_transition_time,
            Some(crate::status::generate::api_time(at(2))),
            "an unchanged status keeps the apiserver's transition time"
        );

        let full = rebase(StatusMode::Full, &newest, &wanted);
        assert_eq!(
            full.phase.as_deref(),
            Some("Running"),
            "full mode writes its own fields"
        );
        assert_eq!(
            types(&full),
            vec![
                s("DisruptionTarget", "True"),
                s("Ready", "True"),
                s("example.com/Gate", "True"),
                s(CONTAINERS_RUNNING, "False")
            ],
            "another writer's conditions stay; the kubelet's own are plegd's in full mode"
        );

        // A DisruptionTarget plegd carries is sent only where the apiserver has none.
        let mut carried = wanted.clone();
        carried
            .conditions
            .as_mut()
            .unwrap()
            .push(cond(DISRUPTION_TARGET, "False", 1));
        let full = rebase(StatusMode::Full, &newest, &carried);
        let target: Vec<_> = full
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.type_ == DISRUPTION_TARGET)
            .map(|c| c.status.as_str())
            .collect();
        assert_eq!(target, ["True"]);
        let without = PodStatus {
            conditions: None,
            ..newest.clone()
        };
        let full = rebase(StatusMode::Full, &without, &carried);
        assert!(types(&full).contains(&s("DisruptionTarget", "False")));
        assert_eq!(rebase(StatusMode::Shadow, &newest, &wanted), wanted);
        // Nothing changed since: the same status, conditions in the same order (no PATCH).
        let same = PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                cond("example.com/Gate", "True", 1),
                cond("Ready", "True", 1),
                cond(CONTAINERS_RUNNING, "True", 1),
                cond("PodScheduled", "True", 1),
            ]),
            ..PodStatus::default()
        };
        assert_eq!(rebase(StatusMode::Full, &same, &same), same);
        assert_eq!(rebase(StatusMode::Conditions, &same, &same), same);
    }
}
