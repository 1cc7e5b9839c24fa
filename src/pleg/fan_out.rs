//! The hand-off of lifecycle events: from the PLEG's channel to the syncLoop, and to a bounded
//! broadcast ([`EventHub`]) for observers (the observation API). A slow observer never slows the
//! PLEG: it falls behind the broadcast's ring buffer and misses events (the API tells it how many).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::PodLifecycleEvent;
use crate::metrics::Metrics;

/// Events each observer may fall behind before it misses some.
pub const SUBSCRIBER_BUFFER: NonZeroUsize = NonZeroUsize::new(4096).unwrap();

/// The broadcast of lifecycle events to observers.
#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<PodLifecycleEvent>>,
}

impl EventHub {
    pub fn new(buffer: NonZeroUsize) -> Self {
        Self {
            tx: broadcast::channel(buffer.get()).0,
        }
    }

    /// Publish to whoever listens; never waits.
    pub fn publish(&self, event: PodLifecycleEvent) {
        let _ = self.tx.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PodLifecycleEvent>> {
        self.tx.subscribe()
    }

    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// Move events from the PLEG to the hub and (if given) the syncLoop, until the PLEG's channel closes
/// or `drain` is cancelled: then what is already in the channel is still moved, and it returns
/// (dropping its sender, which tells the syncLoop that nothing more comes).
/// Waiting on a busy syncLoop makes the PLEG's own channel fill, which the PLEG handles without
/// losing anything; observers are never waited on.
pub async fn fan_out(
    mut events: mpsc::Receiver<PodLifecycleEvent>,
    hub: EventHub,
    sync_loop: Option<mpsc::Sender<PodLifecycleEvent>>,
    metrics: Arc<Metrics>,
    drain: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            biased;
            event = events.recv() => event,
            () = drain.cancelled() => events.try_recv().ok(),
        };
        let Some(event) = event else { return };
        let latency = SystemTime::now().duration_since(event.timestamp).unwrap_or_default();
        metrics.event_latency.observe(latency.as_secs_f64());
        hub.publish(event.clone());
        if let Some(sync_loop) = &sync_loop
            && sync_loop.send(event).await.is_err()
        {
            return;
        }
    }
}
