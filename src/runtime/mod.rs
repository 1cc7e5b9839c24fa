//! The runtime stage: the only code that speaks CRI. [`CriRuntime`] is a CRI v1 client over a unix
//! socket with per-call timeouts and reconnection with backoff; it turns CRI messages into plegd's
//! snapshot types ([`crate::kubecontainer`]). Runtime data it cannot use is logged, counted and
//! skipped, never a panic. This stage never holds state about pods: that is the relister's job.

pub mod convert;
pub mod events;
pub mod exits;
pub mod list_mode;
pub mod lists;
pub mod statuses;
pub mod task_metrics;
pub mod termination;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tracing::{debug, info, warn};

use crate::kubecontainer::{LABEL_POD_UID, PodUid, RuntimeContainerState, RuntimePod, RuntimePodStatus, SandboxState};
use crate::metrics::Metrics;
use crate::util::backoff::ExponentialBackoff;
use convert::BadData;
use list_mode::{ListMode, ListModeChoice, ListOutcome};

/// CRI responses for a thousand pods are larger than gRPC's 4 MiB default; the kubelet allows 16 MiB.
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// The most a streamed list may bring in all its messages (the items' encoded bytes): a runtime
/// that streams without end fails the list instead of growing plegd's memory. 16 times the one
/// message the unary list may be: a node of 10,000 containers with 4 KiB of labels each is about
/// 45 MiB.
pub const MAX_STREAMED_LIST_BYTES: usize = 16 * MAX_MESSAGE_SIZE;

/// What can go wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The socket file is not there. Retryable: the runtime may not have started yet.
    #[error("CRI socket {path} does not exist; is the container runtime running?")]
    SocketMissing { path: PathBuf },
    /// The path exists but is not a unix socket. Not retryable: the flag is wrong.
    #[error("{path} is not a unix socket; --cri-socket must name the runtime's CRI socket")]
    NotASocket { path: PathBuf },
    /// The runtime answers but not as a CRI v1 runtime. Not retryable.
    #[error(
        "{path} does not serve the CRI v1 RuntimeService ({detail}); plegd needs CRI v1 (containerd >= 1.6, CRI-O >= 1.20)"
    )]
    NotCriV1 { path: PathBuf, detail: String },
    /// A CRI call failed or timed out. Retryable.
    #[error("CRI {operation} failed: {status}")]
    Call {
        operation: &'static str,
        status: tonic::Status,
    },
}

impl RuntimeError {
    /// Whether waiting may cure it: the runtime is not up (yet) or not answering. A wrong path, a
    /// socket that is not CRI v1 or bad settings stay wrong.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RuntimeError::SocketMissing { .. } | RuntimeError::Call { .. })
    }

    /// The gRPC code of a failed call, if this is one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            RuntimeError::Call { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

/// What the relister needs from a container runtime. [`CriRuntime`] is the real one; tests and
/// benchmarks may put something else behind it.
pub trait Runtime: Send + Sync + 'static {
    /// What a probe of one id was answered ([`Runtime::probe_state`]), kept for the status read of
    /// its pod that may follow, so that the runtime is not asked the same question twice.
    type Answer: Send + Sync + 'static;
    /// Every pod the runtime knows of (`GetPods(all=true)`), sorted by uid.
    fn list_pods(&self) -> impl Future<Output = Result<Vec<RuntimePod>, RuntimeError>> + Send;
    /// The one pod with this uid, if the runtime knows it.
    fn list_pod(&self, uid: &str) -> impl Future<Output = Result<Option<RuntimePod>, RuntimeError>> + Send;
    /// The full status of a pod whose sandboxes and containers were just listed (or read into its
    /// record from a probe). `probed`: one of its ids' probe answer, read a moment ago, used
    /// instead of asking for that id's status again. `exits`: exits the runtime announced for
    /// containers of the pod, read against each one's status ([`exits::read`]: written into a
    /// status that does not show them yet, compared with one that does), each one's outcome set.
    fn pod_status(
        &self,
        pod: &RuntimePod,
        probed: Option<(&str, Self::Answer)>,
        exits: &mut [exits::PendingExit],
    ) -> impl Future<Output = Result<RuntimePodStatus, RuntimeError>> + Send;
    /// `last`, a pod's status as its last read found it, with `exits` written into it
    /// ([`exits::write_into_last`]) and the termination message of each container they end read
    /// as a status read reads it, without asking the runtime: for exits taken from the runtime's
    /// exit events while nothing else of the pod changed. Each exit's outcome is set (the CRI has
    /// not shown it). This default reads no termination message, for a runtime that has no node
    /// files to read.
    fn status_with_exits(
        &self,
        last: RuntimePodStatus,
        exits: &mut [exits::PendingExit],
    ) -> impl Future<Output = RuntimePodStatus> + Send {
        let mut status = last;
        exits::write_all_into_last(&mut status, exits, &mut Vec::new());
        std::future::ready(status)
    }
    /// The state of one container or sandbox by id, with the runtime's answer, None if the
    /// runtime has no such id: a cheap look (no list) used to notice that a runtime event's
    /// change has reached the CRI state. The caller says which of the two the id is (its records
    /// know), so that the runtime is asked the one question that can succeed.
    fn probe_state(
        &self,
        id: &str,
        kind: IdKind,
    ) -> impl Future<Output = Result<Option<(RuntimeContainerState, Self::Answer)>, RuntimeError>> + Send;
    /// The pod that owns container or sandbox `id`, None while the runtime lists no such id (a
    /// runtime's event can come before its CRI state lists what it names).
    fn locate(&self, id: &str) -> impl Future<Output = Result<Option<PodUid>, RuntimeError>> + Send;
}

/// Whether an id names a container or a pod sandbox (they share one id space in CRI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Container,
    Sandbox,
}

/// A list item that is not protobuf of the expected shape: the status tonic gives an answer it
/// cannot decode (INTERNAL), so that the call fails as it would had the answer been decoded in one
/// go.
fn malformed(error: prost::DecodeError) -> tonic::Status {
    tonic::Status::internal(error.to_string())
}

/// What a failed list call says about the way to list.
fn list_outcome(status: &tonic::Status) -> ListOutcome {
    match status.code() {
        tonic::Code::Unimplemented => ListOutcome::StreamUnimplemented,
        tonic::Code::Unavailable => ListOutcome::ConnectionLost,
        _ => ListOutcome::Other,
    }
}

/// `call` within `deadline`, or DeadlineExceeded.
async fn within<T>(
    deadline: Duration,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "the streamed list did not end within {deadline:?}"
        ))),
    }
}

/// Every item of a streamed list, in the order sent: the stream read to its end, refused once its
/// items pass [`MAX_STREAMED_LIST_BYTES`] (ResourceExhausted).
async fn collect_streamed<M>(
    mut stream: tonic::Streaming<M>,
    items_of: impl Fn(M) -> Vec<bytes::Bytes>,
) -> Result<Vec<bytes::Bytes>, tonic::Status> {
    let mut items = Vec::new();
    let mut total = 0usize;
    while let Some(message) = stream.message().await? {
        for item in items_of(message) {
            total = total.saturating_add(item.len());
            if total > MAX_STREAMED_LIST_BYTES {
                return Err(tonic::Status::resource_exhausted(format!(
                    "a streamed list of more than {MAX_STREAMED_LIST_BYTES} bytes"
                )));
            }
            items.push(item);
        }
    }
    Ok(items)
}

/// What one pair of list calls asks for.
#[derive(Debug, Clone, Copy)]
enum Selection<'a> {
    All,
    /// The pod with this uid (the kubelet's pod-uid label).
    Pod(&'a str),
    /// The pod with this uid as the complete relist groups it: sandboxes by their metadata uid
    /// (every sandbox listed), containers by the pod-uid label.
    PodByMetadata(&'a str),
    /// The sandbox or container with this id.
    Id(&'a str),
}

/// Settings of the CRI client.
#[derive(Debug, Clone)]
pub struct CriConfig {
    /// Deadline of each CRI call.
    pub call_timeout: Duration,
    /// Deadline of dialing the socket.
    pub connect_timeout: Duration,
    /// The waits between failed dials (100 ms doubling to 5 s by default), reset on success.
    pub backoff: ExponentialBackoff,
    /// Where termination messages and container logs may be read.
    pub host_files: termination::HostFiles,
}

impl Default for CriConfig {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            backoff: ExponentialBackoff::constant(Duration::from_millis(100), Duration::from_secs(5)),
            host_files: termination::HostFiles::default(),
        }
    }
}

/// Backoff between dials, shared by every reconnection of one channel: after a failed dial, the
/// next one is refused (fast, without touching the socket) until the wait is over.
#[derive(Debug)]
struct DialBackoff {
    state: Mutex<(ExponentialBackoff, Option<Instant>)>,
}

impl DialBackoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, (ExponentialBackoff, Option<Instant>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self) -> io::Result<()> {
        match self.lock().1 {
            Some(not_before) if Instant::now() < not_before => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("backing off {:?} after a failed dial", not_before - Instant::now()),
            )),
            _ => Ok(()),
        }
    }

    fn failed(&self) {
        let mut state = self.lock();
        let wait = state.0.next_wait();
        state.1 = Some(Instant::now() + wait);
    }

    fn succeeded(&self) {
        let mut state = self.lock();
        state.0.reset();
        state.1 = None;
    }
}

fn check_socket(path: &Path) -> Result<(), RuntimeError> {
    match std::fs::metadata(path) {
        Err(_) => Err(RuntimeError::SocketMissing { path: path.to_owned() }),
        Ok(m) if !m.file_type().is_socket() => Err(RuntimeError::NotASocket { path: path.to_owned() }),
        Ok(_) => Ok(()),
    }
}

/// A lazily connected channel to a unix socket that redials, with backoff, whenever the
/// connection is lost (the runtime restarted, the socket was recreated). With `call_timeout`, every
/// call on it has that deadline; long-lived streams need a channel without one.
pub fn unix_channel(
    path: &Path,
    connect_timeout: Duration,
    backoff: ExponentialBackoff,
    call_timeout: Option<Duration>,
) -> Channel {
    let path = path.to_owned();
    let backoff = Arc::new(DialBackoff {
        state: Mutex::new((backoff, None)),
    });
    // The URI is required by tonic but never used: the connector dials the socket.
    let mut endpoint = Endpoint::from_static("http://cri.invalid").connect_timeout(connect_timeout);
    if let Some(timeout) = call_timeout {
        endpoint = endpoint.timeout(timeout);
    }
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        let backoff = backoff.clone();
        async move {
            backoff.check()?;
            match UnixStream::connect(&path).await {
                Ok(stream) => {
                    backoff.succeeded();
                    Ok::<_, io::Error>(TokioIo::new(stream))
                }
                Err(e) => {
                    backoff.failed();
                    debug!(socket = %path.display(), error = %e, "dial failed");
                    Err(e)
                }
            }
        }
    }))
}

/// What the runtime said of itself at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeVersion {
    pub runtime_name: String,
    pub runtime_version: String,
    pub runtime_api_version: String,
}

/// The CRI v1 client.
#[derive(Clone)]
pub struct CriRuntime {
    client: RuntimeServiceClient<Channel>,
    /// The same channel, for the two list calls, decoded into slim messages (see `lists`).
    lists: lists::runtime_service_client::RuntimeServiceClient<Channel>,
    socket: PathBuf,
    connect_timeout: Duration,
    backoff: ExponentialBackoff,
    metrics: Arc<Metrics>,
    bad_data_seen: Arc<Mutex<HashSet<(&'static str, String)>>>,
    termination: Arc<termination::TerminationReader>,
    /// The deadline of a whole streamed list (each unary call has it from the channel).
    call_timeout: Duration,
    /// Streaming or unary lists on this connection (see [`list_mode`]).
    list_mode: Arc<ListModeChoice>,
}

/// How many distinct bad items are remembered for log de-duplication before the memory is reset.
const BAD_DATA_MEMORY: usize = 4096;

impl CriRuntime {
    /// A client for the socket at `path`; no connection is made until the first call.
    pub fn new(path: &Path, options: &CriConfig, metrics: Arc<Metrics>) -> Self {
        let backoff = options.backoff.clone();
        let channel = unix_channel(
            path,
            options.connect_timeout,
            backoff.clone(),
            Some(options.call_timeout),
        );
        let client = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        let lists = lists::runtime_service_client::RuntimeServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        Self {
            client,
            lists,
            socket: path.to_owned(),
            connect_timeout: options.connect_timeout,
            backoff,
            metrics,
            bad_data_seen: Default::default(),
            termination: Arc::new(termination::TerminationReader::new(options.host_files.clone())),
            call_timeout: options.call_timeout,
            list_mode: Default::default(),
        }
    }

    /// How the relist lists on this connection; None before its first list.
    pub fn list_mode(&self) -> Option<ListMode> {
        self.list_mode.get()
    }

    /// Take what a list call said about the way to list; say and count a change.
    fn settle_list_mode(&self, outcome: ListOutcome) {
        let Some(changed) = self.list_mode.settle(outcome) else {
            return;
        };
        self.metrics.set_list_mode(changed.map(ListMode::name));
        match changed {
            Some(ListMode::Streaming) => {
                info!("the runtime streams its lists (StreamPodSandboxes, StreamContainers): relists use them")
            }
            Some(ListMode::Unary) => info!(
                "the runtime does not serve streaming lists (StreamPodSandboxes, StreamContainers: Unimplemented): relists use ListPodSandbox and ListContainers"
            ),
            None => debug!("the runtime connection was lost: the way to list is chosen again at the next list"),
        }
    }

    /// A channel to the same socket without a per-call deadline, for long-lived event streams.
    pub fn stream_channel(&self) -> Channel {
        unix_channel(&self.socket, self.connect_timeout, self.backoff.clone(), None)
    }

    /// containerd's tasks service on the same socket, for the OOM kill count of an exited
    /// container's cgroup ([`task_metrics`]), in `namespace`; each call bounded by the call timeout.
    pub fn oom_check(&self, namespace: &str) -> task_metrics::OomCheck {
        task_metrics::OomCheck::new(self.stream_channel(), namespace, self.call_timeout)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Connect and check that the socket serves CRI v1: the start-up check of `plegd watch` and
    /// `plegd run`. Fails with a message that says what to fix.
    pub async fn connect(
        path: &Path,
        options: &CriConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, RuntimeVersion), RuntimeError> {
        check_socket(path)?;
        let runtime = Self::new(path, options, metrics);
        let version = runtime.version().await?;
        runtime.say_missing_node_directories().await;
        Ok((runtime, version))
    }

    /// Say once, at start, which node directories termination messages would be read from are
    /// not there (not mounted into plegd's container, as in `conditions` mode): their messages
    /// are left out, which is not worth a word at every container exit.
    async fn say_missing_node_directories(&self) {
        match self.termination.missing_roots().await {
            Some(missing) => {
                for directory in missing {
                    info!(directory = %directory.display(), "node directory not there (not mounted into plegd?): termination messages and logs below it are left out");
                }
            }
            None => warn!(
                pods = %self.termination.files().pods_dir.display(),
                logs = %self.termination.files().logs_dir.display(),
                "the node directories termination messages are read from do not answer"
            ),
        }
    }

    /// [`CriRuntime::connect`], waiting while the runtime is not there yet or not answering (a node
    /// booting, a runtime restarting): said once at warn level with the reason, then retried with
    /// `options`' jittered backoff until it answers. Errors that waiting cannot cure are returned
    /// at once.
    pub async fn connect_waiting(
        path: &Path,
        options: &CriConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, RuntimeVersion), RuntimeError> {
        let mut backoff = options.backoff.clone();
        let mut said = false;
        loop {
            match Self::connect(path, options, metrics.clone()).await {
                Ok(connected) => {
                    if said {
                        info!(socket = %path.display(), "the container runtime answers");
                    }
                    return Ok(connected);
                }
                Err(error) if error.is_retryable() => {
                    if !said {
                        warn!(socket = %path.display(), error = %error, "waiting for the container runtime");
                        said = true;
                    } else {
                        debug!(socket = %path.display(), error = %error, "still waiting for the container runtime");
                    }
                    tokio::time::sleep(backoff.next_wait()).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The raw CRI client, for callers that need an RPC plegd does not wrap (tests, benchmarks).
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `Version`, checked to be CRI v1.
    pub async fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        let response = self
            .client
            .clone()
            .version(cri::VersionRequest { version: "v1".into() })
            .await;
        let v = match response {
            Ok(r) => r.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                return Err(RuntimeError::NotCriV1 {
                    path: self.socket.clone(),
                    detail: format!("Version is unimplemented: {}", status.message()),
                });
            }
            Err(status) => {
                check_socket(&self.socket)?;
                return Err(self.call_failed("Version", status));
            }
        };
        if v.runtime_api_version != "v1" && v.runtime_api_version != "0.1.0" {
            return Err(RuntimeError::NotCriV1 {
                path: self.socket.clone(),
                detail: format!("it reports runtime API version {:?}", v.runtime_api_version),
            });
        }
        Ok(RuntimeVersion {
            runtime_name: v.runtime_name,
            runtime_version: v.runtime_version,
            runtime_api_version: v.runtime_api_version,
        })
    }

    /// The runtime handlers that support recursive read-only mounts (`Status`'s `runtime_handlers`;
    /// `""` is the default handler). Empty when the runtime reports no handler list, as containerd
    /// 1.7 does: the kubelet then takes no handler to support them.
    pub async fn recursive_read_only_handlers(&self) -> Result<Vec<String>, RuntimeError> {
        let response = self
            .client
            .clone()
            .status(cri::StatusRequest { verbose: false })
            .await
            .map_err(|status| self.call_failed("Status", status))?;
        Ok(response
            .into_inner()
            .runtime_handlers
            .into_iter()
            .filter(|h| h.features.as_ref().is_some_and(|f| f.recursive_read_only_mounts))
            .map(|h| h.name)
            .collect())
    }

    fn call_failed(&self, operation: &'static str, status: tonic::Status) -> RuntimeError {
        self.metrics.count_runtime_error(operation);
        RuntimeError::Call { operation, status }
    }

    /// Append each exited container's termination message to its runtime message, as
    /// `getPodContainerStatuses` does (`"<runtime message>: <message>"`). The files are read off
    /// the async threads, under a deadline (see [`termination::TerminationReader`]): a message
    /// that cannot be read in time is left out and reported as bad data, never waited for.
    async fn add_termination_messages(
        &self,
        pod_uid: &str,
        statuses: &mut [crate::kubecontainer::RuntimeContainerStatus],
        plans: Vec<(usize, termination::Plan)>,
        bad: &mut Vec<BadData>,
    ) {
        let plans: Vec<_> = plans
            .into_iter()
            .filter_map(|(i, plan)| Some((i, statuses.get(i)?.id.clone(), plan)))
            .collect();
        let readings = self
            .termination
            .read_pod(
                pod_uid,
                plans.iter().map(|(_, id, plan)| (id.clone(), plan.clone())).collect(),
            )
            .await;
        for ((i, id, _), reading) in plans.into_iter().zip(readings) {
            let message = match reading {
                termination::Reading::Read { message, refused } => {
                    bad.extend(refused.into_iter().map(|r| BadData::RefusedPath {
                        id: id.clone(),
                        detail: r.to_string(),
                    }));
                    message
                }
                termination::Reading::TimedOut => {
                    bad.push(BadData::ReadTimedOut {
                        id,
                        detail: format!(
                            "its termination message was not read within {:?} (a node volume that does not answer?); left out, and not read again",
                            self.termination.deadline()
                        ),
                    });
                    continue;
                }
                termination::Reading::NoReader => {
                    bad.push(BadData::ReadTimedOut {
                        id,
                        detail: "its termination message was not read: every reader of node files waits for a volume that does not answer; left out".into(),
                    });
                    continue;
                }
                termination::Reading::HungBefore => {
                    debug!(pod = %pod_uid, container = %id, "termination message left out: its read hung before");
                    continue;
                }
            };
            let Some(status) = statuses.get_mut(i) else { continue };
            if message.is_empty() {
                continue;
            }
            if !status.message.is_empty() {
                status.message.push(b": ");
            }
            status.message.push(message.as_bytes());
        }
    }

    /// Log (once per item) and count what conversion could not use.
    fn report(&self, bad: Vec<BadData>) {
        if bad.is_empty() {
            return;
        }
        let mut seen = self.bad_data_seen.lock().unwrap_or_else(|e| e.into_inner());
        for item in bad {
            self.metrics.count_bad_data(item.kind());
            if seen.len() >= BAD_DATA_MEMORY {
                seen.clear();
            }
            if seen.insert((item.kind(), item.id().to_owned())) {
                warn!(kind = item.kind(), id = item.id(), "bad runtime data: {item}");
            } else {
                debug!(kind = item.kind(), id = item.id(), "bad runtime data again: {item}");
            }
        }
    }

    /// Sandboxes and containers listed and grouped into pods: all of them, one pod's (selected by
    /// the kubelet's pod-uid label), or whatever has one id. Bad data found on the way is reported.
    async fn list(&self, selection: Selection<'_>) -> Result<Vec<RuntimePod>, RuntimeError> {
        let selector = |uid: &str| -> HashMap<String, String> { [(LABEL_POD_UID.to_owned(), uid.to_owned())].into() };
        let (sandbox_filter, container_filter) = match selection {
            Selection::All => (None, None),
            Selection::Pod(uid) => (
                Some(lists::PodSandboxFilter {
                    label_selector: selector(uid),
                    ..Default::default()
                }),
                Some(lists::ContainerFilter {
                    label_selector: selector(uid),
                    ..Default::default()
                }),
            ),
            Selection::PodByMetadata(uid) => (
                None,
                Some(lists::ContainerFilter {
                    label_selector: selector(uid),
                    ..Default::default()
                }),
            ),
            Selection::Id(id) => (
                Some(lists::PodSandboxFilter {
                    id: id.to_owned(),
                    ..Default::default()
                }),
                Some(lists::ContainerFilter {
                    id: id.to_owned(),
                    ..Default::default()
                }),
            ),
        };
        let (sandboxes, containers) = match self.list_mode.get() {
            Some(ListMode::Unary) => self.unary_lists(sandbox_filter, container_filter).await?,
            Some(ListMode::Streaming) | None => {
                match self
                    .streamed_lists(sandbox_filter.clone(), container_filter.clone())
                    .await
                {
                    Ok(items) => {
                        self.settle_list_mode(ListOutcome::Streamed);
                        items
                    }
                    Err((_, status)) if status.code() == tonic::Code::Unimplemented => {
                        self.settle_list_mode(ListOutcome::StreamUnimplemented);
                        self.unary_lists(sandbox_filter, container_filter).await?
                    }
                    Err((operation, status)) => {
                        self.settle_list_mode(list_outcome(&status));
                        return Err(self.call_failed(operation, status));
                    }
                }
            }
        };
        let mut bad = Vec::new();
        // Grouped as they are decoded; ids and uids stay borrowed from the answers until a pod
        // record keeps them.
        let mut grouping = convert::PodGrouping::with_capacity(sandboxes.len(), sandboxes.len() + containers.len());
        lists::read_sandboxes(&sandboxes, |sandbox| match sandbox {
            // The label selects; the metadata uid groups. Keep them consistent.
            Ok(sandbox) if matches!(selection, Selection::Pod(uid) if !sandbox.uid.is_empty() && sandbox.uid != uid) => {}
            Ok(sandbox) if matches!(selection, Selection::PodByMetadata(uid) if sandbox.uid != uid) => {}
            Ok(sandbox) => grouping.add_sandbox(sandbox, &mut bad),
            Err(b) => bad.push(b),
        })
        .map_err(|e| self.call_failed("ListPodSandbox", malformed(e)))?;
        lists::read_containers(&containers, |container| match container {
            Ok(container) => grouping.add_container(container, &mut bad),
            Err(b) => bad.push(b),
        })
        .map_err(|e| self.call_failed("ListContainers", malformed(e)))?;
        let pods = grouping.into_pods();
        self.report(bad);
        Ok(pods)
    }

    /// `ListPodSandbox` and `ListContainers` at once: their items, still encoded.
    async fn unary_lists(
        &self,
        sandbox_filter: Option<lists::PodSandboxFilter>,
        container_filter: Option<lists::ContainerFilter>,
    ) -> Result<(Vec<bytes::Bytes>, Vec<bytes::Bytes>), RuntimeError> {
        let (mut sandboxes_client, mut containers_client) = (self.lists.clone(), self.lists.clone());
        let failed = |operation, status: tonic::Status| {
            self.settle_list_mode(list_outcome(&status));
            self.call_failed(operation, status)
        };
        tokio::try_join!(
            async {
                let request = lists::ListPodSandboxRequest { filter: sandbox_filter };
                match sandboxes_client.list_pod_sandbox(request).await {
                    Ok(answer) => Ok(answer.into_inner().items),
                    Err(status) => Err(failed("ListPodSandbox", status)),
                }
            },
            async {
                let request = lists::ListContainersRequest {
                    filter: container_filter,
                };
                match containers_client.list_containers(request).await {
                    Ok(answer) => Ok(answer.into_inner().containers),
                    Err(status) => Err(failed("ListContainers", status)),
                }
            }
        )
    }

    /// `StreamPodSandboxes` and `StreamContainers` at once, each read to its end within the call
    /// deadline and [`MAX_STREAMED_LIST_BYTES`]: their items, still encoded. A failure names its
    /// call.
    async fn streamed_lists(
        &self,
        sandbox_filter: Option<lists::PodSandboxFilter>,
        container_filter: Option<lists::ContainerFilter>,
    ) -> Result<(Vec<bytes::Bytes>, Vec<bytes::Bytes>), (&'static str, tonic::Status)> {
        let (mut sandboxes_client, mut containers_client) = (self.lists.clone(), self.lists.clone());
        let deadline = self.call_timeout;
        tokio::try_join!(
            async {
                let request = lists::StreamPodSandboxesRequest { filter: sandbox_filter };
                let read = async {
                    let stream = sandboxes_client.stream_pod_sandboxes(request).await?.into_inner();
                    collect_streamed(stream, |m: lists::StreamPodSandboxesResponse| m.pod_sandboxes).await
                };
                within(deadline, read)
                    .await
                    .map_err(|status| ("StreamPodSandboxes", status))
            },
            async {
                let request = lists::StreamContainersRequest {
                    filter: container_filter,
                };
                let read = async {
                    let stream = containers_client.stream_containers(request).await?.into_inner();
                    collect_streamed(stream, |m: lists::StreamContainersResponse| m.containers).await
                };
                within(deadline, read)
                    .await
                    .map_err(|status| ("StreamContainers", status))
            }
        )
    }

    /// A sandbox's status, its strings still bytes (see [`statuses`]); None if it is gone.
    async fn sandbox_status(&self, id: &str) -> Result<Option<lists::PodSandboxStatus>, RuntimeError> {
        let request = lists::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        };
        match self.lists.clone().pod_sandbox_status(request).await {
            Ok(r) => Ok(r.into_inner().status),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(self.call_failed("PodSandboxStatus", s)),
        }
    }

    /// A container's status, its strings still bytes (see [`statuses`]); None if it is gone.
    async fn container_status(&self, id: &str) -> Result<Option<lists::ContainerStatus>, RuntimeError> {
        let request = lists::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        };
        match self.lists.clone().container_status(request).await {
            Ok(r) => Ok(r.into_inner().status),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(self.call_failed("ContainerStatus", s)),
        }
    }
}

impl Runtime for CriRuntime {
    type Answer = CriAnswer;

    async fn list_pods(&self) -> Result<Vec<RuntimePod>, RuntimeError> {
        self.list(Selection::All).await
    }

    /// Selected by the pod-uid label, as the kubelet labels sandboxes. When that finds no sandbox,
    /// all of them are listed and those whose metadata uid is the pod's taken, as the complete
    /// relist groups them: a sandbox without the label (made by `crictl runp` or another tool) must
    /// not look gone to one relist and be there for the other.
    async fn list_pod(&self, uid: &str) -> Result<Option<RuntimePod>, RuntimeError> {
        let pod = self.list(Selection::Pod(uid)).await?.into_iter().find(|p| p.id == uid);
        if pod.as_ref().is_some_and(|p| !p.sandboxes.is_empty()) {
            return Ok(pod);
        }
        Ok(self
            .list(Selection::PodByMetadata(uid))
            .await?
            .into_iter()
            .find(|p| p.id == uid))
    }

    /// Two lists filtered by id: unlike a status call for an id the runtime does not know, they
    /// answer "nothing" without an error (containerd logs every NotFound).
    async fn locate(&self, id: &str) -> Result<Option<PodUid>, RuntimeError> {
        Ok(self
            .list(Selection::Id(id))
            .await?
            .into_iter()
            .find(|p| p.find_any(id).is_some())
            .map(|p| p.id))
    }

    /// Like `kuberuntime.GetPodStatus`: the status of every sandbox (newest first) and of every
    /// container of the pod. A sandbox or container removed since the list is left out; any other
    /// failure fails the whole read, so that the relister re-inspects the pod. The id a probe just
    /// asked about is not asked about again.
    async fn pod_status(
        &self,
        pod: &RuntimePod,
        probed: Option<(&str, CriAnswer)>,
        exits: &mut [exits::PendingExit],
    ) -> Result<RuntimePodStatus, RuntimeError> {
        let (mut known_sandbox, mut known_container) = match probed {
            Some((id, CriAnswer(Answer::Sandbox(s)))) => (Some((id, s)), None),
            Some((id, CriAnswer(Answer::Container(c)))) => (None, Some((id, c))),
            None => (None, None),
        };
        let sandbox_ids: Vec<&str> = pod
            .sandboxes_newest_first()
            .into_iter()
            .map(|s| s.id.as_str())
            .collect();
        let sandboxes = join_all(
            sandbox_ids
                .iter()
                .map(|&id| answered_or(take_known(&mut known_sandbox, id), || self.sandbox_status(id))),
        );
        let containers = join_all(
            pod.containers
                .iter()
                .map(|c| answered_or(take_known(&mut known_container, &c.id), || self.container_status(&c.id))),
        );
        let (sandboxes, containers) = tokio::join!(sandboxes, containers);

        let mut bad = Vec::new();
        let mut status = RuntimePodStatus {
            id: pod.id.clone(),
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            ..RuntimePodStatus::default()
        };
        for (s, id) in sandboxes.into_iter().zip(&sandbox_ids) {
            if let Some(s) = s? {
                let s = statuses::sandbox_status(id, &s, &mut bad);
                status.sandbox_statuses.push(convert::sandbox_status(s, &mut bad));
            }
        }
        let mut plans = Vec::new();
        for exit in exits.iter_mut() {
            exit.outcome = None;
        }
        for (c, listed) in containers.into_iter().zip(&pod.containers) {
            if let Some(mut answer) = c? {
                if let Some(exit) = exits.iter_mut().find(|e| e.fact.id == listed.id) {
                    exits::read(exit, &mut answer);
                }
                let c = statuses::container_status(&listed.id, &answer, &mut bad);
                let plan = termination::plan(&c);
                // Kept for an exit taken ahead of the CRI state (`status_with_exits`).
                let source = plan.is_none().then(|| termination::source(&c)).flatten();
                if let Some(plan) = plan {
                    plans.push((status.container_statuses.len(), plan));
                }
                let mut c = convert::container_status(c, &mut bad);
                c.termination_source = source.filter(|_| c.state != RuntimeContainerState::Exited);
                c.sandbox_id.clone_from(&listed.sandbox_id);
                c.stop_signal = convert::stop_signal(&listed.id, answer.stop_signal, &mut bad);
                status.container_statuses.push(c);
            }
        }
        if !plans.is_empty() {
            self.add_termination_messages(&pod.id, &mut status.container_statuses, plans, &mut bad)
                .await;
        }
        self.report(bad);
        // IPs only from the newest sandbox, and only while it is ready.
        if let Some(newest) = status.sandbox_statuses.first()
            && newest.state == SandboxState::Ready
        {
            status.ips = newest.ips.clone();
        }
        Ok(status)
    }

    async fn status_with_exits(&self, last: RuntimePodStatus, exits: &mut [exits::PendingExit]) -> RuntimePodStatus {
        let mut status = last;
        let mut bad = Vec::new();
        let plans = exits::write_all_into_last(&mut status, exits, &mut bad);
        if !plans.is_empty() {
            self.add_termination_messages(&status.id.clone(), &mut status.container_statuses, plans, &mut bad)
                .await;
        }
        self.report(bad);
        status
    }

    async fn probe_state(
        &self,
        id: &str,
        kind: IdKind,
    ) -> Result<Option<(RuntimeContainerState, CriAnswer)>, RuntimeError> {
        let mut bad = Vec::new();
        let probed = match kind {
            IdKind::Container => self.container_status(id).await?.map(|s| {
                let state = convert::container_status(statuses::container_status(id, &s, &mut bad), &mut bad).state;
                (state, CriAnswer(Answer::Container(Box::new(s))))
            }),
            IdKind::Sandbox => self.sandbox_status(id).await?.map(|s| {
                let state = convert::sandbox_status(statuses::sandbox_status(id, &s, &mut bad), &mut bad).state;
                (
                    convert::sandbox_as_container_state(state),
                    CriAnswer(Answer::Sandbox(Box::new(s))),
                )
            }),
        };
        self.report(bad);
        Ok(probed)
    }
}

/// The answer `known` holds for `id`, taken from it (None when it holds another id's or none).
fn take_known<T>(known: &mut Option<(&str, Box<T>)>, id: &str) -> Option<T> {
    known.take_if(|(known, _)| *known == id).map(|(_, answer)| *answer)
}

/// `answer` if there is one, else what `ask` gets from the runtime.
async fn answered_or<T, F>(answer: Option<T>, ask: impl FnOnce() -> F) -> Result<Option<T>, RuntimeError>
where
    F: Future<Output = Result<Option<T>, RuntimeError>>,
{
    match answer {
        Some(answer) => Ok(Some(answer)),
        None => ask().await,
    }
}

/// A probe's answer from the CRI: the status of one container or sandbox, its strings still bytes.
#[derive(Debug)]
pub struct CriAnswer(Answer);

#[derive(Debug)]
enum Answer {
    Container(Box<lists::ContainerStatus>),
    Sandbox(Box<lists::PodSandboxStatus>),
}
