//! The flags: what each command accepts, the range each value must be in, the relations between
//! flags, and the options they turn into. Every numeric and duration flag has a documented range;
//! a value outside it is refused at start with one line that names the flag and the range.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;

use crate::runtime::termination::HostFiles;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::apiserver::informer::InitialList;
use crate::apiserver::pod::NodeName;
use crate::apiserver::rate_limit::Qps;
use crate::daemon::DaemonConfig;
use crate::observe::print::OutputFormat;
use crate::observe::watch::WatchConfig;
use crate::pleg::{DEFAULT_CHANNEL_CAPACITY, InvalidPlegConfig, PlegConfig};
use crate::runtime::CriConfig;
use crate::status::StatusMode;
use crate::status::manager::ManagerConfig;
use crate::sync_loop::SyncConfig;
use crate::triggers::{FIRST_RECONNECT, TriggerConfig, TriggerMode};
use crate::util::backoff::ExponentialBackoff;

/// The default containerd CRI socket.
pub const DEFAULT_CRI_SOCKET: &str = "/run/containerd/containerd.sock";

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The allowed range of every ranged flag: (flag, lowest, highest), as `--help` and docs/operating.md
/// state them. The parsers below take their bounds from here.
pub mod range {
    use super::{Duration, ms, secs};
    use std::num::{NonZeroU32, NonZeroUsize};

    pub const WORKER_THREADS: (usize, usize) = (1, 64);
    pub const CRI_TIMEOUT: (Duration, Duration) = (ms(100), secs(600));
    pub const RELIST_PERIOD: (Duration, Duration) = (ms(100), secs(600));
    pub const RELIST_PERIOD_WITH_TRIGGERS: (Duration, Duration) = (ms(100), secs(3600));
    pub const RELIST_THRESHOLD: (Duration, Duration) = (secs(1), secs(86_400));
    pub const TRIGGER_MAX_BACKOFF: (Duration, Duration) = (ms(100), secs(3600));
    pub const EVENT_CHANNEL_CAPACITY: (NonZeroUsize, NonZeroUsize) = (NonZeroUsize::MIN, nonzero(1 << 20));
    pub const STATUS_WRITERS: (NonZeroUsize, NonZeroUsize) = (NonZeroUsize::MIN, nonzero(64));
    pub const STATUS_QPS: (f64, f64) = (0.1, 10_000.0);
    pub const STATUS_BURST: (NonZeroU32, NonZeroU32) = (NonZeroU32::MIN, NonZeroU32::new(10_000).unwrap());

    const fn nonzero(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }
    pub const SHUTDOWN_TIMEOUT: (Duration, Duration) = (secs(0), secs(600));
    pub const APISERVER_TIMEOUT: (Duration, Duration) = (secs(1), secs(600));
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A value parser for a duration flag: humantime syntax (`500ms`, `1s`, `3m`) within `bounds`.
fn duration_in(bounds: (Duration, Duration)) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    move |s: &str| {
        let (min, max) = bounds;
        let allowed = format!("allowed: {} to {}", show(min), show(max));
        let d = humantime::parse_duration(s).map_err(|e| format!("{e} (e.g. 500ms, 1s, 3m); {allowed}"))?;
        if d < min || d > max {
            return Err(format!("out of range; {allowed}"));
        }
        Ok(d)
    }
}

/// A value parser for a number flag within `bounds` (NaN and infinities are out of every range).
fn number_in<T>(bounds: (T, T)) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display + Send + Sync,
    T::Err: std::fmt::Display,
{
    move |s: &str| {
        let (min, max) = bounds;
        let allowed = format!("allowed: {min} to {max}");
        let n: T = s.trim().parse().map_err(|e| {
            // A number the type cannot hold (0 for a count of one at least, a negative count) is
            // out of the range, as any other.
            if s.trim().parse::<f64>().is_ok() {
                format!("out of range; {allowed}")
            } else {
                format!("{e}; {allowed}")
            }
        })?;
        // Written so that a NaN, which compares false with everything, is refused.
        if !(n >= min && n <= max) {
            return Err(format!("out of range; {allowed}"));
        }
        Ok(n)
    }
}

/// A value parser for a rate flag within `bounds` (whose lowest is above zero).
fn qps_in(bounds: (f64, f64)) -> impl Fn(&str) -> Result<Qps, String> + Clone + Send + Sync {
    let number = number_in(bounds);
    move |s: &str| {
        let n = number(s)?;
        Qps::new(n).ok_or_else(|| format!("must be above zero; allowed: {} to {}", bounds.0, bounds.1))
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "plegd",
    version,
    about = "Pod lifecycle events from the container runtime, the way the kubelet's PLEG sees them"
)]
#[command(args_override_self = true)]
pub struct Cli {
    /// A TOML file of settings, keyed by flag name (`relist-period = "2s"`, `status-mode = "full"`).
    /// Flags and environment variables win over it. A regular file of at most 1 MiB.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "PLEGD_CONFIG",
        hide_env_values = true
    )]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub log: LogArgs,
    /// Threads that run plegd's work (1 to 64). With 1 (the default) everything runs on one
    /// thread, which keeps memory lowest; more give a multi-threaded runtime with that many workers.
    #[arg(long, global = true, value_name = "N", default_value_t = 1, value_parser = number_in(range::WORKER_THREADS), env = "PLEGD_WORKER_THREADS", hide_env_values = true)]
    pub worker_threads: usize,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Relist the runtime and print pod lifecycle events; needs no apiserver.
    Watch(WatchArgs),
    /// The daemon: lifecycle events from the runtime, pod status and conditions to the apiserver.
    Run(Box<RunArgs>),
    /// Follow the lifecycle events of a running `plegd run`.
    Events(EventsArgs),
    /// Follow the pod statuses a running `plegd run` generates, and how each differs from the
    /// apiserver's (in shadow mode: from what the kubelet wrote).
    Status(StatusArgs),
    /// Uninstall plegd's readiness gate safely: delete the admission policy that adds it to new
    /// pods, then set plegd's condition True (reason GateReleased) on every pod that has the
    /// gate, cluster-wide, so that none waits on a plegd that is going away. The Helm chart's
    /// pre-delete hook runs it; needs list pods, patch pods/status, delete of that policy and get and patch of the
    /// policy plegd-readiness-gate-kubelet and its binding (their finalizer).
    ReleaseGates(ReleaseGatesArgs),
}

#[derive(Debug, Args)]
pub struct ReleaseGatesArgs {
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Deadline of each apiserver request (1s to 10m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_in(range::APISERVER_TIMEOUT))]
    pub apiserver_timeout: Duration,
    /// The MutatingAdmissionPolicy that adds the gate to new pods, deleted first.
    #[arg(long, value_name = "NAME", default_value = crate::status::release::GATE_POLICY, value_parser = object_name)]
    pub policy: String,
}

impl ReleaseGatesArgs {
    fn release_config(&self) -> crate::status::release::ReleaseConfig {
        crate::status::release::ReleaseConfig {
            kubeconfig: self.kubeconfig.clone(),
            apiserver_timeout: self.apiserver_timeout,
            policy: self.policy.clone(),
        }
    }
}

/// A kubelet version (`v1.MINOR[.PATCH]`), as `--kubelet-version` takes it.
fn kubelet_version(s: &str) -> Result<String, String> {
    crate::status::generate::KubeletMinor::of_version(s)
        .map(|_| s.trim().to_owned())
        .map_err(|_| "must be a Kubernetes version: v1.MINOR[.PATCH], e.g. v1.35.4 (1.35 to 1.37 known)".to_owned())
}

/// A Kubernetes object name (a DNS subdomain, as the apiserver validates it).
fn object_name(s: &str) -> Result<String, String> {
    if crate::apiserver::pod::is_dns_subdomain(s) {
        Ok(s.to_owned())
    } else {
        Err("must be an object name: dot-separated labels of lowercase letters, digits and '-', each starting and ending alphanumeric, 1 to 253 characters".into())
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The daemon's API socket.
    #[arg(long, value_name = "PATH", default_value = crate::observe::DEFAULT_API_SOCKET, env = "PLEGD_API_SOCKET", hide_env_values = true)]
    pub socket: PathBuf,
    /// Only pods in this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Only pods with this name.
    #[arg(long)]
    pub pod: Option<String>,
    /// Line format on stdout: text says what differs; json carries the whole generated status.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The daemon's API socket.
    #[arg(long, value_name = "PATH", default_value = crate::observe::DEFAULT_API_SOCKET, env = "PLEGD_API_SOCKET", hide_env_values = true)]
    pub socket: PathBuf,
    /// Only pods in this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Only pods with this name.
    #[arg(long)]
    pub pod: Option<String>,
    /// Only these event types (repeatable): ContainerStarted, ContainerDied, ContainerRemoved, PodSync.
    #[arg(long = "type", value_name = "TYPE", value_parser = ["ContainerStarted", "ContainerDied", "ContainerRemoved", "PodSync"])]
    pub types: Vec<String>,
    /// Event line format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log filter (tracing's EnvFilter syntax, e.g. `info` or `plegd=debug`). RUST_LOG wins when set.
    #[arg(
        long,
        global = true,
        default_value = "info",
        env = "PLEGD_LOG_LEVEL",
        hide_env_values = true
    )]
    pub log_level: String,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "PLEGD_LOG_FORMAT", hide_env_values = true)]
    pub log_format: LogFormat,
}

/// Flags shared by every command that talks to the runtime.
#[derive(Debug, Args, Clone)]
pub struct RuntimeArgs {
    /// The container runtime's CRI socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CRI_SOCKET, env = "PLEGD_CRI_SOCKET", hide_env_values = true)]
    pub cri_socket: PathBuf,
    /// Deadline of each CRI call (100ms to 10m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration_in(range::CRI_TIMEOUT))]
    pub cri_timeout: Duration,
    /// The kubelet's root directory (an absolute path): termination message files are read only
    /// below its `pods` directory.
    #[arg(long, value_name = "PATH", default_value = "/var/lib/kubelet", value_parser = absolute_path, env = "PLEGD_KUBELET_ROOT_DIR", hide_env_values = true)]
    pub kubelet_root_dir: PathBuf,
    /// The directory of container logs (an absolute path): the log tail of a failed container with
    /// terminationMessagePolicy FallbackToLogsOnError is read only below it.
    #[arg(long, value_name = "PATH", default_value = "/var/log/pods", value_parser = absolute_path, env = "PLEGD_POD_LOGS_DIR", hide_env_values = true)]
    pub pod_logs_dir: PathBuf,
    /// Period between two global relists while no runtime event stream is connected (100ms to 10m,
    /// less than --relist-threshold).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_in(range::RELIST_PERIOD), env = "PLEGD_RELIST_PERIOD", hide_env_values = true)]
    pub relist_period: Duration,
    /// Period between two global relists while the runtime event stream (--triggers) is connected:
    /// the relist then only catches what the stream lost (100ms to 1h, at least --relist-period,
    /// less than --relist-threshold).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_in(range::RELIST_PERIOD_WITH_TRIGGERS), env = "PLEGD_RELIST_PERIOD_WITH_TRIGGERS", hide_env_values = true)]
    pub relist_period_with_triggers: Duration,
    /// The PLEG is unhealthy when no relist succeeded for this long (1s to 24h).
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = duration_in(range::RELIST_THRESHOLD), env = "PLEGD_RELIST_THRESHOLD", hide_env_values = true)]
    pub relist_threshold: Duration,
    /// Runtime events that trigger a relist of the pod they name, between periodic relists.
    #[arg(long, value_enum, default_value_t = TriggerMode::Auto, env = "PLEGD_TRIGGERS", hide_env_values = true)]
    pub triggers: TriggerMode,
    /// Longest wait between reconnections of a failed trigger stream (100ms to 1h).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_in(range::TRIGGER_MAX_BACKOFF))]
    pub trigger_max_backoff: Duration,
    /// Capacity of the lifecycle event channel (1 to 1048576).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CHANNEL_CAPACITY, value_parser = number_in(range::EVENT_CHANNEL_CAPACITY))]
    pub event_channel_capacity: NonZeroUsize,
}

impl RuntimeArgs {
    /// The relister's settings; else the relation between the relist flags that does not hold, as
    /// one line naming the flag and what it must be.
    pub fn pleg_config(&self) -> Result<PlegConfig, String> {
        // Without triggers the period with triggers is never used.
        let with_triggers = (self.triggers != TriggerMode::None).then_some(self.relist_period_with_triggers);
        let config = PlegConfig::new(self.relist_period, with_triggers, self.relist_threshold).map_err(|e| match e {
            InvalidPlegConfig::PeriodNotBelowThreshold { period, threshold } => format!(
                "--relist-period {}: must be less than --relist-threshold ({})",
                show(period),
                show(threshold)
            ),
            InvalidPlegConfig::WithTriggersOutOfOrder {
                with_triggers,
                period,
                threshold,
            } => format!(
                "--relist-period-with-triggers {}: must be at least --relist-period ({}) and less than --relist-threshold ({})",
                show(with_triggers),
                show(period),
                show(threshold)
            ),
        })?;
        Ok(config.with_channel_capacity(self.event_channel_capacity))
    }

    pub fn trigger_config(&self) -> Result<TriggerConfig, String> {
        let backoff = ExponentialBackoff::try_new(FIRST_RECONNECT, self.trigger_max_backoff).map_err(|_| {
            format!(
                "--trigger-max-backoff {}: must be at least the first wait ({})",
                show(self.trigger_max_backoff),
                show(FIRST_RECONNECT)
            )
        })?;
        Ok(TriggerConfig {
            backoff,
            ..TriggerConfig::default()
        })
    }

    pub fn cri_config(&self) -> CriConfig {
        CriConfig {
            call_timeout: self.cri_timeout,
            host_files: HostFiles::new(&self.kubelet_root_dir, &self.pod_logs_dir),
            ..CriConfig::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Event line format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

impl WatchArgs {
    /// The options of `plegd watch`, complete and checked; else the one-line error of the first
    /// flag that is wrong.
    pub fn watch_config(&self) -> Result<WatchConfig, String> {
        Ok(WatchConfig {
            cri_socket: self.runtime.cri_socket.clone(),
            pleg: self.runtime.pleg_config()?,
            cri: self.runtime.cri_config(),
            output: self.output,
            triggers: self.runtime.triggers,
            trigger_config: self.runtime.trigger_config()?,
        })
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// This node's name (required): only pods bound to it are watched and written.
    #[arg(
        long,
        env = "NODE_NAME",
        hide_env_values = true,
        default_value = "",
        hide_default_value = true
    )]
    pub node_name: String,
    /// The node's IPs (comma-separated, primary first): hostIP(s), and podIPs of host-network pods.
    #[arg(long, env = "NODE_IP", hide_env_values = true, value_delimiter = ',', value_parser = parse_ip)]
    pub node_ip: Vec<String>,
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// What plegd writes: only its own conditions (beside a kubelet), the full status (no kubelet),
    /// or nothing but a comparison with what the kubelet wrote.
    #[arg(long, value_enum, default_value_t = StatusMode::Conditions, env = "PLEGD_STATUS_MODE", hide_env_values = true)]
    pub status_mode: StatusMode,
    /// Publish Kubernetes Events when a container dies or is OOM-killed.
    #[arg(long)]
    pub emit_events: bool,
    /// The version of the kubelet whose status plegd generates (`v1.35.4`, `1.36`): 1.35 to 1.37,
    /// an older one gets 1.35's rules, a newer one 1.37's. Unset: the node's kubelet's, as its Node
    /// reports it (`status.nodeInfo.kubeletVersion`), read at start; 1.37's where none is reported
    /// (a node without a kubelet).
    #[arg(long, value_name = "VERSION", value_parser = kubelet_version, env = "PLEGD_KUBELET_VERSION", hide_env_values = true)]
    pub kubelet_version: Option<String>,
    /// Full mode: write each container's `stopSignal` as the runtime reports it, as a kubelet with
    /// the ContainerStopSignals feature gate on does (alpha and off by default in Kubernetes 1.37).
    #[arg(long, env = "PLEGD_CONTAINER_STOP_SIGNALS", hide_env_values = true)]
    pub container_stop_signals: bool,
    /// What `plegd status` and the status API show of a pod whose generated status the apiserver
    /// already holds: `stored` — the apiserver's copy, in the form it stores (one copy of such a
    /// status in memory); `generated` — plegd's status exactly as it generated it, kept beside the
    /// apiserver's copy (one more status a pod in memory): for diffing plegd's output against a
    /// kubelet's field by field, with a judge of one's own.
    #[arg(long, value_enum, value_name = "FORM", default_value_t = StatusReportForm::Stored, env = "PLEGD_STATUS_REPORT_FORM", hide_env_values = true)]
    pub status_report_form: StatusReportForm,
    /// Status writers working in parallel (1 to 64).
    #[arg(long, value_name = "N", default_value = "4", value_parser = number_in(range::STATUS_WRITERS))]
    pub status_writers: NonZeroUsize,
    /// Sustained status PATCHes per second (0.1 to 10000).
    #[arg(long, value_name = "QPS", default_value = "50", value_parser = qps_in(range::STATUS_QPS))]
    pub status_qps: Qps,
    /// Status PATCHes allowed at once after a quiet spell (1 to 10000).
    #[arg(long, value_name = "N", default_value = "100", value_parser = number_in(range::STATUS_BURST))]
    pub status_burst: NonZeroU32,
    /// Unix socket of the observation API (`plegd events`); `off` to not serve it. A socket file
    /// left there by an earlier plegd is replaced; any other file is refused, never removed.
    #[arg(long, value_name = "PATH", default_value = crate::observe::DEFAULT_API_SOCKET, env = "PLEGD_API_SOCKET", hide_env_values = true)]
    pub api_socket: String,
    /// Address of /metrics (with /healthz and /readyz beside it); `off` to not serve them.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9808", value_parser = parse_listen, env = "PLEGD_METRICS_ADDRESS", hide_env_values = true)]
    pub metrics_address: Listen,
    /// Who may read /metrics: `kubernetes` — a bearer token the apiserver authenticates, for a user
    /// allowed to get /metrics (TokenReview + SubjectAccessReview); `none` — whoever reaches the
    /// address; `auto` — kubernetes unless --metrics-address is a loopback address.
    #[arg(long, value_enum, value_name = "WHO", default_value_t = MetricsAuthMode::Auto, env = "PLEGD_METRICS_AUTH", hide_env_values = true)]
    pub metrics_auth: MetricsAuthMode,
    /// With Kubernetes authentication of /metrics: the audience a reader's token must be issued for
    /// (a projected token with this `audience`, 1 to 256 printable characters). A token for this
    /// audience alone is good for reading plegd's /metrics and nothing else: the apiserver refuses
    /// it, so a node that sees it cannot use it. Without it, any token the apiserver accepts.
    #[arg(long, value_name = "AUDIENCE", value_parser = parse_audience, env = "PLEGD_METRICS_TOKEN_AUDIENCE", hide_env_values = true)]
    pub metrics_token_audience: Option<String>,
    /// Whether /metrics speaks TLS: `auto` — wherever it asks for a token (--metrics-auth) or a
    /// certificate is given; `on`; `off` — plain HTTP, refused where /metrics asks for a token,
    /// which would cross the network in clear text.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = MetricsTlsMode::Auto, env = "PLEGD_METRICS_TLS", hide_env_values = true)]
    pub metrics_tls: MetricsTlsMode,
    /// PEM certificate (its chain after it) /metrics serves over TLS: a Secret's `tls.crt`, kept
    /// by cert-manager, say; read again when it changes. Without it, plegd makes a self-signed one
    /// at start and logs its SHA-256 fingerprint.
    #[arg(
        long,
        value_name = "PATH",
        env = "PLEGD_METRICS_TLS_CERT_FILE",
        hide_env_values = true
    )]
    pub metrics_tls_cert_file: Option<PathBuf>,
    /// PEM private key of --metrics-tls-cert-file (a Secret's `tls.key`).
    #[arg(
        long,
        value_name = "PATH",
        env = "PLEGD_METRICS_TLS_PRIVATE_KEY_FILE",
        hide_env_values = true
    )]
    pub metrics_tls_private_key_file: Option<PathBuf>,
    /// Address of /healthz and /readyz alone, for the kubelet's probes: a listener of their own
    /// that no client of /metrics, nor many, can crowd (the DaemonSet's, 0.0.0.0:9809); `off`: only
    /// beside /metrics.
    #[arg(long, value_name = "IP:PORT", default_value = "off", value_parser = parse_listen, env = "PLEGD_HEALTH_ADDRESS", hide_env_values = true)]
    pub health_address: Listen,
    /// How long pending status writes, and then handing this node's gated pods back to the
    /// kubelet (docs/readiness-gate.md), may take at shutdown (0s to 10m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration_in(range::SHUTDOWN_TIMEOUT))]
    pub shutdown_timeout: Duration,
    /// Deadline of each apiserver request (1s to 10m): a status write, delete or Event that gets no
    /// answer within it is given up and retried; the connection (one, HTTP/2) is given up when it
    /// answers no PING within it either; the informer's watch is renewed every 10 to 20 times it
    /// (5 to 10 minutes at most, as the kubelet's), drawn once per plegd.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_in(range::APISERVER_TIMEOUT))]
    pub apiserver_timeout: Duration,
    /// How the informer lists this node's pods, at start and whenever its watch cannot resume:
    /// `stream` — one WATCH that sends the pods first (`sendInitialEvents`), from the apiserver's
    /// watch cache, falling back to `pages` where the apiserver refuses it; `pages` — consistent
    /// LISTs of 10 pods a page; `cache` — LISTs with resourceVersion=0 (whatever the watch cache
    /// holds).
    #[arg(long, value_enum, value_name = "HOW", default_value_t = InitialList::Stream, env = "PLEGD_INITIAL_LIST", hide_env_values = true)]
    pub initial_list: InitialList,
}

/// Who may read /metrics (`--metrics-auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsAuthMode {
    Auto,
    Kubernetes,
    None,
}

impl MetricsAuthMode {
    /// Whether /metrics at `address` asks for Kubernetes authentication.
    pub fn authenticates(self, address: std::net::SocketAddr) -> bool {
        match self {
            MetricsAuthMode::Auto => !address.ip().is_loopback(),
            MetricsAuthMode::Kubernetes => true,
            MetricsAuthMode::None => false,
        }
    }
}

/// What a status report shows of a status the apiserver holds (`--status-report-form`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusReportForm {
    Stored,
    Generated,
}

/// Whether /metrics speaks TLS (`--metrics-tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsTlsMode {
    Auto,
    On,
    Off,
}

/// A token audience (`--metrics-token-audience`): 1 to 256 printable characters, no space.
fn parse_audience(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 256 || !s.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "{s:?} is not an audience: 1 to 256 printable ASCII characters, no space (e.g. plegd)"
        ));
    }
    Ok(s.to_owned())
}

/// A listening address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen(pub Option<std::net::SocketAddr>);

fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "off" {
        return Ok(Listen(None));
    }
    s.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|_| format!("{s:?} is not IP:PORT (e.g. 127.0.0.1:9808) or off"))
}

/// An absolute path (the directories plegd reads node files below).
fn absolute_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!("{s:?} is not an absolute path"))
    }
}

/// An IP address (an empty item of the list is skipped later: `NODE_IP=` is unset in effect).
fn parse_ip(s: &str) -> Result<String, String> {
    if s.is_empty() || s.parse::<std::net::IpAddr>().is_ok() {
        return Ok(s.to_owned());
    }
    Err(format!("{s:?} is not an IP address"))
}

impl RunArgs {
    fn api_socket_path(&self) -> Option<PathBuf> {
        (self.api_socket != "off" && !self.api_socket.is_empty()).then(|| PathBuf::from(&self.api_socket))
    }

    /// What /metrics serves over TLS (`None`: plain HTTP, or not served), its files checked;
    /// `authenticates`: whether /metrics asks for a token.
    fn metrics_tls_source(&self, authenticates: bool) -> Result<Option<crate::serve::tls::CertificateSource>, String> {
        use crate::serve::tls::CertificateSource;
        let Some(address) = self.metrics_address.0 else {
            return Ok(None);
        };
        let files = match (&self.metrics_tls_cert_file, &self.metrics_tls_private_key_file) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(
                    "--metrics-tls-cert-file needs --metrics-tls-private-key-file, its certificate's key".into(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "--metrics-tls-private-key-file needs --metrics-tls-cert-file, its key's certificate".into(),
                );
            }
        };
        let on = match self.metrics_tls {
            MetricsTlsMode::Auto => authenticates || files.is_some(),
            MetricsTlsMode::On => true,
            MetricsTlsMode::Off if authenticates => {
                return Err(format!(
                    "--metrics-tls off: /metrics at {address} asks for a token (--metrics-auth), which would cross the network in clear text; use auto or on"
                ));
            }
            MetricsTlsMode::Off if files.is_some() => {
                return Err("--metrics-tls off leaves --metrics-tls-cert-file unused; drop one of them".into());
            }
            MetricsTlsMode::Off => false,
        };
        if !on {
            return Ok(None);
        }
        Ok(Some(match files {
            Some((cert, key)) => {
                crate::serve::tls::load_files(&cert, &key).map_err(|e| format!("--metrics-tls-cert-file: {e}"))?;
                CertificateSource::Files { cert, key }
            }
            None => CertificateSource::SelfSigned {
                names: crate::serve::tls::self_signed_names(&self.node_name, Some(address.ip()), &self.node_ip),
            },
        }))
    }

    /// The options of `plegd run`, complete and checked; else the one-line error of the first flag
    /// that is wrong.
    pub fn daemon_config(&self) -> Result<DaemonConfig, String> {
        let pleg = self.runtime.pleg_config()?;
        let trigger_config = self.runtime.trigger_config()?;
        let node_name = NodeName::new(&self.node_name).map_err(|e| format!("--node-name {e}"))?;
        if let (Some(metrics), Some(health)) = (self.metrics_address.0, self.health_address.0)
            && metrics == health
        {
            return Err(format!(
                "--health-address {health} is --metrics-address too; give the probes' listener a port of its own"
            ));
        }
        let api_socket = self.api_socket_path();
        if let Some(path) = &api_socket {
            crate::observe::check_socket_path(path).map_err(|e| e.to_string())?;
        }
        let metrics_auth = self
            .metrics_address
            .0
            .is_some_and(|address| self.metrics_auth.authenticates(address));
        let metrics_tls = self.metrics_tls_source(metrics_auth)?;
        Ok(DaemonConfig {
            cri_socket: self.runtime.cri_socket.clone(),
            cri: self.runtime.cri_config(),
            pleg,
            triggers: self.runtime.triggers,
            trigger_config,
            kubeconfig: self.kubeconfig.clone(),
            manager: ManagerConfig {
                writers: self.status_writers,
                qps: self.status_qps,
                burst: self.status_burst,
                request_timeout: self.apiserver_timeout,
                ..ManagerConfig::new(node_name, self.status_mode)
            },
            sync: SyncConfig {
                mode: self.status_mode,
                node_ips: self.node_ip.iter().filter(|ip| !ip.is_empty()).cloned().collect(),
                stop_signals: self.container_stop_signals,
                report_generated: self.status_report_form == StatusReportForm::Generated,
                ..SyncConfig::default()
            },
            emit_events: self.emit_events,
            api_socket,
            metrics_address: self.metrics_address.0,
            metrics_auth,
            metrics_token_audience: self.metrics_token_audience.clone(),
            metrics_tls,
            health_address: self.health_address.0,
            shutdown_timeout: self.shutdown_timeout,
            apiserver_timeout: self.apiserver_timeout,
            initial_list: self.initial_list,
            kubelet_version: self.kubelet_version.clone(),
        })
    }
}

/// A command with its settings complete and checked: what `plegd` runs. Built once, from the
/// flags, by [`Cli::check`].
#[derive(Debug)]
pub enum Invocation {
    Watch(Box<WatchConfig>),
    Run(Box<DaemonConfig>),
    Events(EventsArgs),
    Status(StatusArgs),
    ReleaseGates(crate::status::release::ReleaseConfig),
}

/// The command line, checked: the process-wide settings and the command to run.
#[derive(Debug)]
pub struct Checked {
    pub log: LogArgs,
    pub worker_threads: usize,
    pub invocation: Invocation,
}

impl Cli {
    /// What clap cannot check alone — relations between flags, and files named by them — and the
    /// command's settings built from the flags; else the one-line error of the first flag that is
    /// wrong.
    pub fn check(self) -> Result<Checked, String> {
        let invocation = match self.command {
            Command::Watch(args) => Invocation::Watch(Box::new(args.watch_config()?)),
            Command::Run(args) => Invocation::Run(Box::new(args.daemon_config()?)),
            Command::Events(args) => Invocation::Events(args),
            Command::Status(args) => Invocation::Status(args),
            Command::ReleaseGates(args) => Invocation::ReleaseGates(args.release_config()),
        };
        Ok(Checked {
            log: self.log,
            worker_threads: self.worker_threads,
            invocation,
        })
    }
}
