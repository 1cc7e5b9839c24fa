//! systemd notifications (sd_notify): READY=1 once the first relist has succeeded, then watchdog
//! pings (WATCHDOG=1) while plegd is healthy — every stage running and the PLEG within its
//! threshold — so that systemd restarts a plegd that is stuck. Health is checked every second; a
//! healthy plegd pings every half watchdog interval, and at once when health comes back, so that an
//! outage shorter than the rest of the interval (a runtime restart) costs no restart. Each change
//! is logged once: pings stopping (with the reason) and resuming.
//!
//! Must never: ping while unhealthy, or end (a stage that ends fails plegd). Without NOTIFY_SOCKET
//! (not under systemd) every notification is a no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::http::Health;

/// How often health is looked at between pings.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What to do after one health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send WATCHDOG=1; `resumed` when health has just come back.
    Ping { resumed: bool },
    /// Healthy, and the last ping is recent enough.
    Wait,
    /// Unhealthy: no ping. `first` on the first check of an unhealthy spell.
    Withhold { first: bool },
}

/// The pure core: when to ping, from the health checks and the time of the last ping.
#[derive(Debug, Clone)]
pub struct Pinger {
    period: Duration,
    last_ping: Instant,
    healthy: bool,
}

impl Pinger {
    /// A pinger for a watchdog `interval`, started (READY sent) at `now`.
    pub fn new(interval: Duration, now: Instant) -> Self {
        Self {
            period: interval / 2,
            last_ping: now,
            healthy: true,
        }
    }

    /// What to do at `now`, given whether plegd is `healthy`.
    pub fn check(&mut self, now: Instant, healthy: bool) -> Decision {
        if !healthy {
            let first = self.healthy;
            self.healthy = false;
            return Decision::Withhold { first };
        }
        let resumed = !self.healthy;
        if resumed || now.saturating_duration_since(self.last_ping) >= self.period {
            self.healthy = true;
            self.last_ping = now;
            Decision::Ping { resumed }
        } else {
            Decision::Wait
        }
    }
}

/// The systemd-notify stage: READY=1 once `relisted()` holds, then pings as [`Pinger`] says.
pub async fn notify_systemd(relisted: impl Fn() -> bool, health: Arc<dyn Health>) {
    while !relisted() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let Some(interval) = sd_notify::watchdog_enabled().filter(|d| !d.is_zero()) else {
        // Nothing more to say, but a stage that ends is a failure: stay until cancelled.
        return std::future::pending().await;
    };
    let mut pinger = Pinger::new(interval, Instant::now());
    loop {
        tokio::time::sleep(CHECK_EVERY.min(interval / 2)).await;
        let health = health.healthy();
        match pinger.check(Instant::now(), health.is_ok()) {
            Decision::Ping { resumed } => {
                if resumed {
                    info!("plegd is healthy again; systemd watchdog pings resume");
                }
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
            Decision::Wait | Decision::Withhold { first: false } => {}
            Decision::Withhold { first: true } => {
                let error = health.err().unwrap_or_default();
                warn!(error = %error, "not pinging the systemd watchdog: plegd is not healthy");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_every_half_interval_while_healthy() {
        let start = Instant::now();
        let mut p = Pinger::new(Duration::from_secs(10), start);
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(p.check(at(1), true), Decision::Wait);
        assert_eq!(p.check(at(4), true), Decision::Wait);
        assert_eq!(p.check(at(5), true), Decision::Ping { resumed: false });
        assert_eq!(p.check(at(6), true), Decision::Wait);
        assert_eq!(p.check(at(10), true), Decision::Ping { resumed: false });
    }

    #[test]
    fn withholds_while_unhealthy_and_pings_at_once_when_health_returns() {
        let start = Instant::now();
        let mut p = Pinger::new(Duration::from_secs(10), start);
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(p.check(at(5), true), Decision::Ping { resumed: false });
        assert_eq!(p.check(at(6), false), Decision::Withhold { first: true });
        assert_eq!(p.check(at(7), false), Decision::Withhold { first: false });
        assert_eq!(p.check(at(10), false), Decision::Withhold { first: false });
        // Back at 12 s: pinged now, not at the next half interval (15 s, past the 5 + 10 s deadline).
        assert_eq!(p.check(at(12), true), Decision::Ping { resumed: true });
        assert_eq!(p.check(at(13), true), Decision::Wait);
        assert_eq!(p.check(at(17), true), Decision::Ping { resumed: false });
    }
}
