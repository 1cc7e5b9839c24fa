//! `plegd events` and `plegd status`: the client side of the observation API, printing a running
//! daemon's events or generated statuses. It only reads; it never changes the daemon's state.

use std::path::{Path, PathBuf};

use tonic::Status;

use super::api::{
    self, Lagged, StatusServiceWatchRequest, WatchRequest, status_service_watch_response, watch_response,
};
use super::from_api;

/// Why `plegd events` stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("no plegd API socket at {path}; is `plegd run` running (see its --api-socket)?")]
    NoSocket { path: PathBuf },
    #[error("plegd's API refused the request: {0}")]
    Refused(#[source] Status),
    #[error("the stream from plegd broke: {0}")]
    Broken(#[source] Status),
    #[error("writing the output failed: {0}")]
    Output(#[source] std::io::Error),
}

/// `plegd events`: follow a running daemon's events, one line each, until the daemon goes away
/// (Ok) or the reader does. Missed events (a slow reader) are reported on stderr.
pub async fn follow(
    socket: &Path,
    request: WatchRequest,
    format: crate::print::OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    let mut client = api::events_service_client::EventsServiceClient::new(channel(socket)?);
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
                if !print(&mut out, &crate::print::format_event(&event, format))? {
                    return Ok(());
                }
            }
            Some(watch_response::Item::Lagged(Lagged { missed })) => {
                eprintln!("plegd events: missed {missed} events (reading too slowly)");
            }
            None => {}
        }
    }
}

/// A channel to the daemon's API socket.
fn channel(socket: &Path) -> Result<tonic::transport::Channel, FollowError> {
    if !socket.exists() {
        return Err(FollowError::NoSocket {
            path: socket.to_owned(),
        });
    }
    let options = crate::runtime::CriOptions::default();
    let backoff = options.backoff.clone();
    Ok(crate::runtime::unix_channel(
        socket,
        options.connect_timeout,
        backoff,
        None,
    ))
}

/// Print one line; false when the reader has gone (a closed pipe).
fn print(out: &mut impl std::io::Write, line: &str) -> Result<bool, FollowError> {
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(FollowError::Output(e)),
    }
}

/// `plegd status`: follow a running daemon's generated statuses (each pod's latest first), one line
/// each, until the daemon goes away (Ok) or the reader does. Missed reports are said on stderr.
pub async fn follow_statuses(
    socket: &Path,
    request: StatusServiceWatchRequest,
    format: crate::print::OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    let mut client = api::status_service_client::StatusServiceClient::new(channel(socket)?);
    let mut stream = client.watch(request).await.map_err(FollowError::Refused)?.into_inner();
    loop {
        let item = match stream.message().await {
            Ok(Some(response)) => response.item,
            Ok(None) => return Ok(()),
            Err(status) if status.code() == tonic::Code::Unavailable => return Ok(()),
            Err(status) => return Err(FollowError::Broken(status)),
        };
        match item {
            Some(status_service_watch_response::Item::Report(report))
                if !print(&mut out, &crate::print::format_report(&report, format))? =>
            {
                return Ok(());
            }
            Some(status_service_watch_response::Item::Report(_)) => {}
            Some(status_service_watch_response::Item::Lagged(Lagged { missed })) => {
                eprintln!("plegd status: missed {missed} status reports (reading too slowly)");
            }
            None => {}
        }
    }
}
