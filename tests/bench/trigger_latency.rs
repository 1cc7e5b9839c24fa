//! Latency from a real container's exit (its CRI finishedAt) to the moment each observer learns
//! of it, for the same exits observed side by side in one run on one real containerd:
//!   (a) plegd relisting every 1 s, no triggers;
//!   (b) plegd with containerd-event triggers, relisting every 30 s;
//!   (c) a raw subscriber to containerd's /tasks/exit events (the physical limit).
//! Needs root (it starts the test containerd through tests/containerd/containerd.sh).
//!
//!     cargo bench --bench trigger_latency                         # containerd 2.1, 40 exits
//!     cargo bench --bench trigger_latency -- --containerd 1.7     # 1.7 (1.6 has no (b2))
//!     cargo bench --bench trigger_latency -- --exits 60
//!     cargo bench --bench trigger_latency -- --background-pods 30  # on a node with 30 more pods

mod args;
use plegd_test_support::containerd;
use plegd_test_support::relister::Relister;
mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use args::arg;
use containerd_client::services::v1::SubscribeRequest;
use containerd_client::services::v1::events_client::EventsClient;
use plegd::metrics::Metrics;
use plegd::pleg::PodLifecycleEventType;
use plegd::runtime::{CriConfig, CriRuntime};
use plegd::triggers::TriggerMode;
use stats::percentile;

type Seen = Arc<Mutex<HashMap<String, SystemTime>>>;

async fn observe_plegd(
    socket: &std::path::Path,
    mode: TriggerMode,
    period: Duration,
    seen: Seen,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (mut tasks, mut events) = Relister::every(socket, mode, period).await.into_tasks_and_events();
    tasks.push(tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if e.kind == PodLifecycleEventType::ContainerDied && !e.sandbox {
                let now = SystemTime::now();
                seen.lock()
                    .unwrap()
                    .entry(e.container_id.unwrap_or_default())
                    .or_insert(now);
            }
        }
    }));
    tasks
}

/// A raw subscriber to one containerd topic.
async fn observe_raw(socket: &std::path::Path, topic: &str, seen: Seen) -> tokio::task::JoinHandle<()> {
    let runtime = CriRuntime::new(socket, &CriConfig::default(), Arc::new(Metrics::new()));
    let mut client = EventsClient::new(runtime.stream_channel());
    let filters = vec![format!("namespace==k8s.io,topic==\"{topic}\"")];
    tokio::spawn(async move {
        let mut stream = client
            .subscribe(SubscribeRequest { filters })
            .await
            .expect("subscribe")
            .into_inner();
        while let Ok(Some(envelope)) = stream.message().await {
            let now = SystemTime::now();
            let payload = envelope.event.map(|a| a.value).unwrap_or_default();
            if let Some(id) = plegd::runtime::events::containerd_subject(&envelope.topic, &payload) {
                seen.lock().unwrap().entry(id).or_insert(now);
            }
        }
    })
}

/// (d) The earliest moment CRI itself reports the container exited: ContainerStatus polled every
/// millisecond for every container not yet seen exited.
fn observe_cri_poll(
    client: k8s_cri::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    watch: Arc<Mutex<Vec<String>>>,
    seen: Seen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let ids: Vec<String> = watch.lock().unwrap().clone();
            for id in ids {
                let request = k8s_cri::v1::ContainerStatusRequest {
                    container_id: id.clone(),
                    verbose: false,
                };
                if let Ok(r) = client.clone().container_status(request).await
                    && r.into_inner()
                        .status
                        .is_some_and(|s| s.state == k8s_cri::v1::ContainerState::ContainerExited as i32)
                {
                    let now = SystemTime::now();
                    seen.lock().unwrap().entry(id.clone()).or_insert(now);
                    watch.lock().unwrap().retain(|w| *w != id);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

fn stats(name: &str, mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| percentile(&ms, p);
    println!(
        "| {name} | {} | {:.1} | {:.1} | {:.1} |",
        ms.len(),
        at(0.5),
        at(0.99),
        ms[ms.len() - 1]
    );
    (at(0.5), at(0.99))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let exits: usize = arg("--exits").unwrap_or(40);
    let version: String = arg("--containerd").unwrap_or_else(|| "2.3".into());
    // An instance of the bench's own, of the version asked for.
    let private = containerd::PrivateContainerd::start("lat", &version, 237).await;
    let cd = match &private {
        Some(p) => p.handle.clone(),
        None => {
            eprintln!("trigger_latency: needs a real containerd (root on Linux)");
            std::process::exit(1);
        }
    };
    // (b2): CRI GetContainerEvents, which containerd has from 1.7 on.
    let cri_triggered: Option<Seen> = (cd.version().await >= (1, 7)).then(Default::default);
    // --no-floor leaves out (d) and (e), whose 1 ms polling loads the runtime on a small machine.
    let floor = !argv.iter().any(|a| a == "--no-floor");
    let mut cri_rows = Vec::new();
    let mut cri_missed = 0usize;
    let (relist_only, triggered, raw, polled, deleted): (Seen, Seen, Seen, Seen, Seen) = Default::default();
    let poll_list: Arc<Mutex<Vec<String>>> = Default::default();
    let mut tasks = observe_plegd(
        &cd.socket,
        TriggerMode::None,
        Duration::from_secs(1),
        relist_only.clone(),
    )
    .await;
    tasks.extend(
        observe_plegd(
            &cd.socket,
            TriggerMode::Containerd,
            Duration::from_secs(30),
            triggered.clone(),
        )
        .await,
    );
    if let Some(seen) = &cri_triggered {
        tasks.extend(observe_plegd(&cd.socket, TriggerMode::Cri, Duration::from_secs(30), seen.clone()).await);
    }
    tasks.push(observe_raw(&cd.socket, "/tasks/exit", raw.clone()).await);
    if floor {
        tasks.push(observe_raw(&cd.socket, "/tasks/delete", deleted.clone()).await);
        tasks.push(observe_cri_poll(cd.client.clone(), poll_list.clone(), polled.clone()));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Other pods on the node, each with a running container: every relist lists them too.
    let background_count: usize = arg("--background-pods").unwrap_or(0);
    let mut background = Vec::new();
    for i in 0..background_count {
        let pod = cd.run_pod(&format!("background{i}"), true).await;
        cd.run_container(&pod, "app", "sleep 100000").await;
        background.push(pod);
    }
    if background_count > 0 {
        println!("\n{background_count} other pods with a running container each on the node");
    }
    let pod = cd.run_pod("latency", true).await;
    let mut ids = Vec::new();
    for i in 0..exits {
        // Staggered so that exits fall at every phase of the 1 s relist.
        let id = cd
            .run_container(&pod, &format!("exit{i}"), &format!("sleep 0.{}; exit 1", (i * 37) % 10))
            .await;
        poll_list.lock().unwrap().push(id.clone());
        ids.push(id);
        tokio::time::sleep(Duration::from_millis(300 + ((i as u64 * 53) % 700))).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut rows: [Vec<f64>; 5] = Default::default();
    let (mut b_minus_c, mut b_minus_d) = (Vec::new(), Vec::new());
    for id in &ids {
        let (_, finished) = cd.container_times(id).await;
        let lag = |seen: &Seen| {
            seen.lock()
                .unwrap()
                .get(id)
                .map(|t| t.duration_since(finished).unwrap_or_default().as_secs_f64() * 1e3)
        };
        let (a, b, c, d, e) = (
            lag(&relist_only),
            lag(&triggered),
            lag(&raw),
            lag(&polled),
            lag(&deleted),
        );
        let (Some(a), Some(b), Some(c)) = (a, b, c) else {
            panic!("an observer missed the exit of {id}: relist-only {a:?}, triggers {b:?}, raw {c:?}");
        };
        if floor {
            let (Some(d), Some(e)) = (d, e) else {
                panic!("the floor observers missed the exit of {id}: CRI poll {d:?}, delete {e:?}");
            };
            rows[3].push(d);
            rows[4].push(e);
            b_minus_d.push(b - d);
        }
        if let Some(seen) = &cri_triggered {
            match lag(seen) {
                Some(ms) => cri_rows.push(ms),
                None => {
                    cri_missed += 1;
                    eprintln!(
                        "(b2) has not seen the exit of {id} (exit #{})",
                        ids.iter().position(|i| i == id).unwrap_or(0)
                    );
                }
            }
        }
        rows[0].push(a);
        rows[1].push(b);
        rows[2].push(c);
        b_minus_c.push(b - c);
    }
    cd.cleanup(&pod).await;
    for pod in &background {
        cd.cleanup(pod).await;
    }
    for t in tasks {
        t.abort();
    }
    drop(private);
    println!("\n### Exit → observer latency, {exits} exits of real containers (containerd {version})\n");
    println!("| observer | exits | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|");
    let [a, b, c, d, e] = rows;
    stats("(a) plegd, relist every 1 s, no triggers", a);
    stats("(b) plegd, containerd-event triggers, relist every 30 s", b);
    if cri_triggered.is_some() {
        stats(
            "(b2) plegd, CRI GetContainerEvents triggers, relist every 30 s",
            cri_rows,
        );
        println!("\n(b2) exits not seen within 3 s of the last exit (left to its 30 s relist): {cri_missed}\n");
    }
    stats("(c) raw containerd /tasks/exit subscriber", c);
    if floor {
        stats("(d) CRI ContainerStatus polled every 1 ms (first EXITED)", d);
        stats("(e) raw containerd /tasks/delete subscriber", e);
    }
    stats("(b) − (c), per exit", b_minus_c);
    if floor {
        stats("(b) − (d), per exit", b_minus_d);
    }
}
