//! The status manager: *how* a status is written. It keeps the newest status plegd wants for each
//! pod (deduplicated) on a keyed [`WorkQueue`] and writes it to `pods/{name}/status` with a
//! strategic merge patch computed against the apiserver's newest copy as far as plegd knows
//! ([`apiserver_status`]: the informer's, or plegd's own later write) — never a GET before a PATCH —
//! and the pod's uid in the patch. A bounded pool of writers sends patches under a client-side
//! QPS/burst limit; the queue sees that a pod is never written by two writers at once, that only
//! its newest wanted status is sent, and that retries wait out their backoff.
//!
//! It never writes to a pod whose `spec.nodeName` is not this node. A pod that is gone (404) or was
//! replaced by another of the same name (the apiserver refuses the write's uid with 422 `metadata.uid
//! ... field is immutable`, or the informer shows another uid) loses its state; server errors,
//! timeouts and 429s are retried with backoff — and no write goes out before a `Retry-After` the
//! apiserver sent has passed. Other refusals (400, 403, other 422s: a policy engine rolling out,
//! RBAC still propagating, a field an older apiserver does not know) are logged once and counted,
//! and the same status is sent again on a slow schedule ([`ManagerConfig::refused_retry`]: up to 10 s
//! doubling to 2 min) while it is still wanted, as the kubelet's periodic status sync sends again
//! every 10 s a status the apiserver does not have; never a hot loop.

use std::collections::HashMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::apiserver::pod::{ApiPod, NodeName};
use crate::apiserver::rate_limit::{Qps, TokenBucket};
use crate::metrics::Metrics;
use crate::status::StatusMode;
use crate::status::decide::{LastWrite, apiserver_status, rebase, removal_drops_write};
use crate::status::generate::{CONTAINERS_RUNNING, is_terminal};
use crate::status::patch::status_patch_body;
use crate::status::semantic::canonical;
use crate::util::backoff::{ExponentialBackoff, RetryAfter};
use crate::util::supervise::Stage;
use crate::util::workqueue::{Lease, WorkQueue};

/// Settings of the status manager.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// This node: pods bound elsewhere are never written.
    pub node_name: NodeName,
    /// What plegd writes: at write time, the status wanted is merged with the apiserver's newest
    /// copy by this mode's rule ([`rebase`]).
    pub mode: StatusMode,
    /// Writers working in parallel.
    pub writers: NonZeroUsize,
    /// Sustained PATCHes per second, and how many may go at once after a quiet spell.
    pub qps: Qps,
    pub burst: NonZeroU32,
    /// Backoff of retries of one pod after a server error or a timeout (200 ms doubling to 10 s).
    pub retry: ExponentialBackoff,
    /// The longest a PATCH or DELETE may take: then it is given up (its connection with it) and
    /// retried like a server error, so that a hung request never holds its pod's write.
    pub request_timeout: Duration,
    /// Backoff of retries of one pod whose write the apiserver refused (400, 403, 422 other than a
    /// replaced pod): up to 10 s, doubling to at most 2 min.
    pub refused_retry: ExponentialBackoff,
}

impl ManagerConfig {
    /// The defaults for the status manager of `node_name` writing in `mode`.
    pub fn new(node_name: NodeName, mode: StatusMode) -> Self {
        Self {
            node_name,
            mode,
            writers: NonZeroUsize::new(4).unwrap(),
            qps: Qps::new(50.0).unwrap(),
            burst: NonZeroU32::new(100).unwrap(),
            retry: ExponentialBackoff::constant(Duration::from_millis(200), Duration::from_secs(10)),
            refused_retry: ExponentialBackoff::constant(Duration::from_secs(10), Duration::from_secs(120)),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Why plegd will not write a status it is given. The apiserver is not asked (its own refusal of
/// a write is the writers' `Outcome::Refused`, retried slowly).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unwritable {
    #[error("pod {namespace}/{name} is bound to node {bound:?}, not to this node {node}")]
    OtherNode {
        namespace: String,
        name: String,
        bound: Option<String>,
        node: String,
    },
    #[error("pod has no uid, name or namespace")]
    Incomplete,
}

/// One pod's write, as queued: the newest status wanted for it.
struct Work {
    key: ObjectRef<ApiPod>,
    status: PodStatus,
    /// Delete the pod once this status is on the apiserver (`decide::Action::Write`).
    delete_when_written: bool,
    /// The pod's wanted key ([`PodState::wanted`]) once this status is on the apiserver.
    written: u64,
}

/// What the manager keeps per pod besides its queued write.
struct PodState {
    /// A hash of the newest wanted status and its delete flag, to tell a repeat from a change
    /// without keeping the status once it is written: of what the mode writes of it
    /// ([`wanted_keys`]).
    wanted: Option<u64>,
    /// What plegd last wrote: the base for the next patch while the informer has not caught up
    /// with it. Boxed: empty for most pods most of the time, and the state per pod stays small.
    last_write: Option<Box<LastWrite>>,
    /// When the oldest unwritten status was wanted (for the sync duration metric).
    pending_since: Option<Instant>,
    /// The waits of a write being retried; none once a write is through (boxed and made on the
    /// first retry: two backoffs are most of an entry's size, and most pods never need them).
    retries: Option<Box<Retries>>,
    /// Whether the last answer was a refusal (logged at warn the first time only).
    refused: bool,
    /// The queued write is the refused one, waiting for its slow retry: a newer status does not
    /// wait for it, and shutdown does not wait for it either.
    waiting_refused: bool,
    /// The apiserver answered the pod's DELETE (plegd removed it, or it was gone already) while
    /// the informer still shows it: nothing more is written for it, and it is not deleted again,
    /// until the informer drops it ([`StatusManager::forget`]).
    deleted: bool,
}

/// A pod's retry schedules ([`ManagerConfig::retry`], [`ManagerConfig::refused_retry`]), from their
/// first wait.
struct Retries {
    retry: ExponentialBackoff,
    /// The slow schedule of a write the apiserver refused.
    refused_retry: ExponentialBackoff,
}

impl Retries {
    fn of(config: &ManagerConfig) -> Box<Self> {
        Box::new(Self {
            retry: config.retry.clone(),
            refused_retry: config.refused_retry.clone(),
        })
    }
}

/// What a status PATCH's answer (the pod as the apiserver stores it) is read for: the rest of the
/// pod is skipped in the JSON, never built.
#[derive(serde::Deserialize)]
struct WrittenPod {
    metadata: WrittenMetadata,
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMetadata {
    #[serde(default)]
    resource_version: Option<String>,
}

/// What one write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    NothingToSend,
    Gone,
    /// The apiserver refused the write (400, 403, a 422 other than a replaced pod): sent again
    /// later, slowly, while it is wanted.
    Refused,
    Retry,
    /// A 409 for the pod plegd still knows: retried like [`Outcome::Retry`], counted apart.
    Conflict,
    /// The pod under this name has another uid now (deleted and created again): dropped like
    /// [`Outcome::Gone`], counted apart.
    Replaced,
    /// The apiserver answered the DELETE of the finished pod: removed, or already gone (404, or
    /// 409 for the uid precondition). Like [`Outcome::Gone`], but the pod is remembered as deleted
    /// while the informer still shows it.
    Deleted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Written => "ok",
            Outcome::NothingToSend => "noop",
            Outcome::Gone => "gone",
            Outcome::Refused => "rejected",
            Outcome::Retry => "retry",
            Outcome::Conflict => "conflict",
            Outcome::Replaced => "replaced",
            Outcome::Deleted => "deleted",
        }
    }
}

/// The status manager. Create it with [`StatusManager::new`], start its writers with
/// [`StatusManager::stages`] (run them under supervision).
pub struct StatusManager {
    client: kube::Client,
    store: Store<ApiPod>,
    config: ManagerConfig,
    pods: Mutex<HashMap<String, PodState>>,
    /// The writes wanted, by pod uid: one writer per pod at a time, its newest status only, and
    /// retries after their backoff.
    queue: WorkQueue<String, Work>,
    limiter: TokenBucket,
    /// The wait the apiserver last asked for.
    retry_after: Arc<RetryAfter>,
    metrics: Arc<Metrics>,
}

/// A hash of `value` as JSON and of `more`, the JSON fed to the hasher as it is written (no
/// buffer: this runs for every sync of every pod).
fn json_hash(value: &impl serde::Serialize, more: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    struct Feed<'a>(&'a mut std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Feed<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    // A status always serializes; were it not to, the hash of what was written still differs
    // from an empty one only by chance, and a repeat is then merely written again.
    let _ = serde_json::to_writer(Feed(&mut hasher), value);
    more.hash(&mut hasher);
    hasher.finish()
}

fn status_hash(status: &PodStatus, finished: bool) -> u64 {
    json_hash(status, finished)
}

/// plegd's own condition in a status.
fn own_condition(status: &PodStatus) -> Option<&PodCondition> {
    status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == CONTAINERS_RUNNING)
}

/// The keys that tell a wanted status from the one before ([`PodState::wanted`]): now, and once
/// it is written. In conditions mode only plegd's condition is written, so the key is that
/// condition and whether `apiserver` (the pod's status as the apiserver holds it, as far as plegd
/// knows) already holds it: the kubelet's fields, which change under plegd with every write of the
/// kubelet, do not make a status new; the condition lost from the apiserver does. In the other modes,
/// the whole status.
fn wanted_keys(mode: StatusMode, apiserver: Option<&PodStatus>, wanted: &PodStatus, finished: bool) -> (u64, u64) {
    match mode {
        StatusMode::Conditions => {
            let own = own_condition(wanted);
            let held = apiserver.map(own_condition) == Some(own);
            (json_hash(&own, (held, finished)), json_hash(&own, (true, finished)))
        }
        StatusMode::Full | StatusMode::Shadow => {
            let key = status_hash(wanted, finished);
            (key, key)
        }
    }
}

/// Whether a 422 refused a write because the pod's uid is not the one the write named: the
/// apiserver puts no precondition on a PATCH, and a `metadata.uid` that differs from the stored
/// object's fails metadata validation instead (`metadata.uid: Invalid value: "...": field is
/// immutable`). The pod under that name was deleted and created again.
fn uid_changed(status: &kube::core::Status) -> bool {
    let causes = status.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
    causes
        .iter()
        .any(|c| c.field == "metadata.uid" && c.reason == "FieldValueInvalid")
        || (causes.is_empty() && status.message.contains("metadata.uid: Invalid value"))
}

/// What the apiserver's error answer to a status PATCH means for the pod's write. A 409 is
/// [`Outcome::Conflict`] here; the writer then asks the informer whether the pod was replaced.
fn patch_outcome(code: u16, uid_changed: bool) -> Outcome {
    match code {
        404 => Outcome::Gone,
        409 => Outcome::Conflict,
        422 if uid_changed => Outcome::Replaced,
        400 | 403 | 422 => Outcome::Refused,
        _ => Outcome::Retry,
    }
}

/// What the apiserver's error answer to the DELETE of a finished pod means, with the
/// `plegd_pod_deletions_total` result it is counted as. A 409 is the uid precondition failing:
/// the pod under that name is another one, so the finished one is gone.
fn delete_outcome(code: u16) -> (&'static str, Outcome) {
    match code {
        404 | 409 => ("gone", Outcome::Deleted),
        403 => ("forbidden", Outcome::Refused),
        400 | 422 => ("rejected", Outcome::Refused),
        _ => ("retry", Outcome::Retry),
    }
}

fn to_json(status: &PodStatus) -> Value {
    serde_json::to_value(status).unwrap_or(Value::Null)
}

/// The body of the status PATCH that brings the pod `uid` from `newest` — its status as the
/// apiserver holds it as far as plegd knows: the informer's copy, or plegd's own newer write — to
/// `desired` in `mode`; None when the apiserver already has what is wanted. What is wanted is
/// merged with `newest` first ([`rebase`]), so that a status decided from an older copy does not
/// undo what another writer put in since, and both sides are compared as the apiserver stores them
/// ([`canonical`]), so that only real changes are sent. In conditions mode only conditions are
/// written: the rest of the status is left out of both sides, neither copied nor compared.
fn write_body(mode: StatusMode, uid: &str, newest: Option<&PodStatus>, desired: &PodStatus) -> Option<Value> {
    let newest = match mode {
        StatusMode::Conditions => PodStatus {
            conditions: newest.and_then(|s| s.conditions.clone()),
            ..PodStatus::default()
        },
        StatusMode::Full | StatusMode::Shadow => newest.cloned().unwrap_or_default(),
    };
    let desired = rebase(mode, &newest, desired);
    status_patch_body(uid, &to_json(&canonical(&newest)), &to_json(&canonical(&desired)))
}

impl StatusManager {
    /// `retry_after` is where the apiserver client notes the waits the apiserver asks for
    /// (`Retry-After`): every PATCH and DELETE waits for it first.
    pub fn new(
        client: kube::Client,
        store: Store<ApiPod>,
        config: ManagerConfig,
        retry_after: Arc<RetryAfter>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            store,
            limiter: TokenBucket::new(config.qps, config.burst),
            retry_after,
            config,
            pods: Mutex::default(),
            queue: WorkQueue::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodState>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The manager's stages, to run supervised until cancelled: its writers.
    pub fn stages(self: &Arc<Self>) -> Vec<(&'static str, Stage)> {
        (0..self.config.writers.get())
            .map(|_| ("status-writer", Box::pin(self.clone().writer()) as Stage))
            .collect()
    }

    /// Wait until no status write is pending (never returns while one is).
    pub async fn flushed(&self) {
        self.queue.flushed().await;
    }

    /// plegd's own last write of `pod` while the informer's copy is older than it (then it is what
    /// the apiserver holds); once the informer has caught up with it, the copy is dropped.
    pub fn last_write(&self, pod: &ApiPod) -> Option<LastWrite> {
        let uid = pod.metadata.uid.as_deref()?;
        let mut pods = self.lock();
        let state = pods.get_mut(uid)?;
        if state.last_write.as_deref()?.ahead_of(pod) {
            return state.last_write.as_deref().cloned();
        }
        state.last_write = None;
        None
    }

    /// Want `status` for `pod` (the informer's copy), and, with `delete_when_written`, the pod
    /// deleted once it is written (`decide::Action::Write`). Returns whether a write was queued:
    /// a status equal to the one already wanted is not, nor one for a pod the apiserver is
    /// removing ([`removal_drops_write`]).
    pub fn set_status(&self, pod: &ApiPod, status: PodStatus, delete_when_written: bool) -> Result<bool, Unwritable> {
        let meta = &pod.metadata;
        let (Some(uid), Some(name), Some(namespace)) =
            (meta.uid.as_deref(), meta.name.as_deref(), meta.namespace.as_deref())
        else {
            return Err(Unwritable::Incomplete);
        };
        let bound = pod.spec.node_name.clone();
        if bound.as_deref() != Some(self.config.node_name.as_str()) {
            self.metrics.count_status_write("refused_other_node");
            return Err(Unwritable::OtherNode {
                namespace: namespace.into(),
                name: name.into(),
                bound,
                node: self.config.node_name.as_str().to_owned(),
            });
        }
        if removal_drops_write(self.config.mode, pod) {
            // Gone with the request that made this copy: a write would only be answered 404.
            return Ok(false);
        }
        let mut pods = self.lock();
        let last_write = pods.get(uid).and_then(|p| p.last_write.as_deref());
        let (hash, written) = wanted_keys(
            self.config.mode,
            apiserver_status(pod, last_write).0,
            &status,
            delete_when_written,
        );
        let state = pods.entry(uid.to_owned()).or_insert_with(|| PodState {
            wanted: None,
            last_write: None,
            pending_since: None,
            retries: None,
            refused: false,
            waiting_refused: false,
            deleted: false,
        });
        if state.deleted || state.wanted == Some(hash) {
            return Ok(false);
        }
        state.wanted = Some(hash);
        state.pending_since.get_or_insert_with(Instant::now);
        let work = Work {
            key: ObjectRef::new(name).within(namespace),
            status,
            delete_when_written,
            written,
        };
        // Under the lock, so that the queue and the state per pod change together.
        if std::mem::take(&mut state.waiting_refused) {
            self.queue.add_now(uid.to_owned(), work);
        } else {
            self.queue.add(uid.to_owned(), work);
        }
        Ok(true)
    }

    /// Hand this node's gated pods back to the kubelet (conditions mode, at shutdown, once the
    /// syncLoop has stopped): every pod whose readiness gates name plegd's condition and whose
    /// condition is plegd's gets it with the reason `KubeletReported`, so that the admission policy
    /// of deploy/components/readiness-gate makes it follow the kubelet until plegd is back
    /// ([`super::gate::handed_back`]). Returns how many writes were queued; nothing in the other
    /// modes (full: no kubelet to hand to; shadow: writes nothing).
    pub fn hand_back_gated_pods(&self) -> usize {
        if self.config.mode != StatusMode::Conditions {
            return 0;
        }
        let mut queued = 0;
        for pod in self.store.state() {
            if !super::gate::is_gated(&pod.spec.readiness_gates) {
                continue;
            }
            let last_write = self.last_write(&pod);
            let Some(status) = super::gate::handed_back(apiserver_status(&pod, last_write.as_ref()).0) else {
                continue;
            };
            match self.set_status(&pod, status, false) {
                Ok(true) => queued += 1,
                Ok(false) => {}
                Err(error) => debug!(error = %error, "gated pod not handed back"),
            }
        }
        queued
    }

    /// Give up the writes the apiserver refused and that wait for their slow retry (at shutdown:
    /// they would hold it for its whole timeout). Returns how many.
    pub fn give_up_refused(&self) -> usize {
        let mut pods = self.lock();
        let refused: Vec<String> = pods
            .iter()
            .filter(|(_, p)| p.waiting_refused)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &refused {
            pods.remove(uid);
            self.queue.forget(uid);
        }
        refused.len()
    }

    /// Forget a pod (it is gone): its pending write, if any, is not sent.
    pub fn forget(&self, uid: &str) {
        let mut pods = self.lock();
        pods.remove(uid);
        self.queue.forget(&uid.to_owned());
    }

    /// Whether the apiserver refused this pod's last write (its next refusal is not logged again).
    fn refused_before(&self, uid: &str) -> bool {
        self.lock().get(uid).is_some_and(|p| p.refused)
    }

    /// Pods with a status not yet written.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    async fn writer(self: Arc<Self>) {
        loop {
            let lease = self.queue.lease().await;
            let uid = lease.key().as_str();
            let work = lease.value();
            let mut outcome = self.write(uid, &work.status, &work.key).await;
            self.metrics.count_status_write(outcome.as_str());
            if work.delete_when_written && matches!(outcome, Outcome::Written | Outcome::NothingToSend) {
                outcome = self.delete_finished(uid, &work.key).await.unwrap_or(outcome);
            }
            self.finish(lease, outcome);
        }
    }

    /// Bookkeeping after a write: the pod's write is done, to be retried, or the pod is gone.
    fn finish(&self, lease: Lease<String, Work>, outcome: Outcome) {
        let uid = lease.key().clone();
        let mut pods = self.lock();
        match outcome {
            Outcome::Gone | Outcome::Replaced => {
                pods.remove(&uid);
                self.queue.forget(&uid);
                self.queue.done(lease);
            }
            Outcome::Deleted => {
                // Checked under the lock: the informer's store changes before the syncLoop hears
                // of it and forgets the pod, so a pod dropped after this check is forgotten after
                // it too, and no tombstone outlives the pod.
                let key = &lease.value().key;
                let shown = self
                    .store
                    .get(key)
                    .is_some_and(|p| p.metadata.uid.as_deref() == Some(uid.as_str()));
                match pods.get_mut(&uid) {
                    Some(state) if shown => {
                        state.deleted = true;
                        state.last_write = None;
                        state.pending_since = None;
                    }
                    _ => {
                        pods.remove(&uid);
                    }
                }
                self.queue.forget(&uid);
                self.queue.done(lease);
            }
            Outcome::Refused => match pods.get_mut(&uid) {
                // Sent again later while it is still wanted; a newer status replaces it meanwhile.
                Some(state) => {
                    let retries = state.retries.get_or_insert_with(|| Retries::of(&self.config));
                    retries.retry.reset();
                    state.refused = true;
                    // Unless a newer status came meanwhile: that one is sent now.
                    state.waiting_refused = !self.queue.has_newer(&lease);
                    if state.waiting_refused {
                        self.queue.retry_after(lease, retries.refused_retry.next_wait());
                    } else {
                        self.queue.retry_after(lease, Duration::ZERO);
                    }
                }
                None => {
                    self.queue.done(lease);
                }
            },
            Outcome::Written | Outcome::NothingToSend => {
                let written = lease.value().written;
                let more = self.queue.done(lease);
                let Some(state) = pods.get_mut(&uid) else { return };
                // On the apiserver now: a repeat of it is nothing new.
                if !more {
                    state.wanted = Some(written);
                }
                state.retries = None;
                state.refused = false;
                state.waiting_refused = false;
                if !more
                    && let Some(since) = state.pending_since.take()
                    && outcome == Outcome::Written
                {
                    self.metrics
                        .pod_status_sync_duration
                        .observe(since.elapsed().as_secs_f64());
                }
            }
            Outcome::Retry | Outcome::Conflict => match pods.get_mut(&uid) {
                Some(state) => {
                    let retries = state.retries.get_or_insert_with(|| Retries::of(&self.config));
                    self.queue.retry_after(lease, retries.retry.next_wait());
                }
                // Forgotten meanwhile: nothing to retry.
                None => {
                    self.queue.done(lease);
                }
            },
        }
    }

    /// The status manager's `canBeDeleted` and the DELETE that follows (full mode): a pod that is
    /// deleted, whose apiserver phase is terminal and whose final status plegd has written, is
    /// deleted with grace period 0 and its uid as a precondition (so that a pod recreated under the
    /// same name is never deleted). None when the pod is not there yet; else the outcome for the
    /// pod's bookkeeping.
    async fn delete_finished(&self, uid: &str, key: &ObjectRef<ApiPod>) -> Option<Outcome> {
        let (deleting, phase_terminal) = {
            let pod = self.store.get(key).filter(|p| p.metadata.uid.as_deref() == Some(uid))?;
            let pods = self.lock();
            let last_write = pods.get(uid).and_then(|p| p.last_write.as_deref());
            let (status, _) = apiserver_status(&pod, last_write);
            (
                pod.metadata.deletion_timestamp.is_some(),
                is_terminal(status.and_then(|s| s.phase.as_deref())),
            )
        };
        if !deleting || !phase_terminal {
            return None;
        }
        self.retry_after.wait().await;
        self.limiter.acquire().await;
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let Ok(answer) = tokio::time::timeout(self.config.request_timeout, api.delete(&key.name, &params)).await else {
            warn!(pod = %key, timeout = ?self.config.request_timeout, "deleting the finished pod got no answer in time; retrying on a new connection");
            self.metrics.count_pod_deletion("retry");
            return Some(Outcome::Retry);
        };
        let (result, outcome) = match answer {
            Ok(_) => {
                info!(pod = %key, "pod fully terminated and removed from the apiserver");
                ("ok", Outcome::Deleted)
            }
            Err(kube::Error::Api(status)) => {
                let (result, outcome) = delete_outcome(status.code);
                match outcome {
                    Outcome::Refused if !self.refused_before(uid) => {
                        if status.code == 403 {
                            warn!(pod = %key, message = %status.message, "plegd may not delete finished pods; grant it the plegd-full-mode ClusterRole (deploy/full/rbac-full-mode.yaml); trying again later");
                        } else {
                            warn!(pod = %key, code = status.code, message = %status.message, "apiserver refused to delete the finished pod; trying again later");
                        }
                    }
                    Outcome::Retry => {
                        debug!(pod = %key, code = status.code, message = %status.message, "deleting the finished pod failed; retrying");
                    }
                    _ => {}
                }
                (result, outcome)
            }
            Err(e) => {
                debug!(pod = %key, error = %e, "deleting the finished pod failed; retrying");
                ("retry", Outcome::Retry)
            }
        };
        self.metrics.count_pod_deletion(result);
        Some(outcome)
    }

    /// One PATCH, or none when the apiserver already has what is wanted.
    async fn write(&self, uid: &str, desired: &PodStatus, key: &ObjectRef<ApiPod>) -> Outcome {
        let Some(pod) = self.store.get(key) else {
            debug!(pod = %key, "pod is gone from the informer; dropping its status");
            return Outcome::Gone;
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            info!(pod = %key, "pod was recreated under another uid; dropping the old one's status");
            return Outcome::Gone;
        }
        if pod.spec.node_name.as_deref() != Some(self.config.node_name.as_str()) {
            warn!(pod = %key, "pod is no longer bound to this node; not writing its status");
            return Outcome::Gone;
        }
        if removal_drops_write(self.config.mode, &pod) {
            debug!(pod = %key, "pod is being removed (deleted with grace period 0, no finalizer); dropping its status");
            return Outcome::Gone;
        }
        let body = {
            let pods = self.lock();
            let last_write = pods.get(uid).and_then(|p| p.last_write.as_deref());
            write_body(self.config.mode, uid, apiserver_status(&pod, last_write).0, desired)
        };
        let Some(body) = body else {
            return Outcome::NothingToSend;
        };
        self.retry_after.wait().await;
        self.limiter.acquire().await;
        debug!(pod = %key, "sending the status");
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let (params, body) = (PatchParams::default(), Patch::Strategic(body));
        // The answer is the whole pod as stored; only its resourceVersion and status are kept.
        let patch = async {
            let request = kube::core::Request::new(<ApiPod as kube::Resource>::url_path(&(), Some(namespace)))
                .patch_subresource("status", &key.name, &params, &body)
                .map_err(kube::Error::BuildRequest)?;
            self.client.request::<WrittenPod>(request).await
        };
        let Ok(answer) = tokio::time::timeout(self.config.request_timeout, patch).await else {
            // Dropping the request closes its connection: the retry makes a new one.
            warn!(pod = %key, timeout = ?self.config.request_timeout, "status write got no answer in time; retrying on a new connection");
            return Outcome::Retry;
        };
        match answer {
            Ok(written) => {
                debug!(pod = %key, "status written");
                let resource_version = written.metadata.resource_version.clone().unwrap_or_default();
                if let Some(state) = self.lock().get_mut(uid) {
                    state.last_write = Some(Box::new(LastWrite {
                        status: written.status.unwrap_or_default(),
                        resource_version,
                    }));
                }
                Outcome::Written
            }
            Err(kube::Error::Api(status)) => match patch_outcome(status.code, uid_changed(&status)) {
                // A conflict: look at the informer again.
                Outcome::Conflict
                    if self.store.get(key).and_then(|p| p.metadata.uid.clone()).as_deref() != Some(uid) =>
                {
                    info!(pod = %key, "pod was replaced (deleted and created again under the same name); dropping the old one's status");
                    Outcome::Replaced
                }
                Outcome::Replaced => {
                    info!(pod = %key, "pod was replaced (deleted and created again under the same name); dropping the old one's status");
                    Outcome::Replaced
                }
                Outcome::Refused => {
                    if self.refused_before(uid) {
                        debug!(pod = %key, code = status.code, reason = %status.reason, message = %status.message, "apiserver refused the status again; sending it again later");
                    } else {
                        warn!(pod = %key, code = status.code, reason = %status.reason, message = %status.message, "apiserver refused the status; sending it again later (within 10 s, doubling to 2 min) while it is wanted");
                    }
                    Outcome::Refused
                }
                Outcome::Retry => {
                    debug!(pod = %key, code = status.code, message = %status.message, "status write failed; retrying");
                    Outcome::Retry
                }
                outcome => outcome,
            },
            Err(error) => {
                debug!(pod = %key, error = %error, "status write failed; retrying");
                Outcome::Retry
            }
        }
    }
}

/// A scripted apiserver for unit tests of the status writes: each request gets the next scripted
/// answer (else the default one), and what it was sent is kept.
#[cfg(test)]
pub(crate) mod script {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use http_body_util::BodyExt;
    use serde_json::Value;

    #[derive(Clone)]
    pub(crate) struct Script {
        answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
        default_answer: Value,
        sent: Arc<Mutex<Vec<(String, Value)>>>,
    }

    impl Script {
        /// `answers` first, then `default_answer` (with code 200) to every request.
        pub(crate) fn new(answers: &[(u16, Value)], default_answer: Value) -> Self {
            Self {
                answers: Arc::new(Mutex::new(answers.iter().cloned().collect())),
                default_answer,
                sent: Arc::default(),
            }
        }

        pub(crate) fn answering_by_default(default_answer: Value) -> Self {
            Self::new(&[], default_answer)
        }

        pub(crate) fn client(&self) -> kube::Client {
            let script = self.clone();
            let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let script = script.clone();
                async move {
                    let method = request.method().to_string();
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    script.sent.lock().unwrap().push((method, body));
                    let next = script.answers.lock().unwrap().pop_front();
                    let (code, answer) = next.unwrap_or_else(|| (200, script.default_answer.clone()));
                    let response = http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(serde_json::to_vec(&answer).unwrap()))
                        .unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            kube::Client::new(service, "default")
        }

        /// The requests sent: method and JSON body.
        pub(crate) fn sent(&self) -> Vec<(String, Value)> {
            self.sent.lock().unwrap().clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::script::Script;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    use crate::apiserver::pod::ApiPodSpec;

    fn pod_json() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "11"},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}})
    }

    fn failure(code: u16, reason: &str, message: &str, field: Option<&str>) -> (u16, Value) {
        let causes: Vec<Value> = field
            .map(|f| json!({"reason": "FieldValueInvalid", "field": f, "message": message}))
            .into_iter()
            .collect();
        let answer = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message, "details": {"name": "web", "kind": "pods", "causes": causes}});
        (code, answer)
    }

    fn api_pod(node: &str) -> ApiPod {
        ApiPod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                resource_version: Some("10".into()),
                ..ObjectMeta::default()
            },
            spec: ApiPodSpec {
                node_name: Some(node.into()),
                ..ApiPodSpec::default()
            },
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        }
    }

    /// The pod as the apiserver stores it once `wanted(marker)` is written.
    fn written_pod_json(marker: &str) -> Value {
        let mut pod = pod_json();
        pod["status"] = serde_json::to_value(wanted(marker)).unwrap();
        pod
    }

    /// A status that differs from another by `marker` (a condition's message).
    fn wanted(marker: &str) -> PodStatus {
        PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "plegd.io/ContainersRunning".into(),
                status: "True".into(),
                message: Some(marker.into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }
    }

    /// A manager of node n1 over an informer that holds `pod`, its writers running.
    fn manager(script: &Script, pod: &ApiPod, metrics: Arc<Metrics>) -> Arc<StatusManager> {
        let (store, mut writer) = reflector::store::<ApiPod>();
        writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
        let config = ManagerConfig {
            writers: NonZeroUsize::new(2).unwrap(),
            ..ManagerConfig::new(NodeName::new("n1").unwrap(), StatusMode::Conditions)
        };
        let manager = StatusManager::new(script.client(), store, config, Arc::new(RetryAfter::default()), metrics);
        for (_, stage) in manager.stages() {
            tokio::spawn(stage);
        }
        manager
    }

    /// A manager of node n1 in `mode` over `store`, its writers not started.
    fn manager_in(
        mode: StatusMode,
        script: &Script,
        store: Store<ApiPod>,
        metrics: Arc<Metrics>,
    ) -> Arc<StatusManager> {
        let config = ManagerConfig::new(NodeName::new("n1").unwrap(), mode);
        StatusManager::new(script.client(), store, config, Arc::new(RetryAfter::default()), metrics)
    }

    fn writes(metrics: &Metrics) -> Vec<String> {
        metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("plegd_status_writes_total{") && !l.ends_with(" 0"))
            .map(str::to_owned)
            .collect()
    }

    /// What the apiserver answers decides what becomes of the pod's write: retried with backoff,
    /// dropped as refused, or the pod's state forgotten.
    #[test]
    fn apiserver_error_codes_map_to_outcomes() {
        // (code, the 422 names metadata.uid, PATCH outcome, DELETE result and outcome)
        let table = [
            (400, false, Outcome::Refused, ("rejected", Outcome::Refused)),
            (403, false, Outcome::Refused, ("forbidden", Outcome::Refused)),
            (404, false, Outcome::Gone, ("gone", Outcome::Deleted)),
            (409, false, Outcome::Conflict, ("gone", Outcome::Deleted)),
            (422, false, Outcome::Refused, ("rejected", Outcome::Refused)),
            (422, true, Outcome::Replaced, ("rejected", Outcome::Refused)),
            (429, false, Outcome::Retry, ("retry", Outcome::Retry)),
            (500, false, Outcome::Retry, ("retry", Outcome::Retry)),
            (503, false, Outcome::Retry, ("retry", Outcome::Retry)),
            (504, false, Outcome::Retry, ("retry", Outcome::Retry)),
        ];
        for (code, uid, patch, delete) in table {
            assert_eq!(patch_outcome(code, uid), patch, "PATCH {code}");
            assert_eq!(delete_outcome(code), delete, "DELETE {code}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_answer_decides_retry_drop_or_forget() {
        let uid = "metadata.uid: Invalid value: \"u1\": field is immutable";
        // (case, the answers before a 200, PATCHes sent, the write results counted)
        type Case = (&'static str, Vec<(u16, Value)>, usize, &'static [&'static str]);
        let table: Vec<Case> = vec![
            ("written", vec![], 1, &["ok\"} 1"]),
            (
                "server errors and throttling are retried",
                vec![
                    failure(500, "InternalError", "boom", None),
                    failure(429, "TooManyRequests", "slow down", None),
                ],
                3,
                &["ok\"} 1", "retry\"} 2"],
            ),
            (
                "a conflict on the pod plegd knows is retried",
                vec![failure(409, "Conflict", "the object has been modified", None)],
                2,
                &["conflict\"} 1", "ok\"} 1"],
            ),
            (
                "gone",
                vec![failure(404, "NotFound", "not found", None)],
                1,
                &["gone\"} 1"],
            ),
            (
                "replaced under the same name",
                vec![failure(422, "Invalid", uid, Some("metadata.uid"))],
                1,
                &["replaced\"} 1"],
            ),
            (
                "refused, sent again on the slow schedule",
                vec![failure(
                    422,
                    "Invalid",
                    "status.podIP: Invalid value",
                    Some("status.podIP"),
                )],
                2,
                &["ok\"} 1", "rejected\"} 1"],
            ),
            (
                "forbidden for a while (RBAC propagating), then written",
                vec![
                    failure(403, "Forbidden", "pods \"web\" is forbidden", None),
                    failure(403, "Forbidden", "pods \"web\" is forbidden", None),
                    failure(403, "Forbidden", "pods \"web\" is forbidden", None),
                ],
                4,
                &["ok\"} 1", "rejected\"} 3"],
            ),
        ];
        for (case, answers, patches, counted) in table {
            // The apiserver answers a PATCH with the pod as it stores it: the condition in.
            let script = Script::new(&answers, written_pod_json("a"));
            let metrics = Arc::new(Metrics::new());
            let manager = manager(&script, &api_pod("n1"), metrics.clone());
            let started = tokio::time::Instant::now();
            assert_eq!(
                manager.set_status(&api_pod("n1"), wanted("a"), false),
                Ok(true),
                "{case}"
            );
            tokio::time::timeout(Duration::from_secs(600), manager.flushed())
                .await
                .unwrap_or_else(|_| panic!("{case}: not flushed"));
            let sent = script.sent();
            assert_eq!(sent.len(), patches, "{case}: {sent:?}");
            assert!(sent.iter().all(|(method, _)| method == "PATCH"), "{case}");
            let writes = writes(&metrics);
            assert_eq!(writes.len(), counted.len(), "{case}: {writes:?}");
            for count in counted {
                assert!(
                    writes.iter().any(|w| w.ends_with(count)),
                    "{case}: {count} in {writes:?}"
                );
            }
            // A refused write waits 5-10 s, then 10-20 s, ...: never a hot loop.
            if case.starts_with("forbidden") {
                assert!(
                    started.elapsed() >= Duration::from_secs(5 + 10 + 20),
                    "{case}: {:?}",
                    started.elapsed()
                );
            }
            // A repeat of the status wanted is nothing new, unless the pod was forgotten.
            let forgotten = matches!(case, "gone" | "replaced under the same name");
            assert_eq!(
                manager.set_status(&api_pod("n1"), wanted("a"), false),
                Ok(forgotten),
                "{case}"
            );
        }
    }

    /// A PATCH's answer keeps what the pod's own decode would of it: its resourceVersion and
    /// status (a real pod of kube-apiserver 1.37, its status written by the kubelet and plegd).
    #[test]
    fn a_patch_answer_keeps_the_version_and_status() {
        let stored = include_str!("../../tests/bench/fixtures/pod-1.37-status-writers.json");
        let written: WrittenPod = serde_json::from_str(stored).unwrap();
        let pod: ApiPod = serde_json::from_str(stored).unwrap();
        assert!(written.metadata.resource_version.is_some());
        assert_eq!(written.metadata.resource_version, pod.metadata.resource_version);
        assert!(written.status.as_ref().is_some_and(|s| s.conditions.is_some()));
        assert_eq!(written.status, pod.status);
        // A malformed status is still an error, not a status left out.
        let mut bad: Value = serde_json::from_str(stored).unwrap();
        bad["status"]["conditions"] = json!("not a list");
        assert!(serde_json::from_value::<WrittenPod>(bad).is_err());
    }

    fn status_of(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    /// The patch body: only what differs from the newest copy, the uid with it; nothing at all
    /// when the apiserver holds what is wanted, as it stores it.
    #[test]
    fn a_write_body_sends_only_what_differs() {
        let newest = status_of(json!({"phase": "Pending", "message": "", "podIPs": [],
            "conditions": [{"type": "Ready", "status": "False"}]}));
        let same = status_of(json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}));
        assert_eq!(write_body(StatusMode::Full, "u1", Some(&newest), &same), None);
        let running = status_of(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}));
        assert_eq!(
            write_body(StatusMode::Full, "u1", Some(&newest), &running),
            Some(json!({"metadata": {"uid": "u1"}, "status": {"phase": "Running"}}))
        );
        // A pod the apiserver has no status for yet: the whole of it.
        assert_eq!(
            write_body(StatusMode::Full, "u1", None, &running),
            Some(json!({"metadata": {"uid": "u1"}, "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}]}}))
        );
    }

    /// What another writer put in since the status was decided stays: a condition that is not
    /// the kubelet's is neither removed nor changed by a status decided without it.
    #[test]
    fn a_write_body_keeps_what_others_wrote_since() {
        let newest = status_of(json!({"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "example.com/Gate", "status": "True"}]}));
        let decided = status_of(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}));
        let body = write_body(StatusMode::Full, "u1", Some(&newest), &decided).unwrap();
        assert_eq!(body["status"]["phase"], "Running");
        let conditions = body["status"]["conditions"].as_array().unwrap();
        assert!(
            conditions.iter().all(|c| c["type"] != "example.com/Gate"),
            "another's condition is not touched: {body}"
        );
        assert!(
            conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"),
            "{body}"
        );
    }

    /// In conditions mode only plegd's condition is written: the rest of a decided status, the
    /// kubelet's, is neither sent nor compared.
    #[test]
    fn a_write_body_in_conditions_mode_is_plegds_condition_alone() {
        let own = |status: &str| json!({"type": CONTAINERS_RUNNING, "status": status});
        let newest =
            status_of(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, own("True")]}));
        let decided =
            status_of(json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}, own("True")]}));
        assert_eq!(
            write_body(StatusMode::Conditions, "u1", Some(&newest), &decided),
            None,
            "the kubelet's fields differ, plegd's condition does not"
        );
        let decided =
            status_of(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, own("False")]}));
        let body = write_body(StatusMode::Conditions, "u1", Some(&newest), &decided).unwrap();
        assert_eq!(body["metadata"]["uid"], "u1");
        let status = body["status"].as_object().unwrap();
        assert!(status.keys().all(|k| k.contains("conditions")), "{body}");
        assert_eq!(
            status["conditions"],
            json!([{"type": CONTAINERS_RUNNING, "status": "False"}]),
            "{body}"
        );
    }

    /// A status's hash tells a repeat from a change, and the delete flag counts.
    #[test]
    fn a_status_hash_tells_a_repeat_from_a_change() {
        let a = status_hash(&wanted("a"), false);
        assert_eq!(a, status_hash(&wanted("a"), false));
        assert_ne!(a, status_hash(&wanted("b"), false));
        assert_ne!(a, status_hash(&wanted("a"), true));
        assert_ne!(a, status_hash(&PodStatus::default(), false));
    }

    /// Conditions mode writes plegd's condition alone: a status that differs only in the kubelet's
    /// fields (which move with every write of the kubelet) is no new write, while a new condition,
    /// or the apiserver's copy losing it, is. In full mode every field is plegd's: any change is
    /// new.
    #[tokio::test(start_paused = true)]
    async fn a_repeat_is_what_the_mode_writes_of_a_status() {
        let kubelet_moved = |marker: &str, phase: &str| PodStatus {
            phase: Some(phase.into()),
            start_time: Some(crate::status::generate::api_time(std::time::UNIX_EPOCH)),
            ..wanted(marker)
        };
        for mode in [StatusMode::Conditions, StatusMode::Full] {
            let script = Script::answering_by_default(written_pod_json("a"));
            let (store, mut writer) = reflector::store::<ApiPod>();
            let mut pod = api_pod("n1");
            writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            let manager = manager_in(mode, &script, store, Arc::new(Metrics::new()));
            for (_, stage) in manager.stages() {
                tokio::spawn(stage);
            }
            assert_eq!(manager.set_status(&pod, wanted("a"), false), Ok(true), "{mode:?}");
            manager.flushed().await;
            assert_eq!(script.sent().len(), 1, "{mode:?}");
            // The informer catches up with the write, then the kubelet writes its own fields.
            pod.metadata.resource_version = Some("11".into());
            pod.status = Some(wanted("a"));
            writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            assert_eq!(manager.set_status(&pod, wanted("a"), false), Ok(false), "{mode:?}");
            pod.metadata.resource_version = Some("12".into());
            pod.status = Some(kubelet_moved("a", "Succeeded"));
            writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            let new = manager.set_status(&pod, kubelet_moved("a", "Succeeded"), false);
            assert_eq!(
                new,
                Ok(mode == StatusMode::Full),
                "{mode:?}: only plegd's condition is written"
            );
            manager.flushed().await;
            if mode == StatusMode::Full {
                continue;
            }
            // Someone removes plegd's condition: written again.
            pod.metadata.resource_version = Some("13".into());
            pod.status = Some(PodStatus {
                conditions: Some(vec![]),
                ..kubelet_moved("a", "Succeeded")
            });
            writer.apply_watcher_event(&watcher::Event::Apply(pod.clone()));
            let sent = script.sent().len();
            assert_eq!(
                manager.set_status(&pod, kubelet_moved("a", "Succeeded"), false),
                Ok(true),
                "{mode:?}"
            );
            manager.flushed().await;
            assert_eq!(script.sent().len(), sent + 1, "{mode:?}");
            // A new condition is new.
            assert_eq!(manager.set_status(&pod, wanted("b"), false), Ok(true), "{mode:?}");
        }
    }

    /// Statuses wanted faster than they are written: only the newest is sent, once.
    #[tokio::test(start_paused = true)]
    async fn only_the_newest_status_is_sent() {
        let script = Script::answering_by_default(pod_json());
        let metrics = Arc::new(Metrics::new());
        let manager = manager(&script, &api_pod("n1"), metrics);
        for marker in ["a", "b", "c"] {
            assert_eq!(manager.set_status(&api_pod("n1"), wanted(marker), false), Ok(true));
        }
        manager.flushed().await;
        let sent = script.sent();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(
            sent[0].1["status"]["conditions"][0]["message"], "c",
            "the newest: {sent:?}"
        );
        assert_eq!(manager.pending(), 0);
    }

    /// Never a write to a pod of another node, and a pod forgotten loses its pending write.
    #[tokio::test(start_paused = true)]
    async fn other_nodes_are_refused_and_forgotten_pods_are_not_written() {
        let script = Script::answering_by_default(pod_json());
        let metrics = Arc::new(Metrics::new());
        let manager = manager(&script, &api_pod("n1"), metrics.clone());
        let refused = manager.set_status(&api_pod("n2"), wanted("a"), false);
        assert!(matches!(refused, Err(Unwritable::OtherNode { .. })), "{refused:?}");
        assert!(writes(&metrics).iter().any(|w| w.contains("refused_other_node")));
        // Forgotten before a writer takes it.
        let script = Script::answering_by_default(pod_json());
        let (store, _writer) = reflector::store::<ApiPod>();
        let idle = StatusManager::new(
            script.client(),
            store,
            ManagerConfig::new(NodeName::new("n1").unwrap(), StatusMode::Conditions),
            Arc::new(RetryAfter::default()),
            Arc::new(Metrics::new()),
        );
        assert_eq!(idle.set_status(&api_pod("n1"), wanted("a"), false), Ok(true));
        assert_eq!(idle.pending(), 1);
        idle.forget("u1");
        assert_eq!(idle.pending(), 0);
        for (_, stage) in idle.stages() {
            tokio::spawn(stage);
        }
        idle.flushed().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(script.sent().is_empty(), "{:?}", script.sent());
    }

    /// A pod the apiserver is removing (deleted with grace period 0, no finalizer) is not written:
    /// neither a status decided from that copy nor one queued before it arrived; a finalizer
    /// keeps the pod, and its status is written.
    #[tokio::test(start_paused = true)]
    async fn a_pod_being_removed_is_not_written() {
        let removing = |finalizers: Option<Vec<String>>| {
            let mut pod = api_pod("n1");
            pod.metadata.resource_version = Some("12".into());
            pod.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            pod.metadata.deletion_grace_period_seconds = Some(0);
            pod.metadata.finalizers = finalizers;
            pod
        };
        for (finalizers, written) in [(None, false), (Some(vec!["example.com/keep".to_owned()]), true)] {
            let script = Script::answering_by_default(written_pod_json("a"));
            let metrics = Arc::new(Metrics::new());
            let (store, mut writer) = reflector::store::<ApiPod>();
            writer.apply_watcher_event(&watcher::Event::Apply(api_pod("n1")));
            let manager = manager_in(StatusMode::Conditions, &script, store, metrics.clone());
            // Queued from the copy before the deletion; the grace-0 copy arrives before it is sent.
            assert_eq!(manager.set_status(&api_pod("n1"), wanted("a"), false), Ok(true));
            writer.apply_watcher_event(&watcher::Event::Apply(removing(finalizers.clone())));
            assert_eq!(
                manager.set_status(&removing(finalizers.clone()), wanted("b"), false),
                Ok(written),
                "{finalizers:?}"
            );
            for (_, stage) in manager.stages() {
                tokio::spawn(stage);
            }
            manager.flushed().await;
            let sent = script.sent();
            if written {
                assert_eq!(sent.len(), 1, "{sent:?}");
                assert!(sent[0].1.to_string().contains("\"b\""), "the newest wanted: {sent:?}");
                assert!(
                    writes(&metrics).iter().any(|w| w.contains("\"ok\"")),
                    "{:?}",
                    writes(&metrics)
                );
            } else {
                assert!(sent.is_empty(), "nothing sent to a pod being removed: {sent:?}");
                assert_eq!(
                    writes(&metrics),
                    ["plegd_status_writes_total{result=\"gone\"} 1"],
                    "the queued write is dropped as gone"
                );
            }
        }
    }

    /// A write queued (or retried) while another writer changed the pod is merged with the
    /// newest copy when it is sent: it neither deletes a condition added since nor, in conditions
    /// mode, sends the kubelet's fields back.
    #[tokio::test(start_paused = true)]
    async fn a_queued_write_is_merged_with_the_newest_copy() {
        for mode in [StatusMode::Conditions, StatusMode::Full] {
            let script = Script::answering_by_default(pod_json());
            let (store, mut writer) = reflector::store::<ApiPod>();
            let decided_from = api_pod("n1");
            writer.apply_watcher_event(&watcher::Event::Apply(decided_from.clone()));
            let manager = manager_in(mode, &script, store, Arc::new(Metrics::new()));
            // Decided from a Pending copy without conditions.
            let mut wanted = wanted("a");
            wanted.phase = Some("Pending".into());
            assert_eq!(manager.set_status(&decided_from, wanted, false), Ok(true));
            // Before a writer takes it, the kubelet moves the phase on and a controller adds
            // DisruptionTarget.
            let mut newer = api_pod("n1");
            newer.metadata.resource_version = Some("12".into());
            newer.status = Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some("PreemptionByScheduler".into()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            });
            writer.apply_watcher_event(&watcher::Event::Apply(newer));
            for (_, stage) in manager.stages() {
                tokio::spawn(stage);
            }
            manager.flushed().await;
            let sent = script.sent();
            assert_eq!(sent.len(), 1, "{mode:?}: {sent:?}");
            let conditions = sent[0].1["status"]["conditions"].to_string();
            let body = sent[0].1.to_string();
            assert!(
                !conditions.contains("DisruptionTarget"),
                "{mode:?}: untouched, not deleted: {body}"
            );
            assert!(!body.contains("$patch"), "{mode:?}: {body}");
            if mode == StatusMode::Conditions {
                assert!(
                    !body.contains("phase"),
                    "{mode:?}: the kubelet's phase is not sent back: {body}"
                );
            }
            assert!(body.contains("plegd.io/ContainersRunning"), "{mode:?}: {body}");
        }
    }

    /// After a refusal, a newer status (a container died since) is sent at once, not after the
    /// refused one's slow retry; and shutdown does not wait for a refused write.
    #[tokio::test(start_paused = true)]
    async fn a_newer_status_does_not_wait_for_a_refused_one() {
        let forbidden = failure(403, "Forbidden", "pods \"web\" is forbidden", None);
        let script = Script::new(std::slice::from_ref(&forbidden), pod_json());
        let metrics = Arc::new(Metrics::new());
        let manager = manager(&script, &api_pod("n1"), metrics.clone());
        assert_eq!(manager.set_status(&api_pod("n1"), wanted("a"), false), Ok(true));
        while script.sent().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refused_at = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(manager.set_status(&api_pod("n1"), wanted("b"), false), Ok(true));
        manager.flushed().await;
        assert!(
            refused_at.elapsed() < Duration::from_secs(1),
            "{:?}",
            refused_at.elapsed()
        );
        let sent = script.sent();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[1].1["status"]["conditions"][0]["message"], "b");

        // A write that is refused and waits: given up at shutdown, so the flush does not wait.
        let script = Script::new(&[forbidden], pod_json());
        let manager = manager_of(&script, Arc::new(Metrics::new()));
        assert_eq!(manager.set_status(&api_pod("n1"), wanted("a"), false), Ok(true));
        while script.sent().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(manager.pending(), 1);
        assert_eq!(manager.give_up_refused(), 1);
        let started = tokio::time::Instant::now();
        manager.flushed().await;
        assert!(started.elapsed() < Duration::from_millis(10));
    }

    /// A finished pod is deleted once (full mode): statuses wanted after its DELETE was answered,
    /// while the informer still shows it, write nothing and delete nothing; once the informer drops
    /// it, nothing is kept. A DELETE that found the pod gone (404) ends it the same way.
    #[tokio::test(start_paused = true)]
    async fn a_deleted_pod_is_deleted_once() {
        // Deleted gracefully; or stored with grace period 0 and its removal failed (the apiserver's
        // update landed, its delete did not, or plegd's own DELETE timed out after it): no kubelet
        // sends that DELETE where plegd is the status manager.
        for grace in [None, Some(0)] {
            a_deleted_pod_with_grace_is_deleted_once(grace).await;
        }
    }

    async fn a_deleted_pod_with_grace_is_deleted_once(grace: Option<i64>) {
        let mut finished = api_pod("n1");
        finished.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        finished.metadata.deletion_grace_period_seconds = grace;
        finished.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..PodStatus::default()
        });
        let failed = |marker: &str| PodStatus {
            phase: Some("Failed".into()),
            ..wanted(marker)
        };
        // The PATCH's answer: the pod as the apiserver stores it after the write.
        let mut answer = pod_json();
        answer["metadata"]["deletionTimestamp"] = json!("1970-01-01T00:00:00Z");
        answer["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        answer["status"]["phase"] = json!("Failed");
        for (case, answers) in [
            ("removed", vec![]),
            (
                "gone already",
                vec![(200, answer.clone()), failure(404, "NotFound", "not found", None)],
            ),
        ] {
            let script = Script::new(&answers, answer.clone());
            let (store, mut writer) = reflector::store::<ApiPod>();
            writer.apply_watcher_event(&watcher::Event::Apply(finished.clone()));
            let metrics = Arc::new(Metrics::new());
            let manager = manager_in(StatusMode::Full, &script, store, metrics.clone());
            for (_, stage) in manager.stages() {
                tokio::spawn(stage);
            }
            assert_eq!(
                manager.set_status(&finished, failed("a"), true),
                Ok(true),
                "{case}, grace {grace:?}"
            );
            manager.flushed().await;
            let methods = || script.sent().into_iter().map(|(m, _)| m).collect::<Vec<_>>();
            assert_eq!(methods(), ["PATCH", "DELETE"], "{case}, grace {grace:?}");
            // A relist or a tick syncs the pod again before the informer hears of the deletion.
            for marker in ["a", "b"] {
                assert_eq!(
                    manager.set_status(&finished, failed(marker), true),
                    Ok(false),
                    "{case}, grace {grace:?}"
                );
            }
            manager.flushed().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(methods(), ["PATCH", "DELETE"], "{case}, grace {grace:?}");
            let result = if case == "removed" { "ok" } else { "gone" };
            let counted = format!("plegd_pod_deletions_total{{result=\"{result}\"}} 1");
            assert!(
                metrics.encode().contains(&counted),
                "{case}, grace {grace:?}: {counted}"
            );
            // The informer drops it: nothing is kept.
            writer.apply_watcher_event(&watcher::Event::Delete(finished.clone()));
            manager.forget("u1");
            assert!(manager.lock().is_empty(), "{case}, grace {grace:?}");
        }
    }

    fn manager_of(script: &Script, metrics: Arc<Metrics>) -> Arc<StatusManager> {
        manager(script, &api_pod("n1"), metrics)
    }

    /// The answer k8s.io/apiserver 1.36 gives a PATCH whose `metadata.uid` is not the stored pod's.
    #[test]
    fn a_refused_uid_is_a_replaced_pod() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Pod \"web\" is invalid: metadata.uid: Invalid value: \"u-old\": field is immutable",
            "details": {"name": "web", "kind": "Pod", "causes": [{"reason": "FieldValueInvalid",
                "message": "Invalid value: \"u-old\": field is immutable", "field": "metadata.uid"}]}
        }))
        .unwrap();
        assert!(uid_changed(&status));
        let other: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Pod \"web\" is invalid: status.podIPs: Invalid value: ...",
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": "status.podIPs"}]}
        }))
        .unwrap();
        assert!(
            !uid_changed(&other),
            "another invalid field is a refused status, not a replaced pod"
        );
    }
}
