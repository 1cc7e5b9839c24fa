//! What plegd's end-to-end tests and benches share, compiled once: the fake CRI server
//! ([`fake_cri`]), the real containerd ([`containerd`]) and kube-apiserver ([`apiserver`]) fixtures,
//! the one-node Kubernetes cluster ([`cluster`]), plegd run in-process ([`daemon`]), and the helpers
//! every test uses (waiting, metrics, processes).

/// The repository, two levels above this crate.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

use plegd::pleg::{PodLifecycleEvent, PodLifecycleEventType};

pub mod apiserver;
pub mod cluster;
pub mod containerd;
pub mod daemon;
pub mod fake_cri;
pub mod fleet;
pub mod flood;
pub mod history;
pub mod hung_volume;
pub mod manifests;
pub mod never_wrong;
pub mod process;
pub mod proxy;
pub mod relister;
pub mod request_info;
pub mod tls;

/// Poll the async `cond` every 100 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: std::time::Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !cond().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Poll `get` every 100 ms until `cond` holds of what it returns, and return that; panics naming
/// `what`, with the last value, after `timeout`.
pub async fn eventually<T: std::fmt::Debug, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut get: F,
    cond: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let value = get().await;
        if cond(&value) {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}; last seen: {value:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Poll `cond` every 100 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: std::time::Duration, cond: impl FnMut() -> bool) {
    wait_until_every(what, timeout, std::time::Duration::from_millis(100), cond).await
}

/// Poll `cond` every `every` until it holds; panics naming `what` after `timeout`.
pub async fn wait_until_every(
    what: &str,
    timeout: std::time::Duration,
    every: std::time::Duration,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(every).await;
    }
}

/// Pods `pod-0`… of `default`, bound to `node` in `api`, each running `containers` containers in
/// the fake runtime `cri`; their uids, in order.
pub async fn bind_pods(
    cri: &fake_cri::FakeServer,
    api: &apiserver::Apiserver,
    node: &str,
    pods: usize,
    containers: usize,
) -> Vec<String> {
    let mut uids = Vec::new();
    for i in 0..pods {
        let name = format!("pod-{i}");
        let uid = api.create_bound_pod(&name, node, containers, "Never").await;
        cri.fake.add_running_pod(&uid, &name, containers);
        uids.push(uid);
    }
    uids
}

/// Whether `events` hold one of `kind` for the container `id`.
pub fn has_event(events: &[PodLifecycleEvent], kind: PodLifecycleEventType, id: &str) -> bool {
    events
        .iter()
        .any(|e| e.kind == kind && e.container_id.as_deref() == Some(id))
}
