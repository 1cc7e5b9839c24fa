//! The dispatch loop over a runtime that counts what it is asked, with tokio's paused time.

use super::*;
use crate::triggers::schedule::FINE_PROBES;
use std::time::Duration;

use crate::pleg::PodLifecycleEventType;

/// A runtime of `pods` pods, each with one running container `c<i>` that never changes, that
/// counts what it is asked.
#[derive(Clone, Default)]
struct SteadyRuntime {
    pods: usize,
    calls: Arc<std::sync::Mutex<std::collections::HashMap<&'static str, usize>>>,
    /// From then on, the runtime shows every container exited (a CRI state that lags the
    /// container's exit).
    exits_at: Option<tokio::time::Instant>,
    /// Until then, the runtime lists no pod (a CRI state that lags a new pod's events).
    listed_from: Option<tokio::time::Instant>,
    /// A container whose status the runtime answers this late (a busy runtime).
    slow_probe: Option<(&'static str, Duration)>,
    /// Container `i` exits this much later than container `i - 1` (from `exits_at`).
    exits_apart: Duration,
    /// From then on, the runtime shows every sandbox `s<i>` not ready.
    sandboxes_exit_at: Option<tokio::time::Instant>,
    /// Until then, the runtime shows every container created, not running.
    runs_from: Option<tokio::time::Instant>,
    /// How long a pod's status read takes (a busy runtime).
    status_takes: Duration,
    /// Status reads under way.
    reading: Arc<std::sync::Mutex<Reading>>,
}

/// Status reads under way, per pod, and the most under way at once, of one pod and of all.
#[derive(Default)]
struct Reading {
    of_pod: std::collections::HashMap<String, usize>,
    most_of_one_pod: usize,
    most: usize,
}

impl SteadyRuntime {
    fn count(&self, call: &'static str) {
        *self.calls.lock().unwrap().entry(call).or_default() += 1;
    }

    fn calls(&self, call: &str) -> usize {
        self.calls.lock().unwrap().get(call).copied().unwrap_or_default()
    }

    fn listed(&self) -> usize {
        match self.listed_from {
            Some(at) if tokio::time::Instant::now() < at => 0,
            _ => self.pods,
        }
    }

    /// When container `i` exits, if it does.
    fn exit_of(&self, i: usize) -> Option<tokio::time::Instant> {
        Some(self.exits_at? + self.exits_apart * u32::try_from(i).unwrap())
    }

    fn state(&self, i: usize) -> crate::kubecontainer::RuntimeContainerState {
        match (self.exit_of(i), self.runs_from) {
            (Some(at), _) if tokio::time::Instant::now() >= at => crate::kubecontainer::RuntimeContainerState::Exited,
            (_, Some(at)) if tokio::time::Instant::now() < at => crate::kubecontainer::RuntimeContainerState::Created,
            _ => crate::kubecontainer::RuntimeContainerState::Running,
        }
    }

    fn sandbox_state(&self) -> crate::kubecontainer::RuntimeContainerState {
        match self.sandboxes_exit_at {
            Some(at) if tokio::time::Instant::now() >= at => crate::kubecontainer::RuntimeContainerState::Exited,
            _ => crate::kubecontainer::RuntimeContainerState::Running,
        }
    }

    fn pod(&self, i: usize) -> crate::kubecontainer::RuntimePod {
        use crate::kubecontainer::{RuntimeContainer, RuntimePod};
        let state = self.state(i);
        let item = |id: String, sandbox_id: String, state| RuntimeContainer {
            id,
            sandbox_id,
            name: "app".into(),
            state,
            created_at: 1,
            attempt: 0,
        };
        RuntimePod {
            id: format!("u{i}"),
            name: format!("p{i}"),
            namespace: "default".into(),
            containers: vec![item(format!("c{i}"), format!("s{i}"), state)],
            sandboxes: vec![item(format!("s{i}"), String::new(), self.sandbox_state())],
        }
    }
}

impl Runtime for SteadyRuntime {
    /// The id probed.
    type Answer = String;

    async fn list_pods(&self) -> Result<Vec<crate::kubecontainer::RuntimePod>, crate::runtime::RuntimeError> {
        self.count("list_pods");
        Ok((0..self.listed()).map(|i| self.pod(i)).collect())
    }

    async fn list_pod(
        &self,
        uid: &str,
    ) -> Result<Option<crate::kubecontainer::RuntimePod>, crate::runtime::RuntimeError> {
        self.count("list_pod");
        Ok((0..self.listed()).map(|i| self.pod(i)).find(|p| p.id == uid))
    }

    async fn pod_status(
        &self,
        pod: &crate::kubecontainer::RuntimePod,
        probed: Option<(&str, String)>,
        exits: &mut [crate::runtime::exits::PendingExit],
    ) -> Result<crate::kubecontainer::RuntimePodStatus, crate::runtime::RuntimeError> {
        self.count("pod_status");
        {
            let mut reading = self.reading.lock().unwrap();
            let of_pod = reading.of_pod.entry(pod.id.clone()).or_default();
            *of_pod += 1;
            let (of_pod, all) = (*of_pod, reading.of_pod.values().sum());
            reading.most_of_one_pod = reading.most_of_one_pod.max(of_pod);
            reading.most = reading.most.max(all);
        }
        tokio::time::sleep(self.status_takes).await;
        *self.reading.lock().unwrap().of_pod.get_mut(&pod.id).unwrap() -= 1;
        // An exit held for a container: confirmed once this runtime shows it, else still ahead.
        for exit in exits.iter_mut() {
            let i = exit
                .fact
                .id
                .strip_prefix('c')
                .and_then(|i| i.parse().ok())
                .unwrap_or_default();
            exit.outcome = Some(
                if self.state(i) == crate::kubecontainer::RuntimeContainerState::Exited {
                    crate::runtime::exits::ExitRead::Confirmed
                } else {
                    crate::runtime::exits::ExitRead::Ahead
                },
            );
        }
        if let Some((id, answer)) = probed {
            assert_eq!(id, answer, "the answer of the id probed");
            self.count("pod_status given a probe's answer");
        }
        Ok(crate::kubecontainer::RuntimePodStatus {
            id: pod.id.clone(),
            ..Default::default()
        })
    }

    async fn probe_state(
        &self,
        id: &str,
        _: crate::runtime::IdKind,
    ) -> Result<Option<(crate::kubecontainer::RuntimeContainerState, String)>, crate::runtime::RuntimeError> {
        self.count("probe_state");
        if let Some((slow, late)) = self.slow_probe
            && slow == id
        {
            tokio::time::sleep(late).await;
        }
        if id.starts_with('s') {
            return Ok(Some((self.sandbox_state(), id.to_owned())));
        }
        let i = id.strip_prefix('c').and_then(|i| i.parse().ok()).unwrap_or_default();
        Ok(Some((self.state(i), id.to_owned())))
    }

    async fn locate(&self, id: &str) -> Result<Option<PodUid>, crate::runtime::RuntimeError> {
        self.count("locate");
        Ok((0..self.listed())
            .map(|i| self.pod(i))
            .find(|p| p.containers.iter().chain(&p.sandboxes).any(|c| c.id == id))
            .map(|p| p.id))
    }
}

/// A dispatcher (its trigger queue holding `capacity`) over `runtime`, after one complete
/// relist: the PLEG's events, the trigger sender, and the dispatcher's task.
async fn dispatching(
    runtime: &SteadyRuntime,
    capacity: usize,
) -> (
    tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
    crate::triggers::TriggerSender,
    tokio::task::JoinHandle<()>,
) {
    let metrics = Arc::new(Metrics::new());
    let (pleg, events) = GenericPleg::new(
        runtime.clone(),
        crate::util::clock::SystemClock,
        metrics.clone(),
        crate::pleg::PlegConfig::default(),
    );
    let pleg = Arc::new(pleg);
    pleg.relist().await.unwrap();
    let (sender, receiver) = crate::triggers::trigger_queue(std::num::NonZeroUsize::new(capacity).unwrap());
    (events, sender, tokio::spawn(dispatch(pleg, receiver, metrics)))
}

/// When the `n`th event of `kind` came. Fails the test after 60 s (of paused time) without.
async fn seen(
    events: &mut tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
    kind: PodLifecycleEventType,
    n: usize,
) -> tokio::time::Instant {
    let counted = async {
        let mut count = 0;
        while count < n {
            if events.recv().await.expect("an event").kind == kind {
                count += 1;
            }
        }
        tokio::time::Instant::now()
    };
    tokio::time::timeout(Duration::from_secs(60), counted)
        .await
        .unwrap_or_else(|_| panic!("{n} {kind:?} events not seen within 60 s"))
}

/// A round checks the likeliest changes first: fine probes and relists by attempt, the sparse
/// checks last.
#[test]
fn a_round_checks_the_likeliest_changes_first() {
    let ctr = |id: &str| Target {
        pod: Some("u".into()),
        container: Some(id.into()),
    };
    let pod = Target {
        pod: Some("u".into()),
        container: None,
    };
    let locate = Target {
        pod: None,
        container: Some("new".into()),
    };
    let mut round = vec![
        (ctr("ahead"), FINE_PROBES + 4),
        (ctr("probing"), 5),
        (pod.clone(), 2),
        (ctr("quiet"), FINE_PROBES + 7),
        (ctr("settled"), 0),
        (locate.clone(), 3),
    ];
    round.sort_by_key(|(t, a)| check_order(t, *a));
    assert_eq!(
        round,
        [
            (ctr("settled"), 0),
            (pod, 2),
            (locate, 3),
            (ctr("probing"), 5),
            (ctr("ahead"), FINE_PROBES + 4),
            (ctr("quiet"), FINE_PROBES + 7),
        ]
    );
}

/// An exit whose settling event comes in the same round as another container's `/tasks/exit`
/// is probed first: the other's sparse check, slow on a busy runtime, does not hold it up.
#[tokio::test(start_paused = true)]
async fn a_settled_exit_is_not_held_up_by_a_sparse_check() {
    let t0 = tokio::time::Instant::now();
    let runtime = SteadyRuntime {
        pods: 2,
        exits_at: Some(t0 + Duration::from_secs(1)),
        slow_probe: Some(("c0", Duration::from_millis(100))),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    tokio::time::sleep_until(t0 + Duration::from_secs(1)).await;
    sender.send(Trigger::ContainerAhead("c0".into()));
    sender.send(Trigger::ContainerSettled {
        id: "c1".into(),
        runs: false,
    });
    let first = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let event = events.recv().await.expect("an event");
            if event.kind == PodLifecycleEventType::ContainerDied {
                return (event.pod_uid.to_string(), tokio::time::Instant::now());
            }
        }
    })
    .await
    .expect("an exit seen within 60 s");
    dispatcher.abort();
    assert_eq!(first.0, "u1", "the settled exit first");
    let late = first.1 - (t0 + Duration::from_secs(1));
    assert!(
        late <= Duration::from_millis(5),
        "the settled exit seen {late:?} after its CRI state"
    );
}

/// Starts of a few pods at once, each status read taking 200 ms on a busy runtime: their checks
/// run side by side, so the last start is seen 200 ms after the runtime shows it, not after every
/// other pod's read; and no pod is read by two checks at once.
#[tokio::test(start_paused = true)]
async fn checks_of_different_pods_run_side_by_side() {
    const PODS: usize = 3;
    let t0 = tokio::time::Instant::now();
    let runs = t0 + Duration::from_secs(1);
    let runtime = SteadyRuntime {
        pods: PODS,
        runs_from: Some(runs),
        status_takes: Duration::from_millis(200),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    // The sandboxes' starts, seen by the first relist.
    seen(&mut events, PodLifecycleEventType::ContainerStarted, PODS).await;
    tokio::time::sleep_until(runs).await;
    for i in 0..PODS {
        sender.send(Trigger::ContainerSettled {
            id: format!("c{i}"),
            runs: true,
        });
        // A second target of the same pod: its sandbox.
        sender.send(Trigger::Container(format!("s{i}")));
    }
    let last = seen(&mut events, PodLifecycleEventType::ContainerStarted, PODS).await;
    dispatcher.abort();
    let late = last - runs;
    assert!(
        late < Duration::from_millis(400),
        "the last of {PODS} starts seen {late:?} after the runtime showed it"
    );
    let reading = runtime.reading.lock().unwrap();
    assert_eq!(reading.most_of_one_pod, 1, "one status read of a pod at a time");
    assert_eq!(reading.most, PODS, "the pods' status reads side by side");
}

/// Two relists of one pod and a complete relist at once, over a runtime slow to read a status:
/// the pod's start is sent once. The pod's turn keeps the second from comparing the records before
/// the first advanced them (which would send the start twice), though neither holds the records
/// while it reads the runtime.
#[tokio::test(start_paused = true)]
async fn relists_of_one_pod_at_once_send_its_start_once() {
    let t0 = tokio::time::Instant::now();
    let runs = t0 + Duration::from_secs(1);
    let runtime = SteadyRuntime {
        pods: 2,
        runs_from: Some(runs),
        status_takes: Duration::from_millis(200),
        ..Default::default()
    };
    let (pleg, mut events) = GenericPleg::new(
        runtime.clone(),
        crate::util::clock::SystemClock,
        Arc::new(Metrics::new()),
        crate::pleg::PlegConfig::default(),
    );
    pleg.relist().await.unwrap();
    tokio::time::sleep_until(runs).await;
    let (first, second, all, other) = tokio::join!(
        pleg.relist_pod("u0"),
        pleg.relist_pod("u0"),
        pleg.relist(),
        pleg.relist_pod("u1")
    );
    assert!(first.unwrap() ^ second.unwrap(), "one of the two found the start");
    all.unwrap();
    // Asked for after the complete relist, which found the start first.
    assert!(!other.unwrap(), "u1's start found twice");
    drop(pleg);
    let mut started = Vec::new();
    while let Some(event) = events.recv().await {
        if event.kind == PodLifecycleEventType::ContainerStarted && !event.sandbox {
            started.push(event.pod_uid.to_string());
        }
    }
    started.sort();
    assert_eq!(started, ["u0", "u1"], "each start once");
    assert_eq!(
        runtime.reading.lock().unwrap().most_of_one_pod,
        1,
        "one status read of a pod at a time"
    );
}

/// What `pods` running containers cost the runtime when an event names each of them every
/// millisecond for ten seconds (a container OOM-killing a child process, for instance, as
/// containerd's `/tasks/oom` said): calls made on behalf of the dispatcher, beyond the first
/// relist.
async fn cost_of_a_flood(pods: usize) -> (SteadyRuntime, usize) {
    let runtime = SteadyRuntime {
        pods,
        ..Default::default()
    };
    let (_events, sender, dispatcher) = dispatching(&runtime, 4096).await;
    for _ in 0..10_000 {
        for i in 0..pods {
            sender.send(Trigger::Container(format!("c{i}")));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(sender);
    dispatcher.await.unwrap();
    let calls = runtime.calls("probe_state") + runtime.calls("list_pod") + runtime.calls("list_pods") - 1;
    (runtime, calls)
}

/// Events that announce nothing, however many, cost a bounded number of probes and relists:
/// a target already waiting for a re-check is not started over by another event, and a target
/// whose whole schedule found nothing gets a sparse one (four checks in a second) next time.
/// Eight containers named every millisecond once kept the dispatcher in complete relists
/// (eight probes due at once are answered by one) every 2 ms.
#[tokio::test(start_paused = true)]
async fn events_that_announce_nothing_cost_a_bounded_number_of_checks() {
    let (one, calls) = cost_of_a_flood(1).await;
    // One full schedule (68 checks in ~1.2 s), then sparse ones (4 checks in ~0.9 s each)
    // for the other ~8.8 s. Started over at each event, it was 10,000 probes.
    const BOUND: usize = 68 + 4 * 11;
    assert!(calls <= BOUND, "{calls} calls for one container, 10,000 events");
    assert_eq!(one.calls("list_pods"), 1, "no complete relist for one container");

    let (eight, calls) = cost_of_a_flood(8).await;
    let relists = eight.calls("list_pods") - 1;
    assert!(relists <= BOUND, "{relists} complete relists for eight containers");
    assert!(calls <= 8 * BOUND, "{calls} calls for eight containers, 80,000 events");
}

/// How long after the CRI state shows a container's exit the PLEG says so, when the exit's
/// `/tasks/exit` (ahead) came `lead` before it and its `/tasks/delete` (settling) one
/// millisecond before it; and the runtime, to count what it was asked before the settling
/// event. In a burst containerd's CRI state lags `/tasks/exit` by seconds.
async fn exit_seen_after(lead: Duration) -> (Duration, usize) {
    let t0 = tokio::time::Instant::now();
    let flip = t0 + lead;
    let runtime = SteadyRuntime {
        pods: 1,
        exits_at: Some(flip),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerAhead("c0".into()));
    tokio::time::sleep_until(flip - Duration::from_millis(1)).await;
    let before_settling = runtime.calls("probe_state");
    sender.send(Trigger::ContainerSettled {
        id: "c0".into(),
        runs: false,
    });
    let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    drop(sender);
    dispatcher.abort();
    (seen.duration_since(flip), before_settling)
}

/// An exit is seen within milliseconds of its settling event however long the CRI state took
/// after `/tasks/exit` (before, during and after the sparse checks), and until the settling
/// event its container costs only the sparse probes (about 128, 384 and 896 ms after
/// `/tasks/exit`), not one every 2 ms, nor one at once.
#[tokio::test(start_paused = true)]
async fn an_exit_is_probed_sparsely_until_its_settling_event() {
    for (lead, sparse) in [(30, 0), (130, 1), (700, 2), (1500, 3)] {
        let lead = Duration::from_millis(lead);
        let (late, probes) = exit_seen_after(lead).await;
        assert!(
            late <= Duration::from_millis(4),
            "exit seen {late:?} after the CRI state, {lead:?} after /tasks/exit"
        );
        assert_eq!(
            probes, sparse,
            "probes between /tasks/exit and /tasks/delete, {lead:?} apart"
        );
    }
}

/// An exit whose settling event never comes is still seen, by the first sparse probe after
/// its `/tasks/exit`.
#[tokio::test(start_paused = true)]
async fn an_exit_without_its_settling_event_is_seen_by_the_sparse_probes() {
    let t0 = tokio::time::Instant::now();
    let runtime = SteadyRuntime {
        pods: 1,
        exits_at: Some(t0 + Duration::from_millis(50)),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerAhead("c0".into()));
    let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    drop(sender);
    dispatcher.abort();
    let after = seen.duration_since(t0);
    assert!(
        after >= Duration::from_millis(128) && after <= Duration::from_millis(140),
        "seen {after:?} after /tasks/exit"
    );
    assert_eq!(runtime.calls("probe_state"), 1, "one sparse probe");
}

/// Exits one after another, each settling event (`/tasks/delete`) 10 ms ahead of its CRI
/// state: as the exits go on, an exit's second probe moves from 2 ms after the first to where
/// the state is, and every exit is still seen within 2 ms of its CRI state.
#[tokio::test(start_paused = true)]
async fn the_fine_probes_start_where_the_cri_state_usually_follows() {
    const EXITS: usize = 80;
    let lead = Duration::from_millis(10);
    let t0 = tokio::time::Instant::now();
    let runtime = SteadyRuntime {
        pods: EXITS,
        exits_at: Some(t0 + Duration::from_secs(1)),
        exits_apart: Duration::from_millis(100),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    let mut probes = Vec::new();
    for i in 0..EXITS {
        let exit = runtime.exit_of(i).unwrap();
        tokio::time::sleep_until(exit - lead).await;
        let before = runtime.calls("probe_state");
        sender.send(Trigger::ContainerSettled {
            id: format!("c{i}"),
            runs: false,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        let late = seen.duration_since(exit);
        assert!(
            late <= Duration::from_millis(2),
            "exit {i} seen {late:?} after its CRI state"
        );
        probes.push(runtime.calls("probe_state") - before);
    }
    drop(sender);
    dispatcher.abort();
    // At first at 0, 2, … 10 ms; in the end at once, near 10 ms and at most once more.
    assert_eq!(probes[0], 6, "{probes:?}");
    assert!(probes[60..].iter().all(|p| *p <= 3), "{probes:?}");
}

/// An exit that a relist of its pod reads first (here a pod trigger's; beside the kubelet often
/// a batch relist's, or the pod relist of its sandbox's event) ends its container's fine
/// probes: a probe compares the runtime with the records, which hold the change by then, so
/// they could only find nothing for the rest of the schedule (~67 probes in 1.3 s).
#[tokio::test(start_paused = true)]
async fn a_change_a_relist_read_first_ends_the_probes() {
    let t0 = tokio::time::Instant::now();
    let exit = t0 + Duration::from_secs(1);
    let runtime = SteadyRuntime {
        pods: 1,
        exits_at: Some(exit),
        slow_probe: Some(("c0", Duration::from_millis(3))),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    tokio::time::sleep_until(exit - Duration::from_millis(30)).await;
    sender.send(Trigger::ContainerSettled {
        id: "c0".into(),
        runs: false,
    });
    tokio::time::sleep_until(exit).await;
    sender.send(Trigger::Pod("u0".into()));
    seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    let probes = runtime.calls("probe_state");
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(sender);
    dispatcher.abort();
    assert!(
        runtime.calls("probe_state") <= probes + 1,
        "{} probes after the exit was read",
        runtime.calls("probe_state") - probes
    );
}

/// One container that exits 1 s on, its `/tasks/exit` (ahead) sent 50 ms before: the runtime,
/// the PLEG's events, the trigger sender, the dispatcher and the exit's time.
async fn an_exit_ahead_of_its_state() -> (
    SteadyRuntime,
    tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
    crate::triggers::TriggerSender,
    tokio::task::JoinHandle<()>,
    tokio::time::Instant,
) {
    let exit = tokio::time::Instant::now() + Duration::from_secs(1);
    let runtime = SteadyRuntime {
        pods: 1,
        exits_at: Some(exit),
        ..Default::default()
    };
    let (events, sender, dispatcher) = dispatching(&runtime, 64).await;
    tokio::time::sleep_until(exit - Duration::from_millis(50)).await;
    sender.send(Trigger::ContainerAhead("c0".into()));
    (runtime, events, sender, dispatcher, exit)
}

/// A settling event whose change a relist read while it waited (here a pod trigger's relist,
/// before the event is taken) costs no probe, and ends the sparse schedule its `/tasks/exit`
/// began.
#[tokio::test(start_paused = true)]
async fn a_settling_event_whose_change_was_read_costs_no_probe() {
    let (runtime, mut events, sender, dispatcher, exit) = an_exit_ahead_of_its_state().await;
    tokio::time::sleep_until(exit).await;
    sender.send(Trigger::Pod("u0".into()));
    seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    let probes = runtime.calls("probe_state");
    sender.send(Trigger::ContainerSettled {
        id: "c0".into(),
        runs: false,
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(sender);
    dispatcher.abort();
    assert_eq!(runtime.calls("probe_state"), probes, "probes after the exit was read");
}

/// A settling event that pulls its container's sparse schedule forward (`/tasks/delete` after
/// `/tasks/exit`) joins it; the change it announces, once found, still ends the schedule
/// instead of starting it over, which cost ~67 probes for nothing per change.
#[tokio::test(start_paused = true)]
async fn the_change_a_settling_event_announces_ends_the_schedule_it_pulled() {
    let (runtime, mut events, sender, dispatcher, exit) = an_exit_ahead_of_its_state().await;
    // The CRI state before its settling event (often so beside the kubelet): the check the
    // event pulls forward finds the change at once.
    tokio::time::sleep_until(exit + Duration::from_millis(1)).await;
    sender.send(Trigger::ContainerSettled {
        id: "c0".into(),
        runs: false,
    });
    seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    let probes = runtime.calls("probe_state");
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(sender);
    dispatcher.abort();
    assert_eq!(runtime.calls("probe_state"), probes, "probes after the exit was found");
}

/// A new container is located at its `/containers/create` (ahead) and then sparsely. The CRI
/// plugin lists it before its task starts (CreateContainer lists it, StartContainer starts
/// it), so its `/tasks/start` (settling) finds it at once: seen within milliseconds of the
/// start, also when the sparse locates ran out before it (the id was given up as
/// unlocatable) — the settling event locates it again.
/// A new container whose locate at its `/containers/create` missed is found at its
/// `/tasks/start`, still created (containerd's CRI plugin records the start after the task
/// starts): it is probed on every 2 ms, not on a sandbox's doubling waits, and its start seen
/// within milliseconds.
/// A new sandbox's `/tasks/start` comes before the CRI plugin lists it (RunPodSandbox lists it
/// once the pod's network is set up): after the locate at once, it is looked for on the
/// doubling waits (8, 16 … 512 ms), not every 2 ms, and still seen within one of them. Nor
/// does it move where the fine probes of containers start.
/// An id looked for that a relist has read since its event (here its pod's, as the relist of
/// a new pod's first container reads the pod's sandbox) is located by the records: its next
/// re-check asks the runtime nothing.
/// A sandbox's `/tasks/delete` (settling) comes long before its CRI state (NOTREADY once its
/// network is torn down): probed at once and on the doubling waits, not every 2 ms; and its
/// late change leaves the second probe of containers' settling events where it was.
#[tokio::test(start_paused = true)]
async fn a_sandbox_is_probed_on_the_doubling_waits_after_its_settling_event() {
    let t0 = tokio::time::Instant::now();
    let flip = t0 + Duration::from_millis(110);
    let runtime = SteadyRuntime {
        pods: 1,
        sandboxes_exit_at: Some(flip),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerSettled {
        id: "s0".into(),
        runs: false,
    });
    let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    drop(sender);
    dispatcher.abort();
    // Probed at 0, 8, 24, 56 and 120 ms.
    assert_eq!(seen.duration_since(t0), Duration::from_millis(120));
    assert_eq!(runtime.calls("probe_state"), 5);
}

#[test]
fn pending_coalesces_and_keeps_order() {
    let mut p = Pending::default();
    for t in [
        Trigger::Pod("b".into()),
        Trigger::Container("c1".into()),
        Trigger::Pod("a".into()),
        Trigger::Pod("b".into()),
        Trigger::Container("c1".into()),
    ] {
        p.add(t);
    }
    assert_eq!(p.pods, ["b", "a"]);
    assert_eq!(p.containers, ["c1"]);
    p.add(Trigger::All);
    p.add(Trigger::All);
    p.add(Trigger::Pod("z".into()));
    assert!(p.all);
    assert_eq!(p.pods, ["b", "a", "z"], "targets keep their re-check schedules");
    assert_eq!(p.containers, ["c1"]);
    assert!(!p.is_empty());
    assert!(Pending::default().is_empty());
}

/// An id is ahead only while every trigger that named it in the round was ahead.
#[test]
fn pending_keeps_an_id_ahead_only_if_nothing_else_named_it() {
    let mut p = Pending::default();
    p.add(Trigger::ContainerAhead("a".into()));
    p.add(Trigger::ContainerAhead("b".into()));
    p.add(Trigger::Container("c".into()));
    p.add(Trigger::ContainerAhead("c".into()));
    p.add(Trigger::ContainerSettled {
        id: "b".into(),
        runs: false,
    });
    assert_eq!(p.containers, ["a", "b", "c"]);
    assert_eq!(p.ahead, HashSet::from(["a".to_owned()]));
    assert_eq!(p.settled, HashSet::from(["b".to_owned()]));
    p.add(Trigger::Container("a".into()));
    assert!(p.ahead.is_empty());

    let mut p = Pending::default();
    p.add(Trigger::ContainerGone("a".into()));
    p.add(Trigger::ContainerGone("b".into()));
    p.add(Trigger::ContainerAhead("b".into()));
    assert_eq!(p.gone, HashSet::from(["a".to_owned()]));
    assert_eq!(p.settled, HashSet::from(["a".to_owned(), "b".to_owned()]));
}

/// 20 new pods whose starts come at once (`/tasks/start`, settling) before the runtime lists
/// them: one complete relist per round answers their locates, not two lists each; every start
/// is seen within milliseconds of the listing.
/// `/containers/delete` for a container a record holds probes it at once; for an id no record
/// holds (let go already, or never seen) it costs the runtime nothing.
/// An event that follows the CRI state (containerd 2.x's CRI events) costs one probe: the
/// exit it announces is seen at once, and neither it nor an event that announces nothing is
/// checked again; an event that announces what the records hold already costs no probe.
#[tokio::test(start_paused = true)]
async fn an_exact_event_is_checked_once() {
    let t0 = tokio::time::Instant::now();
    let exits = t0 + Duration::from_secs(1);
    let runtime = SteadyRuntime {
        pods: 2,
        exits_at: Some(exits),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    let exact = |id: &str, pod: &str, announces| Trigger::ContainerExact {
        id: id.into(),
        pod: Some(pod.into()),
        announces,
    };
    tokio::time::sleep_until(exits).await;
    sender.send(exact("c0", "u0", Some(PlegContainerState::Exited)));
    let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
    assert!(seen - exits <= Duration::from_millis(1), "seen {:?} late", seen - exits);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("probe_state"), 1, "one probe, no re-check");
    // The probe's answer is the change: read into the pod's record, the pod's status read once
    // (two at the first relist), the pod not listed.
    assert_eq!(runtime.calls("list_pod"), 0, "no pod relist");
    assert_eq!(
        runtime.calls("pod_status"),
        3,
        "the pod's status read once, for the change"
    );
    assert_eq!(
        runtime.calls("pod_status given a probe's answer"),
        1,
        "the probed container not asked about again"
    );
    // The same event again: the records hold the exit it announces, so no probe.
    sender.send(exact("c0", "u0", Some(PlegContainerState::Exited)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("probe_state"), 1, "nothing new to find");
    // One that announces nothing (an event type this version does not know): one probe,
    // nothing after it; so is one that announces a state the records left behind.
    sender.send(exact("c0", "u0", None));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("probe_state"), 2);
    sender.send(exact("c0", "u0", Some(PlegContainerState::Running)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("probe_state"), 3);
    assert_eq!(runtime.calls("list_pod") + runtime.calls("pod_status"), 3);
    assert_eq!(runtime.calls("list_pods"), 1, "no complete relist");
    drop(sender);
    dispatcher.abort();
}

/// An id no record holds, from an event that follows the CRI state: its pod, as the event
/// names it, is relisted once (a new sandbox is no container to probe), with no locate; an id
/// the event says was removed costs nothing; one whose event names no pod is located once.
mod locate;

/// A burst of 20 exits taken from containerd's exit events, then their `/tasks/delete` once the
/// runtime's CRI state shows them: one complete relist settles every held exit, and that ends the
/// containers' schedules. (Taken as exited already, the settled exits looked unchanged to the batch,
/// and a complete relist ran every round for the whole schedule.)
#[tokio::test(start_paused = true)]
async fn exits_settled_by_a_batch_relist_end_their_schedules() {
    use crate::runtime::exits::ExitFact;
    let t0 = tokio::time::Instant::now();
    let runtime = SteadyRuntime {
        pods: 20,
        exits_at: Some(t0 + Duration::from_millis(100)),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    for i in 0..20 {
        let fact = ExitFact::new(format!("c{i}"), 1, Some((1_700_000_000, 0)), false).unwrap();
        sender.send(Trigger::Exited(fact));
    }
    seen(&mut events, PodLifecycleEventType::ContainerDied, 20).await;
    assert_eq!(runtime.calls("probe_state"), 0, "shown from the events, no probe");
    tokio::time::sleep_until(t0 + Duration::from_millis(100)).await;
    for i in 0..20 {
        sender.send(Trigger::ContainerSettled {
            id: format!("c{i}"),
            runs: false,
        });
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    dispatcher.abort();
    assert_eq!(runtime.calls("list_pods"), 2, "the first relist and one batch");
}
