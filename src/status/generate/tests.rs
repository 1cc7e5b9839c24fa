use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};

use super::test_support::*;
use super::*;
use crate::apiserver::pod::{ApiContainer, ApiPodSpec};
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus};

#[test]
fn a_running_pod_in_full() {
    let pod = pod_with(&["app"], vec![], "Always");
    let runtime = RuntimePodStatus {
        id: "u1".into(),
        ips: vec!["10.1.0.5".into()],
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    assert_eq!(s.phase.as_deref(), Some(RUNNING));
    assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.5"));
    assert_eq!(s.host_ip.as_deref(), Some("192.0.2.10"));
    assert_eq!(s.start_time, Some(api_time(at(100))));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.container_id.as_deref(), Some("containerd://c1"));
    assert_eq!(cs.image_id, "sha256:abc");
    assert!(cs.ready && cs.started == Some(true));
    assert_eq!(
        cs.state.as_ref().unwrap().running.as_ref().unwrap().started_at,
        Some(api_time(at(11)))
    );
    let types: Vec<_> = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            (POD_READY_TO_START_CONTAINERS, "True"),
            (INITIALIZED, "True"),
            (READY, "True"),
            (CONTAINERS_READY, "True"),
            (POD_SCHEDULED, "True")
        ]
    );

    // Generated again a minute later with that status in place: nothing moves.
    let mut pod2 = pod.clone();
    pod2.status = Some(s.clone());
    assert_eq!(
        status_of(&pod2, &runtime, at(160)),
        s,
        "start time and transition times are stable"
    );
}

#[test]
fn succeeded_never_becomes_failed() {
    let mut pod = pod_with(&["app"], vec![], "OnFailure");
    pod.status = Some(PodStatus {
        phase: Some(SUCCEEDED.into()),
        ..PodStatus::default()
    });
    // The runtime now shows a failed attempt (say, the old one was removed and a new one failed).
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c9", RuntimeContainerState::Exited, 50)],
        ..RuntimePodStatus::default()
    };
    assert_eq!(status_of(&pod, &runtime, at(60)).phase.as_deref(), Some(SUCCEEDED));
}

#[test]
fn conditions_of_others_are_kept_and_transition_times_follow_status() {
    let mut pod = pod_with(&["app"], vec![], "Always");
    let other = PodCondition {
        type_: "example.com/Other".into(),
        status: "True".into(),
        ..PodCondition::default()
    };
    let old_ready = PodCondition {
        type_: READY.into(),
        status: "False".into(),
        last_transition_time: Some(api_time(at(5))),
        ..PodCondition::default()
    };
    let old_sched = PodCondition {
        type_: POD_SCHEDULED.into(),
        status: "True".into(),
        last_transition_time: Some(api_time(at(1))),
        ..PodCondition::default()
    };
    // The kubelet's resize conditions are its own (PodConditionsByKubelet): plegd, which
    // resizes nothing, keeps none.
    let resize = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some("Deferred".into()),
        ..PodCondition::default()
    };
    pod.status = Some(PodStatus {
        conditions: Some(vec![
            other.clone(),
            old_ready,
            old_sched,
            resize(POD_RESIZE_PENDING),
            resize(POD_RESIZE_IN_PROGRESS),
        ]),
        ..PodStatus::default()
    });
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    let conditions = s.conditions.unwrap();
    assert!(
        !conditions.iter().any(|c| c.type_.starts_with("PodResize")),
        "{conditions:?}"
    );
    assert_eq!(conditions[0], other, "others' conditions first, untouched");
    let get = |t: &str| conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
    assert_eq!(
        get(READY).last_transition_time,
        Some(api_time(at(100))),
        "False→True moves the time"
    );
    assert_eq!(
        get(POD_SCHEDULED).last_transition_time,
        Some(api_time(at(1))),
        "unchanged status keeps it"
    );
    assert_eq!(get(POD_READY_TO_START_CONTAINERS).status, "False", "no sandbox");
}

/// status_manager.go `mergePodStatus`: an init container failed under Never while a sidecar
/// still runs; the phase stays until nothing runs, the conditions already say PodFailed.
#[test]
fn a_terminal_phase_waits_until_no_container_runs() {
    let mut pod = pod_with(&["a"], vec![sidecar("side"), spec_container("init")], "Never");
    pod.status = Some(PodStatus {
        phase: Some(PENDING.into()),
        ..PodStatus::default()
    });
    let mut init = runtime_status("init", "i1", RuntimeContainerState::Exited, 5);
    init.exit_code = 1;
    let side = runtime_status("side", "s1c", RuntimeContainerState::Running, 1);
    let runtime = RuntimePodStatus {
        container_statuses: vec![side.clone(), init.clone()],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(10));
    assert_eq!(s.phase.as_deref(), Some(PENDING), "held back while the sidecar runs");
    let ready = condition_of(&s, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );

    let mut stopped = side;
    stopped.state = RuntimeContainerState::Exited;
    stopped.exit_code = 143;
    let runtime = RuntimePodStatus {
        container_statuses: vec![stopped, init],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    assert_eq!(
        status_of(&pod, &runtime, at(20)).phase.as_deref(),
        Some(FAILED),
        "terminal once nothing runs, though the sandbox is still ready"
    );
}

/// Upstream's `Test_generateAPIPodStatus` and `TestConvertToAPIContainerStatuses`
/// (kubelet_pods_test.go), every case, against [`generate_api_pod_status`] (upstream's
/// `generateAPIPodStatus`: `TerminatePod` is the status manager's, later). Where plegd cannot
/// express a part of a case, that part is not compared, for these reasons:
/// - `ready`/`started` of containers, and the Ready and ContainersReady conditions when they
///   follow from them: the upstream test kubelet's fake prober marks every container ready, even
///   a waiting one; plegd applies the prober manager's rules (see `set_started_and_ready`).
/// - `qosClass`: the apiserver sets it when the pod is created; plegd keeps it.
/// - "current status ready, with previous statuses and deletion" passes `isPodTerminal=false`
///   for a deleted pod with nothing running: that is the kubelet's pod worker before it has
///   decided; plegd decides from the runtime that such a pod is terminal, so that case ends
///   Failed in plegd (as the kubelet's next sync makes it). Its container statuses are compared.
/// - The kubelet keeps two old statuses, its own cache and the apiserver's; plegd has one. The
///   "apiserver previous is succeeded" case gives the apiserver's terminal phase to that one.
#[test]
fn upstream_generate_api_pod_status() {
    type Want<'a> = (&'a str, &'a str, Option<&'a str>, bool, i32, Option<&'a str>);
    struct Case<'a> {
        name: &'a str,
        deleted: bool,
        policy: &'a str,
        old: PodStatus,
        runtime: Vec<RuntimeContainerStatus>,
        sandbox_ready: bool,
        phase: &'a str,
        reason: Option<&'a str>,
        // name, state, waiting reason, lastState ContainerStatusUnknown, restartCount, containerID
        containers: Vec<Want<'a>>,
        // (type, status, reason); None where it follows from the fake prober
        conditions: Option<Vec<(&'a str, &'a str, Option<&'a str>)>>,
    }
    let old = |phase: Option<&str>, containers: Vec<ContainerStatus>| PodStatus {
        phase: phase.map(str::to_owned),
        container_statuses: Some(containers),
        ..PodStatus::default()
    };
    let both_running = || vec![running_status("containerA"), running_status("containerB")];
    let with_reason = |mut s: PodStatus| {
        s.reason = Some("Test".into());
        s.message = Some("test".into());
        s
    };
    let running_from = |name: &str, id: &str, created: u64| RuntimeContainerStatus {
        started_at: Some(at(created + 1)),
        ..runtime_status(name, id, RuntimeContainerState::Running, created)
    };
    let completed = |reason: &'static str| -> Option<Vec<(&str, &str, Option<&str>)>> {
        Some(vec![
            // 1.37: no sandbox in these cases ("no pod sandbox exists").
            (POD_READY_TO_START_CONTAINERS, "False", Some(POD_SANDBOX_NOT_READY)),
            (INITIALIZED, "True", Some(reason)),
            (READY, "False", Some(reason)),
            (CONTAINERS_READY, "False", Some(reason)),
            (POD_SCHEDULED, "True", None),
        ])
    };
    let lost = |name, restarts| (name, "waiting", Some("ContainerCreating"), true, restarts, None);
    let mut disrupted = old(None, both_running());
    disrupted.conditions = Some(vec![PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        ..PodCondition::default()
    }]);
    let cases = vec![
        Case {
            name: "pod disruption condition is copied over and the phase is set to failed when deleted",
            deleted: true,
            policy: "Always",
            old: disrupted,
            runtime: vec![],
            sandbox_ready: true,
            phase: FAILED,
            reason: None,
            containers: vec![lost("containerA", 0), lost("containerB", 0)],
            conditions: Some(vec![
                (DISRUPTION_TARGET, "True", None),
                (POD_READY_TO_START_CONTAINERS, "True", None),
                (INITIALIZED, "True", None),
                (READY, "False", Some("PodFailed")),
                (CONTAINERS_READY, "False", Some("PodFailed")),
                (POD_SCHEDULED, "True", None),
            ]),
        },
        Case {
            name: "current status ready, with previous statuses and deletion (terminal in plegd, see above)",
            deleted: true,
            policy: "Always",
            old: old(None, both_running()),
            runtime: vec![],
            sandbox_ready: true,
            phase: FAILED,
            reason: None,
            containers: vec![lost("containerA", 0), lost("containerB", 0)],
            conditions: None,
        },
        Case {
            name: "current status ready, with previous statuses and no deletion",
            deleted: false,
            policy: "Always",
            old: old(None, both_running()),
            runtime: vec![],
            sandbox_ready: true,
            phase: RUNNING,
            reason: None,
            containers: vec![lost("containerA", 1), lost("containerB", 1)],
            conditions: None,
        },
        Case {
            name: "terminal phase cannot be changed (apiserver previous is succeeded)",
            deleted: false,
            policy: "Always",
            old: old(Some(SUCCEEDED), both_running()),
            runtime: vec![],
            sandbox_ready: false,
            phase: SUCCEEDED,
            reason: None,
            containers: vec![lost("containerA", 1), lost("containerB", 1)],
            conditions: completed("PodCompleted"),
        },
        Case {
            name: "terminal phase from previous status must remain terminal, restartAlways",
            deleted: false,
            policy: "Always",
            old: with_reason(old(Some(SUCCEEDED), both_running())),
            runtime: vec![],
            sandbox_ready: false,
            phase: SUCCEEDED,
            reason: Some("Test"),
            containers: vec![lost("containerA", 1), lost("containerB", 1)],
            conditions: completed("PodCompleted"),
        },
        Case {
            name: "terminal phase from previous status must remain terminal, restartNever",
            deleted: false,
            policy: "Never",
            old: with_reason(old(
                Some(SUCCEEDED),
                vec![terminated_status("containerA", 0), terminated_status("containerB", 0)],
            )),
            runtime: vec![],
            sandbox_ready: false,
            phase: SUCCEEDED,
            reason: Some("Test"),
            containers: vec![
                ("containerA", "terminated", None, false, 0, None),
                ("containerB", "terminated", None, false, 0, None),
            ],
            conditions: completed("PodCompleted"),
        },
        Case {
            name: "running can revert to pending",
            deleted: false,
            policy: "Always",
            old: old(
                Some(RUNNING),
                vec![waiting_status("containerA", None), waiting_status("containerB", None)],
            ),
            runtime: vec![],
            sandbox_ready: true,
            phase: PENDING,
            reason: None,
            containers: vec![
                ("containerA", "waiting", Some("ContainerCreating"), false, 0, None),
                ("containerB", "waiting", Some("ContainerCreating"), false, 0, None),
            ],
            conditions: None,
        },
        Case {
            name: "reason and message are preserved when phase doesn't change",
            deleted: false,
            policy: "Always",
            old: with_reason(old(
                Some(PENDING),
                vec![waiting_status("containerA", None), running_status("containerB")],
            )),
            runtime: vec![running_from("containerB", "foo", 0)],
            sandbox_ready: true,
            phase: PENDING,
            reason: Some("Test"),
            containers: vec![
                ("containerA", "waiting", Some("ContainerCreating"), false, 0, None),
                ("containerB", "running", None, false, 0, Some("://foo")),
            ],
            conditions: None,
        },
        Case {
            name: "reason and message are cleared when phase changes",
            deleted: false,
            policy: "Always",
            old: with_reason(old(Some(PENDING), both_running())),
            runtime: vec![running_from("containerA", "c1", 0), running_from("containerB", "c2", 1)],
            sandbox_ready: true,
            phase: RUNNING,
            reason: None,
            containers: vec![
                ("containerA", "running", None, false, 0, Some("://c1")),
                ("containerB", "running", None, false, 0, Some("://c2")),
            ],
            conditions: Some(vec![
                (POD_READY_TO_START_CONTAINERS, "True", None),
                (INITIALIZED, "True", None),
                (READY, "True", None),
                (CONTAINERS_READY, "True", None),
                (POD_SCHEDULED, "True", None),
            ]),
        },
    ];
    let node_ips = ["127.0.0.1".to_owned(), "::1".to_owned()];
    for case in cases {
        let mut pod = pod_with(&["containerA", "containerB"], vec![], case.policy);
        if case.deleted {
            pod.metadata.deletion_timestamp = Some(api_time(at(5)));
        }
        pod.status = Some(case.old);
        let runtime = RuntimePodStatus {
            id: "u1".into(),
            container_statuses: case.runtime,
            sandbox_statuses: if case.sandbox_ready {
                vec![ready_sandbox("10.0.0.10")]
            } else {
                vec![]
            },
            ..RuntimePodStatus::default()
        };
        let s = generate_api_pod_status(&StatusInput {
            pod: &pod,
            runtime: &runtime,
            runtime_name: "",
            node_ips: &node_ips,
            recursive_read_only_handlers: Some(&[]),
            stop_signals: false,
            kubelet: KubeletMinor::V1_37,
            now: at(10),
        });
        let name = case.name;
        assert_eq!(s.phase.as_deref(), Some(case.phase), "{name}");
        assert_eq!(s.reason.as_deref(), case.reason, "{name}");
        assert_eq!(s.message.is_some(), case.reason.is_some(), "{name}");
        assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"), "{name}");
        let host_ips: Vec<_> = s.host_ips.iter().flatten().map(|h| h.ip.as_str()).collect();
        assert_eq!(host_ips, ["127.0.0.1", "::1"], "{name}");
        assert_eq!(s.pod_ip, None, "{name}: the runtime reported no pod IP");
        let got: Vec<Want> = s
            .container_statuses
            .as_deref()
            .unwrap()
            .iter()
            .map(|c| {
                let st = c.state.as_ref().unwrap();
                let kind = if st.running.is_some() {
                    "running"
                } else if st.terminated.is_some() {
                    "terminated"
                } else {
                    "waiting"
                };
                let lost = last_terminated(c)
                    .is_some_and(|t| t.exit_code == 137 && t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN));
                (
                    c.name.as_str(),
                    kind,
                    st.waiting.as_ref().and_then(|w| w.reason.as_deref()),
                    lost,
                    c.restart_count,
                    c.container_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(got, case.containers, "{name}");
        for c in s.container_statuses.as_deref().unwrap() {
            if let Some(id) = c.container_id.as_deref() {
                assert!(c.resources.is_some(), "{name}: withResources on {id}");
            }
        }
        if let Some(want) = case.conditions {
            let conditions: Vec<_> = s
                .conditions
                .as_deref()
                .unwrap()
                .iter()
                .filter(|c| c.type_ != CONTAINERS_RUNNING)
                .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()))
                .collect();
            let mut sorted_want = want.clone();
            sorted_want.sort();
            let mut sorted_got = conditions.clone();
            sorted_got.sort();
            assert_eq!(sorted_got, sorted_want, "{name}");
        }
    }
}

/// DRA's statuses of a pod are not the kubelet's (`mergePodStatus`: "not owned and not modified
/// by kubelet"): resourceClaimStatuses, extendedResourceClaimStatus and
/// nodeAllocatableResourceClaimStatuses stay as the old status has them, whatever the runtime says.
#[test]
fn claim_statuses_of_others_stay_as_they_are() {
    let mut pod = pod_with(&["a"], vec![], "Always");
    let old: PodStatus = serde_json::from_value(serde_json::json!({
        "phase": "Running",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}],
        "extendedResourceClaimStatus": {
            "resourceClaimName": "p-extended-resources-y",
            "requestMappings": [{"containerName": "a", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]
        },
        "nodeAllocatableResourceClaimStatuses": [{"resourceClaimName": "p-cpu", "containers": ["a"], "resources": {"cpu": "2"}}]
    }))
    .unwrap();
    pod.status = Some(old.clone());
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("a", "c1", RuntimeContainerState::Running, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(20));
    assert_eq!(s.resource_claim_statuses, old.resource_claim_statuses);
    assert_eq!(s.extended_resource_claim_status, old.extended_resource_claim_status);
    assert!(s.node_allocatable_resource_claim_statuses.is_some());
    assert_eq!(
        s.node_allocatable_resource_claim_statuses,
        old.node_allocatable_resource_claim_statuses
    );
}

/// Upstream's `TestMergePodStatus` (status_manager_test.go), every case. Conditions compare by
/// type, status and reason, as upstream's `conditionsEqual` does.
#[test]
fn upstream_merge_pod_status() {
    let cond = |type_: &str, status: bool, reason: Option<&str>| condition(type_, status, reason, None);
    let base = || PodStatus {
        phase: Some(RUNNING.into()),
        conditions: Some(vec![cond(READY, true, None), cond(POD_SCHEDULED, true, None)]),
        message: Some("Message".into()),
        ..PodStatus::default()
    };
    let with = |mut s: PodStatus, c: PodCondition| {
        s.conditions.get_or_insert_with(Vec::new).push(c);
        s
    };
    let failed = |mut s: PodStatus| {
        s.phase = Some(FAILED.into());
        s
    };
    let by_kubelet = || cond(DISRUPTION_TARGET, true, Some("TerminationByKubelet"));
    let by_eviction = || cond(DISRUPTION_TARGET, true, Some("EvictedByEvictionAPI"));
    let feature = |status| cond("example.com/feature", status, None);
    let failed_ready = || {
        vec![
            cond(READY, false, Some("PodFailed")),
            cond(CONTAINERS_READY, false, Some("PodFailed")),
            cond(POD_SCHEDULED, true, None),
        ]
    };
    let expect = |phase: &str, conditions: Vec<PodCondition>, reason: Option<&str>, message: &str| PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        reason: reason.map(str::to_owned),
        message: Some(message.into()),
        ..PodStatus::default()
    };
    let ready_false = |mut s: PodStatus| {
        s.conditions.as_mut().unwrap()[0].status = "False".into();
        s
    };
    let evicting = |mut s: PodStatus, phase: &str, reason: &str, message: &str| {
        s.phase = Some(phase.into());
        s.reason = Some(reason.into());
        s.message = Some(message.into());
        s
    };
    /// A row: whether the pod could still have running containers, the old and the new status,
    /// the merged one.
    struct MergeCase {
        name: &'static str,
        could_have_running: bool,
        old: PodStatus,
        new: PodStatus,
        want: PodStatus,
    }
    let cases = vec![
        MergeCase {
            name: "no change",
            could_have_running: false,
            old: base(),
            new: base(),
            want: base(),
        },
        MergeCase {
            name: "add DisruptionTarget condition when transitioning into failed phase",
            could_have_running: false,
            old: base(),
            new: with(failed(base()), by_kubelet()),
            want: expect(FAILED, [vec![by_kubelet()], failed_ready()].concat(), None, "Message"),
        },
        MergeCase {
            name: "don't add DisruptionTarget condition when transitioning into failed phase, but there might still be running containers",
            could_have_running: true,
            old: base(),
            new: with(failed(base()), by_kubelet()),
            want: expect(RUNNING, base().conditions.unwrap(), None, "Message"),
        },
        MergeCase {
            name: "preserve DisruptionTarget condition",
            could_have_running: false,
            old: with(base(), by_kubelet()),
            new: base(),
            want: expect(
                RUNNING,
                [base().conditions.unwrap(), vec![by_kubelet()]].concat(),
                None,
                "Message",
            ),
        },
        MergeCase {
            name: "override DisruptionTarget condition",
            could_have_running: false,
            old: with(base(), by_eviction()),
            new: with(failed(base()), by_kubelet()),
            want: expect(FAILED, [failed_ready(), vec![by_kubelet()]].concat(), None, "Message"),
        },
        MergeCase {
            name: "don't override DisruptionTarget condition when remaining in running phase",
            could_have_running: false,
            old: with(base(), by_eviction()),
            new: with(base(), by_kubelet()),
            want: expect(
                RUNNING,
                [vec![by_eviction()], base().conditions.unwrap()].concat(),
                None,
                "Message",
            ),
        },
        MergeCase {
            name: "don't override DisruptionTarget condition when transitioning to failed phase but there might still be running containers",
            could_have_running: true,
            old: with(base(), by_eviction()),
            new: with(failed(base()), by_kubelet()),
            want: expect(
                RUNNING,
                [vec![by_eviction()], base().conditions.unwrap()].concat(),
                None,
                "Message",
            ),
        },
        MergeCase {
            name: "readiness changes",
            could_have_running: false,
            old: base(),
            new: ready_false(base()),
            want: ready_false(base()),
        },
        MergeCase {
            name: "additional pod condition",
            could_have_running: false,
            old: with(base(), feature(true)),
            new: base(),
            want: with(base(), feature(true)),
        },
        MergeCase {
            name: "additional pod condition and readiness changes",
            could_have_running: false,
            old: with(base(), feature(true)),
            new: ready_false(base()),
            want: with(ready_false(base()), feature(true)),
        },
        MergeCase {
            name: "additional pod condition changes",
            could_have_running: false,
            old: with(base(), feature(true)),
            new: with(base(), feature(false)),
            want: with(base(), feature(true)),
        },
        MergeCase {
            name: "phase is transitioning to failed and no containers running",
            could_have_running: false,
            old: evicting(base(), RUNNING, "Unknown", "Message"),
            new: evicting(base(), FAILED, "Evicted", "Was Evicted"),
            want: expect(FAILED, failed_ready(), Some("Evicted"), "Was Evicted"),
        },
        MergeCase {
            name: "phase is transitioning to failed and containers running",
            could_have_running: true,
            old: evicting(base(), RUNNING, "Unknown", "Message"),
            new: evicting(base(), FAILED, "Evicted", "Was Evicted"),
            want: expect(RUNNING, base().conditions.unwrap(), Some("Unknown"), "Message"),
        },
    ];
    let key = |s: &PodStatus| {
        let mut conditions: Vec<_> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        conditions.sort();
        (s.phase.clone(), s.reason.clone(), s.message.clone(), conditions)
    };
    for MergeCase {
        name,
        could_have_running,
        old,
        new,
        want,
    } in cases
    {
        let got = merge_pod_status(&old, new, could_have_running, at(1), KubeletMinor::V1_37);
        assert_eq!(key(&got), key(&want), "{name}");
    }
}

/// `resourcehelper.PodRequests` / `PodLimits` (component-helpers 1.37) and the pod-level status
/// resources: sidecars add up, an init container counts with the sidecars before it, pod-level
/// resources win, overhead is added (to limits only where one is set), and while the pod runs (or
/// once it ended) the resources read back by the kubelet are kept.
#[test]
fn pod_level_resources() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let list = |items: &[(&str, &str)]| -> resources::ResourceList {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    };
    let sized = |name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]| ApiContainer {
        resources: Some(Box::new(ResourceRequirements {
            requests: (!requests.is_empty()).then(|| list(requests)),
            limits: (!limits.is_empty()).then(|| list(limits)),
            ..ResourceRequirements::default()
        })),
        ..spec_container(name)
    };
    let mut spec = ApiPodSpec {
        containers: vec![
            sized("a", &[("cpu", "100m"), ("memory", "16Mi")], &[("memory", "64Mi")]),
            sized("b", &[("cpu", "900m"), ("memory", "16Mi")], &[]),
        ],
        init_containers: vec![
            ApiContainer {
                restart_policy: Some("Always".into()),
                ..sized("sidecar", &[("cpu", "500m")], &[])
            },
            sized("init", &[("cpu", "2"), ("memory", "1Gi")], &[]),
        ],
        ..ApiPodSpec::default()
    };
    // Regular 1 cpu + sidecar 500m = 1500m; init 2 + sidecar 500m = 2500m is larger.
    assert_eq!(
        resources::pod_requests(&spec),
        list(&[("cpu", "2500m"), ("memory", "1Gi")])
    );
    assert_eq!(resources::pod_limits(&spec), list(&[("memory", "64Mi")]));
    spec.overhead = Some(list(&[("cpu", "10m"), ("memory", "1Mi")]));
    assert_eq!(
        resources::pod_requests(&spec),
        list(&[("cpu", "2510m"), ("memory", "1025Mi")])
    );
    assert_eq!(
        resources::pod_limits(&spec),
        list(&[("memory", "65Mi")]),
        "overhead only on limits set"
    );
    spec.overhead = None;
    spec.resources = Some(Box::new(ResourceRequirements {
        requests: Some(list(&[("cpu", "3")])),
        limits: Some(list(&[("cpu", "4"), ("memory", "2Gi")])),
        ..ResourceRequirements::default()
    }));
    assert_eq!(resources::pod_requests(&spec), list(&[("cpu", "3"), ("memory", "1Gi")]));
    assert_eq!(resources::pod_limits(&spec), list(&[("cpu", "4"), ("memory", "2Gi")]));

    // Before the pod runs: its effective allocation; while it runs and once it ended: kept.
    let kept = ResourceRequirements {
        limits: Some(list(&[("memory", "9007199254740988Ki")])),
        ..ResourceRequirements::default()
    };
    let best_effort = ApiPodSpec {
        containers: vec![spec_container("app")],
        ..ApiPodSpec::default()
    };
    for phase in [PENDING, SUCCEEDED, FAILED] {
        let (resources, allocated) = resources::pod_status_resources(&best_effort, Some(phase), Some(&kept));
        assert_eq!(
            (resources, allocated),
            (Some(ResourceRequirements::default()), None),
            "{phase}"
        );
    }
    let (resources, _) = resources::pod_status_resources(&best_effort, Some(RUNNING), Some(&kept));
    assert_eq!(resources.as_ref(), Some(&kept));
    let (resources, allocated) = resources::pod_status_resources(&spec, None, None);
    assert_eq!(allocated, Some(list(&[("cpu", "3"), ("memory", "1Gi")])));
    assert_eq!(
        resources.unwrap().limits,
        Some(list(&[("cpu", "4"), ("memory", "2Gi")]))
    );
}

/// 1.37's `Test_generateAPIPodStatus` rows with InPlacePodLevelResourcesVerticalScaling (on): the
/// pod-level `resources` and `allocatedResources` (rows "pending pod", "succeeded pod", "pod with
/// init containers", "no resources set", "only CPU set", "only Memory set", "0 values for CPU and
/// Memory"). While the pod runs, upstream's `resources` is the pod cgroup's, which plegd does not
/// read (kept as it was: not compared here).
#[test]
fn upstream_pod_level_resources_1_37() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let list = |items: &[(&str, &str)]| -> Option<resources::ResourceList> {
        (!items.is_empty()).then(|| {
            items
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        })
    };
    let req = |requests: &[(&str, &str)], limits: &[(&str, &str)]| ResourceRequirements {
        requests: list(requests),
        limits: list(limits),
        ..ResourceRequirements::default()
    };
    let sized = |name: &str, r: ResourceRequirements| ApiContainer {
        resources: Some(Box::new(r)),
        ..spec_container(name)
    };
    let both = [("cpu", "100m"), ("memory", "100Mi")];
    let limits = [("cpu", "200m"), ("memory", "200Mi")];
    /// A row: the spec, the API phase, the pod resources (None: kept as they were) and
    /// allocatedResources.
    struct PodResourcesCase {
        row: &'static str,
        spec: ApiPodSpec,
        phase: &'static str,
        want_resources: Option<ResourceRequirements>,
        want_allocated: Option<resources::ResourceList>,
    }
    let rows = vec![
        PodResourcesCase {
            row: "pending pod",
            spec: ApiPodSpec {
                containers: vec![sized("A", req(&both, &limits))],
                resources: Some(Box::new(req(&both, &limits))),
                ..ApiPodSpec::default()
            },
            phase: PENDING,
            want_resources: Some(req(&both, &limits)),
            want_allocated: list(&both),
        },
        PodResourcesCase {
            row: "succeeded pod",
            spec: ApiPodSpec {
                containers: vec![sized("A", req(&both, &[]))],
                resources: Some(Box::new(req(&both, &[]))),
                ..ApiPodSpec::default()
            },
            phase: SUCCEEDED,
            want_resources: Some(req(&both, &[])),
            want_allocated: list(&both),
        },
        PodResourcesCase {
            row: "pod with init containers",
            spec: ApiPodSpec {
                init_containers: vec![sized("initA", req(&both, &[]))],
                containers: vec![sized("A", req(&[("cpu", "200m"), ("memory", "200Mi")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "200m"), ("memory", "200Mi")], &[]))),
                ..ApiPodSpec::default()
            },
            phase: RUNNING,
            want_resources: None,
            want_allocated: list(&[("cpu", "200m"), ("memory", "200Mi")]),
        },
        PodResourcesCase {
            row: "no resources set",
            spec: ApiPodSpec {
                containers: vec![spec_container("A"), spec_container("B")],
                ..ApiPodSpec::default()
            },
            phase: RUNNING,
            want_resources: None,
            want_allocated: None,
        },
        PodResourcesCase {
            row: "only CPU set",
            spec: ApiPodSpec {
                containers: vec![sized("A", req(&[("cpu", "100m")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "100m")], &[]))),
                ..ApiPodSpec::default()
            },
            phase: RUNNING,
            want_resources: None,
            want_allocated: list(&[("cpu", "100m")]),
        },
        PodResourcesCase {
            row: "only Memory set",
            spec: ApiPodSpec {
                containers: vec![sized("A", req(&[("memory", "100Mi")], &[]))],
                resources: Some(Box::new(req(&[("memory", "100Mi")], &[]))),
                ..ApiPodSpec::default()
            },
            phase: RUNNING,
            want_resources: None,
            want_allocated: list(&[("memory", "100Mi")]),
        },
        PodResourcesCase {
            row: "0 values for CPU and Memory",
            spec: ApiPodSpec {
                containers: vec![sized("A", req(&[("cpu", "0"), ("memory", "0")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "0"), ("memory", "0")], &[]))),
                ..ApiPodSpec::default()
            },
            phase: RUNNING,
            want_resources: None,
            want_allocated: list(&[("cpu", "0"), ("memory", "0")]),
        },
    ];
    let was = req(&[("cpu", "1")], &[]);
    for PodResourcesCase {
        row,
        spec,
        phase,
        want_resources,
        want_allocated,
    } in rows
    {
        let (resources, allocated) = resources::pod_status_resources(&spec, Some(phase), Some(&was));
        assert_eq!(allocated, want_allocated, "{row}: allocatedResources");
        assert_eq!(
            resources,
            Some(want_resources.unwrap_or_else(|| was.clone())),
            "{row}: resources"
        );
    }
}

/// Each switch of [`KubeletMinor`], the same pod generated as each kubelet minor writes it (the
/// rows of each version's own source: generate_test.go, kubelet_pods_test.go, read at v1.35.4,
/// v1.36.3 and v1.37.2).
mod per_kubelet_minor {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ContainerRestartRule, ContainerRestartRuleOnExitCodes, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::kubecontainer::SandboxState;
    use KubeletMinor::{V1_35, V1_36, V1_37};

    fn by_minor(pod: &ApiPod, runtime: &RuntimePodStatus) -> [PodStatus; 3] {
        KubeletMinor::ALL.map(|minor| status_by(pod, runtime, at(100), minor))
    }

    fn with_old(mut pod: ApiPod, old: PodStatus) -> ApiPod {
        pod.status = Some(old);
        pod
    }

    /// generate_test.go `TestGeneratePodReadyToStartContainersCondition`: False has no reason nor
    /// message in 1.35 and 1.36 (their tables expect `Status: ConditionFalse` alone); 1.37 names
    /// the cause. The status is the same, so the transition time stays when the minor changes.
    #[test]
    fn ready_to_start_containers_false_names_its_cause_from_1_37() {
        let pod = pod_with(&["app"], vec![], "Always");
        let no_sandbox = RuntimePodStatus::default();
        let not_ready = RuntimePodStatus {
            sandbox_statuses: vec![sandbox("s1", SandboxState::NotReady, 1)],
            ..RuntimePodStatus::default()
        };
        for (runtime, cause) in [(&no_sandbox, NO_POD_SANDBOX), (&not_ready, SANDBOX_NOT_READY)] {
            let [s35, s36, s37] = by_minor(&pod, runtime);
            for (minor, s) in [(V1_35, &s35), (V1_36, &s36)] {
                let c = condition_of(s, POD_READY_TO_START_CONTAINERS);
                assert_eq!(
                    (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
                    ("False", None, None),
                    "{minor}"
                );
            }
            let c = condition_of(&s37, POD_READY_TO_START_CONTAINERS);
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
                ("False", Some(POD_SANDBOX_NOT_READY), Some(cause))
            );
            // A 1.37 status, generated again for a 1.35 kubelet: the same status, its time kept.
            let again = status_by(&with_old(pod.clone(), s37.clone()), runtime, at(200), V1_35);
            let c = condition_of(&again, POD_READY_TO_START_CONTAINERS);
            assert_eq!((c.reason.as_deref(), c.message.as_deref()), (None, None));
            assert_eq!(
                c.last_transition_time,
                condition_of(&s37, POD_READY_TO_START_CONTAINERS).last_transition_time
            );
        }
    }

    /// kubernetes#131317 (kubelet_pods_test.go of 1.36 and 1.37, absent from 1.35): an init
    /// container the runtime lost, in a pod whose regular containers were created.
    #[test]
    fn a_lost_init_container_completes_from_1_36() {
        let pod = pod_with(&["a"], vec![spec_container("init")], "Always");
        let runtime = RuntimePodStatus {
            container_statuses: vec![runtime_status("a", "c1", RuntimeContainerState::Running, 10)],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        let init = |s: &PodStatus| s.init_container_statuses.as_ref().unwrap()[0].state.clone().unwrap();
        let waiting = init(&s35).waiting.expect("1.35: still waiting");
        assert_eq!(waiting.reason.as_deref(), Some("PodInitializing"));
        assert_eq!(s35.phase.as_deref(), Some(PENDING), "1.35: the pod stays Pending");
        for s in [&s36, &s37] {
            let t = init(s).terminated.expect("completed");
            assert_eq!(
                (t.exit_code, t.reason.as_deref(), t.message.as_deref()),
                (0, Some("Completed"), Some(LOST_INIT_CONTAINER_MESSAGE))
            );
            assert_eq!(s.phase.as_deref(), Some(RUNNING));
        }
        assert_eq!(s36, s37);
    }

    /// convertContainerStatus under RestartAllContainersOnContainerExits (on from 1.36): a restart
    /// count never lower than the status says, one more for a container running after a terminated
    /// one, the last termination from the old status. 1.35: the runtime's count, and a last state
    /// only from an instance the runtime still holds.
    #[test]
    fn restart_counts_and_last_states_are_the_runtimes_alone_in_1_35() {
        let pod = pod_with(&["app"], vec![], "Always");
        let mut old = terminated_status("app", 1);
        old.container_id = Some("containerd://c0".into());
        old.restart_count = 5;
        let old = PodStatus {
            phase: Some(RUNNING.into()),
            container_statuses: Some(vec![old]),
            ..PodStatus::default()
        };
        let pod = with_old(pod, old);
        let runtime = RuntimePodStatus {
            container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        let app = |s: &PodStatus| s.container_statuses.as_ref().unwrap()[0].clone();
        assert_eq!(app(&s35).restart_count, 0, "the runtime's count");
        assert!(
            app(&s35).last_state.and_then(|l| l.terminated).is_none(),
            "1.35: no last state the runtime does not hold"
        );
        for s in [&s36, &s37] {
            assert_eq!(
                app(s).restart_count,
                6,
                "never lower, and one more after a terminated one"
            );
            let last = app(s).last_state.and_then(|l| l.terminated).expect("the old state");
            assert_eq!(last.exit_code, 1);
        }
        // The runtime still holding the instance before: a last state in every minor.
        let runtime = RuntimePodStatus {
            container_statuses: vec![
                runtime_status("app", "c1", RuntimeContainerState::Running, 10),
                runtime_status("app", "c0", RuntimeContainerState::Exited, 2),
            ],
            ..runtime
        };
        let [s35, ..] = by_minor(&pod, &runtime);
        let last = app(&s35).last_state.and_then(|l| l.terminated).expect("the runtime's");
        assert_eq!(
            (last.exit_code, last.container_id.as_deref()),
            (3, Some("containerd://c0"))
        );
    }

    /// GeneratePodInitializedCondition: a pod whose init container runs again (its sandbox was
    /// recreated) stays Initialized from 1.36; in 1.35 it is not initialized until it completes.
    #[test]
    fn initialized_follows_its_init_containers_in_1_35() {
        let pod = pod_with(&["app"], vec![spec_container("i1")], "Always");
        let old = PodStatus {
            phase: Some(RUNNING.into()),
            conditions: Some(vec![PodCondition {
                type_: INITIALIZED.into(),
                status: "True".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        };
        let pod = with_old(pod, old);
        let runtime = RuntimePodStatus {
            container_statuses: vec![runtime_status("i1", "c9", RuntimeContainerState::Running, 50)],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        let c = condition_of(&s35, INITIALIZED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            (
                "False",
                Some("ContainersNotInitialized"),
                Some("containers with incomplete status: [i1]")
            )
        );
        for s in [&s36, &s37] {
            assert_eq!(condition_of(s, INITIALIZED).status, "True");
        }
    }

    /// A `RestartAllContainers` rule: from 1.36 it restarts the container (getPhase) and the pod
    /// gets the AllContainersRestarting condition, the kubelet's own; in 1.35 the rule falls back
    /// to the container's policy (pkg/api/v1/pod/util.go) and the condition is someone else's,
    /// kept as the status has it.
    #[test]
    fn a_restart_all_rule_is_the_policys_in_1_35() {
        let mut pod = pod_with(&["trigger"], vec![], "Never");
        pod.spec.containers[0].restart_policy = Some("Never".into());
        pod.spec.containers[0].restart_policy_rules = vec![ContainerRestartRule {
            action: "RestartAllContainers".into(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: Some(vec![42]),
            }),
        }]
        .into();
        let runtime = RuntimePodStatus {
            container_statuses: vec![RuntimeContainerStatus {
                exit_code: 42,
                ..runtime_status("trigger", "c1", RuntimeContainerState::Exited, 10)
            }],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        assert_eq!(s35.phase.as_deref(), Some(FAILED), "1.35: Never decides");
        let types = |s: &PodStatus| -> Vec<String> { s.conditions.iter().flatten().map(|c| c.type_.clone()).collect() };
        assert!(!types(&s35).contains(&ALL_CONTAINERS_RESTARTING.to_owned()));
        for s in [&s36, &s37] {
            assert_eq!(s.phase.as_deref(), Some(RUNNING), "the rule restarts it");
            let c = condition_of(s, ALL_CONTAINERS_RESTARTING);
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref()),
                ("True", Some("RestartAllContainersStarted"))
            );
        }
        // A condition of that type already there: 1.35 keeps it as it is, not the kubelet's.
        let foreign = PodCondition {
            type_: ALL_CONTAINERS_RESTARTING.into(),
            status: "Unknown".into(),
            reason: Some("SomeoneElse".into()),
            ..PodCondition::default()
        };
        let pod = with_old(
            pod,
            PodStatus {
                conditions: Some(vec![foreign.clone()]),
                ..PodStatus::default()
            },
        );
        let s = status_by(&pod, &runtime, at(100), V1_35);
        assert_eq!(condition_of(&s, ALL_CONTAINERS_RESTARTING), &foreign);
        let s = status_by(&pod, &runtime, at(100), V1_37);
        assert_eq!(condition_of(&s, ALL_CONTAINERS_RESTARTING).status, "True");
        // checkContainerStateTransition: from 1.36 such a pod's containers may leave Terminated.
        let old = PodStatus {
            container_statuses: Some(vec![terminated_status("trigger", 1)]),
            ..PodStatus::default()
        };
        let new = PodStatus {
            container_statuses: Some(vec![running_status("trigger")]),
            ..PodStatus::default()
        };
        assert!(check_container_state_transition(&old, &new, &pod, V1_37).is_ok());
        assert!(check_container_state_transition(&old, &new, &pod, V1_35).is_err());
    }

    /// InPlacePodLevelResourcesVerticalScaling (on from 1.36): the pod-level resources in the
    /// status of every pod; 1.35 writes neither.
    #[test]
    fn pod_level_resources_are_written_from_1_36() {
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.spec.containers[0].resources = Some(Box::new(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity("100m".into()))])),
            ..ResourceRequirements::default()
        }));
        let runtime = RuntimePodStatus {
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        assert_eq!((s35.resources.as_ref(), s35.allocated_resources.as_ref()), (None, None));
        for s in [&s36, &s37] {
            assert_eq!(
                s.allocated_resources.as_ref().and_then(|r| r.get("cpu")),
                Some(&Quantity("100m".into()))
            );
            assert!(s.resources.is_some());
        }
    }

    /// What no switch changes is the same in every minor: a plain running pod.
    #[test]
    fn a_plain_running_pod_is_the_same_in_every_minor_but_its_pod_resources() {
        let pod = pod_with(&["app"], vec![], "Always");
        let runtime = RuntimePodStatus {
            container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let [s35, s36, s37] = by_minor(&pod, &runtime);
        assert_eq!(s36, s37);
        assert_eq!(
            PodStatus {
                resources: s37.resources.clone(),
                allocated_resources: s37.allocated_resources.clone(),
                ..s35
            },
            s37
        );
    }
}
