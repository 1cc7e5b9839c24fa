//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the PLEG relisted within its
//! threshold) and `/readyz` (the first relist is done and, for `plegd run`, the informer has
//! synced). It binds 127.0.0.1 unless told otherwise. Process and node figures (RSS, CPU, node
//! memory and CPU count) are read from sysinfo at each scrape. The listener holds at most
//! [`HttpLimits::max_connections`] connections, and closes one that sends no request headers
//! within [`HttpLimits::header_read_timeout`] (also the idle limit between kept-alive requests).
//! It serves only reads: nothing on it changes plegd's state.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, RefreshKind, System};
use tracing::{debug, info, warn};

use crate::listen::{ACCEPT_ERROR_PAUSE, ConnectionLimit};
use crate::metrics::Metrics;
use crate::supervise::Stage;

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

async fn metrics_handler(State(state): State<Arc<AppState>>) -> Response {
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

/// Limits of the HTTP listener.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections open at once; past it a new one is closed at once.
    pub max_connections: usize,
    /// Time a connection has to send a request's headers, and the longest a kept-alive connection
    /// may sit idle between requests.
    pub header_read_timeout: Duration,
    /// Longest a connection stays open: then it is closed once its request in flight, if any, is
    /// answered (or after `header_read_timeout` more). Bounds a client that never reads its answer.
    pub max_connection_age: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
        }
    }
}

/// Serve on `address` (already validated by the caller) within `limits`. Returns the bound address
/// and the server's stage; each connection is a task of that stage's own set, gone with it.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<dyn Health>,
    limits: HttpLimits,
) -> std::io::Result<(SocketAddr, Stage)> {
    let system = System::new_with_specifics(RefreshKind::nothing());
    let admission = ConnectionLimit::new("http", limits.max_connections, metrics.clone());
    let state = Arc::new(AppState {
        metrics,
        health,
        system: Mutex::new(system),
    });
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route(
            "/healthz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.healthy(), &s.health.details()) }),
        )
        .route(
            "/readyz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.ready(), "") }),
        )
        .with_state(state);
    let backlog = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let listener = crate::listen::bind_tcp(address, backlog)?;
    let bound = listener.local_addr()?;
    info!(address = %bound, max_connections = limits.max_connections, "metrics and health endpoint listening");
    let stage: Stage = Box::pin(accept_loop(listener, app, admission, limits));
    Ok((bound, stage))
}

async fn accept_loop(listener: tokio::net::TcpListener, app: Router, admission: ConnectionLimit, limits: HttpLimits) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, most likely: pause rather than spin.
                warn!(error = %error, "accepting an HTTP connection failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Some(stream) = admission.admit(stream) else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        connections.spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
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
        });
    }
}
