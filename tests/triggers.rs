//! Runtime triggers: events that ask for a relist of one pod between periodic relists.
//! Fake CRI server for failures and coalescing; real containerd 1.6 (containerd events) and 1.7
//! (CRI GetContainerEvents) for delivery by trigger alone and for a containerd that is killed and comes back.

use plegd_test_support as support;
use support::has_event as has;
use support::relister::Relister;

use std::time::{Duration, SystemTime};

use plegd::metrics::Metrics;
use plegd::pleg::{PlegConfig, PodLifecycleEvent, PodLifecycleEventType as E};
use plegd::runtime::CriConfig;
use plegd::triggers::{TriggerConfig, TriggerMode};
use support::containerd::{
    Containerd, PrivateContainerd, PrivateCrio, collect_until, containerd, containerd_only, runtime_under_test,
};
use support::fake_cri::FakeServer;

/// The threshold of the tests' relisters, some of whose periods are an hour (no periodic relist
/// while the test runs): a threshold is above every period.
const LONG_THRESHOLD: Duration = Duration::from_secs(7200);

fn quick_triggers() -> TriggerConfig {
    TriggerConfig {
        backoff: plegd::util::backoff::ExponentialBackoff::try_new(
            Duration::from_millis(10),
            Duration::from_millis(50),
        )
        .unwrap(),
        ..TriggerConfig::default()
    }
}

async fn start(socket: &std::path::Path, mode: TriggerMode, relist_period: Duration) -> Relister {
    let config = PlegConfig::new(relist_period, Some(relist_period), LONG_THRESHOLD).unwrap();
    start_with(socket, mode, config).await
}

async fn start_with(socket: &std::path::Path, mode: TriggerMode, config: PlegConfig) -> Relister {
    start_with_triggers(socket, mode, config, quick_triggers()).await
}

async fn start_with_triggers(
    socket: &std::path::Path,
    mode: TriggerMode,
    config: PlegConfig,
    trigger_config: TriggerConfig,
) -> Relister {
    let cri = CriConfig {
        backoff: plegd::util::backoff::ExponentialBackoff::try_new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        )
        .unwrap(),
        ..CriConfig::default()
    };
    Relister::start(socket, &cri, config, mode, trigger_config).await
}

/// The value of the counter sample `name` (labels included) in `metrics`; 0 before it is counted.
fn counter(metrics: &Metrics, name: &str) -> u64 {
    metrics.sample(name).map_or(0, |v| v as u64)
}

async fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    support::wait_until_every(what, timeout, Duration::from_millis(10), cond).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_stream_never_disables_triggers() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 2);
    server.fake.fail(
        "GetContainerEvents",
        tonic::Status::unavailable("event service restarting"),
    );
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    p.events.recv().await.expect("first relist events");
    while p.events.try_recv().is_ok() {}

    // Many failures in a row, with backoff, and the source keeps trying.
    wait_for("20 stream errors", Duration::from_secs(10), || {
        counter(&p.metrics, "plegd_trigger_stream_errors_total{source=\"cri\"}") >= 20
    })
    .await;
    let calls_then = server.fake.calls("GetContainerEvents");
    server.fake.heal("GetContainerEvents");
    wait_for("a connected stream", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
    })
    .await;
    assert!(server.fake.calls("GetContainerEvents") > calls_then);

    // A trigger now relists the pod: the relist period is an hour, so only the trigger can do it.
    server.fake.exit_container("ctr-u1-0", 5);
    assert_eq!(server.fake.emit_event("ctr-u1-0", Some("u1")), 1);
    let seen = collect_until(&mut p.events, "u1", Duration::from_secs(5), |e| {
        has(e, E::ContainerDied, "ctr-u1-0")
    })
    .await;
    assert_eq!(seen.last().and_then(|e| e.exit_code), Some(5), "{seen:#?}");

    // The stream breaks mid-way: it reconnects and triggers keep working.
    server.fake.break_event_streams(tonic::Status::internal("stream reset"));
    wait_for("a second connection", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 2
    })
    .await;
    server.fake.exit_container("ctr-u1-1", 6);
    server.fake.emit_event("ctr-u1-1", None);
    let seen = collect_until(&mut p.events, "u1", Duration::from_secs(5), |e| {
        has(e, E::ContainerDied, "ctr-u1-1")
    })
    .await;
    assert_eq!(seen.last().and_then(|e| e.exit_code), Some(6), "{seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_stream_stretches_the_relist_and_a_failed_one_ends_the_wait() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    let config = PlegConfig::new(
        Duration::from_millis(50),
        Some(Duration::from_secs(3600)),
        LONG_THRESHOLD,
    )
    .unwrap();
    let p = start_with(&server.path, TriggerMode::Cri, config).await;
    let connects = |n| counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= n;
    let lists = || server.fake.calls("ListPodSandbox");
    wait_for("a connected stream", Duration::from_secs(5), || connects(1)).await;
    // Past the connection's own full relist and the short wait that was under way (on a loaded
    // machine either may still land in the window: at most two, where relists every 50 ms
    // would be ~20).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = lists();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        lists() - before <= 2,
        "no periodic relist while the stream is healthy (period 1 h): {} in 1 s",
        lists() - before
    );

    // The stream fails and stays down: the hour's wait ends at once, and the relist is back to
    // its short period (ten relists take 0.5 s at 50 ms, never happen within an hour).
    server
        .fake
        .fail("GetContainerEvents", tonic::Status::unavailable("down"));
    server.fake.break_event_streams(tonic::Status::internal("stream reset"));
    let broken = lists();
    wait_for("relists every 50 ms", Duration::from_secs(5), || lists() >= broken + 10).await;

    // Connected again: the long period is back.
    server.fake.heal("GetContainerEvents");
    wait_for("a second connection", Duration::from_secs(5), || connects(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = lists();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        lists() - before <= 2,
        "the long period again once reconnected: {} relists in 1 s",
        lists() - before
    );
}

/// A runtime that answers the event stream and ends it at once (CRI-O without pod events): the
/// stream never counts as connected, so no full relist per attempt and no long relist period;
/// after a few such ends plegd says the runtime has no usable events and retries ever more
/// slowly (the backoff is never reset: nothing lived or delivered), relisting at --relist-period.
/// Once the runtime's stream stays open, it connects and the long period is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_at_once_is_a_runtime_without_events() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    server.fake.state().events_end_at_once = true;
    let config = PlegConfig::new(
        Duration::from_millis(200),
        Some(Duration::from_secs(3600)),
        LONG_THRESHOLD,
    )
    .unwrap();
    // The defaults' shape, shorter: 100 ms doubling, capped at 2 s.
    let backoff = TriggerConfig {
        backoff: plegd::util::backoff::ExponentialBackoff::try_new(Duration::from_millis(100), Duration::from_secs(2))
            .unwrap(),
        ..TriggerConfig::default()
    };
    let p = start_with_triggers(&server.path, TriggerMode::Cri, config, backoff).await;
    let state = |s: &str| {
        p.metrics
            .encode()
            .contains(&format!("plegd_trigger_stream_state{{source=\"cri\",state=\"{s}\"}} 1"))
    };
    wait_for("the stream unusable", Duration::from_secs(10), || state("unusable")).await;
    assert_eq!(p.pleg.trigger_state(), plegd::pleg::StreamState::Unusable);

    // Over 4 s: the retries slow down, none counts as connected, and the relist runs at its short
    // period all along (≥ 10 relists in 4 s at 200 ms). The waits after the third end are drawn
    // from [200, 400), [400, 800), [800, 1600) ms, then [1000, 2000) ms (equal jitter over the
    // doubling base, capped at 2 s): at their shortest 200 + 400 + 800 + 1000 + 1000 = 3.4 s, so
    // at most 5 opens fit in 4 s, where a backoff reset at each answer (waits of 50–100 ms) would
    // open the stream 40 times or more.
    let (opens, lists) = (
        server.fake.calls("GetContainerEvents"),
        server.fake.calls("ListPodSandbox"),
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let opened = server.fake.calls("GetContainerEvents") - opens;
    assert!(opened <= 5, "{opened} stream opens in 4 s");
    assert!(
        server.fake.calls("ListPodSandbox") - lists >= 10,
        "the short relist period"
    );
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}"),
        0
    );
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"),
        0,
        "no full relist for a stream that never connected"
    );

    // The runtime's stream now stays open: the next attempt (within the capped backoff) connects.
    server.fake.state().events_end_at_once = false;
    wait_for("connected", Duration::from_secs(10), || state("connected")).await;
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_before_the_stream_connects_is_found_at_once() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    server
        .fake
        .fail("GetContainerEvents", tonic::Status::unavailable("not yet"));
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    while p.events.try_recv().is_ok() {}
    wait_for("a failed subscription", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_errors_total{source=\"cri\"}") >= 1
    })
    .await;
    // The container dies while no stream is there to tell: no event will ever name it.
    server.fake.exit_container("ctr-u1-0", 4);
    server.fake.heal("GetContainerEvents");
    let seen = collect_until(&mut p.events, "u1", Duration::from_secs(5), |e| {
        has(e, E::ContainerDied, "ctr-u1-0")
    })
    .await;
    assert_eq!(seen.last().and_then(|e| e.exit_code), Some(4), "{seen:#?}");
    assert_eq!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_for_one_pod_is_one_relist() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    while p.events.try_recv().is_ok() {}
    // The first relist, then the full relist the connection asks for.
    wait_for("a connected stream and its full relist", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
            && server.fake.calls("ListContainers") >= 2
    })
    .await;

    // The first trigger starts a relist of u1 that the runtime makes slow; 50 more arrive meanwhile.
    server.fake.delay("ListContainers", Duration::from_millis(300));
    server.fake.emit_event("ctr-u1-0", Some("u1"));
    wait_for("the first pod relist to start", Duration::from_secs(5), || {
        server.fake.calls("ListContainers") >= 3
    })
    .await;
    for _ in 0..50 {
        server.fake.emit_event("ctr-u1-0", Some("u1"));
    }
    // The first relist found no change, so u1 waits for a re-check: the 50 join that schedule
    // (the runtime's state may lag its events) instead of each asking for a relist of their own.
    wait_for("the burst taken", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"skipped\"}") >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"pod\"}"),
        1,
        "51 triggers, one relist and its re-checks"
    );
    let rechecks = counter(&p.metrics, "plegd_trigger_relists_total{kind=\"recheck\"}");
    assert!((1..=9).contains(&rechecks), "{rechecks} re-checks");
    assert_eq!(counter(&p.metrics, "plegd_triggers_total{source=\"cri\"}"), 51);
}

/// A burst of exit events that the runtime's CRI state lags (as containerd's does while it catches
/// up with a burst): the probes due at once are answered by one complete relist a round instead of
/// a status call per container every 2 ms, and every exit still arrives by trigger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_probes_due_at_once_are_one_relist() {
    const PODS: usize = 20;
    let server = FakeServer::start().await;
    for i in 0..PODS {
        server.fake.add_running_pod(&format!("u{i}"), &format!("web{i}"), 1);
    }
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    wait_for("a connected stream and its full relist", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
            && server.fake.calls("ListContainers") >= 2
    })
    .await;
    while p.events.try_recv().is_ok() {}

    // The first probe is slow, so that the other events queue up behind it; none has reached the
    // CRI state yet.
    server.fake.delay("ContainerStatus", Duration::from_millis(50));
    for i in 0..PODS {
        server.fake.emit_event(&format!("ctr-u{i}-0"), None);
    }
    wait_for("probes answered by a relist", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"batch\"}") >= 1
    })
    .await;
    server.fake.delay("ContainerStatus", Duration::ZERO);
    let status_calls = server.fake.calls("ContainerStatus");
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..PODS {
        server.fake.exit_container(&format!("ctr-u{i}-0"), 1);
    }
    let mut died = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while died.len() < PODS {
        match tokio::time::timeout_at(deadline, p.events.recv()).await {
            Ok(Some(e)) if e.kind == E::ContainerDied => {
                died.insert(e.pod_uid);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    assert_eq!(died.len(), PODS, "every exit by trigger (the relist period is an hour)");
    // Probed one by one every 2 ms for those 100 ms, it would have been some 1,000 status calls;
    // the pods' status reads after the exits are 20.
    let since = server.fake.calls("ContainerStatus") - status_calls;
    assert!(since <= 3 * PODS as u64, "{since} container status calls");
    assert!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"batch\"}") >= 2);
}

/// An id no record has is located in the runtime (two lists filtered by id, which never make the
/// runtime log an error) and its pod relisted; no full relist. An id the runtime does not list yet
/// (containerd 2.x publishes a sandbox's start before its CRI plugin lists it) is looked for again
/// on the re-check schedule, so its pod's events still come by trigger, not by the periodic relist
/// (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_is_located_and_its_pod_relisted() {
    let server = FakeServer::start().await;
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    wait_for("a connected stream and its full relist", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
            && server.fake.calls("ListContainers") >= 2
    })
    .await;
    assert_eq!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"), 1);
    server.fake.add_running_pod("u7", "new", 1);
    server.fake.emit_event("ctr-u7-0", None);
    let seen = collect_until(&mut p.events, "u7", Duration::from_secs(5), |e| {
        has(e, E::ContainerStarted, "ctr-u7-0")
    })
    .await;
    assert!(has(&seen, E::ContainerStarted, "ctr-u7-0"));
    assert!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"locate\"}") >= 1);
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"),
        1,
        "no full relist"
    );
    assert_eq!(
        server.fake.calls("ContainerStatus"),
        1,
        "one status read of the new container"
    );
    assert_eq!(
        server.fake.calls("PodSandboxStatus"),
        1,
        "one status read of the new sandbox"
    );

    // The event comes before the runtime lists the pod: locates find nothing (waited for, not
    // timed, so that a slow machine cannot let the first look find the pod; a locate is counted
    // as it starts, so a second one started means the first is over), and a later one on the
    // re-check schedule finds it (the relist period is an hour, and no full relist is made).
    let locates = || counter(&p.metrics, "plegd_trigger_relists_total{kind=\"locate\"}");
    let before = locates();
    server.fake.emit_event("ctr-u8-0", None);
    wait_for("a locate that found nothing yet", Duration::from_secs(5), || {
        locates() >= before + 2
    })
    .await;
    server.fake.add_running_pod("u8", "later", 1);
    let seen = collect_until(&mut p.events, "u8", Duration::from_secs(5), |e| {
        has(e, E::ContainerStarted, "ctr-u8-0")
    })
    .await;
    assert!(has(&seen, E::ContainerStarted, "ctr-u8-0"));
    assert_eq!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"), 1);
}

/// A trigger for a sandbox asks the runtime about a sandbox (PodSandboxStatus), never
/// ContainerStatus with a sandbox's id: containerd logs each such NotFound as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_trigger_asks_about_a_sandbox() {
    let server = FakeServer::start().await;
    server.fake.add_running_pod("u9", "sb", 1);
    let mut p = start(&server.path, TriggerMode::Cri, Duration::from_secs(3600)).await;
    wait_for("a connected stream and its full relist", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
    })
    .await;
    collect_until(&mut p.events, "u9", Duration::from_secs(5), |e| {
        has(e, E::ContainerStarted, "ctr-u9-0")
    })
    .await;
    let sandbox = server.fake.state().sandboxes.keys().next().cloned().expect("a sandbox");
    // Several events for the sandbox, as a stop gives (task exit, delete, …).
    server.fake.set_sandbox_ready(&sandbox, false);
    for _ in 0..5 {
        server.fake.emit_event(&sandbox, None);
    }
    let seen = collect_until(&mut p.events, "u9", Duration::from_secs(5), |e| {
        has(e, E::ContainerDied, &sandbox)
    })
    .await;
    assert!(has(&seen, E::ContainerDied, &sandbox));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.fake.calls("ContainerStatus NotFound"), 0);
    assert_eq!(server.fake.calls("PodSandboxStatus NotFound"), 0);
}

/// Wait until `p`'s trigger stream of `source` has connected.
async fn connected(p: &Relister, source: &str) {
    wait_for("a connected stream", Duration::from_secs(20), || {
        counter(
            &p.metrics,
            &format!("plegd_trigger_stream_connects_total{{source=\"{source}\"}}"),
        ) >= 1
    })
    .await;
}

/// Wall-clock time from `since` to the arrival of the event of `kind` for `id`.
async fn latency(p: &mut Relister, uid: &str, kind: E, id: &str) -> (PodLifecycleEvent, SystemTime) {
    let seen = collect_until(&mut p.events, uid, Duration::from_secs(20), |e| has(e, kind, id)).await;
    let at = SystemTime::now();
    let event = seen
        .into_iter()
        .find(|e| e.kind == kind && e.container_id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no {kind:?} for {id}"));
    (event, at)
}

/// Start, exit and removal each reach plegd by a trigger: the relist period is an hour, so nothing
/// else can deliver them. The lags are printed (the figures themselves come from
/// `cargo bench --bench trigger_latency`, not from a timed assertion).
async fn events_arrive_by_trigger(cd: &Containerd, mode: TriggerMode) {
    let major = cd.version().await.0;
    let containerd = runtime_under_test() == "containerd";
    let source = match mode {
        TriggerMode::Cri => "cri",
        // Any other runtime's are its CRI events.
        TriggerMode::Auto if major >= 2 || !containerd => "cri",
        _ => "containerd",
    };
    let mut p = start(&cd.socket, mode, Duration::from_secs(3600)).await;
    // The sandbox's own events connect the stream (neither stream answers before its first event).
    let pod = cd.run_pod("trig", true).await;
    connected(&p, source).await;
    // A sandbox started once the stream is up arrives by trigger too (containerd 2.x publishes its
    // start before its CRI plugin lists it).
    let second = cd.run_pod("trig2", true).await;
    latency(&mut p, &second.uid, E::ContainerStarted, &second.sandbox_id).await;
    cd.cleanup(&second).await;
    // Runs until it is seen running and stopped, then fails.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 7' TERM; sleep 1000 & wait")
        .await;

    let (_, seen_at) = latency(&mut p, &pod.uid, E::ContainerStarted, &ctr).await;
    let (started_at, _) = cd.container_times(&ctr).await;
    let started_lag = seen_at.duration_since(started_at).unwrap_or_default();
    cd.stop_container(&ctr, 10).await;

    let (died, seen_at) = latency(&mut p, &pod.uid, E::ContainerDied, &ctr).await;
    let (_, finished_at) = cd.container_times(&ctr).await;
    assert_eq!(died.exit_code, Some(7));
    let died_lag = seen_at.duration_since(finished_at).unwrap_or_default();

    let removed_at = SystemTime::now();
    cd.remove_container(&ctr).await;
    let (_, seen_at) = latency(&mut p, &pod.uid, E::ContainerRemoved, &ctr).await;
    let removed_lag = seen_at.duration_since(removed_at).unwrap_or_default();
    eprintln!("{source}: started +{started_lag:?}, died +{died_lag:?}, removed +{removed_lag:?}");
    cd.cleanup(&pod).await;
    assert!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"pod\"}") >= 1);
    if source == "cri" && major >= 2 && containerd {
        // containerd 2.x's CRI events follow its CRI state: each is checked once, none again on
        // a schedule.
        assert_eq!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"recheck\"}"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_events_arrive_by_trigger() {
    let Some(cd) = containerd().await else { return };
    if !containerd_only("its events service") {
        return;
    }
    events_arrive_by_trigger(&cd, TriggerMode::Containerd).await;
}

/// `auto` takes CRI events on containerd 2.x, whose CRI state they follow, containerd's events
/// service on containerd 1.x, and CRI events on any other runtime (CRI-O).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_takes_the_events_of_the_containerd_version() {
    let Some(cd) = containerd().await else { return };
    events_arrive_by_trigger(&cd, TriggerMode::Auto).await;
}

/// A burst: 30 containers in 30 pods exit at the same moment, and every exit reaches plegd by
/// trigger — the relist period is an hour, so nothing is left to it. (The latencies of such a burst
/// are measured by `cargo bench --bench lifecycle_latency -- --burst 100`, not asserted here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_exits_arrives_by_trigger() {
    const PODS: usize = 30;
    let Some(cd) = containerd().await else { return };
    let mut p = start(&cd.socket, TriggerMode::Auto, Duration::from_secs(3600)).await;
    let mut pods = Vec::with_capacity(PODS);
    for i in 0..PODS {
        pods.push(cd.run_pod(&format!("burst{i}"), true).await);
    }
    let due = tokio::time::Instant::now() + Duration::from_millis(300) * PODS as u32 + Duration::from_secs(1);
    let mut ids = std::collections::HashSet::with_capacity(PODS);
    for pod in &pods {
        ids.insert(cd.run_exiting_at(pod, "app", due, 3).await);
    }
    let deadline = due + Duration::from_secs(20);
    let mut died = std::collections::HashSet::new();
    while died.len() < PODS {
        match tokio::time::timeout_at(deadline, p.events.recv()).await {
            Ok(Some(e)) if e.kind == E::ContainerDied => {
                if let Some(id) = e.container_id.filter(|id| ids.contains(id)) {
                    assert_eq!(e.exit_code, Some(3));
                    died.insert(id);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    let missing: Vec<_> = ids.difference(&died).collect();
    assert!(missing.is_empty(), "exits that never came by trigger: {missing:?}");
    assert_eq!(counter(&p.metrics, "plegd_pleg_discard_events_total"), 0);
    for pod in &pods {
        cd.cleanup(pod).await;
    }
}

/// CRI GetContainerEvents on a private instance of the tested version (1.7 where the tested one is
/// 1.6, which has no CRI events): on 1.7 each event goes to one subscriber only, so it must not
/// share a containerd with other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_events_arrive_by_trigger() {
    let Some(cd) = containerd().await else { return };
    if runtime_under_test() == "cri-o" {
        // CRI-O sends each event to every subscriber: the shared instance serves.
        events_arrive_by_trigger(&cd, TriggerMode::Cri).await;
        return;
    }
    let version = match cd.version().await {
        (1, 6) => "1.7".to_owned(),
        (major, minor) => format!("{major}.{minor}"),
    };
    let Some(instance) = PrivateContainerd::start("cri", &version, 235).await else {
        return;
    };
    let cd = &instance.handle;
    // Events from before plegd subscribes: containerd 2.x replays them to a new subscriber; plegd
    // counts them and acts on none (its connection's full relist covers them).
    let early = cd.run_pod("early", true).await;
    for i in 0..3 {
        cd.run_container(&early, &format!("c{i}"), "exit 0").await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = start(&cd.socket, TriggerMode::Cri, Duration::from_secs(3600)).await;
    let (major, _) = cd.version().await;
    if major >= 2 {
        wait_for("replayed events", Duration::from_secs(10), || {
            counter(&p.metrics, "plegd_trigger_replayed_events_total{source=\"cri\"}") >= 4
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            counter(&p.metrics, "plegd_trigger_relists_total{kind=\"pod\"}"),
            0,
            "no pod relist for a replayed event"
        );
        assert_eq!(counter(&p.metrics, "plegd_trigger_relists_total{kind=\"all\"}"), 1);
    }
    drop(p);
    cd.cleanup(&early).await;
    events_arrive_by_trigger(cd, TriggerMode::Cri).await;
    if major < 2 {
        // 1.7 keeps nothing for a later subscriber.
        let p = start(&cd.socket, TriggerMode::Cri, Duration::from_secs(3600)).await;
        let pod = cd.run_pod("late", true).await;
        wait_for("a connected stream", Duration::from_secs(20), || {
            counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}") >= 1
        })
        .await;
        assert_eq!(
            counter(&p.metrics, "plegd_trigger_replayed_events_total{source=\"cri\"}"),
            0
        );
        cd.cleanup(&pod).await;
    }
}

/// containerd killed (-9) while a container exits, then started again, on a private instance of the
/// tested version. What the runtime reports for that exit differs by version and by the restart,
/// and plegd ends on what the CRI says: 1.6 keeps the real exit code. From 1.7, where containerd
/// finds the container's shim with no process left it reaps it as leaked (`shouldCleanupShim` in
/// core/runtime/v2/shim_load.go) and the CRI, finding no task, records 255 `Unknown` — on a quiet
/// machine, every time; where it keeps the shim, the CRI reads the stopped task's real code. On a
/// loaded machine (seen in CI on 2.3, and with the cores kept busy by hand) the shim's exit event,
/// which it retries until a containerd takes it, can reach the restarted containerd before the
/// CRI's recovery: plegd then shows the real code from that event first and writes the CRI's 255
/// after it, counted as a correction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_killed_and_restarted() {
    let Some(shared) = containerd().await else { return };
    if !containerd_only("an instance of its own killed and restarted") {
        return;
    }
    let (major, minor) = shared.version().await;
    let Some(instance) = PrivateContainerd::start("kr", &format!("{major}.{minor}"), 236).await else {
        return;
    };
    let cd = &instance.handle;
    let mut p = start(&cd.socket, TriggerMode::Containerd, Duration::from_secs(1)).await;
    let pod = cd.run_pod("outage", true).await;
    // Exits with 9 while containerd is down: told to by the test (its shim stays), not timed.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 9' TERM; sleep 1000 & wait")
        .await;
    latency(&mut p, &pod.uid, E::ContainerStarted, &ctr).await;
    wait_for("the event stream", Duration::from_secs(5), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"containerd\"}") >= 1
    })
    .await;
    let pid = cd.container_pid(&ctr).await;

    instance.script("kill").await;
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(signalled.success(), "the container's process {pid} signalled");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(p.pleg.healthy().is_ok(), "a short outage stays within the threshold");
    instance.script("start").await;

    let (died, _) = latency(&mut p, &pod.uid, E::ContainerDied, &ctr).await;
    let (code, reason) = cd.container_exit(&ctr).await;
    let possible: &[(i32, &str)] = if (major, minor) >= (1, 7) {
        &[(255, "Unknown"), (9, "Error")]
    } else {
        &[(9, "Error")]
    };
    assert!(
        possible.contains(&(code, reason.as_str())),
        "containerd {major}.{minor}: the runtime's status of the exit during the outage is one of {possible:?}, got {code} {reason:?}"
    );
    // What plegd holds of the container settles on the CRI's status, whatever it said first.
    let cached = || {
        p.pleg
            .cache()
            .get(&pod.uid)
            .status
            .container_statuses
            .iter()
            .find(|c| c.id == ctr)
            .map(|c| (c.exit_code, c.reason.clone()))
    };
    wait_for(
        "plegd's record of the exit to be the CRI's",
        Duration::from_secs(20),
        || cached() == Some((code, reason.clone())),
    )
    .await;
    let corrected = counter(&p.metrics, "plegd_exit_corrections_total{field=\"exit_code\"}");
    if (died.exit_code, died.reason.as_deref()) == (Some(code), Some(reason.as_str())) {
        assert_eq!(
            corrected, 0,
            "containerd {major}.{minor}: an exit shown as the CRI shows it is not corrected"
        );
    } else {
        // The shim's exit event, retried until the restarted containerd took it (seen on a loaded
        // machine), came before the CRI's recovery: plegd showed the real code from containerd's
        // own event, then wrote the CRI's and counted the correction (KUBELET_SEMANTICS: the CRI wins).
        assert_eq!(
            (died.exit_code, died.reason.as_deref()),
            (Some(9), Some("Error")),
            "containerd {major}.{minor}: an exit shown before the CRI's is the one containerd's event carried: {died:?}"
        );
        assert_eq!(
            counter(&p.metrics, "plegd_exit_events_total{result=\"shown\"}"),
            1,
            "containerd {major}.{minor}: the exit shown came from containerd's exit event"
        );
        assert_eq!(
            corrected, 1,
            "containerd {major}.{minor}: the CRI's exit code written over the event's, counted"
        );
    }
    wait_for("the event stream to reconnect", Duration::from_secs(40), || {
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"containerd\"}") >= 2
    })
    .await;
    // Triggers work again after the reconnection.
    let ctr2 = cd.run_container(&pod, "again", "sleep 1000").await;
    latency(&mut p, &pod.uid, E::ContainerStarted, &ctr2).await;
    cd.cleanup(&pod).await;
}

/// Exits taken from containerd's own exit event (`/tasks/exit`; on containerd 2.x read beside the
/// CRI events by a stream of its own), on the tested version: a container that fails and one the
/// kernel OOM-kills. Each exit's ContainerDied carries the exit code and reason containerd's CRI
/// shows afterwards; each one is held until the CRI state shows it, then settled. The relist period
/// is an hour: nothing but the events can deliver or settle them. An OOM kill's event is not
/// ordered with the exit's by the shim before containerd 2.3, nor on cgroup v1 with any version
/// (2.3's shim drains the cgroup v2 OOM watcher before it sends the exit; its cgroup v1 watcher is
/// not drained — read in `cmd/containerd-shim-runc-v2/task/service.go`, seen on these cgroup v1
/// machines): so an exit of status 137 with no OOM announced asks the container's cgroup for its
/// OOM kill count, as containerd 2.3's CRI plugin does before it records the exit
/// (`runtime::task_metrics`), and says OOMKilled at once with no correction afterwards, on every
/// version. Where the count cannot be read (the CRI deleted the task first) the exit is left to the
/// CRI state (`plegd_exit_events_total{result="reason_unread"}`): never an Error corrected later.
/// Every other field agrees on every version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_is_taken_from_containerds_exit_event() {
    let Some(cd) = containerd().await else { return };
    if !containerd_only("its exit events") {
        return;
    }
    let mut p = start(&cd.socket, TriggerMode::Auto, Duration::from_secs(3600)).await;
    let pod = cd.run_pod("exitfact", true).await;
    let source = if cd.version().await.0 >= 2 { "cri" } else { "containerd" };
    connected(&p, source).await;
    let failing = cd
        .run_container(&pod, "app", "trap 'exit 7' TERM; sleep 1000 & wait")
        .await;
    latency(&mut p, &pod.uid, E::ContainerStarted, &failing).await;
    let hog = cd
        .create_container_from(&pod, "hog", support::containerd::memory_hog())
        .await;
    cd.start_container(&hog).await;
    cd.stop_container(&failing, 10).await;
    let (died, _) = latency(&mut p, &pod.uid, E::ContainerDied, &failing).await;
    assert_eq!(
        (died.exit_code, died.reason.as_deref()),
        (Some(7), Some("Error")),
        "{died:?}"
    );
    let (oom_died, _) = latency(&mut p, &pod.uid, E::ContainerDied, &hog).await;
    assert_eq!(oom_died.exit_code, Some(137), "{oom_died:?}");
    // Both exits came by containerd's event, shown ahead of the CRI state or found there already
    // (or, for the OOM kill, left to the CRI when its cgroup's count could not be read).
    let by_event = || {
        counter(&p.metrics, "plegd_exit_events_total{result=\"shown\"}")
            + counter(&p.metrics, "plegd_exit_events_total{result=\"runtime_first\"}")
            + counter(&p.metrics, "plegd_exit_events_total{result=\"reason_unread\"}")
    };
    wait_for("both exits taken from the exit event", Duration::from_secs(20), || {
        by_event() >= 2
    })
    .await;
    // containerd's events service is connected: the source itself on 1.x, the exit stream beside
    // the CRI events on 2.x (counted when its first event came).
    assert!(counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"containerd\"}") >= 1);
    // Settled by the CRI's own event (containerd's /tasks/delete, or the CRI's CONTAINER_STOPPED):
    // each exit was taken before its ContainerDied was sent, so it is held until the CRI shows it.
    support::wait_for(
        "both exits settled by the CRI state",
        Duration::from_secs(20),
        || async { !p.pleg.holds_exit(&failing).await && !p.pleg.holds_exit(&hog).await },
    )
    .await;
    eprintln!(
        "exits shown ahead of the CRI: {}, found in the CRI first: {}; the OOM kill's reason at once: {:?}",
        counter(&p.metrics, "plegd_exit_events_total{result=\"shown\"}"),
        counter(&p.metrics, "plegd_exit_events_total{result=\"runtime_first\"}"),
        oom_died.reason
    );
    let version = cd.version().await;
    let unread = counter(&p.metrics, "plegd_exit_events_total{result=\"reason_unread\"}");
    eprintln!("containerd {version:?}: exits whose OOM count could not be read: {unread}");
    // Taken from the event (its count read) or left to the CRI: OOMKilled either way from 2.3 on,
    // whose CRI reads the same count before it records the exit; on 1.7, whose CRI stores the
    // reason when the OOM event comes, an exit left to it may show Error until then (the CRI's
    // own change, which a kubelet would see too).
    if unread == 0 || version >= (2, 3) {
        assert_eq!(oom_died.reason.as_deref(), Some("OOMKilled"), "{oom_died:?}");
    }
    for field in ["exit_code", "finished_at", "reason", "state"] {
        assert_eq!(
            counter(
                &p.metrics,
                &format!("plegd_exit_corrections_total{{field=\"{field}\"}}")
            ),
            0,
            "{field}"
        );
    }
    // The status cache holds the CRI's values now.
    let status = p.pleg.cache().get(&pod.uid);
    let status = status.read().expect("the pod's status was read");
    for (id, code) in [(&failing, 7), (&hog, 137)] {
        let c = status.find_container(id).expect("the container's status");
        let (_, finished_at) = cd.container_times(id).await;
        assert_eq!((c.exit_code, c.finished_at), (code, Some(finished_at)), "{c:?}");
    }
    if unread == 0 || version >= (2, 3) {
        assert_eq!(
            status.find_container(&hog).map(|c| c.reason.as_str()),
            Some("OOMKilled")
        );
    }
    cd.cleanup(&pod).await;
}

/// CRI-O with its pod events off (`enable_pod_events = false`, CRI-O's default): its
/// GetContainerEvents ends as soon as it opens. plegd says the runtime has no usable events, relists
/// at --relist-period and reports every change from there (measured on CRI-O 1.34). A CRI-O of the
/// test's own, since the shared one has its events on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crio_without_pod_events_is_relisted() {
    let Some(_) = containerd().await else { return };
    if runtime_under_test() != "cri-o" {
        eprintln!(
            "\n!!!!!!!! NOT RUN ON {}: CRI-O's enable_pod_events = false !!!!!!!!\n",
            runtime_under_test()
        );
        return;
    }
    let instance = PrivateCrio::start("noev", false, 237).await;
    let cd = &instance.handle;
    let config = PlegConfig::new(
        Duration::from_millis(500),
        Some(Duration::from_secs(3600)),
        LONG_THRESHOLD,
    )
    .unwrap();
    let mut p = start_with(&cd.socket, TriggerMode::Auto, config).await;
    let unusable = || {
        p.metrics
            .encode()
            .contains("plegd_trigger_stream_state{source=\"cri\",state=\"unusable\"} 1")
    };
    wait_for("CRI-O's event stream found unusable", Duration::from_secs(20), unusable).await;
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_stream_connects_total{source=\"cri\"}"),
        0
    );
    let pod = cd.run_pod("noev", true).await;
    let ctr = cd.run_container(&pod, "app", "exit 3").await;
    let (died, _) = latency(&mut p, &pod.uid, E::ContainerDied, &ctr).await;
    assert_eq!(
        (died.exit_code, died.reason.as_deref()),
        (Some(3), Some("Error")),
        "{died:?}"
    );
    assert_eq!(
        counter(&p.metrics, "plegd_trigger_relists_total{kind=\"pod\"}"),
        0,
        "nothing came by trigger"
    );
    cd.cleanup(&pod).await;
}
