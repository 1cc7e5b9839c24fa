//! A hand-written loopback HTTP apiserver, kept for one purpose: the benchmark beside it
//! (tests/bench/status_latency.rs) that sets it beside the test apiserver built from Kubernetes' own
//! code, to show what the real machinery costs. Every test and every other bench runs against the
//! real one (tests/support/apiserver.rs), which also makes the faults tests need (a delay, 500s and
//! 409s for status writes, failing watches: tests/apiserver/testhooks.go). It is not a reference:
//! unlike the real server it answers a PATCH with a stale uid with 409, and returns a status
//! exactly as written (no `"lastState": {}`); do not add tests of apiserver behaviour here.
//!
//! What it has: pods list with fieldSelector and limit/continue; watch from a resourceVersion with
//! ADDED/MODIFIED/DELETED, BOOKMARK, `410 Gone` (as an ERROR event) for compacted versions and
//! timeoutSeconds; get, create, delete (graceful for a bound pod that is not terminal; uid
//! preconditions); the status subresource with strategic-merge and JSON merge patches and uid
//! preconditions (409); a resourceVersion bump on every write; events.k8s.io create and patch;
//! enough discovery for kubectl.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use plegd::status::patch_apply::{apply_merge_patch, apply_strategic_merge};

#[derive(Default)]
struct Data {
    rv: u64,
    /// Watch history older than this is compacted: a watch from before it gets 410 Gone.
    compacted: u64,
    pods: BTreeMap<(String, String), Value>,
    events: BTreeMap<(String, String), Value>,
    history: VecDeque<(u64, &'static str, Value)>,
}

pub struct Inner {
    data: Mutex<Data>,
    changes: broadcast::Sender<(u64, &'static str, Value)>,
}

/// A running test apiserver.
#[derive(Clone)]
pub struct TestApiserver {
    pub inner: Arc<Inner>,
    pub addr: SocketAddr,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request's query parameters, decoded (the last of a repeated name wins).
fn query(uri: &Uri) -> BTreeMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn status_error(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn json_response(v: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn field_selector_matches(pod: &Value, selector: Option<&String>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    selector.split(',').all(|term| {
        let (field, want, negate) = match term.split_once("!=") {
            Some((f, v)) => (f, v, true),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((f, v)) => (f, v, false),
                None => return false,
            },
        };
        let have = match field {
            "spec.nodeName" => pod["spec"]["nodeName"].as_str(),
            "metadata.name" => pod["metadata"]["name"].as_str(),
            "metadata.namespace" => pod["metadata"]["namespace"].as_str(),
            "status.phase" => pod["status"]["phase"].as_str(),
            _ => None,
        }
        .unwrap_or("");
        (have == want) != negate
    })
}

impl Inner {
    fn bump(&self, data: &mut Data, kind: &'static str, object: &mut Value) {
        data.rv += 1;
        object["metadata"]["resourceVersion"] = json!(data.rv.to_string());
        data.history.push_back((data.rv, kind, object.clone()));
        while data.history.len() > 10_000 {
            if let Some((rv, _, _)) = data.history.pop_front() {
                data.compacted = rv;
            }
        }
        let _ = self.changes.send((data.rv, kind, object.clone()));
    }
}

impl TestApiserver {
    /// Serve on a free loopback port.
    pub async fn start() -> Self {
        let (changes, _) = broadcast::channel(65_536);
        let inner = Arc::new(Inner {
            data: Mutex::new(Data {
                rv: 100,
                ..Data::default()
            }),
            changes,
        });
        let app = Router::new()
            .route("/api", get(|| async { json_response(&json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})) }))
            .route("/apis", get(|| async { json_response(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": "events.k8s.io", "versions": [{"groupVersion": "events.k8s.io/v1", "version": "v1"}], "preferredVersion": {"groupVersion": "events.k8s.io/v1", "version": "v1"}}]})) }))
            .route("/api/v1", get(|| async { json_response(&discovery_v1()) }))
            .route("/apis/events.k8s.io/v1", get(|| async { json_response(&json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "events.k8s.io/v1", "resources": [{"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "verbs": ["create", "get", "list", "patch"]}]})) }))
            .route("/version", get(|| async { json_response(&json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-plegd-test"})) }))
            .route("/api/v1/pods", get(list_or_watch))
            .route("/api/v1/namespaces/{ns}/pods", get(list_or_watch_ns).post(create_pod))
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod).delete(delete_pod))
            .route("/api/v1/namespaces/{ns}/pods/{name}/status", get(get_pod).patch(patch_status))
            .route("/apis/events.k8s.io/v1/namespaces/{ns}/events", axum::routing::post(create_event).get(list_events))
            .route("/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}", axum::routing::patch(patch_event))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the test apiserver");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (plain HTTP, no credentials).
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\nusers:\n- name: test\n  user: {{}}\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    /// Create a pod (as the scheduler would, already bound when `spec.nodeName` is set).
    pub fn create_pod(&self, mut pod: Value) -> Value {
        let mut data = lock(&self.inner.data);
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
        let name = pod["metadata"]["name"].as_str().expect("pod name").to_owned();
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["namespace"] = json!(ns);
        if pod["metadata"]["uid"].is_null() {
            pod["metadata"]["uid"] = json!(format!("uid-{}-{}", name, data.rv + 1));
        }
        pod["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        if pod["status"].is_null() {
            pod["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        self.inner.bump(&mut data, "ADDED", &mut pod);
        data.pods.insert((ns, name), pod.clone());
        pod
    }
}

fn discovery_v1() -> Value {
    json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["create", "delete", "get", "list", "patch", "watch"], "shortNames": ["po"]},
        {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get", "patch"]}
    ]})
}

fn list_response(inner: &Inner, namespace: Option<&str>, q: &BTreeMap<String, String>) -> Response {
    let data = lock(&inner.data);
    let items: Vec<&Value> = data
        .pods
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
        .filter(|(_, p)| field_selector_matches(p, q.get("fieldSelector")))
        .map(|(_, p)| p)
        .collect();
    let start: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<Value> = items.iter().skip(start).take(limit).map(|p| (*p).clone()).collect();
    let mut metadata = json!({"resourceVersion": data.rv.to_string()});
    if start.saturating_add(limit) < items.len() {
        metadata["continue"] = json!((start + limit).to_string());
    }
    json_response(&json!({"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": page}))
}

fn watch_response(inner: Arc<Inner>, namespace: Option<String>, q: BTreeMap<String, String>) -> Response {
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300));
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let selector = q.get("fieldSelector").cloned();
    let matches = move |obj: &Value| {
        namespace
            .as_deref()
            .is_none_or(|n| obj["metadata"]["namespace"].as_str() == Some(n))
            && field_selector_matches(obj, selector.as_ref())
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1024);
    let line = |kind: &str, object: &Value| Ok(Bytes::from(format!("{}\n", json!({"type": kind, "object": object}))));
    {
        let data = lock(&inner.data);
        if from != 0 && from < data.compacted {
            let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": 410});
            let _ = tx.try_send(line("ERROR", &gone));
            drop(tx);
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
                .unwrap_or_default();
        }
    }
    let mut changes = inner.changes.subscribe();
    let backlog: Vec<(u64, &'static str, Value)> = {
        let data = lock(&inner.data);
        if from == 0 {
            data.pods.values().map(|p| (data.rv, "ADDED", p.clone())).collect()
        } else {
            data.history.iter().filter(|(rv, _, _)| *rv > from).cloned().collect()
        }
    };
    tokio::spawn(async move {
        let mut last = from;
        for (rv, kind, object) in backlog {
            last = last.max(rv);
            if matches(&object) && tx.send(line(kind, &object)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark.tick(), if bookmarks => {
                    let rv = lock(&inner.data).rv;
                    let object = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(line("BOOKMARK", &object)).await.is_err() { return; }
                }
                change = changes.recv() => match change {
                    Ok((rv, kind, object)) if rv > last => {
                        last = rv;
                        if matches(&object) && tx.send(line(kind, &object)).await.is_err() { return; }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .unwrap_or_default()
}

async fn list_or_watch(State(inner): State<Arc<Inner>>, uri: Uri) -> Response {
    let q = query(&uri);
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        watch_response(inner, None, q)
    } else {
        list_response(&inner, None, &q)
    }
}

async fn list_or_watch_ns(State(inner): State<Arc<Inner>>, Path(ns): Path<String>, uri: Uri) -> Response {
    let q = query(&uri);
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        watch_response(inner, Some(ns), q)
    } else {
        list_response(&inner, Some(&ns), &q)
    }
}

async fn get_pod(State(inner): State<Arc<Inner>>, Path(params): Path<Vec<String>>) -> Response {
    let (ns, name) = (params[0].clone(), params[1].clone());
    match lock(&inner.data).pods.get(&(ns, name.clone())) {
        Some(p) => json_response(p),
        None => status_error(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn create_pod(State(inner): State<Arc<Inner>>, Path(ns): Path<String>, body: Bytes) -> Response {
    let Ok(mut pod) = serde_json::from_slice::<Value>(&body) else {
        return status_error(400, "BadRequest", "invalid JSON");
    };
    pod["metadata"]["namespace"] = json!(ns);
    let server = TestApiserver {
        inner,
        addr: ([127, 0, 0, 1], 0).into(),
    };
    let created = server.create_pod(pod);
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        created.to_string(),
    )
        .into_response()
}

/// The apiserver's 409 for a uid precondition that `pod` does not meet; None when it does or there
/// is none.
fn uid_precondition_failed(uid: Option<&str>, pod: &Value) -> Option<Response> {
    let uid = uid?;
    (Some(uid) != pod["metadata"]["uid"].as_str()).then(|| {
        status_error(
            409,
            "Conflict",
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                pod["metadata"]["uid"]
            ),
        )
    })
}

/// DELETE of a pod as the apiserver does it: `preconditions.uid` (409 when it differs); a pod that
/// is bound to a node and not terminal is deleted gracefully (deletionTimestamp and
/// deletionGracePeriodSeconds set, MODIFIED, the object stays) unless the grace period is 0;
/// otherwise it is removed (DELETED).
async fn delete_pod(
    State(inner): State<Arc<Inner>>,
    Path((ns, name)): Path<(String, String)>,
    uri: Uri,
    body: Bytes,
) -> Response {
    let q = query(&uri);
    let options: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => return status_error(400, "BadRequest", "invalid DeleteOptions"),
        }
    };
    let mut data = lock(&inner.data);
    let key = (ns, name.clone());
    let Some(pod) = data.pods.get(&key).cloned() else {
        return status_error(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Some(conflict) = uid_precondition_failed(options["preconditions"]["uid"].as_str(), &pod) {
        return conflict;
    }
    let grace = options["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()))
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    json_response(&delete_from(&inner, &mut data, key, grace))
}

/// Delete the pod at `key` with `grace` seconds (it exists): gracefully (deletionTimestamp,
/// MODIFIED) when it is bound, not terminal and `grace` > 0, else at once (DELETED).
fn delete_from(inner: &Inner, data: &mut Data, key: (String, String), grace: i64) -> Value {
    let Some(mut pod) = data.pods.get(&key).cloned() else {
        return Value::Null;
    };
    let bound = pod["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    let terminal = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if grace > 0 && bound && !terminal {
        if pod["metadata"]["deletionTimestamp"].is_null() {
            pod["metadata"]["deletionTimestamp"] = json!(
                humantime::format_rfc3339_seconds(
                    std::time::SystemTime::now() + Duration::from_secs(grace.unsigned_abs())
                )
                .to_string()
            );
            pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            inner.bump(data, "MODIFIED", &mut pod);
            data.pods.insert(key, pod.clone());
        }
        return pod;
    }
    data.pods.remove(&key);
    inner.bump(data, "DELETED", &mut pod);
    pod
}

async fn patch_status(
    State(inner): State<Arc<Inner>>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status_error(400, "BadRequest", "invalid JSON patch");
    };
    let mut data = lock(&inner.data);
    let Some(mut pod) = data.pods.get(&(ns.clone(), name.clone())).cloned() else {
        return status_error(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    if let Some(conflict) = uid_precondition_failed(patch["metadata"]["uid"].as_str(), &pod) {
        return conflict;
    }
    let status_patch = patch.get("status").cloned().unwrap_or(Value::Null);
    if status_patch.is_null() {
        return json_response(&pod);
    }
    if content_type.starts_with("application/strategic-merge-patch+json") {
        apply_strategic_merge(&mut pod["status"], &status_patch);
    } else if content_type.starts_with("application/merge-patch+json") {
        apply_merge_patch(&mut pod["status"], &status_patch);
    } else {
        return status_error(
            415,
            "UnsupportedMediaType",
            &format!("the body of the request was in an unknown format: {content_type}"),
        );
    }
    inner.bump(&mut data, "MODIFIED", &mut pod);
    data.pods.insert((ns, name), pod.clone());
    json_response(&pod)
}

async fn create_event(State(inner): State<Arc<Inner>>, Path(ns): Path<String>, body: Bytes) -> Response {
    let Ok(mut event) = serde_json::from_slice::<Value>(&body) else {
        return status_error(400, "BadRequest", "invalid JSON");
    };
    let mut data = lock(&inner.data);
    let name = event["metadata"]["name"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("event-{}", data.rv + 1));
    event["metadata"]["name"] = json!(name);
    event["metadata"]["namespace"] = json!(ns);
    data.rv += 1;
    event["metadata"]["resourceVersion"] = json!(data.rv.to_string());
    data.events.insert((ns, name), event.clone());
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        event.to_string(),
    )
        .into_response()
}

async fn patch_event(
    State(inner): State<Arc<Inner>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status_error(400, "BadRequest", "invalid JSON");
    };
    let mut data = lock(&inner.data);
    let Some(event) = data.events.get_mut(&(ns, name.clone())) else {
        return status_error(404, "NotFound", &format!("events \"{name}\" not found"));
    };
    apply_merge_patch(event, &patch);
    json_response(event)
}

async fn list_events(State(inner): State<Arc<Inner>>, Path(ns): Path<String>) -> Response {
    let data = lock(&inner.data);
    let items: Vec<&Value> = data
        .events
        .iter()
        .filter(|((n, _), _)| *n == ns)
        .map(|(_, e)| e)
        .collect();
    json_response(
        &json!({"kind": "EventList", "apiVersion": "events.k8s.io/v1", "metadata": {"resourceVersion": data.rv.to_string()}, "items": items}),
    )
}
