//! Client-side rate limits for what plegd sends the apiserver: a rate ([`Qps`]) and a token bucket
//! over it ([`TokenBucket`]), as client-go's flowcontrol token bucket limits the kubelet's status
//! writes and events. Must never let a caller through past the bucket, nor spin while it waits.

use std::num::NonZeroU32;
use std::time::Duration;

/// The longest one sleep of [`TokenBucket::acquire`] lasts before it looks at the bucket again.
const LONGEST_WAIT: Duration = Duration::from_secs(86_400);

/// A rate of requests a second: finite and above zero (a zero rate would never let one through).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Qps(f64);

impl Qps {
    /// `per_second` as a rate; None when it is not a finite number above zero.
    pub fn new(per_second: f64) -> Option<Self> {
        (per_second.is_finite() && per_second > 0.0).then_some(Self(per_second))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// A token bucket: `qps` tokens a second, at most `burst` saved up; it starts full.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: tokio::sync::Mutex<(f64, tokio::time::Instant)>,
}

impl TokenBucket {
    pub fn new(qps: Qps, burst: NonZeroU32) -> Self {
        let burst = f64::from(burst.get());
        Self {
            qps: qps.get(),
            burst,
            state: tokio::sync::Mutex::new((burst, tokio::time::Instant::now())),
        }
    }

    /// Take one token, waiting (asleep) until there is one. Returns whether it had to wait.
    pub async fn acquire(&self) -> bool {
        let mut waited = false;
        loop {
            let wait = {
                let mut state = self.state.lock().await;
                let now = tokio::time::Instant::now();
                state.0 = (state.0 + now.duration_since(state.1).as_secs_f64() * self.qps).min(self.burst);
                state.1 = now;
                if state.0 >= 1.0 {
                    state.0 -= 1.0;
                    return waited;
                }
                // A rate so small that the wait overflows a Duration waits a day, then looks again.
                Duration::try_from_secs_f64((1.0 - state.0) / self.qps)
                    .unwrap_or(LONGEST_WAIT)
                    .min(LONGEST_WAIT)
            };
            waited = true;
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate() {
        let bucket = TokenBucket::new(Qps::new(10.0).unwrap(), NonZeroU32::new(3).unwrap());
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            assert!(!bucket.acquire().await, "the burst waits for nothing");
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(bucket.acquire().await, "past the burst, a token is waited for");
        assert!(bucket.acquire().await);
        // Two tokens at 10 a second: 0.2 s.
        let elapsed = start.elapsed().as_secs_f64();
        assert!((0.19..0.21).contains(&elapsed), "{elapsed}");
    }

    /// A rate whose wait would overflow a Duration sleeps in bounded steps: no panic.
    #[tokio::test(start_paused = true)]
    async fn a_vanishing_rate_waits_without_overflowing() {
        let bucket = TokenBucket::new(Qps::new(1e-300).unwrap(), NonZeroU32::new(1).unwrap());
        assert!(!bucket.acquire().await);
        let second = tokio::time::timeout(LONGEST_WAIT * 3, bucket.acquire()).await;
        assert!(second.is_err(), "no token comes at this rate");
    }

    #[test]
    fn a_rate_is_finite_and_above_zero() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Qps::new(bad), None, "{bad}");
        }
        assert_eq!(Qps::new(0.5).map(Qps::get), Some(0.5));
    }
}
