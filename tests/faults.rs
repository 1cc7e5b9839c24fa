//! Faults that must lose nothing: the event channel overflowing far past its capacity, and plegd
//! itself killed (SIGKILL) and restarted in the middle of churn. Fake CRI server + test apiserver.

mod support;

use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use plegd::metrics::Metrics;
use plegd::pleg::PlegConfig;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use support::fake_apiserver::TestApiserver;
use support::fake_cri::FakeServer;
use support::wait_until;

fn bind_pods(cri: &FakeServer, api: &TestApiserver, node: &str, pods: usize, containers: usize) {
    for i in 0..pods {
        let uid = format!("{node}-{i:03}");
        cri.fake.add_running_pod(&uid, &format!("pod-{i}"), containers);
        api.create_bound_pod(&format!("pod-{i}"), &uid, node, containers, "Never");
    }
}

fn phase(api: &TestApiserver, i: usize) -> String {
    api.pod("default", &format!("pod-{i}"))
        .map(|p| p["status"]["phase"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

fn exit_code(api: &TestApiserver, i: usize) -> Option<i64> {
    // The first container's.
    api.pod("default", &format!("pod-{i}"))?["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
        .as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_overflow_at_ten_times_capacity_loses_no_final_state() {
    let cri = FakeServer::start().await;
    let api = TestApiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A pod's changes go out in one burst after its status read: 100 containers a pod.
    let (pods, containers) = (10, 100);
    bind_pods(&cri, &api, "overflow", pods, containers);
    let metrics = Arc::new(Metrics::new());
    // Room for 10 events; each pod's burst is 10× that.
    let mut options = support::daemon::options(&cri.path, api.kubeconfig(dir.path()), "overflow", StatusMode::Full);
    options.pleg = PlegConfig {
        relist_period: Duration::from_millis(200),
        channel_capacity: 10,
        ..PlegConfig::default()
    };
    options.triggers = TriggerMode::None;
    let daemon = support::daemon::spawn(options, metrics.clone());
    wait_until("every pod Running", Duration::from_secs(60), || {
        (0..pods).all(|i| phase(&api, i) == "Running")
    })
    .await;
    // Every container exits at once, each with its own code: 100 ContainerDied per pod at once.
    for i in 0..pods {
        for c in 0..containers {
            cri.fake
                .exit_container(&format!("ctr-overflow-{i:03}-{c}"), (c % 50) as i32 + 1);
        }
    }
    wait_until("every pod Failed", Duration::from_secs(60), || {
        (0..pods).all(|i| phase(&api, i) == "Failed")
    })
    .await;
    for i in 0..pods {
        let pod = api.pod("default", &format!("pod-{i}")).unwrap();
        let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
        assert_eq!(statuses.len(), containers);
        for s in statuses {
            let c: usize = s["name"].as_str().unwrap()[1..].parse().unwrap();
            assert_eq!(
                s["state"]["terminated"]["exitCode"],
                (c % 50) as i64 + 1,
                "pod-{i} {}: final state",
                s["name"]
            );
        }
    }
    assert!(metrics.discard_events.get() > 0, "the channel did overflow");
    daemon.stop().await;
}

fn spawn_plegd(cri: &FakeServer, kubeconfig: &std::path::Path) -> Child {
    support::process::plegd_run(env!("CARGO_BIN_EXE_plegd"), "churn", &cri.path, kubeconfig)
        .args(support::process::FULL_MODE_FAST_RELIST)
        .args(["--metrics-address", "off"])
        .spawn()
        .expect("spawn plegd")
}

fn patches_for(api: &TestApiserver, i: usize) -> usize {
    let path = format!("/api/v1/namespaces/default/pods/pod-{i}/status");
    api.requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path == path)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_churn_and_restarted_rewrites_only_what_changed() {
    let cri = FakeServer::start().await;
    let api = TestApiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(dir.path());
    let pods = 40;
    bind_pods(&cri, &api, "churn", pods, 1);
    let mut plegd = spawn_plegd(&cri, &kubeconfig);
    wait_until("every pod Running", Duration::from_secs(60), || {
        (0..pods).all(|i| phase(&api, i) == "Running")
    })
    .await;
    // Churn: a third of the pods end while plegd runs.
    for i in (0..pods).filter(|i| i % 3 == 0) {
        cri.fake.exit_container(&format!("ctr-churn-{i:03}-0"), 2);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Killed mid-churn, with no chance to flush.
    plegd.kill().expect("SIGKILL");
    let _ = plegd.wait();
    // More pods end while it is down.
    for i in (0..pods).filter(|i| i % 3 == 1) {
        cri.fake.exit_container(&format!("ctr-churn-{i:03}-0"), 5);
    }
    // Let whatever was in flight settle, then count writes from here on.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<usize> = (0..pods).map(|i| patches_for(&api, i)).collect();
    let landed_before: Vec<bool> = (0..pods).map(|i| phase(&api, i) == "Failed").collect();

    let mut plegd = spawn_plegd(&cri, &kubeconfig);
    wait_until("every ended pod Failed", Duration::from_secs(60), || {
        (0..pods).filter(|i| i % 3 != 2).all(|i| phase(&api, i) == "Failed")
    })
    .await;
    // Past the first relist and a full 10 s resync of every pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for i in 0..pods {
        let new_patches = patches_for(&api, i) - before[i];
        let expected = match i % 3 {
            0 => exit_code(&api, i) == Some(2),
            1 => exit_code(&api, i) == Some(5),
            _ => phase(&api, i) == "Running",
        };
        assert!(expected, "pod-{i}: final state after the restart");
        if landed_before[i] || i % 3 == 2 {
            // Its status was already right on the apiserver: a restarted plegd leaves it alone.
            assert_eq!(
                new_patches, 0,
                "pod-{i} was re-written after the restart although nothing changed"
            );
        } else {
            assert!(
                new_patches >= 1,
                "pod-{i} changed while plegd was down and must be written"
            );
        }
    }
    let _ = plegd.kill();
    let _ = plegd.wait();
}

fn counted(metrics: &Metrics, name: &str) -> Option<f64> {
    support::process::metric(&metrics.encode(), name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_counted_once_and_informer_errors_apart_from_the_runtime() {
    let cri = FakeServer::start().await;
    let api = TestApiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "counts", 1, 1);
    // The first two status PATCHes meet a conflict.
    api.set_status_patch_conflicts(2);
    let metrics = Arc::new(Metrics::new());
    let mut options = support::daemon::options(&cri.path, api.kubeconfig(dir.path()), "counts", StatusMode::Full);
    options.pleg.relist_period = Duration::from_millis(200);
    options.triggers = TriggerMode::None;
    options.manager.retry_initial = Duration::from_millis(50);
    options.manager.retry_max = Duration::from_millis(200);
    let _daemon = support::daemon::spawn(options, metrics.clone());
    wait_until("the pod Running", Duration::from_secs(30), || {
        phase(&api, 0) == "Running"
    })
    .await;
    let conflicts = counted(&metrics, "plegd_status_writes_total{result=\"conflict\"}");
    assert_eq!(conflicts, Some(2.0), "{}", metrics.encode());
    assert_eq!(
        counted(&metrics, "plegd_status_writes_total{result=\"retry\"}"),
        None,
        "a conflict is not also a retry"
    );
    assert!(counted(&metrics, "plegd_status_writes_total{result=\"ok\"}") >= Some(1.0));

    // The apiserver's watches fail for a while: the informer's failures are its own, not the runtime's.
    assert_eq!(counted(&metrics, "plegd_informer_errors_total"), Some(0.0));
    api.set_fail_watches(true);
    wait_until("an informer error", Duration::from_secs(30), || {
        counted(&metrics, "plegd_informer_errors_total") >= Some(1.0)
    })
    .await;
    api.set_fail_watches(false);
    let text = metrics.encode();
    assert!(
        !text.contains("plegd_runtime_errors_total{operation=\"informer"),
        "{text}"
    );
    assert!(
        !text.contains("plegd_runtime_errors_total{"),
        "the runtime never failed: {text}"
    );
}
