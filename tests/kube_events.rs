//! Kubernetes Events (`--emit-events`) as the apiserver stores them: `plegd run` against the fake
//! CRI server and kube-apiserver 1.37 (support/apiserver.rs), as its service account with the
//! events component's RBAC. One Event per container exit: two containers of one pod that exit
//! together are two Events, each with its own note, never one Event with a series.

use plegd_test_support as support;

use std::time::Duration;

use serde_json::Value;
use support::apiserver::{Apiserver, Identity, Options, PLEGD_USER};
use support::fake_cri::FakeServer;
use support::process::RunningPlegd as Plegd;
use support::wait_for;

const NODE: &str = "node-ev";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_containers_exiting_together_are_two_events() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let uid = api.create_bound_pod("web", NODE, 2, "Never").await;
    cri.fake.add_running_pod(&uid, "web", 2);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd(NODE.into()));
    let mut command = support::process::plegd_run(env!("CARGO_BIN_EXE_plegd"), NODE, &cri.path, &kubeconfig);
    command.args(["--status-mode", "full", "--triggers", "none", "--emit-events"]);
    let plegd = Plegd::spawn(command, dir.path());
    wait_for("web Running in the apiserver", Duration::from_secs(60), || async {
        api.pod("default", "web")
            .await
            .is_some_and(|p| p["status"]["phase"] == "Running")
    })
    .await;

    cri.fake.exit_container(&format!("ctr-{uid}-0"), 1);
    cri.fake.exit_container(&format!("ctr-{uid}-1"), 2);
    let died = || async {
        api.events()
            .await
            .into_iter()
            .filter(|e| e["regarding"]["name"] == "web" && e["reason"] == "ContainerDied")
            .collect::<Vec<Value>>()
    };
    wait_for("two ContainerDied Events of web", Duration::from_secs(30), || async {
        died().await.len() >= 2
    })
    .await;
    let events = died().await;
    let mut notes: Vec<&str> = events.iter().map(|e| e["note"].as_str().unwrap_or_default()).collect();
    notes.sort_unstable();
    assert_eq!(notes.len(), 2, "{events:#?}");
    assert!(notes[0].starts_with("container c0 exited with code 1"), "{notes:?}");
    assert!(notes[1].starts_with("container c1 exited with code 2"), "{notes:?}");
    for event in &events {
        assert!(event["series"].is_null(), "never folded into a series: {event:#}");
        assert_eq!(event["reportingController"], "plegd");
        assert_eq!(event["reportingInstance"], NODE);
        assert_eq!(event["type"], "Warning");
    }
    wait_for("both counted as published", Duration::from_secs(10), || async {
        plegd.metric("plegd_kube_events_published_total") >= 2.0
    })
    .await;
    assert_eq!(plegd.metric("plegd_kube_events_failed_total"), 0.0, "{}", plegd.log());
}

/// Events under priority and fairness: plegd's requests have one seat and no queue, and each of its
/// status writes holds that seat for 300 ms, so Events sent as exits are written meet 429s with
/// `Retry-After`. Each is sent again once the Retry-After has passed, never sooner, and every
/// exit's Event is stored in the end; the waits are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_events_wait_their_retry_after_and_all_arrive() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start_with(Options {
        throttle_plegd: true,
        ..Options::default()
    })
    .await;
    let pods = 8;
    let mut uids = Vec::new();
    for i in 0..pods {
        let name = format!("job-{i}");
        let uid = api.create_bound_pod(&name, NODE, 1, "Never").await;
        cri.fake.add_running_pod(&uid, &name, 1);
        uids.push(uid);
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd(NODE.into()));
    let mut command = support::process::plegd_run(env!("CARGO_BIN_EXE_plegd"), NODE, &cri.path, &kubeconfig);
    command
        .args(support::process::FULL_MODE_FAST_RELIST)
        .arg("--emit-events");
    let plegd = Plegd::spawn(command, dir.path());
    wait_for(
        "every job Running in the apiserver",
        Duration::from_secs(90),
        || async {
            let mut running = 0;
            for i in 0..pods {
                if api
                    .pod("default", &format!("job-{i}"))
                    .await
                    .is_some_and(|p| p["status"]["phase"] == "Running")
                {
                    running += 1;
                }
            }
            running == pods
        },
    )
    .await;
    api.set_delay(Some(Duration::from_millis(300))).await;
    for (i, uid) in uids.iter().enumerate() {
        cri.fake.exit_container(&format!("ctr-{uid}-0"), 10 + i as i32);
    }
    let died = || async {
        api.events()
            .await
            .into_iter()
            .filter(|e| e["reason"] == "ContainerDied")
            .collect::<Vec<Value>>()
    };
    wait_for("every job's ContainerDied Event", Duration::from_secs(120), || async {
        died().await.len() >= pods
    })
    .await;
    let mut notes: Vec<String> = died()
        .await
        .iter()
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect();
    notes.sort_unstable();
    notes.dedup();
    assert_eq!(notes.len(), pods, "one Event per exit, none twice: {notes:#?}");

    let creates: Vec<_> = api
        .requests_by(PLEGD_USER)
        .await
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.contains("/events"))
        .collect();
    let refused: Vec<_> = creates.iter().filter(|r| r.status == 429).collect();
    assert!(
        !refused.is_empty(),
        "Events sent beside held status writes met the one seat taken: {creates:?}"
    );
    // Retry-After: 1 s. No Event create reaches the server within that second after a 429 was
    // answered to one (requests already on their way then aside: 200 ms of slack).
    for no in &refused {
        let early: Vec<_> = creates
            .iter()
            .filter(|r| {
                r.received > no.at + Duration::from_millis(200) && r.received < no.at + Duration::from_millis(900)
            })
            .collect();
        assert!(early.is_empty(), "sent within the Retry-After of {no:?}: {early:?}");
    }
    wait_for("the Events counted as published", Duration::from_secs(10), || async {
        plegd.metric("plegd_kube_events_published_total") >= pods as f64
    })
    .await;
    assert!(
        plegd.metric("plegd_kube_events_throttled_total") >= 1.0,
        "the waits counted\n{}",
        plegd.log()
    );
    assert_eq!(plegd.metric("plegd_kube_events_failed_total"), 0.0, "{}", plegd.log());
}
