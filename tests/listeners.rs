//! The HTTP endpoint under a flood of idle connections from a local user, the `plegd run` binary as
//! deployed: /healthz keeps answering, status writes go on, and the idle connections are closed by
//! plegd's header timeout. Fake CRI server + the test apiserver built from Kubernetes' own code.

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, KillOnDrop, free_port, http_get, metric, plegd_run};
use support::wait_for;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");
const IDLE: usize = 2000;

async fn exit_code(api: &Apiserver) -> Option<i64> {
    api.pod("default", "pod-0").await?["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].as_i64()
}

fn set_soft_fd_limit(soft: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let hard = getrlimit(Resource::Nofile).maximum;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: hard,
        },
    )
    .expect("lower the soft open-file limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_starve_nothing() {
    // plegd starts with the usual soft limit of 1024 open files (a login shell's, systemd's
    // default), which 2000 connections would exhaust unless plegd raises it; this test process
    // then takes the room it needs for its side of the connections.
    set_soft_fd_limit(1024);
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uid = api.create_bound_pod("pod-0", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid, "pod-0", 1);
    let port = free_port();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("n1".into()));
    let _plegd = KillOnDrop(
        plegd_run(PLEGD, "n1", &cri.path, &kubeconfig)
            .args(FULL_MODE_FAST_RELIST)
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .spawn()
            .expect("spawn plegd run"),
    );
    plegd::listen::raise_fd_limit();
    let get = move |path: &'static str| async move {
        tokio::task::spawn_blocking(move || http_get(port, path)).await.unwrap()
    };
    let mut ready = false;
    for _ in 0..150 {
        if get("/readyz").await.is_some_and(|(code, _)| code == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "plegd ready");
    api.wait_all_running(1, Duration::from_secs(20)).await;

    // 2000 connections that never send a byte.
    let opened = Instant::now();
    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    // plegd accepts them as fast as it is scheduled (on 2 busy cores, not all within the connects).
    let mut body = String::new();
    for _ in 0..50 {
        body = get("/metrics")
            .await
            .expect("/metrics answers beside 2000 idle connections")
            .1;
        if metric(&body, "plegd_process_open_fds").unwrap_or(0.0) >= IDLE as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fds = metric(&body, "plegd_process_open_fds").unwrap_or(0.0);
    assert!(
        fds >= IDLE as f64,
        "plegd holds the idle connections ({fds} fds): none was refused\n{body}"
    );
    assert_eq!(
        metric(&body, "plegd_connections_refused_total{listener=\"http\"}").unwrap_or(0.0),
        0.0
    );

    // Health answers at once, and a container's death still reaches the apiserver.
    let started = Instant::now();
    let health = get("/healthz").await;
    assert_eq!(health.map(|(code, _)| code), Some(200));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "/healthz took {:?}",
        started.elapsed()
    );
    cri.fake.exit_container(&format!("ctr-{uid}-0"), 7);
    wait_for(
        "the exit written beside 2000 idle connections",
        Duration::from_secs(10),
        || async { exit_code(&api).await == Some(7) },
    )
    .await;

    // plegd closes every connection that sent no request within its header timeout (10 s).
    let mut idle = idle;
    let wait = Duration::from_secs(15).saturating_sub(opened.elapsed());
    for stream in &mut idle {
        stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(100))))
            .unwrap();
    }
    let closed = tokio::task::spawn_blocking(move || {
        idle.iter_mut()
            .filter_map(|s| s.read(&mut [0u8; 1]).ok())
            .filter(|&n| n == 0)
            .count()
    })
    .await
    .unwrap();
    assert_eq!(closed, IDLE, "idle connections closed by plegd");
}
