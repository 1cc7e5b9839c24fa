//! plegd beside the real kubelet 1.37 on one node (tests/cluster/cluster.sh: kube-apiserver, kubelet
//! and the rest built from Kubernetes' own code, containerd 2.1 or 1.7), over the same churn, in one
//! run: how fast each makes a change visible, and what each costs.
//!
//! Churn, per pass: `--pods` (100) pods started at once, their containers killed one by one
//! (`--spread-ms`, 200 ms apart), the pods deleted; the same number started again and their
//! containers killed in one burst (one `kill -9` of every process). Then `--idle-secs` (60) of
//! quiet with the pods running.
//!
//! Latency, from the CRI's `startedAt` / `finishedAt` of each container, to what one watcher sees:
//!   floor    the CRI state (one ListContainers every 5 ms shows RUNNING / EXITED);
//!   kubelet  the kubelet's container status (running / terminated) on the apiserver;
//!   plegd    plegd's `plegd.io/ContainersRunning` condition (conditions mode) on the apiserver;
//!   computed plegd's generated status as its StatusService (`plegd status`) reports it.
//! Cost: the requests each makes to kube-apiserver (its audit log), kube-apiserver's CPU with and
//! without plegd over the same churn, and the CPU and memory of the kubelet and of plegd.
//!
//! Passes: `defaults` (the kubelet as it ships), `evented` (its EventedPLEG gate on), `kubelet-only`
//! (no plegd: the apiserver's cost without it), `unfollowed` (as `defaults`, without the bench's
//! follower of plegd's StatusService: plegd's cost without serving the bench; no computed-status
//! column). Needs root; the default passes take ~10 minutes.
//!
//!     cargo bench --bench kubelet_side_by_side -- --passes defaults,unfollowed
//!
//!     cargo bench --bench kubelet_side_by_side
//!     cargo bench --bench kubelet_side_by_side -- --pods 50 --passes defaults,kubelet-only
//!     PLEGD_CLUSTER_CONTAINERD_VERSION=1.7 cargo bench --bench kubelet_side_by_side
//!
//! `PLEGD_CLUSTER_KUBELET_VERSION=1.35.4|1.36.3` runs the node's kubelet of that version under the
//! 1.37.2 control plane (tests/cluster/cluster.sh), plegd following its rules.
//!
//! `PLEGD_BINARY` installs another plegd binary than this tree's (an A/B of two builds on the same
//! node: tests/bench/side_by_side_ab.sh). `PLEGD_BENCH_OVERLAY` installs plegd from another
//! conditions-mode kustomization than deploy/conditions (tests/bench/conditions-cri: CRI events as
//! triggers; tests/bench/conditions-containerd: containerd's events service, which `auto` no longer
//! takes on containerd 2.x).
//!
//! `PLEGD_BENCH_TRACE=DIR` also writes, per pass, each change's times (`DIR/PASS.jsonl`: pod,
//! container, change, the CRI's time and when each seer saw it, in seconds since the epoch) and
//! plegd's log over the churn (`DIR/PASS-plegd.log`); with `PLEGD_CLUSTER_PLEGD_LOG_LEVEL` set to
//! `info,plegd::triggers=debug,plegd::pleg=debug`, tests/bench/exit_trace.py follows each exit
//! through plegd from that.

mod args;
mod cluster_sh;
mod stats;
use plegd_test_support as support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::{StreamExt, TryStreamExt};
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use args::arg;
use cluster_sh::cluster_sh;
use plegd::observe::api::status_service_watch_response;
use stats::percentile;
use support::cluster::{CONTAINERD_SOCKET, IMAGE, client_from, plegd_status_stream};
use support::process::{clock_ticks, cpu_ticks, rss_mib};

const NS: &str = "side-by-side";
const CONDITION: &str = "plegd.io/ContainersRunning";
const RUN: &str = "/var/lib/plegd-test/cluster/run";
const PLEGD_USER: &str = "system:serviceaccount:plegd-system:plegd";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Change {
    Started,
    Exited,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Seer {
    Floor,
    Kubelet,
    Plegd,
    Computed,
}

impl Seer {
    fn name(self) -> &'static str {
        match self {
            Seer::Floor => "CRI-state floor",
            Seer::Kubelet => "kubelet: container status",
            Seer::Plegd => "plegd: condition (conditions mode)",
            Seer::Computed => "plegd: computed status (shadow)",
        }
    }
}

/// When each seer first saw each change of each pod: (pod, change, seer) → time.
type Seen = Arc<Mutex<HashMap<(String, Change, Seer), SystemTime>>>;

fn see(seen: &Seen, pod: &str, change: Change, seer: Seer) {
    seen.lock()
        .unwrap()
        .entry((pod.to_owned(), change, seer))
        .or_insert_with(SystemTime::now);
}

fn pid_of(name: &str) -> Option<u32> {
    std::fs::read_to_string(format!("{RUN}/{name}.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// plegd's process (in its pod), if it runs.
fn plegd_pid() -> Option<u32> {
    let out = Command::new("pgrep")
        .args(["-f", "^/usr/local/bin/plegd run"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().next()?.trim().parse().ok()
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
        },
    }))
    .unwrap()
}

/// The kubelet's writes and plegd's condition, from one watch of the namespace.
fn watch_apiserver(pods: Api<Pod>, seen: Seen) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
                continue;
            };
            let name = p.metadata.name.clone().unwrap_or_default();
            let status = p.status.unwrap_or_default();
            let state = status
                .container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == "main")
                .and_then(|c| c.state.clone())
                .unwrap_or_default();
            if state.running.is_some() || state.terminated.is_some() {
                see(&seen, &name, Change::Started, Seer::Kubelet);
            }
            if state.terminated.is_some() {
                see(&seen, &name, Change::Exited, Seer::Kubelet);
            }
            if let Some(c) = status.conditions.iter().flatten().find(|c| c.type_ == CONDITION) {
                if c.status == "True" {
                    see(&seen, &name, Change::Started, Seer::Plegd);
                } else if seen
                    .lock()
                    .unwrap()
                    .contains_key(&(name.clone(), Change::Started, Seer::Plegd))
                {
                    see(&seen, &name, Change::Exited, Seer::Plegd);
                }
            }
        }
    })
}

/// plegd's generated statuses, from its StatusService.
fn watch_computed(seen: Seen) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = plegd_status_stream(NS).await;
        while let Ok(Some(response)) = stream.message().await {
            let report = match response.item {
                Some(status_service_watch_response::Item::Report(report)) => report,
                Some(status_service_watch_response::Item::Lagged(lagged)) => {
                    eprintln!("plegd's status stream lagged: {} reports missed", lagged.missed);
                    continue;
                }
                _ => continue,
            };
            let status: Value = serde_json::from_str(&report.status_json).unwrap_or_default();
            let main = status["containerStatuses"]
                .as_array()
                .and_then(|l| l.iter().find(|c| c["name"] == "main"))
                .cloned()
                .unwrap_or_default();
            if !main["state"]["running"].is_null() || !main["state"]["terminated"].is_null() {
                see(&seen, &report.pod, Change::Started, Seer::Computed);
            }
            if !main["state"]["terminated"].is_null() {
                see(&seen, &report.pod, Change::Exited, Seer::Computed);
            }
        }
    })
}

/// The CRI state: one ListContainers of the namespace's containers every 5 ms. Also which
/// container runs each pod.
fn watch_floor(
    mut client: cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    seen: Seen,
    ids: Arc<Mutex<HashMap<String, String>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok(listed) = support::cluster::namespace_containers(&mut client, NS).await {
                for c in listed {
                    let Some(pod) = c.labels.get("io.kubernetes.pod.name").cloned() else {
                        continue;
                    };
                    ids.lock().unwrap().insert(pod.clone(), c.id.clone());
                    if c.state == cri::ContainerState::ContainerRunning as i32
                        || c.state == cri::ContainerState::ContainerExited as i32
                    {
                        see(&seen, &pod, Change::Started, Seer::Floor);
                    }
                    if c.state == cri::ContainerState::ContainerExited as i32 {
                        see(&seen, &pod, Change::Exited, Seer::Floor);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// The processes of the namespace's containers: container id → pid (`ctr tasks ls`).
fn task_pids() -> HashMap<String, String> {
    let out = Command::new("ctr")
        .args(["-a", CONTAINERD_SOCKET, "-n", "k8s.io", "tasks", "ls"])
        .output()
        .expect("ctr tasks ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_owned(), f.next()?.to_owned()))
        })
        .collect()
}

/// CPU seconds and RSS of the processes that matter.
#[derive(Debug, Default, Clone)]
struct Usage {
    cpu: BTreeMap<&'static str, f64>,
    rss: BTreeMap<&'static str, f64>,
}

fn usage() -> Usage {
    let mut u = Usage::default();
    let procs = [
        ("kube-apiserver", pid_of("kube-apiserver")),
        ("etcd", pid_of("etcd")),
        ("kubelet", pid_of("kubelet")),
        ("plegd", plegd_pid()),
    ];
    for (name, pid) in procs {
        if let Some(pid) = pid {
            u.cpu.insert(name, cpu_ticks(pid) / clock_ticks());
            u.rss.insert(name, rss_mib(pid));
        }
    }
    u
}

/// What a user asked of the apiserver, by kind, from the audit log's lines from `offset` on.
fn requests(offset: u64) -> (BTreeMap<String, BTreeMap<&'static str, usize>>, u64) {
    let path = format!("{RUN}/audit.log");
    let text = std::fs::read(&path).unwrap_or_default();
    let end = text.len() as u64;
    let text = String::from_utf8_lossy(&text[(offset as usize).min(text.len())..]).into_owned();
    let mut by: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" && e["stage"] != "ResponseStarted" {
            continue;
        }
        // A watch logs ResponseStarted and, when it ends, ResponseComplete: count it once.
        if e["verb"] == "watch" && e["stage"] == "ResponseComplete" {
            continue;
        }
        let user = e["user"]["username"].as_str().unwrap_or_default();
        let who = if user == PLEGD_USER {
            "plegd".to_owned()
        } else if user.starts_with("system:node:") {
            "kubelet".to_owned()
        } else {
            continue;
        };
        let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
        let sub = e["objectRef"]["subresource"].as_str().unwrap_or_default();
        let verb = e["verb"].as_str().unwrap_or_default();
        let kind = match (verb, resource, sub) {
            ("patch" | "update", "pods", "status") => "pod status writes",
            (_, "leases", _) => "Lease reads and writes",
            ("patch" | "update", "nodes", "status") => "node status writes",
            ("watch", _, _) => "watches",
            ("list", _, _) => "LISTs",
            ("get", _, _) => "GETs",
            (_, "events", _) => "Events",
            _ => "other",
        };
        *by.entry(who).or_default().entry(kind).or_default() += 1;
    }
    (by, end)
}

fn audit_end() -> u64 {
    std::fs::metadata(format!("{RUN}/audit.log"))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// What a churn round works with.
struct Churn<'a> {
    pods: &'a Api<Pod>,
    node: &'a str,
    n: usize,
    spread: Duration,
    seen: &'a Seen,
    ids: &'a Arc<Mutex<HashMap<String, String>>>,
    containerd: &'a support::containerd::Containerd,
}

/// One churn round: `n` pods started, their containers killed (`burst`: at once, else `spread`
/// apart), every change seen; returns each pod's container's CRI times.
async fn churn(c: &Churn<'_>, round: &str, burst: bool) -> Vec<(String, SystemTime, SystemTime)> {
    let Churn {
        pods,
        node,
        n,
        spread,
        seen,
        ids,
        containerd,
    } = *c;
    let names: Vec<String> = (0..n).map(|i| format!("{round}-{i:03}")).collect();
    futures_util::stream::iter(names.clone())
        .map(|name| async move { pods.create(&PostParams::default(), &pod(&name, node)).await })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("create the pods");
    let all_saw = |change: Change| {
        let seen = seen.clone();
        let names = names.clone();
        move || {
            let seen = seen.lock().unwrap();
            names.iter().all(|p| {
                [Seer::Floor, Seer::Kubelet, Seer::Plegd, Seer::Computed]
                    .iter()
                    .all(|s| seen.contains_key(&(p.clone(), change, *s)))
            })
        }
    };
    support::wait_until(
        "every start seen by all",
        Duration::from_secs(600),
        all_saw(Change::Started),
    )
    .await;
    // Let the starts settle before the exits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let by_pod = ids.lock().unwrap().clone();
    let pids = task_pids();
    let targets: Vec<String> = names.iter().filter_map(|p| pids.get(by_pod.get(p)?).cloned()).collect();
    assert_eq!(targets.len(), n, "a process for every container");
    if burst {
        let status = Command::new("kill").arg("-9").args(&targets).status().expect("kill");
        assert!(status.success());
    } else {
        for pid in &targets {
            let _ = Command::new("kill").args(["-9", pid]).status();
            tokio::time::sleep(spread).await;
        }
    }
    support::wait_until(
        "every exit seen by all",
        Duration::from_secs(600),
        all_saw(Change::Exited),
    )
    .await;
    let mut times = Vec::new();
    for p in &names {
        let id = by_pod[p].clone();
        let (started, finished) = containerd.container_times(&id).await;
        times.push((p.clone(), started, finished));
    }
    pods.delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
        .await
        .expect("delete the pods");
    support::wait_for("the pods gone", Duration::from_secs(600), || async {
        pods.list(&ListParams::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(false)
    })
    .await;
    times
}

/// `PLEGD_BENCH_TRACE`: each change's times, and plegd's log so far.
fn trace(
    dir: &Path,
    pass: &str,
    times: &[(String, SystemTime, SystemTime)],
    spread_count: usize,
    seen: &Seen,
    ids: &Arc<Mutex<HashMap<String, String>>>,
) {
    let epoch = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
    };
    std::fs::create_dir_all(dir).expect("PLEGD_BENCH_TRACE: create the directory");
    let (seen, ids) = (seen.lock().unwrap(), ids.lock().unwrap());
    let mut lines = String::new();
    for (i, (pod, started, finished)) in times.iter().enumerate() {
        for (change, at) in [(Change::Started, started), (Change::Exited, finished)] {
            let by: serde_json::Map<String, Value> = [Seer::Floor, Seer::Kubelet, Seer::Plegd, Seer::Computed]
                .iter()
                .filter_map(|s| {
                    Some((
                        format!("{s:?}").to_lowercase(),
                        json!(epoch(*seen.get(&(pod.clone(), change, *s))?)),
                    ))
                })
                .collect();
            let line = json!({
                "pod": pod, "container": ids.get(pod), "change": format!("{change:?}").to_lowercase(),
                "round": if i < spread_count { "spread" } else { "burst" }, "cri": epoch(*at), "seen": by,
            });
            lines.push_str(&format!("{line}\n"));
        }
    }
    std::fs::write(dir.join(format!("{pass}.jsonl")), lines).expect("PLEGD_BENCH_TRACE: write the changes");
    std::fs::write(dir.join(format!("{pass}-plegd.log")), cluster_sh::plegd_log())
        .expect("PLEGD_BENCH_TRACE: write plegd's log");
}

fn row(name: &str, mut ms: Vec<f64>) -> Option<f64> {
    if ms.is_empty() {
        println!("| {name} | 0 | — | — | — |");
        return None;
    }
    ms.sort_by(f64::total_cmp);
    let p50 = percentile(&ms, 0.5);
    println!(
        "| {name} | {} | {:.0} | {:.0} | {:.0} |",
        ms.len(),
        p50,
        percentile(&ms, 0.99),
        ms.last().unwrap()
    );
    Some(p50)
}

fn since(t: SystemTime, from: SystemTime) -> f64 {
    match t.duration_since(from) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -(e.duration().as_secs_f64() * 1000.0),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = arg("--pods").unwrap_or(100);
    let spread = Duration::from_millis(arg("--spread-ms").unwrap_or(200));
    let idle = Duration::from_secs(arg("--idle-secs").unwrap_or(60));
    let passes: String = arg("--passes").unwrap_or_else(|| "defaults,evented,kubelet-only".to_owned());
    // The node's kubelet, as tests/cluster/cluster.sh starts it (the control plane's unless
    // `PLEGD_CLUSTER_KUBELET_VERSION` names another).
    println!(
        "kubelet {} (control plane 1.37.2) and plegd {} on one node, containerd {}, {n} pods per round",
        std::env::var("PLEGD_CLUSTER_KUBELET_VERSION").unwrap_or_else(|_| "1.37.2".into()),
        env!("CARGO_PKG_VERSION"),
        std::env::var("PLEGD_CLUSTER_CONTAINERD_VERSION").unwrap_or_else(|_| "2.3".into())
    );
    let mut apiserver_cpu: BTreeMap<String, f64> = BTreeMap::new();
    // The install: deploy/conditions, or another conditions-mode kustomization (the plegd seer
    // reads its condition).
    let overlay = std::env::var("PLEGD_BENCH_OVERLAY").unwrap_or_else(|_| "conditions".to_owned());
    for pass in passes.split(',') {
        // `followed`: the bench follows plegd's StatusService for its computed status. Serving
        // that follower (every report, with its differences from the apiserver's status) is
        // plegd's work for the bench alone: `unfollowed` measures plegd's cost without it.
        let (gates, with_plegd, followed) = match pass {
            "defaults" => ("", true, true),
            "evented" => ("EventedPLEG=true", true, true),
            "unfollowed" => ("", true, false),
            "kubelet-only" => ("", false, false),
            other => panic!("--passes: unknown pass {other:?} (defaults, evented, unfollowed, kubelet-only)"),
        };
        println!("\n## pass: {pass}\n");
        let kubeconfig = if with_plegd {
            cluster_sh(&["start", "--plegd", &overlay], gates)
        } else {
            let k = cluster_sh(&["start"], gates);
            cluster_sh(&["remove-plegd"], gates);
            k
        };
        let client = client_from(Path::new(&kubeconfig)).await;
        let node = {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
            nodes.list(&ListParams::default()).await.unwrap().items[0]
                .metadata
                .name
                .clone()
                .unwrap()
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        if namespaces.get_opt(NS).await.unwrap().is_none() {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
                )
                .await
                .unwrap();
        }
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), NS);
        support::wait_for("the default service account", Duration::from_secs(60), || async {
            accounts.get_opt("default").await.ok().flatten().is_some()
        })
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let seen: Seen = Default::default();
        let ids = Arc::new(Mutex::new(HashMap::new()));
        let containerd = support::containerd::Containerd::at(PathBuf::from(CONTAINERD_SOCKET));
        let cri_client = plegd::runtime::CriRuntime::new(
            Path::new(CONTAINERD_SOCKET),
            &plegd::runtime::CriConfig::default(),
            Arc::new(plegd::metrics::Metrics::new()),
        )
        .client();
        let mut tasks = vec![
            watch_apiserver(pods.clone(), seen.clone()),
            watch_floor(cri_client, seen.clone(), ids.clone()),
        ];
        if followed {
            tasks.push(watch_computed(seen.clone()));
        } else {
            // What is not watched is not waited for: marked seen as what stands in for it (the
            // kubelet's status for plegd's without plegd; plegd's condition for its computed
            // status when it is not followed).
            let (from, to): (Seer, &[Seer]) = if with_plegd {
                (Seer::Plegd, &[Seer::Computed])
            } else {
                (Seer::Kubelet, &[Seer::Plegd, Seer::Computed])
            };
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    {
                        let mut s = seen.lock().unwrap();
                        let known: Vec<_> = s
                            .iter()
                            .filter(|((_, _, w), _)| *w == from)
                            .map(|(k, v)| (k.clone(), *v))
                            .collect();
                        for ((p, c, _), t) in known {
                            for seer in to {
                                s.entry((p.clone(), c, *seer)).or_insert(t);
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let (audit_from, before, started) = (audit_end(), usage(), Instant::now());
        let round = Churn {
            pods: &pods,
            node: &node,
            n,
            spread,
            seen: &seen,
            ids: &ids,
            containerd: &containerd,
        };
        let mut times = churn(&round, &format!("{pass}-spread"), false).await;
        let spread_count = times.len();
        times.extend(churn(&round, &format!("{pass}-burst"), true).await);
        let churn_secs = started.elapsed().as_secs_f64();
        if let Ok(dir) = std::env::var("PLEGD_BENCH_TRACE") {
            trace(Path::new(&dir), pass, &times, spread_count, &seen, &ids);
        }
        let (churn_requests, audit_mid) = requests(audit_from);
        let after = usage();

        // Idle: pods running, nothing changing.
        let idle_names: Vec<String> = (0..n.min(100)).map(|i| format!("{pass}-idle-{i:03}")).collect();
        for name in &idle_names {
            pods.create(&PostParams::default(), &pod(name, &node)).await.unwrap();
        }
        support::wait_until("the idle pods seen running", Duration::from_secs(600), || {
            let s = seen.lock().unwrap();
            idle_names
                .iter()
                .all(|p| s.contains_key(&(p.clone(), Change::Started, Seer::Kubelet)))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (idle_audit, idle_before) = (audit_end(), usage());
        tokio::time::sleep(idle).await;
        let (idle_requests, _) = requests(idle_audit);
        let idle_after = usage();
        let _ = audit_mid;
        pods.delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
            .await
            .unwrap();
        support::wait_for("the idle pods gone", Duration::from_secs(600), || async {
            pods.list(&ListParams::default())
                .await
                .map(|l| l.items.is_empty())
                .unwrap_or(false)
        })
        .await;
        for t in tasks {
            t.abort();
        }

        // Latency.
        let seen = seen.lock().unwrap().clone();
        let seers: &[Seer] = if followed {
            &[Seer::Floor, Seer::Kubelet, Seer::Plegd, Seer::Computed]
        } else if with_plegd {
            &[Seer::Floor, Seer::Kubelet, Seer::Plegd]
        } else {
            &[Seer::Floor, Seer::Kubelet]
        };
        for (label, change, range) in [
            ("pod starts (from startedAt)", Change::Started, 0..times.len()),
            ("exits, spread (from finishedAt)", Change::Exited, 0..spread_count),
            (
                "exits, one burst (from finishedAt)",
                Change::Exited,
                spread_count..times.len(),
            ),
        ] {
            println!("{label}, ms:\n\n| seen by | n | p50 | p99 | max |\n|---|---|---|---|---|");
            let mut medians = BTreeMap::new();
            for seer in seers {
                let ms: Vec<f64> = times[range.clone()]
                    .iter()
                    .filter_map(|(p, started, finished)| {
                        let from = if change == Change::Started { *started } else { *finished };
                        seen.get(&(p.clone(), change, *seer)).map(|t| since(*t, from))
                    })
                    .collect();
                if let Some(p50) = row(seer.name(), ms) {
                    medians.insert(*seer, p50);
                }
            }
            // Each change: how long after the CRI state showed it each seer saw it.
            for seer in &seers[1..] {
                let ms: Vec<f64> = times[range.clone()]
                    .iter()
                    .filter_map(|(p, _, _)| {
                        let floor = seen.get(&(p.clone(), change, Seer::Floor))?;
                        seen.get(&(p.clone(), change, *seer)).map(|t| since(*t, *floor))
                    })
                    .collect();
                row(&format!("{} − floor, per change", seer.name()), ms);
            }
            if let (Some(k), Some(p)) = (medians.get(&Seer::Kubelet), medians.get(&Seer::Plegd)) {
                println!("\nkubelet p50 / plegd p50: {:.1}×\n", k / p.max(1.0));
            } else {
                println!();
            }
        }

        // Cost.
        println!("churn: {churn_secs:.0} s; CPU seconds over it, and RSS after:\n");
        println!("| process | CPU s (churn) | CPU s/min (idle) | RSS MiB |\n|---|---|---|---|");
        for name in ["kube-apiserver", "etcd", "kubelet", "plegd"] {
            let (Some(b), Some(a)) = (before.cpu.get(name), after.cpu.get(name)) else {
                continue;
            };
            let idle_cpu = idle_after
                .cpu
                .get(name)
                .zip(idle_before.cpu.get(name))
                .map(|(a, b)| a - b);
            println!(
                "| {name} | {:.2} | {} | {:.0} |",
                a - b,
                idle_cpu.map_or("—".into(), |c| format!("{:.3}", c * 60.0 / idle.as_secs_f64())),
                idle_after.rss.get(name).copied().unwrap_or_default()
            );
        }
        apiserver_cpu.insert(
            pass.to_owned(),
            after.cpu.get("kube-apiserver").copied().unwrap_or_default()
                - before.cpu.get("kube-apiserver").copied().unwrap_or_default(),
        );
        for (title, by, secs) in [
            ("requests over the churn", &churn_requests, churn_secs),
            (
                "requests while idle, per minute",
                &idle_requests,
                idle.as_secs_f64() / 60.0,
            ),
        ] {
            println!("\n{title}:\n\n| kind | kubelet | plegd |\n|---|---|---|");
            let kinds: std::collections::BTreeSet<&str> = by.values().flat_map(|m| m.keys().copied()).collect();
            let per = |who: &str, kind: &str| {
                let n = by.get(who).and_then(|m| m.get(kind)).copied().unwrap_or(0) as f64;
                if title.contains("per minute") {
                    format!("{:.1}", n / secs)
                } else {
                    format!("{n:.0}")
                }
            };
            for kind in kinds {
                println!("| {kind} | {} | {} |", per("kubelet", kind), per("plegd", kind));
            }
        }
    }
    // The cluster stays up for a look; the plegd install goes (its admission policies would refuse
    // another plegd's writes, a demo's in full mode for one).
    cluster_sh(&["remove-plegd"], "");
    if let (Some(with), Some(without)) = (apiserver_cpu.get("defaults"), apiserver_cpu.get("kubelet-only")) {
        println!(
            "\nkube-apiserver CPU over the same churn: {with:.2} s with plegd, {without:.2} s without: plegd's share {:.2} s",
            with - without
        );
    }
}
