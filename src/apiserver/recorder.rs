//! Kubernetes Events (`--emit-events`): the syncLoop queues them without waiting and one stage
//! publishes them in order, each as an events.k8s.io/v1 Event of its own, named as client-go names
//! them (`<object>.<nanoseconds, hex>`). One occurrence is one Event: never folded into an earlier
//! Event's series (kube-runtime's recorder folds Events of the same reason and object, so that of
//! two containers exiting together only the first's note was ever shown).
//!
//! Best effort, as the kubelet's recorder makes them, and bounded: at most [`EventLimits`] a
//! second with a burst (the kubelet's `eventRecordQPS` 50 and `eventBurst` 100); every `Retry-After`
//! the apiserver sends plegd is waited out before the next Event; an Event answered 429 or 5xx is
//! sent again (at most [`TRIES`] times in all). When the queue is full (the apiserver slow or away)
//! an Event is dropped. Each outcome is counted (`plegd_kube_events_published_total`,
//! `_dropped_total`, `_failed_total`, `_throttled_total`) and a failure logged (the first at warn,
//! then at debug until one is published again). It never makes the syncLoop wait.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as ApiEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::apiserver::rate_limit::{Qps, TokenBucket};
use crate::metrics::Metrics;
use crate::util::backoff::RetryAfter;
use crate::util::supervise::Stage;

/// Events waiting to be published.
pub const QUEUE: NonZeroUsize = NonZeroUsize::new(256).unwrap();

/// Tries per Event, the first included, while the apiserver answers 429 or 5xx: client-go's event
/// broadcaster's `maxTriesPerEvent`, so that an Event outlasts a spell of priority-and-fairness
/// throttling (each try after the first waits out the `Retry-After`, 1 s at least).
pub const TRIES: u32 = 12;

/// The wait before sending again an Event whose 429 or 5xx came without a `Retry-After`.
const RETRY_WAIT: Duration = Duration::from_secs(1);

/// How many Events a second plegd sends, and how many it may send at once after a quiet spell.
#[derive(Debug, Clone, Copy)]
pub struct EventLimits {
    pub qps: Qps,
    pub burst: NonZeroU32,
}

impl Default for EventLimits {
    /// The kubelet's defaults (`eventRecordQPS: 50`, `eventBurst: 100`).
    fn default() -> Self {
        Self {
            qps: Qps::new(50.0).unwrap(),
            burst: NonZeroU32::new(100).unwrap(),
        }
    }
}

/// Who reports the Events (`reportingController`, `reportingInstance`).
#[derive(Debug, Clone)]
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

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

/// The Event `event` about `regarding` as the API has it, observed at `now`.
pub fn api_event(
    event: &Event,
    regarding: &ObjectReference,
    reporter: &Reporter,
    now: k8s_openapi::jiff::Timestamp,
) -> ApiEvent {
    ApiEvent {
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or(&reporter.controller),
                now.as_nanosecond()
            )),
            ..ObjectMeta::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_owned(),
        ),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        ..ApiEvent::default()
    }
}

/// The queue and the stage that publishes what it holds through `client`.
pub fn queue(
    client: kube::Client,
    reporter: Reporter,
    limits: EventLimits,
    retry_after: Arc<RetryAfter>,
    capacity: NonZeroUsize,
    metrics: Arc<Metrics>,
) -> (EventSender, Stage) {
    let (tx, mut rx) = mpsc::channel::<(Event, ObjectReference)>(capacity.get());
    let sender = EventSender {
        tx,
        metrics: metrics.clone(),
    };
    let stage: Stage = Box::pin(async move {
        let bucket = TokenBucket::new(limits.qps, limits.burst);
        let mut failing = false;
        while let Some((event, regarding)) = rx.recv().await {
            let throttled = bucket.acquire().await | (retry_after.remaining() > Duration::ZERO);
            if throttled {
                metrics.kube_events_throttled.inc();
            }
            let api_event = api_event(&event, &regarding, &reporter, k8s_openapi::jiff::Timestamp::now());
            let namespace = regarding.namespace.as_deref().unwrap_or("default");
            let events: Api<ApiEvent> = Api::namespaced(client.clone(), namespace);
            match publish(&events, &api_event, &retry_after).await {
                Ok(()) => {
                    metrics.kube_events_published.inc();
                    failing = false;
                }
                Err(error) => {
                    metrics.kube_events_failed.inc();
                    if !std::mem::replace(&mut failing, true) {
                        warn!(reason = %event.reason, error = %error, "a Kubernetes Event was not published");
                    } else {
                        debug!(reason = %event.reason, error = %error, "a Kubernetes Event was not published");
                    }
                }
            }
        }
    });
    (sender, stage)
}

/// Create `event`, waiting out the apiserver's `Retry-After` before each try and trying again
/// after a 429 or 5xx, [`TRIES`] times in all. An Event found to exist already (a try whose answer
/// was lost) is published.
async fn publish(events: &Api<ApiEvent>, event: &ApiEvent, retry_after: &RetryAfter) -> Result<(), kube::Error> {
    let mut tries = 0;
    loop {
        tries += 1;
        retry_after.wait().await;
        match events.create(&PostParams::default(), event).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && tries > 1 => return Ok(()),
            Err(kube::Error::Api(status)) if (status.code == 429 || status.code >= 500) && tries < TRIES => {
                // The client's layer noted any Retry-After; without one, a short wait.
                if retry_after.remaining().is_zero() {
                    tokio::time::sleep(RETRY_WAIT).await;
                }
            }
            Err(error) => return Err(error),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two Events of one reason about one object, a nanosecond apart, are two Events.
    #[test]
    fn each_occurrence_is_an_event_of_its_own() {
        let regarding = ObjectReference {
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        };
        let reporter = Reporter {
            controller: "plegd".into(),
            instance: "n1".into(),
        };
        let died = |note: &str| Event {
            type_: EventType::Warning,
            reason: "ContainerDied".into(),
            note: Some(note.into()),
            action: "Observed".into(),
            secondary: None,
        };
        let now = k8s_openapi::jiff::Timestamp::from_nanosecond(1_700_000_000_000_000_000).unwrap();
        let first = api_event(&died("container a exited with code 1"), &regarding, &reporter, now);
        let later = now + k8s_openapi::jiff::SignedDuration::from_nanos(1);
        let second = api_event(&died("container b exited with code 2"), &regarding, &reporter, later);
        assert_ne!(first.metadata.name, second.metadata.name);
        assert_eq!(first.metadata.name.as_deref(), Some("web.17979cfe362a0000"));
        assert_eq!(first.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(second.note.as_deref(), Some("container b exited with code 2"));
        assert_eq!(first.series, None);
        assert_eq!(first.reporting_instance.as_deref(), Some("n1"));
        assert_eq!(first.type_.as_deref(), Some("Warning"));
    }
}
