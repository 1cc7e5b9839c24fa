//! The observation API's gRPC services on a unix socket: `plegd.v1.EventsService` (each subscriber gets the
//! hub's events that pass its filters) and `plegd.v1.StatusService` (each pod's latest generated status,
//! then each new one); a subscriber is told how many items it missed when it reads too slowly. A subscriber never
//! slows the PLEG down: a slow one misses events, the PLEG does not wait for it.

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
    Lagged, StatusServiceWatchRequest, StatusServiceWatchResponse, WatchRequest, WatchResponse,
    status_service_watch_response, watch_response,
};
use super::{kind_from, matches, report_matches, report_to_api, to_api};
use crate::listen::{ACCEPT_ERROR_PAUSE, Admission, ConnectionLimit, WhenFull};
use crate::metrics::Metrics;
use crate::pleg::EventHub;
use crate::status::report::StatusReports;
use crate::supervise::Stage;

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
        use futures_util::StreamExt;
        use status_service_watch_response::Item;
        let filter = request.into_inner();
        let (latest, reports) = self.reports.follow();
        let metrics = self.metrics.clone();
        fn respond(item: status_service_watch_response::Item) -> Result<StatusServiceWatchResponse, Status> {
            Ok(StatusServiceWatchResponse { item: Some(item) })
        }
        let first: Vec<_> = latest
            .iter()
            .filter(|r| report_matches(&filter, r))
            .map(|r| respond(Item::Report(report_to_api(r))))
            .collect();
        // As for events: polled by the connection as the client reads; a slow client lags.
        let rest = futures_util::stream::unfold(
            (reports, filter, metrics),
            |(mut reports, filter, metrics)| async move {
                loop {
                    let item = match reports.recv().await {
                        Ok(report) if report_matches(&filter, &report) => Item::Report(report_to_api(&report)),
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            metrics.observer_lagged.inc_by(missed);
                            Item::Lagged(Lagged { missed })
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    };
                    return Some((respond(item), (reports, filter, metrics)));
                }
            },
        );
        Ok(Response::new(Box::pin(futures_util::stream::iter(first).chain(rest))))
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
    #[error("cannot inspect --api-socket {path}: {source}")]
    Inspect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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
        Err(source) => Err(ApiError::Inspect {
            path: path.to_owned(),
            source,
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
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Connections the API socket holds at once (it is owner- and group-only: a small number suffices).
pub const MAX_API_CONNECTIONS: usize = 64;
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
    max_connections: usize,
) -> Result<Stage, ApiError> {
    use futures_util::StreamExt;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Creating what exists is not an error; only a new directory gets the mode.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| ApiError::Dir {
                path: dir.to_owned(),
                source,
            })?;
    }
    remove_stale_socket(path)?;
    let listener = UnixListener::bind(path).map_err(|source| ApiError::Bind {
        path: path.to_owned(),
        source,
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
