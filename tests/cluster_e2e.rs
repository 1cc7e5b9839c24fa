//! plegd as the kubelet runs it: deploy/'s installs applied with kubectl to a real Kubernetes
//! 1.37 cluster (tests/cluster/cluster.sh: kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubelet and etcd built from Kubernetes' own code; or a kind cluster through
//! deploy/kind/e2e.sh), its image run by the kubelet, its pods and tokens and admission policies the
//! cluster's own. Runs when `PLEGD_CLUSTER_E2E=1` (tests/run.sh); one test at a time.

use plegd_test_support as support;

use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use support::cluster::{CONDITION, Cluster, NAMESPACE, cluster, condition, pod, pod_running};
use support::eventually;
use support::process::metric;

/// Every optional component of deploy/ (the admission policies and the network policy are in the
/// overlays already).
const EVERY_COMPONENT: [&str; 4] = ["events", "pod-monitor", "grafana-dashboard", "alerts"];
const WAIT: Duration = Duration::from_secs(90);

async fn get(pods: &Api<Pod>, name: &str) -> Pod {
    pods.get(name).await.unwrap_or_else(|e| panic!("get pod {name}: {e}"))
}

/// Wait for plegd's condition on `name` to have `status` (and a message containing `message`).
async fn wait_condition(pods: &Api<Pod>, name: &str, status: &str, message: &str) -> Pod {
    eventually(
        &format!("{CONDITION}={status} on {name}"),
        WAIT,
        || get(pods, name),
        |p| {
            condition(p, CONDITION)
                .is_some_and(|c| c.status == status && c.message.as_deref().unwrap_or_default().contains(message))
        },
    )
    .await
}

/// Pod `name` once its phase is `phase` (whoever wrote it).
async fn wait_phase(pods: &Api<Pod>, name: &str, phase: &str) -> Pod {
    eventually(
        &format!("{name} {phase}"),
        WAIT,
        || get(pods, name),
        |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase),
    )
    .await
}

/// plegd's pod on `node`, once Running and Ready.
async fn ready_plegd(cluster: &Cluster, node: &str) -> Pod {
    eventually(
        "plegd's pod Ready",
        WAIT,
        || async {
            cluster.plegd_pods().await.into_iter().find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && p.metadata.deletion_timestamp.is_none()
            })
        },
        |p| {
            p.as_ref()
                .is_some_and(|p| condition(p, "Ready").is_some_and(|c| c.status == "True"))
        },
    )
    .await
    .unwrap()
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// The image of the scrapers: the host's curl. (The test image's busybox wget cannot speak TLS
/// to plegd: its own TLS sends no signature_algorithms, so a server must sign with SHA-1, which
/// rustls refuses, as it should.)
const CURL_IMAGE: &str = "plegd.test/curl:1";

/// GET /metrics on plegd's pod from a pod in the `monitoring` namespace on plegd's node (where
/// Prometheus runs, as components/network-policy lets in), over `scheme` (TLS without checking
/// the certificate plegd made, as the pod monitor's scrape class does), with `token` if any:
/// (status, output); status 0 when no HTTP answer came. Through a pod, as Prometheus scrapes: a
/// kind cluster's pod network is not the host's.
async fn scrape(cluster: &Cluster, plegd: &Pod, scheme: &str, token: Option<String>) -> (u16, String) {
    scrape_trusting(cluster, plegd, scheme, token, None).await
}

/// [`scrape`], verifying plegd's certificate when `trust` says how: (the ConfigMap of the
/// `monitoring` namespace whose `ca.crt` signed it, the name it is for).
async fn scrape_trusting(
    cluster: &Cluster,
    plegd: &Pod,
    scheme: &str,
    token: Option<String>,
    trust: Option<(&str, &str)>,
) -> (u16, String) {
    static SCRAPES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static IMPORTED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    IMPORTED
        .get_or_init(|| async {
            let curl = std::process::Command::new("sh")
                .args(["-c", "command -v curl"])
                .output()
                .expect("sh");
            let curl = String::from_utf8_lossy(&curl.stdout).trim().to_owned();
            assert!(
                !curl.is_empty(),
                "curl is missing on the host (tests/containerd/containerd.sh installs it)"
            );
            cluster.import_binary(&curl, CURL_IMAGE).await;
        })
        .await;
    let ip = plegd
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("plegd's pod has an IP");
    let node = plegd
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("plegd's pod is bound");
    let monitoring = cluster_pods(cluster, "monitoring");
    let name = format!("scrape-{}", SCRAPES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    // The kubelet puts the token in for $(TOKEN): no shell is needed.
    let mut command = vec!["/usr/local/bin/curl", "-sS", "-i", "--max-time", "20"];
    if token.is_some() {
        command.extend(["-H", "Authorization: Bearer $(TOKEN)"]);
    }
    let (url, connect_to);
    match trust {
        None => {
            url = format!("{scheme}://{ip}:9808/metrics");
            command.push("-k");
        }
        Some((_, server_name)) => {
            url = format!("{scheme}://{server_name}:9808/metrics");
            connect_to = format!("{server_name}:9808:{ip}:9808");
            command.extend(["--cacert", "/ca/ca.crt", "--connect-to", &connect_to]);
        }
    }
    command.push(&url);
    let token = token.unwrap_or_default();
    let mut scraper = pod_running(&name, &node, CURL_IMAGE, &command, &[("TOKEN", &token)]);
    if let Some((config_map, _)) = trust {
        let spec = scraper.spec.as_mut().unwrap();
        spec.volumes = Some(vec![
            serde_json::from_value(json!({"name": "ca", "configMap": {"name": config_map}})).unwrap(),
        ]);
        spec.containers[0].volume_mounts = Some(vec![
            serde_json::from_value(json!({"name": "ca", "mountPath": "/ca"})).unwrap(),
        ]);
    }
    let _ = monitoring.delete(&name, &DeleteParams::default().grace_period(0)).await;
    monitoring
        .create(&PostParams::default(), &scraper)
        .await
        .expect("the scraper pod");
    let done = eventually(
        "the scraper done",
        WAIT,
        || get(&monitoring, &name),
        |p| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        },
    )
    .await;
    let out = monitoring
        .logs(&name, &Default::default())
        .await
        .expect("the scraper's log");
    let _ = monitoring.delete(&name, &DeleteParams::default().grace_period(0)).await;
    let code = out
        .lines()
        .find_map(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        code != 0 || out.contains("curl: ("),
        "curl ran and said why it got no answer: {out}\n{done:?}"
    );
    (code, out)
}

/// The token the pod monitor's scrape class gives Prometheus (one of its service account for
/// plegd's audience), and a 200 scrape over TLS with it.
async fn scraped(cluster: &Cluster, plegd: &Pod) -> (String, String) {
    let token = metrics_reader_token(cluster, Some("plegd")).await;
    let (_, body) = eventually(
        "a scrape with the metrics reader's token",
        WAIT,
        || scrape(cluster, plegd, "https", Some(token.clone())),
        |(code, _)| *code == 200,
    )
    .await;
    (token, body)
}

/// A token of Prometheus' service account (the one deploy/components/pod-monitor lets read
/// /metrics, made here with its namespace), for `audience` (None: the apiserver's), as the kubelet
/// projects it into Prometheus' pod (prometheus-scrape-class.yaml).
async fn metrics_reader_token(cluster: &Cluster, audience: Option<&str>) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let (namespace, name) = support::apiserver::METRICS_READER;
    cluster.namespace(namespace).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), namespace);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("Prometheus' service account: {e}"),
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_owned()]),
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    eventually(
        "a token of Prometheus' service account",
        WAIT,
        || async {
            accounts
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .ok()
        },
        Option::is_some,
    )
    .await
    .and_then(|t| t.status)
    .and_then(|s| s.token)
    .expect("a token")
}

/// Every pod bound to `node`.
async fn pods_on(cluster: &Cluster, node: &str) -> Vec<Pod> {
    Api::<Pod>::all(cluster.client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .expect("list pods")
        .items
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What most tests start from: the conditions install with every optional component, plegd Ready
/// on the node, and a namespace of the test's own.
struct Setup {
    cluster: Cluster,
    node: String,
    plegd: Pod,
    pods: Api<Pod>,
}

async fn conditions_install(namespace: &str) -> Option<Setup> {
    let cluster = cluster().await?;
    cluster.install("conditions", &EVERY_COMPONENT).await;
    let node = cluster.node().await;
    let plegd = ready_plegd(&cluster, &node).await;
    let pods = cluster.namespace(namespace).await;
    Some(Setup {
        cluster,
        node,
        plegd,
        pods,
    })
}

/// The conditions install with every optional component: plegd's pod Running and Ready under the
/// kubelet's probes, its metrics scraped through the pod with the metrics reader's token, its
/// condition on every pod of the node (its own included), Kubernetes Events with the exit code
/// and the termination message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_with_every_component() {
    let Some(Setup {
        cluster,
        node,
        plegd,
        pods,
    }) = conditions_install("e2e-conditions").await
    else {
        return;
    };

    // The objects of each component are in the cluster (the Prometheus operator's CRDs installed
    // for PodMonitor and PrometheusRule).
    let objects = cluster
        .kubectl(&[
            "-n",
            NAMESPACE,
            "get",
            "podmonitors,prometheusrules,networkpolicies,configmaps",
            "-o",
            "name",
        ])
        .await;
    for expected in [
        "podmonitor.monitoring.coreos.com/plegd",
        "prometheusrule.monitoring.coreos.com/plegd",
        "networkpolicy.networking.k8s.io/plegd",
        "configmap/plegd-grafana-dashboard",
    ] {
        assert!(objects.lines().any(|l| l == expected), "{expected} missing: {objects}");
    }

    // The scrape class the pod monitor asks of one's own Prometheus is a Prometheus as the
    // operator's own CRD has it (kube-apiserver's strict field validation, a dry run).
    let class = support::manifests::path("deploy/components/pod-monitor/prometheus-scrape-class.yaml");
    cluster.install_operator_crds(std::path::Path::new(&class)).await;
    cluster.namespace("monitoring").await;
    cluster
        .kubectl(&["apply", "--dry-run=server", "--validate=strict", "-f", &class])
        .await;

    // /metrics through the pod, over TLS: the metrics reader's token for plegd's audience is let
    // in; no token, or its token for the apiserver, is not; plain HTTP gets no answer at all.
    let (token, body) = scraped(&cluster, &plegd).await;
    assert!(body.contains("# TYPE plegd_pleg_relist_duration_seconds"), "{body}");
    // The status rules are the node's kubelet's, read from its Node (1.35.4, 1.36.3 or 1.37.2 here).
    let minor = cluster.kubelet_minor(&node).await;
    let rules = format!("plegd_status_kubelet_rules{{minor=\"{minor}\",fit=\"exact\"}}");
    assert_eq!(metric(&body, &rules), Some(1.0), "{rules} in {body}");
    assert!(
        metric(&body, "plegd_tls_certificate_expiry_timestamp_seconds").unwrap_or(0.0) > 0.0,
        "{body}"
    );
    let (code, body) = scrape(&cluster, &plegd, "https", None).await;
    assert_eq!(code, 401, "{body}");
    let for_apiserver = metrics_reader_token(&cluster, None).await;
    let (code, body) = scrape(&cluster, &plegd, "https", Some(for_apiserver)).await;
    assert_eq!(code, 401, "a token for the apiserver: {body}");
    let (code, body) = scrape(&cluster, &plegd, "http", Some(token)).await;
    assert_eq!(code, 0, "plain HTTP: {body}");

    let pp = PostParams::default();
    pods.create(&pp, &pod("sleeper", &node, "sleep 3600")).await.unwrap();
    pods.create(
        &pp,
        &pod(
            "failer",
            &node,
            "echo 'bye from failer' > /dev/termination-log; sleep 3; exit 3",
        ),
    )
    .await
    .unwrap();
    wait_condition(&pods, "sleeper", "True", "").await;
    wait_condition(&pods, "failer", "False", "container main exited with code 3").await;
    // The kubelet's own status beside it.
    wait_phase(&pods, "failer", "Failed").await;

    // Every pod of the node has plegd's condition, plegd's own pod included.
    let all = eventually(
        "plegd's condition on every pod of the node",
        WAIT,
        || pods_on(&cluster, &node),
        |pods| pods.iter().all(|p| condition(p, CONDITION).is_some()),
    )
    .await;
    let keys: Vec<String> = all.iter().map(key).collect();
    assert!(keys.contains(&key(&plegd)), "plegd's own pod: {keys:?}");

    // The Kubernetes Event of the exit, with its code and the termination message.
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "e2e-conditions");
    let events = eventually(
        "plegd's ContainerDied event for failer",
        WAIT,
        || async { events.list(&ListParams::default()).await.unwrap().items },
        |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("ContainerDied") && e.involved_object.name.as_deref() == Some("failer")
            })
        },
    )
    .await;
    let died = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("ContainerDied"))
        .unwrap();
    let message = died.message.as_deref().unwrap_or_default();
    assert!(
        message.contains("container main exited with code 3") && message.contains("bye from failer"),
        "{died:#?}"
    );
    assert_eq!(
        restarts(&ready_plegd(&cluster, &node).await),
        0,
        "plegd's probes pass: it is never restarted"
    );

    // A user deletes the finished pod (the apiserver makes a finished pod's grace period 0) and
    // force-deletes the running one: the apiserver stores each with grace period 0, its generation
    // bumped, which watchers see, and removes it in the same request. plegd sends nothing to such
    // a copy (ApiPod::being_removed): no status PATCH of this test was answered 404.
    let listed = pods.list_metadata(&ListParams::default()).await.expect("list pods");
    let version = listed.metadata.resource_version.expect("a list's resourceVersion");
    let mut watch = pods
        .watch(&WatchParams::default(), &version)
        .await
        .expect("watch the test's pods")
        .boxed();
    pods.delete("failer", &DeleteParams::default()).await.unwrap();
    pods.delete("sleeper", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let (mut removing, mut removed) = (Vec::<String>::new(), Vec::<String>::new());
    while removed.len() < 2 {
        let event = tokio::time::timeout(WAIT, watch.try_next())
            .await
            .expect("the deletions seen in time")
            .expect("the watch")
            .expect("the watch goes on");
        match event {
            WatchEvent::Modified(p) if p.metadata.deletion_grace_period_seconds == Some(0) => {
                removing.push(p.metadata.name.unwrap_or_default())
            }
            WatchEvent::Deleted(p) => {
                let name = p.metadata.name.unwrap_or_default();
                assert!(removing.contains(&name), "{name}: removed without a grace-0 copy first");
                removed.push(name);
            }
            _ => {}
        }
    }
    // Scraped from a pod made for it, seconds after the removals: a write plegd sent late is in.
    let (_, body) = scraped(&cluster, &plegd).await;
    assert!(
        metric(&body, "plegd_status_writes_total{result=\"ok\"}").unwrap_or_default() > 0.0,
        "{body}"
    );
    assert_eq!(
        metric(&body, "plegd_apiserver_requests_total{verb=\"PATCH\",code=\"404\"}").unwrap_or_default(),
        0.0,
        "{body}"
    );
}

/// The real admission policies with a real token's node-name claim: plegd's token (the projected
/// token the kubelet mounts, bound to its pod, so to its node) may write its condition on a pod of
/// its node, and nothing on a pod of another node, nor another condition, nor any metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_pod_of_another_node_is_refused() {
    let Some(Setup {
        cluster,
        node,
        plegd,
        pods,
    }) = conditions_install("e2e-other-node").await
    else {
        return;
    };
    let pp = PostParams::default();
    pods.create(&pp, &pod("here", &node, "sleep 3600")).await.unwrap();
    // Bound to a node that does not exist: never run, and not ours.
    pods.create(&pp, &pod("elsewhere", "plegd-e2e-elsewhere", "sleep 3600"))
        .await
        .unwrap();
    wait_condition(&pods, "here", "True", "").await;

    // The token plegd itself holds: projected by the kubelet, bound to plegd's pod and node, and
    // good for an hour at most (never the year an automatic token may be stretched to).
    let (token, claims) = cluster.mounted_plegd_token(&plegd).await;
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert!(
        (600..=3600).contains(&lifetime),
        "plegd's token lives {lifetime} s: {claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["name"],
        json!(plegd.metadata.name),
        "{claims}"
    );
    assert_eq!(claims["kubernetes.io"]["node"]["name"], json!(node), "{claims}");
    let dir = tempfile::tempdir().unwrap();
    let as_plegd = support::cluster::client_from(&cluster.kubeconfig_with_token(dir.path(), &token)).await;
    let plegd_pods: Api<Pod> = Api::namespaced(as_plegd, "e2e-other-node");
    let condition_patch = |kind: &str| json!({"status": {"conditions": [{"type": kind, "status": "False", "reason": "E2E", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let patch = |name: &'static str, body: Value| {
        let plegd_pods = plegd_pods.clone();
        async move {
            plegd_pods
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
                .await
        }
    };
    // Refused with 403 by the policy `by`.
    let refused_by = async |name: &'static str, kind: &str, by: &str| {
        let refused = patch(name, condition_patch(kind)).await.expect_err(by);
        let kube::Error::Api(status) = &refused else {
            panic!("{refused:?}")
        };
        assert!(
            status.code == 403 && status.message.contains(by),
            "refused by {by}: {status:?}"
        );
    };
    refused_by("elsewhere", CONDITION, "plegd-own-node-only").await;
    refused_by("here", "Ready", "plegd-conditions-only").await;
    // Nothing but status through pods/status: no label (a Service's endpoints, a NetworkPolicy's
    // selector), no annotation, no finalizer (a pod pinned in Terminating).
    for metadata in [
        json!({"labels": {"app": "relabelled"}}),
        json!({"annotations": {"example.com/by": "plegd"}}),
        json!({"finalizers": ["example.com/pin"]}),
    ] {
        let refused = patch("here", json!({"metadata": metadata}))
            .await
            .expect_err("metadata");
        let kube::Error::Api(status) = &refused else {
            panic!("{refused:?}")
        };
        assert!(
            status.code == 403 && status.message.contains("plegd-pod-status-only"),
            "{metadata}: {status:?}"
        );
    }
    // Its own condition on its own node's pod goes through (plegd writes it back right after).
    patch("here", condition_patch(CONDITION))
        .await
        .expect("plegd's condition on its node's pod");
    wait_condition(&pods, "here", "True", "").await;
}

/// `kubectl rollout restart`: the new plegd takes over without flapping what the old one wrote,
/// and follows what happens after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_restart_keeps_the_conditions() {
    let Some(Setup {
        cluster,
        node,
        plegd: old,
        pods,
    }) = conditions_install("e2e-rollout").await
    else {
        return;
    };
    let pp = PostParams::default();
    pods.create(&pp, &pod("before", &node, "sleep 3600")).await.unwrap();
    let before = wait_condition(&pods, "before", "True", "").await;
    let since = condition(&before, CONDITION).unwrap().last_transition_time.clone();

    cluster
        .kubectl(&["-n", NAMESPACE, "rollout", "restart", "ds/plegd"])
        .await;
    cluster
        .kubectl(&["-n", NAMESPACE, "rollout", "status", "ds/plegd", "--timeout=180s"])
        .await;
    let new = ready_plegd(&cluster, &node).await;
    assert_ne!(new.metadata.uid, old.metadata.uid, "a new pod");
    // The new plegd's own pod gets its condition; the old pod's condition was not flipped.
    wait_condition(
        &cluster_pods(&cluster, NAMESPACE),
        new.metadata.name.as_deref().unwrap(),
        "True",
        "",
    )
    .await;
    let after = get(&pods, "before").await;
    let c = condition(&after, CONDITION).unwrap();
    assert_eq!(
        (c.status.as_str(), &c.last_transition_time),
        ("True", &since),
        "{after:#?}"
    );
    pods.create(&pp, &pod("after", &node, "sleep 1; exit 5")).await.unwrap();
    wait_condition(&pods, "after", "False", "exited with code 5").await;
}

fn cluster_pods(cluster: &Cluster, namespace: &str) -> Api<Pod> {
    Api::namespaced(cluster.client.clone(), namespace)
}

/// The node's containerd restarted under plegd: plegd stays up (no restart of its pod), and sees
/// the pods that run on and the exits during and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restarted_under_plegd() {
    survives("e2e-containerd", async |cluster| cluster.restart("containerd").await).await;
}

/// The kubelet restarted under plegd: the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_restarted_under_plegd() {
    survives("e2e-kubelet", async |cluster| cluster.restart("kubelet").await).await;
}

/// etcd restarted, its history compacted and kube-apiserver restarted under a running plegd: the
/// informer's watch is cut and too old to resume (410 Gone: the new watch cache starts past
/// everything plegd has seen), it lists again, and nothing is missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restarted_and_compacted_under_plegd() {
    survives("e2e-etcd", async |cluster| {
        cluster.restart("etcd").await;
        cluster.compact().await;
        cluster.restart("kube-apiserver").await;
    })
    .await;
}

/// `fault` made under a running plegd (conditions install): plegd's pod is not restarted, a
/// condition written before keeps its transition time, an exit about when the fault is made and
/// one after it are both written.
async fn survives(namespace: &str, fault: impl AsyncFnOnce(&Cluster)) {
    let Some(Setup {
        cluster,
        node,
        plegd,
        pods,
    }) = conditions_install(namespace).await
    else {
        return;
    };
    let pp = PostParams::default();
    pods.create(&pp, &pod("survivor", &node, "sleep 3600")).await.unwrap();
    // Exits about when the fault is made: its write lands whenever the fault lets it.
    pods.create(&pp, &pod("during", &node, "sleep 12; exit 6"))
        .await
        .unwrap();
    let survivor = wait_condition(&pods, "survivor", "True", "").await;
    wait_condition(&pods, "during", "True", "").await;
    let since = condition(&survivor, CONDITION).unwrap().last_transition_time.clone();

    fault(&cluster).await;
    pods.create(&pp, &pod("after", &node, "sleep 1; exit 4")).await.unwrap();
    wait_condition(&pods, "during", "False", "container main exited with code 6").await;
    wait_condition(&pods, "after", "False", "container main exited with code 4").await;
    let survivor = get(&pods, "survivor").await;
    let c = condition(&survivor, CONDITION).unwrap();
    assert_eq!(
        (c.status.as_str(), &c.last_transition_time),
        ("True", &since),
        "{survivor:#?}"
    );
    let now = ready_plegd(&cluster, &node).await;
    assert_eq!(now.metadata.uid, plegd.metadata.uid, "the same plegd pod");
    assert_eq!(restarts(&now), restarts(&plegd), "plegd was not restarted: {now:#?}");
}

/// The shadow install: plegd computes every status beside the kubelet, writes none, and counts
/// the fields where the apiserver's status differs from its own. Here the kubelet's lag: plegd
/// sees a container exit from containerd's event within milliseconds, the kubelet at its next
/// relist (every second) and writes it after that, so plegd compares with a status that has not
/// caught up yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_counts_differences_and_writes_nothing() {
    let Some(cluster) = cluster().await else { return };
    // With the metrics-certificate component: /metrics serves the Secret's certificate (made here
    // as cert-manager would keep it), which a reader that trusts its CA verifies.
    let dir = tempfile::tempdir().unwrap();
    let tls = support::tls::certificates(dir.path(), "metrics", &["plegd.test"]);
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "plegd-metrics-tls", "namespace": NAMESPACE},
        "stringData": {"tls.crt": read(&tls.cert), "tls.key": read(&tls.key)}});
    cluster
        .install_with_objects("shadow", &["pod-monitor", "metrics-certificate"], &[secret])
        .await;
    let node = cluster.node().await;
    let plegd = ready_plegd(&cluster, &node).await;
    let (token, before) = scraped(&cluster, &plegd).await;
    cluster.namespace("monitoring").await;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cluster.client.clone(), "monitoring");
    let ca: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "plegd-ca"}, "data": {"ca.crt": read(&tls.ca)}})).unwrap();
    let _ = config_maps.delete("plegd-ca", &DeleteParams::default()).await;
    config_maps
        .create(&PostParams::default(), &ca)
        .await
        .expect("the CA's ConfigMap");
    let (code, out) = scrape_trusting(
        &cluster,
        &plegd,
        "https",
        Some(token.clone()),
        Some(("plegd-ca", "plegd.test")),
    )
    .await;
    assert_eq!(code, 200, "the Secret's certificate, verified: {out}");
    let differences = |body: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with("plegd_shadow_differences_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let pods = cluster.namespace("e2e-shadow").await;
    let pp = PostParams::default();
    pods.create(&pp, &pod("sleeper", &node, "sleep 3600")).await.unwrap();
    pods.create(&pp, &pod("failer", &node, "sleep 2; exit 3"))
        .await
        .unwrap();
    wait_phase(&pods, "failer", "Failed").await;
    eventually(
        "the kubelet's Ready sleeper",
        WAIT,
        || get(&pods, "sleeper"),
        |p| condition(p, "Ready").is_some_and(|c| c.status == "True"),
    )
    .await;
    let (_, after) = eventually(
        "differences counted",
        WAIT,
        || scrape(&cluster, &plegd, "https", Some(token.clone())),
        |(_, body)| differences(body) > differences(&before),
    )
    .await;
    eprintln!(
        "shadow differences counted: {:#?}",
        after
            .lines()
            .filter(|l| l.starts_with("plegd_shadow_differences_total{"))
            .collect::<Vec<_>>()
    );
    assert!(
        after.contains("# TYPE plegd_shadow_differences_total counter"),
        "{after}"
    );
    // Nothing written: no condition of plegd's on the pods it saw start, no status write counted.
    // (Pods that outlive installs, such as kind's static control-plane pods, keep the condition
    // an earlier install in conditions mode wrote: shadow mode writes and removes nothing.)
    for p in pods.list(&Default::default()).await.unwrap() {
        assert!(condition(&p, CONDITION).is_none(), "{}", key(&p));
    }
    assert_eq!(
        metric(&after, "plegd_status_writes_total{result=\"ok\"}"),
        Some(0.0),
        "{after}"
    );
}

/// Full mode where no kubelet runs the pods: a Node object with no kubelet, its pods run through
/// CRI on a containerd of the test's own, plegd (as the systemd unit runs it, with a token bound
/// to that Node) writes their whole status past the real admission policies and deletes them when
/// finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_mode_on_a_node_without_a_kubelet() {
    let Some(cluster) = cluster().await else { return };
    let Some(cd) = support::containerd::containerd().await else {
        return;
    };
    // No DaemonSet: it would put a plegd pod on the new node, which nothing runs. deploy/full's
    // RBAC and admission policy alone.
    cluster.remove_plegd().await;
    let dir = tempfile::tempdir().unwrap();
    let rendered = cluster
        .kubectl(&["kustomize", &format!("{}/deploy/full", env!("CARGO_MANIFEST_DIR"))])
        .await;
    let objects: Vec<Value> = serde_saphyr::from_multiple(&rendered).expect("deploy/full renders");
    let objects: Vec<Value> = objects.into_iter().filter(|o| o["kind"] != "DaemonSet").collect();
    let file = dir.path().join("full-without-daemonset.json");
    std::fs::write(
        &file,
        json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string(),
    )
    .unwrap();
    let file = file.display().to_string();
    cluster.kubectl(&["apply", "-f", &file]).await;
    cluster.on_exit(&["delete", "--ignore-not-found", "-f", &file]);

    let node = "plegd-e2e-no-kubelet";
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client.clone());
    let _ = nodes.delete(node, &DeleteParams::default()).await;
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": node, "labels": {support::cluster::E2E_LABEL: "true"}}}),
            )
            .unwrap(),
        )
        .await
        .expect("a Node object");
    cluster.on_exit(&["delete", "node", node, "--ignore-not-found"]);
    let token = cluster.plegd_token("Node", node).await;
    let kubeconfig = cluster.kubeconfig_with_token(dir.path(), &token);
    let metrics = std::sync::Arc::new(plegd::metrics::Metrics::new());
    let daemon = support::daemon::spawn(
        support::daemon::options(&cd.socket, kubeconfig, node, plegd::status::StatusMode::Full),
        metrics.clone(),
    );

    let pods = cluster.namespace(support::containerd::TEST_NAMESPACE).await;
    // A pod bound to the node in the apiserver, its sandbox and container run through CRI with the
    // uid the apiserver gave it; once plegd has written it Running.
    let run = async |name: &str, script: &str| {
        let mut object = pod(name, node, "unused");
        object.spec.as_mut().unwrap().host_network = Some(true);
        let created = pods.create(&PostParams::default(), &object).await.unwrap();
        let uid = created.metadata.uid.clone().unwrap();
        let sandbox = cd
            .run_pod_as(name, support::containerd::TEST_NAMESPACE, &uid, true, None)
            .await;
        let ctr = cd.run_container(&sandbox, "main", script).await;
        let running = wait_phase(&pods, name, "Running").await;
        (sandbox, ctr, running)
    };
    // Runs until it is seen running and stopped, then succeeds.
    let (sandbox, ctr, running) = run("job", "trap 'exit 0' TERM; sleep 1000 & wait").await;
    let cs = &running.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.container_id.as_deref(), Some(format!("containerd://{ctr}").as_str()));
    assert!(cs.state.as_ref().unwrap().running.is_some(), "{cs:#?}");
    cd.stop_container(&ctr, 10).await;
    let done = wait_phase(&pods, "job", "Succeeded").await;
    let terminated = done.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (0, Some("Completed"))
    );
    cd.cleanup(&sandbox).await;

    // A running pod deleted by a user (a grace period: the apiserver leaves it to its node): plegd
    // writes its final status once its container is stopped, and removes it once its sandbox is.
    let (sandbox, ctr, _) = run("server", "sleep 600").await;
    pods.delete("server", &DeleteParams::default())
        .await
        .expect("a deletion request");
    cd.stop_container(&ctr, 0).await;
    wait_phase(&pods, "server", "Failed").await;
    cd.stop_pod(&sandbox).await;
    eventually(
        "the pod removed by plegd",
        WAIT,
        || async { pods.get_opt("server").await.unwrap() },
        Option::is_none,
    )
    .await;
    // The DELETE is counted once its answer is back, which can be just after the pod is gone.
    support::wait_until("the deletion counted", Duration::from_secs(5), || {
        metrics.encode().contains("plegd_pod_deletions_total{result=\"ok\"} 1")
    })
    .await;
    daemon.stop().await;
    cd.cleanup(&sandbox).await;
}

/// No plegd on the cluster and no namespace of plegd's, for a Helm release to make anew (an earlier
/// run's namespace gone for good: nothing is made in a namespace being removed); the namespace is
/// removed again when the test ends.
async fn no_plegd_namespace(cluster: &Cluster) {
    cluster.remove_plegd().await;
    let gone = [
        "delete",
        "namespace",
        NAMESPACE,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
    ];
    cluster.kubectl(&gone).await;
    cluster.on_exit(&gone);
}

/// deploy/helm/plegd with Helm 4 (tests/helm/helm.sh) and its defaults (server-side apply, the
/// watcher's wait, rollback on failure): every mode's objects, with every optional component,
/// accepted by the apiserver (`--dry-run=server`); installed (its objects applied server-side),
/// plegd Ready under the kubelet and its condition on a pod; upgraded from conditions to shadow and
/// rolled back to conditions with no condition flipped and no restart beyond the rollout;
/// uninstalled, leaving no object of plegd's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helm_chart_installs_upgrades_and_uninstalls() {
    let Some(cluster) = cluster().await else { return };
    no_plegd_namespace(&cluster).await;
    let chart = support::REPO.to_owned() + "/deploy/helm/plegd";
    let every = [
        "--set",
        "events.enabled=true",
        "--set",
        "podMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "metricsCertificate.enabled=true",
    ];
    let rendered = support::REPO.to_owned() + "/target/tmp/helm-every-component.yaml";
    for mode in ["conditions", "shadow", "full"] {
        let mode_value = format!("statusMode={mode}");
        let mut args = vec![
            "template",
            "plegd",
            chart.as_str(),
            "--namespace",
            NAMESPACE,
            "--set",
            &mode_value,
        ];
        args.extend(every);
        let text = cluster.helm(&args).await;
        std::fs::create_dir_all(support::REPO.to_owned() + "/target/tmp").unwrap();
        std::fs::write(&rendered, &text).unwrap();
        cluster.install_operator_crds(std::path::Path::new(&rendered)).await;
        // The namespace first: a server-side dry run of an object in a namespace that is not there
        // is refused.
        let namespace = support::REPO.to_owned() + "/target/tmp/helm-namespace.yaml";
        std::fs::write(
            &namespace,
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"),
        )
        .unwrap();
        cluster.kubectl(&["apply", "-f", &namespace]).await;
        let out = cluster
            .kubectl(&["apply", "--dry-run=server", "-n", NAMESPACE, "-f", &rendered])
            .await;
        assert!(out.contains("daemonset.apps/plegd"), "{mode}: {out}");
    }

    let before = plegds_objects(&cluster).await;
    cluster
        .helm(&[
            "install",
            "plegd",
            &chart,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--rollback-on-failure",
            "--wait",
            "--timeout",
            "180s",
        ])
        .await;
    assert_eq!(
        managers(&cluster, "daemonset/plegd").await,
        ["helm Apply"],
        "Helm 4 installs server-side"
    );
    let node = cluster.node().await;
    let first = ready_plegd(&cluster, &node).await;
    let pods = cluster.namespace("e2e-helm").await;
    let pp = PostParams::default();
    pods.create(&pp, &pod("steady", &node, "sleep 3600")).await.unwrap();
    let steady = wait_condition(&pods, "steady", "True", "").await;
    let since = condition(&steady, CONDITION).unwrap().last_transition_time.clone();

    let mut plegds = vec![first];
    let shadow = [
        "upgrade",
        "plegd",
        &chart,
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "statusMode=shadow",
        "--rollback-on-failure",
        "--timeout",
        "180s",
    ];
    // Back to revision 1, conditions mode.
    let rollback = [
        "rollback",
        "plegd",
        "1",
        "--namespace",
        NAMESPACE,
        "--wait",
        "--timeout",
        "180s",
    ];
    for (mode, args) in [("shadow", &shadow[..]), ("conditions", &rollback[..])] {
        cluster.helm(args).await;
        let plegd = eventually(
            &format!("a new plegd pod, Ready, after `helm {}` to {mode}", args[0]),
            WAIT,
            || async { ready_plegd(&cluster, &node).await },
            |p| plegds.iter().all(|old| old.metadata.uid != p.metadata.uid),
        )
        .await;
        assert_eq!(restarts(&plegd), 0, "{mode}: {plegd:#?}");
        let args = plegd.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap_or_default();
        assert!(args.contains(&format!("--status-mode={mode}")), "{args:?}");
        plegds.push(plegd);
        let now = get(&pods, "steady").await;
        let c = condition(&now, CONDITION).unwrap();
        assert_eq!(
            (c.status.as_str(), &c.last_transition_time),
            ("True", &since),
            "{mode}: {now:#?}"
        );
    }
    let history = cluster
        .helm(&["history", "plegd", "--namespace", NAMESPACE, "-o", "json"])
        .await;
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(
        history
            .iter()
            .map(|r| r["status"].as_str().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["superseded", "superseded", "deployed"],
        "{history:#?}"
    );
    pods.create(&pp, &pod("after", &node, "sleep 1; exit 5")).await.unwrap();
    wait_condition(&pods, "after", "False", "exited with code 5").await;

    uninstall_leaving_nothing(&cluster, &before).await;
}

/// Who wrote `object` of plegd's namespace, and how: "MANAGER OPERATION" of its managed fields.
async fn managers(cluster: &Cluster, object: &str) -> Vec<String> {
    let json = cluster
        .kubectl(&["get", object, "-n", NAMESPACE, "--show-managed-fields", "-o", "json"])
        .await;
    let object: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut managers: Vec<String> = object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"].is_null())
        .map(|m| {
            format!(
                "{} {}",
                m["manager"].as_str().unwrap_or("?"),
                m["operation"].as_str().unwrap_or("?")
            )
        })
        .collect();
    managers.sort();
    managers.dedup();
    managers
}

/// A release that Helm 3 (v3.21.4, still getting security fixes) installed and upgraded, with its
/// client-side apply, upgraded by Helm 4 (which keeps the release's apply method) and uninstalled
/// by it, leaving nothing of plegd's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_helm_3_upgrades_and_uninstalls_with_helm_4() {
    let Some(cluster) = cluster().await else { return };
    no_plegd_namespace(&cluster).await;
    let chart = support::REPO.to_owned() + "/deploy/helm/plegd";
    let before = plegds_objects(&cluster).await;
    let install = [
        "install",
        "plegd",
        &chart,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "180s",
    ];
    let upgrade = |mode: &str| {
        let mode = format!("statusMode={mode}");
        [
            "upgrade",
            "plegd",
            &chart,
            "--namespace",
            NAMESPACE,
            "--reuse-values",
            "--set",
            &mode,
            "--wait",
            "--timeout",
            "180s",
        ]
        .map(str::to_owned)
    };
    let (to_shadow, to_conditions) = (upgrade("shadow"), upgrade("conditions"));
    let mut plegds: Vec<Pod> = Vec::new();
    for (helm, mode, args) in [
        ("Helm 3", "conditions", install.to_vec()),
        ("Helm 3", "shadow", to_shadow.iter().map(String::as_str).collect()),
        (
            "Helm 4",
            "conditions",
            to_conditions.iter().map(String::as_str).collect(),
        ),
    ] {
        if helm == "Helm 3" {
            cluster.helm_3(&args).await;
        } else {
            cluster.helm(&args).await;
        }
        // The node plegd runs on (there is a plegd once the install is in).
        let node = cluster.node().await;
        let plegd = eventually(
            &format!("a new plegd pod, Ready, after {helm}'s `helm {}` to {mode}", args[0]),
            WAIT,
            || async { ready_plegd(&cluster, &node).await },
            |p| plegds.iter().all(|old| old.metadata.uid != p.metadata.uid),
        )
        .await;
        let args = plegd.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap_or_default();
        assert!(
            args.contains(&format!("--status-mode={mode}")),
            "{helm}, {mode}: {args:?}"
        );
        plegds.push(plegd);
    }
    assert_eq!(
        managers(&cluster, "daemonset/plegd").await,
        ["helm Update"],
        "Helm 4 keeps the apply method of the release Helm 3 made (client-side)"
    );
    uninstall_leaving_nothing(&cluster, &before).await;
}

/// `helm uninstall` (Helm 4, waiting), which leaves no object of plegd's beyond `before` (what
/// there was before the install).
async fn uninstall_leaving_nothing(cluster: &Cluster, before: &[String]) {
    cluster
        .helm(&[
            "uninstall",
            "plegd",
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "180s",
        ])
        .await;
    assert_eq!(
        plegds_objects(cluster).await,
        before,
        "what helm uninstall left of plegd's (against what there was before the install)"
    );
}

/// The names of the objects of plegd's kinds whose names say plegd, in every namespace: what an
/// install makes and an uninstall must take away (another test's leftovers are there before too).
async fn plegds_objects(cluster: &Cluster) -> Vec<String> {
    let all = cluster
        .kubectl(&[
            "get",
            "daemonsets,serviceaccounts,networkpolicies,configmaps,clusterroles,clusterrolebindings,\
             validatingadmissionpolicies,validatingadmissionpolicybindings,flowschemas,prioritylevelconfigurations",
            "--all-namespaces",
            "-o",
            "name",
        ])
        .await;
    all.lines().filter(|l| l.contains("plegd")).map(str::to_owned).collect()
}
