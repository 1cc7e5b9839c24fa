//! The syncLoop: one select loop over pod lifecycle events, informer pod changes, a periodic tick
//! and housekeeping, like the kubelet's. It decides *when* a pod is synced; a sync asks
//! [`decide`] what to write from the informer's copy, plegd's own
//! last write and the runtime status cache, and hands that to the status manager (or, in shadow
//! mode, counts the differences). It reads the relister through a [`PlegHandle`]: the cache
//! read-only and health, never the runtime. While the PLEG is unhealthy it skips syncing with
//! backoff (100 ms doubling to 5 s), as the kubelet does.
//!
//! It reads the cache as the kubelet's pod workers do (`managePodLoop`): a sync waits for a runtime
//! status newer than the pod's previous sync (`GetNewerThan(uid, lastSyncTime)`), and the sync a
//! lifecycle event asks for, for one at least as new as the event. A status whose read failed is
//! never written from: the pod is not synced, `FailedSync` is recorded (a counter each time; a log
//! line and, with `--emit-events`, a Kubernetes Event once per outage) and the apiserver keeps the
//! last good status. Where plegd differs: the kubelet retries such a pod after a 10 s backoff;
//! plegd retries it on the next read of the pod's status, which the PLEG makes at each relist
//! while it re-inspects the pod, so a recovered runtime is written at once and a failing one is
//! asked no more often than the relist asks it anyway.
//!
//! An informer change that decide() reads besides the status (the pod first seen, a
//! `deletionTimestamp`, a new `metadata.generation`, a spec change: `informer_change_matters`) is
//! synced at once from the runtime status already cached, which is a fact already read: waiting for
//! a newer one would hold a finished pod's deletion in full mode, or its `observedGeneration`, until
//! the next relist (up to `--relist-period-with-triggers`). Other changes — plegd's own writes
//! coming back among them — wait for a newer runtime status, as the kubelet's pod workers do.
//!
//! A mirror pod is synced from its static pod's runtime status: the runtime runs a static pod under
//! its config hash, which the mirror pod names in `kubernetes.io/config.mirror` (the kubelet pod
//! manager's `TranslatePodUID`); lifecycle events and the cache are read under that uid, and the
//! status is written to the mirror pod under its own.
//!
//! A pod with `activeDeadlineSeconds` is synced when its deadline passes (the kubelet's
//! `ShouldSync`), from the runtime status it has. At shutdown the loop ends when the lifecycle
//! events end, once the syncs the last of them ask for are handed to the status manager.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use kube::Resource;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::apiserver::informer::{Informer, PodChange};
use crate::apiserver::pod::ApiPod;
use crate::apiserver::recorder::EventSender;
use crate::kubecontainer::RuntimePodStatus;
use crate::kubecontainer::cache::CachedStatus;
use crate::metrics::Metrics;
use crate::pleg::{MAX_EVENT_MESSAGE, PlegHandle, PodLifecycleEvent, PodLifecycleEventType, bounded};
use crate::status::StatusMode;
use crate::status::decide::{Action, NodeFacts, decide, informer_change_matters};
use crate::status::gate;
use crate::status::manager::StatusManager;
use crate::status::report::{StatusReport, StatusReports};
use crate::util::backoff::ExponentialBackoff;

mod shadow;
use shadow::{ShadowStep, shadow_step};

/// Settings of the syncLoop.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub mode: StatusMode,
    /// The node's IPs (hostIP, and podIPs of host-network pods), primary first.
    pub node_ips: Vec<String>,
    /// How often pods due for a resync are looked for.
    pub tick: Duration,
    /// Every pod is synced at least this often.
    pub resync: Duration,
    /// How often state of pods that are gone is dropped.
    pub housekeeping: Duration,
    /// Write containers' `stopSignal` (`--container-stop-signals`).
    pub stop_signals: bool,
    /// Report each generated status as it is, even where the apiserver holds it already
    /// (`--status-report-form=generated`).
    pub report_generated: bool,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            mode: StatusMode::Conditions,
            node_ips: Vec::new(),
            tick: Duration::from_secs(1),
            resync: Duration::from_secs(10),
            housekeeping: Duration::from_secs(2),
            stop_signals: false,
            report_generated: false,
        }
    }
}

struct Tracked {
    key: ObjectRef<ApiPod>,
    /// The uid the runtime knows the pod by ([`ApiPod::runtime_uid`]): its lifecycle events and
    /// cache entry are under it. A mirror pod's is its static pod's; every other pod's, its own.
    runtime_uid: String,
    /// When the last sync ended, for resyncs.
    last_sync: Option<Instant>,
    /// When the last sync ended on the PLEG's clock (the kubelet's `lastSyncTime`); the epoch
    /// before the first. The next sync wants a runtime status newer than this.
    synced_at: SystemTime,
    /// What the last sync that handed a status to the status manager worked from: the pod's
    /// resourceVersion and the runtime status it read. The same inputs give the same status, so a
    /// resync that finds them unchanged has nothing to do.
    synced_from: Option<(String, Arc<RuntimePodStatus>)>,
    /// A sync is wanted once the cache holds a runtime status strictly newer than this.
    wanted: Option<SystemTime>,
    /// A wait on the cache is outstanding for this pod.
    waiting: bool,
    /// Syncs skipped in the current outage of this pod's status reads (FailedSync); 0 when none.
    failed_syncs: u64,
    /// When the pod's active deadline passes, while it is ahead: the pod is synced then (the
    /// kubelet's `ShouldSync` of the active deadline handler), whatever the resync period says.
    deadline: Option<SystemTime>,
    /// The informer's copy the loop last heard of, to tell what the next change changed. Shared
    /// with the informer's store until the pod changes again.
    seen: Option<Arc<ApiPod>>,
    /// When (on the PLEG's clock) the informer last brought a new status of the pod; the epoch
    /// before. Shadow mode counts a difference only from a runtime status read after it.
    status_seen_at: SystemTime,
}

impl Tracked {
    fn new(key: ObjectRef<ApiPod>, runtime_uid: String) -> Self {
        Self {
            key,
            runtime_uid,
            last_sync: None,
            synced_at: SystemTime::UNIX_EPOCH,
            synced_from: None,
            wanted: None,
            waiting: false,
            failed_syncs: 0,
            deadline: None,
            seen: None,
            status_seen_at: SystemTime::UNIX_EPOCH,
        }
    }
}

/// A wait for a runtime status newer than some time: resolves to the pod's (apiserver) uid.
type CacheWait = Pin<Box<dyn Future<Output = String> + Send>>;

/// How long the syncLoop's last syncs wait for their runtime status at shutdown.
const FINISH_WAIT: Duration = Duration::from_millis(500);

/// Just before `t`: a bound that an entry stamped `t` is strictly newer than.
fn just_before(t: SystemTime) -> SystemTime {
    t.checked_sub(Duration::from_nanos(1)).unwrap_or(t)
}

/// The syncLoop and what it works with.
pub struct SyncLoop {
    /// The relister's status cache (read-only) and health.
    pleg: PlegHandle,
    informer: Informer,
    manager: Arc<StatusManager>,
    recorder: Option<EventSender>,
    config: SyncConfig,
    /// What statuses are generated with: the node's IPs and what the runtime said at start.
    node: NodeFacts,
    metrics: Arc<Metrics>,
    /// Each pod's latest generated status, for followers (`plegd status`).
    reports: StatusReports,
    /// The pods bound to this node, by their apiserver uid.
    pods: HashMap<String, Tracked>,
    /// Mirror pods by the runtime uid of their static pod (the kubelet pod manager's
    /// `translationByUID`): a lifecycle event names the runtime uid. Pods that run under their own
    /// uid are not in it.
    mirrors: HashMap<String, String>,
    /// Waits on the cache asked for since the loop last looked (the loop owns the futures): the
    /// pod's uid, the runtime uid its cache entry is under, and the time its status must be newer than.
    to_wait: Vec<(String, String, SystemTime)>,
    unhealthy_backoff: ExponentialBackoff,
    skip_until: Option<Instant>,
}

impl SyncLoop {
    pub fn new(
        pleg: PlegHandle,
        informer: Informer,
        manager: Arc<StatusManager>,
        recorder: Option<EventSender>,
        config: SyncConfig,
        node: NodeFacts,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            pleg,
            informer,
            manager,
            recorder,
            config,
            node,
            metrics,
            reports: StatusReports::default(),
            pods: HashMap::new(),
            mirrors: HashMap::new(),
            to_wait: Vec::new(),
            unhealthy_backoff: ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(5)),
            skip_until: None,
        }
    }

    /// Keep each pod's generated status in `reports` (for `plegd status`).
    pub fn reporting_to(mut self, reports: StatusReports) -> Self {
        self.reports = reports;
        self
    }

    /// Run until the lifecycle events end (at shutdown, once the fan-out has handed over what the
    /// PLEG had computed): the syncs those last events ask for are handed to the status manager
    /// before it returns. Pod changes that end first (the informer stopped) are simply no more.
    pub async fn run(mut self, mut events: mpsc::Receiver<PodLifecycleEvent>, mut changes: mpsc::Receiver<PodChange>) {
        let mut tick = tokio::time::interval(self.config.tick);
        let mut housekeeping = tokio::time::interval(self.config.housekeeping);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // At most one wait per pod (`Tracked::waiting`), so this holds at most one per pod.
        let mut waits: FuturesUnordered<CacheWait> = FuturesUnordered::new();
        info!(mode = self.config.mode.as_str(), "syncLoop started");
        let mut changes_open = true;
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.on_lifecycle_event(event),
                    None => {
                        self.finish(&mut waits).await;
                        return;
                    }
                },
                change = changes.recv(), if changes_open => match change {
                    Some(change) => self.on_pod_change(change),
                    None => changes_open = false,
                },
                Some(uid) = waits.next(), if !waits.is_empty() => self.on_cache_newer(&uid),
                _ = tick.tick() => self.sync_due(),
                _ = housekeeping.tick() => self.housekeeping(),
            }
            self.start_waits(&mut waits);
        }
    }

    /// Turn the waits on the cache asked for since the loop last looked into futures it polls.
    fn start_waits(&mut self, waits: &mut FuturesUnordered<CacheWait>) {
        for (uid, runtime_uid, min) in self.to_wait.drain(..) {
            let cache = self.pleg.cache().clone();
            waits.push(Box::pin(async move {
                cache.get_newer_than(&runtime_uid, min).await;
                uid
            }));
        }
    }

    /// At the end: the syncs still waiting for the runtime status their event was computed from
    /// (the relister caches it before it sends the event, so these are served at once) are made.
    async fn finish(&mut self, waits: &mut FuturesUnordered<CacheWait>) {
        self.start_waits(waits);
        // Bounded: a wait the cache cannot serve any more is given up after a moment (the daemon's
        // shutdown deadline bounds the whole drain anyway).
        while let Ok(Some(uid)) = tokio::time::timeout(FINISH_WAIT, waits.next()).await {
            self.on_cache_newer(&uid);
            self.start_waits(waits);
        }
    }

    /// The apiserver uid of the pod the runtime runs under `runtime_uid` (`TranslatePodUID`'s
    /// other way): a mirror pod's for its static pod, else the same uid if the pod is tracked.
    fn pod_of_runtime_uid(&self, runtime_uid: &str) -> Option<String> {
        if self.pods.contains_key(runtime_uid) {
            return Some(runtime_uid.to_owned());
        }
        self.mirrors.get(runtime_uid).cloned()
    }

    fn on_lifecycle_event(&mut self, event: PodLifecycleEvent) {
        let Some(uid) = self.pod_of_runtime_uid(&event.pod_uid) else {
            // A pod the apiserver does not bind to this node (or not yet): nothing to sync.
            return;
        };
        if self.recorder.is_some() {
            self.record(&uid, &event);
        }
        if event.kind != PodLifecycleEventType::ContainerRemoved {
            // The relister cached the pod's status before it sent the event: at least this new.
            self.request_sync(&uid, just_before(event.timestamp));
        }
    }

    /// Note that the pod `uid` runs under `runtime_uid` (before this change: `previous`).
    fn translate(&mut self, uid: &str, previous: &str, runtime_uid: String) {
        if previous != runtime_uid && self.mirrors.get(previous).is_some_and(|u| u == uid) {
            self.mirrors.remove(previous);
        }
        if runtime_uid == uid {
            return;
        }
        debug!(pod = %uid, runtime_uid = %runtime_uid, "mirror pod of a static pod");
        if let Some(other) = self.mirrors.get(&runtime_uid).cloned()
            && other != uid
        {
            // Anyone who may create a pod on this node can name a static pod's hash: the pod whose
            // namespace and name are the static pod's keeps it (the kubelet's `IsMirrorPodOf`).
            let cached = self.pleg.cache().get(&runtime_uid);
            let runtime = cached.read().ok();
            let is_its = |u: &str| {
                let pod = self.pods.get(u).and_then(|t| t.seen.as_deref());
                pod.zip(runtime).is_some_and(|(pod, runtime)| {
                    pod.metadata.namespace.as_deref() == Some(runtime.namespace.as_str())
                        && pod.metadata.name.as_deref() == Some(runtime.name.as_str())
                })
            };
            if is_its(&other) && !is_its(uid) {
                warn!(pod = %uid, mirror = %other, runtime_uid = %runtime_uid, "a pod names a static pod whose mirror pod is another; it is not synced from it");
                return;
            }
            warn!(pod = %uid, other = %other, runtime_uid = %runtime_uid, "two mirror pods name the same static pod; the one changed last is synced");
        }
        self.mirrors.insert(runtime_uid, uid.to_owned());
    }

    /// Stop tracking a pod: it is gone from the informer.
    fn untrack(&mut self, uid: &str) {
        if let Some(tracked) = self.pods.remove(uid)
            && self.mirrors.get(&tracked.runtime_uid).is_some_and(|u| u == uid)
        {
            self.mirrors.remove(&tracked.runtime_uid);
        }
        self.manager.forget(uid);
        self.reports.remove(uid);
    }

    fn on_pod_change(&mut self, change: PodChange) {
        match change {
            PodChange::Applied { uid, key } => {
                let current = self
                    .informer
                    .store
                    .get(&key)
                    .filter(|pod| pod.metadata.uid.as_deref() == Some(uid.as_str()));
                let runtime_uid = current
                    .as_ref()
                    .and_then(|pod| pod.runtime_uid().map(str::to_owned))
                    .unwrap_or_else(|| uid.clone());
                let tracked = self
                    .pods
                    .entry(uid.clone())
                    .or_insert_with(|| Tracked::new(key.clone(), runtime_uid.clone()));
                tracked.key = key;
                let previous = std::mem::replace(&mut tracked.runtime_uid, runtime_uid.clone());
                // A change decide() reads (or a pod first seen) is synced from the runtime status
                // already cached: it is a fact already read, and the next relist can be up to
                // --relist-period-with-triggers away. Any other change waits for a newer one.
                let matters = tracked
                    .seen
                    .as_deref()
                    .zip(current.as_deref())
                    .is_none_or(|(old, new)| informer_change_matters(self.config.mode, old, new));
                if let (Some(old), Some(new)) = (&tracked.seen, &current)
                    && old.status != new.status
                {
                    tracked.status_seen_at = self.pleg.stamp();
                }
                tracked.seen = current;
                let synced_at = if matters {
                    debug!(pod = %tracked.key, "informer change that matters to the status; syncing from the cached runtime status");
                    SystemTime::UNIX_EPOCH
                } else {
                    tracked.synced_at
                };
                self.translate(&uid, &previous, runtime_uid);
                self.request_sync(&uid, synced_at);
            }
            PodChange::Deleted { uid } => self.untrack(&uid),
        }
    }

    /// Resync the pods due. A pod whose status cannot be read is not: it is retried on the next
    /// read of its status (see the module documentation).
    fn sync_due(&mut self) {
        let now = SystemTime::now();
        let mut due = Vec::new();
        for (uid, t) in &mut self.pods {
            if t.failed_syncs > 0 {
                continue;
            }
            if t.deadline.is_some_and(|d| now >= d) {
                // The same inputs give another status now: neither skipped as unchanged nor
                // waiting for a newer runtime status (with runtime events, the next relist can be
                // 30 s away): the last one read is the pod's state.
                t.deadline = None;
                t.synced_from = None;
                due.push((uid.clone(), SystemTime::UNIX_EPOCH));
            } else if t.last_sync.is_none_or(|at| at.elapsed() >= self.config.resync) {
                due.push((uid.clone(), t.synced_at));
            }
        }
        for (uid, synced_at) in due {
            self.request_sync(&uid, synced_at);
        }
    }

    /// Ask for a sync of `uid` with a runtime status newer than `newer_than`. Requests merge: the
    /// first status that satisfies the oldest pending one serves them all.
    fn request_sync(&mut self, uid: &str, newer_than: SystemTime) {
        let Some(tracked) = self.pods.get_mut(uid) else { return };
        tracked.wanted = Some(tracked.wanted.map_or(newer_than, |w| w.min(newer_than)));
        self.try_sync(uid);
    }

    /// A wait on the cache ended: the pod's status (or the cache) is newer than it asked for.
    fn on_cache_newer(&mut self, uid: &str) {
        if let Some(tracked) = self.pods.get_mut(uid) {
            tracked.waiting = false;
            self.try_sync(uid);
        }
    }

    /// Sync `uid` now if the cache holds what its pending request wants, else wait for it.
    fn try_sync(&mut self, uid: &str) {
        let Some(tracked) = self.pods.get_mut(uid) else { return };
        let Some(min) = tracked.wanted else { return };
        match self.pleg.cache().try_get_newer_than(&tracked.runtime_uid, min) {
            Some(entry) => {
                tracked.wanted = None;
                self.sync(uid, entry);
            }
            None if !tracked.waiting => {
                tracked.waiting = true;
                self.to_wait.push((uid.to_owned(), tracked.runtime_uid.clone(), min));
            }
            None => {}
        }
    }

    /// Drop what is kept for pods the informer no longer has.
    fn housekeeping(&mut self) {
        let store = &self.informer.store;
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(uid, t)| {
                store
                    .get(&t.key)
                    .is_none_or(|p| p.metadata.uid.as_deref() != Some(uid.as_str()))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            debug!(pod = %uid, "housekeeping: pod is gone");
            self.untrack(&uid);
        }
    }

    /// Whether syncing is allowed now: not while the PLEG is unhealthy (with backoff).
    fn runtime_ok(&mut self) -> bool {
        if self.skip_until.is_some_and(|t| Instant::now() < t) {
            return false;
        }
        match self.pleg.healthy() {
            Ok(()) => {
                self.unhealthy_backoff.reset();
                self.skip_until = None;
                true
            }
            Err(error) => {
                let wait = self.unhealthy_backoff.next_wait();
                warn!(error = %error, retry_in = ?wait, "skipping pod syncs: PLEG is not healthy");
                self.skip_until = Some(Instant::now() + wait);
                false
            }
        }
    }

    /// Sync one pod from a cache `entry` that is new enough (`managePodLoop` then `syncPod`).
    fn sync(&mut self, uid: &str, entry: CachedStatus) {
        if !self.runtime_ok() {
            return;
        }
        let Some(tracked) = self.pods.get_mut(uid) else { return };
        let Some(pod) = self.informer.store.get(&tracked.key) else {
            return;
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return;
        }
        let runtime = match entry.read() {
            Ok(runtime) => runtime.clone(),
            Err(error) => {
                self.failed_sync(uid, &pod, entry.modified, error);
                return;
            }
        };
        if tracked.failed_syncs > 0 {
            info!(pod = %tracked.key, failed_syncs = tracked.failed_syncs, "pod's runtime status can be read again; syncing");
            tracked.failed_syncs = 0;
        }
        tracked.last_sync = Some(Instant::now());
        tracked.synced_at = self.pleg.stamp();
        let version = pod.metadata.resource_version.as_deref().unwrap_or_default();
        if self.config.mode.writes()
            && let Some((synced_version, synced_runtime)) = &tracked.synced_from
            && !version.is_empty()
            && synced_version == version
            && Arc::ptr_eq(synced_runtime, &runtime)
        {
            return;
        }
        let last_write = self.manager.last_write(&pod);
        let decision = decide(
            self.config.mode,
            &self.node,
            &pod,
            last_write.as_ref(),
            &runtime,
            SystemTime::now(),
        );
        tracked.deadline = decision.deadline;
        // A status the writer refuses (an illegal transition) is not shown as plegd's.
        if let Some(generated) = decision.generated
            && !matches!(decision.action, Action::Skip(_))
        {
            let report = if self.config.report_generated {
                StatusReport::as_generated(pod.clone(), *generated, SystemTime::now(), entry.modified)
            } else {
                StatusReport::new(pod.clone(), *generated, SystemTime::now(), entry.modified)
            };
            self.reports.put(uid, report);
        }
        if self.config.mode == StatusMode::Conditions && matches!(decision.action, Action::Write { .. }) {
            let read_is_newer = read_is_newer_than_status(self.pleg.cache(), tracked);
            if gate::waits_for_newer_read(pod.status.as_ref(), read_is_newer) {
                debug!(pod = %tracked.key, "the condition follows the kubelet's report, newer than plegd's runtime read: decided again from a newer read");
                let seen_at = tracked.status_seen_at;
                self.request_sync(uid, seen_at);
                return;
            }
        }
        let handed_over = match decision.action {
            Action::Skip(skip) => {
                warn!(pod = %tracked.key, error = %skip, "status update on pod aborted");
                return;
            }
            Action::Shadow { differences } => {
                // The report above already shows the generated status.
                let fresh = read_is_newer_than_status(self.pleg.cache(), tracked);
                match shadow_step(&differences, fresh) {
                    ShadowStep::CompareAgain => {
                        debug!(pod = %tracked.key, "shadow: the apiserver's status is newer than plegd's runtime read; compared again from a newer one");
                        // The wait ends once the pod's entry, or the whole cache, is newer than
                        // the status's arrival.
                        let seen_at = tracked.status_seen_at;
                        self.request_sync(uid, seen_at);
                    }
                    ShadowStep::Count { fields, paths } => {
                        for field in fields {
                            self.metrics.count_shadow_difference(field);
                        }
                        if !paths.is_empty() {
                            info!(pod = %tracked.key, fields = ?paths, "shadow: plegd's status differs from the apiserver's");
                        }
                    }
                }
                return;
            }
            Action::Write {
                status,
                delete_when_written,
            } => match self.manager.set_status(&pod, *status, delete_when_written) {
                Ok(_) => true,
                Err(refused) => {
                    warn!(pod = %tracked.key, error = %refused, "status not written");
                    false
                }
            },
        };
        // Only a status generated from the informer's own copy counts: while plegd's last write is
        // ahead of the informer, the next resync generates again.
        tracked.synced_from = (handed_over && decision.from_informer).then(|| (version.to_owned(), runtime));
    }

    /// FailedSync (`error` is why the pod's runtime status, cached at `modified`, could not be
    /// read): nothing is generated from a failed read; the pod is synced again at its next read.
    fn failed_sync(&mut self, uid: &str, pod: &ApiPod, modified: SystemTime, error: &str) {
        let Some(tracked) = self.pods.get_mut(uid) else { return };
        tracked.wanted = Some(modified);
        tracked.failed_syncs += 1;
        self.metrics.failed_syncs.inc();
        if tracked.failed_syncs == 1 {
            warn!(pod = %tracked.key, error = %error, "FailedSync: error determining status; the pod is not synced until its runtime status can be read");
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: "FailedSync".into(),
                note: Some(format!("error determining status: {error}")),
                action: "Sync".into(),
                secondary: None,
            };
            self.publish(pod, event);
        } else {
            debug!(pod = %tracked.key, error = %error, failed_syncs = tracked.failed_syncs, "FailedSync again");
        }
        self.try_sync(uid);
    }

    /// A Kubernetes Event for a container that died (with its exit code and reason) or was
    /// OOM-killed while plegd looked: not for one the first relist found already exited, which a
    /// plegd before a restart published (the exit counter does not count those either).
    fn record(&self, uid: &str, event: &PodLifecycleEvent) {
        if event.kind != PodLifecycleEventType::ContainerDied || event.sandbox {
            return;
        }
        if !self.pleg.happened_while_watching(event.timestamp) {
            debug!(pod = %uid, container = event.container.as_deref().unwrap_or(""), "exit found at the first relist; no Kubernetes Event");
            return;
        }
        let Some(tracked) = self.pods.get(uid) else {
            return;
        };
        let Some(pod) = self.informer.store.get(&tracked.key) else {
            return;
        };
        let container = event.container.clone().unwrap_or_else(|| "?".into());
        let (reason, kind) = match (event.reason.as_deref(), event.exit_code) {
            (Some("OOMKilled"), _) => ("OOMKilled", EventType::Warning),
            (_, Some(0)) => ("ContainerCompleted", EventType::Normal),
            _ => ("ContainerDied", EventType::Warning),
        };
        let mut note = match (event.exit_code, event.reason.as_deref()) {
            (Some(code), Some(r)) => format!("container {container} exited with code {code} ({r})"),
            (Some(code), None) => format!("container {container} exited with code {code}"),
            _ => format!("container {container} died"),
        };
        if let Some(message) = &event.message {
            note.push_str(": ");
            note.push_str(message);
        }
        // An Event's note holds at most 1 KiB.
        let note = bounded(&note, MAX_EVENT_MESSAGE).to_owned();
        let kube_event = KubeEvent {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: "Observed".into(),
            secondary: None,
        };
        self.publish(&pod, kube_event);
    }

    /// Publish a Kubernetes Event about `pod` when `--emit-events` is on.
    fn publish(&self, pod: &ApiPod, event: KubeEvent) {
        let Some(recorder) = &self.recorder else { return };
        recorder.send(event, pod.object_ref(&()));
    }
}

/// Whether plegd's runtime read of a tracked pod is newer than the apiserver status it last saw
/// arrive (shadow mode compares, and conditions mode overwrites a kubelet-reported condition, only
/// from such a read).
fn read_is_newer_than_status(cache: &crate::kubecontainer::cache::CacheReader, tracked: &Tracked) -> bool {
    cache
        .try_get_newer_than(&tracked.runtime_uid, tracked.status_seen_at)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    use crate::apiserver::pod::MIRROR_POD_ANNOTATION;
    use crate::apiserver::pod::{ApiPodSpec, NodeName};
    use crate::kubecontainer::SandboxState;
    use crate::kubecontainer::{PodUid, RuntimeContainer, RuntimeContainerState, RuntimePod};
    use crate::pleg::{GenericPleg, PlegConfig};
    use crate::runtime::{IdKind, Runtime, RuntimeError};
    use crate::status::generate::test_support::{pod_with, ready_sandbox, runtime_status, sandbox};
    use crate::status::manager::ManagerConfig;
    use crate::status::manager::script::Script;
    use crate::util::backoff::RetryAfter;
    use crate::util::clock::SystemClock;

    /// One pod, u1, with one container `app` (c1): running or exited, whether its sandbox is
    /// stopped, and whether reading its status fails.
    #[derive(Default)]
    struct OnePod {
        exited: bool,
        sandbox_stopped: bool,
        read_error: Option<String>,
    }

    struct FakeRuntime(Arc<Mutex<OnePod>>);

    impl FakeRuntime {
        fn state(&self) -> RuntimeContainerState {
            if self.0.lock().unwrap().exited {
                RuntimeContainerState::Exited
            } else {
                RuntimeContainerState::Running
            }
        }

        fn pod(&self) -> RuntimePod {
            let item = |id: &str, sandbox_id: &str, name: &str, state| RuntimeContainer {
                id: id.into(),
                sandbox_id: sandbox_id.into(),
                name: name.into(),
                state,
                created_at: 1,
                attempt: 0,
            };
            RuntimePod {
                id: "u1".into(),
                name: "web".into(),
                namespace: "default".into(),
                containers: vec![item("c1", "s1", "app", self.state())],
                sandboxes: vec![item("s1", "", "", self.sandbox_state())],
            }
        }

        fn sandbox_state(&self) -> RuntimeContainerState {
            if self.0.lock().unwrap().sandbox_stopped {
                RuntimeContainerState::Exited
            } else {
                RuntimeContainerState::Running
            }
        }
    }

    impl Runtime for FakeRuntime {
        type Answer = ();

        async fn list_pods(&self) -> Result<Vec<RuntimePod>, RuntimeError> {
            Ok(vec![self.pod()])
        }

        async fn list_pod(&self, uid: &str) -> Result<Option<RuntimePod>, RuntimeError> {
            Ok((uid == "u1").then(|| self.pod()))
        }

        async fn pod_status(
            &self,
            _: &RuntimePod,
            _: Option<(&str, ())>,
            _: &mut [crate::runtime::exits::PendingExit],
        ) -> Result<RuntimePodStatus, RuntimeError> {
            if let Some(error) = self.0.lock().unwrap().read_error.clone() {
                return Err(RuntimeError::Call {
                    operation: "ContainerStatus",
                    status: tonic::Status::unavailable(error),
                });
            }
            let sandbox = if self.0.lock().unwrap().sandbox_stopped {
                sandbox("s1", SandboxState::NotReady, 1)
            } else {
                ready_sandbox("10.1.0.5")
            };
            Ok(RuntimePodStatus {
                id: "u1".into(),
                name: "web".into(),
                namespace: "default".into(),
                ips: vec!["10.1.0.5".into()],
                container_statuses: vec![runtime_status("app", "c1", self.state(), 10)],
                sandbox_statuses: vec![sandbox],
            })
        }

        async fn probe_state(&self, _: &str, _: IdKind) -> Result<Option<(RuntimeContainerState, ())>, RuntimeError> {
            Ok(None)
        }

        async fn locate(&self, _: &str) -> Result<Option<PodUid>, RuntimeError> {
            Ok(None)
        }
    }

    fn bound_pod() -> ApiPod {
        let mut pod = pod_with(&["app"], vec![], "Never");
        pod.metadata = ObjectMeta {
            namespace: Some("default".into()),
            name: Some("web".into()),
            resource_version: Some("10".into()),
            ..pod.metadata
        };
        pod.spec = ApiPodSpec {
            node_name: Some("n1".into()),
            ..pod.spec
        };
        pod
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: not in 2 s");
    }

    /// The syncLoop decides when a pod is synced: at its lifecycle events, from a runtime status
    /// as new as the event; not again while nothing it works from changed; never from a status
    /// whose read failed (FailedSync, counted), and at once when it can be read again.
    #[tokio::test(start_paused = true)]
    async fn syncs_follow_events_skip_repeats_and_never_write_a_failed_read() {
        let Harness {
            fake,
            pleg,
            script,
            changes: changes_tx,
            metrics,
            running,
            ..
        } = Harness::start(StatusMode::Full, bound_pod(), OnePod::default(), None).await;

        // The first relist: ContainerStarted, and the status it was read with, written once.
        pleg.relist().await.unwrap();
        let patches = || script.sent().len();
        wait_for("the first status", || patches() == 1).await;
        let state = |i: usize| script.sent()[i].1["status"]["containerStatuses"][0]["state"].clone();
        assert!(state(0)["running"].is_object(), "{}", state(0));
        // Resyncs (every 50 ms) with the same pod and the same runtime status write nothing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(patches(), 1, "{:?}", script.sent());

        // The container exits while its status cannot be read: nothing is written from the
        // failed read, however often the pod is due.
        {
            let mut pod = fake.lock().unwrap();
            pod.exited = true;
            pod.read_error = Some("the runtime is busy".into());
        }
        pleg.relist().await.unwrap();
        let failed = || metrics.sample("plegd_pod_failed_syncs_total").unwrap_or(0.0) as u64;
        wait_for("a FailedSync", || failed() >= 1).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(patches(), 1, "nothing from a failed read: {:?}", script.sent());

        // Readable again: the exit is written at the relist that reads it.
        fake.lock().unwrap().read_error = None;
        pleg.relist().await.unwrap();
        wait_for("the exit", || patches() == 2).await;
        assert_eq!(state(1)["terminated"]["exitCode"], 3, "{}", state(1));

        // The pod is deleted: the loop forgets it, and ends when the events end.
        changes_tx.send(PodChange::Deleted { uid: "u1".into() }).await.unwrap();
        drop(pleg);
        tokio::time::timeout(Duration::from_secs(2), running)
            .await
            .expect("the loop ends with its events")
            .unwrap();
    }

    fn bound_pod_json() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "11"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "busybox"}]}})
    }

    /// A syncLoop over the fake runtime's pod u1, an informer holding `pod` and a scripted
    /// apiserver that answers every request with the pod at resourceVersion 9 (older than the
    /// informer's copies, so that every status is generated from the informer's copy).
    struct Harness {
        fake: Arc<Mutex<OnePod>>,
        pleg: GenericPleg<FakeRuntime, SystemClock>,
        script: Script,
        writer: reflector::store::Writer<ApiPod>,
        changes: mpsc::Sender<PodChange>,
        metrics: Arc<Metrics>,
        /// The loop: it ends when the relister (`pleg`) is gone.
        running: tokio::task::JoinHandle<()>,
    }

    impl Harness {
        async fn start(mode: StatusMode, pod: ApiPod, fake: OnePod, recorder: Option<EventSender>) -> Self {
            let fake = Arc::new(Mutex::new(fake));
            let metrics = Arc::new(Metrics::new());
            let (pleg, events) = GenericPleg::new(
                FakeRuntime(fake.clone()),
                SystemClock,
                metrics.clone(),
                PlegConfig::default(),
            );
            let mut answer = bound_pod_json();
            answer["metadata"]["resourceVersion"] = json!("9");
            let script = Script::answering_by_default(answer);
            let (store, mut writer) = reflector::store::<ApiPod>();
            writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            let manager = StatusManager::new(
                script.client(),
                store.clone(),
                ManagerConfig::new(NodeName::new("n1").unwrap(), mode),
                Arc::new(RetryAfter::default()),
                metrics.clone(),
            );
            for (_, stage) in manager.stages() {
                tokio::spawn(stage);
            }
            let config = SyncConfig {
                mode,
                tick: Duration::from_millis(20),
                resync: Duration::from_millis(50),
                ..SyncConfig::default()
            };
            let node = NodeFacts {
                runtime_name: "containerd".into(),
                node_ips: vec!["192.0.2.10".into()],
                recursive_read_only_handlers: Some(Vec::new()),
                stop_signals: false,
                kubelet: crate::status::generate::KubeletMinor::V1_37,
            };
            let sync = SyncLoop::new(
                pleg.handle(),
                Informer::from_store(store),
                manager,
                recorder,
                config,
                node,
                metrics.clone(),
            );
            let (changes, changes_rx) = mpsc::channel(8);
            let running = tokio::spawn(sync.run(events, changes_rx));
            let harness = Self {
                fake,
                pleg,
                script,
                writer,
                changes,
                metrics,
                running,
            };
            harness.announce(&pod).await;
            harness
        }

        /// The informer's copy of the pod becomes `pod`, and the syncLoop hears of it.
        async fn apply(&mut self, pod: ApiPod) {
            self.writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            self.announce(&pod).await;
        }

        async fn announce(&self, pod: &ApiPod) {
            let change = PodChange::Applied {
                uid: pod.metadata.uid.clone().unwrap(),
                key: ObjectRef::from_obj(pod),
            };
            self.changes.send(change).await.unwrap();
            // Taken by the loop, which handles a change in the poll that takes it: on this
            // single-threaded runtime the loop knows the pod before the test goes on.
            while self.changes.capacity() < self.changes.max_capacity() {
                tokio::task::yield_now().await;
            }
        }

        /// The requests sent: method and body.
        fn sent(&self) -> Vec<(String, serde_json::Value)> {
            self.script.sent()
        }

        fn patches(&self) -> Vec<serde_json::Value> {
            self.sent()
                .into_iter()
                .filter(|(method, _)| method == "PATCH")
                .map(|(_, body)| body)
                .collect()
        }
    }

    /// plegd's condition in a PATCH body.
    fn running_condition(patch: &serde_json::Value) -> serde_json::Value {
        patch["status"]["conditions"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == crate::status::generate::CONTAINERS_RUNNING)
            })
            .cloned()
            .unwrap_or_else(|| panic!("no plegd condition in {patch}"))
    }

    /// The mirror pod (m1) of a static pod that the runtime runs under its config hash (u1).
    fn mirror_pod() -> ApiPod {
        let mut pod = bound_pod();
        pod.metadata.uid = Some("m1".into());
        pod.metadata.annotations = Some([(MIRROR_POD_ANNOTATION.to_owned(), "u1".to_owned())].into());
        pod
    }

    /// A static pod runs under its config hash; its mirror pod in the apiserver has a uid of its
    /// own and names the hash. plegd matches the two as the kubelet's pod manager does: the mirror
    /// pod's condition (and, in full mode, its status) follows the static pod's containers, at
    /// their lifecycle events, and is written to the mirror pod with its own uid as the
    /// precondition. Never "gone from the runtime" while it runs.
    #[tokio::test(start_paused = true)]
    async fn a_mirror_pod_follows_its_static_pods_containers() {
        for mode in [StatusMode::Conditions, StatusMode::Full] {
            let h = Harness::start(mode, mirror_pod(), OnePod::default(), None).await;
            h.pleg.relist().await.unwrap();
            wait_for("the running status", || h.patches().len() == 1).await;
            let first = &h.patches()[0];
            assert_eq!(
                first["metadata"]["uid"],
                "m1",
                "{}: the mirror pod's own uid",
                mode.as_str()
            );
            let running = running_condition(first);
            assert_eq!(running["status"], "True", "{}: {running}", mode.as_str());
            if mode == StatusMode::Full {
                assert_eq!(first["status"]["phase"], "Running", "{first}");
                assert!(
                    first["status"]["containerStatuses"][0]["state"]["running"].is_object(),
                    "{first}"
                );
            }

            // The static pod's container exits: its ContainerDied (runtime uid u1) syncs m1.
            h.fake.lock().unwrap().exited = true;
            h.pleg.relist().await.unwrap();
            wait_for("the exit", || h.patches().len() == 2).await;
            let running = running_condition(&h.patches()[1]);
            assert_eq!(
                (&running["status"], &running["reason"]),
                (&json!("False"), &json!("ContainerDied")),
                "{}: {running}",
                mode.as_str()
            );
        }
    }

    /// Another pod bound to the node that names the static pod's hash (anyone who may create pods
    /// there can write the annotation) does not take the static pod from its mirror pod: the
    /// exit is still written to the mirror pod, never to the impostor.
    #[tokio::test(start_paused = true)]
    async fn a_pod_naming_a_static_pods_hash_does_not_take_it() {
        let (recorder, mut published) =
            crate::apiserver::recorder::capture(std::num::NonZeroUsize::new(16).unwrap(), Arc::new(Metrics::new()));
        let mut h = Harness::start(StatusMode::Conditions, mirror_pod(), OnePod::default(), Some(recorder)).await;
        h.pleg.relist().await.unwrap();
        wait_for("the running status", || h.patches().len() == 1).await;
        let mut impostor = mirror_pod();
        impostor.metadata.uid = Some("x1".into());
        impostor.metadata.name = Some("impostor".into());
        h.apply(impostor).await;
        h.fake.lock().unwrap().exited = true;
        h.pleg.relist().await.unwrap();
        wait_for("the exit", || h.patches().len() == 2).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let patches = h.patches();
        assert!(
            patches.iter().all(|p| p["metadata"]["uid"] == "m1"),
            "only the mirror pod is written: {patches:?}"
        );
        assert_eq!(running_condition(&patches[1])["reason"], "ContainerDied");
        let (event, regarding) = published.try_recv().expect("the exit's Kubernetes Event");
        assert_eq!(event.reason, "ContainerDied");
        assert_eq!(
            regarding.uid.as_deref(),
            Some("m1"),
            "about the mirror pod, not the impostor"
        );
    }

    /// A change only the informer sees — here the deletion of a finished pod in full mode — is
    /// synced at once from the runtime status already cached: the pod is deleted without waiting
    /// for another relist (with runtime events, the next one can be 30 s away; here none comes).
    #[tokio::test(start_paused = true)]
    async fn a_finished_pods_deletion_is_synced_without_a_relist() {
        let finished = OnePod {
            exited: true,
            sandbox_stopped: true,
            ..OnePod::default()
        };
        let mut h = Harness::start(StatusMode::Full, bound_pod(), finished, None).await;
        h.pleg.relist().await.unwrap();
        wait_for("the final status", || h.patches().len() == 1).await;
        assert_eq!(h.patches()[0]["status"]["phase"], "Failed", "{}", h.patches()[0]);

        // Its user deletes it; the informer's copy has what plegd wrote and the deletionTimestamp.
        let mut deleted = bound_pod();
        deleted.metadata.resource_version = Some("12".into());
        deleted.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        deleted.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        h.apply(deleted).await;
        wait_for("the DELETE", || h.sent().iter().any(|(method, _)| method == "DELETE")).await;
    }

    /// A new `metadata.generation` is reported (`observedGeneration`) at once, from the runtime
    /// status already cached.
    #[tokio::test(start_paused = true)]
    async fn a_new_generation_is_observed_without_a_relist() {
        let mut pod = bound_pod();
        pod.metadata.generation = Some(1);
        let mut h = Harness::start(StatusMode::Conditions, pod.clone(), OnePod::default(), None).await;
        h.pleg.relist().await.unwrap();
        wait_for("the first status", || h.patches().len() == 1).await;
        assert_eq!(running_condition(&h.patches()[0])["observedGeneration"], 1);

        pod.metadata.generation = Some(2);
        pod.metadata.resource_version = Some("12".into());
        h.apply(pod).await;
        wait_for("generation 2 observed", || h.patches().len() == 2).await;
        assert_eq!(running_condition(&h.patches()[1])["observedGeneration"], 2);
    }

    /// `--emit-events` after a restart: an exit the first relist finds already done (the plegd
    /// before the restart saw it happen and published it) is not published again, as
    /// `plegd_container_exits_total` does not count it again; an exit plegd sees happen is.
    #[tokio::test(start_paused = true)]
    async fn exits_found_at_the_first_relist_are_not_published_again() {
        let (recorder, mut published) =
            crate::apiserver::recorder::capture(std::num::NonZeroUsize::new(16).unwrap(), Arc::new(Metrics::new()));
        let exited = OnePod {
            exited: true,
            ..OnePod::default()
        };
        let h = Harness::start(StatusMode::Conditions, bound_pod(), exited, Some(recorder)).await;
        h.pleg.relist().await.unwrap();
        // The loop handles an event's Kubernetes Event before the sync it asks for.
        wait_for("the status", || h.patches().len() == 1).await;
        assert!(published.try_recv().is_err(), "the exit was there before plegd looked");

        // The container runs again and exits while plegd looks.
        h.fake.lock().unwrap().exited = false;
        h.pleg.relist().await.unwrap();
        wait_for("running", || h.patches().len() == 2).await;
        h.fake.lock().unwrap().exited = true;
        h.pleg.relist().await.unwrap();
        wait_for("the exit", || h.patches().len() == 3).await;
        let (event, regarding) = published.try_recv().expect("the exit plegd saw happen");
        assert_eq!(event.reason, "ContainerDied");
        assert_eq!(regarding.uid.as_deref(), Some("u1"));
        assert!(published.try_recv().is_err(), "once");
    }
}
