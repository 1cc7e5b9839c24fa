//! The demo's workload (deploy/demo.sh), and plegd's second half. Pods are driven through CRI as a
//! kubelet would drive them: one that keeps running (and a sidecar that is stopped), one that
//! completes, one whose container fails and is restarted twice, one that is OOM-killed; then every
//! pod is deleted. Each pod also exists in the project's test apiserver (started here, on loopback),
//! bound to node `demo-node`, and `plegd run --status-mode full` writes their status there: this
//! program prints each pod's status whenever it changes, and each pod plegd removes once it has
//! finished. What it does and what it sees go to stderr (`workload:` and `status:` lines), so that
//! the lifecycle events of `plegd watch` on stdout can be read next to them.
//!
//!     cargo run --release -p plegd-demo --bin workload -- CRI_SOCKET PLEGD_BINARY

#[allow(dead_code)]
#[path = "../support/fake_apiserver.rs"]
mod apiserver;
#[allow(dead_code)]
#[path = "../support/containerd.rs"]
mod containerd;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver::TestApiserver;
use containerd::{Containerd, TestPod, attempt};
use serde_json::{Value, json};

const NODE: &str = "demo-node";

/// Dim text for the workload's own lines, only for a person at a terminal (NO_COLOR honoured).
fn dim(text: &str) -> String {
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    if colour {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

fn say(what: &str) {
    eprintln!("{}", dim(&format!("  workload: {what}")));
}

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// One line for a pod's status: phase, each container's state and restarts, readiness.
fn summary(status: &Value) -> String {
    let mut parts = vec![status["phase"].as_str().unwrap_or("-").to_owned()];
    for c in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = &c["state"];
        let what = if state["running"].is_object() {
            "running".to_owned()
        } else if let Some(t) = state["terminated"].as_object() {
            format!(
                "exited {} ({})",
                t.get("exitCode").and_then(Value::as_i64).unwrap_or(-1),
                t.get("reason").and_then(Value::as_str).unwrap_or("?")
            )
        } else if let Some(w) = state["waiting"].as_object() {
            format!("waiting ({})", w.get("reason").and_then(Value::as_str).unwrap_or("?"))
        } else {
            "-".to_owned()
        };
        let restarts = c["restartCount"].as_i64().unwrap_or(0);
        let restarts = if restarts > 0 {
            format!(", restarts {restarts}")
        } else {
            String::new()
        };
        parts.push(format!("{}: {what}{restarts}", c["name"].as_str().unwrap_or("?")));
    }
    let ready = status["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str());
    if let Some(ready) = ready {
        parts.push(format!("Ready={ready}"));
    }
    parts.join("  ")
}

/// The pods whose status is shown: (namespace, name) → last line printed.
type Shown = Arc<Mutex<BTreeMap<(String, String), Option<String>>>>;

/// Print a `status:` line whenever a shown pod's status changes, and once when it is gone.
async fn show_status(api: TestApiserver, shown: Shown) {
    loop {
        pause(100).await;
        let mut shown = shown.lock().unwrap_or_else(|e| e.into_inner());
        let mut gone = Vec::new();
        for ((namespace, name), last) in shown.iter_mut() {
            match api.pod(namespace, name) {
                Some(pod) => {
                    let line = summary(&pod["status"]);
                    if pod["status"].get("phase").is_some() && last.as_deref() != Some(line.as_str()) {
                        eprintln!("  status:   {namespace}/{name:<7} {line}");
                        *last = Some(line);
                    }
                }
                None => {
                    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
                    let by_plegd = api.requests().iter().any(|r| r.method == "DELETE" && r.path == path);
                    let how = if by_plegd {
                        "gone: plegd removed it once its containers had stopped and its final status was written"
                    } else {
                        "gone: it had already finished, so the apiserver removed it at once"
                    };
                    eprintln!("  status:   {namespace}/{name:<7} {how}");
                    gone.push((namespace.clone(), name.clone()));
                }
            }
        }
        for key in gone {
            shown.remove(&key);
        }
    }
}

/// The pod's object in the apiserver, bound to the demo node, and its status shown from now on.
fn bind(api: &TestApiserver, shown: &Shown, pod: &TestPod, containers: &[&str], restart_policy: &str) {
    api.create_pod(json!({
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "spec": {"nodeName": NODE, "restartPolicy": restart_policy, "hostNetwork": true,
                 "containers": containers.iter().map(|c| json!({"name": c, "image": containerd::IMAGE})).collect::<Vec<_>>()}
    }));
    shown
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert((pod.namespace.clone(), pod.name.clone()), None);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(plegd)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: workload CRI_SOCKET PLEGD_BINARY");
        std::process::exit(2);
    };
    let cd = Containerd::at(socket.into());
    let api = TestApiserver::start().await;
    let dir = std::env::temp_dir().join(format!("plegd-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let kubeconfig = api.kubeconfig(&dir);
    let log = dir.join("plegd-run.log").display().to_string();
    say(&format!(
        "plegd run --status-mode full --node-name {NODE}, against a test apiserver at {} (its log: {log})",
        api.url()
    ));
    let mut run = Command::new(plegd)
        .args([
            "run",
            "--status-mode",
            "full",
            "--node-name",
            NODE,
            "--api-socket",
            "off",
        ])
        .args(["--metrics-address", "off", "--cri-socket", socket])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("plegd run's log")))
        .spawn()
        .expect("start plegd run");
    let shown: Shown = Arc::default();
    let printer = tokio::spawn(show_status(api.clone(), shown.clone()));

    say("pod plegd-test/web: a container that keeps running");
    let web = cd.run_pod("web", false).await;
    bind(&api, &shown, &web, &["server", "sidecar"], "Always");
    cd.run_container(&web, "server", "trap 'exit 0' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;

    say("pod plegd-test/job: a container that completes after 2 s");
    let job = cd.run_pod("job", true).await;
    bind(&api, &shown, &job, &["batch"], "Never");
    cd.run_container(&job, "batch", "sleep 2; echo done").await;
    pause(1500).await;

    say("pod plegd-test/crashy: a container that fails (exit 1) and is restarted twice");
    let crashy = cd.run_pod("crashy", true).await;
    bind(&api, &shown, &crashy, &["worker"], "Always");
    let mut previous = None;
    for n in 0..3 {
        if n > 0 {
            say(&format!("  restarting worker (attempt {n})"));
        }
        let id = cd
            .create_container_from(&crashy, "worker", attempt(n, "sleep 1; exit 1"))
            .await;
        cd.start_container(&id).await;
        pause(2500).await;
        // The kubelet keeps the last dead instance for its lastState, and removes older ones.
        if let Some(old) = previous.replace(id) {
            cd.remove_container(&old).await;
        }
    }

    say("pod plegd-test/hog: a container over its 32 MiB memory limit (OOM-killed)");
    let hog = cd.run_pod("hog", true).await;
    bind(&api, &shown, &hog, &["hog"], "Never");
    let id = cd.create_container_from(&hog, "hog", containerd::memory_hog()).await;
    cd.start_container(&id).await;
    pause(2500).await;

    say("pod plegd-test/web: its sidecar starts, then is stopped (SIGTERM; it exits 143)");
    let sidecar = cd
        .run_container(&web, "sidecar", "trap 'exit 143' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;
    cd.stop_container(&sidecar, 5).await;
    pause(2000).await;

    say("deleting every pod: each is marked deleted in the apiserver and its containers are stopped and removed");
    for pod in [&web, &job, &crashy, &hog] {
        api.request_deletion(&pod.namespace, &pod.name, 30);
        cd.cleanup(pod).await;
    }
    for _ in 0..100 {
        if shown.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            break;
        }
        pause(100).await;
    }
    printer.abort();
    let _ = run.kill();
    let _ = run.wait();
    let left: Vec<String> = shown
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .map(|(namespace, name)| format!("{namespace}/{name}"))
        .collect();
    if left.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        // Kept so that what plegd did with them can be read.
        say(&format!(
            "still in the apiserver after 10 s: {}; plegd run's log is kept at {log}",
            left.join(", ")
        ));
    }
    say("done");
}
