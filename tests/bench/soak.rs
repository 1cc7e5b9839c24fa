//! Soak: `plegd run` (full status mode, runtime triggers, relist 1 s) as a subprocess against a real
//! containerd and the test apiserver built from Kubernetes' own code (k8s.io/apiserver 1.36 on
//! etcd), under steady churn, for a long time (default 15 minutes). Each pod is created in the
//! apiserver first and its sandbox run with the apiserver's uid; plegd speaks as its own service
//! account, bound to its node, and the status PATCHes counted are its own. RSS, fds and threads are
//! plegd's process alone.
//! Churn: 10 pods; every 250 ms one of them gets a new container (round robin) that runs for 0.3–1.5 s
//! and exits with 0 or 1; each pod keeps its two newest containers, older ones are removed. Every
//! 7.5 s the oldest pod leaves (deleted from the apiserver, removed from the runtime) and a new one
//! with a name never used before takes its place, as Jobs' pods come and go: 120 unique pods in 15
//! minutes. Every 10 s plegd's RSS, open file descriptors, threads, live async tasks
//! (`plegd_runtime_tasks`), the series of `plegd_container_exits_total` and `/healthz` are sampled:
//! the series stay flat (the pods on the node and those that left within the last 2 minutes). RSS growth is measured from the end of the warm-up (first 3 minutes) to the
//! end. Needs root (it starts the test containerd through tests/containerd/containerd.sh).
//!
//!     cargo bench --bench soak                      # 15 minutes
//!     cargo bench --bench soak -- --minutes 60

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::containerd;
use plegd_test_support::process;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use apiserver::{Apiserver, Identity, PLEGD_USER};
use args::arg;
use process::{http_get, metric, open_fds, rss_mib, status_field};

struct Sample {
    at: Duration,
    rss_mib: f64,
    fds: usize,
    threads: f64,
    tasks: f64,
    exit_series: usize,
    healthy: bool,
}

/// How many pods the churn runs at once, and how many container starts each pod lives for.
const PODS: usize = 10;
const STARTS_PER_POD_CHANGE: usize = 30;

/// The apiserver object of soak pod `name`.
fn pod_object(name: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "namespace": containerd::TEST_NAMESPACE},
        "spec": {"nodeName": "soak", "restartPolicy": "Always",
                 "containers": [{"name": "app", "image": "plegd.test/busybox:1"}]}
    })
}

/// A new soak pod: created in the apiserver, its sandbox run under the apiserver's uid.
async fn new_pod(api: &Apiserver, cd: &containerd::Containerd, name: &str) -> containerd::TestPod {
    let object = api.create_pod(pod_object(name)).await;
    cd.run_pod_as(name, containerd::TEST_NAMESPACE, &apiserver::uid(&object), true, None)
        .await
}

/// The series of `plegd_container_exits_total` in a scrape.
fn exit_series(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| l.starts_with("plegd_container_exits_total{"))
        .count()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let minutes: u64 = arg("--minutes").unwrap_or(15);
    let warmup = Duration::from_secs(180.min(minutes * 60 / 5));
    let Some(cd) = containerd::containerd().await else {
        eprintln!("soak: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut pods = Vec::new();
    let mut pods_made = 0usize;
    for _ in 0..PODS {
        pods.push((new_pod(&api, &cd, &format!("soak-{pods_made}")).await, VecDeque::new()));
        pods_made += 1;
    }
    let port = process::free_port();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("soak".into()));
    let mut child = process::plegd_run(env!("CARGO_BIN_EXE_plegd"), "soak", &cd.socket, &kubeconfig)
        .args(["--status-mode", "full", "--relist-period", "1s"])
        .arg("--metrics-address")
        .arg(format!("127.0.0.1:{port}"))
        .spawn()
        .expect("spawn plegd");
    let pid = child.id();

    let start = Instant::now();
    let end = start + Duration::from_secs(minutes * 60);
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_sample = start + Duration::from_secs(10);
    let (mut started, mut removed, mut n) = (0usize, 0usize, 0usize);
    while Instant::now() < end {
        if n > 0 && n % STARTS_PER_POD_CHANGE == 0 {
            // The oldest pod leaves the node; a new one, never seen before, takes its slot.
            let slot = (n / STARTS_PER_POD_CHANGE - 1) % PODS;
            let (old, _) = &pods[slot];
            api.delete(&old.namespace, &old.name).await;
            cd.cleanup(old).await;
            pods[slot] = (new_pod(&api, &cd, &format!("soak-{pods_made}")).await, VecDeque::new());
            pods_made += 1;
        }
        let (pod, containers) = &mut pods[n % PODS];
        let run_ms = 300 + (n * 97) % 1200;
        let code = n % 2;
        // Each new container is the next attempt of "app", as a kubelet restart makes it.
        let config = k8s_cri::v1::ContainerConfig {
            metadata: Some(k8s_cri::v1::ContainerMetadata {
                name: "app".into(),
                attempt: (n / PODS) as u32,
            }),
            image: Some(k8s_cri::v1::ImageSpec {
                image: containerd::IMAGE.into(),
                ..Default::default()
            }),
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("sleep {}.{:03}; exit {code}", run_ms / 1000, run_ms % 1000),
            ],
            ..Default::default()
        };
        let id = cd.create_container_from(pod, "app", config).await;
        cd.start_container(&id).await;
        started += 1;
        containers.push_back(id);
        while containers.len() > 2 {
            let old = containers.pop_front().expect("an old container");
            cd.stop_container(&old, 0).await;
            cd.remove_container(&old).await;
            removed += 1;
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(10);
            let metrics = http_get(port, "/metrics").map(|(_, b)| b).unwrap_or_default();
            samples.push(Sample {
                at: start.elapsed(),
                rss_mib: rss_mib(pid),
                fds: open_fds(pid),
                threads: status_field(pid, "Threads:"),
                tasks: metric(&metrics, "plegd_runtime_tasks").unwrap_or(f64::NAN),
                exit_series: exit_series(&metrics),
                healthy: http_get(port, "/healthz").is_some_and(|(c, _)| c == 200),
            });
        }
    }
    let final_metrics = http_get(port, "/metrics").map(|(_, b)| b).unwrap_or_default();
    let alive = child.try_wait().ok().flatten().is_none();
    let _ = child.kill();
    let _ = child.wait();
    for (pod, _) in &pods {
        cd.cleanup(pod).await;
    }

    let after_warmup: Vec<&Sample> = samples.iter().filter(|s| s.at >= warmup).collect();
    let first = after_warmup.first().expect("samples after the warm-up");
    let last = after_warmup.last().expect("samples after the warm-up");
    let max_rss = after_warmup.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
    let range = |f: &dyn Fn(&Sample) -> f64| {
        let v: Vec<f64> = after_warmup.iter().map(|s| f(s)).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let (fd_min, fd_max) = range(&|s| s.fds as f64);
    let (th_min, th_max) = range(&|s| s.threads);
    let (task_min, task_max) = range(&|s| s.tasks);
    let (series_min, series_max) = range(&|s| s.exit_series as f64);
    let unhealthy = samples.iter().filter(|s| !s.healthy).count();
    let events: f64 = final_metrics
        .lines()
        .filter(|l| l.starts_with("plegd_pleg_events_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let patches = api
        .requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| r.method == "PATCH")
        .count();
    println!("\n### Soak: {minutes} min of churn on real containerd, `plegd run` full mode, triggers auto\n");
    println!(
        "pods {pods_made} (unique names, {PODS} at a time); containers started {started}, removed {removed}; lifecycle events delivered {events}; status PATCHes {patches}; plegd alive at the end: {alive}\n"
    );
    println!(
        "| figure | after warm-up ({} s) | end | range after warm-up |\n|---|---|---|---|",
        warmup.as_secs()
    );
    println!(
        "| RSS MiB | {:.1} | {:.1} | max {max_rss:.1}, growth {:+.1} % (end vs warm-up) |",
        first.rss_mib,
        last.rss_mib,
        (last.rss_mib / first.rss_mib - 1.0) * 100.0
    );
    println!("| open fds | {} | {} | {fd_min}–{fd_max} |", first.fds, last.fds);
    println!("| threads | {} | {} | {th_min}–{th_max} |", first.threads, last.threads);
    println!(
        "| live async tasks | {} | {} | {task_min}–{task_max} |",
        first.tasks, last.tasks
    );
    println!(
        "| exit counter series | {} | {} | {series_min}–{series_max} |",
        first.exit_series, last.exit_series
    );
    println!("| /healthz not 200 | | | {unhealthy} of {} samples |", samples.len());
    println!("\nsamples (s, RSS MiB, fds, threads, tasks, exit counter series, healthy):");
    for s in &samples {
        println!(
            "{} {:.1} {} {} {} {} {}",
            s.at.as_secs(),
            s.rss_mib,
            s.fds,
            s.threads,
            s.tasks,
            s.exit_series,
            s.healthy
        );
    }
}
