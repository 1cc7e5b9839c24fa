//! Whether the kernel's OOM killer killed a process of a container, read from the container's
//! cgroup as containerd's CRI plugin reads it before it records an exit.
//!
//! containerd 2.3's CRI plugin (`internal/cri/server/events.go`, `handleContainerExit`), on an exit
//! of status 137 whose container holds no `OOMKilled` reason yet, asks the task's metrics
//! (`Tasks.Metrics`, filter `id==<container>`) before it deletes the task, and stores `OOMKilled`
//! when the cgroup counts an OOM kill (`oomMetricsEventOccurred`: cgroup v1's
//! `memory_oom_control.oom_kill`, cgroup v2's `memory_events.oom_kill`). It does so because the
//! shim's `/tasks/oom` is not ordered with its `/tasks/exit` (on cgroup v1 with every version). plegd
//! takes an exit from `/tasks/exit` ahead of the CRI state, so it asks the same count at the same
//! moment: the reason it shows is the one the CRI will show, with no correction afterwards. The
//! count is the kernel's, set before the process died. A task the CRI has deleted already has no
//! metrics: then the reason is not known and the exit is left to the CRI state (never a guess).
//!
//! The metrics come as `google.protobuf.Any` of `io.containerd.cgroups.v1.Metrics` or
//! `io.containerd.cgroups.v2.Metrics` (github.com/containerd/cgroups/v3, `cgroup1/stats` and
//! `cgroup2/stats`); only the OOM kill count is decoded ([`oom_kills`], pure).

use containerd_client::services::v1::MetricsRequest;
use containerd_client::services::v1::tasks_client::TasksClient;
use prost::Message;
use tonic::transport::Channel;

use super::MAX_MESSAGE_SIZE;

/// `plegd_runtime_errors_total{operation}` of a failed count.
pub const OPERATION: &str = "TaskMetrics";

/// containerd's gRPC metadata key for the namespace of a call (`pkg/namespaces/grpc.go`).
const NAMESPACE_HEADER: &str = "containerd-namespace";

/// The exit status of a process the kernel's OOM killer ended (SIGKILL), the only one containerd's
/// CRI plugin asks the cgroup about (`oomExitCodeInLinux`).
pub const OOM_EXIT_STATUS: i32 = 137;

/// `io.containerd.cgroups.v1.Metrics`, of which only `memory_oom_control` (9) is read.
#[derive(Clone, PartialEq, Message)]
struct Cgroup1Metrics {
    #[prost(message, optional, tag = "9")]
    memory_oom_control: Option<Cgroup1MemoryOomControl>,
}

/// `io.containerd.cgroups.v1.MemoryOomControl`: `oom_kill` (3) is memory.oom_control's count.
#[derive(Clone, PartialEq, Message)]
struct Cgroup1MemoryOomControl {
    #[prost(uint64, tag = "3")]
    oom_kill: u64,
}

/// `io.containerd.cgroups.v2.Metrics`, of which only `memory_events` (8) is read.
#[derive(Clone, PartialEq, Message)]
struct Cgroup2Metrics {
    #[prost(message, optional, tag = "8")]
    memory_events: Option<Cgroup2MemoryEvents>,
}

/// `io.containerd.cgroups.v2.MemoryEvents`: `oom_kill` (5) is memory.events' count.
#[derive(Clone, PartialEq, Message)]
struct Cgroup2MemoryEvents {
    #[prost(uint64, tag = "5")]
    oom_kill: u64,
}

/// Why a task's OOM kill count could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TaskMetricsError {
    #[error("containerd's Tasks.Metrics failed: {0}")]
    Call(String),
    #[error("Tasks.Metrics did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("the task's metrics carry no data")]
    NoData,
    #[error("the task's metrics are of type {0:?}, not a cgroup v1 or v2 Metrics")]
    UnknownType(String),
    #[error("the task's {type_url} metrics cannot be decoded: {error}")]
    Undecodable { type_url: String, error: String },
    #[error("the namespace {0:?} cannot be sent as gRPC metadata")]
    Namespace(String),
}

/// The OOM kills a task's metrics count (see the module's docs). Pure.
pub fn oom_kills(data: &prost_types::Any) -> Result<u64, TaskMetricsError> {
    // containerd names its Any types by the message's full name, without a URL prefix.
    let name = data.type_url.rsplit('/').next().unwrap_or_default();
    let undecodable = |error: prost::DecodeError| TaskMetricsError::Undecodable {
        type_url: data.type_url.clone(),
        error: error.to_string(),
    };
    match name {
        "io.containerd.cgroups.v1.Metrics" => Ok(Cgroup1Metrics::decode(data.value.as_slice())
            .map_err(undecodable)?
            .memory_oom_control
            .map_or(0, |c| c.oom_kill)),
        "io.containerd.cgroups.v2.Metrics" => Ok(Cgroup2Metrics::decode(data.value.as_slice())
            .map_err(undecodable)?
            .memory_events
            .map_or(0, |e| e.oom_kill)),
        _ => Err(TaskMetricsError::UnknownType(data.type_url.clone())),
    }
}

/// A client of containerd's tasks service for one question: did the OOM killer kill a process of
/// this container's cgroup?
#[derive(Clone)]
pub struct OomCheck {
    client: TasksClient<Channel>,
    namespace: String,
    timeout: std::time::Duration,
}

impl OomCheck {
    /// `channel` to containerd's socket; every call in `namespace`, bounded by `timeout`.
    pub fn new(channel: Channel, namespace: &str, timeout: std::time::Duration) -> Self {
        Self {
            client: TasksClient::new(channel).max_decoding_message_size(MAX_MESSAGE_SIZE),
            namespace: namespace.to_owned(),
            timeout,
        }
    }

    /// Whether container `id`'s cgroup counts an OOM kill; None when containerd holds no task of
    /// it any more (deleted: its cgroup is gone, and with it the count).
    pub async fn oom_killed(&self, id: &str) -> Result<Option<bool>, TaskMetricsError> {
        let mut request = tonic::Request::new(MetricsRequest {
            filters: vec![format!("id=={id}")],
        });
        let namespace = self
            .namespace
            .parse()
            .map_err(|_| TaskMetricsError::Namespace(self.namespace.clone()))?;
        request.metadata_mut().insert(NAMESPACE_HEADER, namespace);
        let mut client = self.client.clone();
        let answer = tokio::time::timeout(self.timeout, client.metrics(request))
            .await
            .map_err(|_| TaskMetricsError::Timeout(self.timeout))?
            .map_err(|status| TaskMetricsError::Call(format!("{:?}: {}", status.code(), status.message())))?
            .into_inner();
        // The filter names one task; containerd answers nothing for a task it no longer holds.
        let Some(metric) = answer.metrics.into_iter().find(|m| m.id == id) else {
            return Ok(None);
        };
        let data = metric.data.ok_or(TaskMetricsError::NoData)?;
        Ok(Some(oom_kills(&data)? > 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(type_url: &str, value: Vec<u8>) -> prost_types::Any {
        prost_types::Any {
            type_url: type_url.into(),
            value,
        }
    }

    /// Field 9 (memory_oom_control) holding field 3 (oom_kill), beside other fields plegd skips:
    /// bytes as containerd's Go encoder writes them.
    fn cgroup1(oom_kill: Option<u64>) -> Vec<u8> {
        let mut out = vec![
            // pids (2) { current (1): 3 }
            0x12, 0x02, 0x08, 0x03,
        ];
        if let Some(n) = oom_kill {
            let inner = Cgroup1MemoryOomControl { oom_kill: n }.encode_to_vec();
            // oom_kill_disable (1): 0, under_oom (2): 1, then oom_kill (3)
            let mut control = vec![0x10, 0x01];
            control.extend(inner);
            out.push(0x4a);
            out.push(control.len() as u8);
            out.extend(control);
        }
        out
    }

    #[test]
    fn cgroup_v1_counts_its_oom_kills() {
        let v1 = "io.containerd.cgroups.v1.Metrics";
        assert_eq!(oom_kills(&any(v1, cgroup1(Some(1)))), Ok(1));
        assert_eq!(oom_kills(&any(v1, cgroup1(Some(0)))), Ok(0));
        // A kernel without the count (before 4.13) leaves it out: no kill counted.
        assert_eq!(oom_kills(&any(v1, cgroup1(None))), Ok(0));
        assert_eq!(oom_kills(&any(v1, Vec::new())), Ok(0));
    }

    #[test]
    fn cgroup_v2_counts_its_oom_kills() {
        let v2 = "io.containerd.cgroups.v2.Metrics";
        let events = Cgroup2Metrics {
            memory_events: Some(Cgroup2MemoryEvents { oom_kill: 2 }),
        };
        assert_eq!(oom_kills(&any(v2, events.encode_to_vec())), Ok(2));
        // With a URL prefix, as another encoder might name it.
        let prefixed = format!("type.googleapis.com/{v2}");
        assert_eq!(oom_kills(&any(&prefixed, events.encode_to_vec())), Ok(2));
        // cgroup v1's field 9 is not v2's: a v2 message without memory_events counts none.
        assert_eq!(oom_kills(&any(v2, cgroup1(Some(1)))), Ok(0));
    }

    #[test]
    fn other_data_is_an_error_not_a_count() {
        assert_eq!(
            oom_kills(&any("io.containerd.windows.Stats", vec![1, 2])),
            Err(TaskMetricsError::UnknownType("io.containerd.windows.Stats".into()))
        );
        assert!(matches!(
            oom_kills(&any("io.containerd.cgroups.v1.Metrics", vec![0x4a, 0x05, 0x18])),
            Err(TaskMetricsError::Undecodable { .. })
        ));
    }
}
