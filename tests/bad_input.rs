//! Bad input at start, as a user types it: every row is refused in one line on stderr that names
//! the flag (or config key) and what is allowed, with exit code 2 — no panic, no hang, no silent
//! change, no file touched.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// Run plegd with `args` (NODE_NAME set unless `node` is false): exit code and stderr, or a panic
/// when it does not end within 10 s.
fn plegd(args: &[&str], node: bool) -> (Option<i32>, String) {
    let mut command = Command::new(PLEGD);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .env_remove("PLEGD_CONFIG");
    if node {
        command.env("NODE_NAME", "n1");
    } else {
        command.env_remove("NODE_NAME");
    }
    let mut child = command.spawn().expect("spawn plegd");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("plegd {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code(), stderr)
}

#[test]
fn every_bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let config = |name: &str, text: &str| {
        std::fs::write(path(name), text).unwrap();
        path(name)
    };
    let fifo = path("fifo.toml");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = config("big.toml", &"# padding\n".repeat(200_000));
    let yes = config("yes.toml", "emit-events = \"yes\"\n");
    let unknown = config("unknown.toml", "relist-perod = \"2s\"\n");
    let table = config("table.toml", "[relist-period]\nseconds = 2\n");
    let tiny = config("tiny.toml", "relist-period = \"1ns\"\n");
    let precious = config("precious.sock", "precious");
    let ours = plegd_test_support::tls::certificates(dir.path(), "ours", &["localhost"]);
    let theirs = plegd_test_support::tls::certificates(dir.path(), "theirs", &["localhost"]);
    let (cert, key, their_key) = (
        ours.cert.to_str().unwrap().to_owned(),
        ours.key.to_str().unwrap().to_owned(),
        theirs.key.to_str().unwrap().to_owned(),
    );
    let missing = path("missing.crt");

    let rows: Vec<(Vec<&str>, bool, &[&str])> = vec![
        (
            vec!["watch", "--event-channel-capacity", "4611686018427387904"],
            true,
            &["--event-channel-capacity", "allowed: 1 to 1048576"],
        ),
        (
            vec!["watch", "--event-channel-capacity", "9223372036854775807"],
            true,
            &["--event-channel-capacity", "allowed: 1 to 1048576"],
        ),
        (
            vec!["watch", "--event-channel-capacity", "99999999999999999999999"],
            true,
            &["--event-channel-capacity", "allowed: 1 to 1048576"],
        ),
        (
            vec!["watch", "--event-channel-capacity", "0"],
            true,
            &["--event-channel-capacity", "allowed: 1 to 1048576"],
        ),
        (
            vec!["--worker-threads", "100000", "watch"],
            true,
            &["--worker-threads", "allowed: 1 to 64"],
        ),
        (
            vec!["watch", "--worker-threads", "0"],
            true,
            &["--worker-threads", "allowed: 1 to 64"],
        ),
        (
            vec!["run", "--status-writers", "100000000"],
            true,
            &["--status-writers", "allowed: 1 to 64"],
        ),
        (
            vec!["run", "--shutdown-timeout", "100000000000s"],
            true,
            &["--shutdown-timeout", "allowed: 0s to 10m"],
        ),
        (
            vec!["run", "--shutdown-timeout", "18446744073709551615s"],
            true,
            &["--shutdown-timeout", "allowed: 0s to 10m"],
        ),
        (
            vec!["run", "--apiserver-timeout", "0s"],
            true,
            &["--apiserver-timeout", "allowed: 1s to 10m"],
        ),
        (
            vec!["watch", "--relist-period", "1ns"],
            true,
            &["--relist-period", "allowed: 100ms to 10m"],
        ),
        (
            vec!["watch", "--relist-period", "often"],
            true,
            &["--relist-period", "allowed: 100ms to 10m"],
        ),
        (
            vec!["watch", "--relist-threshold", "500ms"],
            true,
            &["--relist-threshold", "allowed: 1s to 1day"],
        ),
        (
            vec!["watch", "--relist-period-with-triggers", "2h"],
            true,
            &["--relist-period-with-triggers", "allowed: 100ms to 1h"],
        ),
        (
            vec!["watch", "--relist-period-with-triggers", "500ms"],
            true,
            &["--relist-period-with-triggers", "at least --relist-period"],
        ),
        (
            vec!["watch", "--relist-period", "5m"],
            true,
            &["--relist-period", "less than --relist-threshold"],
        ),
        (
            vec!["watch", "--cri-timeout", "0s"],
            true,
            &["--cri-timeout", "allowed: 100ms to 10m"],
        ),
        (
            vec!["watch", "--trigger-max-backoff", "1ms"],
            true,
            &["--trigger-max-backoff", "allowed: 100ms to 1h"],
        ),
        (
            vec!["run", "--status-qps", "1e-300"],
            true,
            &["--status-qps", "allowed: 0.1 to 10000"],
        ),
        (
            vec!["run", "--status-qps", "NaN"],
            true,
            &["--status-qps", "allowed: 0.1 to 10000"],
        ),
        (
            vec!["run", "--status-qps", "inf"],
            true,
            &["--status-qps", "allowed: 0.1 to 10000"],
        ),
        (
            vec!["run", "--status-burst", "0"],
            true,
            &["--status-burst", "allowed: 1 to 10000"],
        ),
        (
            vec!["run", "--status-burst", "4294967296"],
            true,
            &["--status-burst", "allowed: 1 to 10000"],
        ),
        (
            vec!["run", "--metrics-address", "everywhere"],
            true,
            &["--metrics-address", "IP:PORT"],
        ),
        (
            vec!["run", "--metrics-token-audience", ""],
            true,
            &["--metrics-token-audience", "1 to 256 printable ASCII characters"],
        ),
        (
            vec!["run", "--metrics-token-audience", "plegd metrics"],
            true,
            &["--metrics-token-audience", "1 to 256 printable ASCII characters"],
        ),
        (
            vec!["run", "--metrics-address", "0.0.0.0:9808", "--metrics-tls", "off"],
            true,
            &["--metrics-tls off", "clear text"],
        ),
        (
            vec!["run", "--metrics-tls", "sometimes"],
            true,
            &["--metrics-tls", "auto, on, off"],
        ),
        (
            vec!["run", "--status-report-form", "raw"],
            true,
            &["--status-report-form", "stored, generated"],
        ),
        (
            vec!["run", "--initial-list", "all"],
            true,
            &["--initial-list", "stream, pages, cache"],
        ),
        (
            vec!["run", "--metrics-tls-cert-file", &cert],
            true,
            &["--metrics-tls-cert-file needs --metrics-tls-private-key-file"],
        ),
        (
            vec!["run", "--metrics-tls-private-key-file", &key],
            true,
            &["--metrics-tls-private-key-file needs --metrics-tls-cert-file"],
        ),
        (
            vec![
                "run",
                "--metrics-tls-cert-file",
                &missing,
                "--metrics-tls-private-key-file",
                &key,
            ],
            true,
            &["--metrics-tls-cert-file", "missing.crt", "No such file"],
        ),
        (
            vec![
                "run",
                "--metrics-tls-cert-file",
                &cert,
                "--metrics-tls-private-key-file",
                &their_key,
            ],
            true,
            &[
                "--metrics-tls-cert-file",
                "theirs.key is not the private key of",
                "ours.crt",
            ],
        ),
        (
            vec![
                "run",
                "--metrics-tls-cert-file",
                &key,
                "--metrics-tls-private-key-file",
                &key,
            ],
            true,
            &["--metrics-tls-cert-file", "no PEM certificate"],
        ),
        (
            vec![
                "run",
                "--metrics-tls",
                "off",
                "--metrics-tls-cert-file",
                &cert,
                "--metrics-tls-private-key-file",
                &key,
            ],
            true,
            &["--metrics-tls off leaves --metrics-tls-cert-file unused"],
        ),
        (
            vec!["run", "--node-ip", "192.0.2"],
            true,
            &["--node-ip", "not an IP address"],
        ),
        (vec!["run"], false, &["--node-name (or NODE_NAME) is required"]),
        (
            vec!["run", "--node-name", "n1,metadata.name=web"],
            false,
            &["--node-name \"n1,metadata.name=web\": must be a DNS subdomain"],
        ),
        (
            vec!["run", "--api-socket", &precious],
            true,
            &["--api-socket", "not a socket"],
        ),
        (vec!["watch", "--log-level", "plegd=[bad"], true, &["--log-level"]),
        (
            vec!["watch", "--output", "yaml"],
            true,
            &["--output", "[possible values: text, json]"],
        ),
        (
            vec!["watch", "--config", &fifo],
            true,
            &["--config", "not a regular file"],
        ),
        (
            vec!["watch", "--config", "/dev/zero"],
            true,
            &["--config /dev/zero: not a regular file"],
        ),
        (
            vec!["watch", "--config", dir.path().to_str().unwrap()],
            true,
            &["--config", "not a regular file"],
        ),
        (
            vec!["watch", "--config", "/nonexistent/plegd.toml"],
            true,
            &["--config /nonexistent/plegd.toml: No such file"],
        ),
        (
            vec!["watch", "--config", &big],
            true,
            &["--config", "larger than 1048576 bytes"],
        ),
        (
            vec!["run", "--config", &yes],
            true,
            &["--config", "\"emit-events\" must be true or false"],
        ),
        (
            vec!["run", "--config", &unknown],
            true,
            &["--config", "unknown setting \"relist-perod\""],
        ),
        (
            vec!["run", "--config", &table],
            true,
            &["--config", "\"relist-period\" must be a string"],
        ),
        (
            vec!["watch", "--config", &tiny],
            true,
            &["--config", "--relist-period", "allowed: 100ms to 10m"],
        ),
    ];
    let mut failures = Vec::new();
    for (args, node, wanted) in &rows {
        let (code, stderr) = plegd(args, *node);
        let one_line = stderr.lines().count() == 1 && stderr.starts_with("plegd: error: ");
        let names = wanted.iter().all(|w| stderr.contains(w));
        if code != Some(2) || !one_line || !names || stderr.contains("panicked") {
            failures.push(format!("{args:?}: exit {code:?}, stderr {stderr:?}, wanted {wanted:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "precious",
        "--api-socket left the file alone"
    );
}

#[test]
fn help_and_version_still_print_and_exit_0() {
    for flag in ["--help", "--version"] {
        let out = Command::new(PLEGD).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(!out.stdout.is_empty(), "{flag}");
    }
    let out = Command::new(PLEGD).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for range in [
        "(1 to 64)",
        "(100ms to 10m",
        "(0.1 to 10000)",
        "(0s to 10m)",
        "(1 to 1048576)",
    ] {
        assert!(help.contains(range), "run --help states {range}");
    }
    assert!(
        !help.contains("[default: ]") && !help.contains("[default: \"\"]"),
        "no empty defaults in run --help:\n{help}"
    );
    // Environment variables are named, their values (empty or set) never shown.
    assert!(help.contains("[env: NODE_NAME]") && !help.contains("=]"), "{help}");
}

/// A `plegd run` that waits for a runtime that is not there logs a warning; its stderr as bytes,
/// with `wrap` (e.g. a terminal from `script`) around it.
fn waiting_log(no_color: Option<&str>, at_terminal: bool) -> String {
    let command = format!(
        "timeout -s INT 2 {PLEGD} run --node-name n1 --cri-socket /nonexistent/cri.sock --api-socket off --metrics-address off"
    );
    let mut process = if at_terminal {
        // script(1) gives the command a terminal and copies what it writes there.
        let mut c = Command::new("script");
        c.args(["-qefc", &command, "/dev/null"]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &format!("{command} 2>&1")]);
        c
    };
    process.env_remove("RUST_LOG").stdin(Stdio::null());
    match no_color {
        Some(v) => process.env("NO_COLOR", v),
        None => process.env_remove("NO_COLOR"),
    };
    let out = process.output().expect("run plegd");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("waiting for the container runtime"), "{text}");
    text
}

#[test]
fn log_colour_only_at_a_terminal_and_never_with_no_color() {
    assert!(
        !waiting_log(None, false).contains('\x1b'),
        "no colour into a pipe or file"
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("!!!!!!!! script(1) not found: the terminal half of the colour check is SKIPPED !!!!!!!!");
        return;
    }
    assert!(waiting_log(None, true).contains("\x1b["), "colour at a terminal");
    assert!(
        !waiting_log(Some("1"), true).contains('\x1b'),
        "NO_COLOR=1 at a terminal"
    );
    assert!(
        waiting_log(Some(""), true).contains("\x1b["),
        "an empty NO_COLOR does not count"
    );
}
