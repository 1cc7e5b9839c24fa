//! A test apiserver built from Kubernetes' own code (tests/apiserver/: k8s.io/apiserver 1.36 on
//! etcd), one per test: its own etcd (data on tmpfs) and server on free loopback ports, started and
//! stopped with the test. Everything a test checks of the apiserver — list, watch, resourceVersions,
//! 410 Gone after compaction, field selectors, strategic merge patches, uid preconditions, graceful
//! deletion, admission, RBAC, the typed round trip of what is stored — is the real machinery's.
//!
//! Identities (bearer tokens): `admin` (system:masters), plegd's service account with the
//! node-name claim of each node in [`Options::plegd_nodes`], and a kubelet (`system:node:<node>`).
//! RBAC comes from [`Options::rbac`] (deploy/'s RBAC files by default). The server records every
//! request ([`Apiserver::requests`]) and can inject the few faults it cannot produce by itself
//! ([`Apiserver::set_delay`] and friends, tests/apiserver/testhooks.go); a restart
//! ([`Apiserver::set_down`]) and compaction ([`Apiserver::compact`]) are real.
//!
//! The server binary is built by `tests/apiserver/apiserver.sh build` (tests/run.sh does it first;
//! a test builds it itself when it is missing).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::request_info;

pub const NODE_CLAIM: &str = "authentication.kubernetes.io/node-name";
pub const PLEGD_USER: &str = "system:serviceaccount:plegd-system:plegd";

/// One request as the server saw it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Who made it: the user its bearer token stands for.
    pub user: String,
    pub status: u16,
    /// When its status line was ready.
    #[serde(rename = "atNanos", deserialize_with = "nanos")]
    pub at: SystemTime,
}

fn nanos<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
    let n: u64 = serde::Deserialize::deserialize(d)?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
}

impl Logged {
    /// What RBAC authorizes this request as ([`request_info::authorization`]).
    pub fn authorization(&self) -> Option<String> {
        request_info::authorization(&self.method, &self.path, &self.query)
    }
}

/// The faults the server injects (tests/apiserver/testhooks.go).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Faults {
    delay_millis: u64,
    status_patch500: bool,
    fail_watches: bool,
    status_patch_conflicts: u32,
}

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes whose plegd (the service account, its token bound to that node) gets a token.
    pub plegd_nodes: Vec<String>,
    /// RBAC manifests, relative to the repository.
    pub rbac: Vec<String>,
    /// More flags for the server (e.g. `--max-mutating-requests-inflight=1`).
    pub args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            plegd_nodes: Vec::new(),
            // Every RBAC file of deploy/ (manifests::RBAC_FILES; this file is also built into
            // the benches, which do not have that module).
            rbac: [
                "deploy/base/rbac.yaml",
                "deploy/components/status-writes/rbac-status.yaml",
                "deploy/full/rbac-full-mode.yaml",
                "deploy/components/events/rbac-events.yaml",
                "deploy/components/pod-monitor/metrics-reader.yaml",
                "tests/apiserver/rbac-kubelet.yaml",
            ]
            .map(str::to_owned)
            .into(),
            args: Vec::new(),
        }
    }
}

/// Who a kubeconfig speaks as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Admin,
    /// plegd's service account, with the node-name claim of this node.
    Plegd(String),
    /// plegd's service account with a token bound to no node (no node-name claim).
    PlegdWithoutNodeClaim,
    Kubelet,
    /// The service account deploy/components/pod-monitor gives Prometheus to read /metrics with.
    MetricsReader,
}

pub struct Apiserver {
    dir: tempfile::TempDir,
    port: u16,
    etcd_port: u16,
    etcd: Mutex<Option<Child>>,
    server: Mutex<Option<Child>>,
    server_args: Vec<String>,
    /// Token → identity; new plegd identities are added as tests ask for them (the server reads
    /// its token file again when it changes).
    tokens: Mutex<BTreeMap<String, Identity>>,
    client: kube::Client,
    /// Every version of every pod, as a watch from the start saw them (resourceVersion order).
    history: Arc<Mutex<Vec<Value>>>,
    watch: tokio::task::JoinHandle<()>,
    faults: Mutex<Faults>,
    /// The request log of the server's earlier runs (before a restart).
    earlier_requests: Mutex<Vec<Logged>>,
    /// Namespaces known to exist.
    namespaces: Mutex<std::collections::BTreeSet<String>>,
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        self.watch.abort();
        for child in [&self.server, &self.etcd] {
            if let Some(mut c) = lock(child).take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn packages_dir() -> PathBuf {
    std::env::var_os("PLEGD_PACKAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/plegd-test"))
}

/// The server binary, built first when it is missing or older than its sources.
fn server_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let status = Command::new("bash")
                .arg(repo().join("tests/apiserver/apiserver.sh"))
                .arg("build")
                .stdout(Stdio::null())
                .status()
                .expect("run tests/apiserver/apiserver.sh build");
            assert!(
                status.success(),
                "building the test apiserver failed: run `bash tests/apiserver/apiserver.sh build` to see why"
            );
            packages_dir().join("apiserver/build/bin/plegd-test-apiserver")
        })
        .clone()
}

/// kubectl 1.36, from the packages tests/apiserver/apiserver.sh unpacks.
pub fn kubectl() -> PathBuf {
    server_binary();
    packages_dir().join("apiserver/root/usr/bin/kubectl")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .expect("log file")
}

impl Apiserver {
    /// A server with the default options.
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        // A free port is free when asked for, not necessarily when the server binds it: another
        // test's server may take it between the two (then this one fails to bind, and its client
        // meets the other's certificate). Such a start is tried again on other ports.
        for attempt in 1.. {
            let me = Self::start_once(&options).await;
            match me.try_wait_ready(Duration::from_secs(60)).await {
                Ok(()) => return me,
                Err(why) if attempt < 3 && me.lost_its_port(&why) => {
                    eprintln!("test apiserver: port taken by another ({why}); starting again on other ports");
                }
                Err(why) => panic!(
                    "the test apiserver did not become ready in 60s: {why}\n{}",
                    me.log_tail()
                ),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Whether a start failed because its port was someone else's.
    fn lost_its_port(&self, why: &str) -> bool {
        why.contains("InvalidCertificate") || self.log_tail().contains("address already in use")
    }

    async fn start_once(options: &Options) -> Self {
        let binary = server_binary();
        let etcd = packages_dir().join("apiserver/root/usr/bin/etcd");
        let dir = tempfile::Builder::new()
            .prefix("plegd-apiserver-")
            .tempdir_in(if Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            })
            .expect("state dir");
        let (port, etcd_port, peer_port) = (free_port(), free_port(), free_port());
        let etcd_child = Command::new(&etcd)
            .args(["--name", "plegd-test", "--log-level", "warn"])
            .arg("--data-dir")
            .arg(dir.path().join("etcd"))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--advertise-client-urls", &format!("http://127.0.0.1:{etcd_port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer_port}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer_port}"),
            ])
            .args(["--initial-cluster", &format!("plegd-test=http://127.0.0.1:{peer_port}")])
            .stdout(Stdio::null())
            .stderr(log_file(dir.path(), "etcd.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start etcd {}: {e}", etcd.display()));

        let mut tokens = BTreeMap::new();
        let admin = token();
        tokens.insert(admin.clone(), Identity::Admin);
        tokens.insert(token(), Identity::Kubelet);
        for node in &options.plegd_nodes {
            tokens.insert(token(), Identity::Plegd(node.clone()));
        }
        write_tokens(dir.path(), &tokens);

        let rbac: Vec<String> = options
            .rbac
            .iter()
            .map(|f| repo().join(f).display().to_string())
            .collect();
        let mut server_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", dir.path().display()),
            format!("--token-file={}", dir.path().join("tokens.json").display()),
            format!("--rbac={}", rbac.join(",")),
        ];
        server_args.extend(options.args.iter().cloned());
        let server = Self::spawn_server(&binary, &server_args, dir.path(), &Faults::default());
        let ca = dir.path().join("apiserver.crt");
        let admin_kc = write_kubeconfig(dir.path(), "admin", port, &admin, &ca);
        let client = client_for(&admin_kc, &ca).await;
        let history = Arc::new(Mutex::new(Vec::new()));
        Self {
            port,
            etcd_port,
            etcd: Mutex::new(Some(etcd_child)),
            server: Mutex::new(Some(server)),
            server_args,
            tokens: Mutex::new(tokens),
            client: client.clone(),
            watch: tokio::spawn(record_pods(client, history.clone())),
            history,
            faults: Mutex::default(),
            earlier_requests: Mutex::default(),
            namespaces: Mutex::default(),
            dir,
        }
    }

    /// Start the server with `faults` in force from its first request.
    fn spawn_server(binary: &Path, args: &[String], dir: &Path, faults: &Faults) -> Child {
        Command::new(binary)
            .args(args)
            .env("PLEGD_TEST_FAULTS", serde_json::to_string(faults).unwrap())
            .stdout(Stdio::null())
            .stderr(log_file(dir, "apiserver.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()))
    }

    async fn wait_ready(&self, timeout: Duration) {
        if let Err(why) = self.try_wait_ready(timeout).await {
            panic!(
                "the test apiserver did not become ready in {timeout:?}: {why}\n{}",
                self.log_tail()
            );
        }
    }

    async fn try_wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let ready = self
                .client
                .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
                .await;
            // The namespaces a fresh apiserver creates come with readiness (a post-start hook).
            match ready {
                Ok(_) => return Ok(()),
                // Another server's certificate: no use waiting.
                Err(e) if format!("{e:?}").contains("InvalidCertificate") => return Err(format!("{e:?}")),
                Err(e) if Instant::now() >= deadline => return Err(format!("{e:?}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The end of the server's and etcd's logs, for failure messages.
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        for name in ["apiserver.log", "etcd.log"] {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- {name} ---\n{}\n",
                lines[lines.len().saturating_sub(20)..].join("\n")
            ));
        }
        out
    }

    /// The server's port on the loopback.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// A kubeconfig as `admin` (system:masters).
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        self.kubeconfig_as(dir, &Identity::Admin)
    }

    /// A kubeconfig as `identity`, which the server must know (plegd's: a node of
    /// [`Options::plegd_nodes`]).
    pub fn kubeconfig_as(&self, dir: &Path, identity: &Identity) -> PathBuf {
        self.kubeconfig_through(dir, identity, self.port)
    }

    /// A kubeconfig as `identity` that reaches the server through `port` on the loopback (a
    /// [`super::proxy::Proxy`] in front of it).
    pub fn kubeconfig_through(&self, dir: &Path, identity: &Identity, port: u16) -> PathBuf {
        let token = self.token_for(identity);
        let name = match identity {
            Identity::Admin => "admin".to_owned(),
            Identity::Plegd(node) => format!("plegd-{node}"),
            Identity::PlegdWithoutNodeClaim => "plegd-unbound".to_owned(),
            Identity::Kubelet => "kubelet".to_owned(),
            Identity::MetricsReader => "metrics-reader".to_owned(),
        };
        write_kubeconfig(dir, &name, port, &token, &self.dir.path().join("apiserver.crt"))
    }

    /// The bearer token of `identity` (made and given to the server the first time).
    pub fn token_for(&self, identity: &Identity) -> String {
        let mut tokens = lock(&self.tokens);
        match tokens.iter().find(|(_, i)| *i == identity) {
            Some((t, _)) => t.clone(),
            None => {
                let t = token();
                tokens.insert(t.clone(), identity.clone());
                write_tokens(self.dir.path(), &tokens);
                t
            }
        }
    }

    /// A client as `admin`.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client as `identity`.
    pub async fn client_as(&self, identity: &Identity) -> kube::Client {
        let ca = self.dir.path().join("apiserver.crt");
        client_for(&self.kubeconfig_as(self.dir.path(), identity), &ca).await
    }

    fn pods(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &pod_resource())
    }

    /// Create a pod (as the scheduler would: already bound when `spec.nodeName` is set); its
    /// namespace is created first if needed. The apiserver gives the uid and drops a status sent
    /// with a create: a `status` in `pod` is then written through the status subresource, as the
    /// kubelet would. Returns the stored object.
    pub async fn create_pod(&self, mut pod: Value) -> Value {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
        self.ensure_namespace(&ns).await;
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        if let Some(meta) = pod["metadata"].as_object_mut() {
            meta.remove("uid");
        }
        let status = pod.as_object_mut().and_then(|p| p.remove("status"));
        let object: DynamicObject = serde_json::from_value(pod).expect("a pod object");
        let created = self
            .pods(&ns)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create pod: {e}"));
        let name = created.metadata.name.clone().unwrap_or_default();
        match status {
            Some(status) => self.patch_status_as_kubelet(&ns, &name, status).await,
            None => serde_json::to_value(created).expect("json"),
        }
    }

    /// A strategic merge patch of a pod's status, as the kubelet sends one. Returns the stored pod.
    pub async fn patch_status_as_kubelet(&self, namespace: &str, name: &str, status: Value) -> Value {
        let client = self.client_as(&Identity::Kubelet).await;
        let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &pod_resource());
        let patched = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("write the status of {namespace}/{name}: {e}"));
        serde_json::to_value(patched).expect("json")
    }

    /// The namespace, created unless this handle made sure of it already (namespaces are not
    /// deleted by the tests).
    pub async fn ensure_namespace(&self, name: &str) {
        if lock(&self.namespaces).contains(name) {
            return;
        }
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create namespace {name}: {e}"),
        }
        lock(&self.namespaces).insert(name.to_owned());
    }

    /// A pod `name` in namespace `default` with containers c0…c(n-1), bound to `node`. Returns its
    /// uid (the server's).
    pub async fn create_bound_pod(&self, name: &str, node: &str, containers: usize, restart_policy: &str) -> String {
        let specs: Vec<Value> = (0..containers)
            .map(|c| json!({"name": format!("c{c}"), "image": "fake.test/busybox:1"}))
            .collect();
        let pod = self
            .create_pod(json!({"metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "restartPolicy": restart_policy, "containers": specs}}))
            .await;
        uid(&pod)
    }

    /// Wait until the pods `pod-0` … `pod-{count - 1}` of `default` are all Running.
    pub async fn wait_all_running(&self, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let pods = self
                .pods("default")
                .list(&ListParams::default())
                .await
                .expect("list pods");
            let running = pods
                .items
                .iter()
                .filter(|p| p.data["status"]["phase"] == "Running")
                .count();
            if running >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pods did not all become Running ({running}/{count})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        match self.pods(namespace).get_opt(name).await {
            Ok(p) => p.map(|p| serde_json::to_value(p).expect("json")),
            Err(e) => panic!("get pod {namespace}/{name}: {e}"),
        }
    }

    /// Change a pod as a client's update would (PUT of the whole object; the status stays).
    pub async fn update_pod(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Value)) {
        let api = self.pods(namespace);
        let mut pod = serde_json::to_value(api.get(name).await.expect("get pod")).unwrap();
        change(&mut pod);
        let object: DynamicObject = serde_json::from_value(pod).unwrap();
        api.replace(name, &PostParams::default(), &object)
            .await
            .expect("update pod");
    }

    /// Every stored version of a pod, oldest first, as a watch from the server's start saw them.
    pub async fn pod_versions(&self, namespace: &str, name: &str) -> Vec<Value> {
        // Wait until the recorder has seen the newest version.
        let newest = self
            .pod(namespace, name)
            .await
            .and_then(|p| p["metadata"]["resourceVersion"].as_str().map(str::to_owned));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let versions: Vec<Value> = lock(&self.history)
                .iter()
                .filter(|o| o["metadata"]["namespace"] == namespace && o["metadata"]["name"] == name)
                .cloned()
                .collect();
            let seen = newest.as_ref().is_none_or(|rv| {
                versions
                    .iter()
                    .any(|v| v["metadata"]["resourceVersion"].as_str() == Some(rv))
            });
            if seen || Instant::now() >= deadline {
                return versions;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What `kubectl delete pod --grace-period=N` does.
    pub async fn request_deletion(&self, namespace: &str, name: &str, grace_seconds: u32) {
        let params = DeleteParams {
            grace_period_seconds: Some(grace_seconds),
            ..DeleteParams::default()
        };
        match self.pods(namespace).delete(name, &params).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => panic!("delete pod {namespace}/{name}: {e}"),
        }
    }

    /// The pod removed at once (a DELETE with grace period 0).
    pub async fn delete(&self, namespace: &str, name: &str) {
        self.request_deletion(namespace, name, 0).await;
    }

    /// Every events.k8s.io Event.
    pub async fn events(&self) -> Vec<Value> {
        let resource = ApiResource {
            group: "events.k8s.io".into(),
            version: "v1".into(),
            api_version: "events.k8s.io/v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let list = api.list(&ListParams::default()).await.expect("list events");
        list.items
            .into_iter()
            .map(|e| serde_json::to_value(e).expect("json"))
            .collect()
    }

    async fn hook(&self, method: &str, path: &str, body: Vec<u8>) -> String {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        self.client
            .request_text(request)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Every request the server answered (the hooks' own excepted), oldest first, over all its
    /// runs.
    pub async fn requests(&self) -> Vec<Logged> {
        let mut all = lock(&self.earlier_requests).clone();
        if lock(&self.server).is_some() {
            all.extend(self.current_requests().await);
        }
        all
    }

    async fn current_requests(&self) -> Vec<Logged> {
        let text = self.hook("GET", "/plegd-test/requests", Vec::new()).await;
        serde_json::from_str::<Option<Vec<Logged>>>(&text)
            .expect("request log")
            .unwrap_or_default()
    }

    /// How many status PATCHes plegd's service account has sent (answered or not).
    pub async fn plegd_status_patches(&self) -> usize {
        self.requests_by(PLEGD_USER)
            .await
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
            .count()
    }

    /// The requests made by `user`.
    pub async fn requests_by(&self, user: &str) -> Vec<Logged> {
        self.requests().await.into_iter().filter(|r| r.user == user).collect()
    }

    pub async fn clear_log(&self) {
        lock(&self.earlier_requests).clear();
        self.hook("DELETE", "/plegd-test/requests", Vec::new()).await;
    }

    async fn put_faults(&self, change: impl FnOnce(&mut Faults)) {
        let faults = {
            let mut f = lock(&self.faults);
            change(&mut f);
            f.clone()
        };
        self.hook("PUT", "/plegd-test/faults", serde_json::to_vec(&faults).unwrap())
            .await;
    }

    /// Delay every request before it is served, but the test's own (as admin), which observe.
    pub async fn set_delay(&self, delay: Option<Duration>) {
        self.put_faults(|f| f.delay_millis = delay.map_or(0, |d| d.as_millis() as u64))
            .await;
    }

    pub async fn set_status_patch_500(&self, on: bool) {
        self.put_faults(|f| f.status_patch500 = on).await;
    }

    /// Watches answered 500 (clients do not retry those on their own, unlike a 503). Watches
    /// already open stay open: restart the server ([`Apiserver::set_down`]) to cut them.
    pub async fn set_fail_watches(&self, on: bool) {
        self.put_faults(|f| f.fail_watches = on).await;
    }

    /// The next `count` status PATCHes answered 409 Conflict.
    pub async fn set_status_patch_conflicts(&self, count: u32) {
        self.put_faults(|f| f.status_patch_conflicts = count).await;
    }

    /// Stop the server (etcd keeps running: nothing stored is lost; open watches end, requests
    /// fail), or start it again on the same port.
    pub async fn set_down(&self, down: bool) {
        if down && lock(&self.server).is_some() {
            let log = self.current_requests().await;
            lock(&self.earlier_requests).extend(log);
        }
        {
            let mut server = lock(&self.server);
            if down {
                if let Some(mut c) = server.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return;
            }
            if server.is_none() {
                // The faults live in the server: it starts with them in force.
                let faults = lock(&self.faults).clone();
                *server = Some(Self::spawn_server(
                    &server_binary(),
                    &self.server_args,
                    self.dir.path(),
                    &faults,
                ));
            }
        }
        self.wait_ready(Duration::from_secs(60)).await;
    }

    /// Compact etcd up to its current revision: a watch or list from an older resourceVersion
    /// gets 410 Gone (once the watch cache no longer holds it, as after a restart).
    pub async fn compact(&self) {
        let base = format!("http://127.0.0.1:{}", self.etcd_port);
        let out = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "POST",
                &format!("{base}/v3/kv/range"),
                "-d",
                r#"{"key":"AA=="}"#,
            ])
            .output()
            .expect("curl etcd");
        let reply: Value = serde_json::from_slice(&out.stdout).expect("etcd range reply");
        let revision = reply["header"]["revision"].as_str().expect("etcd revision").to_owned();
        let status = Command::new("curl")
            .args([
                "-sf",
                "-o",
                "/dev/null",
                "-X",
                "POST",
                &format!("{base}/v3/kv/compaction"),
            ])
            .args(["-d", &json!({"revision": revision, "physical": true}).to_string()])
            .status()
            .expect("curl etcd");
        assert!(status.success(), "etcd compaction");
    }

    /// The server process's id (for its CPU time in /proc); None while it is down.
    pub fn server_pid(&self) -> Option<u32> {
        lock(&self.server).as_ref().map(Child::id)
    }

    /// etcd's process id.
    pub fn etcd_pid(&self) -> Option<u32> {
        lock(&self.etcd).as_ref().map(Child::id)
    }
}

/// The uid the server gave a stored object.
pub fn uid(object: &Value) -> String {
    object["metadata"]["uid"].as_str().expect("a uid").to_owned()
}

fn pod_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        plural: "pods".into(),
    }
}

/// The server's token file: one entry per identity (tests/apiserver/tokens.go).
fn write_tokens(dir: &Path, tokens: &BTreeMap<String, Identity>) {
    let entries: Vec<Value> = tokens
        .iter()
        .map(|(t, identity)| match identity {
            Identity::Admin => json!({"token": t, "user": "plegd-test-admin", "groups": ["system:masters"]}),
            Identity::Kubelet => json!({"token": t, "user": "system:node:kubelet-node", "groups": ["system:nodes"]}),
            Identity::Plegd(node) => json!({"token": t, "user": PLEGD_USER,
                "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"],
                "extra": {NODE_CLAIM: [node]}}),
            Identity::PlegdWithoutNodeClaim => json!({"token": t, "user": PLEGD_USER,
                "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"]}),
            Identity::MetricsReader => {
                json!({"token": t, "user": "system:serviceaccount:plegd-system:plegd-metrics-reader",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"]})
            }
        })
        .collect();
    let path = dir.join("tokens.json");
    let tmp = dir.join("tokens.json.tmp");
    std::fs::write(&tmp, json!({"tokens": entries}).to_string()).expect("tokens");
    std::fs::rename(&tmp, &path).expect("tokens");
}

fn write_kubeconfig(dir: &Path, name: &str, port: u16, token: &str, ca: &Path) -> PathBuf {
    let path = dir.join(format!("{name}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: plegd-test\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: plegd-test\n    user: {name}\ncurrent-context: {name}\n",
        ca.display()
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

async fn client_for(kubeconfig: &Path, ca: &Path) -> kube::Client {
    // The server writes its certificate as it starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ca.exists() {
        assert!(Instant::now() < deadline, "the test apiserver wrote no certificate");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

/// Record every version of every pod, in order, for [`Apiserver::pod_versions`].
async fn record_pods(client: kube::Client, history: Arc<Mutex<Vec<Value>>>) {
    let api: Api<DynamicObject> = Api::all_with(client, &pod_resource());
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let object = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
            Ok(watcher::Event::Delete(mut o)) => {
                o.data["plegd-test/deleted"] = json!(true);
                o
            }
            Ok(_) => continue,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let value = serde_json::to_value(object).expect("json");
        let mut h = lock(&history);
        let rv = value["metadata"]["resourceVersion"].clone();
        let uid = value["metadata"]["uid"].clone();
        if !h
            .iter()
            .any(|v| v["metadata"]["resourceVersion"] == rv && v["metadata"]["uid"] == uid)
        {
            h.push(value);
        }
    }
}
