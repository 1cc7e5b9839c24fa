//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the PLEG relisted within its
//! threshold) and `/readyz` (the first relist is done and, for `plegd run`, the informer has
//! synced). It binds 127.0.0.1 unless told otherwise. Process and node figures (RSS, CPU, node
//! memory and CPU count) are read from sysinfo at each scrape.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, RefreshKind, System};
use tracing::info;

use crate::metrics::Metrics;
use crate::supervise::Stage;

/// What the endpoint asks about the daemon's state.
pub trait Health: Send + Sync + 'static {
    /// Ok, or why the PLEG is not healthy.
    fn healthy(&self) -> Result<(), String>;
    /// Ok, or what the daemon is still waiting for.
    fn ready(&self) -> Result<(), String>;
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

fn verdict(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// Serve on `address` (already validated by the caller). Returns the bound address and the task.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<dyn Health>,
) -> std::io::Result<(SocketAddr, Stage)> {
    let system = System::new_with_specifics(RefreshKind::nothing());
    let state = Arc::new(AppState {
        metrics,
        health,
        system: Mutex::new(system),
    });
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route(
            "/healthz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.healthy()) }),
        )
        .route(
            "/readyz",
            get(|State(s): State<Arc<AppState>>| async move { verdict(s.health.ready()) }),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    info!(address = %bound, "metrics and health endpoint listening");
    let stage: Stage = Box::pin(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(error = %error, "metrics and health endpoint failed");
        }
    });
    Ok((bound, stage))
}
