//! Sustained churn: `plegd run` (in process, full mode, default event channel capacity, CRI-event
//! triggers, relist 1 s) while, every second for a minute, 100 new pods start and 100 older ones
//! have their container exit (fake CRI server + the test apiserver built from Kubernetes' own code,
//! k8s.io/apiserver 1.36 on etcd). Each pod is created in the apiserver first (the server gives its
//! uid), then started in the runtime with that uid. plegd speaks as its own service account, bound
//! to its node; only its own requests are counted. Reported: lifecycle events per second, channel
//! discards, status PATCHes per status change, and whether every final state landed.
//!
//!     cargo bench --bench sustained_churn                      # 100/s for 60 s
//!     cargo bench --bench sustained_churn -- --qps 300        # writers allowed 300 PATCHes/s
//!     cargo bench --bench sustained_churn -- --rate 50 --seconds 30

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::daemon as daemon_support;
use plegd_test_support::fake_cri;

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{Apiserver, Identity, PLEGD_USER};
use args::arg;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;

/// How many pods of the bench are not Failed yet (every one of them ends so: restart policy Never,
/// exit code 3). One list, filtered by the apiserver and of metadata only, rather than a GET per pod:
/// the apiserver shares the machine with plegd, and thousands of GETs (or whole pods) every half
/// second would slow plegd's drain down.
async fn unfinished_pods(pods: &Api<Pod>) -> usize {
    pods.list_metadata(&ListParams::default().fields("status.phase!=Failed"))
        .await
        .expect("list pods")
        .items
        .len()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rate = arg("--rate").unwrap_or(100);
    let seconds = arg("--seconds").unwrap_or(60);
    let lag = 50; // a pod's container exits 50 starts after it started (half a second at 100/s)
    // The status writers' client-side limit (plegd's default, like the kubelet's, is 50/s).
    let qps = arg("--qps").unwrap_or(50);

    let cri = fake_cri::FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = Arc::new(Metrics::new());
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("churn".into()));
    let mut options = daemon_support::options(&cri.path, kubeconfig, "churn", StatusMode::Full);
    options.triggers = TriggerMode::Cri;
    options.manager.qps = plegd::apiserver::rate_limit::Qps::new(qps as f64).expect("--qps above zero");
    options.manager.burst = std::num::NonZeroU32::new((qps * 2) as u32).expect("--qps above zero");
    let daemon = daemon_support::spawn(options, metrics.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    let total = (rate * seconds) as usize;
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut next = Instant::now();
    let mut uids = Vec::with_capacity(total);
    for i in 0..total + lag {
        if i < total {
            // The apiserver has the pod (and gives its uid) just before the runtime starts it, as
            // with a kubelet.
            let uid = api.create_bound_pod(&format!("pod-{i}"), "churn", 1, "Never").await;
            cri.fake.add_running_pod(&uid, &format!("pod-{i}"), 1);
            cri.fake.emit_event(&format!("ctr-{uid}-0"), Some(&uid));
            uids.push(uid);
        }
        if i >= lag {
            let uid = &uids[i - lag];
            cri.fake.exit_container(&format!("ctr-{uid}-0"), 3);
            cri.fake.emit_event(&format!("ctr-{uid}-0"), Some(uid));
        }
        next += gap;
        tokio::time::sleep_until(next.into()).await;
    }
    let churn_time = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    let pods: Api<Pod> = Api::namespaced(api.client(), "default");
    let mut unfinished = unfinished_pods(&pods).await;
    while unfinished > 0 {
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        unfinished = unfinished_pods(&pods).await;
    }
    let settled = started.elapsed();
    let final_ok = total - unfinished;
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
        .requests_by(PLEGD_USER)
        .await
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
