//! The real containerd fixture: one isolated containerd per machine, started on first use by
//! `tests/containerd/containerd.sh start` (idempotent, locked) and stopped by the test runner script.
//! Helpers create pod sandboxes and containers through CRI with the kubelet's labels.
//!
//! Where a real containerd cannot run (not Linux, not root), `containerd()` says so loudly on
//! stderr and returns None; with `PLEGD_REQUIRE_CONTAINERD=1` (set by tests/run.sh) it fails instead,
//! so CI can never pass by skipping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use plegd::kubecontainer::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use plegd::metrics::Metrics;
use plegd::runtime::{CriConfig, CriRuntime};
use tokio::sync::OnceCell;
use tonic::transport::Channel;

pub const IMAGE: &str = "plegd.test/busybox:1";

static SOCKET: OnceCell<Option<PathBuf>> = OnceCell::const_new();

fn skip(reason: &str) -> Option<PathBuf> {
    let msg = format!("REAL CONTAINERD TESTS SKIPPED: {reason}");
    if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
        panic!("{msg} (PLEGD_REQUIRE_CONTAINERD=1)");
    }
    eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
    None
}

async fn start() -> Option<PathBuf> {
    if let Ok(socket) = std::env::var("PLEGD_TEST_CRI_SOCKET") {
        return Some(PathBuf::from(socket));
    }
    if !cfg!(target_os = "linux") {
        return skip("not Linux");
    }
    let uid = std::process::Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return skip("not root");
    }
    let out = containerd_sh(&["start"], Vec::new()).await;
    match out {
        Ok(out) if out.status.success() => {
            let socket = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim()
                .to_owned();
            Some(PathBuf::from(socket))
        }
        Ok(out) => skip(&format!(
            "containerd.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => skip(&format!("cannot run containerd.sh: {e}")),
    }
}

/// The CRI runtime under test, as its `Version` names it: `PLEGD_TEST_RUNTIME` (tests/run.sh sets
/// `cri-o` when it runs the real-runtime suites against tests/crio/crio.sh's CRI-O), else
/// `containerd`. What differs between runtimes is asserted per runtime on this name.
pub fn runtime_under_test() -> &'static str {
    match std::env::var("PLEGD_TEST_RUNTIME").as_deref() {
        Err(_) | Ok("" | "containerd") => "containerd",
        Ok("cri-o") => "cri-o",
        Ok(other) => panic!("PLEGD_TEST_RUNTIME must be containerd or cri-o, not {other:?}"),
    }
}

/// Whether a test of containerd's own behaviour (its events service, killing and restarting an
/// instance of its own) runs here: false, after a loud note, on another runtime.
pub fn containerd_only(what: &str) -> bool {
    let runtime = runtime_under_test();
    if runtime != "containerd" {
        eprintln!("\n!!!!!!!! NOT RUN ON {runtime}: containerd's own behaviour ({what}) !!!!!!!!\n");
    }
    runtime == "containerd"
}

/// A CRI-O of one test's own (tests/crio/crio.sh with its own dir, bridge and subnet), e.g. with
/// its pod events off. Stopped and cleaned when dropped.
pub struct PrivateCrio {
    pub handle: Containerd,
    env: Vec<(String, String)>,
}

/// The socket a runtime script's `start` printed last, or a failure that says what `what` said.
fn started_socket(what: &str, out: std::io::Result<std::process::Output>) -> PathBuf {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}

fn crio_script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/crio/crio.sh")
}

impl PrivateCrio {
    /// Start instance `name` with `enable_pod_events = events`, pod IPs from 10.`octet`.0.0/24.
    pub async fn start(name: &str, events: bool, octet: u8) -> Self {
        let env = vec![
            ("PLEGD_CRIO_DIR".to_owned(), format!("/var/lib/plegd-test/crio-{name}")),
            ("PLEGD_CRIO_EVENTS".to_owned(), events.to_string()),
            ("PLEGD_CRIO_BRIDGE".to_owned(), format!("plc{name}")),
            ("PLEGD_CRIO_SUBNET".to_owned(), format!("10.{octet}.0.0/24")),
        ];
        let out = tokio::process::Command::new("bash")
            .arg(crio_script())
            .arg("start")
            .envs(env.clone())
            .output()
            .await;
        Self {
            handle: Containerd::at(started_socket(&format!("crio.sh start ({name})"), out)),
            env,
        }
    }
}

impl Drop for PrivateCrio {
    fn drop(&mut self) {
        stop_instance(crio_script(), &self.env);
    }
}

/// `SCRIPT stop` of a runtime instance of a test's own, its outcome left to the script's log (a
/// drop cannot fail).
fn stop_instance(script: &str, env: &[(String, String)]) {
    let _ = std::process::Command::new("bash")
        .arg(script)
        .arg("stop")
        .envs(env.iter().cloned())
        .output();
}

/// Whether `id` is the test image's ID as the runtime under test names it (a container status'
/// CRI `image_id`, which plegd and the kubelet 1.37 write as the pod status' `imageID`): containerd by
/// the image's config digest (`sha256:` and 64 hex digits), CRI-O 1.34 by its bare image ID (64 hex
/// digits; its `image_ref` is the repository digest, `plegd.test/busybox@sha256:...`).
pub fn is_image_id(id: &str) -> bool {
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    match runtime_under_test() {
        "cri-o" => hex(id),
        _ => id.strip_prefix("sha256:").is_some_and(hex),
    }
}

/// The start of a pod IP from the runtime's test CNI bridge (tests/containerd/containerd.sh's
/// 10.234.0.0/24, tests/crio/crio.sh's 10.236.0.0/24).
pub fn pod_ip_prefix() -> &'static str {
    match runtime_under_test() {
        "cri-o" => "10.236.0.",
        _ => "10.234.0.",
    }
}

/// A handle on the shared real containerd.
#[derive(Clone)]
pub struct Containerd {
    pub socket: PathBuf,
    pub client: RuntimeServiceClient<Channel>,
}

/// The shared containerd, started if needed; None (after a loud message) where it cannot run.
pub async fn containerd() -> Option<Containerd> {
    let socket = SOCKET.get_or_init(start).await.clone()?;
    Some(Containerd::at(socket))
}

/// A pod made through CRI the way the kubelet makes one.
pub struct TestPod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandbox_id: String,
    pub config: cri::PodSandboxConfig,
}

/// The namespace of the test pods.
pub const TEST_NAMESPACE: &str = "plegd-test";

/// A unique uid for a test pod.
pub fn unique_uid(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Containerd {
    /// A handle on the containerd serving CRI at `socket`. Its calls wait up to two minutes: the
    /// tests' own calls (a StopContainer, a CreateContainer) take seconds on a loaded machine, and
    /// plegd's 10 s deadline is plegd's, not theirs.
    pub fn at(socket: PathBuf) -> Self {
        let options = CriConfig {
            call_timeout: Duration::from_secs(120),
            ..CriConfig::default()
        };
        let runtime = CriRuntime::new(&socket, &options, Arc::new(Metrics::new()));
        Self {
            socket,
            client: runtime.client(),
        }
    }

    fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    /// The runtime's major and minor version from CRI `Version` (`1.6.20~ds1` and `v2.1.9` give
    /// (1, 6) and (2, 1)): for assertions on what each version reports.
    pub async fn version(&self) -> (u32, u32) {
        let v = self
            .client()
            .version(cri::VersionRequest { version: "v1".into() })
            .await
            .expect("CRI Version")
            .into_inner()
            .runtime_version;
        let mut parts = v
            .trim_start_matches('v')
            .split(['.', '~', '-'])
            .map(|p| p.parse::<u32>());
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
            _ => panic!("unexpected containerd version {v:?}"),
        }
    }

    /// Run a pod sandbox. Host-network sandboxes get no hostname (runc refuses one without a UTS
    /// namespace); pod-network ones get an IP from the test CNI bridge.
    pub async fn run_pod(&self, name: &str, host_network: bool) -> TestPod {
        self.run_pod_with(name, host_network, None).await
    }

    /// Run a pod sandbox whose containers log under `log_directory` (CRI log files).
    pub async fn run_pod_with(
        &self,
        name: &str,
        host_network: bool,
        log_directory: Option<&std::path::Path>,
    ) -> TestPod {
        self.run_pod_as(name, TEST_NAMESPACE, &unique_uid(name), host_network, log_directory)
            .await
    }

    /// Run the sandbox of the apiserver pod `namespace/name` whose uid (the apiserver's) is `uid`.
    pub async fn run_pod_as(
        &self,
        name: &str,
        namespace: &str,
        uid: &str,
        host_network: bool,
        log_directory: Option<&std::path::Path>,
    ) -> TestPod {
        self.run_sandbox(sandbox_config(name, namespace, uid, host_network, log_directory))
            .await
    }

    /// Run a sandbox made as `crictl runp` makes one: its metadata has the uid, but it carries
    /// none of the kubelet's labels.
    pub async fn run_pod_unlabelled(&self, name: &str) -> TestPod {
        let mut config = sandbox_config(name, TEST_NAMESPACE, &unique_uid(name), true, None);
        config.labels.clear();
        self.run_sandbox(config).await
    }

    async fn run_sandbox(&self, config: cri::PodSandboxConfig) -> TestPod {
        let meta = config.metadata.clone().unwrap_or_default();
        let response = self
            .client()
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}", meta.name));
        TestPod {
            uid: meta.uid,
            name: meta.name,
            namespace: meta.namespace,
            sandbox_id: response.into_inner().pod_sandbox_id,
            config,
        }
    }

    /// Create (not start) a container running `sh -c script` in the pod.
    pub async fn create_container(&self, pod: &TestPod, name: &str, script: &str) -> String {
        self.create_container_from(pod, name, attempt(0, script)).await
    }

    /// Create (not start) a container from `config` (image, command, mounts, log path, security
    /// context), adding what the kubelet adds: metadata (with the attempt `config` gives, else 0),
    /// its labels, the pod's namespaces.
    pub async fn create_container_from(&self, pod: &TestPod, name: &str, mut config: cri::ContainerConfig) -> String {
        config.metadata = Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: config.metadata.as_ref().map_or(0, |m| m.attempt),
        });
        config.labels.extend([
            (LABEL_POD_UID.to_owned(), pod.uid.clone()),
            (LABEL_POD_NAME.to_owned(), pod.name.clone()),
            (LABEL_POD_NAMESPACE.to_owned(), pod.namespace.clone()),
            (LABEL_CONTAINER_NAME.to_owned(), name.to_owned()),
        ]);
        let namespace_options = pod
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        let linux = config.linux.get_or_insert_with(Default::default);
        linux
            .security_context
            .get_or_insert_with(Default::default)
            .namespace_options = namespace_options;
        self.client()
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: pod.sandbox_id.clone(),
                config: Some(config),
                sandbox_config: Some(pod.config.clone()),
            })
            .await
            .unwrap_or_else(|e| panic!("CreateContainer {name}: {e}"))
            .into_inner()
            .container_id
    }

    /// Create and start a container that exits with `code` when `due` comes (at once if it has
    /// passed): containers started one after the other can exit together, as in a burst.
    pub async fn run_exiting_at(&self, pod: &TestPod, name: &str, due: tokio::time::Instant, code: i32) -> String {
        let sleep = due.saturating_duration_since(tokio::time::Instant::now());
        let id = self
            .create_container(pod, name, &format!("sleep {:.3}; exit {code}", sleep.as_secs_f64()))
            .await;
        self.start_container(&id).await;
        id
    }

    /// The runtime's answer to `ContainerStatus` for `id`.
    async fn container_status(&self, id: &str, verbose: bool) -> cri::ContainerStatusResponse {
        self.client()
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose,
            })
            .await
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: {e}"))
            .into_inner()
    }

    /// When CRI says container `id` started and finished (the epoch where it has not).
    pub async fn container_times(&self, id: &str) -> (std::time::SystemTime, std::time::SystemTime) {
        let status = self
            .container_status(id, false)
            .await
            .status
            .unwrap_or_else(|| panic!("ContainerStatus {id}: no status"));
        let t = |n: i64| std::time::UNIX_EPOCH + Duration::from_nanos(n.max(0) as u64);
        (t(status.started_at), t(status.finished_at))
    }

    /// The exit code and reason CRI's `ContainerStatus` gives for container `id` (the reason as the
    /// runtime fills it: empty where it gives none).
    pub async fn container_exit(&self, id: &str) -> (i32, String) {
        let status = self
            .container_status(id, false)
            .await
            .status
            .unwrap_or_else(|| panic!("ContainerStatus {id}: no status"));
        (status.exit_code, status.reason)
    }

    /// The host's pid of a running container's first process (from the verbose status's `info`,
    /// which containerd 1.7 and 2.x fill in), to signal it while containerd itself is away.
    pub async fn container_pid(&self, id: &str) -> i32 {
        let info = self.container_status(id, true).await.info;
        let info: serde_json::Value = serde_json::from_str(info.get("info").map_or("{}", String::as_str))
            .unwrap_or_else(|e| panic!("ContainerStatus {id}: verbose info is not JSON: {e}"));
        info["pid"]
            .as_i64()
            .and_then(|pid| i32::try_from(pid).ok())
            .filter(|pid| *pid > 0)
            .unwrap_or_else(|| panic!("ContainerStatus {id}: no pid in {info}"))
    }

    pub async fn start_container(&self, id: &str) {
        self.client()
            .start_container(cri::StartContainerRequest {
                container_id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("StartContainer {id}: {e}"));
    }

    /// Create and start. A script that begins by trapping SIGTERM (`trap '…' TERM; …`) is
    /// returned once its shell has set the trap: a stop that came sooner would find `sh` as PID 1
    /// with no handler, deaf to SIGTERM, and end in SIGKILL (137) after the stop's timeout.
    pub async fn run_container(&self, pod: &TestPod, name: &str, script: &str) -> String {
        let id = self.create_container(pod, name, script).await;
        self.start_container(&id).await;
        if script.starts_with("trap ") && script.contains(" TERM;") {
            let pid = self.container_pid(&id).await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while !term_is_handled(pid) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for container {name}'s shell (pid {pid}) to trap SIGTERM"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        id
    }

    pub async fn stop_container(&self, id: &str, timeout_secs: i64) {
        self.client()
            .stop_container(cri::StopContainerRequest {
                container_id: id.into(),
                timeout: timeout_secs,
            })
            .await
            .unwrap_or_else(|e| panic!("StopContainer {id}: {e}"));
    }

    pub async fn remove_container(&self, id: &str) {
        self.client()
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("RemoveContainer {id}: {e}"));
    }

    /// Stop the pod's sandbox. On CRI-O its running containers are stopped first (at once), as
    /// the kubelet's killPod does: CRI-O's StopPodSandbox gives each a grace period that `sh` as
    /// PID 1 (deaf to SIGTERM) always uses up, where containerd kills them at once.
    pub async fn stop_pod(&self, pod: &TestPod) {
        if runtime_under_test() == "cri-o" {
            let filter = cri::ContainerFilter {
                pod_sandbox_id: pod.sandbox_id.clone(),
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            };
            let running = self
                .client()
                .list_containers(cri::ListContainersRequest { filter: Some(filter) })
                .await
                .unwrap_or_else(|e| panic!("ListContainers of {}: {e}", pod.name))
                .into_inner()
                .containers;
            for c in running {
                self.stop_container(&c.id, 0).await;
            }
        }
        self.client()
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.sandbox_id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", pod.name));
    }

    pub async fn remove_pod(&self, pod: &TestPod) {
        self.client()
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.sandbox_id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("RemovePodSandbox {}: {e}", pod.name));
    }

    /// Stop and remove a pod and everything in it, ignoring errors: test clean-up.
    pub async fn cleanup(&self, pod: &TestPod) {
        let mut client = self.client();
        let _ = client
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.sandbox_id.clone(),
            })
            .await;
        let _ = client
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.sandbox_id.clone(),
            })
            .await;
    }
}

/// Whether process `pid` catches or ignores SIGTERM (/proc/PID/status's `SigCgt` or `SigIgn`).
fn term_is_handled(pid: i32) -> bool {
    const SIGTERM_BIT: u64 = 1 << (15 - 1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigCgt:")
            .or_else(|| line.strip_prefix("SigIgn:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok());
        mask.is_some_and(|m| m & SIGTERM_BIT != 0)
    })
}

/// Wait up to `timeout` for `done` to hold on the events of one pod seen so far.
pub async fn collect_until(
    events: &mut tokio::sync::mpsc::Receiver<plegd::pleg::PodLifecycleEvent>,
    uid: &str,
    timeout: Duration,
    done: impl Fn(&[plegd::pleg::PodLifecycleEvent]) -> bool,
) -> Vec<plegd::pleg::PodLifecycleEvent> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while !done(&seen) {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(e)) if e.pod_uid == uid => seen.push(e),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    seen
}

/// A containerd instance of one test's own (its own dir, bridge and subnet), for tests that kill
/// it or need another version. Stopped and cleaned when dropped.
pub struct PrivateContainerd {
    pub handle: Containerd,
    env: Vec<(String, String)>,
}

fn script() -> &'static str {
    // Two levels below the repository, from the test support crate as from the demo's package.
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/containerd/containerd.sh")
}

/// `containerd.sh ARGS` with `env`, on a blocking thread (the script may take seconds).
async fn containerd_sh(args: &[&str], env: Vec<(String, String)>) -> std::io::Result<std::process::Output> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(script())
            .args(args)
            .envs(env)
            .output()
    })
    .await
    .map_err(std::io::Error::other)?
}

impl PrivateContainerd {
    /// Start instance `name` (≤ 8 characters) of containerd `version` ("1.6" or "1.7") with pod IPs
    /// from 10.`octet`.0.0/24. None (after a loud message) where a real containerd cannot run.
    pub async fn start(name: &str, version: &str, octet: u8) -> Option<Self> {
        // The shared fixture decides whether real runtimes can run here at all.
        containerd().await?;
        let env = vec![
            ("PLEGD_CONTAINERD_DIR".to_owned(), format!("/var/lib/plegd-test/{name}")),
            ("PLEGD_CONTAINERD_VERSION".to_owned(), version.to_owned()),
            ("PLEGD_CNI_BRIDGE".to_owned(), format!("plg{name}")),
            ("PLEGD_CNI_SUBNET".to_owned(), format!("10.{octet}.0.0/24")),
        ];
        let out = containerd_sh(&["start"], env.clone()).await;
        Some(Self {
            handle: Containerd::at(started_socket(&format!("containerd.sh start ({name}, {version})"), out)),
            env,
        })
    }

    /// Run a containerd.sh subcommand on this instance.
    pub async fn script(&self, command: &str) {
        self.script_with(command, &[]).await;
    }

    /// Run a containerd.sh subcommand with arguments on this instance.
    pub async fn script_with(&self, command: &str, args: &[&str]) {
        let mut all = vec![command];
        all.extend_from_slice(args);
        let out = containerd_sh(&all, self.env.clone()).await.expect("run containerd.sh");
        assert!(
            out.status.success(),
            "containerd.sh {command} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// plegd's image as deploy/image/image.sh assembles it (non-root, `binary` and Debian's C
    /// libraries, this machine's architecture), imported into this instance as `name`.
    pub async fn import_plegd_image(&self, binary: &str, name: &str) {
        let dir = std::env::temp_dir().join(format!("plegd-image-{}-{}", std::process::id(), unique_uid("i")));
        let archive = plegd_image(binary, name, &dir).await;
        self.script_with("import", &[archive.to_str().expect("a UTF-8 path")])
            .await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `deploy/image/image.sh assemble` of `binary` for this machine's architecture, as `name`, in
/// `out`: the OCI archive's path.
pub async fn plegd_image(binary: &str, name: &str, out: &Path) -> PathBuf {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("plegd's image is built for amd64 and arm64, not {other}"),
    };
    let args = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/image/image.sh").to_owned(),
        "assemble".into(),
        "--out".into(),
        out.display().to_string(),
        "--name".into(),
        name.into(),
        format!("{arch}={binary}"),
    ];
    let output = tokio::process::Command::new("bash")
        .args(&args)
        .output()
        .await
        .expect("run image.sh");
    assert!(
        output.status.success(),
        "deploy/image/image.sh assemble failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out.join("plegd.oci.tar")
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        stop_instance(script(), &self.env);
    }
}

/// The sandbox config the kubelet would send for the pod `namespace/name` with `uid`: its labels,
/// a cgroup parent of its own, the pod's or the host's network.
fn sandbox_config(
    name: &str,
    namespace: &str,
    uid: &str,
    host_network: bool,
    log_directory: Option<&std::path::Path>,
) -> cri::PodSandboxConfig {
    let (uid, namespace) = (uid.to_owned(), namespace.to_owned());
    let labels: HashMap<String, String> = [
        (LABEL_POD_UID.to_owned(), uid.clone()),
        (LABEL_POD_NAME.to_owned(), name.to_owned()),
        (LABEL_POD_NAMESPACE.to_owned(), namespace.clone()),
    ]
    .into();
    let network = if host_network {
        cri::NamespaceMode::Node
    } else {
        cri::NamespaceMode::Pod
    };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            attempt: 0,
        }),
        hostname: if host_network { String::new() } else { name.into() },
        log_directory: log_directory.map(|d| d.display().to_string()).unwrap_or_default(),
        labels,
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: format!("/plegd-test/pod{uid}"),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: network as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The image of a container as the kubelet names it: the reference and, as the user wrote it,
/// `user_specified_image` (CRI-O refuses a container without it).
pub fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.into(),
        user_specified_image: image.into(),
        ..Default::default()
    }
}

/// The config of attempt `attempt` of a container running `sh -c script`, annotated with its
/// restart count as the kubelet annotates it.
pub fn attempt(attempt: u32, script: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: String::new(),
            attempt,
        }),
        image: Some(image_spec(IMAGE)),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        annotations: [(
            plegd::kubecontainer::ANNOTATION_RESTART_COUNT.to_owned(),
            attempt.to_string(),
        )]
        .into(),
        ..Default::default()
    }
}

/// A container allowed 32 MiB that asks for a 256 MiB buffer: the kernel OOM-kills it (137,
/// reason OOMKilled) about a second after it starts.
pub fn memory_hog() -> cri::ContainerConfig {
    cri::ContainerConfig {
        image: Some(image_spec(IMAGE)),
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "sleep 1; exec dd if=/dev/zero of=/dev/null bs=256M count=1".into(),
        ],
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                memory_limit_in_bytes: 32 << 20,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
