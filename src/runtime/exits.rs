//! A container's exit as containerd announces it, read ahead of its CRI state (pure).
//!
//! containerd's runc shim ends a container's init process and sends `/tasks/exit` (exit status,
//! `exited_at`); containerd's CRI plugin learns the same exit from the shim's `Wait` answer (the
//! same process, the same two values: `p.SetExited` then `TaskExit{ExitedAt: p.ExitedAt()}`),
//! deletes the task, and only then writes the container's EXITED status
//! (`internal/cri/server/events.go` `handleContainerExit` in 2.1, `pkg/cri/server/events.go` in
//! 1.7):
//!
//! ```go
//! if status.FinishedAt == 0 {
//!     status.Pid = 0
//!     status.FinishedAt = protobuf.FromTimestamp(e.ExitedAt).UnixNano()
//!     status.ExitCode = int32(e.ExitStatus)
//! }
//! ```
//!
//! Its reason is derived when the status is read (`toCRIContainerStatus`): the stored reason if
//! there is one (`OOMKilled`, set by the plugin's `/tasks/oom` handler whatever the container's
//! state, so an OOM-killed child marks the container's eventual exit too), else `Completed` for
//! exit 0 and `Error` for any other. The CRI plugin never sets a message on an exit.
//!
//! So an exit read from `/tasks/exit` is what containerd's CRI will show: [`ExitFact`] holds it,
//! [`read`] writes it into a container's CRI status that does not show it yet (the same status
//! then goes through the same conversion and termination-message reading as one the runtime
//! reported EXITED), [`write_into_last`] the same into the converted status of the pod's last read
//! when that is not read again, and, once the CRI status shows the exit itself, compares the two: the CRI
//! wins, and where it differs ([`ExitRead::Corrected`]: an OOM announced after the exit, which the
//! shim does not order; an exit the plugin recovered after a restart as 255 `Unknown`) the caller
//! counts it. CRI-O and other runtimes send no such event: their exits come from the CRI state
//! alone.

use super::convert::{self, BadData};
use super::lists::ContainerStatus;
use super::termination;
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus};

/// containerd's CRI reasons for an exited container (`internal/cri/server/helpers.go`).
pub const REASON_COMPLETED: &str = "Completed";
pub const REASON_ERROR: &str = "Error";
pub const REASON_OOM_KILLED: &str = "OOMKilled";

/// CRI's `CONTAINER_EXITED`.
const CRI_EXITED: i32 = 2;

/// One exit of a container's init process, from containerd's `/tasks/exit`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExitFact {
    /// The container's id (the event's `container_id`, equal to its process `id`).
    pub id: String,
    /// `int32(e.ExitStatus)`, as the CRI plugin converts it.
    pub exit_code: i32,
    /// `e.ExitedAt` in nanoseconds since the epoch.
    pub finished_at: i64,
    /// A `/tasks/oom` of the container came before this exit (the CRI plugin then stores the
    /// reason `OOMKilled`).
    pub oom: bool,
}

impl ExitFact {
    /// The exit from `/tasks/exit`'s exit status and time (`exited_at` as seconds and nanoseconds;
    /// None when the event carries no time, which containerd always sets). An exit status above
    /// `i32::MAX` wraps as Go's `int32()` conversion does.
    pub fn new(id: String, exit_status: u32, exited_at: Option<(i64, i32)>, oom: bool) -> Option<Self> {
        let (seconds, nanos) = exited_at?;
        let finished_at = seconds.checked_mul(1_000_000_000)?.checked_add(i64::from(nanos))?;
        Some(Self {
            id,
            exit_code: exit_status as i32,
            finished_at,
            oom,
        })
    }

    /// The reason containerd's CRI will show: `stored`, the reason the plugin holds for the
    /// container, if it holds one; else `OOMKilled` after an OOM event; else by the exit code.
    pub fn reason(&self, stored: &[u8]) -> Vec<u8> {
        if !stored.is_empty() {
            return stored.to_vec();
        }
        let derived = match (self.oom, self.exit_code) {
            (true, _) => REASON_OOM_KILLED,
            (false, 0) => REASON_COMPLETED,
            (false, _) => REASON_ERROR,
        };
        derived.as_bytes().to_vec()
    }
}

/// An exit fact taken for a container of one pod, waiting for the CRI status to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingExit {
    pub fact: ExitFact,
    /// The reason written for it, once a status read has written it (the stored reason comes
    /// from that read).
    pub reason: Option<Vec<u8>>,
    /// What the last status read made of it; None when the read did not hold the container.
    pub outcome: Option<ExitRead>,
}

impl PendingExit {
    pub fn new(fact: ExitFact) -> Self {
        Self {
            fact,
            reason: None,
            outcome: None,
        }
    }
}

/// What one status read of a container made of its pending exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitRead {
    /// The CRI status does not show the exit yet: the exit was written into it.
    Ahead,
    /// The CRI status shows the exit, as the fact said it.
    Confirmed,
    /// The CRI status shows the exit otherwise: these fields differ (the CRI's are kept).
    Corrected(Vec<&'static str>),
}

/// Read container status `status` against its pending exit `pending` (see the module's docs):
/// written into it while the CRI does not show the exit, compared once it does.
pub fn read(pending: &mut PendingExit, status: &mut ContainerStatus) -> ExitRead {
    let fact = &pending.fact;
    let outcome = if status.state == CRI_EXITED {
        let written = pending.reason.clone().unwrap_or_else(|| fact.reason(&[]));
        let differs: Vec<&'static str> = [
            ("exit_code", status.exit_code != fact.exit_code),
            ("finished_at", status.finished_at != fact.finished_at),
            ("reason", status.reason[..] != written[..]),
        ]
        .into_iter()
        .filter_map(|(field, differs)| differs.then_some(field))
        .collect();
        if differs.is_empty() {
            ExitRead::Confirmed
        } else {
            ExitRead::Corrected(differs)
        }
    } else {
        let reason = pending.reason.get_or_insert_with(|| fact.reason(&status.reason));
        status.state = CRI_EXITED;
        status.finished_at = fact.finished_at;
        status.exit_code = fact.exit_code;
        status.reason = reason.clone().into();
        ExitRead::Ahead
    };
    pending.outcome = Some(outcome.clone());
    outcome
}

/// Write `pending` into `status`, a container's status as the pod's last read found it, not read
/// again (pure): what [`read`] writes into a CRI status that does not show the exit yet, in the
/// converted form, and the termination message to read for it (from the places the last read kept:
/// the caller reads it, as a status read does). A status that shows the exit already shows it from
/// this same pending exit, written by an earlier taking (a CRI status that showed it would have
/// settled it): it is left as it is. Either way the CRI has not shown the exit: [`ExitRead::Ahead`].
pub fn write_into_last(
    pending: &mut PendingExit,
    status: &mut RuntimeContainerStatus,
    bad: &mut Vec<BadData>,
) -> Option<termination::Plan> {
    pending.outcome = Some(ExitRead::Ahead);
    if status.state == RuntimeContainerState::Exited {
        return None;
    }
    let fact = &pending.fact;
    let reason = pending
        .reason
        .get_or_insert_with(|| fact.reason(status.reason.as_bytes()));
    status.state = RuntimeContainerState::Exited;
    status.finished_at = convert::nanos_to_time(&fact.id, fact.finished_at, bad);
    status.exit_code = fact.exit_code;
    status.reason = String::from_utf8_lossy(reason).into_owned();
    let source = status.termination_source.take()?;
    termination::plan_for(&source, status.exit_code, &status.reason)
}

/// [`write_into_last`] for each of `exits` whose container `last` holds (pure): the termination
/// messages to read, by the index of their container's status.
pub fn write_all_into_last(
    last: &mut crate::kubecontainer::RuntimePodStatus,
    exits: &mut [PendingExit],
    bad: &mut Vec<BadData>,
) -> Vec<(usize, termination::Plan)> {
    let mut plans = Vec::new();
    for exit in exits.iter_mut() {
        let Some(at) = last.container_statuses.iter().position(|c| c.id == exit.fact.id) else {
            continue;
        };
        if let Some(plan) = write_into_last(exit, &mut last.container_statuses[at], bad) {
            plans.push((at, plan));
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING: i32 = 1;

    fn fact(exit_code: i32, oom: bool) -> ExitFact {
        ExitFact {
            id: "c1".into(),
            exit_code,
            finished_at: 1_700_000_000_123_456_789,
            oom,
        }
    }

    fn status(state: i32, exit_code: i32, finished_at: i64, reason: &str) -> ContainerStatus {
        ContainerStatus {
            id: "c1".into(),
            state,
            started_at: 1_699_999_999_000_000_000,
            finished_at,
            exit_code,
            reason: reason.to_owned().into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_exit_reads_as_containerds_cri_converts_it() {
        let at = ExitFact::new("c1".into(), 137, Some((1_700_000_000, 123_456_789)), false).unwrap();
        assert_eq!(at, fact(137, false));
        // Go's int32() of a uint32 above i32::MAX wraps.
        assert_eq!(
            ExitFact::new("c1".into(), u32::MAX, Some((1, 0)), false)
                .unwrap()
                .exit_code,
            -1
        );
        assert_eq!(ExitFact::new("c1".into(), 0, None, false), None, "no time: not a fact");
        assert_eq!(ExitFact::new("c1".into(), 0, Some((i64::MAX, 0)), false), None);
    }

    /// Table: (exit code, an OOM event before the exit, the reason the CRI plugin stored) → the
    /// reason containerd's CRI shows.
    #[test]
    fn the_reason_is_derived_as_containerd_derives_it() {
        for (code, oom, stored, want) in [
            (0, false, "", REASON_COMPLETED),
            (1, false, "", REASON_ERROR),
            (137, false, "", REASON_ERROR),
            (-1, false, "", REASON_ERROR),
            (137, true, "", REASON_OOM_KILLED),
            // OOMKilled is stored whatever the exit code: a child killed, the container ends well.
            (0, true, "", REASON_OOM_KILLED),
            (0, false, "OOMKilled", REASON_OOM_KILLED),
            (1, false, "OOMKilled", REASON_OOM_KILLED),
        ] {
            assert_eq!(
                fact(code, oom).reason(stored.as_bytes()),
                want.as_bytes(),
                "{code} oom={oom} stored={stored:?}"
            );
        }
    }

    #[test]
    fn a_status_that_lags_gets_the_exit_written_into_it() {
        let mut pending = PendingExit::new(fact(3, false));
        let mut running = status(RUNNING, 0, 0, "");
        assert_eq!(read(&mut pending, &mut running), ExitRead::Ahead);
        assert_eq!(running.state, CRI_EXITED);
        assert_eq!(
            (running.exit_code, running.finished_at),
            (3, fact(3, false).finished_at)
        );
        assert_eq!(&running.reason[..], b"Error");
        assert_eq!(running.started_at, 1_699_999_999_000_000_000, "the rest is the CRI's");
        assert_eq!(pending.reason.as_deref(), Some(&b"Error"[..]));
        // The reason the plugin stored (an OOM it saw before) wins over the code's.
        let mut pending = PendingExit::new(fact(0, false));
        let mut oom_before = status(RUNNING, 0, 0, "OOMKilled");
        read(&mut pending, &mut oom_before);
        assert_eq!(&oom_before.reason[..], b"OOMKilled");
        // Read again while the CRI still lags: the reason first written stays.
        let mut again = status(RUNNING, 0, 0, "");
        assert_eq!(read(&mut pending, &mut again), ExitRead::Ahead);
        assert_eq!(&again.reason[..], b"OOMKilled");
    }

    #[test]
    fn the_cri_status_that_shows_the_exit_confirms_or_corrects_it() {
        let at = fact(0, false).finished_at;
        for (cri, want) in [
            (status(CRI_EXITED, 137, at, "Error"), ExitRead::Confirmed),
            (
                status(CRI_EXITED, 137, at, "OOMKilled"),
                ExitRead::Corrected(vec!["reason"]),
            ),
            (
                status(CRI_EXITED, 255, at + 5, "Unknown"),
                ExitRead::Corrected(vec!["exit_code", "finished_at", "reason"]),
            ),
        ] {
            let mut pending = PendingExit::new(fact(137, false));
            let mut lagging = status(RUNNING, 0, 0, "");
            read(&mut pending, &mut lagging);
            let mut shown = cri.clone();
            assert_eq!(read(&mut pending, &mut shown), want, "{cri:?}");
            assert_eq!(shown, cri, "the CRI's status is left as it is");
            assert_eq!(pending.outcome, Some(want));
        }
        // Compared before any read wrote it: against the reason of the code.
        let mut pending = PendingExit::new(fact(0, false));
        let mut shown = status(CRI_EXITED, 0, at, "Completed");
        assert_eq!(read(&mut pending, &mut shown), ExitRead::Confirmed);
    }

    /// The exit written into a converted status as [`read`] writes it into a CRI one: the same
    /// state, time, code and reason (the stored one first), and the termination message to read.
    #[test]
    fn an_exit_written_into_the_last_read_is_the_one_a_read_writes() {
        use crate::kubecontainer::TerminationMessageSource;
        let converted = |raw: ContainerStatus| {
            let mut bad = Vec::new();
            let cri = super::super::statuses::container_status("c1", &raw, &mut bad);
            assert!(bad.is_empty());
            convert::container_status(cri, &mut bad)
        };
        for (fact, stored) in [
            (fact(137, true), ""),
            (fact(3, false), ""),
            (fact(0, false), ""),
            (fact(137, false), "OOMKilled"),
        ] {
            let mut by_read = PendingExit::new(fact.clone());
            let mut raw = status(RUNNING, 0, 0, stored);
            read(&mut by_read, &mut raw);
            let mut by_write = PendingExit::new(fact.clone());
            let mut last = converted(status(RUNNING, 0, 0, stored));
            last.termination_source = Some(TerminationMessageSource {
                file: Some("/var/lib/kubelet/pods/u/containers/app/1a2b".into()),
                logs_on_error: Some("/var/log/pods/ns_p_u/app/0.log".into()),
            });
            let plan = write_into_last(&mut by_write, &mut last, &mut Vec::new()).expect("a message to read");
            let mut want = converted(raw);
            want.termination_source = None;
            assert_eq!(last, want, "{fact:?}");
            assert_eq!(
                (by_write.reason, by_write.outcome),
                (by_read.reason, Some(ExitRead::Ahead))
            );
            assert_eq!(
                plan.file.as_deref(),
                Some("/var/lib/kubelet/pods/u/containers/app/1a2b")
            );
            assert_eq!(
                plan.logs.is_some(),
                fact.exit_code != 0,
                "the log only for a failed exit"
            );
        }
        // Written before (the status shows it exited already): left as it is, still ahead.
        let mut again = PendingExit::new(fact(3, false));
        let mut last = converted(status(RUNNING, 0, 0, ""));
        write_into_last(&mut again, &mut last, &mut Vec::new());
        let written = last.clone();
        again.outcome = None;
        assert_eq!(write_into_last(&mut again, &mut last, &mut Vec::new()), None);
        assert_eq!((last, again.outcome), (written, Some(ExitRead::Ahead)));
    }
}
