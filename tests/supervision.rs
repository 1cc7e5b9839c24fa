//! Nothing dies silently: every stage of `plegd run`, ended as a crash would end it, makes plegd
//! unhealthy (the answer /healthz and the systemd watchdog go by) and ends `run` with an error
//! naming the stage, which the binary turns into exit code 1. Fake CRI server + the test apiserver built from Kubernetes' own code.

use plegd_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::{free_port, http_get};
use support::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_any_stage_fails_health_and_ends_the_daemon() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uid = api.create_bound_pod("web", "sup", 1, "Never").await;
    cri.fake.add_running_pod(&uid, "web", 1);
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("sup".into()));
    let mut options = support::daemon::options(&cri.path, kubeconfig, "sup", StatusMode::Full);
    options.emit_events = true;
    options.api_socket = Some(dir.path().join("plegd.sock"));
    options.manager.writers = std::num::NonZeroUsize::new(2).unwrap();
    options.metrics_address = Some(([127, 0, 0, 1], free_port()).into());
    // The stages as the supervisor recorded them starting: every one of them, whatever it is.
    let names = {
        let daemon = support::daemon::spawn_controlled(options.clone(), Arc::new(Metrics::new())).await;
        let mut names = daemon.stages.clone();
        names.dedup();
        daemon.stop(Duration::from_secs(20)).await.expect("a clean stop");
        names
    };
    let mut kinds = names.clone();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "event-fan-out",
            "http",
            "informer",
            "kube-events",
            "observation-api",
            "relister",
            "status-writer",
            "sync-loop",
            "systemd-notify",
            "trigger-dispatcher",
            "trigger-source"
        ],
        "started in this order: {names:?}"
    );
    for name in names {
        let port = free_port();
        options.metrics_address = Some(([127, 0, 0, 1], port).into());
        let metrics = Arc::new(Metrics::new());
        let mut daemon = support::daemon::spawn_controlled(options.clone(), metrics).await;
        let ready = daemon.health.clone();
        wait_until("plegd ready", Duration::from_secs(20), || ready.ready().is_ok()).await;
        assert_eq!(daemon.health.healthy(), Ok(()), "healthy before {name} ends");
        let answer = tokio::task::spawn_blocking(move || http_get(port, "/healthz"))
            .await
            .unwrap();
        assert_eq!(answer.map(|(code, _)| code), Some(200), "/healthz before {name} ends");

        daemon.abort.send(name.to_owned()).await.unwrap();
        let result = daemon.result(Duration::from_secs(20)).await;
        let error = result.expect_err(name);
        assert!(error.starts_with(&format!("stage {name} ")), "{name}: {error}");
        let unhealthy = daemon.health.healthy().expect_err(name);
        assert!(unhealthy.contains(name), "{name}: {unhealthy}");
    }
}
