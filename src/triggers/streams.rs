//! The event sources: containerd's events service and CRI `GetContainerEvents` (read off the wire
//! by `runtime::events`), each one stream's life — subscribe, count as connected once it has lived or delivered, forward what it
//! names, end, and come back with backoff — and what the stream's state tells health and metrics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::pleg::{PlegContainerState, StreamState, TriggerHealth};
use crate::runtime::events::{
    CriNames, EventStream, EventSubject, RuntimeEvent, cri_events_follow_state, cri_events_go_to_one_subscriber,
};
use crate::runtime::{CriRuntime, RuntimeVersion};

use super::exit_data::{Decided, ExitData, Read};
use super::{Source, Trigger, TriggerConfig, TriggerMode, TriggerSender};

/// How one subscription ended.
enum StreamEnd {
    /// The runtime does not implement this stream.
    Unimplemented,
    Failed(tonic::Status),
    Closed,
}

/// A subscription is in place: counted, logged, and one full relist asked for, since whatever
/// happened before it was in place was not seen.
fn stream_connected(source: Source, sender: &TriggerSender, metrics: &Metrics, link: &mut Link) {
    metrics.count_trigger_connect(source.as_str());
    set_state(&link.health, metrics, source, StreamState::Connected);
    link.connected = true;
    link.health.set(true);
    info!(source = source.as_str(), "trigger stream connected");
    sender.send(Trigger::All);
}

/// Say what a stream is doing: to health, and in the one-hot `plegd_trigger_stream_state`.
fn set_state(health: &TriggerHealth, metrics: &Metrics, source: Source, state: StreamState) {
    health.set_state(state);
    let states = StreamState::ALL.map(StreamState::as_str);
    metrics.set_trigger_state(source.as_str(), state.as_str(), &states);
}

/// How long a stream must stay open before it counts as in place. gRPC servers written in Go
/// (containerd among them) send a stream's response headers with its first message, so on a quiet
/// node the call returns only when something happens; a refusal (no such service, a runtime that
/// is down) is answered at once, and so is a stream that the runtime answers and ends at once
/// (CRI-O's `GetContainerEvents` without pod events), which never counts as in place.
pub const SUBSCRIBED_AFTER: Duration = Duration::from_millis(250);

/// Await a subscription call. The link is connected once the stream has been open for
/// [`SUBSCRIBED_AFTER`] (answered or not) or has delivered a message; see [`next_message`].
async fn open(
    source: Source,
    call: impl std::future::Future<Output = Result<EventStream, tonic::Status>>,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> Result<EventStream, StreamEnd> {
    tokio::pin!(call);
    let answer = tokio::select! {
        answer = &mut call => answer,
        () = tokio::time::sleep_until(link.opened + SUBSCRIBED_AFTER) => {
            stream_connected(source, sender, metrics, link);
            call.await
        }
    };
    match answer {
        Ok(stream) => {
            link.answered = true;
            Ok(stream)
        }
        Err(status) if status.code() == tonic::Code::Unimplemented => Err(StreamEnd::Unimplemented),
        Err(status) => Err(StreamEnd::Failed(status)),
    }
}

/// The next message of a subscription. Until the link is connected, a stream that stays open until
/// [`SUBSCRIBED_AFTER`] after it was opened, or delivers a message before that, connects it; one
/// that ends before that never does.
async fn next_message(
    stream: &mut EventStream,
    source: Source,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> Result<Option<RuntimeEvent>, tonic::Status> {
    if !link.connected {
        // `EventStream::message` is cancel safe: a message half read when the timer fires is kept.
        tokio::select! {
            message = stream.message() => {
                if matches!(message, Ok(Some(_))) {
                    stream_connected(source, sender, metrics, link);
                }
                return message;
            }
            () = tokio::time::sleep_until(link.opened + SUBSCRIBED_AFTER) => {
                stream_connected(source, sender, metrics, link);
            }
        }
    }
    stream.message().await
}

/// One subscription's state: when it was opened, whether the runtime answered it, whether it got
/// connected and delivered an event, and the relister's view of its health.
struct Link {
    opened: tokio::time::Instant,
    answered: bool,
    connected: bool,
    delivered: bool,
    health: TriggerHealth,
}

impl Link {
    fn new(health: TriggerHealth) -> Self {
        Self {
            opened: tokio::time::Instant::now(),
            answered: false,
            connected: false,
            delivered: false,
            health,
        }
    }

    /// The runtime answered the subscription and ended it before it could count as in place.
    fn ended_at_once(&self) -> bool {
        self.answered && !self.connected
    }
}

/// Streams that end at once, in a row, after which the runtime is taken to have no usable events.
pub const UNUSABLE_AFTER: u32 = 3;

/// What one containerd event asks for: an exit fact (now, or once its reason is read: None), else
/// the check of what it names.
fn containerd_trigger(event: RuntimeEvent, exits: &mut ExitData) -> Option<Trigger> {
    match event.data.map(|data| exits.read(data)) {
        Some(Read::Now(trigger)) => return Some(trigger),
        Some(Read::Asked(_)) => return None,
        Some(Read::Nothing) | None => {}
    }
    Some(match event.subject? {
        EventSubject::Container(id) if event.topic == "/containers/delete" => {
            exits.forget(&id);
            Trigger::ContainerGone(id)
        }
        EventSubject::Container(id) if settles(&event.topic) => Trigger::ContainerSettled {
            id,
            runs: event.topic == "/tasks/start",
        },
        EventSubject::Container(id) if ahead(&event.topic) => Trigger::ContainerAhead(id),
        subject => Trigger::from(subject),
    })
}

async fn containerd_subscription(
    channel: Channel,
    options: &TriggerConfig,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
    exits: &mut ExitData,
) -> StreamEnd {
    let call = EventStream::containerd(channel, &options.namespace, false);
    let mut stream = match open(Source::Containerd, call, sender, metrics, link).await {
        Ok(stream) => stream,
        Err(end) => return end,
    };
    loop {
        // Both branches are cancel safe: an exit decided while a message is half read waits for
        // the next turn, and so does the message.
        let message = tokio::select! {
            decided = exits.decided() => {
                sender.send(decided_trigger(decided));
                continue;
            }
            message = next_message(&mut stream, Source::Containerd, sender, metrics, link) => message,
        };
        match message {
            Ok(Some(event)) => {
                link.delivered = true;
                metrics.count_trigger(Source::Containerd.as_str());
                let topic = event.topic.clone();
                if let Some(trigger) = containerd_trigger(event, exits) {
                    debug!(source = "containerd", %topic, ?trigger, "trigger");
                    sender.send(trigger);
                }
            }
            Ok(None) => return StreamEnd::Closed,
            Err(status) => return StreamEnd::Failed(status),
        }
    }
}

/// What the events source makes of an exit asked about: its fact, or — its reason unread — the
/// check of the container as of any `/tasks/exit` that is no fact.
fn decided_trigger(decided: Decided) -> Trigger {
    match decided {
        Decided::Exit(trigger) => trigger,
        Decided::LeftToCri(id) => Trigger::ContainerAhead(id),
    }
}

/// containerd's exits and OOM kills, read beside the CRI's own events (on containerd 2.x, whose
/// CRI events come once its CRI state shows a change: an exit 2–3 s after it in a burst), so that
/// each exit is shown at once ([`Trigger::Exited`]). Everything else comes from the CRI events, and
/// this stream's health does not move the relist period: while it is down, exits come from the
/// CRI, later. Its events, connections and failures are counted under the source `containerd`
/// (`plegd_triggers_total`, `plegd_trigger_stream_connects_total`, `..._errors_total`); its state
/// is not in `plegd_trigger_stream_state`, which is the main stream's. Reconnects with backoff
/// forever; never returns.
pub async fn run_exit_source(runtime: &CriRuntime, options: TriggerConfig, sender: TriggerSender) {
    let metrics = runtime.metrics().clone();
    let mut backoff = options.backoff.clone();
    let mut exits = ExitData::new(runtime.oom_check(&options.namespace), metrics.clone());
    // An exit whose reason could not be read is the CRI events' to show: nothing is sent for it.
    let send_decided = |decided: Decided| {
        if let Decided::Exit(trigger) = decided {
            sender.send(trigger);
        }
    };
    loop {
        let opened = tokio::time::Instant::now();
        let mut delivered = false;
        let end = match EventStream::containerd(runtime.stream_channel(), &options.namespace, true).await {
            // containerd answers a subscription with its first event: counted as connected then.
            Ok(mut stream) => loop {
                let message = tokio::select! {
                    decided = exits.decided() => {
                        send_decided(decided);
                        continue;
                    }
                    message = stream.message() => message,
                };
                match message {
                    Ok(Some(event)) => {
                        if !delivered {
                            info!(source = "containerd", "exit event stream delivering");
                            metrics.count_trigger_connect(Source::Containerd.as_str());
                            delivered = true;
                        }
                        metrics.count_trigger(Source::Containerd.as_str());
                        if let Some(Read::Now(trigger)) = event.data.map(|data| exits.read(data)) {
                            debug!(source = "containerd", topic = %event.topic, ?trigger, "exit event");
                            sender.send(trigger);
                        }
                    }
                    Ok(None) => break "closed by the runtime".to_owned(),
                    Err(status) => break status.message().to_owned(),
                }
            },
            Err(status) => status.message().to_owned(),
        };
        exits.drain().await.into_iter().for_each(send_decided);
        metrics.count_trigger_error(Source::Containerd.as_str());
        if delivered || opened.elapsed() >= backoff.cap() {
            backoff.reset();
        }
        let wait = backoff.next_wait();
        warn!(source = "containerd", error = %end, retry_in = ?wait, "exit event stream ended; exits come from the CRI events meanwhile; reconnecting");
        tokio::time::sleep(wait).await;
    }
}

/// Whether the runtime's CRI state follows a containerd event of `topic` at once (see
/// [`Trigger::ContainerSettled`]).
pub fn settles(topic: &str) -> bool {
    matches!(topic, "/tasks/start" | "/tasks/delete" | "/containers/delete")
}

/// Whether a containerd event of `topic` runs ahead of the runtime's CRI state until a settling
/// event comes (see [`Trigger::ContainerAhead`]).
pub fn ahead(topic: &str) -> bool {
    matches!(topic, "/tasks/exit" | "/containers/create")
}

/// Whether a CRI event happened before the subscription that delivered it: containerd 2.x keeps
/// recent events and replays them to a new subscriber, at once. The connection's own full relist
/// covers them, so they are not acted on. Only events that arrive within [`SUBSCRIBED_AFTER`] of
/// the subscription can be replays (`since_subscribed`, on the monotonic clock): a wall clock
/// stepped back later (NTP) must not make every new event look old. Only the event's time is
/// read (`created_at`, nanoseconds; 0 is "unknown" and counts as new).
pub fn replayed(created_at: i64, subscribed_at: SystemTime, since_subscribed: Duration) -> bool {
    if since_subscribed >= SUBSCRIBED_AFTER {
        return false;
    }
    let Ok(subscribed) = subscribed_at.duration_since(UNIX_EPOCH) else {
        return false;
    };
    created_at > 0 && i128::from(created_at) < subscribed.as_nanos() as i128
}

/// What a CRI event asks for. Where the runtime's CRI events follow its CRI state (`exact`), the id
/// it names, checked once ([`Trigger::ContainerExact`]); elsewhere its pod, or the id when it
/// names no pod, on the re-check schedule.
pub fn cri_trigger(subject: EventSubject, names: Option<CriNames>, exact: bool) -> Trigger {
    match names {
        Some(CriNames {
            id: Some(id),
            pod,
            deleted,
            announces,
            ..
        }) if exact => Trigger::ContainerExact {
            id,
            pod,
            announces: if deleted {
                Some(PlegContainerState::NonExistent)
            } else {
                announces.map(PlegContainerState::from)
            },
        },
        _ => Trigger::from(subject),
    }
}

async fn cri_subscription(
    channel: Channel,
    exact: bool,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> StreamEnd {
    let subscribed_at = SystemTime::now();
    let mut stream = match open(Source::Cri, EventStream::cri(channel), sender, metrics, link).await {
        Ok(stream) => stream,
        Err(end) => return end,
    };
    loop {
        match next_message(&mut stream, Source::Cri, sender, metrics, link).await {
            Ok(Some(event)) => {
                metrics.count_trigger(Source::Cri.as_str());
                if replayed(event.created_at, subscribed_at, link.opened.elapsed()) {
                    metrics.count_trigger_replayed(Source::Cri.as_str());
                    continue;
                }
                link.delivered = true;
                if let Some(subject) = event.subject {
                    let trigger = cri_trigger(subject, event.cri, exact);
                    debug!(source = "cri", ?trigger, "trigger");
                    sender.send(trigger);
                }
            }
            Ok(None) => return StreamEnd::Closed,
            Err(status) => return StreamEnd::Failed(status),
        }
    }
}

/// Run one trigger source forever: subscribe, forward triggers, and after any failure wait (with
/// capped exponential backoff) and subscribe again. Each connection (the first too) asks for one
/// full relist, since events may have been missed before the subscription was in place. When the
/// runtime does not implement the stream and `mode` is `Auto` it logs so and idles. It never returns.
pub async fn run_source(
    source: Source,
    mode: TriggerMode,
    runtime: &CriRuntime,
    version: &RuntimeVersion,
    options: TriggerConfig,
    sender: TriggerSender,
    health: TriggerHealth,
) {
    let mut backoff = options.backoff.clone();
    let metrics = runtime.metrics().clone();
    if source == Source::Cri && cri_events_go_to_one_subscriber(version) {
        warn!(
            runtime_version = %version.runtime_version,
            "using CRI GetContainerEvents: on containerd before 2.0 each event goes to only one subscriber, so a kubelet using Evented PLEG on this runtime will miss the events plegd receives (prefer --triggers containerd there)"
        );
    }
    let exact = cri_events_follow_state(version);
    metrics.initialize_trigger_source(source.as_str());
    health.set_source(source.as_str());
    let state = |s: StreamState| set_state(&health, &metrics, source, s);
    state(StreamState::Connecting);
    // Streams in a row that the runtime answered and ended at once.
    let mut ended_at_once = 0u32;
    let mut exits = ExitData::new(runtime.oom_check(&options.namespace), metrics.clone());
    loop {
        let mut link = Link::new(health.clone());
        let channel = runtime.stream_channel();
        let end = match source {
            Source::Containerd => {
                let end = containerd_subscription(channel, &options, &sender, &metrics, &mut link, &mut exits).await;
                // No exit waits for the next subscription.
                for decided in exits.drain().await {
                    sender.send(decided_trigger(decided));
                }
                end
            }
            Source::Cri => cri_subscription(channel, exact, &sender, &metrics, &mut link).await,
        };
        // Whatever the stream would have said from now on is the relister's to find.
        health.set(false);
        // Only a stream that lived — delivered an event, or stayed connected longer than the
        // longest wait (a quiet node's containerd stream delivers nothing for hours) — resets the
        // backoff: one that the runtime ends at once, again and again, is retried ever more slowly.
        if link.delivered || (link.connected && link.opened.elapsed() >= backoff.cap()) {
            backoff.reset();
        }
        let wait = backoff.next_wait();
        if link.ended_at_once() && !matches!(end, StreamEnd::Unimplemented) {
            ended_at_once += 1;
            metrics.count_trigger_error(source.as_str());
            if ended_at_once >= UNUSABLE_AFTER {
                if ended_at_once == UNUSABLE_AFTER {
                    state(StreamState::Unusable);
                    warn!(
                        source = source.as_str(),
                        closes = ended_at_once,
                        retry_in = ?wait,
                        "the runtime ends its event stream as soon as it opens, so it has no usable events: relisting every --relist-period and retrying the stream with backoff (CRI-O sends container events only with enable_pod_events = true in the [crio.runtime] table of crio.conf)"
                    );
                } else {
                    debug!(source = source.as_str(), closes = ended_at_once, retry_in = ?wait, "event stream ended at once again");
                }
                tokio::time::sleep(wait).await;
                continue;
            }
        } else if link.connected {
            ended_at_once = 0;
        }
        state(StreamState::Reconnecting);
        if !report_end(end, source, mode, link.ended_at_once(), wait, &metrics) {
            state(StreamState::Off);
            // Nothing more to do, but a stage that ends is a failure: stay until cancelled.
            return std::future::pending::<()>().await;
        }
        tokio::time::sleep(wait).await;
    }
}

/// Say how a stream ended (log, count), before it is retried after `wait`. False when the runtime
/// does not implement the stream and `mode` is `Auto`: nothing to retry, the periodic relist alone.
fn report_end(
    end: StreamEnd,
    source: Source,
    mode: TriggerMode,
    ended_at_once: bool,
    wait: Duration,
    metrics: &Metrics,
) -> bool {
    match end {
        StreamEnd::Unimplemented if mode == TriggerMode::Auto => {
            info!(
                source = source.as_str(),
                "the runtime does not implement this event stream; relying on the periodic relist"
            );
            return false;
        }
        StreamEnd::Unimplemented => {
            metrics.count_trigger_error(source.as_str());
            warn!(source = source.as_str(), retry_in = ?wait, "the runtime does not implement this event stream; retrying");
        }
        StreamEnd::Failed(status) => {
            if !ended_at_once {
                metrics.count_trigger_error(source.as_str());
            }
            warn!(source = source.as_str(), code = ?status.code(), error = %status.message(), retry_in = ?wait, "trigger stream failed; reconnecting");
        }
        StreamEnd::Closed => {
            if !ended_at_once {
                metrics.count_trigger_error(source.as_str());
            }
            warn!(source = source.as_str(), retry_in = ?wait, "trigger stream closed by the runtime; reconnecting");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cri_event_that_follows_the_state_names_its_id_once() {
        let names = |id: Option<&str>, pod: Option<&str>, deleted| {
            Some(CriNames {
                id: id.map(Into::into),
                pod: pod.map(Into::into),
                deleted,
                announces: (!deleted).then_some(crate::kubecontainer::RuntimeContainerState::Running),
                unreadable: false,
            })
        };
        let pod = || EventSubject::Pod("u1".into());
        assert_eq!(
            cri_trigger(pod(), names(Some("c1"), Some("u1"), false), true),
            Trigger::ContainerExact {
                id: "c1".into(),
                pod: Some("u1".into()),
                announces: Some(PlegContainerState::Running)
            }
        );
        assert_eq!(
            cri_trigger(pod(), names(Some("c1"), None, true), true),
            Trigger::ContainerExact {
                id: "c1".into(),
                pod: None,
                announces: Some(PlegContainerState::NonExistent)
            }
        );
        // Elsewhere, or without a readable id: what the event names, on the schedule.
        assert_eq!(
            cri_trigger(pod(), names(Some("c1"), Some("u1"), false), false),
            Trigger::Pod("u1".into())
        );
        assert_eq!(
            cri_trigger(pod(), names(None, Some("u1"), false), true),
            Trigger::Pod("u1".into())
        );
        assert_eq!(
            cri_trigger(EventSubject::Unreadable, names(None, None, false), true),
            Trigger::All
        );
    }

    #[test]
    fn replayed_events_are_those_from_before_the_subscription() {
        let at = UNIX_EPOCH + Duration::from_secs(1_000);
        let event = |nanos: i64| nanos;
        let now = Duration::from_millis(5);
        assert!(replayed(event(999_999_999_999), at, now));
        assert!(!replayed(event(1_000_000_000_000), at, now));
        assert!(!replayed(event(1_000_000_000_001), at, now));
        // No time: treated as new.
        assert!(!replayed(event(0), at, now));
        assert!(!replayed(event(-5), at, now));
        // The wall clock stepped back an hour after the subscription: events created since look
        // older than it, but past the replay window none is taken for a replay.
        let stepped_back = 1_000_000_000_000 - 3_600_000_000_000;
        assert!(!replayed(event(stepped_back), at, SUBSCRIBED_AFTER));
        assert!(!replayed(event(stepped_back), at, Duration::from_secs(60)));
    }
}
