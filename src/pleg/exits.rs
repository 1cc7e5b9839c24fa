//! Exits the runtime announced ahead of its CRI state, held in the pod records until a status
//! read of the CRI state shows them (pure bookkeeping; see `runtime::exits` for what an exit fact
//! is and why it can be taken at once).
//!
//! An exit taken from containerd's `/tasks/exit` makes its container exited in its pod's record
//! at once: the ContainerDied event and the pod's status come from it without waiting for the CRI,
//! the status from the pod's last status read while it still shows what the records hold
//! ([`last_status_holds`]). Until the CRI state shows the exit, every listing of the pod still says the container runs;
//! [`HeldExits::hold`] keeps it exited there (a container's state only moves forward: created,
//! running, exited, removed), so that no relist takes the lag for a restart. Once a listing or a
//! probe shows it exited, the next status read compares the two ([`Settled`]), and the CRI's
//! values win. An exit the CRI has not shown after [`EXIT_HELD_FOR`] is let go: the CRI state is
//! the judge, and a container it still says runs is running again in the records (counted as a
//! correction of the state).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::kubecontainer::{PodUid, RuntimeContainerState, RuntimePod, RuntimePodStatus};
use crate::runtime::convert::sandbox_as_container_state;
use crate::runtime::exits::{ExitFact, ExitRead, PendingExit};

/// How long an exit is held against a CRI state that does not show it. containerd's CRI shows an
/// exit once it has deleted the task: 2–3 s after it in a burst of 100 kills on a loaded node.
pub const EXIT_HELD_FOR: Duration = Duration::from_secs(60);

/// One exit held for a container of pod `uid`.
#[derive(Debug, Clone)]
struct Held {
    uid: PodUid,
    pending: PendingExit,
    /// When it was taken (the relister's stamp).
    since: SystemTime,
    /// The CRI state was seen showing the exit (a listing, a probe): the pod's next status read
    /// compares them.
    shown: bool,
}

/// What a status read settled of an exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub id: String,
    pub uid: PodUid,
    /// None: the CRI showed it as taken; else the fields it shows otherwise (the CRI's kept), or
    /// `["state"]` for an exit let go after [`EXIT_HELD_FOR`].
    pub corrected: Option<Vec<&'static str>>,
}

/// The exits held, by container id. Only containers a record holds are here: an exit is taken for
/// a container of a record, and dropped with it.
#[derive(Debug, Default)]
pub struct HeldExits {
    held: HashMap<String, Held>,
}

impl HeldExits {
    /// Take `fact` for a container of pod `uid`, at `now`.
    pub fn take(&mut self, uid: &str, fact: ExitFact, now: SystemTime) {
        self.held.insert(
            fact.id.clone(),
            Held {
                uid: uid.to_owned(),
                pending: PendingExit::new(fact),
                since: now,
                shown: false,
            },
        );
    }

    pub fn holds(&self, id: &str) -> bool {
        self.held.contains_key(id)
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Pod `uid` as a listing of the runtime shows it (None: gone), at `now`: each held exit of
    /// its containers kept in it, or noted as shown; the exits of containers it no longer has are
    /// dropped (nothing is left to compare), and those held past [`EXIT_HELD_FOR`] let go.
    /// `fresh`: the listing is the runtime's, not a record's copy, whose exited containers may be
    /// held ones. Returns the exits let go.
    pub fn hold(&mut self, uid: &str, mut pod: Option<&mut RuntimePod>, now: SystemTime, fresh: bool) -> Vec<Settled> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let mut let_go = Vec::new();
        self.held.retain(|id, held| {
            if held.uid != uid {
                return true;
            }
            let Some(container) = pod
                .as_deref_mut()
                .and_then(|p| p.containers.iter_mut().find(|c| c.id == *id))
            else {
                return false;
            };
            if container.state == RuntimeContainerState::Exited {
                held.shown |= fresh;
                return true;
            }
            if now.duration_since(held.since).unwrap_or_default() >= EXIT_HELD_FOR {
                let_go.push(Settled {
                    id: id.clone(),
                    uid: uid.to_owned(),
                    corrected: Some(vec!["state"]),
                });
                return false;
            }
            container.state = RuntimeContainerState::Exited;
            true
        });
        let_go
    }

    /// [`Self::hold`] for every pod of a complete listing (`pods`, sorted by uid); a held exit
    /// whose pod the listing lacks is dropped.
    pub fn hold_all(&mut self, pods: &mut [RuntimePod], now: SystemTime) -> Vec<Settled> {
        let mut uids: Vec<PodUid> = self.held.values().map(|h| h.uid.clone()).collect();
        uids.sort();
        uids.dedup();
        let mut let_go = Vec::new();
        for uid in uids {
            let pod = pods
                .binary_search_by(|p| p.id.as_str().cmp(&uid))
                .ok()
                .or_else(|| pods.iter().position(|p| p.id == uid));
            let pod = pod.map(|at| &mut pods[at]);
            let_go.extend(self.hold(&uid, pod, now, true));
        }
        let_go
    }

    /// Container `id`'s CRI state was read showing its exit (or its removal) by a probe.
    pub fn shown(&mut self, id: &str) {
        if let Some(held) = self.held.get_mut(id) {
            held.shown = true;
        }
    }

    /// Whether a status read of pod `uid` would settle an exit (the CRI showed one).
    pub fn to_settle(&self, uid: &str) -> bool {
        self.held.values().any(|h| h.uid == uid && h.shown)
    }

    /// The held exits of pod `uid`, for its status read (which sets each one's outcome).
    pub fn of_pod(&self, uid: &str) -> Vec<PendingExit> {
        self.held
            .values()
            .filter(|h| h.uid == uid)
            .map(|h| h.pending.clone())
            .collect()
    }

    /// After a status read of pod `uid` with `read` (what [`Self::of_pod`] gave, outcomes set):
    /// exits the CRI shows are settled and dropped; those it does not show yet keep the reason
    /// written for them, and wait for the CRI again.
    pub fn after_read(&mut self, uid: &str, read: Vec<PendingExit>) -> Vec<Settled> {
        let mut settled = Vec::new();
        for pending in read {
            let id = pending.fact.id.clone();
            let Some(held) = self.held.get_mut(&id).filter(|h| h.uid == uid) else {
                continue;
            };
            match &pending.outcome {
                Some(ExitRead::Confirmed) => settled.push((id, None)),
                Some(ExitRead::Corrected(fields)) => settled.push((id, Some(fields.clone()))),
                Some(ExitRead::Ahead) => {
                    held.pending.reason = pending.reason;
                    held.shown = false;
                }
                None => {}
            }
        }
        settled
            .into_iter()
            .map(|(id, corrected)| {
                self.held.remove(&id);
                Settled {
                    id,
                    uid: uid.to_owned(),
                    corrected,
                }
            })
            .collect()
    }
}

/// Whether `last`, the pod's last status read, with `exits` written into it, shows exactly what
/// the records hold of the pod (`pod`): the same containers and sandboxes, each in the same state
/// (pure). Then, as far as the CRI state tells, nothing of the pod but these exits changed since
/// that read, and the exits are shown from it without reading the pod's status again
/// ([`Runtime::status_with_exits`](crate::runtime::Runtime::status_with_exits)): in a burst of
/// exits each read waits on a runtime busy with the burst itself, seconds on 2 cores. Any
/// difference (a container the read did not find, a state another change moved, an exit the CRI
/// showed first) leaves the pod to a status read.
pub fn last_status_holds(pod: &RuntimePod, last: &RuntimePodStatus, exits: &[PendingExit]) -> bool {
    let containers_hold = pod.containers.len() == last.container_statuses.len()
        && pod.containers.iter().all(|c| {
            let Some(s) = last.find_container(&c.id) else {
                return false;
            };
            match exits.iter().find(|e| e.fact.id == c.id) {
                // Shown exited already only by an earlier taking of this exit (which wrote its
                // reason): a CRI status that showed it would have settled it.
                Some(exit) => {
                    c.state == RuntimeContainerState::Exited
                        && (s.state != RuntimeContainerState::Exited || exit.reason.is_some())
                }
                None => s.state == c.state,
            }
        });
    let sandboxes_hold = pod.sandboxes.len() == last.sandbox_statuses.len()
        && pod.sandboxes.iter().all(|sandbox| {
            last.sandbox_statuses
                .iter()
                .find(|s| s.id == sandbox.id)
                .is_some_and(|s| sandbox_as_container_state(s.state) == sandbox.state)
        });
    containers_hold && sandboxes_hold
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::RuntimeContainer;

    fn pod(uid: &str, containers: &[(&str, RuntimeContainerState)]) -> RuntimePod {
        RuntimePod {
            id: uid.into(),
            containers: containers
                .iter()
                .map(|(id, state)| RuntimeContainer {
                    id: (*id).into(),
                    sandbox_id: "s1".into(),
                    name: (*id).into(),
                    state: *state,
                    created_at: 1,
                    attempt: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn fact(id: &str) -> ExitFact {
        ExitFact {
            id: id.into(),
            exit_code: 1,
            finished_at: 5,
            oom: false,
        }
    }

    use RuntimeContainerState::{Exited, Running};

    #[test]
    fn a_held_exit_keeps_its_container_exited_until_the_cri_shows_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut exits = HeldExits::default();
        exits.take("u1", fact("c1"), t0);
        // The CRI lags: the listing says it runs; held exited, nothing to settle yet.
        let mut listed = pod("u1", &[("c1", Running), ("c2", Running)]);
        assert!(exits.hold("u1", Some(&mut listed), t0, true).is_empty());
        assert_eq!(listed, pod("u1", &[("c1", Exited), ("c2", Running)]));
        assert!(!exits.to_settle("u1"));
        // Another pod's listing changes nothing of it.
        let mut other = pod("u2", &[("c1", Running)]);
        exits.hold("u2", Some(&mut other), t0, true);
        assert_eq!(other, pod("u2", &[("c1", Running)]));
        // A record's copy, exited by the hold itself, does not count as the CRI showing it.
        let mut copy = pod("u1", &[("c1", Exited)]);
        exits.hold("u1", Some(&mut copy), t0, false);
        assert!(!exits.to_settle("u1"));
        // The CRI lists it exited: the next status read settles it.
        let mut listed = pod("u1", &[("c1", Exited)]);
        exits.hold("u1", Some(&mut listed), t0, true);
        assert!(exits.to_settle("u1"));
        let mut read = exits.of_pod("u1");
        read[0].outcome = Some(ExitRead::Confirmed);
        assert_eq!(
            exits.after_read("u1", read),
            [Settled {
                id: "c1".into(),
                uid: "u1".into(),
                corrected: None
            }]
        );
        assert!(exits.is_empty());
    }

    #[test]
    fn a_read_that_still_lags_keeps_the_reason_it_wrote_and_waits_again() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut exits = HeldExits::default();
        exits.take("u1", fact("c1"), t0);
        exits.shown("c1");
        let mut read = exits.of_pod("u1");
        read[0].outcome = Some(ExitRead::Ahead);
        read[0].reason = Some(b"OOMKilled".to_vec());
        assert!(exits.after_read("u1", read).is_empty());
        assert!(!exits.to_settle("u1"), "waits for the CRI to show it again");
        assert_eq!(exits.of_pod("u1")[0].reason.as_deref(), Some(&b"OOMKilled"[..]));
        // A correction settles it too, with the fields.
        let mut read = exits.of_pod("u1");
        read[0].outcome = Some(ExitRead::Corrected(vec!["reason"]));
        let settled = exits.after_read("u1", read);
        assert_eq!(settled[0].corrected, Some(vec!["reason"]));
        assert!(!exits.holds("c1"));
    }

    #[test]
    fn exits_of_containers_or_pods_gone_are_dropped_and_old_ones_let_go() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut exits = HeldExits::default();
        exits.take("u1", fact("c1"), t0);
        exits.take("u1", fact("c2"), t0);
        exits.take("u2", fact("c3"), t0);
        // c2 removed from u1; u2 gone from a complete listing.
        let mut pods = vec![pod("u1", &[("c1", Running)])];
        assert!(exits.hold_all(&mut pods, t0).is_empty());
        assert!(exits.holds("c1") && !exits.holds("c2") && !exits.holds("c3"));
        // Held past its time against a CRI that still says it runs: let go, the CRI's state wins.
        let late = t0 + EXIT_HELD_FOR;
        let mut listed = pod("u1", &[("c1", Running)]);
        let let_go = exits.hold("u1", Some(&mut listed), late, true);
        assert_eq!(let_go[0].corrected, Some(vec!["state"]));
        assert_eq!(listed, pod("u1", &[("c1", Running)]));
        assert!(exits.is_empty());
        // A pod gone from its own listing drops its exits.
        exits.take("u1", fact("c1"), t0);
        exits.hold("u1", None, t0, true);
        assert!(exits.is_empty());
    }

    #[test]
    fn an_exit_is_shown_from_the_last_read_only_while_it_shows_what_the_records_hold() {
        use crate::kubecontainer::SandboxState;
        use crate::status::generate::test_support::{ready_sandbox, runtime_status};
        let last = |states: &[(&str, RuntimeContainerState)]| RuntimePodStatus {
            id: "u1".into(),
            container_statuses: states
                .iter()
                .map(|(id, state)| runtime_status(id, id, *state, 1))
                .collect(),
            sandbox_statuses: vec![ready_sandbox("10.0.0.1")],
            ..Default::default()
        };
        let with_sandbox = |mut pod: RuntimePod, state| {
            pod.sandboxes.push(crate::kubecontainer::RuntimeContainer {
                id: "s1".into(),
                sandbox_id: String::new(),
                name: String::new(),
                state,
                created_at: 1,
                attempt: 0,
            });
            pod
        };
        let taken = |id: &str| vec![PendingExit::new(fact(id))];
        // The records hold c1 exited by the exit just taken; the last read found it running.
        let records = with_sandbox(pod("u1", &[("c1", Exited), ("c2", Running)]), Running);
        let read = last(&[("c1", Running), ("c2", Running)]);
        assert!(last_status_holds(&records, &read, &taken("c1")));
        // No exit for c1: the records and the read differ.
        assert!(!last_status_holds(&records, &read, &[]));
        // Another container changed since the read (the records saw c2 exit, not yet read).
        let changed = with_sandbox(pod("u1", &[("c1", Exited), ("c2", Exited)]), Running);
        assert!(!last_status_holds(&changed, &read, &taken("c1")));
        // A container the read did not find, or one more than the records hold.
        assert!(!last_status_holds(&records, &last(&[("c1", Running)]), &taken("c1")));
        let more = last(&[("c1", Running), ("c2", Running), ("c3", Running)]);
        assert!(!last_status_holds(&records, &more, &taken("c1")));
        // The sandbox: gone from the read, or in another state.
        let mut no_sandbox = read.clone();
        no_sandbox.sandbox_statuses.clear();
        assert!(!last_status_holds(&records, &no_sandbox, &taken("c1")));
        let mut not_ready = read.clone();
        not_ready.sandbox_statuses[0].state = SandboxState::NotReady;
        assert!(!last_status_holds(&records, &not_ready, &taken("c1")));
        // The read shows c1 exited: by this exit written earlier (its reason set), it holds; a read
        // of the CRI that showed it has to settle it instead.
        let shown = last(&[("c1", Exited), ("c2", Running)]);
        assert!(!last_status_holds(&records, &shown, &taken("c1")));
        let mut written = taken("c1");
        written[0].reason = Some(b"Error".to_vec());
        assert!(last_status_holds(&records, &shown, &written));
    }
}
