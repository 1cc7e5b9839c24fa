//! A plegd relister with triggers, as the latency benches observe one: its tasks and its events.

use std::sync::Arc;
use std::time::Duration;

use plegd::clock::SystemClock;
use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig, PodLifecycleEvent};
use plegd::runtime::{CriConfig, CriRuntime};
use plegd::triggers::{self, TriggerConfig, TriggerMode};
use tokio::sync::mpsc;

/// Relister and trigger tasks on `socket`, relisting every `period`, with its event channel.
pub async fn start_plegd(
    socket: &std::path::Path,
    mode: TriggerMode,
    period: Duration,
) -> (Vec<tokio::task::JoinHandle<()>>, mpsc::Receiver<PodLifecycleEvent>) {
    let metrics = Arc::new(Metrics::new());
    let (runtime, version) = CriRuntime::connect(socket, &CriConfig::default(), metrics.clone())
        .await
        .expect("connect");
    let config = PlegConfig::new(period, Some(period), plegd::pleg::DEFAULT_RELIST_THRESHOLD)
        .expect("a period below the threshold");
    let (pleg, events) = GenericPleg::new(runtime, SystemClock, metrics, config);
    let pleg = Arc::new(pleg);
    let mut tasks = triggers::spawn(mode, &version, pleg.clone(), TriggerConfig::default());
    tasks.push(tokio::spawn(pleg.run()));
    (tasks, events)
}
