use k8s_openapi::api::core::v1::{ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus};

use crate::apiserver::pod::ApiPod;
use crate::kubecontainer::{RuntimeContainerState, RuntimePodStatus, SandboxState, SandboxStatus};

use super::super::test_support::*;
use super::super::*;
use super::*;

/// `TestActiveDeadlineHandler` (active_deadline_test.go), every case: started a minute ago.
/// (`TestNewActiveDeadlineHandler` checks the constructor's nil arguments, which Rust has not.)
#[test]
fn upstream_active_deadline_handler() {
    let now = at(1000);
    let start = Some(api_time(at(940)));
    for (i, (start, seconds, want)) in [
        (start.clone(), Some(30), true),
        (start.clone(), Some(120), false),
        (start, None, false),
        (None, Some(120), false),
        (None, None, false),
    ]
    .into_iter()
    .enumerate()
    {
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.spec.active_deadline_seconds = seconds;
        assert_eq!(past_active_deadline(&pod, start.as_ref(), now), want, "pods[{i}]");
    }
}

/// activeDeadlineSeconds (active_deadline.go, `generateAPIPodStatus`'s `ShouldEvict`): from the
/// start time on the status, a pod past its deadline is Failed with DeadlineExceeded — held
/// back by mergePodStatus while a container runs (the kubelet stops them first), then with
/// TerminatePod's status once nothing runs. No start time, no deadline; a terminal pod stays
/// as it ended.
#[test]
fn active_deadline_fails_the_pod_once_nothing_runs() {
    let mut pod = pod_with(&["app"], vec![], "Always");
    pod.spec.active_deadline_seconds = Some(30);
    let running = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    // No start time on the status yet: no deadline runs, however late it is.
    let first = status_of(&pod, &running, at(1000));
    assert_eq!(first.phase.as_deref(), Some(RUNNING));
    assert_eq!(first.start_time, Some(api_time(at(1000))));

    pod.status = Some(PodStatus {
        start_time: Some(api_time(at(100))),
        ..first
    });
    assert_eq!(
        active_deadline(&pod, pod.status.as_ref().unwrap().start_time.as_ref()),
        Some(at(130))
    );
    let before = status_of(&pod, &running, at(129));
    assert_eq!(
        (before.phase.as_deref(), before.reason.as_deref()),
        (Some(RUNNING), None)
    );

    // Past it with the container running: the phase waits, the readiness says the pod failed.
    let held = status_of(&pod, &running, at(130));
    assert_eq!((held.phase.as_deref(), held.reason.as_deref()), (Some(RUNNING), None));
    let ready = condition_of(&held, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );

    // Its container stopped (under Always it would otherwise restart: Running).
    let stopped = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Exited, 10)],
        ..running.clone()
    };
    let failed = status_of(&pod, &stopped, at(131));
    assert_eq!(failed.phase.as_deref(), Some(FAILED));
    assert_eq!(failed.reason.as_deref(), Some(DEADLINE_EXCEEDED));
    assert_eq!(failed.message.as_deref(), Some(DEADLINE_EXCEEDED_MESSAGE));
    let cs = &failed.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 3);
    let mut before_deadline = pod.clone();
    before_deadline.spec.active_deadline_seconds = Some(3600);
    assert_eq!(
        status_of(&before_deadline, &stopped, at(131)).phase.as_deref(),
        Some(RUNNING)
    );

    // Written, it stays; and a pod that succeeded before its deadline keeps Succeeded.
    pod.status = Some(failed.clone());
    assert_eq!(status_of(&pod, &stopped, at(500)), PodStatus { ..failed });
    let mut done = pod_with(&["app"], vec![], "Never");
    done.spec.active_deadline_seconds = Some(30);
    done.status = Some(PodStatus {
        phase: Some(SUCCEEDED.into()),
        start_time: Some(api_time(at(100))),
        ..PodStatus::default()
    });
    let s = status_of(&done, &stopped, at(500));
    assert_eq!((s.phase.as_deref(), s.reason.as_deref()), (Some(SUCCEEDED), None));
}

/// status_manager.go `checkContainerStateTransition`, per restart policy.
#[test]
fn illegal_transitions_are_refused() {
    let with = |list: Vec<ContainerStatus>, init: Vec<ContainerStatus>| PodStatus {
        container_statuses: Some(list),
        init_container_statuses: Some(init),
        ..PodStatus::default()
    };
    type Case = (&'static str, i32, fn(&str) -> ContainerStatus, bool);
    let cases: [Case; 8] = [
        ("Never", 0, running_status, false),
        ("Never", 1, |n| waiting_status(n, None), false),
        ("Never", 1, |n| terminated_status(n, 2), true),
        ("OnFailure", 1, running_status, true),
        ("OnFailure", 0, running_status, false),
        ("OnFailure", 0, |n| waiting_status(n, Some(0)), false),
        ("Always", 0, running_status, true),
        ("Always", 1, |n| waiting_status(n, Some(1)), true),
    ];
    for (policy, code, next, allowed) in cases {
        let pod = pod_with(&["a"], vec![spec_container("i"), sidecar("side")], policy);
        let old = with(vec![terminated_status("a", code)], vec![]);
        let new = with(vec![next("a")], vec![]);
        let got = check_container_state_transition(&old, &new, &pod, KubeletMinor::V1_37);
        assert_eq!(
            got.is_ok(),
            allowed,
            "{policy} exit {code} → {:?}: {got:?}",
            new.container_statuses
        );
        // The same for a regular init container; a sidecar may always restart.
        let old = with(
            vec![],
            vec![terminated_status("i", code), terminated_status("side", code)],
        );
        let new = with(vec![], vec![next("i"), next("side")]);
        assert_eq!(
            check_container_state_transition(&old, &new, &pod, KubeletMinor::V1_37).is_ok(),
            allowed,
            "init {policy} {code}"
        );
        let new = with(vec![], vec![terminated_status("i", code), next("side")]);
        assert!(
            check_container_state_transition(&old, &new, &pod, KubeletMinor::V1_37).is_ok(),
            "sidecar {policy} {code}"
        );
    }
    let pod = pod_with(&["a"], vec![], "Never");
    let err = check_container_state_transition(
        &with(vec![terminated_status("a", 0)], vec![]),
        &with(vec![running_status("a")], vec![]),
        &pod,
        KubeletMinor::V1_37,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "terminated container a attempted illegal transition to non-terminated state"
    );
}

/// checkContainerStateTransition with a container's own restart policy and rules: a Never
/// container in an OnFailure pod may not run again after a failure; one whose rule restarts
/// it on that code may; a pod where some container may restart all of them may do anything.
#[test]
fn state_transitions_follow_container_restart_rules() {
    let mut pod = pod_with(&[], vec![], "OnFailure");
    pod.spec.containers = vec![with_policy("app", Some("Never"), &[("Restart", "In", &[42])])];
    let old = |code| PodStatus {
        container_statuses: Some(vec![terminated_status("app", code)]),
        ..PodStatus::default()
    };
    let new = PodStatus {
        container_statuses: Some(vec![running_status("app")]),
        ..PodStatus::default()
    };
    assert_eq!(
        check_container_state_transition(&old(1), &new, &pod, KubeletMinor::V1_37),
        Err(IllegalTransition {
            kind: "container",
            name: "app".into()
        })
    );
    assert_eq!(
        check_container_state_transition(&old(42), &new, &pod, KubeletMinor::V1_37),
        Ok(())
    );
    pod.spec.containers[0].restart_policy_rules[0].action = "RestartAllContainers".into();
    assert_eq!(
        check_container_state_transition(&old(1), &new, &pod, KubeletMinor::V1_37),
        Ok(())
    );
}

/// Upstream's `TestTerminatePod_DefaultUnknownStatus` (status_manager_test.go), every case:
/// the pod's status before, what `TerminatePod` leaves.
#[test]
fn upstream_terminate_pod_default_unknown_status() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum S {
        Waiting,
        WaitingAfter(i32),
        Running,
        Terminated(i32),
        LastOnly(i32),
        Unknown,
    }
    let to_api = |name: &str, s: S| {
        let mut status = match s {
            S::Waiting | S::WaitingAfter(_) => waiting_status(name, None),
            S::Running => running_status(name),
            S::Terminated(code) => terminated_status(name, code),
            S::LastOnly(_) => ContainerStatus {
                name: name.into(),
                ..ContainerStatus::default()
            },
            S::Unknown => unreachable!(),
        };
        if let S::WaitingAfter(code) | S::LastOnly(code) = s {
            status.last_state = terminated_status(name, code).state;
        }
        status
    };
    let from_api = |c: &ContainerStatus| match (c.state.as_ref(), terminated(c)) {
        (_, Some(t)) if t.reason.as_deref() == Some(CONTAINER_STATUS_UNKNOWN) => {
            assert_eq!((t.exit_code, t.message.as_deref()), (137, Some(UNKNOWN_AT_TERMINATION)));
            S::Unknown
        }
        (_, Some(t)) => S::Terminated(t.exit_code),
        _ if running(c) => S::Running,
        _ if waiting(c) => match last_terminated(c) {
            Some(t) => S::WaitingAfter(t.exit_code),
            None => S::Waiting,
        },
        _ => panic!("{c:?}"),
    };
    use S::*;
    /// A row: the phase and the init and regular container states before, the pod's restart
    /// policy, and what `TerminatePod` leaves.
    struct TerminateCase {
        name: &'static str,
        phase: &'static str,
        init: &'static [S],
        regular: &'static [S],
        policy: &'static str,
        want_init: &'static [S],
        want_regular: &'static [S],
        want_phase: &'static str,
    }
    #[rustfmt::skip]
    let cases: [TerminateCase; 14] = [
        TerminateCase { name: "failed pod, no statuses", phase: FAILED, init: &[], regular: &[], policy: "Always", want_init: &[], want_regular: &[], want_phase: FAILED },
        TerminateCase { name: "running pod becomes failed", phase: RUNNING, init: &[], regular: &[], policy: "Always", want_init: &[], want_regular: &[], want_phase: FAILED },
        TerminateCase { name: "terminated container kept", phase: RUNNING, init: &[], regular: &[Terminated(2)], policy: "Always", want_init: &[], want_regular: &[Terminated(2)], want_phase: FAILED },
        TerminateCase { name: "last termination state set", phase: RUNNING, init: &[], regular: &[WaitingAfter(2)], policy: "Never", want_init: &[], want_regular: &[Unknown], want_phase: FAILED },
        TerminateCase { name: "no previous state", phase: RUNNING, init: &[], regular: &[Waiting], policy: "Never", want_init: &[], want_regular: &[Unknown], want_phase: FAILED },
        TerminateCase { name: "uninitialized pod defaults the first init container", phase: PENDING, init: &[Waiting], regular: &[Waiting], policy: "Never", want_init: &[Unknown], want_regular: &[Waiting], want_phase: FAILED },
        TerminateCase { name: "uninitialized pod defaults only the first init container", phase: PENDING, init: &[Waiting, Waiting], regular: &[Waiting], policy: "Never", want_init: &[Unknown, Waiting], want_regular: &[Waiting], want_phase: FAILED },
        TerminateCase { name: "uninitialized pod defaults gaps", phase: PENDING, init: &[Waiting, Waiting, Terminated(1), Waiting], regular: &[Waiting], policy: "Never", want_init: &[Unknown, Unknown, Terminated(1), Waiting], want_regular: &[Waiting], want_phase: FAILED },
        TerminateCase { name: "failed last container is uninitialized", phase: PENDING, init: &[Waiting, Waiting, Terminated(1)], regular: &[Waiting], policy: "Never", want_init: &[Unknown, Unknown, Terminated(1)], want_regular: &[Waiting], want_phase: FAILED },
        TerminateCase { name: "successful last container is initialized", phase: RUNNING, init: &[Waiting, Waiting, Terminated(0)], regular: &[Waiting], policy: "Never", want_init: &[Unknown, Unknown, Terminated(0)], want_regular: &[Unknown], want_phase: FAILED },
        TerminateCase { name: "successful last previous container is initialized, and container state is overwritten", phase: RUNNING, init: &[Waiting, Waiting, WaitingAfter(0)], regular: &[Waiting], policy: "Never", want_init: &[Unknown, Unknown, Unknown], want_regular: &[Unknown], want_phase: FAILED },
        TerminateCase { name: "running container proves initialization", phase: RUNNING, init: &[Waiting], regular: &[Running], policy: "Never", want_init: &[Unknown], want_regular: &[Unknown], want_phase: FAILED },
        TerminateCase { name: "evidence of terminated container proves initialization", phase: RUNNING, init: &[Waiting], regular: &[Terminated(0)], policy: "Never", want_init: &[Unknown], want_regular: &[Terminated(0)], want_phase: FAILED },
        TerminateCase { name: "evidence of previously terminated container proves initialization", phase: RUNNING, init: &[Waiting], regular: &[LastOnly(0)], policy: "Never", want_init: &[Unknown], want_regular: &[Unknown], want_phase: FAILED },
    ];
    for TerminateCase {
        name,
        phase,
        init,
        regular,
        policy,
        want_init,
        want_regular,
        want_phase,
    } in cases
    {
        let init_names: Vec<String> = (0..init.len()).map(|i| format!("init-{i}")).collect();
        let regular_names: Vec<String> = (0..regular.len().max(1)).map(|i| i.to_string()).collect();
        let refs: Vec<&str> = regular_names.iter().map(String::as_str).collect();
        let pod = pod_with(&refs, init_names.iter().map(|n| spec_container(n)).collect(), policy);
        let mut status = PodStatus {
            phase: Some(phase.into()),
            init_container_statuses: Some(init.iter().zip(&init_names).map(|(s, n)| to_api(n, *s)).collect()),
            container_statuses: Some(regular.iter().zip(&regular_names).map(|(s, n)| to_api(n, *s)).collect()),
            ..PodStatus::default()
        };
        terminate_pod(&pod, &mut status);
        let got_init: Vec<S> = status
            .init_container_statuses
            .as_deref()
            .unwrap()
            .iter()
            .map(from_api)
            .collect();
        let got_regular: Vec<S> = status
            .container_statuses
            .as_deref()
            .unwrap()
            .iter()
            .map(from_api)
            .collect();
        assert_eq!(
            (got_init.as_slice(), got_regular.as_slice()),
            (want_init, want_regular),
            "{name}"
        );
        assert_eq!(status.phase.as_deref(), Some(want_phase), "{name}");
        // A last state survives.
        for (before, after) in regular.iter().zip(status.container_statuses.as_deref().unwrap()) {
            if let WaitingAfter(code) = before {
                assert_eq!(last_terminated(after).map(|t| t.exit_code), Some(*code), "{name}");
            }
        }
    }
}

/// Upstream's `TestTerminatePod_EnsurePodPhaseIsTerminal`.
#[test]
fn upstream_terminate_pod_ensures_a_terminal_phase() {
    let pod = pod_with(&["0"], vec![], "Always");
    for (phase, want) in [
        (Some(PENDING), FAILED),
        (Some(RUNNING), FAILED),
        (Some(SUCCEEDED), SUCCEEDED),
        (Some(FAILED), FAILED),
        (Some("Unknown"), FAILED),
        (None, FAILED),
    ] {
        let mut status = PodStatus {
            phase: phase.map(str::to_owned),
            ..PodStatus::default()
        };
        terminate_pod(&pod, &mut status);
        assert_eq!(status.phase.as_deref(), Some(want), "{phase:?}");
    }
}

/// Upstream's `TestTerminatePod` and `TestTerminatePodWaiting`. Upstream keeps its cached status
/// beside a stale copy from the apiserver and terminates the cached one; plegd has one status,
/// the cached one here. Containers without a state are defaulted; terminated ones, the phase
/// and the message stay; a waiting init container after the last one that started stays.
#[test]
fn upstream_terminate_pod_and_terminate_pod_waiting() {
    let pod = pod_with(
        &["test-1", "test-2", "test-3"],
        vec![
            spec_container("init-test-1"),
            spec_container("init-test-2"),
            spec_container("init-test-3"),
        ],
        "Always",
    );
    let bare = |name: &str| ContainerStatus {
        name: name.into(),
        ..ContainerStatus::default()
    };
    let waiting_for = |name: &str, reason: &str| ContainerStatus {
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: None,
            }),
            ..ContainerState::default()
        }),
        ..bare(name)
    };
    let unknown = Some(terminated_unknown());
    for (name, init, regular, want_init, want_regular) in [
        (
            "TestTerminatePod",
            vec![
                bare("init-test-1"),
                terminated_status("init-test-2", 0),
                terminated_status("init-test-3", 3),
            ],
            vec![
                bare("test-1"),
                terminated_status("test-2", 2),
                terminated_status("test-3", 0),
            ],
            [true, false, false],
            [true, false, false],
        ),
        (
            "TestTerminatePodWaiting",
            vec![
                bare("init-test-1"),
                terminated_status("init-test-2", 0),
                waiting_for("init-test-3", "InitTest"),
            ],
            vec![
                bare("test-1"),
                terminated_status("test-2", 2),
                waiting_for("test-3", "Test"),
            ],
            [true, false, false],
            [true, false, true],
        ),
    ] {
        let first = PodStatus {
            phase: Some(FAILED.into()),
            message: Some("first".into()),
            init_container_statuses: Some(init.clone()),
            container_statuses: Some(regular.clone()),
            ..PodStatus::default()
        };
        let mut status = first.clone();
        terminate_pod(&pod, &mut status);
        for (list, before, defaulted) in [
            (status.init_container_statuses.as_ref().unwrap(), &init, want_init),
            (status.container_statuses.as_ref().unwrap(), &regular, want_regular),
        ] {
            for ((got, before), defaulted) in list.iter().zip(before).zip(defaulted) {
                let want = if defaulted { &unknown } else { &before.state };
                assert_eq!(&got.state, want, "{name}: {}", got.name);
            }
        }
        assert_eq!((status.phase, status.message), (first.phase, first.message), "{name}");
    }
}

/// A deleted pod whose containers all stopped, and a terminal one, are finished: generation
/// ends with `TerminatePod`. A deleted pod with a running container is not.
#[test]
fn finished_pods_end_with_terminate_pod() {
    let mut pod = pod_with(&["a", "b"], vec![], "Always");
    pod.metadata.deletion_timestamp = Some(api_time(at(50)));
    pod.status = Some(PodStatus {
        phase: Some(RUNNING.into()),
        container_statuses: Some(vec![running_status("a"), running_status("b")]),
        ..PodStatus::default()
    });
    let mut runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![
            runtime_status("a", "c1", RuntimeContainerState::Exited, 10),
            runtime_status("b", "c2", RuntimeContainerState::Running, 10),
        ],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(60));
    assert_eq!(s.phase.as_deref(), Some(RUNNING), "b still runs");
    assert!(!pod_is_finished(&pod, &runtime, s.phase.as_deref()));
    // b's container is gone from the runtime (removed with its sandbox): nothing runs.
    runtime.container_statuses.pop();
    runtime.sandbox_statuses.clear();
    let s = status_of(&pod, &runtime, at(70));
    assert!(pod_is_finished(&pod, &runtime, s.phase.as_deref()));
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    let b = find(s.container_statuses.as_deref().unwrap(), "b").unwrap();
    let t = terminated(b).expect("b terminated");
    assert_eq!(
        (t.exit_code, t.reason.as_deref(), t.message.as_deref()),
        (137, Some(CONTAINER_STATUS_UNKNOWN), Some(UNKNOWN_AT_TERMINATION))
    );
    assert_eq!(
        b.restart_count, 0,
        "a deleted pod's vanished container is not a restart"
    );
    // Its phase came from getPhase (b terminated), not from TerminatePod: the kubelet generates
    // it once more (SyncTerminatedPod) — the same, but for the pod-level resources, which a pod
    // that is no longer Running takes from its allocation (`{}`: none) — and then no more.
    let mut again = pod.clone();
    again.status = Some(s.clone());
    assert!(past_the_last_look(&again, &runtime, &s));
    assert!(!phase_set_by_terminate_pod(&again, &s));
    let regenerated = status_of(&again, &runtime, at(80));
    assert_eq!(
        regenerated.resources,
        Some(k8s_openapi::api::core::v1::ResourceRequirements::default())
    );
    assert_eq!(
        PodStatus {
            resources: None,
            ..regenerated.clone()
        },
        s
    );
    again.status = Some(regenerated.clone());
    assert_eq!(status_of(&again, &runtime, at(90)), regenerated);
}

fn reason_and_message(status: &PodStatus, type_: &str) -> (String, Option<String>, Option<String>) {
    let c = condition_of(status, type_);
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn killed(name: &str, id: &str) -> crate::kubecontainer::RuntimeContainerStatus {
    crate::kubecontainer::RuntimeContainerStatus {
        exit_code: 137,
        ..runtime_status(name, id, RuntimeContainerState::Exited, 10)
    }
}

/// A pod deleted at each stage of its start, as the kubelet ends it: its pod worker stops the
/// containers and the sandbox, generates the status against the phase the pod had (`getPhase`
/// with the pod terminal: a pod whose container never ran is Pending), and `TerminatePod` copies
/// that status, setting only the phase (Failed) and the states of containers that did not
/// terminate (regular ones only once the pod initialized). The conditions keep what they said
/// before the phase was set: Ready and ContainersReady `ContainersNotReady` with the containers'
/// names, not `PodFailed`. After that the kubelet never writes the pod again (kubelet.go's
/// `SyncTerminatedPod`, status_manager.go's `TerminatePod`): generated against that status, the
/// same comes out, and the same once the sandbox and the containers are removed. A pod deleted
/// while it ran is terminal by getPhase (its container terminated) before TerminatePod, which
/// leaves it as it is.
#[test]
fn a_pod_deleted_at_each_stage_ends_as_terminate_pod_leaves_it() {
    let not_ready = |names: &str| {
        (
            "False".to_owned(),
            Some("ContainersNotReady".to_owned()),
            Some(format!("containers with unready status: [{names}]")),
        )
    };
    struct Stage {
        name: &'static str,
        pod: ApiPod,
        /// The runtime once the kubelet stopped what ran.
        runtime: RuntimePodStatus,
        /// Ready / ContainersReady, Initialized, PodReadyToStartContainers as the kubelet leaves them.
        ready: (String, Option<String>, Option<String>),
        initialized: (String, Option<String>, Option<String>),
        sandbox_message: &'static str,
        /// Each container's state after TerminatePod: (name, terminated exit code and reason, or waiting).
        states: Vec<(&'static str, Option<(i32, &'static str)>)>,
    }
    let deleted = |mut pod: ApiPod| {
        pod.metadata.deletion_timestamp = Some(api_time(at(50)));
        pod
    };
    let stopped = |id: &str| SandboxStatus {
        id: id.to_owned(),
        state: SandboxState::NotReady,
        ..ready_sandbox("10.1.0.5")
    };
    let initialized_true = ("True".to_owned(), None, None);
    let stages = vec![
        Stage {
            name: "never started: deleted before it had a sandbox",
            pod: deleted(pod_with(&["main"], vec![], "Always")),
            runtime: RuntimePodStatus::default(),
            ready: not_ready("main"),
            initialized: initialized_true.clone(),
            sandbox_message: NO_POD_SANDBOX,
            states: vec![("main", Some((137, CONTAINER_STATUS_UNKNOWN)))],
        },
        Stage {
            name: "image missing: a sandbox, no container",
            pod: deleted(pod_with(&["main"], vec![], "Always")),
            runtime: RuntimePodStatus {
                sandbox_statuses: vec![stopped("s1")],
                ..RuntimePodStatus::default()
            },
            ready: not_ready("main"),
            initialized: initialized_true.clone(),
            sandbox_message: SANDBOX_NOT_READY,
            states: vec![("main", Some((137, CONTAINER_STATUS_UNKNOWN)))],
        },
        Stage {
            name: "during its init container",
            pod: deleted(pod_with(&["main"], vec![spec_container("init")], "Always")),
            runtime: RuntimePodStatus {
                container_statuses: vec![killed("init", "c0")],
                sandbox_statuses: vec![stopped("s1")],
                ..RuntimePodStatus::default()
            },
            ready: not_ready("main"),
            initialized: (
                "False".to_owned(),
                Some("ContainersNotInitialized".to_owned()),
                Some("containers with incomplete status: [init]".to_owned()),
            ),
            sandbox_message: SANDBOX_NOT_READY,
            // Not initialized: the regular container stays waiting.
            states: vec![("init", Some((137, "Error"))), ("main", None)],
        },
        Stage {
            name: "only its sidecar ran",
            pod: deleted(pod_with(&["main"], vec![sidecar("side")], "Always")),
            runtime: RuntimePodStatus {
                container_statuses: vec![killed("side", "c0")],
                sandbox_statuses: vec![stopped("s1")],
                ..RuntimePodStatus::default()
            },
            ready: not_ready("side main"),
            initialized: (
                "False".to_owned(),
                Some("ContainersNotInitialized".to_owned()),
                Some("containers with incomplete status: [side]".to_owned()),
            ),
            sandbox_message: SANDBOX_NOT_READY,
            states: vec![("side", Some((137, "Error"))), ("main", None)],
        },
        Stage {
            name: "running",
            pod: deleted(pod_with(&["main"], vec![], "Always")),
            runtime: RuntimePodStatus {
                container_statuses: vec![killed("main", "c1")],
                sandbox_statuses: vec![stopped("s1")],
                ..RuntimePodStatus::default()
            },
            // Terminated before the phase was set: the phase at generation is already Failed.
            ready: ("False".to_owned(), Some("PodFailed".to_owned()), None),
            initialized: initialized_true,
            sandbox_message: SANDBOX_NOT_READY,
            states: vec![("main", Some((137, "Error")))],
        },
    ];
    for stage in stages {
        let name = stage.name;
        let s = status_of(&stage.pod, &stage.runtime, at(60));
        assert_eq!(s.phase.as_deref(), Some(FAILED), "{name}");
        assert_eq!(reason_and_message(&s, READY), stage.ready, "{name}: Ready");
        assert_eq!(
            reason_and_message(&s, CONTAINERS_READY),
            stage.ready,
            "{name}: ContainersReady"
        );
        assert_eq!(
            reason_and_message(&s, INITIALIZED),
            stage.initialized,
            "{name}: Initialized"
        );
        assert_eq!(
            reason_and_message(&s, POD_READY_TO_START_CONTAINERS),
            (
                "False".to_owned(),
                Some(POD_SANDBOX_NOT_READY.to_owned()),
                Some(stage.sandbox_message.to_owned())
            ),
            "{name}: PodReadyToStartContainers"
        );
        let all: Vec<&ContainerStatus> = s
            .init_container_statuses
            .iter()
            .flatten()
            .chain(s.container_statuses.iter().flatten())
            .collect();
        for (container, want) in &stage.states {
            let status = all.iter().find(|c| c.name == *container).expect(container);
            let got = terminated(status).map(|t| (t.exit_code, t.reason.clone().unwrap_or_default()));
            assert_eq!(
                got,
                want.map(|(code, reason)| (code, reason.to_owned())),
                "{name}: {container}"
            );
            if want.is_none() {
                assert!(waiting(status), "{name}: {container} waits");
            }
        }
        // The kubelet's last word: generated against it, it stays; also once the sandbox and the
        // containers are removed.
        let mut written = stage.pod.clone();
        written.status = Some(s.clone());
        assert!(past_the_last_look(&written, &stage.runtime, &s), "{name}");
        assert_eq!(
            phase_set_by_terminate_pod(&written, &s),
            stage.ready.1.as_deref() == Some("ContainersNotReady"),
            "{name}"
        );
        assert_eq!(
            status_of(&written, &stage.runtime, at(70)),
            s,
            "{name}: generated again"
        );
        let removed = RuntimePodStatus::default();
        assert_eq!(status_of(&written, &removed, at(120)), s, "{name}: once removed");
    }
}

/// Before the kubelet's last look a status is generated anew: a terminal status written while the
/// sandbox still ran (the kubelet writes again once it stopped it), or while something of the pod
/// runs. Past it, PodReadyToStartContainers stays as the last look left it, whatever becomes of
/// the sandbox; and a phase is TerminatePod's only where the status was generated for a pod not
/// yet terminal (its ContainersReady says neither `PodFailed` nor `PodCompleted`) and TerminatePod
/// has nothing left to change in it.
#[test]
fn past_the_kubelets_last_look_its_sandbox_condition_stays() {
    let mut pod = pod_with(&["main"], vec![], "Never");
    let mut runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("main", "c1", RuntimeContainerState::Exited, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    // Exited under Never, its sandbox still ready: Failed, PodReadyToStartContainers True.
    let s = status_of(&pod, &runtime, at(20));
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    assert!(!phase_set_by_terminate_pod(&pod, &s), "getPhase's Failed: PodFailed");
    pod.status = Some(s.clone());
    assert!(!past_the_last_look(&pod, &runtime, &s), "the sandbox still runs");
    // The sandbox stopped: generated again, PodReadyToStartContainers False.
    runtime.sandbox_statuses[0].state = SandboxState::NotReady;
    assert!(past_the_last_look(&pod, &runtime, &s));
    let stopped = status_of(&pod, &runtime, at(30));
    assert_eq!(
        condition_of(&stopped, POD_READY_TO_START_CONTAINERS).message.as_deref(),
        Some(SANDBOX_NOT_READY)
    );
    pod.status = Some(stopped.clone());
    // The sandbox removed: the kubelet does not look again, the condition stays.
    runtime.sandbox_statuses.clear();
    assert_eq!(status_of(&pod, &runtime, at(40)), stopped);
    // Something of it running again (a runtime that restarted it): generated anew.
    runtime.container_statuses[0].state = RuntimeContainerState::Running;
    assert!(!past_the_last_look(&pod, &runtime, &stopped));
    // A status TerminatePod would still change (a container not terminated) is not its.
    let mut unfinished = stopped.clone();
    for c in unfinished.conditions.as_mut().unwrap() {
        if c.type_ == CONTAINERS_READY {
            c.reason = Some("ContainersNotReady".into());
        }
    }
    assert!(phase_set_by_terminate_pod(&pod, &unfinished));
    unfinished.container_statuses = Some(vec![running_status("main")]);
    assert!(!phase_set_by_terminate_pod(&pod, &unfinished));
    // Nor one whose phase is not terminal.
    let mut pending = stopped.clone();
    pending.phase = Some(PENDING.into());
    assert!(!phase_set_by_terminate_pod(&pod, &pending));
}

/// The end of a pod: a container that is only created, in a sandbox that is stopped, can never
/// run (a runtime starts no container in a stopped sandbox), so a deleted pod whose containers
/// are exited or merely created in stopped sandboxes is finished and gets TerminatePod's
/// status. It may be deleted only once no sandbox of it is ready; a mirror pod never.
#[test]
fn a_created_container_in_a_stopped_sandbox_never_runs() {
    let mut pod = pod_with(&["a", "b"], vec![], "Always");
    pod.metadata.deletion_timestamp = Some(api_time(at(50)));
    pod.status = Some(PodStatus {
        phase: Some(RUNNING.into()),
        container_statuses: Some(vec![running_status("a"), waiting_status("b", None)]),
        ..PodStatus::default()
    });
    let mut runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![
            runtime_status("a", "c1", RuntimeContainerState::Exited, 10),
            runtime_status("b", "c2", RuntimeContainerState::Created, 10),
        ],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    // In a ready sandbox, b may still be started.
    assert!(could_have_running_containers(&runtime));
    let s = status_of(&pod, &runtime, at(60));
    assert_eq!(s.phase.as_deref(), Some(PENDING), "b waits to start");
    assert!(!pod_can_be_deleted(&pod, &runtime, s.phase.as_deref()));

    // Its sandbox stopped: b never runs, the pod is finished — and deletable.
    runtime.sandbox_statuses[0].state = SandboxState::NotReady;
    assert!(!could_have_running_containers(&runtime));
    let s = status_of(&pod, &runtime, at(70));
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    let b = find(s.container_statuses.as_deref().unwrap(), "b").unwrap();
    assert_eq!(terminated(b).map(|t| t.exit_code), Some(137), "TerminatePod's status");
    assert!(pod_can_be_deleted(&pod, &runtime, s.phase.as_deref()));

    // A created container whose sandbox is not in the read (gone) never runs either.
    runtime.sandbox_statuses.clear();
    assert!(!could_have_running_containers(&runtime));
    // A container in an unknown state might run.
    runtime.container_statuses[1].state = RuntimeContainerState::Unknown;
    assert!(could_have_running_containers(&runtime));

    // Finished, but a sandbox of it is still ready (a new one, say): not deleted yet.
    runtime.container_statuses[1].state = RuntimeContainerState::Exited;
    runtime.sandbox_statuses = vec![ready_sandbox("10.1.0.6")];
    assert!(pod_is_finished(&pod, &runtime, Some(FAILED)));
    assert!(!pod_can_be_deleted(&pod, &runtime, Some(FAILED)));
    runtime.sandbox_statuses[0].state = SandboxState::NotReady;
    assert!(pod_can_be_deleted(&pod, &runtime, Some(FAILED)));
    let mut mirror = pod.clone();
    mirror.metadata.annotations = Some([(MIRROR_POD_ANNOTATION.to_owned(), "hash".to_owned())].into());
    assert!(!pod_can_be_deleted(&mirror, &runtime, Some(FAILED)));

    // A static pod (its mirror pod here) is not forced terminal: getPhase gives a terminal
    // phase only to other pods (kubernetes#116484), and TerminatePod leaves its phase.
    let s = status_of(&mirror, &runtime, at(90));
    assert_eq!(s.phase.as_deref(), Some(RUNNING), "stopped under Always: restarting");
    let b = find(s.container_statuses.as_deref().unwrap(), "b").unwrap();
    assert!(
        terminated(b).is_some(),
        "its containers still get TerminatePod's states"
    );
    let mut status = PodStatus {
        phase: Some(PENDING.into()),
        ..PodStatus::default()
    };
    terminate_pod(&mirror, &mut status);
    assert_eq!(status.phase.as_deref(), Some(PENDING));
}
