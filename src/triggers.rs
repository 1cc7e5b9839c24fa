//! Runtime triggers: streams that say "something changed for this container or pod", turned into
//! targeted relists. A trigger never carries state into plegd — no state, exit code or timestamp is
//! taken from an event's payload; it only names what to relist (the lesson of the kubelet's
//! Evented PLEG). The periodic relist keeps running as the safety net: every
//! `relist_period_with_triggers` (default 30 s) while the stream is connected, every `relist_period`
//! (default 1 s) from the moment it fails until it is connected again.
//!
//! Sources:
//! - **containerd**: containerd's own events service (`/tasks/start|exit|delete|oom`,
//!   `/containers/delete` in namespace `k8s.io`). It broadcasts to every subscriber, so it is safe
//!   beside a kubelet.
//! - **cri**: CRI `GetContainerEvents` (containerd ≥ 1.7, CRI-O). On containerd 1.7 each event goes
//!   to ONE subscriber, so plegd would take events from a kubelet that uses Evented PLEG on the
//!   same runtime (plegd warns); containerd 2.x broadcasts, and replays recent events to a new
//!   subscriber, which plegd skips (its connection's full relist covers them).
//!
//! A runtime's event can be ahead of its CRI state (containerd 1.6 publishes `/tasks/exit` 20–70 ms
//! before its CRI plugin reports the container exited). So an event that names a known container is
//! checked by probing that one container's CRI state (one cheap status call), and its pod is
//! relisted only when the probe differs from the record; a probe or relist that finds no change is
//! repeated on a schedule ([`recheck_delay`]) that ends at the first change.
//!
//! A stream that fails reconnects with exponential backoff, capped, forever: no permanent fallback.
//! Triggers are coalesced: everything that arrives while a relist runs is served by the next one,
//! and a pod named many times is relisted once. Targeted and periodic relists share the relister's
//! lock, so a pod is never relisted concurrently and its events never reorder.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use containerd_client::services::v1::SubscribeRequest;
use containerd_client::services::v1::events_client::EventsClient;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use prost::Message;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use crate::backoff::{ExponentialBackoff, InvalidBackoff};
use crate::clock::Clock;
use crate::kubecontainer::PodUid;
use crate::metrics::Metrics;
use crate::pleg::{GenericPleg, PlegContainerState, StreamState, TriggerHealth};
use crate::runtime::{CriRuntime, MAX_MESSAGE_SIZE, Runtime, RuntimeVersion};
use crate::supervise::Stage;

/// What a trigger asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Relist the pod that owns this container or sandbox id (a full relist if no pod record has it).
    Container(String),
    /// Relist this pod.
    Pod(PodUid),
    /// Relist everything.
    All,
}

/// Which trigger source to use (`--triggers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TriggerMode {
    /// containerd's events when the runtime is containerd, else CRI GetContainerEvents if the
    /// runtime implements it, else none.
    Auto,
    /// containerd's events service (broadcast; safe beside a kubelet).
    Containerd,
    /// CRI GetContainerEvents (on containerd 1.7, takes events from a kubelet using Evented PLEG).
    Cri,
    /// Periodic relist only.
    None,
}

/// The source a mode resolves to for a given runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Containerd,
    Cri,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Containerd => "containerd",
            Source::Cri => "cri",
        }
    }
}

impl TriggerMode {
    /// The source to start for a runtime that calls itself `runtime_name`. `Auto` on a runtime other
    /// than containerd tries CRI events, and stops quietly if the runtime does not implement them.
    pub fn source(self, runtime_name: &str) -> Option<Source> {
        match self {
            TriggerMode::Auto if runtime_name == "containerd" => Some(Source::Containerd),
            TriggerMode::Auto | TriggerMode::Cri => Some(Source::Cri),
            TriggerMode::Containerd => Some(Source::Containerd),
            TriggerMode::None => None,
        }
    }
}

/// Settings of trigger streams.
#[derive(Debug, Clone)]
pub struct TriggerOptions {
    pub initial_backoff: Duration,
    /// Cap of the reconnection backoff.
    pub max_backoff: Duration,
    /// Triggers queued for the dispatcher; past this, the next relist is a full one.
    pub queue: usize,
    /// containerd namespace the kubelet's pods live in.
    pub namespace: String,
}

impl Default for TriggerOptions {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            queue: 4096,
            namespace: "k8s.io".into(),
        }
    }
}

/// The sending side of the trigger queue. Never blocks: when the queue is full it raises a flag
/// that turns the next dispatch into a full relist, so no trigger is lost.
#[derive(Clone)]
pub struct TriggerSender {
    tx: mpsc::Sender<Trigger>,
    overflow: Arc<AtomicBool>,
}

impl TriggerSender {
    pub fn send(&self, trigger: Trigger) {
        if self.tx.try_send(trigger).is_err() {
            self.overflow.store(true, Ordering::Release);
        }
    }
}

/// The receiving side, consumed by [`dispatch`].
pub struct TriggerReceiver {
    rx: mpsc::Receiver<Trigger>,
    overflow: Arc<AtomicBool>,
}

pub fn trigger_queue(capacity: usize) -> (TriggerSender, TriggerReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let overflow = Arc::new(AtomicBool::new(false));
    (
        TriggerSender {
            tx,
            overflow: overflow.clone(),
        },
        TriggerReceiver { rx, overflow },
    )
}

/// Triggers gathered for one dispatch, deduplicated, in arrival order (pure).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pending {
    pub all: bool,
    pub pods: Vec<PodUid>,
    pub containers: Vec<String>,
    seen: HashSet<Trigger>,
}

impl Pending {
    /// A full relist does not replace the pod and container targets: their re-check schedules
    /// still catch a runtime whose CRI state lags its own events.
    pub fn add(&mut self, trigger: Trigger) {
        if !self.seen.insert(trigger.clone()) {
            return;
        }
        match trigger {
            Trigger::All => self.all = true,
            Trigger::Pod(uid) => self.pods.push(uid),
            Trigger::Container(id) => self.containers.push(id),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.all && self.pods.is_empty() && self.containers.is_empty()
    }
}

/// What one triggered check looks at: a pod, and the container the event named when it named one.
/// An event can name an id before the runtime's CRI state lists it (containerd 2.x publishes a
/// sandbox's `/tasks/start` before its CRI plugin lists the sandbox): such a target has no pod yet
/// and is located first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pod: Option<PodUid>,
    pub container: Option<String>,
}

/// Probes of one container (one cheap status call each) are repeated every 2 ms for this many
/// attempts (~120 ms, which covers containerd 1.6's CRI lag), then with doubling waits.
const FINE_PROBES: usize = 60;
/// Doubling waits, in ms, after the fine probes, and the whole schedule of pod re-relists.
const COARSE_MS: [u64; 9] = [2, 4, 8, 16, 32, 64, 128, 256, 512];

/// The wait before re-check number `attempt` (0-based) of `target`, None when the schedule is over.
/// A runtime's event can be ahead of its CRI state (containerd 1.6 publishes `/tasks/exit` ~20–70 ms
/// before its CRI plugin reports the container exited), so a check that finds no change is
/// repeated; the first change ends it.
pub fn recheck_delay(target: &Target, attempt: usize) -> Option<Duration> {
    let ms = match target.container {
        Some(_) if attempt < FINE_PROBES => 2,
        // Continue with the doubling waits that follow 2 ms.
        Some(_) => *COARSE_MS.get(attempt - FINE_PROBES + 2)?,
        None => *COARSE_MS.get(attempt)?,
    };
    Some(Duration::from_millis(ms))
}

/// At most this many targets wait for a re-check; past it a burst's further targets get one check
/// each and a complete relist (one, however many) covers what their re-checks would have found.
pub const MAX_RECHECKS: usize = 4096;

/// An id that a whole locate schedule did not find (a late event for a container already removed,
/// a task in the runtime's namespace that is no CRI container) is not looked for again, for this
/// long, when more events name it; the periodic relist finds it if it ever becomes a container.
pub const UNLOCATABLE_FOR: Duration = Duration::from_secs(600);
/// At most this many such ids are remembered (then the memory starts over).
const MAX_UNLOCATABLE: usize = 4096;

/// Targets to check again later, with how many re-checks each has had, and the ids not found
/// (pure bookkeeping).
#[derive(Debug, Default)]
pub struct Rechecks {
    due: Vec<(tokio::time::Instant, Target, usize)>,
    unlocatable: std::collections::HashMap<String, tokio::time::Instant>,
    /// A re-check was not scheduled for want of room.
    overflowed: bool,
}

impl Rechecks {
    /// After a check of `target` (`attempt` re-checks done before it): forget it if it found a
    /// change, else schedule the next re-check unless the schedule is over (an id never located
    /// is then remembered as such) or [`MAX_RECHECKS`] wait already.
    pub fn after_check(&mut self, target: &Target, changed: bool, attempt: usize, now: tokio::time::Instant) {
        self.due.retain(|(_, t, _)| t != target);
        if changed {
            return;
        }
        match recheck_delay(target, attempt) {
            Some(_) if self.due.len() >= MAX_RECHECKS => self.overflowed = true,
            Some(wait) => self.due.push((now + wait, target.clone(), attempt + 1)),
            None => {
                if let (None, Some(id)) = (&target.pod, &target.container) {
                    if self.unlocatable.len() >= MAX_UNLOCATABLE {
                        self.unlocatable.clear();
                    }
                    self.unlocatable.insert(id.clone(), now);
                }
            }
        }
    }

    /// Whether `id` was looked for through a whole schedule, not found, within [`UNLOCATABLE_FOR`].
    pub fn unlocatable(&self, id: &str, now: tokio::time::Instant) -> bool {
        self.unlocatable
            .get(id)
            .is_some_and(|at| now.duration_since(*at) < UNLOCATABLE_FOR)
    }

    /// Whether a re-check was dropped for want of room since the last call.
    pub fn take_overflowed(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }

    pub fn next_due(&self) -> Option<tokio::time::Instant> {
        self.due.iter().map(|(t, _, _)| *t).min()
    }

    /// Take the targets whose re-check is due, with their attempt counts.
    pub fn take_due(&mut self, now: tokio::time::Instant) -> Vec<(Target, usize)> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.due)
            .into_iter()
            .partition(|(t, _, _)| *t <= now);
        self.due = later;
        due.into_iter().map(|(_, target, attempt)| (target, attempt)).collect()
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

/// One check: a target without a pod is located first (two lists filtered by its id); once found,
/// its pod is relisted, and a container the relist saw only created is probed further, since the
/// event was about its start. A container target is probed (one status call) and its pod relisted
/// only when the probe differs from the record; a pod target is relisted. Returns whether a
/// change was found (the end of the target's schedule); `target` is updated once located.
async fn check<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    target: &mut Target,
    attempt: usize,
    metrics: &Metrics,
) -> bool {
    let Some(pod) = target.pod.clone() else {
        let id = target.container.clone().unwrap_or_default();
        metrics.count_trigger_relist("locate");
        return match pleg.locate(&id).await {
            // Not listed yet: looked for again on the schedule.
            Ok(None) => false,
            Ok(Some(pod)) => {
                metrics.count_trigger_relist("pod");
                if let Err(error) = pleg.relist_pod(&pod).await {
                    debug!(pod = %pod, error = %error, "triggered pod relist failed; the periodic relist will retry");
                    return true;
                }
                let settled = matches!(
                    pleg.recorded_state(&pod, &id).await,
                    PlegContainerState::Running | PlegContainerState::Exited
                );
                target.pod = Some(pod);
                settled
            }
            Err(error) => {
                debug!(container = %id, error = %error, "locating a new id failed; relisting everything");
                metrics.count_trigger_relist("all");
                if let Err(error) = pleg.relist().await {
                    debug!(error = %error, "triggered relist failed; the periodic relist will retry");
                }
                true
            }
        };
    };
    if let Some(id) = &target.container {
        metrics.count_trigger_relist("probe");
        match pleg.probe(&pod, id).await {
            Ok(false) => return false,
            Ok(true) => {}
            // The runtime did not answer: let the relist below find out, or the periodic one.
            Err(error) => debug!(pod = %pod, container = %id, error = %error, "probe failed"),
        }
    }
    metrics.count_trigger_relist(if attempt == 0 || target.container.is_some() {
        "pod"
    } else {
        "recheck"
    });
    match pleg.relist_pod(&pod).await {
        Ok(changed) => changed,
        Err(error) => {
            debug!(pod = %pod, error = %error, "triggered pod relist failed; the periodic relist will retry");
            // Stop re-checking: the periodic relist owns a runtime that does not answer.
            true
        }
    }
}

/// Serve triggers until every sender is gone: wait for one (or for a re-check to be due), take
/// everything else already queued, map container ids to pods, then check each target once (or
/// relist everything once).
pub async fn dispatch<R: Runtime, C: Clock>(
    pleg: Arc<GenericPleg<R, C>>,
    mut queue: TriggerReceiver,
    metrics: Arc<Metrics>,
) {
    let mut rechecks = Rechecks::default();
    loop {
        let mut pending = Pending::default();
        let next_due = rechecks.next_due();
        tokio::select! {
            trigger = queue.rx.recv() => match trigger {
                Some(trigger) => pending.add(trigger),
                None => return,
            },
            () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {}
        }
        while let Ok(more) = queue.rx.try_recv() {
            pending.add(more);
        }
        if queue.overflow.swap(false, Ordering::AcqRel) {
            pending.add(Trigger::All);
        }
        // Fresh triggers start a target's schedule over; due re-checks continue theirs.
        let mut targets: Vec<(Target, usize)> = Vec::new();
        let now = tokio::time::Instant::now();
        for id in std::mem::take(&mut pending.containers) {
            // An id no record has (a new pod, or a new container) is located in the runtime,
            // unless it was looked for in vain a moment ago.
            let pod = pleg.pod_of(&id).await;
            if pod.is_none() && rechecks.unlocatable(&id, now) {
                metrics.count_trigger_relist("skipped");
                continue;
            }
            targets.push((
                Target {
                    pod,
                    container: Some(id),
                },
                0,
            ));
        }
        targets.extend(pending.pods.iter().map(|pod| {
            (
                Target {
                    pod: Some(pod.clone()),
                    container: None,
                },
                0,
            )
        }));
        for (target, attempt) in rechecks.take_due(tokio::time::Instant::now()) {
            if !targets.iter().any(|(t, _)| *t == target) {
                targets.push((target, attempt));
            }
        }
        if pending.all {
            metrics.count_trigger_relist("all");
            if let Err(error) = pleg.relist().await {
                debug!(error = %error, "triggered relist failed; the periodic relist will retry");
            }
        }
        for (mut target, attempt) in targets {
            let changed = check(&pleg, &mut target, attempt, &metrics).await;
            rechecks.after_check(&target, changed, attempt, tokio::time::Instant::now());
        }
        if rechecks.take_overflowed() {
            // One complete relist for every re-check there was no room for.
            metrics.count_trigger_relist("all");
            if let Err(error) = pleg.relist().await {
                debug!(error = %error, "triggered relist failed; the periodic relist will retry");
            }
        }
    }
}

/// What a containerd event names, if it can change a container's state.
pub fn containerd_trigger(topic: &str, payload: &[u8]) -> Option<Trigger> {
    use containerd_client::events::{ContainerDelete, TaskDelete, TaskExit, TaskOom, TaskStart};
    let id = match topic {
        "/tasks/start" => TaskStart::decode(payload).ok()?.container_id,
        // The exit of an exec'd process (id != container id) changes nothing.
        "/tasks/exit" => {
            TaskExit::decode(payload)
                .ok()
                .filter(|e| e.id == e.container_id || e.id.is_empty())?
                .container_id
        }
        "/tasks/delete" => {
            TaskDelete::decode(payload)
                .ok()
                .filter(|e| e.id == e.container_id || e.id.is_empty())?
                .container_id
        }
        "/tasks/oom" => TaskOom::decode(payload).ok()?.container_id,
        "/containers/delete" => ContainerDelete::decode(payload).ok()?.id,
        _ => return None,
    };
    (!id.is_empty()).then_some(Trigger::Container(id))
}

/// The containerd event filters for `namespace` (each one an AND; the list an OR).
pub fn containerd_filters(namespace: &str) -> Vec<String> {
    [
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
        "/tasks/oom",
        "/containers/delete",
    ]
    .iter()
    .map(|topic| format!("namespace=={namespace},topic==\"{topic}\""))
    .collect()
}

/// What a CRI container event names: its pod when the event carries the sandbox's uid, else the
/// container. Nothing else of the event is read.
pub fn cri_trigger(event: &cri::ContainerEventResponse) -> Option<Trigger> {
    let uid = event
        .pod_sandbox_status
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|m| m.uid.as_str())
        .unwrap_or("");
    if !uid.is_empty() {
        return Some(Trigger::Pod(uid.to_owned()));
    }
    (!event.container_id.is_empty()).then(|| Trigger::Container(event.container_id.clone()))
}

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
async fn open<T>(
    source: Source,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> Result<T, StreamEnd> {
    tokio::pin!(call);
    let answer = tokio::select! {
        answer = &mut call => answer,
        () = tokio::time::sleep_until(link.opened + SUBSCRIBED_AFTER) => {
            stream_connected(source, sender, metrics, link);
            call.await
        }
    };
    match answer {
        Ok(response) => {
            link.answered = true;
            Ok(response.into_inner())
        }
        Err(status) if status.code() == tonic::Code::Unimplemented => Err(StreamEnd::Unimplemented),
        Err(status) => Err(StreamEnd::Failed(status)),
    }
}

/// The next message of a subscription. Until the link is connected, a stream that stays open until
/// [`SUBSCRIBED_AFTER`] after it was opened, or delivers a message before that, connects it; one
/// that ends before that never does.
async fn next_message<T>(
    stream: &mut tonic::Streaming<T>,
    source: Source,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> Result<Option<T>, tonic::Status> {
    if !link.connected {
        // `Streaming::message` is cancel safe: a message half read when the timer fires is kept.
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

async fn containerd_subscription(
    channel: Channel,
    options: &TriggerOptions,
    sender: &TriggerSender,
    metrics: &Metrics,
    link: &mut Link,
) -> StreamEnd {
    let mut client = EventsClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
    let request = SubscribeRequest {
        filters: containerd_filters(&options.namespace),
    };
    let mut stream = match open(Source::Containerd, client.subscribe(request), sender, metrics, link).await {
        Ok(stream) => stream,
        Err(end) => return end,
    };
    loop {
        match next_message(&mut stream, Source::Containerd, sender, metrics, link).await {
            Ok(Some(envelope)) => {
                link.delivered = true;
                metrics.count_trigger(Source::Containerd.as_str());
                let payload = envelope
                    .event
                    .as_ref()
                    .map(|any| any.value.as_slice())
                    .unwrap_or_default();
                if let Some(trigger) = containerd_trigger(&envelope.topic, payload) {
                    debug!(source = "containerd", topic = %envelope.topic, ?trigger, "trigger");
                    sender.send(trigger);
                }
            }
            Ok(None) => return StreamEnd::Closed,
            Err(status) => return StreamEnd::Failed(status),
        }
    }
}

/// Whether a CRI event happened before the subscription that delivered it: containerd 2.x keeps
/// recent events and replays them to a new subscriber, at once. The connection's own full relist
/// covers them, so they are not acted on. Only events that arrive within [`SUBSCRIBED_AFTER`] of
/// the subscription can be replays (`since_subscribed`, on the monotonic clock): a wall clock
/// stepped back later (NTP) must not make every new event look old. Only the event's time is
/// read (nanoseconds; 0 is "unknown" and counts as new).
pub fn replayed(event: &cri::ContainerEventResponse, subscribed_at: SystemTime, since_subscribed: Duration) -> bool {
    if since_subscribed >= SUBSCRIBED_AFTER {
        return false;
    }
    let Ok(subscribed) = subscribed_at.duration_since(UNIX_EPOCH) else {
        return false;
    };
    event.created_at > 0 && i128::from(event.created_at) < subscribed.as_nanos() as i128
}

async fn cri_subscription(channel: Channel, sender: &TriggerSender, metrics: &Metrics, link: &mut Link) -> StreamEnd {
    let mut client = RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
    let subscribed_at = SystemTime::now();
    let call = client.get_container_events(cri::GetEventsRequest {});
    let mut stream = match open(Source::Cri, call, sender, metrics, link).await {
        Ok(stream) => stream,
        Err(end) => return end,
    };
    loop {
        match next_message(&mut stream, Source::Cri, sender, metrics, link).await {
            Ok(Some(event)) => {
                metrics.count_trigger(Source::Cri.as_str());
                if replayed(&event, subscribed_at, link.opened.elapsed()) {
                    metrics.count_trigger_replayed(Source::Cri.as_str());
                    continue;
                }
                link.delivered = true;
                if let Some(trigger) = cri_trigger(&event) {
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
/// runtime does not implement the stream and `mode` is `Auto` it logs so and idles. It returns only
/// an error in its settings.
pub async fn run_source(
    source: Source,
    mode: TriggerMode,
    runtime: &CriRuntime,
    version: &RuntimeVersion,
    options: TriggerOptions,
    sender: TriggerSender,
    health: TriggerHealth,
) -> Result<(), InvalidBackoff> {
    let mut backoff = ExponentialBackoff::try_new(options.initial_backoff, options.max_backoff)?;
    let metrics = runtime.metrics().clone();
    if source == Source::Cri && cri_events_go_to_one_subscriber(version) {
        warn!(
            runtime_version = %version.runtime_version,
            "using CRI GetContainerEvents: on containerd before 2.0 each event goes to only one subscriber, so a kubelet using Evented PLEG on this runtime will miss the events plegd receives (prefer --triggers containerd there)"
        );
    }
    let state = |s: StreamState| set_state(&health, &metrics, source, s);
    state(StreamState::Connecting);
    // Streams in a row that the runtime answered and ended at once.
    let mut ended_at_once = 0u32;
    loop {
        let mut link = Link::new(health.clone());
        let channel = runtime.stream_channel();
        let end = match source {
            Source::Containerd => containerd_subscription(channel, &options, &sender, &metrics, &mut link).await,
            Source::Cri => cri_subscription(channel, &sender, &metrics, &mut link).await,
        };
        // Whatever the stream would have said from now on is the relister's to find.
        health.set(false);
        // Only a stream that lived and delivered an event resets the backoff: one that the runtime
        // ends at once, again and again, is retried ever more slowly.
        if link.delivered {
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
        match end {
            StreamEnd::Unimplemented if mode == TriggerMode::Auto => {
                state(StreamState::Off);
                info!(
                    source = source.as_str(),
                    "the runtime does not implement this event stream; relying on the periodic relist"
                );
                // Nothing more to do, but a stage that ends is a failure: stay until cancelled.
                std::future::pending::<()>().await;
                return Ok(());
            }
            StreamEnd::Unimplemented => {
                metrics.count_trigger_error(source.as_str());
                warn!(source = source.as_str(), retry_in = ?wait, "the runtime does not implement this event stream; retrying");
            }
            StreamEnd::Failed(status) => {
                if !link.ended_at_once() {
                    metrics.count_trigger_error(source.as_str());
                }
                warn!(source = source.as_str(), code = ?status.code(), error = %status.message(), retry_in = ?wait, "trigger stream failed; reconnecting");
            }
            StreamEnd::Closed => {
                if !link.ended_at_once() {
                    metrics.count_trigger_error(source.as_str());
                }
                warn!(source = source.as_str(), retry_in = ?wait, "trigger stream closed by the runtime; reconnecting");
            }
        }
        tokio::time::sleep(wait).await;
    }
}

/// Whether a runtime's CRI GetContainerEvents hands each event to one subscriber only: containerd
/// before 2.0 does; 2.x broadcasts (containerd PR #9661). Other runtimes are not assumed to.
pub fn cri_events_go_to_one_subscriber(version: &RuntimeVersion) -> bool {
    if version.runtime_name != "containerd" {
        return false;
    }
    let major = version
        .runtime_version
        .trim_start_matches('v')
        .split(['.', '~', '+', '-'])
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    // A version it cannot read is taken as an old one: the warning is the safe side.
    major.is_none_or(|m| m < 2)
}

/// The trigger machinery for `mode` on `runtime` as named stages to run supervised: the source
/// and the dispatcher (none for `TriggerMode::None`).
pub fn stages<C: Clock>(
    mode: TriggerMode,
    version: &RuntimeVersion,
    pleg: Arc<GenericPleg<CriRuntime, C>>,
    options: TriggerOptions,
) -> Result<Vec<(&'static str, Stage)>, InvalidBackoff> {
    let Some(source) = mode.source(&version.runtime_name) else {
        return Ok(Vec::new());
    };
    // Validate before starting so that bad settings fail at start.
    ExponentialBackoff::try_new(options.initial_backoff, options.max_backoff)?;
    let metrics = pleg.runtime().metrics().clone();
    let (sender, receiver) = trigger_queue(options.queue);
    let runtime = pleg.runtime().clone();
    info!(source = source.as_str(), "runtime triggers on");
    let version = version.clone();
    let health = pleg.trigger_health();
    let source_stage: Stage = Box::pin(async move {
        if let Err(error) = run_source(source, mode, &runtime, &version, options, sender, health).await {
            warn!(error = %error, "trigger source stopped");
        }
    });
    let dispatcher: Stage = Box::pin(dispatch(pleg, receiver, metrics));
    Ok(vec![
        ("trigger-source", source_stage),
        ("trigger-dispatcher", dispatcher),
    ])
}

/// [`stages`] spawned as plain tasks, for tests and benches that drive a relister by hand.
pub fn spawn<C: Clock>(
    mode: TriggerMode,
    version: &RuntimeVersion,
    pleg: Arc<GenericPleg<CriRuntime, C>>,
    options: TriggerOptions,
) -> Result<Vec<tokio::task::JoinHandle<()>>, InvalidBackoff> {
    Ok(stages(mode, version, pleg, options)?
        .into_iter()
        .map(|(_, stage)| tokio::spawn(stage))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_containerd_before_2_hands_cri_events_to_one_subscriber() {
        let v = |name: &str, version: &str| RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        };
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "1.7.24~ds1")));
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "v1.6.20")));
        assert!(!cri_events_go_to_one_subscriber(&v("containerd", "2.1.9+unknown")));
        assert!(!cri_events_go_to_one_subscriber(&v("containerd", "v2.0.0")));
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "garbage")));
        assert!(!cri_events_go_to_one_subscriber(&v("cri-o", "1.31.0")));
    }

    #[test]
    fn replayed_events_are_those_from_before_the_subscription() {
        let at = UNIX_EPOCH + Duration::from_secs(1_000);
        let event = |nanos: i64| cri::ContainerEventResponse {
            created_at: nanos,
            ..Default::default()
        };
        let now = Duration::from_millis(5);
        assert!(replayed(&event(999_999_999_999), at, now));
        assert!(!replayed(&event(1_000_000_000_000), at, now));
        assert!(!replayed(&event(1_000_000_000_001), at, now));
        // No time: treated as new.
        assert!(!replayed(&event(0), at, now));
        assert!(!replayed(&event(-5), at, now));
        // The wall clock stepped back an hour after the subscription: events created since look
        // older than it, but past the replay window none is taken for a replay.
        let stepped_back = 1_000_000_000_000 - 3_600_000_000_000;
        assert!(!replayed(&event(stepped_back), at, SUBSCRIBED_AFTER));
        assert!(!replayed(&event(stepped_back), at, Duration::from_secs(60)));
    }

    #[test]
    fn recheck_schedules() {
        let pod = Target {
            pod: Some("u1".into()),
            container: None,
        };
        let ctr = Target {
            pod: Some("u1".into()),
            container: Some("c1".into()),
        };
        let ms = Duration::from_millis;
        // Pod relists: doubling from 2 ms to 512 ms, then over.
        let waits: Vec<_> = (0..10).map(|a| recheck_delay(&pod, a)).collect();
        assert_eq!(waits[0], Some(ms(2)));
        assert_eq!(waits[8], Some(ms(512)));
        assert_eq!(waits[9], None);
        // Container probes: every 2 ms for 60 probes, then 8, 16 … 512 ms, then over.
        assert_eq!(recheck_delay(&ctr, 59), Some(ms(2)));
        assert_eq!(recheck_delay(&ctr, 60), Some(ms(8)));
        assert_eq!(recheck_delay(&ctr, 66), Some(ms(512)));
        assert_eq!(recheck_delay(&ctr, 67), None);
        let total: Duration = (0..).map_while(|a| recheck_delay(&ctr, a)).sum();
        assert!(total > ms(1000) && total < ms(1300), "{total:?}");
    }

    #[test]
    fn rechecks_follow_the_schedule_and_stop_at_a_change() {
        let t0 = tokio::time::Instant::now();
        let target = Target {
            pod: Some("u1".into()),
            container: None,
        };
        let mut r = Rechecks::default();
        r.after_check(&target, false, 0, t0);
        assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(2)));
        assert!(r.take_due(t0).is_empty());
        assert_eq!(r.take_due(t0 + Duration::from_millis(2)), [(target.clone(), 1)]);
        // Unchanged again: the next wait doubles.
        r.after_check(&target, false, 1, t0);
        assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(4)));
        // A change ends it.
        r.after_check(&target, true, 2, t0);
        assert!(r.is_empty());
        // The schedule ends after its last step.
        r.after_check(&target, false, COARSE_MS.len(), t0);
        assert_eq!(r.len(), 0);
        assert!(!r.take_overflowed());
    }

    /// An id a whole locate schedule did not find is not looked for again for a while; a located
    /// one, or one that found a change, is not remembered.
    #[test]
    fn ids_never_located_are_not_looked_for_again() {
        let t0 = tokio::time::Instant::now();
        let unknown = Target {
            pod: None,
            container: Some("gone".into()),
        };
        let mut r = Rechecks::default();
        let last = (0..).take_while(|a| recheck_delay(&unknown, *a).is_some()).count();
        r.after_check(&unknown, false, last, t0);
        assert!(r.unlocatable("gone", t0 + Duration::from_secs(1)));
        assert!(!r.unlocatable("gone", t0 + UNLOCATABLE_FOR));
        assert!(!r.unlocatable("other", t0));
        let known = Target {
            pod: Some("u1".into()),
            container: Some("c1".into()),
        };
        r.after_check(&known, false, 10_000, t0);
        assert!(!r.unlocatable("c1", t0));
    }

    /// The re-checks waiting are bounded: past the bound none is added, and the dispatcher is
    /// told to relist everything once instead.
    #[test]
    fn rechecks_are_bounded() {
        let t0 = tokio::time::Instant::now();
        let mut r = Rechecks::default();
        for i in 0..MAX_RECHECKS + 10 {
            let target = Target {
                pod: Some(format!("u{i}")),
                container: None,
            };
            r.after_check(&target, false, 0, t0);
        }
        assert_eq!(r.len(), MAX_RECHECKS);
        assert!(r.take_overflowed());
        assert!(!r.take_overflowed(), "said once");
    }

    #[test]
    fn pending_coalesces_and_keeps_order() {
        let mut p = Pending::default();
        for t in [
            Trigger::Pod("b".into()),
            Trigger::Container("c1".into()),
            Trigger::Pod("a".into()),
            Trigger::Pod("b".into()),
            Trigger::Container("c1".into()),
        ] {
            p.add(t);
        }
        assert_eq!(p.pods, ["b", "a"]);
        assert_eq!(p.containers, ["c1"]);
        p.add(Trigger::All);
        p.add(Trigger::All);
        p.add(Trigger::Pod("z".into()));
        assert!(p.all);
        assert_eq!(p.pods, ["b", "a", "z"], "targets keep their re-check schedules");
        assert_eq!(p.containers, ["c1"]);
        assert!(!p.is_empty());
        assert!(Pending::default().is_empty());
    }

    #[test]
    fn modes_resolve_to_sources() {
        assert_eq!(TriggerMode::Auto.source("containerd"), Some(Source::Containerd));
        assert_eq!(TriggerMode::Auto.source("cri-o"), Some(Source::Cri));
        assert_eq!(TriggerMode::Cri.source("containerd"), Some(Source::Cri));
        assert_eq!(TriggerMode::Containerd.source("cri-o"), Some(Source::Containerd));
        assert_eq!(TriggerMode::None.source("containerd"), None);
    }

    #[test]
    fn containerd_events_name_containers_only() {
        use containerd_client::events::{ContainerDelete, TaskExit, TaskStart};
        let start = TaskStart {
            container_id: "c1".into(),
            pid: 7,
        }
        .encode_to_vec();
        assert_eq!(
            containerd_trigger("/tasks/start", &start),
            Some(Trigger::Container("c1".into()))
        );
        let exit = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            exit_status: 3,
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            containerd_trigger("/tasks/exit", &exit),
            Some(Trigger::Container("c1".into()))
        );
        let exec_exit = TaskExit {
            container_id: "c1".into(),
            id: "exec-42".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            containerd_trigger("/tasks/exit", &exec_exit),
            None,
            "an exec'd process ending changes nothing"
        );
        let delete = ContainerDelete { id: "c2".into() }.encode_to_vec();
        assert_eq!(
            containerd_trigger("/containers/delete", &delete),
            Some(Trigger::Container("c2".into()))
        );
        assert_eq!(containerd_trigger("/images/create", &delete), None);
        assert_eq!(
            containerd_trigger("/tasks/start", b"\xff\xff garbage"),
            None,
            "undecodable payloads are ignored"
        );
        assert_eq!(
            containerd_trigger("/tasks/start", &TaskStart::default().encode_to_vec()),
            None
        );
    }

    #[test]
    fn filters_are_per_topic_in_the_namespace() {
        let f = containerd_filters("k8s.io");
        assert_eq!(f.len(), 5);
        assert_eq!(f[1], "namespace==k8s.io,topic==\"/tasks/exit\"");
    }

    #[test]
    fn cri_events_name_the_pod_when_they_can() {
        let mut event = cri::ContainerEventResponse {
            container_id: "c1".into(),
            ..Default::default()
        };
        assert_eq!(cri_trigger(&event), Some(Trigger::Container("c1".into())));
        event.pod_sandbox_status = Some(cri::PodSandboxStatus {
            metadata: Some(cri::PodSandboxMetadata {
                uid: "u1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cri_trigger(&event), Some(Trigger::Pod("u1".into())));
        assert_eq!(cri_trigger(&cri::ContainerEventResponse::default()), None);
    }

    #[tokio::test]
    async fn full_queue_turns_into_a_full_relist_flag() {
        let (tx, mut rx) = trigger_queue(1);
        tx.send(Trigger::Pod("a".into()));
        tx.send(Trigger::Pod("b".into()));
        assert_eq!(rx.rx.recv().await, Some(Trigger::Pod("a".into())));
        assert!(
            rx.overflow.load(Ordering::Acquire),
            "the dropped trigger is remembered as 'relist all'"
        );
    }
}
