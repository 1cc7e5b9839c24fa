//! `plegd watch`: the PLEG alone, against a CRI socket, with no apiserver. It prints one line per
//! lifecycle event on stdout (text or JSON lines) while logs go to stderr. It keeps running when the
//! runtime goes away and picks up again when the runtime returns: the relister keeps relisting and
//! the first successful relist after the outage reports everything that changed meanwhile.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cache::PodCache;
use crate::clock::SystemClock;
use crate::metrics::Metrics;
use crate::pleg::{GenericPleg, PlegConfig, PodLifecycleEvent};
use crate::runtime::{CriOptions, CriRuntime, RuntimeError};
use crate::supervise::{StageEnded, StageHealth, Stages};
use crate::triggers::{self, TriggerMode, TriggerOptions};

/// How events are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Clone)]
pub struct WatchOptions {
    pub cri_socket: PathBuf,
    pub pleg: PlegConfig,
    pub cri: CriOptions,
    pub output: OutputFormat,
    pub triggers: TriggerMode,
    pub trigger_options: TriggerOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The runtime could not be reached or is not CRI v1 at start. Not retried: say what to fix.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The trigger settings are invalid. Not retryable.
    #[error("invalid trigger settings: {0}")]
    Triggers(#[from] crate::backoff::InvalidBackoff),
    /// Writing an event failed for another reason than a closed reader.
    #[error("writing events failed: {0}")]
    Output(#[source] std::io::Error),
    /// A stage (relister, triggers) ended: the watch is blind, so it ends with an error.
    #[error("{0}")]
    StageEnded(#[from] StageEnded),
}

/// One event as a line, without the newline.
pub fn format_event(event: &PodLifecycleEvent, format: OutputFormat) -> String {
    match format {
        // Serializing plain strings and numbers cannot fail.
        OutputFormat::Json => serde_json::to_string(event).unwrap_or_default(),
        OutputFormat::Text => {
            let pod = match (&event.namespace, &event.pod) {
                (Some(ns), Some(name)) => format!("{ns}/{name}"),
                (None, Some(name)) => name.clone(),
                _ => format!("uid={}", event.pod_uid),
            };
            let mut line = format!(
                "{}  {:<16}  {}",
                humantime::format_rfc3339_millis(event.timestamp),
                event.kind.as_str(),
                pod
            );
            if event.sandbox {
                line.push_str("  sandbox");
            } else if let Some(name) = &event.container {
                line.push_str("  container=");
                line.push_str(name);
            }
            if let Some(id) = &event.container_id {
                line.push_str("  id=");
                line.push_str(&id[..id.len().min(13)]);
            }
            if let Some(code) = event.exit_code {
                line.push_str(&format!("  exit_code={code}"));
            }
            if let Some(reason) = &event.reason {
                line.push_str("  reason=");
                line.push_str(reason);
            }
            line
        }
    }
}

/// Write events as lines until the channel closes or the reader goes away. Each line is flushed,
/// so a pipe into another program sees events as they happen.
pub async fn print_events(
    mut events: mpsc::Receiver<PodLifecycleEvent>,
    format: OutputFormat,
    mut out: impl Write,
) -> Result<(), WatchError> {
    while let Some(event) = events.recv().await {
        let line = format_event(&event, format);
        let written = writeln!(out, "{line}").and_then(|()| out.flush());
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(WatchError::Output(e)),
        }
    }
    Ok(())
}

/// Run `plegd watch` until `shutdown` completes or stdout is closed.
pub async fn watch(
    options: WatchOptions,
    out: impl Write,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WatchError> {
    let metrics = Arc::new(Metrics::new());
    let (runtime, version) = CriRuntime::connect(&options.cri_socket, &options.cri, metrics.clone()).await?;
    info!(
        socket = %options.cri_socket.display(),
        runtime = %version.runtime_name,
        version = %version.runtime_version,
        api = %version.runtime_api_version,
        relist_period = ?options.pleg.relist_period,
        "watching the container runtime"
    );
    let cache = Arc::new(PodCache::new());
    let (pleg, events) = GenericPleg::new(runtime, SystemClock, cache, metrics, options.pleg);
    let pleg = Arc::new(pleg);
    let mut stages = Stages::new(CancellationToken::new(), StageHealth::default());
    for (name, stage) in triggers::stages(options.triggers, &version, pleg.clone(), options.trigger_options)? {
        stages.spawn(name, stage);
    }
    stages.spawn("relister", pleg.run());
    let result = tokio::select! {
        result = print_events(events, options.output, out) => result,
        ended = stages.failure() => Err(WatchError::StageEnded(ended)),
        () = shutdown => Ok(()),
    };
    stages.shutdown(std::time::Duration::from_secs(1)).await;
    result
}
