//! An in-process fake CRI runtime: a tonic server on a temporary unix socket whose pods, containers,
//! failures and delays a test scripts step by step. It serves what a real runtime cannot produce on
//! demand (errors, odd data, scale); everything else is tested against a real containerd.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

use plegd::kubecontainer::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// Written into any string of the fake's state, this marker reaches the client as as many bytes
/// that are not UTF-8 (0xff) — in every answer and event that carries it: a runtime reporting a
/// string that is not UTF-8, which tonic's `String` messages cannot send. Same length, so every
/// length prefix of the encoded message stays right.
pub const NOT_UTF8: &str = "<not-utf8>";

/// The fake's service with [`NOT_UTF8`] spoilt in every data frame it sends.
#[derive(Clone)]
struct SpoilStrings<S>(S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for SpoilStrings<S> {
    const NAME: &'static str = S::NAME;
}

type HttpResponse = http::Response<tonic::body::Body>;

impl<S, B> tower::Service<http::Request<B>> for SpoilStrings<S>
where
    S: tower::Service<http::Request<B>, Response = HttpResponse>,
{
    type Response = HttpResponse;
    type Error = S::Error;
    type Future = futures_util::future::MapOk<S::Future, fn(HttpResponse) -> HttpResponse>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        use futures_util::TryFutureExt;
        self.0
            .call(request)
            .map_ok(spoil_response as fn(HttpResponse) -> HttpResponse)
    }
}

fn spoil_response(response: HttpResponse) -> HttpResponse {
    use http_body_util::BodyExt;
    response.map(|body| tonic::body::Body::new(body.map_frame(|frame| frame.map_data(spoil))))
}

fn spoil(data: bytes::Bytes) -> bytes::Bytes {
    let marker = NOT_UTF8.as_bytes();
    if !data.windows(marker.len()).any(|w| w == marker) {
        return data;
    }
    let mut out = data.to_vec();
    let mut at = 0;
    while let Some(found) = out[at..].windows(marker.len()).position(|w| w == marker) {
        out[at + found..at + found + marker.len()].fill(0xff);
        at += found + marker.len();
    }
    out.into()
}

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!("fake CRI does not implement {method}"))
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i64
}

/// One sandbox the fake runtime knows.
#[derive(Clone, Debug)]
pub struct FakeSandbox {
    pub item: cri::PodSandbox,
    pub ip: String,
    pub host_network: bool,
}

/// One container the fake runtime knows, with the status it reports.
#[derive(Clone, Debug)]
pub struct FakeContainer {
    pub item: cri::Container,
    pub exit_code: i32,
    pub reason: String,
    pub started_at: i64,
    pub finished_at: i64,
    /// What its status reports as mounted (a termination message file's host side, say).
    pub mounts: Vec<cri::Mount>,
}

/// Everything the fake runtime reports, and how it misbehaves.
#[derive(Default, Debug)]
pub struct FakeState {
    pub sandboxes: BTreeMap<String, FakeSandbox>,
    pub containers: BTreeMap<String, FakeContainer>,
    /// Raw items appended to list answers as they are: for bad data.
    pub extra_sandboxes: Vec<cri::PodSandbox>,
    pub extra_containers: Vec<cri::Container>,
    /// Method name (e.g. "ContainerStatus"), or method and id ("ContainerStatus ctr-1") → error
    /// answered until cleared.
    pub failures: HashMap<String, Status>,
    /// Method name → how long to sleep before answering.
    pub delays: HashMap<String, Duration>,
    /// Method name → number of calls.
    pub calls: HashMap<String, u64>,
    /// Answer Version with Unimplemented (a runtime without CRI v1).
    pub no_v1: bool,
    pub runtime_name: String,
    /// Answer GetContainerEvents and end the stream at once, as CRI-O does without pod events.
    pub events_end_at_once: bool,
}

type EventItem = Result<cri::ContainerEventResponse, Status>;

/// A handle on the fake runtime's state, shared with the server.
#[derive(Clone)]
pub struct FakeCri {
    state: Arc<Mutex<FakeState>>,
    /// Every open GetContainerEvents stream receives what is sent here; an Err ends the streams.
    events: tokio::sync::broadcast::Sender<EventItem>,
}

impl Default for FakeCri {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeCri {
    pub fn new() -> Self {
        let (events, _) = tokio::sync::broadcast::channel(1024);
        let fake = Self {
            state: Default::default(),
            events,
        };
        fake.state().runtime_name = "fake".into();
        fake
    }

    /// Send a container event naming `container_id` (and its pod's uid, if `uid` is given) to every
    /// open event stream. Returns how many streams got it.
    pub fn emit_event(&self, container_id: &str, uid: Option<&str>) -> usize {
        let pod_sandbox_status = uid.map(|uid| cri::PodSandboxStatus {
            metadata: Some(cri::PodSandboxMetadata {
                uid: uid.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let event = cri::ContainerEventResponse {
            container_id: container_id.into(),
            container_event_type: cri::ContainerEventType::ContainerStoppedEvent as i32,
            created_at: now_nanos(),
            pod_sandbox_status,
            containers_statuses: vec![],
        };
        self.events.send(Ok(event)).unwrap_or(0)
    }

    /// End every open event stream with an error.
    pub fn break_event_streams(&self, status: Status) -> usize {
        self.events.send(Err(status)).unwrap_or(0)
    }

    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pod sandbox with the kubelet's labels; `ready` chooses READY or NOTREADY.
    pub fn add_sandbox(&self, uid: &str, name: &str, namespace: &str, sandbox_id: &str, ready: bool, ip: &str) {
        let labels: HashMap<String, String> = [
            (LABEL_POD_UID.to_owned(), uid.to_owned()),
            (LABEL_POD_NAME.to_owned(), name.to_owned()),
            (LABEL_POD_NAMESPACE.to_owned(), namespace.to_owned()),
        ]
        .into();
        let item = cri::PodSandbox {
            id: sandbox_id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            state: if ready {
                cri::PodSandboxState::SandboxReady
            } else {
                cri::PodSandboxState::SandboxNotready
            } as i32,
            created_at: now_nanos(),
            labels,
            ..Default::default()
        };
        self.state().sandboxes.insert(
            sandbox_id.into(),
            FakeSandbox {
                item,
                ip: ip.into(),
                host_network: false,
            },
        );
    }

    /// A container of pod `uid` in sandbox `sandbox_id`, in the given state.
    pub fn add_container(&self, uid: &str, sandbox_id: &str, id: &str, name: &str, state: cri::ContainerState) {
        let (pod_name, namespace) = {
            let st = self.state();
            st.sandboxes
                .get(sandbox_id)
                .and_then(|s| s.item.metadata.clone())
                .map(|m| (m.name, m.namespace))
                .unwrap_or_default()
        };
        let labels: HashMap<String, String> = [
            (LABEL_POD_UID.to_owned(), uid.to_owned()),
            (LABEL_POD_NAME.to_owned(), pod_name),
            (LABEL_POD_NAMESPACE.to_owned(), namespace),
            (LABEL_CONTAINER_NAME.to_owned(), name.to_owned()),
        ]
        .into();
        let item = cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox_id.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "fake.test/busybox:1".into(),
                ..Default::default()
            }),
            image_ref: "sha256:fake".into(),
            state: state as i32,
            created_at: now_nanos(),
            labels,
            ..Default::default()
        };
        let started_at = if state == cri::ContainerState::ContainerCreated {
            0
        } else {
            now_nanos()
        };
        self.state().containers.insert(
            id.into(),
            FakeContainer {
                item,
                exit_code: 0,
                reason: String::new(),
                started_at,
                finished_at: 0,
                mounts: Vec::new(),
            },
        );
    }

    /// The container's termination message file is `host_path`, mounted at /dev/termination-log
    /// with the path in its annotation, as the kubelet sets it up.
    pub fn set_termination_message_file(&self, id: &str, host_path: &Path) {
        use plegd::runtime::termination::ANNOTATION_MESSAGE_PATH;
        if let Some(c) = self.state().containers.get_mut(id) {
            c.item
                .annotations
                .insert(ANNOTATION_MESSAGE_PATH.into(), "/dev/termination-log".into());
            c.mounts.push(cri::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: host_path.display().to_string(),
                ..Default::default()
            });
        }
    }

    /// A running container in a ready sandbox: the usual pod.
    pub fn add_running_pod(&self, uid: &str, name: &str, containers: usize) {
        let sandbox = format!("sb-{uid}");
        self.add_sandbox(uid, name, "default", &sandbox, true, "10.9.0.1");
        for i in 0..containers {
            self.add_container(
                uid,
                &sandbox,
                &format!("ctr-{uid}-{i}"),
                &format!("c{i}"),
                cri::ContainerState::ContainerRunning,
            );
        }
    }

    pub fn start_container(&self, id: &str) {
        if let Some(c) = self.state().containers.get_mut(id) {
            c.item.state = cri::ContainerState::ContainerRunning as i32;
            c.started_at = now_nanos();
        }
    }

    /// The container exits with `exit_code`; the reason follows containerd (Completed/Error).
    pub fn exit_container(&self, id: &str, exit_code: i32) {
        if let Some(c) = self.state().containers.get_mut(id) {
            c.item.state = cri::ContainerState::ContainerExited as i32;
            c.exit_code = exit_code;
            c.reason = if exit_code == 0 { "Completed" } else { "Error" }.into();
            c.finished_at = now_nanos();
        }
    }

    pub fn set_container_state(&self, id: &str, state: cri::ContainerState) {
        if let Some(c) = self.state().containers.get_mut(id) {
            c.item.state = state as i32;
        }
    }

    pub fn remove_container(&self, id: &str) {
        self.state().containers.remove(id);
    }

    pub fn set_sandbox_ready(&self, id: &str, ready: bool) {
        if let Some(s) = self.state().sandboxes.get_mut(id) {
            s.item.state = if ready {
                cri::PodSandboxState::SandboxReady
            } else {
                cri::PodSandboxState::SandboxNotready
            } as i32;
            if !ready {
                s.ip.clear();
            }
        }
    }

    pub fn remove_sandbox(&self, id: &str) {
        self.state().sandboxes.remove(id);
    }

    /// Remove a pod's sandboxes and containers.
    pub fn remove_pod(&self, uid: &str) {
        let mut st = self.state();
        st.sandboxes
            .retain(|_, s| s.item.metadata.as_ref().is_none_or(|m| m.uid != uid));
        st.containers
            .retain(|_, c| c.item.labels.get(LABEL_POD_UID).is_none_or(|u| u != uid));
    }

    /// Answer `method` (e.g. "ContainerStatus") with `status` until `heal` is called.
    pub fn fail(&self, method: &str, status: Status) {
        self.state().failures.insert(method.into(), status);
    }

    pub fn heal(&self, method: &str) {
        self.state().failures.remove(method);
    }

    /// Answer `method` for the container or sandbox `id` alone with `status` until `heal_id`.
    pub fn fail_id(&self, method: &str, id: &str, status: Status) {
        self.state().failures.insert(format!("{method} {id}"), status);
    }

    pub fn heal_id(&self, method: &str, id: &str) {
        self.state().failures.remove(&format!("{method} {id}"));
    }

    /// The scripted failure of `method` for `id`, if any.
    fn failure_for(&self, method: &str, id: &str) -> Result<(), Status> {
        self.state()
            .failures
            .get(&format!("{method} {id}"))
            .cloned()
            .map_or(Ok(()), Err)
    }

    /// Sleep `delay` before answering `method`.
    pub fn delay(&self, method: &str, delay: Duration) {
        self.state().delays.insert(method.into(), delay);
    }

    pub fn calls(&self, method: &str) -> u64 {
        self.state().calls.get(method).copied().unwrap_or(0)
    }

    /// Count the call, then apply the scripted delay and failure.
    async fn enter(&self, method: &str) -> Result<(), Status> {
        let (delay, failure) = {
            let mut st = self.state();
            *st.calls.entry(method.into()).or_default() += 1;
            (st.delays.get(method).copied(), st.failures.get(method).cloned())
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        failure.map_or(Ok(()), Err)
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A running fake server on a unix socket. Dropping it stops the server.
pub struct FakeServer {
    pub fake: FakeCri,
    pub path: PathBuf,
    task: Option<JoinHandle<()>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl FakeServer {
    /// Serve a new fake on a socket in a fresh temporary directory.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("cri.sock");
        let mut server = Self {
            fake: FakeCri::new(),
            path,
            task: None,
            shutdown: None,
            _dir: Some(dir),
        };
        server.serve();
        server
    }

    /// Serve `fake` at `path` (which must not exist yet).
    pub fn serve_at(fake: FakeCri, path: &Path) -> Self {
        let mut server = Self {
            fake,
            path: path.to_owned(),
            task: None,
            shutdown: None,
            _dir: None,
        };
        server.serve();
        server
    }

    fn serve(&mut self) {
        let listener = UnixListener::bind(&self.path).expect("bind the fake CRI socket");
        let service = SpoilStrings(
            RuntimeServiceServer::new(self.fake.clone())
                .max_decoding_message_size(plegd::runtime::MAX_MESSAGE_SIZE)
                .max_encoding_message_size(plegd::runtime::MAX_MESSAGE_SIZE),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.shutdown = Some(tx);
        self.task = Some(tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = rx.await;
                })
                .await;
        }));
    }

    /// The runtime goes away abruptly: connections drop and the socket file is removed.
    pub async fn stop(&mut self) {
        // Graceful shutdown closes every connection (GOAWAY); a stuck one is cut after a second.
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(1), &mut task).await.is_err()
        {
            task.abort();
            let _ = task.await;
        }
        let _ = std::fs::remove_file(&self.path);
    }

    /// The runtime comes back on the same socket with the same state.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.serve();
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

type EventStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for FakeCri {
    type GetContainerEventsStream = EventStream;

    async fn version(&self, _: Request<cri::VersionRequest>) -> Result<Response<cri::VersionResponse>, Status> {
        self.enter("Version").await?;
        let st = self.state();
        if st.no_v1 {
            return Err(unimplemented("runtime.v1.RuntimeService"));
        }
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: st.runtime_name.clone(),
            runtime_version: "1.0.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        self.enter("ListPodSandbox").await?;
        let filter = request.into_inner().filter.unwrap_or_default();
        let st = self.state();
        let mut items: Vec<cri::PodSandbox> = st
            .sandboxes
            .values()
            .map(|s| &s.item)
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| filter.state.as_ref().is_none_or(|v| v.state == s.state))
            .filter(|s| labels_match(&s.labels, &filter.label_selector))
            .cloned()
            .collect();
        items.extend(st.extra_sandboxes.iter().cloned());
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn list_containers(
        &self,
        request: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        self.enter("ListContainers").await?;
        let filter = request.into_inner().filter.unwrap_or_default();
        let st = self.state();
        let mut containers: Vec<cri::Container> = st
            .containers
            .values()
            .map(|c| &c.item)
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.pod_sandbox_id == filter.pod_sandbox_id)
            .filter(|c| filter.state.as_ref().is_none_or(|v| v.state == c.state))
            .filter(|c| labels_match(&c.labels, &filter.label_selector))
            .cloned()
            .collect();
        containers.extend(st.extra_containers.iter().cloned());
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        self.enter("PodSandboxStatus").await?;
        let id = request.into_inner().pod_sandbox_id;
        let mut st = self.state();
        if !st.sandboxes.contains_key(&id) {
            // containerd logs each of these as an error: counted so that tests can see them.
            *st.calls.entry("PodSandboxStatus NotFound".into()).or_default() += 1;
        }
        let sandbox = st
            .sandboxes
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        let network = (!sandbox.ip.is_empty()).then(|| cri::PodSandboxNetworkStatus {
            ip: sandbox.ip.clone(),
            additional_ips: vec![],
        });
        let status = cri::PodSandboxStatus {
            id: sandbox.item.id.clone(),
            metadata: sandbox.item.metadata.clone(),
            state: sandbox.item.state,
            created_at: sandbox.item.created_at,
            network,
            labels: sandbox.item.labels.clone(),
            ..Default::default()
        };
        Ok(Response::new(cri::PodSandboxStatusResponse {
            status: Some(status),
            ..Default::default()
        }))
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        self.enter("ContainerStatus").await?;
        let id = request.into_inner().container_id;
        self.failure_for("ContainerStatus", &id)?;
        let mut st = self.state();
        if !st.containers.contains_key(&id) {
            *st.calls.entry("ContainerStatus NotFound".into()).or_default() += 1;
        }
        let c = st
            .containers
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        let status = cri::ContainerStatus {
            id: c.item.id.clone(),
            metadata: c.item.metadata.clone(),
            state: c.item.state,
            created_at: c.item.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.item.image.clone(),
            image_ref: c.item.image_ref.clone(),
            reason: c.reason.clone(),
            labels: c.item.labels.clone(),
            annotations: c.item.annotations.clone(),
            mounts: c.mounts.clone(),
            ..Default::default()
        };
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(status),
            ..Default::default()
        }))
    }

    async fn get_container_events(&self, _: Request<cri::GetEventsRequest>) -> Result<Response<EventStream>, Status> {
        self.enter("GetContainerEvents").await?;
        if self.state().events_end_at_once {
            // CRI-O (enable_pod_events = false): the headers, then the end of the stream.
            return Ok(Response::new(Box::pin(futures_util::stream::empty())));
        }
        use tokio::sync::broadcast::error::RecvError;
        let mut rx = self.events.subscribe();
        // As containerd (grpc-go) does, the response headers go with the first event: until one
        // comes the call is not answered. An error before it is the call's answer.
        let first = loop {
            match rx.recv().await {
                Ok(Ok(event)) => break event,
                Ok(Err(status)) => return Err(status),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return Err(Status::unavailable("shutting down")),
            }
        };
        // An Err item is sent and then ends the stream, like a broken connection.
        let rest = futures_util::stream::unfold((rx, false), |(mut rx, ended)| async move {
            if ended {
                return None;
            }
            loop {
                match rx.recv().await {
                    Ok(Ok(event)) => return Some((Ok(event), (rx, false))),
                    Ok(Err(status)) => return Some((Err(status), (rx, true))),
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        });
        let stream = futures_util::StreamExt::chain(futures_util::stream::once(async move { Ok(first) }), rest);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn run_pod_sandbox(
        &self,
        _: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        Err(unimplemented("run_pod_sandbox"))
    }
    async fn stop_pod_sandbox(
        &self,
        _: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        Err(unimplemented("stop_pod_sandbox"))
    }
    async fn remove_pod_sandbox(
        &self,
        _: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        Err(unimplemented("remove_pod_sandbox"))
    }
    async fn create_container(
        &self,
        _: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        Err(unimplemented("create_container"))
    }
    async fn start_container(
        &self,
        _: Request<cri::StartContainerRequest>,
    ) -> Result<Response<cri::StartContainerResponse>, Status> {
        Err(unimplemented("start_container"))
    }
    async fn stop_container(
        &self,
        _: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        Err(unimplemented("stop_container"))
    }
    async fn remove_container(
        &self,
        _: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        Err(unimplemented("remove_container"))
    }
    async fn update_container_resources(
        &self,
        _: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Result<Response<cri::UpdateContainerResourcesResponse>, Status> {
        Err(unimplemented("update_container_resources"))
    }
    async fn reopen_container_log(
        &self,
        _: Request<cri::ReopenContainerLogRequest>,
    ) -> Result<Response<cri::ReopenContainerLogResponse>, Status> {
        Err(unimplemented("reopen_container_log"))
    }
    async fn exec_sync(&self, _: Request<cri::ExecSyncRequest>) -> Result<Response<cri::ExecSyncResponse>, Status> {
        Err(unimplemented("exec_sync"))
    }
    async fn exec(&self, _: Request<cri::ExecRequest>) -> Result<Response<cri::ExecResponse>, Status> {
        Err(unimplemented("exec"))
    }
    async fn attach(&self, _: Request<cri::AttachRequest>) -> Result<Response<cri::AttachResponse>, Status> {
        Err(unimplemented("attach"))
    }
    async fn port_forward(
        &self,
        _: Request<cri::PortForwardRequest>,
    ) -> Result<Response<cri::PortForwardResponse>, Status> {
        Err(unimplemented("port_forward"))
    }
    async fn container_stats(
        &self,
        _: Request<cri::ContainerStatsRequest>,
    ) -> Result<Response<cri::ContainerStatsResponse>, Status> {
        Err(unimplemented("container_stats"))
    }
    async fn list_container_stats(
        &self,
        _: Request<cri::ListContainerStatsRequest>,
    ) -> Result<Response<cri::ListContainerStatsResponse>, Status> {
        Err(unimplemented("list_container_stats"))
    }
    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> Result<Response<cri::PodSandboxStatsResponse>, Status> {
        Err(unimplemented("pod_sandbox_stats"))
    }
    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Result<Response<cri::ListPodSandboxStatsResponse>, Status> {
        Err(unimplemented("list_pod_sandbox_stats"))
    }
    async fn update_runtime_config(
        &self,
        _: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<cri::UpdateRuntimeConfigResponse>, Status> {
        Err(unimplemented("update_runtime_config"))
    }
    /// As containerd 2.x answers on a kernel that has them: the default handler supports recursive
    /// read-only mounts.
    async fn status(&self, _: Request<cri::StatusRequest>) -> Result<Response<cri::StatusResponse>, Status> {
        self.enter("Status").await?;
        Ok(Response::new(cri::StatusResponse {
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(cri::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: true,
                    user_namespaces: false,
                }),
            }],
            ..Default::default()
        }))
    }
    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> Result<Response<cri::CheckpointContainerResponse>, Status> {
        Err(unimplemented("checkpoint_container"))
    }
    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Result<Response<cri::ListMetricDescriptorsResponse>, Status> {
        Err(unimplemented("list_metric_descriptors"))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<cri::ListPodSandboxMetricsResponse>, Status> {
        Err(unimplemented("list_pod_sandbox_metrics"))
    }
    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Result<Response<cri::RuntimeConfigResponse>, Status> {
        Err(unimplemented("runtime_config"))
    }
}
