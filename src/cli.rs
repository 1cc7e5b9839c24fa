//! The command line: argument parsing, logging set-up and the error edge. Everything below this
//! file returns typed errors; here they become one line on stderr and an exit code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::daemon::DaemonOptions;
use crate::pleg::{DEFAULT_CHANNEL_CAPACITY, PlegConfig};
use crate::runtime::CriOptions;
use crate::status::StatusMode;
use crate::status::manager::ManagerConfig;
use crate::sync_loop::SyncConfig;
use crate::triggers::{TriggerMode, TriggerOptions};
use crate::watch::{OutputFormat, WatchOptions};

/// The default containerd CRI socket.
pub const DEFAULT_CRI_SOCKET: &str = "/run/containerd/containerd.sock";

#[derive(Debug, Parser)]
#[command(
    name = "plegd",
    version,
    about = "Pod lifecycle events from the container runtime, the way the kubelet's PLEG sees them"
)]
#[command(args_override_self = true)]
pub struct Cli {
    /// A TOML file of settings, keyed by flag name (`relist-period = "2s"`, `status-mode = "full"`).
    /// Flags and environment variables win over it.
    #[arg(long, global = true, value_name = "PATH", env = "PLEGD_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub log: LogArgs,
    /// Threads that run plegd's work. With 1 (the default) everything runs on one thread, which
    /// keeps memory lowest; more give a multi-threaded runtime with that many workers.
    #[arg(long, global = true, value_name = "N", default_value_t = 1, value_parser = parse_capacity, env = "PLEGD_WORKER_THREADS")]
    pub worker_threads: usize,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Relist the runtime and print pod lifecycle events; needs no apiserver.
    Watch(WatchArgs),
    /// The daemon: lifecycle events from the runtime, pod status and conditions to the apiserver.
    Run(RunArgs),
    /// Follow the lifecycle events of a running `plegd run`.
    Events(EventsArgs),
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The daemon's API socket.
    #[arg(long, value_name = "PATH", default_value = crate::observe::DEFAULT_API_SOCKET, env = "PLEGD_API_SOCKET")]
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
    #[arg(long, global = true, default_value = "info", env = "PLEGD_LOG_LEVEL")]
    pub log_level: String,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "PLEGD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 1s, 3m)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_capacity(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Flags shared by every command that talks to the runtime.
#[derive(Debug, Args, Clone)]
pub struct RuntimeArgs {
    /// The container runtime's CRI socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CRI_SOCKET, env = "PLEGD_CRI_SOCKET")]
    pub cri_socket: PathBuf,
    /// Deadline of each CRI call.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
    pub cri_timeout: Duration,
    /// Period between two global relists while no runtime event stream is connected.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_positive_duration, env = "PLEGD_RELIST_PERIOD")]
    pub relist_period: Duration,
    /// Period between two global relists while the runtime event stream (--triggers) is connected:
    /// the relist then only catches what the stream lost. At least --relist-period, less than
    /// --relist-threshold.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration, env = "PLEGD_RELIST_PERIOD_WITH_TRIGGERS")]
    pub relist_period_with_triggers: Duration,
    /// The PLEG is unhealthy when no relist succeeded for this long.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_positive_duration, env = "PLEGD_RELIST_THRESHOLD")]
    pub relist_threshold: Duration,
    /// Runtime events that trigger a relist of the pod they name, between periodic relists.
    #[arg(long, value_enum, default_value_t = TriggerMode::Auto, env = "PLEGD_TRIGGERS")]
    pub triggers: TriggerMode,
    /// Longest wait between reconnections of a failed trigger stream.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration)]
    pub trigger_max_backoff: Duration,
    /// Capacity of the lifecycle event channel.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CHANNEL_CAPACITY, value_parser = parse_capacity)]
    pub event_channel_capacity: usize,
}

impl RuntimeArgs {
    /// The relations between the relist flags: one line naming the flag and its allowed range.
    pub fn check(&self) -> Result<(), String> {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if self.relist_period >= self.relist_threshold {
            return Err(format!(
                "--relist-period {}: must be less than --relist-threshold ({})",
                show(self.relist_period),
                show(self.relist_threshold)
            ));
        }
        // Without triggers the period with triggers is never used.
        let stretched = self.triggers != TriggerMode::None;
        if stretched
            && (self.relist_period_with_triggers < self.relist_period
                || self.relist_period_with_triggers >= self.relist_threshold)
        {
            return Err(format!(
                "--relist-period-with-triggers {}: must be at least --relist-period ({}) and less than --relist-threshold ({})",
                show(self.relist_period_with_triggers),
                show(self.relist_period),
                show(self.relist_threshold)
            ));
        }
        Ok(())
    }

    pub fn pleg_config(&self) -> PlegConfig {
        PlegConfig {
            relist_period: self.relist_period,
            relist_period_with_triggers: self.relist_period_with_triggers,
            relist_threshold: self.relist_threshold,
            channel_capacity: self.event_channel_capacity,
        }
    }

    pub fn trigger_options(&self) -> TriggerOptions {
        TriggerOptions {
            max_backoff: self.trigger_max_backoff,
            ..TriggerOptions::default()
        }
    }

    pub fn cri_options(&self) -> CriOptions {
        CriOptions {
            call_timeout: self.cri_timeout,
            ..CriOptions::default()
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

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// This node's name: only pods bound to it are watched and written.
    #[arg(long, env = "NODE_NAME", default_value = "")]
    pub node_name: String,
    /// The node's IPs (comma-separated, primary first): hostIP(s), and podIPs of host-network pods.
    #[arg(long, env = "NODE_IP", value_delimiter = ',')]
    pub node_ip: Vec<String>,
    /// Kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster service account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// What plegd writes: only its own conditions (beside a kubelet), the full status (no kubelet),
    /// or nothing but a comparison with what the kubelet wrote.
    #[arg(long, value_enum, default_value_t = StatusMode::Conditions, env = "PLEGD_STATUS_MODE")]
    pub status_mode: StatusMode,
    /// Publish Kubernetes Events when a container dies or is OOM-killed.
    #[arg(long)]
    pub emit_events: bool,
    /// Status writers working in parallel.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = parse_capacity)]
    pub status_writers: usize,
    /// Sustained status PATCHes per second.
    #[arg(long, value_name = "QPS", default_value_t = 50.0, value_parser = parse_qps)]
    pub status_qps: f64,
    /// Status PATCHes allowed at once after a quiet spell.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = parse_burst)]
    pub status_burst: u32,
    /// Unix socket of the observation API (`plegd events`); `off` to not serve it.
    #[arg(long, value_name = "PATH", default_value = crate::observe::DEFAULT_API_SOCKET, env = "PLEGD_API_SOCKET")]
    pub api_socket: String,
    /// Address of /metrics, /healthz and /readyz; `off` to not serve them.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9808", value_parser = parse_listen, env = "PLEGD_METRICS_ADDRESS")]
    pub metrics_address: Listen,
    /// How long pending status writes may take to land at shutdown.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
    pub shutdown_timeout: Duration,
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

fn parse_qps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(q) if q > 0.0 && q.is_finite() => Ok(q),
        Ok(_) => Err("must be a number greater than zero".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_burst(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl RunArgs {
    pub fn daemon_options(&self) -> DaemonOptions {
        DaemonOptions {
            cri_socket: self.runtime.cri_socket.clone(),
            cri: self.runtime.cri_options(),
            pleg: self.runtime.pleg_config(),
            triggers: self.runtime.triggers,
            trigger_options: self.runtime.trigger_options(),
            kubeconfig: self.kubeconfig.clone(),
            manager: ManagerConfig {
                node_name: self.node_name.clone(),
                writers: self.status_writers,
                qps: self.status_qps,
                burst: self.status_burst,
                ..ManagerConfig::default()
            },
            sync: SyncConfig {
                mode: self.status_mode,
                runtime_name: String::new(),
                node_ips: self.node_ip.iter().filter(|ip| !ip.is_empty()).cloned().collect(),
                ..SyncConfig::default()
            },
            emit_events: self.emit_events,
            api_socket: (self.api_socket != "off" && !self.api_socket.is_empty())
                .then(|| PathBuf::from(&self.api_socket)),
            metrics_address: self.metrics_address.0,
            shutdown_timeout: self.shutdown_timeout,
        }
    }
}

fn init_logging(args: &LogArgs) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::try_new(&v).map_err(|e| format!("RUST_LOG: {e}"))?,
        _ => EnvFilter::try_new(&args.log_level).map_err(|e| format!("--log-level: {e}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| format!("logging: {e}"))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the process still ends on the default action.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Watch(args) => {
            let options = WatchOptions {
                cri_socket: args.runtime.cri_socket.clone(),
                pleg: args.runtime.pleg_config(),
                cri: args.runtime.cri_options(),
                output: args.output,
                triggers: args.runtime.triggers,
                trigger_options: args.runtime.trigger_options(),
            };
            crate::watch::watch(options, std::io::stdout(), shutdown_signal()).await?;
        }
        Command::Events(args) => {
            let request = crate::observe::api::WatchRequest {
                namespace: args.namespace.unwrap_or_default(),
                pod: args.pod.unwrap_or_default(),
                types: args.types,
            };
            let follow = crate::observe::follow(&args.socket, request, args.output, std::io::stdout());
            tokio::select! {
                result = follow => result?,
                () = shutdown_signal() => {}
            }
        }
        Command::Run(args) => {
            let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
            crate::daemon::run(args.daemon_options(), metrics, shutdown_signal()).await?;
        }
    }
    Ok(())
}

/// The whole program: parse, set up logging, run, and turn an error into one line and exit code 1.
/// Why the config file cannot be used. Each message names the file and the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config {path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("--config {path}: unknown setting {key:?} for `plegd {command}`")]
    Unknown {
        path: PathBuf,
        key: String,
        command: String,
    },
    #[error("--config {path}: setting {key:?} must be a string, number, boolean or list of them")]
    Type { path: PathBuf, key: String },
}

fn config_value(value: &toml::Value) -> Option<Vec<String>> {
    match value {
        toml::Value::String(s) => Some(vec![s.clone()]),
        toml::Value::Integer(i) => Some(vec![i.to_string()]),
        toml::Value::Float(f) => Some(vec![f.to_string()]),
        toml::Value::Boolean(b) => Some(vec![b.to_string()]),
        toml::Value::Array(items) => items
            .iter()
            .map(config_value)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat()),
        _ => None,
    }
}

/// The command line with the config file's settings put in front of it: each setting becomes the
/// flag of the same name unless that flag's environment variable is set; flags given on the command
/// line come later and win.
pub fn args_with_config(
    args: Vec<std::ffi::OsString>,
    path: &std::path::Path,
) -> Result<Vec<std::ffi::OsString>, ConfigError> {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    // The subcommand is the first argument that names one.
    let command = Cli::command();
    let Some((position, sub)) = args.iter().enumerate().skip(1).find_map(|(i, a)| {
        let a = a.to_str()?;
        command.find_subcommand(a).map(|c| (i, c.clone()))
    }) else {
        return Ok(args);
    };
    let mut injected = Vec::new();
    for (key, value) in &table {
        let arg = sub
            .get_arguments()
            .chain(command.get_arguments())
            .find(|a| a.get_long() == Some(key.as_str()));
        let Some(arg) = arg.filter(|a| a.get_id() != "config") else {
            return Err(ConfigError::Unknown {
                path: path.to_owned(),
                key: key.clone(),
                command: sub.get_name().to_owned(),
            });
        };
        if arg.get_env().is_some_and(|env| std::env::var_os(env).is_some()) {
            continue;
        }
        let values = config_value(value).ok_or_else(|| ConfigError::Type {
            path: path.to_owned(),
            key: key.clone(),
        })?;
        let is_flag = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        if is_flag {
            if values == ["true"] {
                injected.push(format!("--{key}").into());
            }
            continue;
        }
        injected.push(format!("--{key}={}", values.join(",")).into());
    }
    let mut out = args;
    out.splice(position + 1..position + 1, injected);
    Ok(out)
}

fn parse_cli() -> Result<Cli, String> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // clap prints its own one-line errors (and --help) and exits.
    let first = Cli::try_parse_from(&args).unwrap_or_else(|e| e.exit());
    let cli = match first.config.clone() {
        None => first,
        Some(path) => {
            let args = args_with_config(args, &path).map_err(|e| e.to_string())?;
            Cli::try_parse_from(&args).unwrap_or_else(|e| e.exit())
        }
    };
    cli.check()?;
    Ok(cli)
}

impl Cli {
    /// What clap cannot check alone: relations between flags.
    pub fn check(&self) -> Result<(), String> {
        match &self.command {
            Command::Watch(args) => args.runtime.check(),
            Command::Run(args) => args.runtime.check(),
            Command::Events(_) => Ok(()),
        }
    }
}

/// The async runtime for `--worker-threads`: one thread (tokio's current-thread scheduler) for 1,
/// else a multi-threaded runtime with that many workers. With glibc's malloc each worker thread
/// allocates from an arena of its own, and memory freed in one arena is not reused by another:
/// one thread keeps plegd's resident memory lowest, and plegd's work fits in one thread easily.
pub fn async_runtime(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if worker_threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads)
            .enable_all()
            .build()
    }
}

pub fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("plegd: error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&cli.log) {
        eprintln!("plegd: error: {e}");
        return ExitCode::from(2);
    }
    let runtime = match async_runtime(cli.worker_threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plegd: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plegd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(args).map_err(|e| e.to_string())
    }

    #[test]
    fn watch_defaults() {
        let cli = parse(&["plegd", "watch"]).unwrap();
        let Command::Watch(w) = cli.command else {
            panic!("watch")
        };
        assert_eq!(w.runtime.cri_socket, PathBuf::from(DEFAULT_CRI_SOCKET));
        assert_eq!(w.runtime.relist_period, Duration::from_secs(1));
        assert_eq!(w.runtime.relist_threshold, Duration::from_secs(180));
        assert_eq!(w.output, OutputFormat::Text);
        assert_eq!(w.runtime.triggers, TriggerMode::Auto);
        assert_eq!(cli.worker_threads, 1);
    }

    #[test]
    fn worker_threads_choose_the_runtime() {
        let cli = parse(&["plegd", "run", "--node-name", "n1", "--worker-threads", "3"]).unwrap();
        assert_eq!(cli.worker_threads, 3);
        let one = async_runtime(1).unwrap();
        assert_eq!(
            one.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::CurrentThread
        );
        assert_eq!(one.metrics().num_workers(), 1);
        let three = async_runtime(3).unwrap();
        assert_eq!(
            three.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
        assert_eq!(three.metrics().num_workers(), 3);
    }

    #[test]
    fn run_flags() {
        let cli = parse(&[
            "plegd",
            "run",
            "--node-name",
            "n1",
            "--node-ip",
            "192.0.2.1,fd00::1",
            "--status-mode",
            "full",
            "--emit-events",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else { panic!("run") };
        let o = r.daemon_options();
        assert_eq!(o.manager.node_name, "n1");
        assert_eq!(o.sync.node_ips, ["192.0.2.1", "fd00::1"]);
        assert_eq!(o.sync.mode, StatusMode::Full);
        assert!(o.emit_events);
        let err = parse(&["plegd", "run", "--status-mode", "everything"]).unwrap_err();
        assert!(err.contains("--status-mode"), "{err}");
        let err = parse(&["plegd", "run", "--status-qps", "0"]).unwrap_err();
        assert!(err.contains("--status-qps"), "{err}");
        let err = parse(&["plegd", "run", "--metrics-address", "everywhere"]).unwrap_err();
        assert!(err.contains("--metrics-address"), "{err}");
        let Command::Run(r) = parse(&["plegd", "run", "--metrics-address", "off", "--api-socket", "off"])
            .unwrap()
            .command
        else {
            panic!("run")
        };
        let o = r.daemon_options();
        assert_eq!((o.metrics_address, o.api_socket), (None, None));
        assert_eq!(o.shutdown_timeout, Duration::from_secs(10));
        let err = parse(&["plegd", "events", "--type", "Whatever"]).unwrap_err();
        assert!(err.contains("--type"), "{err}");
    }

    fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plegd.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn argv(args: &[&str]) -> Vec<std::ffi::OsString> {
        args.iter().map(Into::into).collect()
    }

    #[test]
    fn config_file_fills_in_what_flags_do_not_say() {
        let (_d, path) = config_file(
            "node-name = \"from-file\"\nrelist-period = \"2s\"\nstatus-mode = \"full\"\nemit-events = true\nnode-ip = [\"192.0.2.1\", \"fd00::1\"]\n",
        );
        let args = args_with_config(argv(&["plegd", "run", "--relist-period", "5s"]), &path).unwrap();
        let cli = Cli::try_parse_from(args).unwrap();
        let Command::Run(r) = cli.command else { panic!("run") };
        assert_eq!(r.node_name, "from-file");
        assert_eq!(r.runtime.relist_period, Duration::from_secs(5), "the command line wins");
        assert_eq!(r.status_mode, StatusMode::Full);
        assert!(r.emit_events);
        assert_eq!(r.node_ip, ["192.0.2.1", "fd00::1"]);
    }

    #[test]
    fn config_file_errors_name_the_setting() {
        let (_d, path) = config_file("relist-perod = \"2s\"\n");
        let err = args_with_config(argv(&["plegd", "run"]), &path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown setting \"relist-perod\" for `plegd run`"),
            "{err}"
        );
        let (_d, path) = config_file("relist-period = \n");
        assert!(
            args_with_config(argv(&["plegd", "run"]), &path)
                .unwrap_err()
                .to_string()
                .contains("not valid TOML")
        );
        // A bad value is reported by the flag it fills, like a bad flag.
        let (_d, path) = config_file("relist-period = \"soon\"\n");
        let args = args_with_config(argv(&["plegd", "run"]), &path).unwrap();
        let err = Cli::try_parse_from(args).unwrap_err().to_string();
        assert!(err.contains("--relist-period"), "{err}");
        let err = args_with_config(argv(&["plegd", "run"]), std::path::Path::new("/nonexistent.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--config /nonexistent.toml:"), "{err}");
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let err = parse(&["plegd", "watch", "--relist-period", "soon"]).unwrap_err();
        assert!(err.contains("--relist-period"), "{err}");
        let err = parse(&["plegd", "watch", "--relist-period", "0s"]).unwrap_err();
        assert!(
            err.contains("--relist-period") && err.contains("greater than zero"),
            "{err}"
        );
        let err = parse(&["plegd", "watch", "--triggers", "sometimes"]).unwrap_err();
        assert!(err.contains("--triggers"), "{err}");
        let err = parse(&["plegd", "watch", "--output", "yaml"]).unwrap_err();
        assert!(err.contains("--output"), "{err}");
        let err = parse(&["plegd", "watch", "--event-channel-capacity", "0"]).unwrap_err();
        assert!(err.contains("--event-channel-capacity"), "{err}");
        let err = parse(&["plegd", "run", "--worker-threads", "0"]).unwrap_err();
        assert!(err.contains("--worker-threads") && err.contains("at least 1"), "{err}");
    }

    fn check(args: &[&str]) -> Result<(), String> {
        parse(args)?.check()
    }

    #[test]
    fn relist_periods_keep_their_order() {
        assert_eq!(check(&["plegd", "watch"]), Ok(()));
        let cli = parse(&["plegd", "run"]).unwrap();
        let Command::Run(r) = cli.command else { panic!("run") };
        let config = r.runtime.pleg_config();
        assert_eq!(
            (config.period(false), config.period(true)),
            (Duration::from_secs(1), Duration::from_secs(30))
        );
        assert_eq!(
            check(&[
                "plegd",
                "run",
                "--relist-period",
                "2s",
                "--relist-period-with-triggers",
                "2s"
            ]),
            Ok(())
        );
        let err = check(&["plegd", "watch", "--relist-period-with-triggers", "500ms"]).unwrap_err();
        assert_eq!(
            err,
            "--relist-period-with-triggers 500ms: must be at least --relist-period (1s) and less than --relist-threshold (3m)"
        );
        let err = check(&["plegd", "run", "--relist-period-with-triggers", "5m"]).unwrap_err();
        assert!(err.starts_with("--relist-period-with-triggers 5m: "), "{err}");
        let err = check(&["plegd", "run", "--relist-period", "3m"]).unwrap_err();
        assert_eq!(err, "--relist-period 3m: must be less than --relist-threshold (3m)");
        let err = check(&[
            "plegd",
            "run",
            "--relist-threshold",
            "20s",
            "--relist-period-with-triggers",
            "20s",
        ])
        .unwrap_err();
        assert!(err.contains("less than --relist-threshold (20s)"), "{err}");
        // Unused without triggers, so not in the way of a short threshold.
        assert_eq!(
            check(&[
                "plegd",
                "run",
                "--triggers",
                "none",
                "--relist-period",
                "200ms",
                "--relist-threshold",
                "1s"
            ]),
            Ok(())
        );
    }
}
