//! `plegd run` options for in-process runs against a test runtime socket and the test apiserver.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plegd::daemon::DaemonOptions;
use plegd::pleg::PlegConfig;
use plegd::runtime::CriOptions;
use plegd::status::StatusMode;
use plegd::status::manager::ManagerConfig;
use plegd::sync_loop::SyncConfig;
use plegd::triggers::{TriggerMode, TriggerOptions};

/// Full daemon options with test-friendly defaults: no API socket or HTTP endpoint, node IP
/// 192.0.2.10, the given mode; callers adjust what they need.
pub fn options(cri_socket: &Path, kubeconfig: PathBuf, node: &str, mode: StatusMode) -> DaemonOptions {
    DaemonOptions {
        cri_socket: cri_socket.to_owned(),
        cri: CriOptions::default(),
        pleg: PlegConfig::default(),
        triggers: TriggerMode::Auto,
        trigger_options: TriggerOptions::default(),
        kubeconfig: Some(kubeconfig),
        manager: ManagerConfig {
            node_name: node.into(),
            ..ManagerConfig::default()
        },
        sync: SyncConfig {
            mode,
            runtime_name: String::new(),
            node_ips: vec!["192.0.2.10".into()],
            ..SyncConfig::default()
        },
        emit_events: false,
        api_socket: None,
        metrics_address: None,
        shutdown_timeout: Duration::from_secs(5),
    }
}
