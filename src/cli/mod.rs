//! The command line's edge: parse the flags ([`args`], with the config file of [`config`]), set up
//! logging, build the async runtime and run a command. Everything below returns typed errors; here
//! they become one line on stderr and an exit code: 2 for a bad flag or setting, 1 for a failure.

pub mod args;
pub mod config;

use std::ffi::OsString;
use std::process::ExitCode;

pub use args::{
    Checked, Cli, Command, DEFAULT_CRI_SOCKET, EventsArgs, Invocation, Listen, LogArgs, LogFormat, RunArgs,
    RuntimeArgs, WatchArgs,
};
pub use config::{ConfigError, args_with_config};

fn init_logging(args: &LogArgs) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::try_new(&v).map_err(|e| format!("RUST_LOG: {e}"))?,
        _ => EnvFilter::try_new(&args.log_level).map_err(|e| format!("--log-level: {e}"))?,
    };
    let colour = log_colour(
        std::env::var_os("NO_COLOR"),
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| format!("logging: {e}"))
}

/// Colour in log lines only for a person at a terminal — never in a file, journald or `kubectl
/// logs` — and not when NO_COLOR is set to anything but the empty string (https://no-color.org).
fn log_colour(no_color: Option<std::ffi::OsString>, stderr_is_terminal: bool) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
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

async fn run(invocation: Invocation) -> anyhow::Result<()> {
    match invocation {
        Invocation::Watch(config) => {
            crate::observe::watch::watch(*config, std::io::stdout(), shutdown_signal()).await?;
        }
        Invocation::Events(args) => {
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
        Invocation::Status(args) => {
            let request = crate::observe::api::StatusServiceWatchRequest {
                namespace: args.namespace.unwrap_or_default(),
                pod: args.pod.unwrap_or_default(),
            };
            let follow = crate::observe::follow_statuses(&args.socket, request, args.output, std::io::stdout());
            tokio::select! {
                result = follow => result?,
                () = shutdown_signal() => {}
            }
        }
        Invocation::ReleaseGates(config) => {
            let done = crate::status::release::release_gates(&config).await?;
            println!(
                "readiness gate released on {} pods ({} released before); policy {} {}; {} may be deleted",
                done.released,
                done.already,
                config.policy,
                if done.policy_deleted {
                    "deleted"
                } else {
                    "was not there"
                },
                crate::status::release::KUBELET_POLICY,
            );
        }
        Invocation::Run(config) => {
            let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
            crate::daemon::run(*config, metrics, shutdown_signal()).await?;
        }
    }
    Ok(())
}

/// A clap error as one line (without the `error: ` prefix clap adds), or `None` for
/// `--help` and `--version`, which clap prints itself.
fn clap_line(error: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return None;
    }
    // What clap says on several lines (the error, then e.g. the possible values), minus the
    // usage line and the pointer to --help.
    let text = error.render().to_string();
    let said: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect();
    let line = said.join(" ");
    Some(line.trim_start_matches("error: ").to_owned())
}

/// The command line, the config file's settings in it, and the checks between flags: the one-line
/// error of the first thing wrong.
pub fn parse_args(args: Vec<OsString>) -> Result<Checked, String> {
    let parse = |args: &[OsString]| match Cli::try_parse_from(args) {
        Ok(cli) => Ok(cli),
        Err(e) => match clap_line(&e) {
            Some(line) => Err(line),
            None => e.exit(),
        },
    };
    use clap::Parser;
    let first = parse(&args)?;
    let cli = match first.config.clone() {
        None => first,
        Some(path) => {
            let args = args_with_config(args, &path).map_err(|e| e.to_string())?;
            // A bad value from the file is named by its flag; say where it came from.
            parse(&args).map_err(|e| format!("--config {}: {e}", path.display()))?
        }
    };
    cli.check()
}

/// An error and its causes on one line, each cause once. plegd's own errors either name their
/// cause in their text or expose it as their source, never both (`errors_name_or_expose_their_cause`
/// below); errors of other crates sometimes do both, and a cause whose text the line already holds
/// is then not repeated.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.ends_with(text) || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
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
    let checked = match parse_args(std::env::args_os().collect()) {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("plegd: error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&checked.log) {
        eprintln!("plegd: error: {e}");
        return ExitCode::from(2);
    }
    let runtime = match async_runtime(checked.worker_threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plegd: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(checked.invocation)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plegd: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::print::OutputFormat;
    use crate::status::StatusMode;
    use crate::triggers::TriggerMode;
    use clap::Parser;
    use std::path::PathBuf;
    use std::time::Duration;

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
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(log_colour(None, true));
        assert!(log_colour(Some("".into()), true), "an empty NO_COLOR does not count");
        assert!(!log_colour(Some("1".into()), true));
        assert!(!log_colour(None, false), "not into files, pipes or journald");
        assert!(!log_colour(Some("1".into()), false));
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
            "--container-stop-signals",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else { panic!("run") };
        let o = r.daemon_config().unwrap();
        assert_eq!(o.manager.node_name.as_str(), "n1");
        assert_eq!(o.sync.node_ips, ["192.0.2.1", "fd00::1"]);
        assert_eq!(o.sync.mode, StatusMode::Full);
        assert!(o.emit_events);
        assert!(o.sync.stop_signals);
        let Command::Run(r) = parse(&["plegd", "run", "--node-name", "n1"]).unwrap().command else {
            panic!("run")
        };
        assert!(
            !r.daemon_config().unwrap().sync.stop_signals,
            "off by default, as the 1.37 kubelet's gate"
        );
        assert!(!r.daemon_config().unwrap().sync.report_generated, "stored by default");
        let Command::Run(r) = parse(&["plegd", "run", "--node-name", "n1", "--status-report-form", "generated"])
            .unwrap()
            .command
        else {
            panic!("run")
        };
        assert!(r.daemon_config().unwrap().sync.report_generated);
        let err = parse(&["plegd", "run", "--status-mode", "everything"]).unwrap_err();
        assert!(err.contains("--status-mode"), "{err}");
        let err = parse(&["plegd", "run", "--status-qps", "0"]).unwrap_err();
        assert!(err.contains("--status-qps"), "{err}");
        let err = parse(&["plegd", "run", "--metrics-address", "everywhere"]).unwrap_err();
        assert!(err.contains("--metrics-address"), "{err}");
        let Command::Run(r) = parse(&[
            "plegd",
            "run",
            "--node-name",
            "n1",
            "--metrics-address",
            "off",
            "--api-socket",
            "off",
        ])
        .unwrap()
        .command
        else {
            panic!("run")
        };
        let o = r.daemon_config().unwrap();
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
            err.contains("--relist-period") && err.contains("allowed: 100ms to 10m"),
            "{err}"
        );
        let err = parse(&["plegd", "watch", "--triggers", "sometimes"]).unwrap_err();
        assert!(err.contains("--triggers"), "{err}");
        let err = parse(&["plegd", "watch", "--output", "yaml"]).unwrap_err();
        assert!(err.contains("--output"), "{err}");
        let err = parse(&["plegd", "watch", "--event-channel-capacity", "0"]).unwrap_err();
        assert!(err.contains("--event-channel-capacity"), "{err}");
        let err = parse(&["plegd", "watch", "--kubelet-root-dir", "var/lib/kubelet"]).unwrap_err();
        assert!(
            err.contains("--kubelet-root-dir") && err.contains("absolute path"),
            "{err}"
        );
        let err = parse(&["plegd", "run", "--pod-logs-dir", ""]).unwrap_err();
        assert!(err.contains("--pod-logs-dir"), "{err}");
        let err = parse(&["plegd", "run", "--worker-threads", "0"]).unwrap_err();
        assert!(
            err.contains("--worker-threads") && err.contains("allowed: 1 to 64"),
            "{err}"
        );
        // An object name as the apiserver validates it: each label on its own.
        for bad in ["a..b", "a.-b", "a-", "A", "a_b", ""] {
            let err = parse(&["plegd", "release-gates", &format!("--policy={bad}")]).unwrap_err();
            assert!(err.contains("--policy") && err.contains("object name"), "{bad}: {err}");
        }
        assert!(parse(&["plegd", "release-gates", "--policy", "plegd-gate.v2"]).is_ok());
    }

    fn check(args: &[&str]) -> Result<(), String> {
        parse(args)?.check().map(drop)
    }

    #[test]
    fn relist_periods_keep_their_order() {
        assert_eq!(check(&["plegd", "watch"]), Ok(()));
        let cli = parse(&["plegd", "run", "--node-name", "n1"]).unwrap();
        let Command::Run(r) = cli.command else { panic!("run") };
        let config = r.runtime.pleg_config().unwrap();
        assert_eq!(
            (config.period(false), config.period(true)),
            (Duration::from_secs(1), Duration::from_secs(30))
        );
        assert_eq!(
            check(&[
                "plegd",
                "run",
                "--node-name=n1",
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
        let err = check(&["plegd", "run", "--node-name=n1", "--relist-period-with-triggers", "5m"]).unwrap_err();
        assert!(err.starts_with("--relist-period-with-triggers 5m: "), "{err}");
        let err = check(&["plegd", "run", "--node-name=n1", "--relist-period", "3m"]).unwrap_err();
        assert_eq!(err, "--relist-period 3m: must be less than --relist-threshold (3m)");
        let err = check(&[
            "plegd",
            "run",
            "--node-name=n1",
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
                "--node-name=n1",
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

    #[test]
    fn config_values_of_the_wrong_type_are_refused_by_name() {
        let (_d, path) = config_file("emit-events = \"yes\"\n");
        let err = args_with_config(argv(&["plegd", "run"]), &path)
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("setting \"emit-events\" must be true or false"), "{err}");
        let (_d, path) = config_file("[relist-period]\nx = 1\n");
        let err = args_with_config(argv(&["plegd", "run"]), &path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("setting \"relist-period\" must be a string"), "{err}");
        let (_d, path) = config_file("emit-events = false\n");
        let args = args_with_config(argv(&["plegd", "run"]), &path).unwrap();
        assert_eq!(args, argv(&["plegd", "run"]));
    }

    #[test]
    fn only_a_bounded_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let err = args_with_config(argv(&["plegd", "run"]), dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("not a regular file"), "{err}");
        let err = args_with_config(argv(&["plegd", "run"]), std::path::Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("not a regular file"), "{err}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, "# padding\n".repeat(200_000)).unwrap();
        let err = args_with_config(argv(&["plegd", "run"]), &big).unwrap_err().to_string();
        assert!(err.ends_with("larger than 1048576 bytes"), "{err}");
    }

    #[test]
    fn an_error_chain_is_one_line_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(io)
            .context("cannot read /x: no such file")
            .context("cannot load kubeconfig");
        assert_eq!(one_line(&error), "cannot load kubeconfig: cannot read /x: no such file");
        let multi = anyhow::anyhow!("first line\n  second line");
        assert_eq!(one_line(&multi), "first line second line");
    }

    /// The `#[error(...)]` attributes of `src/`, each with the lines below it up to the next one
    /// or to the end of its enum or struct: (file, message, fields).
    fn error_definitions() -> Vec<(String, String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, String, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let lines: Vec<&str> = text.lines().collect();
                let starts = |line: &str| line.trim_start().starts_with("#[error(");
                for (at, _) in lines.iter().enumerate().filter(|(_, l)| starts(l)) {
                    let message_end = (at..lines.len())
                        .find(|&i| lines[i].trim_end().ends_with(")]"))
                        .unwrap();
                    let fields_end = (message_end + 1..lines.len())
                        .find(|&i| starts(lines[i]) || lines[i].starts_with('}') || lines[i] == "    }")
                        .unwrap_or(lines.len());
                    out.push((
                        path.display().to_string(),
                        lines[at..=message_end].join("\n"),
                        lines[message_end + 1..fields_end].join("\n"),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
        out
    }

    #[test]
    fn errors_name_or_expose_their_cause() {
        let definitions = error_definitions();
        assert!(
            definitions.len() > 40,
            "the scan finds the errors: {}",
            definitions.len()
        );
        let mut both = Vec::new();
        for (file, message, fields) in &definitions {
            if message.contains("transparent") {
                continue;
            }
            let exposes = fields.contains("#[source]") || fields.contains("#[from]") || fields.contains(" source:");
            let names = message.contains("{0") || message.contains("{source") || message.contains(".0");
            if exposes && names {
                both.push(format!("{file}: {message}"));
            }
        }
        assert!(
            both.is_empty(),
            "these errors print their source and also return it (one_line would hide the repeat): {both:#?}"
        );
        // The scan sees a field that exposes: one of the errors that wrap another transparently.
        assert!(
            definitions
                .iter()
                .any(|(_, m, f)| m.contains("transparent") && f.contains("#[from]"))
        );
    }

    #[test]
    fn clap_errors_are_one_line() {
        let err = parse_args(argv(&["plegd", "watch", "--relist-period", "1ns"])).unwrap_err();
        assert_eq!(
            err,
            "invalid value '1ns' for '--relist-period <DURATION>': out of range; allowed: 100ms to 10m"
        );
        let err = parse_args(argv(&["plegd", "run", "--status-qps", "NaN"])).unwrap_err();
        assert!(
            err.contains("--status-qps") && err.ends_with("allowed: 0.1 to 10000"),
            "{err}"
        );
        // A count of one at least, given 0: out of range like any other value.
        for (flag, allowed) in [
            ("--status-writers", "1 to 64"),
            ("--event-channel-capacity", "1 to 1048576"),
            ("--status-burst", "1 to 10000"),
        ] {
            let err = parse_args(argv(&["plegd", "run", flag, "0"])).unwrap_err();
            assert_eq!(
                err,
                format!("invalid value '0' for '{flag} <N>': out of range; allowed: {allowed}")
            );
        }
    }
}
