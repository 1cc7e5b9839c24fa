//! Test support shared by the end-to-end tests: the fake CRI server and the real containerd fixture.
#![allow(dead_code)]

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
