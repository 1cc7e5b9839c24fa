//! plegd's relister in the test's own process, on the fake CRI server or a real containerd: the
//! one way every test and bench runs it. Either driven by hand ([`Relister::connect`], on any
//! clock) or running with its triggers ([`Relister::start`]) until dropped.

use std::path::Path;
use std::sync::Arc;

use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig, PodLifecycleEvent};
use plegd::runtime::{CriConfig, CriRuntime, RuntimeVersion};
use plegd::triggers::{self, TriggerConfig, TriggerMode};
use plegd::util::clock::{Clock, SystemClock};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A relister, its lifecycle events, its metrics and the runtime it speaks to. The tasks it runs
/// (triggers, the periodic relist) end when it is dropped.
pub struct Relister<C: Clock = SystemClock> {
    pub pleg: Arc<GenericPleg<CriRuntime, C>>,
    pub events: mpsc::Receiver<PodLifecycleEvent>,
    pub metrics: Arc<Metrics>,
    pub version: RuntimeVersion,
    tasks: Vec<JoinHandle<()>>,
}

impl<C: Clock> Relister<C> {
    /// Connected to the runtime at `socket` with `cri`, on `clock`, with `config`; nothing runs:
    /// the test relists by hand.
    pub async fn connect(socket: &Path, cri: &CriConfig, clock: C, config: PlegConfig) -> Self {
        let metrics = Arc::new(Metrics::new());
        let (runtime, version) = CriRuntime::connect(socket, cri, metrics.clone())
            .await
            .unwrap_or_else(|e| panic!("connect to the runtime at {}: {e}", socket.display()));
        let (pleg, events) = GenericPleg::new(runtime, clock, metrics.clone(), config);
        Self {
            pleg: Arc::new(pleg),
            events,
            metrics,
            version,
            tasks: Vec::new(),
        }
    }
}

impl Relister<SystemClock> {
    /// Connected as [`Relister::connect`] does on the system clock, relisted once (what exists is
    /// known before any trigger), then the runtime triggers of `mode` and the periodic relist (its
    /// next one a period later) running until it is dropped.
    pub async fn start(
        socket: &Path,
        cri: &CriConfig,
        config: PlegConfig,
        mode: TriggerMode,
        trigger_config: TriggerConfig,
    ) -> Self {
        let period = config.relist_period();
        let mut relister = Self::connect(socket, cri, SystemClock, config).await;
        relister.pleg.relist().await.expect("the first relist");
        relister.tasks = triggers::spawn(mode, &relister.version, relister.pleg.clone(), trigger_config);
        let runner = relister.pleg.clone();
        relister.tasks.push(tokio::spawn(async move {
            tokio::time::sleep(period).await;
            runner.run().await
        }));
        relister
    }
}

impl Relister<SystemClock> {
    /// [`Relister::start`] with the default settings but its period: a relist every `period`,
    /// whether the triggers of `mode` are healthy or not.
    pub async fn every(socket: &Path, mode: TriggerMode, period: std::time::Duration) -> Self {
        // Above the period, as a threshold must be.
        let threshold = plegd::pleg::DEFAULT_RELIST_THRESHOLD.max(period * 2);
        let config = PlegConfig::new(period, Some(period), threshold).expect("periods in order");
        Self::start(socket, &CriConfig::default(), config, mode, TriggerConfig::default()).await
    }
}

impl<C: Clock> Relister<C> {
    /// Its running tasks and its events apart, for a bench that reads the events in a task of its
    /// own: the caller ends the tasks.
    pub fn into_tasks_and_events(mut self) -> (Vec<JoinHandle<()>>, mpsc::Receiver<PodLifecycleEvent>) {
        let (_, closed) = mpsc::channel(1);
        let events = std::mem::replace(&mut self.events, closed);
        (std::mem::take(&mut self.tasks), events)
    }
}

impl<C: Clock> Drop for Relister<C> {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
