//! The one-node cluster of tests/cluster/cluster.sh, as the benches that run on it drive it.

use std::path::PathBuf;
use std::process::Command;

/// tests/cluster/cluster.sh.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/cluster.sh")
}

/// The plegd binary installed: `PLEGD_BINARY` if set (another tree's build, for an A/B:
/// tests/bench/side_by_side_ab.sh), else this tree's.
pub fn plegd_binary() -> String {
    std::env::var("PLEGD_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_plegd").to_owned())
}

/// `cluster.sh ARGS` with the kubelet's feature gates; its last line of output.
pub fn cluster_sh(args: &[&str], gates: &str) -> String {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .env("PLEGD_CLUSTER_KUBELET_FEATURE_GATES", gates)
        .env("PLEGD_BINARY", plegd_binary())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run tests/cluster/cluster.sh");
    assert!(out.status.success(), "cluster.sh {args:?} failed");
    plegd_test_support::cluster::last_line(&out)
}

/// The whole log of the cluster's plegd (its DaemonSet's pod), for a bench's trace.
pub fn plegd_log() -> Vec<u8> {
    Command::new("bash")
        .arg(script())
        .args([
            "kubectl",
            "-n",
            "plegd-system",
            "logs",
            "ds/plegd",
            "--tail=-1",
            "--request-timeout=60s",
        ])
        .output()
        .expect("run tests/cluster/cluster.sh kubectl")
        .stdout
}
