//! What a fleet of plegd costs one control plane, and what it does when the control plane
//! stumbles: tests/support/fleet.rs's hollow nodes (N nodes against one kube-apiserver 1.37.2 and
//! etcd, built from Kubernetes' own code, with Node and RBAC authorization, NodeRestriction,
//! priority and fairness with deploy/'s priority level; each node `--pods` pods of one container on
//! a fake CRI server of its own, in this process, and its own `plegd run` — this build's binary, or
//! `--binary`'s — as the DaemonSet runs it, with a token bound to its Node).
//!
//! For each N (`--nodes`), on a fresh apiserver: a phase with no plegd (the server's own cost with
//! the pods stored), then plegd idle, then under churn at each of `--rates` changes a second per
//! node (a container's exit, then its restart, round robin); `--mode full` (plegd owns the status)
//! or `conditions` (plegd beside a kubelet: the fleet writes each pod's Running status as its
//! kubelet would, once, and plegd its own condition). Each phase: plegd's requests a second
//! by verb from the server's request log; CPU-ms a second of the server, etcd and all plegds
//! (/proc); resident memory of the server, etcd and a plegd; pod watches open and plegd's TCP
//! connections to the server; the server's time for a status PATCH (median, p99, from the audit
//! log). Then a straight line through the per-N figures (least squares) gives 5,000 nodes.
//!
//! With `--storms`, at the largest N: kube-apiserver restarted; etcd restarted and compacted;
//! every plegd restarted 10 % at a time; plegd's priority level cut to one seat for
//! `--throttle-seconds`; then, for each of `--lists`, every plegd restarted at once with that
//! `--initial-list` (every node lists at the same moment) and kube-apiserver restarted once more.
//! Each: plegd's requests per node in the minute after, how long until every node watched again
//! and wrote every exit made during the fault, PATCHes of pods that did not change, exits landed,
//! the server's p99 for a status write, CPU of the server and etcd, the server's peak memory.
//!
//! With `--flood`, on a fleet of `--flood-nodes` (25) on a server of 60 seats
//! (`--max-requests-inflight 40`, `--max-mutating-requests-inflight 20`): churn at 1 change a
//! second per node with no flood, then beside each of a tenant's floods of `workload-low`
//! (`--flood-kinds`, 24 service accounts, 4 requests at a time each: `held`, writes of a ConfigMap
//! that a slow webhook holds `--flood-hold` (2) seconds each, seats taken and no CPU; `lists`,
//! lists of 1.6 MiB of ConfigMaps, seats and the server's CPU) with plegd in its own priority
//! level; then all again with deploy/base/priority.yaml deleted (plegd in `workload-low`): the
//! server's time for plegd's status PATCHes (its queueing in priority and fairness included) and
//! its 429s.
//!
//!     cargo bench --bench apiserver_load -- --nodes 25,50,100,200 --storms        # ~1 h
//!     cargo bench --bench apiserver_load -- --nodes 25 --rates 1 --flood
//!     cargo bench --bench apiserver_load -- --nodes 200 --no-phases --list-storms --lists stream,pages,cache,stream
//!     cargo bench --bench apiserver_load -- --nodes 4 --pods 10 --seconds 5 --rates 1
//!     cargo bench --bench apiserver_load -- --nodes 50 --binary /tmp/old/plegd      # another build
//!     cargo bench --bench apiserver_load -- --nodes 25,50,100 --mode conditions     # beside kubelets

use plegd_test_support::fleet;
mod args;

use std::time::{Duration, Instant, SystemTime};

use args::arg;
use fleet::{Fault, Fleet, Phase, PlegdSetup, Rates, Storm, patch_durations, quantile};
use plegd_test_support::flood;

/// The cluster size the per-node figures are carried to, as a number and as printed.
const CLUSTER_NODES: f64 = 5000.0;
const CLUSTER: &str = "5,000";

/// The kubelet's heartbeat and node status, per node (kubelet defaults, pkg/kubelet/apis/config/
/// v1beta1/defaults.go and pkg/kubelet/kubelet.go): the Lease is renewed (an update, PUT) every
/// NodeLeaseDurationSeconds (40) × nodeLeaseRenewIntervalFraction (0.25) = 10 s; every
/// NodeStatusUpdateFrequency (10 s) the node is read (GET, from the apiserver's cache) and its
/// status PATCHed only when it changed or NodeStatusReportFrequency (5 min) has passed.
const KUBELET_LEASE_PUTS: f64 = 1.0 / 10.0;
const KUBELET_NODE_STATUS_PATCHES: f64 = 1.0 / 300.0;

/// A comma-separated list after `name`.
fn list<T: std::str::FromStr>(name: &str) -> Option<Vec<T>> {
    let text: String = arg(name)?;
    text.split(',').map(|v| v.trim().parse().ok()).collect()
}

/// The phases of one N.
struct Run {
    nodes: usize,
    phases: Vec<Phase>,
}

impl Run {
    fn base(&self) -> &Phase {
        &self.phases[0]
    }
}

/// (intercept, slope, r²) of the least-squares line through `points`.
fn fit(points: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = points.len() as f64;
    if points.len() < 2 {
        let (x, y) = points.first().copied().unwrap_or((1.0, 0.0));
        return (0.0, y / x.max(1.0), 1.0);
    }
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let syy: f64 = points.iter().map(|(_, y)| (y - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        1.0
    };
    (my - slope * mx, slope, r2)
}

fn print_phases(runs: &[Run]) {
    println!(
        "\nplegd's requests a second (the server's request log, plegd's service account only) and what they cost:\n"
    );
    println!(
        "| nodes | phase | changes/s | PATCH/s | LIST/s | WATCH/s | other/s | per node/s | PATCHes per change | failed | apiserver CPU-ms/s | per node | etcd CPU-ms/s | per node | plegd CPU-ms/s per node | PATCH ms median / p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        let n = run.nodes as f64;
        let base = run.base();
        for phase in &run.phases {
            let r = Rates::of(&phase.requests, phase.seconds);
            let per_change = if phase.changes_made > 0 {
                format!("{:.2}", phase.patches_landed as f64 / phase.changes_made as f64)
            } else {
                "—".into()
            };
            let net = |v: f64, b: f64| {
                if phase.name == "no plegd" {
                    "—".to_owned()
                } else {
                    format!("{:.3}", (v - b) / n)
                }
            };
            let mut durations = patch_durations(&phase.requests);
            let latency = if durations.is_empty() {
                "—".to_owned()
            } else {
                format!(
                    "{:.1} / {:.1}",
                    quantile(&mut durations, 0.5),
                    quantile(&mut durations, 0.99)
                )
            };
            let failed = phase.requests.iter().filter(|r| r.status >= 400).count();
            println!(
                "| {} | {} | {:.1} | {:.2} | {:.3} | {:.3} | {:.3} | {:.4} | {per_change} | {failed} | {:.1} | {} | {:.1} | {} | {:.3} | {latency} |",
                run.nodes,
                phase.name,
                phase.changes as f64 / phase.seconds,
                r.patch,
                r.list,
                r.watch,
                r.other,
                r.total() / n,
                phase.apiserver_cpu,
                net(phase.apiserver_cpu, base.apiserver_cpu),
                phase.etcd_cpu,
                net(phase.etcd_cpu, base.etcd_cpu),
                phase.plegd_cpu / n,
            );
        }
    }
    println!("\nMemory, watches and connections at the end of each phase:\n");
    println!(
        "| nodes | phase | apiserver live heap MiB | apiserver RSS MiB | etcd RSS MiB | plegd RSS MiB (mean) | pod watches open | plegd connections to the apiserver |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for run in runs {
        for phase in &run.phases {
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {} |",
                run.nodes,
                phase.name,
                phase.apiserver_heap,
                phase.apiserver_rss,
                phase.etcd_rss,
                phase.plegd_rss,
                phase.pod_watches,
                phase.connections
            );
        }
    }
}

/// The fit by phase name: apiserver and etcd CPU net of no plegd, requests, server memory growth,
/// each against N, and 5,000 nodes from the line.
fn print_fleet(runs: &[Run]) {
    if runs.is_empty() {
        return;
    }
    println!(
        "\nAt {CLUSTER} nodes, from a straight line through every N (least squares: intercept + slope × N; r² its fit), net of the server's cost with no plegd:\n"
    );
    println!("| phase | quantity | slope per node | r² | at {CLUSTER} nodes |");
    println!("|---|---|---|---|---|");
    let names: Vec<String> = runs[0].phases.iter().skip(1).map(|p| p.name.clone()).collect();
    for name in names {
        let series = |f: &dyn Fn(&Phase, &Phase) -> f64| -> Vec<(f64, f64)> {
            runs.iter()
                .filter_map(|run| {
                    let phase = run.phases.iter().find(|p| p.name == name)?;
                    Some((run.nodes as f64, f(phase, run.base())))
                })
                .collect()
        };
        // (quantity, its points by N, the divisor into its unit, the unit)
        type Row<'a> = (&'a str, Vec<(f64, f64)>, f64, &'a str);
        let rows: [Row; 6] = [
            (
                "apiserver CPU",
                series(&|p, b| p.apiserver_cpu - b.apiserver_cpu),
                1000.0,
                "cores",
            ),
            ("etcd CPU", series(&|p, b| p.etcd_cpu - b.etcd_cpu), 1000.0, "cores"),
            (
                "plegd requests",
                series(&|p, _| Rates::of(&p.requests, p.seconds).total()),
                1.0,
                "requests/s",
            ),
            (
                "plegd PATCHes",
                series(&|p, _| Rates::of(&p.requests, p.seconds).patch),
                1.0,
                "PATCH/s",
            ),
            (
                "apiserver live heap",
                series(&|p, b| p.apiserver_heap - b.apiserver_heap),
                1024.0,
                "GiB",
            ),
            (
                "apiserver RSS",
                series(&|p, b| p.apiserver_rss - b.apiserver_rss),
                1024.0,
                "GiB",
            ),
        ];
        for (quantity, points, unit, unit_name) in rows {
            let (a, b, r2) = fit(&points);
            println!(
                "| {name} | {quantity} | {:.4} | {r2:.3} | {:.2} {unit_name} |",
                b,
                (a + b * CLUSTER_NODES) / unit
            );
        }
    }
}

/// plegd's writes per node beside the kubelet's at the same churn (of the largest N).
fn print_beside_kubelet(run: &Run) {
    let n = run.nodes as f64;
    for churn in run.phases.iter().filter(|p| p.changes > 0) {
        let changes = churn.changes as f64 / churn.seconds / n;
        let r = Rates::of(&churn.requests, churn.seconds);
        let plegd_patch = r.patch / n;
        let kubelet_writes = changes + KUBELET_LEASE_PUTS + KUBELET_NODE_STATUS_PATCHES;
        println!(
            "\nWrites per node at {changes:.2} pod status changes a second per node ({} nodes; kubelet: its defaults, one status PATCH per change at most):\n",
            run.nodes
        );
        println!("| per node, a second | kubelet | plegd |");
        println!("|---|---|---|");
        println!("| pod status PATCH | ≤ {changes:.3} | {plegd_patch:.3} |");
        println!("| Lease renewal (PUT) | {KUBELET_LEASE_PUTS:.3} | 0 |");
        println!("| node status PATCH | {KUBELET_NODE_STATUS_PATCHES:.4} | 0 |");
        println!(
            "| **writes at {CLUSTER} nodes** | **{:.0}** | **{:.0}** |",
            kubelet_writes * CLUSTER_NODES,
            plegd_patch * CLUSTER_NODES
        );
    }
}

fn print_storms(storms: &[Storm]) {
    if storms.is_empty() {
        return;
    }
    println!(
        "\nStorms at {} nodes: from the end of the fault, plegd's requests per node in the {} s after, until every node watched again and wrote every exit made during the fault, PATCHes of pods that did not change:\n",
        storms[0].nodes,
        storms[0].window.as_secs()
    );
    println!(
        "| storm | fault s | LIST per node | WATCH per node | PATCH per node | 429s | synced after s | needless PATCHes | exits landed | PATCH ms p99 | apiserver CPU-s | etcd CPU-s | apiserver peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for storm in storms {
        let n = storm.nodes as f64;
        let count =
            |f: &dyn Fn(&plegd_test_support::apiserver::Logged) -> bool| storm.after.iter().filter(|r| f(r)).count();
        let lists = count(&|r| r.method == "GET" && !r.query.contains("watch="));
        let watches = count(&|r| r.method == "GET" && r.query.contains("watch="));
        let patches = count(&|r| r.method == "PATCH");
        let refused = count(&|r| r.status == 429);
        let mut durations = patch_durations(&storm.after);
        println!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {refused} | {:.1} | {} | {} of {} | {:.1} | {:.1} | {:.1} | {:.0} |",
            storm.name,
            storm.fault.as_secs_f64(),
            lists as f64 / n,
            watches as f64 / n,
            patches as f64 / n,
            storm.synced_after.as_secs_f64(),
            storm.needless_patches,
            storm.exits_landed,
            storm.exits,
            quantile(&mut durations, 0.99),
            storm.apiserver_cpu_ms / 1000.0,
            storm.etcd_cpu_ms / 1000.0,
            storm.apiserver_peak_rss,
        );
    }
}

/// The tenant's flood of a phase: `lists` fills `workload-low`'s seats and the server's CPU; `held`
/// fills its seats alone (writes a slow webhook holds for `--flood-hold` seconds).
#[derive(Clone, Copy, PartialEq)]
enum FloodKind {
    Lists,
    Held(Duration),
}

impl FloodKind {
    fn name(self) -> String {
        match self {
            FloodKind::Lists => "lists of 1.6 MiB".into(),
            FloodKind::Held(hold) => format!("writes held {} s", hold.as_secs_f64()),
        }
    }
}

/// plegd's writes with no flood and beside each of a tenant's floods of `workload-low`, first with
/// plegd in its own level, then with the level deleted (plegd in `workload-low`).
async fn flood_phases(
    nodes: usize,
    pods: usize,
    seconds: u64,
    setup: PlegdSetup,
    kinds: &[FloodKind],
) -> Vec<FloodPhase> {
    let server = vec![
        "--max-requests-inflight=40".to_owned(),
        "--max-mutating-requests-inflight=20".to_owned(),
    ];
    let mut fleet = Fleet::build_with(nodes, pods, setup, server).await;
    fleet.start_plegds(Duration::from_secs(600)).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut phases = Vec::new();
    for level in ["its own level", "workload-low"] {
        if level == "workload-low" {
            let objects = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/base/priority.yaml"))
                .expect("deploy/base/priority.yaml");
            let objects: Vec<serde_json::Value> = objects
                .split("\n---\n")
                .map(|doc| serde_saphyr::from_str(doc).expect("a YAML document"))
                .collect();
            fleet.api.delete_objects(&objects);
        }
        let name = format!("churn 1/s, no flood, plegd in {level}");
        let (phase, writes) = measure_with_writes(&mut fleet, &name, seconds).await;
        phases.push(FloodPhase {
            phase,
            tenant_rate: 0.0,
            writes,
        });
        for &kind in kinds {
            let (tenant, tasks) = match kind {
                FloodKind::Lists => flood::tenant(&fleet.api, fleet.dir(), 24, 4).await,
                FloodKind::Held(hold) => flood::tenant_held(&fleet.api, fleet.dir(), 24, 4, hold).await,
            };
            flood::wait_queued(&fleet.api, "workload-low").await;
            let before = tenant.served.load(std::sync::atomic::Ordering::Relaxed);
            let started = Instant::now();
            let name = format!("churn 1/s, flood of {}, plegd in {level}", kind.name());
            // Measured until the phase's writes have landed (or none has for 5 s), the flood on.
            let (phase, writes) = measure_with_writes(&mut fleet, &name, seconds).await;
            let served = tenant.served.load(std::sync::atomic::Ordering::Relaxed) - before;
            let tenant_rate = served as f64 / started.elapsed().as_secs_f64();
            tenant.stop(tasks).await;
            phases.push(FloodPhase {
                phase,
                tenant_rate,
                writes,
            });
        }
    }
    phases
}

/// A phase of churn at 1 change a second, and every request of plegd's from its start until its
/// writes landed.
async fn measure_with_writes(
    fleet: &mut Fleet,
    name: &str,
    seconds: u64,
) -> (Phase, Vec<plegd_test_support::apiserver::Logged>) {
    let from = SystemTime::now();
    let phase = fleet.measure(name, seconds, 1.0).await;
    (phase, fleet.requests_between(from, None).await)
}

fn print_flood(nodes: usize, phases: &[FloodPhase]) {
    if phases.is_empty() {
        return;
    }
    println!(
        "
Beside a tenant's flood of workload-low ({nodes} nodes, a server of 60 seats): plegd's status PATCHes answered in the window, and the server's time for every PATCH of the phase (warm-up, window and the writes landing after it; priority and fairness' queueing included):
"
    );
    println!(
        "| phase | tenant requests/s served | plegd PATCH/s in the window | PATCH ms median | p99 | max | PATCHes | plegd's 429s | PATCHes per change |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for FloodPhase {
        phase,
        tenant_rate,
        writes,
    } in phases
    {
        let mut durations = patch_durations(writes);
        let r = Rates::of(&phase.requests, phase.seconds);
        let quantiles = if durations.is_empty() {
            "— | — | —".to_owned()
        } else {
            format!(
                "{:.1} | {:.1} | {:.1}",
                quantile(&mut durations, 0.5),
                quantile(&mut durations, 0.99),
                quantile(&mut durations, 1.0)
            )
        };
        println!(
            "| {} | {tenant_rate:.1} | {:.1} | {quantiles} | {} | {} | {:.2} |",
            phase.name,
            r.patch,
            durations.len(),
            writes.iter().filter(|r| r.status == 429).count(),
            phase.patches_landed as f64 / phase.changes_made.max(1) as f64,
        );
    }
}

/// A phase beside a flood: the tenant's requests served a second, and every request of plegd's
/// from the phase's start until its writes landed.
struct FloodPhase {
    phase: Phase,
    tenant_rate: f64,
    writes: Vec<plegd_test_support::apiserver::Logged>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let counts: Vec<usize> = list("--nodes").unwrap_or_else(|| vec![25, 50, 100, 200]);
    assert!(
        !counts.is_empty() && counts.iter().all(|&n| n > 0),
        "--nodes takes a list of node counts, e.g. 25,50,100,200"
    );
    let pods: usize = arg("--pods").unwrap_or(110);
    let seconds: u64 = arg("--seconds").unwrap_or(30);
    let rates: Vec<f64> = list("--rates").unwrap_or_else(|| vec![1.0, 5.0]);
    // full: plegd owns the status, as on a node without a kubelet; conditions: plegd beside a
    // kubelet (whose own writes the fleet makes once, before plegd starts, and not during churn).
    let mode: String = arg("--mode").unwrap_or_else(|| "full".into());
    assert!(
        mode == "full" || mode == "conditions",
        "--mode takes full or conditions, not {mode:?}"
    );
    let storms = std::env::args().any(|a| a == "--storms");
    // Only every plegd restarted at once, then the server restarted, for each of `--lists` in turn.
    let list_storms = std::env::args().any(|a| a == "--list-storms");
    let no_phases = std::env::args().any(|a| a == "--no-phases");
    let throttle_seconds: u64 = arg("--throttle-seconds").unwrap_or(60);
    let lists: Vec<String> = list("--lists").unwrap_or_else(|| vec!["stream".into(), "pages".into(), "cache".into()]);
    let binary: String = arg("--binary").unwrap_or_else(|| env!("CARGO_BIN_EXE_plegd").into());
    // `stream` is the default: without the flag, so that a `--binary` that predates it runs (and
    // lists as it did).
    let setup = |list: &str| PlegdSetup {
        binary: binary.clone(),
        args: if list == "stream" {
            Vec::new()
        } else {
            vec!["--initial-list".into(), list.into()]
        },
        beside_kubelet: mode == "conditions",
    };
    let flood_nodes: usize = arg("--flood-nodes").unwrap_or(25);
    let hold: f64 = arg("--flood-hold").unwrap_or(2.0);
    // The webhook's own timeout is 30 s: a longer hold would be a refusal, not a held seat.
    assert!(
        (0.0..29.0).contains(&hold),
        "--flood-hold takes 0 to 29 seconds, not {hold}"
    );
    let hold = Duration::from_secs_f64(hold);
    let flood_kinds: Vec<FloodKind> = list::<String>("--flood-kinds")
        .unwrap_or_else(|| vec!["held".into(), "lists".into()])
        .iter()
        .map(|kind| match kind.as_str() {
            "lists" => FloodKind::Lists,
            "held" => FloodKind::Held(hold),
            other => panic!("--flood-kinds takes held and lists, not {other:?}"),
        })
        .collect();
    let started = Instant::now();
    let largest = counts.iter().copied().max().unwrap_or(1);
    let mut runs = Vec::new();
    let mut storm_results = Vec::new();
    for &count in &counts {
        let t = Instant::now();
        let mut fleet = Fleet::build(count, pods, setup("stream")).await;
        eprintln!(
            "{count} nodes: {} pods created in {:.0} s",
            fleet.pods(),
            t.elapsed().as_secs_f64()
        );
        let mut phases = Vec::new();
        if !no_phases {
            phases.push(fleet.measure("no plegd", seconds, 0.0).await);
        }
        let t = Instant::now();
        fleet.start_plegds(Duration::from_secs(900)).await;
        eprintln!(
            "{count} nodes: every pod Running {:.0} s after plegd started",
            t.elapsed().as_secs_f64()
        );
        // Past the first 10 s resync of every pod.
        tokio::time::sleep(Duration::from_secs(12)).await;
        if !no_phases {
            phases.push(fleet.measure("idle", seconds, 0.0).await);
        }
        for &rate in rates.iter().filter(|_| !no_phases) {
            let phase = fleet.measure(&format!("churn {rate}/s"), seconds, rate).await;
            eprintln!(
                "{count} nodes, {rate}/s: {} PATCHes for {} changes",
                phase.patches_landed, phase.changes_made
            );
            phases.push(phase);
        }
        if (storms || list_storms) && count == largest {
            fleet.restart_exited();
            let wrong = fleet.settled(Duration::from_secs(300)).await;
            eprintln!("{count} nodes: settled before the storms ({} pods not)", wrong.len());
            let deadline = Duration::from_secs(600);
            let minute = Duration::from_secs(60);
            let faults = if storms {
                vec![
                    Fault::ApiserverRestart,
                    Fault::EtcdRestartCompaction,
                    Fault::Rollout,
                    Fault::Throttled {
                        seconds: throttle_seconds,
                    },
                ]
            } else {
                Vec::new()
            };
            for fault in faults {
                let storm = fleet.storm(fault, deadline, minute).await;
                eprintln!("storm {}: synced after {:?}", storm.name, storm.synced_after);
                storm_results.push(storm);
                fleet.restart_exited();
                fleet.settled(Duration::from_secs(300)).await;
            }
            for list in &lists {
                fleet.restart_plegds(setup(list));
                fleet.settled(Duration::from_secs(300)).await;
                let mut storm = fleet.storm(Fault::AllRestart, deadline, minute).await;
                storm.name = format!("{} (--initial-list {list})", storm.name);
                storm_results.push(storm);
                fleet.restart_exited();
                fleet.settled(Duration::from_secs(300)).await;
                let mut storm = fleet.storm(Fault::ApiserverRestart, deadline, minute).await;
                storm.name = format!("{} (--initial-list {list})", storm.name);
                storm_results.push(storm);
                fleet.restart_exited();
                fleet.settled(Duration::from_secs(300)).await;
            }
        }
        if !phases.is_empty() {
            runs.push(Run { nodes: count, phases });
        }
    }

    let flood = if std::env::args().any(|a| a == "--flood") {
        flood_phases(flood_nodes, pods, seconds, setup("stream"), &flood_kinds).await
    } else {
        Vec::new()
    };

    println!(
        "\n### A fleet on one machine: {pods} pods of 1 container per node, `--status-mode {mode}`, relist 1 s, no triggers, {seconds} s per phase; plegd {binary}\n"
    );
    print_phases(&runs);
    print_fleet(&runs);
    if let Some(run) = runs.iter().max_by_key(|r| r.nodes) {
        print_beside_kubelet(run);
    }
    print_storms(&storm_results);
    print_flood(flood_nodes, &flood);
    println!("\n(run took {:.0} s)", started.elapsed().as_secs_f64());
}
