//! A failed runtime read is not a fact (the kubelet's FailedSync rule). `plegd run` as a user runs
//! it, against the fake CRI server and the test apiserver built from Kubernetes' own code: while `ContainerStatus` of one container
//! fails, the other container of the pod exits, the pod's labels change and a resync passes. Every
//! status version the apiserver stored is checked: nothing is written from the failed reads, and
//! the exit lands once the runtime answers again. FailedSync shows as a counter, one log line per
//! pod per outage and a Kubernetes Event.

use plegd_test_support as support;

use std::time::Duration;

use serde_json::Value;
use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::RunningPlegd as Plegd;
use support::wait_for;

const NODE: &str = "node-fs";
/// The container whose status cannot be read (c0), and the one that exits meanwhile (c1), of the
/// pod with this uid.
fn stuck(uid: &str) -> String {
    format!("ctr-{uid}-0")
}

fn exits(uid: &str) -> String {
    format!("ctr-{uid}-1")
}

fn start(cri: &FakeServer, api: &Apiserver, dir: &std::path::Path, mode: &str) -> Plegd {
    let kubeconfig = api.kubeconfig_as(dir, &Identity::Plegd(NODE.into()));
    let mut command = support::process::plegd_run(env!("CARGO_BIN_EXE_plegd"), NODE, &cri.path, &kubeconfig);
    command
        .args(["--status-mode", mode, "--triggers", "none", "--emit-events"])
        .args(["--node-ip", "192.0.2.10"]);
    Plegd::spawn(command, dir)
}

async fn status(api: &Apiserver) -> Value {
    api.pod("default", "web")
        .await
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

fn container<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["containerStatuses"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The condition of `type_` in `status`; null when it has none.
fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    support::apiserver::condition(status, type_).unwrap_or(&Value::Null)
}

/// The outage: `ContainerStatus` of STUCK fails, EXITS exits with 3, the pod's labels change, and
/// 12 s pass (a 10 s resync among them). Returns the status the apiserver held before it.
async fn outage(cri: &FakeServer, api: &Apiserver, uid: &str, plegd: &Plegd) -> Value {
    let before = status(api).await;
    let patches = api.status_patches("web").await;
    cri.fake.fail_id(
        "ContainerStatus",
        &stuck(uid),
        tonic::Status::unavailable("runtime is busy"),
    );
    cri.fake.exit_container(&exits(uid), 3);
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.update_pod("default", "web", |pod| {
        pod["metadata"]["labels"] = serde_json::json!({"tier": "front"})
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;

    assert_eq!(
        api.status_patches("web").await,
        patches,
        "no status is written from a failed read"
    );
    assert_eq!(status(api).await, before, "the apiserver keeps the last good status");
    let failed = plegd.metric("plegd_pod_failed_syncs_total");
    assert!(failed >= 2.0, "FailedSync counted at each attempt: {failed}");
    assert_eq!(
        plegd.log_lines("FailedSync: error determining status"),
        1,
        "one log line per pod per outage"
    );
    let events: Vec<Value> = api
        .events()
        .await
        .into_iter()
        .filter(|e| e["reason"] == "FailedSync")
        .collect();
    assert_eq!(events.len(), 1, "one FailedSync Event per outage: {events:?}");
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("error determining status: ") && note.contains("runtime is busy"),
        "{note}"
    );
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(events[0]["regarding"]["name"], "web");

    cri.fake.heal_id("ContainerStatus", &stuck(uid));
    before
}

/// The pod `web` with containers c0 (stuck) and c1 (exits), both running. Returns its uid.
async fn setup(cri: &FakeServer, api: &Apiserver) -> String {
    let uid = api.create_bound_pod("web", NODE, 2, "Always").await;
    cri.fake.add_running_pod(&uid, "web", 2);
    uid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_mode_writes_nothing_from_a_failed_read() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uid = setup(&cri, &api).await;
    let plegd = start(&cri, &api, dir.path(), "full");
    wait_for("both containers running and ready", Duration::from_secs(30), || async {
        let s = status(&api).await;
        condition(&s, "Ready")["status"] == "True"
    })
    .await;

    outage(&cri, &api, &uid, &plegd).await;

    wait_for("the exit of c1 written", Duration::from_secs(15), || async {
        !container(&status(&api).await, "c1")["state"]["terminated"].is_null()
    })
    .await;
    let last = status(&api).await;
    assert_eq!(container(&last, "c1")["state"]["terminated"]["exitCode"], 3);
    assert!(!container(&last, "c0")["state"]["running"].is_null(), "{last}");

    // Every version the apiserver stored is one the kubelet could have written.
    let versions = api.pod_versions("default", "web").await;
    assert!(versions.len() >= 3, "created, Running, c1 exited: {}", versions.len());
    for pod in &versions {
        let s = &pod["status"];
        if s["containerStatuses"].is_null() {
            continue; // as created
        }
        let c0 = container(s, "c0");
        assert!(!c0["state"]["running"].is_null(), "c0 never stopped: {s}");
        assert_eq!(c0["restartCount"], 0, "no phantom restart: {s}");
        assert!(c0["lastState"].as_object().is_none_or(|o| o.is_empty()), "{s}");
        let c1 = container(s, "c1");
        assert_eq!(c1["restartCount"], 0, "{s}");
        assert!(
            !c1["state"]["running"].is_null() || c1["state"]["terminated"]["exitCode"] == 3,
            "c1 is running or exited with 3, nothing else: {s}"
        );
        assert_eq!(s["phase"], "Running", "{s}");
    }
    assert_eq!(
        plegd.log_lines("runtime status can be read again"),
        1,
        "the end of the outage is logged once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_mode_never_flips_on_a_read_error() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uid = setup(&cri, &api).await;
    let plegd = start(&cri, &api, dir.path(), "conditions");
    let running = "plegd.io/ContainersRunning";
    wait_for("plegd's condition True", Duration::from_secs(30), || async {
        condition(&status(&api).await, running)["status"] == "True"
    })
    .await;

    outage(&cri, &api, &uid, &plegd).await;

    wait_for("plegd's condition False", Duration::from_secs(15), || async {
        condition(&status(&api).await, running)["status"] == "False"
    })
    .await;
    let last = status(&api).await;
    let c = condition(&last, running);
    assert_eq!(c["reason"], "ContainerDied", "{c}");
    assert_eq!(c["message"], "container c1 exited with code 3 (Error)", "{c}");

    // plegd's condition went True → False once, for the real exit, and nothing else moved.
    let mut seen = Vec::new();
    for pod in api.pod_versions("default", "web").await {
        let c = condition(&pod["status"], running);
        if c.is_null() {
            continue;
        }
        let state = (c["status"].clone(), c["reason"].clone());
        if seen.last() != Some(&state) {
            seen.push(state);
        }
        assert_eq!(pod["status"]["phase"], "Pending", "the kubelet's fields are left alone");
    }
    assert_eq!(
        seen,
        [
            (Value::from("True"), Value::from("AllContainersRunning")),
            (Value::from("False"), Value::from("ContainerDied"))
        ]
    );
}
