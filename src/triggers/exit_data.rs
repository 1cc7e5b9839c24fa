//! containerd's exits read as data: `/tasks/exit` of a container's init process becomes an exit
//! fact ([`Trigger::Exited`]) with the reason containerd's CRI plugin will show, `/tasks/oom` is
//! noted for that reason.
//!
//! The reason is `OOMKilled` when an OOM kill of the container was announced before its exit. The
//! shim does not order the two events (on cgroup v1 with every containerd; before 2.3 on cgroup v2
//! too), so an exit of status 137 with no OOM announced asks the container's cgroup whether the
//! kernel killed a process of it, as containerd 2.3's CRI plugin does before it records such an exit
//! (`runtime::task_metrics`); the fact is sent once the count is read, the other events of the
//! stream flowing meanwhile. Where the count cannot be read (the CRI deleted the task already, or
//! the call failed) the exit is left to the CRI state, which shows it moments later with the
//! reason containerd stored: never a reason plegd guessed.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::runtime::events::ContainerdData;
use crate::runtime::exits::ExitFact;
use crate::runtime::task_metrics::{OOM_EXIT_STATUS, OomCheck, TaskMetricsError};

use super::Trigger;

/// At most this many OOM kills are remembered for exits that have not come yet (then the memory
/// starts over: an exit of status 137 whose OOM was forgotten still asks its cgroup).
pub const MAX_OOM_KILLED: usize = 4096;

/// At most this many exits wait on their cgroup's count at once; another one, past them, is left to
/// the CRI state (a burst of thousands of SIGKILLs at once: the CRI shows each moments later).
pub const MAX_ASKED: usize = 256;

/// What `exit_events_total{result}` counts an exit left to the CRI because its reason could not be
/// read ahead of it.
pub const REASON_UNREAD: &str = "reason_unread";

/// What one containerd event says as data.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// An exit fact, to send now.
    Now(Trigger),
    /// An exit of this container whose reason waits on its cgroup's OOM count: it comes from
    /// [`ExitData::decided`].
    Asked(String),
    /// Nothing as data: an OOM kill noted, an exit with no time (no fact), any other event.
    Nothing,
}

/// An exit asked about, decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Decided {
    /// Its fact, with the reason the count gave.
    Exit(Trigger),
    /// The count could not be read: the exit of this container is left to the CRI state.
    LeftToCri(String),
}

/// The exit an answer of the cgroup's OOM count makes of `fact` (pure): OOM-killed when the
/// cgroup counts a kill, as it was otherwise; no fact when the count could not be read.
pub fn decide(mut fact: ExitFact, answer: &Result<Option<bool>, TaskMetricsError>) -> Option<ExitFact> {
    match answer {
        Ok(Some(killed)) => {
            fact.oom |= *killed;
            Some(fact)
        }
        Ok(None) | Err(_) => None,
    }
}

/// Whether the reason of `fact` waits on the cgroup's count: an exit of status 137 with no OOM
/// announced before it, which is what containerd's CRI plugin asks about (pure).
pub fn asks_the_cgroup(fact: &ExitFact) -> bool {
    !fact.oom && fact.exit_code == OOM_EXIT_STATUS
}

/// The OOM kills announced whose exit has not come yet, and the exits that wait on their cgroup's
/// count (see the module's docs).
pub struct ExitData {
    oom_killed: HashSet<String>,
    check: OomCheck,
    asked: JoinSet<(ExitFact, Result<Option<bool>, TaskMetricsError>)>,
    metrics: Arc<Metrics>,
    /// A failed count was logged as a warning once; later ones are logged at debug level (each
    /// one is counted).
    warned: bool,
}

impl ExitData {
    pub fn new(check: OomCheck, metrics: Arc<Metrics>) -> Self {
        Self {
            oom_killed: HashSet::new(),
            check,
            asked: JoinSet::new(),
            metrics,
            warned: false,
        }
    }

    /// Read what containerd's event says as data.
    pub fn read(&mut self, data: ContainerdData) -> Read {
        match data {
            ContainerdData::Oom(id) => {
                if self.oom_killed.len() >= MAX_OOM_KILLED {
                    self.oom_killed.clear();
                }
                self.oom_killed.insert(id);
                Read::Nothing
            }
            ContainerdData::Exit {
                id,
                exit_status,
                exited_at,
            } => {
                let oom = self.oom_killed.remove(&id);
                let Some(fact) = ExitFact::new(id, exit_status, exited_at, oom) else {
                    return Read::Nothing;
                };
                if !asks_the_cgroup(&fact) {
                    return Read::Now(Trigger::Exited(fact));
                }
                if self.asked.len() >= MAX_ASKED {
                    debug!(container = %fact.id, "too many exits wait on their cgroup's OOM count: this one is left to the CRI state");
                    self.metrics.count_exit_event(REASON_UNREAD);
                    return Read::Nothing;
                }
                let check = self.check.clone();
                let id = fact.id.clone();
                debug!(source = "containerd", topic = "/tasks/exit", container = %id, "exit event: its reason waits on the cgroup's OOM count");
                self.asked.spawn(async move {
                    let answer = check.oom_killed(&fact.id).await;
                    (fact, answer)
                });
                Read::Asked(id)
            }
        }
    }

    /// The container is gone (`/containers/delete`): an OOM noted for it is forgotten.
    pub fn forget(&mut self, id: &str) {
        self.oom_killed.remove(id);
    }

    /// The next exit asked about, once its count is read; pending forever while none is asked (a
    /// branch of a `select!` beside the stream). Cancel safe.
    pub async fn decided(&mut self) -> Decided {
        loop {
            match self.asked.join_next().await {
                None => std::future::pending::<()>().await,
                Some(Ok((fact, answer))) => return self.settle(fact, answer),
                // A check cannot panic; were it cancelled, its exit is the CRI's to show.
                Some(Err(error)) => debug!(%error, "an OOM count check ended without an answer"),
            }
        }
    }

    /// Every exit asked about, each once its count is read (each call is bounded by the runtime's
    /// call timeout): for a stream that ended, so that no exit waits for the next one.
    pub async fn drain(&mut self) -> Vec<Decided> {
        let mut out = Vec::new();
        while let Some(joined) = self.asked.join_next().await {
            if let Ok((fact, answer)) = joined {
                out.push(self.settle(fact, answer));
            }
        }
        out
    }

    fn settle(&mut self, fact: ExitFact, answer: Result<Option<bool>, TaskMetricsError>) -> Decided {
        let id = fact.id.clone();
        debug!(source = "containerd", container = %id, answer = ?answer, "exit event: its reason read");
        if let Err(error) = &answer {
            self.metrics
                .count_runtime_error(crate::runtime::task_metrics::OPERATION);
            if self.warned {
                debug!(container = %id, %error, "the cgroup's OOM count could not be read: the exit is left to the CRI state");
            } else {
                self.warned = true;
                warn!(container = %id, %error, "the cgroup's OOM count could not be read: the exit is left to the CRI state (said once; counted in plegd_runtime_errors_total{{operation=\"TaskMetrics\"}})");
            }
        }
        match decide(fact, &answer) {
            Some(fact) => Decided::Exit(Trigger::Exited(fact)),
            None => {
                if answer.is_ok() {
                    debug!(container = %id, "the task is gone with its cgroup: the exit is left to the CRI state");
                }
                self.metrics.count_exit_event(REASON_UNREAD);
                Decided::LeftToCri(id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn fact(exit_code: i32, oom: bool) -> ExitFact {
        ExitFact {
            id: "c1".into(),
            exit_code,
            finished_at: 1_700_000_000_000_000_000,
            oom,
        }
    }

    #[test]
    fn only_a_sigkill_without_an_oom_announced_asks_the_cgroup() {
        assert!(asks_the_cgroup(&fact(137, false)));
        assert!(!asks_the_cgroup(&fact(137, true)));
        assert!(!asks_the_cgroup(&fact(1, false)));
        assert!(!asks_the_cgroup(&fact(0, false)));
        // 143 (SIGTERM) is not the OOM killer's signal.
        assert!(!asks_the_cgroup(&fact(143, false)));
    }

    #[test]
    fn the_count_decides_the_reason_and_nothing_is_guessed() {
        let killed = decide(fact(137, false), &Ok(Some(true))).unwrap();
        assert!(killed.oom);
        assert_eq!(killed.reason(&[]), b"OOMKilled");
        let not = decide(fact(137, false), &Ok(Some(false))).unwrap();
        assert_eq!(not.reason(&[]), b"Error");
        assert_eq!(decide(fact(137, false), &Ok(None)), None);
        assert_eq!(decide(fact(137, false), &Err(TaskMetricsError::NoData)), None);
    }

    fn reader(metrics: &Arc<Metrics>) -> ExitData {
        // A socket no runtime listens on: every count fails, as when containerd is away.
        let dir = std::env::temp_dir().join(format!("plegd-exit-data-{}", std::process::id()));
        let channel = crate::runtime::unix_channel(
            &dir.join("absent.sock"),
            Duration::from_millis(200),
            crate::util::backoff::ExponentialBackoff::try_new(Duration::from_millis(10), Duration::from_millis(100))
                .unwrap(),
            None,
        );
        ExitData::new(
            OomCheck::new(channel, "k8s.io", Duration::from_secs(2)),
            metrics.clone(),
        )
    }

    fn exit(id: &str, exit_status: u32) -> ContainerdData {
        ContainerdData::Exit {
            id: id.into(),
            exit_status,
            exited_at: Some((1_700_000_000, 0)),
        }
    }

    #[tokio::test]
    async fn an_oom_announced_first_is_its_exits_reason_and_asks_nothing() {
        let metrics = Arc::new(Metrics::new());
        let mut data = reader(&metrics);
        assert_eq!(data.read(ContainerdData::Oom("c1".into())), Read::Nothing);
        let Read::Now(Trigger::Exited(fact)) = data.read(exit("c1", 137)) else {
            panic!("an exit fact at once")
        };
        assert!(fact.oom);
        // Noted once: the next exit of the id is asked about again.
        assert_eq!(data.read(exit("c1", 137)), Read::Asked("c1".into()));
        let Read::Now(Trigger::Exited(fact)) = data.read(exit("c2", 3)) else {
            panic!("an exit fact at once")
        };
        assert!(!fact.oom);
        // No time: no fact.
        let untimed = ContainerdData::Exit {
            id: "c3".into(),
            exit_status: 137,
            exited_at: None,
        };
        assert_eq!(data.read(untimed), Read::Nothing);
    }

    #[tokio::test]
    async fn a_count_that_cannot_be_read_leaves_the_exit_to_the_cri() {
        let metrics = Arc::new(Metrics::new());
        let mut data = reader(&metrics);
        assert_eq!(data.read(exit("c1", 137)), Read::Asked("c1".into()));
        let decided = tokio::time::timeout(Duration::from_secs(30), data.decided())
            .await
            .expect("the failed count decided within the call's deadline");
        assert_eq!(decided, Decided::LeftToCri("c1".into()));
        let text = metrics.encode();
        assert!(
            text.contains("plegd_exit_events_total{result=\"reason_unread\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("plegd_runtime_errors_total{operation=\"TaskMetrics\"} 1"),
            "{text}"
        );
        // Nothing else asked: drained at once.
        assert!(data.drain().await.is_empty());
    }

    #[tokio::test]
    async fn the_checks_waiting_at_once_are_bounded() {
        let metrics = Arc::new(Metrics::new());
        let mut data = reader(&metrics);
        for n in 0..MAX_ASKED {
            assert_eq!(data.read(exit(&format!("c{n}"), 137)), Read::Asked(format!("c{n}")));
        }
        assert_eq!(data.read(exit("one-more", 137)), Read::Nothing);
        assert!(
            metrics
                .encode()
                .contains("plegd_exit_events_total{result=\"reason_unread\"} 1")
        );
        let drained = tokio::time::timeout(Duration::from_secs(60), data.drain())
            .await
            .expect("every check ends within its call's deadline");
        assert_eq!(drained.len(), MAX_ASKED);
    }
}
