//! `plegd events`: the client side of the observation API, printing a running daemon's events. It
//! only reads; it never changes the daemon's state.

use std::path::{Path, PathBuf};

use tonic::Status;

use super::api::{self, Lagged, WatchRequest, watch_response};
use super::from_api;

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
    format: crate::print::OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    if !socket.exists() {
        return Err(FollowError::NoSocket {
            path: socket.to_owned(),
        });
    }
    let options = crate::runtime::CriOptions::default();
    let backoff = options.backoff.clone();
    let channel = crate::runtime::unix_channel(socket, options.connect_timeout, backoff, None);
    let mut client = api::events_service_client::EventsServiceClient::new(channel);
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
                let line = crate::print::format_event(&event, format);
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
