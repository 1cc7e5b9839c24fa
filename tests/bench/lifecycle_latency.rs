//! Latency from each lifecycle change of real pods — a sandbox start, a container start, a
//! container exit — to plegd's event, against the CRI-state floor, for each containerd version
//! given, one after the other in one run:
//!   (b)  plegd with containerd-event triggers, relisting every 30 s;
//!   (b2) plegd with CRI GetContainerEvents triggers, relisting every 30 s (containerd ≥ 1.7);
//!   (d)  the CRI-state floor: ListPodSandbox and ListContainers polled every 2 ms until the
//!        sandbox is READY, the container RUNNING, then EXITED.
//! Latency is measured from the moment each change is requested (RunPodSandbox, StartContainer
//! returning) or, for exits, from the container's CRI finishedAt; the figure that matters is the
//! distance of (b) and (b2) from (d), per change. Needs root (each version runs as a private
//! instance started by tests/containerd/containerd.sh).
//!
//!     cargo bench --bench lifecycle_latency                              # 2.1 then 1.7, 30 pods
//!     cargo bench --bench lifecycle_latency -- --containerd 2.1 --pods 40
//!
//! With `--burst N`, N pods are started first, each with one container, and the containers are
//! timed to exit within `--window-ms` (1000) of each other, evenly spread: a burst of exits, each
//! measured as above against the floor.
//!
//!     cargo bench --bench lifecycle_latency -- --burst 100               # 2.1 then 1.7

mod args;
use plegd_test_support::containerd;
use plegd_test_support::relister::Relister;
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
/// The floor's polls: when each was sent, and its round trip in ms.
type Polls = Arc<Mutex<Vec<(SystemTime, f64)>>>;

async fn observe_plegd(socket: &std::path::Path, mode: TriggerMode, seen: Seen) -> Vec<tokio::task::JoinHandle<()>> {
    let (mut tasks, mut events) = Relister::every(socket, mode, Duration::from_secs(30))
        .await
        .into_tasks_and_events();
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

/// (d): the CRI state, every 2 ms: one ListContainers and one ListPodSandbox answer for every
/// watched id at once (polling each id with its own status call, one after the other, was late by
/// a whole sweep of the ids when a burst put 100 of them on the list).
/// Each poll's (sent, round trip in ms) goes to `polls`: the floor's own resolution (a change is
/// somewhere between the poll before the one that saw it and that one's answer).
fn observe_floor(
    client: cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    watch: Arc<Mutex<Vec<(Change, String)>>>,
    seen: Seen,
    polls: Polls,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let watched: Vec<(Change, String)> = watch.lock().unwrap().clone();
            if watched.is_empty() {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            }
            let (mut c1, mut c2) = (client.clone(), client.clone());
            let sent = SystemTime::now();
            let (containers, sandboxes) = tokio::join!(
                c1.list_containers(cri::ListContainersRequest { filter: None }),
                c2.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
            );
            let now = SystemTime::now();
            polls
                .lock()
                .unwrap()
                .push((sent, now.duration_since(sent).unwrap_or_default().as_secs_f64() * 1e3));
            let containers: HashMap<String, i32> = containers
                .map(|r| r.into_inner().containers.into_iter().map(|c| (c.id, c.state)).collect())
                .unwrap_or_default();
            let sandboxes: HashMap<String, i32> = sandboxes
                .map(|r| r.into_inner().items.into_iter().map(|s| (s.id, s.state)).collect())
                .unwrap_or_default();
            for (change, id) in watched {
                let reached = match change {
                    Change::SandboxStarted => sandboxes
                        .get(&id)
                        .is_some_and(|s| *s == cri::PodSandboxState::SandboxReady as i32),
                    Change::Started => containers.get(&id).is_some_and(|s| {
                        *s == cri::ContainerState::ContainerRunning as i32
                            || *s == cri::ContainerState::ContainerExited as i32
                    }),
                    Change::Exited => containers
                        .get(&id)
                        .is_some_and(|s| *s == cri::ContainerState::ContainerExited as i32),
                };
                if reached {
                    seen.lock().unwrap().entry((change, id.clone())).or_insert(now);
                    watch.lock().unwrap().retain(|w| *w != (change, id.clone()));
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
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

/// A private containerd of `version` watched by the observers: (b), (b2) where the version has CRI
/// events, and (d) polling what is put on `watch`; their streams connected.
struct Observed {
    instance: containerd::PrivateContainerd,
    major: u32,
    minor: u32,
    with_cri: bool,
    by_containerd: Seen,
    by_cri: Seen,
    floor: Seen,
    polls: Polls,
    watch: Arc<Mutex<Vec<(Change, String)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn observed(name: &str, version: &str, octet: u8) -> Observed {
    let Some(instance) = containerd::PrivateContainerd::start(name, version, octet).await else {
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
    let polls = Polls::default();
    tasks.push(observe_floor(
        cd.client.clone(),
        watch.clone(),
        floor.clone(),
        polls.clone(),
    ));
    // Both streams connect on their first event (CRI's call returns only then).
    let warmup = cd.run_pod("warmup", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cd.cleanup(&warmup).await;
    Observed {
        instance,
        major,
        minor,
        with_cri,
        by_containerd,
        by_cri,
        floor,
        polls,
        watch,
        tasks,
    }
}

async fn run(version: &str, pods: usize) {
    let Observed {
        instance,
        major,
        minor,
        with_cri,
        by_containerd,
        by_cri,
        floor,
        watch,
        tasks,
        ..
    } = observed("life", version, 238).await;
    let cd = instance.handle.clone();

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

/// Each exit's id is put on the floor's watch list 50 ms before the exit is due (an id on the list
/// before its start was seen would take that start for its exit).
fn watch_exits_when_due(
    exits: Vec<(tokio::time::Instant, String)>,
    watch: Arc<Mutex<Vec<(Change, String)>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for (due, id) in exits {
            tokio::time::sleep_until(due.checked_sub(Duration::from_millis(50)).unwrap_or(due)).await;
            watch.lock().unwrap().push((Change::Exited, id));
        }
    })
}

async fn burst(version: &str, n: usize, window: Duration) {
    let Observed {
        instance,
        major,
        minor,
        with_cri,
        by_containerd,
        by_cri,
        floor,
        polls,
        watch,
        mut tasks,
    } = observed("burst", version, 239).await;
    let cd = instance.handle.clone();

    let setup = std::time::Instant::now();
    let mut pods = Vec::with_capacity(n);
    for i in 0..n {
        pods.push(cd.run_pod(&format!("burst{i}"), true).await);
    }
    // Each container sleeps until its exit is due: the first 150 ms per container (creating and
    // starting them one after the other) plus a second from now, the rest evenly spread over the
    // window after it.
    let first_due = tokio::time::Instant::now() + Duration::from_millis(150) * n as u32 + Duration::from_secs(1);
    let step = window / n.max(1) as u32;
    let mut ids = Vec::with_capacity(n);
    let mut exits = Vec::with_capacity(n);
    for (i, pod) in pods.iter().enumerate() {
        let due = first_due + step * i as u32;
        let ctr = cd.run_exiting_at(pod, "app", due, 1).await;
        exits.push((due, ctr.clone()));
        ids.push(ctr);
    }
    tasks.push(watch_exits_when_due(exits, watch.clone()));
    let setup = setup.elapsed();
    tokio::time::sleep_until(first_due + window + Duration::from_secs(3)).await;
    let mut finished = Vec::with_capacity(n);
    for id in &ids {
        finished.push(cd.container_times(id).await.1);
    }
    for t in tasks {
        t.abort();
    }
    for pod in &pods {
        cd.cleanup(pod).await;
    }

    let first = finished.iter().min().copied().unwrap_or(SystemTime::UNIX_EPOCH);
    let last = finished.iter().max().copied().unwrap_or(SystemTime::UNIX_EPOCH);
    println!(
        "\n### containerd {major}.{minor}: a burst of {n} exits ({n} pods, one container each), relist every 30 s\n"
    );
    println!(
        "exits spread over {:.0} ms (CRI finishedAt, first to last); setup {:.1} s\n",
        last.duration_since(first).unwrap_or_default().as_secs_f64() * 1e3,
        setup.as_secs_f64()
    );
    println!("| exit, observer | n | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|");
    let mut rows: [Vec<f64>; 5] = Default::default();
    let mut missed = Vec::new();
    // The exits (b) saw latest above the floor, for a look at their timeline.
    let mut worst: Vec<(f64, String, SystemTime, SystemTime)> = Vec::new();
    for (id, finished_at) in ids.iter().zip(&finished) {
        let at = |seen: &Seen| seen.lock().unwrap().get(&(Change::Exited, id.clone())).copied();
        let ms = |t: SystemTime| t.duration_since(*finished_at).unwrap_or_default().as_secs_f64() * 1e3;
        let Some(d) = at(&floor) else {
            missed.push(format!("floor {id}"));
            continue;
        };
        rows[2].push(ms(d));
        for (observer, seen, total, above) in [("(b)", &by_containerd, 0, 3), ("(b2)", &by_cri, 1, 4)] {
            if observer == "(b2)" && !with_cri {
                continue;
            }
            match at(seen) {
                Some(b) => {
                    rows[total].push(ms(b));
                    rows[above].push(ms(b) - ms(d));
                    if observer == "(b)" {
                        worst.push((ms(b) - ms(d), id.clone(), d, b));
                    }
                }
                None => missed.push(format!("{observer} {id}")),
            }
        }
    }
    let [b, b2, d, b_d, b2_d] = rows;
    row("(d) CRI floor", d);
    row("(b) containerd-event triggers", b);
    if with_cri {
        row("(b2) CRI-event triggers", b2);
    }
    row("**(b) − (d), per exit**", b_d);
    if with_cri {
        row("**(b2) − (d), per exit**", b2_d);
    }
    println!(
        "\nnot seen within 3 s of the last exit (left to the 30 s relist): {}",
        missed.len()
    );
    for m in missed.iter().take(10) {
        println!("  {m}");
    }
    // The floor's resolution while it watched the burst: each exit it saw lies between the poll
    // before and that poll's answer.
    let floor_last = floor.lock().unwrap().values().max().copied().unwrap_or(last);
    let mut trips: Vec<f64> = polls
        .lock()
        .unwrap()
        .iter()
        .filter(|(sent, _)| *sent >= first && *sent <= floor_last)
        .map(|(_, ms)| *ms)
        .collect();
    trips.sort_by(f64::total_cmp);
    if !trips.is_empty() {
        println!(
            "the floor's polls (ListContainers ∥ ListPodSandbox) while the burst lasted: {} polls, round trip p50 {:.1} / p99 {:.1} / max {:.1} ms",
            trips.len(),
            percentile(&trips, 0.5),
            percentile(&trips, 0.99),
            trips[trips.len() - 1]
        );
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (late, id, d, b) in worst.iter().take(3) {
        let t = |t: &SystemTime| humantime::format_rfc3339_micros(*t);
        println!("(b) {late:.1} ms after the floor: {id} (floor {}, (b) {})", t(d), t(b));
    }
    drop(instance);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // PLEGD_BENCH_LOG=FILE: the relisters' debug log (triggers, checks), for a look at a slow exit.
    if let Some(path) = std::env::var_os("PLEGD_BENCH_LOG") {
        let file = std::fs::File::create(path).expect("PLEGD_BENCH_LOG");
        tracing_subscriber::fmt()
            .with_env_filter("plegd::triggers=debug,plegd::pleg=debug")
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .init();
    }
    let pods: usize = arg("--pods").unwrap_or(30);
    let versions: String = arg("--containerd").unwrap_or_else(|| "2.3,1.7".into());
    let burst_of: Option<usize> = arg("--burst");
    let window = Duration::from_millis(arg("--window-ms").unwrap_or(1000));
    for version in versions.split(',') {
        match burst_of {
            Some(n) => burst(version.trim(), n, window).await,
            None => run(version.trim(), pods).await,
        }
    }
}
