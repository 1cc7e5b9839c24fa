//! The PLEG stage: the generic relister with the kubelet's semantics (`pkg/kubelet/pleg/generic.go`).
//!
//! Each relist lists every sandbox and container, sets them as the *current* pod records, and
//! compares them with the *old* records through the pure [`compute_events`] (in `events.rs`, with
//! the event types). For every pod with a
//! change it reads the pod's full status into the status cache (`cache`, whose writing half it alone
//! holds; readers get a [`PlegHandle`]), advances the record and sends the
//! events on a bounded channel. A pod whose status cannot be read is re-inspected at the next relist
//! with its record NOT advanced, so the same events are computed again then. This stage never takes
//! state from anything but the runtime's answers (a relist's lists, or the status call of a probe
//! whose id a record holds: [`GenericPleg::relist_probed`]), and never blocks on the channel.
//!
//! Where plegd differs from the kubelet: when the channel is full the kubelet drops the event for
//! good; plegd counts the discard AND keeps the pod's undelivered events, which the pod's next relist
//! sends again, in order, before any newer event (see [`MAX_UNDELIVERED_PER_POD`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::kubecontainer::cache::CacheWriter;
use crate::kubecontainer::{PodUid, RuntimeContainerState, RuntimePod, RuntimePodStatus};
use crate::metrics::{KindLabel, Metrics, StateLabel};
use crate::runtime::exits::{ExitFact, PendingExit};
use crate::runtime::{IdKind, Runtime, RuntimeError};
use crate::util::clock::{self, Clock};

mod config;
mod events;
mod exits;
mod fan_out;
mod handle;
mod records;
pub use config::{
    DEFAULT_CHANNEL_CAPACITY, DEFAULT_RELIST_PERIOD, DEFAULT_RELIST_PERIOD_WITH_TRIGGERS, DEFAULT_RELIST_THRESHOLD,
    InvalidPlegConfig, PlegConfig,
};
pub use events::{
    MAX_EVENT_MESSAGE, PlegContainerState, PodLifecycleEvent, PodLifecycleEventType, bounded, compute_events,
    generate_events,
};
use events::{add_exit_details, current_state_events, pleg_state};
pub use exits::{EXIT_HELD_FOR, Settled};
pub use fan_out::{EventHub, SUBSCRIBER_BUFFER, fan_out};
pub use handle::PlegHandle;
use handle::RelistHealth;
pub use records::PodRecord;
use records::{PodOutcome, RelistState, record_holds_sandbox};

/// Undelivered events kept per pod. Past this the pod's queue is replaced by events that state
/// each of its containers' current state, followed by a PodSync, when that is shorter: a consumer
/// may then miss an intermediate transition of a container, never the final state of one.
pub const MAX_UNDELIVERED_PER_POD: usize = 128;

/// Why the PLEG is not healthy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlegHealthError {
    #[error("pleg has yet to be successful")]
    NeverRelisted,
    #[error("pleg was last seen active {}s ago; threshold is {}s", elapsed.as_secs(), threshold.as_secs())]
    Stale { elapsed: Duration, threshold: Duration },
}

/// A check's hold on one pod ([`GenericPleg::pod_turn`]): complete relists and exits taken wait
/// for it (its share of the gate), and so does every other check of the same pod (its pod's own
/// lock); checks of other pods do not. Nothing but its holder changes the pod's record while it
/// reads the runtime with the records unlocked.
struct PodTurn<'a> {
    _pod: tokio::sync::OwnedMutexGuard<()>,
    _shared: tokio::sync::RwLockReadGuard<'a, ()>,
}

/// What a pod's sync needs from its records, taken before its status is read.
struct SyncWork {
    /// The pod as the relist found it (None: gone).
    current: Option<RuntimePod>,
    events: Vec<PodLifecycleEvent>,
    /// It was marked for re-inspection (its last status read failed).
    reinspect: bool,
    /// The exits held for its containers, read against their CRI status by the status read.
    exits: Vec<PendingExit>,
}

/// What [`GenericPleg::probe`] found of one id: its state in the runtime (None: gone), which
/// differs from the records', the runtime's answer, the setting of the records it was compared
/// with, and when the probe began (the time of the events it brings).
#[derive(Debug)]
pub struct Probed<A> {
    id: String,
    state: Option<RuntimeContainerState>,
    answer: Option<A>,
    read: u64,
    start: SystemTime,
}

/// What a probe read of one id, for the status read of its pod: the runtime's answer (None: the
/// id is gone), and when the probe began.
struct Known<'a, A> {
    id: &'a str,
    answer: Option<A>,
    read_at: SystemTime,
}

/// `pod` with container or sandbox `id` in runtime state `state` (None: removed). False, with
/// `pod` unchanged, when the pod has no such id (pure).
fn with_probed_state(pod: &mut RuntimePod, id: &str, state: Option<RuntimeContainerState>) -> bool {
    for list in [&mut pod.containers, &mut pod.sandboxes] {
        if let Some(at) = list.iter().position(|c| c.id == id) {
            match state {
                Some(state) => list[at].state = state,
                None => {
                    list.remove(at);
                }
            }
            return true;
        }
    }
    false
}

/// Status reads a relist runs side by side (of the pods it found changed).
const STATUS_READS_AT_ONCE: usize = 16;

/// What became of an exit fact ([`GenericPleg::containers_exited`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitTaken {
    /// Shown at once, ahead of the CRI state, and held until the CRI shows it.
    Shown,
    /// The CRI state showed it already when the pod's status was read: taken from the CRI.
    RuntimeFirst,
    /// The records say the container exited already (a relist read it first), or was removed.
    Recorded,
    /// No record holds that id (a container not listed yet): left to the CRI state.
    NotRecorded,
    /// A sandbox's: its end is its network torn down, which only the CRI state shows.
    Sandbox,
}

impl ExitTaken {
    pub const ALL: [ExitTaken; 5] = [
        ExitTaken::Shown,
        ExitTaken::RuntimeFirst,
        ExitTaken::Recorded,
        ExitTaken::NotRecorded,
        ExitTaken::Sandbox,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExitTaken::Shown => "shown",
            ExitTaken::RuntimeFirst => "runtime_first",
            ExitTaken::Recorded => "recorded",
            ExitTaken::NotRecorded => "not_recorded",
            ExitTaken::Sandbox => "sandbox",
        }
    }
}

/// The generic relister.
pub struct GenericPleg<R, C> {
    runtime: R,
    clock: Arc<C>,
    /// The status cache's writing half: the relister is its only writer.
    cache: CacheWriter,
    /// Health and stamps, shared with the handles.
    health: Arc<RelistHealth>,
    metrics: Arc<Metrics>,
    config: PlegConfig,
    events: mpsc::Sender<PodLifecycleEvent>,
    /// The records. Held for a complete relist from its lists to its last event, and by a check of
    /// one pod only to compute and to send, not while it reads the runtime (see [`PodTurn`]).
    state: tokio::sync::Mutex<RelistState>,
    /// `relistLock`, split: what reads or writes every record (a complete relist, exits taken)
    /// holds it exclusively; a check of one pod shares it, and holds its pod's own lock besides, so
    /// that no pod is relisted by two at once and a pod's events are never reordered, while checks
    /// of different pods read the runtime side by side.
    gate: tokio::sync::RwLock<()>,
    /// The lock of each pod a check holds or waits for (entries no one holds are dropped as new
    /// ones come).
    pod_locks: Mutex<HashMap<PodUid, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether the runtime event stream is connected (see [`TriggerHealth`]).
    triggers_healthy: watch::Sender<bool>,
    trigger_source: Arc<Mutex<Option<&'static str>>>,
}

/// What a runtime event stream (`--triggers`) is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// No stream: `--triggers none`, or the runtime has none of the kind asked for.
    Off,
    /// Subscribing for the first time.
    Connecting,
    /// Subscribed: the relist runs at its long period.
    Connected,
    /// The stream failed or ended; it is retried with backoff and the relist runs at its short
    /// period meanwhile.
    Reconnecting,
    /// The runtime ends the stream as soon as it opens (CRI-O without pod events): it has no
    /// usable events. Retried with backoff; the relist runs at its short period.
    Unusable,
}

impl StreamState {
    pub const ALL: [StreamState; 5] = [
        StreamState::Off,
        StreamState::Connecting,
        StreamState::Connected,
        StreamState::Reconnecting,
        StreamState::Unusable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StreamState::Off => "off",
            StreamState::Connecting => "connecting",
            StreamState::Connected => "connected",
            StreamState::Reconnecting => "reconnecting",
            StreamState::Unusable => "unusable",
        }
    }
}

/// The trigger stream's side of the relist period: a stream sets it healthy once subscribed and
/// unhealthy as soon as it fails, which ends a long wait at once (whatever it missed is relisted
/// then) and brings the relist back to its short period.
#[derive(Clone)]
pub struct TriggerHealth {
    healthy: watch::Sender<bool>,
    state: Arc<Mutex<StreamState>>,
    source: Arc<Mutex<Option<&'static str>>>,
}

impl TriggerHealth {
    pub fn set(&self, healthy: bool) {
        self.healthy
            .send_if_modified(|now| std::mem::replace(now, healthy) != healthy);
    }

    /// Say what the stream is doing (health and metrics read it).
    pub fn set_state(&self, state: StreamState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// Name the stream's source (`plegd_trigger_missed_changes_total{source}`).
    pub fn set_source(&self, source: &'static str) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = Some(source);
    }
}

impl<R: Runtime, C: Clock> GenericPleg<R, C> {
    /// A relister and the receiving end of its event channel.
    pub fn new(
        runtime: R,
        clock: C,
        metrics: Arc<Metrics>,
        config: PlegConfig,
    ) -> (Self, mpsc::Receiver<PodLifecycleEvent>) {
        let (tx, rx) = mpsc::channel(config.channel_capacity().get());
        metrics.relist_threshold.set(config.relist_threshold().as_secs_f64());
        let clock = Arc::new(clock);
        let health = RelistHealth::new(clock.clone(), metrics.clone(), config.relist_threshold());
        let pleg = Self {
            runtime,
            clock,
            cache: CacheWriter::new(),
            health: Arc::new(health),
            metrics,
            config,
            events: tx,
            state: Default::default(),
            gate: Default::default(),
            pod_locks: Default::default(),
            triggers_healthy: watch::Sender::new(false),
            trigger_source: Arc::new(Mutex::new(None)),
        };
        (pleg, rx)
    }

    /// The status cache, to read.
    pub fn cache(&self) -> &crate::kubecontainer::cache::CacheReader {
        self.cache.reader()
    }

    /// A reader's handle: the status cache, health and stamps, without the runtime.
    pub fn handle(&self) -> PlegHandle {
        PlegHandle {
            cache: self.cache.reader().clone(),
            health: self.health.clone(),
        }
    }

    pub fn config(&self) -> &PlegConfig {
        &self.config
    }

    /// See [`PlegHandle::stamp`].
    pub fn stamp(&self) -> SystemTime {
        self.health.stamp()
    }

    pub fn runtime(&self) -> &R {
        &self.runtime
    }

    /// The handle a trigger stream reports its health through.
    pub fn trigger_health(&self) -> TriggerHealth {
        TriggerHealth {
            healthy: self.triggers_healthy.clone(),
            state: self.health.trigger_state.clone(),
            source: self.trigger_source.clone(),
        }
    }

    /// What the runtime event stream is doing.
    pub fn trigger_state(&self) -> StreamState {
        self.health.trigger_state()
    }

    /// Start of the last successful global relist.
    pub fn last_relist(&self) -> Option<SystemTime> {
        self.health.last_relist()
    }

    /// See [`PlegHandle::healthy`].
    pub fn healthy(&self) -> Result<(), PlegHealthError> {
        self.health.healthy()
    }

    /// The pod whose records (old or current) hold this container or sandbox id.
    pub async fn pod_of(&self, id: &str) -> Option<PodUid> {
        self.state.lock().await.owner_of(id).cloned()
    }

    /// The runtime's state of container (or sandbox) `id` when it differs from what pod `uid`'s
    /// record says, by one cheap status call (None: no change). The records are not held during
    /// the call; [`Self::relist_probed`] reads a change found into the record.
    pub async fn probe(&self, uid: &str, id: &str) -> Result<Option<Probed<R::Answer>>, RuntimeError> {
        let (start, (recorded, read), kind, held) = {
            let state = self.state.lock().await;
            let kind = if record_holds_sandbox(state.records.get(uid), id) {
                IdKind::Sandbox
            } else {
                IdKind::Container
            };
            (self.stamp(), state.recorded(uid, id), kind, state.exits.holds(id))
        };
        let (state, answer) = self.runtime.probe_state(id, kind).await?.unzip();
        let now = state.map_or(PlegContainerState::NonExistent, PlegContainerState::from);
        // While an exit is held, a CRI that still says the container runs only lags; one that shows
        // the exit (or the container gone) is a change to read, though the records say exited
        // already: its status read settles the exit.
        let changed = if held {
            matches!(now, PlegContainerState::Exited | PlegContainerState::NonExistent)
        } else {
            now != recorded
        };
        Ok(changed.then(|| Probed {
            id: id.to_owned(),
            state,
            answer,
            read,
            start,
        }))
    }

    /// A probe's change read into pod `uid`'s record as a relist of the pod would read it, without
    /// its two lists: the record's last view of the pod with the probed id's state replaced (the
    /// id dropped when the runtime no longer has it), then compared, the pod's status read (the
    /// probed id's from the probe's answer; the cache entry as fresh as the probe, not more) and
    /// its events sent as [`Self::relist_pod`] does. An id's listed entry changes only in its
    /// state, and every other id of the pod is probed on its own events, so the lists would add
    /// nothing for it. Returns whether an event was computed, as `relist_pod` does; None, with
    /// nothing done, when the record was set again since the probe compared it (a relist ran
    /// meanwhile) or does not hold the id: the caller relists the pod instead.
    pub async fn relist_probed(&self, uid: &str, probed: Probed<R::Answer>) -> Option<bool> {
        let turn = self.pod_turn(uid).await;
        {
            let mut state = self.state.lock().await;
            let record = state.records.get(uid).filter(|r| r.read == probed.read)?;
            let mut pod = record.current.as_ref().or(record.old.as_ref())?.clone();
            if !with_probed_state(&mut pod, &probed.id, probed.state) {
                return None;
            }
            if probed.state.is_none_or(|s| s == RuntimeContainerState::Exited) {
                state.exits.shown(&probed.id);
            }
            let mut pod = (!pod.containers.is_empty() || !pod.sandboxes.is_empty()).then_some(pod);
            let let_go = state.exits.hold(uid, pod.as_mut(), probed.start, false);
            self.count_settled(&let_go);
            state.set_current_of(uid, pod);
        }
        let known = Known {
            id: &probed.id,
            answer: probed.answer,
            read_at: probed.start,
        };
        Some(self.sync_record(&turn, uid, probed.start, Some(known)).await)
    }

    /// A check's turn at pod `uid` (see [`PodTurn`]).
    async fn pod_turn(&self, uid: &str) -> PodTurn<'_> {
        let shared = self.gate.read().await;
        let lock = {
            let mut locks = self.pod_locks.lock().unwrap_or_else(|e| e.into_inner());
            if !locks.contains_key(uid) {
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            locks.entry(uid.to_owned()).or_default().clone()
        };
        PodTurn {
            _pod: lock.lock_owned().await,
            _shared: shared,
        }
    }

    /// Whether pod `uid`'s record (old or current) holds `id` as a sandbox.
    pub async fn holds_sandbox(&self, uid: &str, id: &str) -> bool {
        record_holds_sandbox(self.state.lock().await.records.get(uid), id)
    }

    /// What pod `uid`'s record says of container or sandbox `id`.
    pub async fn recorded_state(&self, uid: &str, id: &str) -> PlegContainerState {
        self.state.lock().await.recorded(uid, id).0
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
        self.relist_counting(None).await
    }

    /// A periodic relist (what [`run`](Self::run) does every period): while a trigger stream is
    /// connected, every change it finds is one the stream did not announce (or had not yet
    /// brought in), counted for that stream's source.
    pub async fn periodic_relist(&self) -> Result<(), RuntimeError> {
        let connected = *self.triggers_healthy.borrow();
        let source = *self.trigger_source.lock().unwrap_or_else(|e| e.into_inner());
        self.relist_counting(source.filter(|_| connected)).await
    }

    async fn relist_counting(&self, missed_by: Option<&'static str>) -> Result<(), RuntimeError> {
        let _every_pod = self.gate.write().await;
        let mut state = self.state.lock().await;
        let start = self.stamp();
        if let Some(last) = self.last_relist() {
            self.metrics
                .relist_interval
                .observe(start.duration_since(last).unwrap_or_default().as_secs_f64());
        }
        let result = self.relist_locked(&mut state, start, missed_by).await;
        self.metrics
            .relist_duration
            .observe(clock::since(&*self.clock, start).as_secs_f64());
        result
    }

    async fn relist_locked(
        &self,
        state: &mut RelistState,
        start: SystemTime,
        missed_by: Option<&'static str>,
    ) -> Result<(), RuntimeError> {
        let started = std::time::Instant::now();
        let mut pods = self.runtime.list_pods().await?;
        let listed = started.elapsed();
        self.health.relisted(start, started);
        self.metrics.last_seen.set(
            start
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
        );
        let let_go = state.exits.hold_all(&mut pods, start);
        self.count_settled(&let_go);
        // Counted as the records will hold them: a held exit is no running container.
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
                    || state.exits.to_settle(uid)
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
        let needs_reinspection = self.sync_pods(state, uids, start, missed_by, false).await;
        debug!(
            list_ms = listed.as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "relist"
        );
        // From now on a container seen exited exited while plegd looked.
        self.health.first_relist_done(start);
        self.metrics.drop_departed_exit_series(start);
        // After every pod's entry is up to date: the whole cache is as fresh as `start`.
        self.cache.update_time(start);
        state.reinspect = needs_reinspection;
        state.prune_owners();
        Ok(())
    }

    /// [`Self::sync_record`] for each of `uids`, their status reads side by side (a burst of exits
    /// changes many pods in one relist; read one after the other, the last pod's events waited for
    /// every read before it); each pod's events go out as soon as its own read is done. With
    /// `exits_taken` (exits just taken), a pod whose last read still holds gets its exits written
    /// into it instead of a read. Returns the pods whose read failed.
    async fn sync_pods(
        &self,
        state: &mut RelistState,
        uids: Vec<PodUid>,
        start: SystemTime,
        missed_by: Option<&'static str>,
        exits_taken: bool,
    ) -> HashSet<PodUid> {
        let mut failed = HashSet::new();
        let mut reads = futures_util::stream::FuturesUnordered::new();
        let prepared: Vec<(SyncWork, PodUid, Option<RuntimePodStatus>)> = uids
            .into_iter()
            .filter_map(|uid| {
                let work = self.prepare_sync(state, &uid, start)?;
                let last = exits_taken.then(|| self.last_status_for(state, &uid, &work)).flatten();
                Some((work, uid, last))
            })
            .collect();
        let mut waiting = prepared.into_iter();
        loop {
            while reads.len() < STATUS_READS_AT_ONCE {
                let Some((mut work, uid, last)) = waiting.next() else {
                    break;
                };
                reads.push(async move {
                    let status = match last {
                        Some(last) => Ok(Some(self.exits_into_last(&uid, last, &mut work.exits).await)),
                        None => {
                            self.update_cache(&uid, work.current.as_ref(), None, &mut work.exits)
                                .await
                        }
                    };
                    (uid, work, status)
                });
            }
            let Some((uid, work, status)) = futures_util::StreamExt::next(&mut reads).await else {
                break;
            };
            match self.finish_sync(state, &uid, work, status, start, missed_by) {
                PodOutcome::RefreshFailed => {
                    failed.insert(uid);
                }
                outcome => {
                    state.pod_relisted(&uid, outcome);
                }
            }
        }
        self.metrics.exits_held.set(state.exits.len() as i64);
        failed
    }

    /// Relist one pod by uid: what a runtime trigger asks for. It does not move the global relist
    /// time or the cache's global timestamp: only a complete relist can say every pod is fresh.
    ///
    /// Returns whether any of the pod's containers or sandboxes changed state (an event was
    /// computed, sent or not); a pod whose status read failed counts as changed, since it will be
    /// re-inspected by the next relist anyway.
    pub async fn relist_pod(&self, uid: &str) -> Result<bool, RuntimeError> {
        let turn = self.pod_turn(uid).await;
        let start = self.stamp();
        let mut pod = self.runtime.list_pod(uid).await?;
        {
            let mut state = self.state.lock().await;
            let let_go = state.exits.hold(uid, pod.as_mut(), start, true);
            self.count_settled(&let_go);
            state.set_current_of(uid, pod);
        }
        Ok(self.sync_record(&turn, uid, start, None).await)
    }

    /// Exits the runtime announced (containerd's `/tasks/exit` of a container's init process:
    /// `runtime::exits`), taken at once: each container a record holds as created, running or
    /// unknown is exited in its pod's record, and its pod's status written with the exit in the
    /// container's status, so that the ContainerDied event and the status carry it before the CRI
    /// state shows it. The status is the pod's last status read with the exits written into it,
    /// while that read shows what the records hold (`exits::last_status_holds`); else it is read
    /// (side by side for the pods), each exit written into a CRI status that does not show it yet.
    /// The exit is held until a status read shows it (see `exits.rs`); the CRI's values win where
    /// they differ. Returns what became of each fact, in order.
    pub async fn containers_exited(&self, facts: Vec<ExitFact>) -> Vec<(String, ExitTaken)> {
        let _every_pod = self.gate.write().await;
        let mut state = self.state.lock().await;
        let start = self.stamp();
        let mut taken = Vec::with_capacity(facts.len());
        let mut uids: Vec<PodUid> = Vec::new();
        for fact in facts {
            let id = fact.id.clone();
            let Some(uid) = state.owner_of(&id).cloned() else {
                taken.push((id, ExitTaken::NotRecorded));
                continue;
            };
            let record = state.records.get(&uid);
            let pod = record.and_then(|r| r.current.as_ref().or(r.old.as_ref()));
            let Some(pod) = pod.filter(|p| p.find_container(&id).is_some()).cloned() else {
                // A sandbox: its end is its network torn down, which only the CRI state shows.
                taken.push((id, ExitTaken::Sandbox));
                continue;
            };
            if !matches!(
                pleg_state(Some(&pod), &id),
                PlegContainerState::Running | PlegContainerState::Unknown
            ) {
                taken.push((id, ExitTaken::Recorded));
                continue;
            }
            state.exits.take(&uid, fact, start);
            let mut pod = Some(pod);
            let let_go = state.exits.hold(&uid, pod.as_mut(), start, false);
            self.count_settled(&let_go);
            state.set_current_of(&uid, pod);
            if !uids.contains(&uid) {
                uids.push(uid);
            }
            taken.push((id, ExitTaken::Shown));
        }
        // Held from now on, while their pods' statuses are read and their events sent.
        self.metrics.exits_held.set(state.exits.len() as i64);
        let failed = self.sync_pods(&mut state, uids, start, None, true).await;
        state.reinspect.extend(failed);
        // An exit the read found shown by the CRI already was not ahead of it.
        for (id, outcome) in &mut taken {
            if *outcome == ExitTaken::Shown && !state.exits.holds(id) {
                *outcome = ExitTaken::RuntimeFirst;
            }
        }
        for (_, outcome) in &taken {
            self.metrics.count_exit_event(outcome.as_str());
        }
        taken
    }

    /// Whether an exit is held for container `id` (see [`Self::containers_exited`]): a check of
    /// it that finds it exited settles the exit, though the records say exited already.
    pub async fn holds_exit(&self, id: &str) -> bool {
        self.state.lock().await.exits.holds(id)
    }

    /// Count (and log) exits settled: the CRI confirmed them, or showed them otherwise.
    fn count_settled(&self, settled: &[Settled]) {
        for s in settled {
            match &s.corrected {
                None => debug!(pod = %s.uid, container = %s.id, "exit confirmed by the CRI state"),
                Some(fields) => {
                    info!(pod = %s.uid, container = %s.id, fields = ?fields, "the CRI state shows the exit otherwise than containerd's exit event; the CRI's values are written");
                    for field in fields {
                        self.metrics.count_exit_correction(field);
                    }
                }
            }
        }
    }

    /// Compare, refresh, advance and send for one pod whose turn the caller holds: the records are
    /// locked to compute its events and again to send them, not while its status is read, so that
    /// checks of other pods go on meanwhile. `probed`: what a probe read, for the status read.
    /// Returns whether an event was computed (see [`RelistState::pod_relisted`]).
    async fn sync_record(
        &self,
        _turn: &PodTurn<'_>,
        uid: &str,
        start: SystemTime,
        probed: Option<Known<'_, R::Answer>>,
    ) -> bool {
        let mut work = {
            let mut state = self.state.lock().await;
            match self.prepare_sync(&mut state, uid, start) {
                Some(work) => work,
                None => {
                    // The records may have let an exit go (the relist showed it).
                    self.metrics.exits_held.set(state.exits.len() as i64);
                    return state.pod_relisted(uid, PodOutcome::Unchanged);
                }
            }
        };
        let status = self
            .update_cache(uid, work.current.as_ref(), probed, &mut work.exits)
            .await;
        let mut state = self.state.lock().await;
        let outcome = self.finish_sync(&mut state, uid, work, status, start, None);
        self.metrics.exits_held.set(state.exits.len() as i64);
        state.pod_relisted(uid, outcome)
    }

    /// The first step of [`Self::sync_record`]: the pod's events from its records, and whether
    /// its status is to be read (None: nothing to do; a record of nothing is dropped).
    fn prepare_sync(&self, state: &mut RelistState, uid: &str, start: SystemTime) -> Option<SyncWork> {
        let record = state.records.get(uid);
        let old = record.and_then(|r| r.old.as_ref());
        let current = record.and_then(|r| r.current.as_ref());
        let events = compute_events(old, current, start);
        let reinspect = state.reinspect.contains(uid);
        let has_undelivered = state.undelivered.contains_key(uid);
        if events.is_empty() && !reinspect && !has_undelivered && !state.exits.to_settle(uid) {
            if old.is_none() && current.is_none() {
                state.records.remove(uid);
            }
            return None;
        }
        // Only a pod that changed pays for a copy of its record.
        Some(SyncWork {
            current: current.cloned(),
            events,
            reinspect,
            exits: state.exits.of_pod(uid),
        })
    }

    /// The last step of [`Self::sync_record`], once the pod's status was read (`status`): the
    /// record advanced and the events sent, or, if the read failed, nothing (re-inspected next time).
    fn finish_sync(
        &self,
        state: &mut RelistState,
        uid: &str,
        work: SyncWork,
        status: Result<Option<RuntimePodStatus>, RuntimeError>,
        start: SystemTime,
        missed_by: Option<&'static str>,
    ) -> PodOutcome {
        let SyncWork {
            current,
            mut events,
            reinspect,
            exits,
        } = work;
        let current = current.as_ref();
        let mut changed = !events.is_empty();
        let status = match status {
            Ok(status) => status,
            Err(error) => {
                self.metrics.pod_status_refresh_errors.inc();
                warn!(pod = %uid, error = %error, "pod status read failed; events withheld until the pod is re-inspected");
                return PodOutcome::RefreshFailed;
            }
        };

        state.advance(uid);
        let settled = state.exits.after_read(uid, exits);
        self.count_settled(&settled);
        changed |= !settled.is_empty();
        let corrected = settled.iter().any(|s| s.corrected.is_some());
        events.retain(|e| e.kind != PodLifecycleEventType::ContainerChanged);
        if let Some(source) = missed_by.filter(|_| !events.is_empty()) {
            self.metrics.count_missed_trigger(source, events.len() as u64);
        }
        // A successful re-inspection with nothing else to say still asks for a sync of the pod, and
        // so does an exit the CRI showed otherwise than it was taken (its values are the status's
        // now).
        if (reinspect || corrected) && events.is_empty() {
            events.push(PodLifecycleEvent::pod_sync(uid, current, start));
        }
        add_exit_details(&mut events, status.as_ref());
        if self.health.happened_while_watching(start) {
            self.count_exits(uid, &events);
        }
        if current.is_none() {
            // Nothing of the pod is left in the runtime: it left the node.
            self.metrics.pod_left_node(uid, start);
        }
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

    /// Count the containers' exits among `events` of pod `uid` (`plegd_container_exits_total`).
    fn count_exits(&self, uid: &str, events: &[PodLifecycleEvent]) {
        for event in events
            .iter()
            .filter(|e| e.kind == PodLifecycleEventType::ContainerDied && !e.sandbox)
        {
            self.metrics.count_container_exit(
                uid,
                event.namespace.as_deref().unwrap_or_default(),
                event.pod.as_deref().unwrap_or_default(),
                event.container.as_deref().unwrap_or_default(),
                exit_reason(event),
            );
        }
    }

    /// At the end: every event still kept for a pod's next relist (the channel was full) is sent,
    /// waiting for room — the consumer is still reading — so that nothing computed is left behind.
    async fn deliver_undelivered(&self) {
        let undelivered = std::mem::take(&mut self.state.lock().await.undelivered);
        for event in undelivered.into_values().flatten() {
            if self.events.send(event).await.is_err() {
                return;
            }
        }
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

    /// The pod's last status read, when exits just taken for it can be written into it instead of
    /// reading its status again ([`exits::last_status_holds`]): it read well, the pod waits for no
    /// re-inspection and no settling of an exit, and the status shows what the records hold.
    fn last_status_for(&self, state: &RelistState, uid: &str, work: &SyncWork) -> Option<RuntimePodStatus> {
        // A pod with no entry reads as an empty status, which holds none of its containers.
        if work.reinspect || state.exits.to_settle(uid) {
            return None;
        }
        let cached = self.cache.get(uid);
        let pod = work.current.as_ref()?;
        (cached.error.is_none() && exits::last_status_holds(pod, &cached.status, &work.exits))
            .then(|| RuntimePodStatus::clone(&cached.status))
    }

    /// The exits taken for a pod written into its last status read (`last`), into the cache: what
    /// [`Self::update_cache`] does, without asking the runtime.
    async fn exits_into_last(&self, uid: &str, last: RuntimePodStatus, exits: &mut [PendingExit]) -> RuntimePodStatus {
        let timestamp = self.stamp();
        let status = self.runtime.status_with_exits(last, exits).await;
        debug!(pod = %uid, "exits shown from the pod's last status read");
        self.cache.set(uid, Ok(status.clone()), timestamp);
        status
    }

    /// `updateCache`: read the pod's status into the cache; a pod that is gone loses its entry.
    /// Concurrent reads of different pods are fine: each writes its own entry.
    async fn update_cache(
        &self,
        uid: &str,
        pod: Option<&RuntimePod>,
        probed: Option<Known<'_, R::Answer>>,
        exits: &mut [PendingExit],
    ) -> Result<Option<RuntimePodStatus>, RuntimeError> {
        // Taken before the read (or before the probe whose answer is part of it): the status is at
        // least this fresh.
        let timestamp = probed.as_ref().map_or_else(|| self.stamp(), |k| k.read_at);
        let Some(pod) = pod else {
            self.cache.delete(uid, timestamp);
            return Ok(None);
        };
        let answer = probed.and_then(|k| Some((k.id, k.answer?)));
        match self.runtime.pod_status(pod, answer, exits).await {
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
        const STATES: [RuntimeContainerState; 4] = [
            RuntimeContainerState::Created,
            RuntimeContainerState::Running,
            RuntimeContainerState::Exited,
            RuntimeContainerState::Unknown,
        ];
        let mut by_state = [0i64; STATES.len()];
        for c in pods.iter().flat_map(|p| &p.containers) {
            if let Some(i) = STATES.iter().position(|s| *s == c.state) {
                by_state[i] += 1;
            }
        }
        for (state, count) in STATES.into_iter().zip(by_state) {
            let label = StateLabel {
                container_state: state.as_str().to_owned(),
            };
            self.metrics.running_containers.get_or_create(&label).set(count);
        }
    }

    /// Relist every period until the task is dropped: `relist_period`, or
    /// `relist_period_with_triggers` once a relist has succeeded with the event stream healthy all
    /// along (whatever happened before the stream subscribed, an outage included, is then known); a
    /// stream that fails during the long wait ends it at once. A failed relist is logged (once per
    /// outage, then at debug) and retried at the next period; the health check reports it.
    pub async fn run(self: Arc<Self>) {
        self.run_until(CancellationToken::new()).await;
    }

    /// [`run`](Self::run) until `stop` is cancelled: a relist under way when it is finishes first,
    /// then one last relist, begun after the stop, computes what the runtime changed before it that
    /// no trigger had named yet (the sources are stopped first), and the events kept back for a
    /// full channel are sent (waiting for room: whoever reads the channel must still be reading).
    pub async fn run_until(self: Arc<Self>, stop: CancellationToken) {
        let mut failing = false;
        let mut health = self.triggers_healthy.subscribe();
        let mut was_stretched = false;
        while !stop.is_cancelled() {
            let healthy_before = *health.borrow_and_update();
            let relisted = self.periodic_relist().await;
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
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    () = stop.cancelled() => {}
                }
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                // Only an error can end the wait (the sender lives in self): no busy loop.
                _ = health.wait_for(|healthy| !healthy) => {}
                () = stop.cancelled() => {}
            }
        }
        if let Err(error) = self.relist().await {
            warn!(error = %error, "the last relist before stopping failed");
        }
        self.deliver_undelivered().await;
    }
}

/// The reason of a container's exit as its status says it: the runtime's, else Completed or Error
/// by the exit code, and ContainerStatusUnknown for a container gone without an exit the runtime
/// reported (what the status writer then says).
fn exit_reason(event: &PodLifecycleEvent) -> &str {
    match (event.reason.as_deref(), event.exit_code) {
        (Some(reason), _) if !reason.is_empty() => reason,
        (_, Some(0)) => "Completed",
        (_, Some(_)) => "Error",
        (_, None) => "ContainerStatusUnknown",
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

    /// Every result an exit event can have is a series of `plegd_exit_events_total` from the start:
    /// what the relister made of it, and an exit the triggers left to the CRI state.
    #[test]
    fn exit_results_are_the_metrics_known_ones() {
        let mut results: Vec<&str> = ExitTaken::ALL.iter().map(|t| t.as_str()).collect();
        results.push(crate::triggers::exit_data::REASON_UNREAD);
        assert_eq!(results, crate::metrics::known::EXIT_EVENT_RESULTS);
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
            no_primary_ip: false,
            runtime_handler: String::new(),
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
}
