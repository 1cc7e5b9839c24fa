//! Kubernetes Events (`--emit-events`): the syncLoop queues them without waiting and one stage
//! publishes them in order. They are best effort, as the kubelet's recorder makes them: when the
//! queue is full (the apiserver slow or away) an event is dropped and counted
//! (`plegd_kube_events_dropped_total`), and a failed publish is logged at debug. It never makes the
//! syncLoop wait.

use std::num::NonZeroUsize;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;
use tracing::debug;

use crate::metrics::Metrics;
use crate::supervise::Stage;

/// Events waiting to be published.
pub const QUEUE: NonZeroUsize = NonZeroUsize::new(256).unwrap();

/// The syncLoop's side of the queue.
#[derive(Clone)]
pub struct EventSender {
    tx: mpsc::Sender<(Event, ObjectReference)>,
    metrics: Arc<Metrics>,
}

impl EventSender {
    /// Queue `event` about `regarding`; never waits.
    pub fn send(&self, event: Event, regarding: ObjectReference) {
        if self.tx.try_send((event, regarding)).is_err() {
            self.metrics.kube_events_dropped.inc();
            debug!("the Kubernetes Event queue is full; event dropped");
        }
    }
}

/// The queue and the stage that publishes what it holds through `recorder`.
pub fn queue(recorder: Recorder, capacity: NonZeroUsize, metrics: Arc<Metrics>) -> (EventSender, Stage) {
    let (tx, mut rx) = mpsc::channel::<(Event, ObjectReference)>(capacity.get());
    let stage: Stage = Box::pin(async move {
        while let Some((event, regarding)) = rx.recv().await {
            if let Err(error) = recorder.publish(&event, &regarding).await {
                debug!(error = %error, "publishing a Kubernetes Event failed");
            }
        }
    });
    (EventSender { tx, metrics }, stage)
}

/// An [`EventSender`] whose events are kept in a channel instead of published, for tests.
#[cfg(test)]
pub(crate) fn capture(
    capacity: NonZeroUsize,
    metrics: Arc<Metrics>,
) -> (EventSender, mpsc::Receiver<(Event, ObjectReference)>) {
    let (tx, rx) = mpsc::channel(capacity.get());
    (EventSender { tx, metrics }, rx)
}
