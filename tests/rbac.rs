//! Each install grants plegd exactly what it uses. An overlay (deploy/<mode>, with the events
//! component where events are on) is rendered by kustomize as `kubectl apply -k` renders it; `plegd
//! run` (the binary, as a user runs it) with the flags of the overlay's DaemonSet goes through a
//! pod's life against the fake CRI server and the test apiserver built from Kubernetes' own code,
//! which authorizes it with the rendered install's ClusterRoles alone (a request they do not grant
//! is a 403, and none may happen) — running, deleted, both containers exiting (two Kubernetes
//! Events for one pod: two creates, one per exit) — and every request it made is turned into
//! what RBAC would authorize it as. That set must equal what the install's ClusterRoles grant:
//! nothing used that is not granted, nothing granted that is not used. The server runs without
//! streaming lists (WatchList off, as before Kubernetes 1.34), where plegd lists its node's pods in
//! pages: there it uses every right granted; where the server streams lists it uses one fewer, no
//! `list` (tests/informer_lists.rs), which the install keeps for such servers.

use plegd_test_support as support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::apiserver::{Apiserver, Identity, Options, PLEGD_USER};
use support::fake_cri::FakeServer;
use support::manifests::{granted_by, render};
use support::process::KillOnDrop;
use support::wait_for;

const NODE: &str = "node-rbac";

/// The flags of the install's DaemonSet that decide what plegd asks of the apiserver.
fn mode_flags(install: &[Value]) -> Vec<String> {
    let ds = install.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .filter(|a| a.starts_with("--status-mode=") || *a == "--emit-events")
        .map(str::to_owned)
        .collect()
}

/// The requests plegd makes through a pod's life with the flags of `install` and its RBAC alone
/// (`rendered`), as RBAC sees them.
async fn used(mode: &str, emit_events: bool, rendered: &std::path::Path, install: &[Value]) -> Vec<String> {
    let flags = mode_flags(install);
    assert!(flags.contains(&format!("--status-mode={mode}")), "{flags:?}");
    assert_eq!(flags.contains(&"--emit-events".to_owned()), emit_events, "{flags:?}");
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(Options {
        rbac: vec![rendered.display().to_string()],
        args: vec!["--feature-gates=WatchList=false".into()],
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let uid = api.create_bound_pod("web", NODE, 2, "Never").await;
    cri.fake.add_running_pod(&uid, "web", 2);
    let metrics_port = support::process::free_port();
    let tls = support::tls::certificates(dir.path(), "metrics", &["localhost"]);
    // Known to the server well before the scrape below.
    let token = api.token_for(&Identity::MetricsReader);
    let mut command = support::process::plegd_run(
        env!("CARGO_BIN_EXE_plegd"),
        NODE,
        &cri.path,
        &api.kubeconfig_as(dir.path(), &Identity::Plegd(NODE.into())),
    );
    command
        .args(&flags)
        .args(["--triggers", "none", "--relist-period", "200ms"])
        .args(["--metrics-address", &format!("127.0.0.1:{metrics_port}")])
        .args(["--metrics-auth", "kubernetes"])
        .arg("--metrics-tls-cert-file")
        .arg(&tls.cert)
        .arg("--metrics-tls-private-key-file")
        .arg(&tls.key);
    let _plegd = KillOnDrop(command.spawn().expect("spawn plegd"));
    match mode {
        "full" => {
            wait_for("Running", Duration::from_secs(20), || async {
                status(&api).await["phase"] == "Running"
            })
            .await
        }
        "conditions" => {
            wait_for("condition True", Duration::from_secs(20), || async {
                own_condition(&api).await == Some("True".into())
            })
            .await
        }
        _ => {
            wait_for("the pod watch", Duration::from_secs(20), || async {
                api.requests_by(PLEGD_USER)
                    .await
                    .iter()
                    .any(|r| r.authorization().as_deref() == Some("/pods:watch"))
            })
            .await
        }
    }

    // A scrape of /metrics with a token: plegd asks the apiserver who it is and whether it may
    // (the install alone does not let it: 403).
    let trust = support::tls::Trust::Ca(tls.ca.clone());
    let scraped = tokio::task::spawn_blocking(move || {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port));
        support::tls::https_get(address, "localhost", &trust, "/metrics", Some(&token)).map(|(code, _)| code)
    })
    .await
    .unwrap();
    assert_eq!(scraped, Ok(403));

    // Deleted while it runs: in full mode plegd removes it once its containers and its sandbox have
    // stopped and its final status is written (a pod already terminal would be removed by the
    // apiserver itself).
    api.request_deletion("default", "web", 30).await;
    cri.fake.exit_container(&format!("ctr-{uid}-0"), 1);
    cri.fake.exit_container(&format!("ctr-{uid}-1"), 2);
    cri.fake.set_sandbox_ready(&format!("sb-{uid}"), false);
    if emit_events {
        // One Event per exit, each created (never a PATCH of an earlier one's series).
        wait_for("two ContainerDied Events", Duration::from_secs(20), || async {
            api.events()
                .await
                .iter()
                .filter(|e| e["reason"] == "ContainerDied")
                .count()
                >= 2
        })
        .await;
    }
    match mode {
        "full" => {}
        "conditions" => {
            wait_for("condition False", Duration::from_secs(20), || async {
                own_condition(&api).await == Some("False".into())
            })
            .await
        }
        _ => tokio::time::sleep(Duration::from_secs(1)).await,
    }

    if mode == "full" {
        wait_for("the finished pod deleted", Duration::from_secs(20), || async {
            api.pod("default", "web").await.is_none()
        })
        .await;
        // The apiserver logs a request once it has answered it: the pod can be seen gone before
        // the DELETE that removed it is in the log.
        wait_for(
            "plegd's DELETE in the apiserver's request log",
            Duration::from_secs(20),
            || async { api.requests_by(PLEGD_USER).await.iter().any(|r| r.method == "DELETE") },
        )
        .await;
    } else {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let requests = api.requests_by(PLEGD_USER).await;
    let forbidden: Vec<String> = requests
        .iter()
        .filter(|r| r.status == 403)
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(
        forbidden.is_empty(),
        "deploy/{mode}: the install's RBAC refused plegd: {forbidden:?}"
    );
    let used: BTreeSet<String> = requests.iter().filter_map(|r| r.authorization()).collect();
    used.into_iter().collect()
}

async fn status(api: &Apiserver) -> serde_json::Value {
    api.pod("default", "web")
        .await
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

async fn own_condition(api: &Apiserver) -> Option<serde_json::Value> {
    status(api).await["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "plegd.io/ContainersRunning").cloned())
        .map(|c| c["status"].clone())
}

async fn check(mode: &str, emit_events: bool) {
    let dir = tempfile::tempdir().unwrap();
    let components: &[&str] = if emit_events { &["events"] } else { &[] };
    let (rendered, install) = render(mode, components, dir.path());
    let used = used(mode, emit_events, &rendered, &install).await;
    let name = format!("deploy/{mode} + {components:?}");
    assert_eq!(
        used,
        granted_by(&[(name.clone(), install)]),
        "{name}: what plegd used (left) vs what the install grants (right)"
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
