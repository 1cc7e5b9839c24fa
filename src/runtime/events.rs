//! The runtime's event streams, read off the wire: containerd's events service
//! (`containerd.services.events.v1.Events/Subscribe`) and CRI `GetContainerEvents`. Each event is
//! turned into what it names ([`EventSubject`]) and, for CRI, when it happened. Of containerd's
//! events, two are also read as data ([`ContainerdData`]): `/tasks/exit` of a container's init
//! process (its exit status and time, which containerd's CRI copies into the container's status:
//! see `runtime::exits`) and `/tasks/oom` (which decides that exit's reason). What to do with an
//! event (a targeted relist, an exit shown at once) is the triggers' business.

use containerd_client::services::v1::SubscribeRequest;
use containerd_client::services::v1::events_client::EventsClient;
use prost::Message;
use tonic::Status;
use tonic::transport::Channel;

use super::lists::{self as cri, runtime_service_client::RuntimeServiceClient};
use super::{MAX_MESSAGE_SIZE, RuntimeVersion};
use crate::kubecontainer::RuntimeContainerState;

/// What a runtime event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSubject {
    /// A pod, by its uid.
    Pod(String),
    /// A container or sandbox, by its id.
    Container(String),
    /// Something whose name cannot be read (not UTF-8): anything may have changed.
    Unreadable,
}

/// One event off a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeEvent {
    /// What it names; None for an event that cannot change a container's state.
    pub subject: Option<EventSubject>,
    /// When the runtime says it happened, in nanoseconds since the epoch; 0 when it does not say
    /// (containerd's events service).
    pub created_at: i64,
    /// containerd's topic (`/tasks/exit`, …); empty for CRI.
    pub topic: String,
    /// A CRI event's names, each read on its own ([`cri_names`]); None for containerd's events.
    pub cri: Option<CriNames>,
    /// What a containerd event says as data (an exit, an OOM kill); None for every other event.
    pub data: Option<ContainerdData>,
}

/// What a containerd event says of a container beyond naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerdData {
    /// `/tasks/exit` of a container's init process: its exit status, and when it exited (seconds
    /// and nanoseconds since the epoch; None if the event carries no time).
    Exit {
        id: String,
        exit_status: u32,
        exited_at: Option<(i64, i32)>,
    },
    /// `/tasks/oom`: a process of the container was killed by the kernel's OOM killer.
    Oom(String),
}

/// The names a CRI container event carries, each one read on its own: the container (or sandbox)
/// id, and the uid of the pod its sandbox status names, with the kind of event. Names only, never
/// state: where to look, not what is there (the kind only says when looking can find nothing new).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CriNames {
    /// The container or sandbox id; None when empty or not UTF-8.
    pub id: Option<String>,
    /// The pod's uid from the event's sandbox status; None when absent, empty or not UTF-8.
    pub pod: Option<String>,
    /// The event says the id was removed (`CONTAINER_DELETED_EVENT`).
    pub deleted: bool,
    /// The state the event says the id reached: created, started (running) or stopped (exited);
    /// None for a removal or an event type this version does not know.
    pub announces: Option<RuntimeContainerState>,
    /// The id or the uid is there but not UTF-8.
    pub unreadable: bool,
}

impl CriNames {
    /// What the event names: its pod when it carries the sandbox's uid, else the container; a name
    /// that cannot be read, when nothing else readable is named, is [`EventSubject::Unreadable`].
    pub fn subject(&self) -> Option<EventSubject> {
        match (&self.pod, &self.id) {
            (Some(uid), _) => Some(EventSubject::Pod(uid.clone())),
            (None, Some(id)) => Some(EventSubject::Container(id.clone())),
            (None, None) if self.unreadable => Some(EventSubject::Unreadable),
            (None, None) => None,
        }
    }
}

/// A subscription to one of the runtime's event streams.
pub enum EventStream {
    Containerd(tonic::Streaming<containerd_client::types::Envelope>),
    Cri(tonic::Streaming<cri::ContainerEventResponse>),
}

impl EventStream {
    /// Subscribe to containerd's events of the topics that change a container's state, in
    /// `namespace`. Returns when the runtime answers (see `triggers` for why that can be late).
    /// `exits_only`: only the topics read as data ([`containerd_data_filters`]), for a stream
    /// that runs beside the CRI's own events.
    pub async fn containerd(channel: Channel, namespace: &str, exits_only: bool) -> Result<Self, Status> {
        let mut client = EventsClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let filters = if exits_only {
            containerd_data_filters(namespace)
        } else {
            containerd_filters(namespace)
        };
        let request = SubscribeRequest { filters };
        Ok(Self::Containerd(client.subscribe(request).await?.into_inner()))
    }

    /// Subscribe to CRI `GetContainerEvents`.
    pub async fn cri(channel: Channel) -> Result<Self, Status> {
        let mut client = RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE);
        let stream = client.get_container_events(cri::GetEventsRequest {}).await?;
        Ok(Self::Cri(stream.into_inner()))
    }

    /// The next event; None when the runtime ended the stream. Cancel safe (a message half read
    /// when the future is dropped is kept for the next call).
    pub async fn message(&mut self) -> Result<Option<RuntimeEvent>, Status> {
        Ok(match self {
            Self::Containerd(stream) => stream.message().await?.map(|envelope| {
                let payload = envelope
                    .event
                    .as_ref()
                    .map(|any| any.value.as_slice())
                    .unwrap_or_default();
                RuntimeEvent {
                    subject: containerd_subject(&envelope.topic, payload).map(EventSubject::Container),
                    created_at: 0,
                    data: containerd_data(&envelope.topic, payload),
                    topic: envelope.topic,
                    cri: None,
                }
            }),
            Self::Cri(stream) => stream.message().await?.map(|event| {
                let names = cri_names(&event);
                RuntimeEvent {
                    subject: names.subject(),
                    created_at: event.created_at,
                    topic: String::new(),
                    cri: Some(names),
                    data: None,
                }
            }),
        })
    }
}

/// The container a containerd event names, if the event can change a container's state.
///
/// `/tasks/oom` does not name one: an OOM kill of a child process leaves the container running
/// (containerd's CRI plugin only notes the reason OOMKilled for the container's eventual exit), and
/// an OOM kill of the container's own process ends its task, which containerd announces as
/// `/tasks/exit`. A container that keeps OOM-killing a child sends a stream of them, which must
/// not keep plegd probing a container that does not change: the event is read as data only
/// ([`containerd_data`]).
pub fn containerd_subject(topic: &str, payload: &[u8]) -> Option<String> {
    use containerd_client::events::{ContainerCreate, ContainerDelete, TaskDelete, TaskStart};
    let id = match topic {
        // A container created and not started (CRI CREATED): a state the status shows (waiting, with
        // its id), which no task event announces.
        "/containers/create" => ContainerCreate::decode(payload).ok()?.id,
        "/tasks/start" => TaskStart::decode(payload).ok()?.container_id,
        // The exit of an exec'd process (id != container id) changes nothing: the one rule of
        // what an init process's exit is, `containerd_data`'s.
        "/tasks/exit" => match containerd_data(topic, payload)? {
            ContainerdData::Exit { id, .. } => id,
            ContainerdData::Oom(_) => return None,
        },
        "/tasks/delete" => {
            TaskDelete::decode(payload)
                .ok()
                .filter(|e| e.id == e.container_id || e.id.is_empty())?
                .container_id
        }
        "/containers/delete" => ContainerDelete::decode(payload).ok()?.id,
        _ => return None,
    };
    (!id.is_empty()).then_some(id)
}

/// What a containerd event says as data ([`ContainerdData`]): the exit of a container's init
/// process (an exec'd process's exit, whose id differs from its container's, says nothing of the
/// container), or an OOM kill in a container. None for anything else or a payload that does not
/// decode.
pub fn containerd_data(topic: &str, payload: &[u8]) -> Option<ContainerdData> {
    use containerd_client::events::{TaskExit, TaskOom};
    match topic {
        "/tasks/exit" => {
            let exit = TaskExit::decode(payload).ok()?;
            (!exit.container_id.is_empty() && (exit.id == exit.container_id || exit.id.is_empty())).then(|| {
                ContainerdData::Exit {
                    exited_at: exit.exited_at.map(|t| (t.seconds, t.nanos)),
                    exit_status: exit.exit_status,
                    id: exit.container_id,
                }
            })
        }
        "/tasks/oom" => {
            let id = TaskOom::decode(payload).ok()?.container_id;
            (!id.is_empty()).then_some(ContainerdData::Oom(id))
        }
        _ => None,
    }
}

/// The topics of the containerd events that change a container's state, and `/tasks/oom`.
const TOPICS: [&str; 6] = [
    "/tasks/start",
    "/tasks/exit",
    "/tasks/delete",
    "/tasks/oom",
    "/containers/create",
    "/containers/delete",
];

/// The topics read as data ([`containerd_data`]).
const DATA_TOPICS: [&str; 2] = ["/tasks/exit", "/tasks/oom"];

fn filters(namespace: &str, topics: &[&str]) -> Vec<String> {
    topics
        .iter()
        .map(|topic| format!("namespace=={namespace},topic==\"{topic}\""))
        .collect()
}

/// The containerd event filters for `namespace` (each one an AND; the list an OR).
pub fn containerd_filters(namespace: &str) -> Vec<String> {
    filters(namespace, &TOPICS)
}

/// The filters of a stream that reads exits and OOM kills only.
pub fn containerd_data_filters(namespace: &str) -> Vec<String> {
    filters(namespace, &DATA_TOPICS)
}

/// What a CRI container event names (see [`CriNames::subject`]). Nothing else of the event is read
/// (it is decoded from the slim message, so that the statuses an event carries are neither decoded
/// nor able to fail it).
pub fn cri_subject(event: &cri::ContainerEventResponse) -> Option<EventSubject> {
    cri_names(event).subject()
}

/// `CONTAINER_DELETED_EVENT` of CRI's `ContainerEventType` (created 0, started 1, stopped 2).
const CRI_CONTAINER_DELETED: i32 = 3;

/// Each name a CRI container event carries, read on its own ([`CriNames`]): a bad uid does not
/// hide a good id, nor the reverse.
pub fn cri_names(event: &cri::ContainerEventResponse) -> CriNames {
    let uid = event
        .pod_sandbox_status
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|m| &m.uid[..])
        .unwrap_or_default();
    let readable = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .ok()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    CriNames {
        id: readable(&event.container_id),
        pod: readable(uid),
        deleted: event.container_event_type == CRI_CONTAINER_DELETED,
        announces: match event.container_event_type {
            0 => Some(RuntimeContainerState::Created),
            1 => Some(RuntimeContainerState::Running),
            2 => Some(RuntimeContainerState::Exited),
            _ => None,
        },
        unreadable: [&event.container_id[..], uid]
            .iter()
            .any(|b| std::str::from_utf8(b).is_err()),
    }
}

/// containerd's major version, if the runtime is containerd and its version can be read.
fn containerd_major(version: &RuntimeVersion) -> Option<u32> {
    if version.runtime_name != "containerd" {
        return None;
    }
    version
        .runtime_version
        .trim_start_matches('v')
        .split(['.', '~', '+', '-'])
        .next()
        .and_then(|m| m.parse::<u32>().ok())
}

/// Whether a runtime's CRI events follow its CRI state: each one is sent once the state it
/// announces is in place, so that one read right after it sees the change. containerd 2.x's CRI
/// plugin updates a container's status (created, started, exited, removed; a sandbox's ready and
/// not ready) and then sends the event, to every subscriber; on an exit, after it has deleted the
/// task (containerd's `/tasks/exit` leads that by 30–150 ms on a loaded node). Not assumed of
/// containerd 1.x (whose events go to one subscriber anyway) nor of other runtimes.
pub fn cri_events_follow_state(version: &RuntimeVersion) -> bool {
    containerd_major(version).is_some_and(|m| m >= 2)
}

/// Whether a runtime's CRI GetContainerEvents hands each event to one subscriber only: containerd
/// before 2.0 does; 2.x broadcasts (containerd PR #9661). Other runtimes are not assumed to.
pub fn cri_events_go_to_one_subscriber(version: &RuntimeVersion) -> bool {
    if version.runtime_name != "containerd" {
        return false;
    }
    // A version it cannot read is taken as an old one: the warning is the safe side.
    containerd_major(version).is_none_or(|m| m < 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_containerd_before_2_hands_cri_events_to_one_subscriber() {
        let v = |name: &str, version: &str| RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        };
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "1.7.24~ds1")));
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "v1.6.20")));
        assert!(!cri_events_go_to_one_subscriber(&v("containerd", "2.1.9+unknown")));
        assert!(!cri_events_go_to_one_subscriber(&v("containerd", "v2.0.0")));
        assert!(cri_events_go_to_one_subscriber(&v("containerd", "garbage")));
        assert!(!cri_events_go_to_one_subscriber(&v("cri-o", "1.31.0")));
        // Only containerd 2.x's CRI events are known to follow its CRI state.
        assert!(cri_events_follow_state(&v("containerd", "2.1.9+unknown")));
        assert!(cri_events_follow_state(&v("containerd", "v2.0.0")));
        assert!(!cri_events_follow_state(&v("containerd", "1.7.24~ds1")));
        assert!(!cri_events_follow_state(&v("containerd", "garbage")));
        assert!(!cri_events_follow_state(&v("cri-o", "2.0.0")));
    }
    #[test]
    fn a_cri_event_names_are_read_each_on_its_own() {
        let status = |uid: bytes::Bytes| {
            Some(cri::PodSandboxStatus {
                metadata: Some(cri::PodSandboxMetadata {
                    uid,
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let mut event = cri::ContainerEventResponse {
            container_id: "c1".into(),
            container_event_type: 2,
            pod_sandbox_status: status("u1".into()),
            ..Default::default()
        };
        let names = |id: Option<&str>, pod: Option<&str>, deleted, unreadable| CriNames {
            id: id.map(Into::into),
            pod: pod.map(Into::into),
            deleted,
            announces: (!deleted).then_some(RuntimeContainerState::Exited),
            unreadable,
        };
        assert_eq!(cri_names(&event), names(Some("c1"), Some("u1"), false, false));
        event.container_event_type = CRI_CONTAINER_DELETED;
        assert_eq!(cri_names(&event), names(Some("c1"), Some("u1"), true, false));
        event.pod_sandbox_status = status(bytes::Bytes::from_static(b"\xff"));
        assert_eq!(cri_names(&event), names(Some("c1"), None, true, true));
        event.container_id = bytes::Bytes::from_static(b"\xfe");
        event.pod_sandbox_status = status("u1".into());
        assert_eq!(cri_names(&event), names(None, Some("u1"), true, true));
        assert_eq!(
            cri_names(&cri::ContainerEventResponse::default()),
            CriNames {
                announces: Some(RuntimeContainerState::Created),
                ..names(None, None, false, false)
            }
        );
        for (kind, announces) in [(1, Some(RuntimeContainerState::Running)), (4, None)] {
            event.container_event_type = kind;
            assert_eq!(cri_names(&event).announces, announces, "event type {kind}");
        }
    }
    #[test]
    fn containerd_events_name_containers_only() {
        use containerd_client::events::{ContainerCreate, ContainerDelete, TaskExit, TaskStart};
        let start = TaskStart {
            container_id: "c1".into(),
            pid: 7,
        }
        .encode_to_vec();
        assert_eq!(containerd_subject("/tasks/start", &start), Some("c1".into()));
        let exit = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            exit_status: 3,
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(containerd_subject("/tasks/exit", &exit), Some("c1".into()));
        let exec_exit = TaskExit {
            container_id: "c1".into(),
            id: "exec-42".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            containerd_subject("/tasks/exit", &exec_exit),
            None,
            "an exec'd process ending changes nothing"
        );
        let create = ContainerCreate {
            id: "c3".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(containerd_subject("/containers/create", &create), Some("c3".into()));
        let delete = ContainerDelete { id: "c2".into() }.encode_to_vec();
        assert_eq!(containerd_subject("/containers/delete", &delete), Some("c2".into()));
        assert_eq!(containerd_subject("/images/create", &delete), None);
        assert_eq!(
            containerd_subject("/tasks/start", b"\xff\xff garbage"),
            None,
            "undecodable payloads are ignored"
        );
        assert_eq!(
            containerd_subject("/tasks/start", &TaskStart::default().encode_to_vec()),
            None
        );
    }
    #[test]
    fn filters_are_per_topic_in_the_namespace() {
        let f = containerd_filters("k8s.io");
        assert_eq!(f.len(), 6);
        assert_eq!(f[1], "namespace==k8s.io,topic==\"/tasks/exit\"");
        assert_eq!(
            containerd_data_filters("k8s.io"),
            [
                "namespace==k8s.io,topic==\"/tasks/exit\"",
                "namespace==k8s.io,topic==\"/tasks/oom\""
            ]
        );
    }

    /// An OOM kill changes no container's CRI state: a child process killed leaves the container
    /// running, and the container's own end comes as `/tasks/exit`. So `/tasks/oom` names nothing
    /// to relist; it is read as data, for the reason of the exit.
    #[test]
    fn an_oom_event_is_data_not_a_trigger() {
        use containerd_client::events::TaskOom;
        let oom = TaskOom {
            container_id: "c1".into(),
        }
        .encode_to_vec();
        assert_eq!(containerd_subject("/tasks/oom", &oom), None);
        assert_eq!(
            containerd_data("/tasks/oom", &oom),
            Some(ContainerdData::Oom("c1".into()))
        );
        assert_eq!(containerd_data("/tasks/oom", &TaskOom::default().encode_to_vec()), None);
    }

    #[test]
    fn an_init_process_exit_is_data_an_exec_exit_is_not() {
        use containerd_client::events::{TaskExit, TaskStart};
        let exit = |id: &str| TaskExit {
            container_id: "c1".into(),
            id: id.into(),
            pid: 9,
            exit_status: 137,
            exited_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
        };
        let want = ContainerdData::Exit {
            id: "c1".into(),
            exit_status: 137,
            exited_at: Some((1_700_000_000, 5)),
        };
        assert_eq!(
            containerd_data("/tasks/exit", &exit("c1").encode_to_vec()),
            Some(want.clone())
        );
        assert_eq!(containerd_data("/tasks/exit", &exit("").encode_to_vec()), Some(want));
        assert_eq!(containerd_data("/tasks/exit", &exit("exec-1").encode_to_vec()), None);
        assert_eq!(containerd_data("/tasks/exit", b"\xff\xff garbage"), None);
        let start = TaskStart {
            container_id: "c1".into(),
            pid: 7,
        };
        assert_eq!(containerd_data("/tasks/start", &start.encode_to_vec()), None);
    }
    #[test]
    fn cri_events_name_the_pod_when_they_can() {
        let mut event = cri::ContainerEventResponse {
            container_id: "c1".into(),
            ..Default::default()
        };
        assert_eq!(cri_subject(&event), Some(EventSubject::Container("c1".into())));
        event.pod_sandbox_status = Some(cri::PodSandboxStatus {
            metadata: Some(cri::PodSandboxMetadata {
                uid: "u1".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cri_subject(&event), Some(EventSubject::Pod("u1".into())));
        assert_eq!(cri_subject(&cri::ContainerEventResponse::default()), None);
    }
    #[test]
    fn a_cri_event_whose_names_are_not_utf8_are_unreadable() {
        let bad = bytes::Bytes::from_static(b"\xff\xfe");
        let mut event = cri::ContainerEventResponse {
            container_id: "c1".into(),
            pod_sandbox_status: Some(cri::PodSandboxStatus {
                metadata: Some(cri::PodSandboxMetadata {
                    uid: bad.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(cri_subject(&event), Some(EventSubject::Container("c1".into())));
        event.container_id = bad.clone();
        assert_eq!(cri_subject(&event), Some(EventSubject::Unreadable));
        event.container_id = bytes::Bytes::new();
        assert_eq!(cri_subject(&event), Some(EventSubject::Unreadable));
        event.pod_sandbox_status = None;
        event.container_id = bad;
        assert_eq!(cri_subject(&event), Some(EventSubject::Unreadable));
    }
}
