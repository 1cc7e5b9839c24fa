//! The observation API in process: filters, and a slow subscriber that lags without slowing the
//! publisher, and is told how many events it missed.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use plegd::metrics::Metrics;
use plegd::observe::api::events_client::EventsClient;
use plegd::observe::api::{WatchRequest, watch_response};
use plegd::observe::{self, EventHub};
use plegd::pleg::{PodLifecycleEvent, PodLifecycleEventType as E};

fn event(kind: E, ns: &str, pod: &str, n: usize) -> PodLifecycleEvent {
    PodLifecycleEvent {
        kind,
        pod_uid: format!("uid-{pod}"),
        container_id: Some(format!("c{n}")),
        namespace: Some(ns.into()),
        pod: Some(pod.into()),
        container: Some("app".into()),
        sandbox: false,
        exit_code: (kind == E::ContainerDied).then_some(1),
        reason: None,
        timestamp: SystemTime::now(),
    }
}

async fn client(path: &std::path::Path) -> EventsClient<tonic::transport::Channel> {
    let options = plegd::runtime::CriOptions::default();
    let backoff = plegd::backoff::ExponentialBackoff::constant(options.initial_backoff, options.max_backoff);
    EventsClient::new(plegd::runtime::unix_channel(
        path,
        options.connect_timeout,
        backoff,
        None,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_a_slow_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api").join("plegd.sock");
    let hub = EventHub::new(256);
    let metrics = Arc::new(Metrics::new());
    let _server = tokio::spawn(observe::serve(&path, hub.clone(), metrics.clone()).expect("serve"));

    let mut c = client(&path).await;
    let request = WatchRequest {
        namespace: "prod".into(),
        pod: String::new(),
        types: vec!["ContainerDied".into()],
    };
    let mut filtered = c.watch(request).await.expect("watch").into_inner();
    // A subscriber that does not read at all.
    let mut slow = c.watch(WatchRequest::default()).await.expect("watch").into_inner();
    while hub.subscribers() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    hub.publish(event(E::ContainerStarted, "prod", "web", 0));
    hub.publish(event(E::ContainerDied, "dev", "web", 1));
    hub.publish(event(E::ContainerDied, "prod", "web", 2));
    let got = filtered.message().await.unwrap().unwrap();
    let Some(watch_response::Item::Event(e)) = got.item else {
        panic!("{got:?}")
    };
    assert_eq!(
        (
            e.r#type.as_str(),
            e.namespace.as_str(),
            e.container_id.as_str(),
            e.exit_code
        ),
        ("ContainerDied", "prod", "c2", Some(1))
    );

    // Flood: publishing never waits on the subscriber that is not reading (a publish that waited
    // would never return; the bound is a liveness bound, far above the milliseconds this takes).
    let started = Instant::now();
    for n in 0..20_000 {
        hub.publish(event(E::ContainerStarted, "prod", "web", n));
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "publishing 20k events took {:?}",
        started.elapsed()
    );
    let mut lagged = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while lagged == 0 && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), slow.message()).await {
            Ok(Ok(Some(r))) => {
                if let Some(watch_response::Item::Lagged(l)) = r.item {
                    lagged = l.missed;
                }
            }
            other => panic!("stream ended: {other:?}"),
        }
    }
    assert!(lagged > 0, "the slow subscriber is told it missed events");
    assert!(metrics.observer_lagged.get() >= lagged);

    let bad = c
        .watch(WatchRequest {
            types: vec!["Exploded".into()],
            ..WatchRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}
