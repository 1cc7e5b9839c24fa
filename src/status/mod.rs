//! The status stage: what plegd writes back to the apiserver, and how.
//!
//! - [`generate`] (pure): the kubelet-equivalent status of a pod.
//! - [`resources`] (pure): the resources and user of a container status.
//! - [`patch`] (pure): the strategic merge patch from the apiserver's status to the desired one.
//! - [`semantic`] (pure): a status as the apiserver stores it, so that statuses compare as typed values.
//! - [`manager`] (I/O): versioned desired status per pod, deduplicated, written by a bounded pool of
//!   writers under a QPS/burst limit, with retries; never to a pod of another node.
//!
//! What is written depends on [`StatusMode`]; the choice of fields per mode is made here, purely.

pub mod generate;
pub mod manager;
pub mod patch;
pub mod resources;
pub mod semantic;

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};

use generate::{CONTAINERS_RUNNING, containers_running_condition, set_transition_time};

use crate::pod::ApiPod;

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
}

/// Put `condition` into `conditions` by type (replacing one of the same type), keeping its
/// lastTransitionTime unless its status changed.
pub fn merge_condition(conditions: &mut Vec<PodCondition>, mut condition: PodCondition, now: SystemTime) {
    set_transition_time(&mut condition, conditions, now);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// The status plegd wants the apiserver to hold for `pod`, given the full status it generated, or
/// None when the mode writes nothing.
pub fn desired_status(mode: StatusMode, pod: &ApiPod, generated: &PodStatus, now: SystemTime) -> Option<PodStatus> {
    let statuses = generated.container_statuses.as_deref().unwrap_or_default();
    let running = PodCondition {
        observed_generation: generate::observed_generation(pod),
        ..containers_running_condition(pod, statuses)
    };
    match mode {
        StatusMode::Shadow => None,
        StatusMode::Conditions => {
            // Start from what the apiserver has; touch only plegd's own condition.
            let mut status = pod.status.clone().unwrap_or_default();
            let mut conditions = status.conditions.take().unwrap_or_default();
            merge_condition(&mut conditions, running, now);
            status.conditions = Some(conditions);
            Some(status)
        }
        StatusMode::Full => {
            let mut status = generated.clone();
            let mut conditions = status.conditions.take().unwrap_or_default();
            // The generated list kept the old plegd condition as "someone else's"; replace it.
            conditions.retain(|c| c.type_ != CONTAINERS_RUNNING);
            let old = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let mut running = running;
            set_transition_time(&mut running, &old, now);
            conditions.push(running);
            status.conditions = Some(conditions);
            Some(status)
        }
    }
}

fn state_kind(s: &ContainerStatus) -> &'static str {
    match s.state.as_ref() {
        Some(st) if st.running.is_some() => "running",
        Some(st) if st.terminated.is_some() => "terminated",
        Some(st) if st.waiting.is_some() => "waiting",
        _ => "none",
    }
}

/// Shadow mode: the fields where plegd's `computed` status differs from the apiserver's `actual`
/// one, as paths (`phase`, `conditions[Ready].status`, `containerStatuses[app].restartCount`, …).
/// Timestamps and messages are not compared: they differ by construction between two writers.
pub fn shadow_differences(actual: &PodStatus, computed: &PodStatus) -> Vec<String> {
    let mut out = Vec::new();
    let cmp = |out: &mut Vec<String>, path: String, a: String, b: String| {
        if a != b {
            out.push(path);
        }
    };
    cmp(
        &mut out,
        "phase".into(),
        format!("{:?}", actual.phase),
        format!("{:?}", computed.phase),
    );
    cmp(
        &mut out,
        "podIP".into(),
        format!("{:?}", actual.pod_ip),
        format!("{:?}", computed.pod_ip),
    );
    for c in computed.conditions.as_deref().unwrap_or_default() {
        if c.type_ == CONTAINERS_RUNNING {
            continue;
        }
        let a = actual
            .conditions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|x| x.type_ == c.type_);
        cmp(
            &mut out,
            format!("conditions[{}].status", c.type_),
            format!("{:?}", a.map(|x| &x.status)),
            format!("{:?}", Some(&c.status)),
        );
    }
    let lists = [
        (
            "containerStatuses",
            &actual.container_statuses,
            &computed.container_statuses,
        ),
        (
            "initContainerStatuses",
            &actual.init_container_statuses,
            &computed.init_container_statuses,
        ),
    ];
    for (name, a_list, c_list) in lists {
        for c in c_list.as_deref().unwrap_or_default() {
            let Some(a) = a_list.as_deref().unwrap_or_default().iter().find(|x| x.name == c.name) else {
                out.push(format!("{name}[{}]", c.name));
                continue;
            };
            let p = |f: &str| format!("{name}[{}].{f}", c.name);
            cmp(&mut out, p("state"), state_kind(a).into(), state_kind(c).into());
            cmp(&mut out, p("ready"), a.ready.to_string(), c.ready.to_string());
            cmp(
                &mut out,
                p("restartCount"),
                a.restart_count.to_string(),
                c.restart_count.to_string(),
            );
            cmp(
                &mut out,
                p("containerID"),
                format!("{:?}", a.container_id),
                format!("{:?}", c.container_id),
            );
            let code = |s: &ContainerStatus| {
                format!(
                    "{:?}",
                    s.state
                        .as_ref()
                        .and_then(|st| st.terminated.as_ref())
                        .map(|t| t.exit_code)
                )
            };
            cmp(&mut out, p("exitCode"), code(a), code(c));
        }
    }
    out
}
