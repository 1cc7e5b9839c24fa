//! Status reports: the kubelet-equivalent status the syncLoop last generated for each pod, and the
//! apiserver's copy (the informer's) it was generated against, for whoever follows them
//! (`plegd status`, the observation API's `StatusService`). A follower gets every pod's latest
//! report, then each new one and each pod that goes; one that reads too slowly misses some, is told
//! how many and follows again from every pod's latest report, never slowing the syncLoop. How the
//! two statuses differ is computed for followers only ([`StatusReport::differences`]); whether they
//! are the same, once per report (a status the apiserver's copy holds is kept once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::broadcast;

use super::compare::{Difference, Probed, differences};
use super::generate::CONTAINERS_RUNNING;
use super::semantic;
use crate::apiserver::pod::ApiPod;

/// One generated status of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// The informer's copy of the pod the status was generated against.
    pub pod: Arc<ApiPod>,
    /// The kubelet-equivalent status plegd generated (in conditions and shadow mode, what it would
    /// write in full mode); `None` when the apiserver holds it already as `pod`'s status
    /// ([`holds`]), as it does for most pods at rest (plegd's own write, or the
    /// kubelet's, came back): held once, not twice, and shown in the apiserver's form.
    generated: Option<PodStatus>,
    /// When it was generated.
    pub generated_at: SystemTime,
    /// When the runtime status it was generated from was read (the start of the read).
    pub runtime_read_at: SystemTime,
}

impl StatusReport {
    /// The report of `status`, generated at `generated_at` against `pod` from a runtime status
    /// read at `runtime_read_at`.
    pub fn new(pod: Arc<ApiPod>, status: PodStatus, generated_at: SystemTime, runtime_read_at: SystemTime) -> Self {
        let held = pod.status.as_ref().is_some_and(|held| holds(held, &status));
        let generated = (!held).then_some(status);
        Self {
            pod,
            generated,
            generated_at,
            runtime_read_at,
        }
    }

    /// The report of `status` as it was generated, kept even where the apiserver's copy holds it
    /// already (`--status-report-form=generated`): one more status in memory, for whoever diffs
    /// plegd's output against a kubelet's.
    pub fn as_generated(
        pod: Arc<ApiPod>,
        status: PodStatus,
        generated_at: SystemTime,
        runtime_read_at: SystemTime,
    ) -> Self {
        Self {
            pod,
            generated: Some(status),
            generated_at,
            runtime_read_at,
        }
    }

    /// The status plegd generated; when the apiserver's copy holds it already, in the form the
    /// apiserver stores it (the copy's own).
    pub fn status(&self) -> &PodStatus {
        static NONE: std::sync::LazyLock<PodStatus> = std::sync::LazyLock::new(PodStatus::default);
        // `generated` is only `None` when the pod has a status (`new`).
        self.generated.as_ref().or(self.pod.status.as_ref()).unwrap_or(&NONE)
    }

    /// Where the generated status differs from the apiserver's copy.
    pub fn differences(&self) -> Vec<Difference> {
        if self.generated.is_none() {
            return Vec::new();
        }
        let apiserver = self.pod.status.clone().unwrap_or_default();
        differences(&apiserver, self.status(), &Probed::of(&self.pod))
    }

    fn same_inputs(&self, other: &StatusReport) -> bool {
        self.pod.metadata.resource_version == other.pod.metadata.resource_version && self.status() == other.status()
    }
}

/// Whether the apiserver holds `generated` already as `held`: the same status in the form it stores
/// ([`semantic::canonical`]), plegd's own condition wherever it is (a status patch merges
/// conditions by type, so the stored list has it last). The kubelet's conditions keep their order:
/// theirs differing is a difference ([`StatusReport::differences`] shows it). Not "no
/// differences": those leave plegd's own condition out, and a report must show a change of it.
fn holds(held: &PodStatus, generated: &PodStatus) -> bool {
    let own_last = |status: &PodStatus| {
        let mut status = semantic::canonical(status);
        if let Some(conditions) = status.conditions.as_mut() {
            // Stable: only plegd's own condition moves.
            conditions.sort_by_key(|c| c.type_ == CONTAINERS_RUNNING);
        }
        status
    };
    own_last(held) == own_last(generated)
}

/// What a follower gets after every pod's latest report.
#[derive(Debug, Clone)]
pub enum Followed {
    /// A pod's new report, with the pod's uid.
    Report(String, Arc<StatusReport>),
    /// A pod whose report was followed is gone (it left the node, or plegd no longer tracks it):
    /// its uid, and the apiserver copy its last report was generated against.
    Removed { uid: String, pod: Arc<ApiPod> },
}

/// Reports kept for a follower that reads more slowly than they come.
const CAPACITY: usize = 1024;

struct Inner {
    /// The latest report of each pod, by uid.
    latest: HashMap<String, Arc<StatusReport>>,
    sender: broadcast::Sender<Followed>,
}

/// Where the syncLoop puts reports; cloned into the observation API to follow them.
#[derive(Clone)]
pub struct StatusReports {
    inner: Arc<Mutex<Inner>>,
}

impl Default for StatusReports {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                latest: HashMap::new(),
                sender: broadcast::channel(CAPACITY).0,
            })),
        }
    }
}

impl StatusReports {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves a map that is still whole.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keep `report` as its pod's latest, and send it to followers, unless it was generated from
    /// the same inputs with the same result as the one kept.
    pub fn put(&self, uid: &str, report: StatusReport) {
        let mut inner = self.lock();
        if inner.latest.get(uid).is_some_and(|old| old.same_inputs(&report)) {
            // The one kept says the same (followers were sent it).
            return;
        }
        let report = Arc::new(report);
        inner.latest.insert(uid.to_owned(), report.clone());
        if inner.sender.receiver_count() > 0 {
            let _ = inner.sender.send(Followed::Report(uid.to_owned(), report));
        }
    }

    /// The pod is gone: forget its report, and tell followers.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.lock();
        if let Some(last) = inner.latest.remove(uid)
            && inner.sender.receiver_count() > 0
        {
            let _ = inner.sender.send(Followed::Removed {
                uid: uid.to_owned(),
                pod: last.pod.clone(),
            });
        }
    }

    /// Every pod's latest report (with its uid), and what follows from then on.
    pub fn follow(&self) -> (Vec<(String, Arc<StatusReport>)>, broadcast::Receiver<Followed>) {
        let inner = self.lock();
        let latest = inner.latest.iter().map(|(uid, r)| (uid.clone(), r.clone())).collect();
        (latest, inner.sender.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rv: &str, phase: &str) -> StatusReport {
        let mut pod = ApiPod::default();
        pod.metadata.resource_version = Some(rv.into());
        let status = PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        };
        StatusReport::new(Arc::new(pod), status, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH)
    }

    /// A generated status the apiserver's copy holds already (in the apiserver's form, plegd's own
    /// condition anywhere) is held once (the pod's), and read back the same; one that differs is
    /// held beside it. A pod stored without a status keeps the generated one, even the empty
    /// status.
    #[test]
    fn a_status_the_pod_holds_is_kept_once() {
        let pod = Arc::new(ApiPod {
            status: Some(report("1", "Running").status().clone()),
            ..ApiPod::default()
        });
        let at = SystemTime::UNIX_EPOCH;
        let same = StatusReport::new(pod.clone(), pod.status.clone().unwrap(), at, at);
        assert!(same.generated.is_none());
        assert_eq!(same.status().phase.as_deref(), Some("Running"));
        // As the apiserver writes it back: an empty message is dropped.
        let mut stored = pod.status.clone().unwrap();
        stored.message = Some(String::new());
        assert!(StatusReport::new(pod.clone(), stored, at, at).generated.is_none());
        // Conditions in another order (plegd's own first, the stored list has it last).
        let condition = |type_: &str| k8s_openapi::api::core::v1::PodCondition {
            type_: type_.into(),
            status: "True".into(),
            ..Default::default()
        };
        let mut stored = pod.status.clone().unwrap();
        stored.conditions = Some(vec![
            condition("Initialized"),
            condition("Ready"),
            condition(CONTAINERS_RUNNING),
        ]);
        let mut generated = stored.clone();
        generated.conditions.as_mut().unwrap().rotate_right(1);
        let mut ordered = (*pod).clone();
        ordered.status = Some(stored);
        let ordered = Arc::new(ordered);
        assert!(
            StatusReport::new(ordered.clone(), generated.clone(), at, at)
                .generated
                .is_none()
        );
        // The kubelet's conditions in another order: a difference, shown.
        let mut swapped = generated.clone();
        swapped.conditions.as_mut().unwrap().swap(1, 2);
        let reordered = StatusReport::new(ordered.clone(), swapped, at, at);
        assert!(reordered.generated.is_some());
        assert_eq!(reordered.differences().len(), 1, "{:?}", reordered.differences());
        generated.conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(StatusReport::new(ordered, generated, at, at).generated.is_some());
        let failed = report("1", "Failed").status().clone();
        let other = StatusReport::new(pod.clone(), failed.clone(), at, at);
        assert_eq!(other.status(), &failed);
        assert_eq!(other.differences().len(), 1, "{:?}", other.differences());
        let bare = StatusReport::new(Arc::new(ApiPod::default()), PodStatus::default(), at, at);
        assert_eq!(bare.status(), &PodStatus::default());
        assert!(bare.generated.is_some());
        // `--status-report-form=generated`: the status as generated, though the pod holds it.
        let mut unstored = pod.status.clone().unwrap();
        unstored.message = Some(String::new());
        let as_generated = StatusReport::as_generated(pod.clone(), unstored.clone(), at, at);
        assert_eq!(as_generated.status(), &unstored);
        assert!(
            as_generated.differences().is_empty(),
            "the same status, in another form"
        );
    }

    /// A follower gets the latest of each pod first, then each change; a report from the same
    /// inputs with the same result is not sent again; a removed pod is not in the snapshot.
    #[test]
    fn followers_get_the_latest_then_changes() {
        let reports = StatusReports::default();
        reports.put("a", report("1", "Pending"));
        reports.put("a", report("2", "Running"));
        reports.put("b", report("1", "Running"));
        reports.put("c", report("1", "Running"));
        reports.remove("c");
        let (snapshot, mut rx) = reports.follow();
        let mut phases: Vec<_> = snapshot
            .iter()
            .map(|(_, r)| {
                (
                    r.pod.metadata.resource_version.clone().unwrap(),
                    r.status().phase.clone().unwrap(),
                )
            })
            .collect();
        phases.sort();
        assert_eq!(
            phases,
            vec![("1".into(), "Running".into()), ("2".into(), "Running".into())]
        );
        reports.put("a", report("2", "Running"));
        reports.put("a", report("3", "Running"));
        reports.put("b", report("1", "Succeeded"));
        reports.remove("b");
        reports.remove("never-reported");
        let got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|f| match f {
                Followed::Report(_, r) => (
                    r.pod.metadata.resource_version.clone().unwrap(),
                    r.status().phase.clone().unwrap(),
                ),
                Followed::Removed { uid, .. } => ("removed".into(), uid),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("3".into(), "Running".into()),
                ("1".into(), "Succeeded".into()),
                ("removed".into(), "b".into())
            ]
        );
    }
}
