//! Sustained churn: `plegd run` (in process, full mode, default event channel capacity, CRI-event
//! triggers, relist 1 s) while, every second for a minute, 100 new pods start and 100 older ones
//! have their container exit (fake CRI server + test apiserver). Reported: lifecycle events per
//! second, channel discards, status PATCHes per status change, and whether every final state landed.
//!
//!     cargo bench --bench sustained_churn                      # 100/s for 60 s
//!     cargo bench --bench sustained_churn -- --qps 300        # writers allowed 300 PATCHes/s
//!     cargo bench --bench sustained_churn -- --rate 50 --seconds 30

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

use std::sync::Arc;
use std::time::{Duration, Instant};

use args::arg;
use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rate = arg("--rate").unwrap_or(100);
    let seconds = arg("--seconds").unwrap_or(60);
    let lag = 50; // a pod's container exits 50 starts after it started (half a second at 100/s)
    // The status writers' client-side limit (plegd's default, like the kubelet's, is 50/s).
    let qps = arg("--qps").unwrap_or(50);

    let cri = fake_cri::FakeServer::start().await;
    let api = apiserver::TestApiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = Arc::new(Metrics::new());
    let mut options = daemon_support::options(&cri.path, api.kubeconfig(dir.path()), "churn", StatusMode::Full);
    options.triggers = TriggerMode::Cri;
    options.manager.qps = qps as f64;
    options.manager.burst = (qps * 2) as u32;
    let daemon = daemon_support::spawn(options, metrics.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    let total = (rate * seconds) as usize;
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut next = Instant::now();
    for i in 0..total + lag {
        if i < total {
            let uid = format!("churn-{i:05}");
            // The apiserver learns of the pod as the runtime starts it, as with a kubelet.
            api.create_bound_pod(&format!("pod-{i}"), &uid, "churn", 1, "Never");
            cri.fake.add_running_pod(&uid, &format!("pod-{i}"), 1);
            cri.fake.emit_event(&format!("ctr-{uid}-0"), Some(&uid));
        }
        if i >= lag {
            let uid = format!("churn-{:05}", i - lag);
            cri.fake.exit_container(&format!("ctr-{uid}-0"), 3);
            cri.fake.emit_event(&format!("ctr-{uid}-0"), Some(&uid));
        }
        next += gap;
        tokio::time::sleep_until(next.into()).await;
    }
    let churn_time = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    let landed = |i: usize| {
        api.pod("default", &format!("pod-{i}"))
            .is_some_and(|p| p["status"]["phase"] == "Failed")
    };
    while !(0..total).all(landed) {
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled = started.elapsed();
    let final_ok = (0..total).filter(|i| landed(*i)).count();
    let events: u64 = ["ContainerStarted", "ContainerDied", "ContainerRemoved", "PodSync"]
        .iter()
        .map(|k| {
            metrics
                .events_sent
                .get_or_create(&plegd::metrics::KindLabel { kind: (*k).into() })
                .get()
        })
        .sum();
    let patches = api
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.status < 300)
        .count();
    println!(
        "\n### Sustained churn: {rate} starts + {rate} exits per second for {seconds} s (full mode, triggers, default capacity, --status-qps {qps})\n"
    );
    println!(
        "| pods | churn time | lifecycle events | events / s | discards | status PATCHes | PATCHes per pod (start + exit = 2 changes) | final states landed | all landed after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {total} | {:.1} s | {events} | {:.0} | {} | {patches} | {:.2} | {final_ok}/{total} | {:.1} s |",
        churn_time.as_secs_f64(),
        events as f64 / churn_time.as_secs_f64(),
        metrics.discard_events.get(),
        patches as f64 / total as f64,
        settled.as_secs_f64()
    );
    daemon.stop().await;
}
