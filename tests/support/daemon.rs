//! `plegd run` options for in-process runs against a test runtime socket and the test apiserver.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plegd::daemon::DaemonConfig;
use plegd::pleg::PlegConfig;
use plegd::runtime::CriConfig;
use plegd::status::StatusMode;
use plegd::status::manager::ManagerConfig;
use plegd::sync_loop::SyncConfig;
use plegd::triggers::{TriggerConfig, TriggerMode};

/// Full daemon options with test-friendly defaults: no API socket or HTTP endpoint, node IP
/// 192.0.2.10, the given mode; callers adjust what they need.
pub fn options(cri_socket: &Path, kubeconfig: PathBuf, node: &str, mode: StatusMode) -> DaemonConfig {
    DaemonConfig {
        cri_socket: cri_socket.to_owned(),
        cri: CriConfig::default(),
        pleg: PlegConfig::default(),
        triggers: TriggerMode::Auto,
        trigger_config: TriggerConfig::default(),
        kubeconfig: Some(kubeconfig),
        manager: ManagerConfig::new(
            plegd::apiserver::pod::NodeName::new(node).expect("a valid node name"),
            mode,
        ),
        sync: SyncConfig {
            mode,
            node_ips: vec!["192.0.2.10".into()],
            ..SyncConfig::default()
        },
        emit_events: false,
        api_socket: None,
        metrics_address: None,
        metrics_auth: false,
        metrics_token_audience: None,
        metrics_tls: None,
        health_address: None,
        shutdown_timeout: Duration::from_secs(5),
        apiserver_timeout: Duration::from_secs(30),
        initial_list: plegd::apiserver::informer::InitialList::Stream,
        kubelet_version: None,
    }
}

/// `plegd run` in this process, on a thread and async runtime of its own as the binary runs it
/// (`--worker-threads 1`), until [`InProcess::stop`] (or drop) asks it to shut down.
pub struct InProcess {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Start `plegd run` with `options` in this process.
pub fn spawn(options: DaemonConfig, metrics: std::sync::Arc<plegd::metrics::Metrics>) -> InProcess {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("plegd".into())
        .spawn(move || {
            let runtime = plegd::cli::async_runtime(1).expect("plegd's async runtime");
            runtime
                .block_on(plegd::daemon::run(options, metrics, async {
                    let _ = rx.await;
                }))
                .expect("plegd run");
        })
        .expect("plegd thread");
    InProcess {
        shutdown: Some(tx),
        thread: Some(thread),
    }
}

impl InProcess {
    /// Ask for a graceful shutdown and wait for it; a panic of the daemon fails the caller.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join()).await.expect("join");
            if let Err(panic) = joined {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// Dropped without [`InProcess::stop`]: asked to shut down, not waited for.
impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// `plegd run` in this process, reachable by [`plegd::daemon::Control`]: stages to end, its health
/// as /healthz answers it, and the result `run` returned (which the binary turns into its exit code).
pub struct Controlled {
    pub abort: tokio::sync::mpsc::Sender<String>,
    pub health: std::sync::Arc<dyn plegd::serve::http::Health>,
    /// Its stages in the order they started, from the supervisor's record.
    pub stages: Vec<&'static str>,
    result: tokio::sync::oneshot::Receiver<Result<(), String>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Start `plegd run` with `options` in this process, with a [`Controlled`] handle once it runs.
pub async fn spawn_controlled(options: DaemonConfig, metrics: std::sync::Arc<plegd::metrics::Metrics>) -> Controlled {
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    let (abort_tx, abort_rx) = tokio::sync::mpsc::channel(4);
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (result_tx, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("plegd".into())
        .spawn(move || {
            let runtime = plegd::cli::async_runtime(1).expect("plegd's async runtime");
            let control = plegd::daemon::Control {
                abort: abort_rx,
                started: Some(started_tx),
            };
            let ended = runtime.block_on(plegd::daemon::run_controlled(
                options,
                metrics,
                async {
                    let _ = shutdown_rx.await;
                },
                control,
            ));
            let _ = result_tx.send(ended.map_err(|e| e.to_string()));
        })
        .expect("plegd thread");
    let started = started_rx.await.expect("the daemon started");
    Controlled {
        abort: abort_tx,
        health: started.health,
        stages: started.stages,
        result,
        shutdown: Some(shutdown_tx),
    }
}

impl Controlled {
    /// Ask for a graceful shutdown and wait (at most `timeout`) for what `run` returned.
    pub async fn stop(mut self, timeout: Duration) -> Result<(), String> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.result(timeout).await
    }

    /// What `run` returned, waiting at most `timeout` for it.
    pub async fn result(&mut self, timeout: Duration) -> Result<(), String> {
        tokio::time::timeout(timeout, &mut self.result)
            .await
            .expect("the daemon ended in time")
            .expect("the daemon thread reported")
    }
}

impl Drop for Controlled {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
