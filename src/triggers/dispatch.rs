//! The trigger dispatcher: the I/O loop around the schedules (`schedule.rs`). Triggers are gathered
//! and coalesced ([`Pending`]), exits shown at once, each fresh target read from the records and
//! planned by [`Schedules::plan`], and the checks run against the runtime (probe, locate, relist of
//! a pod, or one complete relist for many), what each found fed back to its target's schedule.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use tracing::debug;

use crate::kubecontainer::PodUid;
use crate::metrics::Metrics;
use crate::pleg::{ExitTaken, GenericPleg, PlegContainerState};
use crate::runtime::Runtime;
use crate::util::clock::Clock;

use super::schedule::{BATCH_PROBES, Fresh, FreshPlan, Schedules, Target, check_order};
use super::{Trigger, TriggerReceiver};

/// Triggers gathered for one dispatch, deduplicated, in arrival order (pure).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pending {
    pub all: bool,
    pub pods: Vec<PodUid>,
    pub containers: Vec<String>,
    /// Containers named by a [`Trigger::ContainerSettled`] (also in `containers`).
    pub settled: HashSet<String>,
    /// What the last [`Trigger::ContainerSettled`] or [`Trigger::ContainerExact`] of each container
    /// announced (running or exited; an exact event also created or removed).
    pub announced: HashMap<String, PlegContainerState>,
    /// Containers named only by a [`Trigger::ContainerAhead`] (also in `containers`).
    pub ahead: HashSet<String>,
    /// Containers named only by a [`Trigger::ContainerGone`] (also in `containers` and `settled`).
    pub gone: HashSet<String>,
    /// Containers named by a [`Trigger::ContainerExact`] (also in `containers` and `settled`): the
    /// pod its event named, if any did, and whether every such event said the id was removed.
    pub exact: HashMap<String, (Option<PodUid>, bool)>,
    /// Exits from the runtime's exit events, in arrival order ([`Trigger::Exited`]).
    pub exits: Vec<crate::runtime::exits::ExitFact>,
    /// The ids in `containers`, for a lookup that stays cheap in a burst.
    named: HashSet<String>,
    seen: HashSet<Trigger>,
}

impl Pending {
    /// A full relist does not replace the pod and container targets: their re-check schedules
    /// still catch a runtime whose CRI state lags its own events.
    pub fn add(&mut self, trigger: Trigger) {
        if !self.seen.insert(trigger.clone()) {
            return;
        }
        match trigger {
            Trigger::All => self.all = true,
            Trigger::Pod(uid) => self.pods.push(uid),
            Trigger::Container(id) => self.name(id, Named::Plain),
            Trigger::ContainerSettled { id, runs } => {
                let state = if runs {
                    PlegContainerState::Running
                } else {
                    PlegContainerState::Exited
                };
                self.announced.insert(id.clone(), state);
                self.name(id, Named::Settled);
            }
            Trigger::ContainerAhead(id) => self.name(id, Named::Ahead),
            Trigger::Exited(fact) => self.exits.push(fact),
            Trigger::ContainerGone(id) => self.name(id, Named::Gone),
            Trigger::ContainerExact { id, pod, announces } => {
                let gone = announces == Some(PlegContainerState::NonExistent);
                // The round's last event for the id says its newest state.
                match announces {
                    Some(state) => self.announced.insert(id.clone(), state),
                    None => self.announced.remove(&id),
                };
                let (hint, all_gone) = self.exact.entry(id.clone()).or_insert((None, true));
                if hint.is_none() {
                    *hint = pod;
                }
                *all_gone &= gone;
                self.name(id, Named::Exact);
            }
        }
    }

    /// A container id named by a trigger of kind `how`: `ahead` and `gone` hold the ids that every
    /// trigger of the round named so, `settled` those that any settling one named.
    fn name(&mut self, id: String, how: Named) {
        let first = self.named.insert(id.clone());
        if first {
            self.containers.push(id.clone());
        }
        for (kind, set) in [(Named::Ahead, &mut self.ahead), (Named::Gone, &mut self.gone)] {
            if how != kind {
                set.remove(&id);
            } else if first {
                set.insert(id.clone());
            }
        }
        if matches!(how, Named::Settled | Named::Gone | Named::Exact) {
            self.settled.insert(id);
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.all && self.pods.is_empty() && self.containers.is_empty() && self.exits.is_empty()
    }
}

/// How a trigger names a container (see [`Trigger`]'s variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Plain,
    Settled,
    Ahead,
    Gone,
    Exact,
}

/// One check: a target without a pod is located first (two lists filtered by its id); once found,
/// its pod is relisted, and a container the relist saw only created is probed further, since the
/// event was about its start. A container target is probed (one status call); a change it finds
/// is read into the pod's record and the pod's status read, without listing the pod
/// ([`GenericPleg::relist_probed`]); a pod target is relisted, and so is the pod an
/// event named for an id no record holds (`hinted`: a probe could not tell a new sandbox from a
/// container). Returns whether a change was found (the end of the target's schedule); `target` is
/// updated once located.
async fn check<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    target: &mut Target,
    fresh: bool,
    hinted: bool,
    metrics: &Metrics,
) -> bool {
    let Some(pod) = target.pod.clone() else {
        let id = target.container.clone().unwrap_or_default();
        // Read by a relist since its event (its pod's, for another id of the pod, or a batch):
        // located by the records, as a located id is treated, without asking the runtime.
        if let Some(pod) = pleg.pod_of(&id).await {
            metrics.count_trigger_relist("skipped");
            target.pod = Some(pod);
            return located_settles(pleg, target).await;
        }
        metrics.count_trigger_relist("locate");
        return match pleg.locate(&id).await {
            // Not listed yet: looked for again on the schedule.
            Ok(None) => false,
            Ok(Some(pod)) => {
                metrics.count_trigger_relist("pod");
                if let Err(error) = pleg.relist_pod(&pod).await {
                    debug!(pod = %pod, error = %error, "triggered pod relist failed; the periodic relist will retry");
                    return true;
                }
                target.pod = Some(pod);
                located_settles(pleg, target).await
            }
            Err(error) => {
                debug!(container = %id, error = %error, "locating a new id failed; relisting everything");
                metrics.count_trigger_relist("all");
                if let Err(error) = pleg.relist().await {
                    debug!(error = %error, "triggered relist failed; the periodic relist will retry");
                }
                true
            }
        };
    };
    if let Some(id) = &target.container
        && !hinted
    {
        metrics.count_trigger_relist("probe");
        match pleg.probe(&pod, id).await {
            Ok(None) => return false,
            // The change read into the pod's record, its status read, without the pod's lists;
            // a record set again since the probe gets the relist below.
            Ok(Some(probed)) => {
                if let Some(changed) = pleg.relist_probed(&pod, probed).await {
                    metrics.count_trigger_relist("probed");
                    return changed;
                }
            }
            // The runtime did not answer: let the relist below find out, or the periodic one.
            Err(error) => debug!(pod = %pod, container = %id, error = %error, "probe failed"),
        }
    }
    metrics.count_trigger_relist(if fresh || target.container.is_some() {
        "pod"
    } else {
        "recheck"
    });
    match pleg.relist_pod(&pod).await {
        Ok(changed) => changed,
        Err(error) => {
            debug!(pod = %pod, error = %error, "triggered pod relist failed; the periodic relist will retry");
            // Stop re-checking: the periodic relist owns a runtime that does not answer.
            true
        }
    }
}

/// Whether checking `target` is probing a container of a known pod, or locating an id no record
/// holds: what a complete relist answers as well (see [`BATCH_PROBES`]).
fn is_probe_or_locate(target: &Target) -> bool {
    target.container.is_some()
}

/// Whether a target just located ends its schedule: its container runs or ran. Seen only created,
/// it is probed on, under its pod, since the event was about its start.
async fn located_settles<R: Runtime, C: Clock>(pleg: &GenericPleg<R, C>, target: &Target) -> bool {
    matches!(
        recorded(pleg, target).await,
        PlegContainerState::Running | PlegContainerState::Exited
    )
}

/// Whether `target`'s CRI state follows its settling trigger (`announces`, if known) only after
/// the runtime's network work, not within milliseconds (pure but for the records):
/// - a sandbox the records hold: containerd 2.1's CRI plugin marks it NOTREADY once the pod's
///   network is torn down, 129–475 ms after its `/tasks/delete` beside the kubelet;
/// - an id no record holds, at its `/tasks/start`: the CRI plugin lists a container before its
///   task starts (CreateContainer adds it, StartContainer starts it), so an id the check at once
///   does not find is a sandbox, which it lists only when RunPodSandbox ends (its network set
///   up), 88 ms–3.7 s after its task started.
async fn settles_slowly<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    target: &Target,
    announces: Option<PlegContainerState>,
) -> bool {
    match (&target.pod, &target.container) {
        (Some(pod), Some(id)) => pleg.holds_sandbox(pod, id).await,
        (None, Some(_)) => announces == Some(PlegContainerState::Running),
        _ => false,
    }
}

/// What the records say of a probe target's container.
///
/// A container whose exit is held (shown from containerd's exit event, not yet from the CRI state)
/// is *running* here: what a check looks for is the CRI state, and the settling of the exit (the
/// records then say exited) is the change that ends its schedule. Taken as exited, a check (or a
/// batch relist) that settled it found no change, and its schedule ran on to its end.
async fn recorded<R: Runtime, C: Clock>(pleg: &GenericPleg<R, C>, target: &Target) -> PlegContainerState {
    let (Some(pod), Some(id)) = (&target.pod, &target.container) else {
        return PlegContainerState::NonExistent;
    };
    if pleg.holds_exit(id).await {
        return PlegContainerState::Running;
    }
    pleg.recorded_state(pod, id).await
}

/// One check of a round: its target, how many re-checks it has had, and what brought it.
#[derive(Debug)]
struct Check {
    target: Target,
    attempt: usize,
    /// A fresh trigger's, not a due re-check's.
    fresh: bool,
    /// An event that follows the CRI state ([`super::Trigger::ContainerExact`]): checked once.
    exact: bool,
    /// An id no record holds, looked for in the pod its event named.
    hinted: bool,
}

impl Check {
    fn fresh(target: Target, attempt: usize) -> Self {
        Self {
            target,
            attempt,
            fresh: true,
            exact: false,
            hinted: false,
        }
    }

    /// Its place in the round ([`check_order`]): an exact event's check with the likeliest, since
    /// the change it announces is there.
    fn order(&self) -> (bool, usize) {
        check_order(&self.target, if self.exact { 0 } else { self.attempt })
    }
}

/// Serve triggers until every sender is gone. Each round: wait for a trigger (or for a re-check to
/// be due) and take everything else already queued (`gather`); show the exits
/// (`show_exits`); plan each fresh target (`plan_fresh`, the decision being
/// [`Schedules::plan`]'s) and add the re-checks due; drop those whose change a relist read first;
/// answer many probes and locates with one complete relist (`relist_batch`); check the rest, pods
/// side by side and likeliest first (`run_checks`); and feed what each found back to its schedule.
pub async fn dispatch<R: Runtime, C: Clock>(
    pleg: Arc<GenericPleg<R, C>>,
    mut queue: TriggerReceiver,
    metrics: Arc<Metrics>,
) {
    let mut schedules = Schedules::default();
    while let Some(mut pending) = gather(&mut queue, &schedules).await {
        show_exits(&pleg, &mut pending).await;
        let mut checks = plan_fresh(&pleg, &mut schedules, &mut pending, &metrics).await;
        for (target, attempt) in schedules.take_due(tokio::time::Instant::now()) {
            if !checks.iter().any(|c| c.target == target) {
                checks.push(Check {
                    fresh: false,
                    ..Check::fresh(target, attempt)
                });
            }
        }
        checks.sort_by_key(Check::order);
        let checks = unread(&pleg, &mut schedules, checks).await;
        let (batched, singles) = split_batch(&pleg, checks).await;
        if pending.all || !batched.is_empty() {
            relist_batch(&pleg, &mut schedules, batched, pending.all, &metrics).await;
        }
        run_checks(&pleg, &mut schedules, singles, &metrics).await;
        if schedules.take_overflowed() {
            // One complete relist for every re-check there was no room for.
            metrics.count_trigger_relist("all");
            if let Err(error) = pleg.relist().await {
                debug!(error = %error, "triggered relist failed; the periodic relist will retry");
            }
        }
    }
}

/// One round's triggers: the first one to come, or none when a re-check falls due first, and
/// everything else already queued; a full queue since the last round is a full relist. None when
/// every sender is gone.
async fn gather(queue: &mut TriggerReceiver, schedules: &Schedules) -> Option<Pending> {
    let mut pending = Pending::default();
    let next_due = schedules.next_due();
    tokio::select! {
        trigger = queue.rx.recv() => pending.add(trigger?),
        () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {}
    }
    while let Ok(more) = queue.rx.try_recv() {
        pending.add(more);
    }
    if queue.overflow.swap(false, Ordering::AcqRel) {
        pending.add(Trigger::All);
    }
    Some(pending)
}

/// The round's exits, first and all at once ([`GenericPleg::containers_exited`]): each one shown
/// before any check of the round. An id no record holds as a running container is checked as an
/// event ahead of the CRI state names it.
async fn show_exits<R: Runtime, C: Clock>(pleg: &GenericPleg<R, C>, pending: &mut Pending) {
    let exits = std::mem::take(&mut pending.exits);
    if exits.is_empty() {
        return;
    }
    for (id, taken) in pleg.containers_exited(exits).await {
        if taken == ExitTaken::NotRecorded {
            pending.name(id, Named::Ahead);
        }
    }
}

/// What the records say of each fresh trigger's target ([`Fresh`]), planned by
/// [`Schedules::plan`]: the checks to make now. An id no record has (a new pod, or a new
/// container) is located in the runtime, unless it is gone from the runtime, or it was looked for
/// in vain a moment ago and the CRI state does not follow this event at once. An exact event's id
/// is looked for in the pod the event named instead.
async fn plan_fresh<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    schedules: &mut Schedules,
    pending: &mut Pending,
    metrics: &Metrics,
) -> Vec<Check> {
    let now = tokio::time::Instant::now();
    let mut fresh = Vec::new();
    for id in std::mem::take(&mut pending.containers) {
        let recorded_pod = pleg.pod_of(&id).await;
        let named = pending.exact.get(&id);
        let gone = pending.gone.contains(&id) || named.is_some_and(|(_, gone)| *gone);
        if recorded_pod.is_none() && (gone || (schedules.unlocatable(&id, now) && !pending.settled.contains(&id))) {
            metrics.count_trigger_relist("skipped");
            continue;
        }
        let hinted = recorded_pod.is_none() && named.is_some_and(|(hint, _)| hint.is_some());
        let target = Target {
            pod: recorded_pod.or_else(|| named.and_then(|(hint, _)| hint.clone())),
            container: Some(id),
        };
        fresh.push((target, named.is_some(), hinted));
    }
    fresh.extend(pending.pods.iter().map(|pod| {
        let target = Target {
            pod: Some(pod.clone()),
            container: None,
        };
        (target, false, false)
    }));
    let mut checks = Vec::with_capacity(fresh.len());
    for (target, exact, hinted) in fresh {
        let read = read_fresh(pleg, pending, target, exact).await;
        match schedules.plan(&read, now) {
            FreshPlan::Check(attempt) => checks.push(Check {
                exact,
                hinted,
                ..Check::fresh(read.target, attempt)
            }),
            FreshPlan::Later => {}
            FreshPlan::Skip => metrics.count_trigger_relist("skipped"),
        }
    }
    checks
}

/// What the records and the round's triggers say of a fresh `target` ([`Fresh`]).
async fn read_fresh<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    pending: &Pending,
    target: Target,
    exact: bool,
) -> Fresh {
    let id = target.container.as_deref();
    let named = |set: &HashSet<String>| id.is_some_and(|id| set.contains(id));
    let announces = id.and_then(|id| pending.announced.get(id).copied());
    let settles = named(&pending.settled);
    // `/containers/delete` (gone) is followed at once, a sandbox's too.
    let slow = settles && !named(&pending.gone) && settles_slowly(pleg, &target, announces).await;
    Fresh {
        recorded: recorded(pleg, &target).await,
        held_exit: match id {
            Some(id) => pleg.holds_exit(id).await,
            None => false,
        },
        announces,
        exact,
        settles,
        ahead: named(&pending.ahead),
        slow,
        target,
    }
}

/// The checks whose target's records changed since its trigger was taken: a relist read the change
/// first, and a probe (or a batch relist) could only find nothing. Their schedules end there; the
/// rest are returned.
async fn unread<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    schedules: &mut Schedules,
    checks: Vec<Check>,
) -> Vec<Check> {
    let mut unread = Vec::with_capacity(checks.len());
    for c in checks {
        if schedules.recorded_since(&c.target, recorded(pleg, &c.target).await) {
            debug!(pod = ?c.target.pod, container = ?c.target.container, attempt = c.attempt, "trigger check: the records hold a change already");
            schedules.after_check(&c.target, true, c.attempt, tokio::time::Instant::now());
        } else {
            unread.push(c);
        }
    }
    unread
}

/// Many probes and locates due at once ([`BATCH_PROBES`]): what the records say of each, for one
/// complete relist to answer them all, and the checks left to run one by one.
async fn split_batch<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    checks: Vec<Check>,
) -> (Vec<(Target, usize, PlegContainerState)>, Vec<Check>) {
    if checks.iter().filter(|c| is_probe_or_locate(&c.target)).count() < BATCH_PROBES {
        return (Vec::new(), checks);
    }
    let (probes, rest): (Vec<_>, Vec<_>) = checks.into_iter().partition(|c| is_probe_or_locate(&c.target));
    let mut batched = Vec::with_capacity(probes.len());
    for Check { target, attempt, .. } in probes {
        let before = recorded(pleg, &target).await;
        batched.push((target, attempt, before));
    }
    (batched, rest)
}

/// One complete relist for the round (`all`) and for the batched probes and locates: each found
/// changed when the records now say otherwise of it than before (a locate: when the relist found
/// its id). A relist that failed ends their schedules: the periodic relist owns a runtime that does
/// not answer.
async fn relist_batch<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    schedules: &mut Schedules,
    batched: Vec<(Target, usize, PlegContainerState)>,
    all: bool,
    metrics: &Metrics,
) {
    metrics.count_trigger_relist(if all { "all" } else { "batch" });
    let began = tokio::time::Instant::now();
    let relisted = pleg.relist().await;
    if let Err(error) = &relisted {
        debug!(error = %error, "triggered relist failed; the periodic relist will retry");
    }
    let now = tokio::time::Instant::now();
    debug!(
        probes = batched.len(),
        all,
        took_ms = (now - began).as_secs_f64() * 1000.0,
        "trigger batch relist"
    );
    for (target, attempt, before) in batched {
        let (target, changed) = if relisted.is_err() {
            (target, true)
        } else if target.pod.is_none() {
            // Located by the relist: as `check` treats an id it located.
            let id = target.container.clone().unwrap_or_default();
            match pleg.pod_of(&id).await {
                Some(pod) => {
                    let located = Target {
                        pod: Some(pod.clone()),
                        container: Some(id.clone()),
                    };
                    schedules.located(&target, &located, pleg.holds_sandbox(&pod, &id).await);
                    let settles = located_settles(pleg, &located).await;
                    (located, settles)
                }
                None => (target, false),
            }
        } else {
            let changed = recorded(pleg, &target).await != before;
            (target, changed)
        };
        if changed {
            schedules.reached(&target, recorded(pleg, &target).await);
        }
        schedules.after_check(&target, changed, attempt, now);
    }
}

/// Checks of different pods a round runs side by side: under a start of many pods each check
/// (a pod's lists, or a probe, and its status read) waits on a busy runtime, and one after another
/// the last of them waited for every one before it (BENCHMARKS.md, "Checks side by side").
pub(super) const CHECKS_AT_ONCE: usize = 8;

/// What one check found, for its schedule.
struct Checked {
    /// The target as it was planned (without a pod, if it was to be located).
    before: Target,
    target: Target,
    attempt: usize,
    changed: bool,
    /// Once located: whether its pod's record holds it as a sandbox.
    located_sandbox: Option<bool>,
    /// Once changed: what the records say of it now.
    reached: Option<PlegContainerState>,
}

/// The round's checks ([`check`]): those of one pod (or of one id to locate) one after another,
/// in the round's order; those of different pods side by side, [`CHECKS_AT_ONCE`] pods at a time,
/// the likeliest first. Each one's finding is fed back to its schedule as soon as its pod's
/// checks are done (a target located is keyed anew).
async fn run_checks<R: Runtime, C: Clock>(
    pleg: &GenericPleg<R, C>,
    schedules: &mut Schedules,
    checks: Vec<Check>,
    metrics: &Metrics,
) {
    let mut pods: Vec<Vec<Check>> = Vec::new();
    let mut place: HashMap<String, usize> = HashMap::new();
    for check in checks {
        let key = check
            .target
            .pod
            .clone()
            .or_else(|| check.target.container.clone())
            .unwrap_or_default();
        match place.get(&key) {
            Some(&at) => pods[at].push(check),
            None => {
                place.insert(key, pods.len());
                pods.push(vec![check]);
            }
        }
    }
    let mut rounds = futures_util::stream::iter(pods.into_iter().map(|of_pod| async move {
        let mut found = Vec::with_capacity(of_pod.len());
        for one in of_pod {
            found.push(check_one(pleg, one, metrics).await);
        }
        found
    }))
    .buffer_unordered(CHECKS_AT_ONCE);
    while let Some(found) = rounds.next().await {
        for checked in found {
            if let (Some(sandbox), Some(_)) = (checked.located_sandbox, &checked.target.pod) {
                schedules.located(&checked.before, &checked.target, sandbox);
            }
            if let Some(state) = checked.reached {
                schedules.reached(&checked.target, state);
            }
            schedules.after_check(
                &checked.target,
                checked.changed,
                checked.attempt,
                tokio::time::Instant::now(),
            );
        }
    }
}

/// One check ([`check`]) and what its schedule needs to know of it.
async fn check_one<R: Runtime, C: Clock>(pleg: &GenericPleg<R, C>, one: Check, metrics: &Metrics) -> Checked {
    let Check {
        mut target,
        attempt,
        fresh,
        exact,
        hinted,
    } = one;
    let began = tokio::time::Instant::now();
    let before = target.clone();
    let changed = check(pleg, &mut target, fresh, hinted, metrics).await;
    let located_sandbox = match (&before.pod, &target.pod, &target.container) {
        (None, Some(pod), Some(id)) => Some(pleg.holds_sandbox(pod, id).await),
        _ => None,
    };
    let took_ms = began.elapsed().as_secs_f64() * 1000.0;
    debug!(pod = ?target.pod, container = ?target.container, attempt, fresh, exact, changed, took_ms, "trigger check");
    let reached = if changed {
        Some(recorded(pleg, &target).await)
    } else {
        None
    };
    Checked {
        before,
        target,
        attempt,
        changed,
        located_sandbox,
        reached,
    }
}

#[cfg(test)]
mod tests;
