//! The apiserver side end to end, against the test apiserver built from Kubernetes' own
//! k8s.io/apiserver (support/apiserver.rs, itself checked by tests/support/tests/): `plegd run` (in
//! process, as its service account with its node's token, under deploy/'s RBAC) against a REAL
//! containerd in each status mode, a pod of another node, an apiserver restart, injected server
//! errors, and the request log.

use plegd_test_support as support;
use support::apiserver::condition;

use std::sync::Arc;
use std::time::{Duration, Instant};

use plegd::metrics::Metrics;
use plegd::runtime::termination::{ANNOTATION_MESSAGE_PATH, ANNOTATION_MESSAGE_POLICY, HostFiles};
use plegd::status::StatusMode;
use serde_json::{Value, json};
use support::apiserver::{Apiserver, Identity, PLEGD_USER};
use support::containerd::{Containerd, TEST_NAMESPACE, TestPod, containerd, runtime_under_test};
use support::history;

struct Daemon {
    _run: support::daemon::InProcess,
    metrics: Arc<Metrics>,
}

fn start_daemon(cd: &Containerd, api: &Apiserver, dir: &std::path::Path, node: &str, mode: StatusMode) -> Daemon {
    start_daemon_with(cd, api, dir, node, mode, |_| {})
}

/// [`start_daemon`], with `configure` having the last word on the options.
fn start_daemon_with(
    cd: &Containerd,
    api: &Apiserver,
    dir: &std::path::Path,
    node: &str,
    mode: StatusMode,
    configure: impl FnOnce(&mut plegd::daemon::DaemonConfig),
) -> Daemon {
    // As plegd runs in a cluster: its service account, its token bound to its node, under deploy/'s RBAC.
    let kubeconfig = api.kubeconfig_as(dir, &Identity::Plegd(node.to_owned()));
    let mut options = support::daemon::options(&cd.socket, kubeconfig, node, mode);
    // The node directories termination messages are read below, as the kubelet lays them out.
    options.cri.host_files = HostFiles::new(&dir.join("kubelet"), &dir.join("logs"));
    options.pleg = plegd::pleg::PlegConfig::new(
        Duration::from_millis(500),
        Some(plegd::pleg::DEFAULT_RELIST_PERIOD_WITH_TRIGGERS),
        plegd::pleg::DEFAULT_RELIST_THRESHOLD,
    )
    .unwrap();
    options.manager.retry =
        plegd::util::backoff::ExponentialBackoff::try_new(Duration::from_millis(200), Duration::from_secs(2)).unwrap();
    options.emit_events = true;
    configure(&mut options);
    let metrics = Arc::new(Metrics::new());
    Daemon {
        _run: support::daemon::spawn(options, metrics.clone()),
        metrics,
    }
}

/// Create `object` on the apiserver, then run its sandbox with the uid the apiserver gave it.
async fn start_pod(cd: &Containerd, api: &Apiserver, object: Value, host_network: bool) -> TestPod {
    let created = api.create_pod(object).await;
    let name = created["metadata"]["name"].as_str().expect("name");
    cd.run_pod_as(
        name,
        TEST_NAMESPACE,
        &support::apiserver::uid(&created),
        host_network,
        None,
    )
    .await
}

/// The apiserver object for a CRI test pod `name`, bound to `node`.
fn pod_object(name: &str, node: &str, containers: &[&str], restart_policy: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": {"nodeName": node, "restartPolicy": restart_policy, "hostNetwork": true,
                 "containers": containers.iter().map(|c| json!({"name": c, "image": "plegd.test/busybox:1"})).collect::<Vec<_>>()}
    })
}

async fn wait_status(
    api: &Apiserver,
    pod: &TestPod,
    what: &str,
    timeout: Duration,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let p = api.pod(&pod.namespace, &pod.name).await.expect("pod exists");
        if cond(&p["status"]) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; status now: {:#}",
            p["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Requests plegd sent to the apiserver, answered or not (`plegd_apiserver_requests_total`).
fn requests_sent(metrics: &Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("plegd_apiserver_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_mode_running_then_failed() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pod = start_pod(&cd, &api, pod_object("full", "node-full", &["app"], "Never"), true).await;
    let daemon = start_daemon(&cd, &api, dir.path(), "node-full", StatusMode::Full);

    // Runs until it is seen running and stopped, then fails.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 1' TERM; sleep 1000 & wait")
        .await;
    let p = wait_status(&api, &pod, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["name"], "app");
    assert_eq!(cs["containerID"], format!("{}://{ctr}", runtime_under_test()));
    assert!(cs["state"]["running"]["startedAt"].is_string(), "{cs:#}");
    assert_eq!(cs["ready"], true);
    assert!(
        support::containerd::is_image_id(cs["imageID"].as_str().unwrap()),
        "{cs:#}"
    );
    assert_eq!(p["status"]["hostIP"], "192.0.2.10");
    assert_eq!(condition(&p["status"], "Ready").unwrap()["status"], "True");
    assert_eq!(
        condition(&p["status"], "plegd.io/ContainersRunning").unwrap()["status"],
        "True"
    );

    cd.stop_container(&ctr, 10).await;
    let p = wait_status(&api, &pod, "Failed", Duration::from_secs(20), |s| {
        s["phase"] == "Failed"
    })
    .await;
    let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 1);
    assert_eq!(t["reason"], "Error");
    assert_eq!(condition(&p["status"], "Ready").unwrap()["reason"], "PodFailed");
    let running = condition(&p["status"], "plegd.io/ContainersRunning").unwrap();
    assert_eq!(
        (running["status"].clone(), running["reason"].clone()),
        (json!("False"), json!("ContainerDied"))
    );
    assert_eq!(running["message"], "container app exited with code 1 (Error)");

    // The Kubernetes Event for the death.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !api.events().await.iter().any(|e| e["reason"] == "ContainerDied") {
        assert!(
            Instant::now() < deadline,
            "no ContainerDied event: {:?}",
            api.events().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Status is written with PATCH only: never a GET of a single pod.
    let gets = api
        .requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/api/v1/namespaces/"))
        .count();
    assert_eq!(gets, 0, "{:?}", api.requests().await);
    // Settled: resyncs (every 10 s) send nothing new.
    let patches = api.status_patches(&pod.name).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        api.status_patches(&pod.name).await,
        patches,
        "an unchanged status is not written again"
    );
    assert!(
        daemon
            .metrics
            .encode()
            .contains("plegd_status_writes_total{result=\"ok\"}")
    );
    cd.cleanup(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_mode_touches_only_its_condition() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut object = pod_object("cond", "node-cond", &["app"], "Always");
    // What a kubelet wrote before plegd came.
    let kubelet_status = json!({"phase": "Running", "hostIP": "198.51.100.7", "podIP": "198.51.100.7", "qosClass": "BestEffort",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                       {"type": "example.com/Gate", "status": "True"}],
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "kubelet-wrote-this", "state": {"running": {}}}]});
    object["status"] = kubelet_status;
    let pod = start_pod(&cd, &api, object, true).await;
    // ... as the apiserver stored it.
    let kubelet_status = api.pod(&pod.namespace, &pod.name).await.unwrap()["status"].clone();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-cond", StatusMode::Conditions);

    // Runs until it is seen running and stopped, then fails.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 2' TERM; sleep 1000 & wait")
        .await;
    let p = wait_status(&api, &pod, "ContainersRunning True", Duration::from_secs(20), |s| {
        condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "True")
    })
    .await;
    // Everything the kubelet wrote is as it was.
    for field in ["phase", "hostIP", "podIP", "qosClass", "containerStatuses"] {
        assert_eq!(p["status"][field], kubelet_status[field], "{field} untouched");
    }
    assert_eq!(
        condition(&p["status"], "Ready").unwrap(),
        &kubelet_status["conditions"][0]
    );
    assert_eq!(
        condition(&p["status"], "example.com/Gate").unwrap(),
        &kubelet_status["conditions"][1]
    );

    cd.stop_container(&ctr, 10).await;
    let p = wait_status(&api, &pod, "ContainersRunning False", Duration::from_secs(20), |s| {
        condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let c = condition(&p["status"], "plegd.io/ContainersRunning").unwrap();
    assert_eq!(c["reason"], "ContainerDied");
    assert_eq!(c["message"], "container app exited with code 2 (Error)");
    assert_eq!(
        p["status"]["phase"], "Running",
        "the kubelet's phase is not plegd's to write in this mode"
    );
    cd.cleanup(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_writes_nothing_and_other_nodes_are_never_written() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mine = start_pod(&cd, &api, pod_object("shadow", "node-shadow", &["app"], "Always"), true).await;
    // Its containers run here, but the apiserver binds it elsewhere: plegd must not touch it.
    let theirs = start_pod(
        &cd,
        &api,
        pod_object("foreign", "another-node", &["app"], "Always"),
        true,
    )
    .await;
    let daemon = start_daemon(&cd, &api, dir.path(), "node-shadow", StatusMode::Shadow);
    cd.run_container(&mine, "app", "sleep 1000").await;
    cd.run_container(&theirs, "app", "sleep 1000").await;

    let deadline = Instant::now() + Duration::from_secs(20);
    while !daemon
        .metrics
        .encode()
        .contains("plegd_shadow_differences_total{field=\"phase\"}")
    {
        assert!(
            Instant::now() < deadline,
            "shadow mode reported no difference: {}",
            daemon.metrics.encode()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let writes = api
        .requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(writes, 0, "shadow mode writes nothing: {:?}", api.requests().await);

    // The same node and pods in full mode: only this node's pod is written.
    drop(daemon);
    let _full = start_daemon(&cd, &api, dir.path(), "node-shadow", StatusMode::Full);
    wait_status(&api, &mine, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        api.status_patches(&theirs.name).await,
        0,
        "a pod of another node is never written"
    );
    assert_eq!(
        api.pod(&theirs.namespace, &theirs.name).await.unwrap()["status"]["phase"],
        "Pending"
    );
    cd.cleanup(&mine).await;
    cd.cleanup(&theirs).await;
}

/// A pod whose one container runs `sleep 1000` under restartPolicy Never, with `plegd run` in full
/// mode on `node`, once the apiserver shows it Running.
struct RunningPod {
    cd: Containerd,
    api: Apiserver,
    pod: TestPod,
    ctr: String,
    daemon: Daemon,
    _dir: tempfile::TempDir,
}

async fn running_full_pod(name: &str, node: &str) -> Option<RunningPod> {
    let cd = containerd().await?;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pod = start_pod(&cd, &api, pod_object(name, node, &["app"], "Never"), true).await;
    let daemon = start_daemon(&cd, &api, dir.path(), node, StatusMode::Full);
    let ctr = cd.run_container(&pod, "app", "sleep 1000").await;
    wait_status(&api, &pod, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    Some(RunningPod {
        cd,
        api,
        pod,
        ctr,
        daemon,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_down_then_back_gets_the_final_status() {
    let Some(RunningPod {
        cd,
        api,
        pod,
        ctr,
        daemon: _daemon,
        _dir,
    }) = running_full_pod("outage", "node-outage").await
    else {
        return;
    };

    // The apiserver stops (etcd keeps what it stored); plegd's own count of its requests says
    // what it tried meanwhile.
    api.set_down(true).await;
    let before = requests_sent(&_daemon.metrics);
    cd.stop_container(&ctr, 1).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = requests_sent(&_daemon.metrics) - before;
    api.set_down(false).await;
    let p = wait_status(&api, &pod, "Failed after the outage", Duration::from_secs(30), |s| {
        s["phase"] == "Failed"
    })
    .await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    // Retries back off: a handful of requests in 10 s, not a storm.
    assert!(during < 60, "{during} requests while the apiserver was down");
    cd.cleanup(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_the_status_lands() {
    let Some(RunningPod {
        cd,
        api,
        pod,
        ctr,
        daemon,
        _dir,
    }) = running_full_pod("errors", "node-errors").await
    else {
        return;
    };

    api.set_status_patch_500(true).await;
    api.set_delay(Some(Duration::from_millis(300))).await;
    cd.stop_container(&ctr, 1).await;
    support::wait_for("the injected 500s hit", Duration::from_secs(30), || async {
        api.requests().await.iter().any(|r| r.status == 500)
    })
    .await;
    api.set_status_patch_500(false).await;
    api.set_delay(None).await;
    wait_status(&api, &pod, "Failed after the 500s", Duration::from_secs(30), |s| {
        s["phase"] == "Failed"
    })
    .await;
    let text = daemon.metrics.encode();
    assert!(text.contains("plegd_status_writes_total{result=\"retry\"}"), "{text}");
    cd.cleanup(&pod).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_kill_gives_its_reason_and_event() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut object = pod_object("oom", "node-oom", &["hog"], "Never");
    object["spec"]["containers"][0]["resources"] =
        json!({"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}});
    let pod = start_pod(&cd, &api, object, true).await;
    let daemon = start_daemon(&cd, &api, dir.path(), "node-oom", StatusMode::Full);
    let config = support::containerd::memory_hog();
    let ctr = cd.create_container_from(&pod, "hog", config).await;
    cd.start_container(&ctr).await;
    // Failed, with the reason the runtime settles on. Where containerd's OOM event comes after its
    // exit event (before 2.3, and on cgroup v1: tests/triggers.rs) plegd reads the cgroup's OOM kill
    // count with the exit, as containerd 2.3's CRI does before it records it: no status says Error
    // first.
    let p = wait_status(&api, &pod, "Failed, OOMKilled", Duration::from_secs(20), |s| {
        s["phase"] == "Failed" && s["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    })
    .await;
    let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].clone(), t["reason"].clone()),
        (json!(137), json!("OOMKilled"))
    );
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(cs["resources"]["limits"]["memory"], "32Mi", "{cs:#}");
    assert_eq!(condition(&p["status"], "Ready").unwrap()["reason"], "PodFailed");
    let c = condition(&p["status"], "plegd.io/ContainersRunning").unwrap();
    assert_eq!(c["reason"], "OOMKilled");
    history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
    // Never an Error written before the OOMKilled: on containerd from 2.3 (whose CRI reads the
    // count itself), and on 1.7 where plegd read the count (an exit it left to 1.7's CRI may show
    // Error there until the OOM event comes: the runtime's own change).
    let version = cd.version().await;
    let all_read = daemon
        .metrics
        .encode()
        .contains("plegd_exit_events_total{result=\"reason_unread\"} 0");
    if runtime_under_test() == "containerd" && (version >= (2, 3) || all_read) {
        for status in stored_statuses(&api, &pod).await {
            let reason = &status["containerStatuses"][0]["state"]["terminated"]["reason"];
            assert_ne!(reason, "Error", "containerd {version:?}: {status:#}");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !api.events().await.iter().any(|e| e["reason"] == "OOMKilled") {
        assert!(
            Instant::now() < deadline,
            "no OOMKilled event: {:?}",
            api.events().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cd.cleanup(&pod).await;
}

/// The apiserver object for a CRI test pod with init containers, bound to `node`.
fn pod_with_init(name: &str, node: &str, init: &[&str], containers: &[&str], restart_policy: &str) -> Value {
    let mut object = pod_object(name, node, containers, restart_policy);
    object["spec"]["initContainers"] = init
        .iter()
        .map(|c| json!({"name": c, "image": "plegd.test/busybox:1"}))
        .collect();
    object
}

fn init_status(status: &Value) -> &Value {
    &status["initContainerStatuses"][0]
}

/// Every stored version of the pod's status, oldest first.
async fn stored_statuses(api: &Apiserver, pod: &TestPod) -> Vec<Value> {
    api.pod_versions(&pod.namespace, &pod.name)
        .await
        .into_iter()
        .map(|p| p["status"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_end_as_the_kubelet_reports_them() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-init", StatusMode::Full);

    // One that completes, then the app runs (Always).
    let ok = start_pod(
        &cd,
        &api,
        pod_with_init("init-ok", "node-init", &["init"], &["app"], "Always"),
        true,
    )
    .await;
    cd.run_container(&ok, "init", "exit 0").await;
    wait_status(
        &api,
        &ok,
        "the init container completed",
        Duration::from_secs(20),
        |s| init_status(s)["state"]["terminated"]["exitCode"] == 0,
    )
    .await;
    cd.run_container(&ok, "app", "sleep 60").await;
    let p = wait_status(&api, &ok, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running" && condition(s, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let init = init_status(&p["status"]);
    assert_eq!(init["state"]["terminated"]["reason"], "Completed", "{init:#}");
    assert_eq!(init["ready"], true, "an init container that exited with 0 is ready");
    assert_eq!(condition(&p["status"], "Initialized").unwrap()["status"], "True");

    // One that fails under Never: the pod fails, the app never starts.
    let bad = start_pod(
        &cd,
        &api,
        pod_with_init("init-bad", "node-init", &["init"], &["app"], "Never"),
        true,
    )
    .await;
    cd.run_container(&bad, "init", "sleep 1; exit 3").await;
    let p = wait_status(&api, &bad, "Failed", Duration::from_secs(20), |s| {
        s["phase"] == "Failed"
    })
    .await;
    let init = init_status(&p["status"]);
    assert_eq!(init["state"]["terminated"]["exitCode"], 3, "{init:#}");
    assert_eq!(init["state"]["terminated"]["reason"], "Error");
    assert_eq!(init["ready"], false);
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(condition(&p["status"], "Ready").unwrap()["reason"], "PodFailed");

    // Every version on the way is one the kubelet could have written.
    for (pod, terminal) in [(&ok, None), (&bad, Some("Failed"))] {
        let mut became_terminal = false;
        for s in stored_statuses(&api, pod).await {
            let init = init_status(&s);
            if init.is_null() {
                continue;
            }
            let done = init["state"]["terminated"]["exitCode"] == 0;
            assert_eq!(
                init["ready"], done,
                "{}: ready only once exited with 0: {s:#}",
                pod.name
            );
            if !init["state"]["running"].is_null() {
                assert_eq!(s["phase"], "Pending", "{}: {s:#}", pod.name);
            }
            let phase = s["phase"].as_str().unwrap_or_default();
            assert!(
                !became_terminal || Some(phase) == terminal,
                "{}: a terminal phase never changes: {s:#}",
                pod.name
            );
            became_terminal |= Some(phase) == terminal;
            assert!(matches!(phase, "Pending" | "Running" | "Failed"), "{}: {s:#}", pod.name);
            if terminal.is_none() {
                assert_ne!(phase, "Failed", "{}: {s:#}", pod.name);
            }
        }
    }
    cd.cleanup(&ok).await;
    cd.cleanup(&bad).await;
}

/// A container under `Always` that exits and is started again (the test does what the kubelet's
/// pod worker does: a new attempt with the restart count annotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_always() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-restart", StatusMode::Full);
    let pod = start_pod(
        &cd,
        &api,
        pod_object("restart", "node-restart", &["app"], "Always"),
        true,
    )
    .await;

    let first = cd.run_container(&pod, "app", "sleep 1; exit 2").await;
    let p = wait_status(&api, &pod, "the first attempt exited", Duration::from_secs(20), |s| {
        s["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    })
    .await;
    assert_eq!(p["status"]["phase"], "Running", "a stopped container under Always");
    assert_eq!(condition(&p["status"], "Ready").unwrap()["status"], "False");

    let second = cd
        .create_container_from(&pod, "app", support::containerd::attempt(1, "sleep 60"))
        .await;
    cd.start_container(&second).await;
    let p = wait_status(&api, &pod, "the second attempt runs", Duration::from_secs(20), |s| {
        !s["containerStatuses"][0]["state"]["running"].is_null()
            && condition(s, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 1, "{cs:#}");
    assert_eq!(cs["containerID"], format!("{}://{second}", runtime_under_test()));
    let last = &cs["lastState"]["terminated"];
    assert_eq!(
        (
            last["exitCode"].clone(),
            last["reason"].clone(),
            last["containerID"].clone()
        ),
        (
            json!(2),
            json!("Error"),
            json!(format!("{}://{first}", runtime_under_test()))
        ),
        "{cs:#}"
    );
    assert_eq!(p["status"]["phase"], "Running");
    history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
    cd.cleanup(&pod).await;
}

/// A pod whose sandbox is stopped under it (StopPodSandbox kills its containers): the status the
/// kubelet writes before it would start a new sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sandbox() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-stopped", StatusMode::Full);
    let pod = start_pod(
        &cd,
        &api,
        pod_object("stopped", "node-stopped", &["app"], "Always"),
        false,
    )
    .await;
    cd.run_container(&pod, "app", "sleep 600").await;
    let p = wait_status(&api, &pod, "Ready", Duration::from_secs(20), |s| {
        condition(s, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let ip = p["status"]["podIP"].clone();
    assert!(ip.as_str().is_some_and(|ip| ip.starts_with("10.")), "{:#}", p["status"]);

    cd.stop_pod(&pod).await;
    let p = wait_status(&api, &pod, "the container killed", Duration::from_secs(20), |s| {
        !s["containerStatuses"][0]["state"]["terminated"].is_null()
            && condition(s, "PodReadyToStartContainers").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let s = &p["status"];
    let t = &s["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 137, "{s:#}");
    assert_eq!(s["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(s["phase"], "Running", "stopped containers under Always: Running");
    assert_eq!(condition(s, "Ready").unwrap()["reason"], "ContainersNotReady");
    assert_eq!(s["podIP"], ip, "the pod keeps its IP while the sandbox is down");
    history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
    cd.cleanup(&pod).await;
}

/// `resources` of a running container are what the runtime applied where the runtime reports
/// them (here the runtime applied 48Mi and 250m while the spec asks 64Mi and 500m, as in the
/// middle of a resize), the spec's once it has stopped; `user` is the runtime's where it reports
/// one. What each containerd version reports is asserted per version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_user_are_what_the_runtime_reports() {
    let Some(cd) = containerd().await else { return };
    let version = cd.version().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-res", StatusMode::Full);
    let mut object = pod_object("res", "node-res", &["app"], "Never");
    object["spec"]["containers"][0]["resources"] = json!({
        "limits": {"cpu": "500m", "memory": "64Mi"},
        "requests": {"cpu": "500m", "memory": "64Mi"}
    });
    let pod = start_pod(&cd, &api, object, true).await;
    // Runs until it is seen running and stopped, then succeeds.
    let mut config = support::containerd::attempt(0, "trap 'exit 0' TERM; sleep 1000 & wait");
    config.linux = Some(k8s_cri::v1::LinuxContainerConfig {
        resources: Some(k8s_cri::v1::LinuxContainerResources {
            memory_limit_in_bytes: 48 << 20,
            cpu_period: 100_000,
            cpu_quota: 25_000,
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    });
    let ctr = cd.create_container_from(&pod, "app", config).await;
    cd.start_container(&ctr).await;
    let p = wait_status(&api, &pod, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    let cs = &p["status"]["containerStatuses"][0];
    // Every tested version reports the resources it applied (measured: 1.6.20, 1.7, 2.1).
    assert_eq!(
        cs["resources"],
        json!({"limits": {"cpu": "250m", "memory": "48Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}}),
        "containerd {version:?}: {cs:#}"
    );
    if runtime_under_test() == "cri-o" || version.0 >= 2 {
        // containerd 2.x and CRI-O report the identity the process started with: root in the
        // test image (CRI-O with its supplemental groups, measured on 1.34).
        let linux = &cs["user"]["linux"];
        assert_eq!(
            (linux["uid"].clone(), linux["gid"].clone()),
            (json!(0), json!(0)),
            "{cs:#}"
        );
    } else {
        assert!(cs["user"].is_null(), "containerd {version:?} reports no user: {cs:#}");
    }
    cd.stop_container(&ctr, 10).await;
    let p = wait_status(&api, &pod, "Succeeded", Duration::from_secs(20), |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    let done = &p["status"]["containerStatuses"][0];
    assert_eq!(
        done["resources"],
        json!({"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "500m", "memory": "64Mi"}}),
        "a stopped container shows its allocation: {done:#}"
    );
    history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
    cd.cleanup(&pod).await;
}

/// `--container-stop-signals` (the kubelet's ContainerStopSignals gate): `stopSignal` is what the
/// runtime reports, by the API's name of CRI's number (none when it reports none); without the
/// flag, none is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_signals_are_what_the_runtime_reports() {
    let Some(cd) = containerd().await else { return };
    let version = cd.version().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _on = start_daemon_with(&cd, &api, dir.path(), "node-sig", StatusMode::Full, |o| {
        o.sync.stop_signals = true
    });
    let _off = start_daemon(&cd, &api, dir.path(), "node-nosig", StatusMode::Full);
    let on = start_pod(&cd, &api, pod_object("sig", "node-sig", &["app"], "Never"), true).await;
    let off = start_pod(&cd, &api, pod_object("nosig", "node-nosig", &["app"], "Never"), true).await;
    cd.run_container(&on, "app", "sleep 600").await;
    cd.run_container(&off, "app", "sleep 600").await;
    let running = |s: &Value| s["phase"] == "Running";
    let p = wait_status(&api, &on, "Running", Duration::from_secs(20), running).await;
    let cs = &p["status"]["containerStatuses"][0];
    // Measured: containerd 2.3 and 2.4 report the signal the container stops with (KEP-4960;
    // SIGTERM here: neither the image nor the container names one); 1.7 and CRI-O 1.34 answer
    // CRI's RUNTIME_DEFAULT (they do not report it), so even with the flag there is none to write.
    // The names of the others are runtime::convert's unit test.
    let reports = runtime_under_test() == "containerd" && version >= (2, 3);
    let expected = if reports { json!("SIGTERM") } else { Value::Null };
    assert_eq!(
        cs["stopSignal"],
        expected,
        "{} {version:?}: the stop signal as the runtime reports it",
        runtime_under_test()
    );
    let p = wait_status(&api, &off, "Running", Duration::from_secs(20), running).await;
    let cs = &p["status"]["containerStatuses"][0];
    assert!(cs["stopSignal"].is_null(), "not written without the flag: {cs:#}");
    cd.cleanup(&on).await;
    cd.cleanup(&off).await;
}

async fn pod_deletes(api: &Apiserver, pod: &TestPod) -> usize {
    let path = format!("/api/v1/namespaces/{}/pods/{}", pod.namespace, pod.name);
    api.requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| r.method == "DELETE" && r.path == path)
        .count()
}

/// A pod deleted by its user while its container runs: nothing is written until the container has
/// stopped (plegd stops nothing; whoever runs the pod does); then, in `full` mode, the final status
/// (Failed, the container terminated), and once its sandbox is stopped too a DELETE with grace
/// period 0 and the uid precondition, as the kubelet's status manager finishes a pod. In `conditions` mode the kubelet does that: plegd
/// never deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_finished_then_removed_in_full_mode_only() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let full = start_daemon(&cd, &api, dir.path(), "node-del", StatusMode::Full);
    let _conditions = start_daemon(&cd, &api, dir.path(), "node-del-c", StatusMode::Conditions);
    let pod = start_pod(&cd, &api, pod_object("del", "node-del", &["app"], "Always"), true).await;
    let other = start_pod(&cd, &api, pod_object("del-c", "node-del-c", &["app"], "Always"), true).await;
    let ctr = cd.run_container(&pod, "app", "sleep 600").await;
    let other_ctr = cd.run_container(&other, "app", "sleep 600").await;
    wait_status(&api, &pod, "Ready", Duration::from_secs(20), |s| {
        condition(s, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    wait_status(&api, &other, "plegd's condition", Duration::from_secs(20), |s| {
        condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "True")
    })
    .await;

    api.request_deletion(&pod.namespace, &pod.name, 30).await;
    api.request_deletion(&other.namespace, &other.name, 30).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pod_deletes(&api, &pod).await, 0, "the container still runs");
    let p = api.pod(&pod.namespace, &pod.name).await.expect("still there");
    assert_eq!(p["status"]["phase"], "Running");

    cd.stop_container(&ctr, 0).await;
    cd.stop_container(&other_ctr, 0).await;
    // Finished, with its final status written; deleted only once its sandbox is stopped too (the
    // kubelet's canBeDeleted waits for the pod's resources).
    wait_status(&api, &pod, "Failed", Duration::from_secs(20), |s| {
        s["phase"] == "Failed"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pod_deletes(&api, &pod).await, 0, "the sandbox is still ready");
    cd.stop_pod(&pod).await;
    support::wait_for("the finished pod is removed", Duration::from_secs(20), || async {
        api.pod(&pod.namespace, &pod.name).await.is_none()
    })
    .await;
    assert_eq!(pod_deletes(&api, &pod).await, 1);
    let versions = api.pod_versions(&pod.namespace, &pod.name).await;
    let last = &versions.last().unwrap()["status"];
    assert_eq!(last["phase"], "Failed", "{last:#}");
    let t = &last["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 137, "{last:#}");
    assert_eq!(condition(last, "Ready").unwrap()["reason"], "PodFailed");
    history::assert_kubelet_could_have_written(&versions);
    // The DELETE is counted once its answer is back, which can be just after the pod is gone.
    let counted = "plegd_pod_deletions_total{result=\"ok\"} 1";
    support::wait_until("the deletion is counted", Duration::from_secs(5), || {
        full.metrics.encode().contains(counted)
    })
    .await;

    // conditions mode: the container's death is in plegd's condition, the pod is left to the kubelet.
    wait_status(&api, &other, "plegd's condition", Duration::from_secs(20), |s| {
        condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "False")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(api.pod(&other.namespace, &other.name).await.is_some());
    assert_eq!(pod_deletes(&api, &other).await, 0);
    cd.cleanup(&pod).await;
    cd.cleanup(&other).await;
}

/// A static pod as the kubelet runs it: the runtime knows it by its config hash (its sandbox's uid),
/// and its mirror pod in the apiserver has a uid of its own and names the hash in
/// `kubernetes.io/config.mirror`. plegd matches them as the kubelet's pod manager does: the mirror
/// pod's condition (in `conditions` mode) and status (in `full` mode) follow the static pod's
/// container — never "gone from the runtime" while it runs — and the mirror pod, finished and
/// deleted, is neither forced Failed nor deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pods_mirror_pod_follows_its_containers() {
    use futures_util::FutureExt;
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _conditions = start_daemon(&cd, &api, dir.path(), "node-static-c", StatusMode::Conditions);
    let _full = start_daemon(&cd, &api, dir.path(), "node-static-f", StatusMode::Full);
    let mut pods = Vec::new();
    for (name, node) in [("static-c", "node-static-c"), ("static-f", "node-static-f")] {
        // A config hash as the kubelet makes one: 32 hex digits.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let hash = format!("{:032x}", nanos ^ (u128::from(std::process::id()) << 64));
        let mut object = pod_object(name, node, &["app"], "Always");
        object["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": hash,
            "kubernetes.io/config.hash": hash, "kubernetes.io/config.source": "file"});
        let created = api.create_pod(object).await;
        let mirror_uid = support::apiserver::uid(&created);
        assert_ne!(mirror_uid, hash);
        let pod = cd.run_pod_as(name, TEST_NAMESPACE, &hash, true, None).await;
        pods.push((pod, mirror_uid));
    }
    let checks = async {
        let (static_c, static_f) = (&pods[0].0, &pods[1].0);
        let mut containers = Vec::new();
        for (pod, _) in &pods {
            containers.push(cd.run_container(pod, "app", "sleep 600").await);
        }
        let p = wait_status(&api, static_c, "ContainersRunning True", Duration::from_secs(20), |s| {
            condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "True")
        })
        .await;
        assert_eq!(p["metadata"]["uid"], pods[0].1.as_str(), "the mirror pod itself");
        let p = wait_status(&api, static_f, "Running", Duration::from_secs(20), |s| {
            s["phase"] == "Running" && condition(s, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
        assert_eq!(
            p["status"]["containerStatuses"][0]["containerID"],
            format!("{}://{}", runtime_under_test(), containers[1])
        );

        // The static pods' containers stop: their death, not their absence.
        for ((pod, _), ctr) in pods.iter().zip(&containers) {
            cd.stop_container(ctr, 0).await;
            cd.stop_pod(pod).await;
        }
        let p = wait_status(
            &api,
            static_c,
            "ContainersRunning False",
            Duration::from_secs(20),
            |s| condition(s, "plegd.io/ContainersRunning").is_some_and(|c| c["status"] == "False"),
        )
        .await;
        assert_eq!(
            condition(&p["status"], "plegd.io/ContainersRunning").unwrap()["reason"],
            "ContainerDied",
            "{:#}",
            p["status"]
        );
        wait_status(
            &api,
            static_f,
            "the container terminated",
            Duration::from_secs(20),
            |s| s["containerStatuses"][0]["state"]["terminated"].is_object(),
        )
        .await;
        // Deleted and finished, the mirror pod stays as it is: the kubelet removes mirror pods
        // through their static pod's config.
        api.request_deletion(&static_f.namespace, &static_f.name, 30).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(pod_deletes(&api, static_f).await, 0, "a mirror pod is never deleted");
        let p = api.pod(&static_f.namespace, &static_f.name).await.expect("still there");
        assert_ne!(
            p["status"]["phase"], "Failed",
            "never forced terminal: {:#}",
            p["status"]
        );
        for (pod, _) in &pods {
            for status in stored_statuses(&api, pod).await {
                if let Some(c) = condition(&status, "plegd.io/ContainersRunning") {
                    assert_ne!(c["reason"], "ContainerRemoved", "{status:#}");
                }
            }
        }
    };
    let outcome = std::panic::AssertUnwindSafe(checks).catch_unwind().await;
    for (pod, _) in &pods {
        cd.cleanup(pod).await;
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Without the RBAC for deleting pods (deploy/full/rbac-full-mode.yaml), the finished pod keeps its final
/// status, plegd says what is missing once and counts it, and does not retry in a loop. A DELETE
/// whose uid precondition fails (the pod was recreated under its name) leaves the new pod alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_plegd_may_not_delete_keeps_its_final_status() {
    let Some(cd) = containerd().await else { return };
    // plegd's service account without deploy/full/rbac-full-mode.yaml: the apiserver's RBAC refuses the DELETE.
    let options = support::apiserver::Options {
        rbac: support::apiserver::Options::default()
            .rbac
            .into_iter()
            .filter(|f| !f.ends_with("rbac-full-mode.yaml"))
            .collect(),
        ..Default::default()
    };
    let api = Apiserver::start_with(options).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start_daemon(&cd, &api, dir.path(), "node-del-f", StatusMode::Full);
    let pod = start_pod(&cd, &api, pod_object("del-f", "node-del-f", &["app"], "Never"), true).await;
    // Runs until it is seen running and stopped, then succeeds.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 0' TERM; sleep 1000 & wait")
        .await;
    wait_status(&api, &pod, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    api.request_deletion(&pod.namespace, &pod.name, 30).await;
    cd.stop_container(&ctr, 10).await;
    wait_status(&api, &pod, "Succeeded", Duration::from_secs(20), |s| {
        s["phase"] == "Succeeded"
    })
    .await;
    cd.stop_pod(&pod).await;
    let text = || daemon.metrics.encode();
    support::wait_until("the forbidden DELETE", Duration::from_secs(10), || {
        text().contains("plegd_pod_deletions_total{result=\"forbidden\"} 1")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    // Asked again on the slow schedule of refused writes (5-10 s, then 10-20 s, ...; RBAC may
    // still be propagating), never in a loop.
    let deletes = pod_deletes(&api, &pod).await;
    assert!(
        (1..=2).contains(&deletes),
        "refused, asked again slowly: {deletes} DELETEs in 12 s"
    );
    let p = api.pod(&pod.namespace, &pod.name).await.expect("the pod stays");
    assert_eq!(p["status"]["phase"], "Succeeded");

    // The apiserver's uid precondition, as plegd's DELETE sends it.
    let client = api.client();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, &pod.namespace);
    let params = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: Some("another-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pods.delete(&pod.name, &params).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
        other => panic!("a DELETE with another uid must fail with 409: {other:?}"),
    }
    assert!(api.pod(&pod.namespace, &pod.name).await.is_some());
    cd.cleanup(&pod).await;
}

/// A status that is already right is never written again: a restarted plegd (as on a DaemonSet
/// rollout) and another component's condition cost no PATCH. The apiserver writes back what it
/// stores with Go's encoding (`"lastState": {}` on every container status, `"lastProbeTime": null`
/// on every condition); plegd compares statuses as the typed values the apiserver keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_that_is_right_is_not_written_again() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = "node-rewrite";
    let pod = start_pod(
        &cd,
        &api,
        pod_with_init("rewrite", node, &["init"], &["app", "side"], "Always"),
        true,
    )
    .await;
    let daemon = start_daemon(&cd, &api, dir.path(), node, StatusMode::Full);
    let init = cd.run_container(&pod, "init", "exit 0").await;
    let _ = init;
    cd.run_container(&pod, "app", "sleep 1000").await;
    cd.run_container(&pod, "side", "sleep 1000").await;
    wait_status(&api, &pod, "Running and Ready", Duration::from_secs(30), |s| {
        s["phase"] == "Running" && condition(s, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let stored = api.pod(&pod.namespace, &pod.name).await.unwrap();
    assert_eq!(
        stored["status"]["containerStatuses"][0]["lastState"],
        json!({}),
        "the apiserver writes back an empty lastState: {:#}",
        stored["status"]
    );
    // Let the first plegd finish its writes, then replace it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(daemon);
    api.clear_log().await;
    let daemon = start_daemon(&cd, &api, dir.path(), node, StatusMode::Full);
    // Long enough for every pod to be synced again (the resync is 10 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        api.status_patches(&pod.name).await,
        0,
        "a restarted plegd rewrote a right status"
    );

    // Another component adds a condition of its own: nothing of plegd's changed.
    api.patch_status_as_kubelet(
        &pod.namespace,
        &pod.name,
        json!({"conditions": [{"type": "example.com/Gate", "status": "True"}]}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        api.status_patches(&pod.name).await,
        0,
        "another writer's condition cost a PATCH"
    );
    let text = daemon.metrics.encode();
    assert!(text.contains("plegd_status_writes_total{result=\"ok\"} 0\n"), "{text}");
    cd.cleanup(&pod).await;
}

/// A container as the kubelet creates it for a termination message: an empty host file under
/// `<kubelet root>/pods/<uid>/containers/<name>/` mounted at /dev/termination-log, the path and
/// policy in its annotations, its log at `<logs>/<namespace>_<name>_<uid>/<name>/0.log` (the pod
/// sandbox's log directory, which `pod` must have been run with).
fn terminating(
    dir: &std::path::Path,
    pod: &TestPod,
    name: &str,
    policy: &str,
    script: &str,
) -> k8s_cri::v1::ContainerConfig {
    let host = dir.join(format!("kubelet/pods/{}/containers/{name}/1a2b3c4d", pod.uid));
    std::fs::create_dir_all(host.parent().unwrap()).unwrap();
    std::fs::write(&host, b"").unwrap();
    let mut config = support::containerd::attempt(0, script);
    config.annotations.extend([
        (ANNOTATION_MESSAGE_PATH.to_owned(), "/dev/termination-log".to_owned()),
        (ANNOTATION_MESSAGE_POLICY.to_owned(), policy.to_owned()),
    ]);
    config.mounts.push(k8s_cri::v1::Mount {
        container_path: "/dev/termination-log".into(),
        host_path: host.display().to_string(),
        ..Default::default()
    });
    config.log_path = format!("{name}/0.log");
    // The kubelet makes the container's log directory before it creates the container (CRI-O,
    // unlike containerd, makes none).
    std::fs::create_dir_all(std::path::Path::new(&pod.config.log_directory).join(name)).unwrap();
    config
}

fn pod_log_dir(dir: &std::path::Path, namespace: &str, name: &str, uid: &str) -> std::path::PathBuf {
    let logs = dir.join(format!("logs/{namespace}_{name}_{uid}"));
    std::fs::create_dir_all(&logs).unwrap();
    logs
}

/// Termination messages (the 1.36 kubelet's `getTerminationMessage`): a container that writes
/// its message file and exits 3 has it in its terminated state, its ContainerDied event and its
/// Kubernetes Event; under FallbackToLogsOnError a failing container that wrote none gets the
/// tail of its log; a container that succeeded under that policy gets nothing from its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_messages_from_the_file_and_the_log() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-msg", StatusMode::Full);
    let object = pod_object("msg", "node-msg", &["file", "logs", "quiet"], "Never");
    let created = api.create_pod(object).await;
    let uid = support::apiserver::uid(&created);
    let logs = pod_log_dir(dir.path(), TEST_NAMESPACE, "msg", &uid);
    let pod = cd.run_pod_as("msg", TEST_NAMESPACE, &uid, true, Some(&logs)).await;
    let file = terminating(
        dir.path(),
        &pod,
        "file",
        "File",
        "echo boom > /dev/termination-log; echo not this; exit 3",
    );
    let from_logs = terminating(
        dir.path(),
        &pod,
        "logs",
        "FallbackToLogsOnError",
        "echo starting; echo 'panic: \"disk\" full' >&2; exit 2",
    );
    let quiet = terminating(
        dir.path(),
        &pod,
        "quiet",
        "FallbackToLogsOnError",
        "echo all good; exit 0",
    );
    for (name, config) in [("file", file), ("logs", from_logs), ("quiet", quiet)] {
        let id = cd.create_container_from(&pod, name, config).await;
        cd.start_container(&id).await;
    }
    let p = wait_status(&api, &pod, "all three terminated", Duration::from_secs(30), |s| {
        s["phase"] == "Failed"
            && s["containerStatuses"]
                .as_array()
                .is_some_and(|l| l.len() == 3 && l.iter().all(|c| !c["state"]["terminated"].is_null()))
    })
    .await;
    let message = |name: &str| {
        p["status"]["containerStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()["state"]["terminated"]["message"]
            .clone()
    };
    assert_eq!(message("file"), json!("boom\n"), "{:#}", p["status"]);
    // stdout and stderr reach the log through two pipes: their lines may land in either order.
    let tail = message("logs");
    assert!(
        tail == json!("starting\npanic: \"disk\" full\n") || tail == json!("panic: \"disk\" full\nstarting\n"),
        "{:#}",
        p["status"]
    );
    assert_eq!(message("quiet"), Value::Null, "{:#}", p["status"]);

    // The Kubernetes Event of the death says why.
    support::wait_for(
        "the ContainerDied event with the message",
        Duration::from_secs(10),
        || async {
            api.events().await.iter().any(|e| {
                e["reason"] == "ContainerDied"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("exited with code 3 (Error): boom"))
            })
        },
    )
    .await;
    cd.cleanup(&pod).await;
}

/// activeDeadlineSeconds on a running pod under Always: past the deadline the status shows the
/// pod failing while its container still runs (the kubelet stops it then; plegd stops nothing),
/// and once the container is stopped the pod is Failed with DeadlineExceeded and the kubelet's
/// message, though Always would otherwise restart it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_expires_on_a_running_pod() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-deadline", StatusMode::Full);
    let mut object = pod_object("deadline", "node-deadline", &["app"], "Always");
    object["spec"]["activeDeadlineSeconds"] = json!(4);
    let pod = start_pod(&cd, &api, object, true).await;
    let stored = api.pod(&pod.namespace, &pod.name).await.unwrap();
    assert_eq!(stored["spec"]["activeDeadlineSeconds"], 4);
    let ctr = cd.run_container(&pod, "app", "sleep 600").await;
    let p = wait_status(&api, &pod, "Running", Duration::from_secs(20), |s| {
        s["phase"] == "Running"
    })
    .await;
    let started: k8s_openapi::jiff::Timestamp = p["status"]["startTime"].as_str().unwrap().parse().unwrap();

    let p = wait_status(
        &api,
        &pod,
        "Ready False past the deadline",
        Duration::from_secs(20),
        |s| condition(s, "Ready").is_some_and(|c| c["reason"] == "PodFailed"),
    )
    .await;
    let ready_at: k8s_openapi::jiff::Timestamp = condition(&p["status"], "Ready").unwrap()["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        ready_at.duration_since(started).as_secs() >= 4,
        "not before the deadline: {:#}",
        p["status"]
    );
    assert_eq!(
        p["status"]["phase"], "Running",
        "the container still runs: {:#}",
        p["status"]
    );

    cd.stop_container(&ctr, 0).await;
    let p = wait_status(&api, &pod, "Failed", Duration::from_secs(20), |s| {
        s["phase"] == "Failed"
    })
    .await;
    let s = &p["status"];
    assert_eq!(s["reason"], "DeadlineExceeded", "{s:#}");
    assert_eq!(
        s["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137,
        "{s:#}"
    );
    history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
    cd.cleanup(&pod).await;
}

/// A container's own `restartPolicy: Never` in a pod under Always (ContainerRestartRules): when
/// it fails it does not restart, so the pod fails — where the pod's policy alone says Running;
/// beside it, a container whose rule restarts it on exit code 42 keeps the pod Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_restart_policy_of_its_own() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-rules", StatusMode::Full);
    let mut never = pod_object("never", "node-rules", &["app"], "Always");
    never["spec"]["containers"][0]["restartPolicy"] = json!("Never");
    let mut ruled = pod_object("ruled", "node-rules", &["app"], "Always");
    ruled["spec"]["containers"][0]["restartPolicy"] = json!("Never");
    ruled["spec"]["containers"][0]["restartPolicyRules"] =
        json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    let never = start_pod(&cd, &api, never, true).await;
    let ruled = start_pod(&cd, &api, ruled, true).await;
    let stored = api.pod(&ruled.namespace, &ruled.name).await.unwrap();
    assert_eq!(
        stored["spec"]["containers"][0]["restartPolicyRules"][0]["action"], "Restart",
        "the apiserver keeps the rules"
    );
    cd.run_container(&never, "app", "sleep 1; exit 1").await;
    cd.run_container(&ruled, "app", "sleep 1; exit 42").await;

    let p = wait_status(&api, &never, "Failed", Duration::from_secs(20), |s| {
        s["phase"] == "Failed"
    })
    .await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );
    let p = wait_status(&api, &ruled, "exited 42", Duration::from_secs(20), |s| {
        s["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 42
    })
    .await;
    assert_eq!(
        p["status"]["phase"], "Running",
        "the rule restarts it: {:#}",
        p["status"]
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = api.pod(&ruled.namespace, &ruled.name).await.unwrap();
    assert_eq!(p["status"]["phase"], "Running", "{:#}", p["status"]);
    for pod in [&never, &ruled] {
        history::assert_kubelet_could_have_written(&api.pod_versions(&pod.namespace, &pod.name).await);
        cd.cleanup(pod).await;
    }
}

/// The end of a pod: deleted while its container is only created, its sandbox then stopped —
/// the container can never run (a runtime starts none in a stopped sandbox), so the pod is
/// finished: TerminatePod's status (the container terminated, ContainerStatusUnknown, 137),
/// Failed, and, its sandbox stopped, deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_with_a_container_only_created_in_a_stopped_sandbox() {
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start_daemon(&cd, &api, dir.path(), "node-created", StatusMode::Full);
    let pod = start_pod(
        &cd,
        &api,
        pod_object("created", "node-created", &["app"], "Always"),
        true,
    )
    .await;
    cd.create_container(&pod, "app", "sleep 600").await;
    wait_status(&api, &pod, "waiting", Duration::from_secs(20), |s| {
        !s["containerStatuses"][0]["state"]["waiting"].is_null() && s["containerStatuses"][0]["containerID"].is_string()
    })
    .await;
    api.request_deletion(&pod.namespace, &pod.name, 30).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pod_deletes(&api, &pod).await,
        0,
        "its sandbox is ready: the container may still start"
    );

    cd.stop_pod(&pod).await;
    support::wait_for("the finished pod is removed", Duration::from_secs(20), || async {
        api.pod(&pod.namespace, &pod.name).await.is_none()
    })
    .await;
    let versions = api.pod_versions(&pod.namespace, &pod.name).await;
    let last = &versions.last().unwrap()["status"];
    assert_eq!(last["phase"], "Failed", "{last:#}");
    let t = &last["containerStatuses"][0]["state"]["terminated"];
    let expected = match runtime_under_test() {
        // CRI-O (measured: 1.34) itself marks the container that never ran exited, with code 2,
        // when its sandbox stops: the runtime's state, written as the kubelet would write it.
        "cri-o" => (json!(2), json!("Error")),
        // containerd keeps it created: TerminatePod's status.
        _ => (json!(137), json!("ContainerStatusUnknown")),
    };
    assert_eq!((t["exitCode"].clone(), t["reason"].clone()), expected, "{last:#}");
    assert_eq!(pod_deletes(&api, &pod).await, 1);
    history::assert_kubelet_could_have_written(&versions);
    cd.cleanup(&pod).await;
}

/// A burst of exits on a real runtime, and plegd stopped at its first status write for them:
/// every container the runtime reported exited when the stop was asked has its exit written
/// before plegd is gone. The relist under way finishes, one last relist sees the exits no trigger had named yet,
/// and what was computed is handed to the status writer within --shutdown-timeout. (Stopped
/// together, or without the last relist, exits of such a burst never reached the apiserver.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_in_a_burst_of_exits_writes_every_exit_before_it() {
    const PODS: usize = 30;
    let Some(cd) = containerd().await else { return };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The deadline for what was computed to reach the apiserver: ample on a loaded machine.
    let daemon = start_daemon_with(&cd, &api, dir.path(), "node-burst", StatusMode::Full, |o| {
        o.shutdown_timeout = Duration::from_secs(30);
    });
    let mut pods = Vec::with_capacity(PODS);
    for i in 0..PODS {
        let object = pod_object(&format!("burst{i}"), "node-burst", &["app"], "Never");
        pods.push(start_pod(&cd, &api, object, true).await);
    }
    // Every container exits at the same moment, once all are running.
    let due = tokio::time::Instant::now() + Duration::from_millis(300) * PODS as u32 + Duration::from_secs(2);
    let mut ids = Vec::with_capacity(PODS);
    for pod in &pods {
        ids.push(cd.run_exiting_at(pod, "app", due, 7).await);
    }
    let patches = || api.plegd_status_patches();
    tokio::time::sleep_until(due - Duration::from_millis(500)).await;
    let before = patches().await;
    // The first exit in the apiserver (looked for there, not counted in PATCHes: on a slow
    // machine a Running status may still be on its way when the exits are due).
    let listed: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(api.client(), TEST_NAMESPACE);
    let on_node = kube::api::ListParams::default().fields("spec.nodeName=node-burst");
    support::wait_for("the first exit written", Duration::from_secs(30), || async {
        let Ok(list) = listed.list(&on_node).await else {
            return false;
        };
        list.items.iter().any(|p| {
            let statuses = p.status.as_ref().and_then(|s| s.container_statuses.as_deref());
            statuses.is_some_and(|cs| {
                cs.iter().any(|c| {
                    let terminated = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                    terminated.is_some_and(|t| t.exit_code == 7)
                })
            })
        })
    })
    .await;
    // What the runtime reports exited when the stop is asked (its CRI state can lag an exit by
    // seconds under load; containerd's exit events, which plegd writes from, come before it).
    let exited = || async {
        let listed = cd
            .client
            .clone()
            .list_containers(k8s_cri::v1::ListContainersRequest {
                filter: Some(k8s_cri::v1::ContainerFilter {
                    state: Some(k8s_cri::v1::ContainerStateValue {
                        state: k8s_cri::v1::ContainerState::ContainerExited as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .expect("ListContainers");
        let ids: std::collections::HashSet<String> = listed.into_inner().containers.into_iter().map(|c| c.id).collect();
        ids
    };
    support::wait_for(
        "the runtime reporting one of the exits",
        Duration::from_secs(30),
        || async { exited().await.iter().any(|id| ids.contains(id)) },
    )
    .await;
    let reported_exited = exited().await;
    let Daemon { _run: run, .. } = daemon;
    let stopping = Instant::now();
    run.stop().await;
    let stopped_in = stopping.elapsed();
    let written_by_then = patches().await - before;

    let mut exited_before = 0;
    for (pod, id) in pods.iter().zip(&ids) {
        if !reported_exited.contains(id) {
            continue;
        }
        exited_before += 1;
        let p = api.pod(&pod.namespace, &pod.name).await.unwrap();
        let terminated = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            terminated["exitCode"], 7,
            "{}: reported exited before the stop, not written ({written_by_then} status writes since the exits; stopped in {stopped_in:?})\n{:#}",
            pod.name, p["status"]
        );
    }
    eprintln!(
        "{exited_before} of {PODS} reported exited before the stop; {written_by_then} status writes since the exits; stopped in {stopped_in:?}"
    );
    assert!(exited_before > 0);
    for pod in &pods {
        cd.cleanup(pod).await;
    }
}
