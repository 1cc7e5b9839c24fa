//! API Priority and Fairness with plegd's own priority level (deploy/base/priority.yaml), on the
//! test apiserver built from Kubernetes' own code, made small (8 + 4 seats) so that a flood from a
//! few clients fills a level: a tenant's flood of `workload-low` leaves plegd's writes in plegd's
//! own level, never refused; and plegd at its worst (its level flooded as plegd) leaves the
//! kubelets' `system` and the leases' `node-high` every request served, no seat of theirs borrowed.
//! Whether the flood delays plegd's writes is measured, not asserted: `cargo bench --bench
//! apiserver_load -- --flood`.

use plegd_test_support as support;
use support::bind_pods;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::apiserver::{Apiserver, Identity, Options, PLEGD_USER};
use support::fake_cri::FakeServer;
use support::flood::{self, Flood, server_metric, wait_queued};
use support::process::{FULL_MODE_FAST_RELIST, RunningPlegd as Plegd};
use support::wait_for;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// A server of 12 seats: plegd's level gets 2 of them (12 × 30 / 275, rounded up), workload-low 5.
fn small_server() -> Options {
    Options {
        args: vec![
            "--max-requests-inflight=8".into(),
            "--max-mutating-requests-inflight=4".into(),
        ],
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_flood_of_workload_low_leaves_plegds_writes_in_its_own_level() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(small_server()).await;
    let dir = tempfile::tempdir().unwrap();
    let pods = 20;
    let uids = bind_pods(&cri, &api, "n1", pods, 1).await;
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("n1".into()));
    let mut command = support::process::plegd_run(PLEGD, "n1", &cri.path, &kubeconfig);
    command.args(FULL_MODE_FAST_RELIST);
    let plegd = Plegd::spawn(command, dir.path());
    api.wait_all_running(pods, Duration::from_secs(60)).await;

    // Twelve service accounts of a tenant, each writing a ConfigMap four at a time, every write held
    // 2 s by a slow webhook: workload-low's seats taken, the machine's CPU left to plegd.
    let (flood, tasks) = flood::tenant_held(&api, dir.path(), 12, 4, Duration::from_secs(2)).await;
    wait_queued(&api, "workload-low").await;

    for (i, uid) in uids.iter().enumerate() {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), 1 + i as i32);
    }
    wait_for(
        "every exit written during the flood",
        Duration::from_secs(120),
        || async {
            let mut all = true;
            for i in 0..pods {
                all &= api.exit_code(&format!("pod-{i}")).await == Some(1 + i as i64);
            }
            all
        },
    )
    .await;
    let text = api.server_metrics().await;
    flood.stop(tasks).await;
    assert!(flood.served.load(Ordering::Relaxed) > 0, "the flood ran");

    let writes = api
        .requests_by(PLEGD_USER)
        .await
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect::<Vec<_>>();
    assert!(
        writes.len() >= 2 * pods,
        "every start and every exit written: {}",
        writes.len()
    );
    assert!(writes.iter().all(|r| r.status == 200), "no write refused: {writes:?}");
    let dispatched = server_metric(
        &text,
        "apiserver_flowcontrol_dispatched_requests_total",
        &[("flow_schema", "plegd"), ("priority_level", "plegd")],
    );
    assert!(
        dispatched >= writes.len() as f64,
        "plegd's writes ran in plegd's own level: {dispatched} dispatched there, {} writes",
        writes.len()
    );
    let rejected = server_metric(
        &text,
        "apiserver_flowcontrol_rejected_requests_total",
        &[("priority_level", "plegd")],
    );
    assert_eq!(rejected, 0.0, "nothing of plegd's refused");
    assert!(!plegd.log().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plegd_at_its_worst_leaves_the_kubelets_and_the_leases_their_seats() {
    let api = Apiserver::start_with(small_server()).await;
    // 150 pods on another node, for lists that take a while; plegd's flood lists them all.
    for i in 0..150 {
        api.create_bound_pod(&format!("pod-{i}"), "n2", 1, "Never").await;
    }
    let plegd = api.client_as(&Identity::Plegd("n1".into())).await;
    let flood = Arc::new(Flood::default());
    let tasks = flood.start(vec![plegd], 48, |client| async move {
        Api::<Pod>::all(client).list(&ListParams::default()).await.map(drop)
    });
    wait_queued(&api, "plegd").await;

    // Meanwhile the node n1 lists its pods (the kubelets' `system`), reads its Node and renews its
    // Lease (`node-high`), as its kubelet does.
    let node = api.client_as(&Identity::Node("n1".into())).await;
    let own_pods: Api<Pod> = Api::all(node.clone());
    let nodes: Api<Node> = Api::all(node.clone());
    let leases: Api<Lease> = Api::namespaced(node, "kube-node-lease");
    let before = api.server_metrics().await;
    let mut most_seats = 0.0_f64;
    for renewal in 0..20 {
        own_pods
            .list(&ListParams::default().fields("spec.nodeName=n1"))
            .await
            .expect("the kubelet lists its pods during plegd's flood");
        nodes
            .get("n1")
            .await
            .expect("the kubelet reads its node during plegd's flood");
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "n1", "namespace": "kube-node-lease"},
                           "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "leaseTransitions": renewal}});
        leases
            .patch("n1", &PatchParams::apply("kubelet").force(), &Patch::Apply(&lease))
            .await
            .expect("the kubelet renews its lease during plegd's flood");
        let text = api.server_metrics().await;
        most_seats = most_seats.max(server_metric(
            &text,
            "apiserver_flowcontrol_current_limit_seats",
            &[("priority_level", "plegd")],
        ));
    }
    let after = api.server_metrics().await;
    flood.stop(tasks).await;
    assert!(flood.served.load(Ordering::Relaxed) > 0, "the flood ran");

    let count = |text: &str, metric: &str, level: &str| server_metric(text, metric, &[("priority_level", level)]);
    for level in ["system", "node-high"] {
        let served = count(&after, "apiserver_flowcontrol_dispatched_requests_total", level)
            - count(&before, "apiserver_flowcontrol_dispatched_requests_total", level);
        assert!(served >= 20.0, "the node's requests ran in {level}: {served}");
        assert_eq!(
            count(&after, "apiserver_flowcontrol_rejected_requests_total", level),
            0.0,
            "{level}"
        );
    }
    let nominal = count(&after, "apiserver_flowcontrol_nominal_limit_seats", "plegd");
    assert!(nominal >= 1.0, "plegd's level has seats of its own: {nominal}");
    assert_eq!(
        count(&after, "apiserver_flowcontrol_upper_limit_seats", "plegd"),
        nominal,
        "the most plegd's level may ever hold is its own seats"
    );
    assert!(
        most_seats <= nominal,
        "plegd's level never held more seats than its own ({most_seats} > {nominal}): it borrows none"
    );
}
