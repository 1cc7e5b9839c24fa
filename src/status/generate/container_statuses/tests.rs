use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodStatus,
};
use std::time::SystemTime;

use super::super::test_support::*;
use super::super::*;
use super::*;
use crate::apiserver::pod::ApiContainer;
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus};

/// `stopSignal` as `convertToAPIContainerStatuses` copies it with ContainerStopSignals on (a
/// running and an exited container, a regular and an init one), and not at all with it off, the
/// 1.37 default; a runtime that reports none leaves it out either way.
#[test]
fn stop_signals_only_with_the_gate() {
    let init = ApiContainer {
        name: "setup".into(),
        ..spec_container("setup")
    };
    let pod = pod_with(&["app", "side"], vec![init], "Always");
    let with_signal = |name: &str, id: &str, state, signal: Option<&'static str>| RuntimeContainerStatus {
        stop_signal: signal,
        ..runtime_status(name, id, state, 10)
    };
    let runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![
            with_signal("setup", "c0", RuntimeContainerState::Exited, Some("SIGRTMIN+3")),
            with_signal("app", "c1", RuntimeContainerState::Running, Some("SIGTERM")),
            with_signal("side", "c2", RuntimeContainerState::Running, None),
        ],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let signals = |on: bool| {
        let s = status_with(&pod, &runtime, at(100), on);
        let all = s
            .init_container_statuses
            .unwrap()
            .into_iter()
            .chain(s.container_statuses.unwrap());
        all.map(|c| (c.name, c.stop_signal)).collect::<Vec<_>>()
    };
    assert_eq!(
        signals(true),
        [
            ("setup".to_owned(), Some("SIGRTMIN+3".to_owned())),
            ("app".to_owned(), Some("SIGTERM".to_owned())),
            ("side".to_owned(), None),
        ]
    );
    assert!(signals(false).iter().all(|(_, s)| s.is_none()), "{:?}", signals(false));
}

/// `convertContainerStatus` writes `metav1.NewTime(time.Unix(0, t))`: a runtime that reports no
/// start or finish time (0) gives the Unix epoch, never an omitted time.
#[test]
fn times_the_runtime_did_not_report_are_the_epoch() {
    let pod = pod_with(&["app", "side"], vec![], "Always");
    let mut running = runtime_status("app", "c1", RuntimeContainerState::Running, 10);
    running.started_at = None;
    let mut exited = runtime_status("side", "c2", RuntimeContainerState::Exited, 10);
    (exited.started_at, exited.finished_at) = (None, None);
    let runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![running, exited],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    let list = s.container_statuses.unwrap();
    let epoch = Some(api_time(SystemTime::UNIX_EPOCH));
    assert_eq!(
        list[0].state.as_ref().unwrap().running.as_ref().unwrap().started_at,
        epoch
    );
    let t = list[1].state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!((t.started_at, t.finished_at), (epoch.clone(), epoch));
}

#[test]
fn restart_gives_state_and_last_state_and_never_failed_is_sticky() {
    let mut pod = pod_with(&["app"], vec![], "Never");
    let mut new = runtime_status("app", "c2", RuntimeContainerState::Running, 20);
    new.restart_count = 1;
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Exited, 10), new],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.container_id.as_deref(), Some("containerd://c2"));
    assert_eq!(cs.restart_count, 1);
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (last.exit_code, last.reason.as_deref(), last.container_id.as_deref()),
        (3, Some("Error"), Some("containerd://c1"))
    );

    // Once Failed, a container found running again does not bring the phase back.
    pod.status = Some(PodStatus {
        phase: Some(FAILED.into()),
        ..PodStatus::default()
    });
    let s = status_of(&pod, &runtime, at(100));
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    let ready = s.conditions.unwrap().into_iter().find(|c| c.type_ == READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );
}

#[test]
fn vanished_and_unknown_containers() {
    let mut pod = pod_with(&["app"], vec![], "Always");
    let mut old = running_status("app");
    old.container_id = Some("containerd://c1".into());
    old.restart_count = 2;
    pod.status = Some(PodStatus {
        container_statuses: Some(vec![old.clone()]),
        ..PodStatus::default()
    });

    // The running container is gone from the runtime.
    let s = status_of(&pod, &RuntimePodStatus::default(), at(50));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(
        last.message.as_deref(),
        Some("The container could not be located when the pod was deleted.  The container used to be Running")
    );
    assert_eq!(cs.restart_count, 3);
    assert_eq!(
        s.phase.as_deref(),
        Some(RUNNING),
        "stopped (with a last termination) under Always is Running"
    );

    // ... unless the pod is being deleted: no restart is counted.
    let mut deleting = pod.clone();
    deleting.metadata.deletion_timestamp = Some(api_time(at(40)));
    let s = status_of(&deleting, &RuntimePodStatus::default(), at(50));
    assert_eq!(s.container_statuses.as_ref().unwrap()[0].restart_count, 2);

    // The runtime reports it in the unknown state while it was running.
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Unknown, 10)],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(50));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(cs.restart_count, 3);
}

#[test]
fn waiting_reasons_before_any_runtime_status() {
    let pod = pod_with(&["app"], vec![], "Always");
    let s = status_of(&pod, &RuntimePodStatus::default(), at(1));
    let w = s.container_statuses.unwrap()[0].state.clone().unwrap().waiting.unwrap();
    assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
    assert_eq!(s.phase.as_deref(), Some(PENDING));
    let pod = pod_with(&["app"], vec![spec_container("init")], "Always");
    let s = status_of(&pod, &RuntimePodStatus::default(), at(1));
    let w = s.container_statuses.unwrap()[0].state.clone().unwrap().waiting.unwrap();
    assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
    let init = s
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == INITIALIZED)
        .unwrap();
    assert_eq!(
        init.message.as_deref(),
        Some("containers with incomplete status: [init]")
    );
}

#[test]
fn readiness_probe_leaves_readiness_to_its_owner() {
    let mut pod = pod_with(&["app"], vec![], "Always");
    pod.spec.containers[0].readiness_probe = true;
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(20));
    assert!(
        !s.container_statuses.as_ref().unwrap()[0].ready,
        "a new container with a probe is not ready"
    );
    // The prober said ready for this container: kept.
    let mut prev = s.container_statuses.clone().unwrap();
    prev[0].ready = true;
    pod.status = Some(PodStatus {
        container_statuses: Some(prev),
        ..PodStatus::default()
    });
    assert!(status_of(&pod, &runtime, at(30)).container_statuses.unwrap()[0].ready);
}

/// kubernetes#141342 and #141487 (1.38, back-ported to 1.37 patch releases): `started` and `ready`
/// are carried from the old status only for the same container id. A replacement (a new id under
/// the same name) with a startup probe has not started, and one with a readiness probe is not
/// ready, until its own probes say so — for a regular container and for a sidecar alike, whatever
/// the pod's Ready condition says.
#[test]
fn started_and_ready_are_carried_only_for_the_same_container() {
    let mut pod = pod_with(&["app"], vec![sidecar("side")], "Always");
    for c in [&mut pod.spec.containers[0], &mut pod.spec.init_containers[0]] {
        c.startup_probe = true;
        c.readiness_probe = true;
    }
    let probed = |name: &str, id: &str| ContainerStatus {
        container_id: Some(format!("containerd://{id}")),
        started: Some(true),
        ready: true,
        ..running_status(name)
    };
    pod.status = Some(PodStatus {
        conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: READY.into(),
            status: "True".into(),
            ..Default::default()
        }]),
        container_statuses: Some(vec![probed("app", "c1")]),
        init_container_statuses: Some(vec![probed("side", "s1")]),
        ..PodStatus::default()
    });
    let runtime = |app: &str, side: &str| RuntimePodStatus {
        container_statuses: vec![
            runtime_status("side", side, RuntimeContainerState::Running, 5),
            runtime_status("app", app, RuntimeContainerState::Running, 10),
        ],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let flags = |s: &PodStatus| {
        let app = &s.container_statuses.as_ref().unwrap()[0];
        let side = &s.init_container_statuses.as_ref().unwrap()[0];
        ((app.started, app.ready), (side.started, side.ready))
    };
    // The same containers: what the prober said stays.
    let same = status_of(&pod, &runtime("c1", "s1"), at(20));
    assert_eq!(flags(&same), ((Some(true), true), (Some(true), true)));
    // Replaced: neither started nor ready until probed.
    let replaced = status_of(&pod, &runtime("c2", "s2"), at(20));
    assert_eq!(flags(&replaced), ((Some(false), false), (Some(false), false)));
    // Only a readiness probe: a replacement has started (no startup probe) but is not ready.
    for c in [&mut pod.spec.containers[0], &mut pod.spec.init_containers[0]] {
        c.startup_probe = false;
    }
    let replaced = status_of(&pod, &runtime("c2", "s2"), at(20));
    assert_eq!(flags(&replaced), ((Some(true), false), (Some(true), false)));
}

fn terminated_message(status: &ContainerStatus) -> &str {
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .and_then(|t| t.message.as_deref())
        .unwrap_or_default()
}

/// `normalizeStatus`' cut, byte for byte: each of the pod's spec containers (regular, init and
/// ephemeral, whether the runtime has it or not) gets `12288 / n` bytes; a longer message keeps
/// exactly that many bytes of the runtime's own text, a character cut in the middle left as it
/// falls, and each byte of it that is not UTF-8 becomes one U+FFFD when the patch is encoded.
/// The expected lengths are what Go 1.26 gives for the same cut and `json.Marshal` (`go run` of
/// the two steps): `share + 2 × bytes of the cut character kept`, at every container count and at
/// every offset inside a 2-, 3- and 4-byte character.
#[test]
fn termination_messages_are_cut_as_the_kubelet_cuts_them() {
    let r = '\u{FFFD}';
    for n in 1..=12usize {
        let share = MAX_TERMINATION_MESSAGES / n;
        for tail in ["ü", "€", "😀"] {
            for off in 0..tail.len() {
                // Half regular containers, then init, then one ephemeral (from three on).
                let ephemeral = usize::from(n >= 3);
                let init = (n - ephemeral) / 2;
                let regular = n - ephemeral - init;
                let names: Vec<String> = (0..regular).map(|i| format!("c{i}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut pod = pod_with(
                    &refs,
                    (0..init).map(|i| spec_container(&format!("i{i}"))).collect(),
                    "Never",
                );
                pod.spec.ephemeral_containers = (0..ephemeral).map(|i| spec_container(&format!("e{i}"))).collect();
                // The runtime has only the first regular container: the share counts the spec.
                let message = format!("{}{}", "a".repeat(share.saturating_sub(off)), tail.repeat(8));
                let runtime = RuntimePodStatus {
                    container_statuses: vec![RuntimeContainerStatus {
                        message: message.clone().into(),
                        ..runtime_status("c0", "id0", RuntimeContainerState::Exited, 1)
                    }],
                    ..RuntimePodStatus::default()
                };
                let s = status_of(&pod, &runtime, at(10));
                let got = terminated_message(&s.container_statuses.as_ref().unwrap()[0]);
                let want = if message.len() <= share {
                    message.clone()
                } else {
                    format!("{}{}", "a".repeat(share - off), r.to_string().repeat(off))
                };
                assert_eq!(got, want, "{n} containers, {off} bytes into {tail}");
                if message.len() > share {
                    assert_eq!(got.len(), share + 2 * off, "{n} containers, {off} bytes into {tail}");
                }
            }
        }
    }
    // The row the parity check found: five containers, a message ending in "Grü" and more, cut
    // one byte into a "ü": the kubelet writes 2,459 bytes ending in U+FFFD.
    let pod = pod_with(&["a", "b", "c", "d", "e"], vec![], "Never");
    let message = format!("{}ok Grüße", "x".repeat(2457 - "ok Gr".len() - 2 - 1));
    let runtime = RuntimePodStatus {
        container_statuses: vec![RuntimeContainerStatus {
            message: message.into(),
            ..runtime_status("a", "id0", RuntimeContainerState::Exited, 1)
        }],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(10));
    let got = terminated_message(&s.container_statuses.as_ref().unwrap()[0]);
    assert_eq!(got.len(), 2459);
    assert!(got.ends_with("ok Grü\u{FFFD}"), "{:?}", &got[got.len() - 12..]);
}

/// Bytes that are not UTF-8 in what the container wrote (a file's last 4 KiB starting inside a
/// character, or anything it wrote) count as bytes in the cut, and each is one U+FFFD after it.
#[test]
fn termination_messages_are_cut_before_invalid_bytes_are_replaced() {
    let pod = pod_with(&["a", "b", "c", "d", "e", "f"], vec![], "Never");
    // 2048 bytes each: a leading continuation byte and a stray 0xff count once each in the cut.
    let mut raw = vec![0xbc, b'o', b'k', 0xff];
    raw.extend(std::iter::repeat_n(b'z', 3000));
    let runtime = RuntimePodStatus {
        container_statuses: vec![RuntimeContainerStatus {
            message: raw.into(),
            ..runtime_status("a", "id0", RuntimeContainerState::Exited, 1)
        }],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(10));
    let got = terminated_message(&s.container_statuses.as_ref().unwrap()[0]);
    assert_eq!(got, format!("\u{FFFD}ok\u{FFFD}{}", "z".repeat(2048 - 4)));
}

/// A message that came from the old status (its container gone from the runtime) is cut as the
/// kubelet cuts the API's text, and one within its share is kept as it is, replacement characters
/// and all: generating again against plegd's own write changes nothing.
#[test]
fn termination_messages_from_the_old_status_are_cut_once() {
    let mut pod = pod_with(&["a", "b", "c", "d", "e"], vec![], "Never");
    let written = format!("{}ü\u{FFFD}", "x".repeat(2454));
    assert_eq!(written.len(), 2459);
    let mut old = terminated_status("a", 1);
    old.state.as_mut().unwrap().terminated.as_mut().unwrap().message = Some(written.clone());
    let mut longer = terminated_status("b", 1);
    longer.state.as_mut().unwrap().terminated.as_mut().unwrap().message = Some("€".repeat(1000));
    pod.status = Some(PodStatus {
        phase: Some("Failed".into()),
        container_statuses: Some(vec![old, longer]),
        ..PodStatus::default()
    });
    let s = status_of(&pod, &RuntimePodStatus::default(), at(10));
    let list = s.container_statuses.unwrap();
    // Longer than its share by the replacement character, cut inside it: the same text again.
    assert_eq!(terminated_message(&list[0]), written);
    // 3000 bytes of "€" cut at 2457: 819 whole, then none left over.
    assert_eq!(terminated_message(&list[1]), "€".repeat(819));
}

/// kubernetes#131317: an init container whose runtime status is gone, in a pod whose regular
/// containers were created, is reported completed; a sidecar is not.
#[test]
fn a_lost_init_container_of_an_initialized_pod_completed() {
    let pod = pod_with(&["a"], vec![spec_container("init"), sidecar("side")], "Always");
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("a", "c1", RuntimeContainerState::Running, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(20));
    let init = &s.init_container_statuses.as_ref().unwrap()[0];
    assert_eq!(init.name, "init");
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (t.exit_code, t.reason.as_deref(), t.message.as_deref()),
        (0, Some("Completed"), Some(LOST_INIT_CONTAINER_MESSAGE))
    );
    assert!(init.ready, "an init container that completed is ready");
    let side = &s.init_container_statuses.as_ref().unwrap()[1];
    assert!(
        side.state.as_ref().unwrap().waiting.is_some(),
        "a lost sidecar waits: {side:?}"
    );
    // Before any regular container was created, a missing init container is just waiting.
    let none = RuntimePodStatus::default();
    let s = status_of(&pod, &none, at(20));
    assert!(
        s.init_container_statuses.unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .waiting
            .is_some()
    );
}

/// The prober manager's readiness of init containers: ready once exited with 0; a sidecar as a
/// regular container (running and started). Init statuses keep spec order.
#[test]
fn init_container_readiness_and_order() {
    let pod = pod_with(&["a"], vec![spec_container("zeta"), sidecar("alpha")], "Always");
    let mut zeta = runtime_status("zeta", "z1", RuntimeContainerState::Running, 1);
    let runtime = RuntimePodStatus {
        container_statuses: vec![zeta.clone()],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(5));
    let init = s.init_container_statuses.unwrap();
    let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha"], "spec order, not by name");
    assert!(
        !init[0].ready && init[0].started == Some(true),
        "running init container: started, not ready"
    );

    zeta.state = RuntimeContainerState::Exited;
    zeta.exit_code = 0;
    let mut side = runtime_status("alpha", "a1", RuntimeContainerState::Running, 3);
    side.sandbox_id = "s1".into();
    let runtime = RuntimePodStatus {
        container_statuses: vec![zeta.clone(), side],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let init = status_of(&pod, &runtime, at(6)).init_container_statuses.unwrap();
    assert!(init[0].ready && init[0].started == Some(false), "exited with 0: ready");
    assert!(
        init[1].ready && init[1].started == Some(true),
        "a running sidecar is ready"
    );

    zeta.exit_code = 1;
    let runtime = RuntimePodStatus {
        container_statuses: vec![zeta],
        ..RuntimePodStatus::default()
    };
    let init = status_of(&pod, &runtime, at(7)).init_container_statuses.unwrap();
    assert!(!init[0].ready, "exited with 1: not ready");
}

/// `convertToAPIContainerStatuses` of 1.36: `user`, `resources` and `allocatedResources` on
/// every status converted from the runtime (resources the runtime's values while running).
#[test]
fn resources_and_user_where_the_kubelet_writes_them() {
    use crate::kubecontainer::{RuntimeContainerResources, RuntimeContainerUser, RuntimeLinuxContainerUser};
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    let limits = ResourceRequirements {
        limits: Some([("memory".to_owned(), Quantity("64Mi".into()))].into()),
        requests: Some([("memory".to_owned(), Quantity("64Mi".into()))].into()),
        claims: None,
    };
    let with_limits = |c: ApiContainer| ApiContainer {
        resources: Some(Box::new(limits.clone())),
        ..c
    };
    let mut pod = pod_with(
        &["app", "bare"],
        vec![with_limits(spec_container("init")), with_limits(sidecar("side"))],
        "Always",
    );
    pod.spec.containers[0] = with_limits(spec_container("app"));
    let user = RuntimeContainerUser {
        linux: Some(RuntimeLinuxContainerUser {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![1000],
        }),
    };
    let applied = RuntimeContainerResources {
        cpu_request_milli: Some(2),
        cpu_limit_milli: None,
        memory_limit_bytes: Some(64 << 20),
    };
    let from_runtime = |name: &str, id: &str, state, created| RuntimeContainerStatus {
        user: Some(user.clone()),
        resources: Some(applied),
        exit_code: 0,
        ..runtime_status(name, id, state, created)
    };
    let runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![
            from_runtime("init", "i1", RuntimeContainerState::Exited, 1),
            from_runtime("side", "s1c", RuntimeContainerState::Running, 2),
            from_runtime("app", "a1", RuntimeContainerState::Running, 3),
            RuntimeContainerStatus {
                user: None,
                ..runtime_status("bare", "b1", RuntimeContainerState::Running, 3)
            },
        ],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    let regular = s.container_statuses.as_ref().unwrap();
    let init = s.init_container_statuses.as_ref().unwrap();
    let (app, bare) = (&regular[0], &regular[1]);
    let (init_status, side) = (&init[0], &init[1]);
    assert_eq!(
        app.resources.as_ref(),
        Some(&limits),
        "the runtime's 64Mi, written as the spec's"
    );
    assert_eq!(side.resources.as_ref(), Some(&limits));
    // Since 1.35 (InPlacePodVerticalScaling GA) every container the runtime reported has
    // them, a regular init container too (not running: the spec's, as allocated).
    assert_eq!(
        init_status.resources.as_ref(),
        Some(&limits),
        "a regular init container"
    );
    assert_eq!(init_status.allocated_resources, limits.requests);
    assert_eq!(app.allocated_resources, limits.requests);
    assert_eq!(bare.allocated_resources, None, "BestEffort: no requests");
    assert_eq!(
        bare.resources,
        Some(ResourceRequirements::default()),
        "BestEffort: resources {{}}"
    );
    for s in [app, side, init_status] {
        assert_eq!(
            s.user.as_ref().and_then(|u| u.linux.as_ref()).map(|l| l.uid),
            Some(1000),
            "{}",
            s.name
        );
    }
    assert_eq!(bare.user, None, "the runtime reported no user");
}

/// 1.37's `TestConvertToAPIContainerStatuses` rows with RestartAllContainersOnContainerExits on
/// (rows 3–11): the old status keeps what the runtime no longer holds, and a pod restarting all
/// its containers shows them removed (`podRestarting` given, as upstream injects it). Compared:
/// state, last state and restart count.
#[test]
fn upstream_convert_to_api_container_statuses_1_37() {
    let pod = pod_with(&["containerA", "containerB"], vec![], "Always");
    let terminated_with = |name: &str, code: i32, restarts: i32| ContainerStatus {
        restart_count: restarts,
        ..terminated_status(name, code)
    };
    let running_old = |name: &str, restarts: i32| ContainerStatus {
        name: name.into(),
        restart_count: restarts,
        container_id: Some(format!("containerd://{name}")),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    let waiting_removed = |name: &str, restarts: i32| ContainerStatus {
        name: name.into(),
        restart_count: restarts,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(RESTARTING_ALL_CONTAINERS.into()),
                message: Some(RESTARTING_ALL_CONTAINERS_MESSAGE.into()),
            }),
            ..ContainerState::default()
        }),
        last_state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some(RESTARTING_ALL_CONTAINERS.into()),
                message: Some(RESTARTING_ALL_CONTAINERS_MESSAGE.into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    let exited = |name: &str, id: &str, code: i32| RuntimeContainerStatus {
        exit_code: code,
        ..runtime_status(name, id, RuntimeContainerState::Exited, 10)
    };
    let running = |name: &str, id: &str| runtime_status(name, id, RuntimeContainerState::Running, 10);
    // (state kind, its waiting reason, its exit code), (last state reason, exit code), restart count
    /// What a row compares of a container status: the kind of its state, its waiting reason, its
    /// exit code; the reason and exit code of its last termination; its restart count.
    #[derive(Debug, Clone, PartialEq)]
    struct Seen {
        state: &'static str,
        reason: Option<String>,
        exit_code: Option<i32>,
        last_terminated: Option<(Option<String>, i32)>,
        restart_count: i32,
    }
    /// A row: the status before, the runtime's statuses now, whether the pod restarts all its
    /// containers (`podRestarting`), and what containerA and containerB show.
    struct ConvertCase {
        name: &'static str,
        old: Vec<ContainerStatus>,
        runtime: Vec<RuntimeContainerStatus>,
        pod_restarting: bool,
        want: [Seen; 2],
    }
    let seen = |s: &ContainerStatus| -> Seen {
        let st = s.state.clone().unwrap_or_default();
        let (kind, reason, code) = if let Some(t) = st.terminated {
            // The reason of an exit is the runtime's: not what these rows are about.
            ("terminated", None, Some(t.exit_code))
        } else if let Some(w) = st.waiting {
            ("waiting", w.reason, None)
        } else {
            ("running", None, None)
        };
        let last = last_terminated(s).map(|t| (t.reason.clone(), t.exit_code));
        Seen {
            state: kind,
            reason,
            exit_code: code,
            last_terminated: last,
            restart_count: s.restart_count,
        }
    };
    let removed = Seen {
        state: "waiting",
        reason: Some(RESTARTING_ALL_CONTAINERS.into()),
        exit_code: None,
        last_terminated: Some((Some(RESTARTING_ALL_CONTAINERS.into()), 137)),
        restart_count: 1,
    };
    let error = |_code: i32| -> Option<String> { None };
    let cases = vec![
        ConvertCase {
            name: "no current status, keeping previous restartCount",
            old: vec![
                terminated_with("containerA", -1, 5),
                terminated_with("containerB", -1, 5),
            ],
            runtime: vec![],
            pod_restarting: false,
            want: [
                Seen {
                    state: "terminated",
                    reason: error(-1),
                    exit_code: Some(-1),
                    last_terminated: None,
                    restart_count: 5,
                },
                Seen {
                    state: "terminated",
                    reason: error(-1),
                    exit_code: Some(-1),
                    last_terminated: None,
                    restart_count: 5,
                },
            ],
        },
        ConvertCase {
            name: "currently running with lower restartCount",
            old: vec![
                terminated_with("containerA", -1, 5),
                terminated_with("containerB", -1, 5),
            ],
            runtime: vec![running("containerA", "a2"), running("containerB", "b2")],
            pod_restarting: false,
            want: [
                Seen {
                    state: "running",
                    reason: None,
                    exit_code: None,
                    last_terminated: Some((error(-1), -1)),
                    restart_count: 6,
                },
                Seen {
                    state: "running",
                    reason: None,
                    exit_code: None,
                    last_terminated: Some((error(-1), -1)),
                    restart_count: 6,
                },
            ],
        },
        ConvertCase {
            name: "containerB dies and triggers RestartAllContainers in place",
            old: vec![running_old("containerA", 0), running_old("containerB", 0)],
            runtime: vec![
                running("containerA", "containerA"),
                exited("containerB", "containerB", 42),
            ],
            pod_restarting: true,
            want: [
                Seen {
                    state: "running",
                    reason: None,
                    exit_code: None,
                    last_terminated: None,
                    restart_count: 0,
                },
                Seen {
                    state: "terminated",
                    reason: error(42),
                    exit_code: Some(42),
                    last_terminated: None,
                    restart_count: 0,
                },
            ],
        },
        ConvertCase {
            name: "containerA killed",
            old: vec![running_old("containerA", 0), terminated_with("containerB", 42, 0)],
            runtime: vec![exited("containerA", "containerA", 137)],
            pod_restarting: true,
            want: [
                Seen {
                    state: "terminated",
                    reason: error(137),
                    exit_code: Some(137),
                    last_terminated: None,
                    restart_count: 0,
                },
                removed.clone(),
            ],
        },
        ConvertCase {
            name: "containerA killed then removed",
            old: vec![
                terminated_with("containerA", 137, 0),
                terminated_with("containerB", 42, 0),
            ],
            runtime: vec![],
            pod_restarting: true,
            want: [removed.clone(), removed.clone()],
        },
        ConvertCase {
            name: "containerA killed and removed together",
            old: vec![running_old("containerA", 0), terminated_with("containerB", 42, 0)],
            runtime: vec![],
            pod_restarting: true,
            want: [removed.clone(), removed.clone()],
        },
        ConvertCase {
            name: "containerA rerun",
            old: vec![waiting_removed("containerA", 1), terminated_with("containerB", 42, 0)],
            runtime: vec![running("containerA", "containerA-new")],
            pod_restarting: true,
            want: [
                Seen {
                    state: "running",
                    reason: None,
                    exit_code: None,
                    last_terminated: Some((Some(RESTARTING_ALL_CONTAINERS.into()), 137)),
                    restart_count: 1,
                },
                removed.clone(),
            ],
        },
        ConvertCase {
            name: "containerA succeeded",
            old: vec![running_old("containerA", 1), terminated_with("containerB", 42, 0)],
            runtime: vec![exited("containerA", "containerA", 0)],
            pod_restarting: true,
            want: [
                Seen {
                    state: "terminated",
                    reason: error(0),
                    exit_code: Some(0),
                    last_terminated: None,
                    restart_count: 1,
                },
                removed.clone(),
            ],
        },
        ConvertCase {
            name: "containerA failed",
            old: vec![running_old("containerA", 1), terminated_with("containerB", 42, 0)],
            runtime: vec![exited("containerA", "containerA", 1)],
            pod_restarting: true,
            want: [
                Seen {
                    state: "terminated",
                    reason: error(1),
                    exit_code: Some(1),
                    last_terminated: None,
                    restart_count: 1,
                },
                removed.clone(),
            ],
        },
    ];
    for ConvertCase {
        name,
        old,
        runtime,
        pod_restarting,
        want,
    } in cases
    {
        let runtime = RuntimePodStatus {
            container_statuses: runtime,
            ..RuntimePodStatus::default()
        };
        let got = container_statuses(
            &pod,
            ListKind::Regular,
            &old,
            &runtime,
            Conversion {
                runtime_name: "containerd",
                recursive_read_only: Some(false),
                pod_restarting,
                kubelet: KubeletMinor::V1_37,
            },
        );
        let got: Vec<Seen> = got.iter().map(seen).collect();
        assert_eq!(got, want.to_vec(), "{name}");
    }
}
