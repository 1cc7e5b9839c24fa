//! How plegd's informer lists the pods of its node on the test apiserver built from Kubernetes' own
//! code (`plegd run` the binary, full mode, the fake CRI server): by default one streaming list (a
//! WATCH with `sendInitialEvents=true`, served from the watch cache, no LIST at all), and paged
//! LISTs where the apiserver refuses streaming lists (its WatchList feature gate off) or where
//! `--initial-list pages` asks for them; and a LIST or WATCH answered 429 is not asked again before
//! the `Retry-After` has passed. Each checks the requests in the server's audit log.

use plegd_test_support as support;
use support::bind_pods;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use support::apiserver::{Apiserver, Identity, Logged, Options, PLEGD_USER, sent_within_retry_after};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, RunningPlegd as Plegd};
use support::wait_for;

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

/// The informer's watch, renewed every 10 to 20 s (`--apiserver-timeout 1s`), meets priority and fairness
/// holding plegd to one request at a time with no queue while another request of plegd's service
/// account holds that seat (a status write the fault webhook keeps for 3 s, one after another):
/// each WATCH is answered 429 with `Retry-After: 1`, and the next comes no sooner. Once the seat is
/// free again the informer watches and sees a pod created meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answered_429_is_not_asked_again_before_retry_after() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(Options {
        throttle_plegd: true,
        ..Options::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    bind_pods(&cri, &api, "n1", 2, 1).await;
    let plegd = start_plegd(&api, &cri, "n1", dir.path(), &["--apiserver-timeout", "1s"]);
    every_pod_running(&api, 2).await;

    // The seat, held: plegd's identity writes pod-0's status, each write kept 3 s in admission.
    api.set_delay(Some(Duration::from_secs(3))).await;
    let hog = api.client_as(&Identity::Plegd("n1".into())).await;
    let holding = Arc::new(AtomicBool::new(true));
    let task = {
        let holding = holding.clone();
        tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(hog, "default");
            let mut n = 0u64;
            while holding.load(Ordering::Relaxed) {
                n += 1;
                let patch = json!({"status": {"conditions": [{"type": "plegd.test/Held", "status": "True",
                                   "message": format!("write {n}")}]}});
                let _ = pods
                    .patch_status("pod-0", &PatchParams::default(), &Patch::Strategic(&patch))
                    .await;
            }
        })
    };
    let refused_watches = || async {
        let (streaming, _, watches) = reads(&api).await;
        streaming.into_iter().chain(watches).filter(|r| r.status == 429).count()
    };
    wait_for(
        "three of plegd's watches answered 429",
        Duration::from_secs(60),
        || async { refused_watches().await >= 3 },
    )
    .await;
    let uid = api.create_bound_pod("pod-late", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid, "pod-late", 1);
    holding.store(false, Ordering::Relaxed);
    task.await.unwrap();
    api.set_delay(None).await;
    wait_for(
        "the pod created while the seat was held, written",
        Duration::from_secs(60),
        || async {
            api.pod("default", "pod-late")
                .await
                .is_some_and(|p| p["status"]["phase"] == "Running")
        },
    )
    .await;

    let (streaming, _, watches) = reads(&api).await;
    let mut attempts: Vec<Logged> = streaming.into_iter().chain(watches).collect();
    attempts.sort_by_key(|r| r.received);
    let refused: Vec<&Logged> = attempts.iter().filter(|r| r.status == 429).collect();
    assert!(refused.len() >= 3, "{:?}", describe(&attempts));
    // The server asks for 1 s (Retry-After: 1): no watch reaches it within that second.
    let early = sent_within_retry_after(&attempts);
    assert!(
        early.is_empty(),
        "watched again within the Retry-After of a 429: {early:?}"
    );
    assert!(plegd.metric("plegd_apiserver_retry_after_total") >= refused.len() as f64);
}
