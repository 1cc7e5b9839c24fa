//! plegd's metrics, named after the kubelet's with a `plegd_` prefix so that existing alerts
//! translate (`kubelet_pleg_relist_duration_seconds` → `plegd_pleg_relist_duration_seconds`).
//! One [`Metrics`] is created per process and shared; the HTTP endpoint that serves the registry
//! lives with the daemon.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Prometheus' default buckets, which the kubelet uses for its relist histograms.
const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub container_state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub verb: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FieldLabel {
    pub field: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: String,
}

fn register(
    registry: &mut Registry,
    names: &mut Vec<String>,
    name: &str,
    help: &str,
    metric: impl prometheus_client::registry::Metric,
) {
    names.push(format!("plegd_{name}"));
    registry.register(name, help, metric);
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Every metric plegd keeps.
#[derive(Debug)]
pub struct Metrics {
    pub relist_duration: Histogram,
    pub relist_interval: Histogram,
    pub last_seen: Gauge<f64, AtomicU64>,
    pub discard_events: Counter,
    pub informer_errors: Counter,
    pub kube_events_dropped: Counter,
    pub connections_refused: Family<ListenerLabel, Counter>,
    pub running_pods: Gauge,
    pub running_containers: Family<StateLabel, Gauge>,
    pub runtime_bad_data: Family<KindLabel, Counter>,
    pub runtime_errors: Family<OperationLabel, Counter>,
    pub pod_status_refresh_errors: Counter,
    pub events_sent: Family<KindLabel, Counter>,
    pub trigger_connects: Family<SourceLabel, Counter>,
    pub trigger_errors: Family<SourceLabel, Counter>,
    /// Events a runtime replayed on connection (older than the subscription), not acted on.
    pub trigger_replayed: Family<SourceLabel, Counter>,
    pub triggers: Family<SourceLabel, Counter>,
    pub trigger_relists: Family<KindLabel, Counter>,
    pub status_writes: Family<ResultLabel, Counter>,
    /// DELETEs of finished pods (full mode), by result.
    pub pod_deletions: Family<ResultLabel, Counter>,
    pub pod_status_sync_duration: Histogram,
    /// Pod syncs skipped because the pod's runtime status could not be read (FailedSync).
    pub failed_syncs: Counter,
    pub shadow_differences: Family<FieldLabel, Counter>,
    pub event_latency: Histogram,
    pub observer_lagged: Counter,
    pub process_resident_memory: Gauge,
    pub process_cpu_percent: Gauge<f64, AtomicU64>,
    pub process_open_fds: Gauge,
    pub runtime_tasks: Gauge,
    pub node_memory_total: Gauge,
    pub node_memory_available: Gauge,
    pub node_cpus: Gauge,
    pub apiserver_requests: Family<RequestLabel, Counter>,
    registry: Registry,
    names: Vec<String>,
}

impl Metrics {
    pub fn new() -> Self {
        let relist_duration = default_histogram();
        let relist_interval = default_histogram();
        let last_seen = Gauge::<f64, AtomicU64>::default();
        let discard_events = Counter::default();
        let informer_errors = Counter::default();
        let kube_events_dropped = Counter::default();
        let connections_refused = Family::<ListenerLabel, Counter>::default();
        let running_pods = Gauge::default();
        let running_containers = Family::<StateLabel, Gauge>::default();
        let runtime_bad_data = Family::<KindLabel, Counter>::default();
        let runtime_errors = Family::<OperationLabel, Counter>::default();
        let pod_status_refresh_errors = Counter::default();
        let events_sent = Family::<KindLabel, Counter>::default();
        let trigger_connects = Family::<SourceLabel, Counter>::default();
        let trigger_errors = Family::<SourceLabel, Counter>::default();
        let trigger_replayed = Family::<SourceLabel, Counter>::default();
        let triggers = Family::<SourceLabel, Counter>::default();
        let trigger_relists = Family::<KindLabel, Counter>::default();
        let status_writes = Family::<ResultLabel, Counter>::default();
        let pod_deletions = Family::<ResultLabel, Counter>::default();
        // The kubelet's buckets for this metric.
        let pod_status_sync_duration = Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0]);
        let failed_syncs = Counter::default();
        let shadow_differences = Family::<FieldLabel, Counter>::default();
        let event_latency = Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]);
        let observer_lagged = Counter::default();
        let process_resident_memory = Gauge::default();
        let process_cpu_percent = Gauge::<f64, AtomicU64>::default();
        let process_open_fds = Gauge::default();
        let runtime_tasks = Gauge::default();
        let node_memory_total = Gauge::default();
        let node_memory_available = Gauge::default();
        let node_cpus = Gauge::default();
        let apiserver_requests = Family::<RequestLabel, Counter>::default();

        let mut registry = Registry::with_prefix("plegd");
        let mut names = Vec::new();
        register(
            &mut registry,
            &mut names,
            "pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            relist_duration.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pleg_relist_interval_seconds",
            "Interval in seconds between relisting in PLEG",
            relist_interval.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pleg_last_seen_seconds",
            "Timestamp in seconds when PLEG was last seen active",
            last_seen.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pleg_discard_events",
            "Lifecycle events that did not fit in the full event channel (kept and re-sent by the next relist of the pod)",
            discard_events.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "running_pods",
            "Number of pods that have a running pod sandbox",
            running_pods.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "running_containers",
            "Number of containers currently running",
            running_containers.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "runtime_bad_data",
            "Items the container runtime reported that plegd could not use as they were",
            runtime_bad_data.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "kube_events_dropped",
            "Kubernetes Events dropped because the queue to the apiserver was full (--emit-events)",
            kube_events_dropped.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "connections_refused",
            "Connections closed at once because their listener held its limit of open connections",
            connections_refused.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "informer_errors",
            "Failed pod list or watch calls of the informer, each retried with backoff",
            informer_errors.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "runtime_errors",
            "Failed CRI calls by operation",
            runtime_errors.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pleg_pod_status_refresh_errors",
            "Pod status reads that failed; the pod is re-inspected at the next relist",
            pod_status_refresh_errors.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pleg_events",
            "Lifecycle events delivered to the event channel",
            events_sent.clone(),
        );

        register(
            &mut registry,
            &mut names,
            "trigger_stream_connects",
            "Runtime event streams connected (the kubelet's evented_pleg_connection_success_count)",
            trigger_connects.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "trigger_stream_errors",
            "Runtime event streams that failed or closed (the kubelet's evented_pleg_connection_error_count)",
            trigger_errors.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "trigger_replayed_events",
            "Events a runtime replayed when a trigger stream connected (older than the subscription; the full relist of the connection covers them), by source",
            trigger_replayed.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "triggers",
            "Runtime events received by trigger streams",
            triggers.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "trigger_relists",
            "Relists run on behalf of triggers, by kind (pod: one pod; all: full relist)",
            trigger_relists.clone(),
        );

        register(
            &mut registry,
            &mut names,
            "status_writes",
            "Pod status writes by result (ok, noop, retry, conflict, gone, rejected, refused_other_node)",
            status_writes.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pod_deletions",
            "DELETEs of finished pods in full mode, by result (ok, gone, forbidden, retry, rejected)",
            pod_deletions.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "pod_status_sync_duration_seconds",
            "Time from a wanted pod status change to the apiserver accepting it",
            pod_status_sync_duration.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "shadow_differences",
            "Shadow mode: fields where plegd's computed status differs from the apiserver's",
            shadow_differences.clone(),
        );

        register(
            &mut registry,
            &mut names,
            "pod_failed_syncs",
            "Pod syncs skipped because the pod's runtime status could not be read (the kubelet's FailedSync); the apiserver keeps the last status written",
            failed_syncs.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "event_latency_seconds",
            "Time from the start of the relist that saw a change to its event leaving the PLEG's channel",
            event_latency.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "observer_lagged_events",
            "Events observation API subscribers missed because they read too slowly",
            observer_lagged.clone(),
        );

        register(
            &mut registry,
            &mut names,
            "process_resident_memory_bytes",
            "plegd's resident memory",
            process_resident_memory.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "process_cpu_percent",
            "plegd's CPU use since the last scrape, percent of one core",
            process_cpu_percent.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "process_open_fds",
            "plegd's open file descriptors",
            process_open_fds.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "runtime_tasks",
            "plegd's live async tasks (a number that only grows is a leak)",
            runtime_tasks.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "node_memory_total_bytes",
            "The node's memory",
            node_memory_total.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "node_memory_available_bytes",
            "The node's available memory",
            node_memory_available.clone(),
        );
        register(
            &mut registry,
            &mut names,
            "node_cpus",
            "The node's CPU count",
            node_cpus.clone(),
        );

        register(
            &mut registry,
            &mut names,
            "apiserver_requests",
            "Requests to the apiserver by verb and response code",
            apiserver_requests.clone(),
        );

        Self {
            relist_duration,
            relist_interval,
            last_seen,
            discard_events,
            informer_errors,
            kube_events_dropped,
            connections_refused,
            running_pods,
            running_containers,
            runtime_bad_data,
            runtime_errors,
            pod_status_refresh_errors,
            events_sent,
            trigger_connects,
            trigger_errors,
            trigger_replayed,
            triggers,
            trigger_relists,
            status_writes,
            pod_deletions,
            pod_status_sync_duration,
            failed_syncs,
            shadow_differences,
            event_latency,
            observer_lagged,
            process_resident_memory,
            process_cpu_percent,
            process_open_fds,
            runtime_tasks,
            node_memory_total,
            node_memory_available,
            node_cpus,
            apiserver_requests,
            registry,
            names,
        }
    }

    /// The name of every metric family, with the `plegd_` prefix and without the suffixes the
    /// exposition adds (`_total`, `_bucket`, …).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn count_runtime_error(&self, operation: &str) {
        self.runtime_errors
            .get_or_create(&OperationLabel {
                operation: operation.to_owned(),
            })
            .inc();
    }

    pub fn count_trigger_connect(&self, source: &str) {
        self.trigger_connects
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .inc();
    }

    pub fn count_trigger_replayed(&self, source: &str) {
        self.trigger_replayed
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .inc();
    }

    pub fn count_connection_refused(&self, listener: &str) {
        self.connections_refused
            .get_or_create(&ListenerLabel {
                listener: listener.to_owned(),
            })
            .inc();
    }

    pub fn count_trigger_error(&self, source: &str) {
        self.trigger_errors
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .inc();
    }

    pub fn count_trigger(&self, source: &str) {
        self.triggers
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .inc();
    }

    pub fn count_trigger_relist(&self, kind: &str) {
        self.trigger_relists
            .get_or_create(&KindLabel { kind: kind.to_owned() })
            .inc();
    }

    pub fn count_status_write(&self, result: &str) {
        self.status_writes
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    pub fn count_pod_deletion(&self, result: &str) {
        self.pod_deletions
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    pub fn count_shadow_difference(&self, field: &str) {
        self.shadow_differences
            .get_or_create(&FieldLabel {
                field: field.to_owned(),
            })
            .inc();
    }

    pub fn count_apiserver_request(&self, verb: &str, code: &str) {
        self.apiserver_requests
            .get_or_create(&RequestLabel {
                verb: verb.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    pub fn count_bad_data(&self, kind: &str) {
        self.runtime_bad_data
            .get_or_create(&KindLabel { kind: kind.to_owned() })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix_and_kubelet_names() {
        let m = Metrics::new();
        m.discard_events.inc();
        m.running_containers
            .get_or_create(&StateLabel {
                container_state: "running".into(),
            })
            .set(3);
        m.relist_duration.observe(0.002);
        let text = m.encode();
        assert!(text.contains("plegd_pleg_discard_events_total 1"), "{text}");
        assert!(
            text.contains("plegd_running_containers{container_state=\"running\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("plegd_pleg_relist_duration_seconds_bucket{le=\"0.005\"} 1"),
            "{text}"
        );
    }
}
