//! plegd as a container in a real containerd, mounted as deploy/base/daemonset.yaml mounts it: the
//! runtime's socket *directory* (hostPath → /run/containerd, read-only) and a read-only root file
//! system, as the image's non-root user 65532 in group 0 (the socket is root:root 0660). Its image
//! is deploy/image/image.sh's, assembled offline from the binary and imported.
//! It must report a neighbouring pod's container dying, with its exit code; then containerd is
//! killed and started again (a new socket in the directory) and plegd, never restarted, must report
//! the next death within seconds.
//!
//! The instance is this test's own (it is killed), of the version the suite runs. The binary is
//! $PLEGD_BINARY when set (e.g. a release build), else the one this test build made.

use plegd_test_support as support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use serde_json::Value;
use support::containerd::{Containerd, PrivateContainerd, TestPod, containerd};

const IMAGE: &str = "plegd.test/plegd:dev";

/// plegd's JSON events so far, from its CRI log ("<time> stdout F <line>").
fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("stdout"))
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

/// Wait for plegd's ContainerDied of `ctr` and check it against what the neighbour did.
async fn died(log: &Path, neighbour: &TestPod, ctr: &str, exit_code: i32, within: Duration) -> Duration {
    let started = Instant::now();
    let event = loop {
        if let Some(e) = events(log)
            .into_iter()
            .find(|e| e["type"] == "ContainerDied" && e["container_id"] == ctr)
        {
            break e;
        }
        assert!(
            started.elapsed() < within,
            "plegd in a container reported no death of {ctr} in {within:?}; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(event["pod_uid"], neighbour.uid.as_str());
    assert_eq!(event["exit_code"], exit_code);
    assert_eq!(event["reason"], "Error");
    started.elapsed()
}

async fn container_state(cd: &Containerd, id: &str) -> (i32, i64) {
    let status = cd
        .client
        .clone()
        .container_status(cri::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("a status");
    (status.state, status.started_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plegd_runs_as_a_pod_and_sees_containerd_restart() {
    let Some(shared) = containerd().await else { return };
    if !support::containerd::containerd_only("an instance of its own killed and restarted under plegd") {
        return;
    }
    let (major, minor) = shared.version().await;
    let Some(instance) = PrivateContainerd::start("inctr", &format!("{major}.{minor}"), 237).await else {
        return;
    };
    let cd = &instance.handle;
    let binary = std::env::var("PLEGD_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_plegd").to_owned());
    instance.import_plegd_image(&binary, IMAGE).await;

    let socket_dir = cd.socket.parent().expect("the socket's directory");
    let logs = tempfile::tempdir().unwrap();
    let pod = cd.run_pod_with("plegd", true, Some(logs.path())).await;
    let config = cri::ContainerConfig {
        image: Some(support::containerd::image_spec(IMAGE)),
        command: vec!["/usr/local/bin/plegd".into()],
        args: [
            "watch",
            "--cri-socket",
            "/run/containerd/containerd.sock",
            "--triggers",
            "auto",
            "--output",
            "json",
        ]
        .map(String::from)
        .to_vec(),
        mounts: vec![cri::Mount {
            container_path: "/run/containerd".into(),
            host_path: socket_dir.display().to_string(),
            readonly: true,
            ..Default::default()
        }],
        log_path: "plegd.log".into(),
        linux: Some(cri::LinuxContainerConfig {
            // As deploy/base/daemonset.yaml's pod: the image's user, and group 0 for the socket.
            security_context: Some(cri::LinuxContainerSecurityContext {
                readonly_rootfs: true,
                run_as_user: Some(cri::Int64Value { value: 65532 }),
                run_as_group: Some(cri::Int64Value { value: 65532 }),
                supplemental_groups: vec![0],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let plegd = cd.create_container_from(&pod, "plegd", config).await;
    cd.start_container(&plegd).await;
    let (_, plegd_started) = container_state(cd, &plegd).await;
    let log = logs.path().join("plegd.log");

    let neighbour = cd.run_pod("neighbour", true).await;
    let ctr = cd.run_container(&neighbour, "app", "sleep 2; exit 4").await;
    died(&log, &neighbour, &ctr, 4, Duration::from_secs(30)).await;
    // It saw that through the socket as the non-root user, with group 0 beside its own.
    let status = std::fs::read_to_string(format!("/proc/{}/status", cd.container_pid(&plegd).await)).unwrap();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_default();
        line[name.len()..]
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(field("Uid:"), ["65532"; 4], "{status}");
    assert_eq!(field("Gid:"), ["65532"; 4], "{status}");
    assert!(field("Groups:").contains(&"0".to_owned()), "{status}");
    assert_eq!(field("CapEff:"), ["0000000000000000"], "{status}");

    // containerd dies and comes back: a new socket in the mounted directory.
    instance.script("kill").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    instance.script("start").await;
    let restarted = Instant::now();
    let ctr = cd.run_container(&neighbour, "again", "sleep 1; exit 5").await;
    let after = died(&log, &neighbour, &ctr, 5, Duration::from_secs(20)).await;
    eprintln!(
        "containerd {major}.{minor} restarted: plegd in its container reported the next death {:.1} s after the restart ({:.1} s after the container was started; it exits after 1 s)",
        restarted.elapsed().as_secs_f64(),
        after.as_secs_f64()
    );

    let (state, started) = container_state(cd, &plegd).await;
    assert_eq!(
        state,
        cri::ContainerState::ContainerRunning as i32,
        "plegd's container still runs"
    );
    assert_eq!(started, plegd_started, "plegd was never restarted");
    cd.cleanup(&neighbour).await;
    cd.cleanup(&pod).await;
}
