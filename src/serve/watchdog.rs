//! systemd notifications (sd_notify): READY=1 once the first relist has succeeded, then watchdog
//! pings (WATCHDOG=1) while plegd is healthy — every stage running and the PLEG within its
//! threshold — so that systemd restarts a plegd that is stuck. Health is checked every second; a
//! healthy plegd pings every half watchdog interval, and at once when health comes back, so that an
//! outage shorter than the rest of the interval (a runtime restart) costs no restart. Each change
//! is logged once: pings stopping (with the reason) and resuming.
//!
//! Must never: ping while unhealthy, end (a stage that ends fails plegd), or wait for the service
//! manager: a notification is sent without blocking ([`notify`]), because plegd's work may all run
//! on one thread and a manager that reads its socket late (a busy PID 1, a test that reads it once in
//! a while) would otherwise stop every stage, its own shutdown included. Without NOTIFY_SOCKET (not
//! under systemd) every notification is a no-op.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::serve::http::Health;

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

/// Send `state` to the service manager (`NOTIFY_SOCKET`) without ever blocking: a socket whose
/// queue is full answers `WouldBlock` at once, and the notification is not sent (a missed watchdog
/// ping is sent again half an interval later; the manager's own timeout is the whole interval).
/// Ok without `NOTIFY_SOCKET`. A name starting with `@` is an abstract socket, as systemd writes it.
pub fn notify(state: &[sd_notify::NotifyState]) -> io::Result<()> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) => notify_to(&path, state),
        None => Ok(()),
    }
}

/// [`notify`] to the socket `path` (`@name`: an abstract socket).
fn notify_to(path: &std::ffi::OsStr, state: &[sd_notify::NotifyState]) -> io::Result<()> {
    let message: String = state.iter().map(|s| format!("{s}\n")).collect();
    let address = match path.as_encoded_bytes().strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    let sent = socket.send_to_addr(message.as_bytes(), &address)?;
    if sent != message.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "a notification sent in part"));
    }
    Ok(())
}

/// [`notify`], with a failure logged: at warn the first of a run of failures, then at debug until
/// one is sent again.
fn notify_logged(state: sd_notify::NotifyState) {
    static FAILING: AtomicBool = AtomicBool::new(false);
    match notify(std::slice::from_ref(&state)) {
        Ok(()) => FAILING.store(false, Ordering::Relaxed),
        Err(error) if !FAILING.swap(true, Ordering::Relaxed) => {
            warn!(state = %state, error = %error, "systemd notification not sent (the manager's socket is full or gone)");
        }
        Err(error) => debug!(state = %state, error = %error, "systemd notification not sent"),
    }
}

/// The systemd-notify stage: READY=1 once `relisted()` holds, then pings as [`Pinger`] says.
pub async fn notify_systemd(relisted: impl Fn() -> bool, health: Arc<dyn Health>) {
    while !relisted() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    notify_logged(sd_notify::NotifyState::Ready);
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
                notify_logged(sd_notify::NotifyState::Watchdog);
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

    /// A manager that does not read its socket: its queue fills, and a notification is refused at
    /// once instead of blocking plegd (whose work may all run on this one thread) until it reads.
    #[test]
    fn a_full_notify_socket_blocks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let manager = UnixDatagram::bind(&path).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let sender_path = path.clone();
        std::thread::spawn(move || {
            let mut sent = 0;
            let error = loop {
                match notify_to(sender_path.as_os_str(), &[sd_notify::NotifyState::Watchdog]) {
                    Ok(()) => sent += 1,
                    Err(e) => break e,
                }
                if sent > 100_000 {
                    panic!("the queue never filled");
                }
            };
            done.send((sent, error.kind())).unwrap();
        });
        let (sent, kind) = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("a notification to a full socket returned (it blocked)");
        assert!(sent >= 1, "{sent}");
        assert_eq!(kind, io::ErrorKind::WouldBlock);
        // What was sent is what systemd reads.
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1\n");
    }

    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("plegd-test-notify-{}", std::process::id());
        let manager = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        notify_to(
            std::ffi::OsStr::new(&format!("@{name}")),
            &[sd_notify::NotifyState::Ready],
        )
        .unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }

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
