//! plegd's status against the real kubelet's, on one node: plegd in shadow mode beside the kubelet
//! of tests/cluster/cluster.sh (1.37.2, or 1.35.4 and 1.36.3 under the same control plane:
//! `PLEGD_CLUSTER_KUBELET_VERSION`), both over the node's containerd, a battery of pods covering what
//! plegd claims to reproduce. One watcher of the apiserver sees each status the kubelet writes;
//! plegd's `StatusService` (what `plegd status` follows) gives each status plegd generates.
//!
//! Settled parity: after each kubelet write that stays the pod's newest for [`QUIET`] (the kubelet has
//! nothing more to write), plegd's status generated against that write must equal it, as typed
//! values, field by field — but for the fields only the kubelet can know ([`judge::UNKNOWABLE`]),
//! which are printed with both values. The judge (tests/kubelet_parity/judge.rs) shares no code with
//! plegd: a rule plegd's own comparison gets wrong cannot be wrong on both sides of this test.
//! A settled write that plegd differs from counts as plegd ahead, not as a difference, when the
//! kubelet's next write shows the runtime had moved (a container's id, state or restarts, the
//! pod's IPs): the kubelet wrote it from an older runtime read than plegd's (a sync busy creating
//! containers keeps it from generating anew). A pod's last write has no such excuse.
//! The last status of a pod whose phase TerminatePod set (deleted before its containers ran) is
//! one the kubelet never writes again and plegd keeps as it is, so equality against it proves
//! little: plegd must also have come to it on its own, from the runtime, before it saw the
//! kubelet's write (`own-last`).
//! Transients: for each kubelet write, when plegd first generated the same status, before or after
//! it; printed as a table (and kept in the test's scratch directory).
//!
//! Runs when `PLEGD_CLUSTER_E2E=1` (tests/run.sh), one test at a time with tests/cluster_e2e.rs, on
//! tests/cluster/cluster.sh's node (it reads plegd's socket, the static pod directory and containerd
//! there).

use plegd_test_support as support;

#[path = "kubelet_parity/judge.rs"]
mod judge;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use plegd::observe::api::status_service_watch_response;
use plegd::status::generate::KubeletMinor;
use support::cluster::{CONTAINERD_SOCKET, IMAGE, STATIC_PODS, cluster, plegd_status_stream};

const NS: &str = "parity";
/// A kubelet write that stays the newest this long is settled: the kubelet relists every second
/// and writes a change within about one more.
const QUIET: Duration = Duration::from_secs(5);
/// plegd's status against a write is the one it generated within this long of the write.
const REACTION: Duration = Duration::from_secs(2);
/// The longest the battery runs before every pod has done what it is for.
const BATTERY: Duration = Duration::from_secs(300);
/// The finalizer that keeps a deleted pod of the battery, so that its last status can be compared.
const KEEP: &str = "plegd.test/keep";

/// A status the kubelet wrote, as the watcher saw it.
#[derive(Debug, Clone)]
struct Written {
    at: Instant,
    rv: String,
    status: PodStatus,
}

/// A status plegd generated, as its StatusService sent it (`--status-report-form=generated`: as
/// generated, whatever the apiserver holds); `status` is the form kube-apiserver would serve it in
/// ([`as_served`]) once the battery is done.
#[derive(Debug, Clone)]
struct Generated {
    at: Instant,
    rv: String,
    json: String,
    status: PodStatus,
}

#[derive(Default)]
struct Timelines {
    kubelet: BTreeMap<String, Vec<Written>>,
    plegd: BTreeMap<String, Vec<Generated>>,
    /// The newest copy of each pod.
    pods: BTreeMap<String, Pod>,
}

type Shared = Arc<Mutex<Timelines>>;

fn c(name: &str, script: &str) -> Value {
    json!({"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]})
}

fn pod(name: &str, node: &str, policy: &str, spec: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": node, "restartPolicy": policy, "terminationGracePeriodSeconds": 2},
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn restarts(p: &Pod) -> i32 {
    let s = p.status.as_ref();
    s.and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .chain(s.and_then(|s| s.init_container_statuses.as_ref()))
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

fn running(p: &Pod) -> bool {
    phase(p) == "Running"
        && p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some())))
}

fn terminal(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// One pod of the battery: what it is, when it has done what it is for, and when the test deletes
/// it (such a pod carries [`KEEP`]).
struct Scenario {
    pod: Pod,
    done: fn(&Pod) -> bool,
    delete_when: Option<fn(&Pod) -> bool>,
}

fn container_status<'a>(p: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses
        .iter()
        .chain(&s.init_container_statuses)
        .chain(&s.ephemeral_container_statuses)
        .flatten()
        .find(|c| c.name == name)
}

fn waiting_reason<'a>(p: &'a Pod, name: &str) -> Option<&'a str> {
    container_status(p, name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

fn container_running(p: &Pod, name: &str) -> bool {
    container_status(p, name).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

fn container_terminated(p: &Pod, name: &str) -> bool {
    container_status(p, name).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A shell command that writes `bytes` bytes of `a` then `text` to the termination message file.
fn message_of(bytes: usize, text: &str) -> String {
    format!("head -c {bytes} /dev/zero | tr '\\0' a > /dev/termination-log; printf '{text}' >> /dev/termination-log")
}

/// The pods of the battery for `node`, whose kubelet is of `kubelet`'s minor (what a pod is for may
/// differ with it: the kubelets' own differences, docs/operating.md "The kubelet plegd follows").
fn battery(node: &str, kubelet: KubeletMinor) -> Vec<Scenario> {
    let sleep = "sleep 3600";
    let marker = |code: u8| format!("if [ -f /data/m ]; then sleep 3600; fi; touch /data/m; sleep 2; exit {code}");
    let data = json!([{"name": "data", "emptyDir": {}}]);
    let with_data = |mut c: Value| {
        c["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
        c
    };
    let mut out = Vec::new();
    let mut add = |name: &str, policy: &str, spec: Value, done: fn(&Pod) -> bool| {
        out.push(Scenario {
            pod: pod(name, node, policy, spec),
            done,
            delete_when: None,
        })
    };
    // Restart policies, exits 0 and non-zero.
    for (policy, code) in [
        ("Always", 0),
        ("Always", 3),
        ("OnFailure", 0),
        ("OnFailure", 3),
        ("Never", 0),
        ("Never", 3),
    ] {
        let name = format!("{}-exit{code}", policy.to_lowercase());
        let done: fn(&Pod) -> bool = match (policy, code) {
            ("Always", _) | ("OnFailure", 3) => |p| restarts(p) >= 2,
            _ => terminal,
        };
        add(
            &name,
            policy,
            json!({"containers": [c("main", &format!("sleep 2; exit {code}"))]}),
            done,
        );
    }
    // A container's own restartPolicy and restartPolicyRules.
    let mut own = c("main", "sleep 2; exit 1");
    own["restartPolicy"] = json!("Always");
    add("container-policy", "Never", json!({"containers": [own]}), |p| {
        restarts(p) >= 2
    });
    let mut rules = with_data(c("main", &marker(42)));
    rules["restartPolicy"] = json!("Never");
    rules["restartPolicyRules"] = json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    add(
        "restart-rules",
        "Never",
        json!({"containers": [rules], "volumes": data}),
        |p| restarts(p) >= 1 && running(p),
    );
    // RestartAllContainers on a container's exit: from 1.36 every container restarts; a 1.35
    // kubelet (its gate off) falls back to the container's own policy, Never.
    let mut trigger = with_data(c("trigger", &marker(43)));
    trigger["restartPolicy"] = json!("Never");
    trigger["restartPolicyRules"] =
        json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [43]}}]);
    add(
        "restart-all",
        "Never",
        json!({"containers": [trigger, c("other", sleep)], "volumes": data}),
        if kubelet.restart_all_containers() {
            |p| restarts(p) >= 1 && running(p)
        } else {
            |p| container_terminated(p, "trigger") && container_running(p, "other")
        },
    );
    // Init containers that succeed and fail.
    add(
        "init-ok",
        "Always",
        json!({"initContainers": [c("init", "sleep 1")], "containers": [c("main", sleep)]}),
        running,
    );
    add(
        "init-fail",
        "Never",
        json!({"initContainers": [c("init", "sleep 1; exit 7")], "containers": [c("main", sleep)]}),
        terminal,
    );
    // Sidecars: starting and stopping with the pod, restarting.
    let mut sidecar = c("sidecar", sleep);
    sidecar["restartPolicy"] = json!("Always");
    add(
        "sidecar-stops",
        "Never",
        json!({"initContainers": [sidecar.clone()], "containers": [c("main", "sleep 4; exit 0")]}),
        terminal,
    );
    let mut flaky = c("sidecar", "sleep 2; exit 1");
    flaky["restartPolicy"] = json!("Always");
    add(
        "sidecar-restarts",
        "Never",
        json!({"initContainers": [flaky], "containers": [c("main", sleep)]}),
        |p| restarts(p) >= 2,
    );
    // An OOM kill.
    let mut hog = c(
        "main",
        "sleep 1; a=$(head -c 200000000 /dev/zero | tr '\\000' x); sleep 3600",
    );
    hog["resources"] = json!({"limits": {"memory": "32Mi"}});
    add("oom", "Never", json!({"containers": [hog]}), terminal);
    // Termination messages: from the file, and from the log on failure.
    add(
        "message-file",
        "Never",
        json!({"containers": [c("main", "echo 'bye from the file' > /dev/termination-log; sleep 1; exit 2")]}),
        terminal,
    );
    let mut logs = c("main", "echo 'bye from the log'; sleep 1; exit 4");
    logs["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    add("message-logs", "Never", json!({"containers": [logs]}), terminal);
    // activeDeadlineSeconds.
    add(
        "deadline",
        "Always",
        json!({"activeDeadlineSeconds": 8, "containers": [c("main", sleep)]}),
        terminal,
    );
    // A container that is created and never starts.
    let mut missing = c("main", "");
    missing["command"] = json!(["/no/such/binary"]);
    add("never-starts", "Never", json!({"containers": [missing]}), terminal);
    // Host network and pod network; requests and limits.
    add(
        "host-network",
        "Always",
        json!({"hostNetwork": true, "containers": [c("main", sleep)]}),
        running,
    );
    let mut sized = c("main", sleep);
    sized["resources"] =
        json!({"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}});
    add(
        "pod-network-resources",
        "Always",
        json!({"containers": [sized]}),
        running,
    );
    // A readiness gate (set True by the test once the pod runs).
    add(
        "readiness-gate",
        "Always",
        json!({"readinessGates": [{"conditionType": "plegd.test/gate"}], "containers": [c("main", sleep)]}),
        ready,
    );
    // Termination messages at the limits: five containers share 12 KiB, 2,457 bytes each; each
    // message is cut inside a character of 2, 3 and 4 bytes, one is a file's last 4 KiB that
    // starts inside a character, one a log's last 2 KiB that does.
    let mut limits = vec![
        c("cut-2", &format!("{}; exit 1", message_of(2456, &"ü".repeat(8)))),
        c("cut-3", &format!("{}; exit 1", message_of(2455, &"€".repeat(8)))),
        c("cut-4", &format!("{}; exit 1", message_of(2454, &"😀".repeat(8)))),
        c(
            "file-tail",
            &format!(
                "{}; head -c 4095 /dev/zero | tr '\\0' b >> /dev/termination-log; exit 1",
                message_of(903, "ü")
            ),
        ),
        c(
            "log-tail",
            "printf 'é'; head -c 2046 /dev/zero | tr '\\0' y; echo; exit 1",
        ),
    ];
    limits[4]["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    add("message-limits", "Never", json!({"containers": limits}), terminal);
    // Several containers, one of them restarting.
    add(
        "several-containers",
        "Always",
        json!({"containers": [c("a", sleep), c("b", "sleep 2; exit 0"), c("c", sleep)]}),
        |p| restarts(p) >= 2,
    );
    // Exec probes: a startup probe, then a readiness probe, on a container and on a sidecar.
    let probe = |file: &str| json!({"exec": {"command": ["cat", file]}, "periodSeconds": 1, "failureThreshold": 30});
    let mut probed = c(
        "main",
        "sleep 2; touch /tmp/started; sleep 2; touch /tmp/ready; sleep 3600",
    );
    probed["startupProbe"] = probe("/tmp/started");
    probed["readinessProbe"] = probe("/tmp/ready");
    let mut probed_sidecar = c("sidecar", "sleep 2; touch /tmp/ready; sleep 3600");
    probed_sidecar["restartPolicy"] = json!("Always");
    probed_sidecar["readinessProbe"] = probe("/tmp/ready");
    add(
        "exec-probes",
        "Always",
        json!({"initContainers": [probed_sidecar], "containers": [probed]}),
        ready,
    );
    // An ephemeral container (added by the test once the pod runs) that runs and ends.
    add("ephemeral", "Always", json!({"containers": [c("main", sleep)]}), |p| {
        container_terminated(p, "debug")
    });
    // QoS classes: Guaranteed (BestEffort and Burstable are above).
    let mut guaranteed = c("main", sleep);
    guaranteed["resources"] =
        json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}});
    add("qos-guaranteed", "Always", json!({"containers": [guaranteed]}), running);
    // Users and groups: the identity the runtime reports for the container's first process.
    add(
        "users-groups",
        "Always",
        json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000, 5000], "fsGroup": 2000},
               "containers": [c("main", sleep)]}),
        running,
    );
    // A sandbox that dies under running containers (killed by the test once the pod runs).
    add(
        "sandbox-dies",
        "Always",
        json!({"containers": [c("main", sleep)]}),
        |p| restarts(p) >= 1 && running(p),
    );
    // Deleted at each stage of its start (a finalizer keeps each object, so that its last status
    // can be compared): before it has a sandbox (a volume that never mounts), while its image is
    // missing, during its init container, while only its sidecar runs, and running (killed at the
    // end of its grace period).
    let missing_image = json!({"name": "main", "image": "plegd.test/missing:1", "imagePullPolicy": "Never"});
    let mut deleted = |name: &str, spec: Value, delete_when: fn(&Pod) -> bool| {
        let mut p = pod(name, node, "Always", spec);
        p.metadata.finalizers = Some(vec![KEEP.into()]);
        out.push(Scenario {
            pod: p,
            done: terminal,
            delete_when: Some(delete_when),
        });
    };
    let mut unmounted = c("main", sleep);
    unmounted["volumeMounts"] = json!([{"name": "config", "mountPath": "/config"}]);
    deleted(
        "delete-before-sandbox",
        json!({"containers": [unmounted], "volumes": [{"name": "config", "configMap": {"name": "plegd-parity-missing"}}]}),
        |p| waiting_reason(p, "main") == Some("ContainerCreating"),
    );
    deleted(
        "delete-image-missing",
        json!({"containers": [missing_image.clone()]}),
        |p| waiting_reason(p, "main") == Some("ErrImageNeverPull"),
    );
    deleted(
        "delete-during-init",
        json!({"initContainers": [c("init", sleep)], "containers": [c("main", sleep)]}),
        |p| container_running(p, "init"),
    );
    let mut only_sidecar = c("sidecar", sleep);
    only_sidecar["restartPolicy"] = json!("Always");
    deleted(
        "delete-sidecar-only",
        json!({"initContainers": [only_sidecar], "containers": [missing_image]}),
        |p| {
            container_status(p, "sidecar").is_some_and(|c| c.started == Some(true))
                && waiting_reason(p, "main") == Some("ErrImageNeverPull")
        },
    );
    deleted(
        "delete-killed",
        json!({"containers": [c("main", "trap '' TERM; sleep 3600")]}),
        running,
    );
    // Deletion with a grace period (deleted by the test once the pod runs; a finalizer keeps the
    // object so that its last status can be compared).
    let mut graceful = pod(
        "graceful",
        node,
        "Always",
        json!({"terminationGracePeriodSeconds": 5,
               "containers": [c("main", "trap 'sleep 1; exit 0' TERM; sleep 3600 & wait")]}),
    );
    graceful.metadata.finalizers = Some(vec![KEEP.into()]);
    out.push(Scenario {
        pod: graceful,
        done: terminal,
        delete_when: Some(running),
    });
    out
}

/// The static pod (its mirror pod in the apiserver is `static-<node>`).
fn static_pod_manifest() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "static", "namespace": NS},
        "spec": {"containers": [c("main", "sleep 3600")], "terminationGracePeriodSeconds": 1},
    })
}

/// Removes the static pod's manifest when the test ends.
struct StaticPod(PathBuf);
impl Drop for StaticPod {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Follow the kubelet's writes to the namespace's pods.
/// Whether a status generated against the copy of resource version `rv` is one against the write
/// of `written`, the next write being `next` (if any): the same copy, or a later one before the
/// next write. Resource versions compare as numbers (kube-apiserver's, from etcd); where one is not
/// a number, only the same copy counts.
fn against(rv: &str, written: &str, next: Option<&str>) -> bool {
    if rv == written {
        return true;
    }
    let number = |v: &str| v.parse::<u64>().ok();
    match (number(rv), number(written), next.map(number)) {
        (Some(rv), Some(written), None) => rv > written,
        (Some(rv), Some(written), Some(Some(next))) => rv > written && rv < next,
        _ => false,
    }
}

#[test]
fn a_status_against_a_later_copy_before_the_next_write_counts() {
    assert!(against("10", "10", Some("20")));
    assert!(against("12", "10", Some("20")));
    assert!(against("12", "10", None));
    assert!(
        !against("20", "10", Some("20")),
        "the next write's copy is the next write's"
    );
    assert!(!against("9", "10", None), "an older copy");
    assert!(!against("x", "10", None));
}

fn watch_kubelet(pods: Api<Pod>, shared: Shared) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = watcher(pods, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                _ => continue,
            };
            let at = Instant::now();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let mut t = shared.lock().unwrap();
            let status = pod.status.clone().unwrap_or_default();
            let timeline = t.kubelet.entry(name.clone()).or_default();
            if timeline.last().is_none_or(|w| w.status != status) {
                timeline.push(Written {
                    at,
                    rv: pod.metadata.resource_version.clone().unwrap_or_default(),
                    status,
                });
            }
            t.pods.insert(name, pod);
        }
    })
}

/// Follow plegd's generated statuses of the namespace's pods.
fn watch_plegd(shared: Shared) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = plegd_status_stream(NS).await;
        while let Some(response) = stream.message().await.expect("plegd's status stream") {
            let report = match response.item {
                Some(status_service_watch_response::Item::Report(report)) => report,
                // A deleted pod's report goes.
                Some(status_service_watch_response::Item::Removed(_)) => continue,
                _ => panic!("plegd's status stream lagged: {response:?}"),
            };
            let status: PodStatus = serde_json::from_str(&report.status_json).expect("a PodStatus");
            let json = report.status_json;
            shared
                .lock()
                .unwrap()
                .plegd
                .entry(report.pod.clone())
                .or_default()
                .push(Generated {
                    at: Instant::now(),
                    rv: report.resource_version,
                    json,
                    status,
                });
        }
    })
}

/// Each status plegd generated in the form kube-apiserver would serve it: through the cluster
/// binary's `pod-status-served` (Kubernetes' own `v1.PodStatus` and Go's encoding/json), so that
/// the judge compares plegd's values, not the two JSON encoders' habits (Go writes a struct field
/// such as `lastState` always, `{}` when empty, and leaves out an empty string under omitempty).
fn as_served(timelines: &mut Timelines) {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(support::apiserver::pod_status_served())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start pod-status-served");
    let lines: Vec<String> = timelines.plegd.values().flatten().map(|g| g.json.clone()).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for line in lines {
            stdin
                .write_all(line.as_bytes())
                .and_then(|_| stdin.write_all(b"\n"))
                .expect("write to pod-status-served");
        }
    });
    let mut served = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for g in timelines.plegd.values_mut().flatten() {
        let line = served
            .next()
            .expect("pod-status-served ended early")
            .expect("read from pod-status-served");
        g.status = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("pod-status-served wrote no PodStatus ({e}): {line}"));
    }
    writer.join().expect("the writer to pod-status-served");
    assert!(
        child.wait().expect("pod-status-served").success(),
        "pod-status-served failed"
    );
}

/// The judge's findings on plegd's status against the kubelet's, for `pod` (its spec says which
/// containers are probed).
fn findings(pod: Option<&Pod>, kubelet: &PodStatus, plegd: &PodStatus) -> Vec<judge::Finding> {
    let no_pod = Pod::default();
    judge::judge(pod.unwrap_or(&no_pod), kubelet, plegd)
}

fn ms(d: f64) -> String {
    format!("{d:.0}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plegd_in_shadow_mode_matches_the_kubelet() {
    let Some(cluster) = cluster().await else { return };
    cluster
        .install_with_args("shadow", &[], &["--status-report-form=generated"])
        .await;
    let node = cluster.node().await;
    let kubelet = cluster.kubelet_minor(&node).await;
    println!("beside the kubelet {kubelet} of node {node}");
    let pods = cluster.namespace(NS).await;
    let shared: Shared = Default::default();
    let kubelet_watch = watch_kubelet(pods.clone(), shared.clone());
    let plegd_watch = watch_plegd(shared.clone());

    let scenarios = battery(&node, kubelet);
    for s in &scenarios {
        pods.create(&PostParams::default(), &s.pod)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", s.pod.metadata.name.as_deref().unwrap_or_default()));
    }
    for s in scenarios.iter().filter(|s| s.delete_when.is_some()) {
        cluster.on_exit(&[
            "-n",
            NS,
            "patch",
            "pod",
            s.pod.metadata.name.as_deref().unwrap_or_default(),
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]);
    }
    let manifest = PathBuf::from(STATIC_PODS).join("plegd-parity-static.json");
    std::fs::write(&manifest, static_pod_manifest().to_string()).expect("write the static pod");
    let _static_pod = StaticPod(manifest);
    let mirror = format!("static-{node}");

    // Drive the battery until every pod has done what it is for.
    let started = Instant::now();
    let (mut gated, mut killed, mut debugged) = (false, false, false);
    let mut deleted = std::collections::BTreeSet::new();
    loop {
        let current = shared.lock().unwrap().pods.clone();
        let get = |name: &str| current.get(name);
        if !gated && get("readiness-gate").is_some_and(running) {
            let patch = json!({"status": {"conditions": [{"type": "plegd.test/gate", "status": "True"}]}});
            pods.patch_status("readiness-gate", &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .expect("set the readiness gate");
            gated = true;
        }
        for s in &scenarios {
            let name = s.pod.metadata.name.as_deref().unwrap_or_default();
            if let Some(when) = s.delete_when
                && !deleted.contains(name)
                && get(name).is_some_and(when)
            {
                pods.delete(name, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("delete {name}: {e}"));
                deleted.insert(name.to_owned());
            }
        }
        if !debugged && get("ephemeral").is_some_and(running) {
            let debug = json!({"spec": {"ephemeralContainers": [{
                "name": "debug", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo from the debug container; sleep 2; exit 0"],
            }]}});
            pods.patch_ephemeral_containers("ephemeral", &PatchParams::default(), &Patch::Strategic(debug))
                .await
                .expect("add an ephemeral container");
            debugged = true;
        }
        if !killed && let Some(p) = get("sandbox-dies").filter(|p| running(p) && restarts(p) == 0) {
            kill_sandbox(p.metadata.uid.as_deref().unwrap_or_default()).await;
            killed = true;
        }
        let pending: Vec<&str> = scenarios
            .iter()
            .filter(|s| !get(s.pod.metadata.name.as_deref().unwrap()).is_some_and(|p| (s.done)(p)))
            .map(|s| s.pod.metadata.name.as_deref().unwrap())
            .chain((!get(&mirror).is_some_and(running)).then_some("static"))
            .collect();
        if pending.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < BATTERY,
            "not done after {BATTERY:?}: {pending:?}\n{:#?}",
            pending
                .iter()
                .map(|n| (n, get(n).and_then(|p| p.status.clone())))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Every pod's last write settles.
    tokio::time::sleep(QUIET + REACTION).await;
    let end = Instant::now();
    kubelet_watch.abort();
    plegd_watch.abort();
    // The instances the node's runtime holds now (a removed one never comes back).
    let mut runtime = support::containerd::Containerd::at(PathBuf::from(CONTAINERD_SOCKET)).client;
    let present: std::collections::BTreeSet<String> = support::cluster::namespace_containers(&mut runtime, NS)
        .await
        .expect("the node's containers")
        .into_iter()
        .map(|c| format!("containerd://{}", c.id))
        .collect();

    let mut t = shared.lock().unwrap();
    as_served(&mut t);
    let mut failures = Vec::new();
    let mut report = String::from(
        "pod                      writes  same  plegd-first  lead-median-ms  lead-min-ms  lead-max-ms  settled  own-last\n",
    );
    let mut all_leads = Vec::new();
    // What plegd cannot know, with both values, once per pod and field.
    let mut unknowables = std::collections::BTreeSet::new();
    // Where plegd was ahead of a settled write, which the kubelet's next write caught up with.
    let mut ahead = std::collections::BTreeSet::new();
    for (name, writes) in &t.kubelet {
        let generated = t.plegd.get(name).map(Vec::as_slice).unwrap_or_default();
        let pod = t.pods.get(name);
        // Settled points.
        let mut settled = 0;
        for (i, w) in writes.iter().enumerate() {
            let until = writes.get(i + 1).map_or(end, |n| n.at);
            if until.duration_since(w.at) < QUIET {
                continue;
            }
            // plegd's status against this write: generated against its copy, or against a later
            // copy before the kubelet's next write, whose status is this write's (the watch sees
            // every status change; another update in between — the kubelet's DELETE of a finished
            // pod a finalizer holds, say — changes only metadata, and plegd's informer may hand
            // plegd that copy first).
            let next_rv = writes.get(i + 1).map(|n| n.rv.as_str());
            let Some(g) = generated
                .iter()
                .rfind(|g| against(&g.rv, &w.rv, next_rv) && g.at <= w.at + REACTION)
            else {
                failures.push(format!(
                    "{name}: no status of plegd's against the kubelet's write rv={}",
                    w.rv
                ));
                continue;
            };
            settled += 1;
            let (unknowable, knowable): (Vec<_>, Vec<_>) = findings(pod, &w.status, &g.status)
                .into_iter()
                .partition(|f| f.unknowable.is_some());
            for f in unknowable {
                unknowables.insert(format!("{name:<24} {f}"));
            }
            // plegd ahead: a write the kubelet made from a runtime read older than plegd's (its
            // sync busy creating containers, say: on a slow runtime a write can stay the newest
            // for seconds while the runtime has moved on). The kubelet's next write shows that
            // the runtime had moved — a container's id, state or restarts, or the pod's IPs —
            // and plegd, which read it later, is ahead. Latency, not a difference; printed. The
            // pod's last write has no such excuse.
            // Before 1.36 (RestartAllContainersOnContainerExits off) a kubelet takes a last state
            // only from an instance the runtime still holds; its container GC removes dead ones
            // (the newest of each container kept) once a minute, and a removal does not make it
            // sync. So its last write may name an instance the runtime no longer has, which it
            // drops at its next sync: plegd, reading the runtime after the GC, is ahead.
            let (collected, knowable): (Vec<_>, Vec<_>) = knowable
                .into_iter()
                .partition(|f| !kubelet.restart_all_containers() && names_collected_instance(f, &present));
            for f in &collected {
                ahead.insert(format!(
                    "{name:<24} rv={} {f} (the kubelet's container GC removed it)",
                    w.rv
                ));
            }
            let caught_up = !knowable.is_empty()
                && writes
                    .get(i + 1)
                    .is_some_and(|next| runtime_moved(&w.status, &next.status));
            if caught_up {
                for f in &knowable {
                    ahead.insert(format!("{name:<24} rv={} {f}", w.rv));
                }
            } else if !knowable.is_empty() {
                failures.push(format!(
                    "{name} rv={}: plegd differs from the kubelet:\n{}\nkubelet: {}\nplegd:   {}",
                    w.rv,
                    knowable.iter().map(|f| format!("  {f}")).collect::<Vec<_>>().join("\n"),
                    serde_json::to_string(&w.status).unwrap(),
                    serde_json::to_string(&g.status).unwrap(),
                ));
            }
        }
        if settled == 0 {
            failures.push(format!("{name}: never settled ({} writes)", writes.len()));
        }
        // A pod whose phase TerminatePod set: the kubelet never writes it again, and plegd keeps
        // its last status as it is (generated against it, it is the same, whatever it says). So
        // plegd must have come to the same status on its own, from the runtime, against an
        // earlier copy of the pod — condition transition times, each writer's own clock, aside.
        let own = |w: &Written| {
            generated.iter().any(|g| {
                g.rv != w.rv
                    && findings(pod, &w.status, &g.status)
                        .iter()
                        .filter(|f| f.unknowable.is_none())
                        .all(|f| f.path.ends_with("lastTransitionTime") || f.path.ends_with("lastProbeTime"))
            })
        };
        let last = writes.last().filter(|w| phase_by_terminate_pod(&w.status));
        let own_last = last.map(own);
        if own_last == Some(false) {
            let w = last.unwrap();
            let nearest = generated.iter().filter(|g| g.rv != w.rv).min_by_key(|g| {
                findings(pod, &w.status, &g.status)
                    .iter()
                    .filter(|f| f.unknowable.is_none())
                    .count()
            });
            failures.push(format!(
                "{name}: plegd never came to the kubelet's last status (rv={}) on its own; nearest:\n{}",
                w.rv,
                nearest.map_or_else(
                    || "  (plegd generated nothing else)".to_owned(),
                    |g| findings(pod, &w.status, &g.status)
                        .iter()
                        .filter(|f| f.unknowable.is_none())
                        .map(|f| format!("  {f}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            ));
        }
        // Transients: when plegd first generated what the kubelet wrote (timestamps of each
        // writer's own clock aside), between the write before and the write after.
        let mut leads = Vec::new();
        for (i, w) in writes.iter().enumerate().skip(1) {
            let from = writes[i - 1].at;
            let to = writes.get(i + 1).map_or(end, |n| n.at);
            let same = generated.iter().find(|g| {
                g.at >= from
                    && g.at < to
                    && findings(pod, &w.status, &g.status)
                        .iter()
                        .filter(|f| f.unknowable.is_none())
                        .all(|f| f.path.ends_with("lastTransitionTime") || f.path.ends_with("lastProbeTime"))
            });
            if let Some(g) = same {
                // Positive: plegd first.
                leads.push(signed_ms(w.at, g.at));
            }
        }
        all_leads.extend(&leads);
        let mut sorted = leads.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied();
        report.push_str(&format!(
            "{name:<24} {:>6}  {:>4}  {:>11}  {:>14}  {:>11}  {:>11}  {settled:>7}  {}\n",
            writes.len() - 1,
            leads.len(),
            leads.iter().filter(|l| **l > 0.0).count(),
            median.map_or("-".into(), ms),
            sorted.first().map_or("-".into(), |v| ms(*v)),
            sorted.last().map_or("-".into(), |v| ms(*v)),
            match own_last {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            },
        ));
    }
    all_leads.sort_by(f64::total_cmp);
    if !all_leads.is_empty() {
        report.push_str(&format!(
            "all: {} changes, plegd first in {}, median lead {} ms\n",
            all_leads.len(),
            all_leads.iter().filter(|l| **l > 0.0).count(),
            ms(all_leads[all_leads.len() / 2])
        ));
    }
    eprintln!("\nplegd beside the kubelet: who wrote each status first (lead > 0: plegd first)\n{report}");
    let _ = std::fs::write(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubelet-parity-transients.txt"),
        &report,
    );
    let mut unknown = String::from("fields only the kubelet can know, as each wrote them when settled:\n");
    for (kind, reason) in judge::UNKNOWABLE {
        unknown.push_str(&format!("  {kind}: {reason}\n"));
    }
    for line in &unknowables {
        unknown.push_str(&format!("{line}\n"));
    }
    unknown.push_str("plegd ahead of a settled write of the kubelet's, which its next write caught up with:\n");
    for line in &ahead {
        unknown.push_str(&format!("{line}\n"));
    }
    eprintln!("\n{unknown}");
    let _ = std::fs::write(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubelet-parity-unknowable.txt"),
        &unknown,
    );
    for name in scenarios
        .iter()
        .filter_map(|s| s.pod.metadata.name.as_deref())
        .chain([mirror.as_str()])
    {
        if !t.kubelet.contains_key(name) {
            failures.push(format!("{name}: the kubelet never wrote its status"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Whether `f` is a last state the kubelet wrote and plegd did not, naming an instance the runtime
/// no longer holds (`present`: the container ids it holds now).
fn names_collected_instance(f: &judge::Finding, present: &std::collections::BTreeSet<String>) -> bool {
    if !f.path.ends_with(".lastState.terminated") || f.plegd != "absent" {
        return false;
    }
    let kubelet: Value = serde_json::from_str(&f.kubelet).unwrap_or(Value::Null);
    kubelet["containerID"].as_str().is_some_and(|id| !present.contains(id))
}

/// Whether the kubelet's terminal phase is TerminatePod's: a status generated with a terminal
/// phase says so in ContainersReady (`PodFailed`, `PodCompleted`); TerminatePod copies one
/// generated before and sets only the phase (and containers that did not terminate), and the
/// kubelet never generates the pod's status again.
fn phase_by_terminate_pod(status: &PodStatus) -> bool {
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        && status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "ContainersReady")
            .is_some_and(|c| !matches!(c.reason.as_deref(), Some("PodFailed" | "PodCompleted")))
}

/// Whether the runtime moved between two statuses the kubelet wrote: a container's id, state or
/// restart count, or the pod's IPs, differ.
fn runtime_moved(before: &PodStatus, after: &PodStatus) -> bool {
    let runtime = |s: &PodStatus| {
        let containers: Vec<_> = s
            .container_statuses
            .iter()
            .chain(&s.init_container_statuses)
            .chain(&s.ephemeral_container_statuses)
            .flatten()
            .map(|c| {
                let state = c
                    .state
                    .as_ref()
                    .map(|st| (st.waiting.is_some(), st.running.is_some(), st.terminated.is_some()));
                (c.name.clone(), c.container_id.clone(), state, c.restart_count)
            })
            .collect();
        (containers, s.pod_ips.clone())
    };
    runtime(before) != runtime(after)
}

/// `kubelet` − `plegd`, in milliseconds: positive when plegd was first.
fn signed_ms(kubelet: Instant, plegd: Instant) -> f64 {
    if kubelet >= plegd {
        kubelet.duration_since(plegd).as_secs_f64() * 1000.0
    } else {
        -(plegd.duration_since(kubelet).as_secs_f64() * 1000.0)
    }
}

/// Kill the sandbox (pause) task of the pod `uid` in the cluster's containerd, under its running
/// containers.
async fn kill_sandbox(uid: &str) {
    let ctr = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("ctr")
            .args(["-a", CONTAINERD_SOCKET, "-n", "k8s.io"])
            .args(&args)
            .output()
            .await
            .expect("ctr");
        assert!(
            out.status.success(),
            "ctr {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let filter = format!("labels.\"io.kubernetes.pod.uid\"=={uid},labels.\"io.cri-containerd.kind\"==sandbox");
    let ids = ctr(vec!["containers".into(), "ls".into(), "-q".into(), filter]).await;
    let id = ids
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no sandbox of pod {uid}"))
        .to_owned();
    ctr(vec!["tasks".into(), "kill".into(), "-s".into(), "SIGKILL".into(), id]).await;
}

#[test]
fn a_last_state_of_a_collected_instance_is_told_apart() {
    let finding = |path: &str, kubelet: &str, plegd: &str| judge::Finding {
        path: path.into(),
        kubelet: kubelet.into(),
        plegd: plegd.into(),
        unknowable: None,
    };
    let present: std::collections::BTreeSet<String> = ["containerd://held".to_owned()].into();
    let last = r#"{"containerID":"containerd://gone","exitCode":1}"#;
    assert!(names_collected_instance(
        &finding("containerStatuses[main].lastState.terminated", last, "absent"),
        &present
    ));
    let held = r#"{"containerID":"containerd://held","exitCode":1}"#;
    assert!(
        !names_collected_instance(
            &finding("containerStatuses[main].lastState.terminated", held, "absent"),
            &present
        ),
        "an instance the runtime holds: plegd should have shown it"
    );
    assert!(
        !names_collected_instance(
            &finding("containerStatuses[main].lastState.terminated", last, held),
            &present
        ),
        "plegd shows another: a difference"
    );
    assert!(!names_collected_instance(
        &finding("containerStatuses[main].state.terminated", last, "absent"),
        &present
    ));
}
