//! Relist cost on a real containerd with a small node's worth of pods: N pods (default 30), each a
//! sandbox and `--containers` running containers (default 1), made through CRI the way the kubelet
//! makes them. Timed side by side, interleaved, in one run:
//!   - bare: the two typed CRI list calls (ListPodSandbox + ListContainers, prost decoding), the
//!     least any relister must do with unary lists;
//!   - bare streamed (on a runtime that streams its lists, containerd 2.4): StreamPodSandboxes and
//!     StreamContainers read to their end, the items left encoded — the least any relister must do
//!     with the streams;
//!   - list: plegd's list (the same calls as it chose for the connection — the streams where the
//!     runtime serves them — raw answers, its wire decoder, grouping into pods);
//!   - relist: a whole no-change relist of plegd's PLEG (list, records, event computation).
//!
//! Needs root (it starts the test containerd through tests/containerd/containerd.sh;
//! `PLEGD_CONTAINERD_VERSION=2.4` for one that streams).
//!
//!     cargo bench --bench real_relist
//!     cargo bench --bench real_relist -- --pods 30 --rounds 300
//!     PLEGD_CONTAINERD_VERSION=2.4 cargo bench --bench real_relist -- --pods 200 --containers 5

mod args;
use plegd_test_support::containerd;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use args::arg;
use k8s_cri::v1 as cri;
use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig};
use plegd::runtime::list_mode::ListMode;
use plegd::runtime::lists::runtime_service_client::RuntimeServiceClient as ListsClient;
use plegd::runtime::lists::{StreamContainersRequest, StreamPodSandboxesRequest};
use plegd::runtime::{CriConfig, CriRuntime, MAX_MESSAGE_SIZE, Runtime, unix_channel};
use plegd::util::clock::SystemClock;
use stats::percentile;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods: usize = arg("--pods").unwrap_or(30);
    let rounds: usize = arg("--rounds").unwrap_or(300);
    let per_pod: usize = arg("--containers").unwrap_or(1);
    let Some(cd) = containerd::containerd().await else {
        eprintln!("real_relist: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let mut made = Vec::new();
    for i in 0..pods {
        let pod = cd.run_pod(&format!("bench{i}"), true).await;
        for c in 0..per_pod {
            cd.run_container(&pod, &format!("app{c}"), "sleep 100000").await;
        }
        made.push(pod);
    }

    let metrics = Arc::new(Metrics::new());
    let (runtime, version) = CriRuntime::connect(&cd.socket, &CriConfig::default(), metrics.clone())
        .await
        .expect("connect");
    // Room for the first relist's events, drained, so that no measured relist has any left to send
    // (a pod with events left undelivered is visited again, its status read, at every relist).
    let room = std::num::NonZeroUsize::new(pods * (per_pod + 2) + 1).expect("one at least");
    let (pleg, mut events) = GenericPleg::new(
        runtime.clone(),
        SystemClock,
        metrics,
        PlegConfig::default().with_channel_capacity(room),
    );
    pleg.relist().await.expect("first relist");
    while events.try_recv().is_ok() {}
    assert_eq!(pleg.undelivered_count().await, 0, "the first relist's events all sent");
    let listed = runtime.list_pods().await.expect("list");
    let ours = listed.iter().filter(|p| p.id.starts_with("bench")).count();
    assert!(ours >= pods, "plegd sees {ours} of the {pods} pods");
    let client = cd.client.clone();
    let streams = runtime.list_mode() == Some(ListMode::Streaming);
    let lists = ListsClient::new(unix_channel(
        &cd.socket,
        Duration::from_secs(5),
        CriConfig::default().backoff,
        Some(Duration::from_secs(60)),
    ))
    .max_decoding_message_size(MAX_MESSAGE_SIZE);

    let (mut bare, mut streamed, mut list, mut relist) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 20 {
        let (mut sandbox_client, mut container_client) = (client.clone(), client.clone());
        let t = Instant::now();
        let (s, c) = tokio::try_join!(
            sandbox_client.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
            container_client.list_containers(cri::ListContainersRequest { filter: None })
        )
        .expect("bare lists");
        let bare_ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(s.into_inner().items.len() + c.into_inner().containers.len() >= pods * (1 + per_pod));
        let streamed_ms = if streams {
            let t = Instant::now();
            let items = bare_streamed(&lists).await;
            assert!(items >= pods * (1 + per_pod), "{items} items streamed");
            Some(t.elapsed().as_secs_f64() * 1e3)
        } else {
            None
        };
        let t = Instant::now();
        runtime.list_pods().await.expect("list");
        let list_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        pleg.relist().await.expect("relist");
        let relist_ms = t.elapsed().as_secs_f64() * 1e3;
        // The first rounds warm connections and caches.
        if round >= 20 {
            bare.push(bare_ms);
            streamed.extend(streamed_ms);
            list.push(list_ms);
            relist.push(relist_ms);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for samples in [&mut bare, &mut streamed, &mut list, &mut relist] {
        samples.sort_by(f64::total_cmp);
    }
    let (median, p90) = (|v: &[f64]| percentile(v, 0.5), |v: &[f64]| percentile(v, 0.9));
    let b = median(&bare);
    println!(
        "\n### Relist on real containerd {} ({} pods, {} containers; plegd lists {}), {rounds} interleaved rounds\n",
        version.runtime_version,
        pods,
        pods * per_pod,
        if streams {
            "through the streams"
        } else {
            "with the unary calls"
        }
    );
    // The ratios are to the bare calls plegd's own list makes: the streams where it streams.
    let floor = if streams { median(&streamed) } else { b };
    println!("| what | median ms | p90 ms | ratio to the bare calls plegd makes (medians) |\n|---|---|---|---|");
    println!(
        "| bare typed unary RPCs | {b:.3} | {:.3} | {:.2} |",
        p90(&bare),
        b / floor
    );
    if streams {
        println!(
            "| bare streamed lists (items left encoded) | {floor:.3} | {:.3} | 1.00 |",
            p90(&streamed)
        );
    }
    let l = median(&list);
    println!(
        "| plegd list (raw + wire decode + grouping) | {l:.3} | {:.3} | {:.2} |",
        p90(&list),
        l / floor
    );
    let r = median(&relist);
    println!(
        "| plegd relist, no change | {r:.3} | {:.3} | {:.2} |",
        p90(&relist),
        r / floor
    );
    // After the figures: removing thousands of containers takes minutes.
    for pod in &made {
        cd.cleanup(pod).await;
    }
}

/// StreamPodSandboxes and StreamContainers at once, each read to its end: how many items came.
async fn bare_streamed(lists: &ListsClient<tonic::transport::Channel>) -> usize {
    let (mut sandboxes, mut containers) = (lists.clone(), lists.clone());
    let (s, c) = tokio::try_join!(
        async {
            let mut stream = sandboxes
                .stream_pod_sandboxes(StreamPodSandboxesRequest { filter: None })
                .await?
                .into_inner();
            let mut n = 0;
            while let Some(message) = stream.message().await? {
                n += message.pod_sandboxes.len();
            }
            Ok::<_, tonic::Status>(n)
        },
        async {
            let mut stream = containers
                .stream_containers(StreamContainersRequest { filter: None })
                .await?
                .into_inner();
            let mut n = 0;
            while let Some(message) = stream.message().await? {
                n += message.containers.len();
            }
            Ok::<_, tonic::Status>(n)
        }
    )
    .expect("bare streamed lists");
    s + c
}
