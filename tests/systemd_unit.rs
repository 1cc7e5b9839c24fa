//! systemd/plegd.service: `systemd-analyze verify` accepts it, and its sandboxing keeps the
//! `systemd-analyze security` exposure low. The unit is checked as shipped, with only ExecStart's
//! binary path pointed at the binary this build made.
//!
//! Then it runs under a real systemd (tests/support/systemd-sandbox.sh: PID 1 of its own
//! namespaces, managing only this test's units), with the settings in an environment file as a
//! user writes them: started before the runtime's socket exists it waits, without a restart, and
//! becomes active once the runtime is there; the watchdog pings stop while the runtime is away and
//! resume when it is back, without a restart; node memory figures are read; a configuration error
//! (exit 2) is not restarted over and over.

use plegd_test_support as support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::apiserver::{Apiserver, Identity};
use support::fake_cri::{FakeCri, FakeServer};
use support::process::{free_port, http_get, metric};
use support::tls::{Trust, https_get};

const UNIT: &str = include_str!("../systemd/plegd.service");

fn have_systemd_analyze() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn unit_for_this_build(dir: &std::path::Path) -> std::path::PathBuf {
    let text = UNIT.replace("/usr/local/bin/plegd", env!("CARGO_BIN_EXE_plegd"));
    assert_ne!(text, UNIT, "ExecStart names /usr/local/bin/plegd");
    let path = dir.join("plegd.service");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn unit_verifies_and_is_well_sandboxed() {
    if !have_systemd_analyze() {
        if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
            panic!("systemd-analyze is missing (tests/run.sh installs systemd)");
        }
        eprintln!("!!!!!!!! systemd-analyze not found: the systemd unit check is SKIPPED !!!!!!!!");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for plegd.service:").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure score in: {text}"));
    assert!(score <= 1.6, "exposure {score} (docs/operating.md records 1.6)");
    for needle in [
        "Type=notify",
        "WatchdogSec=",
        "Restart=always",
        "RestartPreventExitStatus=2",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateMounts=yes",
        "LimitNOFILE=65536",
        "EnvironmentFile=-/etc/plegd/plegd.env",
        "ExecStart=/usr/local/bin/plegd run\n",
    ] {
        assert!(UNIT.contains(needle), "{needle}");
    }
    // Settings come from the environment, so that the documented variables work: no flag on the
    // command line would override them. The host name is not the node name.
    assert!(
        !UNIT.lines().any(|l| !l.starts_with('#') && l.contains("%H")),
        "NODE_NAME must come from the environment file"
    );
    // /proc/meminfo must stay readable for the node figures; a path that may not exist yet must not
    // fail the unit.
    assert!(!UNIT.lines().any(|l| l.starts_with("ProcSubset=pid")));
    for line in UNIT
        .lines()
        .filter(|l| l.starts_with("ReadWritePaths=") || l.starts_with("ReadOnlyPaths="))
    {
        assert!(
            line.split('=')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .all(|p| p.starts_with('-')),
            "{line}"
        );
    }
}

/// A systemd of the test's own; killed (with everything it started) and its cgroups removed on drop.
struct Sandbox {
    child: Child,
    name: String,
    dir: PathBuf,
}

const SANDBOX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/systemd-sandbox.sh");

impl Sandbox {
    fn boot(dir: &Path, name: &str) -> Self {
        let log = std::fs::File::create(dir.join("systemd.log")).unwrap();
        let child = Command::new("bash")
            .args([SANDBOX, "boot"])
            .arg(dir)
            .arg(name)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start the systemd sandbox");
        Self {
            child,
            name: name.to_owned(),
            dir: dir.to_owned(),
        }
    }

    /// systemd's pid (in this namespace): the child of `unshare --fork`.
    fn systemd_pid(&self) -> Option<u32> {
        let unshare = self.child.id();
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    fn systemctl(&self, args: &[&str]) -> String {
        let pid = self.systemd_pid().expect("systemd runs").to_string();
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-m", "-p", "systemctl", "--no-pager"])
            .args(args)
            .output()
            .expect("nsenter systemctl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One property of plegd.service.
    fn show(&self, property: &str) -> String {
        self.systemctl(&["show", "plegd.service", "-p", property, "--value"])
            .trim()
            .to_owned()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("plegd.log")).unwrap_or_default()
    }

    async fn wait(&self, what: &str, timeout: Duration, cond: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; plegd.service: {}\nits log:\n{}",
                self.systemctl(&["status", "plegd.service"]),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(pid) = self.systemd_pid() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("bash").args([SANDBOX, "clean", &self.name]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn can_run_systemd() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("not Linux".into());
    }
    let uid = Command::new("id").arg("-u").output().map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root".into());
    }
    for tool in ["/lib/systemd/systemd", "/usr/bin/unshare", "/usr/bin/nsenter"] {
        if !Path::new(tool).exists() {
            return Err(format!("{tool} is missing"));
        }
    }
    Ok(())
}

/// A sample of /metrics, read as the unit serves it on the loopback: over TLS with the
/// certificate plegd made (pinned from its log), with a reader's `token`.
fn counter(sandbox: &Sandbox, port: u16, token: &str, name: &str) -> f64 {
    let log = sandbox.log();
    let fingerprint = log
        .lines()
        .filter(|l| l.contains("a self-signed certificate plegd made"))
        .find_map(|l| l.split("sha256=").nth(1)?.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| panic!("no self-signed certificate in plegd's log:\n{log}"));
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    https_get(
        address,
        "localhost",
        &Trust::Pinned(fingerprint),
        "/metrics",
        Some(token),
    )
    .ok()
    .and_then(|(_, body)| metric(&body, name))
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unit_under_systemd_waits_for_the_runtime_and_resumes_its_watchdog() {
    if let Err(why) = can_run_systemd() {
        if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
            panic!("cannot run systemd here: {why}");
        }
        eprintln!("!!!!!!!! {why}: the systemd unit run is SKIPPED !!!!!!!!");
        return;
    }
    // Not under /tmp: the unit has a private /tmp.
    let name = std::process::id().to_string();
    let dir = PathBuf::from(format!("/var/lib/plegd-test/sd-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("units/plegd.service.d")).unwrap();
    std::fs::create_dir_all(dir.join("cri")).unwrap();
    let api = Apiserver::start().await;
    let kubeconfig = api.kubeconfig_as(&dir, &Identity::Plegd("node-sd".into()));
    let port = free_port();
    let socket = dir.join("cri/cri.sock");

    // The binary is copied beside the units: the unit's private /tmp would hide a build under /tmp.
    let built = std::env::var("PLEGD_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_plegd").to_owned());
    let binary = dir.join("plegd");
    std::fs::copy(&built, &binary).expect("copy plegd beside the units");
    std::fs::write(
        dir.join("units/plegd.service"),
        UNIT.replace("/usr/local/bin/plegd", &binary.display().to_string()),
    )
    .unwrap();
    // Only what the sandbox needs: no boot targets to depend on, output to a file, a short watchdog.
    std::fs::write(
        dir.join("units/plegd.service.d/test.conf"),
        format!(
            "[Unit]\nDefaultDependencies=no\n[Service]\nWatchdogSec=20s\nEnvironmentFile={env}\nStandardOutput=append:{log}\nStandardError=append:{log}\n",
            env = dir.join("plegd.env").display(),
            log = dir.join("plegd.log").display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("units/plegd-test.target"),
        "[Unit]\nDefaultDependencies=no\nWants=plegd.service\n",
    )
    .unwrap();
    // The settings as a user writes them (docs/operating.md, "systemd").
    let settings = format!(
        "NODE_NAME=node-sd\nPLEGD_CRI_SOCKET={}\nPLEGD_METRICS_ADDRESS=127.0.0.1:{port}\nKUBECONFIG={}\n\
         PLEGD_STATUS_MODE=shadow\nPLEGD_TRIGGERS=none\nPLEGD_RELIST_PERIOD=200ms\nPLEGD_RELIST_THRESHOLD=1s\n",
        socket.display(),
        kubeconfig.display()
    );
    std::fs::write(dir.join("plegd.env"), &settings).unwrap();
    let fake = FakeCri::new();
    fake.add_running_pod("sd-1", "web", 1);

    // Started before the runtime's socket exists: plegd waits (activating, not READY), no restart.
    let sandbox = Sandbox::boot(&dir, &name);
    sandbox
        .wait("plegd started", Duration::from_secs(20), |s| !s.log().is_empty())
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sandbox.show("ActiveState"), "activating", "{}", sandbox.log());
    assert_eq!(sandbox.show("NRestarts"), "0", "{}", sandbox.log());
    let main_pid = sandbox.show("MainPID");

    // The runtime appears: the first relist makes plegd READY, in the same process.
    let mut cri = FakeServer::serve_at(fake.clone(), &socket);
    sandbox
        .wait("plegd active", Duration::from_secs(20), |s| {
            s.show("ActiveState") == "active"
        })
        .await;
    assert_eq!(sandbox.show("NRestarts"), "0");
    assert_eq!(sandbox.show("MainPID"), main_pid, "the same plegd");
    // Watchdog pings arrive (every 10 s with WatchdogSec=20s: the outage below, with the dial's
    // backoff, takes 5–8 s on an idle machine, and a loaded one must not make it a restart).
    let first = sandbox.show("WatchdogTimestampMonotonic");
    sandbox
        .wait("a watchdog ping", Duration::from_secs(22), |s| {
            s.show("WatchdogTimestampMonotonic") != first
        })
        .await;
    // On the loopback too, /metrics asks for a token, over TLS: plain HTTP gets no answer.
    assert_eq!(http_get(port, "/metrics"), None, "plain HTTP on the unit's /metrics");
    // Node memory figures: /proc/meminfo is readable under the unit's sandbox. (The reader's
    // rights may take a moment to reach the apiserver's authorizer.)
    let reader = api.token_for(&Identity::MetricsReader);
    sandbox
        .wait(
            "node memory read, and /metrics read with a reader's token",
            Duration::from_secs(20),
            |s| counter(s, port, &reader, "plegd_node_memory_total_bytes") > 0.0,
        )
        .await;

    // The runtime goes away: health fails after the 1 s threshold and the pings stop; it comes
    // back before the watchdog's 20 s run out, the pings resume at once, and nothing restarted.
    cri.stop().await;
    sandbox
        .wait("pings withheld", Duration::from_secs(10), |s| {
            s.log().contains("not pinging the systemd watchdog")
        })
        .await;
    let withheld = sandbox.show("WatchdogTimestampMonotonic");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        sandbox.show("WatchdogTimestampMonotonic"),
        withheld,
        "no ping while unhealthy"
    );
    cri = FakeServer::serve_at(fake.clone(), &socket);
    sandbox
        .wait("pings resumed", Duration::from_secs(10), |s| {
            s.log().contains("systemd watchdog pings resume")
        })
        .await;
    assert_ne!(sandbox.show("WatchdogTimestampMonotonic"), withheld, "pinged again");
    assert_eq!(sandbox.show("ActiveState"), "active");
    assert_eq!(sandbox.show("NRestarts"), "0", "{}", sandbox.log());
    assert_eq!(sandbox.show("MainPID"), main_pid, "never restarted");

    // Started with the runtime already there: active at once.
    sandbox.systemctl(&["restart", "plegd.service"]);
    sandbox
        .wait("plegd active again", Duration::from_secs(20), |s| {
            s.show("ActiveState") == "active"
        })
        .await;
    assert_ne!(sandbox.show("MainPID"), main_pid);

    // A configuration error exits 2, which the unit does not restart over and over.
    std::fs::write(
        dir.join("plegd.env"),
        settings.replace("PLEGD_RELIST_PERIOD=200ms", "PLEGD_RELIST_PERIOD=0s"),
    )
    .unwrap();
    sandbox.systemctl(&["restart", "plegd.service"]);
    sandbox
        .wait("plegd failed", Duration::from_secs(20), |s| {
            s.show("ActiveState") == "failed"
        })
        .await;
    assert_eq!(sandbox.show("ExecMainStatus"), "2");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sandbox.show("ActiveState"), "failed", "not restarted after exit 2");
    assert_eq!(sandbox.show("NRestarts"), "0");
    assert!(
        sandbox.log().contains("--relist-period"),
        "the error names the flag: {}",
        sandbox.log()
    );
    drop(cri);
}
