//! The syncLoop: one select loop over pod lifecycle events, informer pod changes, a periodic tick
//! and housekeeping, like the kubelet's. It decides which pods to sync; a sync generates the pod's
//! status from the informer's copy and the runtime status cache, and hands what the status mode
//! wants to the status manager (or, in shadow mode, compares). While the PLEG is unhealthy it skips
//! syncing with backoff (100 ms doubling to 5 s), as the kubelet does.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube::Resource;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::backoff::ExponentialBackoff;
use crate::clock::Clock;
use crate::container::PodStatus;
use crate::informer::{Informer, PodChange};
use crate::metrics::Metrics;
use crate::pleg::{GenericPleg, PodLifecycleEvent, PodLifecycleEventType};
use crate::pod::ApiPod;
use crate::runtime::Runtime;
use crate::status::generate::{StatusInput, generate};
use crate::status::manager::StatusManager;
use crate::status::{StatusMode, desired_status, shadow_differences};

/// Settings of the syncLoop.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    pub mode: StatusMode,
    /// The runtime's name, the scheme of container ids.
    pub runtime_name: String,
    /// The node's IPs (hostIP, and podIPs of host-network pods).
    pub node_ips: Vec<String>,
    /// How often pods due for a resync are looked for.
    pub tick: Duration,
    /// Every pod is synced at least this often.
    pub resync: Duration,
    /// How often state of pods that are gone is dropped.
    pub housekeeping: Duration,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            mode: StatusMode::Conditions,
            runtime_name: "containerd".into(),
            node_ips: Vec::new(),
            tick: Duration::from_secs(1),
            resync: Duration::from_secs(10),
            housekeeping: Duration::from_secs(2),
        }
    }
}

struct Tracked {
    key: ObjectRef<ApiPod>,
    last_sync: Option<Instant>,
    /// What the last sync that handed a status to the status manager worked from: the pod's
    /// resourceVersion and the runtime status it read. The same inputs give the same status, so a
    /// resync that finds them unchanged has nothing to do.
    synced_from: Option<(String, Arc<PodStatus>)>,
}

/// The syncLoop and what it works with.
pub struct SyncLoop<R, C> {
    pleg: Arc<GenericPleg<R, C>>,
    informer: Informer,
    manager: Arc<StatusManager>,
    recorder: Option<Recorder>,
    config: SyncConfig,
    metrics: Arc<Metrics>,
    pods: HashMap<String, Tracked>,
    unhealthy_backoff: ExponentialBackoff,
    skip_until: Option<Instant>,
}

impl<R: Runtime, C: Clock> SyncLoop<R, C> {
    pub fn new(
        pleg: Arc<GenericPleg<R, C>>,
        informer: Informer,
        manager: Arc<StatusManager>,
        recorder: Option<Recorder>,
        config: SyncConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            pleg,
            informer,
            manager,
            recorder,
            config,
            metrics,
            pods: HashMap::new(),
            unhealthy_backoff: ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(5)),
            skip_until: None,
        }
    }

    /// Run until both input channels close.
    pub async fn run(mut self, mut events: mpsc::Receiver<PodLifecycleEvent>, mut changes: mpsc::Receiver<PodChange>) {
        let mut tick = tokio::time::interval(self.config.tick);
        let mut housekeeping = tokio::time::interval(self.config.housekeeping);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        info!(mode = self.config.mode.as_str(), "syncLoop started");
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.on_lifecycle_event(event),
                    None => return,
                },
                change = changes.recv() => match change {
                    Some(change) => self.on_pod_change(change),
                    None => return,
                },
                _ = tick.tick() => self.sync_due(),
                _ = housekeeping.tick() => self.housekeeping(),
            }
        }
    }

    fn on_lifecycle_event(&mut self, event: PodLifecycleEvent) {
        if !self.pods.contains_key(&event.pod_uid) {
            // A pod the apiserver does not bind to this node (or not yet): nothing to sync.
            return;
        }
        if let Some(recorder) = &self.recorder {
            self.record(recorder, &event);
        }
        if event.kind != PodLifecycleEventType::ContainerRemoved {
            self.sync(&event.pod_uid);
        }
    }

    fn on_pod_change(&mut self, change: PodChange) {
        match change {
            PodChange::Applied { uid, key } => {
                match self.pods.get_mut(&uid) {
                    Some(tracked) => tracked.key = key,
                    None => {
                        self.pods.insert(
                            uid.clone(),
                            Tracked {
                                key,
                                last_sync: None,
                                synced_from: None,
                            },
                        );
                    }
                }
                self.sync(&uid);
            }
            PodChange::Deleted { uid } => {
                self.pods.remove(&uid);
                self.manager.forget(&uid);
            }
        }
    }

    fn sync_due(&mut self) {
        let due: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| t.last_sync.is_none_or(|at| at.elapsed() >= self.config.resync))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in due {
            self.sync(&uid);
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
            self.pods.remove(&uid);
            self.manager.forget(&uid);
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

    fn sync(&mut self, uid: &str) {
        if !self.runtime_ok() {
            return;
        }
        // Until a first relist has completed, the status cache does not know every pod: a status
        // generated now would describe an empty runtime (the kubelet's pod workers wait for a
        // cache newer than their last sync for the same reason). The tick retries soon.
        if self.pleg.cache().timestamp().is_none() {
            return;
        }
        let Some(tracked) = self.pods.get_mut(uid) else { return };
        let Some(pod) = self.informer.store.get(&tracked.key) else {
            return;
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return;
        }
        tracked.last_sync = Some(Instant::now());
        let runtime = self.pleg.cache().get(uid).status;
        let version = pod.metadata.resource_version.as_deref().unwrap_or_default();
        if self.config.mode != StatusMode::Shadow
            && let Some((synced_version, synced_runtime)) = &tracked.synced_from
            && !version.is_empty()
            && synced_version == version
            && Arc::ptr_eq(synced_runtime, &runtime)
        {
            return;
        }
        // Generate from plegd's own last write while the informer has not caught up with it (only
        // then is the pod copied).
        let base: Cow<'_, ApiPod> = match self.manager.base_status(&pod) {
            Some(status) => Cow::Owned(ApiPod {
                status: Some(status),
                ..(*pod).clone()
            }),
            None => Cow::Borrowed(&*pod),
        };
        let now = SystemTime::now();
        let input = StatusInput {
            pod: &base,
            runtime: &runtime,
            runtime_name: &self.config.runtime_name,
            node_ips: &self.config.node_ips,
            now,
        };
        let generated = generate(&input);
        if self.config.mode == StatusMode::Shadow {
            let actual = pod.status.clone().unwrap_or_default();
            let differences = shadow_differences(&actual, &generated);
            for field in &differences {
                self.metrics.count_shadow_difference(field);
            }
            if !differences.is_empty() {
                info!(pod = %tracked.key, fields = ?differences, "shadow: plegd's status differs from the apiserver's");
            }
            return;
        }
        let handed_over = match desired_status(self.config.mode, &base, &generated, now) {
            Some(desired) => match self.manager.set_status(&pod, desired) {
                Ok(_) => true,
                Err(refused) => {
                    warn!(pod = %tracked.key, error = %refused, "status not written");
                    false
                }
            },
            None => true,
        };
        // Only a status generated from the informer's own copy counts: while plegd's last write is
        // ahead of the informer, the next resync generates again.
        tracked.synced_from = (handed_over && matches!(base, Cow::Borrowed(_))).then(|| (version.to_owned(), runtime));
    }

    /// A Kubernetes Event for a container that died (with its exit code and reason) or was OOM-killed.
    fn record(&self, recorder: &Recorder, event: &PodLifecycleEvent) {
        if event.kind != PodLifecycleEventType::ContainerDied || event.sandbox {
            return;
        }
        let Some(tracked) = self.pods.get(&event.pod_uid) else {
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
        let note = match (event.exit_code, event.reason.as_deref()) {
            (Some(code), Some(r)) => format!("container {container} exited with code {code} ({r})"),
            (Some(code), None) => format!("container {container} exited with code {code}"),
            _ => format!("container {container} died"),
        };
        let reference = pod.object_ref(&());
        let recorder = recorder.clone();
        let kube_event = KubeEvent {
            type_: kind,
            reason: reason.into(),
            note: Some(note),
            action: "Observed".into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&kube_event, &reference).await {
                debug!(error = %error, "publishing a Kubernetes Event failed");
            }
        });
    }
}
