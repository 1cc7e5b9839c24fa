//! A keyed work queue, the shape of client-go's `workqueue` and kube-runtime's controller runner,
//! for work that is per object and where only the object's newest state matters:
//!
//! - **newest value per key wins**: [`WorkQueue::add`] for a key that already holds work replaces
//!   that work; a key is queued once however often it is added;
//! - **at most one lease per key**: a key being worked on ([`Lease`]) is not handed out again until
//!   its lease ends; work added for it meanwhile waits, and is handed out after;
//! - **a lease ends** with [`WorkQueue::done`] (the key comes back only if newer work came) or
//!   [`WorkQueue::retry_after`] (the key comes back after a delay, with the newest work: the lease's
//!   own unless newer came); a lease dropped without either is retried at once, so that a worker
//!   that is cancelled loses nothing;
//! - [`WorkQueue::forget`] drops a key's work (a lease out keeps working, but brings nothing back);
//! - [`WorkQueue::flushed`] waits until no key holds work: none queued, leased or waiting to retry.
//!
//! Workers call [`WorkQueue::lease`] in a loop; retries fall due inside it, so the queue needs no
//! task of its own. Time is tokio's, so tests run it paused.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// One key's place in the queue.
struct Slot<V> {
    /// The newest work not yet handed out.
    value: Option<V>,
    /// A lease on the key is out.
    leased: bool,
    /// The key is in the ready queue.
    queued: bool,
    /// The key waits to be retried at this time.
    retry_at: Option<Instant>,
    /// The key was forgotten while leased: its lease brings nothing back.
    forgotten: bool,
}

impl<V> Slot<V> {
    fn new() -> Self {
        Self {
            value: None,
            leased: false,
            queued: false,
            retry_at: None,
            forgotten: false,
        }
    }
}

struct Inner<K, V> {
    slots: HashMap<K, Slot<V>>,
    ready: VecDeque<K>,
    /// Retries by due time; an entry whose key no longer waits for that time is stale and skipped.
    retries: BinaryHeap<Reverse<(Instant, K)>>,
}

struct Shared<K, V> {
    inner: Mutex<Inner<K, V>>,
    /// A key became ready, or a retry was scheduled (which may be the earliest).
    work: Notify,
    /// A key's work ended (for [`WorkQueue::flushed`]).
    idle: Notify,
}

/// The queue; cloning it gives another handle on the same queue.
pub struct WorkQueue<K, V> {
    shared: Arc<Shared<K, V>>,
}

impl<K, V> Clone for WorkQueue<K, V> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// The right to work on one key, with the work handed out. End it with [`WorkQueue::done`] or
/// [`WorkQueue::retry_after`]; dropped without either, the key is retried at once.
pub struct Lease<K: Clone + Eq + Hash + Ord, V> {
    key: K,
    value: Option<V>,
    queue: WorkQueue<K, V>,
}

impl<K: Clone + Eq + Hash + Ord, V> Lease<K, V> {
    pub fn key(&self) -> &K {
        &self.key
    }

    pub fn value(&self) -> &V {
        // Only `WorkQueue::end` takes the value, and it consumes the lease.
        self.value.as_ref().expect("a lease holds its value until it ends")
    }
}

impl<K: Clone + Eq + Hash + Ord, V> Drop for Lease<K, V> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            self.queue.end(&self.key, Some(value), Some(Duration::ZERO));
        }
    }
}

impl<K: Clone + Eq + Hash + Ord, V> Default for WorkQueue<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Ord, V> WorkQueue<K, V> {
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    slots: HashMap::new(),
                    ready: VecDeque::new(),
                    retries: BinaryHeap::new(),
                }),
                work: Notify::new(),
                idle: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<K, V>> {
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Want `value` done for `key`: it replaces work the key already holds; the key is queued
    /// unless it is leased (it comes back when the lease ends) or waits to be retried (it comes
    /// back then, with this value).
    pub fn add(&self, key: K, value: V) {
        let mut inner = self.lock();
        let slot = inner.slots.entry(key.clone()).or_insert_with(Slot::new);
        slot.value = Some(value);
        if slot.leased || slot.queued || slot.retry_at.is_some() {
            return;
        }
        slot.queued = true;
        inner.ready.push_back(key);
        drop(inner);
        self.shared.work.notify_one();
    }

    /// Like [`WorkQueue::add`], but a key that waits to be retried is queued at once: new work
    /// that must not wait out the backoff of the work it replaces.
    pub fn add_now(&self, key: K, value: V) {
        let mut inner = self.lock();
        if let Some(slot) = inner.slots.get_mut(&key) {
            // Its entry in the retries goes stale and is skipped.
            slot.retry_at = None;
        }
        drop(inner);
        self.add(key, value);
    }

    /// Drop `key`'s work. A lease out on it keeps working, but its end brings nothing back.
    pub fn forget(&self, key: &K) {
        let mut inner = self.lock();
        let Some(slot) = inner.slots.get_mut(key) else { return };
        if slot.leased {
            *slot = Slot {
                leased: true,
                forgotten: true,
                ..Slot::new()
            };
        } else {
            inner.remove(key);
        }
        inner.ready.retain(|k| k != key);
        drop(inner);
        self.shared.idle.notify_waiters();
    }

    /// The next key ready to work on, with its newest work: waits until there is one.
    pub async fn lease(&self) -> Lease<K, V> {
        loop {
            let notified = self.shared.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_retry = {
                let mut inner = self.lock();
                inner.promote_due(Instant::now());
                if let Some((key, value)) = inner.take_ready() {
                    return Lease {
                        key,
                        value: Some(value),
                        queue: self.clone(),
                    };
                }
                inner.next_retry()
            };
            match next_retry {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = &mut notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// End a lease: the work is done (or given up). The key comes back only if newer work came
    /// meanwhile; returns whether it did.
    pub fn done(&self, mut lease: Lease<K, V>) -> bool {
        lease.value = None;
        self.end(&lease.key, None, None)
    }

    /// End a lease: the work failed and is tried again after `delay`, with the newest work for the
    /// key (the lease's own unless newer came).
    pub fn retry_after(&self, mut lease: Lease<K, V>, delay: Duration) {
        let value = lease.value.take();
        self.end(&lease.key, value, Some(delay));
    }

    /// The end of a lease on `key`; `retry`: when to hand the key out again, with `value` unless
    /// newer work came. Returns whether the key holds work again.
    fn end(&self, key: &K, value: Option<V>, retry: Option<Duration>) -> bool {
        let mut inner = self.lock();
        let Some(slot) = inner.slots.get_mut(key) else {
            return false;
        };
        slot.leased = false;
        let retry = if slot.forgotten {
            // Only work added since counts, and it has waited for nothing.
            slot.forgotten = false;
            None
        } else {
            if retry.is_some() && slot.value.is_none() {
                slot.value = value;
            }
            retry
        };
        let more = slot.value.is_some();
        if !more {
            inner.remove(key);
        } else {
            match retry {
                Some(delay) if !delay.is_zero() => {
                    let at = Instant::now() + delay;
                    slot.retry_at = Some(at);
                    inner.retries.push(Reverse((at, key.clone())));
                }
                _ => {
                    slot.queued = true;
                    inner.ready.push_back(key.clone());
                }
            }
        }
        drop(inner);
        if more {
            self.shared.work.notify_one();
        }
        self.shared.idle.notify_waiters();
        more
    }

    /// Whether newer work for `lease`'s key came while the lease was out.
    pub fn has_newer(&self, lease: &Lease<K, V>) -> bool {
        self.lock().slots.get(&lease.key).is_some_and(|s| s.value.is_some())
    }

    /// Keys that hold work: queued, leased or waiting to be retried.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait until no key holds work (never returns while one does).
    pub async fn flushed(&self) {
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.is_empty() {
                return;
            }
            idle.await;
        }
    }
}

/// Below this many slots' room a table is not shrunk: too small to matter.
const SHRINK_FROM: usize = 64;

impl<K: Clone + Eq + Hash + Ord, V> Inner<K, V> {
    /// Drop `key`'s slot. A table left at a quarter of its room or less (a burst of work drained:
    /// plegd's first sync queues every pod's status at once) is shrunk to twice what it holds, so
    /// that an idle queue does not keep the burst's memory.
    fn remove(&mut self, key: &K) {
        self.slots.remove(key);
        if self.slots.capacity() >= SHRINK_FROM && self.slots.len() * 4 <= self.slots.capacity() {
            self.slots.shrink_to(self.slots.len() * 2);
            self.ready.shrink_to(self.ready.len() * 2);
            self.retries.shrink_to(self.retries.len() * 2);
        }
    }

    /// Move the retries due by `now` to the ready queue.
    fn promote_due(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.retries.peek()
            && *at <= now
        {
            let Some(Reverse((at, key))) = self.retries.pop() else {
                break;
            };
            let Some(slot) = self.slots.get_mut(&key) else { continue };
            if slot.retry_at != Some(at) {
                continue;
            }
            slot.retry_at = None;
            if !slot.leased && !slot.queued && slot.value.is_some() {
                slot.queued = true;
                self.ready.push_back(key);
            }
        }
    }

    fn take_ready(&mut self) -> Option<(K, V)> {
        while let Some(key) = self.ready.pop_front() {
            let Some(slot) = self.slots.get_mut(&key) else { continue };
            slot.queued = false;
            let Some(value) = slot.value.take() else { continue };
            slot.leased = true;
            return Some((key, value));
        }
        None
    }

    /// When the earliest retry that still counts is due.
    fn next_retry(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, key))) = self.retries.peek() {
            if self.slots.get(key).is_some_and(|s| s.retry_at == Some(*at)) {
                return Some(*at);
            }
            self.retries.pop();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn queue() -> WorkQueue<&'static str, u32> {
        WorkQueue::new()
    }

    /// A burst of work drained leaves a small table, not the burst's room; work on is unchanged.
    #[tokio::test(start_paused = true)]
    async fn a_drained_burst_gives_its_memory_back() {
        let q: WorkQueue<u32, [u8; 512]> = WorkQueue::new();
        let room = |q: &WorkQueue<u32, [u8; 512]>| q.lock().slots.capacity();
        for key in 0..1000 {
            q.add(key, [0; 512]);
        }
        let burst = room(&q);
        assert!(burst >= 1000, "{burst}");
        let mut leases = Vec::new();
        while let Some(lease) = q.lease().now_or_never() {
            leases.push(lease);
        }
        assert_eq!(leases.len(), 1000);
        let kept = leases.split_off(990);
        for lease in leases {
            assert!(!q.done(lease));
        }
        assert_eq!(q.len(), 10);
        assert!(room(&q) < burst / 8, "{} of {burst}", room(&q));
        q.add(995, [1; 512]);
        for lease in kept {
            let key = *lease.key();
            assert_eq!(q.done(lease), key == 995, "{key}");
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.lease().now_or_never().map(|l| *l.key()), Some(995));
    }

    /// New work added "now" does not wait out the backoff of the work it replaces; added
    /// otherwise, it does.
    #[tokio::test(start_paused = true)]
    async fn add_now_cuts_a_retry_wait_short() {
        let q = queue();
        q.add("a", 1);
        let lease = q.lease().await;
        q.retry_after(lease, Duration::from_secs(60));
        q.add("a", 2);
        assert!(ready(&q).is_none(), "add waits for the retry");
        q.add_now("a", 3);
        let lease = ready(&q).expect("add_now does not");
        assert_eq!(*lease.value(), 3);
        q.done(lease);
        // The stale retry entry brings nothing back.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(ready(&q).is_none());
        assert!(q.is_empty());
    }

    /// A lease that is ready now, or None.
    fn ready(q: &WorkQueue<&'static str, u32>) -> Option<Lease<&'static str, u32>> {
        q.lease().now_or_never()
    }

    #[tokio::test(start_paused = true)]
    async fn the_newest_value_per_key_wins_and_a_key_is_queued_once() {
        let q = queue();
        q.add("a", 1);
        q.add("b", 1);
        q.add("a", 2);
        assert_eq!(q.len(), 2);
        let first = ready(&q).unwrap();
        assert_eq!((*first.key(), *first.value()), ("a", 2));
        let second = ready(&q).unwrap();
        assert_eq!((*second.key(), *second.value()), ("b", 1));
        assert!(ready(&q).is_none(), "a is queued once");
        assert!(!q.done(first));
        assert!(!q.done(second));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leased_key_is_not_handed_out_again_until_its_lease_ends() {
        let q = queue();
        q.add("a", 1);
        let lease = ready(&q).unwrap();
        q.add("a", 2);
        q.add("a", 3);
        assert!(ready(&q).is_none(), "one lease per key");
        assert!(q.done(lease), "newer work came meanwhile");
        let next = ready(&q).unwrap();
        assert_eq!(*next.value(), 3, "only the newest");
        assert!(!q.done(next));
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_comes_back_after_its_delay_with_the_newest_value() {
        let q = queue();
        q.add("a", 1);
        let lease = ready(&q).unwrap();
        q.retry_after(lease, Duration::from_secs(2));
        assert_eq!(q.len(), 1, "a waiting retry is work held");
        assert!(ready(&q).is_none());
        q.add("a", 2);
        assert!(ready(&q).is_none(), "adding does not cut the wait short");
        let start = Instant::now();
        let lease = q.lease().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(*lease.value(), 2);
        // Without newer work, the lease's own value comes back.
        q.retry_after(lease, Duration::from_secs(1));
        let lease = q.lease().await;
        assert_eq!(*lease.value(), 2);
        assert!(!q.done(lease));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_fall_due_in_order_and_ready_keys_do_not_wait_for_them() {
        let q = queue();
        for key in ["late", "early"] {
            q.add(key, 0);
        }
        let late = ready(&q).unwrap();
        let early = ready(&q).unwrap();
        q.retry_after(late, Duration::from_secs(5));
        q.retry_after(early, Duration::from_secs(1));
        q.add("now", 0);
        let start = Instant::now();
        let order: Vec<_> = [(); 3]
            .into_iter()
            .map(|()| {
                let lease = q.lease();
                async move {
                    let lease = lease.await;
                    let key = *lease.key();
                    lease.queue.clone().done(lease);
                    (key, start.elapsed().as_secs())
                }
            })
            .collect();
        let mut seen = Vec::new();
        for next in order {
            seen.push(next.await);
        }
        assert_eq!(seen, [("now", 0), ("early", 1), ("late", 5)]);
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn forget_drops_the_work_and_what_a_lease_out_would_bring_back() {
        let q = queue();
        q.add("a", 1);
        q.add("b", 1);
        q.forget(&"b");
        let lease = ready(&q).unwrap();
        assert_eq!(*lease.key(), "a");
        assert!(ready(&q).is_none(), "b is gone");
        q.add("a", 2);
        q.forget(&"a");
        assert!(!q.done(lease), "nothing comes back");
        assert!(q.is_empty());
        // Forgotten while leased, then added again: one lease at a time still.
        q.add("a", 3);
        let lease = ready(&q).unwrap();
        q.forget(&"a");
        q.add("a", 4);
        assert!(ready(&q).is_none(), "the old lease is still out");
        q.retry_after(lease, Duration::from_secs(1));
        let next = ready(&q).unwrap();
        assert_eq!(
            *next.value(),
            4,
            "the new work, at once: the forgotten lease's retry does not count"
        );
        assert!(!q.done(next));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_lease_is_retried_at_once() {
        let q = queue();
        q.add("a", 1);
        drop(ready(&q).unwrap());
        let again = ready(&q).unwrap();
        assert_eq!(*again.value(), 1, "a cancelled worker loses nothing");
        assert!(!q.done(again));
    }

    #[tokio::test(start_paused = true)]
    async fn flushed_waits_for_every_key_queued_leased_or_retrying() {
        let q = queue();
        assert!(q.flushed().now_or_never().is_some(), "empty: flushed at once");
        q.add("a", 1);
        let flushed = q.flushed();
        tokio::pin!(flushed);
        assert!(futures_util::poll!(flushed.as_mut()).is_pending(), "queued");
        let lease = ready(&q).unwrap();
        assert!(futures_util::poll!(flushed.as_mut()).is_pending(), "leased");
        q.retry_after(lease, Duration::from_secs(3));
        assert!(futures_util::poll!(flushed.as_mut()).is_pending(), "waiting to retry");
        let lease = q.lease().await;
        q.done(lease);
        flushed.await;
    }

    /// Many workers, one key added again and again: never two leases at once, and the last value
    /// added is the last one worked on.
    #[tokio::test(start_paused = true)]
    async fn workers_never_hold_one_key_twice() {
        let q: WorkQueue<u8, u32> = WorkQueue::new();
        let busy = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let last = Arc::new(Mutex::new(HashMap::new()));
        let retried = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, busy, last, retried) = (q.clone(), busy.clone(), last.clone(), retried.clone());
            workers.push(tokio::spawn(async move {
                loop {
                    let lease = q.lease().await;
                    let key = *lease.key();
                    assert!(busy.lock().unwrap().insert(key), "key {key} leased twice");
                    tokio::time::sleep(Duration::from_millis(u64::from(*lease.value() % 7))).await;
                    last.lock().unwrap().insert(key, *lease.value());
                    busy.lock().unwrap().remove(&key);
                    if lease.value() % 5 == 0 && retried.lock().unwrap().insert(*lease.value()) {
                        q.retry_after(lease, Duration::from_millis(3));
                    } else {
                        q.done(lease);
                    }
                }
            }));
        }
        for i in 1..=300u32 {
            q.add((i % 3) as u8, i);
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        q.flushed().await;
        for worker in workers {
            worker.abort();
        }
        let last = last.lock().unwrap();
        for key in 0..3u8 {
            let newest = (1..=300u32).rev().find(|i| (i % 3) as u8 == key).unwrap();
            assert_eq!(last.get(&key), Some(&newest), "key {key}");
        }
    }
}
