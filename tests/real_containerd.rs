//! The relister against a REAL containerd (CRI v1), started by tests/containerd/containerd.sh.
//! Each test makes its own pods (unique uids) through CRI with the kubelet's labels, runs its own
//! relister against the shared containerd, and asserts the exact events for its pods.

use plegd_test_support as support;
use support::has_event as has;
use support::relister::Relister;

use std::time::Duration;

use plegd::pleg::{PlegConfig, PodLifecycleEvent, PodLifecycleEventType as E};
use plegd::runtime::CriConfig;
use plegd::triggers::{TriggerConfig, TriggerMode};
use plegd::util::clock::SystemClock;
use support::containerd::{Containerd, collect_until, containerd};

const WAIT: Duration = Duration::from_secs(20);

/// The relister on `cd`, relisting every 100 ms, without triggers.
async fn start_pleg(cd: &Containerd) -> Relister {
    let config = PlegConfig::new(
        Duration::from_millis(100),
        Some(plegd::pleg::DEFAULT_RELIST_PERIOD_WITH_TRIGGERS),
        plegd::pleg::DEFAULT_RELIST_THRESHOLD,
    )
    .unwrap();
    let relister = Relister::start(
        &cd.socket,
        &CriConfig::default(),
        config,
        TriggerMode::None,
        TriggerConfig::default(),
    )
    .await;
    assert_eq!(relister.version.runtime_name, support::containerd::runtime_under_test());
    assert_eq!(relister.version.runtime_api_version, "v1");
    relister
}

fn find<'a>(events: &'a [PodLifecycleEvent], kind: E, id: &str) -> &'a PodLifecycleEvent {
    events
        .iter()
        .find(|e| e.kind == kind && e.container_id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no {kind:?} for {id} in {events:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pod_full_lifecycle() {
    let Some(cd) = containerd().await else { return };
    let mut run = start_pleg(&cd).await;
    let pod = cd.run_pod("lifecycle", true).await;
    // A container that handles SIGTERM by exiting 143, like most well-behaved programs.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 143' TERM; sleep 1000 & wait")
        .await;

    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerStarted, &pod.sandbox_id) && has(e, E::ContainerStarted, &ctr)
    })
    .await;
    let started = find(&seen, E::ContainerStarted, &ctr);
    assert_eq!(started.container.as_deref(), Some("app"));
    assert_eq!(started.pod.as_deref(), Some("lifecycle"));
    assert_eq!(started.namespace.as_deref(), Some("plegd-test"));
    assert!(find(&seen, E::ContainerStarted, &pod.sandbox_id).sandbox);
    let cached = run.pleg.cache().get(&pod.uid);
    assert_eq!(cached.status.container_statuses.len(), 1);
    assert!(cached.status.sandbox_statuses[0].host_network);

    cd.stop_container(&ctr, 10).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerDied, &ctr)).await;
    let died = find(&seen, E::ContainerDied, &ctr);
    assert_eq!(died.exit_code, Some(143), "{died:?}");
    assert_eq!(died.reason.as_deref(), Some("Error"));
    assert_eq!(seen.len(), 1, "exactly one event for the stop: {seen:#?}");

    cd.remove_container(&ctr).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerRemoved, &ctr)).await;
    assert_eq!(seen.iter().map(|e| e.kind).collect::<Vec<_>>(), [E::ContainerRemoved]);

    cd.stop_pod(&pod).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerDied, &pod.sandbox_id)
    })
    .await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert!(seen[0].sandbox);

    cd.remove_pod(&pod).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerRemoved, &pod.sandbox_id)
    })
    .await;
    assert_eq!(seen.len(), 1, "{seen:#?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run.pleg.cache().contains(&pod.uid), "a removed pod leaves the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_exiting_with_code_3() {
    let Some(cd) = containerd().await else { return };
    let mut run = start_pleg(&cd).await;
    let pod = cd.run_pod("exit3", true).await;
    // Runs until it is seen running and stopped, then fails.
    let ctr = cd
        .run_container(&pod, "job", "trap 'exit 3' TERM; sleep 1000 & wait")
        .await;
    let mut seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerStarted, &ctr)).await;
    cd.stop_container(&ctr, 10).await;
    seen.extend(collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerDied, &ctr)).await);
    assert!(has(&seen, E::ContainerStarted, &ctr), "{seen:#?}");
    let died = find(&seen, E::ContainerDied, &ctr);
    assert_eq!(died.exit_code, Some(3));
    assert_eq!(died.reason.as_deref(), Some("Error"));
    assert_eq!(died.container.as_deref(), Some("job"));
    // And the cache holds the terminated status with its times.
    let status = run.pleg.cache().get(&pod.uid).status.clone();
    let c = status.find_container(&ctr).expect("status of the dead container");
    assert_eq!(c.exit_code, 3);
    assert!(c.finished_at.is_some() && c.started_at.is_some() && c.finished_at >= c.started_at);
    assert!(support::containerd::is_image_id(&c.image_id), "{}", c.image_id);

    // A container that completes: exit 0, reason Completed.
    let ok = cd.run_container(&pod, "done", "sleep 1").await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerDied, &ok)).await;
    let died = find(&seen, E::ContainerDied, &ok);
    assert_eq!((died.exit_code, died.reason.as_deref()), (Some(0), Some("Completed")));
    cd.cleanup(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_network_ip_is_seen_and_kept_after_stop() {
    let Some(cd) = containerd().await else { return };
    let mut run = start_pleg(&cd).await;
    let pod = cd.run_pod("netpod", false).await;
    let ctr = cd.run_container(&pod, "app", "sleep 1000").await;
    collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerStarted, &ctr) && has(e, E::ContainerStarted, &pod.sandbox_id)
    })
    .await;
    let status = run.pleg.cache().get(&pod.uid).status.clone();
    assert_eq!(status.ips.len(), 1, "{status:?}");
    let ip = status.ips[0].clone();
    assert!(
        ip.starts_with(support::containerd::pod_ip_prefix()),
        "IP from the test CNI bridge: {ip}"
    );
    assert!(!status.sandbox_statuses[0].host_network);

    // Stopping the sandbox kills the container (137) and tears the network down; the dead pod keeps its IP.
    cd.stop_pod(&pod).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerDied, &ctr) && has(e, E::ContainerDied, &pod.sandbox_id)
    })
    .await;
    assert_eq!(find(&seen, E::ContainerDied, &ctr).exit_code, Some(137));
    assert_eq!(run.pleg.cache().get(&pod.uid).status.ips, [ip]);
    cd.remove_pod(&pod).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerRemoved, &ctr) && has(e, E::ContainerRemoved, &pod.sandbox_id)
    })
    .await;
    assert_eq!(seen.len(), 2, "{seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_killed_container_reports_oomkilled() {
    let Some(cd) = containerd().await else { return };
    let mut run = start_pleg(&cd).await;
    let pod = cd.run_pod("oom", true).await;
    // 32 MiB allowed; dd wants a 256 MiB buffer.
    let config = support::containerd::memory_hog();
    let ctr = cd.create_container_from(&pod, "hog", config).await;
    cd.start_container(&ctr).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| has(e, E::ContainerDied, &ctr)).await;
    let died = find(&seen, E::ContainerDied, &ctr);
    assert_eq!(
        (died.exit_code, died.reason.as_deref()),
        (Some(137), Some("OOMKilled")),
        "{died:?}"
    );
    cd.cleanup(&pod).await;
}

/// A sandbox made without the kubelet's pod-uid label (as `crictl runp` makes one): the complete
/// relist groups it by its metadata uid, and so does a relist of its pod alone (what a runtime
/// event asks for) — it does not look gone to one while it runs — and its stop is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_without_the_uid_label_is_one_pod_to_every_relist() {
    let Some(cd) = containerd().await else { return };
    let mut run = start_pleg(&cd).await;
    let pod = cd.run_pod_unlabelled("runp").await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerStarted, &pod.sandbox_id)
    })
    .await;
    assert!(has(&seen, E::ContainerStarted, &pod.sandbox_id), "{seen:#?}");

    for _ in 0..3 {
        let changed = run.pleg.relist_pod(&pod.uid).await.expect("relist of the pod alone");
        assert!(!changed, "nothing changed");
    }
    let quiet = collect_until(&mut run.events, &pod.uid, Duration::from_millis(500), |e| !e.is_empty()).await;
    assert!(
        !quiet
            .iter()
            .any(|e| matches!(e.kind, E::ContainerDied | E::ContainerRemoved)),
        "{quiet:#?}"
    );

    cd.stop_pod(&pod).await;
    let seen = collect_until(&mut run.events, &pod.uid, WAIT, |e| {
        has(e, E::ContainerDied, &pod.sandbox_id)
    })
    .await;
    assert_eq!(
        seen.iter().filter(|e| e.kind == E::ContainerDied).count(),
        1,
        "one death: {seen:#?}"
    );
    cd.cleanup(&pod).await;
}

/// A pod that vanishes from the runtime and is found gone by a relist of its own (what a runtime
/// event asks for) wakes whoever waits for a newer status of it — the syncLoop — at once, not at
/// the next complete relist (here there is none: the relister does not run periodically).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gone_in_its_own_relist_wakes_its_waiters() {
    let Some(cd) = containerd().await else { return };
    let relister = Relister::connect(&cd.socket, &CriConfig::default(), SystemClock, PlegConfig::default()).await;
    let pleg = relister.pleg.clone();
    let pod = cd.run_pod("vanish", true).await;
    cd.run_container(&pod, "app", "sleep 600").await;
    pleg.relist().await.expect("relist");
    let seen_at = pleg.cache().get(&pod.uid).modified;
    let cache = pleg.clone();
    let uid = pod.uid.clone();
    let waiter = tokio::spawn(async move { cache.cache().get_newer_than(&uid, seen_at).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "nothing newer yet");

    cd.cleanup(&pod).await;
    pleg.relist_pod(&pod.uid).await.expect("relist of the pod alone");
    let got = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the pod's own relist")
        .unwrap();
    assert!(got.status.container_statuses.is_empty() && got.status.sandbox_statuses.is_empty());
}

/// A change a probe finds (one status call) is read into the pod's record without the pod's lists
/// (`relist_probed`): the same events, each container's in the same order, and the same cached
/// status as a relist of the pod finds on the same runtime state — for an exit and for a removal. A record set again
/// since the probe compared it is left to a relist of the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probed_change_is_what_a_relist_of_the_pod_reads() {
    let Some(cd) = containerd().await else { return };
    let cri = CriConfig::default();
    let connect = || Relister::connect(&cd.socket, &cri, SystemClock, PlegConfig::default());
    let (mut probed, mut listed) = (connect().await, connect().await);
    let pod = cd.run_pod("probed", true).await;
    let (app, side) = (
        cd.run_container(&pod, "app", "sleep 600").await,
        cd.run_container(&pod, "side", "sleep 600").await,
    );
    probed.pleg.relist().await.expect("relist");
    listed.pleg.relist().await.expect("relist");
    // This pod's events (a complete relist sees the other tests' pods as well).
    let drain = |r: &mut Relister| {
        let mut events = Vec::new();
        while let Ok(e) = r.events.try_recv() {
            if e.pod_uid == pod.uid {
                events.push((e.kind, e.container_id, e.exit_code, e.reason));
            }
        }
        events
    };
    drain(&mut probed);
    drain(&mut listed);

    // The probe finds the change once the CRI state shows it.
    let probe = async |r: &Relister, id: &str| {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(found) = r.pleg.probe(&pod.uid, id).await.expect("probe") {
                return found;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no change of {id} within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    cd.stop_container(&app, 0).await;
    if support::containerd::runtime_under_test() == "cri-o" {
        // CRI-O stops a running container before it removes it, with a grace period that `sh` as
        // PID 1 (deaf to SIGTERM) always uses up; containerd kills it at once. The kubelet stops
        // a container before removing it: so here on CRI-O.
        cd.stop_container(&side, 0).await;
    }
    cd.remove_container(&side).await;
    for id in [&app, &side] {
        let found = probe(&probed, id).await;
        let after_the_probe = std::time::SystemTime::now();
        assert_eq!(probed.pleg.relist_probed(&pod.uid, found).await, Some(true), "{id}");
        // The probe's answer is part of the status: the entry is as fresh as the probe, not more.
        assert!(probed.pleg.cache().get(&pod.uid).modified < after_the_probe, "{id}");
    }
    assert!(listed.pleg.relist_pod(&pod.uid).await.expect("relist of the pod"));
    // Two probes are two syncs: each container's events in order, the containers one after the other.
    let by_container = |mut events: Vec<_>| {
        events.sort_by_key(|e: &(E, Option<String>, Option<i32>, Option<String>)| e.1.clone());
        events
    };
    let (by_probe, by_list) = (by_container(drain(&mut probed)), by_container(drain(&mut listed)));
    assert!(
        by_probe.iter().any(|e| e.0 == E::ContainerDied && e.2 == Some(137)),
        "{by_probe:#?}"
    );
    assert!(by_probe.iter().any(|e| e.0 == E::ContainerRemoved), "{by_probe:#?}");
    assert_eq!(by_probe, by_list);
    assert_eq!(
        probed.pleg.cache().get(&pod.uid).status,
        listed.pleg.cache().get(&pod.uid).status
    );
    // Nothing left for either relister's complete relist: the records agree with the lists.
    probed.pleg.relist().await.expect("relist");
    listed.pleg.relist().await.expect("relist");
    assert_eq!(drain(&mut probed), []);
    assert_eq!(drain(&mut listed), []);

    // A probe's answer whose record a relist set again meanwhile is not read.
    cd.remove_container(&app).await;
    let found = probe(&probed, &app).await;
    probed.pleg.relist().await.expect("relist");
    assert_eq!(probed.pleg.relist_probed(&pod.uid, found).await, None);
    assert_eq!(
        drain(&mut probed).into_iter().map(|e| e.0).collect::<Vec<_>>(),
        [E::ContainerRemoved],
        "read once, by the relist"
    );
    cd.cleanup(&pod).await;
}

/// plegd relists through CRI v0.37's streaming lists (StreamPodSandboxes, StreamContainers) where
/// the runtime serves them, and through the unary lists where it answers Unimplemented, chosen at
/// the first list and said in `plegd_runtime_list_mode`. Measured per version: containerd 2.4
/// streams; 2.3, 1.7 and CRI-O 1.34 do not. Every other real-runtime test on 2.4 relists through
/// the streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relist_streams_its_lists_where_the_runtime_streams() {
    use plegd::runtime::list_mode::ListMode;
    use plegd::runtime::{CriRuntime, Runtime};

    let Some(cd) = containerd().await else { return };
    let version = cd.version().await;
    let metrics = std::sync::Arc::new(plegd::metrics::Metrics::new());
    let (runtime, _) = CriRuntime::connect(&cd.socket, &CriConfig::default(), metrics.clone())
        .await
        .expect("connect");
    assert_eq!(runtime.list_mode(), None, "chosen at the first list");
    let pod = cd.run_pod("streamed", true).await;
    let ctr = cd.run_container(&pod, "app", "sleep 1000").await;
    let pods = runtime.list_pods().await.expect("a relist");
    let listed = pods.iter().find(|p| p.id == pod.uid).expect("the pod listed");
    assert!(listed.find_container(&ctr).is_some(), "{listed:?}");
    let streams = support::containerd::runtime_under_test() == "containerd" && version >= (2, 4);
    let mode = if streams { ListMode::Streaming } else { ListMode::Unary };
    assert_eq!(
        runtime.list_mode(),
        Some(mode),
        "{} {version:?}",
        support::containerd::runtime_under_test()
    );
    let text = metrics.encode();
    for (name, on) in [("streaming", streams), ("unary", !streams)] {
        let series = format!("plegd_runtime_list_mode{{mode=\"{name}\"}} {}", u8::from(on));
        assert!(text.contains(&series), "{series} in:\n{text}");
    }
    cd.cleanup(&pod).await;
}

/// A node whose lists outgrow one gRPC message, on a runtime that streams them: a pod of 5,600
/// containers with 2.6 KB of annotations each (about 17 MiB of list). The unary ListContainers
/// fails (larger than the 16 MiB a message may be); plegd's relist lists every container.
/// containerd 2.4.2 streams batches of 5,000 items whatever their size, each under its own 16 MiB
/// send limit (a batch larger than that fails in containerd itself, stream or not), so the list
/// must pass 5,000 containers of under 3.3 KB each. Making 5,600 containers takes several minutes
/// here (each CreateContainer prepares a snapshot): run by hand with `PLEGD_TEST_LARGE_LISTS=1`
/// on a containerd that streams (docs/testing.md); said and skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_larger_than_a_message_relists_through_the_stream() {
    use futures_util::StreamExt;
    use plegd::runtime::list_mode::ListMode;
    use plegd::runtime::{CriRuntime, Runtime};

    let Some(cd) = containerd().await else { return };
    if std::env::var("PLEGD_TEST_LARGE_LISTS").as_deref() != Ok("1") {
        eprintln!("SKIPPED: a list of 5,600 containers takes minutes to make: PLEGD_TEST_LARGE_LISTS=1 runs it");
        return;
    }
    let version = cd.version().await;
    assert!(
        support::containerd::runtime_under_test() == "containerd" && version >= (2, 4),
        "PLEGD_TEST_LARGE_LISTS=1 needs a runtime that streams its lists (containerd 2.4), not {version:?}"
    );
    let metrics = std::sync::Arc::new(plegd::metrics::Metrics::new());
    let (runtime, _) = CriRuntime::connect(&cd.socket, &CriConfig::default(), metrics)
        .await
        .expect("connect");
    let pod = cd.run_pod("biglist", true).await;
    let filler = "x".repeat(2600);
    let count = 5600;
    let ids: Vec<String> = futures_util::stream::iter(0..count)
        .map(|i| {
            let mut config = support::containerd::attempt(0, "sleep 1000");
            config.annotations.insert("plegd.test/filler".into(), filler.clone());
            let (cd, pod) = (&cd, &pod);
            async move { cd.create_container_from(pod, &format!("c{i}"), config).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let unary = runtime
        .client()
        .max_decoding_message_size(plegd::runtime::MAX_MESSAGE_SIZE)
        .list_containers(k8s_cri::v1::ListContainersRequest::default())
        .await
        .expect_err("a unary list of more than 16 MiB");
    assert!(
        matches!(unary.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange),
        "{unary:?}"
    );
    let pods = runtime.list_pods().await.expect("plegd's relist, streamed");
    let listed = pods.iter().find(|p| p.id == pod.uid).expect("the pod listed");
    assert_eq!(listed.containers.len(), count, "every container of the pod listed");
    assert!(ids.iter().all(|id| listed.find_container(id).is_some()));
    assert_eq!(runtime.list_mode(), Some(ListMode::Streaming));
    cd.cleanup(&pod).await;
}
