//! `plegd run` options for in-process runs against a test runtime socket and the test apiserver.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plegd::daemon::DaemonOptions;
use plegd::pleg::PlegConfig;
use plegd::runtime::CriOptions;
use plegd::status::StatusMode;
use plegd::status::manager::ManagerConfig;
use plegd::sync_loop::SyncConfig;
use plegd::triggers::{TriggerMode, TriggerOptions};

/// Full daemon options with test-friendly defaults: no API socket or HTTP endpoint, node IP
/// 192.0.2.10, the given mode; callers adjust what they need.
pub fn options(cri_socket: &Path, kubeconfig: PathBuf, node: &str, mode: StatusMode) -> DaemonOptions {
    DaemonOptions {
        cri_socket: cri_socket.to_owned(),
        cri: CriOptions::default(),
        pleg: PlegConfig::default(),
        triggers: TriggerMode::Auto,
        trigger_options: TriggerOptions::default(),
        kubeconfig: Some(kubeconfig),
        manager: ManagerConfig {
            node_name: node.into(),
            ..ManagerConfig::default()
        },
        sync: SyncConfig {
            mode,
            runtime_name: String::new(),
            node_ips: vec!["192.0.2.10".into()],
            ..SyncConfig::default()
        },
        emit_events: false,
        api_socket: None,
        metrics_address: None,
        shutdown_timeout: Duration::from_secs(5),
    }
}

/// `plegd run` in this process, until [`InProcess::stop`] (or drop) asks it to shut down.
pub struct InProcess {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Start `plegd run` with `options` as a task of this process.
pub fn spawn(options: DaemonOptions, metrics: std::sync::Arc<plegd::metrics::Metrics>) -> InProcess {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        plegd::daemon::run(options, metrics, async {
            let _ = rx.await;
        })
        .await
        .expect("plegd run");
    });
    InProcess {
        shutdown: Some(tx),
        task: Some(task),
    }
}

impl InProcess {
    /// Ask for a graceful shutdown and wait for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// Dropped without [`InProcess::stop`]: asked to shut down and cut short.
impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
