//! A short pod workload driven through CRI, for the demo (deploy/demo.sh): a pod that keeps
//! running, one whose container crashes and is restarted, one that completes, one that is
//! OOM-killed, one that is stopped, then everything is removed. It prints what it does on stderr, so that plegd's events on stdout
//! can be read next to it.
//!
//!     cargo run --example workload -- /path/to/containerd.sock

#[allow(dead_code)]
#[path = "../support/containerd.rs"]
mod containerd;

use std::time::Duration;

fn say(what: &str) {
    eprintln!("\x1b[2m  workload: {what}\x1b[0m");
}

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(socket) = std::env::args().nth(1) else {
        eprintln!("usage: workload CRI_SOCKET");
        std::process::exit(2);
    };
    let cd = containerd::Containerd::at(socket.into());

    say("pod plegd-test/web: a container that keeps running");
    let web = cd.run_pod("web", false).await;
    cd.run_container(&web, "nginx-ish", "trap 'exit 0' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;

    say("pod plegd-test/job: a container that completes after 2 s");
    let job = cd.run_pod("job", true).await;
    cd.run_container(&job, "batch", "sleep 2; echo done").await;
    pause(1500).await;

    say("pod plegd-test/crashy: a container that fails (exit 1) and is restarted twice");
    let crashy = cd.run_pod("crashy", true).await;
    for attempt in 0..3 {
        let id = cd.run_container(&crashy, "worker", "sleep 1; exit 1").await;
        pause(2500).await;
        if attempt < 2 {
            say("  restarting worker");
            cd.remove_container(&id).await;
        }
    }

    say("pod plegd-test/hog: a container over its 32 MiB memory limit (OOM-killed)");
    let hog = cd.run_pod("hog", true).await;
    let id = cd.create_container_from(&hog, "hog", containerd::memory_hog()).await;
    cd.start_container(&id).await;
    pause(2500).await;

    say("pod plegd-test/web: stopping its container (SIGTERM)");
    let stopper = cd
        .run_container(&web, "sidecar", "trap 'exit 143' TERM; sleep 3600 & wait")
        .await;
    pause(1500).await;
    cd.stop_container(&stopper, 5).await;
    pause(2000).await;

    say("removing every pod");
    for pod in [&web, &job, &crashy, &hog] {
        cd.cleanup(pod).await;
    }
    pause(2000).await;
    say("done");
}
