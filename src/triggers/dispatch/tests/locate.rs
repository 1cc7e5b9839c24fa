//! New ids: located, sparsely until their start, and not looked for when gone or read already.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_new_container_is_located_sparsely_until_it_starts() {
    for lead in [20, 300, 1500].map(Duration::from_millis) {
        let t0 = tokio::time::Instant::now();
        let runtime = SteadyRuntime {
            pods: 1,
            listed_from: Some(t0 + lead),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        tokio::time::sleep_until(t0 + lead + Duration::from_millis(1)).await;
        let before_start = runtime.calls("locate");
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: true,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
        drop(sender);
        dispatcher.abort();
        let late = seen.duration_since(t0 + lead + Duration::from_millis(1));
        assert!(
            late <= Duration::from_millis(2),
            "start seen {late:?} after /tasks/start ({lead:?})"
        );
        assert!(
            before_start <= 4,
            "{before_start} locates before /tasks/start, {lead:?} after the create"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_container_located_at_its_start_is_probed_finely() {
    let t0 = tokio::time::Instant::now();
    let runs = t0 + Duration::from_millis(110);
    let runtime = SteadyRuntime {
        pods: 1,
        listed_from: Some(t0 + Duration::from_millis(20)),
        runs_from: Some(runs),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerAhead("c0".into()));
    tokio::time::sleep_until(t0 + Duration::from_millis(100)).await;
    sender.send(Trigger::ContainerSettled {
        id: "c0".into(),
        runs: true,
    });
    let started = async {
        loop {
            let event = events.recv().await.expect("an event");
            if event.kind == PodLifecycleEventType::ContainerStarted && event.container_id.as_deref() == Some("c0") {
                return tokio::time::Instant::now();
            }
        }
    };
    let seen = tokio::time::timeout(Duration::from_secs(60), started)
        .await
        .expect("the start seen within 60 s");
    drop(sender);
    dispatcher.abort();
    assert!(seen >= runs, "seen before it ran");
    let late = seen.duration_since(runs);
    assert!(
        late <= Duration::from_millis(2),
        "start seen {late:?} after the CRI state"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_sandbox_is_located_on_the_doubling_waits() {
    let t0 = tokio::time::Instant::now();
    let listed = t0 + Duration::from_millis(230);
    let runtime = SteadyRuntime {
        pods: 1,
        listed_from: Some(listed),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerSettled {
        id: "s0".into(),
        runs: true,
    });
    let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
    drop(sender);
    dispatcher.abort();
    // Located at 0, 8, 24, 56, 120 and 248 ms.
    assert_eq!(seen.duration_since(t0), Duration::from_millis(248));
    assert_eq!(runtime.calls("locate"), 6, "locates before the listing");
}

#[tokio::test(start_paused = true)]
async fn an_id_a_relist_read_is_not_looked_for() {
    let t0 = tokio::time::Instant::now();
    let runtime = SteadyRuntime {
        pods: 1,
        listed_from: Some(t0 + Duration::from_millis(30)),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerSettled {
        id: "s0".into(),
        runs: true,
    });
    // Located at 0, 8 and 24 ms; read by the pod's relist at 40 ms.
    tokio::time::sleep_until(t0 + Duration::from_millis(40)).await;
    sender.send(Trigger::Pod("u0".into()));
    seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(sender);
    dispatcher.abort();
    assert_eq!(runtime.calls("locate"), 3, "locates before the pod's relist read it");
}

#[tokio::test(start_paused = true)]
async fn many_locates_due_at_once_are_one_relist() {
    let t0 = tokio::time::Instant::now();
    let listed = t0 + Duration::from_millis(50);
    let runtime = SteadyRuntime {
        pods: 20,
        listed_from: Some(listed),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    for i in 0..20 {
        sender.send(Trigger::ContainerSettled {
            id: format!("c{i}"),
            runs: false,
        });
    }
    let all_seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 20).await;
    drop(sender);
    dispatcher.abort();
    let late = all_seen.duration_since(listed);
    assert!(
        late <= Duration::from_millis(4),
        "the last start seen {late:?} after the listing"
    );
    assert_eq!(runtime.calls("locate"), 0, "no locate of its own");
    let relists = runtime.calls("list_pods") - 1;
    assert!(relists <= 30, "{relists} complete relists in 50 ms of 2 ms rounds");
}

#[tokio::test(start_paused = true)]
async fn a_gone_container_is_not_looked_for() {
    let runtime = SteadyRuntime {
        pods: 1,
        ..Default::default()
    };
    let (_events, sender, dispatcher) = dispatching(&runtime, 64).await;
    sender.send(Trigger::ContainerGone("removed-long-ago".into()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("locate"), 0, "an unknown gone id is not located");
    sender.send(Trigger::ContainerGone("c0".into()));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(runtime.calls("probe_state") >= 1, "a known one is probed at once");
    drop(sender);
    dispatcher.abort();
}

#[tokio::test(start_paused = true)]
async fn an_exact_event_for_a_new_id_relists_the_pod_it_names() {
    let t0 = tokio::time::Instant::now();
    let listed = t0 + Duration::from_millis(50);
    let runtime = SteadyRuntime {
        pods: 2,
        listed_from: Some(listed),
        ..Default::default()
    };
    let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
    tokio::time::sleep_until(listed).await;
    sender.send(Trigger::ContainerExact {
        id: "s0".into(),
        pod: Some("u0".into()),
        announces: None,
    });
    let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
    assert!(
        seen - listed <= Duration::from_millis(1),
        "seen {:?} late",
        seen - listed
    );
    sender.send(Trigger::ContainerExact {
        id: "removed".into(),
        pod: Some("u9".into()),
        announces: Some(PlegContainerState::NonExistent),
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("list_pod"), 1, "one pod relist");
    assert_eq!(runtime.calls("probe_state") + runtime.calls("locate"), 0);
    sender.send(Trigger::ContainerExact {
        id: "s1".into(),
        pod: None,
        announces: None,
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runtime.calls("locate"), 1, "located once, not on a schedule");
    assert_eq!(runtime.calls("list_pods"), 1, "no complete relist");
    drop(sender);
    dispatcher.abort();
}
