//! `plegd events` and `plegd status`: the client side of the observation API, printing a running
//! daemon's events or generated statuses. It only reads; it never changes the daemon's state.

use std::path::{Path, PathBuf};

use tonic::Status;

use super::api::{
    self, Lagged, StatusServiceWatchRequest, WatchRequest, status_service_watch_response, watch_response,
};
use super::from_api;
use crate::observe::print::OutputFormat;

/// Why `plegd events` stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("no plegd API socket at {path}; is `plegd run` running (see its --api-socket)?")]
    NoSocket { path: PathBuf },
    #[error("plegd's API refused the request: {0}")]
    Refused(Status),
    #[error("the stream from plegd broke: {0}")]
    Broken(Status),
    #[error("writing the output failed: {0}")]
    Output(std::io::Error),
}

/// `plegd events`: follow a running daemon's events, one line each, until the daemon goes away
/// (Ok) or the reader does. Missed events (a slow reader) are reported on stderr.
pub async fn follow(
    socket: &Path,
    request: WatchRequest,
    format: OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    let mut client = api::events_service_client::EventsServiceClient::new(channel(socket)?);
    let mut stream = client.watch(request).await.map_err(FollowError::Refused)?.into_inner();
    loop {
        let Some(item) = next_message(&mut stream).await? else {
            return Ok(());
        };
        let item = item.item;
        match item {
            Some(watch_response::Item::Event(event)) => {
                let Some(event) = from_api(&event) else { continue };
                if !print(&mut out, &crate::observe::print::format_event(&event, format))? {
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

/// One status report (`plegd status`) as a line, without the newline: text says whether plegd's
/// status agrees with the apiserver's and, if not, each difference; JSON carries the whole generated
/// status.
pub fn format_report(report: &api::StatusReport, format: OutputFormat) -> String {
    let nanos = |n: i64| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(n.max(0) as u64);
    match format {
        OutputFormat::Json => {
            let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap_or(serde_json::Value::Null);
            let differences: Vec<serde_json::Value> = report
                .differences
                .iter()
                .map(|d| {
                    let mut v = serde_json::json!({
                        "path": d.path,
                        "apiserver": parse(&d.apiserver_json),
                        "plegd": parse(&d.plegd_json),
                    });
                    if !d.unknowable.is_empty() {
                        v["unknowable"] = d.unknowable.clone().into();
                    }
                    v
                })
                .collect();
            serde_json::json!({
                "namespace": report.namespace,
                "pod": report.pod,
                "podUID": report.pod_uid,
                "resourceVersion": report.resource_version,
                "generatedAt": humantime::format_rfc3339_nanos(nanos(report.generated_at_unix_nanos)).to_string(),
                "runtimeReadAt": humantime::format_rfc3339_nanos(nanos(report.runtime_read_at_unix_nanos)).to_string(),
                "status": parse(&report.status_json),
                "differences": differences,
            })
            .to_string()
        }
        OutputFormat::Text => {
            let mut line = format!(
                "{}  {}/{}  rv={}",
                humantime::format_rfc3339_millis(nanos(report.generated_at_unix_nanos)),
                crate::observe::print::printable(&report.namespace),
                crate::observe::print::printable(&report.pod),
                crate::observe::print::printable(&report.resource_version)
            );
            let known: Vec<_> = report.differences.iter().filter(|d| d.unknowable.is_empty()).collect();
            let unknowable = report.differences.len() - known.len();
            if known.is_empty() {
                line.push_str("  agrees");
            } else {
                line.push_str("  differs:");
                for d in known {
                    line.push_str(&format!(
                        "  {} apiserver={} plegd={}",
                        crate::observe::print::printable(&d.path),
                        crate::observe::print::printable(&d.apiserver_json),
                        crate::observe::print::printable(&d.plegd_json)
                    ));
                }
            }
            if unknowable > 0 {
                line.push_str(&format!("  (+{unknowable} only the kubelet can know)"));
            }
            line
        }
    }
}

/// One line for a pod whose status is no longer followed.
pub fn format_removed(removed: &api::StatusRemoved, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => serde_json::json!({
            "removed": {"namespace": removed.namespace, "pod": removed.pod, "podUID": removed.pod_uid},
        })
        .to_string(),
        OutputFormat::Text => format!(
            "{}  {}/{}  removed",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
            crate::observe::print::printable(&removed.namespace),
            crate::observe::print::printable(&removed.pod)
        ),
    }
}

/// The next item of a stream from the daemon; None when the daemon ended it or went away.
async fn next_message<T>(stream: &mut tonic::Streaming<T>) -> Result<Option<T>, FollowError> {
    match stream.message().await {
        Ok(Some(response)) => Ok(Some(response)),
        Ok(None) => Ok(None),
        Err(status) if status.code() == tonic::Code::Unavailable => Ok(None),
        Err(status) => Err(FollowError::Broken(status)),
    }
}

/// A channel to the daemon's API socket.
fn channel(socket: &Path) -> Result<tonic::transport::Channel, FollowError> {
    if !socket.exists() {
        return Err(FollowError::NoSocket {
            path: socket.to_owned(),
        });
    }
    let options = crate::runtime::CriConfig::default();
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
    format: OutputFormat,
    mut out: impl std::io::Write,
) -> Result<(), FollowError> {
    let mut client = api::status_service_client::StatusServiceClient::new(channel(socket)?);
    let mut stream = client.watch(request).await.map_err(FollowError::Refused)?.into_inner();
    loop {
        let Some(item) = next_message(&mut stream).await? else {
            return Ok(());
        };
        let item = item.item;
        match item {
            Some(status_service_watch_response::Item::Report(report))
                if !print(&mut out, &format_report(&report, format))? =>
            {
                return Ok(());
            }
            Some(status_service_watch_response::Item::Report(_)) => {}
            Some(status_service_watch_response::Item::Removed(removed))
                if !print(&mut out, &format_removed(&removed, format))? =>
            {
                return Ok(());
            }
            Some(status_service_watch_response::Item::Removed(_)) => {}
            Some(status_service_watch_response::Item::Lagged(Lagged { missed })) => {
                eprintln!(
                    "plegd status: missed {missed} status reports (reading too slowly); every pod's latest follows again"
                );
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_says_what_differs_on_one_line() {
        use crate::observe::api::{Difference, StatusReport};
        use crate::observe::print::OutputFormat;
        let report = StatusReport {
            namespace: "ns".into(),
            pod: "web\nx".into(),
            pod_uid: "u1".into(),
            resource_version: "42".into(),
            status_json: r#"{"phase":"Running"}"#.into(),
            differences: vec![
                Difference {
                    path: "phase".into(),
                    apiserver_json: r#""Pending""#.into(),
                    plegd_json: r#""Running""#.into(),
                    unknowable: String::new(),
                },
                Difference {
                    path: "containerStatuses[app].state.waiting.reason".into(),
                    apiserver_json: r#""CrashLoopBackOff""#.into(),
                    plegd_json: "null".into(),
                    unknowable: "back-off".into(),
                },
            ],
            generated_at_unix_nanos: 0,
            runtime_read_at_unix_nanos: 0,
        };
        let line = format_report(&report, OutputFormat::Text);
        assert_eq!(
            line,
            r#"1970-01-01T00:00:00.000Z  ns/web\nx  rv=42  differs:  phase apiserver="Pending" plegd="Running"  (+1 only the kubelet can know)"#
        );
        let json: serde_json::Value = serde_json::from_str(&format_report(&report, OutputFormat::Json)).unwrap();
        assert_eq!(json["status"]["phase"], "Running");
        assert_eq!(json["differences"][1]["unknowable"], "back-off");
        assert_eq!(json["differences"][0]["apiserver"], "Pending");
        let agreeing = StatusReport {
            differences: vec![],
            ..report
        };
        assert!(format_report(&agreeing, OutputFormat::Text).ends_with("rv=42  agrees"));
    }
}
