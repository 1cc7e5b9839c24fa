//! `plegd run`: the whole daemon wired together — CRI runtime → relister (+ triggers) → syncLoop
//! (with the informer) → status manager → apiserver. It starts every stage, fails at start with one
//! clear error when the runtime or the apiserver configuration is unusable, and runs until the
//! shutdown future completes.
//!
//! Wiring only: every decision is in a stage, the apiserver clients are built in [`client`].
//! [`run`] is four steps — the runtime, the runtime side (relister, triggers, the event fan-out),
//! the apiserver side (informer, status manager, syncLoop, Kubernetes Events), the endpoints — and
//! then supervision: every stage runs under `supervise`, and the first one to end ends the daemon.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::apiserver::client::{self, ApiClients, ClientError};
use crate::apiserver::informer::{self, Informer, PodChange};
use crate::apiserver::node;
use crate::apiserver::pod::NodeName;
use crate::metrics::Metrics;
use crate::observe;
use crate::pleg::{self, EventHub, GenericPleg, PlegConfig, PlegHandle, PodLifecycleEvent, StreamState};
use crate::runtime::{CriConfig, CriRuntime, RuntimeError, RuntimeVersion};
use crate::status::decide::NodeFacts;
use crate::status::generate::{Fit, KubeletMinor};
use crate::status::manager::{ManagerConfig, StatusManager};
use crate::status::report::StatusReports;
use crate::sync_loop::{SyncConfig, SyncLoop};
use crate::triggers::{self, TriggerConfig, TriggerMode};
use crate::util::backoff::{ExponentialBackoff, RetryAfter};
use crate::util::clock::SystemClock;
use crate::util::supervise::{StageEnded, StageHealth, Stages};

/// How long a cancelled set of stages may take to end before it is aborted.
const STAGE_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything `plegd run` is told.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub cri_socket: PathBuf,
    pub cri: CriConfig,
    pub pleg: PlegConfig,
    pub triggers: TriggerMode,
    pub trigger_config: TriggerConfig,
    pub kubeconfig: Option<PathBuf>,
    pub manager: ManagerConfig,
    pub sync: SyncConfig,
    pub emit_events: bool,
    /// Where the observation API listens; None: not served.
    pub api_socket: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz listen; None: not served.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Whether /metrics asks for Kubernetes authentication and authorization (`metrics_auth`).
    pub metrics_auth: bool,
    /// The audience a /metrics reader's token must be issued for (`--metrics-token-audience`).
    pub metrics_token_audience: Option<String>,
    /// The certificate /metrics serves over TLS; None: plain HTTP (`--metrics-tls`).
    pub metrics_tls: Option<crate::serve::tls::CertificateSource>,
    /// Where /healthz and /readyz listen alone, for the kubelet's probes; None: not served.
    pub health_address: Option<std::net::SocketAddr>,
    /// How long pending status writes may take to flush at shutdown.
    pub shutdown_timeout: std::time::Duration,
    /// The deadline of each apiserver request (`--apiserver-timeout`; see [`ApiClients`]).
    pub apiserver_timeout: std::time::Duration,
    /// How the informer lists this node's pods (`--initial-list`).
    pub initial_list: crate::apiserver::informer::InitialList,
    /// `--kubelet-version`: the kubelet version whose status is generated; None: the Node's.
    pub kubelet_version: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Api(#[from] crate::observe::ApiError),
    #[error(transparent)]
    StageEnded(#[from] StageEnded),
    #[error("/metrics' certificate: {0}")]
    Tls(crate::serve::tls::TlsError),
    #[error("cannot listen on --{flag} {address}: {error}")]
    Listen {
        flag: &'static str,
        address: std::net::SocketAddr,
        error: std::io::Error,
    },
}

/// The daemon's health as the HTTP endpoint and systemd see it.
struct DaemonHealth {
    pleg: PlegHandle,
    informer: informer::Informer,
    stages: StageHealth,
}

impl crate::serve::http::Health for DaemonHealth {
    fn healthy(&self) -> Result<(), String> {
        self.stages.check()?;
        self.pleg.healthy().map_err(|e| e.to_string())
    }

    /// What the runtime event stream is doing (the relist period follows it).
    fn details(&self) -> String {
        let state = self.pleg.trigger_state();
        let why = match state {
            StreamState::Off => " (relisting every --relist-period)",
            StreamState::Connecting | StreamState::Reconnecting => " (relisting every --relist-period meanwhile)",
            StreamState::Connected => " (relisting every --relist-period-with-triggers)",
            StreamState::Unusable => {
                " (the runtime ends its event stream as soon as it opens; relisting every --relist-period)"
            }
        };
        format!("triggers: {}{why}\n", state.as_str())
    }

    fn ready(&self) -> Result<(), String> {
        if self.pleg.last_relist().is_none() {
            return Err("the first relist has not completed".into());
        }
        if !self.informer.is_ready() {
            return Err("the pod informer has not synced".into());
        }
        Ok(())
    }
}

/// Run the daemon until `shutdown` completes, or until one of its stages ends (an error: plegd
/// then exits non-zero so that it is restarted).
pub async fn run(
    options: DaemonConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    run_with(options, metrics, shutdown, Hooks::default()).await
}

/// How tests reach into a running daemon ([`run_controlled`]).
#[cfg(feature = "test-util")]
pub struct Control {
    /// Names of stages to end as a crash would end them.
    pub abort: mpsc::Receiver<String>,
    /// Told once every stage is started.
    pub started: Option<tokio::sync::oneshot::Sender<Started>>,
}

/// [`run`], reachable by [`Control`]: how the tests show that the loss of any stage is seen.
#[cfg(feature = "test-util")]
pub async fn run_controlled(
    options: DaemonConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
    control: Control,
) -> Result<(), DaemonError> {
    let hooks = Hooks {
        abort: Some(control.abort),
        started: control.started,
    };
    run_with(options, metrics, shutdown, hooks).await
}

/// A daemon whose stages are all started.
pub struct Started {
    /// Its health, as /healthz and the systemd watchdog ask it.
    pub health: Arc<dyn crate::serve::http::Health>,
    /// Its stages in the order they started, from the supervisor's record.
    pub stages: Vec<&'static str>,
}

/// What [`Control`] reaches; nothing in a daemon [`run`] starts.
#[derive(Default)]
struct Hooks {
    abort: Option<mpsc::Receiver<String>>,
    started: Option<tokio::sync::oneshot::Sender<Started>>,
}

async fn run_with(
    options: DaemonConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
    hooks: Hooks,
) -> Result<(), DaemonError> {
    let Hooks { mut abort, started } = hooks;
    tokio::pin!(shutdown);
    // A runtime that is not up yet (plegd started first at boot, or the runtime restarting) is
    // waited for; systemd sees plegd as starting (no READY) meanwhile.
    let runtime = tokio::select! {
        biased;
        () = &mut shutdown => return Ok(()),
        runtime = connect_runtime(&options, &metrics) => runtime?,
    };
    let retry_after = Arc::new(RetryAfter::default());
    let clients = client::kube_clients(
        options.kubeconfig.as_ref(),
        options.apiserver_timeout,
        metrics.clone(),
        retry_after.clone(),
    )
    .await?;
    info!(
        node = %options.manager.node_name,
        runtime = %runtime.version.runtime_name,
        runtime_version = %runtime.version.runtime_version,
        status_mode = options.sync.mode.as_str(),
        "plegd starting"
    );
    let health = StageHealth::default();
    let mut stages = DaemonStages::new(&health);
    let runtime_side = start_runtime_side(&options, &runtime.version, runtime.cri, &metrics, &mut stages);
    let apiserver_side = start_apiserver_side(&options, &clients, retry_after, &metrics, &mut stages);
    let daemon_health = Arc::new(DaemonHealth {
        pleg: runtime_side.pleg.clone(),
        informer: apiserver_side.informer.clone(),
        stages: health.clone(),
    });
    let reports = StatusReports::default();
    serve_endpoints(
        &options,
        &clients,
        runtime_side.hub,
        &reports,
        daemon_health.clone(),
        &metrics,
        &mut stages.outputs,
    )
    .await?;
    // The syncLoop generates nothing before it knows whose rules to follow; an apiserver not up yet
    // is waited for, as the informer waits for it.
    let kubelet = tokio::select! {
        biased;
        () = &mut shutdown => return Ok(()),
        kubelet = kubelet_rules(&options, &clients.requests, &metrics) => kubelet,
    };
    let node = NodeFacts {
        runtime_name: runtime.version.runtime_name.clone(),
        node_ips: options.sync.node_ips.clone(),
        recursive_read_only_handlers: runtime.recursive_read_only_handlers,
        stop_signals: options.sync.stop_signals,
        kubelet,
    };
    let manager = apiserver_side.manager.clone();
    let sync_loop = SyncLoop::new(
        runtime_side.pleg,
        apiserver_side.informer,
        apiserver_side.manager,
        apiserver_side.recorder,
        options.sync.clone(),
        node,
        metrics,
    )
    .reporting_to(reports);
    stages.pipeline.spawn(
        "sync-loop",
        sync_loop.run(runtime_side.sync_events, apiserver_side.changes),
    );
    if let Some(started) = started {
        let _ = started.send(Started {
            health: daemon_health,
            stages: health.started(),
        });
    }

    let failure = supervise(&mut stages, abort.as_mut(), shutdown.as_mut()).await;
    stop(stages, &manager, options.shutdown_timeout).await;
    if let Some(path) = &options.api_socket {
        let _ = std::fs::remove_file(path);
    }
    match failure {
        Some(ended) => Err(DaemonError::StageEnded(ended)),
        None => Ok(()),
    }
}

/// The runtime, connected (waited for while its socket is not there yet), and what plegd asks it
/// once at start.
struct Runtime {
    cri: CriRuntime,
    version: RuntimeVersion,
    /// None when the runtime could not tell (read-only mounts that ask for it are then left out).
    recursive_read_only_handlers: Option<Vec<String>>,
}

async fn connect_runtime(options: &DaemonConfig, metrics: &Arc<Metrics>) -> Result<Runtime, RuntimeError> {
    let (cri, version) = CriRuntime::connect_waiting(&options.cri_socket, &options.cri, metrics.clone()).await?;
    let recursive_read_only_handlers = match cri.recursive_read_only_handlers().await {
        Ok(handlers) => Some(handlers),
        Err(error) => {
            warn!(error = %error, "cannot tell which runtime handlers support recursive read-only mounts; read-only volume mounts that ask for them are left out of container statuses");
            None
        }
    };
    Ok(Runtime {
        cri,
        version,
        recursive_read_only_handlers,
    })
}

/// What the runtime side hands on: the relister's handle, its events for the syncLoop, and the
/// broadcast the observation API serves.
struct RuntimeSide {
    pleg: PlegHandle,
    sync_events: mpsc::Receiver<PodLifecycleEvent>,
    hub: EventHub,
}

/// The kubelet minor whose status plegd generates, said and counted
/// (`plegd_status_kubelet_rules`): `--kubelet-version`'s, else the version the Node's kubelet
/// reports. A minor plegd does not know gets the closest one's rules; a node whose version the
/// apiserver says it has not (no Node, no version on it) or will not show (the GET refused: an
/// install without the right) gets 1.37's, with a warning. An apiserver that cannot be reached is
/// asked again with backoff, never answered with a guess.
async fn kubelet_rules(options: &DaemonConfig, client: &kube::Client, metrics: &Metrics) -> KubeletMinor {
    let node = &options.manager.node_name;
    let (version, source) = match &options.kubelet_version {
        Some(version) => (Some(version.clone()), "--kubelet-version"),
        None => (node_kubelet_version(client, node).await, "the Node"),
    };
    let kubelet = version.as_deref().unwrap_or_default();
    let (minor, fit) = match version.as_deref().map(KubeletMinor::of_version) {
        Some(Ok((minor, Fit::Exact))) => {
            info!(%node, kubelet, from = source, rules = %minor, "status generated as this kubelet writes it");
            (minor, Fit::Exact.as_str())
        }
        Some(Ok((minor, fit))) => {
            warn!(%node, kubelet, from = source, rules = %minor, "a kubelet minor plegd does not know: the closest one's status rules");
            (minor, fit.as_str())
        }
        Some(Err(error)) => {
            warn!(%node, %error, "the kubelet version is not one: 1.37's status rules");
            (KubeletMinor::NEWEST, "unknown")
        }
        None => {
            warn!(%node, "no kubelet version known (a node without a kubelet, or its Node not shown to plegd): 1.37's status rules; --kubelet-version sets it");
            (KubeletMinor::NEWEST, "unknown")
        }
    };
    metrics.set_kubelet_rules(minor.as_str(), fit);
    minor
}

/// How long the Node may be refused (401, 403) before plegd takes it for an install without the
/// right: an apiserver that has just started refuses requests until its authorizer has loaded the
/// cluster's RBAC (seconds).
const NODE_REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The Node's kubelet version, asked until the apiserver answers: None when it answers that there
/// is none, or keeps refusing to show it (401, 403) for [`NODE_REFUSED_FOR`].
async fn node_kubelet_version(client: &kube::Client, node: &NodeName) -> Option<String> {
    let mut waits = ExponentialBackoff::constant(std::time::Duration::from_secs(1), std::time::Duration::from_secs(30));
    let mut refused_since = None;
    let mut said = false;
    loop {
        let error = match node::kubelet_version(client, node).await {
            Ok(version) => return version,
            Err(error) => error,
        };
        let refused = matches!(&error, kube::Error::Api(status) if matches!(status.code, 401 | 403));
        if refused {
            let since = *refused_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= NODE_REFUSED_FOR {
                warn!(%node, %error, "the Node may not be read (get nodes)");
                return None;
            }
        } else {
            refused_since = None;
        }
        if !said {
            warn!(%node, %error, "the Node's kubelet version could not be read yet; asking again");
            said = true;
        }
        let wait = waits.next_wait();
        tokio::time::sleep(if refused { wait.min(NODE_REFUSED_FOR / 4) } else { wait }).await;
    }
}

fn start_runtime_side(
    options: &DaemonConfig,
    version: &RuntimeVersion,
    cri: CriRuntime,
    metrics: &Arc<Metrics>,
    stages: &mut DaemonStages,
) -> RuntimeSide {
    let (pleg, events) = GenericPleg::new(cri, SystemClock, metrics.clone(), options.pleg.clone());
    let pleg = Arc::new(pleg);
    for (name, stage) in triggers::stages(options.triggers, version, pleg.clone(), options.trigger_config.clone()) {
        stages.inputs.spawn(name, stage);
    }
    stages
        .relister
        .spawn("relister", pleg.clone().run_until(stages.relist_stop.clone()));
    let hub = EventHub::new(pleg::SUBSCRIBER_BUFFER);
    // The syncLoop's queue has the configured capacity too, so that the setting bounds what is buffered.
    let (to_sync, sync_events) = mpsc::channel(options.pleg.channel_capacity().get());
    stages.pipeline.spawn(
        "event-fan-out",
        pleg::fan_out(
            events,
            hub.clone(),
            Some(to_sync),
            metrics.clone(),
            stages.drain.clone(),
        ),
    );
    RuntimeSide {
        pleg: pleg.handle(),
        sync_events,
        hub,
    }
}

/// What the apiserver side hands the syncLoop.
struct ApiserverSide {
    informer: Informer,
    changes: mpsc::Receiver<PodChange>,
    manager: Arc<StatusManager>,
    recorder: Option<crate::apiserver::recorder::EventSender>,
}

/// The informer over this node's pods, the status manager's writers and the Kubernetes Events queue.
fn start_apiserver_side(
    options: &DaemonConfig,
    clients: &ApiClients,
    retry_after: Arc<RetryAfter>,
    metrics: &Arc<Metrics>,
    stages: &mut DaemonStages,
) -> ApiserverSide {
    let (changes_tx, changes) = mpsc::channel(4096);
    let (informer, informer_stage) = informer::start(
        clients.watches.clone(),
        client::watch_timeout(options.apiserver_timeout, client::watch_timeout_draw()),
        options.initial_list,
        &options.manager.node_name,
        changes_tx,
        retry_after.clone(),
        metrics.clone(),
    );
    stages.inputs.spawn("informer", informer_stage);
    let manager = StatusManager::new(
        clients.requests.clone(),
        informer.store.clone(),
        options.manager.clone(),
        retry_after.clone(),
        metrics.clone(),
    );
    for (name, stage) in manager.stages() {
        stages.outputs.spawn(name, stage);
    }
    let recorder = options.emit_events.then(|| {
        let reporter = crate::apiserver::recorder::Reporter {
            controller: "plegd".into(),
            instance: options.manager.node_name.to_string(),
        };
        let (sender, stage) = crate::apiserver::recorder::queue(
            clients.requests.clone(),
            reporter,
            crate::apiserver::recorder::EventLimits::default(),
            retry_after.clone(),
            crate::apiserver::recorder::QUEUE,
            metrics.clone(),
        );
        stages.outputs.spawn("kube-events", stage);
        sender
    });
    ApiserverSide {
        informer,
        changes,
        manager,
        recorder,
    }
}

/// The observation API, /metrics and the probes' endpoints (each when asked for), and systemd's
/// READY and watchdog. Raises the open-file limit first, and bounds each listener's connections
/// by what it leaves.
async fn serve_endpoints(
    options: &DaemonConfig,
    clients: &ApiClients,
    hub: EventHub,
    reports: &StatusReports,
    health: Arc<DaemonHealth>,
    metrics: &Arc<Metrics>,
    output: &mut Stages,
) -> Result<(), DaemonError> {
    let fd_limit = crate::serve::listen::raise_fd_limit();
    if let Some(path) = &options.api_socket {
        let limit = crate::serve::listen::connection_limit(observe::MAX_API_CONNECTIONS, fd_limit);
        output.spawn(
            "observation-api",
            observe::serve(path, hub, reports.clone(), metrics.clone(), limit)?,
        );
    }
    if let Some(address) = options.metrics_address {
        let limits = crate::serve::http::HttpLimits::metrics(crate::serve::listen::connection_limit(
            crate::serve::http::MAX_METRICS_CONNECTIONS,
            fd_limit,
        ));
        let auth = options.metrics_auth.then(|| {
            Arc::new(
                crate::serve::metrics_auth::MetricsAuth::new(
                    clients.reviews.clone(),
                    options.apiserver_timeout,
                    metrics.clone(),
                )
                .with_audience(options.metrics_token_audience.clone()),
            )
        });
        let tls = match options.metrics_tls.clone() {
            Some(source) => Some(Arc::new(
                crate::serve::tls::ServingCertificate::new(
                    source,
                    metrics.clone(),
                    std::time::Instant::now(),
                    std::time::SystemTime::now(),
                )
                .map_err(DaemonError::Tls)?,
            )),
            None => None,
        };
        let (_, stage) = crate::serve::http::serve(address, metrics.clone(), health.clone(), auth, tls, limits)
            .await
            .map_err(|error| DaemonError::Listen {
                flag: "metrics-address",
                address,
                error,
            })?;
        output.spawn("http", stage);
    }
    if let Some(address) = options.health_address {
        let limits = crate::serve::http::HttpLimits::health(crate::serve::listen::connection_limit(
            crate::serve::http::MAX_HEALTH_CONNECTIONS,
            fd_limit,
        ));
        let (_, stage) = crate::serve::http::serve_health(address, metrics.clone(), health.clone(), limits)
            .await
            .map_err(|error| DaemonError::Listen {
                flag: "health-address",
                address,
                error,
            })?;
        output.spawn("health", stage);
    }
    let relister = health.pleg.clone();
    output.spawn(
        "systemd-notify",
        crate::serve::watchdog::notify_systemd(move || relister.last_relist().is_some(), health),
    );
    Ok(())
}

/// Wait for shutdown or the first stage to end (said, with its cause, at error level), ending the
/// stages that tests ask to abort meanwhile.
async fn supervise(
    stages: &mut DaemonStages,
    abort: Option<&mut mpsc::Receiver<String>>,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<StageEnded> {
    let mut abort = abort;
    let failure = loop {
        tokio::select! {
            // A stage that ends takes down those that feed on it (a syncLoop gone closes the
            // Kubernetes Events queue): the first one named is the cause, the inputs' first.
            biased;
            () = &mut shutdown => break None,
            ended = stages.inputs.failure() => break Some(ended),
            ended = stages.relister.failure() => break Some(ended),
            ended = stages.pipeline.failure() => break Some(ended),
            ended = stages.outputs.failure() => break Some(ended),
            Some(name) = next_abort(abort.as_deref_mut()) => {
                let groups = [&mut stages.inputs, &mut stages.relister, &mut stages.pipeline, &mut stages.outputs];
                if !groups.into_iter().any(|group| group.abort(&name)) {
                    warn!(stage = %name, "no such stage to abort");
                }
            }
        }
    };
    if let Some(ended) = &failure {
        error!(stage = ended.stage, cause = %ended.cause, "a stage of plegd ended; plegd is unhealthy and exits so that it is restarted");
    }
    failure
}

/// The next stage a test asks to abort; never, in a daemon [`run`] starts.
async fn next_abort(abort: Option<&mut mpsc::Receiver<String>>) -> Option<String> {
    match abort {
        Some(abort) => abort.recv().await,
        None => std::future::pending().await,
    }
}

/// The daemon's stages in four groups, by when they stop ([`stop`]): what brings work in first,
/// what sends results out last, so that what was computed before the signal is still delivered.
struct DaemonStages {
    /// Stopped first: the sources of work (runtime triggers, the informer).
    inputs: Stages,
    /// The relister alone: told to stop by `relist_stop`, it ends after the relist under way.
    relister: Stages,
    relist_stop: CancellationToken,
    /// What carries the computed events on (the event fan-out, the syncLoop): told to hand over
    /// what it holds by `drain`, and given until the shutdown deadline.
    pipeline: Stages,
    /// Tells the pipeline to hand over what it holds and end.
    drain: CancellationToken,
    /// Stopped last, once the status writes are flushed or the deadline passed: the status
    /// writers, the Kubernetes Events queue and the endpoints (observation API, metrics).
    outputs: Stages,
}

impl DaemonStages {
    fn new(health: &StageHealth) -> Self {
        let set = || Stages::new(CancellationToken::new(), health.clone());
        Self {
            inputs: set(),
            relister: set(),
            relist_stop: CancellationToken::new(),
            pipeline: set(),
            drain: CancellationToken::new(),
            outputs: set(),
        }
    }
}

/// Stop taking in work; let the pipeline hand what was computed before the signal (lifecycle
/// events in the PLEG's channel and the syncLoop's queue) to the status manager and the observers;
/// give the status writes until `timeout` to land, then, within the same deadline, hand the gated
/// pods back to the kubelet (conditions mode); then stop the writers and endpoints.
async fn stop(stages: DaemonStages, manager: &StatusManager, timeout: std::time::Duration) {
    if let Err(error) = crate::serve::watchdog::notify(&[sd_notify::NotifyState::Stopping]) {
        warn!(error = %error, "systemd notification STOPPING=1 not sent");
    }
    info!(pending_status_writes = manager.pending(), "plegd stopping");
    let deadline = tokio::time::Instant::now() + timeout;
    // Within the deadline, however short `--shutdown-timeout` is.
    stages.inputs.shutdown(STAGE_DRAIN.min(timeout)).await;
    stages.relist_stop.cancel();
    let cut = stages.relister.finish_by(deadline).await;
    if !cut.is_empty() {
        warn!("shutdown deadline reached in the middle of a relist");
    }
    stages.drain.cancel();
    let cut = stages.pipeline.finish_by(deadline).await;
    if !cut.is_empty() {
        warn!(stages = ?cut, "shutdown deadline reached before the computed events were handed over");
    }
    let refused = manager.give_up_refused();
    if refused > 0 {
        warn!(
            pods = refused,
            "not waiting for status writes the apiserver refused (they would be sent again later)"
        );
    }
    if tokio::time::timeout_at(deadline, manager.flushed()).await.is_ok() {
        info!("all status writes flushed");
    } else {
        warn!(
            pending_status_writes = manager.pending(),
            "shutdown deadline reached with status writes pending"
        );
    }
    // The gated pods go back to the kubelet after the last writes of what the runtime showed, so
    // that each is handed back with the condition plegd last read.
    let handed_back = manager.hand_back_gated_pods();
    if handed_back > 0 {
        if tokio::time::timeout_at(deadline, manager.flushed()).await.is_ok() {
            info!(pods = handed_back, "gated pods handed back to the kubelet");
        } else {
            warn!(
                pods = handed_back,
                pending_status_writes = manager.pending(),
                "shutdown deadline reached before every gated pod was handed back to the kubelet"
            );
        }
    }
    stages.outputs.shutdown(STAGE_DRAIN).await;
}
