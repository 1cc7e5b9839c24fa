//! A real Kubernetes cluster for the end-to-end suite (tests/cluster_e2e.rs): by default the
//! one-node cluster of tests/cluster/cluster.sh (kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubelet and etcd built from Kubernetes' own code, on this machine); any other
//! script with the same commands (`start --plegd DIR`, `kubectl ARGS...`, `restart COMPONENT`,
//! `remove-plegd`) in `PLEGD_CLUSTER_SCRIPT`, such as deploy/kind/e2e.sh's for a kind cluster.
//!
//! The suite runs when `PLEGD_CLUSTER_E2E=1` (tests/run.sh sets it and names in `PLEGD_BINARY` the
//! plegd binary its tests built; tests/cluster/cluster.sh installs target/release/plegd without
//! it); without it every test says loudly that it was skipped. The
//! cluster is one per machine: the tests take a lock (one at a time) and leave it running for the
//! next; `cluster.sh stop` removes it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// The condition plegd writes in conditions mode.
pub const CONDITION: &str = "plegd.io/ContainersRunning";
/// The image every test pod runs (imported offline into the cluster's containerd).
pub const IMAGE: &str = "plegd.test/busybox:1";
/// plegd's namespace and service account, as deploy/ names them.
pub const NAMESPACE: &str = "plegd-system";
/// Where tests/cluster/cluster.sh keeps what runs on the node: the kubelet's static pod directory
/// and the cluster's containerd.
pub const STATIC_PODS: &str = "/var/lib/plegd-test/cluster/run/manifests";
/// The cluster's kube-apiserver audit log (every request at the Metadata level: who, what, when
/// received and when answered).
pub const AUDIT_LOG: &str = "/var/lib/plegd-test/cluster/run/audit.log";
pub const CONTAINERD_SOCKET: &str = "/var/lib/plegd-test/cluster/containerd/containerd.sock";

/// The containers of the cluster's pods in `namespace`, as the node's containerd lists them (the
/// kubelet's namespace label selects them): for benches that watch the runtime beside the apiserver.
pub async fn namespace_containers(
    client: &mut k8s_cri::v1::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    namespace: &str,
) -> Result<Vec<k8s_cri::v1::Container>, tonic::Status> {
    let filter = k8s_cri::v1::ContainerFilter {
        label_selector: [("io.kubernetes.pod.namespace".to_owned(), namespace.to_owned())].into(),
        ..Default::default()
    };
    let request = k8s_cri::v1::ListContainersRequest { filter: Some(filter) };
    Ok(client.list_containers(request).await?.into_inner().containers)
}

pub struct Cluster {
    script: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    /// `kubectl` arguments run when the test ends, passed or not (what it made goes).
    cleanups: std::sync::Mutex<Vec<Vec<String>>>,
    /// Held while the test runs: one test at a time on the cluster.
    _lock: std::fs::File,
}

fn repo() -> PathBuf {
    PathBuf::from(crate::REPO)
}

/// The cluster, or None (said loudly) when the suite is not asked for.
pub async fn cluster() -> Option<Cluster> {
    if std::env::var("PLEGD_CLUSTER_E2E").map_or(true, |v| v != "1") {
        eprintln!(
            "\n!!!!!!!! CLUSTER END-TO-END TESTS SKIPPED: set PLEGD_CLUSTER_E2E=1 (tests/run.sh does) to run them on a real cluster !!!!!!!!\n"
        );
        return None;
    }
    let script = std::env::var_os("PLEGD_CLUSTER_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("tests/cluster/cluster.sh"));
    let lock_path = std::env::temp_dir().join("plegd-cluster-e2e.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .expect("the suite's lock file");
    // One test at a time: each installs what it needs and restarts what it tests. The longest
    // test takes a few minutes; a holder past 30 minutes is stuck.
    let deadline = std::time::Instant::now() + Duration::from_secs(30 * 60);
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "another cluster test held {} for 30 minutes",
            lock_path.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let out = run(Command::new("bash").arg(&script).arg("start"));
    let kubeconfig = PathBuf::from(last_line(&out));
    let client = client_from(&kubeconfig).await;
    let cluster = Cluster {
        script,
        kubeconfig,
        client,
        cleanups: Default::default(),
        _lock: lock,
    };
    // Node objects an interrupted test left: the DaemonSet would wait for a pod on each.
    cluster
        .kubectl(&["delete", "nodes", "-l", E2E_LABEL, "--ignore-not-found"])
        .await;
    Some(cluster)
}

/// The label of every object the tests make outside their namespaces.
pub const E2E_LABEL: &str = "plegd.test/e2e";

impl Drop for Cluster {
    fn drop(&mut self) {
        let cleanups = std::mem::take(&mut *self.cleanups.lock().unwrap_or_else(|e| e.into_inner()));
        for args in cleanups.into_iter().rev() {
            let _ = Command::new("bash")
                .arg(&self.script)
                .arg("kubectl")
                .args(&args)
                .output();
        }
    }
}

/// The last line of `out`'s standard output, trimmed: what the cluster scripts print last.
pub fn last_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `command`, which must succeed; its output.
fn run(command: &mut Command) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}

impl Cluster {
    /// plegd installed as `kubectl apply -k` installs deploy/`overlay` with `components` (names
    /// under deploy/components) added; returns when its DaemonSet is rolled out. Another install
    /// than the one running replaces it.
    pub async fn install(&self, overlay: &str, components: &[&str]) {
        self.install_with_objects(overlay, components, &[]).await;
    }

    /// [`Cluster::install`] with `objects` of one's own in the install (a Secret it mounts, say),
    /// applied with it and removed with it.
    pub async fn install_with_objects(&self, overlay: &str, components: &[&str], objects: &[Value]) {
        self.install_with(overlay, components, objects, &[]).await;
    }

    /// [`Cluster::install`] with `args` added to plegd's command line (`--status-report-form=generated`).
    pub async fn install_with_args(&self, overlay: &str, components: &[&str], args: &[&str]) {
        self.install_with(overlay, components, &[], args).await;
    }

    async fn install_with(&self, overlay: &str, components: &[&str], objects: &[Value], args: &[&str]) {
        let root = repo().join(format!(
            "target/tmp/cluster-install-{overlay}-{}{}",
            components.join("-"),
            if args.is_empty() { "" } else { "-args" }
        ));
        let dir = super::manifests::kustomization(&root, overlay, components);
        if !args.is_empty() {
            let ops: Vec<Value> = args
                .iter()
                .map(
                    |a| serde_json::json!({"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": a}),
                )
                .collect();
            let patch = serde_json::json!([{"target": {"kind": "DaemonSet", "name": "plegd"}, "patch": Value::Array(ops).to_string()}]);
            let mut kustomization = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
            kustomization.push_str(&format!("patches: {patch}\n"));
            std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();
        }
        if !objects.is_empty() {
            let yaml: Vec<String> = objects.iter().map(|o| serde_json::to_string(o).unwrap()).collect();
            std::fs::write(dir.join("objects.yaml"), yaml.join("\n---\n")).unwrap();
            let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap();
            std::fs::write(
                dir.join("kustomization.yaml"),
                kustomization.replacen("resources:\n", "resources:\n  - objects.yaml\n", 1),
            )
            .unwrap();
        }
        self.script(&["start", "--plegd", &dir.display().to_string()]).await;
    }

    /// The cluster script with `args`, which must succeed; its standard output.
    async fn script(&self, args: &[&str]) -> String {
        self.script_with(args, &[]).await
    }

    /// [`Self::script`] with variables `env` set for it.
    async fn script_with(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let script = self.script.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let out = tokio::task::spawn_blocking(move || run(Command::new("bash").arg(script).args(args).envs(env)))
            .await
            .expect("the cluster script's task");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// No plegd on the cluster (its install removed, if any).
    pub async fn remove_plegd(&self) {
        self.script(&["remove-plegd"]).await;
    }

    /// `helm ARGS` as the cluster's admin, with this checkout's plegd image in the node's
    /// containerd and the chart's objects moved onto the cluster's layout as `install` moves an
    /// overlay's (a post-renderer); install and upgrade use that image. Its standard output.
    pub async fn helm(&self, args: &[&str]) -> String {
        self.script(&[&["helm"], args].concat()).await
    }

    /// [`Self::helm`] with the Helm 3 still tested ([`crate::manifests::HELM_3`]).
    pub async fn helm_3(&self, args: &[&str]) -> String {
        self.script_with(
            &[&["helm"], args].concat(),
            &[("PLEGD_HELM_VERSION", crate::manifests::HELM_3)],
        )
        .await
    }

    /// `kubectl ARGS` as the cluster's admin; its standard output.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        self.script(&[&["kubectl"], args].concat()).await
    }

    /// The Prometheus operator's CRDs of the kinds in the YAML file `objects` (from the
    /// operator's Go module), installed and established.
    pub async fn install_operator_crds(&self, objects: &std::path::Path) {
        self.script(&["install-crds", &objects.display().to_string()]).await;
    }

    /// An image `image` of the host's `binary` (and the libraries it loads) in the node's
    /// containerd, run as `/usr/local/bin/<its name>`.
    pub async fn import_binary(&self, binary: &str, image: &str) {
        self.script(&["import-binary", binary, image]).await;
    }

    /// `restart COMPONENT` (containerd, kubelet, kube-apiserver, etcd, ...).
    pub async fn restart(&self, component: &str) {
        self.script(&["restart", component]).await;
    }

    /// etcd's history compacted to its newest revision.
    pub async fn compact(&self) {
        self.script(&["compact"]).await;
    }

    /// plegd's pods (one per node with a kubelet).
    pub async fn plegd_pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default().labels("app.kubernetes.io/name=plegd"))
            .await
            .expect("list plegd's pods")
            .items
    }

    /// The node whose kubelet runs plegd's first pod: where the tests run theirs.
    pub async fn node(&self) -> String {
        let pods = self.plegd_pods().await;
        let pod = pods.first().expect("plegd runs on a node");
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("plegd's pod is bound")
    }

    /// The minor of the kubelet on `node`, as its Node reports it: the status plegd generates there.
    pub async fn kubelet_minor(&self, node: &str) -> plegd::status::generate::KubeletMinor {
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(self.client.clone());
        let node = nodes.get(node).await.unwrap_or_else(|e| panic!("node {node}: {e}"));
        let version = node
            .status
            .and_then(|s| s.node_info)
            .map(|i| i.kubelet_version)
            .expect("the node reports its kubelet's version");
        let (minor, fit) = plegd::status::generate::KubeletMinor::of_version(&version)
            .unwrap_or_else(|e| panic!("the node's kubelet version: {e}"));
        assert_eq!(
            fit,
            plegd::status::generate::Fit::Exact,
            "a kubelet {version} plegd knows"
        );
        minor
    }

    /// Run `kubectl ARGS` when the test ends, passed or not.
    pub fn on_exit(&self, args: &[&str]) {
        self.cleanups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(args.iter().map(|a| a.to_string()).collect());
    }

    /// A namespace of the test's own, made anew (an earlier run's removed first), removed when the
    /// test ends.
    pub async fn namespace(&self, name: &str) -> Api<Pod> {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        if namespaces.get_opt(name).await.expect("get namespace").is_some() {
            let _ = namespaces.delete(name, &DeleteParams::default()).await;
            super::wait_for(&format!("namespace {name} gone"), Duration::from_secs(120), || {
                let namespaces = namespaces.clone();
                async move { namespaces.get_opt(name).await.ok().flatten().is_none() }
            })
            .await;
        }
        let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        self.on_exit(&["delete", "namespace", name, "--wait=false", "--ignore-not-found"]);
        // The service account controller makes `default` in it; pods wait for it.
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), name);
        super::wait_for(
            "the namespace's default service account",
            Duration::from_secs(60),
            || {
                let accounts = accounts.clone();
                async move { accounts.get_opt("default").await.ok().flatten().is_some() }
            },
        )
        .await;
        Api::namespaced(self.client.clone(), name)
    }

    /// The API token the kubelet mounted into plegd's pod `plegd` (the DaemonSet's projected
    /// `api-token` volume), read where the kubelet writes it on the node (the cluster script's
    /// `mounted-token`), and its claims.
    pub async fn mounted_plegd_token(&self, plegd: &Pod) -> (String, Value) {
        let uid = plegd.metadata.uid.as_deref().expect("plegd's pod has a uid");
        let token = self.script(&["mounted-token", uid, "api-token"]).await;
        let payload = token.split('.').nth(1).expect("a JWT");
        use base64::Engine as _;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .expect("a JWT's payload is base64url");
        (
            token.trim().to_owned(),
            serde_json::from_slice(&claims).expect("a JWT's claims are JSON"),
        )
    }

    /// A token of plegd's service account, bound to `kind` (Pod or Node) `name`, as TokenRequest
    /// issues it (the node-name claim plegd's admission policy checks comes with it).
    pub async fn plegd_token(&self, kind: &str, name: &str) -> String {
        self.kubectl(&[
            "-n",
            NAMESPACE,
            "create",
            "token",
            "plegd",
            "--bound-object-kind",
            kind,
            "--bound-object-name",
            name,
            "--duration",
            "1h",
        ])
        .await
        .trim()
        .to_owned()
    }

    /// A kubeconfig in `dir` for the cluster's apiserver with `token`.
    pub fn kubeconfig_with_token(&self, dir: &Path, token: &str) -> PathBuf {
        let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        kc["users"] = json!([{"name": "token", "user": {"token": token}}]);
        let context = kc["current-context"].as_str().unwrap().to_owned();
        for c in kc["contexts"].as_array_mut().unwrap() {
            if c["name"] == context.as_str() {
                c["context"]["user"] = json!("token");
            }
        }
        // The admin kubeconfig may name its CA by path; a path stays valid.
        let path = dir.join("token.kubeconfig");
        std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
        path
    }
}

/// A pod on `node` that runs `script` in the test image, never restarted.
pub fn pod(name: &str, node: &str, script: &str) -> Pod {
    pod_running(name, node, IMAGE, &["sh", "-c", script], &[])
}

/// A pod on `node` that runs `command` in `image` (a local one: never pulled), with the
/// environment `env` (name, value), never restarted.
pub fn pod_running(name: &str, node: &str, image: &str, command: &[&str], env: &[(&str, &str)]) -> Pod {
    let env: Vec<Value> = env.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": command,
                "env": env,
            }],
        },
    }))
    .unwrap()
}

/// The status condition `kind` of `pod`, if any.
pub fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// The API socket of the DaemonSet's plegd as the node reaches it: `/run/plegd/plegd.sock` in the
/// pod is a memory volume of the pod's own, so from the node it is found through the process'
/// root (`/proc/PID/root/run/plegd/plegd.sock`), as docs/operating.md tells a node's admin. The
/// plegd in a container, not one a test runs on the node itself: its root is not the node's.
pub async fn plegd_api_socket() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let node_root = std::fs::metadata("/").expect("/");
    let mut found = None;
    crate::wait_until(
        "the DaemonSet's plegd and its API socket",
        Duration::from_secs(120),
        || {
            found = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .find_map(|entry| {
                    let dir = entry.path();
                    let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
                    let root = std::fs::metadata(dir.join("root")).ok()?;
                    let socket = dir.join("root/run/plegd/plegd.sock");
                    let in_container = (root.dev(), root.ino()) != (node_root.dev(), node_root.ino());
                    (comm.trim() == "plegd" && in_container && socket.exists()).then_some(socket)
                });
            found.is_some()
        },
    )
    .await;
    found.expect("found")
}

/// The generated statuses of the namespace's pods from the DaemonSet's plegd: its StatusService,
/// what `plegd status` follows (`--status-report-form=generated`).
pub async fn plegd_status_stream(namespace: &str) -> tonic::Streaming<plegd::observe::api::StatusServiceWatchResponse> {
    use plegd::observe::api::StatusServiceWatchRequest;
    use plegd::observe::api::status_service_client::StatusServiceClient;
    let options = plegd::runtime::CriConfig::default();
    let channel = plegd::runtime::unix_channel(
        &plegd_api_socket().await,
        options.connect_timeout,
        options.backoff.clone(),
        None,
    );
    let request = StatusServiceWatchRequest {
        namespace: namespace.into(),
        pod: String::new(),
    };
    let stream = StatusServiceClient::new(channel).watch(request).await;
    stream.expect("plegd's StatusService").into_inner()
}
