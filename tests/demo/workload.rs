//! The demo's workload (deploy/demo.sh). Pods are driven through CRI as a kubelet would drive them:
//! one that keeps running (and a sidecar that is stopped), one that completes, one whose container
//! fails and is restarted twice, one that is OOM-killed; then every pod is deleted. Each pod is first
//! created in the apiserver (the test apiserver built from Kubernetes' own code, which demo.sh
//! starts), bound to node `demo-node`, and its sandbox is run with the uid the apiserver gave it —
//! so that the `plegd run --status-mode full` demo.sh starts writes their status, which
//! `kubectl get pods --watch` (also started by demo.sh) follows. What it does goes to stderr
//! (`workload:` lines), beside kubectl's; the lifecycle events of `plegd watch` are on stdout.
//!
//!     cargo run -p plegd-demo --bin workload -- CRI_SOCKET ADMIN_KUBECONFIG

// The test support's containerd client, as source: the demo builds with plegd's own dependencies
// only (its Cargo.toml), not with the test support crate's.
#[allow(dead_code)]
#[path = "../support/containerd.rs"]
mod containerd;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use containerd::{Containerd, TEST_NAMESPACE, TestPod, attempt};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use serde_json::json;

const NODE: &str = "demo-node";

/// Dim text for the workload's own lines, only for a person at a terminal (NO_COLOR honoured).
fn dim(text: &str) -> String {
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    if colour {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

fn say(what: &str) {
    eprintln!("{}", dim(&format!("  workload: {what}")));
}

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A client of the apiserver, from a kubeconfig; exits with a clear line when it cannot be read.
async fn client(path: &str) -> kube::Client {
    let config = match Kubeconfig::read_from(path) {
        Ok(kc) => kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await,
        Err(e) => Err(e),
    };
    match config.map_err(kube::Error::from).and_then(kube::Client::try_from) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("workload: kubeconfig {path}: {e}");
            std::process::exit(1);
        }
    }
}

/// The pods' side in the apiserver.
struct Apiserver {
    pods: Api<DynamicObject>,
}

impl Apiserver {
    async fn new(client: kube::Client) -> Self {
        let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &resource("Namespace", "namespaces"));
        let namespace: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEST_NAMESPACE}}))
        .expect("a namespace");
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create namespace {TEST_NAMESPACE}: {e}"),
        }
        Self {
            pods: Api::namespaced_with(client, TEST_NAMESPACE, &resource("Pod", "pods")),
        }
    }

    /// The pod's object, bound to the demo node; then its sandbox, with the apiserver's uid.
    async fn bind(
        &self,
        cd: &Containerd,
        name: &str,
        containers: &[&str],
        restart_policy: &str,
        host_network: bool,
    ) -> TestPod {
        let pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": TEST_NAMESPACE},
            "spec": {"nodeName": NODE, "restartPolicy": restart_policy, "hostNetwork": host_network,
                     "containers": containers.iter().map(|c| json!({"name": c, "image": containerd::IMAGE})).collect::<Vec<_>>()}
        }))
        .expect("a pod");
        let created = self
            .pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {TEST_NAMESPACE}/{name}: {e}"));
        let uid = created.metadata.uid.expect("the apiserver gives every pod a uid");
        cd.run_pod_as(name, TEST_NAMESPACE, &uid, host_network, None).await
    }

    /// Delete as a user does (30 s of grace), and say what the apiserver did with it: the answer
    /// is the object either way, so look right after — a pod still running is not gone yet.
    async fn delete(&self, name: &str) {
        if let Err(e) = self.pods.delete(name, &DeleteParams::default().grace_period(30)).await {
            say(&format!("  {name}: delete failed: {e}"));
            return;
        }
        match self.pods.get_opt(name).await {
            Ok(None) => say(&format!(
                "  {name}: removed by the apiserver at once (it had already finished)"
            )),
            Ok(Some(_)) => say(&format!(
                "  {name}: marked deleted; plegd removes it once its containers have stopped and its final status is written"
            )),
            Err(e) => say(&format!("  {name}: {e}")),
        }
    }

    /// The pods of `names` still in the apiserver.
    async fn left(&self, names: &[&str]) -> Vec<String> {
        let mut left = Vec::new();
        for name in names {
            if !matches!(self.pods.get_opt(name).await, Ok(None)) {
                left.push(format!("{TEST_NAMESPACE}/{name}"));
            }
        }
        left
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(kubeconfig)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: workload CRI_SOCKET ADMIN_KUBECONFIG");
        std::process::exit(2);
    };
    let cd = Containerd::at(socket.into());
    let api = Apiserver::new(client(kubeconfig).await).await;

    say("pod plegd-test/web: a container that keeps running");
    let web = api.bind(&cd, "web", &["server", "sidecar"], "Always", false).await;
    cd.run_container(&web, "server", "trap 'exit 0' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;

    say("pod plegd-test/job: a container that completes after 2 s");
    let job = api.bind(&cd, "job", &["batch"], "Never", true).await;
    cd.run_container(&job, "batch", "sleep 2; echo done").await;
    pause(1500).await;

    say("pod plegd-test/crashy: a container that fails (exit 1) and is restarted twice");
    let crashy = api.bind(&cd, "crashy", &["worker"], "Always", true).await;
    let mut previous = None;
    for n in 0..3 {
        if n > 0 {
            say(&format!("  restarting worker (attempt {n})"));
        }
        let id = cd
            .create_container_from(&crashy, "worker", attempt(n, "sleep 1; exit 1"))
            .await;
        cd.start_container(&id).await;
        pause(2500).await;
        // The kubelet keeps the last dead instance for its lastState, and removes older ones.
        if let Some(old) = previous.replace(id) {
            cd.remove_container(&old).await;
        }
    }

    say("pod plegd-test/hog: a container over its 32 MiB memory limit (OOM-killed)");
    let hog = api.bind(&cd, "hog", &["hog"], "Never", true).await;
    let id = cd.create_container_from(&hog, "hog", containerd::memory_hog()).await;
    cd.start_container(&id).await;
    pause(2500).await;

    say("pod plegd-test/web: its sidecar starts, then is stopped (SIGTERM; it exits 143)");
    let sidecar = cd
        .run_container(&web, "sidecar", "trap 'exit 143' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;
    cd.stop_container(&sidecar, 5).await;
    pause(2000).await;

    say("deleting every pod, then stopping and removing its containers and sandbox");
    for pod in [&web, &job, &crashy, &hog] {
        api.delete(&pod.name).await;
        cd.cleanup(pod).await;
    }
    let names = ["web", "job", "crashy", "hog"];
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut left = api.left(&names).await;
    while !left.is_empty() && Instant::now() < deadline {
        pause(200).await;
        left = api.left(&names).await;
    }
    if left.is_empty() {
        say("every pod is gone from the apiserver");
    } else {
        say(&format!("still in the apiserver after 15 s: {}", left.join(", ")));
        std::process::exit(1);
    }
    say("done");
}
