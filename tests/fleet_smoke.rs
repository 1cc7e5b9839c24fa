//! A small fleet (tests/support/fleet.rs: 4 nodes of 10 pods, each its own plegd and fake runtime,
//! one test apiserver), so that the fleet bench (`cargo bench --bench apiserver_load`) cannot rot,
//! and what it shows at any size, checked: an idle fleet makes no request; each plegd holds one
//! connection and one watch; a change costs at most one PATCH and every change lands; after a kube-apiserver restart every node
//! watches again with no LIST, writes every exit made while the server was down, and PATCHes no pod
//! that did not change.

use plegd_test_support as support;

use std::time::Duration;

use support::fleet::{Fault, Fleet, PlegdSetup, Rates};

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_idles_writes_each_change_at_most_once_and_lives_through_an_apiserver_restart() {
    let setup = PlegdSetup {
        binary: PLEGD.into(),
        args: Vec::new(),
        beside_kubelet: false,
    };
    let mut fleet = Fleet::build(4, 10, setup).await;
    fleet.start_plegds(Duration::from_secs(120)).await;

    // Idle, past the first resync of every pod (10 s after its first write).
    let mut tries = 0;
    let idle = loop {
        let idle = fleet.measure("idle", 3, 0.0).await;
        tries += 1;
        if idle.requests.iter().all(|r| r.method != "PATCH") || tries == 10 {
            break idle;
        }
    };
    assert!(
        idle.requests.is_empty(),
        "an idle fleet asks nothing: {:?}",
        idle.requests
    );
    assert_eq!(idle.connections, 4, "one connection per plegd");
    assert!(idle.pod_watches >= 4.0, "a watch per plegd: {}", idle.pod_watches);

    let churn = fleet.measure("churn", 3, 1.0).await;
    assert!(churn.changes_made >= 12, "{}", churn.changes_made);
    // An exit and the restart after it can fall into one relist: one write for both.
    assert!(
        churn.patches_landed as u64 <= churn.changes_made && churn.patches_landed as u64 * 2 >= churn.changes_made,
        "at most one status PATCH per change: {} for {}",
        churn.patches_landed,
        churn.changes_made
    );
    let wrong = fleet.settled(Duration::from_secs(60)).await;
    assert!(wrong.is_empty(), "every change landed; not: {wrong:?}");

    let storm = fleet
        .storm(
            Fault::ApiserverRestart,
            Duration::from_secs(120),
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(storm.exits, 4, "an exit on each node while the server was down");
    assert_eq!(storm.exits_landed, 4, "each written once it was back");
    assert_eq!(storm.needless_patches, 0, "no pod that did not change is written");
    assert!(
        storm.synced_after < Duration::from_secs(120),
        "synced: {:?}",
        storm.synced_after
    );
    let lists = storm
        .after
        .iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch="))
        .count();
    assert_eq!(lists, 0, "no LIST after the restart: {:?}", storm.after);
    let rates = Rates::of(&storm.after, storm.window.as_secs_f64());
    assert!(rates.watch > 0.0, "every node watched again");
}
