//! kube-apiserver for the tests: Kubernetes' own, v1.37.2 (built by tests/cluster/cluster.sh from
//! k8s.io/kubernetes, cached), one per test on its own etcd (data on tmpfs) and free loopback
//! ports, started and stopped with the test. Node and RBAC authorization, the default admission
//! plugins with NodeRestriction, priority and fairness, service account tokens signed by the
//! server: everything a test checks of the apiserver is the real one's. No controller runs beside
//! it (no controller manager, no scheduler): pods are bound by the tests, namespaces get their
//! `default` service account from the tests.
//!
//! Identities (bearer tokens): `admin` (system:masters, a static token), plegd's service account
//! with a token bound to the Node object of each node it is asked for (TokenRequest: the
//! `authentication.kubernetes.io/node-name` claim plegd's admission policy checks comes with it),
//! a token of the same account bound to nothing, the metrics reader's account, and a stand-in for
//! a kubelet's status writes (a static token in a group of its own that
//! tests/support/rbac-kubelet.yaml lets write pod statuses: the Node authorizer would hold a real
//! node's credentials to its own node's pods). RBAC comes from [`Options::rbac`] (deploy/'s RBAC
//! files by default), applied with kubectl. Every request is in the server's audit log
//! ([`Apiserver::requests`]).
//!
//! Faults: a restart ([`Apiserver::set_down`]) and compaction ([`Apiserver::compact`]) are real;
//! watches refused ([`Apiserver::set_fail_watches`]) are RBAC's answer once plegd's role loses
//! `watch`; throttling is priority and fairness ([`Options::throttle_plegd`]: 429 with
//! Retry-After). What kube-apiserver answers only as an admission webhook tells it — a slow write
//! ([`Apiserver::set_delay`]), a 500 ([`Apiserver::set_status_patch_500`]), a 409
//! ([`Apiserver::set_status_patch_conflicts`]) — comes from the one hand-written piece here: a
//! validating admission webhook ([`faults`]) registered for plegd's pod writes once a test asks
//! for a fault.

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
const ADMIN_USER: &str = "plegd-test-admin";
/// The stand-in for a kubelet's status writes (tests/support/rbac-kubelet.yaml).
pub const KUBELET_USER: &str = "plegd-test-kubelet";
const KUBELET_GROUP: &str = "plegd-test:kubelets";
/// The nodes whose own credentials ([`Identity::Node`]) every test apiserver knows.
pub const NODES: [&str; 2] = ["n1", "n2"];

/// One request as the server's audit log has it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Who made it: the user its credentials stand for.
    pub user: String,
    pub status: u16,
    /// When its answer started (a watch) or was complete (anything else).
    pub at: SystemTime,
    /// When the apiserver received it (the audit event's `requestReceivedTimestamp`).
    pub received: SystemTime,
    /// The node its credentials are bound to (their `authentication.kubernetes.io/node-name`).
    pub node: Option<String>,
}

impl Logged {
    /// What RBAC authorizes this request as ([`request_info::authorization`]).
    pub fn authorization(&self) -> Option<String> {
        request_info::authorization(&self.method, &self.path, &self.query)
    }

    /// One line of the audit log, if it is the line that completes a request (its first answer
    /// for a watch, which completes only when it ends).
    fn from_audit(line: &str, seen: &mut std::collections::HashSet<String>) -> Option<Self> {
        let event: Value = serde_json::from_str(line).ok()?;
        let stage = event["stage"].as_str()?;
        if !matches!(stage, "ResponseStarted" | "ResponseComplete" | "Panic") {
            return None;
        }
        if !seen.insert(event["auditID"].as_str()?.to_owned()) {
            return None;
        }
        let verb = event["verb"].as_str()?;
        // A watch logs ResponseStarted as it begins: one whose end comes first began before the
        // log was cleared (a watch open across the clear, ended by its plegd's stop).
        if verb == "watch" && stage == "ResponseComplete" {
            return None;
        }
        let method = match verb {
            "get" | "list" | "watch" => "GET",
            "create" => "POST",
            "update" => "PUT",
            "patch" => "PATCH",
            "delete" | "deletecollection" => "DELETE",
            // Non-resource requests: the verb is the method.
            other => return Some(Self::with_method(&event, &other.to_uppercase(), stage)),
        };
        Some(Self::with_method(&event, method, stage))
    }

    fn with_method(event: &Value, method: &str, stage: &str) -> Self {
        let uri = event["requestURI"].as_str().unwrap_or_default();
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let status = match stage {
            "Panic" => 500,
            _ => event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
        };
        let time = |field: &str| {
            event[field]
                .as_str()
                .and_then(parse_rfc3339)
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        Self {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            user: event["user"]["username"].as_str().unwrap_or_default().to_owned(),
            status,
            at: time("stageTimestamp"),
            received: time("requestReceivedTimestamp"),
            node: event["user"]["extra"][NODE_CLAIM][0].as_str().map(str::to_owned),
        }
    }
}

/// Those of `requests` the server received within the 1 s `Retry-After` of one of them answered 429
/// (past 200 ms of slack: a request already on its way when the 429 was answered arrives soon after
/// it, later on a loaded machine), as `status path?query`.
pub fn sent_within_retry_after(requests: &[Logged]) -> Vec<String> {
    let mut early = Vec::new();
    for no in requests.iter().filter(|r| r.status == 429) {
        early.extend(
            requests
                .iter()
                .filter(|r| {
                    r.received > no.at + Duration::from_millis(200) && r.received < no.at + Duration::from_millis(900)
                })
                .map(|r| format!("{} {}?{}", r.status, r.path, r.query)),
        );
    }
    early
}

/// An RFC 3339 UTC time with fractional seconds, as the audit log writes it.
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>());
    let (h, min, sec) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let secs = days * 86400 + h * 3600 + min * 60 + sec;
    let nanos: u32 = format!("{frac:0<9}")[..9].parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(u64::try_from(secs).ok()?, nanos))
}

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes whose plegd gets a token from the start (others get one when asked for).
    pub plegd_nodes: Vec<String>,
    /// RBAC manifests (and plegd's API priority level), relative to the repository.
    pub rbac: Vec<String>,
    /// More flags for kube-apiserver.
    pub args: Vec<String>,
    /// Priority and fairness holds plegd's requests to a level of their own with no seat to lend
    /// or borrow and no queue: past what runs at once, 429 with Retry-After.
    pub throttle_plegd: bool,
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
                "tests/support/rbac-kubelet.yaml",
                "deploy/base/priority.yaml",
            ]
            .map(str::to_owned)
            .into(),
            args: Vec::new(),
            throttle_plegd: false,
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
    /// The stand-in for a kubelet's status writes ([`KUBELET_USER`]).
    Kubelet,
    /// A real node's credentials: user `system:node:NAME` in group `system:nodes`, as a kubelet's
    /// client certificate names it, so that the Node authorizer and NodeRestriction judge it (a
    /// static token, made at start for each of [`NODES`]).
    Node(String),
    /// Prometheus' service account, which deploy/components/pod-monitor lets read /metrics
    /// ([`METRICS_READER`]).
    MetricsReader,
}

/// The namespace and name of the service account deploy/components/pod-monitor/metrics-reader.yaml
/// lets get /metrics: kube-prometheus' Prometheus.
pub const METRICS_READER: (&str, &str) = ("monitoring", "prometheus-k8s");

pub struct Apiserver {
    dir: tempfile::TempDir,
    port: u16,
    etcd_port: u16,
    etcd: Mutex<Option<Child>>,
    etcd_args: Vec<String>,
    server: Mutex<Option<Child>>,
    server_args: Vec<String>,
    /// Identity → token, made as tests ask for them.
    tokens: Mutex<Vec<(Identity, String)>>,
    client: kube::Client,
    /// Every version of every pod, as a watch from the start saw them (resourceVersion order).
    history: Arc<Mutex<Vec<Value>>>,
    watch: tokio::task::JoinHandle<()>,
    /// The admission webhook that injects faults, once a test asks for one.
    faults: tokio::sync::Mutex<Option<faults::Webhook>>,
    /// plegd's ClusterRole as deploy/ has it, while its `watch` is taken away.
    watchless_role: Mutex<Option<Value>>,
    /// Requests before this many audit log bytes are forgotten ([`Apiserver::clear_log`]).
    log_start: Mutex<u64>,
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
    PathBuf::from(crate::REPO)
}

/// The Kubernetes binaries tests/cluster/cluster.sh builds (once per version, cached), built
/// first when missing.
fn binaries() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = Command::new("bash")
                .arg(repo().join("tests/cluster/cluster.sh"))
                .arg("bin")
                .stderr(Stdio::inherit())
                .output()
                .expect("run tests/cluster/cluster.sh bin");
            assert!(
                out.status.success(),
                "building kube-apiserver failed: run `bash tests/cluster/cluster.sh build` to see why"
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// `pod-status-served` of the cluster's Kubernetes binary (tests/cluster/kubernetes/main.go): pod
/// statuses in, as JSON lines, and each out again as kube-apiserver serves it — decoded into
/// k8s.io/api v0.37.2's `v1.PodStatus` and encoded by Go's encoding/json.
pub fn pod_status_served() -> PathBuf {
    binaries().join("pod-status-served")
}

/// kubectl v1.37.2, built with kube-apiserver.
pub fn kubectl() -> PathBuf {
    binaries().join("kubectl")
}

use crate::process::free_port;

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

/// `command`, which must succeed; its standard output.
fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const AUDIT_POLICY: &str =
    "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

/// The exit code of a pod's first container, once terminated.
pub fn exit_code(pod: &Value) -> Option<i64> {
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].as_i64()
}

/// The condition of `type_` in a pod status, if there.
pub fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

impl Apiserver {
    /// A server with the default options.
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        // A free port is free when asked for, not necessarily when the server binds it: another
        // test's server may take it between the two. Such a start is tried again on other ports.
        let me = 'started: {
            for attempt in 1.. {
                let me = Self::start_once(&options).await;
                match me.try_wait_ready(Duration::from_secs(90)).await {
                    Ok(()) => break 'started me,
                    Err(why) if attempt < 3 && me.lost_its_port(&why) => {
                        eprintln!("test apiserver: port taken by another ({why}); starting again on other ports");
                    }
                    Err(why) => panic!("kube-apiserver did not become ready in 90s: {why}\n{}", me.log_tail()),
                }
            }
            unreachable!("the loop breaks or panics")
        };
        me.kubectl_apply_files(&options.rbac);
        if options.throttle_plegd {
            me.kubectl_apply(&throttle_objects());
        }
        for node in &options.plegd_nodes {
            me.token_for(&Identity::Plegd(node.clone()));
        }
        me
    }

    /// Whether a start failed because its port was someone else's.
    fn lost_its_port(&self, why: &str) -> bool {
        why.contains("InvalidCertificate") || self.log_tail().contains("address already in use")
    }

    async fn start_once(options: &Options) -> Self {
        let bin = binaries();
        let dir = tempfile::Builder::new()
            .prefix("plegd-apiserver-")
            .tempdir_in(if Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            })
            .expect("state dir");
        let (port, etcd_port, peer_port) = (free_port(), free_port(), free_port());
        let etcd_args = vec![
            "--name".to_owned(),
            "plegd-test".into(),
            "--log-level".into(),
            "warn".into(),
            "--data-dir".into(),
            dir.path().join("etcd").display().to_string(),
            "--listen-client-urls".into(),
            format!("http://127.0.0.1:{etcd_port}"),
            "--advertise-client-urls".into(),
            format!("http://127.0.0.1:{etcd_port}"),
            "--listen-peer-urls".into(),
            format!("http://127.0.0.1:{peer_port}"),
            "--initial-advertise-peer-urls".into(),
            format!("http://127.0.0.1:{peer_port}"),
            "--initial-cluster".into(),
            format!("plegd-test=http://127.0.0.1:{peer_port}"),
        ];
        let etcd_child = Self::spawn_etcd(&bin, &etcd_args, dir.path());

        // Service account tokens: an ECDSA key of this server's own.
        let d = dir.path();
        run(Command::new("openssl")
            .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"])
            .arg(d.join("sa.key")));
        run(Command::new("openssl")
            .args(["ec", "-pubout", "-in"])
            .arg(d.join("sa.key"))
            .arg("-out")
            .arg(d.join("sa.pub"))
            .stderr(Stdio::null()));
        let admin = token();
        let kubelet = token();
        let nodes: Vec<(Identity, String)> = NODES
            .iter()
            .map(|n| (Identity::Node((*n).to_owned()), token()))
            .collect();
        let mut tokens_csv = format!(
            "{admin},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n{kubelet},{KUBELET_USER},{KUBELET_USER},\"{KUBELET_GROUP}\"\n"
        );
        for (identity, token) in &nodes {
            let Identity::Node(name) = identity else { unreachable!() };
            tokens_csv.push_str(&format!(
                "{token},system:node:{name},system:node:{name},\"system:nodes\"\n"
            ));
        }
        std::fs::write(d.join("tokens.csv"), tokens_csv).unwrap();
        std::fs::write(d.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        let path = |name: &str| d.join(name).display().to_string();
        let mut server_args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d.display()),
            format!("--token-auth-file={}", path("tokens.csv")),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--enable-priority-and-fairness=true".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", path("sa.pub")),
            format!("--service-account-signing-key-file={}", path("sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            format!("--audit-policy-file={}", path("audit-policy.yaml")),
            format!("--audit-log-path={}", path("audit.log")),
            // One file, never rotated (the default rotates at 100 MB, which a fleet's storms pass,
            // and the log would start again under the offset `clear_log` keeps).
            "--audit-log-maxsize=0".into(),
            // Every event written before the request's answer is complete.
            "--audit-log-mode=blocking".into(),
        ];
        server_args.extend(options.args.iter().cloned());
        let server = Self::spawn_server(&bin, &server_args, d);
        let ca = d.join("apiserver.crt");
        let admin_kc = write_kubeconfig(d, "admin", port, &admin, &ca);
        let client = client_for(&admin_kc, &ca).await;
        let history = Arc::new(Mutex::new(Vec::new()));
        Self {
            port,
            etcd_port,
            etcd: Mutex::new(Some(etcd_child)),
            etcd_args,
            server: Mutex::new(Some(server)),
            server_args,
            tokens: Mutex::new(
                [(Identity::Admin, admin), (Identity::Kubelet, kubelet)]
                    .into_iter()
                    .chain(nodes)
                    .collect(),
            ),
            client: client.clone(),
            watch: tokio::spawn(record_pods(client, history.clone())),
            history,
            faults: Default::default(),
            watchless_role: Mutex::default(),
            log_start: Mutex::default(),
            namespaces: Mutex::default(),
            dir,
        }
    }

    fn spawn_etcd(bin: &Path, args: &[String], dir: &Path) -> Child {
        Command::new(bin.join("etcd"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log_file(dir, "etcd.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start etcd: {e}"))
    }

    /// Kill etcd (its data kept) and start it again with the same flags; returns once it answers
    /// its health check (kube-apiserver, which kept running, reconnects by itself).
    pub async fn restart_etcd(&self) {
        {
            let mut etcd = lock(&self.etcd);
            if let Some(mut c) = etcd.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            *etcd = Some(Self::spawn_etcd(&binaries(), &self.etcd_args, self.dir.path()));
        }
        let url = format!("http://127.0.0.1:{}/health", self.etcd_port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new("curl")
            .args(["-sf", "-o", "/dev/null", &url])
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "etcd did not answer {url} within 60 s of its restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn_server(bin: &Path, args: &[String], dir: &Path) -> Child {
        Command::new(bin.join("kube-apiserver"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log_file(dir, "apiserver.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start kube-apiserver: {e}"))
    }

    async fn wait_ready(&self, timeout: Duration) {
        if let Err(why) = self.try_wait_ready(timeout).await {
            panic!(
                "kube-apiserver did not become ready in {timeout:?}: {why}\n{}",
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

    /// `kubectl ARGS` as the admin, with `input` on its standard input; its standard output.
    fn kubectl_as_admin(&self, args: &[&str], input: Option<&str>) -> String {
        let kubeconfig = self.dir.path().join("admin.kubeconfig");
        let mut child = Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kubectl-cache"))
            .args(args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(input) = input {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn kubectl_apply_files(&self, files: &[String]) {
        if files.is_empty() {
            return;
        }
        let mut args = vec!["apply".to_owned()];
        for f in files {
            args.push("-f".into());
            args.push(repo().join(f).display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.kubectl_as_admin(&args, None);
    }

    fn kubectl_apply(&self, objects: &Value) {
        self.kubectl_as_admin(&["apply", "-f", "-"], Some(&objects.to_string()));
    }

    /// Create or update `objects` (any kinds the server serves) as the administrator, with kubectl.
    pub fn apply(&self, objects: &[Value]) {
        self.kubectl_apply(&json!({"apiVersion": "v1", "kind": "List", "items": objects}));
    }

    /// Delete `objects` (those that exist) as the administrator, with kubectl.
    pub fn delete_objects(&self, objects: &[Value]) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        self.kubectl_as_admin(&["delete", "--ignore-not-found", "-f", "-"], Some(&list.to_string()));
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
            Identity::Node(node) => format!("node-{node}"),
            Identity::MetricsReader => "metrics-reader".to_owned(),
        };
        write_kubeconfig(dir, &name, port, &token, &self.dir.path().join("apiserver.crt"))
    }

    /// The bearer token of `identity`: plegd's and the metrics reader's from TokenRequest the
    /// first time (plegd's bound to the Node object of its node, made if missing).
    pub fn token_for(&self, identity: &Identity) -> String {
        if let Some((_, t)) = lock(&self.tokens).iter().find(|(i, _)| i == identity) {
            return t.clone();
        }
        let created = match identity {
            Identity::Admin | Identity::Kubelet => unreachable!("static tokens, made at start"),
            Identity::Node(node) => panic!("node {node} has no credentials: the test apiserver knows nodes {NODES:?}"),
            Identity::Plegd(node) => {
                self.ensure_service_accounts();
                self.kubectl_apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
                self.create_token("plegd", Some(node))
            }
            Identity::PlegdWithoutNodeClaim => {
                self.ensure_service_accounts();
                self.create_token("plegd", None)
            }
            Identity::MetricsReader => self.metrics_reader_token(None),
        };
        lock(&self.tokens).push((identity.clone(), created.clone()));
        created
    }

    /// plegd's and Prometheus' namespaces and service accounts (deploy/'s RBAC files have
    /// plegd's; a test with RBAC of its own may not).
    fn ensure_service_accounts(&self) {
        let (reader_namespace, reader) = METRICS_READER;
        let namespace = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let account = |namespace: &str, name: &str| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}});
        self.kubectl_apply(&json!({"apiVersion": "v1", "kind": "List", "items": [
            namespace("plegd-system"),
            namespace(reader_namespace),
            account("plegd-system", "plegd"),
            account(reader_namespace, reader),
        ]}));
    }

    /// A token of Prometheus' service account ([`METRICS_READER`]): for the apiserver, or for
    /// `audience` only (which the apiserver itself refuses), as a projected token with that
    /// `audience` is.
    pub fn metrics_reader_token(&self, audience: Option<&str>) -> String {
        self.ensure_service_accounts();
        let (namespace, account) = METRICS_READER;
        let mut args = vec!["-n", namespace, "create", "token", account, "--duration", "48h"];
        if let Some(audience) = audience {
            args.extend(["--audience", audience]);
        }
        self.kubectl_as_admin(&args, None).trim().to_owned()
    }

    /// A token of service account `namespace/name` (made, with its namespace, if missing), for
    /// the apiserver: a tenant's workload, as a test plays it.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.kubectl_apply(&json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        ]}));
        self.kubectl_as_admin(&["-n", namespace, "create", "token", name, "--duration", "48h"], None)
            .trim()
            .to_owned()
    }

    /// A client with bearer `token`.
    pub async fn client_with_token(&self, dir: &Path, name: &str, token: &str) -> kube::Client {
        let ca = self.dir.path().join("apiserver.crt");
        client_for(&write_kubeconfig(dir, name, self.port, token, &ca), &ca).await
    }

    /// The server's own metrics (`/metrics`, as the administrator).
    pub async fn server_metrics(&self) -> String {
        let request = http::Request::get("/metrics").body(Vec::new()).expect("a request");
        self.client
            .request_text(request)
            .await
            .expect("the apiserver's /metrics")
    }

    /// A token of service account `plegd-system/account`, bound to Node `node` if any.
    fn create_token(&self, account: &str, node: Option<&str>) -> String {
        let mut args = vec!["-n", "plegd-system", "create", "token", account, "--duration", "48h"];
        if let Some(node) = node {
            args.extend(["--bound-object-kind", "Node", "--bound-object-name", node]);
        }
        self.kubectl_as_admin(&args, None).trim().to_owned()
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

    /// The namespace with its `default` service account (what the service account controller
    /// makes, which pods need), created unless this handle made sure of it already (namespaces are
    /// not deleted by the tests).
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
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), name);
        let account = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create service account {name}/default: {e}"),
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

    /// The exit code of the first container of `default/name`, once terminated.
    pub async fn exit_code(&self, name: &str) -> Option<i64> {
        exit_code(&self.pod("default", name).await?)
    }

    /// The status PATCHes plegd sent for `default/name` so far.
    pub async fn status_patches(&self, name: &str) -> usize {
        let path = format!("/api/v1/namespaces/default/pods/{name}/status");
        self.requests_by(PLEGD_USER)
            .await
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .count()
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

    /// Every request the server answered, oldest first, over all its runs (since
    /// [`Apiserver::clear_log`]), as its audit log has them.
    pub async fn requests(&self) -> Vec<Logged> {
        let start = *lock(&self.log_start);
        let text = std::fs::read(self.dir.path().join("audit.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&text[(start as usize).min(text.len())..]).into_owned();
        let mut seen = std::collections::HashSet::new();
        text.lines().filter_map(|l| Logged::from_audit(l, &mut seen)).collect()
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

    /// Forget the requests so far.
    pub async fn clear_log(&self) {
        let size = std::fs::metadata(self.dir.path().join("audit.log")).map_or(0, |m| m.len());
        *lock(&self.log_start) = size;
    }

    /// The fault webhook, registered (and answering) first if it is not yet.
    async fn faults(&self) -> tokio::sync::MutexGuard<'_, Option<faults::Webhook>> {
        let mut guard = self.faults.lock().await;
        if guard.is_none() {
            let webhook = faults::Webhook::start(self.dir.path()).await;
            self.kubectl_apply(&webhook.configuration());
            self.kubectl_apply(&faults::probe_pod());
            webhook.wait_registered(&self.client).await;
            *guard = Some(webhook);
        }
        guard
    }

    /// Hold each of plegd's pod writes (status PATCHes, DELETEs) for `delay` in admission.
    pub async fn set_delay(&self, delay: Option<Duration>) {
        self.faults()
            .await
            .as_ref()
            .unwrap()
            .set(|f| f.delay = delay.unwrap_or_default());
    }

    /// Hold each ConfigMap write of a tenant's service account (namespace `tenant`) for `hold` in
    /// admission: the request keeps its priority and fairness seat meanwhile, at no CPU.
    pub async fn set_tenant_hold(&self, hold: Duration) {
        self.faults().await.as_ref().unwrap().set(|f| f.tenant_hold = hold);
    }

    /// plegd's status PATCHes answered 500 (the webhook says so).
    pub async fn set_status_patch_500(&self, on: bool) {
        self.faults().await.as_ref().unwrap().set(|f| f.status_patch_500 = on);
    }

    /// The next `count` status PATCHes of plegd's answered 409 Conflict.
    pub async fn set_status_patch_conflicts(&self, count: u32) {
        self.faults()
            .await
            .as_ref()
            .unwrap()
            .set(|f| f.status_patch_conflicts = count);
    }

    /// plegd's watches refused (403: its ClusterRole loses `watch`; lists still answer). Watches
    /// already open stay open: restart the server ([`Apiserver::set_down`]) to cut them.
    pub async fn set_fail_watches(&self, on: bool) {
        self.take_pod_reads(&["watch"], on).await;
    }

    /// plegd's lists and watches of pods refused (its ClusterRole loses both): its informer's view
    /// stays as it was, whatever changes in the server, until this is turned off. Watches already
    /// open stay open: restart the server ([`Apiserver::set_down`]) to cut them.
    pub async fn set_fail_pod_reads(&self, on: bool) {
        self.take_pod_reads(&["list", "watch"], on).await;
    }

    /// Take `verbs` from plegd's ClusterRole (a rule left with none goes), or give back what was
    /// taken; waits until RBAC's authorizer says so of `watch`.
    async fn take_pod_reads(&self, verbs: &[&str], on: bool) {
        let roles: Api<DynamicObject> = Api::all_with(self.client.clone(), &cluster_role_resource());
        let mut saved = lock(&self.watchless_role).take();
        if on && saved.is_none() {
            let role = roles.get("plegd").await.expect("plegd's ClusterRole");
            let original = serde_json::to_value(&role).unwrap();
            let mut rules = original["rules"].as_array().expect("rules").clone();
            for rule in &mut rules {
                if let Some(granted) = rule["verbs"].as_array_mut() {
                    granted.retain(|v| !verbs.iter().any(|taken| v == taken));
                }
            }
            rules.retain(|rule| rule["verbs"].as_array().is_some_and(|v| !v.is_empty()));
            roles
                .patch("plegd", &PatchParams::default(), &Patch::Merge(json!({"rules": rules})))
                .await
                .expect("take pod reads from plegd's ClusterRole");
            saved = Some(original);
        } else if !on && let Some(original) = saved.take() {
            roles
                .patch(
                    "plegd",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"rules": original["rules"]})),
                )
                .await
                .expect("give plegd's ClusterRole its pod reads back");
        }
        *lock(&self.watchless_role) = saved;
        // In force once RBAC's authorizer says so.
        let want_allowed = !on;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let review: Value = self
                .client
                .request(
                    http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
                        .header("content-type", "application/json")
                        .body(
                            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                "spec": {"user": PLEGD_USER, "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system", "system:authenticated"],
                                         "resourceAttributes": {"verb": "watch", "resource": "pods"}}})
                            .to_string()
                            .into_bytes(),
                        )
                        .unwrap(),
                )
                .await
                .expect("a SubjectAccessReview");
            if review["status"]["allowed"].as_bool() == Some(want_allowed) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "RBAC did not take plegd's watch change: {review}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stop kube-apiserver (etcd keeps running: nothing stored is lost; open watches end, requests
    /// fail), or start it again on the same port with the same flags.
    pub async fn set_down(&self, down: bool) {
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
                *server = Some(Self::spawn_server(&binaries(), &self.server_args, self.dir.path()));
            }
        }
        self.wait_ready(Duration::from_secs(90)).await;
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
        assert!(Instant::now() < deadline, "kube-apiserver wrote no certificate");
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

fn cluster_role_resource() -> ApiResource {
    ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: "ClusterRole".into(),
        plural: "clusterroles".into(),
    }
}

/// Priority and fairness for [`Options::throttle_plegd`]: plegd's requests in a level of their
/// own with one nominal seat (the least a level with shares gets is what its share of the server's
/// 600 rounds up to; no share at all leaves it one request at a time), nothing lent or borrowed,
/// no queue: a request past what runs is answered 429 with Retry-After.
pub fn throttle_objects() -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
         "metadata": {"name": "plegd-test-throttled"},
         "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
                  "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
         "metadata": {"name": "plegd-test-throttled"},
         "spec": {"priorityLevelConfiguration": {"name": "plegd-test-throttled"}, "matchingPrecedence": 500,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "plegd-system", "name": "plegd"}}],
                             "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]}]}},
    ]})
}

/// The admission webhook that makes kube-apiserver answer plegd's pod writes as a test asks: late,
/// 500, or 409. kube-apiserver calls it for plegd's CREATE, UPDATE (a PATCH is one) and DELETE of
/// pods and their status, and for the admin's dry-run status writes (the probe that tells it is
/// registered); it answers as [`Faults`] says, over TLS with a certificate made here.
pub mod faults {
    use std::path::Path;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use serde_json::{Value, json};

    use super::{ADMIN_USER, PLEGD_USER, lock, pod_resource, run};

    const PROBE_POD: &str = "plegd-test-webhook-probe";
    /// The namespace of a tenant's flood (tests/support/flood.rs).
    pub const TENANT: &str = "tenant";

    #[derive(Debug, Clone, Default)]
    pub struct Faults {
        pub delay: Duration,
        pub status_patch_500: bool,
        pub status_patch_conflicts: u32,
        /// How long each write of a tenant's service account (`system:serviceaccount:tenant:*`)
        /// to a ConfigMap of namespace `tenant` is held: a slow webhook, a request that holds its
        /// seat without using the server's CPU.
        pub tenant_hold: Duration,
    }

    #[derive(Default)]
    struct State {
        faults: Faults,
        probed: bool,
    }

    pub struct Webhook {
        port: u16,
        ca_bundle: String,
        state: Arc<Mutex<State>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Webhook {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// A pod no node runs, for the probe's dry-run writes (with the service account pods need).
    pub fn probe_pod() -> Value {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "kube-public"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PROBE_POD, "namespace": "kube-public"},
             "spec": {"containers": [{"name": "c", "image": "plegd.test/none:1"}]}},
        ]})
    }

    struct TlsListener {
        tcp: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    }

    impl axum::serve::Listener for TlsListener {
        type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
        type Addr = std::net::SocketAddr;

        async fn accept(&mut self) -> (Self::Io, Self::Addr) {
            loop {
                let Ok((stream, addr)) = self.tcp.accept().await else {
                    continue;
                };
                if let Ok(tls) = self.acceptor.accept(stream).await {
                    return (tls, addr);
                }
            }
        }

        fn local_addr(&self) -> std::io::Result<Self::Addr> {
            self.tcp.local_addr()
        }
    }

    impl Webhook {
        pub async fn start(dir: &Path) -> Self {
            use rustls::pki_types::pem::PemObject;
            let (cert, key) = (dir.join("webhook.crt"), dir.join("webhook.key"));
            run(std::process::Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "2",
                ])
                .args([
                    "-subj",
                    "/CN=127.0.0.1",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                    "-keyout",
                ])
                .arg(&key)
                .arg("-out")
                .arg(&cert)
                .stderr(std::process::Stdio::null()));
            let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
                .expect("webhook certificate")
                .collect::<Result<_, _>>()
                .expect("webhook certificate");
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("webhook key");
            let config =
                rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .expect("TLS versions")
                    .with_no_client_auth()
                    .with_single_cert(certs, key)
                    .expect("webhook TLS config");
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("webhook port");
            let port = tcp.local_addr().unwrap().port();
            let listener = TlsListener {
                tcp,
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            };
            let state = Arc::new(Mutex::new(State::default()));
            let app = axum::Router::new()
                .route("/", axum::routing::post(review))
                .with_state(state.clone());
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            use base64::Engine;
            Self {
                port,
                ca_bundle: base64::engine::general_purpose::STANDARD.encode(std::fs::read(&cert).unwrap()),
                state,
                task,
            }
        }

        pub fn set(&self, change: impl FnOnce(&mut Faults)) {
            change(&mut lock(&self.state).faults);
        }

        /// The ValidatingWebhookConfiguration that sends plegd's pod writes here.
        pub fn configuration(&self) -> Value {
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "plegd-test-faults"},
            "webhooks": [{
                "name": "faults.plegd.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{}/", self.port), "caBundle": self.ca_bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                           "resources": ["pods", "pods/status"]}],
                "matchConditions": [{"name": "plegd-or-probe", "expression":
                    format!("request.userInfo.username == '{PLEGD_USER}' || (request.dryRun == true && request.userInfo.username == '{ADMIN_USER}')")}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
            }, {
                "name": "tenant.plegd.test",
                "clientConfig": {"url": format!("https://127.0.0.1:{}/", self.port), "caBundle": self.ca_bundle},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                           "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TENANT}},
                "matchConditions": [{"name": "tenant", "expression":
                    format!("request.userInfo.username.startsWith('system:serviceaccount:{TENANT}:')")}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
            }]})
        }

        /// Until kube-apiserver calls the webhook: dry-run status writes of the probe pod as admin.
        pub async fn wait_registered(&self, client: &kube::Client) {
            let pods: Api<DynamicObject> = Api::namespaced_with(client.clone(), "kube-public", &pod_resource());
            let params = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while !lock(&self.state).probed {
                let _ = pods
                    .patch_status(
                        PROBE_POD,
                        &params,
                        &Patch::Merge(json!({"status": {"message": "probe"}})),
                    )
                    .await;
                assert!(
                    Instant::now() < deadline,
                    "kube-apiserver never called the fault webhook"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    async fn review(
        axum::extract::State(state): axum::extract::State<Arc<Mutex<State>>>,
        axum::Json(review): axum::Json<Value>,
    ) -> axum::Json<Value> {
        let request = &review["request"];
        let uid = request["uid"].clone();
        let status_write = request["subResource"] == "status" && request["operation"] == "UPDATE";
        let username = request["userInfo"]["username"].as_str().unwrap_or_default();
        let (delay, refusal) = {
            let mut state = lock(&state);
            if username.starts_with(&format!("system:serviceaccount:{TENANT}:")) {
                (state.faults.tenant_hold, None)
            } else if username != PLEGD_USER {
                state.probed = true;
                (Duration::ZERO, None)
            } else if status_write && state.faults.status_patch_500 {
                (
                    state.faults.delay,
                    Some((500, "InternalError", "the test made this status write fail")),
                )
            } else if status_write && state.faults.status_patch_conflicts > 0 {
                state.faults.status_patch_conflicts -= 1;
                (
                    state.faults.delay,
                    Some((409, "Conflict", "the test made this status write conflict")),
                )
            } else {
                (state.faults.delay, None)
            }
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let response = match refusal {
            None => json!({"uid": uid, "allowed": true}),
            Some((code, reason, message)) => json!({"uid": uid, "allowed": false,
                "status": {"code": code, "reason": reason, "message": message}}),
        };
        axum::Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
    }
}

#[cfg(test)]
mod tests {
    use super::Logged;
    use serde_json::json;

    fn line(id: &str, verb: &str, stage: &str) -> String {
        json!({"auditID": id, "verb": verb, "stage": stage, "user": {"username": "u"},
               "requestURI": "/api/v1/pods?watch=true", "responseStatus": {"code": 200},
               "stageTimestamp": "2026-11-29T10:00:00.000000Z",
               "requestReceivedTimestamp": "2026-11-29T10:00:00.000000Z"})
        .to_string()
    }

    #[test]
    fn a_request_is_its_first_answer_and_a_watch_seen_only_ending_is_none() {
        let mut seen = std::collections::HashSet::new();
        // A watch seen from its start: counted once, at its start.
        assert!(Logged::from_audit(&line("a", "watch", "ResponseStarted"), &mut seen).is_some());
        assert!(Logged::from_audit(&line("a", "watch", "ResponseComplete"), &mut seen).is_none());
        // A watch that began before the log was cleared: its end alone is not a request.
        assert!(Logged::from_audit(&line("b", "watch", "ResponseComplete"), &mut seen).is_none());
        // Anything else completes with its answer.
        assert!(Logged::from_audit(&line("c", "patch", "ResponseComplete"), &mut seen).is_some());
    }
}
