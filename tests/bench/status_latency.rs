//! Container exit → the pod's status visible to a watcher of the apiserver, on real containerd,
//! with `plegd run` in full mode (CRI-event triggers), against the test apiserver built from
//! Kubernetes' own code (k8s.io/apiserver 1.36 on etcd) and against the hand-written Rust one
//! (tests/bench/fake_apiserver.rs), in interleaved rounds of one run. Each pod is created in the
//! apiserver first, bound to the node, and its sandbox run with the apiserver's uid; its container
//! exits after a few hundred ms. The watcher is a client-go-style watch (kube-runtime's watcher, as
//! admin) that notes when it first sees the container terminated; latency is from the container's
//! CRI finishedAt to that moment. Needs root (a private containerd, tests/containerd/containerd.sh).
//!
//!     cargo bench --bench status_latency                        # containerd 2.1, 30 pods, 2 rounds
//!     cargo bench --bench status_latency -- --pods 40 --rounds 3 --containerd 1.7

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::containerd;
use plegd_test_support::daemon as daemon_support;
mod fake_apiserver;
mod stats;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use args::arg;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use serde_json::{Value, json};
use stats::percentile;

const NODE: &str = "latency-node";

/// The apiserver of one round.
enum Server {
    Real(Box<apiserver::Apiserver>),
    Rust(fake_apiserver::TestApiserver),
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Server::Real(_) => "k8s.io/apiserver 1.36 on etcd",
            Server::Rust(_) => "hand-written Rust server",
        }
    }

    /// The pod in the apiserver; its uid (the server's, for the real one).
    async fn create(&self, pod: Value) -> String {
        let created = match self {
            Server::Real(api) => api.create_pod(pod).await,
            Server::Rust(api) => api.create_pod(pod),
        };
        created["metadata"]["uid"].as_str().expect("a uid").to_owned()
    }

    fn client(&self) -> kube::Client {
        match self {
            Server::Real(api) => api.client(),
            Server::Rust(api) => api.client(),
        }
    }

    /// plegd's kubeconfig: its own identity on the real server.
    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        match self {
            Server::Real(api) => api.kubeconfig_as(dir, &apiserver::Identity::Plegd(NODE.into())),
            Server::Rust(api) => api.kubeconfig(dir),
        }
    }
}

type Seen = Arc<Mutex<HashMap<String, SystemTime>>>;

/// Note when each pod (by uid) is first seen with its first container terminated.
fn watch_exits(client: kube::Client, seen: Seen) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, containerd::TEST_NAMESPACE);
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let now = SystemTime::now();
            let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                continue;
            };
            let terminated = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.as_ref())
                .is_some_and(|s| s.terminated.is_some());
            if terminated && let Some(uid) = pod.metadata.uid {
                seen.lock().unwrap().entry(uid).or_insert(now);
            }
        }
    })
}

/// One round: `pods` pods whose container exits; the latency of each, in ms.
async fn round(
    cd: &containerd::Containerd,
    server: Server,
    pods: usize,
    round: usize,
) -> (&'static str, Vec<f64>, usize) {
    let name = server.name();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = daemon_support::options(&cd.socket, server.kubeconfig(dir.path()), NODE, StatusMode::Full);
    options.triggers = TriggerMode::Cri;
    let daemon = daemon_support::spawn(options, Arc::new(Metrics::new()));
    let seen: Seen = Arc::default();
    let watcher = watch_exits(server.client(), seen.clone());
    // The trigger stream connects on its first event.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut exits = Vec::new();
    let mut test_pods = Vec::new();
    for i in 0..pods {
        let name = format!("lat{round}-{i}");
        let uid = server
            .create(json!({
                "metadata": {"name": name, "namespace": containerd::TEST_NAMESPACE},
                "spec": {"nodeName": NODE, "restartPolicy": "Never", "hostNetwork": true,
                         "containers": [{"name": "app", "image": containerd::IMAGE}]}
            }))
            .await;
        let pod = cd.run_pod_as(&name, containerd::TEST_NAMESPACE, &uid, true, None).await;
        let ctr = cd
            .create_container(&pod, "app", &format!("sleep 0.{}; exit 1", 3 + (i * 37) % 7))
            .await;
        cd.start_container(&ctr).await;
        exits.push((uid, ctr));
        test_pods.push(pod);
        tokio::time::sleep(Duration::from_millis(200 + ((i as u64 * 53) % 500))).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().len() < pods && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut latencies = Vec::new();
    let mut missed = 0;
    for (uid, ctr) in &exits {
        let finished = cd.container_times(ctr).await.1;
        match seen.lock().unwrap().get(uid) {
            Some(at) => latencies.push(at.duration_since(finished).unwrap_or_default().as_secs_f64() * 1e3),
            None => missed += 1,
        }
    }
    watcher.abort();
    daemon.stop().await;
    for pod in &test_pods {
        cd.cleanup(pod).await;
    }
    drop(server);
    (name, latencies, missed)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods: usize = arg("--pods").unwrap_or(30);
    let rounds: usize = arg("--rounds").unwrap_or(2);
    let version: String = arg("--containerd").unwrap_or_else(|| "2.3".into());
    let Some(instance) = containerd::PrivateContainerd::start("stlat", &version, 239).await else {
        eprintln!("status_latency: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let cd = instance.handle.clone();
    let (major, minor) = cd.version().await;
    let mut results: HashMap<&'static str, (Vec<f64>, usize)> = HashMap::new();
    let mut order = Vec::new();
    for r in 0..rounds {
        for real in [true, false] {
            let server = if real {
                Server::Real(Box::new(apiserver::Apiserver::start().await))
            } else {
                Server::Rust(fake_apiserver::TestApiserver::start().await)
            };
            let (name, latencies, missed) = round(&cd, server, pods, r).await;
            let entry = results.entry(name).or_default();
            entry.0.extend(latencies);
            entry.1 += missed;
            if !order.contains(&name) {
                order.push(name);
            }
        }
    }
    println!(
        "\n### containerd {major}.{minor}: container exit → status seen by a watch, {pods} pods × {rounds} rounds per apiserver, full mode, CRI-event triggers\n"
    );
    println!("| apiserver | n | p50 ms | p99 ms | max ms | not seen in 30 s |\n|---|---|---|---|---|---|");
    let mut p50 = Vec::new();
    for name in order {
        let (mut ms, missed) = results.remove(name).unwrap_or_default();
        ms.sort_by(f64::total_cmp);
        if ms.is_empty() {
            println!("| {name} | 0 | — | — | — | {missed} |");
            continue;
        }
        p50.push(percentile(&ms, 0.5));
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {missed} |",
            ms.len(),
            percentile(&ms, 0.5),
            percentile(&ms, 0.99),
            ms[ms.len() - 1]
        );
    }
    if let [real, rust] = p50[..] {
        println!("\np50 ratio, real / Rust: {:.2}×", real / rust);
    }
    drop(instance);
}
