//! The status stage: what plegd writes back to the apiserver, and how.
//!
//! - [`compare`] (pure): two statuses of a pod compared field by field (shadow mode, `plegd status`).
//! - [`decide`] (pure): what is written for a pod, per [`StatusMode`]: a status to write, a comparison
//!   (shadow mode), or nothing and why.
//! - [`gate`] (pure): plegd's condition as a readiness gate, handed back to the kubelet when plegd
//!   stops and released when the gate is uninstalled.
//! - [`generate`] (pure): the kubelet-equivalent status of a pod.
//! - [`resources`] (pure): the resources and user of a container status.
//! - [`release`] (I/O): `plegd release-gates`, the readiness gate's uninstall: every gated pod's
//!   condition set True (GateReleased), cluster-wide, once no new pod gets the gate.
//! - [`report`]: the status last generated for each pod, for followers (`plegd status`).
//! - [`patch`] (pure): the strategic merge patch from the apiserver's status to the desired one.
//! - [`semantic`] (pure): a status as the apiserver stores it, so that statuses compare as typed values.
//! - [`manager`] (I/O): the newest status wanted per pod, deduplicated, on a keyed work queue,
//!   written by a bounded pool of writers under a QPS/burst limit, with retries; never to a pod of
//!   another node.
//!
//! What is written depends on [`StatusMode`]; what each mode implies is said by its methods here.

pub mod compare;
pub mod decide;
pub mod gate;
pub mod generate;
pub mod manager;
pub mod patch;
#[cfg(any(test, feature = "test-util"))]
pub mod patch_apply;
pub mod release;
pub mod report;
pub mod resources;
pub mod semantic;

/// How much of the status plegd owns (`--status-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusMode {
    /// Only plegd's own condition types (`plegd.io/ContainersRunning`), merged by type: everything
    /// else stays as the kubelet wrote it. For running beside a kubelet.
    Conditions,
    /// The whole kubelet-equivalent status. For pods no kubelet manages.
    Full,
    /// Nothing is written; differences between plegd's status and the apiserver's are counted and
    /// logged per field. For validating plegd against a kubelet.
    Shadow,
}

impl StatusMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StatusMode::Conditions => "conditions",
            StatusMode::Full => "full",
            StatusMode::Shadow => "shadow",
        }
    }

    /// Whether statuses are written at all (shadow mode only compares).
    pub fn writes(self) -> bool {
        self != StatusMode::Shadow
    }

    /// Whether plegd finishes deleted pods as the kubelet's status manager does (`canBeDeleted`,
    /// then a DELETE with grace period 0): only where no kubelet manages the pods.
    pub fn deletes_finished_pods(self) -> bool {
        self == StatusMode::Full
    }

    /// Whether a status update that takes a terminated container that cannot restart out of the
    /// terminated state is aborted (the status manager's `checkContainerStateTransition`): for the
    /// container statuses plegd owns, in full mode.
    pub fn checks_state_transitions(self) -> bool {
        self == StatusMode::Full
    }
}
