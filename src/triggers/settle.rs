//! When, after a settling event, a container's second probe comes: learned from whether recent
//! changes were there by then (pure).
//!
//! containerd publishes `/tasks/delete` before its CRI plugin writes the container's EXITED
//! status, and `/tasks/start` before it writes the start: each write is a file synced to disk, so
//! the CRI state follows 5–25 ms later on a quiet node and more on a loaded one. A probe every 2 ms
//! from the event cost 3–12 status calls per change, most of them answered with the old state
//! (BENCHMARKS.md: the probes and their transport were the largest share of plegd's CPU under
//! churn). The first probe still comes at once: the state is often there before the event. Of the
//! changes it does not find, the second probe is to find about a fifth, and the 2 ms probes go on
//! from it.
//!
//! What a probe sees is only whether the change is there yet, so the second probe's time is moved
//! by that alone (a stochastic approximation of the quantile): earlier by 0.8 ms when the change
//! was found by the second probe, later by 0.2 ms when it took more, between [`FINE`] (probes 2 ms
//! apart, as before) and [`MAX_SKIP`]; a change the first probe found moves nothing. It settles
//! where a fifth of the changes left by the first probe are found by then. Learned from the exact
//! lags instead, it never came back: a change the second probe finds is only known to be "at most
//! that late", and such lags kept the second probe late. Counting the changes found at once, it
//! saved nothing beside a kubelet: as many probes as 2 ms apart, the found-at-once changes holding
//! it near 2 ms.

use std::time::Duration;

/// The fine probes' interval.
pub const FINE: Duration = Duration::from_millis(2);
/// The second probe comes at most this long after the settling event.
pub const MAX_SKIP: Duration = Duration::from_millis(16);
/// The share of the changes left by the first probe that the second is to find.
const FOUND_BY_SECOND: f64 = 0.2;
/// How far one change moves the second probe, at most (ms).
const STEP_MS: f64 = 1.0;

/// The second probe's time after a settling event, as learned so far.
#[derive(Debug)]
pub struct SecondProbe {
    after_ms: f64,
}

impl Default for SecondProbe {
    fn default() -> Self {
        Self {
            after_ms: FINE.as_secs_f64() * 1000.0,
        }
    }
}

impl SecondProbe {
    /// A change found by the settling event's `probe`th probe (0: the one at once).
    pub fn found_by(&mut self, probe: usize) {
        if probe == 0 {
            return;
        }
        let early = probe == 1;
        let step = if early {
            -STEP_MS * (1.0 - FOUND_BY_SECOND)
        } else {
            STEP_MS * FOUND_BY_SECOND
        };
        let (min, max) = (FINE.as_secs_f64() * 1000.0, MAX_SKIP.as_secs_f64() * 1000.0);
        self.after_ms = (self.after_ms + step).clamp(min, max);
    }

    /// How long after a settling event its second probe comes.
    pub fn after(&self) -> Duration {
        Duration::from_secs_f64(self.after_ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes that come `lag` after their event, probed as the dispatcher probes: at once, at the
    /// second probe's time, then every 2 ms. Returns the second probe's time after `n` changes.
    fn learn(second: &mut SecondProbe, lags: impl Iterator<Item = Duration>) -> Duration {
        for lag in lags {
            let probe = if lag.is_zero() {
                0
            } else if lag <= second.after() {
                1
            } else {
                2 + ((lag - second.after()).as_micros() / FINE.as_micros()) as usize
            };
            second.found_by(probe);
        }
        second.after()
    }

    #[test]
    fn the_second_probe_starts_two_ms_after_the_first() {
        assert_eq!(SecondProbe::default().after(), FINE);
    }

    /// Lags spread evenly over 5–25 ms: the second probe settles near the fifth fastest (9 ms).
    #[test]
    fn the_second_probe_settles_where_a_fifth_of_the_changes_are_there() {
        let mut second = SecondProbe::default();
        let lags = (0..2000).map(|i| Duration::from_micros(5_000 + (i * 7_919) % 20_000));
        let after = learn(&mut second, lags);
        assert!(
            after >= Duration::from_millis(7) && after <= Duration::from_millis(11),
            "{after:?}"
        );
    }

    /// A runtime that turns quick again is probed 2 ms apart again within a few changes, although
    /// each change is then found by the (late) second probe and its lag never seen.
    #[test]
    fn a_runtime_that_turns_quick_is_probed_finely_again() {
        let mut second = SecondProbe::default();
        let after = learn(&mut second, std::iter::repeat_n(Duration::from_millis(400), 200));
        assert_eq!(after, MAX_SKIP);
        let after = learn(&mut second, std::iter::repeat_n(Duration::from_millis(1), 20));
        assert_eq!(after, FINE);
    }

    /// Changes found at once move nothing: the second probe is placed among the others. Half the
    /// changes there before their event, half 10 ms after it: the second probe settles near 10 ms.
    #[test]
    fn changes_found_at_once_do_not_hold_the_second_probe_back() {
        let mut second = SecondProbe::default();
        assert_eq!(learn(&mut second, std::iter::repeat_n(Duration::ZERO, 50)), FINE);
        let lags = (0..400).map(|i| Duration::from_millis(if i % 2 == 0 { 0 } else { 10 }));
        let after = learn(&mut second, lags);
        assert!(
            after >= Duration::from_millis(9) && after <= Duration::from_millis(11),
            "{after:?}"
        );
    }
}
