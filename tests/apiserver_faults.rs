//! Faults of the apiserver itself, on the test apiserver built from Kubernetes' own code (fake CRI
//! server, `plegd run` the binary, full mode): the server answering 429 with `Retry-After` (started
//! with a max-in-flight of 1 for mutating requests), the server restarted in the middle of churn
//! (etcd kept), etcd's history compacted while plegd's watch is down (its informer gets 410 and
//! lists again), and a pod deleted and created again under the same name while a write for the
//! old one is queued (plegd's path cut meanwhile by a TCP proxy, tests/support/proxy.rs), and plegd
//! stopped (SIGTERM) just as a burst of exits reaches the apiserver.
//! Each checks every version of every pod the apiserver stored: nothing is lost, nothing goes back.

use plegd_test_support as support;
use support::apiserver::exit_code;
use support::bind_pods;

use std::time::Duration;

use serde_json::Value;
use support::apiserver::{Apiserver, Identity, Logged, Options, PLEGD_USER, sent_within_retry_after};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, RunningPlegd as Plegd};
use support::proxy::{Path as ProxyPath, Proxy};
use support::wait_for;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

fn start_plegd(api: &Apiserver, cri: &FakeServer, node: &str, dir: &std::path::Path) -> Plegd {
    start_plegd_with(&api.kubeconfig_as(dir, &Identity::Plegd(node.into())), cri, node, dir)
}

/// [`start_plegd`] with a kubeconfig of the caller's (one through a proxy).
fn start_plegd_with(kubeconfig: &std::path::Path, cri: &FakeServer, node: &str, dir: &std::path::Path) -> Plegd {
    let mut command = support::process::plegd_run(PLEGD, node, &cri.path, kubeconfig);
    command.args(FULL_MODE_FAST_RELIST).args(["--log-level", "debug"]);
    Plegd::spawn(command, dir)
}

/// Every pod has reached `want(i)`: `Some(code)` exited with it, `None` running.
async fn settled(api: &Apiserver, pods: usize, want: impl Fn(usize) -> Option<i64>) -> bool {
    for i in 0..pods {
        let Some(pod) = api.pod("default", &format!("pod-{i}")).await else {
            return false;
        };
        let done = match want(i) {
            Some(code) => pod["status"]["phase"] == "Failed" && exit_code(&pod) == Some(code),
            None => pod["status"]["phase"] == "Running",
        };
        if !done {
            return false;
        }
    }
    true
}

/// Every stored version of each pod, in order, is a step forward: phase Pending → Running →
/// Failed, never back; once exited, always with the same code; the final one is `want(i)`.
async fn no_version_goes_back(api: &Apiserver, pods: usize, want: impl Fn(usize) -> Option<i64>) {
    let rank = |phase: &Value| match phase.as_str() {
        Some("Pending") => 0,
        Some("Running") => 1,
        Some("Failed") => 2,
        other => panic!("unexpected phase {other:?}"),
    };
    for i in 0..pods {
        let versions = api.pod_versions("default", &format!("pod-{i}")).await;
        assert!(!versions.is_empty(), "pod-{i} was recorded");
        let mut phase = 0;
        let mut code = None;
        for pod in &versions {
            let now = rank(&pod["status"]["phase"]);
            assert!(now >= phase, "pod-{i} went back to {}: {pod}", pod["status"]["phase"]);
            phase = now;
            if let Some(exit) = exit_code(pod) {
                assert!(code.is_none_or(|c| c == exit), "pod-{i}'s exit code changed: {pod}");
                code = Some(exit);
            } else {
                assert!(code.is_none(), "pod-{i}'s exit was taken back: {pod}");
            }
        }
        assert_eq!(code, want(i), "pod-{i}'s final state");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_are_waited_out_and_nothing_is_lost() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(Options {
        throttle_plegd: true,
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let pods = 12;
    let uids = bind_pods(&cri, &api, "busy", pods, 1).await;
    // Each of plegd's writes holds its seat for 200 ms, as on a slow storage: with priority and
    // fairness leaving plegd one request at a time, its four writers meet 429s.
    let held = Duration::from_millis(200);
    api.set_delay(Some(held)).await;
    let plegd = start_plegd(&api, &cri, "busy", dir.path());
    wait_for("every pod Running", Duration::from_secs(90), || {
        settled(&api, pods, |_| None)
    })
    .await;
    for (i, uid) in uids.iter().enumerate() {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), 10 + i as i32);
    }
    let want = |i: usize| Some(10 + i as i64);
    wait_for("every exit written", Duration::from_secs(120), || {
        settled(&api, pods, want)
    })
    .await;

    let requests = api.requests_by(PLEGD_USER).await;
    let patches: Vec<&Logged> = requests
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .collect();
    let refused: Vec<&&Logged> = patches.iter().filter(|r| r.status == 429).collect();
    assert!(
        !refused.is_empty(),
        "the server's one seat made some writes wait: {patches:?}"
    );
    assert!(
        patches.iter().all(|r| r.status == 200 || r.status == 429),
        "{patches:?}"
    );
    let waited = plegd.metric("plegd_apiserver_retry_after_total");
    assert!(
        waited >= refused.len() as f64,
        "every 429 came with a Retry-After plegd honoured: {waited} of {}\n{}",
        refused.len(),
        plegd.log()
    );
    assert!(plegd.metric("plegd_apiserver_requests_total{verb=\"PATCH\",code=\"429\"}") >= refused.len() as f64);
    // The server asks for 1 s (Retry-After: 1): no write reaches it within that second after a
    // 429 was answered, by the time the server received each (the audit log's, before the
    // admission delay). Requests already on their way when the 429 was answered arrive soon after
    // it: within a few ms on an idle machine, later on a loaded one, hence 200 ms of slack.
    assert!(
        patches.iter().all(|r| r.received > std::time::UNIX_EPOCH),
        "every write's time of receipt is in the audit log: {patches:?}"
    );
    let patches: Vec<Logged> = patches.into_iter().cloned().collect();
    let early = sent_within_retry_after(&patches);
    assert!(
        early.is_empty(),
        "writes sent within the Retry-After of a 429: {early:?}"
    );
    no_version_goes_back(&api, pods, want).await;
    assert!(!plegd.log().contains("panicked"), "{}", plegd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarted_mid_churn_loses_and_reverts_nothing() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pods = 30;
    let uids = bind_pods(&cri, &api, "churn", pods, 1).await;
    let plegd = start_plegd(&api, &cri, "churn", dir.path());
    wait_for("every pod Running", Duration::from_secs(60), || {
        settled(&api, pods, |_| None)
    })
    .await;
    // Pods 0‥9 end before the restart, 10‥19 while the server is down, 20‥24 after; 25‥29 run on.
    let want = |i: usize| (i < 25).then_some(i as i64 % 7 + 1);
    let exit = |i: usize| cri.fake.exit_container(&format!("ctr-{}-0", uids[i]), i as i32 % 7 + 1);
    for i in 0..10 {
        exit(i);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    api.set_down(true).await;
    for i in 10..20 {
        exit(i);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.set_down(false).await;
    for i in 20..25 {
        exit(i);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    wait_for("every exit written", Duration::from_secs(90), || {
        settled(&api, pods, want)
    })
    .await;
    no_version_goes_back(&api, pods, want).await;
    // The writes failed while the server was down and went out again once it was back.
    let retried = plegd.metric("plegd_status_writes_total{result=\"retry\"}");
    assert!(retried >= 1.0, "writes were retried across the restart: {retried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_queued_for_a_replaced_pod_is_dropped() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    // plegd reaches the apiserver through a proxy that can reset every connection: while the pod
    // is deleted and created again, none of plegd's requests reaches the server (a write that
    // arrived between the delete and the create would be answered 404 and dropped as gone).
    let proxy = Proxy::start(api.port()).await;
    let dir = tempfile::tempdir().unwrap();
    let old = api.create_bound_pod("web", "swap", 1, "Never").await;
    cri.fake.add_running_pod(&old, "web", 1);
    let kubeconfig = api.kubeconfig_through(dir.path(), &Identity::Plegd("swap".into()), proxy.port);
    let plegd = start_plegd_with(&kubeconfig, &cri, "swap", dir.path());
    wait_for("web Running", Duration::from_secs(60), || async {
        api.pod("default", "web")
            .await
            .is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .await;

    // plegd's view of the pod stops moving: it may no longer list or watch pods (a list would let
    // the informer see the new pod before the queued write goes out, and the write would be
    // dropped as gone instead, not sent), and its open watch is cut. Its status write fails on
    // the cut path, and the next one waits in its queue.
    api.set_fail_pod_reads(true).await;
    proxy.set(ProxyPath::Reset);
    cri.fake.exit_container(&format!("ctr-{old}-0"), 4);
    wait_for("the old pod's write failing", Duration::from_secs(30), || async {
        plegd.metric("plegd_status_writes_total{result=\"retry\"}") >= 1.0
    })
    .await;
    // Meanwhile the pod is deleted and created again under the same name, on the same node.
    api.delete("default", "web").await;
    let new = api.create_bound_pod("web", "swap", 1, "Never").await;
    assert_ne!(new, old);
    proxy.set(ProxyPath::Pass);

    // The queued write goes out with the old uid; the server refuses it (422, `metadata.uid ...
    // field is immutable`), and plegd drops it as a replaced pod.
    // The write waits out its retry backoff (up to 10 s) first; a loaded machine adds more.
    wait_for(
        "the write dropped as a replaced pod",
        Duration::from_secs(60),
        || async { plegd.metric("plegd_status_writes_total{result=\"replaced\"}") >= 1.0 },
    )
    .await;
    let refused: Vec<Logged> = api
        .requests_by(PLEGD_USER)
        .await
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.status == 422)
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one write refused for its uid, not retried: {refused:?}"
    );
    assert!(
        plegd
            .log()
            .contains("pod was replaced (deleted and created again under the same name)"),
        "{}",
        plegd.log()
    );
    let rejected = plegd.metric("plegd_status_writes_total{result=\"rejected\"}");
    assert_eq!(rejected, 0.0, "a replaced pod is not a rejected status");

    // Once plegd sees the new pod, it writes the new pod's own status, and nothing of the old one.
    api.set_fail_pod_reads(false).await;
    cri.fake.add_running_pod(&new, "web", 1);
    wait_for("the new web Running", Duration::from_secs(60), || async {
        api.pod("default", "web")
            .await
            .is_some_and(|p| p["status"]["phase"] == "Running" && p["metadata"]["uid"] == new.as_str())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for pod in api.pod_versions("default", "web").await {
        if pod["metadata"]["uid"] == new.as_str() {
            assert!(
                exit_code(&pod).is_none(),
                "the old pod's exit landed on the new pod: {pod}"
            );
            assert_ne!(pod["status"]["phase"], "Failed", "{pod}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_history_makes_the_informer_list_again_and_nothing_is_missed() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut uids = bind_pods(&cri, &api, "relist", 10, 1).await;
    let plegd = start_plegd(&api, &cri, "relist", dir.path());
    wait_for("every pod Running", Duration::from_secs(60), || {
        settled(&api, 10, |_| None)
    })
    .await;

    // plegd's watch is cut and cannot be opened again for a while; meanwhile pods 0‥4 end, pods
    // 10‥12 are created for the node, and etcd's history is compacted past what plegd has seen.
    api.set_fail_watches(true).await;
    api.set_down(true).await;
    api.set_down(false).await;
    for uid in &uids[..5] {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), 6);
    }
    for i in 10..13 {
        let uid = api.create_bound_pod(&format!("pod-{i}"), "relist", 1, "Never").await;
        cri.fake.add_running_pod(&uid, &format!("pod-{i}"), 1);
        uids.push(uid);
    }
    api.compact().await;
    // Restarted again, the server's watch cache starts past everything plegd has seen (with the
    // cache from before the restart, the server would have served plegd's watch from it).
    api.set_down(true).await;
    api.set_down(false).await;
    let lists_before = plegd_lists(&api).await;
    api.set_fail_watches(false).await;

    // The watch from plegd's last version is refused (410: too old), the informer lists again, and
    // plegd writes the pods it had not seen and the exits.
    let want = |i: usize| (i < 5).then_some(6);
    wait_for("every pod settled", Duration::from_secs(60), || settled(&api, 13, want)).await;
    assert!(
        plegd_lists(&api).await > lists_before,
        "the informer listed again: {:?}",
        api.requests_by(PLEGD_USER)
            .await
            .iter()
            .filter(|r| r.method == "GET")
            .map(|r| format!("{} {}?{}", r.status, r.path, r.query))
            .collect::<Vec<_>>()
    );
    no_version_goes_back(&api, 13, want).await;
    assert!(plegd.metric("plegd_informer_errors_total") >= 1.0);
}

/// Lists of pods plegd's informer made so far: LISTs and streaming lists (a WATCH that sends the
/// pods first).
async fn plegd_lists(api: &Apiserver) -> usize {
    api.requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/api/v1/pods"
                && (!r.query.contains("watch=") || r.query.contains("sendInitialEvents=true"))
        })
        .count()
}

/// SIGTERM as the first of 150 container exits (one relist sees them all) reaches the apiserver:
/// the relist under way finishes, and what the PLEG computed — the events in its channel and the
/// syncLoop's queue — is handed over and written before plegd exits 0, within --shutdown-timeout. (Before the
/// drain, the relister, fan-out and syncLoop were cancelled together and a few exits of such a
/// burst never reached the apiserver.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_computed_before_sigterm_reach_the_apiserver() {
    const PODS: usize = 150;
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uids = bind_pods(&cri, &api, "drain", PODS, 1).await;
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("drain".into()));
    let mut command = support::process::plegd_run(PLEGD, "drain", &cri.path, &kubeconfig);
    command.args([
        "--status-mode",
        "full",
        "--triggers",
        "none",
        "--relist-period",
        "1s",
        "--shutdown-timeout",
        "30s",
    ]);
    let mut plegd = Plegd::spawn(command, dir.path());
    wait_for("every pod Running", Duration::from_secs(90), || {
        settled(&api, PODS, |_| None)
    })
    .await;

    let patches = || api.plegd_status_patches();
    let before = patches().await;
    // Status reads take a while, so the relist that sees the exits is still handing out events
    // when the first is written: the signal comes in the middle of it.
    cri.fake.delay("ContainerStatus", Duration::from_millis(15));
    for uid in &uids {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), 7);
    }
    wait_for("the first exit written", Duration::from_secs(10), || async {
        patches().await > before
    })
    .await;
    let status = plegd.terminate(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "{}", plegd.log());
    let written = patches().await - before;
    assert!(
        settled(&api, PODS, |_| Some(7)).await,
        "{written} of {PODS} exits written before plegd exited\n{}",
        plegd.log()
    );
    no_version_goes_back(&api, PODS, |_| Some(7)).await;
}
