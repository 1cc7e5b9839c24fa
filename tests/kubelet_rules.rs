//! Whose status plegd generates: the kubelet of its node, as its Node reports it
//! (`status.nodeInfo.kubeletVersion`), or `--kubelet-version`. `plegd run` in full mode against the
//! fake CRI server and kube-apiserver 1.37 built from Kubernetes' own code, with a pod the runtime
//! has no sandbox for: its PodReadyToStartContainers is False, with the reason PodSandboxNotReady
//! as a 1.37 kubelet writes it, without one as 1.35 and 1.36 write it. The rules in use are read
//! from `plegd_status_kubelet_rules` and the condition from the apiserver.

use plegd_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use plegd::metrics::Metrics;
use plegd::status::StatusMode;
use plegd::triggers::TriggerMode;
use support::apiserver::{Apiserver, Identity, PLEGD_USER, condition};
use support::fake_cri::FakeServer;
use support::wait_for;

const WAIT: Duration = Duration::from_secs(60);

/// A Node `name` whose kubelet reports `version`.
async fn node_with_kubelet(api: &Apiserver, name: &str, version: &str) {
    let nodes: Api<Node> = Api::all(api.client());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create the Node");
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeInfo": {"kubeletVersion": version}}})),
        )
        .await
        .expect("the Node's kubelet version");
}

/// The settings of plegd in full mode for `node` (its identity's token asked for now).
fn options(
    cri: &FakeServer,
    api: &Apiserver,
    dir: &std::path::Path,
    node: &str,
    kubelet_version: Option<&str>,
) -> plegd::daemon::DaemonConfig {
    let kubeconfig = api.kubeconfig_as(dir, &Identity::Plegd(node.into()));
    let mut options = support::daemon::options(&cri.path, kubeconfig, node, StatusMode::Full);
    options.triggers = TriggerMode::None;
    options.kubelet_version = kubelet_version.map(str::to_owned);
    options
}

fn spawn(options: plegd::daemon::DaemonConfig) -> (support::daemon::InProcess, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (support::daemon::spawn(options, metrics.clone()), metrics)
}

/// plegd in full mode for `node`.
fn plegd(
    cri: &FakeServer,
    api: &Apiserver,
    dir: &std::path::Path,
    node: &str,
    kubelet_version: Option<&str>,
) -> (support::daemon::InProcess, Arc<Metrics>) {
    spawn(options(cri, api, dir, node, kubelet_version))
}

/// The value of the `plegd_status_kubelet_rules` series at 1, as (minor, fit).
fn rules(metrics: &Metrics) -> Option<(String, String)> {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("plegd_status_kubelet_rules{") && l.ends_with(" 1"))
        .find_map(|l| {
            let labels = l.split_once('{')?.1.split_once('}')?.0;
            let value = |key: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
            };
            Some((value("minor")?, value("fit")?))
        })
}

/// The pod's PodReadyToStartContainers condition, once plegd wrote one.
async fn ready_to_start(api: &Apiserver, name: &str) -> Value {
    let condition_of = |pod: &Value| {
        condition(&pod["status"], "PodReadyToStartContainers")
            .filter(|_| pod["status"]["phase"] == "Pending")
            .cloned()
    };
    wait_for("plegd's PodReadyToStartContainers", WAIT, || async {
        condition_of(&api.pod("default", name).await.expect("the pod")).is_some()
    })
    .await;
    condition_of(&api.pod("default", name).await.expect("the pod")).expect("written")
}

/// plegd's GETs of a Node so far.
async fn node_reads(api: &Apiserver) -> usize {
    api.requests_by(PLEGD_USER)
        .await
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/api/v1/nodes/"))
        .count()
}

async fn wait_rules(metrics: &Metrics, want: (&str, &str)) {
    wait_for("plegd's kubelet rules", WAIT, || async {
        rules(metrics).is_some_and(|(minor, fit)| (minor.as_str(), fit.as_str()) == want)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_are_those_of_the_nodes_kubelet() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    for (node, version, minor, reason) in [
        ("node-135", "v1.35.4", "1.35", None),
        ("node-136", "v1.36.3", "1.36", None),
        ("node-137", "v1.37.2", "1.37", Some("PodSandboxNotReady")),
    ] {
        node_with_kubelet(&api, node, version).await;
        let pod = format!("pod-{node}");
        api.create_bound_pod(&pod, node, 1, "Always").await;
        let (daemon, metrics) = plegd(&cri, &api, dir.path(), node, None);
        wait_rules(&metrics, (minor, "exact")).await;
        let c = ready_to_start(&api, &pod).await;
        assert_eq!(c["status"], "False", "{node}: {c}");
        assert_eq!(c["reason"].as_str(), reason, "{node}: {c}");
        daemon.stop().await;
    }
    // The Node was read, once per start.
    let gets = node_reads(&api).await;
    assert_eq!(gets, 3);
}

/// A kubelet of a minor plegd does not know gets the closest one's rules; a node without a Node
/// (no kubelet), 1.37's; `--kubelet-version` wins over the Node and reads no Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_minors_no_node_and_the_flag() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    node_with_kubelet(&api, "node-old", "v1.33.7").await;
    let (daemon, metrics) = plegd(&cri, &api, dir.path(), "node-old", None);
    wait_rules(&metrics, ("1.35", "older")).await;
    daemon.stop().await;

    let (daemon, metrics) = plegd(&cri, &api, dir.path(), "node-none", None);
    wait_rules(&metrics, ("1.37", "unknown")).await;
    daemon.stop().await;

    api.clear_log().await;
    node_with_kubelet(&api, "node-flag", "v1.37.2").await;
    api.create_bound_pod("pod-flag", "node-flag", 1, "Always").await;
    let (daemon, metrics) = plegd(&cri, &api, dir.path(), "node-flag", Some("1.35"));
    wait_rules(&metrics, ("1.35", "exact")).await;
    let c = ready_to_start(&api, "pod-flag").await;
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), None),
        "{c}"
    );
    daemon.stop().await;
    let gets = node_reads(&api).await;
    assert_eq!(gets, 0, "--kubelet-version reads no Node");
}

/// An apiserver that is down when plegd starts is waited for: plegd writes nothing until it knows
/// the kubelet's minor, then writes as that kubelet does (never 1.37's rules by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_down_at_start_is_waited_for() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    node_with_kubelet(&api, "node-later", "v1.35.4").await;
    api.create_bound_pod("pod-later", "node-later", 1, "Always").await;
    let settings = options(&cri, &api, dir.path(), "node-later", None);
    api.set_down(true).await;
    let (daemon, metrics) = spawn(settings);
    wait_for("plegd's requests failing while the apiserver is down", WAIT, || async {
        metrics
            .encode()
            .lines()
            .any(|l| l.starts_with("plegd_apiserver_requests_total{verb=\"GET\",code=\"error\"}"))
    })
    .await;
    api.set_down(false).await;
    wait_rules(&metrics, ("1.35", "exact")).await;
    let series: Vec<String> = metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("plegd_status_kubelet_rules{"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        series.len(),
        1,
        "no rules chosen while the apiserver was away: {series:?}"
    );
    let c = ready_to_start(&api, "pod-later").await;
    assert_eq!(c["reason"].as_str(), None, "{c}");
    daemon.stop().await;
}
