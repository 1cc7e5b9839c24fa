//! Floods of requests a test or bench sends the apiserver beside plegd's: a tenant's service
//! accounts filling `workload-low`, by listing ConfigMaps (seats and CPU) or by writes a slow
//! webhook holds (seats only), or any request in loops; and reading the apiserver's own metrics.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use crate::apiserver::Apiserver;
use crate::apiserver::faults::TENANT;

/// The value of the apiserver's metric `name{labels}` (labels in the server's order), 0 if absent.
pub fn server_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Requests of a flood, by how they ended.
#[derive(Default)]
pub struct Flood {
    stop: AtomicBool,
    pub served: AtomicUsize,
    pub refused: AtomicUsize,
}

impl Flood {
    /// `clients` × `each` loops of `request` until stopped.
    pub fn start<F, Fut>(
        self: &Arc<Self>,
        clients: Vec<kube::Client>,
        each: usize,
        request: F,
    ) -> Vec<tokio::task::JoinHandle<()>>
    where
        F: Fn(kube::Client) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), kube::Error>> + Send + 'static,
    {
        self.start_each(clients, each, |client| {
            let request = request.clone();
            move || request(client.clone())
        })
    }

    /// `clients` × `each` loops until stopped, each of the requests `make(client)` makes (called
    /// once a loop, in order).
    pub fn start_each<M, R, Fut>(
        self: &Arc<Self>,
        clients: Vec<kube::Client>,
        each: usize,
        mut make: M,
    ) -> Vec<tokio::task::JoinHandle<()>>
    where
        M: FnMut(kube::Client) -> R,
        R: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), kube::Error>> + Send + 'static,
    {
        let mut tasks = Vec::new();
        for client in clients {
            for _ in 0..each {
                let (me, request) = (self.clone(), make(client.clone()));
                tasks.push(tokio::spawn(async move {
                    while !me.stop.load(Ordering::Relaxed) {
                        match request().await {
                            Ok(()) => {
                                me.served.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                me.refused.fetch_add(1, Ordering::Relaxed);
                                // A request refused at once (a server gone: the test failed and
                                // dropped it) never waits, and a loop that never waits cannot be
                                // stopped when the runtime shuts down: the test would hang.
                                tokio::task::yield_now().await;
                            }
                        }
                    }
                }));
            }
        }
        tasks
    }

    pub async fn stop(&self, tasks: Vec<tokio::task::JoinHandle<()>>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// `accounts` service accounts of namespace `tenant`, each listing its 200 ConfigMaps of 8 KiB (1.6
/// MiB an answer) `each` at a time, until stopped: requests of `workload-low` that take a while,
/// and the server's CPU with them.
pub async fn tenant(
    api: &Apiserver,
    dir: &Path,
    accounts: usize,
    each: usize,
) -> (Arc<Flood>, Vec<tokio::task::JoinHandle<()>>) {
    let data = "x".repeat(8192);
    let configs = (0..200).map(|i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("config-{i}"), "namespace": TENANT},
               "data": {"blob": data}})
    });
    let clients = tenant_accounts(api, dir, accounts, "list", configs.collect()).await;
    let flood = Arc::new(Flood::default());
    // The answers are read, not decoded: the cost is the server's.
    let tasks = flood.start(clients, each, |client| async move {
        let request = http::Request::get(format!("/api/v1/namespaces/{TENANT}/configmaps"))
            .body(Vec::new())
            .expect("a request");
        client.request_text(request).await.map(drop)
    });
    (flood, tasks)
}

/// `accounts` service accounts of namespace `tenant`, each writing its own small ConfigMap `each` at
/// a time, until stopped, every write held `hold` in admission by a slow webhook (the test
/// apiserver's, [`Apiserver::set_tenant_hold`]): requests of `workload-low` that keep their seats
/// for `hold` and use next to no CPU — a flood that priority and fairness alone decides.
pub async fn tenant_held(
    api: &Apiserver,
    dir: &Path,
    accounts: usize,
    each: usize,
    hold: Duration,
) -> (Arc<Flood>, Vec<tokio::task::JoinHandle<()>>) {
    // A ConfigMap for each request in flight: writes of one object at once would conflict, and
    // the server would retry them, through the webhook again.
    let configs = (0..accounts * each).map(|i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("held-{i}"), "namespace": TENANT},
               "data": {"n": "0"}})
    });
    let clients = tenant_accounts(api, dir, accounts, "patch", configs.collect()).await;
    api.set_tenant_hold(hold).await;
    let flood = Arc::new(Flood::default());
    let next = Arc::new(AtomicUsize::new(0));
    let tasks = flood.start_each(clients, each, |client| {
        // Each loop its own ConfigMap, and a new value each time.
        let name = format!("held-{}", next.fetch_add(1, Ordering::Relaxed));
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, TENANT);
        let written = Arc::new(AtomicUsize::new(0));
        move || {
            let (api, name, written) = (api.clone(), name.clone(), written.clone());
            async move {
                let n = written.fetch_add(1, Ordering::Relaxed);
                let patch = kube::api::Patch::Merge(json!({"data": {"n": n.to_string()}}));
                api.patch(&name, &Default::default(), &patch).await.map(drop)
            }
        }
    });
    (flood, tasks)
}

/// Clients of `accounts` service accounts `app-0` … of namespace `tenant`, which may `verb` its
/// ConfigMaps, and `configs` stored there.
async fn tenant_accounts(
    api: &Apiserver,
    dir: &Path,
    accounts: usize,
    verb: &str,
    configs: Vec<serde_json::Value>,
) -> Vec<kube::Client> {
    let mut clients = Vec::new();
    for i in 0..accounts {
        let token = api.service_account_token(TENANT, &format!("app-{i}"));
        clients.push(api.client_with_token(dir, &format!("app-{i}"), &token).await);
    }
    let mut objects = vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "tenant-config", "namespace": TENANT},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": [verb]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tenant-config", "namespace": TENANT},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-config"},
               "subjects": [{"kind": "Group", "name": format!("system:serviceaccounts:{TENANT}"), "apiGroup": "rbac.authorization.k8s.io"}]}),
    ];
    objects.extend(configs);
    api.apply(&objects);
    clients
}

/// Wait until the server has queued requests of priority level `level`: its count of requests
/// enqueued, which only grows, so that a queue that formed and drained between two scrapes counts
/// (the current queue length is a sample that a scrape on a busy machine can miss every time).
pub async fn wait_queued(api: &Apiserver, level: &str) {
    crate::wait_for(
        &format!("requests queued in priority level {level}"),
        std::time::Duration::from_secs(120),
        || async {
            let text = api.server_metrics().await;
            server_metric(
                &text,
                "apiserver_flowcontrol_request_queue_length_after_enqueue_count",
                &[("priority_level", level)],
            ) > 0.0
        },
    )
    .await;
}
