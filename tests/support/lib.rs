//! What plegd's end-to-end tests and benches share, compiled once: the fake CRI server
//! ([`fake_cri`]), the real containerd ([`containerd`]) and kube-apiserver ([`apiserver`]) fixtures,
//! the one-node Kubernetes cluster ([`cluster`]), plegd run in-process ([`daemon`]), and the helpers
//! every test uses (waiting, metrics, processes).

/// The repository, two levels above this crate.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

pub mod apiserver;
pub mod cluster;
pub mod containerd;
pub mod daemon;
pub mod fake_cri;
pub mod history;
pub mod hung_volume;
pub mod manifests;
pub mod process;
pub mod proxy;
pub mod request_info;

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

/// Poll `cond` every 100 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: std::time::Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
