//! Status propagation under churn: 200 pods on the fake CRI server (over a real unix socket) and the
//! test apiserver built from Kubernetes' own code (k8s.io/apiserver 1.36 on etcd, processes of their
//! own), `plegd run` in full mode in process, speaking as its own service account bound to its node.
//! Each pod is created in the apiserver first (the server gives its uid), then started in the
//! runtime with that uid. After every pod is Running, each pod's container exits once (20 changes a
//! second). Measured from the server's request log, plegd's requests only: status PATCHes per
//! change, GETs of single pods, and the latency from the runtime change to its PATCH's response.
//! Two runs side by side, each on a fresh apiserver: relist every 1 s without triggers, and
//! CRI-event triggers (relist 1 s).
//!
//!     cargo bench --bench status_churn
//!     cargo bench --bench status_churn -- --pods 500 --rate 50

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::daemon as daemon_support;
use plegd_test_support::fake_cri;
mod stats;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apiserver::{Apiserver, Identity, PLEGD_USER};
use args::arg;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use stats::percentile;

const NODE: &str = "bench";

/// The names of the pods whose first container the apiserver shows terminated. One list per look
/// rather than a GET per pod: the apiserver shares the two cores with plegd.
async fn terminated(pods: &Api<Pod>) -> HashSet<String> {
    pods.list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.terminated.is_some())
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}

struct Run {
    patches_per_change: f64,
    single_gets: usize,
    /// Change → PATCH response, ms, ascending.
    latencies: Vec<f64>,
    requests: usize,
    /// plegd's requests answered with an error status.
    failed: usize,
}

async fn run(pods: usize, rate: f64, triggers: TriggerMode) -> Run {
    let server = fake_cri::FakeServer::start().await;
    let api = Apiserver::start_with(apiserver::Options {
        plegd_nodes: vec![NODE.into()],
        ..apiserver::Options::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut uids = Vec::with_capacity(pods);
    for i in 0..pods {
        let name = format!("pod-{i}");
        let uid = api.create_bound_pod(&name, NODE, 1, "Always").await;
        server.fake.add_running_pod(&uid, &name, 1);
        uids.push(uid);
    }
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd(NODE.into()));
    let mut options = daemon_support::options(&server.path, kubeconfig, NODE, StatusMode::Full);
    options.triggers = triggers;
    let daemon = daemon_support::spawn(options, Arc::new(Metrics::new()));
    // Every pod Running first.
    api.wait_all_running(pods, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.clear_log().await;

    // Churn: each pod's container exits once.
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut changed_at = Vec::with_capacity(pods);
    let mut next = Instant::now();
    for (i, uid) in uids.iter().enumerate() {
        let id = format!("ctr-{uid}-0");
        server.fake.exit_container(&id, 1 + (i as i32 % 5));
        // The request log's times are the server's wall clock (same machine).
        changed_at.push(SystemTime::now());
        if triggers != TriggerMode::None {
            server.fake.emit_event(&id, Some(uid));
        }
        next += gap;
        tokio::time::sleep_until(next.into()).await;
    }
    let pod_api: Api<Pod> = Api::namespaced(api.client(), "default");
    let deadline = Instant::now() + Duration::from_secs(60);
    while terminated(&pod_api).await.len() < pods {
        assert!(Instant::now() < deadline, "not every change reached the apiserver");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let resyncs run, to count any extra write they would make.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let log = api.requests_by(PLEGD_USER).await;
    let mut latencies = Vec::new();
    let mut patches = 0;
    for (i, at) in changed_at.iter().enumerate() {
        let path = format!("/api/v1/namespaces/default/pods/pod-{i}/status");
        let mine: Vec<_> = log
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path && r.status < 300)
            .collect();
        patches += mine.len();
        if let Some(first) = mine.iter().find(|r| r.at >= *at) {
            let latency = first.at.duration_since(*at).unwrap_or_default();
            latencies.push(latency.as_secs_f64() * 1e3);
        }
    }
    let single_gets = log
        .iter()
        .filter(|r| r.authorization().as_deref() == Some("/pods:get"))
        .count();
    let failed = log.iter().filter(|r| r.status >= 400).count();
    latencies.sort_by(f64::total_cmp);
    daemon.stop().await;
    Run {
        patches_per_change: patches as f64 / pods as f64,
        single_gets,
        latencies,
        requests: log.len(),
        failed,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods = arg("--pods").unwrap_or(200.0) as usize;
    let rate = arg("--rate").unwrap_or(20.0);
    println!(
        "\n### {pods} pods, one container exit per pod at {rate}/s, full mode (fake CRI + test apiserver, k8s.io/apiserver 1.36 on etcd)\n"
    );
    println!(
        "| run | PATCHes per change | GETs of single pods | change → PATCH p50 ms | p99 ms | max ms | plegd's requests | of them failed |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, mode) in [
        ("relist 1 s, no triggers", TriggerMode::None),
        ("relist 1 s + CRI-event triggers", TriggerMode::Cri),
    ] {
        let r = run(pods, rate, mode).await;
        let lat = &r.latencies;
        assert!(!lat.is_empty(), "{name}: no PATCH followed a change");
        println!(
            "| {name} | {:.2} | {} | {:.1} | {:.1} | {:.1} | {} | {} |",
            r.patches_per_change,
            r.single_gets,
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            lat[lat.len() - 1],
            r.requests,
            r.failed
        );
    }
}
