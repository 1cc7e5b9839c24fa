//! The PLEG stage: the generic relister with the kubelet's semantics (`pkg/kubelet/pleg/generic.go`).
//!
//! Each relist lists every sandbox and container, sets them as the *current* pod records, and
//! compares them with the *old* records through the pure [`compute_events`]. For every pod with a
//! change it reads the pod's full status into the [`PodCache`], advances the record and sends the
//! events on a bounded channel. A pod whose status cannot be read is re-inspected at the next relist
//! with its record NOT advanced, so the same events are computed again then. This stage never takes
//! state from anything but a relist, and never blocks on the channel.
//!
//! Where plegd differs from the kubelet: when the channel is full the kubelet drops the event for
//! good; plegd counts the discard AND keeps the pod's undelivered events, which the pod's next relist
//! sends again, in order, before any newer event (see [`MAX_UNDELIVERED_PER_POD`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Serialize, Serializer};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::cache::PodCache;
use crate::clock::{self, Clock};
use crate::kubecontainer::{PodUid, RuntimeContainerState, RuntimePod, RuntimePodStatus};
use crate::metrics::{KindLabel, Metrics, StateLabel};
use crate::runtime::{IdKind, Runtime, RuntimeError};

/// Default period between two global relists.
pub const DEFAULT_RELIST_PERIOD: Duration = Duration::from_secs(1);
/// Default period between two global relists while a runtime event stream is healthy: the relist is
/// then only the safety net for an event the stream lost (BENCHMARKS.md, "Idle cost on containerd
/// 2.1", says why 30 s).
pub const DEFAULT_RELIST_PERIOD_WITH_TRIGGERS: Duration = Duration::from_secs(30);
/// Default threshold after which a PLEG that has not relisted is unhealthy.
pub const DEFAULT_RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Default capacity of the event channel.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 1000;
/// Undelivered events kept per pod. Past this the pod's queue is replaced by events that state
/// each of its containers' current state, followed by a PodSync, when that is shorter: a consumer
/// may then miss an intermediate transition of a container, never the final state of one.
pub const MAX_UNDELIVERED_PER_POD: usize = 128;

/// The kinds of pod lifecycle event (`pleg.PodLifeCycleEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum PodLifecycleEventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    /// The pod should be synced although no container changed (after a successful re-inspection,
    /// or after undelivered events were folded into current state).
    PodSync,
    /// A container went to the created or unknown state. Computed, never sent (as in the kubelet).
    ContainerChanged,
}

impl PodLifecycleEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContainerStarted => "ContainerStarted",
            Self::ContainerDied => "ContainerDied",
            Self::ContainerRemoved => "ContainerRemoved",
            Self::PodSync => "PodSync",
            Self::ContainerChanged => "ContainerChanged",
        }
    }
}

fn rfc3339<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(*t))
}

/// One pod lifecycle event. The kubelet's event carries only the pod uid, the type and the
/// container id; plegd adds what it knows at the time of the event, for people who watch them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodLifecycleEvent {
    #[serde(rename = "type")]
    pub kind: PodLifecycleEventType,
    pub pod_uid: PodUid,
    /// The container or sandbox id; None for PodSync.
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// True when `container_id` names the pod sandbox rather than a container.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sandbox: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the relist that saw the change started.
    #[serde(serialize_with = "rfc3339")]
    pub timestamp: SystemTime,
}

impl PodLifecycleEvent {
    fn new(kind: PodLifecycleEventType, pod_uid: &str, at: SystemTime) -> Self {
        Self {
            kind,
            pod_uid: pod_uid.to_owned(),
            container_id: None,
            namespace: None,
            pod: None,
            container: None,
            sandbox: false,
            exit_code: None,
            reason: None,
            timestamp: at,
        }
    }

    fn pod_sync(pod_uid: &str, pod: Option<&RuntimePod>, at: SystemTime) -> Self {
        let mut event = Self::new(PodLifecycleEventType::PodSync, pod_uid, at);
        set_pod_names(&mut event, pod);
        event
    }
}

/// A container's state as the PLEG compares it (`plegContainerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlegContainerState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

impl From<RuntimeContainerState> for PlegContainerState {
    /// The kubelet does not use the created state: it maps to unknown.
    fn from(state: RuntimeContainerState) -> Self {
        match state {
            RuntimeContainerState::Created | RuntimeContainerState::Unknown => Self::Unknown,
            RuntimeContainerState::Running => Self::Running,
            RuntimeContainerState::Exited => Self::Exited,
        }
    }
}

fn pleg_state(pod: Option<&RuntimePod>, id: &str) -> PlegContainerState {
    pod.and_then(|p| p.find_any(id))
        .map_or(PlegContainerState::NonExistent, |c| c.state.into())
}

/// The events for one container going from `old` to `new` (`generateEvents`).
pub fn generate_events(old: PlegContainerState, new: PlegContainerState) -> &'static [PodLifecycleEventType] {
    use PlegContainerState as S;
    use PodLifecycleEventType as E;
    if old == new {
        return &[];
    }
    match new {
        S::Running => &[E::ContainerStarted],
        S::Exited => &[E::ContainerDied],
        S::Unknown => &[E::ContainerChanged],
        S::NonExistent if old == S::Exited => &[E::ContainerRemoved],
        S::NonExistent => &[E::ContainerDied, E::ContainerRemoved],
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn set_pod_names(event: &mut PodLifecycleEvent, pod: Option<&RuntimePod>) {
    if let Some(pod) = pod {
        event.namespace = non_empty(&pod.namespace);
        event.pod = non_empty(&pod.name);
    }
}

/// The ids of a record in the kubelet's order (containers, then sandboxes), each with whether it
/// is a sandbox.
fn ids(pod: Option<&RuntimePod>) -> impl Iterator<Item = (&crate::kubecontainer::RuntimeContainer, bool)> {
    pod.into_iter().flat_map(|p| {
        let containers = p.containers.iter().map(|c| (c, false));
        containers.chain(p.sandboxes.iter().map(|s| (s, true)))
    })
}

/// Every event between two records of one pod, pure (`computeEvents` over
/// `getContainersFromPods(old, new)`): containers and sandboxes of the old record, then of the new
/// one, each id once. Includes ContainerChanged, which the relister filters out before sending.
/// Allocates nothing when nothing changed: it runs for every pod on every relist.
pub fn compute_events(old: Option<&RuntimePod>, new: Option<&RuntimePod>, at: SystemTime) -> Vec<PodLifecycleEvent> {
    let Some(any) = old.or(new) else {
        return Vec::new();
    };
    let named = if new.is_some_and(|p| !p.name.is_empty()) {
        new
    } else {
        old
    };
    // An id repeated within a record counts once: a linear look-back, as pods hold few containers.
    let first_in = |pod: Option<&RuntimePod>, i: usize, id: &str| !ids(pod).take(i).any(|(p, _)| p.id == id);
    let old_ids = ids(old).enumerate().filter(|(i, (c, _))| first_in(old, *i, &c.id));
    let new_ids = ids(new)
        .enumerate()
        .filter(|(i, (c, _))| old.and_then(|o| o.find_any(&c.id)).is_none() && first_in(new, *i, &c.id));
    let mut events = Vec::new();
    for (_, (container, is_sandbox)) in old_ids.chain(new_ids) {
        let kinds = generate_events(pleg_state(old, &container.id), pleg_state(new, &container.id));
        for &kind in kinds {
            let mut event = PodLifecycleEvent::new(kind, &any.id, at);
            event.container_id = Some(container.id.clone());
            event.container = non_empty(&container.name);
            event.sandbox = is_sandbox;
            set_pod_names(&mut event, named);
            events.push(event);
        }
    }
    events
}

/// Add what a fresh status says of a dead container: its exit code and reason.
fn add_exit_details(events: &mut [PodLifecycleEvent], status: Option<&RuntimePodStatus>) {
    let Some(status) = status else { return };
    for event in events
        .iter_mut()
        .filter(|e| e.kind == PodLifecycleEventType::ContainerDied)
    {
        let found = event.container_id.as_deref().and_then(|id| status.find_container(id));
        if let Some(c) = found.filter(|c| c.state == RuntimeContainerState::Exited) {
            event.exit_code = Some(c.exit_code);
            event.reason = non_empty(&c.reason);
        }
    }
}

/// Events that state the current state of every container of a pod, then a PodSync: what a
/// consumer is told when too many of the pod's events could not be delivered.
fn current_state_events(
    uid: &str,
    pod: Option<&RuntimePod>,
    status: Option<&RuntimePodStatus>,
    lost: &[PodLifecycleEvent],
    at: SystemTime,
) -> Vec<PodLifecycleEvent> {
    let mut events = Vec::new();
    let mut removed: HashSet<&str> = HashSet::new();
    for id in lost.iter().filter_map(|e| e.container_id.as_deref()) {
        if pod.and_then(|p| p.find_any(id)).is_none() && removed.insert(id) {
            let mut event = PodLifecycleEvent::new(PodLifecycleEventType::ContainerRemoved, uid, at);
            event.container_id = Some(id.to_owned());
            set_pod_names(&mut event, pod);
            events.push(event);
        }
    }
    let mut now = compute_events(None, pod, at);
    now.retain(|e| e.kind != PodLifecycleEventType::ContainerChanged);
    // From nothing, an exited container shows as died; running as started.
    add_exit_details(&mut now, status);
    events.extend(now);
    events.push(PodLifecycleEvent::pod_sync(uid, pod, at));
    events
}

/// Settings of the relister.
#[derive(Debug, Clone)]
pub struct PlegConfig {
    /// Period of the global relist while no runtime event stream is healthy.
    pub relist_period: Duration,
    /// Period of the global relist while the runtime event stream is healthy (connected).
    pub relist_period_with_triggers: Duration,
    pub relist_threshold: Duration,
    pub channel_capacity: usize,
}

impl PlegConfig {
    /// The wait before the next global relist, by whether the runtime event stream is healthy.
    pub fn period(&self, triggers_healthy: bool) -> Duration {
        if triggers_healthy {
            self.relist_period_with_triggers
        } else {
            self.relist_period
        }
    }
}

impl Default for PlegConfig {
    fn default() -> Self {
        Self {
            relist_period: DEFAULT_RELIST_PERIOD,
            relist_period_with_triggers: DEFAULT_RELIST_PERIOD_WITH_TRIGGERS,
            relist_threshold: DEFAULT_RELIST_THRESHOLD,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
        }
    }
}

/// Why the PLEG is not healthy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlegHealthError {
    #[error("pleg has yet to be successful")]
    NeverRelisted,
    #[error("pleg was last seen active {}s ago; threshold is {}s", elapsed.as_secs(), threshold.as_secs())]
    Stale { elapsed: Duration, threshold: Duration },
}

/// Old and current view of one pod (`podRecord`).
#[derive(Debug, Default, Clone)]
pub struct PodRecord {
    pub old: Option<RuntimePod>,
    pub current: Option<RuntimePod>,
}

#[derive(Debug, Default)]
struct RelistState {
    records: HashMap<PodUid, PodRecord>,
    /// Pods whose status read failed: re-inspected at the next relist.
    reinspect: HashSet<PodUid>,
    /// Events that did not fit in the channel, per pod, oldest first.
    undelivered: HashMap<PodUid, Vec<PodLifecycleEvent>>,
}

impl RelistState {
    /// `podRecords.setCurrent`.
    fn set_current(&mut self, pods: Vec<RuntimePod>) {
        for record in self.records.values_mut() {
            record.current = None;
        }
        for pod in pods {
            match self.records.get_mut(&pod.id) {
                Some(record) => record.current = Some(pod),
                None => {
                    let uid = pod.id.clone();
                    self.records.insert(
                        uid,
                        PodRecord {
                            old: None,
                            current: Some(pod),
                        },
                    );
                }
            }
        }
    }

    /// `podRecords.update`: old := current; a pod that no longer exists loses its record.
    fn advance(&mut self, uid: &str) {
        if let Some(record) = self.records.get_mut(uid) {
            match record.current.take() {
                Some(current) => record.old = Some(current),
                None => {
                    self.records.remove(uid);
                }
            }
        }
    }
}

/// What one pass over one pod did.
enum PodOutcome {
    Unchanged,
    /// The status was read; `changed` says whether any container or sandbox changed state.
    Refreshed {
        changed: bool,
    },
    RefreshFailed,
}

/// The generic relister.
pub struct GenericPleg<R, C> {
    runtime: R,
    clock: C,
    cache: Arc<PodCache>,
    metrics: Arc<Metrics>,
    config: PlegConfig,
    events: mpsc::Sender<PodLifecycleEvent>,
    /// Serialises global and single-pod relists (`relistLock`): no pod is relisted concurrently and
    /// a pod's events are never reordered.
    state: tokio::sync::Mutex<RelistState>,
    /// Start of the last successful global relist.
    relist_time: Mutex<Option<SystemTime>>,
    /// Whether the runtime event stream is connected (see [`TriggerHealth`]).
    triggers_healthy: watch::Sender<bool>,
}

/// The trigger stream's side of the relist period: a stream sets it healthy once subscribed and
/// unhealthy as soon as it fails, which ends a long wait at once (whatever it missed is relisted
/// then) and brings the relist back to its short period.
#[derive(Clone)]
pub struct TriggerHealth(watch::Sender<bool>);

impl TriggerHealth {
    pub fn set(&self, healthy: bool) {
        self.0
            .send_if_modified(|now| std::mem::replace(now, healthy) != healthy);
    }
}

impl<R: Runtime, C: Clock> GenericPleg<R, C> {
    /// A relister and the receiving end of its event channel.
    pub fn new(
        runtime: R,
        clock: C,
        cache: Arc<PodCache>,
        metrics: Arc<Metrics>,
        config: PlegConfig,
    ) -> (Self, mpsc::Receiver<PodLifecycleEvent>) {
        let (tx, rx) = mpsc::channel(config.channel_capacity.max(1));
        let pleg = Self {
            runtime,
            clock,
            cache,
            metrics,
            config,
            events: tx,
            state: Default::default(),
            relist_time: Mutex::new(None),
            triggers_healthy: watch::Sender::new(false),
        };
        (pleg, rx)
    }

    pub fn cache(&self) -> &Arc<PodCache> {
        &self.cache
    }

    pub fn config(&self) -> &PlegConfig {
        &self.config
    }

    /// The clock the relister stamps the cache with; readers of the cache compare against it.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    pub fn runtime(&self) -> &R {
        &self.runtime
    }

    /// The handle a trigger stream reports its health through.
    pub fn trigger_health(&self) -> TriggerHealth {
        TriggerHealth(self.triggers_healthy.clone())
    }

    /// Start of the last successful global relist.
    pub fn last_relist(&self) -> Option<SystemTime> {
        *self.relist_time.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Healthy()`: the last successful relist started no more than the threshold ago.
    pub fn healthy(&self) -> Result<(), PlegHealthError> {
        let last = self.last_relist().ok_or(PlegHealthError::NeverRelisted)?;
        let secs = last
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.metrics.last_seen.set(secs);
        let elapsed = clock::since(&self.clock, last);
        if elapsed > self.config.relist_threshold {
            return Err(PlegHealthError::Stale {
                elapsed,
                threshold: self.config.relist_threshold,
            });
        }
        Ok(())
    }

    /// The pod whose records (old or current) hold this container or sandbox id.
    pub async fn pod_of(&self, id: &str) -> Option<PodUid> {
        let state = self.state.lock().await;
        let has = |pod: &Option<RuntimePod>| pod.as_ref().is_some_and(|p| p.find_any(id).is_some());
        state
            .records
            .iter()
            .find(|(_, r)| has(&r.current) || has(&r.old))
            .map(|(uid, _)| uid.clone())
    }

    /// Whether the runtime's state of container (or sandbox) `id` differs from what pod `uid`'s
    /// record says, by one cheap status call. The records are not held during the call.
    pub async fn probe(&self, uid: &str, id: &str) -> Result<bool, RuntimeError> {
        let (recorded, kind) = {
            let state = self.state.lock().await;
            let record = state.records.get(uid);
            let pod = record.and_then(|r| r.current.as_ref().or(r.old.as_ref()));
            let sandbox = record
                .into_iter()
                .flat_map(|r| [r.current.as_ref(), r.old.as_ref()])
                .flatten()
                .any(|p| p.find_sandbox(id).is_some());
            (
                pleg_state(pod, id),
                if sandbox { IdKind::Sandbox } else { IdKind::Container },
            )
        };
        let actual = self.runtime.probe_state(id, kind).await?;
        Ok(actual.map_or(PlegContainerState::NonExistent, PlegContainerState::from) != recorded)
    }

    /// What pod `uid`'s record says of container or sandbox `id`.
    pub async fn recorded_state(&self, uid: &str, id: &str) -> PlegContainerState {
        let state = self.state.lock().await;
        let record = state.records.get(uid);
        pleg_state(record.and_then(|r| r.current.as_ref().or(r.old.as_ref())), id)
    }

    /// The pod that owns container or sandbox `id` in the runtime's lists, for an id no record has
    /// yet (see [`Runtime::locate`]).
    pub async fn locate(&self, id: &str) -> Result<Option<PodUid>, RuntimeError> {
        self.runtime.locate(id).await
    }

    /// Pods currently held in the records (for observation and tests).
    pub async fn record_count(&self) -> usize {
        self.state.lock().await.records.len()
    }

    /// Pods waiting for re-inspection.
    pub async fn reinspect_count(&self) -> usize {
        self.state.lock().await.reinspect.len()
    }

    /// Events waiting for room in the channel.
    pub async fn undelivered_count(&self) -> usize {
        self.state.lock().await.undelivered.values().map(Vec::len).sum()
    }

    /// One global relist (`Relist()`). On a list error nothing changes, not even the relist time.
    pub async fn relist(&self) -> Result<(), RuntimeError> {
        let mut state = self.state.lock().await;
        let start = self.clock.now();
        if let Some(last) = self.last_relist() {
            self.metrics
                .relist_interval
                .observe(start.duration_since(last).unwrap_or_default().as_secs_f64());
        }
        let result = self.relist_locked(&mut state, start).await;
        self.metrics
            .relist_duration
            .observe(clock::since(&self.clock, start).as_secs_f64());
        result
    }

    async fn relist_locked(&self, state: &mut RelistState, start: SystemTime) -> Result<(), RuntimeError> {
        let pods = self.runtime.list_pods().await?;
        *self.relist_time.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
        self.update_running_gauges(&pods);
        state.set_current(pods);

        // Only pods with something to do are visited with the state borrowed mutably; for the
        // rest (nearly all, on a quiet node) this pass allocates nothing.
        let mut uids: Vec<PodUid> = state
            .records
            .iter()
            .filter(|(uid, r)| {
                state.reinspect.contains(*uid)
                    || state.undelivered.contains_key(*uid)
                    || (r.old.is_none() && r.current.is_none())
                    || !compute_events(r.old.as_ref(), r.current.as_ref(), start).is_empty()
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        uids.extend(
            state
                .undelivered
                .keys()
                .filter(|u| !state.records.contains_key(*u))
                .cloned(),
        );
        let mut needs_reinspection = HashSet::new();
        for uid in uids {
            if let PodOutcome::RefreshFailed = self.sync_record(state, &uid, start).await {
                needs_reinspection.insert(uid);
            }
        }
        // After every pod's entry is up to date: the whole cache is as fresh as `start`.
        self.cache.update_time(start);
        state.reinspect = needs_reinspection;
        Ok(())
    }

    /// Relist one pod by uid: what a runtime trigger asks for. It does not move the global relist
    /// time or the cache's global timestamp: only a complete relist can say every pod is fresh.
    ///
    /// Returns whether any of the pod's containers or sandboxes changed state (an event was
    /// computed, sent or not); a pod whose status read failed counts as changed, since it will be
    /// re-inspected by the next relist anyway.
    pub async fn relist_pod(&self, uid: &str) -> Result<bool, RuntimeError> {
        let mut state = self.state.lock().await;
        let start = self.clock.now();
        let pod = self.runtime.list_pod(uid).await?;
        state.records.entry(uid.to_owned()).or_default().current = pod;
        Ok(match self.sync_record(&mut state, uid, start).await {
            PodOutcome::RefreshFailed => {
                state.reinspect.insert(uid.to_owned());
                true
            }
            PodOutcome::Refreshed { changed } => {
                state.reinspect.remove(uid);
                changed
            }
            PodOutcome::Unchanged => false,
        })
    }

    /// Compare, refresh, advance and send for one pod (the body of the relist loop).
    async fn sync_record(&self, state: &mut RelistState, uid: &str, start: SystemTime) -> PodOutcome {
        let record = state.records.get(uid);
        let old = record.and_then(|r| r.old.as_ref());
        let current = record.and_then(|r| r.current.as_ref());
        let mut events = compute_events(old, current, start);
        let changed = !events.is_empty();
        let reinspect = state.reinspect.contains(uid);
        let has_undelivered = state.undelivered.contains_key(uid);
        if events.is_empty() && !reinspect && !has_undelivered {
            if old.is_none() && current.is_none() {
                state.records.remove(uid);
            }
            return PodOutcome::Unchanged;
        }
        // Only a pod that changed pays for a copy of its record.
        let current = current.cloned();
        let current = current.as_ref();

        let status = match self.update_cache(uid, current).await {
            Ok(status) => status,
            Err(error) => {
                self.metrics.pod_status_refresh_errors.inc();
                warn!(pod = %uid, error = %error, "pod status read failed; events withheld until the pod is re-inspected");
                return PodOutcome::RefreshFailed;
            }
        };

        state.advance(uid);
        events.retain(|e| e.kind != PodLifecycleEventType::ContainerChanged);
        // A successful re-inspection with nothing else to say still asks for a sync of the pod.
        if reinspect && events.is_empty() {
            events.push(PodLifecycleEvent::pod_sync(uid, current, start));
        }
        add_exit_details(&mut events, status.as_ref());
        for event in &events {
            debug!(pod = %uid, container = event.container_id.as_deref().unwrap_or(""), event = event.kind.as_str(), "lifecycle event");
        }
        let mut queue = state.undelivered.remove(uid).unwrap_or_default();
        queue.extend(events);
        if let Some(left) = self.send_all(queue) {
            let left = if left.len() > MAX_UNDELIVERED_PER_POD {
                let folded = current_state_events(uid, current, status.as_ref(), &left, start);
                // Fold only when it shrinks the queue: a big pod's own state may be longer.
                if folded.len() < left.len() {
                    warn!(pod = %uid, undelivered = left.len(), sent_instead = folded.len(), "too many undelivered events; the pod's current state will be sent instead");
                    folded
                } else {
                    left
                }
            } else {
                left
            };
            state.undelivered.insert(uid.to_owned(), left);
        }
        PodOutcome::Refreshed { changed }
    }

    /// Send without blocking, in order. Returns the events that did not fit, if any.
    fn send_all(&self, queue: Vec<PodLifecycleEvent>) -> Option<Vec<PodLifecycleEvent>> {
        let mut iter = queue.into_iter();
        while let Some(event) = iter.next() {
            let kind = event.kind;
            match self.events.try_send(event) {
                Ok(()) => {
                    self.metrics
                        .events_sent
                        .get_or_create(&KindLabel {
                            kind: kind.as_str().to_owned(),
                        })
                        .inc();
                }
                Err(TrySendError::Full(event)) => {
                    let mut left = vec![event];
                    left.extend(iter);
                    self.metrics.discard_events.inc_by(left.len() as u64);
                    warn!(pod = %left[0].pod_uid, kept = left.len(), "event channel is full; events kept for the pod's next relist");
                    return Some(left);
                }
                // Nobody listens any more: the process is shutting down.
                Err(TrySendError::Closed(_)) => return None,
            }
        }
        None
    }

    /// `updateCache`: read the pod's status into the cache; a pod that is gone loses its entry.
    async fn update_cache(
        &self,
        uid: &str,
        pod: Option<&RuntimePod>,
    ) -> Result<Option<RuntimePodStatus>, RuntimeError> {
        let Some(pod) = pod else {
            self.cache.delete(uid);
            return Ok(None);
        };
        // Taken before the read: the status is at least this fresh.
        let timestamp = self.clock.now();
        match self.runtime.pod_status(pod).await {
            Ok(mut status) => {
                status.ips = preserve_ips(&self.cache.get(uid).status, &status);
                self.cache.set(uid, Ok(status.clone()), timestamp);
                Ok(Some(status))
            }
            Err(error) => {
                self.cache.set(uid, Err(error.to_string()), timestamp);
                Err(error)
            }
        }
    }

    fn update_running_gauges(&self, pods: &[RuntimePod]) {
        let running_pods = pods
            .iter()
            .filter(|p| p.sandboxes.iter().any(|s| s.state == RuntimeContainerState::Running))
            .count();
        self.metrics.running_pods.set(running_pods as i64);
        let mut by_state: HashMap<RuntimeContainerState, i64> = HashMap::new();
        for c in pods.iter().flat_map(|p| &p.containers) {
            *by_state.entry(c.state).or_default() += 1;
        }
        for state in [
            RuntimeContainerState::Created,
            RuntimeContainerState::Running,
            RuntimeContainerState::Exited,
            RuntimeContainerState::Unknown,
        ] {
            let label = StateLabel {
                container_state: state.as_str().to_owned(),
            };
            self.metrics
                .running_containers
                .get_or_create(&label)
                .set(by_state.get(&state).copied().unwrap_or(0));
        }
    }

    /// Relist every period until the task is dropped: `relist_period`, or
    /// `relist_period_with_triggers` once a relist has succeeded with the event stream healthy all
    /// along (whatever happened before the stream subscribed, an outage included, is then known); a
    /// stream that fails during the long wait ends it at once. A failed relist is logged (once per
    /// outage, then at debug) and retried at the next period; the health check reports it.
    pub async fn run(self: Arc<Self>) {
        let mut failing = false;
        let mut health = self.triggers_healthy.subscribe();
        let mut was_stretched = false;
        loop {
            let healthy_before = *health.borrow_and_update();
            let relisted = self.relist().await;
            match &relisted {
                Ok(()) if failing => {
                    info!("relist succeeded again");
                    failing = false;
                }
                Ok(()) => {}
                Err(error) if !failing => {
                    warn!(error = %error, "relist failed; retrying every period");
                    failing = true;
                }
                Err(error) => debug!(error = %error, "relist failed again"),
            }
            // A change since the snapshot is a transition (TriggerHealth sends only changes).
            let stretched = relisted.is_ok() && healthy_before && !health.has_changed().unwrap_or(true);
            let period = self.config.period(stretched);
            if stretched != was_stretched {
                info!(period = ?period, triggers_healthy = stretched, "periodic relist period");
                was_stretched = stretched;
            }
            if !stretched {
                tokio::time::sleep(period).await;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                // Only an error can end the wait (the sender lives in self): no busy loop.
                _ = health.wait_for(|healthy| !healthy) => {}
            }
        }
    }
}

/// `getPodIPs`: keep the previous IPs when the new status has none and no sandbox is ready, so
/// that a dead pod keeps its IP.
pub fn preserve_ips(old: &RuntimePodStatus, new: &RuntimePodStatus) -> Vec<String> {
    use crate::kubecontainer::SandboxState;
    if !new.ips.is_empty() || old.ips.is_empty() {
        return new.ips.clone();
    }
    if new.sandbox_statuses.iter().any(|s| s.state == SandboxState::Ready) {
        return new.ips.clone();
    }
    old.ips.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::RuntimeContainer;
    use PlegContainerState as S;
    use PodLifecycleEventType as E;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    #[test]
    fn every_state_pair() {
        let states = [S::Running, S::Exited, S::Unknown, S::NonExistent];
        let expect = |old: S, new: S| -> Vec<E> {
            match (old, new) {
                (a, b) if a == b => vec![],
                (_, S::Running) => vec![E::ContainerStarted],
                (_, S::Exited) => vec![E::ContainerDied],
                (_, S::Unknown) => vec![E::ContainerChanged],
                (S::Exited, S::NonExistent) => vec![E::ContainerRemoved],
                (_, S::NonExistent) => vec![E::ContainerDied, E::ContainerRemoved],
            }
        };
        let mut pairs = 0;
        for old in states {
            for new in states {
                assert_eq!(
                    generate_events(old, new).to_vec(),
                    expect(old, new),
                    "{old:?} -> {new:?}"
                );
                pairs += 1;
            }
        }
        assert_eq!(pairs, 16);
        // Spelled out, the ones that matter most:
        assert_eq!(
            generate_events(S::Running, S::NonExistent),
            [E::ContainerDied, E::ContainerRemoved]
        );
        assert_eq!(
            generate_events(S::Unknown, S::NonExistent),
            [E::ContainerDied, E::ContainerRemoved]
        );
        assert_eq!(generate_events(S::NonExistent, S::Exited), [E::ContainerDied]);
    }

    #[test]
    fn created_maps_to_unknown() {
        assert_eq!(S::from(RuntimeContainerState::Created), S::Unknown);
        assert_eq!(S::from(RuntimeContainerState::Unknown), S::Unknown);
        assert_eq!(S::from(RuntimeContainerState::Running), S::Running);
        assert_eq!(S::from(RuntimeContainerState::Exited), S::Exited);
    }

    fn c(id: &str, name: &str, state: RuntimeContainerState) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            sandbox_id: String::new(),
            name: name.into(),
            state,
            created_at: 0,
            attempt: 0,
        }
    }

    fn pod(containers: Vec<RuntimeContainer>, sandboxes: Vec<RuntimeContainer>) -> RuntimePod {
        RuntimePod {
            id: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            containers,
            sandboxes,
        }
    }

    fn kinds(events: &[PodLifecycleEvent]) -> Vec<(E, &str)> {
        events
            .iter()
            .map(|e| (e.kind, e.container_id.as_deref().unwrap_or("")))
            .collect()
    }

    #[test]
    fn first_relist_of_a_running_pod() {
        use RuntimeContainerState::*;
        let new = pod(
            vec![c("c1", "app", Running), c("c2", "init", Exited)],
            vec![c("s1", "", Running)],
        );
        let events = compute_events(None, Some(&new), T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerStarted, "c1"),
                (E::ContainerDied, "c2"),
                (E::ContainerStarted, "s1")
            ]
        );
        assert_eq!(events[0].container.as_deref(), Some("app"));
        assert_eq!(events[0].namespace.as_deref(), Some("default"));
        assert_eq!(events[0].pod.as_deref(), Some("web"));
        assert!(events[2].sandbox);
        assert!(!events[0].sandbox);
    }

    #[test]
    fn no_change_no_events() {
        use RuntimeContainerState::*;
        let p = pod(vec![c("c1", "app", Running)], vec![c("s1", "", Running)]);
        assert!(compute_events(Some(&p), Some(&p), T0).is_empty());
    }

    #[test]
    fn pod_disappearing_reports_every_container() {
        use RuntimeContainerState::*;
        let old = pod(
            vec![c("c1", "app", Running), c("c2", "done", Exited)],
            vec![c("s1", "", Exited)],
        );
        let events = compute_events(Some(&old), None, T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerDied, "c1"),
                (E::ContainerRemoved, "c1"),
                (E::ContainerRemoved, "c2"),
                (E::ContainerRemoved, "s1")
            ]
        );
        // Names come from the old record when the pod is gone.
        assert_eq!(events[0].pod.as_deref(), Some("web"));
    }

    #[test]
    fn created_container_is_changed_only() {
        use RuntimeContainerState::*;
        let old = pod(vec![], vec![c("s1", "", Running)]);
        let new = pod(vec![c("c1", "app", Created)], vec![c("s1", "", Running)]);
        assert_eq!(
            kinds(&compute_events(Some(&old), Some(&new), T0)),
            [(E::ContainerChanged, "c1")]
        );
    }

    #[test]
    fn preserve_ips_rules() {
        use crate::kubecontainer::{SandboxState, SandboxStatus};
        let sandbox = |state| SandboxStatus {
            id: "s".into(),
            state,
            created_at: 0,
            attempt: 0,
            ips: vec![],
            host_network: false,
        };
        let old = RuntimePodStatus {
            ips: vec!["10.0.0.5".into()],
            ..Default::default()
        };
        let dead = RuntimePodStatus {
            sandbox_statuses: vec![sandbox(SandboxState::NotReady)],
            ..Default::default()
        };
        assert_eq!(preserve_ips(&old, &dead), ["10.0.0.5"]);
        let ready_without_ip = RuntimePodStatus {
            sandbox_statuses: vec![sandbox(SandboxState::Ready)],
            ..Default::default()
        };
        assert!(preserve_ips(&old, &ready_without_ip).is_empty());
        let fresh = RuntimePodStatus {
            ips: vec!["10.0.0.6".into()],
            ..Default::default()
        };
        assert_eq!(preserve_ips(&old, &fresh), ["10.0.0.6"]);
    }

    #[test]
    fn current_state_events_for_a_lost_queue() {
        use RuntimeContainerState::*;
        let now = pod(vec![c("c2", "app", Exited)], vec![c("s1", "", Running)]);
        let lost = vec![
            PodLifecycleEvent {
                container_id: Some("c1".into()),
                ..PodLifecycleEvent::new(E::ContainerStarted, "u1", T0)
            },
            PodLifecycleEvent {
                container_id: Some("c2".into()),
                ..PodLifecycleEvent::new(E::ContainerStarted, "u1", T0)
            },
        ];
        let events = current_state_events("u1", Some(&now), None, &lost, T0);
        assert_eq!(
            kinds(&events),
            [
                (E::ContainerRemoved, "c1"),
                (E::ContainerDied, "c2"),
                (E::ContainerStarted, "s1"),
                (E::PodSync, "")
            ]
        );
    }

    #[test]
    fn json_shape() {
        let mut event = PodLifecycleEvent::new(
            E::ContainerDied,
            "u1",
            SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
        );
        event.container_id = Some("abc".into());
        event.exit_code = Some(3);
        event.reason = Some("Error".into());
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], "ContainerDied");
        assert_eq!(json["pod_uid"], "u1");
        assert_eq!(json["container_id"], "abc");
        assert_eq!(json["exit_code"], 3);
        assert_eq!(json["reason"], "Error");
        assert_eq!(json["timestamp"], "1970-01-01T00:00:01.500Z");
        assert!(json.get("sandbox").is_none());
        let sync = serde_json::to_value(PodLifecycleEvent::pod_sync("u1", None, T0)).unwrap();
        assert_eq!(sync["container_id"], serde_json::Value::Null);
    }
}
