//! How plegd's informer lists the pods of its node on the test apiserver built from Kubernetes' own
//! code (`plegd run` the binary, full mode, the fake CRI server): by default one streaming list (a
//! WATCH with `sendInitialEvents=true`, served from the watch cache, no LIST at all), and paged
//! LISTs where the apiserver refuses streaming lists (its WatchList feature gate off) or where
//! `--initial-list pages` asks for them. Each checks the requests in the server's audit log.

use plegd_test_support as support;
use support::bind_pods;

use std::time::Duration;

use support::apiserver::{Apiserver, Identity, Logged, Options, PLEGD_USER};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, RunningPlegd as Plegd};

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

fn start_plegd(api: &Apiserver, cri: &FakeServer, node: &str, dir: &std::path::Path, args: &[&str]) -> Plegd {
    let kubeconfig = api.kubeconfig_as(dir, &Identity::Plegd(node.into()));
    let mut command = support::process::plegd_run(PLEGD, node, &cri.path, &kubeconfig);
    command.args(FULL_MODE_FAST_RELIST).args(args);
    Plegd::spawn(command, dir)
}

/// plegd's reads of pods: (streaming lists, LISTs, other watches).
async fn reads(api: &Apiserver) -> (Vec<Logged>, Vec<Logged>, Vec<Logged>) {
    let mut streaming = Vec::new();
    let mut lists = Vec::new();
    let mut watches = Vec::new();
    for r in api.requests_by(PLEGD_USER).await {
        if r.method != "GET" || r.path != "/api/v1/pods" {
            continue;
        }
        if r.query.contains("sendInitialEvents=true") {
            streaming.push(r);
        } else if r.query.contains("watch=") {
            watches.push(r);
        } else {
            lists.push(r);
        }
    }
    (streaming, lists, watches)
}

async fn every_pod_running(api: &Apiserver, pods: usize) {
    api.wait_all_running(pods, Duration::from_secs(60)).await;
}

fn describe(requests: &[Logged]) -> Vec<String> {
    requests
        .iter()
        .map(|r| format!("{} {}?{}", r.status, r.path, r.query))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_listed_by_one_streaming_watch_and_no_list() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "n1", 25, 1).await;
    let plegd = start_plegd(&api, &cri, "n1", dir.path(), &[]);
    every_pod_running(&api, 25).await;
    let (streaming, lists, _) = reads(&api).await;
    assert!(lists.is_empty(), "no LIST: {:?}", describe(&lists));
    assert_eq!(streaming.len(), 1, "one streaming list: {:?}", describe(&streaming));
    let only = &streaming[0];
    assert_eq!(only.status, 200);
    assert!(
        only.query.contains("fieldSelector=spec.nodeName%3Dn1")
            && only.query.contains("resourceVersionMatch=NotOlderThan"),
        "{}",
        only.query
    );
    assert_eq!(plegd.log_lines("list=\"stream\""), 1, "{}", plegd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_without_streaming_lists_is_listed_in_pages() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(Options {
        args: vec!["--feature-gates=WatchList=false".into()],
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "n1", 25, 1).await;
    let plegd = start_plegd(&api, &cri, "n1", dir.path(), &[]);
    every_pod_running(&api, 25).await;
    let (streaming, lists, watches) = reads(&api).await;
    assert_eq!(
        streaming.iter().map(|r| r.status).collect::<Vec<_>>(),
        [422],
        "one streaming list, refused as invalid, and no second: {:?}",
        describe(&streaming)
    );
    // 25 pods in pages of 10, then a watch from the list's version.
    assert_eq!(lists.len(), 3, "{:?}", describe(&lists));
    assert!(
        lists.iter().all(|r| r.status == 200 && r.query.contains("limit=10")),
        "{:?}",
        describe(&lists)
    );
    assert!(!watches.is_empty() && watches.iter().all(|r| r.query.contains("resourceVersion=")));
    assert_eq!(plegd.log_lines("listing in pages from now on"), 1, "{}", plegd.log());
    assert!(plegd.log().contains("list=\"pages\""), "{}", plegd.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_list_pages_lists_in_pages_of_ten() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "n1", 25, 1).await;
    let _plegd = start_plegd(&api, &cri, "n1", dir.path(), &["--initial-list", "pages"]);
    every_pod_running(&api, 25).await;
    let (streaming, lists, _) = reads(&api).await;
    assert!(streaming.is_empty(), "{:?}", describe(&streaming));
    assert_eq!(lists.len(), 3, "{:?}", describe(&lists));
    assert!(
        lists.iter().all(|r| !r.query.contains("resourceVersion=0")),
        "consistent lists: {:?}",
        describe(&lists)
    );
}
