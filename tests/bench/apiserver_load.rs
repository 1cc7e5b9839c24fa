//! What N plegd instances cost one apiserver: the test apiserver built from Kubernetes' own code
//! (k8s.io/apiserver 1.36 on etcd, processes of their own) and N nodes, each with `--pods` (110, the
//! kubelet's default maxPods) pods of one container on a fake CRI server of its own (in this
//! process) and its own `plegd run` (the real binary, full status mode, no triggers, the default 1 s
//! relist, no metrics endpoint), speaking as plegd's service account bound to its node. Each pod is created in the apiserver first (the
//! server gives its uid), then started in its node's runtime with that uid.
//!
//! Three phases per N, each `--seconds` long: no plegd running yet (the apiserver's own cost with
//! the same pods stored and the bench's own pod watch open), then, once every pod is Running and
//! 12 s more have passed (the first 10 s resync of every pod is behind), plegd idle, then plegd
//! under churn: on every node `--rate` container changes a second, alternating a container's exit
//! and its restart (a new running container of the same pod, the attempt counted up), round robin
//! over the node's pods; the churn starts 2 s before the window opens, so that the window holds the
//! writes of as many changes as it counts. Reported: plegd's requests a second from the server's
//! request log, by verb, total and per node, and its status PATCHes per change (of every change of
//! the phase, with the PATCHes landed up to 3 s after it); the CPU time of the server and of etcd
//! from /proc, in CPU-ms a second, total and per node net of the no-plegd phase (one clock tick,
//! 10 ms, is 0.33 CPU-ms a second over 30 s), and the apiserver's CPU-ms per PATCH (churn − idle);
//! then the per-node figures of the largest N times 5,000 nodes, and plegd's writes per node beside
//! the kubelet's at the same churn (its Lease renewals and node status reports, which plegd does
//! not make, and its pod status PATCHes, which plegd makes instead).
//!
//! The apiserver's CPU includes sending every pod change to the bench's own watch of all pods (the
//! harness's recorder) beside plegd's watch of its node's pods: one more watcher, as a controller
//! manager's or scheduler's pod informer would be in a cluster.
//!
//!     cargo bench --bench apiserver_load                    # 1, 2, 4, 8 nodes, 30 s phases: ~8 min
//!     cargo bench --bench apiserver_load -- --nodes 1,2 --seconds 5
//!     cargo bench --bench apiserver_load -- --nodes 4 --rate 5      # 5 changes/s per node

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::fake_cri;
use plegd_test_support::process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use apiserver::{Apiserver, Identity, Logged, PLEGD_USER};
use args::arg;
use futures_util::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use process::{KillOnDrop, clock_ticks, cpu_ticks};

/// The cluster size the per-node figures are multiplied to, as a number and as printed.
const CLUSTER_NODES: f64 = 5000.0;
const CLUSTER: &str = "5,000";

/// The kubelet's heartbeat and node status, per node (kubelet defaults, pkg/kubelet/apis/config/
/// v1beta1/defaults.go and pkg/kubelet/kubelet.go): the Lease is renewed (an update, PUT) every
/// NodeLeaseDurationSeconds (40) × nodeLeaseRenewIntervalFraction (0.25) = 10 s; every
/// NodeStatusUpdateFrequency (10 s) the node is read (GET, from the apiserver's cache) and its
/// status PATCHed only when it changed or NodeStatusReportFrequency (5 min) has passed.
const KUBELET_LEASE_PUTS: f64 = 1.0 / 10.0;
const KUBELET_NODE_GETS: f64 = 1.0 / 10.0;
const KUBELET_NODE_STATUS_PATCHES: f64 = 1.0 / 300.0;

/// One pod of a node and its container's restarts so far.
struct ChurnPod {
    uid: String,
    restarts: u32,
}

impl ChurnPod {
    /// The id of the pod's current container (the fake runtime names the first `ctr-{uid}-0`).
    fn container(&self) -> String {
        match self.restarts {
            0 => format!("ctr-{}-0", self.uid),
            n => format!("ctr-{}-0-r{n}", self.uid),
        }
    }
}

/// One node: its runtime, its pods and its plegd.
struct Node {
    name: String,
    cri: fake_cri::FakeServer,
    pods: Vec<ChurnPod>,
    /// Changes made so far.
    changes: u64,
    plegd: Option<KillOnDrop>,
    log: PathBuf,
}

impl Node {
    /// The node's next change: the current container of the next pod in turn exits or, every
    /// other change, the pod whose container exited the change before gets a new running container
    /// (as after the kubelet's restart of a crashed container).
    fn change(&mut self) {
        let k = (self.changes / 2) as usize % self.pods.len();
        let fake = &self.cri.fake;
        let pod = &mut self.pods[k];
        if self.changes.is_multiple_of(2) {
            fake.exit_container(&pod.container(), 1);
        } else {
            pod.restarts += 1;
            let id = pod.container();
            let sandbox = format!("sb-{}", pod.uid);
            fake.add_container(&pod.uid, &sandbox, &id, "c0", cri::ContainerState::ContainerRunning);
            if let Some(meta) = fake
                .state()
                .containers
                .get_mut(&id)
                .and_then(|c| c.item.metadata.as_mut())
            {
                meta.attempt = pod.restarts;
            }
        }
        self.changes += 1;
    }

    fn start_plegd(&mut self, api: &Apiserver, dir: &Path) {
        let kubeconfig = api.kubeconfig_as(dir, &Identity::Plegd(self.name.clone()));
        let log = std::fs::File::create(&self.log).expect("plegd log file");
        let child = process::plegd_run(env!("CARGO_BIN_EXE_plegd"), &self.name, &self.cri.path, &kubeconfig)
            .args(["--status-mode", "full", "--triggers", "none"])
            .args(["--metrics-address", "off"])
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn plegd");
        self.plegd = Some(KillOnDrop(child));
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

/// What one phase measured.
struct Phase {
    name: &'static str,
    seconds: f64,
    /// plegd's requests served in the phase's window.
    requests: Vec<Logged>,
    /// CPU-ms a second.
    apiserver_cpu: f64,
    etcd_cpu: f64,
    /// Runtime changes made in the window, all nodes.
    changes: u64,
    /// Runtime changes made in the whole phase (the window and the warm-up before it).
    changes_made: u64,
    /// plegd's successful status PATCHes from the phase's start until 3 s after its end (the
    /// writes of the last changes land after it).
    patches_landed: usize,
}

/// plegd's requests of a phase, a second, by what RBAC authorizes them as.
#[derive(Default, Clone, Copy)]
struct Rates {
    patch: f64,
    get_list: f64,
    watch: f64,
    other: f64,
}

impl Rates {
    fn of(phase: &Phase) -> Self {
        let mut r = Rates::default();
        for request in &phase.requests {
            let verb = request.authorization();
            let verb = verb.as_deref().and_then(|a| a.rsplit(':').next()).unwrap_or("");
            let slot = match verb {
                "patch" => &mut r.patch,
                "get" | "list" => &mut r.get_list,
                "watch" => &mut r.watch,
                _ => &mut r.other,
            };
            *slot += 1.0 / phase.seconds;
        }
        r
    }

    fn total(&self) -> f64 {
        self.patch + self.get_list + self.watch + self.other
    }
}

/// The server's and etcd's CPU time so far, in ms, and when.
struct Sample {
    at: SystemTime,
    instant: Instant,
    apiserver: f64,
    etcd: f64,
}

impl Sample {
    fn take(api: &Apiserver, ticks: f64) -> Self {
        let ms = |pid: Option<u32>| pid.map_or(0.0, |p| cpu_ticks(p) / ticks * 1000.0);
        Self {
            at: SystemTime::now(),
            instant: Instant::now(),
            apiserver: ms(api.server_pid()),
            etcd: ms(api.etcd_pid()),
        }
    }
}

/// How long the churn runs before its window opens: the writes of the first changes land up to a
/// relist period later, so a window opened at once would count their changes but miss their
/// PATCHes (and the window's last writes land after it, for changes it counted).
const WARM_UP: Duration = Duration::from_secs(2);

/// Run one phase with a window of `seconds`: with `churn`, `rate` changes a second on every node,
/// spread evenly over the nodes and the second, from `WARM_UP` before the window to its end.
async fn measure(api: &Apiserver, name: &'static str, seconds: u64, nodes: &mut [Node], churn: Option<f64>) -> Phase {
    let ticks = clock_ticks();
    api.clear_log().await;
    let started = SystemTime::now();
    let (mut changes, mut changes_made) = (0, 0);
    let (begin, end) = match churn {
        Some(rate) if rate > 0.0 => {
            let gap = Duration::from_secs_f64(1.0 / (rate * nodes.len() as f64));
            let window = Instant::now() + WARM_UP;
            let end = window + Duration::from_secs(seconds);
            let mut begin = None;
            let mut next = Instant::now();
            while next < end {
                if begin.is_none() && next >= window {
                    begin = Some(Sample::take(api, ticks));
                }
                let n = nodes.len();
                nodes[changes_made as usize % n].change();
                changes_made += 1;
                if begin.is_some() {
                    changes += 1;
                }
                next += gap;
                tokio::time::sleep_until(next.into()).await;
            }
            let begin = begin.unwrap_or_else(|| Sample::take(api, ticks));
            (begin, Sample::take(api, ticks))
        }
        _ => {
            let begin = Sample::take(api, ticks);
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            (begin, Sample::take(api, ticks))
        }
    };
    let elapsed = (end.instant - begin.instant).as_secs_f64();
    if changes_made > 0 {
        // A relist period and some: the writes of the last changes.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let all = api.requests_by(PLEGD_USER).await;
    let patches_landed = all
        .iter()
        .filter(|r| r.at >= started && r.method == "PATCH" && r.path.ends_with("/status") && r.status < 300)
        .count();
    let requests = all.into_iter().filter(|r| r.at >= begin.at && r.at <= end.at).collect();
    Phase {
        name,
        seconds: elapsed,
        requests,
        apiserver_cpu: (end.apiserver - begin.apiserver) / elapsed,
        etcd_cpu: (end.etcd - begin.etcd) / elapsed,
        changes,
        changes_made,
        patches_landed,
    }
}

/// Wait until `count` pods are Running in the apiserver (one metadata list per look, filtered by
/// the server).
async fn wait_running(api: &Apiserver, nodes: &[Node], count: usize, timeout: Duration) {
    let pods: Api<Pod> = Api::namespaced(api.client(), "default");
    let deadline = Instant::now() + timeout;
    loop {
        let running = pods
            .list_metadata(&ListParams::default().fields("status.phase=Running"))
            .await
            .expect("list pods")
            .items
            .len();
        if running >= count {
            return;
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = nodes
                .iter()
                .map(|n| format!("--- plegd of {} ---\n{}", n.name, n.log_tail()))
                .collect();
            panic!(
                "only {running} of {count} pods Running after {timeout:?}\n{}\n{}",
                logs.join("\n"),
                api.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The three phases with `count` nodes of `pods` pods each, on a fresh apiserver.
async fn run(count: usize, pods: usize, seconds: u64, rate: f64) -> Vec<Phase> {
    let names: Vec<String> = (0..count).map(|k| format!("node-{k}")).collect();
    let api = Apiserver::start_with(apiserver::Options {
        plegd_nodes: names.clone(),
        ..apiserver::Options::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = Vec::with_capacity(count);
    for (k, name) in names.iter().enumerate() {
        let cri = fake_cri::FakeServer::start().await;
        // A few creates at a time: the server takes them in parallel, as from a scheduler.
        let created: Vec<(String, String)> = futures_util::stream::iter(0..pods)
            .map(|i| {
                let api = &api;
                async move {
                    let pod = format!("n{k}-pod-{i}");
                    let uid = api.create_bound_pod(&pod, name, 1, "Always").await;
                    (pod, uid)
                }
            })
            .buffered(8)
            .collect()
            .await;
        let mut churn_pods = Vec::with_capacity(pods);
        for (pod, uid) in created {
            cri.fake.add_running_pod(&uid, &pod, 1);
            churn_pods.push(ChurnPod { uid, restarts: 0 });
        }
        nodes.push(Node {
            name: name.clone(),
            cri,
            pods: churn_pods,
            changes: 0,
            plegd: None,
            log: dir.path().join(format!("plegd-{name}.log")),
        });
    }
    let mut phases = vec![measure(&api, "no plegd", seconds, &mut nodes, None).await];
    for node in &mut nodes {
        node.start_plegd(&api, dir.path());
    }
    wait_running(&api, &nodes, count * pods, Duration::from_secs(180)).await;
    // Past the first 10 s resync of every pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    phases.push(measure(&api, "idle", seconds, &mut nodes, None).await);
    phases.push(measure(&api, "churn", seconds, &mut nodes, Some(rate)).await);
    for node in &mut nodes {
        node.plegd = None;
    }
    phases
}

fn failed(phase: &Phase) -> String {
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for r in phase.requests.iter().filter(|r| r.status >= 400) {
        *by_status.entry(r.status).or_default() += 1;
    }
    if by_status.is_empty() {
        return "0".into();
    }
    by_status
        .iter()
        .map(|(s, n)| format!("{n}× {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--nodes")
        .nth(1)
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    assert!(
        !counts.is_empty() && counts.iter().all(|&n| n > 0),
        "--nodes takes a list of node counts, e.g. 1,2,4,8"
    );
    let pods: usize = arg("--pods").unwrap_or(110);
    let seconds: u64 = arg("--seconds").unwrap_or(30);
    let rate: f64 = arg("--rate").unwrap_or(1.0);
    let started = Instant::now();

    let mut results = Vec::new();
    for &count in &counts {
        let phases = run(count, pods, seconds, rate).await;
        results.push((count, phases));
    }

    println!(
        "\n### What N plegd cost one apiserver: {pods} pods of 1 container per node, full mode, relist 1 s, no triggers; {seconds} s per phase; churn: {rate} changes a second per node\n"
    );
    println!("plegd's requests a second (the server's request log, plegd's service account only):\n");
    println!(
        "| nodes | phase | changes/s | PATCH/s | GET+LIST/s | WATCH/s (opened) | other/s | total/s | per node/s | PATCHes per change | failed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (count, phases) in &results {
        for phase in phases.iter().filter(|p| p.name != "no plegd") {
            let r = Rates::of(phase);
            let changes = phase.changes as f64 / phase.seconds;
            let per_change = if phase.changes_made > 0 {
                format!("{:.2}", phase.patches_landed as f64 / phase.changes_made as f64)
            } else {
                "—".into()
            };
            println!(
                "| {count} | {} | {changes:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {:.2} | {:.3} | {per_change} | {} |",
                phase.name,
                r.patch,
                r.get_list,
                r.watch,
                r.other,
                r.total(),
                r.total() / *count as f64,
                failed(phase)
            );
        }
    }

    println!(
        "\nCPU of the server processes (utime + stime from /proc), CPU-ms a second; per node: net of the no-plegd phase, ÷ nodes; per PATCH: the apiserver's churn − idle, ÷ PATCHes:\n"
    );
    println!("| nodes | phase | apiserver | apiserver per node | etcd | etcd per node | apiserver CPU-ms per PATCH |");
    println!("|---|---|---|---|---|---|---|");
    for (count, phases) in &results {
        let (base, idle) = (&phases[0], &phases[1]);
        for phase in phases {
            let per_node = |v: f64, b: f64| {
                if phase.name == "no plegd" {
                    "—".to_owned()
                } else {
                    format!("{:.2}", (v - b) / *count as f64)
                }
            };
            let patches = Rates::of(phase).patch;
            let per_patch = if phase.name == "churn" && patches > 0.0 {
                format!("{:.2}", (phase.apiserver_cpu - idle.apiserver_cpu) / patches)
            } else {
                "—".to_owned()
            };
            println!(
                "| {count} | {} | {:.1} | {} | {:.1} | {} | {per_patch} |",
                phase.name,
                phase.apiserver_cpu,
                per_node(phase.apiserver_cpu, base.apiserver_cpu),
                phase.etcd_cpu,
                per_node(phase.etcd_cpu, base.etcd_cpu)
            );
        }
    }

    // Per-node figures of the largest N, times 5,000.
    let (count, phases) = results.iter().max_by_key(|(n, _)| *n).expect("at least one node count");
    let n = *count as f64;
    let base = &phases[0];
    println!(
        "\nAt {CLUSTER} nodes (the per-node figures at {count} nodes × {CLUSTER}; the apiserver's and etcd's own cost, the no-plegd phase, not included):\n"
    );
    println!("| phase | plegd requests/s | of them PATCH/s | apiserver CPU, cores | etcd CPU, cores |");
    println!("|---|---|---|---|---|");
    for phase in phases.iter().filter(|p| p.name != "no plegd") {
        let r = Rates::of(phase);
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} |",
            phase.name,
            r.total() / n * CLUSTER_NODES,
            r.patch / n * CLUSTER_NODES,
            (phase.apiserver_cpu - base.apiserver_cpu) / n * CLUSTER_NODES / 1000.0,
            (phase.etcd_cpu - base.etcd_cpu) / n * CLUSTER_NODES / 1000.0
        );
    }

    // plegd's writes beside the kubelet's at the same churn, per node.
    let churn = phases.iter().find(|p| p.name == "churn").expect("churn phase");
    let r = Rates::of(churn);
    let changes = churn.changes as f64 / churn.seconds / n;
    let plegd_patch = r.patch / n;
    let plegd_other_writes = churn
        .requests
        .iter()
        .filter(|q| q.method != "GET" && q.authorization().as_deref() != Some("/pods/status:patch"))
        .count() as f64
        / churn.seconds
        / n;
    let kubelet_writes = changes + KUBELET_LEASE_PUTS + KUBELET_NODE_STATUS_PATCHES;
    let plegd_writes = plegd_patch + plegd_other_writes;
    println!(
        "\nWrites per node at {changes:.2} pod status changes/s per node (kubelet: its defaults; plegd: measured, churn at {count} nodes):\n"
    );
    println!("| per node, a second | kubelet | plegd |");
    println!("|---|---|---|");
    println!("| pod status PATCH | {changes:.3} (one per change) | {plegd_patch:.3} |");
    println!("| Lease renewal (PUT) | {KUBELET_LEASE_PUTS:.3} | 0 |");
    println!("| node status PATCH | {KUBELET_NODE_STATUS_PATCHES:.4} | 0 |");
    println!("| other writes | — | {plegd_other_writes:.3} |");
    println!("| **writes** | **{kubelet_writes:.3}** | **{plegd_writes:.3}** |");
    println!(
        "| writes at {CLUSTER} nodes | {:.0} | {:.0} |",
        kubelet_writes * CLUSTER_NODES,
        plegd_writes * CLUSTER_NODES
    );
    println!("| node GET (status check, from the watch cache) | {KUBELET_NODE_GETS:.3} | 0 |");
    println!("\n(run took {:.0} s)", started.elapsed().as_secs_f64());
}
