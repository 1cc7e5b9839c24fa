//! Status propagation under churn: 200 pods on the fake CRI server (over a real unix socket) and the
//! test apiserver (loopback HTTP), `plegd run` in full mode in process. After every pod is Running,
//! each pod's container exits once (20 changes a second). Measured: status PATCHes per observed
//! change, GETs of single pods, and the latency from the runtime change to its PATCH landing.
//! Two runs side by side: relist every 1 s without triggers, and CRI-event triggers (relist 1 s).
//!
//!     cargo bench --bench status_churn
//!     cargo bench --bench status_churn -- --pods 500 --rate 50

#[allow(dead_code)]
#[path = "../support/fake_apiserver.rs"]
mod apiserver;
#[path = "args.rs"]
mod args;
#[allow(dead_code)]
#[path = "../support/daemon.rs"]
mod daemon_support;
#[allow(dead_code)]
#[path = "../support/fake_cri.rs"]
mod fake_cri;
#[path = "stats.rs"]
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use args::arg;
use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use stats::percentile;

async fn run(pods: usize, rate: f64, triggers: TriggerMode) -> (f64, usize, Vec<f64>, usize) {
    let server = fake_cri::FakeServer::start().await;
    let api = apiserver::TestApiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..pods {
        let uid = format!("bench-{i:04}");
        server.fake.add_running_pod(&uid, &format!("pod-{i}"), 1);
        api.create_bound_pod(&format!("pod-{i}"), &uid, "bench", 1, "Always");
    }
    let mut options = daemon_support::options(&server.path, api.kubeconfig(dir.path()), "bench", StatusMode::Full);
    options.triggers = triggers;
    let daemon = daemon_support::spawn(options, Arc::new(Metrics::new()));
    // Every pod Running first.
    api.wait_all_running(pods, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.clear_log();

    // Churn: each pod's container exits once.
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut changed_at = Vec::with_capacity(pods);
    for i in 0..pods {
        let uid = format!("bench-{i:04}");
        let id = format!("ctr-{uid}-0");
        server.fake.exit_container(&id, 1 + (i as i32 % 5));
        changed_at.push(Instant::now());
        if triggers != TriggerMode::None {
            server.fake.emit_event(&id, Some(&uid));
        }
        tokio::time::sleep(gap).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..pods).any(|i| {
        api.pod("default", &format!("pod-{i}"))
            .is_none_or(|p| p["status"]["containerStatuses"][0]["state"]["terminated"].is_null())
    }) {
        assert!(Instant::now() < deadline, "not every change reached the apiserver");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let resyncs run, to count any extra write they would make.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let log = api.requests();
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
            latencies.push(first.at.duration_since(*at).as_secs_f64() * 1e3);
        }
    }
    let gets = log
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/api/v1/namespaces/"))
        .count();
    latencies.sort_by(f64::total_cmp);
    daemon.stop().await;
    (patches as f64 / pods as f64, gets, latencies, log.len())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods = arg("--pods").unwrap_or(200.0) as usize;
    let rate = arg("--rate").unwrap_or(20.0);
    println!("\n### {pods} pods, one container exit per pod at {rate}/s, full mode (fake CRI + test apiserver)\n");
    println!(
        "| run | PATCHes per change | GETs of single pods | change → PATCH p50 ms | p99 ms | max ms | requests |\n|---|---|---|---|---|---|---|"
    );
    for (name, mode) in [
        ("relist 1 s, no triggers", TriggerMode::None),
        ("relist 1 s + CRI-event triggers", TriggerMode::Cri),
    ] {
        let (per_change, gets, lat, requests) = run(pods, rate, mode).await;
        println!(
            "| {name} | {per_change:.2} | {gets} | {:.1} | {:.1} | {:.1} | {requests} |",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat[lat.len() - 1]
        );
    }
}
