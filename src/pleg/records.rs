//! The relister's records of pods (upstream's `podRecords`: the old and the current view of each
//! pod) and what the relister keeps beside them: which pod holds each id, the pods to re-inspect,
//! the events the channel had no room for, and the exits held ahead of the CRI state. Pure state,
//! changed only by [`GenericPleg`](super::GenericPleg) under its lock.

use std::collections::{HashMap, HashSet};

use super::events::{PlegContainerState, PodLifecycleEvent, pleg_state};
use super::exits::HeldExits;
use crate::kubecontainer::{PodUid, RuntimePod};

/// Old and current view of one pod (`podRecord`).
#[derive(Debug, Default, Clone)]
pub struct PodRecord {
    pub old: Option<RuntimePod>,
    pub current: Option<RuntimePod>,
    /// Which setting of the records last set `current` ([`RelistState::reads`]): a probe's answer
    /// is applied only to the record it was compared with.
    pub(super) read: u64,
}

/// The relister's records (upstream's `podRecords`) and what it keeps beside them per pod.
#[derive(Debug, Default)]
pub(super) struct RelistState {
    pub(super) records: HashMap<PodUid, PodRecord>,
    /// The pod each container and sandbox id was recorded under: every id a record holds (old or
    /// current) is here, so that [`GenericPleg::pod_of`](super::GenericPleg::pod_of) (asked for every trigger) looks one up
    /// instead of searching every record. An id whose record has since dropped it may linger until
    /// the next complete relist prunes it; a lookup checks the record still holds it.
    pub(super) owners: HashMap<String, PodUid>,
    /// Pods whose status read failed: re-inspected at the next relist.
    pub(super) reinspect: HashSet<PodUid>,
    /// Events that did not fit in the channel, per pod, oldest first.
    pub(super) undelivered: HashMap<PodUid, Vec<PodLifecycleEvent>>,
    /// How many times records were set (complete relists, pod relists, probes applied).
    pub(super) reads: u64,
    /// Exits the runtime announced ahead of its CRI state, held in the records until a status
    /// read shows them ([`GenericPleg::containers_exited`](super::GenericPleg::containers_exited)).
    pub(super) exits: HeldExits,
}

impl RelistState {
    /// `podRecords.setCurrent`. The held exits are kept in `pods` first ([`HeldExits::hold_all`]).
    pub(super) fn set_current(&mut self, pods: Vec<RuntimePod>) {
        self.reads += 1;
        let read = self.reads;
        for record in self.records.values_mut() {
            record.current = None;
            record.read = read;
        }
        for pod in pods {
            self.own(&pod.id, &pod);
            match self.records.get_mut(&pod.id) {
                Some(record) => record.current = Some(pod),
                None => {
                    let uid = pod.id.clone();
                    self.records.insert(
                        uid,
                        PodRecord {
                            old: None,
                            current: Some(pod),
                            read,
                        },
                    );
                }
            }
        }
    }

    /// Set pod `uid`'s current record (a relist of that pod alone, or a probe's answer).
    pub(super) fn set_current_of(&mut self, uid: &str, pod: Option<RuntimePod>) {
        if let Some(pod) = &pod {
            self.own(uid, pod);
        }
        self.reads += 1;
        let record = self.records.entry(uid.to_owned()).or_default();
        record.current = pod;
        record.read = self.reads;
    }

    /// What pod `uid`'s records say of `id`, and which setting of the records that is.
    pub(super) fn recorded(&self, uid: &str, id: &str) -> (PlegContainerState, u64) {
        let record = self.records.get(uid);
        let pod = record.and_then(|r| r.current.as_ref().or(r.old.as_ref()));
        (pleg_state(pod, id), record.map_or(0, |r| r.read))
    }

    /// Note the ids of `pod`, recorded under `uid`, as that record's (allocating only for an id
    /// not noted so yet).
    pub(super) fn own(&mut self, uid: &str, pod: &RuntimePod) {
        for c in pod.containers.iter().chain(&pod.sandboxes) {
            if self.owners.get(&c.id).is_none_or(|owner| owner != uid) {
                self.owners.insert(c.id.clone(), uid.to_owned());
            }
        }
    }

    /// Drop the ids no record holds any more (after a complete relist: the ids of pods gone and of
    /// containers removed since the last one).
    pub(super) fn prune_owners(&mut self) {
        let records = &self.records;
        self.owners
            .retain(|id, uid| records.get(uid).is_some_and(|r| record_holds(r, id)));
    }

    /// The pod whose record (old or current) holds container or sandbox `id`.
    pub(super) fn owner_of(&self, id: &str) -> Option<&PodUid> {
        self.owners
            .get(id)
            .filter(|uid| self.records.get(*uid).is_some_and(|r| record_holds(r, id)))
    }

    /// After one pod's sync: a pod whose status read failed is re-inspected at the next relist.
    /// Returns whether the pod changed (a failed read counts as a change).
    pub(super) fn pod_relisted(&mut self, uid: &str, outcome: PodOutcome) -> bool {
        match outcome {
            PodOutcome::RefreshFailed => {
                self.reinspect.insert(uid.to_owned());
                true
            }
            PodOutcome::Refreshed { changed } => {
                self.reinspect.remove(uid);
                changed
            }
            PodOutcome::Unchanged => false,
        }
    }

    /// `podRecords.update`: old := current; a pod that no longer exists loses its record.
    pub(super) fn advance(&mut self, uid: &str) {
        if let Some(record) = self.records.get_mut(uid) {
            match record.current.take() {
                Some(current) => record.old = Some(current),
                None => {
                    self.records.remove(uid);
                }
            }
        }
    }
}

/// What one pod's sync did with its status read.
pub(super) enum PodOutcome {
    Unchanged,
    /// The status was read; `changed` says whether any container or sandbox changed state.
    Refreshed {
        changed: bool,
    },
    RefreshFailed,
}

/// Whether a record (old or current) holds container or sandbox `id`.
pub(super) fn record_holds(record: &PodRecord, id: &str) -> bool {
    [&record.current, &record.old]
        .into_iter()
        .flatten()
        .any(|p| p.find_any(id).is_some())
}

/// Whether `record` (old or current) holds `id` as a sandbox.
pub(super) fn record_holds_sandbox(record: Option<&PodRecord>, id: &str) -> bool {
    record
        .into_iter()
        .flat_map(|r| [r.current.as_ref(), r.old.as_ref()])
        .flatten()
        .any(|p| p.find_sandbox(id).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids' owners answer as a search of every record would, through complete relists, pod
    /// relists, records advanced and dropped, ids removed and containers moved between pods.
    #[test]
    fn the_owner_of_an_id_is_the_record_that_holds_it() {
        use crate::kubecontainer::{RuntimeContainer, RuntimeContainerState};
        let searched = |state: &RelistState, id: &str| -> Option<PodUid> {
            state
                .records
                .iter()
                .find(|(_, r)| record_holds(r, id))
                .map(|(uid, _)| uid.clone())
        };
        // Ids starting with `s` are sandboxes, the others containers.
        let pod = |uid: &str, ids: &[&str]| {
            let entries = |sandboxes: bool| {
                ids.iter()
                    .filter(|id| id.starts_with('s') == sandboxes)
                    .map(|id| RuntimeContainer {
                        id: (*id).into(),
                        sandbox_id: String::new(),
                        name: String::new(),
                        state: RuntimeContainerState::Running,
                        created_at: 0,
                        attempt: 0,
                    })
                    .collect()
            };
            RuntimePod {
                id: uid.into(),
                containers: entries(false),
                sandboxes: entries(true),
                ..RuntimePod::default()
            }
        };
        let ids = ["s1", "c1", "c2", "s2", "c3", "c4", "c9"];
        let mut state = RelistState::default();
        let check = |state: &RelistState, step: &str| {
            for id in ids {
                assert_eq!(state.owner_of(id).cloned(), searched(state, id), "{step}: {id}");
            }
        };
        state.set_current(vec![pod("a", &["s1", "c1", "c2"]), pod("b", &["s2", "c3"])]);
        check(&state, "first relist");
        state.advance("a");
        state.advance("b");
        check(&state, "advanced");
        state.set_current_of("a", Some(pod("a", &["s1", "c2", "c4"])));
        check(&state, "a pod relisted: c1 removed, c4 new");
        state.advance("a");
        check(&state, "c1 gone from both of a's records");
        // A pod relist by uid whose answer names another pod: its ids are the record's they are
        // kept under.
        state.set_current_of("b", Some(pod("x", &["s2", "c3"])));
        check(&state, "b relisted as x");
        state.set_current_of("b", None);
        state.advance("b");
        check(&state, "b gone");
        // A runtime that lists the ids of a pod gone under another one; c4 is removed from a.
        state.set_current(vec![pod("a", &["s1", "c2"]), pod("c", &["s2", "c3"])]);
        check(&state, "b's ids listed under c");
        state.advance("a");
        state.advance("c");
        state.prune_owners();
        check(&state, "pruned");
        assert_eq!(state.owners.len(), 4, "{:?}", state.owners);
        state.set_current(vec![]);
        state.advance("a");
        state.advance("c");
        state.prune_owners();
        check(&state, "every pod gone");
        assert!(state.owners.is_empty() && state.records.is_empty());
    }
}
