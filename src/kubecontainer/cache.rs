//! The status cache: the newest runtime status of each pod with the time it was observed, plus a
//! global timestamp meaning "every pod's entry is at least this fresh", like the kubelet's
//! `container/cache.go`. It comes in two halves, as kube-runtime's reflector store does: a
//! [`CacheWriter`], which only the relister holds, and any number of [`CacheReader`]s. Readers may wait for a status newer than
//! a given time (`get_newer_than`); that is how a consumer of a lifecycle event makes sure it looks
//! at a status read after the event. Errors of a status read are cached too, so readers see them:
//! an entry with an error is not a fact about the pod (the kubelet's pod workers skip the sync and
//! record FailedSync), and its `status` is only the last good one, kept for the relister's IP rule.
//!
//! It never talks to the runtime itself and never makes a status up: an entry is a read the
//! relister made, or that read's error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::oneshot;

use crate::kubecontainer::{PodUid, RuntimePodStatus};

/// One cached entry: the status (or the error that reading it gave) and when it was observed.
#[derive(Debug, Clone)]
pub struct CachedStatus {
    /// The status read at `modified`; when `error` is set, the last status read successfully
    /// before it (empty if none was), which must not be taken for the pod's state now.
    pub status: Arc<RuntimePodStatus>,
    /// The error of the last status read, if it failed.
    pub error: Option<String>,
    pub modified: SystemTime,
}

impl CachedStatus {
    /// The status, if it was read successfully; else the error its read gave. Nothing may be
    /// generated from a failed read (the kubelet's FailedSync).
    pub fn read(&self) -> Result<&Arc<RuntimePodStatus>, &str> {
        match &self.error {
            None => Ok(&self.status),
            Some(error) => Err(error),
        }
    }
}

#[derive(Default)]
struct Inner {
    pods: HashMap<PodUid, CachedStatus>,
    /// None until the first complete relist.
    timestamp: Option<SystemTime>,
    subscribers: HashMap<PodUid, Vec<(SystemTime, oneshot::Sender<CachedStatus>)>>,
    /// Pods found gone by a read of their own (a targeted relist), and when: until the next
    /// complete relist, their empty status is that new.
    gone: HashMap<PodUid, SystemTime>,
}

/// The cache both halves share.
#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
}

/// The reading half of the status cache; clones read the same cache.
#[derive(Clone, Default)]
pub struct CacheReader {
    shared: Arc<Shared>,
}

/// The writing half of the status cache: the relister's alone (it is not `Clone`). It reads too.
#[derive(Default)]
pub struct CacheWriter {
    reader: CacheReader,
}

fn default_entry(id: &str, modified: SystemTime) -> CachedStatus {
    CachedStatus {
        status: Arc::new(RuntimePodStatus {
            id: id.to_owned(),
            ..RuntimePodStatus::default()
        }),
        error: None,
        modified,
    }
}

impl Inner {
    fn get(&self, id: &str) -> CachedStatus {
        self.pods
            .get(id)
            .cloned()
            .unwrap_or_else(|| default_entry(id, SystemTime::UNIX_EPOCH))
    }

    /// `cache.getIfNewerThan`: the entry if it (or the whole cache) is strictly newer than `min`.
    fn get_if_newer_than(&self, id: &str, min: SystemTime) -> Option<CachedStatus> {
        let global_newer = self.timestamp.is_some_and(|t| t > min);
        let gone_newer = self.gone.get(id).is_some_and(|t| *t > min);
        match self.pods.get(id) {
            None if global_newer || gone_newer => Some(default_entry(id, SystemTime::UNIX_EPOCH)),
            Some(entry) if entry.modified > min || global_newer => Some(entry.clone()),
            _ => None,
        }
    }

    /// Wake the waiters of `id` whose time is not after `timestamp` (`cache.notify`).
    fn notify(&mut self, id: &str, timestamp: SystemTime) {
        let Some(waiters) = self.subscribers.remove(id) else {
            return;
        };
        let mut keep = Vec::new();
        for (min, tx) in waiters {
            if timestamp < min {
                keep.push((min, tx));
            } else {
                // A waiter that gave up has dropped its receiver; nothing to do.
                let _ = tx.send(self.get(id));
            }
        }
        if !keep.is_empty() {
            self.subscribers.insert(id.to_owned(), keep);
        }
    }
}

impl CacheReader {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached entry; on a miss, an empty status (no containers), as the kubelet does.
    pub fn get(&self, id: &str) -> CachedStatus {
        self.lock().get(id)
    }

    /// Whether the pod has an entry.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().pods.contains_key(id)
    }

    /// The global timestamp: every entry is at least as fresh as this. None before the first relist.
    pub fn timestamp(&self) -> Option<SystemTime> {
        self.lock().timestamp
    }

    /// The entry if it, or the cache as a whole, is strictly newer than `min`; None otherwise (the
    /// non-waiting half of [`CacheReader::get_newer_than`]).
    pub fn try_get_newer_than(&self, id: &str, min: SystemTime) -> Option<CachedStatus> {
        self.lock().get_if_newer_than(id, min)
    }

    /// A status observed strictly after `min`: returns at once if the pod's entry, or the cache as a
    /// whole, is newer than `min`; otherwise waits until one is. Before the first complete relist it
    /// always waits.
    pub async fn get_newer_than(&self, id: &str, min: SystemTime) -> CachedStatus {
        let rx = {
            let mut inner = self.lock();
            if let Some(entry) = inner.get_if_newer_than(id, min) {
                return entry;
            }
            let (tx, rx) = oneshot::channel();
            inner.subscribers.entry(id.to_owned()).or_default().push((min, tx));
            rx
        };
        // The sender lives in the cache, which outlives every borrow of it; a dropped sender can
        // only mean the cache itself is gone, and then the best answer is the empty status.
        rx.await.unwrap_or_else(|_| default_entry(id, SystemTime::UNIX_EPOCH))
    }
}

impl CacheWriter {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A reader of this cache.
    pub fn reader(&self) -> &CacheReader {
        &self.reader
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.reader.lock()
    }

    /// The cached entry; on a miss, an empty status (no containers).
    pub fn get(&self, id: &str) -> CachedStatus {
        self.reader.get(id)
    }

    /// Store a status (or the error reading it gave) observed at `timestamp`.
    pub fn set(&self, id: &str, status: Result<RuntimePodStatus, String>, timestamp: SystemTime) {
        let mut inner = self.lock();
        let entry = match status {
            Ok(status) => CachedStatus {
                status: Arc::new(status),
                error: None,
                modified: timestamp,
            },
            Err(error) => CachedStatus {
                // A failed read adds nothing: the entry keeps the last good status beside the
                // error, so that a dead pod's IPs survive a failed read (the kubelet keeps whatever
                // partial status the runtime returned, usually none).
                status: inner.get(id).status,
                error: Some(error),
                modified: timestamp,
            },
        };
        inner.gone.remove(id);
        inner.pods.insert(id.to_owned(), entry);
        inner.notify(id, timestamp);
    }

    /// Forget a pod that a read at `timestamp` found gone from the runtime: its waiters are woken
    /// with the empty status (a pod that vanishes in a targeted relist must not wait for the next
    /// complete one), and until then it counts as that new.
    pub fn delete(&self, id: &str, timestamp: SystemTime) {
        let mut inner = self.lock();
        inner.pods.remove(id);
        inner.gone.insert(id.to_owned(), timestamp);
        inner.notify(id, timestamp);
    }

    /// Move the global timestamp (after a complete relist) and wake every waiter it satisfies.
    pub fn update_time(&self, timestamp: SystemTime) {
        let mut inner = self.lock();
        inner.timestamp = Some(timestamp);
        // The complete relist covers every pod it did not find.
        inner.gone.retain(|_, t| *t > timestamp);
        let ids: Vec<PodUid> = inner.subscribers.keys().cloned().collect();
        for id in ids {
            inner.notify(&id, timestamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn status(id: &str, ip: &str) -> RuntimePodStatus {
        RuntimePodStatus {
            id: id.into(),
            ips: vec![ip.into()],
            ..RuntimePodStatus::default()
        }
    }

    async fn ready_now(cache: &CacheReader, id: &str, min: SystemTime) -> Option<CachedStatus> {
        tokio::time::timeout(Duration::from_millis(20), cache.get_newer_than(id, min))
            .await
            .ok()
    }

    #[test]
    fn miss_returns_empty_status() {
        let cache = CacheWriter::new();
        let got = cache.get("u1");
        assert_eq!(got.status.id, "u1");
        assert!(got.status.container_statuses.is_empty());
        assert!(got.error.is_none());
    }

    #[tokio::test]
    async fn waits_before_first_global_update_even_for_absent_pods() {
        let cache = CacheWriter::new();
        assert!(ready_now(cache.reader(), "u1", t(0)).await.is_none());
    }

    #[tokio::test]
    async fn cached_and_modified_after_min_returns_at_once() {
        let cache = CacheWriter::new();
        cache.set("u1", Ok(status("u1", "10.0.0.1")), t(10));
        let got = ready_now(cache.reader(), "u1", t(9)).await.expect("newer entry");
        assert_eq!(got.status.ips, ["10.0.0.1"]);
        // Equal is not newer.
        assert!(ready_now(cache.reader(), "u1", t(10)).await.is_none());
    }

    #[tokio::test]
    async fn global_timestamp_newer_serves_stale_entries_and_absent_pods() {
        let cache = CacheWriter::new();
        cache.set("u1", Ok(status("u1", "10.0.0.1")), t(5));
        cache.update_time(t(20));
        let got = ready_now(cache.reader(), "u1", t(15)).await.expect("global newer");
        assert_eq!(got.modified, t(5));
        let absent = ready_now(cache.reader(), "u2", t(15))
            .await
            .expect("absent but global newer");
        assert!(absent.status.container_statuses.is_empty());
        assert!(ready_now(cache.reader(), "u2", t(20)).await.is_none());
    }

    #[tokio::test]
    async fn set_wakes_waiters_whose_time_is_not_after_it() {
        let cache = CacheWriter::new();
        let reader = cache.reader().clone();
        let early = tokio::spawn({
            let reader = reader.clone();
            async move { reader.get_newer_than("u1", t(10)).await }
        });
        let late = tokio::spawn({
            let reader = reader.clone();
            async move { reader.get_newer_than("u1", t(30)).await }
        });
        tokio::task::yield_now().await;
        while cache.lock().subscribers.get("u1").map_or(0, Vec::len) < 2 {
            tokio::task::yield_now().await;
        }
        // Notification fires when the new time >= the waiter's time.
        cache.set("u1", Ok(status("u1", "10.0.0.9")), t(10));
        let got = early.await.unwrap();
        assert_eq!(got.status.ips, ["10.0.0.9"]);
        assert!(!late.is_finished());
        cache.update_time(t(30));
        assert_eq!(late.await.unwrap().modified, t(10));
    }

    #[tokio::test]
    async fn errors_are_cached_beside_the_last_good_status() {
        let cache = CacheWriter::new();
        cache.set("u1", Err("runtime said no".into()), t(3));
        let got = cache.get("u1");
        assert_eq!(got.error.as_deref(), Some("runtime said no"));
        assert_eq!(got.modified, t(3));
        assert!(got.status.container_statuses.is_empty() && got.status.ips.is_empty());
        cache.set("u1", Ok(status("u1", "10.0.0.1")), t(4));
        cache.set("u1", Err("busy".into()), t(5));
        let got = cache
            .reader()
            .try_get_newer_than("u1", t(4))
            .expect("the error entry is newer");
        assert_eq!((got.error.as_deref(), got.modified), (Some("busy"), t(5)));
        assert_eq!(
            got.status.ips,
            ["10.0.0.1"],
            "the last good status is kept beside the error"
        );
        assert!(cache.reader().try_get_newer_than("u1", t(5)).is_none());
        cache.delete("u1", t(6));
        assert!(!cache.reader().contains("u1"));
    }

    /// A pod found gone by a read of its own wakes its waiters with the empty status, and counts
    /// as that new until the next complete relist (kubelet: only the complete relist's UpdateTime
    /// would serve them).
    #[tokio::test]
    async fn a_pod_gone_between_complete_relists_serves_its_waiters() {
        let cache = CacheWriter::new();
        cache.update_time(t(1));
        cache.set("u1", Ok(status("u1", "10.0.0.1")), t(2));
        let waiting = {
            let cache = &cache;
            async move { cache.reader().get_newer_than("u1", t(2)).await }
        };
        tokio::pin!(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        cache.delete("u1", t(3));
        let got = waiting.await;
        assert!(got.status.container_statuses.is_empty());
        assert!(
            cache.reader().try_get_newer_than("u1", t(2)).is_some(),
            "gone at t(3): newer than t(2)"
        );
        assert!(cache.reader().try_get_newer_than("u1", t(3)).is_none());
        cache.update_time(t(4));
        assert!(cache.lock().gone.is_empty(), "the complete relist covers it");
    }
}
