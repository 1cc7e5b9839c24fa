//! Latency from each lifecycle change of real pods — a sandbox start, a container start, a
//! container exit — to plegd's event, against the CRI-state floor, for each containerd version
//! given, one after the other in one run:
//!   (b)  plegd with containerd-event triggers, relisting every 30 s;
//!   (b2) plegd with CRI GetContainerEvents triggers, relisting every 30 s (containerd ≥ 1.7);
//!   (d)  the CRI-state floor: PodSandboxStatus / ContainerStatus polled every millisecond until
//!        the sandbox is READY, the container RUNNING, then EXITED.
//! Latency is measured from the moment each change is requested (RunPodSandbox, StartContainer
//! returning) or, for exits, from the container's CRI finishedAt; the figure that matters is the
//! distance of (b) and (b2) from (d), per change. Needs root (each version runs as a private
//! instance started by tests/containerd/containerd.sh).
//!
//!     cargo bench --bench lifecycle_latency                              # 2.1 then 1.7, 30 pods
//!     cargo bench --bench lifecycle_latency -- --containerd 2.1 --pods 40

#[path = "args.rs"]
mod args;
#[allow(dead_code)]
#[path = "../support/containerd.rs"]
mod containerd;
#[path = "observer.rs"]
mod observer;
#[path = "stats.rs"]
mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use args::arg;
use k8s_cri::v1 as cri;
use plegd::pleg::PodLifecycleEventType;
use plegd::triggers::TriggerMode;
use stats::percentile;

/// What changed: (kind, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Change {
    SandboxStarted,
    Started,
    Exited,
}

type Seen = Arc<Mutex<HashMap<(Change, String), SystemTime>>>;

async fn observe_plegd(socket: &std::path::Path, mode: TriggerMode, seen: Seen) -> Vec<tokio::task::JoinHandle<()>> {
    let (mut tasks, mut events) = observer::start_plegd(socket, mode, Duration::from_secs(30)).await;
    tasks.push(tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            let now = SystemTime::now();
            let change = match (e.kind, e.sandbox) {
                (PodLifecycleEventType::ContainerStarted, true) => Change::SandboxStarted,
                (PodLifecycleEventType::ContainerStarted, false) => Change::Started,
                (PodLifecycleEventType::ContainerDied, false) => Change::Exited,
                _ => continue,
            };
            seen.lock()
                .unwrap()
                .entry((change, e.container_id.unwrap_or_default()))
                .or_insert(now);
        }
    }));
    tasks
}

/// (d): every watched id polled every millisecond until CRI reports its next state.
fn observe_floor(
    client: cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    watch: Arc<Mutex<Vec<(Change, String)>>>,
    seen: Seen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let watched: Vec<(Change, String)> = watch.lock().unwrap().clone();
            for (change, id) in watched {
                let reached = match change {
                    Change::SandboxStarted => client
                        .clone()
                        .pod_sandbox_status(cri::PodSandboxStatusRequest {
                            pod_sandbox_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .ok()
                        .and_then(|r| r.into_inner().status)
                        .is_some_and(|s| s.state == cri::PodSandboxState::SandboxReady as i32),
                    Change::Started | Change::Exited => client
                        .clone()
                        .container_status(cri::ContainerStatusRequest {
                            container_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .ok()
                        .and_then(|r| r.into_inner().status)
                        .is_some_and(|s| {
                            let running = s.state == cri::ContainerState::ContainerRunning as i32;
                            let exited = s.state == cri::ContainerState::ContainerExited as i32;
                            if change == Change::Started {
                                running || exited
                            } else {
                                exited
                            }
                        }),
                };
                if reached {
                    let now = SystemTime::now();
                    seen.lock().unwrap().entry((change, id.clone())).or_insert(now);
                    watch.lock().unwrap().retain(|w| *w != (change, id.clone()));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}

fn row(name: &str, mut ms: Vec<f64>) {
    if ms.is_empty() {
        println!("| {name} | 0 | — | — | — |");
        return;
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "| {name} | {} | {:.1} | {:.1} | {:.1} |",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms[ms.len() - 1]
    );
}

async fn run(version: &str, pods: usize) {
    let Some(instance) = containerd::PrivateContainerd::start("life", version, 238).await else {
        eprintln!("lifecycle_latency: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let cd = instance.handle.clone();
    let (major, minor) = cd.version().await;
    let with_cri = (major, minor) >= (1, 7);
    let (by_containerd, by_cri, floor): (Seen, Seen, Seen) = Default::default();
    let watch: Arc<Mutex<Vec<(Change, String)>>> = Default::default();
    let mut tasks = observe_plegd(&cd.socket, TriggerMode::Containerd, by_containerd.clone()).await;
    if with_cri {
        tasks.extend(observe_plegd(&cd.socket, TriggerMode::Cri, by_cri.clone()).await);
    }
    tasks.push(observe_floor(cd.client.clone(), watch.clone(), floor.clone()));
    // Both streams connect on their first event (CRI's call returns only then).
    let warmup = cd.run_pod("warmup", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cd.cleanup(&warmup).await;

    let mut changes: Vec<(Change, String, SystemTime)> = Vec::new();
    let mut test_pods = Vec::new();
    for i in 0..pods {
        let asked = SystemTime::now();
        let pod = cd.run_pod(&format!("life{i}"), true).await;
        watch
            .lock()
            .unwrap()
            .push((Change::SandboxStarted, pod.sandbox_id.clone()));
        changes.push((Change::SandboxStarted, pod.sandbox_id.clone(), asked));
        let ctr = cd
            .create_container(&pod, "app", &format!("sleep 0.{}; exit 1", 3 + (i * 37) % 7))
            .await;
        watch.lock().unwrap().push((Change::Started, ctr.clone()));
        let asked = SystemTime::now();
        cd.start_container(&ctr).await;
        changes.push((Change::Started, ctr.clone(), asked));
        watch.lock().unwrap().push((Change::Exited, ctr.clone()));
        changes.push((Change::Exited, ctr, SystemTime::UNIX_EPOCH));
        test_pods.push(pod);
        tokio::time::sleep(Duration::from_millis(200 + ((i as u64 * 53) % 500))).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Exits are measured from the container's CRI finishedAt.
    for (change, id, asked) in &mut changes {
        if *change == Change::Exited {
            *asked = cd.container_times(id).await.1;
        }
    }
    for t in tasks {
        t.abort();
    }
    for pod in &test_pods {
        cd.cleanup(pod).await;
    }

    println!(
        "\n### containerd {major}.{minor}: {pods} pods (a sandbox start, a container start and exit each), relist every 30 s\n"
    );
    println!("| change, observer | n | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|");
    let mut missed = Vec::new();
    for kind in [Change::SandboxStarted, Change::Started, Change::Exited] {
        let mut rows: [Vec<f64>; 5] = Default::default();
        for (change, id, asked) in &changes {
            if *change != kind {
                continue;
            }
            let at = |seen: &Seen| seen.lock().unwrap().get(&(kind, id.clone())).copied();
            let ms = |t: SystemTime| t.duration_since(*asked).unwrap_or_default().as_secs_f64() * 1e3;
            let Some(d) = at(&floor) else {
                missed.push(format!("floor {kind:?} {id}"));
                continue;
            };
            rows[2].push(ms(d));
            match at(&by_containerd) {
                Some(b) => {
                    rows[0].push(ms(b));
                    rows[3].push(ms(b) - ms(d));
                }
                None => missed.push(format!("(b) {kind:?} {id}")),
            }
            if with_cri {
                match at(&by_cri) {
                    Some(b2) => {
                        rows[1].push(ms(b2));
                        rows[4].push(ms(b2) - ms(d));
                    }
                    None => missed.push(format!("(b2) {kind:?} {id}")),
                }
            }
        }
        let [b, b2, d, b_d, b2_d] = rows;
        row(&format!("{kind:?}: (d) CRI floor"), d);
        row(&format!("{kind:?}: (b) containerd-event triggers"), b);
        if with_cri {
            row(&format!("{kind:?}: (b2) CRI-event triggers"), b2);
        }
        row(&format!("**{kind:?}: (b) − (d), per change**"), b_d);
        if with_cri {
            row(&format!("**{kind:?}: (b2) − (d), per change**"), b2_d);
        }
    }
    println!(
        "\nnot seen within 3 s of the last change (left to the 30 s relist): {}",
        missed.len()
    );
    for m in missed.iter().take(10) {
        println!("  {m}");
    }
    drop(instance);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods: usize = arg("--pods").unwrap_or(30);
    let versions: String = arg("--containerd").unwrap_or_else(|| "2.1,1.7".into());
    for version in versions.split(',') {
        run(version.trim(), pods).await;
    }
}
