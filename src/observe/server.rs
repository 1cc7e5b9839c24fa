//! The observation API's gRPC services on a unix socket: `plegd.v1.EventsService` (each subscriber gets the
//! hub's events that pass its filters) and `plegd.v1.StatusService` (each pod's latest generated status,
//! then each new one and each pod that goes); a subscriber is told how many items it missed when it
//! reads too slowly (a status subscriber then gets every pod's latest status again). A subscriber never
//! slows the PLEG down: a slow one misses events, the PLEG does not wait for it.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::broadcast;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::api::events_service_server::{EventsService, EventsServiceServer};
use super::api::status_service_server::{StatusService, StatusServiceServer};
use super::api::{
    Lagged, StatusRemoved, StatusServiceWatchRequest, StatusServiceWatchResponse, WatchRequest, WatchResponse,
    status_service_watch_response, watch_response,
};
use super::{kind_from, matches, pod_matches, report_matches, report_to_api, to_api};
use crate::metrics::Metrics;
use crate::pleg::EventHub;
use crate::serve::listen::{ACCEPT_ERROR_PAUSE, Admission, ConnectionLimit, WhenFull};
use crate::status::report::{Followed, StatusReport, StatusReports};
use crate::util::supervise::Stage;

/// One open subscription, counted in `plegd_observer_subscriptions` for as long as its stream
/// lives: the connection drops the stream when the client goes.
struct Subscription {
    metrics: Arc<Metrics>,
    service: &'static str,
}

impl Subscription {
    fn open(metrics: Arc<Metrics>, service: &'static str) -> Self {
        metrics.add_observer_subscriptions(service, 1);
        Self { metrics, service }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.metrics.add_observer_subscriptions(self.service, -1);
    }
}

/// The `plegd.v1.EventsService` service.
pub struct EventsApi {
    hub: EventHub,
    metrics: Arc<Metrics>,
}

type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl EventsService for EventsApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let filter = request.into_inner();
        if let Some(bad) = filter.types.iter().find(|t| kind_from(t).is_none()) {
            return Err(Status::invalid_argument(format!(
                "unknown event type {bad:?}; use ContainerStarted, ContainerDied, ContainerRemoved or PodSync"
            )));
        }
        let events = self.hub.subscribe();
        let subscription = Subscription::open(self.metrics.clone(), "events");
        // The stream is polled by the connection as the client takes it in (no task of its own);
        // a client slower than the events makes its subscription lag, and is told how many it missed.
        let stream = futures_util::stream::unfold(
            (events, filter, subscription),
            |(mut events, filter, subscription)| async move {
                loop {
                    let item = match events.recv().await {
                        Ok(event) if matches(&filter, &event) => watch_response::Item::Event(to_api(&event)),
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            subscription.metrics.observer_lagged.inc_by(missed);
                            watch_response::Item::Lagged(Lagged { missed })
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    };
                    return Some((Ok(WatchResponse { item: Some(item) }), (events, filter, subscription)));
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The `plegd.v1.StatusService` service.
pub struct StatusApi {
    reports: StatusReports,
    metrics: Arc<Metrics>,
}

type StatusStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<StatusServiceWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl StatusService for StatusApi {
    type WatchStream = StatusStream;

    async fn watch(&self, request: Request<StatusServiceWatchRequest>) -> Result<Response<StatusStream>, Status> {
        let state = Following::new(&self.reports, request.into_inner(), self.metrics.clone());
        // As for events: polled by the connection as the client reads; a slow client lags, and
        // then gets every pod's latest report again.
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            let item = s.next().await?;
            Some((Ok(StatusServiceWatchResponse { item: Some(item) }), s))
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// One status subscriber's place: items to send, and what follows them.
struct Following {
    queued: std::collections::VecDeque<status_service_watch_response::Item>,
    reports: StatusReports,
    receiver: broadcast::Receiver<Followed>,
    filter: StatusServiceWatchRequest,
    /// Counts this subscription while it lives; its metrics are the ones the subscriber's lag
    /// is counted in.
    subscription: Subscription,
    /// The report last sent of each pod.
    sent: std::collections::HashMap<String, Arc<StatusReport>>,
}

impl Following {
    fn new(reports: &StatusReports, filter: StatusServiceWatchRequest, metrics: Arc<Metrics>) -> Self {
        let (latest, receiver) = reports.follow();
        let mut following = Following {
            queued: Default::default(),
            reports: reports.clone(),
            receiver,
            filter,
            subscription: Subscription::open(metrics, "status"),
            sent: Default::default(),
        };
        following.queue_unsent(latest);
        following
    }

    /// Queue the reports of `latest` that pass the filter and were not sent already.
    fn queue_unsent(&mut self, latest: Vec<(String, Arc<StatusReport>)>) {
        for (uid, report) in latest {
            if report_matches(&self.filter, &report) && !self.sent.get(&uid).is_some_and(|s| Arc::ptr_eq(s, &report)) {
                self.queued
                    .push_back(status_service_watch_response::Item::Report(report_to_api(&report)));
                self.sent.insert(uid, report);
            }
        }
    }

    /// The subscriber's next item; None once plegd stops.
    async fn next(&mut self) -> Option<status_service_watch_response::Item> {
        use status_service_watch_response::Item;
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Some(item);
            }
            match self.receiver.recv().await {
                Ok(Followed::Report(uid, report)) if report_matches(&self.filter, &report) => {
                    self.queued.push_back(Item::Report(report_to_api(&report)));
                    self.sent.insert(uid, report);
                }
                Ok(Followed::Removed { uid, pod }) => {
                    if self.sent.remove(&uid).is_some() || pod_matches(&self.filter, &pod) {
                        self.queued.push_back(Item::Removed(StatusRemoved {
                            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                            pod: pod.metadata.name.clone().unwrap_or_default(),
                            pod_uid: uid,
                        }));
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Every pod's latest that was not sent yet, and the removal of every pod sent
                    // that is gone since: what the missed items held.
                    self.subscription.metrics.observer_lagged.inc_by(missed);
                    let (latest, receiver) = self.reports.follow();
                    self.receiver = receiver;
                    self.queued.push_back(Item::Lagged(Lagged { missed }));
                    let present: std::collections::HashSet<&str> = latest.iter().map(|(uid, _)| uid.as_str()).collect();
                    let gone: Vec<String> = self
                        .sent
                        .keys()
                        .filter(|uid| !present.contains(uid.as_str()))
                        .cloned()
                        .collect();
                    for uid in gone {
                        if let Some(report) = self.sent.remove(&uid) {
                            self.queued.push_back(Item::Removed(StatusRemoved {
                                namespace: report.pod.metadata.namespace.clone().unwrap_or_default(),
                                pod: report.pod.metadata.name.clone().unwrap_or_default(),
                                pod_uid: uid,
                            }));
                        }
                    }
                    self.queue_unsent(latest);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// Why the API socket cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot create the directory of --api-socket {path}: {error}")]
    Dir { path: PathBuf, error: std::io::Error },
    #[error("cannot listen on --api-socket {path}: {error}")]
    Bind { path: PathBuf, error: std::io::Error },
    #[error("cannot inspect --api-socket {path}: {error}")]
    Inspect { path: PathBuf, error: std::io::Error },
    #[error(
        "--api-socket {path}: a file that is not a socket is there; plegd replaces only a socket left by an earlier plegd"
    )]
    NotSocket { path: PathBuf },
    #[error("--api-socket {path}: another process is serving this socket")]
    InUse { path: PathBuf },
}

/// Whether `path` may become the API socket: nothing there, or a socket no process answers on (left
/// by a plegd that died). Any other file is refused, never removed.
pub fn check_socket_path(path: &Path) -> Result<(), ApiError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(ApiError::Inspect {
            path: path.to_owned(),
            error,
        }),
        Ok(meta) if !meta.file_type().is_socket() => Err(ApiError::NotSocket { path: path.to_owned() }),
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => Err(ApiError::InUse { path: path.to_owned() }),
            Err(_) => Ok(()),
        },
    }
}

/// Remove a stale socket at `path` (see [`check_socket_path`]) so that it can be bound again.
fn remove_stale_socket(path: &Path) -> Result<(), ApiError> {
    check_socket_path(path)?;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ApiError::Bind {
            path: path.to_owned(),
            error: e,
        }),
        _ => Ok(()),
    }
}

/// Connections the API socket holds at once (it is owner- and group-only: a small number suffices).
pub const MAX_API_CONNECTIONS: NonZeroUsize = NonZeroUsize::new(64).unwrap();
/// Streams one connection may have open at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 16;

/// Serve the observation API on `path`: a socket left by an earlier plegd is replaced, any other
/// file refused; the directory is created owner-only; at most `max_connections` at once, and a
/// peer that stops answering HTTP/2 pings is dropped. Returns the server's stage.
pub fn serve(
    path: &Path,
    hub: EventHub,
    reports: StatusReports,
    metrics: Arc<Metrics>,
    max_connections: NonZeroUsize,
) -> Result<Stage, ApiError> {
    use futures_util::StreamExt;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Creating what exists is not an error; only a new directory gets the mode.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|error| ApiError::Dir {
                path: dir.to_owned(),
                error,
            })?;
    }
    remove_stale_socket(path)?;
    let listener = UnixListener::bind(path).map_err(|error| ApiError::Bind {
        path: path.to_owned(),
        error,
    })?;
    // Only the owner (and its group) may follow events.
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660));
    info!(socket = %path.display(), max_connections, "observation API listening");
    // A unix socket: its clients are local processes with write access to it, told apart by no
    // address; the limit is for all of them.
    let admission = ConnectionLimit::new(
        "api",
        Admission {
            max_connections,
            max_per_client: max_connections,
            when_full: WhenFull::Refuse,
        },
        metrics.clone(),
    );
    let incoming = UnixListenerStream::new(listener).filter_map(move |accepted| {
        let admitted = match accepted {
            Ok(stream) => Ok(admission.admit(stream, None).map(Ok::<_, std::io::Error>)),
            Err(error) => Err(error),
        };
        async move {
            match admitted {
                Ok(admitted) => admitted,
                Err(error) => {
                    // Out of file descriptors, most likely: pause rather than spin on the error.
                    warn!(error = %error, "accepting an API connection failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    None
                }
            }
        }
    });
    let statuses = StatusServiceServer::new(StatusApi {
        reports,
        metrics: metrics.clone(),
    });
    let service = EventsServiceServer::new(EventsApi { hub, metrics });
    Ok(Box::pin(async move {
        if let Err(error) = tonic::transport::Server::builder()
            .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(service)
            .add_service(statuses)
            .serve_with_incoming(incoming)
            .await
        {
            warn!(error = %error, "observation API server failed");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use status_service_watch_response::Item;

    fn report(namespace: &str, name: &str, rv: usize) -> crate::status::report::StatusReport {
        let mut pod = crate::apiserver::pod::ApiPod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.resource_version = Some(rv.to_string());
        let at = std::time::SystemTime::UNIX_EPOCH;
        crate::status::report::StatusReport::new(Arc::new(pod), Default::default(), at, at)
    }

    fn following(reports: &StatusReports, filter: StatusServiceWatchRequest) -> Following {
        Following::new(reports, filter, Arc::new(Metrics::new()))
    }

    fn named(item: &Item) -> String {
        match item {
            Item::Report(r) => format!("{}/{}@{}", r.namespace, r.pod, r.resource_version),
            Item::Removed(r) => format!("removed {}/{}", r.namespace, r.pod),
            Item::Lagged(l) => format!("lagged {}", l.missed),
        }
    }

    /// A subscriber that read too slowly is told how many items it missed, then gets every pod's
    /// latest report again: a pod whose only report it missed (db) is not left out.
    #[tokio::test]
    async fn a_lagging_subscriber_gets_every_pods_latest_again() {
        let reports = StatusReports::default();
        reports.put("web", report("prod", "web", 1));
        let mut f = following(&reports, StatusServiceWatchRequest::default());
        assert_eq!(named(&f.next().await.unwrap()), "prod/web@1");
        reports.put("db", report("dev", "db", 1));
        for rv in 2..3000 {
            reports.put("web", report("prod", "web", rv));
        }
        let lagged = named(&f.next().await.unwrap());
        assert!(lagged.starts_with("lagged "), "{lagged}");
        let mut again = vec![named(&f.next().await.unwrap()), named(&f.next().await.unwrap())];
        again.sort();
        assert_eq!(again, ["dev/db@1", "prod/web@2999"]);
        // Then only what comes next.
        reports.remove("db");
        assert_eq!(named(&f.next().await.unwrap()), "removed dev/db");
    }

    /// A pod removed while its subscriber lagged is reported removed after the lag, not kept.
    #[tokio::test]
    async fn a_lagging_subscriber_is_told_of_the_pods_removed_meanwhile() {
        let reports = StatusReports::default();
        reports.put("web", report("prod", "web", 1));
        reports.put("db", report("dev", "db", 1));
        let mut f = following(&reports, StatusServiceWatchRequest::default());
        let mut first = vec![named(&f.next().await.unwrap()), named(&f.next().await.unwrap())];
        first.sort();
        assert_eq!(first, ["dev/db@1", "prod/web@1"]);
        reports.remove("db");
        for rv in 2..3000 {
            reports.put("web", report("prod", "web", rv));
        }
        let lagged = named(&f.next().await.unwrap());
        assert!(lagged.starts_with("lagged "), "{lagged}");
        let mut after = vec![named(&f.next().await.unwrap()), named(&f.next().await.unwrap())];
        after.sort();
        assert_eq!(after, ["prod/web@2999", "removed dev/db"]);
        assert_eq!(f.sent.len(), 1, "the removed pod is not kept");
    }

    /// A subscriber gets every new report of a pod, in order.
    #[tokio::test]
    async fn a_subscriber_gets_every_report() {
        let reports = StatusReports::default();
        let mut f = following(&reports, StatusServiceWatchRequest::default());
        for rv in 1..=3 {
            reports.put("web", report("prod", "web", rv));
        }
        for rv in 1..=3 {
            assert_eq!(named(&f.next().await.unwrap()), format!("prod/web@{rv}"));
        }
    }

    /// Each open subscription is counted while its stream lives, per service, and uncounted when
    /// the client goes (its stream dropped).
    #[tokio::test]
    async fn subscriptions_are_counted_while_open() {
        let metrics = Arc::new(Metrics::new());
        let open = |service: &str| {
            let needle = format!("plegd_observer_subscriptions{{service=\"{service}\"}} ");
            metrics
                .encode()
                .lines()
                .find_map(|l| l.strip_prefix(&needle).map(str::to_owned))
                .unwrap_or_else(|| panic!("no {needle}"))
        };
        let events = EventsApi {
            hub: EventHub::new(NonZeroUsize::new(8).unwrap()),
            metrics: metrics.clone(),
        };
        let first = events.watch(Request::new(WatchRequest::default())).await.unwrap();
        let second = events.watch(Request::new(WatchRequest::default())).await.unwrap();
        let status = Following::new(&StatusReports::default(), Default::default(), metrics.clone());
        assert_eq!((open("events"), open("status")), ("2".into(), "1".into()));
        drop(first);
        drop(status);
        assert_eq!((open("events"), open("status")), ("1".into(), "0".into()));
        drop(second);
        assert_eq!(open("events"), "0");
        // A refused request opens nothing.
        let bad = WatchRequest {
            types: vec!["Nonsense".into()],
            ..Default::default()
        };
        assert!(events.watch(Request::new(bad)).await.is_err());
        assert_eq!(open("events"), "0");
    }

    /// Filters apply to reports and removals alike.
    #[tokio::test]
    async fn filters_apply_to_removals() {
        let reports = StatusReports::default();
        reports.put("web", report("prod", "web", 1));
        reports.put("db", report("dev", "db", 1));
        let filter = StatusServiceWatchRequest {
            namespace: "prod".into(),
            pod: String::new(),
        };
        let mut f = following(&reports, filter);
        assert_eq!(named(&f.next().await.unwrap()), "prod/web@1");
        reports.remove("db");
        reports.remove("web");
        assert_eq!(named(&f.next().await.unwrap()), "removed prod/web");
    }
}
