//! Builders the unit tests of status generation share: pods, container specs and statuses, runtime
//! statuses and sandboxes, and the status [`generate`] makes of them.

use k8s_openapi::api::core::v1::{
    ContainerRestartRule, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::time::{Duration, SystemTime};

use crate::apiserver::pod::{ApiContainer, ApiPod, ApiPodSpec};
use crate::kubecontainer::{
    RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus, SandboxState, SandboxStatus,
};

use super::{KubeletMinor, StatusInput, generate};

pub(crate) const T: SystemTime = SystemTime::UNIX_EPOCH;

/// The condition of `type_` in `status` (a test fails without it).
pub(crate) fn condition_of<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
    let conditions = status.conditions.as_deref().unwrap_or_default();
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:?}"))
}

pub(crate) fn at(secs: u64) -> SystemTime {
    T + Duration::from_secs(secs)
}

pub(crate) fn spec_container(name: &str) -> ApiContainer {
    ApiContainer {
        name: name.into(),
        image: "busybox".into(),
        ..ApiContainer::default()
    }
}

pub(crate) fn sidecar(name: &str) -> ApiContainer {
    ApiContainer {
        restart_policy: Some("Always".into()),
        ..spec_container(name)
    }
}

pub(crate) fn pod_with(containers: &[&str], init: Vec<ApiContainer>, policy: &str) -> ApiPod {
    ApiPod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            uid: Some("u1".into()),
            ..ObjectMeta::default()
        },
        spec: ApiPodSpec {
            containers: containers.iter().map(|n| spec_container(n)).collect(),
            init_containers: init,
            restart_policy: Some(policy.into()),
            ..ApiPodSpec::default()
        },
        status: None,
    }
}

pub(crate) fn running_status(name: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        }),
        started: Some(true),
        ready: true,
        ..ContainerStatus::default()
    }
}

pub(crate) fn terminated_status(name: &str, code: i32) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// An init container that exited with success, ready as the prober manager marks it.
pub(crate) fn completed_init(name: &str) -> ContainerStatus {
    ContainerStatus {
        ready: true,
        ..terminated_status(name, 0)
    }
}

pub(crate) fn waiting_status(name: &str, last_exit: Option<i32>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..ContainerState::default()
        }),
        last_state: last_exit.map(|code| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

pub(crate) fn runtime_status(
    name: &str,
    id: &str,
    state: RuntimeContainerState,
    created: u64,
) -> RuntimeContainerStatus {
    RuntimeContainerStatus {
        id: id.into(),
        sandbox_id: "s1".into(),
        name: name.into(),
        state,
        created_at: Some(at(created)),
        started_at: Some(at(created + 1)),
        finished_at: (state == RuntimeContainerState::Exited).then(|| at(created + 5)),
        exit_code: if state == RuntimeContainerState::Exited { 3 } else { 0 },
        image: "docker.io/library/busybox:1".into(),
        image_id: "sha256:abc".into(),
        reason: if state == RuntimeContainerState::Exited {
            "Error".into()
        } else {
            String::new()
        },
        message: Default::default(),
        restart_count: 0,
        resources: None,
        user: None,
        stop_signal: None,
        termination_source: None,
    }
}

pub(crate) fn ready_sandbox(ip: &str) -> SandboxStatus {
    SandboxStatus {
        ips: vec![ip.into()],
        ..sandbox("s1", SandboxState::Ready, 1)
    }
}

pub(crate) fn status_of(pod: &ApiPod, runtime: &RuntimePodStatus, now: SystemTime) -> PodStatus {
    status_with(pod, runtime, now, false)
}

/// [`status_of`], with the stop signals the runtime reports written or not.
pub(crate) fn status_with(pod: &ApiPod, runtime: &RuntimePodStatus, now: SystemTime, stop_signals: bool) -> PodStatus {
    status_as(pod, runtime, now, stop_signals, KubeletMinor::NEWEST)
}

/// [`status_of`] as a kubelet of `kubelet` writes it.
pub(crate) fn status_by(pod: &ApiPod, runtime: &RuntimePodStatus, now: SystemTime, kubelet: KubeletMinor) -> PodStatus {
    status_as(pod, runtime, now, false, kubelet)
}

fn status_as(
    pod: &ApiPod,
    runtime: &RuntimePodStatus,
    now: SystemTime,
    stop_signals: bool,
    kubelet: KubeletMinor,
) -> PodStatus {
    generate(&StatusInput {
        pod,
        runtime,
        runtime_name: "containerd",
        node_ips: &["192.0.2.10".to_owned()],
        recursive_read_only_handlers: Some(&[]),
        stop_signals,
        kubelet,
        now,
    })
}

pub(crate) fn sandbox(id: &str, state: SandboxState, created: i64) -> SandboxStatus {
    SandboxStatus {
        id: id.into(),
        state,
        created_at: created,
        attempt: 0,
        ips: vec!["10.1.0.5".into()],
        host_network: false,
        no_primary_ip: false,
        runtime_handler: String::new(),
    }
}

/// Restart rules in short: (action, exit code operator, exit codes).
pub(crate) type Rules<'a> = &'a [(&'a str, &'a str, &'a [i32])];

pub(crate) fn with_policy(name: &str, policy: Option<&str>, rules: Rules<'_>) -> ApiContainer {
    ApiContainer {
        restart_policy: policy.map(str::to_owned),
        restart_policy_rules: rules
            .iter()
            .map(|(action, operator, values)| ContainerRestartRule {
                action: (*action).to_owned(),
                exit_codes: Some(k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                    operator: (*operator).to_owned(),
                    values: Some(values.to_vec()),
                }),
            })
            .collect(),
        ..spec_container(name)
    }
}
