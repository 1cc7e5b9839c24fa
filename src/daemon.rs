//! `plegd run`: the whole daemon wired together — CRI runtime → relister (+ triggers) → syncLoop
//! (with the informer) → status manager → apiserver. It starts every stage, fails at start with one
//! clear error when the runtime or the apiserver configuration is unusable, and runs until the
//! shutdown future completes.
//!
//! It holds no logic of its own: every decision is in a stage. It never leaves a stage detached:
//! each runs under supervision (`supervise`), and the first one to end ends the daemon.

use std::path::PathBuf;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::backoff::RetryAfter;
use crate::clock::SystemClock;
use crate::informer;
use crate::metrics::Metrics;
use crate::observe;
use crate::pleg::{self, EventHub, GenericPleg, PlegConfig, PlegHandle, StreamState};
use crate::runtime::{CriOptions, CriRuntime, RuntimeError};
use crate::status::decide::NodeFacts;
use crate::status::manager::{ManagerConfig, StatusManager};
use crate::status::report::StatusReports;
use crate::supervise::{StageEnded, StageHealth, Stages};
use crate::sync_loop::{SyncConfig, SyncLoop};
use crate::triggers::{self, TriggerMode, TriggerOptions};

/// How long a cancelled set of stages may take to end before it is aborted.
const STAGE_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// Where the observation API listens; None: not served.
    pub api_socket: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz listen; None: not served.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Whether /metrics asks for Kubernetes authentication and authorization (`metrics_auth`).
    pub metrics_auth: bool,
    /// Where /healthz and /readyz listen alone, for the kubelet's probes; None: not served.
    pub health_address: Option<std::net::SocketAddr>,
    /// How long pending status writes may take to flush at shutdown.
    pub shutdown_timeout: std::time::Duration,
    /// The deadline of each apiserver request (`--apiserver-timeout`; see [`ApiClients`]).
    pub apiserver_timeout: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
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
    #[error(transparent)]
    Api(#[from] crate::observe::ApiError),
    #[error("{0}")]
    StageEnded(#[from] StageEnded),
    #[error("cannot listen on --{flag} {address}: {source}")]
    Listen {
        flag: &'static str,
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The daemon's health as the HTTP endpoint and systemd see it.
struct DaemonHealth {
    pleg: PlegHandle,
    informer: informer::Informer,
    stages: StageHealth,
}

impl crate::http::Health for DaemonHealth {
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

/// A tower layer on the apiserver client that counts requests by verb and response code
/// (`plegd_apiserver_requests_total`; code `error` when no response came), and logs each distinct
/// `Warning` header the apiserver answers with once (an unknown field in a status plegd writes, a
/// deprecated API): one line per warning, not one per write; and takes note of each `Retry-After`
/// the apiserver sends with a 429 or a 5xx, for the status writers to honour ([`RetryAfter`]).
#[derive(Clone)]
struct CountRequestsLayer {
    metrics: Arc<Metrics>,
    warnings: Arc<ApiserverWarnings>,
    retry_after: Arc<RetryAfter>,
}

#[derive(Clone)]
struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
    warnings: Arc<ApiserverWarnings>,
    retry_after: Arc<RetryAfter>,
}

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.metrics.clone(),
            warnings: self.warnings.clone(),
            retry_after: self.retry_after.clone(),
        }
    }
}

/// The apiserver's warnings already logged. Bounded: past [`ApiserverWarnings::MAX`] distinct
/// warnings, new ones are counted but no longer logged, so a server that puts a changing value in
/// its warnings cannot grow plegd's memory or flood its log.
#[derive(Default)]
struct ApiserverWarnings {
    seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl ApiserverWarnings {
    const MAX: usize = 64;
    /// Longest warning text kept and logged, in bytes.
    const MAX_LEN: usize = 512;

    /// Log `headers`' warnings that were not logged before.
    fn observe(&self, headers: &http::HeaderMap, verb: &str, metrics: &Metrics) {
        for value in headers.get_all(http::header::WARNING) {
            let text = String::from_utf8_lossy(value.as_bytes());
            let mut end = text.len().min(Self::MAX_LEN);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let text = &text[..end];
            metrics.count_apiserver_warning();
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() < Self::MAX && seen.insert(text.to_owned()) {
                warn!(verb, warning = ?text, "apiserver warning (logged once)");
            }
        }
    }
}

impl<S, B, R> tower::Service<http::Request<B>> for CountRequests<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = if watch {
            "WATCH".to_owned()
        } else {
            request.method().as_str().to_owned()
        };
        let metrics = self.metrics.clone();
        let warnings = self.warnings.clone();
        let retry_after = self.retry_after.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(r) => {
                    warnings.observe(r.headers(), &verb, &metrics);
                    let status = r.status().as_u16();
                    let asked = r.headers().get(http::header::RETRY_AFTER).map(|v| v.as_bytes());
                    if let Some(wait) = RetryAfter::requested(status, asked) {
                        debug!(verb, code = status, wait = ?wait, "apiserver asked plegd to wait (Retry-After)");
                        metrics.count_apiserver_retry_after();
                        retry_after.push(wait);
                    }
                    status.to_string()
                }
                Err(_) => "error".to_owned(),
            };
            metrics.count_apiserver_request(&verb, &code);
            result
        })
    }
}

/// The apiserver clients of `plegd run`, each with deadlines so that no request waits forever on a
/// dead or black-holed connection (an apiserver powered off, a load balancer path gone): plegd
/// sees that and makes a new connection, as client-go's HTTP/2 health checks let the kubelet do.
#[derive(Clone)]
pub struct ApiClients {
    /// For requests that answer at once (status PATCHes, DELETEs, Events): connecting, sending and
    /// each wait for the answer's bytes are bounded by the request timeout.
    pub requests: kube::Client,
    /// For the informer's LIST and WATCH: the apiserver is asked to end each watch after
    /// [`watch_timeout`] (so a healthy watch is renewed that often), and a connection silent for
    /// longer than that and a margin is given up.
    pub watches: kube::Client,
    /// For the reviews that guard `/metrics`: like `requests`, but a `Retry-After` answered to a
    /// review (which clients of `/metrics` cause) does not hold back the status writes.
    pub reviews: kube::Client,
}

/// How long the apiserver is asked to keep one watch open, for a request timeout of `request`:
/// four times it (2 min by default; the kubelet's reflectors ask for 5 to 10 min, which is also
/// how long they can take to notice a dead watch). Whole seconds, at least one.
pub fn watch_timeout(request: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_secs((request * 4).as_secs().max(1))
}

/// Longer than a watch may be silent: the watch's own timeout and this margin.
const WATCH_SILENCE_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The apiserver clients: from `--kubeconfig`, else as kube-rs infers it (KUBECONFIG, the default
/// kubeconfig, or the in-cluster service account), with `request_timeout` as the deadline of each
/// request ([`ApiClients`]). Every request is counted in `metrics`, and every `Retry-After` the
/// apiserver asks for is noted in `retry_after`.
pub async fn kube_clients(
    kubeconfig: Option<&PathBuf>,
    request_timeout: std::time::Duration,
    metrics: Arc<Metrics>,
    retry_after: Arc<RetryAfter>,
) -> Result<ApiClients, DaemonError> {
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
    // kube's own retry of 429s, 503s and 504s (inside the client, below the layer that counts)
    // is off: every answer the apiserver gives is counted and seen here, a `Retry-After` holds back
    // every status write rather than one request, and each caller retries with its own backoff
    // (the status writers, the informer's watch).
    let mut config = config;
    config.default_retry = false;
    config.connect_timeout = Some(request_timeout);
    config.write_timeout = Some(request_timeout);
    // Counted from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    let layer = CountRequestsLayer {
        metrics,
        warnings: Arc::default(),
        retry_after,
    };
    let build = |read_timeout, layer: &CountRequestsLayer| {
        let mut config = config.clone();
        config.read_timeout = Some(read_timeout);
        let builder = kube::client::ClientBuilder::try_from(config).map_err(DaemonError::Client)?;
        Ok::<_, DaemonError>(builder.with_layer(layer).build())
    };
    let apart = CountRequestsLayer {
        retry_after: Arc::default(),
        ..layer.clone()
    };
    Ok(ApiClients {
        requests: build(request_timeout, &layer)?,
        watches: build(watch_timeout(request_timeout) + WATCH_SILENCE_MARGIN, &layer)?,
        reviews: build(request_timeout, &apart)?,
    })
}

/// Run the daemon until `shutdown` completes, or until one of its stages ends (an error: plegd
/// then exits non-zero so that it is restarted).
pub async fn run(
    options: DaemonOptions,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (_, abort) = mpsc::channel(1);
    run_controlled(options, metrics, shutdown, Control { abort, started: None }).await
}

/// How tests reach into a running daemon.
pub struct Control {
    /// Names of stages to end as a crash would end them.
    pub abort: mpsc::Receiver<String>,
    /// Told once every stage is started.
    pub started: Option<tokio::sync::oneshot::Sender<Started>>,
}

/// A daemon whose stages are all started.
pub struct Started {
    /// Its health, as /healthz and the systemd watchdog ask it.
    pub health: Arc<dyn crate::http::Health>,
    /// Its stages in the order they started, from the supervisor's record.
    pub stages: Vec<&'static str>,
}

/// Wait for shutdown or the first stage to end (said, with its cause, at error level), ending the
/// stages that tests ask to abort meanwhile.
async fn supervise(
    sets: &mut DaemonStages,
    abort: &mut mpsc::Receiver<String>,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<StageEnded> {
    let failure = loop {
        tokio::select! {
            // A stage that ends takes down those that feed on it (a syncLoop gone closes the
            // Kubernetes Events queue): the first one named is the cause, the sources' first.
            biased;
            () = &mut shutdown => break None,
            ended = sets.sources.failure() => break Some(ended),
            ended = sets.relister.failure() => break Some(ended),
            ended = sets.pipeline.failure() => break Some(ended),
            ended = sets.output.failure() => break Some(ended),
            Some(name) = abort.recv() => {
                let sets_ = [&mut sets.sources, &mut sets.relister, &mut sets.pipeline, &mut sets.output];
                if !sets_.into_iter().any(|set| set.abort(&name)) {
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

/// The daemon's stages in four sets, stopped in order: the sources of work (runtime triggers, the
/// informer), the relister, the pipeline that carries what they computed (the event fan-out, the
/// syncLoop), and the output (status writers, endpoints).
struct DaemonStages {
    sources: Stages,
    /// The relister alone: told to stop by `relist_stop`, it ends after the relist under way.
    relister: Stages,
    relist_stop: CancellationToken,
    pipeline: Stages,
    /// Tells the pipeline to hand over what it holds and end.
    drain: CancellationToken,
    output: Stages,
}

/// Stop taking in work; let the pipeline hand what was computed before the signal (lifecycle
/// events in the PLEG's channel and the syncLoop's queue) to the status manager and the observers;
/// give the status writes until `timeout` to land; then stop the writers and endpoints.
async fn stop(sets: DaemonStages, manager: &StatusManager, timeout: std::time::Duration) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    info!(pending_status_writes = manager.pending(), "plegd stopping");
    let deadline = tokio::time::Instant::now() + timeout;
    // Within the deadline, however short `--shutdown-timeout` is.
    sets.sources.shutdown(STAGE_DRAIN.min(timeout)).await;
    sets.relist_stop.cancel();
    let cut = sets.relister.finish_by(deadline).await;
    if !cut.is_empty() {
        warn!("shutdown deadline reached in the middle of a relist");
    }
    sets.drain.cancel();
    let cut = sets.pipeline.finish_by(deadline).await;
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
    sets.output.shutdown(STAGE_DRAIN).await;
}

/// [`run`], reachable by [`Control`]: how the tests show that the loss of any stage is seen.
pub async fn run_controlled(
    options: DaemonOptions,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
    control: Control,
) -> Result<(), DaemonError> {
    let Control { mut abort, started } = control;
    let fd_limit = crate::listen::raise_fd_limit();
    tokio::pin!(shutdown);
    // A runtime that is not up yet (plegd started first at boot, or the runtime restarting) is
    // waited for; systemd sees plegd as starting (no READY) meanwhile.
    let connected = tokio::select! {
        biased;
        () = &mut shutdown => return Ok(()),
        connected = CriRuntime::connect_waiting(&options.cri_socket, &options.cri, metrics.clone()) => connected,
    };
    let (runtime, version) = connected?;
    let recursive_read_only_handlers = match runtime.recursive_read_only_handlers().await {
        Ok(handlers) => Some(handlers),
        Err(error) => {
            warn!(error = %error, "cannot tell which runtime handlers support recursive read-only mounts; read-only volume mounts that ask for them are left out of container statuses");
            None
        }
    };
    let retry_after = Arc::new(RetryAfter::default());
    let clients = kube_clients(
        options.kubeconfig.as_ref(),
        options.apiserver_timeout,
        metrics.clone(),
        retry_after.clone(),
    )
    .await?;
    let client = clients.requests.clone();
    info!(
        node = %options.manager.node_name,
        runtime = %version.runtime_name,
        runtime_version = %version.runtime_version,
        status_mode = options.sync.mode.as_str(),
        "plegd starting"
    );

    let (pleg, events) = GenericPleg::new(runtime, SystemClock, metrics.clone(), options.pleg.clone());
    let pleg = Arc::new(pleg);
    let stage_health = StageHealth::default();
    // Four sets (see `DaemonStages`): at shutdown the sources stop first, then the relister ends
    // after the relist under way, then the pipeline hands over what was computed, then the status
    // writers get a bounded time to flush, then the writers and endpoints stop.
    let mut intake = Stages::new(CancellationToken::new(), stage_health.clone());
    let mut pipeline = Stages::new(CancellationToken::new(), stage_health.clone());
    let drain = CancellationToken::new();
    let mut output = Stages::new(CancellationToken::new(), stage_health.clone());
    for (name, stage) in triggers::stages(
        options.triggers,
        &version,
        pleg.clone(),
        options.trigger_options.clone(),
    ) {
        intake.spawn(name, stage);
    }
    let mut relister_set = Stages::new(CancellationToken::new(), stage_health.clone());
    let relist_stop = CancellationToken::new();
    relister_set.spawn("relister", pleg.clone().run_until(relist_stop.clone()));

    let hub = EventHub::new(pleg::SUBSCRIBER_BUFFER);
    // The syncLoop's queue has the configured capacity too, so that the setting bounds what is buffered.
    let (to_sync, sync_events) = mpsc::channel(options.pleg.channel_capacity.max(1));
    pipeline.spawn(
        "event-fan-out",
        pleg::fan_out(events, hub.clone(), Some(to_sync), metrics.clone(), drain.clone()),
    );

    let (changes_tx, changes) = mpsc::channel(4096);
    let (informer, informer_stage) = informer::start(
        clients.watches,
        watch_timeout(options.apiserver_timeout),
        &options.manager.node_name,
        changes_tx,
        metrics.clone(),
    );
    intake.spawn("informer", informer_stage);
    let reports = StatusReports::default();
    let manager = StatusManager::new(
        client.clone(),
        informer.store.clone(),
        options.manager.clone(),
        retry_after,
        metrics.clone(),
    );
    for (name, stage) in manager.stages() {
        output.spawn(name, stage);
    }
    if let Some(path) = &options.api_socket {
        let limit = crate::listen::connection_limit(observe::MAX_API_CONNECTIONS, fd_limit);
        output.spawn(
            "observation-api",
            observe::serve(path, hub, reports.clone(), metrics.clone(), limit)?,
        );
    }
    let health = Arc::new(DaemonHealth {
        pleg: pleg.handle(),
        informer: informer.clone(),
        stages: stage_health.clone(),
    });
    if let Some(address) = options.metrics_address {
        let limits = crate::http::HttpLimits::metrics(crate::listen::connection_limit(
            crate::http::MAX_METRICS_CONNECTIONS,
            fd_limit,
        ));
        let auth = options.metrics_auth.then(|| {
            Arc::new(crate::metrics_auth::MetricsAuth::new(
                clients.reviews.clone(),
                options.apiserver_timeout,
                metrics.clone(),
            ))
        });
        let (_, stage) = crate::http::serve(address, metrics.clone(), health.clone(), auth, limits)
            .await
            .map_err(|source| DaemonError::Listen {
                flag: "metrics-address",
                address,
                source,
            })?;
        output.spawn("http", stage);
    }
    if let Some(address) = options.health_address {
        let limits = crate::http::HttpLimits::health(crate::listen::connection_limit(
            crate::http::MAX_HEALTH_CONNECTIONS,
            fd_limit,
        ));
        let (_, stage) = crate::http::serve_health(address, metrics.clone(), health.clone(), limits)
            .await
            .map_err(|source| DaemonError::Listen {
                flag: "health-address",
                address,
                source,
            })?;
        output.spawn("health", stage);
    }
    let relister = pleg.handle();
    output.spawn(
        "systemd-notify",
        crate::watchdog::notify_systemd(move || relister.last_relist().is_some(), health.clone()),
    );
    let recorder = options.emit_events.then(|| {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "plegd".into(),
                instance: Some(options.manager.node_name.to_string()),
            },
        );
        let (sender, stage) = crate::recorder::queue(recorder, crate::recorder::QUEUE, metrics.clone());
        output.spawn("kube-events", stage);
        sender
    });
    let node = NodeFacts {
        runtime_name: version.runtime_name.clone(),
        node_ips: options.sync.node_ips.clone(),
        recursive_read_only_handlers,
        stop_signals: options.sync.stop_signals,
    };
    let sync_loop = SyncLoop::new(
        pleg.handle(),
        informer,
        manager.clone(),
        recorder,
        options.sync.clone(),
        node,
        metrics,
    )
    .reporting_to(reports);
    pipeline.spawn("sync-loop", sync_loop.run(sync_events, changes));
    if let Some(started) = started {
        let stages = stage_health.started();
        let _ = started.send(Started { health, stages });
    }

    let mut sets = DaemonStages {
        sources: intake,
        relister: relister_set,
        relist_stop,
        pipeline,
        drain,
        output,
    };
    let failure = supervise(&mut sets, &mut abort, shutdown.as_mut()).await;
    stop(sets, &manager, options.shutdown_timeout).await;
    if let Some(path) = &options.api_socket {
        let _ = std::fs::remove_file(path);
    }
    match failure {
        Some(ended) => Err(DaemonError::StageEnded(ended)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod warning_tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(http::header::WARNING, http::HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn each_warning_is_kept_once_bounded_and_whole_characters() {
        let warnings = ApiserverWarnings::default();
        let metrics = Metrics::new();
        let unknown = br#"299 - "unknown field \"status.bogus\"""#;
        for _ in 0..3 {
            warnings.observe(&headers(&[unknown]), "PATCH", &metrics);
        }
        assert_eq!(warnings.seen.lock().unwrap().len(), 1, "a repeat is not kept again");
        assert!(
            metrics.encode().contains("plegd_apiserver_warnings_total 3"),
            "every one counted"
        );

        // Bytes that are not UTF-8, and a long non-ASCII text cut at a character boundary.
        let long = "é".repeat(1000);
        warnings.observe(&headers(&[b"299 - \xff\xfe", long.as_bytes()]), "PATCH", &metrics);
        let seen = warnings.seen.lock().unwrap();
        let kept = seen.iter().find(|w| w.starts_with('é')).unwrap();
        assert!(kept.len() <= ApiserverWarnings::MAX_LEN && kept.chars().all(|c| c == 'é'));
        drop(seen);

        // At most MAX distinct warnings are kept; more are counted only.
        for i in 0..2 * ApiserverWarnings::MAX {
            warnings.observe(&headers(&[format!("299 - \"w{i}\"").as_bytes()]), "GET", &metrics);
        }
        assert_eq!(warnings.seen.lock().unwrap().len(), ApiserverWarnings::MAX);
    }
}
