//! Property tests over the pure cores: random runtime histories never make `compute_events` or
//! status generation panic, and the invariants hold — an event never names a container the runtime
//! never reported; per container, Started and Died alternate and Removed comes last; a terminal
//! phase never changes; a restart count never decreases.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use plegd::apiserver::pod::{ApiContainer, ApiPod, ApiPodSpec};
use plegd::kubecontainer::{
    RuntimeContainer, RuntimeContainerState, RuntimeContainerStatus, RuntimePod, RuntimePodStatus,
};
use plegd::pleg::{PodLifecycleEventType as E, compute_events};
use plegd::status::generate::{StatusInput, generate};
use proptest::prelude::*;

const T0: SystemTime = SystemTime::UNIX_EPOCH;

fn state_of(n: u8) -> Option<RuntimeContainerState> {
    match n % 5 {
        0 => None,
        1 => Some(RuntimeContainerState::Created),
        2 => Some(RuntimeContainerState::Running),
        3 => Some(RuntimeContainerState::Exited),
        _ => Some(RuntimeContainerState::Unknown),
    }
}

fn snapshot(states: &[Option<RuntimeContainerState>]) -> Option<RuntimePod> {
    let containers: Vec<RuntimeContainer> = states
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            s.map(|state| RuntimeContainer {
                id: format!("c{i}"),
                sandbox_id: String::new(),
                name: format!("n{}", i % 3),
                state,
                created_at: i as i64,
                attempt: 0,
            })
        })
        .collect();
    (!containers.is_empty()).then(|| RuntimePod {
        id: "u1".into(),
        name: "p".into(),
        namespace: "ns".into(),
        containers,
        sandboxes: vec![],
    })
}

/// A container's real life: created → running → exited → gone, possibly skipping steps (a relist
/// can miss a short phase), never going back.
fn lifecycle_step(
    current: Option<RuntimeContainerState>,
    roll: u8,
    born: bool,
    removed: bool,
) -> Option<RuntimeContainerState> {
    use RuntimeContainerState::*;
    match (current, roll % 4) {
        // Ids are never reused: once gone, always gone.
        (None, _) if !born || removed => None,
        (None, 0) => Some(Created),
        (None, 1) => Some(Running),
        (None, _) => None,
        (Some(Created), 0) => Some(Running),
        (Some(Created), 1) => Some(Exited),
        (Some(Running), 0) => Some(Exited),
        (Some(Exited), 0) => None,
        (s, _) => s,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary histories (states jump anywhere): no panic, and events only name reported ids.
    #[test]
    fn arbitrary_histories_only_name_reported_containers(history in prop::collection::vec(prop::collection::vec(any::<u8>(), 6), 1..20)) {
        let mut old: Option<RuntimePod> = None;
        let mut reported = std::collections::HashSet::new();
        for step in history {
            let states: Vec<_> = step.into_iter().map(state_of).collect();
            let new = snapshot(&states);
            for c in new.iter().flat_map(|p| p.containers.iter()) {
                reported.insert(c.id.clone());
            }
            for event in compute_events(old.as_ref(), new.as_ref(), T0) {
                prop_assert_eq!(&event.pod_uid, "u1");
                let id = event.container_id.clone().unwrap_or_default();
                prop_assert!(reported.contains(&id), "event for {} which the runtime never reported", id);
            }
            old = new;
        }
    }

    /// Which events a change makes does not depend on the order the records list containers in
    /// (runtimes list in map order; relists sort, and an unchanged pod is checked in one pass).
    #[test]
    fn events_do_not_depend_on_listing_order(before in prop::collection::vec(any::<u8>(), 6), after in prop::collection::vec(any::<u8>(), 6), rotate in 0usize..6) {
        let old = snapshot(&before.into_iter().map(state_of).collect::<Vec<_>>());
        let new = snapshot(&after.into_iter().map(state_of).collect::<Vec<_>>());
        let reordered = new.clone().map(|mut p| {
            let n = p.containers.len();
            p.containers.rotate_left(rotate % n);
            p.containers.reverse();
            p
        });
        let set = |events: Vec<plegd::pleg::PodLifecycleEvent>| {
            let mut v: Vec<(String, E)> = events.into_iter().map(|e| (e.container_id.unwrap_or_default(), e.kind)).collect();
            v.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
            v
        };
        prop_assert_eq!(
            set(compute_events(old.as_ref(), new.as_ref(), T0)),
            set(compute_events(old.as_ref(), reordered.as_ref(), T0))
        );
        prop_assert!(compute_events(new.as_ref(), reordered.as_ref(), T0).is_empty());
    }

    /// Real lifecycles: per container, Started/Died alternate and Removed is last and once.
    #[test]
    fn lifecycle_events_alternate(rolls in prop::collection::vec(prop::collection::vec(any::<u8>(), 4), 1..30), births in prop::collection::vec(any::<bool>(), 4)) {
        let mut states: Vec<Option<RuntimeContainerState>> = vec![None; 4];
        let mut removed = [false; 4];
        let mut old: Option<RuntimePod> = None;
        let mut per_container: HashMap<String, Vec<E>> = HashMap::new();
        for step in rolls {
            for (i, roll) in step.into_iter().enumerate() {
                let next = lifecycle_step(states[i], roll, births[i], removed[i]);
                removed[i] |= states[i].is_some() && next.is_none();
                states[i] = next;
            }
            let new = snapshot(&states);
            for event in compute_events(old.as_ref(), new.as_ref(), T0) {
                if event.kind != E::ContainerChanged {
                    per_container.entry(event.container_id.clone().unwrap_or_default()).or_default().push(event.kind);
                }
            }
            old = new;
        }
        for (id, kinds) in per_container {
            let mut last: Option<E> = None;
            for (n, kind) in kinds.iter().enumerate() {
                match kind {
                    E::ContainerStarted => prop_assert!(last != Some(E::ContainerStarted), "{}: Started twice: {:?}", id, kinds),
                    E::ContainerDied => prop_assert!(last != Some(E::ContainerDied), "{}: Died twice: {:?}", id, kinds),
                    E::ContainerRemoved => prop_assert_eq!(n, kinds.len() - 1, "{}: Removed not last: {:?}", &id, &kinds),
                    _ => {}
                }
                last = Some(*kind);
            }
        }
    }

    /// Status generation over random runtime histories, each status built on the last: no panic,
    /// a terminal phase never changes, restart counts never go down.
    #[test]
    fn generated_status_is_monotonic(
        policy in prop::sample::select(vec!["Always", "OnFailure", "Never"]),
        steps in prop::collection::vec(prop::collection::vec((any::<u8>(), any::<u8>(), 0i32..3), 2), 1..25),
        deleting in any::<bool>(),
    ) {
        let names = ["a", "b"];
        let mut pod = ApiPod {
            metadata: ObjectMeta { name: Some("p".into()), uid: Some("u1".into()), ..ObjectMeta::default() },
            spec: ApiPodSpec {
                containers: names.iter().map(|n| ApiContainer { name: (*n).into(), ..ApiContainer::default() }).collect(),
                restart_policy: Some(policy.into()),
                ..ApiPodSpec::default()
            },
            status: None,
        };
        // Per container: its attempts so far (the runtime keeps the last two).
        let mut attempts: Vec<Vec<RuntimeContainerStatus>> = vec![Vec::new(), Vec::new()];
        // How many times each container was started: the restart count its creator writes.
        let mut started = [0u32; 2];
        let mut clock = 1u64;
        let mut terminal: Option<String> = None;
        let mut restarts: HashMap<String, i32> = HashMap::new();
        for (n, step) in steps.into_iter().enumerate() {
            for (i, (action, vanish, code)) in step.into_iter().enumerate() {
                clock += 1;
                let list = &mut attempts[i];
                match action % 4 {
                    // A new attempt starts running.
                    0 if list.last().is_none_or(|c| c.state == RuntimeContainerState::Exited) => list.push(RuntimeContainerStatus {
                        id: format!("{}-{}", names[i], started[i]),
                        sandbox_id: "s1".into(),
                        name: names[i].into(),
                        state: RuntimeContainerState::Running,
                        created_at: Some(T0 + Duration::from_secs(clock)),
                        started_at: Some(T0 + Duration::from_secs(clock)),
                        finished_at: None,
                        exit_code: 0,
                        image: String::new(),
                        image_id: String::new(),
                        reason: String::new(),
                        message: Default::default(),
                        restart_count: { started[i] += 1; started[i] - 1 },
                        resources: None,
                        user: None,
                        stop_signal: None,
                        termination_source: None,
                    }),
                    // The running one exits.
                    1 => if let Some(c) = list.last_mut().filter(|c| c.state == RuntimeContainerState::Running) {
                        c.state = RuntimeContainerState::Exited;
                        c.exit_code = code;
                        c.finished_at = Some(T0 + Duration::from_secs(clock));
                    },
                    // The runtime loses track of it.
                    2 if vanish % 5 == 0 => if let Some(c) = list.last_mut() { c.state = RuntimeContainerState::Unknown },
                    _ => {}
                }
                if vanish % 7 == 0 {
                    list.clear();
                }
                while list.len() > 2 { list.remove(0); }
            }
            let runtime = RuntimePodStatus { id: "u1".into(), container_statuses: attempts.concat(), ..RuntimePodStatus::default() };
            if deleting && n > 3 {
                pod.metadata.deletion_timestamp = Some(plegd::status::generate::api_time(T0));
            }
            let status = generate(&StatusInput { pod: &pod, runtime: &runtime, runtime_name: "containerd", node_ips: &[], recursive_read_only_handlers: Some(&[]), stop_signals: false, kubelet: plegd::status::generate::KubeletMinor::V1_37, now: T0 + Duration::from_secs(clock) });
            let phase = status.phase.clone().unwrap_or_default();
            if let Some(t) = &terminal {
                prop_assert_eq!(&phase, t, "a terminal phase changed");
            } else if phase == "Succeeded" || phase == "Failed" {
                terminal = Some(phase.clone());
            }
            for cs in status.container_statuses.iter().flatten() {
                let before = restarts.insert(cs.name.clone(), cs.restart_count).unwrap_or(0);
                prop_assert!(cs.restart_count >= before, "{}: restartCount {} after {}", cs.name, cs.restart_count, before);
            }
            pod.status = Some(status);
        }
    }
}
