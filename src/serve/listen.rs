//! What every listener of plegd shares: a bound on open connections, and the process's file
//! descriptor limit raised to what the system allows.
//!
//! A local user can open connections to the HTTP port for free. Each one costs plegd a file
//! descriptor; without a bound, enough idle ones exhaust them, and then the CRI and apiserver
//! connections plegd needs fail too. So each listener admits at most its limit of connections at
//! once, and closes any other at once (counted in `plegd_connections_refused_total`) instead of
//! letting it queue behind the idle ones; idle and half-sent connections are closed by the
//! listener's own timeouts (see `http.rs`).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
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
/// not leave [`RESERVED_FDS`] for the rest of plegd; one at least (a listener that admits none
/// would be no listener).
pub fn connection_limit(wanted: NonZeroUsize, fd_limit: u64) -> NonZeroUsize {
    let room = usize::try_from(fd_limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    NonZeroUsize::new(wanted.get().min(room)).unwrap_or(NonZeroUsize::MIN)
}

/// How a full listener treats a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// The new connection is closed at once (counted in `plegd_connections_refused_total`).
    Refuse,
    /// The oldest open connection is closed to make room (counted in
    /// `plegd_connections_evicted_total`): for a listener whose clients make one short request
    /// per connection (the kubelet's probes), so that connections held open by others can never
    /// keep a new one out.
    EvictOldest,
    /// A client past its share is refused, as with `Refuse`; a full listener closes its oldest
    /// connection for the new one, as with `EvictOldest`: for a listener of a few long-lived
    /// readers (Prometheus keeps its connection alive), so that many addresses each holding their
    /// share cannot keep a new reader out — at worst a reader's kept-alive connection is closed and
    /// its next scrape opens another, which gets in.
    RefuseOverShareEvictOldest,
}

/// Bounds of one listener: connections open at once in all, and from one client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub max_connections: NonZeroUsize,
    /// Connections one client address may hold at once; past it, its new ones are refused, or on
    /// a listener that evicts, its own oldest connection is closed (never another client's).
    pub max_per_client: NonZeroUsize,
    pub when_full: WhenFull,
}

/// Admission of connections to one listener.
#[derive(Clone)]
pub struct ConnectionLimit {
    listener: &'static str,
    admission: Admission,
    state: Arc<Mutex<Open>>,
    metrics: Arc<Metrics>,
}

/// The connections a listener holds.
#[derive(Default)]
struct Open {
    count: usize,
    per_client: HashMap<IpAddr, usize>,
    /// Each connection by the order it was admitted, with its client and what closes it
    /// (eviction).
    by_age: BTreeMap<u64, (Option<IpAddr>, CancellationToken)>,
    next: u64,
}

impl ConnectionLimit {
    pub fn new(listener: &'static str, admission: Admission, metrics: Arc<Metrics>) -> Self {
        metrics.initialize_listener(listener);
        Self {
            listener,
            admission,
            state: Arc::default(),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection from `client` (None: a unix socket's peer), holding its place until
    /// dropped; or `None` (and the connection dropped, which closes it) when the client holds its
    /// share already, or the listener is full and refuses.
    pub fn admit<S>(&self, stream: S, client: Option<IpAddr>) -> Option<Limited<S>> {
        let mut open = self.lock();
        let mut made_room = false;
        if let Some(ip) = client
            && open.per_client.get(&ip).copied().unwrap_or(0) >= self.admission.max_per_client.get()
        {
            if self.admission.when_full != WhenFull::EvictOldest {
                drop(open);
                self.metrics.count_connection_refused(self.listener);
                debug!(listener = self.listener, client = %ip, "client holds its share of connections; closing a new one");
                return None;
            }
            // Its own oldest connection makes room: a probe from an address others share (the
            // node's) still gets in, and nobody else's connection is touched.
            let oldest = open.by_age.iter().find(|(_, (c, _))| *c == Some(ip)).map(|(id, _)| *id);
            if let Some((_, evicted)) = oldest.and_then(|id| open.by_age.remove(&id)) {
                evicted.cancel();
                self.metrics.count_connection_evicted(self.listener);
                made_room = true;
            }
        }
        if open.count >= self.admission.max_connections.get() && !made_room {
            match self.admission.when_full {
                WhenFull::Refuse => {
                    drop(open);
                    self.metrics.count_connection_refused(self.listener);
                    debug!(
                        listener = self.listener,
                        "connection limit reached; closing a new connection"
                    );
                    return None;
                }
                WhenFull::EvictOldest | WhenFull::RefuseOverShareEvictOldest => {
                    // Its place is given back when its task ends, a moment later.
                    if let Some((_, (_, oldest))) = open.by_age.pop_first() {
                        oldest.cancel();
                        self.metrics.count_connection_evicted(self.listener);
                    }
                }
            }
        }
        open.count += 1;
        if let Some(ip) = client {
            *open.per_client.entry(ip).or_default() += 1;
        }
        let id = open.next;
        open.next += 1;
        let evicted = CancellationToken::new();
        open.by_age.insert(id, (client, evicted.clone()));
        Some(Limited {
            inner: stream,
            _place: Place {
                id,
                client,
                state: self.state.clone(),
            },
            evicted,
        })
    }
}

/// A connection's place under its listener's bounds, given back when dropped.
struct Place {
    id: u64,
    client: Option<IpAddr>,
    state: Arc<Mutex<Open>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.state.lock().unwrap_or_else(|e| e.into_inner());
        open.count = open.count.saturating_sub(1);
        open.by_age.remove(&self.id);
        if let Some(ip) = self.client
            && let Some(n) = open.per_client.get_mut(&ip)
        {
            *n -= 1;
            if *n == 0 {
                open.per_client.remove(&ip);
            }
        }
    }
}

/// A connection that holds a place under its listener's bounds while it is open.
pub struct Limited<S> {
    inner: S,
    _place: Place,
    evicted: CancellationToken,
}

impl<S> Limited<S> {
    /// Cancelled when the listener closes this connection to make room for a new one: whoever
    /// serves the connection ends it then.
    pub fn evicted(&self) -> CancellationToken {
        self.evicted.clone()
    }
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
        let wanted = NonZeroUsize::new(1024).unwrap();
        assert_eq!(connection_limit(wanted, 1024).get(), 768);
        assert_eq!(connection_limit(wanted, 65_536), wanted);
        assert_eq!(connection_limit(wanted, 100), NonZeroUsize::MIN);
    }

    fn refuse(max_connections: usize, max_per_client: usize) -> Admission {
        Admission {
            max_connections: NonZeroUsize::new(max_connections).unwrap(),
            max_per_client: NonZeroUsize::new(max_per_client).unwrap(),
            when_full: WhenFull::Refuse,
        }
    }

    #[test]
    fn a_full_listener_refuses_and_a_closed_connection_frees_its_place() {
        let metrics = Arc::new(Metrics::new());
        let limit = ConnectionLimit::new("test", refuse(2, 2), metrics.clone());
        let a = limit.admit(1, None).expect("first");
        let _b = limit.admit(2, None).expect("second");
        assert!(limit.admit(3, None).is_none());
        drop(a);
        assert!(limit.admit(4, None).is_some());
        assert!(
            metrics
                .encode()
                .contains("plegd_connections_refused_total{listener=\"test\"} 1")
        );
    }

    #[test]
    fn one_client_cannot_take_the_places_of_others() {
        let metrics = Arc::new(Metrics::new());
        let limit = ConnectionLimit::new("test", refuse(100, 3), metrics.clone());
        let greedy: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3)
            .map(|i| limit.admit(i, Some(greedy)).expect("its share"))
            .collect();
        assert!(limit.admit(9, Some(greedy)).is_none(), "past its share");
        assert!(limit.admit(10, Some(other)).is_some(), "another client still gets in");
        drop(held);
        assert!(limit.admit(11, Some(greedy)).is_some(), "its places are given back");
    }

    #[test]
    fn a_full_evicting_listener_closes_its_oldest_connection() {
        let metrics = Arc::new(Metrics::new());
        let admission = Admission {
            max_connections: NonZeroUsize::new(2).unwrap(),
            max_per_client: NonZeroUsize::new(2).unwrap(),
            when_full: WhenFull::EvictOldest,
        };
        let limit = ConnectionLimit::new("probes", admission, metrics.clone());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let oldest = limit.admit(1, Some(a)).unwrap();
        let next = limit.admit(2, Some(b)).unwrap();
        let kubelet: IpAddr = "10.0.0.3".parse().unwrap();
        let probe = limit.admit(3, Some(kubelet)).expect("a new connection always gets in");
        assert!(oldest.evicted().is_cancelled(), "the oldest is told to close");
        assert!(!next.evicted().is_cancelled() && !probe.evicted().is_cancelled());
        assert!(
            metrics
                .encode()
                .contains("plegd_connections_evicted_total{listener=\"probes\"} 1")
        );
        // The evicted connection ends; the next new one evicts the next oldest; a client past its
        // share closes its own oldest connection, nobody else's.
        drop(oldest);
        let second = limit.admit(4, Some(kubelet)).unwrap();
        assert!(next.evicted().is_cancelled());
        drop(next);
        let third = limit
            .admit(5, Some(kubelet))
            .expect("past its share of 2: its own oldest goes");
        assert!(probe.evicted().is_cancelled(), "its own oldest");
        assert!(!second.evicted().is_cancelled() && !third.evicted().is_cancelled());
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
