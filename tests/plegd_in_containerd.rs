//! plegd as a container in a real containerd: its image is built offline from the binary (and the
//! libraries it loads), imported, and run through CRI as a pod with the runtime's socket mounted the
//! way the DaemonSet mounts it (hostPath → /run/containerd/containerd.sock) and a read-only root file
//! system. It must report a neighbouring pod's container dying, with its exit code.
//!
//! The binary is $PLEGD_RELEASE_BINARY when set (tests/run.sh builds the release binary), else
//! the one this test build made.

mod support;

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use serde_json::Value;
use support::containerd::containerd;

const IMAGE: &str = "plegd.test/plegd:dev";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plegd_runs_as_a_pod_and_reports_its_neighbours() {
    let Some(cd) = containerd().await else { return };
    let binary = std::env::var("PLEGD_RELEASE_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_plegd").to_owned());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/containerd/containerd.sh");
    let out = tokio::process::Command::new("bash")
        .args([script, "import-binary", &binary, IMAGE])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "import-binary: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let logs = tempfile::tempdir().unwrap();
    let pod = cd.run_pod_with("plegd", true, Some(logs.path())).await;
    let config = cri::ContainerConfig {
        image: Some(cri::ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["/usr/local/bin/plegd".into()],
        args: [
            "watch",
            "--cri-socket",
            "/run/containerd/containerd.sock",
            "--output",
            "json",
            "--relist-period",
            "500ms",
        ]
        .map(String::from)
        .to_vec(),
        mounts: vec![cri::Mount {
            container_path: "/run/containerd/containerd.sock".into(),
            host_path: cd.socket.display().to_string(),
            ..Default::default()
        }],
        log_path: "plegd.log".into(),
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                readonly_rootfs: true,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let plegd = cd.create_container_from(&pod, "plegd", config).await;
    cd.start_container(&plegd).await;

    let neighbour = cd.run_pod("neighbour", true).await;
    let ctr = cd.run_container(&neighbour, "app", "sleep 2; exit 4").await;

    // CRI log lines: "<time> stdout F <line>".
    let log = logs.path().join("plegd.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    let died = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| {
                l.splitn(4, ' ')
                    .nth(3)
                    .filter(|_| l.split(' ').nth(1) == Some("stdout"))
            })
            .filter_map(|json| serde_json::from_str::<Value>(json).ok())
            .find(|e| e["type"] == "ContainerDied" && e["container_id"] == ctr.as_str());
        if let Some(event) = found {
            break event;
        }
        assert!(
            Instant::now() < deadline,
            "plegd in a container reported nothing for its neighbour; its log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(died["pod_uid"], neighbour.uid.as_str());
    assert_eq!(died["exit_code"], 4);
    assert_eq!(died["reason"], "Error");
    assert_eq!(died["pod"], "neighbour");
    cd.cleanup(&neighbour).await;
    cd.cleanup(&pod).await;
}
