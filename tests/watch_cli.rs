//! `plegd watch` as a user runs it: the real binary, its stdout and stderr, its exit code.

use plegd_test_support as support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::containerd::containerd;
use support::fake_cri::FakeServer;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// A running `plegd watch` whose stdout lines arrive on a channel.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watch {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(PLEGD)
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn plegd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// JSON events until `done` holds for one of them.
    fn json_until(&self, timeout: Duration, done: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            let value: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
            let stop = done(&value);
            seen.push(value);
            if stop {
                return seen;
            }
        }
        panic!("timed out; saw {seen:#?}");
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn missing_socket_is_one_clear_line_and_exit_1() {
    let out = Command::new(PLEGD)
        .args(["watch", "--cri-socket", "/nonexistent/cri.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("plegd: error: CRI socket /nonexistent/cri.sock does not exist"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_flag_names_the_flag() {
    let out = Command::new(PLEGD)
        .args(["watch", "--relist-period", "often"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().next().unwrap_or("").contains("--relist-period"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_running_while_the_runtime_is_away() {
    let mut server = FakeServer::start().await;
    server.fake.add_running_pod("u1", "web", 1);
    let path = server.path.to_str().unwrap().to_owned();
    let watch = Watch::start(&["--cri-socket", &path, "--relist-period", "100ms", "--output", "json"]);
    let seen =
        tokio::task::block_in_place(|| watch.json_until(Duration::from_secs(10), |e| e["container_id"] == "sb-u1"));
    assert_eq!(seen[0]["type"], "ContainerStarted");

    server.stop().await;
    server.fake.exit_container("ctr-u1-0", 4);
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart().await;
    let seen =
        tokio::task::block_in_place(|| watch.json_until(Duration::from_secs(15), |e| e["type"] == "ContainerDied"));
    let died = seen.last().unwrap();
    assert_eq!(died["container_id"], "ctr-u1-0");
    assert_eq!(died["exit_code"], 4);
    assert_eq!(died["reason"], "Error");
    assert_eq!(died["namespace"], "default");
    assert_eq!(died["pod"], "web");
    assert_eq!(died["container"], "c0");
    assert!(died["timestamp"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_events_from_real_containerd() {
    let Some(cd) = containerd().await else { return };
    let socket = cd.socket.to_str().unwrap().to_owned();
    let watch = Watch::start(&["--cri-socket", &socket, "--relist-period", "200ms", "--output", "json"]);
    let pod = cd.run_pod("watched", true).await;
    // Runs until stopped, and then fails: seen running however slowly the watch starts.
    let ctr = cd
        .run_container(&pod, "app", "trap 'exit 3' TERM; sleep 1000 & wait")
        .await;
    let uid = pod.uid.clone();
    let mut seen = tokio::task::block_in_place(|| {
        watch.json_until(Duration::from_secs(20), |e| {
            e["pod_uid"] == uid.as_str() && e["type"] == "ContainerStarted" && e["container_id"] == ctr.as_str()
        })
    });
    cd.stop_container(&ctr, 10).await;
    seen.extend(tokio::task::block_in_place(|| {
        watch.json_until(Duration::from_secs(20), |e| {
            e["pod_uid"] == uid.as_str() && e["type"] == "ContainerDied" && e["container_id"] == ctr.as_str()
        })
    }));
    let mine: Vec<_> = seen.iter().filter(|e| e["pod_uid"] == uid.as_str()).collect();
    let died = mine.last().unwrap();
    assert_eq!(died["exit_code"], 3);
    assert_eq!(died["reason"], "Error");
    assert_eq!(died["pod"], "watched");
    assert_eq!(died["container"], "app");
    assert!(
        mine.iter()
            .any(|e| e["type"] == "ContainerStarted" && e["container_id"] == ctr.as_str()),
        "{mine:#?}"
    );
    assert!(
        mine.iter()
            .any(|e| e["type"] == "ContainerStarted" && e["sandbox"] == true),
        "{mine:#?}"
    );
    cd.cleanup(&pod).await;
}
