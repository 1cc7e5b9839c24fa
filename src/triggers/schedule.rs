//! When to check what (pure): each target's re-check schedule, kept in one record per target, and
//! the planning step that decides, for a fresh trigger, whether to check its target now, at which
//! attempt of its schedule, later, or not at all.
//!
//! A runtime's event can be ahead of its CRI state (containerd publishes `/tasks/start` and
//! `/tasks/delete` before its CRI plugin writes the change, and lists a new sandbox only once its
//! network is set up), so a check that finds no change is repeated on a schedule
//! ([`recheck_delay`]) that ends at the first change. No event source can keep plegd probing: a
//! trigger for a target on a schedule joins it, and a target whose last schedule found nothing gets
//! a sparse one ([`QUIET_FOR`]). The dispatcher (`dispatch.rs`) reads the records and the runtime;
//! nothing here does I/O or reads a clock: the time is an argument.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::kubecontainer::PodUid;
use crate::pleg::PlegContainerState;

use super::settle::SecondProbe;

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
pub const FINE_PROBES: usize = 60;
/// Doubling waits, in ms, after the fine probes, and the whole schedule of pod re-relists.
pub const COARSE_MS: [u64; 9] = [2, 4, 8, 16, 32, 64, 128, 256, 512];

/// The wait before re-check number `attempt` (0-based) of `target`, None when the schedule is over.
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

/// A target whose whole re-check schedule found no change (its events announced nothing: the
/// records had it already, or the event changes no CRI state) is *quiet* for this long: an event
/// for it then gets the sparse end of the schedule ([`first_attempt`]), not 60 probes 2 ms apart.
/// Without it, a stream of empty events for a few containers kept the dispatcher probing them, or
/// relisting everything (see [`BATCH_PROBES`]), every 2 ms.
pub const QUIET_FOR: Duration = Duration::from_secs(60);
/// At most this many targets are remembered as quiet or unlocatable, beside those that wait for a
/// re-check (then that memory starts over).
const MAX_REMEMBERED: usize = 4096;
/// A quiet target's schedule starts at the first wait this long: a check at once, then at about
/// 128, 384 and 896 ms, which still covers a runtime whose CRI state lags its events (containerd
/// 1.6's 20–70 ms).
const QUIET_FIRST_WAIT: Duration = Duration::from_millis(128);

/// Where a fresh trigger starts `target`'s schedule: at the beginning, or for a quiet target at
/// its first wait of `QUIET_FIRST_WAIT` or more.
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

/// Where a check comes in its round (a pod's checks run one after another, and the pods a few at a
/// time in this order): the ones likeliest
/// to find a change first — a container's fine probes after its settling event (the CRI state
/// follows within milliseconds), pod relists and locates, by attempt — and the sparse checks last
/// (an event ahead of its CRI state, a quiet target), which nearly never find one. In arrival
/// order, a settled change's probe waited behind the sparse checks of other containers and behind
/// their pod relists: 100–200 ms at the p99 beside a busy kubelet (BENCHMARKS.md).
pub fn check_order(target: &Target, attempt: usize) -> (bool, usize) {
    (target.container.is_some() && attempt >= FINE_PROBES, attempt)
}

/// Everything the dispatcher keeps about one target: its whole schedule.
#[derive(Debug, Clone, Default)]
struct Record {
    /// The next re-check, when it is due and its attempt number; None: not waiting.
    due: Option<(Instant, usize)>,
    /// A fresh trigger joined the schedule while it waited: a change its next check finds may be
    /// the earlier trigger's, not the newer one's (a start seen late, then the exit), so the
    /// schedule starts over rather than ending there.
    joined: bool,
    /// A settling trigger pulled this schedule forward already ([`Schedules::pull`]).
    pulled: bool,
    /// When a settling trigger started the fine probes of a container of a known pod: its second
    /// probe comes where it finds about a fifth of the changes the first did not ([`SecondProbe`]).
    settling: Option<Instant>,
    /// What the records said of the container when the schedule's trigger was taken: a re-check
    /// that finds the records changed since (a relist read the change first) ends the schedule
    /// without a probe. Beside the kubelet, three probes in four over a churn found nothing so.
    baseline: Option<PlegContainerState>,
    /// What the last settling trigger announced (running, exited): a change found that brings the
    /// records there ends the schedule even when a trigger joined it.
    expect: Option<PlegContainerState>,
    /// The id's CRI state follows its settling trigger only after the runtime's network work
    /// ([`Fresh::slow`]): its re-checks skip the fine probes and take the doubling waits from 8 ms.
    slow: bool,
    /// The last schedule ran out without a change, then (see [`QUIET_FOR`]).
    quiet: Option<Instant>,
    /// An id looked for through a whole schedule and not found, then (see [`UNLOCATABLE_FOR`]).
    unlocatable: Option<Instant>,
}

impl Record {
    /// The schedule is over: nothing of it is kept but what is remembered past it.
    fn end_schedule(&mut self) {
        *self = Record {
            quiet: self.quiet,
            unlocatable: self.unlocatable,
            ..Record::default()
        };
    }

    /// Nothing is kept: the record can go.
    fn is_empty(&self) -> bool {
        self.due.is_none() && self.quiet.is_none() && self.unlocatable.is_none() && !self.slow && !self.holds_marks()
    }

    fn holds_marks(&self) -> bool {
        self.joined || self.pulled || self.settling.is_some() || self.baseline.is_some() || self.expect.is_some()
    }
}

/// Every target's record, and what the schedules learn together (bookkeeping only).
#[derive(Debug, Default)]
pub struct Schedules {
    records: HashMap<Target, Record>,
    /// How many records wait for a re-check (`due` set).
    waiting: usize,
    /// A re-check was not scheduled for want of room.
    overflowed: bool,
    second: SecondProbe,
}

impl Schedules {
    fn record(&mut self, target: &Target) -> &mut Record {
        if !self.records.contains_key(target) && self.records.len() >= MAX_RECHECKS + MAX_REMEMBERED {
            // The memory of quiet and unlocatable targets starts over; schedules are kept.
            self.records.retain(|_, r| r.due.is_some() || r.holds_marks());
        }
        self.records.entry(target.clone()).or_default()
    }

    fn set_due(&mut self, target: &Target, due: Option<(Instant, usize)>) {
        let record = self.record(target);
        let was = record.due.is_some();
        record.due = due;
        match (was, due.is_some()) {
            (false, true) => self.waiting += 1,
            (true, false) => self.waiting -= 1,
            _ => {}
        }
    }

    fn tidy(&mut self, target: &Target) {
        if self.records.get(target).is_some_and(Record::is_empty) {
            self.records.remove(target);
        }
    }

    /// After a check of `target` (`attempt` re-checks done before it): forget it if it found a
    /// change, else schedule the next re-check unless the schedule is over (an id never located is
    /// then remembered as such, any other target as quiet) or [`MAX_RECHECKS`] wait already.
    pub fn after_check(&mut self, target: &Target, changed: bool, attempt: usize, now: Instant) {
        self.set_due(target, None);
        let record = self.record(target);
        let joined = std::mem::take(&mut record.joined);
        // A slow target's schedule goes on from the doubling waits.
        let slow = record.slow;
        let attempt = if slow { attempt.max(FINE_PROBES) } else { attempt };
        let settled_at = record.settling;
        if changed || attempt + 1 >= FINE_PROBES {
            record.settling = None;
        }
        if changed {
            if settled_at.is_some() {
                self.second.found_by(attempt);
            }
            let record = self.record(target);
            record.end_schedule();
            record.quiet = None;
            // Started over after a joined trigger (on the doubling waits again for a slow target).
            let first = if slow { FINE_PROBES } else { 0 };
            if joined
                && self.waiting < MAX_RECHECKS
                && let Some(wait) = recheck_delay(target, first)
            {
                self.record(target).slow = slow;
                self.set_due(target, Some((now + wait, first + 1)));
            }
            self.tidy(target);
            return;
        }
        match recheck_delay(target, attempt) {
            Some(_) if self.waiting >= MAX_RECHECKS => {
                // Dropped: nothing of its schedule is kept.
                self.record(target).end_schedule();
                self.overflowed = true;
            }
            Some(wait) => {
                let mut at = now + wait;
                if let (0, Some(settled)) = (attempt, settled_at) {
                    at = at.max(settled + self.second.after());
                }
                // A joined trigger's mark is spent by this check, whatever it found.
                self.set_due(target, Some((at, attempt + 1)));
            }
            None => {
                let unlocated = target.pod.is_none() && target.container.is_some();
                let record = self.record(target);
                record.end_schedule();
                if unlocated {
                    record.unlocatable = Some(now);
                } else {
                    record.quiet = Some(now);
                }
            }
        }
        self.tidy(target);
    }

    /// Whether `target` waits for a re-check: a fresh trigger for it joins that schedule, which
    /// looks for whatever the trigger announces, instead of starting it over. Starting over at
    /// every event let a stream of events for one container probe it every 2 ms for as long as
    /// the stream lasted.
    pub fn waiting(&self, target: &Target) -> bool {
        self.records.get(target).is_some_and(|r| r.due.is_some())
    }

    /// Unlocated `from` was located as `to`: its record goes on under its new key. A container (not
    /// a `sandbox`) found before it runs is probed on every 2 ms, since its state follows its
    /// `/tasks/start` within milliseconds (a slow schedule was for an id that might be a sandbox).
    pub fn located(&mut self, from: &Target, to: &Target, sandbox: bool) {
        if from == to {
            return;
        }
        if let Some(mut record) = self.records.remove(from) {
            record.unlocatable = None;
            record.slow &= sandbox;
            if record.due.is_some() {
                self.waiting -= 1;
            }
            let mut due = record.due.take();
            // A schedule the new key has already (a trigger that named the id once it was in the
            // records) is merged with it: the earlier check, and the marks of both.
            if let Some(mut there) = self.records.remove(to) {
                if there.due.is_some() {
                    self.waiting -= 1;
                }
                due = match (due, there.due.take()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                record.joined |= there.joined;
                record.pulled |= there.pulled;
                record.slow |= there.slow;
                record.settling = record.settling.or(there.settling);
                record.baseline = there.baseline.or(record.baseline);
                record.expect = record.expect.or(there.expect);
                record.quiet = there.quiet;
            }
            self.records.insert(to.clone(), record);
            self.set_due(to, due);
            self.tidy(to);
        }
    }

    /// A fresh trigger for `target`, which waits for a re-check, joins its schedule.
    pub fn join(&mut self, target: &Target) {
        if self.waiting(target) {
            self.record(target).joined = true;
        }
    }

    /// A settling trigger ([`super::Trigger::ContainerSettled`]) for `target`, which waits for a
    /// re-check: the first one in its schedule pulls the check forward to now, with the fine probes
    /// again (returns true, and the target is no longer due: the caller checks it at attempt 0);
    /// any later one only joins. containerd publishes `/tasks/delete` within milliseconds of its
    /// CRI plugin's EXITED, while `/tasks/exit` can lead it by seconds in a burst.
    pub fn pull(&mut self, target: &Target) -> bool {
        if !self.waiting(target) {
            return false;
        }
        let record = self.record(target);
        record.joined = true;
        if std::mem::replace(&mut record.pulled, true) {
            return false;
        }
        self.set_due(target, None);
        true
    }

    /// A settling trigger starts `target`'s fine probes now, at attempt 0, or for a `slow` target
    /// a check now and the doubling waits. Only a container of a known pod has its second probe
    /// placed (`SecondProbe`, which a slow target's late changes would push late for every
    /// container). `announces`: the state the trigger announces, if known.
    pub fn settle(&mut self, target: &Target, now: Instant, announces: Option<PlegContainerState>, slow: bool) {
        if target.container.is_none() {
            return;
        }
        let known = target.pod.is_some();
        let record = self.record(target);
        record.slow = slow;
        if !known {
            return;
        }
        record.settling = (!slow).then_some(now);
        record.expect = announces;
    }

    /// A check of `target` found a change, and the records now say `recorded` of it: when that is
    /// what its settling trigger announced, the change is the one looked for, and a trigger that
    /// joined the schedule does not start it over.
    pub fn reached(&mut self, target: &Target, recorded: PlegContainerState) {
        if let Some(record) = self.records.get_mut(target)
            && record.expect == Some(recorded)
        {
            record.joined = false;
        }
    }

    /// A fresh trigger for `target`, a container of a known pod, was taken while the records said
    /// `recorded` of it. A target that waits for a re-check keeps what the records said when its
    /// schedule began.
    pub fn taken(&mut self, target: &Target, recorded: PlegContainerState) {
        if target.pod.is_none() || target.container.is_none() {
            return;
        }
        let waiting = self.waiting(target);
        let record = self.record(target);
        if !waiting || record.baseline.is_none() {
            record.baseline = Some(recorded);
        }
    }

    /// Whether the records say otherwise of `target`'s container than when its trigger was taken:
    /// a relist read a change first.
    pub fn recorded_since(&self, target: &Target, recorded: PlegContainerState) -> bool {
        self.records
            .get(target)
            .and_then(|r| r.baseline)
            .is_some_and(|then| then != recorded)
    }

    /// Whether `target`'s last schedule, within [`QUIET_FOR`], ran out without a change.
    pub fn quiet(&self, target: &Target, now: Instant) -> bool {
        self.records
            .get(target)
            .and_then(|r| r.quiet)
            .is_some_and(|at| now.duration_since(at) < QUIET_FOR)
    }

    /// Whether `id` was looked for through a whole schedule, not found, within [`UNLOCATABLE_FOR`].
    pub fn unlocatable(&self, id: &str, now: Instant) -> bool {
        let target = Target {
            pod: None,
            container: Some(id.to_owned()),
        };
        self.records
            .get(&target)
            .and_then(|r| r.unlocatable)
            .is_some_and(|at| now.duration_since(at) < UNLOCATABLE_FOR)
    }

    /// Whether a re-check was dropped for want of room since the last call.
    pub fn take_overflowed(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.records.values().filter_map(|r| r.due.map(|(at, _)| at)).min()
    }

    /// Take the targets whose re-check is due, with their attempt counts.
    pub fn take_due(&mut self, now: Instant) -> Vec<(Target, usize)> {
        let due: Vec<(Target, usize)> = self
            .records
            .iter()
            .filter_map(|(t, r)| r.due.filter(|(at, _)| *at <= now).map(|(_, a)| (t.clone(), a)))
            .collect();
        for (target, _) in &due {
            self.set_due(target, None);
        }
        due
    }

    /// How many targets wait for a re-check.
    pub fn len(&self) -> usize {
        self.waiting
    }

    pub fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// How many records are kept in all (schedules and what is remembered past them).
    pub fn records(&self) -> usize {
        self.records.len()
    }

    /// The planning step for one fresh trigger (see [`Fresh`] and [`FreshPlan`]).
    pub fn plan(&mut self, fresh: &Fresh, now: Instant) -> FreshPlan {
        let target = &fresh.target;
        if fresh.read_already() {
            // A relist read what the settling (or exact) event announces while it waited in the
            // queue, or before it was sent: a probe could find nothing new (an id's state only
            // moves forward).
            if self.waiting(target) {
                self.after_check(target, true, 0, now);
            }
            return FreshPlan::Skip;
        }
        self.taken(target, fresh.recorded);
        if fresh.exact {
            // The change is in the CRI state already: one check now, whatever schedule the target
            // was on, and none after it.
            return FreshPlan::Check(schedule_end(target));
        }
        if self.waiting(target) {
            if fresh.settles && self.pull(target) {
                self.settle(target, now, fresh.announces, fresh.slow);
                return FreshPlan::Check(0);
            }
            self.join(target);
            return FreshPlan::Skip;
        }
        // The CRI state follows a settling event at once: fine probes even for a quiet target. It
        // follows an event ahead of it only at a settling one: until then, the sparse schedule.
        if fresh.ahead && !fresh.settles && target.pod.is_some() {
            // Nothing to see yet: a probe at once nearly never found a change. Its sparse checks
            // follow (about 128, 384 and 896 ms on), pulled forward by the settling event. A new
            // id is located at once, so that its start finds it in the records.
            self.after_check(target, false, first_attempt(target, true), now);
            return FreshPlan::Later;
        }
        if fresh.settles {
            self.settle(target, now, fresh.announces, fresh.slow);
            return FreshPlan::Check(0);
        }
        FreshPlan::Check(first_attempt(target, fresh.ahead || self.quiet(target, now)))
    }
}

/// A fresh trigger's target with what the dispatcher read of it, for [`Schedules::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fresh {
    pub target: Target,
    /// What the records say of the target's container now.
    pub recorded: PlegContainerState,
    /// The state the round's last trigger for it announced (running, exited; an exact event also
    /// created or removed), if any did.
    pub announces: Option<PlegContainerState>,
    /// An exit is held for the container (`pleg::GenericPleg::holds_exit`): the check that finds
    /// the CRI showing it settles it, though the records say exited already.
    pub held_exit: bool,
    /// From an event that follows the CRI state: checked once, at once.
    pub exact: bool,
    /// From an event the CRI state follows within milliseconds (`/tasks/start`, `/tasks/delete`,
    /// `/containers/delete`).
    pub settles: bool,
    /// Only from events that run ahead of the CRI state (`/containers/create`).
    pub ahead: bool,
    /// Its CRI state follows its settling event only after the runtime's network work (a sandbox
    /// the records hold; a new id at its start, which a check at once does not find).
    pub slow: bool,
}

impl Fresh {
    /// The records show what the trigger announces, and no exit waits to be settled.
    fn read_already(&self) -> bool {
        self.announces == Some(self.recorded) && !self.held_exit
    }
}

/// What [`Schedules::plan`] decided for a fresh trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreshPlan {
    /// Check the target now, at this attempt of its schedule.
    Check(usize),
    /// Its first check is scheduled (sparse), none now.
    Later,
    /// Nothing to check: the records have the change, or the target's schedule took the trigger.
    Skip,
}

#[cfg(test)]
mod tests;
