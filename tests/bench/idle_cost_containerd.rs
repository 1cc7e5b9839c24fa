//! Idle cost of the whole daemon on a real containerd (2.1 unless PLEGD_CONTAINERD_VERSION says
//! otherwise), with and without runtime triggers, and what each relist period costs the node.
//!
//! N pods of C running containers (busybox `sleep`, host network) are made through CRI in a private
//! containerd instance, each after its bound pod object in the test apiserver built from Kubernetes'
//! own code (k8s.io/apiserver 1.36 on etcd), whose uid the sandbox carries. Then the `plegd run`
//! binary (release, full status mode, `--worker-threads 1`, as its own service account bound to its
//! node) runs against them once per configuration: relist every 1 s without triggers (plegd's
//! behaviour before triggers stretched the relist), then triggers on with each
//! `--relist-period-with-triggers` asked for. One apiserver serves the whole run (the sandboxes
//! carry its uids); before each configuration every pod's status is put back to what the apiserver
//! gave it at creation (Pending), so each plegd starts from scratch as against a fresh apiserver.
//! Once every pod is Running and 12 s more have passed (the first 10 s resync of every pod is
//! behind), plegd's CPU time and RSS, and containerd's CPU time, are read from /proc: plegd's and
//! containerd's processes alone, not the apiserver's or etcd's.
//!
//!     cargo bench --bench idle_cost_containerd                  # 250 and 1,000 pods of one container, 60 s each
//!     cargo bench --bench idle_cost_containerd -- --pods 250 --containers 5 --seconds 60 --periods 1s,10s,30s,300s
//!     PLEGD_CONTAINERD_VERSION=1.7 cargo bench --bench idle_cost_containerd -- --pods 250
//!     cargo bench --bench idle_cost_containerd -- --periods 30s --binaries target/release/plegd,/tmp/plegd-before
//!
//! `--binaries` measures each setting with each binary in turn, on the same pods (side by side);
//! the table then names the binary of each row.
//!
//! Needs root (it starts containerd through tests/containerd/containerd.sh). containerd holds about
//! 6.5 open files per task: 1,000 pods of five containers need ~40,000, more than a 20,000 hard limit.

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::containerd;
use plegd_test_support::process;

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::{Apiserver, Identity};
use args::arg;
use containerd::{Containerd, PrivateContainerd, TEST_NAMESPACE, TestPod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use process::{clock_ticks, cpu_ticks, rss_mib};
use serde_json::{Value, json};

/// One plegd configuration: its name in the table and its flags.
struct Setting {
    name: String,
    flags: Vec<String>,
}

fn settings(periods: &[String]) -> Vec<Setting> {
    let mut out = vec![Setting {
        name: "no triggers, relist 1 s".into(),
        flags: ["--triggers", "none", "--relist-period", "1s"]
            .map(String::from)
            .to_vec(),
    }];
    for period in periods {
        let mut flags = [
            "--triggers",
            "auto",
            "--relist-period",
            "1s",
            "--relist-period-with-triggers",
        ]
        .map(String::from)
        .to_vec();
        flags.push(period.clone());
        // The health threshold stays above the period, as plegd requires (the kubelet's Evented
        // PLEG pairs 300 s with 10 min).
        if humantime::parse_duration(period).expect("a duration") >= Duration::from_secs(180) {
            flags.extend(["--relist-threshold".to_owned(), "10m".to_owned()]);
        }
        out.push(Setting {
            name: format!("triggers, relist {period} while healthy"),
            flags,
        });
    }
    out
}

/// Make pods `idle{i}` for each `i` in `range`, of `containers` running containers: each first in
/// the apiserver (which gives the uid), then its sandbox and containers, a few at a time.
async fn make_pods(cd: &Containerd, api: &Apiserver, range: Range<usize>, containers: usize) -> Vec<TestPod> {
    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(4));
    let mut tasks = Vec::new();
    for i in range {
        let name = format!("idle{i}");
        let uid = apiserver::uid(&api.create_pod(pod_object(&name, "idle", containers)).await);
        let (cd, limit) = (cd.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire().await.expect("semaphore");
            let pod = cd.run_pod_as(&name, TEST_NAMESPACE, &uid, true, None).await;
            for c in 0..containers {
                cd.run_container(&pod, &format!("c{c}"), "sleep 1000000").await;
            }
            pod
        }));
    }
    let mut made = Vec::new();
    for task in tasks {
        made.push(task.await.expect("pod task"));
        if made.len() % 100 == 0 {
            eprintln!(
                "idle_cost_containerd: {} pods made ({:.0} s)",
                made.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    made
}

fn pod_object(name: &str, node: &str, containers: usize) -> Value {
    json!({
        "metadata": {"name": name, "namespace": TEST_NAMESPACE},
        "spec": {"nodeName": node, "restartPolicy": "Always", "hostNetwork": true,
                 "containers": (0..containers).map(|c| json!({"name": format!("c{c}"), "image": "plegd.test/busybox:1"})).collect::<Vec<_>>()}
    })
}

/// Put the status of each of `pods` back to what the apiserver gave it at creation (Pending, its
/// QoS class kept: the apiserver forbids changing it), as the admin, so that the next plegd writes
/// every pod from scratch. A JSON merge patch: every other field of the status set to null.
async fn reset_statuses(api: &Apiserver, pods: &[TestPod]) {
    let names: HashSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    let objects: Api<Pod> = Api::namespaced(api.client(), TEST_NAMESPACE);
    let listed = objects.list(&ListParams::default()).await.expect("list pods");
    for pod in &listed.items {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if !names.contains(name) {
            continue;
        }
        let mut status = match serde_json::to_value(&pod.status) {
            Ok(Value::Object(fields)) => fields,
            _ => serde_json::Map::new(),
        };
        status.retain(|key, _| key != "qosClass");
        status.values_mut().for_each(|v| *v = Value::Null);
        status.insert("phase".into(), json!("Pending"));
        objects
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap_or_else(|e| panic!("reset the status of {name}: {e}"));
    }
}

/// How many of `pods` are Running in the apiserver (one list, not a GET per pod).
async fn running(api: &Apiserver, pods: &[TestPod]) -> usize {
    let names: HashSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    let objects: Api<Pod> = Api::namespaced(api.client(), TEST_NAMESPACE);
    objects
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items
        .iter()
        .filter(|p| names.contains(p.metadata.name.as_deref().unwrap_or_default()))
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

struct Figures {
    /// Global relists in the window (pleg_relist_duration_seconds' count).
    relists: f64,
    /// Trigger streams connected by the end.
    connects: f64,
    plegd_cpu: f64,
    rss_median: f64,
    rss_max: f64,
    containerd_cpu: f64,
}

async fn measure(
    cd: &Containerd,
    api: &Apiserver,
    containerd_pid: u32,
    pods: &[TestPod],
    setting: &Setting,
    binary: &str,
    seconds: u64,
) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    reset_statuses(api, pods).await;
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("idle".into()));
    let port = process::free_port();
    let mut child = process::plegd_run(binary, "idle", &cd.socket, &kubeconfig)
        .args(["--status-mode", "full", "--worker-threads", "1", "--metrics-address"])
        .arg(format!("127.0.0.1:{port}"))
        .args(&setting.flags)
        .spawn()
        .expect("spawn plegd");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(300);
    while running(api, pods).await < pods.len() {
        assert!(Instant::now() < deadline, "pods did not all become Running");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Past the first 10 s resync of every pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let scrape = |name: &str| {
        process::http_get(port, "/metrics")
            .and_then(|(_, body)| process::metric(&body, name))
            .unwrap_or(0.0)
    };
    const RELISTS: &str = "plegd_pleg_relist_duration_seconds_count";
    let relists_before = scrape(RELISTS);
    let ticks = clock_ticks();
    let (plegd_start, containerd_start, start) = (cpu_ticks(pid), cpu_ticks(containerd_pid), Instant::now());
    let mut rss = Vec::new();
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss.push(rss_mib(pid));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let percent = |ticks_used: f64| ticks_used / ticks / elapsed * 100.0;
    let figures = Figures {
        relists: scrape(RELISTS) - relists_before,
        connects: ["cri", "containerd"]
            .iter()
            .map(|s| scrape(&format!("plegd_trigger_stream_connects_total{{source=\"{s}\"}}")))
            .sum(),
        plegd_cpu: percent(cpu_ticks(pid) - plegd_start),
        containerd_cpu: percent(cpu_ticks(containerd_pid) - containerd_start),
        rss_median: 0.0,
        rss_max: 0.0,
    };
    let _ = child.kill();
    let _ = child.wait();
    rss.sort_by(f64::total_cmp);
    Figures {
        rss_median: rss[rss.len() / 2],
        rss_max: rss[rss.len() - 1],
        ..figures
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = arg("--seconds").unwrap_or(60);
    let containers = arg("--containers").unwrap_or(1);
    let sizes: Vec<usize> = arg::<String>("--pods")
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![250, 1000]);
    let periods: Vec<String> = arg::<String>("--periods")
        .unwrap_or_else(|| "1s,10s,30s,300s".into())
        .split(',')
        .map(|p| p.trim().to_owned())
        .collect();
    let binaries: Vec<String> = arg::<String>("--binaries")
        .map(|list| list.split(',').map(|b| b.trim().to_owned()).collect())
        .unwrap_or_else(|| vec![env!("CARGO_BIN_EXE_plegd").to_owned()]);
    let version = std::env::var("PLEGD_CONTAINERD_VERSION").unwrap_or_else(|_| "2.3".into());
    let Some(instance) = PrivateContainerd::start("idle", &version, 47).await else {
        eprintln!("idle_cost_containerd: needs a real containerd (root on Linux)");
        std::process::exit(1);
    };
    let cd = instance.handle.clone();
    let containerd_pid: u32 = std::fs::read_to_string("/var/lib/plegd-test/idle/containerd.pid")
        .expect("containerd.pid")
        .trim()
        .parse()
        .expect("a pid");
    let runtime_version = cd.version().await;
    let api = Apiserver::start().await;
    let mut rows = Vec::new();
    let mut made: Vec<TestPod> = Vec::new();
    for &size in &sizes {
        let more = make_pods(&cd, &api, made.len()..size.max(made.len()), containers).await;
        made.extend(more);
        for setting in settings(&periods) {
            for binary in &binaries {
                let f = measure(&cd, &api, containerd_pid, &made[..size], &setting, binary, seconds).await;
                let name = if binaries.len() > 1 {
                    format!("{} ({binary})", setting.name)
                } else {
                    setting.name.clone()
                };
                eprintln!(
                    "idle_cost_containerd: {size} pods, {name}: plegd {:.2} % / {:.1} MiB, containerd {:.2} %, {} relists, {} stream connections",
                    f.plegd_cpu, f.rss_median, f.containerd_cpu, f.relists, f.connects
                );
                rows.push(format!(
                    "| {size} ({}) | {name} | {} | {:.2} | {:.1} | {:.1} | {:.2} |",
                    size * containers,
                    f.relists,
                    f.plegd_cpu,
                    f.rss_median,
                    f.rss_max,
                    f.containerd_cpu
                ));
            }
        }
    }
    println!(
        "\n### Idle cost of `plegd run` on containerd {}.{} (full mode, one worker thread), {seconds} s per row\n",
        runtime_version.0, runtime_version.1
    );
    println!(
        "| pods (containers) | plegd | global relists in the window | plegd CPU, % of one core | RSS median MiB | RSS max MiB | containerd CPU, % of one core |\n|---|---|---|---|---|---|---|"
    );
    for row in rows {
        println!("{row}");
    }
    drop(api);
    drop(instance);
}
