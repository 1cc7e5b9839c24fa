//! The PLEG's pure core: the pod lifecycle events (`pkg/kubelet/pleg`'s `PodLifecycleEvent`) and
//! how they are computed from an old and a current view of a pod ([`compute_events`],
//! `generateEvents`), with what a status read adds to them. No I/O, no clock: the relister
//! (`pleg/mod.rs`) gives the time of the relist that saw a change.

use std::collections::HashSet;
use std::time::SystemTime;

use serde::{Serialize, Serializer};

use crate::kubecontainer::{PodUid, RuntimeContainer, RuntimeContainerState, RuntimePod, RuntimePodStatus};

/// The kinds of pod lifecycle event (`pleg.PodLifeCycleEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PodLifecycleEventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    /// The pod should be synced although no container changed (after a successful re-inspection,
    /// or after undelivered events were folded into current state).
    PodSync,
    /// A container went to the created or unknown state. Computed, never sent (as in the kubelet).
    ContainerChanged,
}

impl PodLifecycleEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContainerStarted => "ContainerStarted",
            Self::ContainerDied => "ContainerDied",
            Self::ContainerRemoved => "ContainerRemoved",
            Self::PodSync => "PodSync",
            Self::ContainerChanged => "ContainerChanged",
        }
    }
}

fn rfc3339<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(*t))
}

/// One pod lifecycle event. The kubelet's event carries only the pod uid, the type and the
/// container id; plegd adds what it knows at the time of the event, for people who watch them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodLifecycleEvent {
    #[serde(rename = "type")]
    pub kind: PodLifecycleEventType,
    pub pod_uid: PodUid,
    /// The container or sandbox id; None for PodSync.
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// True when `container_id` names the pod sandbox rather than a container.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sandbox: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// ContainerDied: the runtime's message with the termination message (see
    /// [`MAX_EVENT_MESSAGE`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the relist that saw the change started.
    #[serde(serialize_with = "rfc3339")]
    pub timestamp: SystemTime,
}

impl PodLifecycleEvent {
    fn new(kind: PodLifecycleEventType, pod_uid: &str, at: SystemTime) -> Self {
        Self {
            kind,
            pod_uid: pod_uid.to_owned(),
            container_id: None,
            namespace: None,
            pod: None,
            container: None,
            sandbox: false,
            exit_code: None,
            reason: None,
            message: None,
            timestamp: at,
        }
    }

    pub(super) fn pod_sync(pod_uid: &str, pod: Option<&RuntimePod>, at: SystemTime) -> Self {
        let mut event = Self::new(PodLifecycleEventType::PodSync, pod_uid, at);
        set_pod_names(&mut event, pod);
        event
    }
}

/// A container's state as the PLEG compares it (`plegContainerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlegContainerState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

impl From<RuntimeContainerState> for PlegContainerState {
    /// The kubelet does not use the created state: it maps to unknown.
    fn from(state: RuntimeContainerState) -> Self {
        match state {
            RuntimeContainerState::Created | RuntimeContainerState::Unknown => Self::Unknown,
            RuntimeContainerState::Running => Self::Running,
            RuntimeContainerState::Exited => Self::Exited,
        }
    }
}

pub(super) fn pleg_state(pod: Option<&RuntimePod>, id: &str) -> PlegContainerState {
    pod.and_then(|p| p.find_any(id))
        .map_or(PlegContainerState::NonExistent, |c| c.state.into())
}

/// The events for one container going from `old` to `new` (`generateEvents`).
pub fn generate_events(old: PlegContainerState, new: PlegContainerState) -> &'static [PodLifecycleEventType] {
    use PlegContainerState as S;
    use PodLifecycleEventType as E;
    if old == new {
        return &[];
    }
    match new {
        S::Running => &[E::ContainerStarted],
        S::Exited => &[E::ContainerDied],
        S::Unknown => &[E::ContainerChanged],
        S::NonExistent if old == S::Exited => &[E::ContainerRemoved],
        S::NonExistent => &[E::ContainerDied, E::ContainerRemoved],
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn set_pod_names(event: &mut PodLifecycleEvent, pod: Option<&RuntimePod>) {
    if let Some(pod) = pod {
        event.namespace = non_empty(&pod.namespace);
        event.pod = non_empty(&pod.name);
    }
}

/// The ids of a record in the kubelet's order (containers, then sandboxes), each with whether it
/// is a sandbox.
fn ids(pod: Option<&RuntimePod>) -> impl Iterator<Item = (&RuntimeContainer, bool)> {
    pod.into_iter().flat_map(|p| {
        let containers = p.containers.iter().map(|c| (c, false));
        containers.chain(p.sandboxes.iter().map(|s| (s, true)))
    })
}

/// Whether two records list the same ids in the same order, each in the same state: then no id
/// changed state and there is no event (the common case on a quiet node, checked in one pass).
/// Records of a relist list each pod's ids sorted (`PodGrouping`); anything else takes the full
/// comparison.
fn same_states(old: &RuntimePod, new: &RuntimePod) -> bool {
    let same = |a: &[RuntimeContainer], b: &[RuntimeContainer]| {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.state == b.state && a.id == b.id)
    };
    same(&old.containers, &new.containers) && same(&old.sandboxes, &new.sandboxes)
}

/// Every event between two records of one pod, pure (`computeEvents` over
/// `getContainersFromPods(old, new)`): containers and sandboxes of the old record, then of the new
/// one, each id once. Includes ContainerChanged, which the relister filters out before sending.
/// Allocates nothing when nothing changed: it runs for every pod on every relist.
pub fn compute_events(old: Option<&RuntimePod>, new: Option<&RuntimePod>, at: SystemTime) -> Vec<PodLifecycleEvent> {
    let Some(any) = old.or(new) else {
        return Vec::new();
    };
    if let (Some(old), Some(new)) = (old, new)
        && same_states(old, new)
    {
        return Vec::new();
    }
    every_event(any, old, new, at)
}

/// `compute_events` without the one-pass check for a pod that did not change.
fn every_event(
    any: &RuntimePod,
    old: Option<&RuntimePod>,
    new: Option<&RuntimePod>,
    at: SystemTime,
) -> Vec<PodLifecycleEvent> {
    let named = if new.is_some_and(|p| !p.name.is_empty()) {
        new
    } else {
        old
    };
    // An id repeated within a record counts once: a linear look-back, as pods hold few containers.
    let first_in = |pod: Option<&RuntimePod>, i: usize, id: &str| !ids(pod).take(i).any(|(p, _)| p.id == id);
    let old_ids = ids(old).enumerate().filter(|(i, (c, _))| first_in(old, *i, &c.id));
    let new_ids = ids(new)
        .enumerate()
        .filter(|(i, (c, _))| old.and_then(|o| o.find_any(&c.id)).is_none() && first_in(new, *i, &c.id));
    let mut events = Vec::new();
    for (_, (container, is_sandbox)) in old_ids.chain(new_ids) {
        let kinds = generate_events(pleg_state(old, &container.id), pleg_state(new, &container.id));
        for &kind in kinds {
            let mut event = PodLifecycleEvent::new(kind, &any.id, at);
            event.container_id = Some(container.id.clone());
            event.container = non_empty(&container.name);
            event.sandbox = is_sandbox;
            set_pod_names(&mut event, named);
            events.push(event);
        }
    }
    events
}

/// An event carries at most this many bytes of a container's message (a Kubernetes Event's note
/// holds 1 KiB).
pub const MAX_EVENT_MESSAGE: usize = 1024;

/// The first `max` bytes of `s`, cut at a character boundary.
pub fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Add what a fresh status says of a dead container: its exit code, reason and message.
pub(super) fn add_exit_details(events: &mut [PodLifecycleEvent], status: Option<&RuntimePodStatus>) {
    let Some(status) = status else { return };
    for event in events
        .iter_mut()
        .filter(|e| e.kind == PodLifecycleEventType::ContainerDied)
    {
        let found = event.container_id.as_deref().and_then(|id| status.find_container(id));
        if let Some(c) = found.filter(|c| c.state == RuntimeContainerState::Exited) {
            event.exit_code = Some(c.exit_code);
            event.reason = non_empty(&c.reason);
            let message = c.message.to_api_string(usize::MAX);
            event.message = non_empty(bounded(&message, MAX_EVENT_MESSAGE));
        }
    }
}

/// Events that state the current state of every container of a pod, then a PodSync: what a
/// consumer is told when too many of the pod's events could not be delivered.
pub(super) fn current_state_events(
    uid: &str,
    pod: Option<&RuntimePod>,
    status: Option<&RuntimePodStatus>,
    lost: &[PodLifecycleEvent],
    at: SystemTime,
) -> Vec<PodLifecycleEvent> {
    let mut events = Vec::new();
    let mut removed: HashSet<&str> = HashSet::new();
    for id in lost.iter().filter_map(|e| e.container_id.as_deref()) {
        if pod.and_then(|p| p.find_any(id)).is_none() && removed.insert(id) {
            let mut event = PodLifecycleEvent::new(PodLifecycleEventType::ContainerRemoved, uid, at);
            event.container_id = Some(id.to_owned());
            set_pod_names(&mut event, pod);
            events.push(event);
        }
    }
    let mut now = compute_events(None, pod, at);
    now.retain(|e| e.kind != PodLifecycleEventType::ContainerChanged);
    // From nothing, an exited container shows as died; running as started.
    add_exit_details(&mut now, status);
    events.extend(now);
    events.push(PodLifecycleEvent::pod_sync(uid, pod, at));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlegContainerState as S;
    use PodLifecycleEventType as E;

    use std::time::Duration;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    #[test]
    fn every_state_pair() {
        let states = [S::Running, S::Exited, S::Unknown, S::NonExistent];
        let expect = |old: S, new: S| -> Vec<E> {
            match (old, new) {
                (a, b) if a == b => vec![],
                (_, S::Running) => vec![E::ContainerStarted],
                (_, S::Exited) => vec![E::ContainerDied],
                (_, S::Unknown) => vec![E::ContainerChanged],
                (S::Exited, S::NonExistent) => vec![E::ContainerRemoved],
                (_, S::NonExistent) => vec![E::ContainerDied, E::ContainerRemoved],
            }
        };
        let mut pairs = 0;
        for old in states {
            for new in states {
                assert_eq!(
                    generate_events(old, new).to_vec(),
                    expect(old, new),
                    "{old:?} -> {new:?}"
                );
                pairs += 1;
            }
        }
        assert_eq!(pairs, 16);
        // Spelled out, the ones that matter most:
        assert_eq!(
            generate_events(S::Running, S::NonExistent),
            [E::ContainerDied, E::ContainerRemoved]
        );
        assert_eq!(
            generate_events(S::Unknown, S::NonExistent),
            [E::ContainerDied, E::ContainerRemoved]
        );
        assert_eq!(generate_events(S::NonExistent, S::Exited), [E::ContainerDied]);
    }

    #[test]
    fn created_maps_to_unknown() {
        assert_eq!(S::from(RuntimeContainerState::Created), S::Unknown);
        assert_eq!(S::from(RuntimeContainerState::Unknown), S::Unknown);
        assert_eq!(S::from(RuntimeContainerState::Running), S::Running);
        assert_eq!(S::from(RuntimeContainerState::Exited), S::Exited);
    }

    fn c(id: &str, name: &str, state: RuntimeContainerState) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            sandbox_id: String::new(),
            name: name.into(),
            state,
            created_at: 0,
            attempt: 0,
        }
    }

    fn pod(containers: Vec<RuntimeContainer>, sandboxes: Vec<RuntimeContainer>) -> RuntimePod {
        RuntimePod {
            id: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            containers,
            sandboxes,
        }
    }

    fn kinds(events: &[PodLifecycleEvent]) -> Vec<(E, &str)> {
        events
            .iter()
            .map(|e| (e.kind, e.container_id.as_deref().unwrap_or("")))
            .collect()
    }

    #[test]
    fn first_relist_of_a_running_pod() {
        use RuntimeContainerState::*;
        let new = pod(
            vec![c("c1", "app", Running), c("c2", "init", Exited)],
            vec![c("s1", "", Running)],
        );
        let events = compute_events(None, Some(&new), T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerStarted, "c1"),
                (E::ContainerDied, "c2"),
                (E::ContainerStarted, "s1")
            ]
        );
        assert_eq!(events[0].container.as_deref(), Some("app"));
        assert_eq!(events[0].namespace.as_deref(), Some("default"));
        assert_eq!(events[0].pod.as_deref(), Some("web"));
        assert!(events[2].sandbox);
        assert!(!events[0].sandbox);
    }

    #[test]
    fn no_change_no_events() {
        use RuntimeContainerState::*;
        let p = pod(vec![c("c1", "app", Running)], vec![c("s1", "", Running)]);
        assert!(compute_events(Some(&p), Some(&p), T0).is_empty());
    }

    /// The one-pass check answers "no event" exactly when the full comparison does, whatever the
    /// order, duplicates or states of the two records.
    #[test]
    fn the_one_pass_check_agrees_with_the_full_comparison() {
        use RuntimeContainerState::*;
        let states = [Created, Running, Exited, Unknown];
        let mut records = Vec::new();
        for a in states {
            for b in states {
                records.push(pod(
                    vec![c("c1", "app", a), c("c2", "side", b)],
                    vec![c("s1", "", Running)],
                ));
                records.push(pod(
                    vec![c("c2", "side", b), c("c1", "app", a)],
                    vec![c("s1", "", Running)],
                ));
                records.push(pod(vec![c("c1", "app", a), c("c1", "app", b)], vec![c("s1", "", a)]));
                records.push(pod(vec![c("c1", "app", a)], vec![c("s1", "", b), c("s2", "", a)]));
            }
        }
        records.push(pod(vec![], vec![]));
        let mut fast = 0;
        for old in &records {
            for new in &records {
                let full = every_event(old, Some(old), Some(new), T0);
                let quick = same_states(old, new);
                assert!(!quick || full.is_empty(), "{old:?} -> {new:?}: {:?}", kinds(&full));
                assert_eq!(kinds(&compute_events(Some(old), Some(new), T0)), kinds(&full));
                fast += usize::from(quick);
            }
        }
        // The one-pass check is taken at least for each record against itself.
        assert!(fast >= records.len());
    }

    #[test]
    fn pod_disappearing_reports_every_container() {
        use RuntimeContainerState::*;
        let old = pod(
            vec![c("c1", "app", Running), c("c2", "done", Exited)],
            vec![c("s1", "", Exited)],
        );
        let events = compute_events(Some(&old), None, T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerDied, "c1"),
                (E::ContainerRemoved, "c1"),
                (E::ContainerRemoved, "c2"),
                (E::ContainerRemoved, "s1")
            ]
        );
        // Names come from the old record when the pod is gone.
        assert_eq!(events[0].pod.as_deref(), Some("web"));
    }

    #[test]
    fn created_container_is_changed_only() {
        use RuntimeContainerState::*;
        let old = pod(vec![], vec![c("s1", "", Running)]);
        let new = pod(vec![c("c1", "app", Created)], vec![c("s1", "", Running)]);
        assert_eq!(
            kinds(&compute_events(Some(&old), Some(&new), T0)),
            [(E::ContainerChanged, "c1")]
        );
    }

    #[test]
    fn current_state_events_for_a_lost_queue() {
        use RuntimeContainerState::*;
        let now = pod(vec![c("c2", "app", Exited)], vec![c("s1", "", Running)]);
        let lost = vec![
            PodLifecycleEvent {
                container_id: Some("c1".into()),
                ..PodLifecycleEvent::new(E::ContainerStarted, "u1", T0)
            },
            PodLifecycleEvent {
                container_id: Some("c2".into()),
                ..PodLifecycleEvent::new(E::ContainerStarted, "u1", T0)
            },
        ];
        let events = current_state_events("u1", Some(&now), None, &lost, T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerRemoved, "c1"),
                (E::ContainerDied, "c2"),
                (E::ContainerStarted, "s1"),
                (E::PodSync, "")
            ]
        );
    }

    /// ContainerDied carries the dead container's message (the runtime's, with the termination
    /// message), at most 1 KiB, cut between characters.
    #[test]
    fn a_dead_containers_message_rides_its_event() {
        let mut events = vec![PodLifecycleEvent::new(E::ContainerDied, "u1", SystemTime::UNIX_EPOCH)];
        events[0].container_id = Some("c1".into());
        let exited = |message: String| RuntimePodStatus {
            container_statuses: vec![crate::kubecontainer::RuntimeContainerStatus {
                id: "c1".into(),
                sandbox_id: "s1".into(),
                name: "app".into(),
                state: RuntimeContainerState::Exited,
                created_at: None,
                started_at: None,
                finished_at: None,
                exit_code: 3,
                image: String::new(),
                image_id: String::new(),
                reason: "Error".into(),
                message: message.into(),
                restart_count: 0,
                resources: None,
                user: None,
                stop_signal: None,
                termination_source: None,
            }],
            ..RuntimePodStatus::default()
        };
        add_exit_details(&mut events, Some(&exited("boom\n".into())));
        assert_eq!(events[0].message.as_deref(), Some("boom\n"));
        // 1023 ASCII bytes then a 2-byte character: cut before it.
        add_exit_details(&mut events, Some(&exited(format!("{}é and more", "x".repeat(1023)))));
        assert_eq!(events[0].message.as_deref(), Some("x".repeat(1023).as_str()));
        add_exit_details(&mut events, Some(&exited(String::new())));
        assert_eq!(events[0].message, None);
        assert_eq!(bounded("ab", 1), "a");
        assert_eq!(bounded("é", 1), "");
    }

    #[test]
    fn json_shape() {
        let mut event = PodLifecycleEvent::new(
            E::ContainerDied,
            "u1",
            SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
        );
        event.container_id = Some("abc".into());
        event.exit_code = Some(3);
        event.reason = Some("Error".into());
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], "ContainerDied");
        assert_eq!(json["pod_uid"], "u1");
        assert_eq!(json["container_id"], "abc");
        assert_eq!(json["exit_code"], 3);
        assert_eq!(json["reason"], "Error");
        assert_eq!(json["timestamp"], "1970-01-01T00:00:01.500Z");
        assert!(json.get("sandbox").is_none());
        let sync = serde_json::to_value(PodLifecycleEvent::pod_sync("u1", None, T0)).unwrap();
        assert_eq!(sync["container_id"], serde_json::Value::Null);
    }
}
