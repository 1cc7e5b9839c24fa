//! What plegd's readiness gate buys a Service's clients, with real traffic through kube-proxy, on the
//! one-node cluster of tests/cluster/cluster.sh (kube-apiserver, kube-controller-manager with the
//! EndpointSlice controller, the kubelet and kube-proxy in iptables mode with its default sync
//! settings, all built from Kubernetes' own code; plegd in conditions mode with
//! deploy/components/readiness-gate).
//!
//! Two Services side by side in one run, each of `--backends` (20) HTTP backends (busybox httpd,
//! one pod each, restarted by the kubelet): `gated` in a namespace opted into the gate, `plain` in
//! one that is not. A client per Service sends `--rate` (100) requests a second through its
//! ClusterIP, each on a new connection (kube-proxy picks a backend per connection). Crashes:
//! `--crashes` (20) SIGKILLs per Service at random moments (`--gap-secs` (4) ± 1 s apart,
//! alternating Services, each backend at most once: one crash at a time, on a kube-proxy idle for
//! longer than its 1 s minSyncPeriod), then a burst: every backend of both Services killed at once.
//!
//! Per crash, from the kill (the bench's clock; every watcher on this machine):
//!   endpoint  its endpoint `ready: false` in the Service's EndpointSlice (a watch);
//!   rules     kube-proxy's rules without it (the Service's iptables chain, read every 10 ms); "not
//!             seen" where it was back before kube-proxy's next sync dropped it;
//!   last fail the last failed request of the Service after the kill and before the rules dropped it;
//!   failed    failed requests of the Service in that window;
//!   back      its endpoint ready again (the kubelet restarted it, Ready);
//!   and for a gated backend, where its time goes: its pod seen (a watch) with plegd's condition
//!   False, then with Ready False (the kubelet's write), before the EndpointSlice controller's.
//!
//! Passes (`--passes`, default `defaults`): `defaults` (the kubelet as it ships), `evented` (its
//! EventedPLEG gate on), each `+load` (`defaults+load`): the same while `--load` (100) other pods are
//! created and deleted in a loop beside them. Needs root; a pass takes 2 to 3 minutes.
//!
//!     cargo bench --bench traffic
//!     cargo bench --bench traffic -- --passes defaults,evented,defaults+load
//!
//! Never wrong, checked over every crash of the pass (and `--soak-secs` (0) more of random kills of
//! either Service's backends, 2 to 4 s apart) by tests/support/never_wrong.rs: no gated pod made
//! Ready, or given plegd's condition True, with no container running since the observation before;
//! no change of plegd's condition to False without a death of its container to account for it;
//! never the condition removed. Its ground truth is the runtime's: the node's containerd polled
//! (ListContainers every 50 ms, a ContainerStatus once a container runs and once it has exited) for
//! each container's `started_at` and `finished_at`.
//!
//! `--poll-runtime false` leaves the runtime unpolled (and the check undone), to see what the
//! polling costs the figures.
//!
//! `PLEGD_BENCH_TRACE=DIR` writes each crash's figures and when it was killed (`DIR/PASS.jsonl`),
//! plegd's log (`DIR/PASS-plegd.log`; set its level with `PLEGD_CLUSTER_PLEGD_LOG_LEVEL`, e.g.
//! `info,plegd::triggers=debug,plegd::pleg=debug,plegd::status=debug`) and the apiserver's audit
//! log (`DIR/PASS-audit.log`): tests/bench/traffic_trace.py follows each spread crash of a gated
//! backend through plegd, the apiserver, the kubelet and the EndpointSlice controller.

mod args;
mod cluster_sh;
mod stats;
use plegd_test_support as support;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use args::arg;
use cluster_sh::cluster_sh;
use stats::percentile;
use support::cluster::{CONTAINERD_SOCKET, IMAGE, client_from};
use support::never_wrong;

const GROUPS: [&str; 2] = ["gated", "plain"];
const LOAD_NS: &str = "traffic-load";

fn namespace(group: &str) -> String {
    format!("traffic-{group}")
}

/// The port backend `i` of `group` listens on: its own, so that the bench kills exactly it.
fn port(group: &str, i: usize) -> u16 {
    (if group == "gated" { 8100 } else { 8300 }) + i as u16
}

/// Backend `i` of `group`: busybox httpd serving its own name at /id, restarted by the kubelet.
fn backend(group: &str, i: usize, node: &str) -> Pod {
    let port = port(group, i);
    serde_json::from_value(json!({
        "metadata": {"name": format!("backend-{i}"), "namespace": namespace(group), "labels": {"app": "backend"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "http",
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!(
                    "mkdir -p /tmp/www && hostname > /tmp/www/id && exec busybox httpd -f -p {port} -h /tmp/www")],
                "ports": [{"name": "http", "containerPort": port}],
            }],
        },
    }))
    .unwrap()
}

/// The pid of backend `i` of `group` (its httpd, the container's only process), if it runs.
fn backend_pid(group: &str, i: usize) -> Option<rustix::process::Pid> {
    let out = Command::new("pgrep")
        .args(["-f", &format!("busybox httpd -f -p {} ", port(group, i))])
        .output()
        .expect("run pgrep");
    let text = String::from_utf8_lossy(&out.stdout);
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    rustix::process::Pid::from_raw(pid)
}

/// SIGKILL backend `i` of `group`; the moment of the signal (its process found first, so that the
/// search is not counted).
fn kill(group: &str, i: usize) -> Instant {
    kill_pid(backend_pid(group, i).unwrap_or_else(|| panic!("no backend {group}/{i} to kill")))
}

/// SIGKILL `pid`; the moment of the signal.
fn kill_pid(pid: rustix::process::Pid) -> Instant {
    let at = Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .unwrap_or_else(|e| panic!("SIGKILL pid {pid:?}: {e}"));
    at
}

/// What the watchers saw, by endpoint IP: (when, ready) transitions of its EndpointSlice entry.
type Seen = Arc<Mutex<HashMap<String, Vec<(Instant, bool)>>>>;

/// Follow the Services' EndpointSlices: each endpoint's readiness changes.
fn watch_endpoints(client: kube::Client, group: &str, seen: Seen) -> tokio::task::JoinHandle<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client, &namespace(group));
    tokio::spawn(async move {
        let mut last: HashMap<String, bool> = HashMap::new();
        let stream = watcher(slices, watcher::Config::default());
        futures_util::pin_mut!(stream);
        while let Ok(Some(event)) = stream.try_next().await {
            let now = Instant::now();
            let slices = match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => vec![s],
                _ => continue,
            };
            for slice in slices {
                for endpoint in slice.endpoints.into_iter().flatten() {
                    let ready = endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
                    for ip in endpoint.addresses {
                        if last.insert(ip.clone(), ready) != Some(ready) {
                            seen.lock().unwrap().entry(ip).or_default().push((now, ready));
                        }
                    }
                }
            }
        }
    })
}

/// The endpoint IPs in kube-proxy's iptables chain `chain` (a Service's KUBE-SVC-...).
fn rules(chain: &str) -> Vec<String> {
    let out = Command::new("iptables")
        .args(["-w", "-t", "nat", "-S", chain])
        .output()
        .expect("run iptables");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.split(" -> ").nth(1))
        .filter_map(|rest| rest.split(':').next())
        .map(str::to_owned)
        .collect()
}

/// The iptables chain kube-proxy gives `namespace/name:http` (KUBE-SVC-...), found in the nat table.
fn service_chain(service: &str) -> Option<String> {
    let out = Command::new("iptables")
        .args(["-w", "-t", "nat", "-S", "KUBE-SERVICES"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.contains(&format!("\"{service}:http cluster IP\"")) && l.contains("-j KUBE-SVC-"))
        .and_then(|l| l.split("-j ").nth(1))
        .map(|c| c.trim().to_owned())
}

/// Read each Service's chain every 10 ms: when each endpoint IP leaves or comes back.
fn watch_rules(
    chains: Vec<(String, String)>,
    seen: Seen,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut last: HashMap<String, Vec<String>> = HashMap::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (group, chain) in &chains {
                let now = Instant::now();
                let ips = rules(chain);
                let before = last.insert(group.clone(), ips.clone()).unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                for ip in before.iter().filter(|ip| !ips.contains(ip)) {
                    seen.entry(ip.clone()).or_default().push((now, false));
                }
                for ip in ips.iter().filter(|ip| !before.contains(ip)) {
                    seen.entry(ip.clone()).or_default().push((now, true));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// One request's outcome: when it was sent, and whether an HTTP 200 came back.
type Requests = Arc<Mutex<Vec<(Instant, bool)>>>;

/// GET /id on a new connection to `address`; whether it answered 200 within 1 s.
async fn request(address: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(b"GET /id HTTP/1.0\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.0 200") || answer.starts_with(b"HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Send `rate` requests a second to `address` until `stop`, each on a task of its own (a slow one
/// does not hold the next back), recording each.
fn requester(
    address: String,
    rate: u32,
    log: Requests,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            tick.tick().await;
            let address = address.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let sent = Instant::now();
                let ok = request(&address).await;
                log.lock().unwrap().push((sent, ok));
            });
        }
    })
}

/// A small random number generator (xorshift), seeded from the clock: crash moments.
struct Draw(u64);

impl Draw {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Self(seed | 1)
    }
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The first transition to `ready` at or after `from` and before `until` in `events`: its time
/// since `from`.
fn first_after(events: Option<&Vec<(Instant, bool)>>, from: Instant, until: Instant, ready: bool) -> Option<Duration> {
    events?
        .iter()
        .find(|(at, r)| *at >= from && *at < until && *r == ready)
        .map(|(at, _)| *at - from)
}

/// One crash's figures, in ms from the kill.
#[derive(Debug, Default, Clone)]
struct Crash {
    group: String,
    endpoint: Option<f64>,
    rules: Option<f64>,
    last_fail: Option<f64>,
    failed: usize,
    back: Option<f64>,
    /// A gated backend's pod seen (a watch) with plegd's condition False, and with Ready False.
    condition: Option<f64>,
    ready: Option<f64>,
    /// The backend's pod, and its kill in ms since the epoch (for `PLEGD_BENCH_TRACE`).
    pod: String,
    killed_at: f64,
}

/// What the apiserver showed of each gated backend, watch event by watch event.
type Shown = Arc<Mutex<HashMap<String, Vec<never_wrong::Shown>>>>;

/// Follow the gated backends' pods: every update, as [`Shown`] keeps it.
fn watch_gated_pods(client: kube::Client, shown: Shown) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::namespaced(client, &namespace("gated"));
    tokio::spawn(async move {
        let stream = watcher(pods, watcher::Config::default());
        futures_util::pin_mut!(stream);
        while let Ok(Some(event)) = stream.try_next().await {
            let (watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                continue;
            };
            let at = std::time::SystemTime::now();
            let Some(status) = pod.status else { continue };
            let condition = |kind: &str| {
                status
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == kind)
                    .map(|c| c.status == "True")
            };
            shown
                .lock()
                .unwrap()
                .entry(pod.metadata.name.unwrap_or_default())
                .or_default()
                .push(never_wrong::Shown {
                    at,
                    ready: condition("Ready").unwrap_or(false),
                    gate: condition("plegd.io/ContainersRunning"),
                });
        }
    })
}

/// The gated backends' containers as the node's containerd ran them: pod name → container id →
/// its life (the CRI's own `started_at` and `finished_at`).
type Lives = Arc<Mutex<HashMap<String, BTreeMap<String, never_wrong::Life>>>>;

/// Follow the gated backends' containers in the runtime: a ListContainers of their namespace
/// every 50 ms, and a ContainerStatus of each container once it runs and once it has exited (the
/// kubelet keeps an exited container until its next start and its garbage collection, far longer
/// than a poll). Calls that fail are tried again at the next poll.
fn watch_runtime(
    mut client: cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    lives: Lives,
) -> tokio::task::JoinHandle<()> {
    let time = |nanos: i64| (nanos > 0).then(|| std::time::UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs()));
    tokio::spawn(async move {
        loop {
            let listed = support::cluster::namespace_containers(&mut client, &namespace("gated")).await;
            for c in listed.unwrap_or_default() {
                let Some(pod) = c.labels.get("io.kubernetes.pod.name").cloned() else {
                    continue;
                };
                let exited = c.state == cri::ContainerState::ContainerExited as i32;
                let running = c.state == cri::ContainerState::ContainerRunning as i32;
                let known = lives.lock().unwrap().get(&pod).and_then(|p| p.get(&c.id)).copied();
                let wanted = match known {
                    None => running || exited,
                    Some(life) => exited && life.finished.is_none(),
                };
                if !wanted {
                    continue;
                }
                let Ok(status) = client
                    .container_status(cri::ContainerStatusRequest {
                        container_id: c.id.clone(),
                        verbose: false,
                    })
                    .await
                else {
                    continue;
                };
                let Some(status) = status.into_inner().status else {
                    continue;
                };
                let Some(started) = time(status.started_at) else {
                    continue;
                };
                let finished = time(status.finished_at);
                lives
                    .lock()
                    .unwrap()
                    .entry(pod)
                    .or_default()
                    .insert(c.id, never_wrong::Life { started, finished });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `at` on the wall clock, `clock` being one moment on both clocks.
fn wall_clock(clock: (Instant, std::time::SystemTime), at: Instant) -> std::time::SystemTime {
    clock.1 + (at - clock.0)
}

/// The first update of gated pod `pod` seen after `killed` and before `until` (the bench's clock,
/// `clock` its wall-clock twin) where `pick` holds: its time since the kill.
fn first_shown(
    shown: &Shown,
    pod: &str,
    clock: (Instant, std::time::SystemTime),
    killed: Instant,
    until: Instant,
    pick: fn(&never_wrong::Shown) -> bool,
) -> Option<f64> {
    let wall = |at: Instant| wall_clock(clock, at);
    let (from, to) = (wall(killed), wall(until));
    shown
        .lock()
        .unwrap()
        .get(pod)?
        .iter()
        .find(|s| s.at >= from && s.at < to && pick(s))
        .and_then(|s| s.at.duration_since(from).ok())
        .map(ms)
}

/// The figures of a crash of backend `i` of `group` at `ip`, killed at `killed`; `until` bounds
/// the window of failures it is blamed for (the next crash of the same Service, or the end).
fn figures(
    (group, i, ip): (&str, usize, &str),
    killed: Instant,
    until: Instant,
    endpoints: &Seen,
    rules: &Seen,
    requests: &Requests,
    (shown, clock): (&Shown, (Instant, std::time::SystemTime)),
) -> Crash {
    // Only the gated backends' pods are watched.
    let pod = format!("backend-{i}");
    let gated = group == "gated";
    let condition = first_shown(shown, &pod, clock, killed, until, |s| s.gate == Some(false)).filter(|_| gated);
    let ready = first_shown(shown, &pod, clock, killed, until, |s| !s.ready).filter(|_| gated);
    let endpoints = endpoints.lock().unwrap();
    let rules = rules.lock().unwrap();
    let out_of_rules = first_after(rules.get(ip), killed, until, false);
    let window_end = out_of_rules.map_or(until, |d| (killed + d + Duration::from_millis(1000)).min(until));
    let requests = requests.lock().unwrap();
    let failures: Vec<Instant> = requests
        .iter()
        .filter(|(sent, ok)| !ok && *sent >= killed && *sent < window_end)
        .map(|(sent, _)| *sent)
        .collect();
    Crash {
        group: group.to_owned(),
        endpoint: first_after(endpoints.get(ip), killed, until, false).map(ms),
        rules: out_of_rules.map(ms),
        last_fail: failures.iter().max().map(|t| ms(*t - killed)),
        failed: failures.len(),
        back: first_after(endpoints.get(ip), killed, until, false)
            .and_then(|gone| first_after(endpoints.get(ip), killed + gone, until, true).map(|back| gone + back))
            .map(ms),
        condition,
        ready,
        pod,
        killed_at: ms(wall_clock(clock, killed)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()),
    }
}

/// p50/p90/p99 of the present values, as text.
fn quantiles(values: &[Option<f64>]) -> (String, Option<f64>, Option<f64>, Option<f64>) {
    let mut v: Vec<f64> = values.iter().flatten().copied().collect();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return ("n/a".into(), None, None, None);
    }
    let (p50, p90, p99) = (percentile(&v, 0.5), percentile(&v, 0.9), percentile(&v, 0.99));
    let missing = values.len() - v.len();
    (
        format!(
            "{p50:>8.0} {p90:>8.0} {p99:>8.0}{}",
            if missing > 0 {
                format!("  ({missing} not seen)")
            } else {
                String::new()
            }
        ),
        Some(p50),
        Some(p90),
        Some(p99),
    )
}

fn report(title: &str, crashes: &[Crash]) {
    println!("\n### {title}\n");
    println!("| per crash, ms from the kill | group | p50 | p90 | p99 |");
    println!("|---|---|---:|---:|---:|");
    let mut p50s: BTreeMap<(&str, &str), (f64, f64, f64)> = BTreeMap::new();
    for (name, pick) in [
        (
            "endpoint not ready",
            (|c: &Crash| c.endpoint) as fn(&Crash) -> Option<f64>,
        ),
        ("kube-proxy's rules without it", |c: &Crash| c.rules),
        ("last failed request", |c: &Crash| c.last_fail),
        ("failed requests (count)", |c: &Crash| Some(c.failed as f64)),
        ("back in service", |c: &Crash| c.back),
        ("plegd's condition False (pod watch)", |c: &Crash| c.condition),
        ("Ready False (pod watch)", |c: &Crash| c.ready),
    ] {
        for group in GROUPS {
            let values: Vec<Option<f64>> = crashes.iter().filter(|c| c.group == group).map(pick).collect();
            if values.iter().all(Option::is_none) {
                // The plain pods are not watched.
                continue;
            }
            let (text, p50, p90, p99) = quantiles(&values);
            let cells: Vec<&str> = text.split_whitespace().collect();
            println!(
                "| {name} | {group} | {} | {} | {}{} |",
                cells.first().unwrap_or(&"n/a"),
                cells.get(1).unwrap_or(&""),
                cells.get(2).unwrap_or(&""),
                if cells.len() > 3 {
                    format!(" {}", cells[3..].join(" "))
                } else {
                    String::new()
                }
            );
            if let (Some(a), Some(b), Some(c)) = (p50, p90, p99) {
                p50s.insert((name, group), (a, b, c));
            }
        }
    }
    for name in [
        "endpoint not ready",
        "kube-proxy's rules without it",
        "failed requests (count)",
    ] {
        if let (Some(g), Some(p)) = (p50s.get(&(name, "gated")), p50s.get(&(name, "plain"))) {
            println!(
                "\n{name}: plain / gated = {:.1}x at p50, {:.1}x at p90, {:.1}x at p99",
                p.0 / g.0.max(0.5),
                p.1 / g.1.max(0.5),
                p.2 / g.2.max(0.5)
            );
        }
    }
    let failed = |group: &str| {
        crashes
            .iter()
            .filter(|c| c.group == group)
            .map(|c| c.failed)
            .sum::<usize>()
    };
    println!(
        "\nfailed requests in all: gated {}, plain {} ({} crashes each)",
        failed("gated"),
        failed("plain"),
        crashes.iter().filter(|c| c.group == "gated").count()
    );
    let windows: Vec<Option<f64>> = crashes
        .iter()
        .filter(|c| c.group == "gated")
        .map(|c| c.last_fail)
        .collect();
    println!(
        "gated window of failures (kill to last failed request), p50: {}",
        quantiles(&windows).0
    );
}

/// Wait until the readiness gate's admission policy acts on pods of the gated namespace: the
/// apiserver loads a policy created moments ago on its own time, and a backend created before then
/// would go ungated (`failurePolicy: Ignore`). A server-side dry run shows what admission makes of a
/// pod without keeping it.
async fn gate_policy_active(client: &kube::Client, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace("gated"));
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    support::wait_for(
        "the readiness gate's admission policy adding the gate to a new pod of the gated namespace",
        Duration::from_secs(60),
        || async {
            pods.create(&dry_run, &backend("gated", 0, node))
                .await
                .is_ok_and(|pod| {
                    pod.spec
                        .and_then(|s| s.readiness_gates)
                        .is_some_and(|g| g.iter().any(|g| g.condition_type == support::cluster::CONDITION))
                })
        },
    )
    .await;
}

/// Pods created and deleted in a loop in their own namespace until `stop`: a busy runtime.
fn load(
    client: kube::Client,
    node: String,
    pods: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client, LOAD_NS);
        let mut round = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            round += 1;
            for i in 0..pods {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("load-{round}-{i}")},
                    "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "30"]}]},
                }))
                .unwrap();
                let _ = api.create(&PostParams::default(), &pod).await;
            }
            tokio::time::sleep(Duration::from_secs(15)).await;
            let _ = api
                .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
                .await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let _ = api
            .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
            .await;
    })
}

async fn ensure_namespace(client: &kube::Client, name: &str, labels: Value) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(name).await.unwrap().is_some() {
        let _ = namespaces.delete(name, &DeleteParams::default()).await;
        support::wait_for(&format!("namespace {name} gone"), Duration::from_secs(180), || async {
            namespaces.get_opt(name).await.ok().flatten().is_none()
        })
        .await;
    }
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap(),
        )
        .await
        .unwrap();
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), name);
    support::wait_for(
        &format!("{name}'s default service account"),
        Duration::from_secs(60),
        || async { accounts.get_opt("default").await.ok().flatten().is_some() },
    )
    .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let backends: usize = arg("--backends").unwrap_or(20);
    let crashes: usize = arg("--crashes").unwrap_or(20).min(backends);
    let rate: u32 = arg("--rate").unwrap_or(100);
    let load_pods: usize = arg("--load").unwrap_or(100);
    let passes: String = arg("--passes").unwrap_or_else(|| "defaults".to_owned());
    let soak_secs: u64 = arg("--soak-secs").unwrap_or(0);
    // `--poll-runtime false`: no polling of the runtime for the never-wrong check (its own CRI calls
    // beside the crashes), and no check.
    let poll_runtime: bool = arg("--poll-runtime").unwrap_or(true);
    let gap: f64 = arg::<f64>("--gap-secs").unwrap_or(4.0).max(1.5);
    println!(
        "kubelet 1.37.2, kube-proxy 1.37.2 (iptables, defaults) and plegd {} on one node, containerd {}: \
         {backends} backends per Service, {crashes} spread crashes each, then a burst of {}; {rate} requests/s per Service",
        env!("CARGO_PKG_VERSION"),
        std::env::var("PLEGD_CLUSTER_CONTAINERD_VERSION").unwrap_or_else(|_| "2.3".into()),
        2 * backends
    );
    let install = support::manifests::kustomization(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tmp/traffic-install"),
        "conditions",
        &["readiness-gate"],
    );
    for pass in passes.split(',') {
        let (gates, loaded) = match pass {
            "defaults" => ("", false),
            "evented" => ("EventedPLEG=true", false),
            "defaults+load" => ("", true),
            "evented+load" => ("EventedPLEG=true", true),
            other => panic!("--passes: unknown pass {other:?} (defaults, evented, defaults+load, evented+load)"),
        };
        println!("\n## pass: {pass}");
        let kubeconfig = cluster_sh(&["start", "--plegd", &install.display().to_string()], gates);
        let client = client_from(Path::new(&kubeconfig)).await;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        let node = nodes.list(&ListParams::default()).await.unwrap().items[0]
            .metadata
            .name
            .clone()
            .unwrap();
        for group in GROUPS {
            let labels = if group == "gated" {
                json!({"plegd.io/readiness-gate": "enabled"})
            } else {
                json!({})
            };
            ensure_namespace(&client, &namespace(group), labels).await;
            if group == "gated" {
                gate_policy_active(&client, &node).await;
            }
            let services: Api<Service> = Api::namespaced(client.clone(), &namespace(group));
            services
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "metadata": {"name": "backend"},
                        "spec": {"selector": {"app": "backend"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
                    }))
                    .unwrap(),
                )
                .await
                .unwrap();
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace(group));
            for i in 0..backends {
                pods.create(&PostParams::default(), &backend(group, i, &node))
                    .await
                    .unwrap();
            }
        }
        // Every backend Ready, the gated ones gated.
        let mut ips: HashMap<(&str, usize), String> = HashMap::new();
        for group in GROUPS {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace(group));
            support::wait_for(
                &format!("{group}'s backends Ready"),
                Duration::from_secs(300),
                || async {
                    let list = pods.list(&ListParams::default()).await.unwrap().items;
                    list.len() == backends
                        && list.iter().all(|p| {
                            p.status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                        })
                },
            )
            .await;
            for pod in pods.list(&ListParams::default()).await.unwrap().items {
                let gated = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.readiness_gates.as_ref())
                    .is_some_and(|g| g.iter().any(|g| g.condition_type == "plegd.io/ContainersRunning"));
                assert_eq!(gated, group == "gated", "{:?}", pod.metadata.name);
                let name = pod.metadata.name.clone().unwrap();
                let i: usize = name.trim_start_matches("backend-").parse().unwrap();
                ips.insert((group, i), pod.status.unwrap().pod_ip.unwrap());
            }
        }
        let endpoints: Seen = Seen::default();
        let in_rules: Seen = Seen::default();
        let requests: HashMap<&str, Requests> = GROUPS.iter().map(|g| (*g, Requests::default())).collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        let mut chains = Vec::new();
        for group in GROUPS {
            tasks.push(watch_endpoints(client.clone(), group, endpoints.clone()));
            let service = format!("{}/backend", namespace(group));
            let chain = {
                let mut found = None;
                support::wait_for(
                    &format!("kube-proxy's chain of {service}"),
                    Duration::from_secs(60),
                    || {
                        found = service_chain(&service);
                        let ok = found.as_ref().is_some_and(|c| rules(c).len() == backends);
                        async move { ok }
                    },
                )
                .await;
                found.unwrap()
            };
            chains.push((group.to_owned(), chain));
            let services: Api<Service> = Api::namespaced(client.clone(), &namespace(group));
            let ip = services.get("backend").await.unwrap().spec.unwrap().cluster_ip.unwrap();
            tasks.push(requester(
                format!("{ip}:80"),
                rate,
                requests[group].clone(),
                stop.clone(),
            ));
        }
        let rules_thread = watch_rules(chains, in_rules.clone(), stop.clone());
        let shown = Shown::default();
        let clock = (Instant::now(), std::time::SystemTime::now());
        tasks.push(watch_gated_pods(client.clone(), shown.clone()));
        let lives = Lives::default();
        if poll_runtime {
            tasks.push(watch_runtime(
                plegd::runtime::CriRuntime::new(
                    Path::new(CONTAINERD_SOCKET),
                    &plegd::runtime::CriConfig::default(),
                    Arc::new(plegd::metrics::Metrics::new()),
                )
                .client(),
                lives.clone(),
            ));
        }
        // Kills of gated backends.
        let mut killed = 0;
        let mut loader = None;
        if loaded {
            ensure_namespace(&client, LOAD_NS, json!({})).await;
            loader = Some(load(client.clone(), node.clone(), load_pods, stop.clone()));
        }
        tokio::time::sleep(Duration::from_secs(if loaded { 20 } else { 3 })).await;

        // Spread crashes: alternating Services, `--gap-secs` apart on average (uniformly within
        // ±1 s): one crash at a time, each on a kube-proxy idle for longer than its minSyncPeriod.
        let mut draw = Draw::new();
        let mut kills: Vec<(&str, usize, Instant)> = Vec::new();
        for n in 0..crashes * 2 {
            let group = GROUPS[n % 2];
            tokio::time::sleep(Duration::from_secs_f64(gap - 1.0 + 2.0 * draw.next())).await;
            kills.push((group, n / 2, kill(group, n / 2)));
            if group == "gated" {
                killed += 1;
            }
        }
        // Every restarted backend back (a second kill of one would meet the kubelet's backoff
        // before its restart, not a state the spread crashes measure).
        tokio::time::sleep(Duration::from_secs(15)).await;
        let spread_end = Instant::now();
        // The burst: every backend of both Services at once.
        let pids: Vec<(&str, usize, rustix::process::Pid)> = GROUPS
            .iter()
            .flat_map(|group| (0..backends).map(move |i| (*group, i)))
            .map(|(group, i)| {
                let pid = backend_pid(group, i).unwrap_or_else(|| panic!("no backend {group}/{i} to kill"));
                (group, i, pid)
            })
            .collect();
        let burst_at = Instant::now();
        let mut burst = Vec::new();
        for (group, i, pid) in pids {
            burst.push((group, i, kill_pid(pid)));
            if group == "gated" {
                killed += 1;
            }
        }
        tokio::time::sleep(Duration::from_secs(40)).await;
        // The soak: a random backend of either Service killed every 2 to 4 s, for `--soak-secs`.
        let soak_end = Instant::now() + Duration::from_secs(soak_secs);
        let mut soak_kills = 0;
        while Instant::now() < soak_end {
            tokio::time::sleep(Duration::from_secs_f64(2.0 + 2.0 * draw.next())).await;
            let group = GROUPS[(draw.next() * 2.0) as usize % 2];
            let i = (draw.next() * backends as f64) as usize % backends;
            // A backend in the kubelet's restart backoff has no process to kill: skipped.
            if backend_pid(group, i).is_some() {
                kill(group, i);
                soak_kills += 1;
                if group == "gated" {
                    killed += 1;
                }
            }
        }
        if soak_secs > 0 {
            tokio::time::sleep(Duration::from_secs(40)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = rules_thread.join();
        if let Some(loader) = loader {
            let _ = loader.await;
        }
        for task in tasks {
            task.abort();
        }

        let spread: Vec<Crash> = kills
            .iter()
            .enumerate()
            .map(|(k, (group, i, at))| {
                let next = kills[k + 1..]
                    .iter()
                    .find(|(g, _, _)| g == group)
                    .map_or(spread_end, |(_, _, t)| *t);
                figures(
                    (group, *i, &ips[&(*group, *i)]),
                    *at,
                    next,
                    &endpoints,
                    &in_rules,
                    &requests[group],
                    (&shown, clock),
                )
            })
            .collect();
        report(&format!("{pass}: {} spread crashes per Service", crashes), &spread);
        let burst_figures: Vec<Crash> = burst
            .iter()
            .map(|(group, i, at)| {
                let mut crash = figures(
                    (group, *i, &ips[&(*group, *i)]),
                    *at,
                    burst_at + Duration::from_secs(30),
                    &endpoints,
                    &in_rules,
                    &requests[group],
                    (&shown, clock),
                );
                // Failures in a burst belong to the Service, not one backend: counted once below.
                crash.failed = 0;
                crash
            })
            .collect();
        report(
            &format!("{pass}: a burst of {} crashes per Service", backends),
            &burst_figures,
        );
        for group in GROUPS {
            let failed = requests[group]
                .lock()
                .unwrap()
                .iter()
                .filter(|(sent, ok)| !ok && *sent >= burst_at)
                .count();
            println!("burst, {group}: {failed} failed requests");
        }
        let endpoint_q = |group: &str, p: f64| {
            let mut v: Vec<f64> = burst_figures
                .iter()
                .filter(|c| c.group == group)
                .filter_map(|c| c.endpoint)
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            (!v.is_empty()).then(|| percentile(&v, p))
        };
        if let (Some(g99), Some(p50)) = (endpoint_q("gated", 0.99), endpoint_q("plain", 0.5)) {
            println!("burst: gated endpoints' p99 {g99:.0} ms, plain endpoints' p50 {p50:.0} ms");
        }
        if poll_runtime {
            let (mut transitions, mut violations) = (0, Vec::new());
            {
                let lives = lives.lock().unwrap();
                for (pod, seen) in shown.lock().unwrap().iter() {
                    let pod_lives: Vec<never_wrong::Life> = lives
                        .get(pod)
                        .map(|l| l.values().copied().collect())
                        .unwrap_or_default();
                    let verdict = never_wrong::check(pod, seen, &pod_lives);
                    transitions += verdict.transitions;
                    violations.extend(verdict.violations);
                }
            }
            let deaths: usize = lives
                .lock()
                .unwrap()
                .values()
                .flat_map(|l| l.values())
                .filter(|l| l.finished.is_some())
                .count();
            println!(
                "\nnever wrong: {} kills of gated backends ({soak_kills} of either in a {soak_secs} s soak), \
                 {deaths} deaths of their containers in the runtime, {transitions} transitions of the gate, {} violations",
                killed,
                violations.len()
            );
            for v in &violations {
                println!("  violation: {v}");
            }
        } else {
            println!("\nnever wrong: not checked (--poll-runtime false)");
        }
        if let Ok(dir) = std::env::var("PLEGD_BENCH_TRACE") {
            let lines: Vec<String> = spread
                .iter()
                .map(|c| {
                    json!({"kind": "spread", "group": c.group, "endpoint_ms": c.endpoint, "rules_ms": c.rules,
                           "last_fail_ms": c.last_fail, "failed": c.failed, "back_ms": c.back,
                           "condition_ms": c.condition, "ready_ms": c.ready, "pod": c.pod, "killed_at_ms": c.killed_at})
                    .to_string()
                })
                .chain(burst_figures.iter().map(|c| {
                    json!({"kind": "burst", "group": c.group, "endpoint_ms": c.endpoint, "rules_ms": c.rules,
                           "back_ms": c.back, "condition_ms": c.condition, "ready_ms": c.ready, "pod": c.pod, "killed_at_ms": c.killed_at})
                    .to_string()
                }))
                .collect();
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(Path::new(&dir).join(format!("{pass}.jsonl")), lines.join("\n") + "\n").unwrap();
            std::fs::write(
                Path::new(&dir).join(format!("{pass}-plegd.log")),
                cluster_sh::plegd_log(),
            )
            .unwrap();
            // The apiserver's side of each write (when received, when answered), before the next
            // pass starts the cluster anew.
            std::fs::copy(
                support::cluster::AUDIT_LOG,
                Path::new(&dir).join(format!("{pass}-audit.log")),
            )
            .expect("PLEGD_BENCH_TRACE: copy the apiserver's audit log");
        }
        for group in GROUPS {
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let _ = namespaces.delete(&namespace(group), &DeleteParams::default()).await;
        }
        if loaded {
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let _ = namespaces.delete(LOAD_NS, &DeleteParams::default()).await;
        }
    }
}
