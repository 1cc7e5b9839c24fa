//! What every listener of plegd shares: a bound on open connections, and the process's file
//! descriptor limit raised to what the system allows.
//!
//! A local user can open connections to the HTTP port for free. Each one costs plegd a file
//! descriptor; without a bound, enough idle ones exhaust them, and then the CRI and apiserver
//! connections plegd needs fail too. So each listener admits at most its limit of connections at
//! once, and closes any other at once (counted in `plegd_connections_refused_total`) instead of
//! letting it queue behind the idle ones; idle and half-sent connections are closed by the
//! listener's own timeouts (see `http.rs`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::metrics::Metrics;

/// File descriptors kept for plegd's own use (runtime, apiserver, files) whatever its listeners hold.
pub const RESERVED_FDS: u64 = 256;

/// The soft and hard limits on open files, as /proc/self/limits states them (`None`: unlimited).
/// Read there rather than by getrlimit, which a systemd syscall filter such as `~@resources` may
/// forbid on some systemd versions.
pub fn fd_limits() -> Option<(Option<u64>, Option<u64>)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    let value = |v: &str| {
        if v == "unlimited" {
            Some(None)
        } else {
            v.parse().ok().map(Some)
        }
    };
    Some((value(fields.next()?)?, value(fields.next()?)?))
}

/// Raise the soft limit on open files to the hard limit (systemd's `LimitNOFILE`, the container's
/// ulimit): the default soft limit of 1024 is low for a daemon that accepts connections. Nothing is
/// called when the two are equal already. Returns the soft limit in effect.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, setrlimit};
    const UNKNOWN: u64 = 1024;
    let Some((soft, hard)) = fd_limits() else {
        return UNKNOWN;
    };
    let Some(current) = soft else {
        return u64::MAX;
    };
    if hard.is_some_and(|h| h <= current) {
        return current;
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: hard,
            maximum: hard,
        },
    ) {
        Ok(()) => {
            info!(from = current, to = ?hard, "raised the open-file limit");
            hard.unwrap_or(u64::MAX)
        }
        Err(error) => {
            warn!(error = %error, limit = current, "cannot raise the open-file limit");
            current
        }
    }
}

/// The connections a listener may hold at once: `wanted`, or less when the open-file limit would
/// not leave [`RESERVED_FDS`] for the rest of plegd.
pub fn connection_limit(wanted: usize, fd_limit: u64) -> usize {
    let room = fd_limit.saturating_sub(RESERVED_FDS).max(1);
    wanted.min(usize::try_from(room).unwrap_or(usize::MAX))
}

/// Admission of connections to one listener.
#[derive(Clone)]
pub struct ConnectionLimit {
    listener: &'static str,
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl ConnectionLimit {
    pub fn new(listener: &'static str, limit: usize, metrics: Arc<Metrics>) -> Self {
        metrics.initialize_listener(listener);
        Self {
            listener,
            permits: Arc::new(Semaphore::new(limit.max(1))),
            metrics,
        }
    }

    /// The connection, holding its place until dropped; or `None` (and the connection dropped,
    /// which closes it) when the listener is full.
    pub fn admit<S>(&self, stream: S) -> Option<Limited<S>> {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Some(Limited {
                inner: stream,
                _permit: permit,
            }),
            Err(_) => {
                self.metrics.count_connection_refused(self.listener);
                debug!(
                    listener = self.listener,
                    "connection limit reached; closing a new connection"
                );
                None
            }
        }
    }
}

/// A connection that holds a place under its listener's limit while it is open.
pub struct Limited<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Limited<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Limited<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Limited<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// How long to pause accepting after an error such as running out of file descriptors (the
/// error would otherwise repeat at once, in a busy loop).
/// A TCP listener on `address` whose accept queue holds `backlog` connections (the kernel caps it at
/// `net.core.somaxconn`): a burst of connections up to the listener's own limit waits there for
/// plegd to accept it, rather than in SYN-ACK retransmissions of seconds once a shorter queue
/// (tokio's default is 1024) is full.
pub fn bind_tcp(address: std::net::SocketAddr, backlog: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As tokio's own bind does: a restarted plegd can bind again at once.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(backlog)
}

pub const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_leaves_room_for_plegd() {
        assert_eq!(connection_limit(1024, 1024), 768);
        assert_eq!(connection_limit(1024, 65_536), 1024);
        assert_eq!(connection_limit(1024, 100), 1);
    }

    #[tokio::test]
    async fn a_full_listener_refuses_and_a_closed_connection_frees_its_place() {
        let metrics = Arc::new(Metrics::new());
        let limit = ConnectionLimit::new("test", 2, metrics.clone());
        let a = limit.admit(1).expect("first");
        let _b = limit.admit(2).expect("second");
        assert!(limit.admit(3).is_none());
        drop(a);
        assert!(limit.admit(4).is_some());
        assert!(
            metrics
                .encode()
                .contains("plegd_connections_refused_total{listener=\"test\"} 1")
        );
    }

    #[test]
    fn the_fd_limit_is_raised_to_the_hard_limit() {
        let soft = raise_fd_limit();
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current.unwrap_or(u64::MAX), soft);
        assert_eq!(now.current, now.maximum);
        assert_eq!(fd_limits(), Some((now.current, now.maximum)));
    }
}
