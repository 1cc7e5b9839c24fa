//! Faults that must lose nothing: the event channel overflowing far past its capacity, and plegd
//! itself killed (SIGKILL) and restarted in the middle of churn. Fake CRI server + the test apiserver built from Kubernetes'
//! own code.

use plegd_test_support as support;
use support::bind_pods;

use std::sync::Arc;
use std::time::Duration;

use plegd::metrics::Metrics;
use plegd::pleg::PlegConfig;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use support::apiserver::{Apiserver, Identity, PLEGD_USER};
use support::fake_cri::FakeServer;
use support::process::KillOnDrop;
use support::wait_for;

async fn phase(api: &Apiserver, i: usize) -> String {
    api.pod("default", &format!("pod-{i}"))
        .await
        .map(|p| p["status"]["phase"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

async fn all_in_phase(api: &Apiserver, pods: impl IntoIterator<Item = usize>, want: &str) -> bool {
    for i in pods {
        if phase(api, i).await != want {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_overflow_at_ten_times_capacity_loses_no_final_state() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A pod's changes go out in one burst after its status read: 100 containers a pod.
    let (pods, containers) = (10, 100);
    let uids = bind_pods(&cri, &api, "overflow", pods, containers).await;
    let metrics = Arc::new(Metrics::new());
    // Room for 10 events; each pod's burst is 10× that.
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("overflow".into()));
    let mut options = support::daemon::options(&cri.path, kubeconfig, "overflow", StatusMode::Full);
    options.pleg = PlegConfig::new(
        Duration::from_millis(200),
        Some(plegd::pleg::DEFAULT_RELIST_PERIOD_WITH_TRIGGERS),
        plegd::pleg::DEFAULT_RELIST_THRESHOLD,
    )
    .unwrap()
    .with_channel_capacity(std::num::NonZeroUsize::new(10).unwrap());
    options.triggers = TriggerMode::None;
    let daemon = support::daemon::spawn(options, metrics.clone());
    wait_for("every pod Running", Duration::from_secs(60), || {
        all_in_phase(&api, 0..pods, "Running")
    })
    .await;
    // Every container exits at once, each with its own code: 100 ContainerDied per pod at once.
    for uid in &uids {
        for c in 0..containers {
            cri.fake.exit_container(&format!("ctr-{uid}-{c}"), (c % 50) as i32 + 1);
        }
    }
    wait_for("every pod Failed", Duration::from_secs(60), || {
        all_in_phase(&api, 0..pods, "Failed")
    })
    .await;
    for i in 0..pods {
        let pod = api.pod("default", &format!("pod-{i}")).await.unwrap();
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

fn spawn_plegd(cri: &FakeServer, kubeconfig: &std::path::Path) -> KillOnDrop {
    let child = support::process::plegd_run(env!("CARGO_BIN_EXE_plegd"), "churn", &cri.path, kubeconfig)
        .args(support::process::FULL_MODE_FAST_RELIST)
        .args(["--metrics-address", "off"])
        .spawn()
        .expect("spawn plegd");
    KillOnDrop(child)
}

/// Status PATCHes plegd sent for each pod so far.
async fn patches(api: &Apiserver, pods: usize) -> Vec<usize> {
    let requests = api.requests_by(PLEGD_USER).await;
    (0..pods)
        .map(|i| {
            let path = format!("/api/v1/namespaces/default/pods/pod-{i}/status");
            requests
                .iter()
                .filter(|r| r.method == "PATCH" && r.path == path)
                .count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_churn_and_restarted_rewrites_only_what_changed() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("churn".into()));
    let pods = 40;
    let uids = bind_pods(&cri, &api, "churn", pods, 1).await;
    let mut plegd = spawn_plegd(&cri, &kubeconfig);
    wait_for("every pod Running", Duration::from_secs(60), || {
        all_in_phase(&api, 0..pods, "Running")
    })
    .await;
    // Churn: a third of the pods end while plegd runs.
    for i in (0..pods).filter(|i| i % 3 == 0) {
        cri.fake.exit_container(&format!("ctr-{}-0", uids[i]), 2);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Killed mid-churn, with no chance to flush.
    plegd.kill().expect("SIGKILL");
    let _ = plegd.wait();
    // More pods end while it is down.
    for i in (0..pods).filter(|i| i % 3 == 1) {
        cri.fake.exit_container(&format!("ctr-{}-0", uids[i]), 5);
    }
    // Let whatever was in flight settle, then count writes from here on.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = patches(&api, pods).await;
    let mut landed_before = Vec::new();
    for i in 0..pods {
        landed_before.push(phase(&api, i).await == "Failed");
    }

    let mut plegd = spawn_plegd(&cri, &kubeconfig);
    wait_for("every ended pod Failed", Duration::from_secs(60), || {
        all_in_phase(&api, (0..pods).filter(|i| i % 3 != 2), "Failed")
    })
    .await;
    // Past the first relist and a full 10 s resync of every pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = patches(&api, pods).await;
    for i in 0..pods {
        let new_patches = after[i] - before[i];
        let expected = match i % 3 {
            0 => api.exit_code(&format!("pod-{i}")).await == Some(2),
            1 => api.exit_code(&format!("pod-{i}")).await == Some(5),
            _ => phase(&api, i).await == "Running",
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
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "counts", 1, 1).await;
    // The first two status PATCHes meet a conflict.
    api.set_status_patch_conflicts(2).await;
    let metrics = Arc::new(Metrics::new());
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("counts".into()));
    let mut options = support::daemon::options(&cri.path, kubeconfig, "counts", StatusMode::Full);
    options.pleg = PlegConfig::new(
        Duration::from_millis(200),
        Some(plegd::pleg::DEFAULT_RELIST_PERIOD_WITH_TRIGGERS),
        plegd::pleg::DEFAULT_RELIST_THRESHOLD,
    )
    .unwrap();
    options.triggers = TriggerMode::None;
    options.manager.retry =
        plegd::util::backoff::ExponentialBackoff::try_new(Duration::from_millis(50), Duration::from_millis(200))
            .unwrap();
    let _daemon = support::daemon::spawn(options, metrics.clone());
    wait_for("the pod Running", Duration::from_secs(30), || async {
        phase(&api, 0).await == "Running"
    })
    .await;
    let conflicts = counted(&metrics, "plegd_status_writes_total{result=\"conflict\"}");
    assert_eq!(conflicts, Some(2.0), "{}", metrics.encode());
    assert_eq!(
        counted(&metrics, "plegd_status_writes_total{result=\"retry\"}"),
        Some(0.0),
        "a conflict is not also a retry"
    );
    assert!(counted(&metrics, "plegd_status_writes_total{result=\"ok\"}") >= Some(1.0));

    // The apiserver's watches fail for a while: the informer's failures are its own, not the runtime's.
    // (The server is restarted to end the watch already open; new ones fail.)
    assert_eq!(counted(&metrics, "plegd_informer_errors_total"), Some(0.0));
    api.set_fail_watches(true).await;
    api.set_down(true).await;
    api.set_down(false).await;
    wait_for("an informer error", Duration::from_secs(30), || async {
        counted(&metrics, "plegd_informer_errors_total") >= Some(1.0)
    })
    .await;
    api.set_fail_watches(false).await;
    let text = metrics.encode();
    assert!(
        !text.contains("plegd_runtime_errors_total{operation=\"informer"),
        "{text}"
    );
    // Every CRI operation's series is there from the start, at 0.
    let runtime_errors: f64 = text
        .lines()
        .filter(|l| l.starts_with("plegd_runtime_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(runtime_errors, 0.0, "the runtime never failed: {text}");
}
