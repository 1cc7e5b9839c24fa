//! systemd/plegd.service: `systemd-analyze verify` accepts it, and its sandboxing keeps the
//! `systemd-analyze security` exposure low. The unit is checked as shipped, with only ExecStart's
//! binary path pointed at the binary this build made.

use std::process::Command;

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
    assert!(score <= 1.6, "exposure {score} (README records 1.6)");
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
