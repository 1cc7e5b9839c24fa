//! Exponential backoff: the wait doubles after each failure up to a cap and resets on success.
//! Used by the CRI dialer and by trigger streams, which retry forever: a failing stream is never
//! given up for good, it only waits longer (up to the cap) between attempts.

use std::time::Duration;

/// Why a backoff cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBackoff {
    #[error("initial backoff must be greater than zero")]
    ZeroInitial,
    #[error("maximum backoff {max:?} is shorter than the initial backoff {initial:?}")]
    MaxBelowInitial { initial: Duration, max: Duration },
}

#[derive(Debug, Clone)]
pub struct ExponentialBackoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl ExponentialBackoff {
    pub fn try_new(initial: Duration, max: Duration) -> Result<Self, InvalidBackoff> {
        if initial.is_zero() {
            return Err(InvalidBackoff::ZeroInitial);
        }
        if max < initial {
            return Err(InvalidBackoff::MaxBelowInitial { initial, max });
        }
        Ok(Self {
            initial,
            max,
            next: initial,
        })
    }

    /// A backoff from constants known to be valid (initial > 0, max ≥ initial); for settings that
    /// come from a user, use [`ExponentialBackoff::try_new`].
    pub const fn constant(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// The wait before the next attempt; each call doubles the one after, up to the cap.
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    /// After a success: the next failure waits the initial time again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let ms = Duration::from_millis;
        let mut b = ExponentialBackoff::try_new(ms(100), ms(450)).unwrap();
        let waits: Vec<_> = (0..5).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(450), ms(450)]);
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
    }

    #[test]
    fn invalid_settings_are_refused() {
        let ms = Duration::from_millis;
        assert_eq!(
            ExponentialBackoff::try_new(ms(0), ms(1)).unwrap_err(),
            InvalidBackoff::ZeroInitial
        );
        assert!(matches!(
            ExponentialBackoff::try_new(ms(10), ms(1)),
            Err(InvalidBackoff::MaxBelowInitial { .. })
        ));
    }
}
