//! The HTTP endpoints. Two listeners, each with bounds of its own so that no client of one can
//! starve the other:
//! - `--metrics-address`: `/metrics` (Prometheus text format; behind Kubernetes authentication and
//!   authorization — TokenReview and SubjectAccessReview, see `metrics_auth` — where it is told
//!   so), and `/healthz`, `/readyz` beside it;
//! - `--health-address`: `/healthz` (the PLEG relisted within its threshold) and `/readyz` (the
//!   first relist is done and, for `plegd run`, the informer has synced) alone, for the kubelet's
//!   probes: one request per connection, a short time to send it, and a full listener closes its
//!   oldest connection rather than refuse the new one ([`HttpLimits::health`]).
//!
//! `/metrics` speaks TLS wherever it asks for a token (and where told to: see `tls`); the probes'
//! listener is plain HTTP (it tells only whether plegd is healthy, and the kubelet's probes send
//! nothing secret). A TLS handshake has the time to send a request head to end.
//!
//! Both bind 127.0.0.1 unless told otherwise. Every listener bounds the connections open at once,
//! in all and per client address, the size of a request head ([`MAX_HEAD_BYTES`],
//! [`MAX_HEADERS`]), the time to send it, and the age of a connection. Process and node figures
//! (RSS, CPU, node memory and CPU count) are read from sysinfo at each scrape. They serve only
//! reads: nothing on them changes plegd's state.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, RefreshKind, System};
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::serve::listen::{ACCEPT_ERROR_PAUSE, Admission, ConnectionLimit, WhenFull};
use crate::serve::metrics_auth::MetricsAuth;
use crate::serve::tls::ServingCertificate;
use crate::util::supervise::Stage;

/// What the endpoint asks about the daemon's state.
pub trait Health: Send + Sync + 'static {
    /// Ok, or why the PLEG is not healthy.
    fn healthy(&self) -> Result<(), String>;
    /// Ok, or what the daemon is still waiting for.
    fn ready(&self) -> Result<(), String>;
    /// Lines `/healthz` adds to its answer, healthy or not (what the event stream is doing).
    fn details(&self) -> String {
        String::new()
    }
}

struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<dyn Health>,
    /// Who may read `/metrics`; None: anyone who reaches the listener.
    auth: Option<Arc<MetricsAuth>>,
    system: Mutex<System>,
}

fn update_process_figures(state: &AppState) {
    let mut system = state.system.lock().unwrap_or_else(|e| e.into_inner());
    let pid = Pid::from_u32(std::process::id());
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory().with_cpu(),
    );
    system.refresh_memory();
    let m = &state.metrics;
    if let Some(p) = system.process(pid) {
        m.process_resident_memory.set(p.memory() as i64);
        m.process_cpu_percent.set(f64::from(p.cpu_usage()));
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        m.process_open_fds.set(fds.count() as i64);
    }
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        m.runtime_tasks.set(handle.metrics().num_alive_tasks() as i64);
    }
    m.node_memory_total.set(system.total_memory() as i64);
    m.node_memory_available.set(system.available_memory() as i64);
    m.node_cpus.set(system.cpus().len().max(num_cpus()) as i64);
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1)
}

/// The address of a request's client (its connection's peer), put in each request's extensions
/// by the listener.
#[derive(Debug, Clone, Copy)]
struct ClientAddress(std::net::IpAddr);

async fn metrics_handler(
    State(state): State<Arc<AppState>>,
    client: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
) -> Response {
    if let Some(auth) = &state.auth
        && let Err(denied) = auth
            .check(headers.get(header::AUTHORIZATION), client.map(|Extension(c)| c.0))
            .await
    {
        return denied.into_response();
    }
    update_process_figures(&state);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.metrics.encode(),
    )
        .into_response()
}

fn verdict(result: Result<(), String>, details: &str) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, format!("ok\n{details}")).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n{details}")).into_response(),
    }
}

/// Longest request head plegd reads (request line and headers): hyper's read buffer. A GET of
/// these endpoints needs a few hundred bytes, a bearer token a few KiB.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most header fields in one request.
pub const MAX_HEADERS: usize = 32;
/// Connections the metrics listener holds at once (fewer where the open-file limit is low).
pub const MAX_METRICS_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(4096).unwrap();
/// Connections the health listener holds at once; past it, its oldest is closed.
pub const MAX_HEALTH_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(512).unwrap();

/// Limits of one HTTP listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once, in all and from one client address, and what a full listener
    /// does with a new one.
    pub admission: Admission,
    /// Time a connection has to send a request's headers, and the longest a kept-alive connection
    /// may sit idle between requests.
    pub header_read_timeout: Duration,
    /// Longest a connection stays open: then it is closed once its request in flight, if any, is
    /// answered (or after `header_read_timeout` more). Bounds a client that never reads its answer.
    pub max_connection_age: Duration,
    /// Whether a connection may carry more than one request.
    pub keep_alive: bool,
}

impl HttpLimits {
    /// `/metrics` (and `/healthz`, `/readyz` beside it): Prometheus keeps its connection alive;
    /// one client address holds at most 32 connections (past that, its new ones are refused); a
    /// full listener closes its oldest connection for a new one, so that no number of addresses
    /// can keep a scrape out.
    pub fn metrics(max_connections: NonZeroUsize) -> Self {
        Self {
            admission: Admission {
                max_connections,
                max_per_client: NonZeroUsize::new(32).unwrap(),
                when_full: WhenFull::RefuseOverShareEvictOldest,
            },
            header_read_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
            keep_alive: true,
        }
    }

    /// The probes' own listener (`--health-address`): one request per connection (the kubelet's
    /// probes open a new connection each time), 3 s to send it, at most 8 connections from one
    /// address, and a full listener closes its oldest connection rather than refuse a new one, so
    /// that no client, nor many, can keep the kubelet's probe out.
    pub fn health(max_connections: NonZeroUsize) -> Self {
        Self {
            admission: Admission {
                max_connections,
                max_per_client: NonZeroUsize::new(8).unwrap(),
                when_full: WhenFull::EvictOldest,
            },
            header_read_timeout: Duration::from_secs(3),
            max_connection_age: Duration::from_secs(10),
            keep_alive: false,
        }
    }
}

/// The probes' answers, on either listener.
fn probe_routes(router: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    router
        .route(
            "/healthz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.healthy(), &s.health.details()) }),
        )
        .route(
            "/readyz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.ready(), "") }),
        )
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `address` (already validated by the caller)
/// within `limits`; `/metrics` only to whom `auth` allows, when given; over TLS with `tls`'s
/// certificate, when given. Returns the bound address and the server's stage; each connection is
/// a task of that stage's own set, gone with it.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<dyn Health>,
    auth: Option<Arc<MetricsAuth>>,
    tls: Option<Arc<ServingCertificate>>,
    limits: HttpLimits,
) -> std::io::Result<(SocketAddr, Stage)> {
    let authenticated = auth.is_some();
    let state = app_state(metrics.clone(), health, auth);
    let app = probe_routes(Router::new().route("/metrics", get(metrics_handler))).with_state(state);
    let secure = tls.is_some();
    let (bound, stage) = listen("http", address, app, metrics, tls, limits)?;
    info!(
        address = %bound, max_connections = limits.admission.max_connections, authenticated,
        scheme = if secure { "https" } else { "http" }, "metrics endpoint listening"
    );
    Ok((bound, stage))
}

/// Serve `/healthz` and `/readyz` alone on `address`, for the kubelet's probes.
pub async fn serve_health(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<dyn Health>,
    limits: HttpLimits,
) -> std::io::Result<(SocketAddr, Stage)> {
    let app = probe_routes(Router::new()).with_state(app_state(metrics.clone(), health, None));
    let (bound, stage) = listen("health", address, app, metrics, None, limits)?;
    info!(address = %bound, max_connections = limits.admission.max_connections, "health endpoint listening");
    Ok((bound, stage))
}

fn app_state(metrics: Arc<Metrics>, health: Arc<dyn Health>, auth: Option<Arc<MetricsAuth>>) -> Arc<AppState> {
    Arc::new(AppState {
        metrics,
        health,
        auth,
        system: Mutex::new(System::new_with_specifics(RefreshKind::nothing())),
    })
}

fn listen(
    name: &'static str,
    address: SocketAddr,
    app: Router,
    metrics: Arc<Metrics>,
    tls: Option<Arc<ServingCertificate>>,
    limits: HttpLimits,
) -> std::io::Result<(SocketAddr, Stage)> {
    let tls = match tls {
        Some(certificate) => {
            let config = certificate.server_config().map_err(std::io::Error::other)?;
            metrics.initialize_tls_listener(name);
            Some(Tls {
                certificate,
                acceptor: tokio_rustls::TlsAcceptor::from(config),
                metrics: metrics.clone(),
            })
        }
        None => None,
    };
    let admission = ConnectionLimit::new(name, limits.admission, metrics);
    let backlog = u32::try_from(limits.admission.max_connections.get()).unwrap_or(u32::MAX);
    let listener = crate::serve::listen::bind_tcp(address, backlog)?;
    let bound = listener.local_addr()?;
    let stage: Stage = Box::pin(accept_loop(name, listener, app, admission, tls, limits));
    Ok((bound, stage))
}

/// What a TLS listener holds: its certificate (checked for a new one as connections come) and
/// the acceptor that serves it.
#[derive(Clone)]
struct Tls {
    certificate: Arc<ServingCertificate>,
    acceptor: tokio_rustls::TlsAcceptor,
    metrics: Arc<Metrics>,
}

async fn accept_loop(
    name: &'static str,
    listener: tokio::net::TcpListener,
    app: Router,
    admission: ConnectionLimit,
    tls: Option<Tls>,
    limits: HttpLimits,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: pause rather than spin.
                warn!(error = %error, "accepting an HTTP connection failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let client = peer.ip().to_canonical();
        let Some(stream) = admission.admit(stream, Some(client)) else {
            continue;
        };
        let evicted = stream.evicted();
        let service = hyper_util::service::TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ClientAddress(client));
                request
            },
        ));
        let tls = tls.clone();
        connections.spawn(async move {
            let Some(tls) = tls else {
                return serve_connection(stream, service, evicted, limits).await;
            };
            tls.certificate
                .refresh(std::time::Instant::now(), std::time::SystemTime::now());
            let handshake = tokio::select! {
                handshake = tokio::time::timeout(limits.header_read_timeout, tls.acceptor.accept(stream)) => handshake,
                () = evicted.cancelled() => return,
            };
            match handshake {
                Ok(Ok(stream)) => serve_connection(stream, service, evicted, limits).await,
                Ok(Err(error)) => {
                    debug!(listener = name, client = %client, error = %error, "TLS handshake failed");
                    tls.metrics.count_tls_handshake_error(name);
                }
                Err(_) => {
                    debug!(listener = name, client = %client, "TLS handshake not done in time");
                    tls.metrics.count_tls_handshake_error(name);
                }
            }
        });
    }
}

/// One connection's requests, until it ends, is evicted, or reaches its age.
async fn serve_connection<I, S>(stream: I, service: S, evicted: tokio_util::sync::CancellationToken, limits: HttpLimits)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming> + Send + 'static,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(limits.keep_alive)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        // Closed to make room for a new connection: dropped at once.
        () = evicted.cancelled() => Ok(()),
        () = tokio::time::sleep(limits.max_connection_age) => {
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(limits.header_read_timeout, connection)
                .await
                .unwrap_or(Ok(()))
        }
    };
    if let Err(error) = ended {
        debug!(error = %error, "HTTP connection ended");
    }
}
