//! What a tenant's pods cost plegd's memory: pods bound to plegd's node (anyone who may create pods
//! can set `spec.nodeName`), each as large as the apiserver takes — about 250 KiB of annotations
//! (the apiserver's limit for all of a pod's annotations), ~130 KiB of labels and ~700 KiB of
//! environment in its container, ~1.1 MiB a pod — created before plegd starts (so its informer's
//! first list carries them all), then plegd `run` in full mode against the fake CRI server (in this
//! process) running them and kube-apiserver 1.37 (support/apiserver.rs). Reports plegd's peak
//! resident set (VmHWM, the start's list and every status write's answer included) and its resident
//! set once every pod is Running in the apiserver (median and max of the following seconds), against
//! the DaemonSet's memory limit of 128 MiB.
//!
//!     cargo bench --profile release-without-lto --bench tenant_metadata -- --binary target/release/plegd
//!     cargo bench --profile release-without-lto --bench tenant_metadata -- --pods 120 --seconds 20 --binary A --binary B
//!
//! Without `--binary`, the plegd built with the bench. Several `--binary` are measured in turn.

use plegd_test_support::apiserver;
mod args;
use plegd_test_support::fake_cri;
use plegd_test_support::process;

use std::time::Duration;

use apiserver::{Apiserver, Identity};
use args::arg;
use process::{rss_mib, status_field};
use serde_json::json;

/// One pod as large as a tenant can make it (see the module documentation).
fn heavy_pod(name: &str, node: &str) -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = (0..25)
        .map(|i| (format!("example.com/a{i}"), json!("a".repeat(10 * 1024 - 32))))
        .collect();
    let labels: serde_json::Map<String, serde_json::Value> = (0..1600)
        .map(|i| (format!("example.com/l{i:04}"), json!(format!("{i:0>63}"))))
        .collect();
    let env: Vec<serde_json::Value> = (0..11)
        .map(|i| json!({"name": format!("E{i}"), "value": "e".repeat(64 * 1024)}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations},
        "spec": {"nodeName": node, "restartPolicy": "Always",
            "containers": [{"name": "c0", "image": "fake.test/busybox:1", "env": env}]}})
}

/// plegd's (peak, median, max) resident set in MiB with `pods` heavy pods.
async fn measure(binary: &str, pods: usize, seconds: u64) -> (f64, f64, f64) {
    let server = fake_cri::FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..pods {
        let name = format!("pod-{i}");
        let uid = apiserver::uid(&api.create_pod(heavy_pod(&name, "tenant")).await);
        server.fake.add_running_pod(&uid, &name, 1);
    }
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("tenant".into()));
    let mut child = process::KillOnDrop(
        process::plegd_run(binary, "tenant", &server.path, &kubeconfig)
            .args(["--status-mode", "full", "--triggers", "none", "--relist-period", "1s"])
            .args(["--metrics-address", "off"])
            .spawn()
            .expect("spawn plegd"),
    );
    let pid = child.id();
    api.wait_all_running(pods, Duration::from_secs(300)).await;
    let mut rss = Vec::new();
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss.push(rss_mib(pid));
    }
    let peak = status_field(pid, "VmHWM:") / 1024.0;
    assert!(child.try_wait().unwrap().is_none(), "plegd exited");
    rss.sort_by(f64::total_cmp);
    (peak, rss[rss.len() / 2], rss[rss.len() - 1])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pods = arg("--pods").unwrap_or(120);
    let seconds = arg("--seconds").unwrap_or(20);
    let argv: Vec<String> = std::env::args().collect();
    let mut binaries: Vec<String> = argv
        .windows(2)
        .filter(|w| w[0] == "--binary")
        .map(|w| w[1].clone())
        .collect();
    if binaries.is_empty() {
        binaries.push(env!("CARGO_BIN_EXE_plegd").to_owned());
    }
    println!("\n### plegd's memory with {pods} tenant pods of ~1.1 MiB bound to its node (full mode)\n");
    println!("| binary | peak RSS MiB (VmHWM) | RSS once settled, median MiB | max MiB |\n|---|---|---|---|");
    for binary in &binaries {
        let (peak, median, max) = measure(binary, pods, seconds).await;
        println!("| {binary} | {peak:.1} | {median:.1} | {max:.1} |");
    }
}
