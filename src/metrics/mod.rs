//! plegd's metrics, named after the kubelet's with a `plegd_` prefix so that existing alerts
//! translate (`kubelet_pleg_relist_duration_seconds` → `plegd_pleg_relist_duration_seconds`).
//! One [`Metrics`] is created per process and shared; the HTTP endpoint that serves the registry
//! lives with the daemon.
//!
//! Label values are plegd's own fixed words (operations, kinds, results), never strings from the
//! runtime or the apiserver, so that no input can grow the number of series — except the pod,
//! container and reason of `plegd_container_exits_total`, whose series leave with their pod and are
//! capped ([`MAX_EXIT_SERIES`]).

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod exit_series;
use exit_series::ExitSeries;
pub use exit_series::{EXIT_SERIES_LINGER, ExitLabel, MAX_EXIT_SERIES};

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
pub struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeletRulesLabel {
    pub minor: String,
    pub fit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamStateLabel {
    pub source: String,
    pub state: String,
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

/// An observation API service: `events` or `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabel {
    pub service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: String,
}

/// Now, as the start time of the process (the metrics are made once, at start).
fn start_time() -> Gauge<f64, AtomicU64> {
    let gauge = Gauge::<f64, AtomicU64>::default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    gauge.set(now.as_secs_f64());
    gauge
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// Declares [`Metrics`] from a table: per metric, its field, type and initial value, then its name
/// (without the `plegd_` prefix) and help. Registration follows the table's order.
macro_rules! metrics_table {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $init:expr, $name:literal, $help:literal;)*) => {
        /// Every metric plegd keeps.
        #[derive(Debug)]
        pub struct Metrics {
            $($(#[$doc])* pub $field: $ty,)*
            /// The pods `container_exits`' series belong to.
            exit_series: Mutex<ExitSeries>,
            registry: Registry,
            names: Vec<String>,
        }

        impl Metrics {
            pub fn new() -> Self {
                let mut registry = Registry::with_prefix("plegd");
                let mut names = Vec::new();
                $(
                    let $field: $ty = $init;
                    names.push(concat!("plegd_", $name).to_owned());
                    registry.register($name, $help, $field.clone());
                )*
                let metrics = Self { $($field,)* exit_series: Mutex::default(), registry, names };
                metrics.initialize_known();
                metrics
            }
        }
    };
}

metrics_table! {
    relist_duration: Histogram = default_histogram(),
        "pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG";
    relist_interval: Histogram = default_histogram(),
        "pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG";
    last_seen: Gauge<f64, AtomicU64> = Default::default(),
        "pleg_last_seen_seconds", "Timestamp in seconds when PLEG was last seen active";
    relist_threshold: Gauge<f64, AtomicU64> = Default::default(),
        "pleg_relist_threshold_seconds", "The PLEG is unhealthy when its last successful relist is older than this (--relist-threshold)";
    start_time: Gauge<f64, AtomicU64> = start_time(),
        "start_time_seconds", "When this plegd process started, in seconds since the Unix epoch (a change is a restart)";
    discard_events: Counter = Default::default(),
        "pleg_discard_events", "Lifecycle events that did not fit in the full event channel (kept and re-sent by the next relist of the pod)";
    running_pods: Gauge = Default::default(),
        "running_pods", "Number of pods that have a running pod sandbox";
    exits_held: Gauge = Default::default(),
        "exits_held", "Exits taken from containerd's exit event that the CRI state does not show yet (held in the pod records; see plegd_exit_corrections_total)";
    running_containers: Family<StateLabel, Gauge> = Default::default(),
        "running_containers", "Number of containers currently running";
    runtime_bad_data: Family<KindLabel, Counter> = Default::default(),
        "runtime_bad_data", "Items the container runtime reported that plegd could not use as they were";
    kube_events_dropped: Counter = Default::default(),
        "kube_events_dropped", "Kubernetes Events dropped because the queue to the apiserver was full (--emit-events)";
    kube_events_published: Counter = Default::default(),
        "kube_events_published", "Kubernetes Events the apiserver stored, one per occurrence (--emit-events)";
    kube_events_failed: Counter = Default::default(),
        "kube_events_failed", "Kubernetes Events given up on: refused by the apiserver, or unanswered after their tries (--emit-events)";
    kube_events_throttled: Counter = Default::default(),
        "kube_events_throttled", "Kubernetes Events that waited for the event rate limit or for the apiserver's Retry-After before they were sent (--emit-events)";
    connections_refused: Family<ListenerLabel, Counter> = Default::default(),
        "connections_refused", "Connections closed at once because their listener, or their client address on it, held its limit of open connections";
    metrics_auth: Family<ResultLabel, Counter> = Default::default(),
        "metrics_auth", "Requests for /metrics under Kubernetes authentication, by result (allowed, unauthenticated, forbidden, throttled, error)";
    connections_evicted: Family<ListenerLabel, Counter> = Default::default(),
        "connections_evicted", "Open connections closed to make room for a new one on a full listener that evicts (health)";
    tls_handshake_errors: Family<ListenerLabel, Counter> = Default::default(),
        "tls_handshake_errors", "TLS connections closed before their handshake ended: failed, or not done within the listener's time to send a request head";
    tls_certificate_reloads: Family<ResultLabel, Counter> = Default::default(),
        "tls_certificate_reloads", "Certificates /metrics took up after its start, by result: loaded (the files changed, or a self-made one was renewed), failed (the new files cannot be used; the one served before stays)";
    tls_certificate_expiry: Gauge<f64, AtomicU64> = Default::default(),
        "tls_certificate_expiry_timestamp_seconds", "When the certificate /metrics serves expires, in seconds since the Unix epoch (0: /metrics is plain HTTP, or the end could not be read)";
    informer_errors: Counter = Default::default(),
        "informer_errors", "Failed pod list or watch calls of the informer, each retried with backoff";
    runtime_errors: Family<OperationLabel, Counter> = Default::default(),
        "runtime_errors", "Failed runtime calls by operation (CRI's, and containerd's TaskMetrics)";
    runtime_list_mode: Family<ModeLabel, Gauge> = Default::default(),
        "runtime_list_mode", "How the relist lists the runtime's sandboxes and containers on its connection: 1 for the way chosen (streaming: StreamPodSandboxes and StreamContainers; unary: ListPodSandbox and ListContainers, where the runtime does not serve the streams), 0 for the other; both 0 until the first list";
    status_kubelet_rules: Family<KubeletRulesLabel, Gauge> = Default::default(),
        "status_kubelet_rules", "The kubelet minor whose status plegd generates (minor: 1.35, 1.36, 1.37), and how it fits the node's kubelet (fit: exact; older or newer, the kubelet's minor is not one plegd knows and the closest is used; unknown, no version could be read: 1.37's); 1 for the one in use";
    pod_status_refresh_errors: Counter = Default::default(),
        "pleg_pod_status_refresh_errors", "Pod status reads that failed; the pod is re-inspected at the next relist";
    events_sent: Family<KindLabel, Counter> = Default::default(),
        "pleg_events", "Lifecycle events delivered to the event channel";
    trigger_connects: Family<SourceLabel, Counter> = Default::default(),
        "trigger_stream_connects", "Runtime event streams connected (the kubelet's evented_pleg_connection_success_count)";
    trigger_errors: Family<SourceLabel, Counter> = Default::default(),
        "trigger_stream_errors", "Runtime event streams that failed or closed (the kubelet's evented_pleg_connection_error_count)";
    /// Events a runtime replayed on connection (older than the subscription), not acted on.
    trigger_replayed: Family<SourceLabel, Counter> = Default::default(),
        "trigger_replayed_events", "Events a runtime replayed when a trigger stream connected (older than the subscription; the full relist of the connection covers them), by source";
    triggers: Family<SourceLabel, Counter> = Default::default(),
        "triggers", "Runtime events received by trigger streams";
    trigger_stream_state: Family<StreamStateLabel, Gauge> = Default::default(),
        "trigger_stream_state", "What each runtime event stream is doing: 1 for its state (connecting, connected, reconnecting, unusable: the runtime ends the stream as soon as it opens), 0 for the others";
    trigger_missed: Family<SourceLabel, Counter> = Default::default(),
        "trigger_missed_changes", "Container and sandbox changes a periodic relist found while the runtime event stream was connected: changes the stream did not announce (or had not brought in yet), by source";
    container_exits: Family<ExitLabel, Counter> = Default::default(),
        "container_exits", "Container exits plegd saw happen, by namespace, pod, container and reason (as the status gives it); exits that happened before plegd started are not counted; a pod's series leave 2 minutes after the pod left the node; past 2000 series, exits are counted by reason alone (namespace, pod and container empty)";
    exit_events: Family<ResultLabel, Counter> = Default::default(),
        "exit_events", "containerd's /tasks/exit of a container's init process, by what became of it (shown: the exit shown at once, ahead of the CRI state; runtime_first: the CRI state showed it already; recorded: a relist had read it first; not_recorded: no record holds that id; sandbox: a sandbox's; both left to the CRI state)";
    exit_corrections: Family<FieldLabel, Counter> = Default::default(),
        "exit_corrections", "Exits taken from containerd's exit event that the CRI state later showed otherwise, by field (exit_code, finished_at, reason; state: the CRI still said the container ran after plegd's hold ran out); the CRI's value is written";
    trigger_relists: Family<KindLabel, Counter> = Default::default(),
        "trigger_relists", "Relists run on behalf of triggers, by kind (pod: one pod; all: full relist; batch: full relist for many probes and locates due at once; probe, locate, recheck; probed: a probe's change read into its pod's record, the pod's status read without its lists; skipped: an id looked for in vain a moment ago, or gone from the runtime, not looked for)";
    status_writes: Family<ResultLabel, Counter> = Default::default(),
        "status_writes", "Pod status writes by result (ok, noop, retry, conflict, gone, replaced, rejected, refused_other_node)";
    /// DELETEs of finished pods (full mode), by result.
    pod_deletions: Family<ResultLabel, Counter> = Default::default(),
        "pod_deletions", "DELETEs of finished pods in full mode, by result (ok, gone, forbidden, retry, rejected)";
    // The kubelet's buckets for this metric.
    pod_status_sync_duration: Histogram = Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0]),
        "pod_status_sync_duration_seconds", "Time from a wanted pod status change to the apiserver accepting it";
    shadow_differences: Family<FieldLabel, Counter> = Default::default(),
        "shadow_differences", "Shadow mode: fields where plegd's computed status differs from the apiserver's";
    /// Pod syncs skipped because the pod's runtime status could not be read (FailedSync).
    failed_syncs: Counter = Default::default(),
        "pod_failed_syncs", "Pod syncs skipped because the pod's runtime status could not be read (the kubelet's FailedSync); the apiserver keeps the last status written";
    event_latency: Histogram = Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
        "event_latency_seconds", "Time from the start of the relist that saw a change to its event leaving the PLEG's channel";
    observer_lagged: Counter = Default::default(),
        "observer_lagged_events", "Events observation API subscribers missed because they read too slowly";
    observer_subscriptions: Family<ServiceLabel, Gauge> = Default::default(),
        "observer_subscriptions", "Open subscriptions to the observation API (plegd events, plegd status), by service (events, status)";
    process_resident_memory: Gauge = Default::default(),
        "process_resident_memory_bytes", "plegd's resident memory";
    process_cpu_percent: Gauge<f64, AtomicU64> = Default::default(),
        "process_cpu_percent", "plegd's CPU use since the last scrape, percent of one core";
    process_open_fds: Gauge = Default::default(),
        "process_open_fds", "plegd's open file descriptors";
    runtime_tasks: Gauge = Default::default(),
        "runtime_tasks", "plegd's live async tasks (a number that only grows is a leak)";
    node_memory_total: Gauge = Default::default(),
        "node_memory_total_bytes", "The node's memory";
    node_memory_available: Gauge = Default::default(),
        "node_memory_available_bytes", "The node's available memory";
    node_cpus: Gauge = Default::default(),
        "node_cpus", "The node's CPU count";
    apiserver_requests: Family<RequestLabel, Counter> = Default::default(),
        "apiserver_requests", "Requests to the apiserver by verb and response code";
    apiserver_warnings: Counter = Default::default(),
        "apiserver_warnings", "Warning headers in the apiserver's answers (each distinct one is logged once)";
    apiserver_retry_after: Counter = Default::default(),
        "apiserver_retry_after", "Answers (429 or 5xx) with a Retry-After the status writers then waited for";
}

/// prometheus_client writes OpenMetrics; the text format 0.0.4 differs in what concerns plegd in
/// two ways: a counter's `HELP` and `TYPE` name the samples' own name (`…_total`), and there is no
/// `# EOF` (nor `# UNIT`). Pure.
fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + 1024);
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(pending) = help.replace(line) {
                out.push_str(pending);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let total = kind == "counter" && !name.ends_with("_total");
            if let Some(pending) = help.take() {
                match pending.strip_prefix("# HELP ").and_then(|h| h.strip_prefix(name)) {
                    Some(text) if total => out.push_str(&format!("# HELP {name}_total{text}")),
                    _ => out.push_str(pending),
                }
                out.push('\n');
            }
            if total {
                out.push_str(&format!("# TYPE {name}_total counter\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        if let Some(pending) = help.take() {
            out.push_str(pending);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(pending) = help {
        out.push_str(pending);
        out.push('\n');
    }
    out
}

/// Label values known before they occur. Their series are made at 0 when the metrics are, so that
/// every series is there from the first scrape: `rate()` and `increase()` see the first increment,
/// and a dashboard panel or an alert has data before anything went wrong.
pub mod known {
    /// `plegd_status_writes_total{result}` (status::manager's outcomes).
    pub const STATUS_WRITE_RESULTS: [&str; 8] = [
        "ok",
        "noop",
        "retry",
        "conflict",
        "gone",
        "replaced",
        "rejected",
        "refused_other_node",
    ];
    /// `plegd_metrics_auth_total{result}` (metrics_auth).
    pub const METRICS_AUTH_RESULTS: [&str; 5] = ["allowed", "unauthenticated", "forbidden", "throttled", "error"];
    /// `plegd_pod_deletions_total{result}`.
    pub const POD_DELETION_RESULTS: [&str; 5] = ["ok", "gone", "forbidden", "retry", "rejected"];
    /// `plegd_runtime_bad_data_total{kind}` (runtime::convert::BadData::kind).
    pub const BAD_DATA_KINDS: [&str; 9] = [
        "missing_pod_uid",
        "missing_sandbox_metadata",
        "empty_id",
        "unknown_state",
        "duplicate_id",
        "bad_timestamp",
        "not_utf8",
        "refused_path",
        "read_timeout",
    ];
    /// `plegd_runtime_errors_total{operation}`: the CRI calls plegd makes, and containerd's
    /// `Tasks.Metrics` (an exited container's OOM kill count: `runtime::task_metrics`).
    pub const RUNTIME_OPERATIONS: [&str; 9] = [
        "ListPodSandbox",
        "ListContainers",
        "StreamPodSandboxes",
        "StreamContainers",
        "PodSandboxStatus",
        "ContainerStatus",
        "Version",
        "Status",
        "TaskMetrics",
    ];
    /// `plegd_runtime_list_mode{mode}`.
    pub const LIST_MODES: [&str; 2] = ["streaming", "unary"];
    /// `plegd_status_kubelet_rules{fit}`.
    pub const KUBELET_RULES_FITS: [&str; 4] = ["exact", "older", "newer", "unknown"];
    /// `plegd_pleg_events_total{kind}`: the events the PLEG sends.
    pub const EVENT_KINDS: [&str; 4] = ["ContainerStarted", "ContainerDied", "ContainerRemoved", "PodSync"];
    /// `plegd_exit_events_total{result}`.
    pub const EXIT_EVENT_RESULTS: [&str; 6] = [
        "shown",
        "runtime_first",
        "recorded",
        "not_recorded",
        "sandbox",
        "reason_unread",
    ];
    /// `plegd_exit_corrections_total{field}`.
    pub const EXIT_CORRECTION_FIELDS: [&str; 4] = ["exit_code", "finished_at", "reason", "state"];
    /// `plegd_trigger_relists_total{kind}`.
    pub const TRIGGER_RELIST_KINDS: [&str; 8] =
        ["pod", "all", "batch", "probe", "probed", "locate", "recheck", "skipped"];
    /// `plegd_observer_subscriptions{service}`: the observation API's services.
    pub const OBSERVER_SERVICES: [&str; 2] = ["events", "status"];
}

impl Metrics {
    /// Every series of [`known`] label values, at 0.
    fn initialize_known(&self) {
        for result in known::STATUS_WRITE_RESULTS {
            let _ = self.status_writes.get_or_create(&ResultLabel { result: result.into() });
        }
        for result in known::METRICS_AUTH_RESULTS {
            let _ = self.metrics_auth.get_or_create(&ResultLabel { result: result.into() });
        }
        for result in known::POD_DELETION_RESULTS {
            let _ = self.pod_deletions.get_or_create(&ResultLabel { result: result.into() });
        }
        for kind in known::BAD_DATA_KINDS {
            let _ = self.runtime_bad_data.get_or_create(&KindLabel { kind: kind.into() });
        }
        for operation in known::RUNTIME_OPERATIONS {
            let _ = self.runtime_errors.get_or_create(&OperationLabel {
                operation: operation.into(),
            });
        }
        for kind in known::EVENT_KINDS {
            let _ = self.events_sent.get_or_create(&KindLabel { kind: kind.into() });
        }
        for mode in known::LIST_MODES {
            let _ = self.runtime_list_mode.get_or_create(&ModeLabel { mode: mode.into() });
        }
        for result in known::EXIT_EVENT_RESULTS {
            let _ = self.exit_events.get_or_create(&ResultLabel { result: result.into() });
        }
        for field in known::EXIT_CORRECTION_FIELDS {
            let _ = self.exit_corrections.get_or_create(&FieldLabel { field: field.into() });
        }
        for kind in known::TRIGGER_RELIST_KINDS {
            let _ = self.trigger_relists.get_or_create(&KindLabel { kind: kind.into() });
        }
        for service in known::OBSERVER_SERVICES {
            let _ = self.observer_subscriptions.get_or_create(&ServiceLabel {
                service: service.into(),
            });
        }
    }

    /// The name of every metric family, with the `plegd_` prefix and without the suffixes the
    /// exposition adds (`_total`, `_bucket`, …).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The value of the sample named exactly `name` (labels included) in the registry.
    #[cfg(any(test, feature = "test-util"))]
    pub fn sample(&self, name: &str) -> Option<f64> {
        sample(&self.encode(), name)
    }

    /// The registry in the Prometheus text format (0.0.4), as the kubelet serves its metrics.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        openmetrics_to_text(&out)
    }

    pub fn count_runtime_error(&self, operation: &str) {
        self.runtime_errors
            .get_or_create(&OperationLabel {
                operation: operation.to_owned(),
            })
            .inc();
    }

    /// Say which kubelet minor's status plegd generates, and how it fits the node's kubelet
    /// (one of [`known::KUBELET_RULES_FITS`]): one series at 1.
    pub fn set_kubelet_rules(&self, minor: &str, fit: &str) {
        self.status_kubelet_rules
            .get_or_create(&KubeletRulesLabel {
                minor: minor.to_owned(),
                fit: fit.to_owned(),
            })
            .set(1);
    }

    /// Set the one-hot gauge of how the relist lists: `mode`, one of [`known::LIST_MODES`], or
    /// none (not chosen yet).
    pub fn set_list_mode(&self, mode: Option<&str>) {
        for m in known::LIST_MODES {
            self.runtime_list_mode
                .get_or_create(&ModeLabel { mode: m.to_owned() })
                .set(i64::from(Some(m) == mode));
        }
    }

    /// Set the one-hot state gauge of a trigger stream: `state`, one of `states`.
    pub fn set_trigger_state(&self, source: &str, state: &str, states: &[&str]) {
        for s in states {
            self.trigger_stream_state
                .get_or_create(&StreamStateLabel {
                    source: source.to_owned(),
                    state: (*s).to_owned(),
                })
                .set(i64::from(*s == state));
        }
    }

    /// The series of a trigger source, at 0, once the source runs.
    pub fn initialize_trigger_source(&self, source: &str) {
        let label = SourceLabel {
            source: source.to_owned(),
        };
        let _ = self.triggers.get_or_create(&label);
        let _ = self.trigger_connects.get_or_create(&label);
        let _ = self.trigger_errors.get_or_create(&label);
        let _ = self.trigger_replayed.get_or_create(&label);
        let _ = self.trigger_missed.get_or_create(&label);
    }

    /// A subscription to an observation API service (`events`, `status`) opened (`+1`) or
    /// closed (`-1`).
    pub fn add_observer_subscriptions(&self, service: &str, delta: i64) {
        self.observer_subscriptions
            .get_or_create(&ServiceLabel {
                service: service.to_owned(),
            })
            .inc_by(delta);
    }

    /// The series of a listener, at 0, once it listens.
    pub fn initialize_listener(&self, listener: &str) {
        let label = ListenerLabel {
            listener: listener.to_owned(),
        };
        let _ = self.connections_refused.get_or_create(&label);
        let _ = self.connections_evicted.get_or_create(&label);
    }

    /// A TLS listener: its handshake failures counted from 0, its reloads too.
    pub fn initialize_tls_listener(&self, listener: &str) {
        let _ = self.tls_handshake_errors.get_or_create(&ListenerLabel {
            listener: listener.to_owned(),
        });
        for result in ["loaded", "failed"] {
            let _ = self.tls_certificate_reloads.get_or_create(&ResultLabel {
                result: result.to_owned(),
            });
        }
    }

    pub fn count_tls_handshake_error(&self, listener: &str) {
        self.tls_handshake_errors
            .get_or_create(&ListenerLabel {
                listener: listener.to_owned(),
            })
            .inc();
    }

    pub fn count_tls_certificate_reload(&self, result: &str) {
        self.tls_certificate_reloads
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// When the served certificate expires (`None`: unknown, 0).
    pub fn set_tls_certificate_expiry(&self, not_after: Option<SystemTime>) {
        let seconds = not_after
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        self.tls_certificate_expiry.set(seconds);
    }

    pub fn count_connection_evicted(&self, listener: &str) {
        self.connections_evicted
            .get_or_create(&ListenerLabel {
                listener: listener.to_owned(),
            })
            .inc();
    }

    /// Count what became of an exit event (`known::EXIT_EVENT_RESULTS`).
    pub fn count_exit_event(&self, result: &str) {
        self.exit_events
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Count a field of an exit the CRI state showed otherwise (`known::EXIT_CORRECTION_FIELDS`).
    pub fn count_exit_correction(&self, field: &str) {
        self.exit_corrections
            .get_or_create(&FieldLabel {
                field: field.to_owned(),
            })
            .inc();
    }

    pub fn count_missed_trigger(&self, source: &str, changes: u64) {
        self.trigger_missed
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .inc_by(changes);
    }

    /// Count an exit of a container of the pod `uid` (see `ExitSeries`).
    pub fn count_container_exit(&self, uid: &str, namespace: &str, pod: &str, container: &str, reason: &str) {
        let label = ExitLabel {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            container: container.to_owned(),
            reason: reason.to_owned(),
        };
        let series = self.exits().series_for(uid, label);
        self.container_exits.get_or_create(&series).inc();
    }

    /// The pod `uid` left the node at `at` (the runtime has nothing of it any more): its exit series
    /// go [`EXIT_SERIES_LINGER`] later.
    pub fn pod_left_node(&self, uid: &str, at: SystemTime) {
        self.exits().pod_left(uid, at);
    }

    /// Remove the exit series of pods that left the node [`EXIT_SERIES_LINGER`] or longer before `now`.
    pub fn drop_departed_exit_series(&self, now: SystemTime) {
        self.exits().drop_departed(&self.container_exits, now);
    }

    fn exits(&self) -> std::sync::MutexGuard<'_, ExitSeries> {
        self.exit_series.lock().unwrap_or_else(|e| e.into_inner())
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

    pub fn count_metrics_auth(&self, result: &str) {
        self.metrics_auth
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

    pub fn count_apiserver_warning(&self) {
        self.apiserver_warnings.inc();
    }

    pub fn count_apiserver_retry_after(&self) {
        self.apiserver_retry_after.inc();
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

/// The value of the sample named exactly `name` (labels included) in a Prometheus text body, as
/// tests read one (`/metrics`, or [`Metrics::encode`]).
#[cfg(any(test, feature = "test-util"))]
pub fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_is_the_text_format() {
        let m = Metrics::new();
        m.count_status_write("ok");
        let text = m.encode();
        assert!(!text.contains("# EOF"), "{text}");
        assert!(text.contains("# TYPE plegd_status_writes_total counter\n"), "{text}");
        assert!(
            text.contains("# HELP plegd_status_writes_total Pod status writes"),
            "{text}"
        );
        assert!(text.contains("plegd_status_writes_total{result=\"ok\"} 1\n"), "{text}");
        assert!(
            text.contains("# TYPE plegd_pleg_relist_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE plegd_running_pods gauge\n"), "{text}");
        // Every sample line's family was declared before it.
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
                    .unwrap_or(name);
                assert!(declared.contains(family), "{line}");
            }
        }
    }

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
