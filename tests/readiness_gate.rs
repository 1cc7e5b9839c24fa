//! plegd's condition as a readiness gate on a real cluster (tests/cluster/cluster.sh: the kubelet,
//! kube-apiserver 1.37 with its MutatingAdmissionPolicy plugin, the EndpointSlice controller),
//! installed as deploy/conditions with deploy/components/readiness-gate, or with the chart's
//! `readinessGate.enabled`:
//! - opting in: pods of a labelled namespace, or labelled themselves, get the gate exactly once;
//!   others do not, plegd's own pods never;
//! - no gated pod waits on a condition nobody sets: (a) no plegd on the node, (b) plegd's
//!   DaemonSet rolled, (c) plegd uninstalled (kustomize and Helm) with a container restarting
//!   afterwards, (d) plegd restarted while its node's pods change. Each prints the time a gated
//!   pod took to be Ready again after its container was killed (the bounds in
//!   docs/readiness-gate.md);
//! - a gated endpoint leaves its Service's EndpointSlice before an ungated one killed at the same
//!   moment (the figures with real traffic: `cargo bench --bench traffic`).
//!
//! Runs when `PLEGD_CLUSTER_E2E=1` (tests/run.sh), one test at a time.

use plegd_test_support as support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use support::cluster::{CONDITION, Cluster, IMAGE, NAMESPACE, cluster, condition};

const WAIT: Duration = Duration::from_secs(120);
/// The label that opts a namespace or a pod in (or, `disabled`, a pod out).
const OPT_IN: &str = "plegd.io/readiness-gate";

/// [`support::eventually`] within [`WAIT`].
async fn eventually<T: std::fmt::Debug, F, Fut>(what: &str, get: F, cond: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    support::eventually(what, WAIT, get, cond).await
}

/// A pod on `node` whose container sleeps as `sleep MARK` (a number no other pod uses, so that the
/// test kills exactly its process from the node), restarted by the kubelet, with `labels` and
/// `gates` of its own.
fn sleeper(name: &str, node: &str, mark: u32, labels: Value, gates: &[&str]) -> Pod {
    let gates: Vec<Value> = gates.iter().map(|g| json!({"conditionType": g})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "readinessGates": gates,
            "containers": [{
                "name": "app",
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sleep", mark.to_string()],
            }],
        },
    }))
    .unwrap()
}

/// SIGKILL the container running `sleep MARK` (from the node, as a crash would); the moment.
fn kill(mark: u32) -> Instant {
    let out = std::process::Command::new("pkill")
        .args(["-KILL", "-x", "-f", &format!("sleep {mark}")])
        .output()
        .expect("run pkill");
    assert!(out.status.success(), "no process `sleep {mark}` to kill: {out:?}");
    Instant::now()
}

/// The condition types of a pod's readiness gates.
fn gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|g| g.iter().map(|g| g.condition_type.clone()).collect())
        .unwrap_or_default()
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

fn is(pod: &Pod, kind: &str, status: &str) -> bool {
    condition(pod, kind).is_some_and(|c| c.status == status)
}

fn reason(pod: &Pod) -> String {
    condition(pod, CONDITION)
        .and_then(|c| c.reason.clone())
        .unwrap_or_default()
}

async fn get(pods: &Api<Pod>, name: &str) -> Pod {
    pods.get(name).await.unwrap_or_else(|e| panic!("get pod {name}: {e}"))
}

/// Wait until pod `name` is Ready with plegd's condition True.
async fn ready(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(
        &format!("{name} Ready with {CONDITION}=True"),
        || get(pods, name),
        |p| is(p, "Ready", "True") && is(p, CONDITION, "True"),
    )
    .await
}

/// Kill `name`'s container and wait for it to run again and its pod to be Ready: the time from
/// the kill to Ready, printed with `case`.
async fn crash_and_recover(pods: &Api<Pod>, name: &str, mark: u32, case: &str) -> Duration {
    let before = restart_count(&get(pods, name).await);
    let killed = kill(mark);
    let pod = eventually(
        &format!("{name} restarted and Ready ({case})"),
        || get(pods, name),
        |p| restart_count(p) > before && is(p, "Ready", "True") && is(p, CONDITION, "True"),
    )
    .await;
    let took = killed.elapsed();
    println!(
        "readiness gate, {case}: {name} Ready again {:.2} s after its container was killed (restart {}, condition {})",
        took.as_secs_f64(),
        restart_count(&pod),
        reason(&pod)
    );
    took
}

/// A namespace opted in by its label.
async fn opted_in_namespace(cluster: &Cluster, name: &str) -> Api<Pod> {
    let pods = cluster.namespace(name).await;
    cluster
        .kubectl(&["label", "namespace", name, &format!("{OPT_IN}=enabled")])
        .await;
    pods
}

/// plegd's pod on the node gone and none in its place (its DaemonSet's pods kept off every node),
/// or back.
async fn plegd_away(cluster: &Cluster, away: bool) {
    let patch = if away {
        r#"{"spec":{"template":{"spec":{"nodeSelector":{"plegd.test/nowhere":"true"}}}}}"#
    } else {
        r#"{"spec":{"template":{"spec":{"nodeSelector":null}}}}"#
    };
    cluster
        .kubectl(&[
            "-n",
            NAMESPACE,
            "patch",
            "daemonset",
            "plegd",
            "--type=merge",
            "-p",
            patch,
        ])
        .await;
    eventually(
        if away { "plegd's pods gone" } else { "plegd's pod Ready" },
        || cluster.plegd_pods(),
        |p| {
            if away {
                p.is_empty()
            } else {
                p.len() == 1 && p[0].metadata.deletion_timestamp.is_none() && is(&p[0], "Ready", "True")
            }
        },
    )
    .await;
}

/// plegd's pod deleted (the DaemonSet makes another): a restart.
async fn restart_plegd(cluster: &Cluster) {
    cluster
        .kubectl(&[
            "-n",
            NAMESPACE,
            "delete",
            "pod",
            "-l",
            "app.kubernetes.io/name=plegd",
            "--wait=false",
        ])
        .await;
}

/// plegd's one pod, once a new one is Ready.
async fn plegd_ready(cluster: &Cluster) -> Vec<Pod> {
    eventually(
        "plegd's new pod Ready",
        || cluster.plegd_pods(),
        |p| p.len() == 1 && p[0].metadata.deletion_timestamp.is_none() && is(&p[0], "Ready", "True"),
    )
    .await
}

/// The gate is added at CREATE to opted-in pods exactly once; never to others or plegd's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opted_in_pods_get_the_gate_exactly_once() {
    let Some(cluster) = cluster().await else { return };
    cluster.install("conditions", &["readiness-gate"]).await;
    let node = cluster.node().await;
    let gated = opted_in_namespace(&cluster, "gate-opted-in").await;
    let other = cluster.namespace("gate-not-opted-in").await;
    let pp = PostParams::default();

    // A Deployment's pods in the opted-in namespace.
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "gate-opted-in"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]},
            },
        },
    });
    let file = std::env::temp_dir().join("plegd-gate-deployment.json");
    std::fs::write(&file, deployment.to_string()).unwrap();
    cluster.kubectl(&["apply", "-f", &file.display().to_string()]).await;
    let web = eventually(
        "the Deployment's 2 pods Ready",
        || async { gated.list(&Default::default()).await.unwrap().items },
        |pods| pods.len() == 2 && pods.iter().all(|p| is(p, "Ready", "True")),
    )
    .await;
    for pod in &web {
        assert_eq!(gates(pod), [CONDITION], "{:?}", pod.metadata.name);
        // plegd, running, keeps the condition: its own reason, not the kubelet's.
        let pod = ready(&gated, pod.metadata.name.as_deref().unwrap()).await;
        assert_ne!(reason(&pod), "KubeletReported", "{:?}", pod.status);
    }

    // A pod that names the gate already keeps it once; one with another gate gets plegd's beside it;
    // one labelled disabled gets none.
    gated
        .create(&pp, &sleeper("own-gate", &node, 910_001, json!({}), &[CONDITION]))
        .await
        .unwrap();
    gated
        .create(
            &pp,
            &sleeper("other-gate", &node, 910_002, json!({}), &["example.com/Other"]),
        )
        .await
        .unwrap();
    gated
        .create(
            &pp,
            &sleeper("opted-out", &node, 910_003, json!({OPT_IN: "disabled"}), &[]),
        )
        .await
        .unwrap();
    assert_eq!(gates(&get(&gated, "own-gate").await), [CONDITION]);
    assert_eq!(
        gates(&get(&gated, "other-gate").await),
        ["example.com/Other", CONDITION]
    );
    assert!(gates(&get(&gated, "opted-out").await).is_empty());

    // Another namespace: only the pod labelled enabled.
    other
        .create(&pp, &sleeper("plain", &node, 910_004, json!({}), &[]))
        .await
        .unwrap();
    other
        .create(
            &pp,
            &sleeper("labelled", &node, 910_005, json!({OPT_IN: "enabled"}), &[]),
        )
        .await
        .unwrap();
    assert!(gates(&get(&other, "plain").await).is_empty());
    assert_eq!(gates(&get(&other, "labelled").await), [CONDITION]);

    // plegd's own pods never, even with plegd's namespace labelled.
    cluster
        .kubectl(&[
            "label",
            "namespace",
            NAMESPACE,
            &format!("{OPT_IN}=enabled"),
            "--overwrite",
        ])
        .await;
    cluster.on_exit(&["label", "namespace", NAMESPACE, &format!("{OPT_IN}-")]);
    restart_plegd(&cluster).await;
    let plegd = plegd_ready(&cluster).await;
    assert!(gates(&plegd[0]).is_empty(), "{:?}", plegd[0].spec);

    // A gated pod's crash: plegd's condition False at once (the endpoint's way out), True again
    // with the restart.
    ready(&gated, "own-gate").await;
    let killed = kill(910_001);
    eventually(
        "own-gate's condition False after the kill",
        || get(&gated, "own-gate"),
        |p| is(p, CONDITION, "False"),
    )
    .await;
    println!(
        "readiness gate: {CONDITION}=False seen {:.0} ms after the kill",
        killed.elapsed().as_secs_f64() * 1000.0
    );
    ready(&gated, "own-gate").await;
}

/// (a) plegd not on the node, (d) plegd restarted while pods change, (b) its DaemonSet rolled: no
/// gated pod waits on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_gated_pod_waits_while_plegd_is_away_restarts_or_rolls() {
    let Some(cluster) = cluster().await else { return };
    cluster.install("conditions", &["readiness-gate"]).await;
    let node = cluster.node().await;
    let pods = opted_in_namespace(&cluster, "gate-away").await;
    let pp = PostParams::default();
    pods.create(&pp, &sleeper("before", &node, 920_001, json!({}), &[]))
        .await
        .unwrap();
    ready(&pods, "before").await;

    // Its container dead as plegd stops: plegd's False, handed back to the kubelet.
    let before = restart_count(&get(&pods, "before").await);
    kill(920_001);
    eventually(
        "before's condition False",
        || get(&pods, "before"),
        |p| is(p, CONDITION, "False"),
    )
    .await;
    plegd_away(&cluster, true).await;
    // (a) A pod made while no plegd runs on its node, and the one plegd left False: both Ready
    // (the kubelet's restart of `before` included), each crash and restart followed.
    pods.create(&pp, &sleeper("while-away", &node, 920_002, json!({}), &[]))
        .await
        .unwrap();
    let pod = eventually(
        "before restarted and Ready with plegd away",
        || get(&pods, "before"),
        |p| restart_count(p) > before && is(p, "Ready", "True"),
    )
    .await;
    assert_eq!(reason(&pod), "KubeletReported", "{:?}", pod.status);
    let pod = eventually(
        "while-away Ready with no plegd",
        || get(&pods, "while-away"),
        |p| is(p, "Ready", "True"),
    )
    .await;
    assert_eq!(reason(&pod), "KubeletReported", "{:?}", pod.status);
    crash_and_recover(&pods, "while-away", 920_002, "(a) no plegd on the node").await;

    // (d) plegd back, and restarted while its node's pods change.
    plegd_away(&cluster, false).await;
    for name in ["before", "while-away"] {
        let pod = eventually(
            &format!("plegd takes {name} back"),
            || get(&pods, name),
            |p| is(p, CONDITION, "True") && reason(p) != "KubeletReported",
        )
        .await;
        assert!(is(&pod, "Ready", "True"));
    }
    restart_plegd(&cluster).await;
    pods.create(&pp, &sleeper("during-restart", &node, 920_003, json!({}), &[]))
        .await
        .unwrap();
    crash_and_recover(&pods, "before", 920_001, "(d) plegd restarting").await;
    ready(&pods, "during-restart").await;
    plegd_ready(&cluster).await;

    // (b) A rolling update, a crash in the middle of it.
    cluster
        .kubectl(&["-n", NAMESPACE, "rollout", "restart", "daemonset/plegd"])
        .await;
    crash_and_recover(&pods, "during-restart", 920_003, "(b) plegd's DaemonSet rolling").await;
    cluster
        .kubectl(&[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "daemonset/plegd",
            "--timeout=120s",
        ])
        .await;
    for name in ["before", "while-away", "during-restart"] {
        ready(&pods, name).await;
    }
}

/// (c) Uninstalled with kustomize's objects deleted while a gated pod's container is dead: the
/// kubelet policy stays (its finalizer) and the pod is Ready after its restart; `plegd
/// release-gates` then releases every gate and lets the policy go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_strands_no_gated_pod() {
    let Some(cluster) = cluster().await else { return };
    cluster.install("conditions", &["readiness-gate"]).await;
    let node = cluster.node().await;
    let pods = opted_in_namespace(&cluster, "gate-uninstall").await;
    let pp = PostParams::default();
    for (name, mark) in [("dying", 930_001), ("running", 930_002)] {
        pods.create(&pp, &sleeper(name, &node, mark, json!({}), &[]))
            .await
            .unwrap();
        ready(&pods, name).await;
    }
    let before = restart_count(&get(&pods, "dying").await);
    let killed = kill(930_001);
    eventually(
        "dying's condition False",
        || get(&pods, "dying"),
        |p| is(p, CONDITION, "False"),
    )
    .await;

    // Every object of the install deleted at once, as `kubectl delete -k` does.
    let install = "/var/lib/plegd-test/cluster/run/plegd.json";
    cluster
        .kubectl(&["delete", "-f", install, "--ignore-not-found", "--wait=false"])
        .await;
    eventually("plegd's pods gone", || cluster.plegd_pods(), |p| p.is_empty()).await;
    let held = cluster
        .kubectl(&[
            "get",
            "mutatingadmissionpolicy,mutatingadmissionpolicybinding",
            "-o",
            "name",
        ])
        .await;
    assert!(
        held.contains("mutatingadmissionpolicy.admissionregistration.k8s.io/plegd-readiness-gate-kubelet"),
        "the kubelet policy waits for the release: {held}"
    );
    let pod = eventually(
        "dying restarted and Ready after plegd's uninstall",
        || get(&pods, "dying"),
        |p| restart_count(p) > before && is(p, "Ready", "True"),
    )
    .await;
    println!(
        "readiness gate, (c) uninstalled: dying Ready again {:.2} s after its container was killed (condition {})",
        killed.elapsed().as_secs_f64(),
        reason(&pod)
    );

    // The release: every gated pod True (GateReleased), the policies gone, nothing left waiting.
    let binary = std::env::var("PLEGD_BINARY").unwrap_or_else(|_| support::manifests::path("target/release/plegd"));
    let out = std::process::Command::new(&binary)
        .args(["release-gates", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .output()
        .expect("run plegd release-gates");
    assert!(out.status.success(), "plegd release-gates: {out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("readiness gate released on") && said.contains("plegd-readiness-gate-kubelet may be deleted"),
        "{said}"
    );
    for name in ["dying", "running"] {
        let pod = get(&pods, name).await;
        assert_eq!(reason(&pod), "GateReleased", "{name}: {:?}", pod.status);
        assert!(is(&pod, "Ready", "True") || name == "dying", "{name}");
    }
    eventually(
        "the kubelet policy deleted",
        || cluster.kubectl(&["get", "mutatingadmissionpolicy", "-o", "name"]),
        |names: &String| !names.contains("plegd-readiness-gate"),
    )
    .await;
    crash_and_recover(&pods, "running", 930_002, "(c) released, no plegd").await;
    let _ = std::fs::remove_file(install);
    let _ = pods.delete("dying", &DeleteParams::default()).await;
}

/// (c) with Helm: `helm uninstall` releases every gate first (its pre-delete hook) and leaves
/// nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_uninstall_releases_the_gates_first() {
    let Some(cluster) = cluster().await else { return };
    cluster.remove_plegd().await;
    cluster.on_exit(&[
        "delete",
        "namespace",
        "plegd-gate-helm",
        "--ignore-not-found",
        "--wait=false",
    ]);
    cluster
        .helm(&[
            "install",
            "plegd",
            &support::manifests::path("deploy/helm/plegd"),
            "--namespace",
            "plegd-gate-helm",
            "--create-namespace",
            "--set",
            "readinessGate.enabled=true",
            "--wait",
            "--timeout",
            "180s",
        ])
        .await;
    let node = eventually(
        "the chart's plegd Ready",
        || async {
            Api::<Pod>::namespaced(cluster.client.clone(), "plegd-gate-helm")
                .list(&Default::default())
                .await
                .unwrap()
                .items
        },
        |p: &Vec<Pod>| p.len() == 1 && is(&p[0], "Ready", "True"),
    )
    .await[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    let pods = opted_in_namespace(&cluster, "gate-helm").await;
    pods.create(
        &PostParams::default(),
        &sleeper("dying", &node, 940_001, json!({}), &[]),
    )
    .await
    .unwrap();
    ready(&pods, "dying").await;
    kill(940_001);
    eventually(
        "dying's condition False",
        || get(&pods, "dying"),
        |p| is(p, CONDITION, "False"),
    )
    .await;
    cluster
        .helm(&[
            "uninstall",
            "plegd",
            "--namespace",
            "plegd-gate-helm",
            "--wait",
            "--timeout",
            "180s",
        ])
        .await;
    let pod = get(&pods, "dying").await;
    assert_eq!(reason(&pod), "GateReleased", "{:?}", pod.status);
    let left = cluster
        .kubectl(&[
            "get",
            "mutatingadmissionpolicy,mutatingadmissionpolicybinding,validatingadmissionpolicy,clusterrole,clusterrolebinding",
            "-o",
            "name",
        ])
        .await;
    // Nothing of the gate's or of its release's (other installs' objects are other tests').
    let left: Vec<&str> = left
        .lines()
        .filter(|l| l.contains("plegd-readiness-gate") || l.contains("plegd-release-gates"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    eventually(
        "dying Ready after the uninstall",
        || get(&pods, "dying"),
        |p| is(p, "Ready", "True"),
    )
    .await;
}

/// Follow the EndpointSlices of `namespace`: (pod name, when seen) of each endpoint seen not ready;
/// returns once the watch has its initial list.
async fn watch_not_ready(
    client: &kube::Client,
    namespace: &str,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    tokio::task::JoinHandle<()>,
) {
    use futures_util::TryStreamExt;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::runtime::watcher;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let task = tokio::spawn(async move {
        let stream = watcher(slices, watcher::Config::default());
        futures_util::pin_mut!(stream);
        let mut listed_tx = Some(listed_tx);
        while let Ok(Some(event)) = stream.try_next().await {
            if let watcher::Event::InitDone = event
                && let Some(listed) = listed_tx.take()
            {
                let _ = listed.send(());
            }
            if let watcher::Event::Apply(slice) | watcher::Event::InitApply(slice) = event {
                let now = Instant::now();
                for endpoint in slice.endpoints.into_iter().flatten() {
                    let ready = endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
                    let name = endpoint.target_ref.and_then(|r| r.name).unwrap_or_default();
                    if !ready && tx.send((name, now)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::time::timeout(WAIT, listed)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for the EndpointSlices of {namespace} listed"))
        .expect("the EndpointSlice watch ended");
    (rx, task)
}

/// How long after `since` pod `name`'s endpoint was first seen not ready on `seen`.
async fn not_ready_after(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
    name: &str,
    since: Instant,
) -> Duration {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, seen.recv()).await {
            Ok(Some((seen_name, at))) if at >= since && seen_name == name => return at - since,
            Ok(Some(_)) => {}
            _ => panic!("timed out waiting for {name}'s endpoint not ready"),
        }
    }
}

/// A Service's gated endpoint leaves its EndpointSlice before an ungated one: the two backends
/// killed at the same moment, a pair at a time (fresh pods each round: no restart backoff). The
/// kubelet alone notices at its next relist, which may by chance come first: the gated one must
/// lead in 3 rounds, of 7 at the most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_endpoint_leaves_before_an_ungated_one() {
    let Some(cluster) = cluster().await else { return };
    cluster.install("conditions", &["readiness-gate"]).await;
    let node = cluster.node().await;
    let gated = opted_in_namespace(&cluster, "gate-race-gated").await;
    let plain = cluster.namespace("gate-race-plain").await;
    for namespace in ["gate-race-gated", "gate-race-plain"] {
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "backend", "namespace": namespace},
            "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]},
        });
        let file = std::env::temp_dir().join(format!("plegd-{namespace}-service.json"));
        std::fs::write(&file, service.to_string()).unwrap();
        cluster.kubectl(&["apply", "-f", &file.display().to_string()]).await;
    }
    let rounds = 7;
    let pp = PostParams::default();
    for round in 0..rounds {
        for (pods, base) in [(&gated, 950_000), (&plain, 960_000)] {
            pods.create(
                &pp,
                &sleeper(
                    &format!("backend-{round}"),
                    &node,
                    base + round,
                    json!({"app": "backend"}),
                    &[],
                ),
            )
            .await
            .unwrap();
        }
    }
    for round in 0..rounds {
        let name = format!("backend-{round}");
        for pods in [&gated, &plain] {
            eventually(
                &format!("{name} Ready"),
                || get(pods, &name),
                |p| is(p, "Ready", "True"),
            )
            .await;
        }
    }
    let mut leads = 0;
    for round in 0..rounds {
        let name = format!("backend-{round}");
        // Both pods have the same name in their own namespaces: each namespace watched apart,
        // from before the kill.
        let (mut gated_seen, gated_task) = watch_not_ready(&cluster.client, "gate-race-gated").await;
        let (mut plain_seen, plain_task) = watch_not_ready(&cluster.client, "gate-race-plain").await;
        let at = Instant::now();
        kill(950_000 + round);
        kill(960_000 + round);
        let (g, p) = tokio::join!(
            not_ready_after(&mut gated_seen, &name, at),
            not_ready_after(&mut plain_seen, &name, at),
        );
        gated_task.abort();
        plain_task.abort();
        println!(
            "round {round}: gated endpoint not ready {:.0} ms after the kill, ungated {:.0} ms",
            g.as_secs_f64() * 1000.0,
            p.as_secs_f64() * 1000.0
        );
        if g < p {
            leads += 1;
        }
        if leads == 3 {
            return;
        }
    }
    panic!("the gated endpoint left first in {leads} rounds of {rounds}");
}
