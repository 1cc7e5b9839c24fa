//! The path to the apiserver breaks while a container exits: a black hole that swallows every byte
//! (a control-plane node powered off, a load balancer path gone) or a reset of every connection.
//! plegd gives up the requests that hang (`--apiserver-timeout`), lets go of the pod's write, and
//! writes the exit on a new connection once the path is back; its informer watches again.
//! `plegd run` as deployed, the fake CRI server, the test apiserver built from Kubernetes' own
//! code, and a TCP proxy between them (tests/support/proxy.rs, the one fault no server makes).
//! And the path when nothing breaks: one HTTP/2 connection carries all of plegd's requests.

use plegd_test_support as support;

use std::time::{Duration, Instant};

use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, KillOnDrop, free_port, http_get, metric, plegd_run, tcp_connections_to};
use support::proxy::{Path, Proxy};
use support::wait_for;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// plegd (full mode, 2 s apiserver timeout) through a proxy, with pod-0 running and written.
async fn setup() -> (FakeServer, Apiserver, Proxy, KillOnDrop, u16, tempfile::TempDir, String) {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let proxy = Proxy::start(api.port()).await;
    let dir = tempfile::tempdir().unwrap();
    let uid = api.create_bound_pod("pod-0", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid, "pod-0", 1);
    let kubeconfig = api.kubeconfig_through(dir.path(), &Identity::Plegd("n1".into()), proxy.port);
    let port = free_port();
    let plegd = KillOnDrop(
        plegd_run(PLEGD, "n1", &cri.path, &kubeconfig)
            .args(FULL_MODE_FAST_RELIST)
            .args(["--apiserver-timeout", "2s"])
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .spawn()
            .expect("spawn plegd run"),
    );
    api.wait_all_running(1, Duration::from_secs(30)).await;
    (cri, api, proxy, plegd, port, dir, uid)
}

async fn metrics(port: u16) -> String {
    tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
        .await
        .unwrap()
        .map(|(_, body)| body)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_path_delays_the_exit_and_loses_nothing() {
    let (cri, api, proxy, _plegd, port, _dir, uid) = setup().await;

    // Every byte of every connection is swallowed for 8 s while the container exits.
    proxy.set(Path::Swallow);
    cri.fake.exit_container(&format!("ctr-{uid}-0"), 7);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(api.exit_code("pod-0").await, None, "nothing got through the black hole");
    let back = Instant::now();
    proxy.set(Path::Pass);
    wait_for(
        "the exit written once the path is back",
        Duration::from_secs(20),
        || async { api.exit_code("pod-0").await == Some(7) },
    )
    .await;
    eprintln!("exit written {:?} after the path came back", back.elapsed());

    // The informer's watch, swallowed too, is given up and made again: a pod created now is
    // seen and written.
    let uid1 = api.create_bound_pod("pod-1", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid1, "pod-1", 1);
    cri.fake.exit_container(&format!("ctr-{uid1}-0"), 3);
    wait_for(
        "a new pod seen by a new watch and written",
        Duration::from_secs(30),
        || async { api.exit_code("pod-1").await == Some(3) },
    )
    .await;
    let body = metrics(port).await;
    assert!(
        metric(&body, "plegd_status_writes_total{result=\"retry\"}").unwrap_or(0.0) >= 1.0,
        "the hung write was given up and retried\n{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_connections_are_made_again() {
    let (cri, api, proxy, _plegd, _port, _dir, uid) = setup().await;
    proxy.set(Path::Reset);
    cri.fake.exit_container(&format!("ctr-{uid}-0"), 9);
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set(Path::Pass);
    wait_for("the exit written after the resets", Duration::from_secs(20), || async {
        api.exit_code("pod-0").await == Some(9)
    })
    .await;
    let uid1 = api.create_bound_pod("pod-1", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid1, "pod-1", 1);
    cri.fake.exit_container(&format!("ctr-{uid1}-0"), 4);
    wait_for("a new pod seen after the resets", Duration::from_secs(30), || async {
        api.exit_code("pod-1").await == Some(4)
    })
    .await;
}

/// kube-apiserver speaks HTTP/2: the informer's watch and every status write of a busy node share
/// one connection, as the kubelet's client holds one (with HTTP/1.1, a watch holds a connection of
/// its own and each write in flight another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_carries_the_watch_and_every_write() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut uids = Vec::new();
    for i in 0..6 {
        let pod = format!("pod-{i}");
        let uid = api.create_bound_pod(&pod, "n1", 1, "Never").await;
        cri.fake.add_running_pod(&uid, &pod, 1);
        uids.push(uid);
    }
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("n1".into()));
    let port = free_port();
    let plegd = KillOnDrop(
        plegd_run(PLEGD, "n1", &cri.path, &kubeconfig)
            .args(FULL_MODE_FAST_RELIST)
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .spawn()
            .expect("spawn plegd run"),
    );
    api.wait_all_running(6, Duration::from_secs(30)).await;
    // Every container exits at once: six writes in flight together, beside the watch.
    for (i, uid) in uids.iter().enumerate() {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), i as i32 + 1);
    }
    let mut most = 0;
    wait_for("every exit written", Duration::from_secs(30), || {
        most = most.max(tcp_connections_to(plegd.id(), api.port()));
        let api = &api;
        async move {
            let mut all = true;
            for i in 0..6 {
                all &= api.exit_code(&format!("pod-{i}")).await == Some(i + 1);
            }
            all
        }
    })
    .await;
    let now = tcp_connections_to(plegd.id(), api.port());
    let body = metrics(port).await;
    let patches = metric(&body, "plegd_apiserver_requests_total{verb=\"PATCH\",code=\"200\"}").unwrap_or(0.0);
    assert!(patches >= 12.0, "the writes of six starts and six exits\n{body}");
    assert_eq!(
        (most, now),
        (1, 1),
        "one connection to the apiserver at most and at the end, while the watch and {patches} PATCHes ran"
    );
}
