//! How long a runtime's CRI state takes to follow a settling event, learned from the last changes
//! the fine probes found (pure).
//!
//! containerd publishes `/tasks/delete` before its CRI plugin writes the container's EXITED
//! status, and `/tasks/start` before it writes the start: each write is a file synced to disk, so
//! the CRI state follows 5–25 ms later on a quiet node and more on a loaded one. A probe every 2 ms
//! from the event cost 3–12 status calls per change, most of them answered with the old state
//! (BENCHMARKS.md: the probes and their transport were the largest share of plegd's CPU under
//! churn). After the first probe, at once (the state is sometimes there before the event), the
//! next one comes where the state usually does: at the lag that a fifth of the recent changes came
//! in, less one probe interval, and at most [`MAX_SKIP`] after the event. A runtime that follows its
//! events at once keeps the probes 2 ms apart: its lags are ~0.

use std::collections::VecDeque;
use std::time::Duration;

/// The fine probes' interval.
pub const FINE: Duration = Duration::from_millis(2);
/// The second probe comes at most this long after the settling event.
pub const MAX_SKIP: Duration = Duration::from_millis(16);
/// The lags of this many changes are kept (the latest).
const KEPT: usize = 32;
/// Fewer lags than this teach nothing yet: the probes stay 2 ms apart.
const LEARNED_FROM: usize = 8;

/// The recent lags from a settling event to the check that found its change.
#[derive(Debug, Default)]
pub struct SettleLags {
    recent: VecDeque<Duration>,
}

impl SettleLags {
    /// A change found `lag` after its settling event (the probe's own time included).
    pub fn record(&mut self, lag: Duration) {
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(lag);
    }

    /// How long after a settling event its second probe comes: [`FINE`] until enough lags are
    /// known, then the lag of the fastest fifth of recent changes less [`FINE`] (a found change
    /// came up to one interval before its probe), between [`FINE`] and [`MAX_SKIP`].
    pub fn second_probe_after(&self) -> Duration {
        if self.recent.len() < LEARNED_FROM {
            return FINE;
        }
        let mut lags: Vec<Duration> = self.recent.iter().copied().collect();
        lags.sort_unstable();
        let fifth = lags[(lags.len() - 1) / 5];
        fifth.saturating_sub(FINE).clamp(FINE, MAX_SKIP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn probes_stay_fine_until_enough_lags_are_known() {
        let mut lags = SettleLags::default();
        assert_eq!(lags.second_probe_after(), FINE);
        for _ in 0..LEARNED_FROM - 1 {
            lags.record(ms(12));
        }
        assert_eq!(lags.second_probe_after(), FINE, "seven lags teach nothing");
        lags.record(ms(12));
        assert_eq!(lags.second_probe_after(), ms(10));
    }

    /// The fastest fifth sets the second probe: a few quick changes pull it forward, one slow
    /// change does not push it back.
    #[test]
    fn the_fastest_fifth_of_recent_lags_sets_the_second_probe() {
        let mut lags = SettleLags::default();
        for lag in [9, 10, 11, 12, 13, 14, 15, 16, 17, 400] {
            lags.record(ms(lag));
        }
        // Ten lags: the second fastest (index 1) is 10 ms; one interval earlier.
        assert_eq!(lags.second_probe_after(), ms(8));
        for _ in 0..3 {
            lags.record(ms(1));
        }
        // Thirteen: index 2 of the sorted lags is 1 ms: back to 2 ms apart.
        assert_eq!(lags.second_probe_after(), FINE);
    }

    #[test]
    fn the_second_probe_is_bounded() {
        let mut slow = SettleLags::default();
        for _ in 0..KEPT {
            slow.record(ms(900));
        }
        assert_eq!(slow.second_probe_after(), MAX_SKIP);
        let mut at_once = SettleLags::default();
        for _ in 0..KEPT {
            at_once.record(Duration::ZERO);
        }
        assert_eq!(at_once.second_probe_after(), FINE);
    }

    /// Only the latest lags count: a runtime that became quick is probed finely again.
    #[test]
    fn old_lags_are_forgotten() {
        let mut lags = SettleLags::default();
        for _ in 0..KEPT {
            lags.record(ms(30));
        }
        assert_eq!(lags.second_probe_after(), MAX_SKIP);
        for _ in 0..KEPT {
            lags.record(ms(3));
        }
        assert_eq!(lags.second_probe_after(), FINE);
        assert_eq!(lags.recent.len(), KEPT);
    }
}
