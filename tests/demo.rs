//! deploy/demo.sh, run as a user runs it (non-interactively, JSON events), on a containerd instance
//! of its own of the version the suite runs: what its narration says happened must be what plegd
//! reported — the lifecycle events of `plegd watch` on stdout, and the pod status `plegd run`
//! wrote to kube-apiserver as `kubectl get pods --watch` showed it (`kubectl:` lines on stderr),
//! then plegd as the DaemonSet beside the kubelet (`daemonset:` lines), and a backend crash behind a
//! gated and an ungated Service (`traffic:` lines).

use plegd_test_support as support;

use std::process::Command;

use serde_json::Value;
use support::containerd::containerd;

fn events(stdout: &str) -> Vec<Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn died<'a>(events: &'a [Value], pod: &str, container: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "ContainerDied" && e["pod"] == pod && e["container"] == container)
        .collect()
}

/// What `kubectl get pods --watch --output-watch-events` printed of one pod, in order: each row's
/// EVENT, READY, STATUS and RESTARTS columns.
fn kubectl<'a>(stderr: &'a str, pod: &str) -> Vec<[&'a str; 4]> {
    stderr
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("kubectl:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|columns| columns.len() >= 5 && columns[1] == pod)
        .map(|c| [c[0], c[2], c[3], c[4]])
        .collect()
}

fn shown(stderr: &str, pod: &str, row: impl Fn(&[&str; 4]) -> bool) -> bool {
    kubectl(stderr, pod).iter().any(row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_shows_what_happened() {
    let Some(shared) = containerd().await else { return };
    let (major, minor) = shared.version().await;
    // As from a user's shell: none of the variables cargo and the test runner set for tests (which
    // would make the demo's own `cargo build` rebuild what tests/run.sh built).
    let mut command = Command::new("bash");
    command.env_clear();
    // CARGO_TARGET_DIR is the shell's (tests/run.sh's shared build directory in CI), not cargo's:
    // kept, the demo's debug build finds what the test build made instead of building anew.
    for keep in [
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "CARGO_TARGET_DIR",
    ] {
        if let Some(value) = std::env::var_os(keep) {
            command.env(keep, value);
        }
    }
    let out = command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/demo.sh"))
        .env("OUTPUT", "json")
        .env("PLEGD_CONTAINERD_VERSION", format!("{major}.{minor}"))
        .env("PLEGD_CONTAINERD_DIR", "/var/lib/plegd-test/demo")
        .env("PLEGD_CNI_BRIDGE", "plgdemo")
        .env("PLEGD_CNI_SUBNET", "10.238.0.0/24")
        .env("NO_COLOR", "1")
        .output()
        .expect("run deploy/demo.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo.sh failed:\n{stderr}");
    let events = events(&stdout);
    let context = format!("events:\n{stdout}\nnarration and status:\n{stderr}");

    // "pod web: a container that keeps running"
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "ContainerStarted" && e["pod"] == "web" && e["container"] == "server"),
        "{context}"
    );
    assert!(
        shown(&stderr, "web", |[_, _, status, _]| *status == "Running"),
        "{context}"
    );

    // "pod job: a container that completes"
    let job = died(&events, "job", "batch");
    assert!(
        job.len() == 1 && job[0]["exit_code"] == 0 && job[0]["reason"] == "Completed",
        "{context}"
    );
    assert!(
        shown(&stderr, "job", |[_, _, status, _]| *status == "Completed"),
        "{context}"
    );

    // "pod crashy: a container that fails (exit 1) and is restarted twice"
    let crashy = died(&events, "crashy", "worker");
    assert!(
        crashy.len() == 3 && crashy.iter().all(|e| e["exit_code"] == 1),
        "{context}"
    );
    for restarts in ["1", "2"] {
        assert!(
            shown(&stderr, "crashy", |[_, _, status, count]| *status == "Error"
                && *count == restarts),
            "{context}"
        );
    }

    // "pod hog: ... OOM-killed"
    let hog = died(&events, "hog", "hog");
    assert!(
        hog.len() == 1 && hog[0]["reason"] == "OOMKilled" && hog[0]["exit_code"] == 137,
        "{context}"
    );
    assert!(
        shown(&stderr, "hog", |[_, _, status, _]| *status == "OOMKilled"),
        "{context}"
    );

    // "its sidecar starts, then is stopped (SIGTERM; it exits 143)"
    let sidecar = died(&events, "web", "sidecar");
    assert!(sidecar.len() == 1 && sidecar[0]["exit_code"] == 143, "{context}");
    // One container of two running, the other exited with an error.
    assert!(
        shown(&stderr, "web", |[_, ready, status, _]| *ready == "1/2"
            && *status == "Error"),
        "{context}"
    );

    // "deleting every pod": the running ones are finished and removed by plegd (full mode), the
    // finished ones by the apiserver; kubectl sees each go; every container and sandbox is
    // reported removed.
    for pod in ["web", "crashy"] {
        assert!(
            stderr.contains(&format!("workload:   {pod}: marked deleted; plegd removes it")),
            "{pod}: {context}"
        );
    }
    for pod in ["job", "hog"] {
        assert!(
            stderr.contains(&format!("workload:   {pod}: removed by the apiserver at once")),
            "{pod}: {context}"
        );
    }
    assert!(stderr.contains("every pod is gone from the apiserver"), "{context}");
    for pod in ["web", "job", "crashy", "hog"] {
        assert!(
            kubectl(&stderr, pod)
                .last()
                .is_some_and(|[event, ..]| *event == "DELETED"),
            "{pod}: {context}"
        );
    }
    for pod in ["web", "job", "crashy", "hog"] {
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "ContainerRemoved" && e["pod"] == pod && e["sandbox"] == true),
            "{pod}'s sandbox removed: {context}"
        );
    }
    // Part two: plegd as the DaemonSet beside the kubelet, its condition on the kubelet's pod.
    assert!(
        stderr.contains(
            "  daemonset:  plegd.io/ContainersRunning=False ContainerDied container failer exited with code 3"
        ),
        "{context}"
    );
    assert!(
        stderr.contains("  daemonset:  phase=Failed (the kubelet's)"),
        "{context}"
    );
    // Part three: one backend crash behind a gated and an ungated Service, requests counted (which
    // left first is tests/readiness_gate.rs' to show: the kubelet's relist may by chance come first).
    for service in ["gated", "ungated"] {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("  traffic:  {service} Service: ")))
            .unwrap_or_else(|| panic!("no traffic line for the {service} Service: {context}"));
        assert!(
            line.contains(" requests failed, the last ") && line.ends_with(" ms after the kill"),
            "{line}"
        );
    }
    // Nothing is coloured when NO_COLOR is set.
    assert!(!stderr.contains('\x1b'), "{context}");
}
