//! plegd's RBAC is exactly what it uses, mode by mode. `plegd run` (the binary, as a user runs it)
//! goes through a pod's life against the fake CRI server and the test apiserver — running, deleted,
//! both containers exiting (two Kubernetes Events for one pod: a create, then a series patch) — and
//! every request it made is turned into what RBAC would authorize it as. That set must equal
//! what the ClusterRoles of the files the README names for the mode grant: nothing used that is
//! not granted, nothing granted that is not used.

mod support;

use std::collections::BTreeSet;
use std::process::Child;
use std::time::Duration;

use support::fake_apiserver::TestApiserver;
use support::fake_cri::FakeServer;
use support::manifests::granted;
use support::wait_until;

const NODE: &str = "node-rbac";

struct Plegd(Child);

impl Drop for Plegd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The requests `plegd run --status-mode mode` makes through a pod's life, as RBAC sees them.
async fn used(mode: &str, emit_events: bool) -> Vec<String> {
    let cri = FakeServer::start().await;
    let api = TestApiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    cri.fake.add_running_pod("rbac-1", "web", 2);
    api.create_bound_pod("web", "rbac-1", NODE, 2, "Never");
    let mut command = support::process::plegd_run(
        env!("CARGO_BIN_EXE_plegd"),
        NODE,
        &cri.path,
        &api.kubeconfig(dir.path()),
    );
    command
        .args(["--status-mode", mode, "--triggers", "none", "--relist-period", "200ms"])
        .args(["--metrics-address", "off"]);
    if emit_events {
        command.arg("--emit-events");
    }
    let _plegd = Plegd(command.spawn().expect("spawn plegd"));
    let status = |api: &TestApiserver| {
        api.pod("default", "web")
            .map(|p| p["status"].clone())
            .unwrap_or_default()
    };
    let own_condition = |api: &TestApiserver| {
        status(api)["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "plegd.io/ContainersRunning").cloned())
            .map(|c| c["status"].clone())
    };
    match mode {
        "full" => {
            wait_until("Running", Duration::from_secs(20), || {
                status(&api)["phase"] == "Running"
            })
            .await
        }
        "conditions" => {
            wait_until("condition True", Duration::from_secs(20), || {
                own_condition(&api) == Some("True".into())
            })
            .await
        }
        _ => {
            wait_until("the pod watch", Duration::from_secs(20), || {
                api.requests()
                    .iter()
                    .any(|r| r.authorization().as_deref() == Some("/pods:watch"))
            })
            .await
        }
    }

    // Deleted while it runs: in full mode plegd removes it once its containers have stopped and its
    // final status is written (a pod already terminal would be removed by the apiserver itself).
    api.request_deletion("default", "web", 30);
    cri.fake.exit_container("ctr-rbac-1-0", 1);
    cri.fake.exit_container("ctr-rbac-1-1", 2);
    if emit_events {
        wait_until("two events in one series", Duration::from_secs(20), || {
            api.events().iter().any(|e| e["series"]["count"] == 2)
        })
        .await;
    }
    match mode {
        "full" => {}
        "conditions" => {
            wait_until("condition False", Duration::from_secs(20), || {
                own_condition(&api) == Some("False".into())
            })
            .await
        }
        _ => tokio::time::sleep(Duration::from_secs(1)).await,
    }

    if mode == "full" {
        wait_until("the finished pod deleted", Duration::from_secs(20), || {
            api.pod("default", "web").is_none()
        })
        .await;
    } else {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let used: BTreeSet<String> = api.requests().iter().filter_map(|r| r.authorization()).collect();
    used.into_iter().collect()
}

fn files(mode: &str, emit_events: bool) -> Vec<&'static str> {
    // As README.md ("RBAC") and deploy/rbac.yaml's header say.
    let mut files = vec!["deploy/rbac.yaml"];
    if mode != "shadow" {
        files.push("deploy/rbac-status.yaml");
    }
    if mode == "full" {
        files.push("deploy/rbac-full-mode.yaml");
    }
    if emit_events {
        files.push("deploy/rbac-events.yaml");
    }
    files
}

async fn check(mode: &str, emit_events: bool) {
    let used = used(mode, emit_events).await;
    let files = files(mode, emit_events);
    assert_eq!(
        used,
        granted(&files),
        "--status-mode {mode}{}: what plegd used (left) vs what {files:?} grant (right)",
        if emit_events { " --emit-events" } else { "" }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_only_reads() {
    check("shadow", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_mode_as_the_daemonset_runs_it() {
    check("conditions", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_mode_with_events() {
    check("conditions", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_mode_with_events() {
    check("full", true).await;
}
