//! Relist overhead: plegd's no-change relist against the bare CRI round trip it is built on, at
//! 1,000 pods / 5,000 containers served by the in-process fake CRI server over a real unix socket.
//! Both are measured in the same run, interleaved round by round so that machine noise hits both
//! alike; medians and the ratio of medians are reported. Also: `compute_events` throughput.
//!
//!     cargo bench --bench relist                      # 1000 pods x 5 containers, 60 rounds
//!     cargo bench --bench relist -- --pods 250 --containers 5 --rounds 100

use plegd_test_support::fake_cri;
mod stats;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_cri::v1 as cri;
use plegd::kubecontainer::{RuntimeContainer, RuntimeContainerState, RuntimePod};
use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig, compute_events};
use plegd::runtime::{CriConfig, CriRuntime};
use plegd::util::clock::SystemClock;
use stats::percentile;

struct Args {
    pods: usize,
    containers: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args {
        pods: 1000,
        containers: 5,
        rounds: 60,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let value = argv.get(i + 1).and_then(|v| v.parse().ok());
        match (argv[i].as_str(), value) {
            ("--pods", Some(v)) => a.pods = v,
            ("--containers", Some(v)) => a.containers = v,
            ("--rounds", Some(v)) => a.rounds = v,
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

fn summary(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let median = percentile(&samples, 0.5);
    println!(
        "| {name} | {:.3} | {:.3} | {:.3} |",
        median.as_secs_f64() * 1e3,
        percentile(&samples, 0.9).as_secs_f64() * 1e3,
        samples[0].as_secs_f64() * 1e3
    );
    median
}

async fn relist_overhead(a: &Args) {
    let server = fake_cri::FakeServer::start().await;
    for p in 0..a.pods {
        server
            .fake
            .add_running_pod(&format!("pod-{p:05}"), &format!("name-{p}"), a.containers);
    }
    let metrics = Arc::new(Metrics::new());
    let (runtime, _) = CriRuntime::connect(&server.path, &CriConfig::default(), metrics.clone())
        .await
        .expect("connect");
    let client = runtime.client();
    let (pleg, mut events) = GenericPleg::new(
        runtime,
        SystemClock,
        metrics,
        // Room for the first relist's events, so that no measured relist has any left to send.
        PlegConfig::default()
            .with_channel_capacity(std::num::NonZeroUsize::new(a.pods * (a.containers + 1) + 1).expect("one at least")),
    );
    // The first relist reads every pod; drain its events so the channel never fills.
    pleg.relist().await.expect("first relist");
    while events.try_recv().is_ok() {}
    assert_eq!(pleg.undelivered_count().await, 0);

    let bare_concurrent = || {
        let mut c1 = client.clone();
        let mut c2 = client.clone();
        async move {
            let (s, c) = tokio::join!(
                c1.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }),
                c2.list_containers(cri::ListContainersRequest { filter: None })
            );
            black_box((
                s.expect("list sandboxes").into_inner().items.len(),
                c.expect("list containers").into_inner().containers.len(),
            ));
        }
    };
    let bare_sequential = || {
        let mut c = client.clone();
        async move {
            let s = c
                .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
                .await
                .expect("list sandboxes");
            let l = c
                .list_containers(cri::ListContainersRequest { filter: None })
                .await
                .expect("list containers");
            black_box((s.into_inner().items.len(), l.into_inner().containers.len()));
        }
    };

    // Warm-up.
    for _ in 0..5 {
        bare_concurrent().await;
        pleg.relist().await.expect("relist");
    }
    let (mut bare_c, mut bare_s, mut relist) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..a.rounds {
        // Alternate the order inside a round so neither side always goes first.
        let order: [u8; 3] = if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for which in order {
            let t = Instant::now();
            match which {
                0 => bare_concurrent().await,
                1 => bare_sequential().await,
                _ => pleg.relist().await.expect("relist"),
            }
            let d = t.elapsed();
            match which {
                0 => bare_c.push(d),
                1 => bare_s.push(d),
                _ => relist.push(d),
            }
        }
    }
    assert!(events.try_recv().is_err(), "a no-change relist sends nothing");
    println!(
        "\n### Relist at {} pods / {} containers ({} rounds, fake CRI over a unix socket)\n",
        a.pods,
        a.pods * a.containers,
        a.rounds
    );
    println!("| what | median ms | p90 ms | min ms |\n|---|---|---|---|");
    let bc = summary(
        "bare ListPodSandbox + ListContainers (concurrent, as plegd issues them)",
        bare_c,
    );
    let bs = summary("bare ListPodSandbox then ListContainers (sequential)", bare_s);
    let rl = summary("plegd relist, no change", relist);
    println!(
        "\nratio relist / bare concurrent (medians): **{:.2}×**; relist / bare sequential: {:.2}×",
        rl.as_secs_f64() / bc.as_secs_f64(),
        rl.as_secs_f64() / bs.as_secs_f64()
    );
}

fn synthetic_pods(n: usize, containers: usize, state: RuntimeContainerState) -> Vec<RuntimePod> {
    (0..n)
        .map(|p| RuntimePod {
            id: format!("pod-{p:05}"),
            name: format!("name-{p}"),
            namespace: "default".into(),
            containers: (0..containers)
                .map(|c| RuntimeContainer {
                    id: format!("ctr-{p:05}-{c}"),
                    sandbox_id: String::new(),
                    name: format!("c{c}"),
                    state,
                    created_at: 1,
                    attempt: 0,
                })
                .collect(),
            sandboxes: vec![RuntimeContainer {
                id: format!("sb-{p:05}"),
                sandbox_id: String::new(),
                name: String::new(),
                state: RuntimeContainerState::Running,
                created_at: 1,
                attempt: 0,
            }],
        })
        .collect()
}

fn compute_events_throughput(a: &Args) {
    let old = synthetic_pods(a.pods, a.containers, RuntimeContainerState::Running);
    let changed = synthetic_pods(a.pods, a.containers, RuntimeContainerState::Exited);
    let now = SystemTime::now();
    println!(
        "\n### compute_events over {} pods x ({} containers + 1 sandbox)\n",
        a.pods, a.containers
    );
    println!("| diff | median µs per pass | containers / s |\n|---|---|---|");
    for (name, new) in [("no change", &old), ("every container died", &changed)] {
        let mut samples = Vec::new();
        for _ in 0..a.rounds.max(20) {
            let t = Instant::now();
            let mut n = 0;
            for (o, c) in old.iter().zip(new.iter()) {
                n += black_box(compute_events(Some(o), Some(c), now)).len();
            }
            black_box(n);
            samples.push(t.elapsed());
        }
        samples.sort();
        let median = percentile(&samples, 0.5);
        let per_sec = (a.pods * (a.containers + 1)) as f64 / median.as_secs_f64();
        println!("| {name} | {:.1} | {:.2e} |", median.as_secs_f64() * 1e6, per_sec);
    }
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(relist_overhead(&a));
    compute_events_throughput(&a);
}
