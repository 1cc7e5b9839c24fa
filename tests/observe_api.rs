//! The observation API in process: filters, and a slow subscriber that lags without slowing the
//! publisher, and is told how many events it missed.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use plegd::metrics::Metrics;
use plegd::observe;
use plegd::observe::api::events_service_client::EventsServiceClient;
use plegd::observe::api::{WatchRequest, watch_response};
use plegd::pleg::EventHub;
use plegd::pleg::{PodLifecycleEvent, PodLifecycleEventType as E};
use plegd::status::report::{StatusReport, StatusReports};

fn n(n: usize) -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(n).expect("one at least")
}

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
        message: (kind == E::ContainerDied).then(|| format!("boom {n}: \"disk\" full\n")),
        timestamp: SystemTime::now(),
    }
}

async fn client(path: &std::path::Path) -> EventsServiceClient<tonic::transport::Channel> {
    let options = plegd::runtime::CriConfig::default();
    let backoff = options.backoff.clone();
    EventsServiceClient::new(plegd::runtime::unix_channel(
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
    let hub = EventHub::new(n(256));
    let metrics = Arc::new(Metrics::new());
    let _server = tokio::spawn(
        observe::serve(&path, hub.clone(), StatusReports::default(), metrics.clone(), n(8)).expect("serve"),
    );

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
            e.exit_code,
            e.message.as_str()
        ),
        ("ContainerDied", "prod", "c2", Some(1), "boom 2: \"disk\" full\n")
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

fn report(namespace: &str, name: &str, rv: &str, api_phase: &str, phase: &str) -> StatusReport {
    let mut pod = plegd::apiserver::pod::ApiPod::default();
    pod.metadata.namespace = Some(namespace.into());
    pod.metadata.name = Some(name.into());
    pod.metadata.uid = Some(format!("uid-{name}"));
    pod.metadata.resource_version = Some(rv.into());
    pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some(api_phase.into()),
        ..Default::default()
    });
    let status = k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    };
    StatusReport::new(Arc::new(pod), status, SystemTime::now(), SystemTime::now())
}

/// `plegd status` against a served StatusService: each pod's latest report first, then new ones,
/// filtered, with what differs from the apiserver's copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plegd.sock");
    let reports = StatusReports::default();
    let metrics = Arc::new(Metrics::new());
    let _server =
        tokio::spawn(observe::serve(&path, EventHub::new(n(8)), reports.clone(), metrics, n(8)).expect("serve"));
    reports.put("uid-web", report("prod", "web", "7", "Running", "Running"));
    reports.put("uid-db", report("dev", "db", "3", "Running", "Running"));

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    /// Complete lines, sent as they are written.
    struct Lines(tokio::sync::mpsc::UnboundedSender<String>, String);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.1.push_str(&String::from_utf8_lossy(buf));
            while let Some(end) = self.1.find('\n') {
                let line: String = self.1.drain(..=end).collect();
                let _ = self.0.send(line);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let request = observe::api::StatusServiceWatchRequest {
        namespace: "prod".into(),
        pod: String::new(),
    };
    let socket = path.clone();
    let follow = tokio::spawn(async move {
        observe::follow_statuses(
            &socket,
            request,
            plegd::observe::print::OutputFormat::Json,
            Lines(tx, String::new()),
        )
        .await
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a report within 10 s")
            .expect("the follower ended");
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let first = next(&mut rx).await;
    assert_eq!(
        (first["pod"].as_str(), first["resourceVersion"].as_str()),
        (Some("web"), Some("7"))
    );
    assert_eq!(first["differences"], serde_json::json!([]));
    // A new report of the same pod differs from its apiserver copy; the other namespace's is filtered.
    reports.put("uid-db", report("dev", "db", "4", "Running", "Failed"));
    reports.put("uid-web", report("prod", "web", "8", "Running", "Succeeded"));
    let second = next(&mut rx).await;
    assert_eq!(second["resourceVersion"], "8");
    assert_eq!(second["status"]["phase"], "Succeeded");
    assert_eq!(
        second["differences"],
        serde_json::json!([{"path": "phase", "apiserver": "Running", "plegd": "Succeeded"}])
    );
    // A pod that goes is said to go (the other namespace's is filtered).
    reports.remove("uid-db");
    reports.remove("uid-web");
    let gone = next(&mut rx).await;
    assert_eq!(
        gone,
        serde_json::json!({"removed": {"namespace": "prod", "pod": "web", "podUID": "uid-web"}})
    );
    follow.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::new());
    let serve = |path: &std::path::Path| {
        observe::serve(
            path,
            EventHub::new(n(8)),
            StatusReports::default(),
            metrics.clone(),
            n(8),
        )
    };

    // A regular file where the socket would go: refused, and left as it was.
    let file = dir.path().join("data.sock");
    std::fs::write(&file, "precious").unwrap();
    let err = serve(&file).err().expect("a regular file is refused").to_string();
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    // A directory likewise.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(serve(&sub).is_err());
    assert!(sub.is_dir());

    // A socket some process still serves: refused, not taken over.
    let live = dir.path().join("live.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
    let err = serve(&live).err().expect("a live socket is refused").to_string();
    assert!(err.contains("another process"), "{err}");

    // A socket left by a process that is gone: replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let server = tokio::spawn(serve(&stale).expect("a stale socket is replaced"));
    let mut c = client(&stale).await;
    let stream = c.watch(WatchRequest::default()).await;
    assert!(stream.is_ok(), "{stream:?}");
    server.abort();
}
