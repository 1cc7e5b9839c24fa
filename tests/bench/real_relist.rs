//! Relist cost on a real containerd with a small node's worth of pods: N pods (default 30), each a
//! sandbox and one running container, made through CRI the way the kubelet makes them. Timed side by
//! side, interleaved, in one run:
//!   - bare: the two typed CRI list calls (ListPodSandbox + ListContainers, prost decoding), the
//!     least any relister must do;
//!   - list: plegd's list (the same two calls, raw answers, its wire decoder, grouping into pods);
//!   - relist: a whole no-change relist of plegd's PLEG (list, records, event computation).
//!
//! Needs root (it starts the test containerd through tests/containerd/containerd.sh).
//!
//!     cargo bench --bench real_relist
//!     cargo bench --bench real_relist -- --pods 30 --rounds 300

mod args;
use plegd_test_support::containerd;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use args::arg;
use k8s_cri::v1 as cri;
use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig};
use plegd::runtime::{CriConfig, CriRuntime, Runtime};
use plegd::util::clock::SystemClock;
use stats::percentile;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods: usize = arg("--pods").unwrap_or(30);
    let rounds: usize = arg("--rounds").unwrap_or(300);
    let Some(cd) = containerd::containerd().await else {
        eprintln!("real_relist: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let mut made = Vec::new();
    for i in 0..pods {
        let pod = cd.run_pod(&format!("bench{i}"), true).await;
        cd.run_container(&pod, "app", "sleep 100000").await;
        made.push(pod);
    }

    let metrics = Arc::new(Metrics::new());
    let (runtime, version) = CriRuntime::connect(&cd.socket, &CriConfig::default(), metrics.clone())
        .await
        .expect("connect");
    let (pleg, _events) = GenericPleg::new(runtime.clone(), SystemClock, metrics, PlegConfig::default());
    pleg.relist().await.expect("first relist");
    let listed = runtime.list_pods().await.expect("list");
    let ours = listed.iter().filter(|p| p.id.starts_with("bench")).count();
    assert!(ours >= pods, "plegd sees {ours} of the {pods} pods");
    let client = cd.client.clone();

    let (mut bare, mut list, mut relist) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 20 {
        let (mut sandbox_client, mut container_client) = (client.clone(), client.clone());
        let t = Instant::now();
        let (s, c) = tokio::try_join!(
            sandbox_client.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
            container_client.list_containers(cri::ListContainersRequest { filter: None })
        )
        .expect("bare lists");
        let bare_ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(s.into_inner().items.len() + c.into_inner().containers.len() >= 2 * pods);
        let t = Instant::now();
        runtime.list_pods().await.expect("list");
        let list_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        pleg.relist().await.expect("relist");
        let relist_ms = t.elapsed().as_secs_f64() * 1e3;
        // The first rounds warm connections and caches.
        if round >= 20 {
            bare.push(bare_ms);
            list.push(list_ms);
            relist.push(relist_ms);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for pod in &made {
        cd.cleanup(pod).await;
    }

    for samples in [&mut bare, &mut list, &mut relist] {
        samples.sort_by(f64::total_cmp);
    }
    let (median, p90) = (|v: &[f64]| percentile(v, 0.5), |v: &[f64]| percentile(v, 0.9));
    let b = median(&bare);
    println!(
        "\n### Relist on real containerd {} ({} pods, {} containers), {rounds} interleaved rounds\n",
        version.runtime_version, pods, pods
    );
    println!("| what | median ms | p90 ms | ratio to bare (medians) |\n|---|---|---|---|");
    println!("| bare typed RPCs | {b:.3} | {:.3} | 1.00 |", p90(&bare));
    let l = median(&list);
    println!(
        "| plegd list (raw + wire decode + grouping) | {l:.3} | {:.3} | {:.2} |",
        p90(&list),
        l / b
    );
    let r = median(&relist);
    println!(
        "| plegd relist, no change | {r:.3} | {:.3} | {:.2} |",
        p90(&relist),
        r / b
    );
}
