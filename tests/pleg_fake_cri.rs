//! The relister driven step by step through the in-process fake CRI server, over a real unix
//! socket and the real CRI client. Time is a FakeClock: health is tested without sleeping.

use plegd_test_support as support;
use support::relister::Relister;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_cri::v1::ContainerState as Cri;
use plegd::metrics::Metrics;
use plegd::pleg::{PlegConfig, PlegHealthError, PodLifecycleEvent, PodLifecycleEventType as E};
use plegd::runtime::{CriConfig, CriRuntime, RuntimeError};
use plegd::util::clock::{Clock, FakeClock};
use support::fake_cri::{FakeCri, FakeServer};

/// The relister on the fake server, driven by hand on a fake clock (its fields are the
/// [`Relister`]'s).
struct Harness {
    server: FakeServer,
    relister: Relister<FakeClock>,
    clock: FakeClock,
}

impl std::ops::Deref for Harness {
    type Target = Relister<FakeClock>;

    fn deref(&self) -> &Self::Target {
        &self.relister
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.relister
    }
}

fn fast_options() -> CriConfig {
    CriConfig {
        call_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        backoff: plegd::util::backoff::ExponentialBackoff::try_new(
            Duration::from_millis(10),
            Duration::from_millis(50),
        )
        .unwrap(),
        ..CriConfig::default()
    }
}

impl Harness {
    async fn new() -> Self {
        Self::with_capacity(1000).await
    }

    async fn with_capacity(channel_capacity: usize) -> Self {
        Self::with(FakeServer::start().await, channel_capacity).await
    }

    /// A new relister (as after a restart of plegd) on `server`, the runtime as it is.
    async fn with_server(server: FakeServer) -> Self {
        Self::with(server, 1000).await
    }

    async fn with(server: FakeServer, channel_capacity: usize) -> Self {
        let clock = FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let config = PlegConfig::default()
            .with_channel_capacity(std::num::NonZeroUsize::new(channel_capacity).expect("a capacity of one at least"));
        let relister = Relister::connect(&server.path, &fast_options(), clock.clone(), config).await;
        Self {
            server,
            relister,
            clock,
        }
    }

    fn fake(&self) -> &FakeCri {
        &self.server.fake
    }

    /// Advance the clock one period, relist, and take every event it sent.
    async fn relist(&mut self) -> Vec<PodLifecycleEvent> {
        self.clock.advance(Duration::from_secs(1));
        self.pleg.relist().await.expect("relist");
        self.drain()
    }

    fn drain(&mut self) -> Vec<PodLifecycleEvent> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }

    fn cache(&self) -> &plegd::kubecontainer::cache::CacheReader {
        self.pleg.cache()
    }
}

fn kinds(events: &[PodLifecycleEvent]) -> Vec<(E, String)> {
    events
        .iter()
        .map(|e| (e.kind, e.container_id.clone().unwrap_or_default()))
        .collect()
}

fn ev(kind: E, id: &str) -> (E, String) {
    (kind, id.to_owned())
}

#[tokio::test]
async fn first_relist_then_no_change() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 2);
    let events = h.relist().await;
    assert_eq!(
        kinds(&events),
        [
            ev(E::ContainerStarted, "ctr-u1-0"),
            ev(E::ContainerStarted, "ctr-u1-1"),
            ev(E::ContainerStarted, "sb-u1")
        ]
    );
    assert_eq!(events[0].namespace.as_deref(), Some("default"));
    assert_eq!(events[0].pod.as_deref(), Some("web"));
    assert_eq!(events[0].container.as_deref(), Some("c0"));
    assert!(events[2].sandbox);
    // The refresh filled the cache: both containers and the pod IP from the ready sandbox.
    let cached = h.cache().get("u1");
    assert_eq!(cached.status.container_statuses.len(), 2);
    assert_eq!(cached.status.ips, ["10.9.0.1"]);
    assert!(h.cache().timestamp().is_some());

    let calls_before = h.fake().calls("ContainerStatus");
    assert!(h.relist().await.is_empty(), "no change, no events");
    assert_eq!(
        h.fake().calls("ContainerStatus"),
        calls_before,
        "an unchanged pod is not re-read"
    );
}

#[tokio::test]
async fn transitions_exit_code_and_removal() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 2);
    h.relist().await;

    h.fake().exit_container("ctr-u1-0", 3);
    let events = h.relist().await;
    assert_eq!(kinds(&events), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(events[0].exit_code, Some(3));
    assert_eq!(events[0].reason.as_deref(), Some("Error"));

    // An exited container that is removed: only ContainerRemoved.
    h.fake().remove_container("ctr-u1-0");
    assert_eq!(kinds(&h.relist().await), [ev(E::ContainerRemoved, "ctr-u1-0")]);

    // A running container that vanishes: ContainerDied then ContainerRemoved.
    h.fake().remove_container("ctr-u1-1");
    assert_eq!(
        kinds(&h.relist().await),
        [ev(E::ContainerDied, "ctr-u1-1"), ev(E::ContainerRemoved, "ctr-u1-1")]
    );
    assert!(h.cache().get("u1").status.container_statuses.is_empty());
}

#[tokio::test]
async fn sandbox_stop_keeps_the_pod_ip_then_pod_removal_drops_everything() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.relist().await;

    h.fake().exit_container("ctr-u1-0", 137);
    h.fake().set_sandbox_ready("sb-u1", false);
    let events = h.relist().await;
    assert_eq!(
        kinds(&events),
        [ev(E::ContainerDied, "ctr-u1-0"), ev(E::ContainerDied, "sb-u1")]
    );
    assert!(events[1].sandbox);
    // The stopped sandbox reports no IP; a dead pod keeps the one it had.
    assert_eq!(h.cache().get("u1").status.ips, ["10.9.0.1"]);

    h.fake().remove_pod("u1");
    let events = h.relist().await;
    assert_eq!(
        kinds(&events),
        [ev(E::ContainerRemoved, "ctr-u1-0"), ev(E::ContainerRemoved, "sb-u1")]
    );
    assert!(!h.cache().contains("u1"), "a gone pod leaves the cache");
    assert_eq!(h.pleg.record_count().await, 0, "and the records");
}

#[tokio::test]
async fn missing_pod_with_running_containers() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.fake().add_running_pod("u2", "db", 1);
    h.relist().await;
    h.fake().remove_pod("u2");
    let events = h.relist().await;
    assert_eq!(
        kinds(&events),
        [
            ev(E::ContainerDied, "ctr-u2-0"),
            ev(E::ContainerRemoved, "ctr-u2-0"),
            ev(E::ContainerDied, "sb-u2"),
            ev(E::ContainerRemoved, "sb-u2")
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| e.pod_uid == "u2" && e.pod.as_deref() == Some("db"))
    );
}

#[tokio::test]
async fn status_error_withholds_events_until_reinspection_succeeds() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.fake().add_running_pod("u2", "db", 1);
    h.relist().await;

    h.fake()
        .fail("ContainerStatus", tonic::Status::internal("disk on fire"));
    h.fake().exit_container("ctr-u1-0", 2);
    assert!(
        h.relist().await.is_empty(),
        "events withheld while the status cannot be read"
    );
    assert_eq!(h.pleg.reinspect_count().await, 1);
    let cached = h.cache().get("u1");
    assert!(
        cached.error.as_deref().unwrap_or("").contains("disk on fire"),
        "errors are cached: {cached:?}"
    );

    // Still failing: still withheld, still to re-inspect.
    assert!(h.relist().await.is_empty());
    assert_eq!(h.pleg.reinspect_count().await, 1);

    h.fake().heal("ContainerStatus");
    let events = h.relist().await;
    assert_eq!(kinds(&events), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(events[0].exit_code, Some(2));
    assert_eq!(h.pleg.reinspect_count().await, 0);
    assert!(h.cache().get("u1").error.is_none());
    assert!(
        h.relist().await.is_empty(),
        "the record advanced: nothing is sent twice"
    );
}

#[tokio::test]
async fn successful_reinspection_without_a_sendable_event_sends_pod_sync() {
    let mut h = Harness::new().await;
    // A pod with one container still in the created state: only ContainerChanged, never sent.
    h.fake()
        .add_container("u3", "no-sandbox", "ctr-u3", "app", Cri::ContainerCreated);
    h.fake().fail("ContainerStatus", tonic::Status::unavailable("busy"));
    assert!(h.relist().await.is_empty());
    assert_eq!(h.pleg.reinspect_count().await, 1);
    h.fake().heal("ContainerStatus");
    let events = h.relist().await;
    assert_eq!(kinds(&events), [ev(E::PodSync, "")]);
    assert_eq!(events[0].pod_uid, "u3");
    assert!(h.relist().await.is_empty());
}

#[tokio::test]
async fn list_error_changes_nothing() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.relist().await;
    let last = h.pleg.last_relist();
    h.fake()
        .fail("ListContainers", tonic::Status::unavailable("restarting"));
    h.fake().exit_container("ctr-u1-0", 1);
    h.clock.advance(Duration::from_secs(1));
    let err = h.pleg.relist().await.unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::Call {
                operation: "ListContainers",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(h.pleg.last_relist(), last, "a failed relist does not count as a relist");
    h.fake().heal("ListContainers");
    assert_eq!(kinds(&h.relist().await), [ev(E::ContainerDied, "ctr-u1-0")]);
}

#[tokio::test]
async fn full_channel_counts_discards_and_loses_nothing() {
    let mut h = Harness::with_capacity(2).await;
    h.fake().add_running_pod("u1", "web", 3);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.relist().await.unwrap();
    // Four events, room for two: two discards, two kept.
    assert_eq!(h.metrics.discard_events.get(), 2);
    assert_eq!(h.pleg.undelivered_count().await, 2);

    // The channel is still full at the next relist: kept again, counted again.
    h.fake().exit_container("ctr-u1-0", 0);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.relist().await.unwrap();
    assert_eq!(h.pleg.undelivered_count().await, 3);

    let mut all = h.drain();
    all.extend(h.relist().await);
    all.extend(h.relist().await);
    assert_eq!(
        kinds(&all),
        [
            ev(E::ContainerStarted, "ctr-u1-0"),
            ev(E::ContainerStarted, "ctr-u1-1"),
            ev(E::ContainerStarted, "ctr-u1-2"),
            ev(E::ContainerStarted, "sb-u1"),
            ev(E::ContainerDied, "ctr-u1-0"),
        ],
        "every event arrives once, in order"
    );
    assert_eq!(all[4].exit_code, Some(0));
    assert_eq!(all[4].reason.as_deref(), Some("Completed"));
    assert_eq!(h.pleg.undelivered_count().await, 0);
    assert!(h.relist().await.is_empty());
}

#[tokio::test]
async fn overflowing_undelivered_queue_folds_into_current_state() {
    let mut h = Harness::with_capacity(5).await;
    h.fake().add_running_pod("u1", "big", 100);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.relist().await.unwrap();
    assert_eq!(h.pleg.undelivered_count().await, 96, "101 events, room for 5");
    // Every container exits while the consumer is stalled: 196 undelivered would exceed the cap,
    // so the queue becomes the pod's current state (100 died, sandbox started) and a PodSync.
    for i in 0..100 {
        h.fake().exit_container(&format!("ctr-u1-{i}"), 1);
    }
    h.clock.advance(Duration::from_secs(1));
    h.pleg.relist().await.unwrap();
    assert_eq!(h.pleg.undelivered_count().await, 102);

    let mut all = h.drain();
    for _ in 0..100 {
        if h.pleg.undelivered_count().await == 0 {
            break;
        }
        all.extend(h.relist().await);
    }
    assert_eq!(h.pleg.undelivered_count().await, 0);
    for i in 0..100 {
        let id = format!("ctr-u1-{i}");
        let last = all
            .iter()
            .rev()
            .find(|e| e.container_id.as_deref() == Some(&id))
            .expect("an event per container");
        assert_eq!(last.kind, E::ContainerDied, "{id}: the final state is never lost");
        assert_eq!(last.exit_code, Some(1));
    }
    assert_eq!(all.last().map(|e| e.kind), Some(E::PodSync));
}

#[tokio::test]
async fn health_follows_the_last_successful_relist() {
    let mut h = Harness::new().await;
    assert_eq!(h.pleg.healthy(), Err(PlegHealthError::NeverRelisted));
    h.relist().await;
    assert_eq!(h.pleg.healthy(), Ok(()));
    h.clock.advance(Duration::from_secs(179));
    assert_eq!(h.pleg.healthy(), Ok(()), "179 s is within the 3 m threshold");

    h.fake()
        .fail("ListPodSandbox", tonic::Status::deadline_exceeded("hung"));
    h.clock.advance(Duration::from_secs(2));
    assert!(h.pleg.relist().await.is_err());
    let err = h.pleg.healthy().unwrap_err();
    assert!(matches!(err, PlegHealthError::Stale { .. }), "{err}");
    assert!(err.to_string().contains("threshold is 180s"), "{err}");

    h.fake().heal("ListPodSandbox");
    h.relist().await;
    assert_eq!(h.pleg.healthy(), Ok(()));
    assert!(h.metrics.encode().contains("plegd_pleg_last_seen_seconds"));
}

#[tokio::test]
async fn bad_runtime_data_is_counted_and_skipped() {
    use k8s_cri::v1 as cri;
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    {
        let mut st = h.fake().state();
        st.extra_containers.push(cri::Container {
            id: "stray".into(),
            state: 1,
            ..Default::default()
        });
        st.extra_containers.push(cri::Container {
            id: "weird".into(),
            state: 77,
            labels: [(plegd::kubecontainer::LABEL_POD_UID.to_owned(), "u1".to_owned())].into(),
            ..Default::default()
        });
        let dup = st.sandboxes["sb-u1"].item.clone();
        st.extra_sandboxes.push(dup);
        st.extra_sandboxes.push(cri::PodSandbox {
            id: "anon".into(),
            ..Default::default()
        });
        st.extra_containers.push(cri::Container {
            id: String::new(),
            ..Default::default()
        });
    }
    let events = h.relist().await;
    // The good pod is reported; the weird container exists in the unknown state (ContainerChanged,
    // not sent); the rest is skipped.
    assert_eq!(
        kinds(&events),
        [ev(E::ContainerStarted, "ctr-u1-0"), ev(E::ContainerStarted, "sb-u1")]
    );
    let text = h.metrics.encode();
    for kind in [
        "missing_pod_uid",
        "unknown_state",
        "duplicate_id",
        "missing_sandbox_metadata",
        "empty_id",
    ] {
        assert!(
            text.contains(&format!("plegd_runtime_bad_data_total{{kind=\"{kind}\"}} 1")),
            "{kind}: {text}"
        );
    }
    // And it keeps working: a second relist counts again and emits nothing new.
    assert!(h.relist().await.is_empty());
    assert!(text.contains("plegd_runtime_bad_data_total"));
}

/// One string that is not UTF-8 in a status answer costs that string, not the pod: the exit is
/// reported with its code at once, the runtime's reason is kept with U+FFFD where its bad bytes
/// were (what the apiserver would store), an IP that is not one is left out, each is counted,
/// and nothing is re-inspected relist after relist. Decoded with `string` fields the same answer
/// failed every read of the pod: its events withheld and FailedSync for as long as it lasted.
#[tokio::test]
async fn a_status_string_that_is_not_utf8_costs_that_string_not_the_pod() {
    use support::fake_cri::NOT_UTF8;
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.fake().add_running_pod("u2", "db", 1);
    h.relist().await;

    h.fake().exit_container("ctr-u1-0", 2);
    h.fake().state().containers.get_mut("ctr-u1-0").unwrap().reason = format!("Error {NOT_UTF8}");
    h.fake().state().sandboxes.get_mut("sb-u2").unwrap().ip = NOT_UTF8.to_owned();
    h.fake().exit_container("ctr-u2-0", 0);
    let events = h.relist().await;
    let mut got = kinds(&events);
    got.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        got,
        [ev(E::ContainerDied, "ctr-u1-0"), ev(E::ContainerDied, "ctr-u2-0")]
    );
    assert_eq!(h.pleg.reinspect_count().await, 0, "nothing to re-inspect");

    let u1 = h.cache().get("u1");
    assert!(u1.error.is_none(), "{u1:?}");
    let status = &u1.status.container_statuses[0];
    assert_eq!(status.exit_code, 2);
    assert_eq!(status.reason, format!("Error {}", "\u{fffd}".repeat(NOT_UTF8.len())));
    let u2 = h.cache().get("u2");
    assert!(u2.error.is_none(), "{u2:?}");
    assert!(
        u2.status.ips.is_empty(),
        "an address that is not one is not written: {u2:?}"
    );
    assert_eq!(u2.status.container_statuses[0].reason, "Completed");

    let text = h.metrics.encode();
    assert!(
        text.contains("plegd_runtime_bad_data_total{kind=\"not_utf8\"} 2"),
        "{text}"
    );
    assert!(h.relist().await.is_empty(), "reported once, not again and again");
}

/// `plegd_container_exits_total` counts the exits plegd sees happen, once each, with the reason
/// the status gives: not the exits the first relist finds already done (before a restart, the
/// plegd of then counted them), not again at later relists, and ContainerStatusUnknown for a
/// running container that vanished.
#[tokio::test]
async fn exits_are_counted_once_as_they_happen() {
    let exits = |h: &Harness, container: &str, reason: &str| {
        let name = format!(
            "plegd_container_exits_total{{namespace=\"default\",pod=\"web\",container=\"{container}\",reason=\"{reason}\"}}"
        );
        h.metrics.sample(&name).unwrap_or(0.0)
    };
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 3);
    h.fake().exit_container("ctr-u1-0", 0);
    h.relist().await;
    assert_eq!(exits(&h, "c0", "Completed"), 0.0, "exited before plegd looked");

    h.fake().exit_container("ctr-u1-1", 2);
    h.relist().await;
    h.relist().await;
    assert_eq!(exits(&h, "c1", "Error"), 1.0, "{}", h.metrics.encode());
    {
        let mut st = h.fake().state();
        let c = st.containers.get_mut("ctr-u1-2").unwrap();
        c.item.state = k8s_cri::v1::ContainerState::ContainerExited as i32;
        c.exit_code = 137;
        c.reason = "OOMKilled".into();
    }
    h.relist().await;
    assert_eq!(exits(&h, "c2", "OOMKilled"), 1.0);

    // A restarted plegd (a new relister, the same runtime) counts none of these again.
    let mut again = Harness::with_server(h.server).await;
    again.relist().await;
    again.relist().await;
    for (container, reason) in [("c0", "Completed"), ("c1", "Error"), ("c2", "OOMKilled")] {
        assert_eq!(exits(&again, container, reason), 0.0, "{container}");
    }
    // A running container that vanishes without an exit.
    again
        .fake()
        .add_container("u1", "sb-u1", "ctr-u1-3", "c3", Cri::ContainerRunning);
    again.relist().await;
    again.fake().remove_container("ctr-u1-3");
    again.relist().await;
    assert_eq!(
        exits(&again, "c3", "ContainerStatusUnknown"),
        1.0,
        "{}",
        again.metrics.encode()
    );
}

/// `plegd_container_exits_total` holds a pod's series while the pod is on the node, and for a while
/// after it left (so that a scrape sees its last exits), then drops them, as kube-state-metrics
/// drops a deleted pod's series: 120 short-lived pods with unique names, each with one exit, leave
/// no series behind. A series another pod of the same name still holds stays.
#[tokio::test]
async fn exit_series_leave_with_their_pods() {
    let series = |h: &Harness| {
        h.metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("plegd_container_exits_total{"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut h = Harness::new().await;
    h.relist().await;
    for i in 0..120 {
        let uid = format!("job-uid-{i}");
        h.fake().add_running_pod(&uid, &format!("job-{i}"), 1);
        h.relist().await;
        h.fake().exit_container(&format!("ctr-{uid}-0"), 0);
        h.relist().await;
        let counted = format!(
            "plegd_container_exits_total{{namespace=\"default\",pod=\"job-{i}\",container=\"c0\",reason=\"Completed\"}}"
        );
        assert_eq!(h.metrics.sample(&counted), Some(1.0), "job-{i}");
        h.fake().remove_pod(&uid);
        h.relist().await;
    }
    // A scrape can still see the last pods' exits for a while after they left...
    assert!(!series(&h).is_empty());
    // ... and then none of them is kept.
    h.clock.advance(plegd::metrics::EXIT_SERIES_LINGER);
    h.relist().await;
    assert_eq!(series(&h), Vec::<String>::new());

    // Two pods of one name, one after the other (a StatefulSet's pod recreated): the series stays
    // while either is on the node.
    h.fake().add_running_pod("web-old", "web", 1);
    h.fake().add_running_pod("web-new", "web", 1);
    h.relist().await;
    h.fake().exit_container("ctr-web-old-0", 1);
    h.fake().exit_container("ctr-web-new-0", 1);
    h.relist().await;
    let web = "plegd_container_exits_total{namespace=\"default\",pod=\"web\",container=\"c0\",reason=\"Error\"}";
    assert_eq!(h.metrics.sample(web), Some(2.0));
    h.fake().remove_pod("web-old");
    h.relist().await;
    h.clock.advance(plegd::metrics::EXIT_SERIES_LINGER);
    h.relist().await;
    assert_eq!(h.metrics.sample(web), Some(2.0), "web-new is still there");
    h.fake().remove_pod("web-new");
    h.relist().await;
    h.clock.advance(plegd::metrics::EXIT_SERIES_LINGER);
    h.relist().await;
    assert_eq!(series(&h), Vec::<String>::new());
}

/// `plegd_trigger_missed_changes_total`: a periodic relist that finds a change while the event
/// stream is connected counts it for the stream's source (the stream did not announce it); with
/// the stream down, the periodic relist is the way changes are found, and nothing is counted.
#[tokio::test]
async fn changes_a_connected_stream_did_not_announce_are_counted() {
    let missed = |h: &Harness| {
        h.metrics
            .sample("plegd_trigger_missed_changes_total{source=\"cri\"}")
            .unwrap_or(0.0)
    };
    let mut h = Harness::new().await;
    h.metrics.initialize_trigger_source("cri");
    h.fake().add_running_pod("u1", "web", 2);
    h.relist().await;
    let health = h.pleg.trigger_health();
    health.set_source("cri");

    // Stream down: the periodic relist finds the exit, as it should.
    h.fake().exit_container("ctr-u1-0", 1);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.periodic_relist().await.unwrap();
    assert_eq!(kinds(&h.drain()), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(missed(&h), 0.0);

    // Stream connected: the exit it did not announce is counted, once.
    health.set(true);
    h.fake().exit_container("ctr-u1-1", 1);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.periodic_relist().await.unwrap();
    assert_eq!(kinds(&h.drain()), [ev(E::ContainerDied, "ctr-u1-1")]);
    assert_eq!(missed(&h), 1.0);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.periodic_relist().await.unwrap();
    assert_eq!(missed(&h), 1.0, "nothing new");
    // A change a triggered relist found first is not missed.
    h.fake().remove_container("ctr-u1-1");
    h.pleg.relist_pod("u1").await.unwrap();
    h.clock.advance(Duration::from_secs(1));
    h.pleg.periodic_relist().await.unwrap();
    assert_eq!(missed(&h), 1.0);
}

#[tokio::test]
async fn runtime_restart_is_survived_and_nothing_is_lost() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.relist().await;

    h.server.stop().await;
    h.clock.advance(Duration::from_secs(1));
    assert!(h.pleg.relist().await.is_err(), "relist fails while the runtime is away");
    // The container dies during the outage.
    h.fake().exit_container("ctr-u1-0", 9);
    h.server.restart().await;

    let mut events = Vec::new();
    for _ in 0..100 {
        h.clock.advance(Duration::from_secs(1));
        if h.pleg.relist().await.is_ok() {
            events = h.drain();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(kinds(&events), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(events[0].exit_code, Some(9));
    assert_eq!(h.pleg.healthy(), Ok(()));
}

#[tokio::test]
async fn single_pod_relist_touches_only_that_pod() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.fake().add_running_pod("u2", "db", 1);
    h.relist().await;
    let global = h.pleg.last_relist();

    h.fake().exit_container("ctr-u1-0", 1);
    h.fake().exit_container("ctr-u2-0", 1);
    h.clock.advance(Duration::from_millis(10));
    h.pleg.relist_pod("u1").await.unwrap();
    assert_eq!(kinds(&h.drain()), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(
        h.pleg.last_relist(),
        global,
        "a single-pod relist is not a global relist"
    );

    // The global relist finds u2's change and does not repeat u1's.
    assert_eq!(kinds(&h.relist().await), [ev(E::ContainerDied, "ctr-u2-0")]);

    // A pod that appeared and one that vanished, relisted by uid.
    h.fake().add_running_pod("u9", "new", 1);
    h.pleg.relist_pod("u9").await.unwrap();
    assert_eq!(
        kinds(&h.drain()),
        [ev(E::ContainerStarted, "ctr-u9-0"), ev(E::ContainerStarted, "sb-u9")]
    );
    h.fake().remove_pod("u9");
    h.pleg.relist_pod("u9").await.unwrap();
    assert_eq!(
        kinds(&h.drain()),
        [
            ev(E::ContainerDied, "ctr-u9-0"),
            ev(E::ContainerRemoved, "ctr-u9-0"),
            ev(E::ContainerDied, "sb-u9"),
            ev(E::ContainerRemoved, "sb-u9")
        ]
    );
    h.pleg.relist_pod("unknown-uid").await.unwrap();
    assert!(h.drain().is_empty());
    assert!(h.relist().await.is_empty());
}

#[tokio::test]
async fn start_up_check_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::new());
    let missing = dir.path().join("nope.sock");
    let err = CriRuntime::connect(&missing, &fast_options(), metrics.clone())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("does not exist"), "{err}");

    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let err = CriRuntime::connect(&file, &fast_options(), metrics.clone())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("is not a unix socket"), "{err}");

    let server = FakeServer::start().await;
    server.fake.state().no_v1 = true;
    let err = CriRuntime::connect(&server.path, &fast_options(), metrics.clone())
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("does not serve the CRI v1 RuntimeService"),
        "{err}"
    );

    server.fake.state().no_v1 = false;
    let (_, version) = CriRuntime::connect(&server.path, &fast_options(), metrics)
        .await
        .unwrap();
    assert_eq!(version.runtime_name, "fake");
    assert_eq!(version.runtime_api_version, "v1");
}

#[tokio::test]
async fn hung_runtime_times_out() {
    let server = FakeServer::start().await;
    let options = CriConfig {
        call_timeout: Duration::from_millis(200),
        ..fast_options()
    };
    let relister = Relister::connect(
        &server.path,
        &options,
        FakeClock::new(SystemTime::UNIX_EPOCH),
        PlegConfig::default(),
    )
    .await;
    let (pleg, metrics) = (&relister.pleg, &relister.metrics);
    server.fake.delay("ListPodSandbox", Duration::from_secs(30));
    let started = std::time::Instant::now();
    let err = pleg.relist().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call timeout bounds a hung runtime"
    );
    assert!(
        matches!(
            err,
            RuntimeError::Call {
                operation: "ListPodSandbox",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        metrics
            .encode()
            .contains("plegd_runtime_errors_total{operation=\"ListPodSandbox\"} 1")
    );
}

#[tokio::test]
async fn hostile_sizes_and_times_are_survived() {
    use k8s_cri::v1 as cri;
    let mut h = Harness::new().await;
    let long = "x".repeat(10_000);
    h.fake()
        .add_sandbox("u-long", &long, &long, "sb-long", true, "10.9.0.7");
    h.fake().add_container(
        "u-long",
        "sb-long",
        "ctr-long",
        &long,
        cri::ContainerState::ContainerRunning,
    );
    // A container whose sandbox the runtime does not list.
    h.fake().add_container(
        "u-orphan",
        "sb-missing",
        "ctr-orphan",
        "app",
        cri::ContainerState::ContainerExited,
    );
    {
        let mut st = h.fake().state();
        let c = st.containers.get_mut("ctr-long").unwrap();
        c.started_at = i64::MAX; // year 2262
        c.finished_at = 0;
        let orphan = st.containers.get_mut("ctr-orphan").unwrap();
        orphan.started_at = 0;
        orphan.exit_code = 1;
    }
    let events = h.relist().await;
    assert!(
        events
            .iter()
            .any(|e| e.kind == E::ContainerStarted && e.container.as_deref() == Some(long.as_str()))
    );
    let orphan: Vec<_> = events.iter().filter(|e| e.pod_uid == "u-orphan").collect();
    assert_eq!(orphan.len(), 1);
    assert_eq!((orphan[0].kind, orphan[0].exit_code), (E::ContainerDied, Some(1)));
    let long_status = h.cache().get("u-long").status.clone();
    assert_eq!(long_status.container_statuses[0].finished_at, None, "zero is unset");
    assert!(
        long_status.container_statuses[0].started_at.is_some(),
        "a far-future time is kept as it is"
    );
    assert!(h.relist().await.is_empty(), "and nothing repeats");
}

/// A wall clock stepped back an hour (NTP at boot): the relister's stamps never go back, so a
/// status read after the step is newer than everything read before it and a wait for newer data
/// is served at once; and health, which counts on the monotonic clock too, still sees a relister
/// that stopped relisting.
#[tokio::test]
async fn a_clock_stepped_back_stalls_nothing() {
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.relist().await;
    let before = h.cache().get("u1").modified;

    h.clock.set(h.clock.now() - Duration::from_secs(3600));
    h.fake().exit_container("ctr-u1-0", 1);
    h.pleg.relist().await.expect("relist");
    let seen = h.drain();
    assert!(seen.iter().any(|e| e.kind == E::ContainerDied), "{seen:?}");
    let after = h.cache().get("u1").modified;
    assert!(after > before, "the new status is stamped after the old one");
    let served = tokio::time::timeout(Duration::from_millis(100), h.cache().get_newer_than("u1", before)).await;
    assert!(
        served.is_ok(),
        "a wait for a status newer than the last one is served at once"
    );
    assert_eq!(h.pleg.healthy(), Ok(()));

    // No relist for longer than the threshold (here 50 ms of real time), with the wall clock an
    // hour behind the last relist: unhealthy all the same.
    let config = PlegConfig::new(Duration::from_millis(10), None, Duration::from_millis(50)).unwrap();
    let server = FakeServer::start().await;
    let clock = FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let relister = Relister::connect(&server.path, &fast_options(), clock.clone(), config).await;
    let pleg = &relister.pleg;
    pleg.relist().await.unwrap();
    clock.set(clock.now() - Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(pleg.healthy().is_err(), "a stalled relister is not healthy");
}

/// A sandbox without the pod-uid label (made by `crictl runp`, or by another tool): the complete
/// relist groups it by its metadata uid, and so does a relist of its pod alone — it does not look
/// gone to one (ContainerDied, ContainerRemoved) and come back with the next.
#[tokio::test]
async fn a_sandbox_without_the_uid_label_is_the_same_pod_to_every_relist() {
    let mut h = Harness::new().await;
    h.fake()
        .add_sandbox("u9", "runp", "default", "sb-runp", true, "10.9.0.9");
    h.fake()
        .state()
        .sandboxes
        .get_mut("sb-runp")
        .unwrap()
        .item
        .labels
        .clear();
    let first = h.relist().await;
    assert_eq!(kinds(&first), [ev(E::ContainerStarted, "sb-runp")]);

    assert!(h.pleg.relist_pod("u9").await.is_ok());
    assert_eq!(kinds(&h.drain()), [], "nothing changed");
    assert_eq!(kinds(&h.relist().await), [], "and the next complete relist agrees");

    // Really gone: both say so, once.
    h.fake().remove_sandbox("sb-runp");
    h.pleg.relist_pod("u9").await.unwrap();
    let gone = h.drain();
    assert!(gone.iter().any(|e| e.kind == E::ContainerRemoved), "{gone:?}");
    assert_eq!(kinds(&h.relist().await), []);
}

/// At shutdown the relister, told to stop, sends the events it kept back for a full channel
/// (waiting for the reader, who still reads): nothing computed is left behind.
#[tokio::test]
async fn stopping_sends_what_a_full_channel_kept_back() {
    let mut h = Harness::with_capacity(1).await;
    h.fake().add_running_pod("u1", "web", 3);
    h.clock.advance(Duration::from_secs(1));
    h.pleg.relist().await.expect("relist");
    assert!(h.pleg.undelivered_count().await > 0, "the channel of 1 kept some back");
    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    let relister = tokio::spawn(h.pleg.clone().run_until(stop));
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(5), h.events.recv()).await;
        seen.push(event.expect("sent before the relister ends").expect("an event"));
    }
    relister.await.unwrap();
    assert_eq!(h.pleg.undelivered_count().await, 0);
    let started: Vec<_> = seen.iter().filter(|e| e.kind == E::ContainerStarted).collect();
    assert_eq!(started.len(), 4, "the sandbox and three containers: {seen:?}");
}

/// An exit taken from containerd's exit event, which the CRI state then shows otherwise — the
/// fault of a containerd that recovered the exit after a restart (255, `Unknown`), which the real
/// one makes only now and then on a loaded machine (`triggers::containerd_killed_and_restarted`),
/// so the fake CRI makes it. The exit is shown at once from the event
/// while the CRI still says the container runs (a relist in between keeps it exited, with no
/// ContainerStarted); once the CRI shows its own exit, its values are what the cache holds, each
/// field that differed is counted, and a PodSync asks for the pod's status to be written again.
#[tokio::test]
async fn an_exit_the_cri_shows_otherwise_is_corrected_and_counted() {
    use plegd::pleg::ExitTaken;
    use plegd::runtime::exits::ExitFact;
    let mut h = Harness::new().await;
    h.fake().add_running_pod("u1", "web", 1);
    h.relist().await;
    let finished_at = 1_700_000_123_000_000_000;
    let fact = ExitFact::new("ctr-u1-0".into(), 3, Some((1_700_000_123, 0)), false).expect("a fact");
    let taken = h.pleg.containers_exited(vec![fact]).await;
    assert_eq!(taken, [("ctr-u1-0".to_owned(), ExitTaken::Shown)]);
    let events = h.drain();
    assert_eq!(kinds(&events), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(
        (events[0].exit_code, events[0].reason.as_deref()),
        (Some(3), Some("Error"))
    );
    let cached = h.cache().get("u1");
    let c = cached.status.find_container("ctr-u1-0").expect("its status");
    assert_eq!(
        (c.state, c.exit_code, c.finished_at),
        (
            plegd::kubecontainer::RuntimeContainerState::Exited,
            3,
            Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(finished_at))
        )
    );
    assert_eq!(h.metrics.sample("plegd_exits_held"), Some(1.0));
    // The CRI still lags: the relist keeps the exit, and says nothing.
    assert_eq!(kinds(&h.relist().await), []);
    // The CRI shows the exit otherwise: its values win, and each field that differs is counted.
    h.fake().exit_container("ctr-u1-0", 255);
    h.fake().state().containers.get_mut("ctr-u1-0").unwrap().reason = "Unknown".into();
    let events = h.relist().await;
    assert_eq!(kinds(&events), [(E::PodSync, String::new())]);
    let cached = h.cache().get("u1");
    let c = cached.status.find_container("ctr-u1-0").expect("its status");
    assert_eq!((c.exit_code, c.reason.as_str()), (255, "Unknown"));
    for (field, n) in [
        ("exit_code", 1.0),
        ("finished_at", 1.0),
        ("reason", 1.0),
        ("state", 0.0),
    ] {
        let name = format!("plegd_exit_corrections_total{{field=\"{field}\"}}");
        assert_eq!(h.metrics.sample(&name), Some(n), "{field}");
    }
    assert_eq!(h.metrics.sample("plegd_exits_held"), Some(0.0));
    assert_eq!(h.metrics.sample("plegd_exit_events_total{result=\"shown\"}"), Some(1.0));
    // An exit of a container the records do not hold running is left to the CRI.
    let again = ExitFact::new("ctr-u1-0".into(), 3, Some((1, 0)), false).expect("a fact");
    let unknown = ExitFact::new("nope".into(), 3, Some((1, 0)), false).expect("a fact");
    assert_eq!(
        h.pleg.containers_exited(vec![again, unknown]).await,
        [
            ("ctr-u1-0".to_owned(), ExitTaken::Recorded),
            ("nope".to_owned(), ExitTaken::NotRecorded)
        ]
    );
}

/// An exit taken from containerd's exit event while nothing else of its pod changed is written
/// into the pod's last status read: the runtime is not asked again (in a burst of exits each read
/// waits on a runtime busy with the burst), the termination message is read from the file the last
/// read named, as a status read reads it, and the CRI's own exit then confirms it with no
/// correction. A pod whose last read failed is read again before its exit is shown, with the
/// change the failed read missed.
#[tokio::test]
async fn an_exit_is_written_into_the_pods_last_status_read_without_asking_the_runtime() {
    use plegd::kubecontainer::RuntimeContainerState as S;
    use plegd::pleg::ExitTaken;
    use plegd::runtime::exits::ExitFact;
    use plegd::runtime::termination::HostFiles;
    let node = tempfile::tempdir().unwrap();
    let file = node.path().join("kubelet/pods/u1/containers/c0/1a2b");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"out of memory, bye").unwrap();
    let server = FakeServer::start().await;
    let options = CriConfig {
        host_files: HostFiles::new(&node.path().join("kubelet"), &node.path().join("logs")),
        ..fast_options()
    };
    let clock = FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let relister = Relister::connect(&server.path, &options, clock.clone(), PlegConfig::default()).await;
    let mut h = Harness {
        server,
        relister,
        clock,
    };
    h.fake().add_running_pod("u1", "web", 2);
    h.fake().set_termination_message_file("ctr-u1-0", &file);
    h.fake().add_running_pod("u2", "db", 2);
    assert_eq!(h.relist().await.len(), 6, "two sandboxes and four containers started");
    let reads = |h: &Harness| (h.fake().calls("PodSandboxStatus"), h.fake().calls("ContainerStatus"));
    let before = reads(&h);

    let fact = ExitFact::new("ctr-u1-0".into(), 137, Some((1_700_000_123, 5)), true).expect("a fact");
    assert_eq!(
        h.pleg.containers_exited(vec![fact]).await,
        [("ctr-u1-0".to_owned(), ExitTaken::Shown)]
    );
    assert_eq!(reads(&h), before, "no status read");
    let events = h.drain();
    assert_eq!(kinds(&events), [ev(E::ContainerDied, "ctr-u1-0")]);
    assert_eq!(
        (
            events[0].exit_code,
            events[0].reason.as_deref(),
            events[0].message.as_deref()
        ),
        (Some(137), Some("OOMKilled"), Some("out of memory, bye"))
    );
    let cached = h.cache().get("u1");
    let exited = cached.status.find_container("ctr-u1-0").expect("its status");
    assert_eq!(
        (
            exited.state,
            exited.exit_code,
            exited.finished_at,
            exited.termination_source.is_none()
        ),
        (
            S::Exited,
            137,
            Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_123_000_000_005)),
            true
        )
    );
    let other = cached.status.find_container("ctr-u1-1").expect("the other's status");
    assert_eq!(other.state, S::Running, "the rest as the last read found it");
    assert_eq!(cached.status.ips, ["10.9.0.1"]);

    // The CRI shows the same exit: confirmed, nothing corrected, nothing held.
    h.fake().exit_container("ctr-u1-0", 137);
    {
        let mut st = h.fake().state();
        let c = st.containers.get_mut("ctr-u1-0").unwrap();
        c.reason = "OOMKilled".into();
        c.finished_at = 1_700_000_123_000_000_005;
    }
    assert_eq!(kinds(&h.relist().await), []);
    assert_eq!(h.metrics.sample("plegd_exits_held"), Some(0.0));
    assert_eq!(
        h.metrics.sample("plegd_exit_corrections_total{field=\"reason\"}"),
        Some(0.0)
    );

    // u2's last read failed (a change it was to read): its exit waits for a read, which shows both.
    h.fake().exit_container("ctr-u2-1", 1);
    h.fake().fail("ContainerStatus", tonic::Status::unavailable("busy"));
    assert_eq!(kinds(&h.relist().await), [], "withheld until the pod is read");
    h.fake().heal("ContainerStatus");
    let before = reads(&h);
    let fact = ExitFact::new("ctr-u2-0".into(), 2, Some((1_700_000_124, 0)), false).expect("a fact");
    assert_eq!(
        h.pleg.containers_exited(vec![fact]).await,
        [("ctr-u2-0".to_owned(), ExitTaken::Shown)]
    );
    let after = reads(&h);
    assert!(after.0 > before.0 && after.1 > before.1, "read: {before:?} → {after:?}");
    let mut died: Vec<String> = kinds(&h.drain())
        .into_iter()
        .filter(|(kind, _)| *kind == E::ContainerDied)
        .map(|(_, id)| id)
        .collect();
    died.sort();
    assert_eq!(died, ["ctr-u2-0", "ctr-u2-1"]);
}
