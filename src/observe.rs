//! Observers: who else sees the lifecycle events. The fan-out task takes each event from the
//! PLEG's channel, hands it to the syncLoop, and publishes it on a bounded broadcast that the
//! `plegd.v1.Events` gRPC service (on a unix socket) streams to subscribers such as
//! `plegd events`. A slow subscriber never slows the PLEG: it falls behind the broadcast's ring
//! buffer, misses events, and is told how many (a `lagged` item), which is also counted.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::pleg::{PodLifecycleEvent, PodLifecycleEventType};
use crate::supervise::Stage;

/// The generated `plegd.v1` API.
pub mod api {
    tonic::include_proto!("plegd.v1");
}

use api::events_server::{Events, EventsServer};
use api::{Lagged, LifecycleEvent, WatchRequest, WatchResponse, watch_response};

/// Default place of the API socket.
pub const DEFAULT_API_SOCKET: &str = "/run/plegd/plegd.sock";
/// Events each subscriber may fall behind before it misses some.
pub const SUBSCRIBER_BUFFER: usize = 4096;

/// The broadcast of lifecycle events to observers.
#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<PodLifecycleEvent>>,
}

impl EventHub {
    pub fn new(buffer: usize) -> Self {
        Self {
            tx: broadcast::channel(buffer.max(1)).0,
        }
    }

    /// Publish to whoever listens; never waits.
    pub fn publish(&self, event: PodLifecycleEvent) {
        let _ = self.tx.send(Arc::new(event));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PodLifecycleEvent>> {
        self.tx.subscribe()
    }

    pub fn subscribers(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// Move events from the PLEG to the hub and (if given) the syncLoop, until the PLEG's channel closes.
/// Waiting on a busy syncLoop makes the PLEG's own channel fill, which the PLEG handles without
/// losing anything; observers are never waited on.
pub async fn fan_out(
    mut events: mpsc::Receiver<PodLifecycleEvent>,
    hub: EventHub,
    sync_loop: Option<mpsc::Sender<PodLifecycleEvent>>,
    metrics: Arc<Metrics>,
) {
    while let Some(event) = events.recv().await {
        let latency = SystemTime::now().duration_since(event.timestamp).unwrap_or_default();
        metrics.event_latency.observe(latency.as_secs_f64());
        hub.publish(event.clone());
        if let Some(sync_loop) = &sync_loop
            && sync_loop.send(event).await.is_err()
        {
            return;
        }
    }
}

/// An event in the API's form.
pub fn to_api(event: &PodLifecycleEvent) -> LifecycleEvent {
    LifecycleEvent {
        r#type: event.kind.as_str().to_owned(),
        pod_uid: event.pod_uid.clone(),
        container_id: event.container_id.clone().unwrap_or_default(),
        namespace: event.namespace.clone().unwrap_or_default(),
        pod: event.pod.clone().unwrap_or_default(),
        container: event.container.clone().unwrap_or_default(),
        sandbox: event.sandbox,
        exit_code: event.exit_code,
        reason: event.reason.clone().unwrap_or_default(),
        timestamp_unix_nanos: event
            .timestamp
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as i64,
    }
}

fn kind_from(name: &str) -> Option<PodLifecycleEventType> {
    use PodLifecycleEventType::*;
    [ContainerStarted, ContainerDied, ContainerRemoved, PodSync]
        .into_iter()
        .find(|k| k.as_str() == name)
}

/// An API event back in plegd's form (what `plegd events` prints). None for an unknown type.
pub fn from_api(event: &LifecycleEvent) -> Option<PodLifecycleEvent> {
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Some(PodLifecycleEvent {
        kind: kind_from(&event.r#type)?,
        pod_uid: event.pod_uid.clone(),
        container_id: some(&event.container_id),
        namespace: some(&event.namespace),
        pod: some(&event.pod),
        container: some(&event.container),
        sandbox: event.sandbox,
        exit_code: event.exit_code,
        reason: some(&event.reason),
        timestamp: UNIX_EPOCH + Duration::from_nanos(event.timestamp_unix_nanos.max(0) as u64),
    })
}

/// Whether `event` passes a subscriber's filters.
pub fn matches(filter: &WatchRequest, event: &PodLifecycleEvent) -> bool {
    (filter.namespace.is_empty() || event.namespace.as_deref() == Some(filter.namespace.as_str()))
        && (filter.pod.is_empty() || event.pod.as_deref() == Some(filter.pod.as_str()))
        && (filter.types.is_empty() || filter.types.iter().any(|t| t == event.kind.as_str()))
}

/// The `plegd.v1.Events` service.
pub struct EventsService {
    hub: EventHub,
    metrics: Arc<Metrics>,
}

type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Events for EventsService {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let filter = request.into_inner();
        if let Some(bad) = filter.types.iter().find(|t| kind_from(t).is_none()) {
            return Err(Status::invalid_argument(format!(
                "unknown event type {bad:?}; use ContainerStarted, ContainerDied, ContainerRemoved or PodSync"
            )));
        }
        let events = self.hub.subscribe();
        let metrics = self.metrics.clone();
        // The stream is polled by the connection as the client takes it in (no task of its own);
        // a client slower than the events makes its subscription lag, and is told how many it missed.
        let stream =
            futures_util::stream::unfold((events, filter, metrics), |(mut events, filter, metrics)| async move {
                loop {
                    let item = match events.recv().await {
                        Ok(event) if matches(&filter, &event) => watch_response::Item::Event(to_api(&event)),
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            metrics.observer_lagged.inc_by(missed);
                            watch_response::Item::Lagged(Lagged { missed })
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    };
                    return Some((Ok(WatchResponse { item: Some(item) }), (events, filter, metrics)));
                }
            });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Why the API socket cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot create the directory of --api-socket {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on --api-socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Serve the observation API on `path` (a stale socket file is replaced; the directory is created
/// owner-only). Returns the server task.
pub fn serve(path: &Path, hub: EventHub, metrics: Arc<Metrics>) -> Result<Stage, ApiError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| ApiError::Dir {
                path: dir.to_owned(),
                source,
            })?;
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|source| ApiError::Bind {
        path: path.to_owned(),
        source,
    })?;
    // Only the owner (and its group) may follow events.
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660));
    info!(socket = %path.display(), "observation API listening");
    let service = EventsServer::new(EventsService { hub, metrics });
    Ok(Box::pin(async move {
        if let Err(error) = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await
        {
            warn!(error = %error, "observation API server failed");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: PodLifecycleEventType, ns: &str, pod: &str) -> PodLifecycleEvent {
        PodLifecycleEvent {
            kind,
            pod_uid: "u1".into(),
            container_id: Some("c1".into()),
            namespace: Some(ns.into()),
            pod: Some(pod.into()),
            container: Some("app".into()),
            sandbox: false,
            exit_code: Some(3),
            reason: Some("Error".into()),
            timestamp: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        }
    }

    #[test]
    fn api_form_round_trips() {
        let e = event(PodLifecycleEventType::ContainerDied, "ns", "web");
        assert_eq!(from_api(&to_api(&e)), Some(e));
        let mut sync = event(PodLifecycleEventType::PodSync, "ns", "web");
        sync.container_id = None;
        sync.exit_code = None;
        assert_eq!(from_api(&to_api(&sync)), Some(sync));
    }

    #[test]
    fn filters_are_anded() {
        let e = event(PodLifecycleEventType::ContainerDied, "ns", "web");
        let f = |ns: &str, pod: &str, types: &[&str]| WatchRequest {
            namespace: ns.into(),
            pod: pod.into(),
            types: types.iter().map(|t| t.to_string()).collect(),
        };
        assert!(matches(&f("", "", &[]), &e));
        assert!(matches(&f("ns", "web", &["ContainerDied"]), &e));
        assert!(!matches(&f("other", "", &[]), &e));
        assert!(!matches(&f("ns", "db", &[]), &e));
        assert!(!matches(&f("", "", &["ContainerStarted", "PodSync"]), &e));
    }
}

/// Why `plegd events` stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("no plegd API socket at {path}; is `plegd run` running (see its --api-socket)?")]
    NoSocket { path: PathBuf },
    #[error("plegd's API refused the request: {0}")]
    Refused(#[source] Status),
    #[error("the event stream from plegd broke: {0}")]
    Broken(#[source] Status),
    #[error("writing events failed: {0}")]
    Output(#[source] std::io::Error),
}

/// `plegd events`: follow a running daemon's events, one line each, until the daemon goes away
/// (Ok) or the reader does. Missed events (a slow reader) are reported on stderr.
pub async fn follow(
    socket: &Path,
    request: WatchRequest,
    format: crate::watch::OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    if !socket.exists() {
        return Err(FollowError::NoSocket {
            path: socket.to_owned(),
        });
    }
    let options = crate::runtime::CriOptions::default();
    let backoff = crate::backoff::ExponentialBackoff::constant(options.initial_backoff, options.max_backoff);
    let channel = crate::runtime::unix_channel(socket, options.connect_timeout, backoff, None);
    let mut client = api::events_client::EventsClient::new(channel);
    let mut stream = client.watch(request).await.map_err(FollowError::Refused)?.into_inner();
    loop {
        let item = match stream.message().await {
            Ok(Some(response)) => response.item,
            Ok(None) => return Ok(()),
            Err(status) if status.code() == tonic::Code::Unavailable => return Ok(()),
            Err(status) => return Err(FollowError::Broken(status)),
        };
        match item {
            Some(watch_response::Item::Event(event)) => {
                let Some(event) = from_api(&event) else { continue };
                let line = crate::watch::format_event(&event, format);
                match writeln!(out, "{line}").and_then(|()| out.flush()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(FollowError::Output(e)),
                }
            }
            Some(watch_response::Item::Lagged(Lagged { missed })) => {
                eprintln!("plegd events: missed {missed} events (reading too slowly)");
            }
            None => {}
        }
    }
}
