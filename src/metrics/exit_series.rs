//! The bookkeeping of `plegd_container_exits_total`'s series: which pods they name, so that they
//! leave with them, and the cap on how many there are ([`MAX_EXIT_SERIES`]) — the one family whose
//! labels come from what tenants name (namespace, pod, container).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::warn;

/// A container's exit: its pod and name, and the reason its status gives.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExitLabel {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub reason: String,
}

/// How long a pod's `plegd_container_exits_total` series stay after the pod left the node: longer
/// than a usual scrape interval (Prometheus' default is 1 min), so that a scrape sees a pod's last
/// exits before its series go.
pub const EXIT_SERIES_LINGER: Duration = Duration::from_secs(120);

/// At most this many `plegd_container_exits_total` series name a pod. Past it, an exit that would
/// need a new one is counted in a series of its reason alone (namespace, pod and container empty).
pub const MAX_EXIT_SERIES: usize = 2000;

/// The reasons the series without a pod keep; any other is counted as `Other`, so that their
/// number is bounded too.
const EXIT_REASONS: [&str; 6] = [
    "Completed",
    "Error",
    "OOMKilled",
    "ContainerStatusUnknown",
    "StartError",
    "ContainerCannotRun",
];

/// Which pods the series of `plegd_container_exits_total` belong to, so that they leave with them
/// (kube-state-metrics drops a deleted pod's series alike): a pod that left the node keeps its
/// series for [`EXIT_SERIES_LINGER`], then every series no pod on the node shares is removed. Pods
/// of one name one after the other (a StatefulSet's) share their series while either is there.
#[derive(Debug)]
pub(super) struct ExitSeries {
    max: usize,
    /// By pod uid: the series its exits were counted in, and when it left the node.
    pods: HashMap<String, PodExits>,
    /// How many pods hold each series that names a pod.
    holders: HashMap<ExitLabel, usize>,
    /// The cap was reached (and said so once).
    capped: bool,
    /// When the earliest pod that left did (or earlier): before it plus [`EXIT_SERIES_LINGER`],
    /// there is nothing to drop, and the relist that asks pays nothing.
    earliest_left: Option<SystemTime>,
}

#[derive(Debug, Default)]
struct PodExits {
    labels: Vec<ExitLabel>,
    left_at: Option<SystemTime>,
}

impl Default for ExitSeries {
    fn default() -> Self {
        Self::with_max(MAX_EXIT_SERIES)
    }
}

impl ExitSeries {
    fn with_max(max: usize) -> Self {
        Self {
            max,
            pods: HashMap::new(),
            holders: HashMap::new(),
            capped: false,
            earliest_left: None,
        }
    }

    /// The series an exit of pod `uid` is counted in: `label`, unless that would be a series past
    /// the cap, then its reason's series without a pod.
    pub(super) fn series_for(&mut self, uid: &str, label: ExitLabel) -> ExitLabel {
        let held = self.pods.get(uid).is_some_and(|p| p.labels.contains(&label));
        if !held {
            if !self.holders.contains_key(&label) && self.holders.len() >= self.max {
                if !self.capped {
                    self.capped = true;
                    warn!(
                        max = self.max,
                        "plegd_container_exits_total names at most this many pods' containers; further exits are counted by reason alone"
                    );
                }
                let reason = EXIT_REASONS
                    .iter()
                    .find(|r| **r == label.reason)
                    .copied()
                    .unwrap_or("Other");
                return ExitLabel {
                    namespace: String::new(),
                    pod: String::new(),
                    container: String::new(),
                    reason: reason.to_owned(),
                };
            }
            *self.holders.entry(label.clone()).or_default() += 1;
            self.pods.entry(uid.to_owned()).or_default().labels.push(label.clone());
        }
        // A pod seen again (a static pod's uid is its config's hash) is on the node again.
        if let Some(pod) = self.pods.get_mut(uid) {
            pod.left_at = None;
        }
        label
    }

    pub(super) fn pod_left(&mut self, uid: &str, at: SystemTime) {
        if let Some(pod) = self.pods.get_mut(uid) {
            let left = *pod.left_at.get_or_insert(at);
            self.earliest_left = Some(self.earliest_left.map_or(left, |e| e.min(left)));
        }
    }

    /// Forget the pods that left at least [`EXIT_SERIES_LINGER`] before `now`; the series none of
    /// the remaining pods holds are removed from `family`.
    pub(super) fn drop_departed(&mut self, family: &Family<ExitLabel, Counter>, now: SystemTime) {
        let is_due = |left: SystemTime| now.duration_since(left).unwrap_or_default() >= EXIT_SERIES_LINGER;
        if !self.earliest_left.is_some_and(is_due) {
            return;
        }
        let due = |p: &PodExits| {
            p.left_at
                .is_some_and(|at| now.duration_since(at).unwrap_or_default() >= EXIT_SERIES_LINGER)
        };
        let departed: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| due(p))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in departed {
            let Some(pod) = self.pods.remove(&uid) else { continue };
            for label in pod.labels {
                let Some(holders) = self.holders.get_mut(&label) else {
                    continue;
                };
                *holders -= 1;
                if *holders == 0 {
                    self.holders.remove(&label);
                    family.remove(&label);
                }
            }
        }
        if self.holders.len() < self.max {
            self.capped = false;
        }
        // A pod that came back since it left no longer counts (its `left_at` is gone).
        self.earliest_left = self.pods.values().filter_map(|p| p.left_at).min();
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    /// The series of `plegd_container_exits_total` are capped: past the cap, an exit that would
    /// need a new series is counted by its reason alone (an unknown reason as `Other`); the series
    /// a pod already holds still count; room made by departed pods is used again.
    #[test]
    fn exit_series_are_capped() {
        let family = Family::<ExitLabel, Counter>::default();
        let mut series = ExitSeries::with_max(2);
        let label = |pod: &str, reason: &str| ExitLabel {
            namespace: "default".into(),
            pod: pod.into(),
            container: "app".into(),
            reason: reason.into(),
        };
        let count = |series: &mut ExitSeries, uid: &str, l: ExitLabel| {
            let s = series.series_for(uid, l);
            family.get_or_create(&s).inc();
            s
        };
        assert_eq!(count(&mut series, "u1", label("a", "Error")), label("a", "Error"));
        assert_eq!(count(&mut series, "u2", label("b", "Error")), label("b", "Error"));
        let unlabelled = |reason: &str| ExitLabel {
            namespace: String::new(),
            pod: String::new(),
            container: String::new(),
            reason: reason.into(),
        };
        assert_eq!(
            count(&mut series, "u3", label("c", "OOMKilled")),
            unlabelled("OOMKilled")
        );
        assert_eq!(count(&mut series, "u3", label("c", "Whatever")), unlabelled("Other"));
        assert_eq!(
            count(&mut series, "u1", label("a", "Error")),
            label("a", "Error"),
            "a series held keeps counting"
        );
        assert_eq!(family.get_or_create(&label("a", "Error")).get(), 2);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        series.pod_left("u1", t0);
        series.drop_departed(&family, t0 + EXIT_SERIES_LINGER / 2);
        assert_eq!(series.holders.len(), 2, "lingering");
        series.drop_departed(&family, t0 + EXIT_SERIES_LINGER);
        assert_eq!(series.holders.len(), 1);
        assert_eq!(
            count(&mut series, "u3", label("c", "OOMKilled")),
            label("c", "OOMKilled")
        );
        let mut kept = 0;
        let text = {
            let mut registry = Registry::default();
            registry.register("exits", "", family.clone());
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
            out
        };
        for line in text.lines().filter(|l| l.starts_with("exits_total{")) {
            assert!(!line.contains("pod=\"a\""), "a's series is gone: {text}");
            kept += 1;
        }
        assert_eq!(kept, 4, "b, c, and the two by reason alone: {text}");
    }
}
