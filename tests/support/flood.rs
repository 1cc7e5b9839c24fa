//! Floods of requests a test or bench sends the apiserver beside plegd's: a tenant's service
//! accounts listing ConfigMaps (what fills `workload-low`), or any request in loops; and reading the
//! apiserver's own metrics.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;

use crate::apiserver::Apiserver;

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
        F: Fn(kube::Client) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<(), kube::Error>> + Send,
    {
        let mut tasks = Vec::new();
        for client in clients {
            for _ in 0..each {
                let (me, client, request) = (self.clone(), client.clone(), request.clone());
                tasks.push(tokio::spawn(async move {
                    while !me.stop.load(Ordering::Relaxed) {
                        match request(client.clone()).await {
                            Ok(()) => me.served.fetch_add(1, Ordering::Relaxed),
                            Err(_) => me.refused.fetch_add(1, Ordering::Relaxed),
                        };
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
/// MiB an answer) `each` at a time, until stopped: requests of `workload-low` that take a while.
pub async fn tenant(
    api: &Apiserver,
    dir: &Path,
    accounts: usize,
    each: usize,
) -> (Arc<Flood>, Vec<tokio::task::JoinHandle<()>>) {
    let data = "x".repeat(8192);
    let mut objects = vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "read-config", "namespace": "tenant"},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "read-config", "namespace": "tenant"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-config"},
               "subjects": [{"kind": "Group", "name": "system:serviceaccounts:tenant", "apiGroup": "rbac.authorization.k8s.io"}]}),
    ];
    let mut clients = Vec::new();
    for i in 0..accounts {
        let token = api.service_account_token("tenant", &format!("app-{i}"));
        clients.push(api.client_with_token(dir, &format!("app-{i}"), &token).await);
    }
    for i in 0..200 {
        objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("config-{i}"), "namespace": "tenant"},
                            "data": {"blob": data}}));
    }
    api.apply(&objects);
    let flood = Arc::new(Flood::default());
    // The answers are read, not decoded: the cost is the server's.
    let tasks = flood.start(clients, each, |client| async move {
        let request = http::Request::get("/api/v1/namespaces/tenant/configmaps")
            .body(Vec::new())
            .expect("a request");
        client.request_text(request).await.map(drop)
    });
    (flood, tasks)
}

/// Wait until the server has requests of priority level `level` waiting in its queues.
pub async fn wait_queued(api: &Apiserver, level: &str) {
    crate::wait_for(
        &format!("requests queued in priority level {level}"),
        std::time::Duration::from_secs(60),
        || async {
            let text = api.server_metrics().await;
            server_metric(
                &text,
                "apiserver_flowcontrol_current_inqueue_requests",
                &[("priority_level", level)],
            ) > 0.0
        },
    )
    .await;
}
