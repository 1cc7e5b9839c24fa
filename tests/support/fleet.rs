//! Hollow nodes, many, on one machine: N nodes against one test apiserver (kube-apiserver 1.37.2 and
//! etcd, with Node and RBAC authorization, NodeRestriction, priority and fairness and deploy/'s
//! RBAC and priority level), each node a fake CRI server (in this process) with its pods and its
//! own `plegd run` (the binary, `--triggers none`, no metrics endpoint) speaking with a token bound
//! to its Node. What the fleet costs is measured in phases ([`Fleet::measure`]) and what it does
//! when the control plane stumbles in storms ([`Fleet::storm`]). `cargo bench --bench
//! apiserver_load` prints the tables; tests/fleet_smoke.rs runs a small fleet so that this cannot
//! rot.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::apiserver::{self, Apiserver, Identity, Logged, Options, PLEGD_USER};
use crate::fake_cri;
use crate::process::{self, KillOnDrop, clock_ticks, cpu_ticks, rss_mib, tcp_connections_to};

/// One pod of a node and its container's restarts so far.
struct ChurnPod {
    name: String,
    uid: String,
    restarts: u32,
    /// Whether its current container has exited.
    exited: bool,
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

/// How each node's plegd runs.
#[derive(Debug, Clone)]
pub struct PlegdSetup {
    /// The plegd binary (another build's, to compare).
    pub binary: String,
    /// Flags beyond the node's own and `--status-mode`.
    pub args: Vec<String>,
    /// `--status-mode conditions` beside a kubelet (the fleet writes each pod's Running status as
    /// the kubelet would, once, before plegd starts), else `full`.
    pub beside_kubelet: bool,
}

/// plegd's own condition, which it writes beside a kubelet.
const PLEGD_CONDITION: &str = "plegd.io/ContainersRunning";

/// One node: its runtime, its pods and its plegd.
pub struct Node {
    pub name: String,
    cri: fake_cri::FakeServer,
    pods: Vec<ChurnPod>,
    /// Changes made so far.
    changes: u64,
    plegd: Option<KillOnDrop>,
    log: PathBuf,
    kubeconfig: PathBuf,
}

impl Node {
    /// The node's next change: the current container of the next pod in turn exits or, every
    /// other change, the pod whose container exited the change before gets a new running container
    /// (as after the kubelet's restart of a crashed container).
    fn change(&mut self) {
        let k = (self.changes / 2) as usize % self.pods.len();
        if self.pods[k].exited {
            self.restart(k);
        } else {
            self.exit(k, 1);
        }
        self.changes += 1;
    }

    /// Pod `k`'s current container exits with `code`; returns the pod's name.
    fn exit(&mut self, k: usize, code: i32) -> String {
        let pod = &mut self.pods[k];
        self.cri.fake.exit_container(&pod.container(), code);
        pod.exited = true;
        pod.name.clone()
    }

    /// Pod `k` gets a new running container, its restart counted.
    fn restart(&mut self, k: usize) {
        let fake = &self.cri.fake;
        let pod = &mut self.pods[k];
        pod.restarts += 1;
        pod.exited = false;
        let id = pod.container();
        fake.add_container(
            &pod.uid,
            &format!("sb-{}", pod.uid),
            &id,
            "c0",
            cri::ContainerState::ContainerRunning,
        );
        if let Some(meta) = fake
            .state()
            .containers
            .get_mut(&id)
            .and_then(|c| c.item.metadata.as_mut())
        {
            meta.attempt = pod.restarts;
        }
    }

    fn start_plegd(&mut self, setup: &PlegdSetup) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("plegd log file");
        let mode = if setup.beside_kubelet { "conditions" } else { "full" };
        let child = process::plegd_run(&setup.binary, &self.name, &self.cri.path, &self.kubeconfig)
            .args(["--triggers", "none", "--metrics-address", "off", "--status-mode", mode])
            .args(&setup.args)
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn plegd");
        self.plegd = Some(KillOnDrop(child));
    }

    /// Stop the node's plegd as a DaemonSet rollout does (SIGTERM), waiting for it to exit.
    fn stop_plegd(&mut self) {
        if let Some(mut child) = self.plegd.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(child.id() as i32).expect("a pid"),
                rustix::process::Signal::TERM,
            );
            let _ = child.0.wait();
        }
    }

    fn pid(&self) -> Option<u32> {
        self.plegd.as_ref().map(|c| c.id())
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

/// The CPU time so far of the server, etcd and every plegd, in ms.
struct Sample {
    at: SystemTime,
    instant: Instant,
    apiserver: f64,
    etcd: f64,
    plegd: f64,
}

/// What one phase measured.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub nodes: usize,
    pub seconds: f64,
    /// plegd's requests answered in the phase's window.
    pub requests: Vec<Logged>,
    /// CPU-ms a second.
    pub apiserver_cpu: f64,
    pub etcd_cpu: f64,
    /// Of all plegds together.
    pub plegd_cpu: f64,
    /// MiB at the end of the window.
    pub apiserver_rss: f64,
    pub etcd_rss: f64,
    /// The server's live heap, MiB: what its last garbage collection kept (`go_gc_heap_live_bytes`),
    /// the memory its objects, caches and watches hold, without the garbage RSS still carries.
    pub apiserver_heap: f64,
    /// Mean over the plegds.
    pub plegd_rss: f64,
    /// Watches of pods open in the server at the end (plegd's, and the harness's own one).
    pub pod_watches: f64,
    /// TCP connections of all plegds to the server at the end.
    pub connections: usize,
    /// Runtime changes made in the window, all nodes.
    pub changes: u64,
    /// Runtime changes made in the whole phase (the window and the warm-up before it).
    pub changes_made: u64,
    /// plegd's successful status PATCHes from the phase's start until its writes have landed.
    pub patches_landed: usize,
}

/// The value of a metric without labels in a Prometheus text page, 0 if absent.
fn unlabelled_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
        .next()
        .unwrap_or(0.0)
}

/// plegd's requests a second, by what RBAC authorizes them as.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rates {
    pub patch: f64,
    pub list: f64,
    pub watch: f64,
    pub other: f64,
}

impl Rates {
    pub fn of(requests: &[Logged], seconds: f64) -> Self {
        let mut r = Rates::default();
        for request in requests {
            let verb = request.authorization();
            let verb = verb.as_deref().and_then(|a| a.rsplit(':').next()).unwrap_or("");
            let slot = match verb {
                "patch" => &mut r.patch,
                "get" | "list" => &mut r.list,
                "watch" => &mut r.watch,
                _ => &mut r.other,
            };
            *slot += 1.0 / seconds;
        }
        r
    }

    pub fn total(&self) -> f64 {
        self.patch + self.list + self.watch + self.other
    }
}

/// The `q` quantile (0‥1) of `values`, 0 when empty.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let at = ((values.len() - 1) as f64 * q).round() as usize;
    values[at]
}

/// How long the server took for each of `requests`' successful status PATCHes, ms.
pub fn patch_durations(requests: &[Logged]) -> Vec<f64> {
    requests
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.status < 300)
        .map(|r| r.at.duration_since(r.received).unwrap_or_default().as_secs_f64() * 1000.0)
        .collect()
}

/// What a storm did: from the end of the fault (when the control plane is back, the plegds
/// restarted) on.
#[derive(Debug, Clone)]
pub struct Storm {
    pub name: String,
    pub nodes: usize,
    /// How long the fault lasted.
    pub fault: Duration,
    /// plegd's requests from the fault's start to the end of the window after it.
    pub after: Vec<Logged>,
    pub window: Duration,
    /// From the end of the fault until every node watched again and every exit made during the
    /// fault was written.
    pub synced_after: Duration,
    /// Successful status PATCHes, from the fault's start to the window's end, of pods that did not
    /// change.
    pub needless_patches: usize,
    /// Exits made during the fault, and how many of them the apiserver holds.
    pub exits: usize,
    pub exits_landed: usize,
    /// Most of the server's resident memory during the storm, MiB.
    pub apiserver_peak_rss: f64,
    /// CPU-ms of the server and etcd from the fault's start to the window's end.
    pub apiserver_cpu_ms: f64,
    pub etcd_cpu_ms: f64,
}

/// The faults a storm can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kube-apiserver killed and started again (etcd kept).
    ApiserverRestart,
    /// etcd killed and started again, then compacted to its newest revision.
    EtcdRestartCompaction,
    /// Every plegd restarted (SIGTERM, then started), 10 % of the nodes at a time, each batch
    /// once the one before has watched again: a DaemonSet rollout.
    Rollout,
    /// Every plegd restarted at once: every node lists at the same moment.
    AllRestart,
    /// plegd's priority level cut to one seat with no queue for `seconds`: what runs past it is
    /// answered 429 with Retry-After.
    Throttled { seconds: u64 },
}

impl Fault {
    pub fn name(&self) -> String {
        match self {
            Fault::ApiserverRestart => "kube-apiserver restarted".into(),
            Fault::EtcdRestartCompaction => "etcd restarted and compacted".into(),
            Fault::Rollout => "plegd rolled out, 10 % at a time".into(),
            Fault::AllRestart => "every plegd restarted at once".into(),
            Fault::Throttled { seconds } => format!("plegd throttled to one seat, {seconds} s"),
        }
    }
}

/// The fleet: the apiserver, the nodes and how their plegds run.
pub struct Fleet {
    pub api: Apiserver,
    pub nodes: Vec<Node>,
    setup: PlegdSetup,
    ticks: f64,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// A fresh apiserver and `count` nodes of `pods` pods of one container each, created in the
    /// apiserver (which gives their uids) and started in each node's runtime; no plegd yet.
    pub async fn build(count: usize, pods: usize, setup: PlegdSetup) -> Self {
        Self::build_with(count, pods, setup, Vec::new()).await
    }

    /// [`Fleet::build`], kube-apiserver started with `server_args` more.
    pub async fn build_with(count: usize, pods: usize, setup: PlegdSetup, server_args: Vec<String>) -> Self {
        let names: Vec<String> = (0..count).map(|k| format!("node-{k}")).collect();
        let api = Apiserver::start_with(Options {
            plegd_nodes: names.clone(),
            args: server_args,
            ..Options::default()
        })
        .await;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::with_capacity(count);
        let kubelet = api.client_as(&Identity::Kubelet).await;
        for (k, name) in names.iter().enumerate() {
            let cri = fake_cri::FakeServer::start().await;
            // A few creates at a time: the server takes them in parallel, as from a scheduler.
            let created: Vec<(String, String)> = futures_util::stream::iter(0..pods)
                .map(|i| {
                    let api = &api;
                    let kubelet = kubelet.clone();
                    let beside_kubelet = setup.beside_kubelet;
                    async move {
                        let pod = format!("n{k}-pod-{i}");
                        let uid = api.create_bound_pod(&pod, name, 1, "Always").await;
                        if beside_kubelet {
                            write_running_as_kubelet(kubelet, &pod).await;
                        }
                        (pod, uid)
                    }
                })
                .buffered(16)
                .collect()
                .await;
            let mut churn_pods = Vec::with_capacity(pods);
            for (pod, uid) in created {
                cri.fake.add_running_pod(&uid, &pod, 1);
                churn_pods.push(ChurnPod {
                    name: pod,
                    uid,
                    restarts: 0,
                    exited: false,
                });
            }
            nodes.push(Node {
                name: name.clone(),
                cri,
                pods: churn_pods,
                changes: 0,
                plegd: None,
                log: dir.path().join(format!("plegd-{name}.log")),
                kubeconfig: api.kubeconfig_as(dir.path(), &Identity::Plegd(name.clone())),
            });
        }
        Self {
            api,
            nodes,
            setup,
            ticks: clock_ticks(),
            _dir: dir,
        }
    }

    /// A temporary directory of the fleet's own.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn pods(&self) -> usize {
        self.nodes.iter().map(|n| n.pods.len()).sum()
    }

    /// Start every node's plegd and wait until every pod is Running in the apiserver.
    pub async fn start_plegds(&mut self, timeout: Duration) {
        for node in &mut self.nodes {
            node.start_plegd(&self.setup);
        }
        self.wait_running(timeout).await;
    }

    /// Stop every plegd (SIGTERM) and start them again with `setup`, all at once.
    pub fn restart_plegds(&mut self, setup: PlegdSetup) {
        self.setup = setup;
        for node in &mut self.nodes {
            node.stop_plegd();
        }
        for node in &mut self.nodes {
            node.start_plegd(&self.setup);
        }
    }

    /// Wait until plegd has written every pod of the fleet: Running in the apiserver (full mode;
    /// a metadata list filtered by the server), or with plegd's condition (beside a kubelet);
    /// every 2 s.
    pub async fn wait_running(&self, timeout: Duration) {
        let pods: Api<Pod> = Api::namespaced(self.api.client(), "default");
        let count = self.pods();
        let deadline = Instant::now() + timeout;
        loop {
            let running = if self.setup.beside_kubelet {
                pods.list(&ListParams::default())
                    .await
                    .map(|l| l.items.iter().filter(|p| condition(p) == Some(true)).count())
                    .unwrap_or(0)
            } else {
                pods.list_metadata(&ListParams::default().fields("status.phase=Running"))
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(0)
            };
            if running >= count {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "only {running} of {count} pods Running after {timeout:?}\n{}\n{}",
                    self.logs(),
                    self.api.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .take(3)
            .map(|n| format!("--- plegd of {} ---\n{}", n.name, n.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn sample(&self) -> Sample {
        let ms = |pid: Option<u32>| pid.map_or(0.0, |p| cpu_ticks(p) / self.ticks * 1000.0);
        Sample {
            at: SystemTime::now(),
            instant: Instant::now(),
            apiserver: ms(self.api.server_pid()),
            etcd: ms(self.api.etcd_pid()),
            plegd: self.nodes.iter().map(|n| ms(n.pid())).sum(),
        }
    }

    /// plegd's requests answered from `from` on (to `to`, if given).
    /// plegd's requests answered from `from` (to `to`), from the server's request log.
    pub async fn requests_between(&self, from: SystemTime, to: Option<SystemTime>) -> Vec<Logged> {
        self.api
            .requests_by(PLEGD_USER)
            .await
            .into_iter()
            .filter(|r| r.at >= from && to.is_none_or(|t| r.at <= t))
            .collect()
    }

    /// One phase with a window of `seconds`: with `rate`, that many changes a second on every
    /// node, spread evenly over the nodes and the second, from a warm-up of 2 s before the window
    /// (the writes of the first changes land up to a relist later) to its end.
    pub async fn measure(&mut self, name: &str, seconds: u64, rate: f64) -> Phase {
        const WARM_UP: Duration = Duration::from_secs(2);
        self.api.clear_log().await;
        let started = SystemTime::now();
        let (mut changes, mut changes_made) = (0, 0);
        let (begin, end) = if rate > 0.0 {
            let gap = Duration::from_secs_f64(1.0 / (rate * self.nodes.len() as f64));
            let window = Instant::now() + WARM_UP;
            let end = window + Duration::from_secs(seconds);
            let mut begin = None;
            let mut next = Instant::now();
            while next < end {
                if begin.is_none() && next >= window {
                    begin = Some(self.sample());
                }
                let n = self.nodes.len();
                self.nodes[changes_made as usize % n].change();
                changes_made += 1;
                if begin.is_some() {
                    changes += 1;
                }
                next += gap;
                tokio::time::sleep_until(next.into()).await;
            }
            let begin = begin.unwrap_or_else(|| self.sample());
            (begin, self.sample())
        } else {
            let begin = self.sample();
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            (begin, self.sample())
        };
        let elapsed = (end.instant - begin.instant).as_secs_f64();
        let text = self.api.server_metrics().await;
        let pod_watches: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_longrunning_requests{")
                    && l.contains("resource=\"pods\"")
                    && l.contains("verb=\"WATCH\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        let apiserver_heap = unlabelled_metric(&text, "go_gc_heap_live_bytes") / (1024.0 * 1024.0);
        let connections = self
            .nodes
            .iter()
            .filter_map(Node::pid)
            .map(|pid| tcp_connections_to(pid, self.api.port()))
            .sum();
        let rss: Vec<f64> = self.nodes.iter().filter_map(Node::pid).map(rss_mib).collect();
        let plegd_rss = rss.iter().sum::<f64>() / rss.len().max(1) as f64;
        let (apiserver_rss, etcd_rss) = (
            self.api.server_pid().map_or(0.0, rss_mib),
            self.api.etcd_pid().map_or(0.0, rss_mib),
        );
        let patches_landed = if changes_made > 0 {
            self.wait_patches(started, changes_made as usize).await
        } else {
            0
        };
        let requests = self.requests_between(begin.at, Some(end.at)).await;
        Phase {
            name: name.to_owned(),
            nodes: self.nodes.len(),
            seconds: elapsed,
            requests,
            apiserver_cpu: (end.apiserver - begin.apiserver) / elapsed,
            etcd_cpu: (end.etcd - begin.etcd) / elapsed,
            plegd_cpu: (end.plegd - begin.plegd) / elapsed,
            apiserver_rss,
            etcd_rss,
            apiserver_heap,
            plegd_rss,
            pod_watches,
            connections,
            changes,
            changes_made,
            patches_landed,
        }
    }

    /// plegd's successful status PATCHes since `since`, once `want` of them have landed or no
    /// more have for 5 s (a write that a change did not need is counted too, and shows).
    async fn wait_patches(&self, since: SystemTime, want: usize) -> usize {
        let mut landed = 0;
        let mut last_more = Instant::now();
        loop {
            let now = self
                .requests_between(since, None)
                .await
                .iter()
                .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.status < 300)
                .count();
            if now > landed {
                landed = now;
                last_more = Instant::now();
            }
            if landed >= want || last_more.elapsed() > Duration::from_secs(5) {
                return landed;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// One exit on each of `nodes` (the next pod whose container runs): the pods' names and codes.
    fn exits_on(&mut self, nodes: std::ops::Range<usize>, code: i32) -> Vec<(String, i32)> {
        let mut made = Vec::new();
        for node in &mut self.nodes[nodes] {
            if let Some(k) = node.pods.iter().position(|p| !p.exited) {
                made.push((node.exit(k, code), code));
            }
        }
        made
    }

    /// Which of `exits` the apiserver holds (the pod's container terminated with the code; beside
    /// a kubelet, plegd's condition False with the code in its message).
    async fn landed(&self, exits: &[(String, i32)]) -> usize {
        let pods: Api<Pod> = Api::namespaced(self.api.client(), "default");
        let Ok(list) = pods.list(&ListParams::default()).await else {
            return 0;
        };
        if self.setup.beside_kubelet {
            let said: BTreeMap<String, String> = list
                .items
                .iter()
                .filter_map(|p| {
                    let c = p
                        .status
                        .as_ref()?
                        .conditions
                        .as_ref()?
                        .iter()
                        .find(|c| c.type_ == PLEGD_CONDITION)?;
                    (c.status == "False").then(|| Some((p.metadata.name.clone()?, c.message.clone()?)))?
                })
                .collect();
            return exits
                .iter()
                .filter(|(pod, code)| said.get(pod).is_some_and(|m| m.contains(&format!("code {code}"))))
                .count();
        }
        let codes: BTreeMap<String, i32> = list
            .items
            .iter()
            .filter_map(|p| {
                let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
                let code = status.state.as_ref()?.terminated.as_ref()?.exit_code;
                Some((p.metadata.name.clone()?, code))
            })
            .collect();
        exits.iter().filter(|(pod, code)| codes.get(pod) == Some(code)).count()
    }

    /// The pods whose status in the apiserver is not their runtime's (restart count, and whether
    /// the container has exited), after waiting up to `timeout` for none to be.
    pub async fn settled(&self, timeout: Duration) -> Vec<String> {
        let pods: Api<Pod> = Api::namespaced(self.api.client(), "default");
        let deadline = Instant::now() + timeout;
        loop {
            let stored: BTreeMap<String, (i32, bool)> = pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| {
                    if self.setup.beside_kubelet {
                        // plegd writes its condition alone: False once the container exited.
                        let running = condition(&p)?;
                        return Some((p.metadata.name?, (0, !running)));
                    }
                    let status = p.status?.container_statuses?.into_iter().next()?;
                    let exited = status.state.is_some_and(|s| s.terminated.is_some());
                    Some((p.metadata.name?, (status.restart_count, exited)))
                })
                .collect();
            let restarts = |p: &ChurnPod| {
                if self.setup.beside_kubelet {
                    0
                } else {
                    p.restarts as i32
                }
            };
            let wrong: Vec<String> = self
                .nodes
                .iter()
                .flat_map(|n| &n.pods)
                .filter(|p| stored.get(&p.name) != Some(&(restarts(p), p.exited)))
                .map(|p| p.name.clone())
                .collect();
            if wrong.is_empty() || Instant::now() >= deadline {
                return wrong;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every node's plegd has had a WATCH answered 200 at or after `since` (nodes of `range`).
    async fn watching_again(&self, since: SystemTime, range: std::ops::Range<usize>) -> bool {
        let watched: BTreeSet<String> = self
            .requests_between(since, None)
            .await
            .into_iter()
            .filter(|r| r.status == 200 && r.method == "GET" && r.query.contains("watch="))
            .filter_map(|r| r.node)
            .collect();
        self.nodes[range].iter().all(|n| watched.contains(&n.name))
    }

    /// Bring every exited container of the fleet back to running (between storms).
    pub fn restart_exited(&mut self) {
        for node in &mut self.nodes {
            for k in 0..node.pods.len() {
                if node.pods[k].exited {
                    node.restart(k);
                }
            }
        }
    }

    /// A storm: `fault`, with an exit on every node while it lasts; then until every node watches
    /// again and every such exit is written (at most `deadline`), and the `window` after the fault
    /// (a minute in the bench).
    pub async fn storm(&mut self, fault: Fault, deadline: Duration, window: Duration) -> Storm {
        self.api.clear_log().await;
        let n = self.nodes.len();
        let mut begin = self.sample();
        let peak = Arc::new(PeakRss::default());
        let sampler = peak.clone().follow(self.api.server_pid());
        let fault_start = Instant::now();
        let fault_began = SystemTime::now();
        let mut exits = Vec::new();
        // Faults that end every watch: synced again once every node watches again.
        let mut rewatch = true;
        match fault {
            Fault::ApiserverRestart => {
                // The CPU the server used until it is killed; the new one counts from 0.
                begin.apiserver -= self.sample().apiserver;
                self.api.set_down(true).await;
                exits = self.exits_on(0..n, 41);
                self.api.set_down(false).await;
                peak.set_pid(self.api.server_pid());
            }
            Fault::EtcdRestartCompaction => {
                rewatch = false;
                exits = self.exits_on(0..n, 42);
                begin.etcd -= self.sample().etcd;
                self.api.restart_etcd().await;
                self.api.compact().await;
            }
            Fault::Rollout => {
                let batch = n.div_ceil(10).max(1);
                let mut first = 0;
                while first < n {
                    let last = (first + batch).min(n);
                    let since = SystemTime::now();
                    for node in &mut self.nodes[first..last] {
                        node.stop_plegd();
                    }
                    exits.extend(self.exits_on(first..last, 43));
                    for node in &mut self.nodes[first..last] {
                        node.start_plegd(&self.setup);
                    }
                    let until = Instant::now() + deadline;
                    while !self.watching_again(since, first..last).await {
                        assert!(
                            Instant::now() < until,
                            "a rollout batch did not watch again in {deadline:?}"
                        );
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    first = last;
                }
                rewatch = false;
            }
            Fault::AllRestart => {
                for node in &mut self.nodes {
                    node.stop_plegd();
                }
                exits = self.exits_on(0..n, 44);
                for node in &mut self.nodes {
                    node.start_plegd(&self.setup);
                }
            }
            Fault::Throttled { seconds } => {
                rewatch = false;
                self.api.apply(&throttle_objects());
                let end = Instant::now() + Duration::from_secs(seconds);
                // One exit a second on each node in turn while it lasts.
                let gap = Duration::from_secs_f64(1.0 / n as f64);
                let mut k = 0;
                while Instant::now() < end {
                    exits.extend(self.exits_on(k % n..k % n + 1, 45));
                    k += 1;
                    tokio::time::sleep(gap).await;
                }
                self.api.delete_objects(&throttle_objects());
            }
        }
        let fault_time = fault_start.elapsed();
        let back = SystemTime::now();
        let back_instant = Instant::now();
        let synced_after = loop {
            if (!rewatch || self.watching_again(fault_began, 0..n).await) && self.landed(&exits).await == exits.len() {
                break back_instant.elapsed();
            }
            if back_instant.elapsed() > deadline {
                break deadline;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        tokio::time::sleep_until((back_instant + window).into()).await;
        let end = self.sample();
        sampler.store(false, Ordering::Relaxed);
        // From the fault's start: what the nodes asked while it lasted and in the window after.
        let after = self.requests_between(fault_began, Some(back + window)).await;
        let changed: BTreeSet<&str> = exits.iter().map(|(pod, _)| pod.as_str()).collect();
        let needless_patches = after
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.status < 300)
            .filter(|r| {
                let pod = r.path.trim_end_matches("/status").rsplit('/').next().unwrap_or("");
                !changed.contains(pod)
            })
            .count();
        let exits_landed = self.landed(&exits).await;
        Storm {
            name: fault.name(),
            nodes: n,
            fault: fault_time,
            after,
            window,
            synced_after,
            needless_patches,
            exits: exits.len(),
            exits_landed,
            apiserver_peak_rss: peak.most(),
            apiserver_cpu_ms: end.apiserver - begin.apiserver,
            etcd_cpu_ms: end.etcd - begin.etcd,
        }
    }
}

/// plegd's condition on `pod`: Some(true) when it says every container runs.
fn condition(pod: &Pod) -> Option<bool> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    Some(conditions.iter().find(|c| c.type_ == PLEGD_CONDITION)?.status == "True")
}

/// Pod `name`'s status as a kubelet writes it once its container runs (phase, Ready), through the
/// stand-in for a kubelet's status writes.
async fn write_running_as_kubelet(kubelet: kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(kubelet, "default");
    let status = serde_json::json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}});
    pods.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&status),
    )
    .await
    .unwrap_or_else(|e| panic!("write {name}'s status as the kubelet: {e}"));
}

/// The most resident memory a process had, sampled every 250 ms.
#[derive(Default)]
struct PeakRss {
    pid: std::sync::Mutex<Option<u32>>,
    most: std::sync::Mutex<f64>,
}

impl PeakRss {
    fn set_pid(&self, pid: Option<u32>) {
        *self.pid.lock().unwrap() = pid;
    }

    fn most(&self) -> f64 {
        *self.most.lock().unwrap()
    }

    /// Sample `pid` until the flag returned is cleared.
    fn follow(self: Arc<Self>, pid: Option<u32>) -> Arc<AtomicBool> {
        self.set_pid(pid);
        let on = Arc::new(AtomicBool::new(true));
        let running = on.clone();
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let pid = *self.pid.lock().unwrap();
                if let Some(pid) = pid {
                    let now = rss_mib(pid);
                    let mut most = self.most.lock().unwrap();
                    *most = most.max(now);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        on
    }
}

/// plegd's requests (all nodes) in a level of one seat with no queue, before its own level.
fn throttle_objects() -> Vec<serde_json::Value> {
    apiserver::throttle_objects()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
