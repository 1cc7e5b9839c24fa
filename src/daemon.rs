//! `plegd run`: the whole daemon wired together — CRI runtime → relister (+ triggers) → syncLoop
//! (with the informer) → status manager → apiserver. It starts every stage, fails at start with one
//! clear error when the runtime or the apiserver configuration is unusable, and runs until the
//! shutdown future completes.

use std::path::PathBuf;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::mpsc;
use tracing::info;

use crate::cache::PodCache;
use crate::clock::SystemClock;
use crate::informer;
use crate::metrics::Metrics;
use crate::pleg::{GenericPleg, PlegConfig};
use crate::runtime::{CriOptions, CriRuntime, RuntimeError};
use crate::status::manager::{ManagerConfig, StatusManager};
use crate::sync_loop::{SyncConfig, SyncLoop};
use crate::triggers::{self, TriggerMode, TriggerOptions};

/// Everything `plegd run` is told.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub cri_socket: PathBuf,
    pub cri: CriOptions,
    pub pleg: PlegConfig,
    pub triggers: TriggerMode,
    pub trigger_options: TriggerOptions,
    pub kubeconfig: Option<PathBuf>,
    pub manager: ManagerConfig,
    pub sync: SyncConfig,
    pub emit_events: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Not retryable here: the flag or the environment is wrong.
    #[error("--node-name (or NODE_NAME) is required")]
    NoNodeName,
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot read --kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no apiserver configuration found (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
    #[error("cannot build the apiserver client: {0}")]
    Client(#[source] kube::Error),
    #[error("invalid backoff settings: {0}")]
    Backoff(#[from] crate::backoff::InvalidBackoff),
}

/// The apiserver client: from `--kubeconfig`, else as kube-rs infers it (KUBECONFIG, the default
/// kubeconfig, or the in-cluster service account).
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, DaemonError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| DaemonError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| DaemonError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(DaemonError::InferConfig)?,
    };
    kube::Client::try_from(config).map_err(DaemonError::Client)
}

/// Run the daemon until `shutdown` completes.
pub async fn run(
    options: DaemonOptions,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    if options.manager.node_name.is_empty() {
        return Err(DaemonError::NoNodeName);
    }
    let (runtime, version) = CriRuntime::connect(&options.cri_socket, &options.cri, metrics.clone()).await?;
    let client = kube_client(options.kubeconfig.as_ref()).await?;
    info!(
        node = %options.manager.node_name,
        runtime = %version.runtime_name,
        runtime_version = %version.runtime_version,
        status_mode = options.sync.mode.as_str(),
        "plegd starting"
    );

    let (pleg, events) = GenericPleg::new(
        runtime,
        SystemClock,
        Arc::new(PodCache::new()),
        metrics.clone(),
        options.pleg.clone(),
    );
    let pleg = Arc::new(pleg);
    let mut tasks = triggers::spawn(
        options.triggers,
        &version.runtime_name,
        pleg.clone(),
        options.trigger_options.clone(),
    )?;
    tasks.push(tokio::spawn(pleg.clone().run()));

    let (changes_tx, changes) = mpsc::channel(4096);
    let (informer, informer_task) =
        informer::start(client.clone(), &options.manager.node_name, changes_tx, metrics.clone());
    tasks.push(informer_task);
    let manager = StatusManager::new(
        client.clone(),
        informer.store.clone(),
        options.manager.clone(),
        metrics.clone(),
    )?;
    tasks.extend(manager.start());
    let recorder = options.emit_events.then(|| {
        Recorder::new(
            client.clone(),
            Reporter {
                controller: "plegd".into(),
                instance: Some(options.manager.node_name.clone()),
            },
        )
    });
    let mut sync = options.sync.clone();
    if sync.runtime_name.is_empty() {
        sync.runtime_name = version.runtime_name.clone();
    }
    let sync_loop = SyncLoop::new(pleg, informer, manager, recorder, sync, metrics);
    tasks.push(tokio::spawn(sync_loop.run(events, changes)));

    shutdown.await;
    info!("plegd stopping");
    for task in tasks {
        task.abort();
    }
    Ok(())
}
