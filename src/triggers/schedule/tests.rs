//! The schedules' bookkeeping and the planning step, fed plain values.

use super::*;

#[test]
fn recheck_schedules() {
    let pod = Target {
        pod: Some("u1".into()),
        container: None,
    };
    let ctr = Target {
        pod: Some("u1".into()),
        container: Some("c1".into()),
    };
    let ms = Duration::from_millis;
    // Pod relists: doubling from 2 ms to 512 ms, then over.
    let waits: Vec<_> = (0..10).map(|a| recheck_delay(&pod, a)).collect();
    assert_eq!(waits[0], Some(ms(2)));
    assert_eq!(waits[8], Some(ms(512)));
    assert_eq!(waits[9], None);
    // Container probes: every 2 ms for 60 probes, then 8, 16 … 512 ms, then over.
    assert_eq!(recheck_delay(&ctr, 59), Some(ms(2)));
    assert_eq!(recheck_delay(&ctr, 60), Some(ms(8)));
    assert_eq!(recheck_delay(&ctr, 66), Some(ms(512)));
    assert_eq!(recheck_delay(&ctr, 67), None);
    let total: Duration = (0..).map_while(|a| recheck_delay(&ctr, a)).sum();
    assert!(total > ms(1000) && total < ms(1300), "{total:?}");
    // A quiet target starts at the wait of 128 ms: three re-checks, for pods and containers.
    for target in [&pod, &ctr] {
        assert_eq!(first_attempt(target, false), 0);
        let first = first_attempt(target, true);
        let waits: Vec<_> = (first..).map_while(|a| recheck_delay(target, a)).collect();
        assert_eq!(waits, [ms(128), ms(256), ms(512)], "{target:?}");
    }
}

/// A container's start is checked while the runtime still lags: it waits for a re-check. Its
/// exit's event comes meanwhile and joins that schedule. The re-check finds the start (a
/// change): the schedule starts over, so the exit, a moment later in the runtime, is still
/// looked for rather than left to the periodic relist.
#[test]
fn a_change_found_after_a_joined_trigger_does_not_end_the_schedule() {
    let t0 = tokio::time::Instant::now();
    let target = Target {
        pod: Some("u1".into()),
        container: Some("c1".into()),
    };
    let mut r = Schedules::default();
    r.after_check(&target, false, 0, t0);
    assert!(r.waiting(&target));
    r.join(&target);
    let due = r.take_due(t0 + Duration::from_millis(2));
    assert_eq!(due, [(target.clone(), 1)]);
    r.after_check(&target, true, 1, t0 + Duration::from_millis(2));
    assert!(r.waiting(&target), "started over after the joined trigger");
    // Without a joined trigger, a change ends the schedule.
    r.take_due(t0 + Duration::from_secs(1));
    r.after_check(&target, true, 1, t0 + Duration::from_secs(1));
    assert!(!r.waiting(&target));
}

/// The second event of a container whose schedule is in its long waits (containerd's
/// `/tasks/delete`, when the CRI state follows): checked at once, with the fine probes again;
/// the events after it in the same schedule only join. A new schedule may be pulled again.
#[test]
fn a_trigger_pulls_a_waiting_check_forward_once_per_schedule() {
    let t0 = tokio::time::Instant::now();
    let target = Target {
        pod: Some("u1".into()),
        container: Some("c1".into()),
    };
    let mut r = Schedules::default();
    // Deep in the schedule: the next check is 512 ms away.
    r.after_check(&target, false, 66, t0);
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(512)));
    assert!(r.pull(&target), "the first trigger pulls the check forward");
    assert!(!r.waiting(&target), "checked now by the caller");
    // That check finds nothing yet: the fine probes again.
    r.after_check(&target, false, 0, t0);
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(2)));
    assert!(!r.pull(&target), "once per schedule");
    assert!(r.waiting(&target));
    // A change ends the schedule (and, joined, starts a new one, which may be pulled again).
    r.take_due(t0 + Duration::from_millis(2));
    r.after_check(&target, true, 1, t0 + Duration::from_millis(2));
    assert!(r.waiting(&target));
    assert!(r.pull(&target));
    // Nothing waiting: nothing to pull.
    let other = Target {
        pod: Some("u2".into()),
        container: None,
    };
    assert!(!r.pull(&other));
}

/// A target joined while it waited to be located is keyed anew once found: its mark does not
/// stay behind for good (one per new container id would grow without end).
#[test]
fn a_located_target_keeps_one_record() {
    let t0 = tokio::time::Instant::now();
    let mut r = Schedules::default();
    for i in 0..200 {
        let unlocated = Target {
            pod: None,
            container: Some(format!("c{i}")),
        };
        r.after_check(&unlocated, false, 0, t0);
        assert!(r.pull(&unlocated), "a settling event pulls it");
        r.after_check(&unlocated, false, 0, t0);
        let due = r.take_due(t0 + Duration::from_millis(2));
        assert_eq!(due.len(), 1);
        // Located: its record goes on under its new key, checked and finished there.
        let located = Target {
            pod: Some(format!("u{i}")),
            container: Some(format!("c{i}")),
        };
        r.located(&unlocated, &located, false);
        assert!(!r.unlocatable(&format!("c{i}"), t0));
        r.after_check(&located, true, 1, t0 + Duration::from_millis(2));
    }
    assert_eq!(r.records(), 0, "nothing kept of schedules that found their change");
    assert!(r.is_empty());
    // A trigger that joined a schedule before its target was located goes with it: the change
    // found under the new key starts the schedule over, to look for the joined trigger's change.
    let unlocated = Target {
        pod: None,
        container: Some("j".into()),
    };
    r.after_check(&unlocated, false, 0, t0);
    r.join(&unlocated);
    let located = Target {
        pod: Some("uj".into()),
        container: Some("j".into()),
    };
    r.take_due(t0 + Duration::from_millis(2));
    r.located(&unlocated, &located, false);
    r.after_check(&located, true, 1, t0);
    assert!(r.waiting(&located) && !r.waiting(&unlocated));
    assert_eq!(r.records(), 1);
}

#[test]
fn rechecks_follow_the_schedule_and_stop_at_a_change() {
    let t0 = tokio::time::Instant::now();
    let target = Target {
        pod: Some("u1".into()),
        container: None,
    };
    let mut r = Schedules::default();
    r.after_check(&target, false, 0, t0);
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(2)));
    assert!(r.take_due(t0).is_empty());
    assert_eq!(r.take_due(t0 + Duration::from_millis(2)), [(target.clone(), 1)]);
    // Unchanged again: the next wait doubles.
    r.after_check(&target, false, 1, t0);
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(4)));
    // A change ends it.
    r.after_check(&target, true, 2, t0);
    assert!(r.is_empty());
    // The schedule ends after its last step.
    r.after_check(&target, false, COARSE_MS.len(), t0);
    assert_eq!(r.len(), 0);
    assert!(!r.take_overflowed());
}

/// An id a whole locate schedule did not find is not looked for again for a while; a located
/// one, or one that found a change, is not remembered.
#[test]
fn ids_never_located_are_not_looked_for_again() {
    let t0 = tokio::time::Instant::now();
    let unknown = Target {
        pod: None,
        container: Some("gone".into()),
    };
    let mut r = Schedules::default();
    let last = (0..).take_while(|a| recheck_delay(&unknown, *a).is_some()).count();
    r.after_check(&unknown, false, last, t0);
    assert!(r.unlocatable("gone", t0 + Duration::from_secs(1)));
    assert!(!r.unlocatable("gone", t0 + UNLOCATABLE_FOR));
    assert!(!r.unlocatable("other", t0));
    let known = Target {
        pod: Some("u1".into()),
        container: Some("c1".into()),
    };
    r.after_check(&known, false, 10_000, t0);
    assert!(!r.unlocatable("c1", t0));
}

/// The re-checks waiting are bounded: past the bound none is added, and the dispatcher is
/// told to relist everything once instead.
#[test]
fn rechecks_are_bounded() {
    let t0 = tokio::time::Instant::now();
    let mut r = Schedules::default();
    for i in 0..MAX_RECHECKS + 10 {
        let target = Target {
            pod: Some(format!("u{i}")),
            container: None,
        };
        r.after_check(&target, false, 0, t0);
    }
    assert_eq!(r.len(), MAX_RECHECKS);
    assert!(r.take_overflowed());
    assert!(!r.take_overflowed(), "said once");
}

/// A slow target's late change does not move the second probe of containers.
#[test]
fn a_slow_change_leaves_the_second_probe_where_it_was() {
    let t0 = tokio::time::Instant::now();
    let sandbox = Target {
        pod: Some("u".into()),
        container: Some("s".into()),
    };
    let mut r = Schedules::default();
    let before = r.second.after();
    for _ in 0..50 {
        r.settle(&sandbox, t0, Some(PlegContainerState::Exited), true);
        r.after_check(&sandbox, false, 0, t0);
        let (_, attempt) = r.take_due(t0 + Duration::from_secs(1)).pop().expect("a re-check");
        assert_eq!(attempt, FINE_PROBES + 1, "the doubling waits");
        r.after_check(&sandbox, true, attempt, t0);
    }
    assert_eq!(r.second.after(), before);
    assert_eq!(r.records(), 0, "nothing kept once found");
}

/// A fresh trigger for `target` read as the records say `recorded` of it and the trigger announces
/// `announces`, named as `flags` say (any of `held`, `exact`, `settles`, `ahead`, `slow`).
fn fresh(target: &Target, recorded: PlegContainerState, announces: Option<PlegContainerState>, flags: &str) -> Fresh {
    let has = |flag| flags.split(' ').any(|f| f == flag);
    Fresh {
        target: target.clone(),
        recorded,
        announces,
        held_exit: has("held"),
        exact: has("exact"),
        settles: has("settles"),
        ahead: has("ahead"),
        slow: has("slow"),
    }
}

/// The planning step for one fresh trigger, table-driven: what the records say, what the trigger
/// announces and how it names its target, against whether the target waits for a re-check or was
/// quiet → the plan, and whether the target waits for a re-check after it.
#[test]
fn the_plan_of_a_fresh_trigger() {
    use FreshPlan::{Check, Later, Skip};
    use PlegContainerState::{Exited, NonExistent, Running, Unknown};
    let target = |pod: Option<&str>, container: Option<&str>| Target {
        pod: pod.map(Into::into),
        container: container.map(Into::into),
    };
    let (ctr, new_id, pod) = (
        target(Some("u1"), Some("c1")),
        target(None, Some("c9")),
        target(Some("u1"), None),
    );
    let (end, sparse, sparse_new) = (
        schedule_end(&ctr),
        first_attempt(&ctr, true),
        first_attempt(&new_id, true),
    );
    // (case, the trigger read, the target waits, was quiet) → (plan, waits after)
    #[rustfmt::skip]
    let cases = [
        ("plain: checked now", fresh(&ctr, Running, None, ""), false, false, Check(0), false),
        ("a pod: relisted now", fresh(&pod, Running, None, ""), false, false, Check(0), false),
        ("quiet: the sparse end", fresh(&ctr, Running, None, ""), false, true, Check(sparse), false),
        ("read already: nothing", fresh(&ctr, Exited, Some(Exited), "settles"), false, false, Skip, false),
        ("read, exit held: settled", fresh(&ctr, Exited, Some(Exited), "settles held"), false, false, Check(0), false),
        ("read while waiting: ends", fresh(&ctr, Running, Some(Running), "settles"), true, false, Skip, false),
        ("exact: once, at the end", fresh(&ctr, Running, Some(Exited), "exact"), true, false, Check(end), true),
        ("settling, waiting: pulled", fresh(&ctr, Unknown, Some(Running), "settles"), true, false, Check(0), false),
        ("plain while waiting: joins", fresh(&ctr, Running, None, ""), true, false, Skip, true),
        ("ahead, known: sparse later", fresh(&ctr, Unknown, None, "ahead"), false, false, Later, true),
        ("ahead, new id: located", fresh(&new_id, NonExistent, None, "ahead"), false, false, Check(sparse_new), false),
        ("settling, quiet: fine", fresh(&ctr, Unknown, Some(Running), "settles"), false, true, Check(0), false),
    ];
    let t0 = tokio::time::Instant::now();
    for (case, read, waits, quiet, plan, waits_after) in cases {
        let mut r = Schedules::default();
        let target = read.target.clone();
        if quiet {
            let last = schedule_end(&target);
            r.after_check(&target, false, last, t0);
            assert!(r.quiet(&target, t0), "{case}: set up quiet");
        }
        if waits {
            r.after_check(&target, false, 3, t0);
        }
        assert_eq!(r.plan(&read, t0), plan, "{case}");
        assert_eq!(r.waiting(&target), waits_after, "{case}: waits after");
    }
}

/// A settling trigger pulls a waiting schedule forward once; the next one only joins it.
#[test]
fn a_schedule_is_pulled_forward_once_by_the_plan() {
    let t0 = tokio::time::Instant::now();
    let ctr = Target {
        pod: Some("u1".into()),
        container: Some("c1".into()),
    };
    let settling = Fresh {
        target: ctr.clone(),
        recorded: PlegContainerState::Unknown,
        announces: Some(PlegContainerState::Running),
        held_exit: false,
        exact: false,
        settles: true,
        ahead: false,
        slow: false,
    };
    let mut r = Schedules::default();
    r.after_check(&ctr, false, 66, t0);
    assert_eq!(r.plan(&settling, t0), FreshPlan::Check(0));
    r.after_check(&ctr, false, 0, t0);
    assert_eq!(
        r.plan(&settling, t0),
        FreshPlan::Skip,
        "joins: pulled once per schedule"
    );
    assert!(r.waiting(&ctr));
}

/// A target located while the records already gave it a schedule of its own under the new key
/// (a trigger named the id once a relist had read it): the two schedules become one, the earlier
/// check kept, and the count of waiting targets stays right.
#[test]
fn a_located_target_merges_with_the_schedule_its_new_key_has() {
    let t0 = tokio::time::Instant::now();
    let mut r = Schedules::default();
    let unlocated = Target {
        pod: None,
        container: Some("c".into()),
    };
    let located = Target {
        pod: Some("p".into()),
        container: Some("c".into()),
    };
    r.after_check(&unlocated, false, first_attempt(&unlocated, true), t0);
    r.after_check(&located, false, 0, t0);
    assert_eq!(r.len(), 2);
    r.located(&unlocated, &located, false);
    assert_eq!(r.len(), 1, "one schedule");
    assert_eq!(r.next_due(), Some(t0 + Duration::from_millis(2)), "the earlier check");
    assert_eq!(r.take_due(t0 + Duration::from_millis(2)), [(located.clone(), 1)]);
    r.after_check(&located, true, 1, t0);
    assert!(r.is_empty());
    assert_eq!(r.records(), 0);
}
