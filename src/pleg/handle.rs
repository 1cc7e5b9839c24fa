//! What the relister shares with the stages that read what it found: [`PlegHandle`], the status
//! cache's reading half with the relister's health and its clock's stamps. The relister keeps the
//! cache's writing half; a holder of a handle can read, wait and judge health, never write. The
//! handle is not generic over the runtime or the clock: its readers never call the runtime.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::kubecontainer::cache::CacheReader;
use crate::metrics::Metrics;
use crate::util::clock::{self, Clock};

use super::{PlegHealthError, StreamState};

/// The relister's health as it records it and its handles read it.
pub(super) struct RelistHealth {
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    threshold: Duration,
    /// Start of the last successful global relist.
    relist_time: Mutex<Option<SystemTime>>,
    /// When the last successful global relist started, on the monotonic clock: health never
    /// trusts a wall clock that was stepped back.
    relist_instant: Mutex<Option<std::time::Instant>>,
    /// The last time handed out by [`RelistHealth::stamp`].
    last_stamp: Mutex<SystemTime>,
    /// Start of the first complete relist: what it and the relists before it found exited had
    /// exited before plegd looked.
    first_relist: OnceLock<SystemTime>,
    /// What the runtime event stream is doing, for health and metrics.
    pub(super) trigger_state: Arc<Mutex<StreamState>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RelistHealth {
    pub(super) fn new(clock: Arc<dyn Clock>, metrics: Arc<Metrics>, threshold: Duration) -> Self {
        Self {
            clock,
            metrics,
            threshold,
            relist_time: Mutex::new(None),
            relist_instant: Mutex::new(None),
            last_stamp: Mutex::new(SystemTime::UNIX_EPOCH),
            first_relist: OnceLock::new(),
            trigger_state: Arc::new(Mutex::new(StreamState::Off)),
        }
    }

    /// A global relist that started at `start` (`started` on the monotonic clock) listed the runtime.
    pub(super) fn relisted(&self, start: SystemTime, started: std::time::Instant) {
        *lock(&self.relist_time) = Some(start);
        *lock(&self.relist_instant) = Some(started);
    }

    /// A global relist that started at `start` went through every pod (kept only the first time).
    pub(super) fn first_relist_done(&self, start: SystemTime) {
        let _ = self.first_relist.set(start);
    }

    /// Whether a relist stamped `at` came after the first complete relist ([`PlegHandle::happened_while_watching`]).
    pub(super) fn happened_while_watching(&self, at: SystemTime) -> bool {
        self.first_relist.get().is_some_and(|first| at > *first)
    }

    pub(super) fn stamp(&self) -> SystemTime {
        let now = self.clock.now();
        let mut last = lock(&self.last_stamp);
        let stamp = if now > *last {
            now
        } else {
            *last + Duration::from_nanos(1)
        };
        *last = stamp;
        stamp
    }

    pub(super) fn last_relist(&self) -> Option<SystemTime> {
        *lock(&self.relist_time)
    }

    pub(super) fn trigger_state(&self) -> StreamState {
        *lock(&self.trigger_state)
    }

    pub(super) fn healthy(&self) -> Result<(), PlegHealthError> {
        let last = self.last_relist().ok_or(PlegHealthError::NeverRelisted)?;
        let secs = last
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.metrics.last_seen.set(secs);
        // The later of the wall clock's view and the monotonic one: a clock stepped back cannot
        // keep a stalled relister healthy.
        let monotonic = lock(&self.relist_instant).map(|at| at.elapsed()).unwrap_or_default();
        let elapsed = clock::since(&*self.clock, last).max(monotonic);
        if elapsed > self.threshold {
            return Err(PlegHealthError::Stale {
                elapsed,
                threshold: self.threshold,
            });
        }
        Ok(())
    }
}

/// A reader's handle on the relister: its status cache (read-only), health and stamps. Cheap to
/// clone.
#[derive(Clone)]
pub struct PlegHandle {
    pub(super) cache: CacheReader,
    pub(super) health: Arc<RelistHealth>,
}

impl PlegHandle {
    /// The status cache, to read and wait on.
    pub fn cache(&self) -> &CacheReader {
        &self.cache
    }

    /// The time the relister stamps the cache and events with, and that readers of the cache
    /// compare against: the clock's, but always later than the last one handed out. A wall clock
    /// stepped back (NTP at boot) would otherwise stamp new runtime statuses earlier than syncs
    /// already made, and every wait for a newer status would stall for the size of the step.
    pub fn stamp(&self) -> SystemTime {
        self.health.stamp()
    }

    /// Start of the last successful global relist.
    pub fn last_relist(&self) -> Option<SystemTime> {
        self.health.last_relist()
    }

    /// Whether a change found by a relist stamped `at` (a `ContainerDied`'s timestamp) happened
    /// while plegd looked: it was found after the first complete relist. The first relist (and
    /// any single-pod relist before it ends) finds exits from before plegd started, which a plegd
    /// before a restart already saw: `plegd_container_exits_total` does not count them and
    /// `--emit-events` does not publish them again.
    pub fn happened_while_watching(&self, at: SystemTime) -> bool {
        self.health.happened_while_watching(at)
    }

    /// `Healthy()`: the last successful relist started no more than the threshold ago.
    pub fn healthy(&self) -> Result<(), PlegHealthError> {
        self.health.healthy()
    }

    /// What the runtime event stream is doing.
    pub fn trigger_state(&self) -> StreamState {
        self.health.trigger_state()
    }
}
