//! Idle cost of the whole daemon: the `plegd run` binary (full status mode, relist 1 s, no triggers)
//! as a subprocess, against the fake CRI server (in this process) and the test apiserver built from
//! Kubernetes' own code (k8s.io/apiserver 1.36 on etcd, processes of their own), at 110, 250 and
//! 1,000 pods of 5 containers. plegd speaks as its own service account, bound to its node. After
//! every pod is Running in the apiserver and a settling period, plegd's CPU time and RSS are read
//! from /proc for 30 s: plegd's process alone, not the apiserver's, etcd's or this one's.
//!
//!     cargo bench --bench idle_cost
//!     cargo bench --bench idle_cost -- --pods 250 --seconds 60
//!     cargo bench --bench idle_cost -- --worker-threads 1,2   # plegd's --worker-threads, side by side
//!     PLEGD_BENCH_WRAP=heaptrack cargo bench --bench idle_cost -- --pods 1000   # a heap profile

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::fake_cri;
use plegd_test_support::process;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::{Apiserver, Identity};
use args::arg;
use process::{clock_ticks, cpu_ticks, rss_mib};

async fn measure(pods: usize, threads: usize, seconds: u64) -> (f64, f64, f64) {
    let server = fake_cri::FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..pods {
        // The apiserver gives the uid; the runtime's pod carries it, as the kubelet's would.
        let name = format!("pod-{i}");
        let uid = api.create_bound_pod(&name, "idle", 5, "Always").await;
        server.fake.add_running_pod(&uid, &name, 5);
    }
    // PLEGD_BENCH_WRAP runs plegd under a profiler, e.g. `PLEGD_BENCH_WRAP=heaptrack`.
    let wrap = std::env::var("PLEGD_BENCH_WRAP").ok().filter(|w| !w.is_empty());
    let binary = env!("CARGO_BIN_EXE_plegd");
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("idle".into()));
    let mut command = process::plegd_run(binary, "idle", &server.path, &kubeconfig);
    if let Some(wrapper) = &wrap {
        let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
        command = Command::new(wrapper);
        command
            .arg(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    }
    let mut child = command
        .args(["--status-mode", "full", "--triggers", "none", "--relist-period", "1s"])
        .args(["--metrics-address", "off", "--worker-threads", &threads.to_string()])
        .spawn()
        .expect("spawn plegd");
    let pid = child.id();
    api.wait_all_running(pods, Duration::from_secs(120)).await;
    // Past the first 10 s resync of every pod.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let ticks = clock_ticks();
    let (start_cpu, start) = (cpu_ticks(pid), Instant::now());
    let mut rss = Vec::new();
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss.push(rss_mib(pid));
    }
    let cpu = (cpu_ticks(pid) - start_cpu) / ticks / start.elapsed().as_secs_f64() * 100.0;
    let _ = child.kill();
    let _ = child.wait();
    rss.sort_by(f64::total_cmp);
    (cpu, rss[rss.len() / 2], rss[rss.len() - 1])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = arg("--seconds").unwrap_or(30);
    let sizes: Vec<usize> = match arg::<usize>("--pods") {
        Some(n) => vec![n],
        None => vec![110, 250, 1000],
    };
    let threads: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--worker-threads")
        .nth(1)
        .map(|list| list.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    println!("\n### Idle cost of `plegd run` (full mode, relist 1 s, no triggers), {seconds} s per size\n");
    println!(
        "| pods (containers) | --worker-threads | CPU, % of one core | RSS median MiB | RSS max MiB |\n|---|---|---|---|---|"
    );
    for pods in sizes {
        for &n in &threads {
            let (cpu, rss, rss_max) = measure(pods, n, seconds).await;
            println!("| {pods} ({}) | {n} | {cpu:.2} | {rss:.1} | {rss_max:.1} |", pods * 5);
        }
    }
}
