//! How people observe plegd: its lifecycle events and statuses, served and followed. `server`: the
//! `plegd.v1.EventsService` gRPC service (on a unix socket) streams the lifecycle events the PLEG's
//! fan-out publishes (`pleg::EventHub`) to subscribers, and `plegd.v1.StatusService` the statuses
//! the syncLoop generates (`status::report`); `client`: `plegd events` and `plegd status`, such
//! subscribers; `watch`: `plegd watch`, a PLEG of its own with its events printed; `print`: how all
//! of them print an event. A slow subscriber never slows the PLEG: it falls behind the broadcast's
//! ring buffer, misses events, and is told how many (a `lagged` item), also counted. This file holds
//! what they share: the API's form of an event and the subscription filter.

mod client;
pub mod print;
mod server;
pub mod watch;

use std::time::{Duration, UNIX_EPOCH};

use crate::pleg::{PodLifecycleEvent, PodLifecycleEventType};

pub use client::{FollowError, follow, follow_statuses};
pub use server::{ApiError, EventsApi, MAX_API_CONNECTIONS, StatusApi, check_socket_path, serve};

/// The generated `plegd.v1` API. (A stream item is an event or a lag notice; boxing the event
/// would cost an allocation per item for nothing.)
#[allow(clippy::large_enum_variant)]
pub mod api {
    tonic::include_proto!("plegd.v1");
}

use api::{LifecycleEvent, StatusServiceWatchRequest, WatchRequest};

use crate::status::report::StatusReport;

/// Default place of the API socket.
pub const DEFAULT_API_SOCKET: &str = "/run/plegd/plegd.sock";

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
        message: event.message.clone().unwrap_or_default(),
        timestamp_unix_nanos: unix_nanos(event.timestamp),
    }
}

pub(crate) fn kind_from(name: &str) -> Option<PodLifecycleEventType> {
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
        message: some(&event.message),
        timestamp: UNIX_EPOCH + Duration::from_nanos(event.timestamp_unix_nanos.max(0) as u64),
    })
}

/// Whether `event` passes a subscriber's filters.
pub fn matches(filter: &WatchRequest, event: &PodLifecycleEvent) -> bool {
    (filter.namespace.is_empty() || event.namespace.as_deref() == Some(filter.namespace.as_str()))
        && (filter.pod.is_empty() || event.pod.as_deref() == Some(filter.pod.as_str()))
        && (filter.types.is_empty() || filter.types.iter().any(|t| t == event.kind.as_str()))
}

/// Nanoseconds since the epoch; a time past what an i64 holds (the year 2262) is its largest.
fn unix_nanos(t: std::time::SystemTime) -> i64 {
    i64::try_from(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()).unwrap_or(i64::MAX)
}

/// A status report in the API's form.
pub fn report_to_api(report: &StatusReport) -> api::StatusReport {
    let meta = &report.pod.metadata;
    let json = |v: &serde_json::Value| v.to_string();
    api::StatusReport {
        namespace: meta.namespace.clone().unwrap_or_default(),
        pod: meta.name.clone().unwrap_or_default(),
        pod_uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        status_json: serde_json::to_string(report.status()).unwrap_or_default(),
        differences: report
            .differences()
            .iter()
            .map(|d| api::Difference {
                path: d.path.clone(),
                apiserver_json: json(&d.apiserver),
                plegd_json: json(&d.plegd),
                unknowable: d.unknowable.unwrap_or_default().to_owned(),
            })
            .collect(),
        generated_at_unix_nanos: unix_nanos(report.generated_at),
        runtime_read_at_unix_nanos: unix_nanos(report.runtime_read_at),
    }
}

/// Whether `report` passes a status subscriber's filters.
pub fn report_matches(filter: &StatusServiceWatchRequest, report: &StatusReport) -> bool {
    pod_matches(filter, &report.pod)
}

/// Whether pod `pod` passes a status subscriber's filters.
pub fn pod_matches(filter: &StatusServiceWatchRequest, pod: &crate::apiserver::pod::ApiPod) -> bool {
    let meta = &pod.metadata;
    (filter.namespace.is_empty() || meta.namespace.as_deref() == Some(filter.namespace.as_str()))
        && (filter.pod.is_empty() || meta.name.as_deref() == Some(filter.pod.as_str()))
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
            message: Some("boom: disk \"full\"\n".into()),
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
        sync.message = None;
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
