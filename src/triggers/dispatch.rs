//! The trigger dispatcher: triggers gathered and coalesced, mapped to checks of pods and
//! containers (probe, locate, relist), and each check's re-check schedule (a runtime's event can be
//! ahead of its CRI state).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::debug;

use crate::clock::Clock;
use crate::kubecontainer::PodUid;
use crate::metrics::Metrics;
use crate::pleg::{ExitTaken, GenericPleg, PlegContainerState};
use crate::runtime::Runtime;

use super::settle::SecondProbe;
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

/// What one triggered check looks at: a pod, and the container the event named when it named one.
/// An event can name an id before the runtime's CRI state lists it (containerd 2.x publishes a
/// sandbox's `/tasks/start` before its CRI plugin lists the sandbox): such a target has no pod yet
/// and is located first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub pod: Option<PodUid>,
    pub container: Option<String>,
}

/// Probes of one container (one cheap status call each) are repeated every 2 ms for this many
/// attempts (~120 ms, which covers containerd 1.6's CRI lag), then with doubling waits.
const FINE_PROBES: usize = 60;
/// Doubling waits, in ms, after the fine probes, and the whole schedule of pod re-relists.
const COARSE_MS: [u64; 9] = [2, 4, 8, 16, 32, 64, 128, 256, 512];

/// The wait before re-check number `attempt` (0-based) of `target`, None when the schedule is over.
/// A runtime's event can be ahead of its CRI state (containerd 1.6 publishes `/tasks/exit` ~20–70 ms
/// before its CRI plugin reports the container exited), so a check that finds no change is
/// repeated; the first change ends it.
pub fn recheck_delay(target: &Target, attempt: usize) -> Option<Duration> {
    let ms = match target.container {
        Some(_) if attempt < FINE_PROBES => 2,
        // Continue with the doubling waits that follow 2 ms.
        Some(_) => *COARSE_MS.get(attempt - FINE_PROBES + 2)?,
        None => *COARSE_MS.get(attempt)?,
    };
    Some(Duration::from_millis(ms))
}

/// When this many container probes and locates are due at once (a burst of exits, or of new
/// pods), one complete relist answers them all instead: two list calls instead of one status call
/// (or two filtered lists, which containerd answers by converting every container as for a full
/// one) each. Checked one after the other, the probes of a burst of 100 exits kept the dispatcher
/// busy for seconds and loaded the runtime that was still catching up with the exits; the locates
/// of 100 new pods held a container's start up to 2 s behind its `/tasks/start`.
pub const BATCH_PROBES: usize = 8;

/// At most this many targets wait for a re-check; past it a burst's further targets get one check
/// each and a complete relist (one, however many) covers what their re-checks would have found.
pub const MAX_RECHECKS: usize = 4096;

/// An id that a whole locate schedule did not find (a late event for a container already removed,
/// a task in the runtime's namespace that is no CRI container) is not looked for again, for this
/// long, when more events name it; the periodic relist finds it if it ever becomes a container.
pub const UNLOCATABLE_FOR: Duration = Duration::from_secs(600);
/// At most this many such ids are remembered (then the memory starts over).
const MAX_UNLOCATABLE: usize = 4096;

/// A target whose whole re-check schedule found no change (its events announced nothing: the
/// records had it already, or the event changes no CRI state) is *quiet* for this long: an event
/// for it then gets the sparse end of the schedule ([`first_attempt`]), not 60 probes 2 ms apart.
/// Without it, a stream of empty events for a few containers kept the dispatcher probing them, or
/// relisting everything (see `BATCH_PROBES`), every 2 ms.
pub const QUIET_FOR: Duration = Duration::from_secs(60);
/// At most this many quiet targets are remembered (then the memory starts over).
const MAX_QUIET: usize = 4096;
/// A quiet target's schedule starts at the first wait this long: a check at once, then at about
/// 128, 384 and 896 ms, which still covers a runtime whose CRI state lags its events (containerd
/// 1.6's 20–70 ms).
const QUIET_FIRST_WAIT: Duration = Duration::from_millis(128);

/// Where a fresh trigger starts `target`'s schedule (pure): at the beginning, or for a quiet
/// target at its first wait of `QUIET_FIRST_WAIT` or more.
pub fn first_attempt(target: &Target, quiet: bool) -> usize {
    if !quiet {
        return 0;
    }
    (0..)
        .find(|a| recheck_delay(target, *a).is_none_or(|wait| wait >= QUIET_FIRST_WAIT))
        .unwrap_or_default()
}

/// The attempt just past the end of `target`'s schedule: a check made at it is not repeated. An
/// event that follows the runtime's CRI state ([`super::Trigger::ContainerExact`]) is checked so.
pub fn schedule_end(target: &Target) -> usize {
    (0..).find(|a| recheck_delay(target, *a).is_none()).unwrap_or_default()
}

/// Where a check comes in its round (pure; the round's checks run one after another): the ones
/// likeliest to find a change first — a container's fine probes after its settling event (the CRI
/// state follows within milliseconds), pod relists and locates, by attempt — and the sparse checks
/// last (an event ahead of its CRI state, a quiet target), which nearly never find one. In arrival
/// order, a settled exit's probe waited behind the sparse checks of other containers' `/tasks/exit`
/// and behind their pod relists: 100–200 ms at the p99 beside a busy kubelet (BENCHMARKS.md). Checks
/// run side by side instead cost ~70 % more runtime calls and were slower still.
pub fn check_order(target: &Target, attempt: usize) -> (bool, usize) {
    (target.container.is_some() && attempt >= FINE_PROBES, attempt)
}

/// Targets to check again later, with how many re-checks each has had, and the ids not found
/// (pure bookkeeping).
#[derive(Debug, Default)]
pub struct Rechecks {
    due: Vec<(tokio::time::Instant, Target, usize)>,
    unlocatable: std::collections::HashMap<String, tokio::time::Instant>,
    /// Targets whose last schedule ran out without a change, and when (see [`QUIET_FOR`]).
    quiet: std::collections::HashMap<Target, tokio::time::Instant>,
    /// Targets that a fresh trigger joined while they waited for a re-check: a change their
    /// next check finds may be the earlier trigger's, not the newer one's (a start seen late,
    /// then the exit), so their schedule starts over rather than ending there.
    joined: std::collections::HashSet<Target>,
    /// Targets whose current schedule a fresh trigger has pulled forward already ([`Rechecks::pull`]).
    pulled: std::collections::HashSet<Target>,
    /// A re-check was not scheduled for want of room.
    overflowed: bool,
    /// Probe targets of a known pod whose fine probes a settling trigger started, and when: their
    /// second probe comes where it finds about a fifth of the changes the first did not
    /// ([`SecondProbe`]), learned from which probe found each change.
    settling: HashMap<Target, tokio::time::Instant>,
    second: SecondProbe,
    /// What the records said of a probe target's container when its trigger was taken: a
    /// re-check that finds the records changed since (a relist of its pod, a batch or the periodic
    /// relist read the change first) ends the schedule without a probe. A probe compares the
    /// runtime with the records, so once they hold the change it could only find nothing, and the
    /// schedule ran on to its end: beside the kubelet, three probes in four over a churn.
    baseline: HashMap<Target, PlegContainerState>,
    /// What the last settling trigger of a target announced (running, exited): a change found that
    /// brings the records there ends the schedule even when a trigger joined it. Pulled forward by
    /// `/tasks/start` after its `/containers/create`, a start found started the schedule over and
    /// it probed on for nothing (~67 probes), since the settling trigger had joined it.
    expect: HashMap<Target, PlegContainerState>,
    /// Ids whose CRI state follows their settling trigger only after the runtime's network work
    /// ([`settles_slowly`]): their re-checks skip the fine probes and take the doubling waits from
    /// 8 ms. Beside the kubelet on containerd 2.1, a sandbox's NOTREADY came 129–475 ms after its
    /// `/tasks/delete`, and a new sandbox was listed 88 ms–3.7 s after its `/tasks/start`: 2 ms
    /// probes and locates were 1,700 of 5,000 trigger checks over a churn, nearly all fruitless.
    slow: HashSet<String>,
}

impl Rechecks {
    /// After a check of `target` (`attempt` re-checks done before it): forget it if it found a
    /// change, else schedule the next re-check unless the schedule is over (an id never located
    /// is then remembered as such) or [`MAX_RECHECKS`] wait already.
    ///
    /// A schedule that ran out without a change makes its target quiet ([`QUIET_FOR`]); a change
    /// ends that.
    pub fn after_check(&mut self, target: &Target, changed: bool, attempt: usize, now: tokio::time::Instant) {
        self.due.retain(|(_, t, _)| t != target);
        let joined = self.joined.remove(target);
        // A slow target's schedule goes on from the doubling waits.
        let slow = target.container.as_ref().is_some_and(|id| self.slow.contains(id));
        let attempt = if slow { attempt.max(FINE_PROBES) } else { attempt };
        if changed || recheck_delay(target, attempt).is_none() {
            self.baseline.remove(target);
            self.expect.remove(target);
            if let Some(id) = &target.container {
                self.slow.remove(id);
            }
        }
        // Learned from which fine probe found each change; the second probe of a settling
        // schedule comes where it finds about a fifth of the changes the first did not.
        let settled_at = if changed || attempt + 1 >= FINE_PROBES {
            self.settling.remove(target)
        } else {
            self.settling.get(target).copied()
        };
        if changed {
            if settled_at.is_some() {
                self.second.found_by(attempt);
            }
            self.quiet.remove(target);
            self.pulled.remove(target);
            // Started over (on the doubling waits again for a slow target).
            let first = if slow { FINE_PROBES } else { 0 };
            if joined
                && self.due.len() < MAX_RECHECKS
                && let Some(wait) = recheck_delay(target, first)
            {
                if let (true, Some(id)) = (slow, &target.container) {
                    self.slow.insert(id.clone());
                }
                self.due.push((now + wait, target.clone(), first + 1));
            }
            return;
        }
        match recheck_delay(target, attempt) {
            Some(_) if self.due.len() >= MAX_RECHECKS => {
                // Dropped: nothing of its schedule is kept.
                self.pulled.remove(target);
                self.settling.remove(target);
                self.baseline.remove(target);
                self.expect.remove(target);
                if let Some(id) = &target.container {
                    self.slow.remove(id);
                }
                self.overflowed = true;
            }
            Some(wait) => {
                let mut at = now + wait;
                if let (0, Some(settled)) = (attempt, settled_at) {
                    at = at.max(settled + self.second.after());
                }
                self.due.push((at, target.clone(), attempt + 1));
            }
            None => {
                self.pulled.remove(target);
                if let (None, Some(id)) = (&target.pod, &target.container) {
                    if self.unlocatable.len() >= MAX_UNLOCATABLE {
                        self.unlocatable.clear();
                    }
                    self.unlocatable.insert(id.clone(), now);
                } else {
                    if self.quiet.len() >= MAX_QUIET {
                        self.quiet.clear();
                    }
                    self.quiet.insert(target.clone(), now);
                }
            }
        }
    }

    /// Whether `target` waits for a re-check: a fresh trigger for it joins that schedule, which
    /// looks for whatever the trigger announces, instead of starting it over. Starting over at
    /// every event let a stream of events for one container probe it every 2 ms for as long as
    /// the stream lasted.
    pub fn waiting(&self, target: &Target) -> bool {
        self.due.iter().any(|(_, t, _)| t == target)
    }

    /// Id `id`, looked for as a slow target, was located: a container (not a `sandbox`) found
    /// before it runs is probed on every 2 ms, since its state follows its `/tasks/start` within
    /// milliseconds (the slow schedule was for an id that might be a sandbox).
    pub fn located(&mut self, id: &str, sandbox: bool) {
        if !sandbox {
            self.slow.remove(id);
        }
    }

    /// A fresh trigger for `target`, which waits for a re-check, joins its schedule.
    pub fn join(&mut self, target: &Target) {
        if self.waiting(target) {
            self.joined.insert(target.clone());
        }
    }

    /// Marks of schedules that no longer wait (a target located and keyed anew, a schedule dropped
    /// for want of room) are let go: `joined` and `pulled` only ever hold waiting targets.
    fn forget_stale_marks(&mut self) {
        if self.joined.len() + self.pulled.len() <= 2 * self.due.len() + 64 {
            return;
        }
        let waiting: HashSet<&Target> = self.due.iter().map(|(_, t, _)| t).collect();
        self.joined.retain(|t| waiting.contains(t));
        self.pulled.retain(|t| waiting.contains(t));
    }

    /// A settling trigger ([`Trigger::ContainerSettled`]) for `target`, which waits for a re-check:
    /// the first one in its schedule pulls the check forward to now, with the fine probes again
    /// (returns true, and the target is no longer due: the caller checks it at attempt 0); any
    /// later one only joins. containerd publishes `/tasks/delete` within milliseconds of its CRI
    /// plugin's EXITED, while `/tasks/exit` can lead it by seconds in a burst: waiting for the
    /// schedule's next check cost up to its longest wait (512 ms). Once per schedule keeps a
    /// stream of such events for one container from probing it every 2 ms for as long as it lasts.
    pub fn pull(&mut self, target: &Target) -> bool {
        if !self.waiting(target) {
            return false;
        }
        self.joined.insert(target.clone());
        if !self.pulled.insert(target.clone()) {
            return false;
        }
        self.due.retain(|(_, t, _)| t != target);
        true
    }

    /// A settling trigger ([`Trigger::ContainerSettled`]) starts `target`'s fine probes now, at
    /// attempt 0, or for a `slow` target (`settles_slowly`) a check now and the doubling waits.
    /// Only a container of a known pod has its second probe placed (`SecondProbe`, which a slow
    /// target's late changes would push late for every container): a located target is keyed
    /// anew. `announces`: the state the trigger announces, if known.
    pub fn settle(
        &mut self,
        target: &Target,
        now: tokio::time::Instant,
        announces: Option<PlegContainerState>,
        slow: bool,
    ) {
        if let Some(id) = &target.container {
            if !slow {
                self.slow.remove(id);
            } else {
                if self.slow.len() >= MAX_RECHECKS {
                    self.slow.clear();
                }
                self.slow.insert(id.clone());
            }
        }
        if target.pod.is_none() || target.container.is_none() {
            return;
        }
        if self.settling.len() >= MAX_RECHECKS {
            self.settling.clear();
            self.expect.clear();
        }
        if slow {
            self.settling.remove(target);
        } else {
            self.settling.insert(target.clone(), now);
        }
        match announces {
            Some(state) => self.expect.insert(target.clone(), state),
            None => self.expect.remove(target),
        };
    }

    /// A check of `target` found a change, and the records now say `recorded` of it: when that is
    /// what its settling trigger announced, the change is the one looked for, and a trigger that
    /// joined the schedule does not start it over.
    pub fn reached(&mut self, target: &Target, recorded: PlegContainerState) {
        if self.expect.get(target) == Some(&recorded) {
            self.joined.remove(target);
        }
    }

    /// A fresh trigger for `target`, a container of a known pod, was taken while the records said
    /// `recorded` of it. A target that waits for a re-check keeps what the records said when its
    /// schedule began.
    pub fn taken(&mut self, target: &Target, recorded: PlegContainerState) {
        if target.pod.is_none() || target.container.is_none() {
            return;
        }
        if self.baseline.len() >= MAX_RECHECKS {
            self.baseline.clear();
        }
        if self.waiting(target) {
            self.baseline.entry(target.clone()).or_insert(recorded);
        } else {
            self.baseline.insert(target.clone(), recorded);
        }
    }

    /// Whether the records say otherwise of `target`'s container than when its trigger was taken:
    /// a relist read a change first.
    pub fn recorded_since(&self, target: &Target, recorded: PlegContainerState) -> bool {
        self.baseline.get(target).is_some_and(|then| *then != recorded)
    }

    /// Whether `target`'s last schedule, within [`QUIET_FOR`], ran out without a change.
    pub fn quiet(&self, target: &Target, now: tokio::time::Instant) -> bool {
        self.quiet
            .get(target)
            .is_some_and(|at| now.duration_since(*at) < QUIET_FOR)
    }

    /// Whether `id` was looked for through a whole schedule, not found, within [`UNLOCATABLE_FOR`].
    pub fn unlocatable(&self, id: &str, now: tokio::time::Instant) -> bool {
        self.unlocatable
            .get(id)
            .is_some_and(|at| now.duration_since(*at) < UNLOCATABLE_FOR)
    }

    /// Whether a re-check was dropped for want of room since the last call.
    pub fn take_overflowed(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }

    pub fn next_due(&self) -> Option<tokio::time::Instant> {
        self.due.iter().map(|(t, _, _)| *t).min()
    }

    /// Take the targets whose re-check is due, with their attempt counts.
    pub fn take_due(&mut self, now: tokio::time::Instant) -> Vec<(Target, usize)> {
        self.forget_stale_marks();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.due)
            .into_iter()
            .partition(|(t, _, _)| *t <= now);
        self.due = later;
        due.into_iter().map(|(_, target, attempt)| (target, attempt)).collect()
    }

    pub fn len(&self) -> usize {
        self.due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
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
async fn recorded<R: Runtime, C: Clock>(pleg: &GenericPleg<R, C>, target: &Target) -> PlegContainerState {
    let (Some(pod), Some(id)) = (&target.pod, &target.container) else {
        return PlegContainerState::NonExistent;
    };
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

/// Serve triggers until every sender is gone: wait for one (or for a re-check to be due), take
/// everything else already queued, map container ids to pods, then check each target once (or
/// relist everything once; many probes due at once are answered by one complete relist).
pub async fn dispatch<R: Runtime, C: Clock>(
    pleg: Arc<GenericPleg<R, C>>,
    mut queue: TriggerReceiver,
    metrics: Arc<Metrics>,
) {
    let mut rechecks = Rechecks::default();
    loop {
        let mut pending = Pending::default();
        let next_due = rechecks.next_due();
        tokio::select! {
            trigger = queue.rx.recv() => match trigger {
                Some(trigger) => pending.add(trigger),
                None => return,
            },
            () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {}
        }
        while let Ok(more) = queue.rx.try_recv() {
            pending.add(more);
        }
        if queue.overflow.swap(false, Ordering::AcqRel) {
            pending.add(Trigger::All);
        }
        // Exits first, all at once: each one shown before any check of the round. An id no record
        // holds as a running container is checked as its event names it.
        let exits = std::mem::take(&mut pending.exits);
        if !exits.is_empty() {
            for (id, taken) in pleg.containers_exited(exits).await {
                if taken == ExitTaken::NotRecorded {
                    pending.name(id, Named::Ahead);
                }
            }
        }
        // Fresh triggers are checked at once and start a schedule (a quiet target's sparse end of
        // one), unless their target waits for a re-check already: they join that, except that the
        // first settling trigger of a schedule pulls its check forward with the fine probes again
        // (`Rechecks::pull`). Due re-checks
        // continue theirs. Each target is checked at most once a round.
        let mut targets: Vec<Check> = Vec::new();
        let now = tokio::time::Instant::now();
        let mut fresh = Vec::new();
        let settled = std::mem::take(&mut pending.settled);
        let announced = std::mem::take(&mut pending.announced);
        let announces = |target: &Target| announced.get(target.container.as_ref()?).copied();
        let ahead = std::mem::take(&mut pending.ahead);
        let gone = std::mem::take(&mut pending.gone);
        let exact = std::mem::take(&mut pending.exact);
        for id in std::mem::take(&mut pending.containers) {
            // An id no record has (a new pod, or a new container) is located in the runtime,
            // unless it is gone from the runtime, or it was looked for in vain a moment ago and
            // the CRI state does not follow this event at once (a sandbox's `/tasks/start` can
            // come after the sparse locates of its `/containers/create` ran out). An exact event's
            // id is looked for in the pod the event named instead.
            let recorded = pleg.pod_of(&id).await;
            let named = exact.get(&id);
            let gone = gone.contains(&id) || named.is_some_and(|(_, gone)| *gone);
            if recorded.is_none() && (gone || (rechecks.unlocatable(&id, now) && !settled.contains(&id))) {
                metrics.count_trigger_relist("skipped");
                continue;
            }
            let hinted = recorded.is_none() && named.is_some_and(|(hint, _)| hint.is_some());
            let target = Target {
                pod: recorded.or_else(|| named.and_then(|(hint, _)| hint.clone())),
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
        for (target, exact, hinted) in fresh {
            let now_recorded = recorded(&pleg, &target).await;
            // An exit held for the container is settled by the check that finds the CRI showing it.
            let held = match &target.container {
                Some(id) => pleg.holds_exit(id).await,
                None => false,
            };
            let read_already = announces(&target) == Some(now_recorded) && !held;
            if read_already {
                // A relist read what the settling (or exact) event announces while it waited in
                // the queue, or before it was sent: a probe could find nothing new (an id's state
                // only moves forward).
                metrics.count_trigger_relist("skipped");
                if rechecks.waiting(&target) {
                    rechecks.after_check(&target, true, 0, now);
                }
                continue;
            }
            rechecks.taken(&target, now_recorded);
            if exact {
                // The change is in the CRI state already: one check now, whatever schedule the
                // target was on, and none after it.
                let attempt = schedule_end(&target);
                targets.push(Check {
                    target,
                    attempt,
                    fresh: true,
                    exact,
                    hinted,
                });
                continue;
            }
            let settles = target.container.as_ref().is_some_and(|id| settled.contains(id));
            // `/containers/delete` (gone) is followed at once, a sandbox's too.
            let slow = settles
                && !target.container.as_ref().is_some_and(|id| gone.contains(id))
                && settles_slowly(&pleg, &target, announces(&target)).await;
            if rechecks.waiting(&target) {
                if settles && rechecks.pull(&target) {
                    rechecks.settle(&target, now, announces(&target), slow);
                    targets.push(Check::fresh(target, 0));
                } else {
                    rechecks.join(&target);
                    metrics.count_trigger_relist("skipped");
                }
                continue;
            }
            // The CRI state follows a settling event at once: fine probes even for a quiet target.
            // It follows an event ahead of it only at a settling one: until then, the sparse
            // schedule.
            let is_ahead = target.container.as_ref().is_some_and(|id| ahead.contains(id));
            if is_ahead && !settles && target.pod.is_some() {
                // Nothing to see yet: a probe at once nearly never found a change. Its sparse
                // checks follow (about 128, 384 and 896 ms on), pulled forward by the settling
                // event. A new id is located at once, so that its start finds it in the records.
                rechecks.after_check(&target, false, first_attempt(&target, true), now);
                continue;
            }
            let attempt = if settles {
                rechecks.settle(&target, now, announces(&target), slow);
                0
            } else {
                first_attempt(&target, is_ahead || rechecks.quiet(&target, now))
            };
            targets.push(Check::fresh(target, attempt));
        }
        for (target, attempt) in rechecks.take_due(tokio::time::Instant::now()) {
            if !targets.iter().any(|c| c.target == target) {
                targets.push(Check {
                    fresh: false,
                    ..Check::fresh(target, attempt)
                });
            }
        }
        targets.sort_by_key(Check::order);
        // A target whose records changed since its trigger was taken: a relist read the change
        // first, and a probe (or a batch relist) could only find nothing.
        let mut unread = Vec::with_capacity(targets.len());
        for c in targets {
            if rechecks.recorded_since(&c.target, recorded(&pleg, &c.target).await) {
                debug!(pod = ?c.target.pod, container = ?c.target.container, attempt = c.attempt, "trigger check: the records hold a change already");
                rechecks.after_check(&c.target, true, c.attempt, tokio::time::Instant::now());
            } else {
                unread.push(c);
            }
        }
        targets = unread;
        // Many probes and locates due at once: what the records say of each before one complete
        // relist, which a probe would have found different from the runtime's state (a locate:
        // nothing, the records do not hold its id).
        let mut batched = Vec::new();
        if targets.iter().filter(|c| is_probe_or_locate(&c.target)).count() >= BATCH_PROBES {
            let (probes, rest): (Vec<_>, Vec<_>) = targets.into_iter().partition(|c| is_probe_or_locate(&c.target));
            targets = rest;
            for Check { target, attempt, .. } in probes {
                let recorded = recorded(&pleg, &target).await;
                batched.push((target, attempt, recorded));
            }
        }
        if pending.all || !batched.is_empty() {
            metrics.count_trigger_relist(if pending.all { "all" } else { "batch" });
            let began = tokio::time::Instant::now();
            let relisted = pleg.relist().await;
            if let Err(error) = &relisted {
                debug!(error = %error, "triggered relist failed; the periodic relist will retry");
            }
            let now = tokio::time::Instant::now();
            let took_ms = (now - began).as_secs_f64() * 1000.0;
            debug!(
                probes = batched.len(),
                all = pending.all,
                took_ms,
                "trigger batch relist"
            );
            for (mut target, attempt, before) in batched {
                // A relist that failed ends the schedules: the periodic relist owns a runtime that
                // does not answer (as a failed pod relist does below).
                let changed = if relisted.is_err() {
                    true
                } else if target.pod.is_none() {
                    // Located by the relist: as `check` treats an id it located.
                    match pleg.pod_of(target.container.as_deref().unwrap_or_default()).await {
                        Some(pod) => {
                            let id = target.container.as_deref().unwrap_or_default();
                            rechecks.located(id, pleg.holds_sandbox(&pod, id).await);
                            target.pod = Some(pod);
                            located_settles(&pleg, &target).await
                        }
                        None => false,
                    }
                } else {
                    recorded(&pleg, &target).await != before
                };
                if changed {
                    rechecks.reached(&target, recorded(&pleg, &target).await);
                }
                rechecks.after_check(&target, changed, attempt, now);
            }
        }
        for Check {
            mut target,
            attempt,
            fresh,
            exact,
            hinted,
        } in targets
        {
            let began = tokio::time::Instant::now();
            let unlocated = target.pod.is_none();
            let changed = check(&pleg, &mut target, fresh, hinted, &metrics).await;
            if let (true, Some(pod), Some(id)) = (unlocated, &target.pod, &target.container) {
                rechecks.located(id, pleg.holds_sandbox(pod, id).await);
            }
            let took_ms = began.elapsed().as_secs_f64() * 1000.0;
            debug!(pod = ?target.pod, container = ?target.container, attempt, fresh, exact, changed, took_ms, "trigger check");
            if changed {
                rechecks.reached(&target, recorded(&pleg, &target).await);
            }
            rechecks.after_check(&target, changed, attempt, tokio::time::Instant::now());
        }
        if rechecks.take_overflowed() {
            // One complete relist for every re-check there was no room for.
            metrics.count_trigger_relist("all");
            if let Err(error) = pleg.relist().await {
                debug!(error = %error, "triggered relist failed; the periodic relist will retry");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::PodLifecycleEventType;

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
        let mut r = Rechecks::default();
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
        let mut r = Rechecks::default();
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
    fn marks_of_targets_no_longer_waiting_are_let_go() {
        let t0 = tokio::time::Instant::now();
        let mut r = Rechecks::default();
        for i in 0..200 {
            let unlocated = Target {
                pod: None,
                container: Some(format!("c{i}")),
            };
            r.after_check(&unlocated, false, 0, t0);
            assert!(r.pull(&unlocated), "a settling event pulls it");
            r.after_check(&unlocated, false, 0, t0);
            r.join(&unlocated);
            let due = r.take_due(t0 + Duration::from_millis(2));
            assert_eq!(due.len(), 1);
            // Located: checked and finished under its new key.
            let located = Target {
                pod: Some(format!("u{i}")),
                container: Some(format!("c{i}")),
            };
            r.after_check(&located, true, 1, t0 + Duration::from_millis(2));
        }
        r.take_due(t0 + Duration::from_secs(1));
        assert!(
            r.joined.len() + r.pulled.len() <= 64,
            "{} marks kept",
            r.joined.len() + r.pulled.len()
        );
    }

    #[test]
    fn rechecks_follow_the_schedule_and_stop_at_a_change() {
        let t0 = tokio::time::Instant::now();
        let target = Target {
            pod: Some("u1".into()),
            container: None,
        };
        let mut r = Rechecks::default();
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
        let mut r = Rechecks::default();
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
        let mut r = Rechecks::default();
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

    /// A runtime of `pods` pods, each with one running container `c<i>` that never changes, that
    /// counts what it is asked.
    #[derive(Clone, Default)]
    struct SteadyRuntime {
        pods: usize,
        calls: Arc<std::sync::Mutex<std::collections::HashMap<&'static str, usize>>>,
        /// From then on, the runtime shows every container exited (a CRI state that lags the
        /// container's exit).
        exits_at: Option<tokio::time::Instant>,
        /// Until then, the runtime lists no pod (a CRI state that lags a new pod's events).
        listed_from: Option<tokio::time::Instant>,
        /// A container whose status the runtime answers this late (a busy runtime).
        slow_probe: Option<(&'static str, Duration)>,
        /// Container `i` exits this much later than container `i - 1` (from `exits_at`).
        exits_apart: Duration,
        /// From then on, the runtime shows every sandbox `s<i>` not ready.
        sandboxes_exit_at: Option<tokio::time::Instant>,
        /// Until then, the runtime shows every container created, not running.
        runs_from: Option<tokio::time::Instant>,
    }

    impl SteadyRuntime {
        fn count(&self, call: &'static str) {
            *self.calls.lock().unwrap().entry(call).or_default() += 1;
        }

        fn calls(&self, call: &str) -> usize {
            self.calls.lock().unwrap().get(call).copied().unwrap_or_default()
        }

        fn listed(&self) -> usize {
            match self.listed_from {
                Some(at) if tokio::time::Instant::now() < at => 0,
                _ => self.pods,
            }
        }

        /// When container `i` exits, if it does.
        fn exit_of(&self, i: usize) -> Option<tokio::time::Instant> {
            Some(self.exits_at? + self.exits_apart * u32::try_from(i).unwrap())
        }

        fn state(&self, i: usize) -> crate::kubecontainer::RuntimeContainerState {
            match (self.exit_of(i), self.runs_from) {
                (Some(at), _) if tokio::time::Instant::now() >= at => {
                    crate::kubecontainer::RuntimeContainerState::Exited
                }
                (_, Some(at)) if tokio::time::Instant::now() < at => {
                    crate::kubecontainer::RuntimeContainerState::Created
                }
                _ => crate::kubecontainer::RuntimeContainerState::Running,
            }
        }

        fn sandbox_state(&self) -> crate::kubecontainer::RuntimeContainerState {
            match self.sandboxes_exit_at {
                Some(at) if tokio::time::Instant::now() >= at => crate::kubecontainer::RuntimeContainerState::Exited,
                _ => crate::kubecontainer::RuntimeContainerState::Running,
            }
        }

        fn pod(&self, i: usize) -> crate::kubecontainer::RuntimePod {
            use crate::kubecontainer::{RuntimeContainer, RuntimePod};
            let state = self.state(i);
            let item = |id: String, sandbox_id: String, state| RuntimeContainer {
                id,
                sandbox_id,
                name: "app".into(),
                state,
                created_at: 1,
                attempt: 0,
            };
            RuntimePod {
                id: format!("u{i}"),
                name: format!("p{i}"),
                namespace: "default".into(),
                containers: vec![item(format!("c{i}"), format!("s{i}"), state)],
                sandboxes: vec![item(format!("s{i}"), String::new(), self.sandbox_state())],
            }
        }
    }

    impl Runtime for SteadyRuntime {
        /// The id probed.
        type Answer = String;

        async fn list_pods(&self) -> Result<Vec<crate::kubecontainer::RuntimePod>, crate::runtime::RuntimeError> {
            self.count("list_pods");
            Ok((0..self.listed()).map(|i| self.pod(i)).collect())
        }

        async fn list_pod(
            &self,
            uid: &str,
        ) -> Result<Option<crate::kubecontainer::RuntimePod>, crate::runtime::RuntimeError> {
            self.count("list_pod");
            Ok((0..self.listed()).map(|i| self.pod(i)).find(|p| p.id == uid))
        }

        async fn pod_status(
            &self,
            pod: &crate::kubecontainer::RuntimePod,
            probed: Option<(&str, String)>,
            _: &mut [crate::runtime::exits::PendingExit],
        ) -> Result<crate::kubecontainer::RuntimePodStatus, crate::runtime::RuntimeError> {
            self.count("pod_status");
            if let Some((id, answer)) = probed {
                assert_eq!(id, answer, "the answer of the id probed");
                self.count("pod_status given a probe's answer");
            }
            Ok(crate::kubecontainer::RuntimePodStatus {
                id: pod.id.clone(),
                ..Default::default()
            })
        }

        async fn probe_state(
            &self,
            id: &str,
            _: crate::runtime::IdKind,
        ) -> Result<Option<(crate::kubecontainer::RuntimeContainerState, String)>, crate::runtime::RuntimeError>
        {
            self.count("probe_state");
            if let Some((slow, late)) = self.slow_probe
                && slow == id
            {
                tokio::time::sleep(late).await;
            }
            if id.starts_with('s') {
                return Ok(Some((self.sandbox_state(), id.to_owned())));
            }
            let i = id.strip_prefix('c').and_then(|i| i.parse().ok()).unwrap_or_default();
            Ok(Some((self.state(i), id.to_owned())))
        }

        async fn locate(&self, id: &str) -> Result<Option<PodUid>, crate::runtime::RuntimeError> {
            self.count("locate");
            Ok((0..self.listed())
                .map(|i| self.pod(i))
                .find(|p| p.containers.iter().chain(&p.sandboxes).any(|c| c.id == id))
                .map(|p| p.id))
        }
    }

    /// A dispatcher (its trigger queue holding `capacity`) over `runtime`, after one complete
    /// relist: the PLEG's events, the trigger sender, and the dispatcher's task.
    async fn dispatching(
        runtime: &SteadyRuntime,
        capacity: usize,
    ) -> (
        tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
        crate::triggers::TriggerSender,
        tokio::task::JoinHandle<()>,
    ) {
        let metrics = Arc::new(Metrics::new());
        let (pleg, events) = GenericPleg::new(
            runtime.clone(),
            crate::clock::SystemClock,
            metrics.clone(),
            crate::pleg::PlegConfig::default(),
        );
        let pleg = Arc::new(pleg);
        pleg.relist().await.unwrap();
        let (sender, receiver) = crate::triggers::trigger_queue(std::num::NonZeroUsize::new(capacity).unwrap());
        (events, sender, tokio::spawn(dispatch(pleg, receiver, metrics)))
    }

    /// When the `n`th event of `kind` came. Fails the test after 60 s (of paused time) without.
    async fn seen(
        events: &mut tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
        kind: PodLifecycleEventType,
        n: usize,
    ) -> tokio::time::Instant {
        let counted = async {
            let mut count = 0;
            while count < n {
                if events.recv().await.expect("an event").kind == kind {
                    count += 1;
                }
            }
            tokio::time::Instant::now()
        };
        tokio::time::timeout(Duration::from_secs(60), counted)
            .await
            .unwrap_or_else(|_| panic!("{n} {kind:?} events not seen within 60 s"))
    }

    /// A round checks the likeliest changes first: fine probes and relists by attempt, the sparse
    /// checks last.
    #[test]
    fn a_round_checks_the_likeliest_changes_first() {
        let ctr = |id: &str| Target {
            pod: Some("u".into()),
            container: Some(id.into()),
        };
        let pod = Target {
            pod: Some("u".into()),
            container: None,
        };
        let locate = Target {
            pod: None,
            container: Some("new".into()),
        };
        let mut round = vec![
            (ctr("ahead"), FINE_PROBES + 4),
            (ctr("probing"), 5),
            (pod.clone(), 2),
            (ctr("quiet"), FINE_PROBES + 7),
            (ctr("settled"), 0),
            (locate.clone(), 3),
        ];
        round.sort_by_key(|(t, a)| check_order(t, *a));
        assert_eq!(
            round,
            [
                (ctr("settled"), 0),
                (pod, 2),
                (locate, 3),
                (ctr("probing"), 5),
                (ctr("ahead"), FINE_PROBES + 4),
                (ctr("quiet"), FINE_PROBES + 7),
            ]
        );
    }

    /// An exit whose settling event comes in the same round as another container's `/tasks/exit`
    /// is probed first: the other's sparse check, slow on a busy runtime, does not hold it up.
    #[tokio::test(start_paused = true)]
    async fn a_settled_exit_is_not_held_up_by_a_sparse_check() {
        let t0 = tokio::time::Instant::now();
        let runtime = SteadyRuntime {
            pods: 2,
            exits_at: Some(t0 + Duration::from_secs(1)),
            slow_probe: Some(("c0", Duration::from_millis(100))),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        tokio::time::sleep_until(t0 + Duration::from_secs(1)).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        sender.send(Trigger::ContainerSettled {
            id: "c1".into(),
            runs: false,
        });
        let first = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let event = events.recv().await.expect("an event");
                if event.kind == PodLifecycleEventType::ContainerDied {
                    return (event.pod_uid.to_string(), tokio::time::Instant::now());
                }
            }
        })
        .await
        .expect("an exit seen within 60 s");
        dispatcher.abort();
        assert_eq!(first.0, "u1", "the settled exit first");
        let late = first.1 - (t0 + Duration::from_secs(1));
        assert!(
            late <= Duration::from_millis(5),
            "the settled exit seen {late:?} after its CRI state"
        );
    }

    /// What `pods` running containers cost the runtime when an event names each of them every
    /// millisecond for ten seconds (a container OOM-killing a child process, for instance, as
    /// containerd's `/tasks/oom` said): calls made on behalf of the dispatcher, beyond the first
    /// relist.
    async fn cost_of_a_flood(pods: usize) -> (SteadyRuntime, usize) {
        let runtime = SteadyRuntime {
            pods,
            ..Default::default()
        };
        let (_events, sender, dispatcher) = dispatching(&runtime, 4096).await;
        for _ in 0..10_000 {
            for i in 0..pods {
                sender.send(Trigger::Container(format!("c{i}")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(sender);
        dispatcher.await.unwrap();
        let calls = runtime.calls("probe_state") + runtime.calls("list_pod") + runtime.calls("list_pods") - 1;
        (runtime, calls)
    }

    /// Events that announce nothing, however many, cost a bounded number of probes and relists:
    /// a target already waiting for a re-check is not started over by another event, and a target
    /// whose whole schedule found nothing gets a sparse one (four checks in a second) next time.
    /// Eight containers named every millisecond once kept the dispatcher in complete relists
    /// (eight probes due at once are answered by one) every 2 ms.
    #[tokio::test(start_paused = true)]
    async fn events_that_announce_nothing_cost_a_bounded_number_of_checks() {
        let (one, calls) = cost_of_a_flood(1).await;
        // One full schedule (68 checks in ~1.2 s), then sparse ones (4 checks in ~0.9 s each)
        // for the other ~8.8 s. Started over at each event, it was 10,000 probes.
        const BOUND: usize = 68 + 4 * 11;
        assert!(calls <= BOUND, "{calls} calls for one container, 10,000 events");
        assert_eq!(one.calls("list_pods"), 1, "no complete relist for one container");

        let (eight, calls) = cost_of_a_flood(8).await;
        let relists = eight.calls("list_pods") - 1;
        assert!(relists <= BOUND, "{relists} complete relists for eight containers");
        assert!(calls <= 8 * BOUND, "{calls} calls for eight containers, 80,000 events");
    }

    /// How long after the CRI state shows a container's exit the PLEG says so, when the exit's
    /// `/tasks/exit` (ahead) came `lead` before it and its `/tasks/delete` (settling) one
    /// millisecond before it; and the runtime, to count what it was asked before the settling
    /// event. In a burst containerd's CRI state lags `/tasks/exit` by seconds.
    async fn exit_seen_after(lead: Duration) -> (Duration, usize) {
        let t0 = tokio::time::Instant::now();
        let flip = t0 + lead;
        let runtime = SteadyRuntime {
            pods: 1,
            exits_at: Some(flip),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        tokio::time::sleep_until(flip - Duration::from_millis(1)).await;
        let before_settling = runtime.calls("probe_state");
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: false,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        drop(sender);
        dispatcher.abort();
        (seen.duration_since(flip), before_settling)
    }

    /// An exit is seen within milliseconds of its settling event however long the CRI state took
    /// after `/tasks/exit` (before, during and after the sparse checks), and until the settling
    /// event its container costs only the sparse probes (about 128, 384 and 896 ms after
    /// `/tasks/exit`), not one every 2 ms, nor one at once.
    #[tokio::test(start_paused = true)]
    async fn an_exit_is_probed_sparsely_until_its_settling_event() {
        for (lead, sparse) in [(30, 0), (130, 1), (700, 2), (1500, 3)] {
            let lead = Duration::from_millis(lead);
            let (late, probes) = exit_seen_after(lead).await;
            assert!(
                late <= Duration::from_millis(4),
                "exit seen {late:?} after the CRI state, {lead:?} after /tasks/exit"
            );
            assert_eq!(
                probes, sparse,
                "probes between /tasks/exit and /tasks/delete, {lead:?} apart"
            );
        }
    }

    /// An exit whose settling event never comes is still seen, by the first sparse probe after
    /// its `/tasks/exit`.
    #[tokio::test(start_paused = true)]
    async fn an_exit_without_its_settling_event_is_seen_by_the_sparse_probes() {
        let t0 = tokio::time::Instant::now();
        let runtime = SteadyRuntime {
            pods: 1,
            exits_at: Some(t0 + Duration::from_millis(50)),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        drop(sender);
        dispatcher.abort();
        let after = seen.duration_since(t0);
        assert!(
            after >= Duration::from_millis(128) && after <= Duration::from_millis(140),
            "seen {after:?} after /tasks/exit"
        );
        assert_eq!(runtime.calls("probe_state"), 1, "one sparse probe");
    }

    /// Exits one after another, each settling event (`/tasks/delete`) 10 ms ahead of its CRI
    /// state: as the exits go on, an exit's second probe moves from 2 ms after the first to where
    /// the state is, and every exit is still seen within 2 ms of its CRI state.
    #[tokio::test(start_paused = true)]
    async fn the_fine_probes_start_where_the_cri_state_usually_follows() {
        const EXITS: usize = 80;
        let lead = Duration::from_millis(10);
        let t0 = tokio::time::Instant::now();
        let runtime = SteadyRuntime {
            pods: EXITS,
            exits_at: Some(t0 + Duration::from_secs(1)),
            exits_apart: Duration::from_millis(100),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        let mut probes = Vec::new();
        for i in 0..EXITS {
            let exit = runtime.exit_of(i).unwrap();
            tokio::time::sleep_until(exit - lead).await;
            let before = runtime.calls("probe_state");
            sender.send(Trigger::ContainerSettled {
                id: format!("c{i}"),
                runs: false,
            });
            let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
            let late = seen.duration_since(exit);
            assert!(
                late <= Duration::from_millis(2),
                "exit {i} seen {late:?} after its CRI state"
            );
            probes.push(runtime.calls("probe_state") - before);
        }
        drop(sender);
        dispatcher.abort();
        // At first at 0, 2, … 10 ms; in the end at once, near 10 ms and at most once more.
        assert_eq!(probes[0], 6, "{probes:?}");
        assert!(probes[60..].iter().all(|p| *p <= 3), "{probes:?}");
    }

    /// An exit that a relist of its pod reads first (here a pod trigger's; beside the kubelet often
    /// a batch relist's, or the pod relist of its sandbox's event) ends its container's fine
    /// probes: a probe compares the runtime with the records, which hold the change by then, so
    /// they could only find nothing for the rest of the schedule (~67 probes in 1.3 s).
    #[tokio::test(start_paused = true)]
    async fn a_change_a_relist_read_first_ends_the_probes() {
        let t0 = tokio::time::Instant::now();
        let exit = t0 + Duration::from_secs(1);
        let runtime = SteadyRuntime {
            pods: 1,
            exits_at: Some(exit),
            slow_probe: Some(("c0", Duration::from_millis(3))),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        tokio::time::sleep_until(exit - Duration::from_millis(30)).await;
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: false,
        });
        tokio::time::sleep_until(exit).await;
        sender.send(Trigger::Pod("u0".into()));
        seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        let probes = runtime.calls("probe_state");
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(sender);
        dispatcher.abort();
        assert!(
            runtime.calls("probe_state") <= probes + 1,
            "{} probes after the exit was read",
            runtime.calls("probe_state") - probes
        );
    }

    /// One container that exits 1 s on, its `/tasks/exit` (ahead) sent 50 ms before: the runtime,
    /// the PLEG's events, the trigger sender, the dispatcher and the exit's time.
    async fn an_exit_ahead_of_its_state() -> (
        SteadyRuntime,
        tokio::sync::mpsc::Receiver<crate::pleg::PodLifecycleEvent>,
        crate::triggers::TriggerSender,
        tokio::task::JoinHandle<()>,
        tokio::time::Instant,
    ) {
        let exit = tokio::time::Instant::now() + Duration::from_secs(1);
        let runtime = SteadyRuntime {
            pods: 1,
            exits_at: Some(exit),
            ..Default::default()
        };
        let (events, sender, dispatcher) = dispatching(&runtime, 64).await;
        tokio::time::sleep_until(exit - Duration::from_millis(50)).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        (runtime, events, sender, dispatcher, exit)
    }

    /// A settling event whose change a relist read while it waited (here a pod trigger's relist,
    /// before the event is taken) costs no probe, and ends the sparse schedule its `/tasks/exit`
    /// began.
    #[tokio::test(start_paused = true)]
    async fn a_settling_event_whose_change_was_read_costs_no_probe() {
        let (runtime, mut events, sender, dispatcher, exit) = an_exit_ahead_of_its_state().await;
        tokio::time::sleep_until(exit).await;
        sender.send(Trigger::Pod("u0".into()));
        seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        let probes = runtime.calls("probe_state");
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: false,
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(sender);
        dispatcher.abort();
        assert_eq!(runtime.calls("probe_state"), probes, "probes after the exit was read");
    }

    /// A settling event that pulls its container's sparse schedule forward (`/tasks/delete` after
    /// `/tasks/exit`) joins it; the change it announces, once found, still ends the schedule
    /// instead of starting it over, which cost ~67 probes for nothing per change.
    #[tokio::test(start_paused = true)]
    async fn the_change_a_settling_event_announces_ends_the_schedule_it_pulled() {
        let (runtime, mut events, sender, dispatcher, exit) = an_exit_ahead_of_its_state().await;
        // The CRI state before its settling event (often so beside the kubelet): the check the
        // event pulls forward finds the change at once.
        tokio::time::sleep_until(exit + Duration::from_millis(1)).await;
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: false,
        });
        seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        let probes = runtime.calls("probe_state");
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(sender);
        dispatcher.abort();
        assert_eq!(runtime.calls("probe_state"), probes, "probes after the exit was found");
    }

    /// A new container is located at its `/containers/create` (ahead) and then sparsely. The CRI
    /// plugin lists it before its task starts (CreateContainer lists it, StartContainer starts
    /// it), so its `/tasks/start` (settling) finds it at once: seen within milliseconds of the
    /// start, also when the sparse locates ran out before it (the id was given up as
    /// unlocatable) — the settling event locates it again.
    #[tokio::test(start_paused = true)]
    async fn a_new_container_is_located_sparsely_until_it_starts() {
        for lead in [20, 300, 1500].map(Duration::from_millis) {
            let t0 = tokio::time::Instant::now();
            let runtime = SteadyRuntime {
                pods: 1,
                listed_from: Some(t0 + lead),
                ..Default::default()
            };
            let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
            sender.send(Trigger::ContainerAhead("c0".into()));
            tokio::time::sleep_until(t0 + lead + Duration::from_millis(1)).await;
            let before_start = runtime.calls("locate");
            sender.send(Trigger::ContainerSettled {
                id: "c0".into(),
                runs: true,
            });
            let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
            drop(sender);
            dispatcher.abort();
            let late = seen.duration_since(t0 + lead + Duration::from_millis(1));
            assert!(
                late <= Duration::from_millis(2),
                "start seen {late:?} after /tasks/start ({lead:?})"
            );
            assert!(
                before_start <= 4,
                "{before_start} locates before /tasks/start, {lead:?} after the create"
            );
        }
    }

    /// A new container whose locate at its `/containers/create` missed is found at its
    /// `/tasks/start`, still created (containerd's CRI plugin records the start after the task
    /// starts): it is probed on every 2 ms, not on a sandbox's doubling waits, and its start seen
    /// within milliseconds.
    #[tokio::test(start_paused = true)]
    async fn a_container_located_at_its_start_is_probed_finely() {
        let t0 = tokio::time::Instant::now();
        let runs = t0 + Duration::from_millis(110);
        let runtime = SteadyRuntime {
            pods: 1,
            listed_from: Some(t0 + Duration::from_millis(20)),
            runs_from: Some(runs),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerAhead("c0".into()));
        tokio::time::sleep_until(t0 + Duration::from_millis(100)).await;
        sender.send(Trigger::ContainerSettled {
            id: "c0".into(),
            runs: true,
        });
        let started = async {
            loop {
                let event = events.recv().await.expect("an event");
                if event.kind == PodLifecycleEventType::ContainerStarted && event.container_id.as_deref() == Some("c0")
                {
                    return tokio::time::Instant::now();
                }
            }
        };
        let seen = tokio::time::timeout(Duration::from_secs(60), started)
            .await
            .expect("the start seen within 60 s");
        drop(sender);
        dispatcher.abort();
        assert!(seen >= runs, "seen before it ran");
        let late = seen.duration_since(runs);
        assert!(
            late <= Duration::from_millis(2),
            "start seen {late:?} after the CRI state"
        );
    }

    /// A new sandbox's `/tasks/start` comes before the CRI plugin lists it (RunPodSandbox lists it
    /// once the pod's network is set up): after the locate at once, it is looked for on the
    /// doubling waits (8, 16 … 512 ms), not every 2 ms, and still seen within one of them. Nor
    /// does it move where the fine probes of containers start.
    #[tokio::test(start_paused = true)]
    async fn a_new_sandbox_is_located_on_the_doubling_waits() {
        let t0 = tokio::time::Instant::now();
        let listed = t0 + Duration::from_millis(230);
        let runtime = SteadyRuntime {
            pods: 1,
            listed_from: Some(listed),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerSettled {
            id: "s0".into(),
            runs: true,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
        drop(sender);
        dispatcher.abort();
        // Located at 0, 8, 24, 56, 120 and 248 ms.
        assert_eq!(seen.duration_since(t0), Duration::from_millis(248));
        assert_eq!(runtime.calls("locate"), 6, "locates before the listing");
    }

    /// An id looked for that a relist has read since its event (here its pod's, as the relist of
    /// a new pod's first container reads the pod's sandbox) is located by the records: its next
    /// re-check asks the runtime nothing.
    #[tokio::test(start_paused = true)]
    async fn an_id_a_relist_read_is_not_looked_for() {
        let t0 = tokio::time::Instant::now();
        let runtime = SteadyRuntime {
            pods: 1,
            listed_from: Some(t0 + Duration::from_millis(30)),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerSettled {
            id: "s0".into(),
            runs: true,
        });
        // Located at 0, 8 and 24 ms; read by the pod's relist at 40 ms.
        tokio::time::sleep_until(t0 + Duration::from_millis(40)).await;
        sender.send(Trigger::Pod("u0".into()));
        seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(sender);
        dispatcher.abort();
        assert_eq!(runtime.calls("locate"), 3, "locates before the pod's relist read it");
    }

    /// A sandbox's `/tasks/delete` (settling) comes long before its CRI state (NOTREADY once its
    /// network is torn down): probed at once and on the doubling waits, not every 2 ms; and its
    /// late change leaves the second probe of containers' settling events where it was.
    #[tokio::test(start_paused = true)]
    async fn a_sandbox_is_probed_on_the_doubling_waits_after_its_settling_event() {
        let t0 = tokio::time::Instant::now();
        let flip = t0 + Duration::from_millis(110);
        let runtime = SteadyRuntime {
            pods: 1,
            sandboxes_exit_at: Some(flip),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerSettled {
            id: "s0".into(),
            runs: false,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        drop(sender);
        dispatcher.abort();
        // Probed at 0, 8, 24, 56 and 120 ms.
        assert_eq!(seen.duration_since(t0), Duration::from_millis(120));
        assert_eq!(runtime.calls("probe_state"), 5);
    }

    /// A slow target's late change does not move the second probe of containers.
    #[test]
    fn a_slow_change_leaves_the_second_probe_where_it_was() {
        let t0 = tokio::time::Instant::now();
        let sandbox = Target {
            pod: Some("u".into()),
            container: Some("s".into()),
        };
        let mut r = Rechecks::default();
        let before = r.second.after();
        for _ in 0..50 {
            r.settle(&sandbox, t0, Some(PlegContainerState::Exited), true);
            r.after_check(&sandbox, false, 0, t0);
            let (_, attempt) = r.take_due(t0 + Duration::from_secs(1)).pop().expect("a re-check");
            assert_eq!(attempt, FINE_PROBES + 1, "the doubling waits");
            r.after_check(&sandbox, true, attempt, t0);
        }
        assert_eq!(r.second.after(), before);
        assert!(r.slow.is_empty() && r.settling.is_empty(), "nothing kept once found");
    }

    #[test]
    fn pending_coalesces_and_keeps_order() {
        let mut p = Pending::default();
        for t in [
            Trigger::Pod("b".into()),
            Trigger::Container("c1".into()),
            Trigger::Pod("a".into()),
            Trigger::Pod("b".into()),
            Trigger::Container("c1".into()),
        ] {
            p.add(t);
        }
        assert_eq!(p.pods, ["b", "a"]);
        assert_eq!(p.containers, ["c1"]);
        p.add(Trigger::All);
        p.add(Trigger::All);
        p.add(Trigger::Pod("z".into()));
        assert!(p.all);
        assert_eq!(p.pods, ["b", "a", "z"], "targets keep their re-check schedules");
        assert_eq!(p.containers, ["c1"]);
        assert!(!p.is_empty());
        assert!(Pending::default().is_empty());
    }

    /// An id is ahead only while every trigger that named it in the round was ahead.
    #[test]
    fn pending_keeps_an_id_ahead_only_if_nothing_else_named_it() {
        let mut p = Pending::default();
        p.add(Trigger::ContainerAhead("a".into()));
        p.add(Trigger::ContainerAhead("b".into()));
        p.add(Trigger::Container("c".into()));
        p.add(Trigger::ContainerAhead("c".into()));
        p.add(Trigger::ContainerSettled {
            id: "b".into(),
            runs: false,
        });
        assert_eq!(p.containers, ["a", "b", "c"]);
        assert_eq!(p.ahead, HashSet::from(["a".to_owned()]));
        assert_eq!(p.settled, HashSet::from(["b".to_owned()]));
        p.add(Trigger::Container("a".into()));
        assert!(p.ahead.is_empty());

        let mut p = Pending::default();
        p.add(Trigger::ContainerGone("a".into()));
        p.add(Trigger::ContainerGone("b".into()));
        p.add(Trigger::ContainerAhead("b".into()));
        assert_eq!(p.gone, HashSet::from(["a".to_owned()]));
        assert_eq!(p.settled, HashSet::from(["a".to_owned(), "b".to_owned()]));
    }

    /// 20 new pods whose starts come at once (`/tasks/start`, settling) before the runtime lists
    /// them: one complete relist per round answers their locates, not two lists each; every start
    /// is seen within milliseconds of the listing.
    #[tokio::test(start_paused = true)]
    async fn many_locates_due_at_once_are_one_relist() {
        let t0 = tokio::time::Instant::now();
        let listed = t0 + Duration::from_millis(50);
        let runtime = SteadyRuntime {
            pods: 20,
            listed_from: Some(listed),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        for i in 0..20 {
            sender.send(Trigger::ContainerSettled {
                id: format!("c{i}"),
                runs: false,
            });
        }
        let all_seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 20).await;
        drop(sender);
        dispatcher.abort();
        let late = all_seen.duration_since(listed);
        assert!(
            late <= Duration::from_millis(4),
            "the last start seen {late:?} after the listing"
        );
        assert_eq!(runtime.calls("locate"), 0, "no locate of its own");
        let relists = runtime.calls("list_pods") - 1;
        assert!(relists <= 30, "{relists} complete relists in 50 ms of 2 ms rounds");
    }

    /// `/containers/delete` for a container a record holds probes it at once; for an id no record
    /// holds (let go already, or never seen) it costs the runtime nothing.
    #[tokio::test(start_paused = true)]
    async fn a_gone_container_is_not_looked_for() {
        let runtime = SteadyRuntime {
            pods: 1,
            ..Default::default()
        };
        let (_events, sender, dispatcher) = dispatching(&runtime, 64).await;
        sender.send(Trigger::ContainerGone("removed-long-ago".into()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("locate"), 0, "an unknown gone id is not located");
        sender.send(Trigger::ContainerGone("c0".into()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(runtime.calls("probe_state") >= 1, "a known one is probed at once");
        drop(sender);
        dispatcher.abort();
    }

    /// An event that follows the CRI state (containerd 2.x's CRI events) costs one probe: the
    /// exit it announces is seen at once, and neither it nor an event that announces nothing is
    /// checked again; an event that announces what the records hold already costs no probe.
    #[tokio::test(start_paused = true)]
    async fn an_exact_event_is_checked_once() {
        let t0 = tokio::time::Instant::now();
        let exits = t0 + Duration::from_secs(1);
        let runtime = SteadyRuntime {
            pods: 2,
            exits_at: Some(exits),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        let exact = |id: &str, pod: &str, announces| Trigger::ContainerExact {
            id: id.into(),
            pod: Some(pod.into()),
            announces,
        };
        tokio::time::sleep_until(exits).await;
        sender.send(exact("c0", "u0", Some(PlegContainerState::Exited)));
        let seen = seen(&mut events, PodLifecycleEventType::ContainerDied, 1).await;
        assert!(seen - exits <= Duration::from_millis(1), "seen {:?} late", seen - exits);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("probe_state"), 1, "one probe, no re-check");
        // The probe's answer is the change: read into the pod's record, the pod's status read once
        // (two at the first relist), the pod not listed.
        assert_eq!(runtime.calls("list_pod"), 0, "no pod relist");
        assert_eq!(
            runtime.calls("pod_status"),
            3,
            "the pod's status read once, for the change"
        );
        assert_eq!(
            runtime.calls("pod_status given a probe's answer"),
            1,
            "the probed container not asked about again"
        );
        // The same event again: the records hold the exit it announces, so no probe.
        sender.send(exact("c0", "u0", Some(PlegContainerState::Exited)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("probe_state"), 1, "nothing new to find");
        // One that announces nothing (an event type this version does not know): one probe,
        // nothing after it; so is one that announces a state the records left behind.
        sender.send(exact("c0", "u0", None));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("probe_state"), 2);
        sender.send(exact("c0", "u0", Some(PlegContainerState::Running)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("probe_state"), 3);
        assert_eq!(runtime.calls("list_pod") + runtime.calls("pod_status"), 3);
        assert_eq!(runtime.calls("list_pods"), 1, "no complete relist");
        drop(sender);
        dispatcher.abort();
    }

    /// An id no record holds, from an event that follows the CRI state: its pod, as the event
    /// names it, is relisted once (a new sandbox is no container to probe), with no locate; an id
    /// the event says was removed costs nothing; one whose event names no pod is located once.
    #[tokio::test(start_paused = true)]
    async fn an_exact_event_for_a_new_id_relists_the_pod_it_names() {
        let t0 = tokio::time::Instant::now();
        let listed = t0 + Duration::from_millis(50);
        let runtime = SteadyRuntime {
            pods: 2,
            listed_from: Some(listed),
            ..Default::default()
        };
        let (mut events, sender, dispatcher) = dispatching(&runtime, 64).await;
        tokio::time::sleep_until(listed).await;
        sender.send(Trigger::ContainerExact {
            id: "s0".into(),
            pod: Some("u0".into()),
            announces: None,
        });
        let seen = seen(&mut events, PodLifecycleEventType::ContainerStarted, 1).await;
        assert!(
            seen - listed <= Duration::from_millis(1),
            "seen {:?} late",
            seen - listed
        );
        sender.send(Trigger::ContainerExact {
            id: "removed".into(),
            pod: Some("u9".into()),
            announces: Some(PlegContainerState::NonExistent),
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("list_pod"), 1, "one pod relist");
        assert_eq!(runtime.calls("probe_state") + runtime.calls("locate"), 0);
        sender.send(Trigger::ContainerExact {
            id: "s1".into(),
            pod: None,
            announces: None,
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runtime.calls("locate"), 1, "located once, not on a schedule");
        assert_eq!(runtime.calls("list_pods"), 1, "no complete relist");
        drop(sender);
        dispatcher.abort();
    }
}
