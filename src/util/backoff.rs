//! The one retry backoff of plegd: exponential with jitter, from the `backon` crate. Used by the CRI
//! dialer, the trigger streams, the informer's watch, the status writers and the observation client.
//!
//! The base wait doubles after each failure, from `initial` up to `max`, and resets on success. Each
//! wait is drawn at random in `[base / 2, base)` ("equal jitter"), so the longest wait is still
//! `max` and two nodes (or two streams) that fail at the same moment do not retry in lockstep.
//! A retry loop is never given up for good: it only waits longer, up to the cap.
//!
//! Beside it, [`RetryAfter`]: the wait the apiserver itself asks for (`Retry-After`).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Why a backoff cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBackoff {
    #[error("initial backoff must be at least 2ns")]
    ZeroInitial,
    #[error("maximum backoff {max:?} is shorter than the initial backoff {initial:?}")]
    MaxBelowInitial { initial: Duration, max: Duration },
}

/// Retry waits: jittered, doubling up to a cap, reset on success. An endless iterator.
pub struct ExponentialBackoff {
    builder: ExponentialBuilder,
    max: Duration,
    waits: backon::ExponentialBackoff,
}

impl std::fmt::Debug for ExponentialBackoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExponentialBackoff")
            .field("builder", &self.builder)
            .finish_non_exhaustive()
    }
}

impl Clone for ExponentialBackoff {
    /// A clone starts from the initial wait, with a jitter of its own.
    fn clone(&self) -> Self {
        Self {
            builder: self.builder,
            max: self.max,
            waits: self.builder.build(),
        }
    }
}

impl ExponentialBackoff {
    pub fn try_new(initial: Duration, max: Duration) -> Result<Self, InvalidBackoff> {
        if initial < Duration::from_nanos(2) {
            return Err(InvalidBackoff::ZeroInitial);
        }
        if max < initial {
            return Err(InvalidBackoff::MaxBelowInitial { initial, max });
        }
        Ok(Self::constant(initial, max))
    }

    /// A backoff from constants known to be valid (initial ≥ 2 ns, max ≥ initial); for settings
    /// that come from a user, use [`ExponentialBackoff::try_new`].
    pub fn constant(initial: Duration, max: Duration) -> Self {
        // backon adds a jitter of [0, base) to a base; half of ours is that base.
        let builder = ExponentialBuilder::new()
            .with_min_delay(initial / 2)
            .with_max_delay(max / 2)
            .with_factor(2.0)
            .without_max_times()
            .with_jitter();
        Self {
            builder,
            max,
            waits: builder.build(),
        }
    }

    /// The wait before the next attempt; each call doubles the base of the one after, up to the cap.
    pub fn next_wait(&mut self) -> Duration {
        // The iterator has no end (without_max_times); the cap is the answer if it ever had.
        self.waits.next().unwrap_or(self.max).min(self.max)
    }

    /// The cap of the waits.
    pub fn cap(&self) -> Duration {
        self.max
    }

    /// After a success: the next failure waits about the initial time again.
    pub fn reset(&mut self) {
        self.waits = self.builder.build();
    }
}

impl Iterator for ExponentialBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_wait())
    }
}

/// The informer's watch retries with the same backoff (reset by kube-runtime on success).
impl kube::runtime::utils::Backoff for ExponentialBackoff {
    fn reset(&mut self) {
        ExponentialBackoff::reset(self);
    }
}

/// The apiserver's own request to wait: a 429 (max-in-flight or priority and fairness) or a 5xx
/// with a `Retry-After` header, honoured as client-go honours it (integer seconds; no HTTP date),
/// but for every status write of this plegd rather than per request — it is the server that is
/// overloaded, not one pod. Each wait is capped at [`RetryAfter::MAX`], so that a server that
/// sends a huge value cannot stall the writers for long; a later answer can only lengthen the wait.
#[derive(Debug, Default)]
pub struct RetryAfter {
    until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl RetryAfter {
    /// The longest wait one answer can impose.
    pub const MAX: Duration = Duration::from_secs(30);

    /// The wait an answer with status `code` and `Retry-After` header `value` asks for (pure).
    pub fn requested(code: u16, value: Option<&[u8]>) -> Option<Duration> {
        if code != 429 && !(500..600).contains(&code) {
            return None;
        }
        let value = std::str::from_utf8(value?).ok()?.trim();
        // Seconds as digits only: no sign, no fraction, nothing a parser might read generously.
        if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let seconds: u64 = value.parse().ok()?;
        Some(Duration::from_secs(seconds).min(Self::MAX))
    }

    /// Hold writes back for `wait` from now (or longer, if an earlier answer asked for longer).
    pub fn push(&self, wait: Duration) {
        let until = tokio::time::Instant::now() + wait.min(Self::MAX);
        let mut held = self.until.lock().unwrap_or_else(|e| e.into_inner());
        *held = Some(held.map_or(until, |u| u.max(until)));
    }

    /// How long writes are still held back.
    pub fn remaining(&self) -> Duration {
        let held = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        held.map_or(Duration::ZERO, |u| {
            u.saturating_duration_since(tokio::time::Instant::now())
        })
    }

    /// Wait until the apiserver's last `Retry-After` has passed.
    pub async fn wait(&self) {
        loop {
            let remaining = self.remaining();
            if remaining.is_zero() {
                return;
            }
            tokio::time::sleep(remaining).await;
        }
    }
}

/// A backoff that never waits less than the apiserver's last `Retry-After` asks: the informer's
/// watch retries with it, so that a LIST or WATCH answered 429 (priority and fairness, a watch
/// cache not ready after a restart) is not asked again sooner than the server said.
#[derive(Debug, Clone)]
pub struct RetryAfterBackoff {
    waits: ExponentialBackoff,
    retry_after: std::sync::Arc<RetryAfter>,
}

impl RetryAfterBackoff {
    pub fn new(waits: ExponentialBackoff, retry_after: std::sync::Arc<RetryAfter>) -> Self {
        Self { waits, retry_after }
    }
}

impl Iterator for RetryAfterBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.waits.next_wait().max(self.retry_after.remaining()))
    }
}

impl kube::runtime::utils::Backoff for RetryAfterBackoff {
    fn reset(&mut self) {
        self.waits.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_watch_retries_no_sooner_than_retry_after_asks() {
        let retry_after = std::sync::Arc::new(RetryAfter::default());
        let short = ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_millis(200));
        let mut backoff = RetryAfterBackoff::new(short, retry_after.clone());
        assert!(
            backoff.next().unwrap() <= Duration::from_millis(200),
            "no Retry-After: its own wait"
        );
        retry_after.push(Duration::from_secs(7));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            backoff.next(),
            Some(Duration::from_secs(5)),
            "what is left of the 7 s asked"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            backoff.next().unwrap() <= Duration::from_millis(200),
            "past it: its own wait again"
        );
    }

    #[test]
    fn retry_after_is_read_as_client_go_reads_it_and_capped() {
        let secs = Duration::from_secs;
        assert_eq!(RetryAfter::requested(429, Some(b"1")), Some(secs(1)));
        assert_eq!(RetryAfter::requested(503, Some(b" 7 ")), Some(secs(7)));
        assert_eq!(RetryAfter::requested(429, Some(b"0")), Some(secs(0)));
        assert_eq!(
            RetryAfter::requested(429, Some(b"86400")),
            Some(RetryAfter::MAX),
            "capped"
        );
        assert_eq!(RetryAfter::requested(429, Some(b"99999999999999999999")), None);
        for refused in [
            &b"-1"[..],
            b"1.5",
            b"+3",
            b"",
            b"Wed, 21 Oct 2026 07:28:00 GMT",
            b"\xff",
        ] {
            assert_eq!(RetryAfter::requested(429, Some(refused)), None, "{refused:?}");
        }
        assert_eq!(RetryAfter::requested(429, None), None);
        // Only an overloaded or failing server's answer counts.
        for code in [200, 404, 409, 422] {
            assert_eq!(RetryAfter::requested(code, Some(b"5")), None, "{code}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_wait_for_the_longest_retry_after() {
        let held = RetryAfter::default();
        assert_eq!(held.remaining(), Duration::ZERO, "nothing asked: no wait");
        held.push(Duration::from_millis(800));
        held.push(Duration::from_millis(100));
        assert!(
            held.remaining() > Duration::from_millis(300),
            "a shorter answer does not shorten the wait: {:?}",
            held.remaining()
        );
        let start = tokio::time::Instant::now();
        held.wait().await;
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(800),
            "the longest wait asked for"
        );
        assert_eq!(held.remaining(), Duration::ZERO);
        held.push(Duration::from_secs(3600));
        let remaining = held.remaining();
        assert!(remaining <= RetryAfter::MAX && remaining > RetryAfter::MAX - Duration::from_secs(5));
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn doubles_within_its_jitter_caps_and_resets() {
        let mut b = ExponentialBackoff::try_new(MS(100), MS(450)).unwrap();
        let bases = [100, 200, 400, 450, 450, 450];
        for base in bases {
            let wait = b.next_wait();
            assert!(
                wait >= MS(base) / 2 && wait <= MS(base),
                "{wait:?} outside [{}, {base}] ms",
                base / 2
            );
        }
        b.reset();
        let wait = b.next_wait();
        assert!(wait >= MS(50) && wait <= MS(100), "{wait:?} after a reset");
    }

    #[test]
    fn two_sequences_with_the_same_settings_do_not_align() {
        let waits = |b: &mut ExponentialBackoff| (0..10).map(|_| b.next_wait()).collect::<Vec<_>>();
        let mut a = ExponentialBackoff::try_new(MS(100), MS(30_000)).unwrap();
        let mut b = ExponentialBackoff::try_new(MS(100), MS(30_000)).unwrap();
        let (a, b) = (waits(&mut a), waits(&mut b));
        // Each wait is drawn from a range as wide as half its base: equal draws would take a
        // random generator that returns the same numbers to both.
        let equal = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(equal <= 1, "lockstep retries: {a:?} and {b:?}");
        // And a clone is a new sequence, not a copy of the old one's draws.
        let mut c = ExponentialBackoff::constant(MS(100), MS(30_000));
        let mut d = c.clone();
        assert_ne!(waits(&mut c), waits(&mut d));
    }

    #[test]
    fn invalid_settings_are_refused() {
        assert_eq!(
            ExponentialBackoff::try_new(MS(0), MS(1)).unwrap_err(),
            InvalidBackoff::ZeroInitial
        );
        assert!(matches!(
            ExponentialBackoff::try_new(MS(10), MS(1)),
            Err(InvalidBackoff::MaxBelowInitial { .. })
        ));
    }
}
