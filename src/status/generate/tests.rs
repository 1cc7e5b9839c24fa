// The kubelet's table-driven cases, kept as tables of tuples.
#![allow(clippy::type_complexity)]

use super::*;
use crate::kubecontainer::SandboxStatus;
use crate::pod::ApiPodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::time::Duration;

const T: SystemTime = SystemTime::UNIX_EPOCH;

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

fn spec_container(name: &str) -> ApiContainer {
    ApiContainer {
        name: name.into(),
        image: "busybox".into(),
        ..ApiContainer::default()
    }
}

fn sidecar(name: &str) -> ApiContainer {
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
fn completed_init(name: &str) -> ContainerStatus {
    ContainerStatus {
        ready: true,
        ..terminated_status(name, 0)
    }
}

fn waiting_status(name: &str, last_exit: Option<i32>) -> ContainerStatus {
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

#[test]
fn phase_by_restart_policy_and_state() {
    type Case = (&'static str, fn() -> Vec<ContainerStatus>, &'static str);
    let cases: Vec<Case> = vec![
        ("Always", || vec![running_status("a")], RUNNING),
        ("Always", || vec![terminated_status("a", 0)], RUNNING),
        ("Always", || vec![terminated_status("a", 1)], RUNNING),
        ("Always", || vec![waiting_status("a", None)], PENDING),
        ("Always", || vec![waiting_status("a", Some(1))], RUNNING),
        ("Always", Vec::new, PENDING),
        ("OnFailure", || vec![terminated_status("a", 0)], SUCCEEDED),
        ("OnFailure", || vec![terminated_status("a", 1)], RUNNING),
        ("OnFailure", || vec![running_status("a")], RUNNING),
        ("OnFailure", || vec![waiting_status("a", Some(2))], RUNNING),
        ("Never", || vec![terminated_status("a", 0)], SUCCEEDED),
        ("Never", || vec![terminated_status("a", 1)], FAILED),
        ("Never", || vec![running_status("a")], RUNNING),
        ("Never", || vec![waiting_status("a", None)], PENDING),
    ];
    for (policy, statuses, want) in cases {
        let pod = pod_with(&["a"], vec![], policy);
        assert_eq!(
            get_phase(&pod, &statuses(), false, true),
            want,
            "{policy} {:?}",
            statuses()
        );
    }
    // Two containers: any failure under Never is Failed once all stopped; one running is Running.
    let pod = pod_with(&["a", "b"], vec![], "Never");
    assert_eq!(
        get_phase(
            &pod,
            &[terminated_status("a", 0), terminated_status("b", 1)],
            false,
            true
        ),
        FAILED
    );
    assert_eq!(
        get_phase(&pod, &[terminated_status("a", 0), running_status("b")], false, true),
        RUNNING
    );
    assert_eq!(
        get_phase(&pod, &[terminated_status("a", 0)], false, true),
        PENDING,
        "b unknown"
    );
}

#[test]
fn terminal_pod_with_always_reports_the_outcome() {
    let pod = pod_with(&["a", "b"], vec![], "Always");
    let statuses = [terminated_status("a", 0), terminated_status("b", 0)];
    assert_eq!(get_phase(&pod, &statuses, true, true), SUCCEEDED);
    let statuses = [terminated_status("a", 0), terminated_status("b", 137)];
    assert_eq!(get_phase(&pod, &statuses, true, true), FAILED);
}

#[test]
fn init_containers_and_sidecars() {
    let pod = pod_with(&["a"], vec![spec_container("init")], "Always");
    assert_eq!(
        get_phase(&pod, &[running_status("init"), waiting_status("a", None)], false, false),
        PENDING
    );
    assert_eq!(
        get_phase(&pod, &[terminated_status("init", 0), running_status("a")], false, true),
        RUNNING
    );
    let never = pod_with(&["a"], vec![spec_container("init")], "Never");
    assert_eq!(
        get_phase(
            &never,
            &[terminated_status("init", 1), waiting_status("a", None)],
            false,
            false
        ),
        FAILED
    );
    assert_eq!(
        get_phase(
            &never,
            &[waiting_status("init", Some(1)), waiting_status("a", None)],
            false,
            false
        ),
        FAILED
    );
    let always = pod_with(&["a"], vec![spec_container("init")], "Always");
    assert_eq!(
        get_phase(
            &always,
            &[terminated_status("init", 1), waiting_status("a", None)],
            false,
            false
        ),
        PENDING
    );

    // A sidecar that runs but has not started keeps the pod pending until a container started.
    let pod = pod_with(&["a"], vec![sidecar("side")], "Always");
    let mut side = running_status("side");
    side.started = Some(false);
    assert_eq!(
        get_phase(&pod, &[side.clone(), waiting_status("a", None)], false, false),
        PENDING
    );
    assert_eq!(
        get_phase(&pod, &[running_status("side"), running_status("a")], false, true),
        RUNNING
    );
    // A sidecar restarting after the pod initialized does not send it back to Pending.
    assert_eq!(get_phase(&pod, &[side, running_status("a")], false, true), RUNNING);
    // Terminated sidecars do not count towards the outcome.
    let never = pod_with(&["a"], vec![sidecar("side")], "Never");
    assert_eq!(
        get_phase(
            &never,
            &[terminated_status("side", 143), terminated_status("a", 0)],
            false,
            true
        ),
        SUCCEEDED
    );
    // A missing sidecar status is unknown.
    assert_eq!(get_phase(&never, &[running_status("a")], false, true), PENDING);
}

#[test]
fn containers_ready_and_ready_conditions() {
    let pod = pod_with(&["a", "b", "c"], vec![], "Always");
    let mut b = running_status("b");
    b.ready = false;
    let statuses = [running_status("a"), b];
    let c = containers_ready_condition(&pod, Some(&statuses), RUNNING);
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ContainersNotReady"))
    );
    assert_eq!(
        c.message.as_deref(),
        Some("containers with unknown status: [c], containers with unready status: [b]")
    );
    let r = ready_condition(&pod, &[], Some(&statuses), RUNNING);
    assert_eq!(
        (r.type_.as_str(), r.status.as_str(), r.message),
        ("Ready", "False", c.message)
    );

    let done = [
        terminated_status("a", 0),
        terminated_status("b", 0),
        terminated_status("c", 0),
    ];
    assert_eq!(
        containers_ready_condition(&pod, Some(&done), SUCCEEDED)
            .reason
            .as_deref(),
        Some("PodCompleted")
    );
    assert_eq!(
        ready_condition(&pod, &[], Some(&done), FAILED).reason.as_deref(),
        Some("PodFailed")
    );
    assert_eq!(
        containers_ready_condition(&pod, None, RUNNING).reason.as_deref(),
        Some("UnknownContainerStatuses")
    );

    // Readiness gates.
    let mut gated = pod_with(&["a"], vec![], "Always");
    gated.spec.readiness_gates = vec!["example.com/lb".into()];
    let ok = [running_status("a")];
    let r = ready_condition(&gated, &[], Some(&ok), RUNNING);
    assert_eq!(r.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        r.message.as_deref(),
        Some("corresponding condition of pod readiness gate \"example.com/lb\" does not exist.")
    );
    let gate = |status: &str| PodCondition {
        type_: "example.com/lb".into(),
        status: status.into(),
        ..PodCondition::default()
    };
    let r = ready_condition(&gated, &[gate("False")], Some(&ok), RUNNING);
    assert_eq!(
        r.message.as_deref(),
        Some("the status of pod readiness gate \"example.com/lb\" is not \"True\", but False")
    );
    assert_eq!(
        ready_condition(&gated, &[gate("True")], Some(&ok), RUNNING).status,
        "True"
    );
}

#[test]
fn initialized_condition_cases() {
    let pod = pod_with(&["a"], vec![spec_container("i1"), spec_container("i2")], "Always");
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[
            completed_init("i1"),
            // A running init container is not ready (it is done once it exited with 0).
            ContainerStatus {
                ready: false,
                ..running_status("i2")
            },
            waiting_status("a", None),
        ]),
        PENDING,
    );
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(c.message.as_deref(), Some("containers with incomplete status: [i2]"));
    let c = initialized_condition(&pod, &[], Some(&[completed_init("i1")]), PENDING);
    assert_eq!(c.message.as_deref(), Some("containers with unknown status: [i2]"));
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[completed_init("i1"), completed_init("i2"), running_status("a")]),
        RUNNING,
    );
    assert_eq!(c.status, "True");
    // A regular container that started means initialized, whatever the init containers say now.
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[waiting_status("i1", None), running_status("a")]),
        RUNNING,
    );
    assert_eq!(c.status, "True");
    let c = initialized_condition(&pod, &[], None, PENDING);
    assert_eq!(c.reason.as_deref(), Some("UnknownContainerStatuses"));
    // An empty list is not "no statuses": each init container is of unknown status.
    let c = initialized_condition(&pod, &[], Some(&[]), PENDING);
    assert_eq!(c.reason.as_deref(), Some("ContainersNotInitialized"));
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
        image_ref: "sha256:abc".into(),
        reason: if state == RuntimeContainerState::Exited {
            "Error".into()
        } else {
            String::new()
        },
        message: String::new(),
        restart_count: 0,
        resources: None,
        user: None,
        stop_signal: None,
    }
}

pub(crate) fn ready_sandbox(ip: &str) -> SandboxStatus {
    SandboxStatus {
        ips: vec![ip.into()],
        ..sandbox("s1", SandboxState::Ready, 1)
    }
}

fn status_of(pod: &ApiPod, runtime: &RuntimePodStatus, now: SystemTime) -> PodStatus {
    status_with(pod, runtime, now, false)
}

/// [`status_of`], with the stop signals the runtime reports written or not.
fn status_with(pod: &ApiPod, runtime: &RuntimePodStatus, now: SystemTime, stop_signals: bool) -> PodStatus {
    generate(&StatusInput {
        pod,
        runtime,
        runtime_name: "containerd",
        node_ips: &["192.0.2.10".to_owned()],
        recursive_read_only_handlers: Some(&[]),
        stop_signals,
        now,
    })
}

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

/// PodObservedGenerationTracking (GA in 1.35): the status and every condition the kubelet
/// writes carry `metadata.generation`, the terminal Ready/ContainersReady of `mergePodStatus`
/// too (and plegd's own condition, in either mode); conditions of others keep theirs; a pod
/// without a generation gets none.
#[test]
fn observed_generation_is_the_pods_generation() {
    let mut pod = pod_with(&["app"], vec![], "Never");
    pod.metadata.generation = Some(3);
    let other = PodCondition {
        type_: "example.com/Other".into(),
        status: "True".into(),
        observed_generation: Some(1),
        ..PodCondition::default()
    };
    pod.status = Some(PodStatus {
        conditions: Some(vec![other.clone()]),
        ..PodStatus::default()
    });
    let runtime = RuntimePodStatus {
        id: "u1".into(),
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(100));
    assert_eq!(s.observed_generation, Some(3));
    for c in s.conditions.as_ref().unwrap() {
        let want = if c.type_ == other.type_ { Some(1) } else { Some(3) };
        assert_eq!(c.observed_generation, want, "{}", c.type_);
    }
    for mode in [crate::status::StatusMode::Full, crate::status::StatusMode::Conditions] {
        let node = crate::status::decide::NodeFacts {
            runtime_name: "containerd".into(),
            node_ips: Vec::new(),
            recursive_read_only_handlers: Some(Vec::new()),
            stop_signals: false,
        };
        let decision = crate::status::decide::decide(mode, &node, &pod, None, &runtime, at(100));
        let crate::status::decide::Action::Write { status: desired, .. } = decision.action else {
            panic!("{mode:?} writes")
        };
        let ours = desired
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == CONTAINERS_RUNNING);
        assert_eq!(ours.unwrap().observed_generation, Some(3), "{mode:?}");
    }

    // Ready before; the container ends under Never: the terminal Ready/ContainersReady that
    // mergePodStatus writes carry the generation too.
    pod.status = Some(s);
    pod.metadata.generation = Some(4);
    let runtime = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Exited, 10)],
        ..runtime
    };
    let s = status_of(&pod, &runtime, at(200));
    assert_eq!(s.phase.as_deref(), Some(FAILED));
    let ready = condition_of(&s, READY);
    assert_eq!((ready.status.as_str(), ready.observed_generation), ("False", Some(4)));

    // Never lowered: a pod whose generation reads lower keeps the status' (its conditions
    // carry the pod's, as upstream's do).
    pod.status = Some(s);
    pod.metadata.generation = Some(2);
    let lower = status_of(&pod, &runtime, at(250));
    assert_eq!(lower.observed_generation, Some(4));

    pod.status = None;
    pod.metadata.generation = None;
    let s = status_of(&pod, &runtime, at(300));
    assert_eq!(s.observed_generation, None);
    assert!(
        s.conditions
            .unwrap()
            .iter()
            .filter(|c| c.type_ != other.type_)
            .all(|c| c.observed_generation.is_none())
    );
}

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

/// `TestResolveRecursiveReadOnly` (kubelet_pods_test.go), every case.
#[test]
fn upstream_resolve_recursive_read_only() {
    let m = |ro: bool, rro: Option<&str>, propagation: Option<&str>| VolumeMount {
        name: "foo".into(),
        read_only: Some(ro),
        recursive_read_only: rro.map(str::to_owned),
        mount_propagation: propagation.map(str::to_owned),
        ..VolumeMount::default()
    };
    let (prop, not_ro, unsupported, unknown) = (
        "not compatible with propagation",
        "not read-only",
        "not supported by the runtime",
        "unknown recursive read-only mode",
    );
    #[rustfmt::skip]
    let cases: [(VolumeMount, bool, Result<bool, &str>); 16] = [
        (m(false, None, None), true, Ok(false)),
        (m(true, None, None), true, Ok(false)),
        (m(true, Some("Disabled"), None), true, Ok(false)),
        (m(true, Some("IfPossible"), None), true, Ok(true)),
        (m(true, Some("IfPossible"), Some("None")), true, Ok(true)),
        (m(true, Some("IfPossible"), Some("HostToContainer")), true, Err(prop)),
        (m(true, Some("IfPossible"), Some("Bidirectional")), true, Err(prop)),
        (m(false, Some("IfPossible"), None), true, Err(not_ro)),
        (m(false, Some("IfPossible"), None), false, Err(not_ro)),
        (m(true, Some("Enabled"), None), true, Ok(true)),
        (m(true, Some("Enabled"), Some("None")), true, Ok(true)),
        (m(true, Some("Enabled"), Some("HostToContainer")), true, Err(prop)),
        (m(true, Some("Enabled"), Some("Bidirectional")), true, Err(prop)),
        (m(false, Some("Enabled"), None), true, Err(not_ro)),
        (m(true, Some("Enabled"), None), false, Err(unsupported)),
        (m(true, Some("foo"), None), true, Err(unknown)),
    ];
    for (i, (mount, supported, want)) in cases.into_iter().enumerate() {
        match (resolve_recursive_read_only(&mount, supported), want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "case {}", i + 1),
            (Err(got), Err(want)) => assert!(got.contains(want), "case {}: {got}", i + 1),
            (got, want) => panic!("case {}: {got:?}, want {want:?}", i + 1),
        }
    }
}

/// `containerStatuses[].volumeMounts` (RecursiveReadOnlyMounts, GA): from the spec while the
/// runtime has not reported the container, recursiveReadOnly only on read-only mounts (Enabled
/// where asked for and the pod's runtime handler supports it, else Disabled); then copied from
/// the previous status as they were ("immutable"), none when there was none. Where plegd
/// cannot tell whether the handler supports them, nothing is written.
#[test]
fn volume_mounts_from_the_spec_then_as_they_were() {
    use k8s_openapi::api::core::v1::VolumeMount;
    let mount = |name: &str, ro: bool, rro: Option<&str>| VolumeMount {
        name: name.into(),
        mount_path: format!("/{name}"),
        read_only: ro.then_some(true),
        recursive_read_only: rro.map(str::to_owned),
        ..VolumeMount::default()
    };
    let mut pod = pod_with(&["app"], vec![], "Always");
    pod.spec.containers[0].volume_mounts = vec![
        mount("rw", false, None),
        mount("ro", true, None),
        mount("rro", true, Some("IfPossible")),
        mount("rro-enabled", true, Some("Enabled")),
        mount("rw-asks", false, Some("Enabled")),
    ]
    .into();
    let mut pod_shared = pod.clone();
    pod_shared.spec.containers[0].volume_mounts[3].mount_propagation = Some("HostToContainer".into());
    let waiting = RuntimePodStatus {
        id: "u1".into(),
        sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
        ..RuntimePodStatus::default()
    };
    let generate_with = |pod: &ApiPod, runtime: &RuntimePodStatus, handlers: Option<&[String]>| {
        generate(&StatusInput {
            pod,
            runtime,
            runtime_name: "containerd",
            node_ips: &[],
            recursive_read_only_handlers: handlers,
            stop_signals: false,
            now: at(100),
        })
    };
    let rro_of = |s: &PodStatus| -> Option<Vec<(String, Option<String>)>> {
        s.container_statuses.as_ref().unwrap()[0]
            .volume_mounts
            .as_ref()
            .map(|v| {
                v.iter()
                    .map(|m| (m.name.clone(), m.recursive_read_only.clone()))
                    .collect()
            })
    };
    let want = |enabled: &str, shared: &str| {
        Some(vec![
            ("rw".to_owned(), None),
            ("ro".to_owned(), Some("Disabled".to_owned())),
            ("rro".to_owned(), Some(enabled.to_owned())),
            ("rro-enabled".to_owned(), Some(shared.to_owned())),
            ("rw-asks".to_owned(), None),
        ])
    };
    let default_handler = [String::new()];
    let s = generate_with(&pod, &waiting, Some(&default_handler));
    assert_eq!(rro_of(&s), want("Enabled", "Enabled"));
    let m = &s.container_statuses.as_ref().unwrap()[0]
        .volume_mounts
        .as_ref()
        .unwrap()[1];
    assert_eq!((m.mount_path.as_str(), m.read_only), ("/ro", Some(true)));
    // A runtime that lists no handler supporting them (containerd 1.7 lists none at all).
    assert_eq!(
        rro_of(&generate_with(&pod, &waiting, Some(&[]))),
        want("Disabled", "Disabled")
    );
    // Propagation other than None cannot be recursively read-only.
    assert_eq!(
        rro_of(&generate_with(&pod_shared, &waiting, Some(&default_handler))),
        want("Enabled", "Disabled")
    );
    // The sandbox runs under another handler than the default.
    let mut other = waiting.clone();
    other.sandbox_statuses[0].runtime_handler = "kata".into();
    assert_eq!(
        rro_of(&generate_with(&pod, &other, Some(&default_handler))),
        want("Disabled", "Disabled")
    );
    // Unknown: the runtime could not be asked, or a RuntimeClass before any sandbox.
    assert_eq!(rro_of(&generate_with(&pod, &waiting, None)), None);
    let mut classed = pod.clone();
    classed.spec.runtime_class_name = Some("gvisor".into());
    let no_sandbox = RuntimePodStatus {
        id: "u1".into(),
        ..RuntimePodStatus::default()
    };
    assert_eq!(
        rro_of(&generate_with(&classed, &no_sandbox, Some(&default_handler))),
        None
    );

    // Once the runtime reports the container: copied from the status before.
    let running = RuntimePodStatus {
        container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
        ..waiting.clone()
    };
    let mut seen = pod.clone();
    seen.status = Some(s.clone());
    seen.spec.containers[0].volume_mounts = Box::new([]);
    assert_eq!(
        rro_of(&generate_with(&seen, &running, Some(&[]))),
        want("Enabled", "Enabled")
    );
    // First seen already running, with no status before: none.
    assert_eq!(rro_of(&generate_with(&pod, &running, Some(&default_handler))), None);
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

#[test]
fn termination_messages_share_12_kib() {
    let names: Vec<String> = (0..3).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let pod = pod_with(&refs, vec![], "Never");
    let runtime = RuntimePodStatus {
        container_statuses: names
            .iter()
            .map(|n| RuntimeContainerStatus {
                message: "x".repeat(10_000),
                ..runtime_status(n, n, RuntimeContainerState::Exited, 1)
            })
            .collect(),
        ..RuntimePodStatus::default()
    };
    let s = status_of(&pod, &runtime, at(10));
    let total: usize = s
        .container_statuses
        .unwrap()
        .iter()
        .map(|c| {
            c.state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .message
                .as_ref()
                .unwrap()
                .len()
        })
        .sum();
    assert!(
        (MAX_TERMINATION_MESSAGES - 3..=MAX_TERMINATION_MESSAGES).contains(&total),
        "{total}"
    );
}

#[test]
fn plegd_condition_names_the_dead_container() {
    let pod = pod_with(&["web", "db"], vec![], "Always");
    let mut oom = terminated_status("db", 137);
    oom.state.as_mut().unwrap().terminated.as_mut().unwrap().reason = Some("OOMKilled".into());
    let c = containers_running_condition(&pod, &[running_status("web"), oom]);
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("OOMKilled")));
    assert_eq!(
        c.message.as_deref(),
        Some("container db exited with code 137 (OOMKilled)")
    );
    let c = containers_running_condition(&pod, &[running_status("web"), running_status("db")]);
    assert_eq!(c.status, "True");
    let c = containers_running_condition(&pod, &[terminated_status("web", 3), waiting_status("db", None)]);
    assert_eq!(c.reason.as_deref(), Some("ContainerDied"));
    assert_eq!(
        c.message.as_deref(),
        Some("container web exited with code 3; container db has not started")
    );
}

#[test]
fn host_network_pods_take_node_ips_and_dead_pods_keep_theirs() {
    let mut pod = pod_with(&["app"], vec![], "Always");
    pod.spec.host_network = true;
    let s = status_of(&pod, &RuntimePodStatus::default(), at(1));
    assert_eq!(s.pod_ip.as_deref(), Some("192.0.2.10"));
    let mut pod = pod_with(&["app"], vec![], "Always");
    pod.status = Some(PodStatus {
        pod_ip: Some("10.1.0.9".into()),
        pod_ips: Some(vec![PodIP { ip: "10.1.0.9".into() }]),
        ..PodStatus::default()
    });
    assert_eq!(
        status_of(&pod, &RuntimePodStatus::default(), at(1)).pod_ip.as_deref(),
        Some("10.1.0.9")
    );
}

fn ips(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The status generated for `pod` when the runtime reports `cri` as its IPs on a node with
/// `node` IPs, and its pod IPs.
fn with_ips(pod: &ApiPod, cri: &[&str], node: &[String]) -> (PodStatus, Vec<String>) {
    let runtime = RuntimePodStatus {
        ips: ips(cri),
        ..RuntimePodStatus::default()
    };
    let s = generate(&StatusInput {
        pod,
        runtime: &runtime,
        runtime_name: "containerd",
        node_ips: node,
        recursive_read_only_handlers: Some(&[]),
        stop_signals: false,
        now: at(1),
    });
    let got = s
        .pod_ips
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.ip)
        .collect();
    (s, got)
}

/// kubelet_pods_test.go `TestSortPodIPs` and `TestGenerateAPIPodStatusPodIPs` (their cases are
/// the same), plus the runtime's IPs in non-canonical form.
#[test]
fn upstream_sort_pod_ips() {
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        ("Simple", "", &["10.0.0.1"], &["10.0.0.1"]),
        (
            "Dual-stack",
            "",
            &["10.0.0.1", "fd01::1234"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Dual-stack with explicit node IP",
            "192.168.1.1",
            &["10.0.0.1", "fd01::1234"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Dual-stack with CRI returning wrong family first",
            "",
            &["fd01::1234", "10.0.0.1"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Dual-stack with explicit node IP with CRI returning wrong family first",
            "192.168.1.1",
            &["fd01::1234", "10.0.0.1"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Dual-stack with IPv6 node IP",
            "fd00::5678",
            &["10.0.0.1", "fd01::1234"],
            &["fd01::1234", "10.0.0.1"],
        ),
        (
            "Dual-stack with IPv6 node IP, other CRI order",
            "fd00::5678",
            &["fd01::1234", "10.0.0.1"],
            &["fd01::1234", "10.0.0.1"],
        ),
        ("No Pod IP matching Node IP", "fd00::5678", &["10.0.0.1"], &["10.0.0.1"]),
        (
            "No Pod IP matching (unspecified) Node IP",
            "",
            &["fd01::1234"],
            &["fd01::1234"],
        ),
        (
            "Multiple IPv4 IPs",
            "",
            &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
            &["10.0.0.1"],
        ),
        (
            "Multiple Dual-Stack IPs",
            "",
            &["10.0.0.1", "10.0.0.2", "fd01::1234", "10.0.0.3", "fd01::5678"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Badly-formatted IPs from CRI",
            "",
            &["010.000.000.001", "fd01:0:0:0:0:0:0:1234"],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "Not an IP is left out",
            "",
            &["ten.0.0.1", "10.0.0.256", "1.2.3", "١٠.0.0.1", "10.0.0.2"],
            &["10.0.0.2"],
        ),
    ];
    for (name, node_ip, cri, want) in cases {
        let node = if node_ip.is_empty() { vec![] } else { ips(&[node_ip]) };
        assert_eq!(sort_pod_ips(&ips(cri), &node), ips(want), "{name}");
        // The same through the whole generator (TestGenerateAPIPodStatusPodIPs).
        let (s, got) = with_ips(&pod_with(&["app"], vec![], "Always"), cri, &node);
        assert_eq!(got, ips(want), "{name}");
        assert_eq!(s.pod_ip.as_deref(), Some(want[0]), "{name}");
    }
}

/// kubelet_pods_test.go `TestGenerateAPIPodStatusHostNetworkPodIPs` and
/// `TestNodeAddressUpdatesGenerateAPIPodStatusHostNetworkPodIPs`. plegd does not read the Node
/// object: the host IPs the kubelet would pick from its addresses (the first InternalIP of each
/// family) are given as `--node-ip`, so the cases about which address type wins and about
/// node addresses changing after start are expressed through the IPs they end in.
#[test]
fn upstream_host_network_pod_ips() {
    let cases: &[(&str, &[&str], &[&str], &[&str])] = &[
        ("Simple", &["10.0.0.1"], &[], &["10.0.0.1"]),
        (
            "InternalIP is preferred over ExternalIP",
            &["10.0.0.1"],
            &[],
            &["10.0.0.1"],
        ),
        (
            "Single-stack addresses in dual-stack cluster",
            &["10.0.0.1"],
            &[],
            &["10.0.0.1"],
        ),
        (
            "Multiple single-stack addresses in dual-stack cluster",
            &["10.0.0.1", "10.0.0.2"],
            &[],
            &["10.0.0.1"],
        ),
        (
            "Dual-stack addresses in dual-stack cluster",
            &["10.0.0.1", "fd01::1234"],
            &[],
            &["10.0.0.1", "fd01::1234"],
        ),
        (
            "CRI PodIPs override NodeAddresses",
            &["10.0.0.1", "fd01::1234"],
            &["192.168.0.1"],
            &["192.168.0.1", "fd01::1234"],
        ),
        (
            "CRI dual-stack PodIPs override NodeAddresses",
            &["10.0.0.1", "fd01::1234"],
            &["192.168.0.1", "2001:db8::2"],
            &["192.168.0.1", "2001:db8::2"],
        ),
        (
            "CRI dual-stack PodIPs override NodeAddresses prefer IPv4",
            &["10.0.0.1", "fd01::1234"],
            &["2001:db8::2", "192.168.0.1"],
            &["192.168.0.1", "2001:db8::2"],
        ),
        (
            "Immutable after update node addresses single-stack",
            &["10.0.0.1"],
            &["10.0.0.1"],
            &["10.0.0.1"],
        ),
        (
            "Immutable after update node addresses dual-stack",
            &["10.0.0.1", "2001:db8::2"],
            &["10.0.0.1", "2001:db8::2"],
            &["10.0.0.1", "2001:db8::2"],
        ),
        (
            "Update secondary after new secondary address dual-stack",
            &["10.0.0.1", "2001:db8::2"],
            &["10.0.0.1"],
            &["10.0.0.1", "2001:db8::2"],
        ),
    ];
    for (name, node, cri, want) in cases {
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.spec.host_network = true;
        let (s, got) = with_ips(&pod, cri, &ips(node));
        assert_eq!(got, ips(want), "{name}");
        if cri.is_empty() {
            assert_eq!(s.host_ip, s.pod_ip, "{name}: hostIP is podIP");
        }
    }
}

#[test]
fn initialized_is_pod_completed_once_succeeded() {
    let pod = pod_with(&["a"], vec![spec_container("i1")], "Never");
    let statuses = [completed_init("i1"), terminated_status("a", 0)];
    let c = initialized_condition(&pod, &[], Some(&statuses), SUCCEEDED);
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("PodCompleted")));
    // Running: a started regular container means initialized, with no reason.
    let c = initialized_condition(&pod, &[], Some(&[completed_init("i1"), running_status("a")]), RUNNING);
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", None));
    // A waiting container with a last termination has not "started" (upstream looks at the state).
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[waiting_status("i1", None), waiting_status("a", Some(1))]),
        PENDING,
    );
    assert_eq!(c.status, "False");
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

/// `HasAnyActiveRegularContainerStarted`: only the containers of the newest ready sandbox count,
/// in any state; a pod whose sandbox was recreated initializes again.
#[test]
fn has_initialized_follows_the_active_sandbox() {
    let mut side = sidecar("side");
    side.startup_probe = true;
    let pod = pod_with(&["a"], vec![side], "Always");
    let mut old_app = runtime_status("a", "c-old", RuntimeContainerState::Exited, 5);
    old_app.sandbox_id = "s-old".into();
    let mut new_side = runtime_status("side", "side-2", RuntimeContainerState::Running, 20);
    new_side.sandbox_id = "s-new".into();
    // The regular container ran in the old sandbox only: the new one is initializing.
    let recreated = RuntimePodStatus {
        container_statuses: vec![old_app.clone(), new_side.clone()],
        sandbox_statuses: vec![
            sandbox("s-new", SandboxState::Ready, 2),
            sandbox("s-old", SandboxState::NotReady, 1),
        ],
        ..RuntimePodStatus::default()
    };
    assert!(!any_active_regular_container_started(&pod, &recreated));
    assert_eq!(status_of(&pod, &recreated, at(30)).phase.as_deref(), Some(PENDING));
    // The regular container exited in the current sandbox: initialized, and Running under Always.
    let mut app = old_app;
    app.sandbox_id = "s-new".into();
    let same = RuntimePodStatus {
        container_statuses: vec![app, new_side],
        sandbox_statuses: vec![sandbox("s-new", SandboxState::Ready, 2)],
        ..RuntimePodStatus::default()
    };
    assert!(any_active_regular_container_started(&pod, &same));
    assert_eq!(status_of(&pod, &same, at(30)).phase.as_deref(), Some(RUNNING));
    // No ready sandbox: nothing is active.
    let stopped = RuntimePodStatus {
        sandbox_statuses: vec![sandbox("s-new", SandboxState::NotReady, 2)],
        ..same
    };
    assert!(!any_active_regular_container_started(&pod, &stopped));
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
        let got = check_container_state_transition(&old, &new, &pod);
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
            check_container_state_transition(&old, &new, &pod).is_ok(),
            allowed,
            "init {policy} {code}"
        );
        let new = with(vec![], vec![terminated_status("i", code), next("side")]);
        assert!(
            check_container_state_transition(&old, &new, &pod).is_ok(),
            "sidecar {policy} {code}"
        );
    }
    let pod = pod_with(&["a"], vec![], "Never");
    let err = check_container_state_transition(
        &with(vec![terminated_status("a", 0)], vec![]),
        &with(vec![running_status("a")], vec![]),
        &pod,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "terminated container a attempted illegal transition to non-terminated state"
    );
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
    #[rustfmt::skip]
    let cases: [(&str, &str, &[S], &[S], &str, &[S], &[S], &str); 14] = [
        // name, phase, init before, regular before, policy, init after, regular after, phase after
        ("failed pod, no statuses", FAILED, &[], &[], "Always", &[], &[], FAILED),
        ("running pod becomes failed", RUNNING, &[], &[], "Always", &[], &[], FAILED),
        ("terminated container kept", RUNNING, &[], &[Terminated(2)], "Always", &[], &[Terminated(2)], FAILED),
        ("last termination state set", RUNNING, &[], &[WaitingAfter(2)], "Never", &[], &[Unknown], FAILED),
        ("no previous state", RUNNING, &[], &[Waiting], "Never", &[], &[Unknown], FAILED),
        ("uninitialized pod defaults the first init container", PENDING, &[Waiting], &[Waiting], "Never", &[Unknown], &[Waiting], FAILED),
        ("uninitialized pod defaults only the first init container", PENDING, &[Waiting, Waiting], &[Waiting], "Never", &[Unknown, Waiting], &[Waiting], FAILED),
        ("uninitialized pod defaults gaps", PENDING, &[Waiting, Waiting, Terminated(1), Waiting], &[Waiting], "Never", &[Unknown, Unknown, Terminated(1), Waiting], &[Waiting], FAILED),
        ("failed last container is uninitialized", PENDING, &[Waiting, Waiting, Terminated(1)], &[Waiting], "Never", &[Unknown, Unknown, Terminated(1)], &[Waiting], FAILED),
        ("successful last container is initialized", RUNNING, &[Waiting, Waiting, Terminated(0)], &[Waiting], "Never", &[Unknown, Unknown, Terminated(0)], &[Unknown], FAILED),
        ("successful last previous container is initialized, and container state is overwritten", RUNNING, &[Waiting, Waiting, WaitingAfter(0)], &[Waiting], "Never", &[Unknown, Unknown, Unknown], &[Unknown], FAILED),
        ("running container proves initialization", RUNNING, &[Waiting], &[Running], "Never", &[Unknown], &[Unknown], FAILED),
        ("evidence of terminated container proves initialization", RUNNING, &[Waiting], &[Terminated(0)], "Never", &[Unknown], &[Terminated(0)], FAILED),
        ("evidence of previously terminated container proves initialization", RUNNING, &[Waiting], &[LastOnly(0)], "Never", &[Unknown], &[Unknown], FAILED),
    ];
    for (name, phase, init, regular, policy, want_init, want_regular, want_phase) in cases {
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
    // Generated again from that status: the same, but for the pod-level resources, which a pod
    // that is no longer Running takes from its allocation (`{}`: none) — and then stay.
    let mut again = pod.clone();
    again.status = Some(s.clone());
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

/// A status in the shorthand of the upstream phase tables (`kubelet_pods_test.go`): `W`
/// waitingState, `WL0`/`WL1` waiting after exit 0 / non-zero, `R` runningState, `S`
/// startedState, `T0` succeeded (and stoppedState, which is Terminated{} with code 0), `T1`
/// failedState (-1).
fn shorthand(name: &str, state: &str) -> ContainerStatus {
    match state {
        "W" => waiting_status(name, None),
        "WL0" => waiting_status(name, Some(0)),
        "WL1" => waiting_status(name, Some(-1)),
        "R" => ContainerStatus {
            started: None,
            ..running_status(name)
        },
        "S" => ContainerStatus {
            started: Some(true),
            ..running_status(name)
        },
        "T0" => terminated_status(name, 0),
        "T1" => terminated_status(name, -1),
        "T42" => terminated_status(name, 42),
        // waitingStateWithRestartingAllContainers.
        "RAC" => {
            let mut s = waiting_status(name, Some(137));
            let why = Some(RESTARTING_ALL_CONTAINERS.to_owned());
            let message = Some("The container is removed because RestartAllContainers in place".to_owned());
            s.state.as_mut().unwrap().waiting = Some(ContainerStateWaiting {
                reason: why.clone(),
                message: message.clone(),
            });
            let t = s.last_state.as_mut().unwrap().terminated.as_mut().unwrap();
            (t.reason, t.message) = (why, message);
            s
        }
        other => panic!("unknown shorthand {other}"),
    }
}

fn with_policy(name: &str, policy: Option<&str>, rules: &[(&str, &str, &[i32])]) -> ApiContainer {
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

/// Upstream's getPhase tables for container restart policies and rules, every case:
/// `TestPodPhaseWithContainerRestartPolicy`, `…ContainerRestartPolicyInitContainers` and
/// `TestPodPhaseWithRestartAllContainers` (kubelet_pods_test.go, ContainerRestartRules and
/// RestartAllContainersOnContainerExits on); each calls getPhase with podHasInitialized true
/// and podIsTerminal false. Two rows of the last table give two statuses of one name
/// (a sidecar and an init container both called "container"): the first status found wins,
/// as `GetContainerStatus` finds it.
#[test]
fn upstream_container_restart_policy_phase_tables() {
    let never = Some("Never");
    let rac: &[(&str, &str, &[i32])] = &[("RestartAllContainers", "In", &[42])];
    let with_rule = || with_policy("container", never, rac);
    let sidecar_with_rule = || with_policy("container", Some("Always"), rac);
    type Case = (
        &'static str,
        &'static str,
        Vec<ApiContainer>,
        Vec<ApiContainer>,
        Vec<(&'static str, &'static str)>,
        &'static str,
    );
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // TestPodPhaseWithContainerRestartPolicy
        ("container with restart policy Never failed", "Always", vec![], vec![with_policy("failed-container", never, &[])], vec![("failed-container", "T1")], FAILED),
        ("container with restart policy OnFailure failed", "Always", vec![], vec![with_policy("failed-container", Some("OnFailure"), &[])], vec![("failed-container", "T1")], RUNNING),
        ("container with restart policy Always failed", "Always", vec![], vec![with_policy("failed-container", Some("Always"), &[])], vec![("failed-container", "T1")], RUNNING),
        ("At least one container with restartable container-level restart policy failed", "Never", vec![], vec![with_policy("containerA", Some("Always"), &[]), spec_container("containerB")], vec![("containerA", "T0"), ("containerB", "T1")], RUNNING),
        ("All containers without restartable container-level restart policy failed", "Always", vec![], vec![with_policy("containerA", never, &[]), with_policy("containerB", Some("OnFailure"), &[])], vec![("containerA", "T1"), ("containerB", "T0")], FAILED),
        ("All containers succeeded", "Always", vec![], vec![with_policy("containerA", never, &[]), with_policy("containerB", Some("OnFailure"), &[])], vec![("containerA", "T0"), ("containerB", "T0")], SUCCEEDED),
        // TestPodPhaseWithContainerRestartPolicyInitContainers
        ("init container with restart policy Never failed", "Always", vec![with_policy("failed-container", never, &[])], vec![spec_container("container")], vec![("failed-container", "T1")], FAILED),
        ("init container with restart policy OnFailure failed", "Never", vec![with_policy("failed-container", Some("OnFailure"), &[])], vec![spec_container("container")], vec![("failed-container", "T1")], PENDING),
        ("container with restart policy Always failed", "Never", vec![with_policy("failed-container", Some("Always"), &[])], vec![spec_container("container")], vec![("failed-container", "T1")], PENDING),
        // TestPodPhaseWithRestartAllContainers: trigger
        ("regular container triggers RestartAllContainers", "Never", vec![], vec![with_rule()], vec![("container", "T42")], RUNNING),
        ("init container triggers RestartAllContainers", "Never", vec![with_rule()], vec![], vec![("container", "T42"), ("regular", "W")], PENDING),
        ("sidecar container triggers RestartAllContainers", "Never", vec![sidecar_with_rule()], vec![spec_container("regular")], vec![("container", "T42"), ("regular", "W")], PENDING),
        ("sidecar container triggers RestartAllContainers, kills another init container", "Never", vec![sidecar_with_rule(), spec_container("init")], vec![spec_container("regular")], vec![("container", "T42"), ("init", "W"), ("regular", "W")], PENDING),
        // … cleanup
        ("regular container triggers RestartAllContainers, cleaned up", "Never", vec![], vec![with_rule()], vec![("container", "RAC")], RUNNING),
        ("init container triggers RestartAllContainers, cleaned up", "Never", vec![with_rule()], vec![], vec![("container", "RAC"), ("regular", "W")], PENDING),
        ("sidecar container triggers RestartAllContainers, cleaned up", "Never", vec![sidecar_with_rule()], vec![spec_container("regular")], vec![("container", "RAC"), ("regular", "W")], PENDING),
        ("sidecar container triggers RestartAllContainers, kills another init container, cleaned up", "Never", vec![sidecar_with_rule(), spec_container("init")], vec![spec_container("regular")], vec![("container", "RAC"), ("container", "RAC"), ("regular", "W")], PENDING),
        // … startup
        ("regular container triggered RestartAllContainers; init container succeeded", "Never", vec![spec_container("init")], vec![with_rule()], vec![("init", "T0"), ("container", "RAC")], RUNNING),
        ("regular container triggered RestartAllContainers; init container failed", "Never", vec![spec_container("init")], vec![with_rule()], vec![("init", "T1"), ("container", "RAC")], FAILED),
        ("init container triggered RestartAllContainers", "Never", vec![with_rule()], vec![spec_container("regular")], vec![("container", "T42"), ("regular", "W")], PENDING),
        ("init container triggered RestartAllContainers; init container succeeds", "Never", vec![with_rule()], vec![spec_container("regular")], vec![("container", "T0"), ("regular", "W")], PENDING),
        ("sidecar container triggered RestartAllContainers kills regular container", "Never", vec![sidecar_with_rule()], vec![spec_container("regular")], vec![("container", "RAC"), ("regular", "RAC")], RUNNING),
        ("sidecar container triggered RestartAllContainers kills regular container; sidecar running", "Never", vec![sidecar_with_rule()], vec![spec_container("regular")], vec![("container", "R"), ("regular", "RAC")], RUNNING),
        ("sidecar container triggered RestartAllContainers; kills init container; sidecar running", "Never", vec![sidecar_with_rule(), spec_container("init")], vec![spec_container("regular")], vec![("container", "R"), ("container", "RAC"), ("regular", "W")], PENDING),
    ];
    for (name, policy, init, containers, states, want) in cases {
        let pod = ApiPod {
            spec: ApiPodSpec {
                restart_policy: Some(policy.into()),
                init_containers: init,
                containers,
                ..ApiPodSpec::default()
            },
            ..ApiPod::default()
        };
        let statuses: Vec<ContainerStatus> = states.iter().map(|(n, st)| shorthand(n, st)).collect();
        assert_eq!(get_phase(&pod, &statuses, false, true), want, "{name}");
    }
}

/// `TestContainerHasRestartablePolicy` (pkg/api/v1/pod/util_test.go), every case, and
/// `TestFindMatchingContainerRestartRule`'s.
#[test]
fn upstream_container_should_restart() {
    let restart_in: &[(&str, &str, &[i32])] = &[("Restart", "In", &[42, 50, 60])];
    let restart_not_in: &[(&str, &str, &[i32])] = &[("Restart", "NotIn", &[0, 1, 2])];
    #[rustfmt::skip]
    let cases: [(&str, Option<&str>, &[(&str, &str, &[i32])], Option<&str>, i32, bool); 12] = [
        ("Rule: 'In' operator matches with 'Restart' action", Some("Never"), restart_in, None, 42, true),
        ("Rule: 'NotIn' operator matches with 'Restart' action", Some("Never"), restart_not_in, None, 99, true),
        ("Rule: 'In' operator does not match, should fall back to container policy", Some("Never"), &[("Restart", "In", &[10, 20])], None, 30, false),
        ("Rule: 'NotIn' operator does not match, should fall back to container policy", Some("Never"), &[("Restart", "NotIn", &[10, 20])], None, 10, false),
        ("Container Policy: 'Always'", Some("Always"), &[], Some("Never"), 0, true),
        ("Container Policy: 'OnFailure' with exit code 0", Some("OnFailure"), &[], Some("Never"), 0, false),
        ("Container Policy: 'OnFailure' with non-zero exit code", Some("OnFailure"), &[], Some("Never"), 1, true),
        ("Container Policy: 'Never' should return false", Some("Never"), &[], Some("Always"), 1, false),
        ("Pod Policy: Fallback to pod 'Always'", None, &[], Some("Always"), 0, true),
        ("Pod Policy: Fallback to pod 'OnFailure' with non-zero exit code", None, &[], Some("OnFailure"), 1, true),
        ("Pod Policy: Fallback to pod 'Never'", None, &[], Some("Never"), 1, false),
        ("Pod Policy: Fallback with no policies specified should return true", None, &[], None, 0, true),
    ];
    for (name, policy, rules, pod_policy, code, want) in cases {
        let c = with_policy("c", policy, rules);
        assert_eq!(container_should_restart(&c, pod_policy, code), want, "{name}");
    }
    let both: &[(&str, &str, &[i32])] = &[("Restart", "In", &[42, 50, 60]), ("Restart", "In", &[42])];
    #[rustfmt::skip]
    let finds: [(&str, &[(&str, &str, &[i32])], i32, Option<usize>); 5] = [
        ("a rule with op In matches", restart_in, 42, Some(0)),
        ("a rule with op NotIn matches", restart_not_in, 99, Some(0)),
        ("matches the first rule if two rules both matched", both, 42, Some(0)),
        ("no rules matched", restart_in, 100, None),
        ("no rules defined", &[], 0, None),
    ];
    for (name, rules, code, want) in finds {
        let c = with_policy("c", None, rules);
        let found = matching_restart_rule(&c, code);
        assert_eq!(found, want.map(|i| &c.restart_policy_rules[i]), "{name}");
    }
    // A rule without exit codes, or with an unknown operator, never matches.
    let mut c = with_policy("c", Some("Never"), &[("Restart", "Between", &[1])]);
    assert!(!container_should_restart(&c, None, 1));
    c.restart_policy_rules[0].exit_codes = None;
    assert!(!container_should_restart(&c, None, 1));
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
        check_container_state_transition(&old(1), &new, &pod),
        Err(IllegalTransition {
            kind: "container",
            name: "app".into()
        })
    );
    assert_eq!(check_container_state_transition(&old(42), &new, &pod), Ok(()));
    pod.spec.containers[0].restart_policy_rules[0].action = "RestartAllContainers".into();
    assert_eq!(check_container_state_transition(&old(1), &new, &pod), Ok(()));
}

/// Upstream's getPhase tables (kubelet v1.37.2, kubelet_pods_test.go), every case:
/// `TestPodPhaseWithRestartAlways`, `…AlwaysInitContainers`,
/// `…AlwaysRestartableInitContainers`, `…AlwaysAndPodHasRun`, `…Never`, `…NeverInitContainers`,
/// `…NeverRestartableInitContainers`, `…OnFailure`. Each row passes upstream's `podIsTerminal`
/// and `podHasInitialized` arguments: the row's own where upstream's table has the field, else
/// the `false` its loop passes. Regular containers are A and B (`…AndPodHasRun`: A only); X is
/// the init container (a sidecar where the table says so), Y the sidecar of `…AndPodHasRun`.
#[test]
fn upstream_pod_phase_tables() {
    // (name, statuses, podIsTerminal, podHasInitialized, phase)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool, bool, &'a str);
    #[rustfmt::skip]
    let tables: [(&str, &str, Vec<ApiContainer>, &[&str], &[Case]); 8] = [
        ("RestartAlways", "Always", vec![], &["A", "B"], &[
            ("waiting", &[], false, false, PENDING),
            ("all running", &[("A", "R"), ("B", "R")], false, false, RUNNING),
            ("all stopped with restart always", &[("A", "T0"), ("B", "T0")], false, false, RUNNING),
            ("all succeeded with restart always, but the pod is terminal", &[("A", "T0"), ("B", "T0")], true, false, SUCCEEDED),
            ("all stopped with restart always, but the pod is terminal", &[("A", "T0"), ("B", "T1")], true, false, FAILED),
            ("mixed state #1 with restart always", &[("A", "R"), ("B", "T0")], false, false, RUNNING),
            ("mixed state #2 with restart always", &[("A", "R")], false, false, PENDING),
            ("mixed state #3 with restart always", &[("A", "R"), ("B", "W")], false, false, PENDING),
            ("backoff crashloop container with restart always", &[("A", "R"), ("B", "WL0")], false, false, RUNNING),
        ]),
        ("RestartAlwaysInitContainers", "Always", vec![spec_container("X")], &["A", "B"], &[
            ("empty, waiting", &[], false, false, PENDING),
            ("init container running", &[("X", "R")], false, false, PENDING),
            ("init container terminated non-zero", &[("X", "T1")], false, false, PENDING),
            ("init container waiting, terminated zero", &[("X", "WL0")], false, false, PENDING),
            ("init container waiting, terminated non-zero", &[("X", "WL1")], false, false, PENDING),
            ("init container waiting, not terminated", &[("X", "W")], false, false, PENDING),
            ("init container succeeded", &[("X", "T0"), ("A", "R"), ("B", "R")], false, false, RUNNING),
        ]),
        ("RestartAlwaysRestartableInitContainers", "Always", vec![sidecar("X")], &["A", "B"], &[
            ("empty, waiting", &[], false, false, PENDING),
            ("restartable init container running", &[("X", "R")], false, false, PENDING),
            ("restartable init container stopped", &[("X", "T0")], false, false, PENDING),
            ("restartable init container waiting, terminated zero", &[("X", "WL0")], false, false, PENDING),
            ("restartable init container waiting, terminated non-zero", &[("X", "WL1")], false, false, PENDING),
            ("restartable init container waiting, not terminated", &[("X", "W")], false, false, PENDING),
            ("restartable init container started, 1/2 regular container running", &[("X", "S"), ("A", "R")], false, true, PENDING),
            ("restartable init container started, all regular containers running", &[("X", "S"), ("A", "R"), ("B", "R")], false, true, RUNNING),
            ("restartable init container running, all regular containers running", &[("X", "R"), ("A", "R"), ("B", "R")], false, true, RUNNING),
            ("restartable init container stopped, all regular containers running", &[("X", "T0"), ("A", "R"), ("B", "R")], false, true, RUNNING),
            ("backoff crashloop restartable init container, all regular containers running", &[("X", "WL0"), ("A", "R"), ("B", "R")], false, true, RUNNING),
            ("all regular containers succeeded and restartable init container failed with restart always, but the pod is terminal", &[("X", "T1"), ("A", "T0"), ("B", "T0")], true, true, SUCCEEDED),
            ("all regular containers succeeded and restartable init container succeeded with restart always, but the pod is terminal", &[("X", "T0"), ("A", "T0"), ("B", "T0")], true, true, SUCCEEDED),
            ("re-initializing the pod after the sandbox is recreated", &[("X", "R"), ("A", "R"), ("B", "R")], false, false, PENDING),
        ]),
        ("RestartAlwaysAndPodHasRun", "Always", vec![spec_container("X"), sidecar("Y")], &["A"], &[
            ("regular init containers, restartable init container and regular container are all running", &[("X", "R"), ("Y", "R"), ("A", "R")], false, false, PENDING),
            ("regular containers is stopped, restartable init container and regular int container are both running", &[("X", "R"), ("Y", "R"), ("A", "T0")], false, false, PENDING),
            ("re-created sandbox: regular init container is succeeded, restartable init container is running, old regular containers is stopped", &[("X", "T0"), ("Y", "R"), ("A", "T0")], false, false, PENDING),
            ("regular init container is succeeded, restartable init container is running, regular containers is stopped", &[("X", "T0"), ("Y", "R"), ("A", "T0")], false, true, RUNNING),
            ("regular init container is succeeded, restartable init container and regular containers are both running", &[("X", "T0"), ("Y", "R"), ("A", "R")], false, true, RUNNING),
        ]),
        ("RestartNever", "Never", vec![], &["A", "B"], &[
            ("waiting", &[], false, false, PENDING),
            ("all running with restart never", &[("A", "R"), ("B", "R")], false, false, RUNNING),
            ("all succeeded with restart never", &[("A", "T0"), ("B", "T0")], false, false, SUCCEEDED),
            ("all failed with restart never", &[("A", "T1"), ("B", "T1")], false, false, FAILED),
            ("mixed state #1 with restart never", &[("A", "R"), ("B", "T0")], false, false, RUNNING),
            ("mixed state #2 with restart never", &[("A", "R")], false, false, PENDING),
            ("mixed state #3 with restart never", &[("A", "R"), ("B", "W")], false, false, PENDING),
        ]),
        ("RestartNeverInitContainers", "Never", vec![spec_container("X")], &["A", "B"], &[
            ("empty, waiting", &[], false, false, PENDING),
            ("init container running", &[("X", "R")], false, false, PENDING),
            ("init container terminated non-zero", &[("X", "T1")], false, false, FAILED),
            ("init container waiting, terminated zero", &[("X", "WL0")], false, false, PENDING),
            ("init container waiting, terminated non-zero", &[("X", "WL1")], false, false, FAILED),
            ("init container waiting, not terminated", &[("X", "W")], false, false, PENDING),
            ("init container succeeded", &[("X", "T0"), ("A", "R"), ("B", "R")], false, false, RUNNING),
        ]),
        ("RestartNeverRestartableInitContainers", "Never", vec![sidecar("X")], &["A", "B"], &[
            ("empty, waiting", &[], false, false, PENDING),
            ("restartable init container running", &[("X", "R")], false, false, PENDING),
            ("restartable init container stopped", &[("X", "T0")], false, false, PENDING),
            ("restartable init container waiting, terminated zero", &[("X", "WL0")], false, false, PENDING),
            ("restartable init container waiting, terminated non-zero", &[("X", "WL1")], false, false, PENDING),
            ("restartable init container waiting, not terminated", &[("X", "W")], false, false, PENDING),
            ("restartable init container started, one main container running", &[("X", "S"), ("A", "R")], false, true, PENDING),
            ("restartable init container started, main containers succeeded", &[("X", "S"), ("A", "T0"), ("B", "T0")], false, true, RUNNING),
            ("restartable init container re-running, main containers succeeded", &[("X", "R"), ("A", "T0"), ("B", "T0")], false, true, RUNNING),
            ("all containers succeeded", &[("X", "T0"), ("A", "T0"), ("B", "T0")], false, true, SUCCEEDED),
            ("restartable init container terminated non-zero, main containers succeeded", &[("X", "T1"), ("A", "T0"), ("B", "T0")], false, true, SUCCEEDED),
            ("backoff crashloop restartable init container, main containers succeeded", &[("X", "WL0"), ("A", "T0"), ("B", "T0")], false, true, SUCCEEDED),
            ("backoff crashloop with non-zero restartable init container, main containers succeeded", &[("X", "WL1"), ("A", "T0"), ("B", "T0")], false, true, SUCCEEDED),
        ]),
        ("RestartOnFailure", "OnFailure", vec![], &["A", "B"], &[
            ("waiting", &[], false, false, PENDING),
            ("all running with restart onfailure", &[("A", "R"), ("B", "R")], false, false, RUNNING),
            ("all succeeded with restart onfailure", &[("A", "T0"), ("B", "T0")], false, false, SUCCEEDED),
            ("all failed with restart never", &[("A", "T1"), ("B", "T1")], false, false, RUNNING),
            ("mixed state #1 with restart onfailure", &[("A", "R"), ("B", "T0")], false, false, RUNNING),
            ("mixed state #2 with restart onfailure", &[("A", "R")], false, false, PENDING),
            ("mixed state #3 with restart onfailure", &[("A", "R"), ("B", "W")], false, false, PENDING),
            ("backoff crashloop container with restart onfailure", &[("A", "R"), ("B", "WL0")], false, false, RUNNING),
        ]),
    ];
    for (table, policy, init, regular, cases) in tables {
        let pod = pod_with(regular, init, policy);
        for (name, states, terminal, initialized, want) in cases {
            let statuses: Vec<ContainerStatus> = states.iter().map(|(n, s)| shorthand(n, s)).collect();
            assert_eq!(
                get_phase(&pod, &statuses, *terminal, *initialized),
                *want,
                "TestPodPhaseWith{table}: {name}"
            );
        }
    }
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
/// Upstream's condition tables (status/generate_test.go): `TestGenerateContainersReadyCondition`,
/// `TestGeneratePodReadyCondition`, `TestGeneratePodInitializedCondition` and
/// `TestGeneratePodHasNetworkCondition` (now PodReadyToStartContainers), every case. A nil spec
/// is plegd's default spec (no containers). Not ported: `TestGeneratePodFailedToStart`, which is
/// not upstream's (a fork's condition that plegd does not write).
#[test]
fn upstream_condition_tables() {
    fn ready_only(name: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            ready,
            ..ContainerStatus::default()
        }
    }
    let (r, n) = (true, false);
    let pod = |containers: &[&str], init: &[&str], gates: &[&str]| {
        let mut pod = pod_with(containers, init.iter().map(|i| spec_container(i)).collect(), "Always");
        pod.spec.readiness_gates = gates.iter().map(|g| (*g).to_owned()).collect();
        pod
    };
    let gate = |type_: &str, status: bool| condition(type_, status, None, None);
    type Cond<'a> = (bool, Option<&'a str>, Option<&'a str>);
    // (containers, statuses (name, ready) or nil, phase, want)
    #[rustfmt::skip]
    let containers_ready: [(&[&str], Option<&[(&str, bool)]>, &str, Cond); 7] = [
        (&[], None, RUNNING, (false, Some("UnknownContainerStatuses"), None)),
        (&[], Some(&[]), RUNNING, (true, None, None)),
        (&["1234"], Some(&[]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unknown status: [1234]"))),
        (&["1234", "5678"], Some(&[("1234", r), ("5678", r)]), RUNNING, (true, None, None)),
        (&["1234", "5678"], Some(&[("1234", r)]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unknown status: [5678]"))),
        (&["1234", "5678"], Some(&[("1234", r), ("5678", n)]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unready status: [5678]"))),
        (&["1234"], Some(&[("1234", n)]), SUCCEEDED, (false, Some("PodCompleted"), None)),
    ];
    let got = |c: PodCondition| (c.status == "True", c.reason, c.message);
    let own = |c: Cond| (c.0, c.1.map(str::to_owned), c.2.map(str::to_owned));
    for (i, (containers, statuses, phase, want)) in containers_ready.into_iter().enumerate() {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let c = containers_ready_condition(&pod(containers, &[], &[]), statuses.as_deref(), phase);
        assert_eq!(c.type_, CONTAINERS_READY);
        assert_eq!(got(c), own(want), "TestGenerateContainersReadyCondition case {i}");
    }

    // (containers, gates, gate conditions, statuses, phase, want)
    #[rustfmt::skip]
    let pod_ready: [(&[&str], &[&str], &[(&str, bool)], Option<&[(&str, bool)]>, &str, Cond); 13] = [
        (&[], &[], &[], None, RUNNING, (false, Some("UnknownContainerStatuses"), None)),
        (&[], &[], &[], Some(&[]), RUNNING, (true, None, None)),
        (&["1234"], &[], &[], Some(&[]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unknown status: [1234]"))),
        (&["1234", "5678"], &[], &[], Some(&[("1234", r), ("5678", r)]), RUNNING, (true, None, None)),
        (&["1234", "5678"], &[], &[], Some(&[("1234", r)]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unknown status: [5678]"))),
        (&["1234", "5678"], &[], &[], Some(&[("1234", r), ("5678", n)]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unready status: [5678]"))),
        (&["1234"], &[], &[], Some(&[("1234", n)]), SUCCEEDED, (false, Some("PodCompleted"), None)),
        (&[], &["gate1"], &[], Some(&[]), RUNNING, (false, Some("ReadinessGatesNotReady"), Some("corresponding condition of pod readiness gate \"gate1\" does not exist."))),
        (&[], &["gate1"], &[("gate1", false)], Some(&[]), RUNNING, (false, Some("ReadinessGatesNotReady"), Some("the status of pod readiness gate \"gate1\" is not \"True\", but False"))),
        (&[], &["gate1"], &[("gate1", true)], Some(&[]), RUNNING, (true, None, None)),
        (&[], &["gate1", "gate2"], &[("gate1", true)], Some(&[]), RUNNING, (false, Some("ReadinessGatesNotReady"), Some("corresponding condition of pod readiness gate \"gate2\" does not exist."))),
        (&[], &["gate1", "gate2"], &[("gate1", true), ("gate2", false)], Some(&[]), RUNNING, (false, Some("ReadinessGatesNotReady"), Some("the status of pod readiness gate \"gate2\" is not \"True\", but False"))),
        (&["1234"], &["gate1"], &[("gate1", true)], Some(&[("1234", n)]), RUNNING, (false, Some("ContainersNotReady"), Some("containers with unready status: [1234]"))),
    ];
    for (i, (containers, gates, gate_conditions, statuses, phase, want)) in pod_ready.into_iter().enumerate() {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let conditions: Vec<_> = gate_conditions.iter().map(|(t, s)| gate(t, *s)).collect();
        let c = ready_condition(&pod(containers, &[], gates), &conditions, statuses.as_deref(), phase);
        assert_eq!(c.type_, READY);
        assert_eq!(got(c), own(want), "TestGeneratePodReadyCondition case {i}");
    }

    // (init containers, init statuses or nil, phase, status, reason)
    #[rustfmt::skip]
    let initialized: [(&[&str], Option<&[(&str, bool)]>, &str, bool, Option<&str>); 7] = [
        (&["1234", "5678"], None, RUNNING, false, Some("UnknownContainerStatuses")),
        (&[], Some(&[]), RUNNING, true, None),
        (&["1234"], Some(&[]), RUNNING, false, Some("ContainersNotInitialized")),
        (&["1234", "5678"], Some(&[("1234", r), ("5678", r)]), RUNNING, true, None),
        (&["1234", "5678"], Some(&[("1234", r)]), RUNNING, false, Some("ContainersNotInitialized")),
        (&["1234", "5678"], Some(&[("1234", r), ("5678", n)]), RUNNING, false, Some("ContainersNotInitialized")),
        (&["1234"], Some(&[("1234", r)]), SUCCEEDED, true, Some("PodCompleted")),
    ];
    for (i, (init, statuses, phase, status, reason)) in initialized.into_iter().enumerate() {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let c = initialized_condition(&pod(&[], init, &[]), &[], statuses.as_deref(), phase);
        assert_eq!(c.type_, INITIALIZED);
        assert_eq!(
            (c.status == "True", c.reason.as_deref()),
            (status, reason),
            "TestGeneratePodInitializedCondition case {i}"
        );
    }

    // TestGeneratePodHasNetworkCondition: (sandbox, want)
    let not_ready = SandboxStatus {
        ips: vec![],
        ..sandbox("s1", SandboxState::NotReady, 1)
    };
    let ready_no_ip = SandboxStatus {
        ips: vec![],
        no_primary_ip: true,
        ..sandbox("s1", SandboxState::Ready, 1)
    };
    // PodSandboxChanged checks the IP only of a network status the runtime reported.
    let ready_no_network = SandboxStatus {
        ips: vec![],
        ..sandbox("s1", SandboxState::Ready, 1)
    };
    let older_ready = SandboxStatus {
        created_at: 0,
        ..ready_sandbox("10.0.0.9")
    };
    let pod_network_mode = SandboxStatus {
        host_network: false,
        ..ready_sandbox("10.0.0.10")
    };
    // 1.37's TestGeneratePodReadyToStartContainersCondition (reason and message of each row), and
    // TestPodSandboxChanged's other rows.
    let mut host_network_pod = pod(&[], &[], &[]);
    host_network_pod.spec.host_network = true;
    let plain = pod(&[], &[], &[]);
    for (name, the_pod, sandboxes, want) in [
        ("Empty pod status", &plain, vec![], Some(NO_POD_SANDBOX)),
        (
            "Pod sandbox status not ready",
            &plain,
            vec![not_ready.clone()],
            Some(SANDBOX_NOT_READY),
        ),
        (
            "Pod with multiple ready sandboxes",
            &plain,
            vec![ready_sandbox("10.0.0.10"), older_ready.clone()],
            Some(MULTIPLE_SANDBOXES),
        ),
        (
            "Pod sandbox status ready but network namespace mode changed",
            &host_network_pod,
            vec![pod_network_mode],
            Some(NETWORK_NAMESPACE_MODE_CHANGED),
        ),
        (
            "Pod sandbox status ready but no IP configured",
            &plain,
            vec![ready_no_ip],
            Some(NO_IP_ADDRESS),
        ),
        (
            "Pod sandbox status ready and IP configured",
            &plain,
            vec![ready_sandbox("10.0.0.10")],
            None,
        ),
        (
            "ready, no network status reported",
            &plain,
            vec![ready_no_network],
            None,
        ),
        (
            "newest not ready, an older one ready",
            &plain,
            vec![not_ready.clone(), older_ready],
            Some(SANDBOX_NOT_READY),
        ),
        (
            "two not ready sandboxes",
            &plain,
            vec![not_ready.clone(), not_ready.clone()],
            Some(SANDBOX_NOT_READY),
        ),
    ] {
        let runtime = RuntimePodStatus {
            sandbox_statuses: sandboxes,
            ..RuntimePodStatus::default()
        };
        let c = ready_to_start_containers_condition(the_pod, &runtime);
        assert_eq!(c.type_, POD_READY_TO_START_CONTAINERS);
        let expected = match want {
            None => (true, None, None),
            Some(message) => (false, Some(POD_SANDBOX_NOT_READY.to_owned()), Some(message.to_owned())),
        };
        assert_eq!((c.status == "True", c.reason, c.message), expected, "{name}");
    }
}

/// 1.37's new rows of `TestGenerateContainersReadyCondition` (sidecars) and
/// `TestGeneratePodInitializedCondition` (sidecars, a terminated regular container, and an
/// Initialized pod staying so), and `TestGenerateAllContainersRestartingCondition`, every case.
#[test]
fn upstream_condition_tables_1_37() {
    let status = |name: &str, ready: bool, started: Option<bool>, state: Option<ContainerState>| ContainerStatus {
        name: name.into(),
        ready,
        started,
        state,
        ..ContainerStatus::default()
    };
    let sidecar = |name: &str| ApiContainer {
        restart_policy: Some("Always".into()),
        ..spec_container(name)
    };
    let with_sidecars = |names: &[&str]| pod_with(&["regular-1"], names.iter().map(|n| sidecar(n)).collect(), "Always");
    let r = |n: &str| status(n, true, None, None);
    let u = |n: &str| status(n, false, None, None);
    for (i, (sidecars, statuses, want)) in [
        (
            &["restartable-init-1"][..],
            vec![r("regular-1")],
            Some("containers with unknown status: [restartable-init-1]"),
        ),
        (
            &["restartable-init-1", "restartable-init-2"][..],
            vec![r("restartable-init-1"), r("restartable-init-2"), r("regular-1")],
            None,
        ),
        (
            &["restartable-init-1", "restartable-init-2"][..],
            vec![r("restartable-init-1"), r("regular-1")],
            Some("containers with unknown status: [restartable-init-2]"),
        ),
        (
            &["restartable-init-1", "restartable-init-2"][..],
            vec![r("restartable-init-1"), u("restartable-init-2"), r("regular-1")],
            Some("containers with unready status: [restartable-init-2]"),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let c = containers_ready_condition(&with_sidecars(sidecars), Some(&statuses), RUNNING);
        let expected = match want {
            None => (true, None, None),
            Some(m) => (false, Some("ContainersNotReady".to_owned()), Some(m.to_owned())),
        };
        assert_eq!(
            (c.status == "True", c.reason, c.message),
            expected,
            "ContainersReady case {}",
            i + 7
        );
    }

    let one_sidecar = pod_with(&["regular"], vec![sidecar("1234")], "Always");
    let one_init = pod_with(&["regular"], vec![spec_container("1234")], "Always");
    let running_state = || {
        Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        })
    };
    let waiting_state = || {
        Some(ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..ContainerState::default()
        })
    };
    let terminated_state = || {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..ContainerState::default()
        })
    };
    let was_initialized = vec![condition(INITIALIZED, true, None, None)];
    for (case, the_pod, old, statuses, phase, want) in [
        (
            "7",
            &one_sidecar,
            vec![],
            vec![status("1234", false, Some(false), None)],
            PENDING,
            (false, Some("ContainersNotInitialized")),
        ),
        (
            "8",
            &one_sidecar,
            vec![],
            vec![status("1234", false, Some(true), None)],
            RUNNING,
            (true, None),
        ),
        (
            "9",
            &one_sidecar,
            vec![],
            vec![
                status("1234", false, Some(false), None),
                status("regular", false, None, running_state()),
            ],
            RUNNING,
            (true, None),
        ),
        (
            "10",
            &one_init,
            vec![],
            vec![
                status("1234", false, None, waiting_state()),
                status("regular", false, None, terminated_state()),
            ],
            RUNNING,
            (true, None),
        ),
        (
            "was initialized, init waiting again",
            &one_init,
            was_initialized.clone(),
            vec![
                status("1234", false, None, waiting_state()),
                status("regular", false, None, waiting_state()),
            ],
            RUNNING,
            (true, None),
        ),
        (
            "never initialized, init waiting",
            &one_init,
            vec![],
            vec![
                status("1234", false, None, waiting_state()),
                status("regular", false, None, waiting_state()),
            ],
            RUNNING,
            (false, Some("ContainersNotInitialized")),
        ),
    ] {
        let c = initialized_condition(the_pod, &old, Some(&statuses), phase);
        assert_eq!(
            (c.status == "True", c.reason.as_deref()),
            want,
            "Initialized case {case}"
        );
    }

    // TestGenerateAllContainersRestartingCondition: a `trigger` container restarts all on exit 42.
    let mut pod = pod_with(&["container1", "trigger"], vec![], "Always");
    pod.spec.containers[1].restart_policy = Some("Never".into());
    pod.spec.containers[1].restart_policy_rules = vec![ContainerRestartRule {
        action: "RestartAllContainers".into(),
        exit_codes: Some(k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
            operator: "In".into(),
            values: Some(vec![42]),
        }),
    }]
    .into();
    let exited = |name: &str, id: &str, code: i32| RuntimeContainerStatus {
        exit_code: code,
        ..runtime_status(name, id, RuntimeContainerState::Exited, 10)
    };
    let runtime_of = |statuses: Vec<RuntimeContainerStatus>| RuntimePodStatus {
        container_statuses: statuses,
        ..RuntimePodStatus::default()
    };
    let restarting = PodStatus {
        conditions: Some(vec![condition(ALL_CONTAINERS_RESTARTING, true, None, None)]),
        ..PodStatus::default()
    };
    let started = (
        true,
        Some("RestartAllContainersStarted"),
        Some("container exited with restart policy rule"),
    );
    for (name, runtime, old, phase, want) in [
        (
            "pod pending",
            runtime_of(vec![]),
            PodStatus::default(),
            PENDING,
            (false, None, None),
        ),
        (
            "pod failed",
            runtime_of(vec![]),
            PodStatus::default(),
            FAILED,
            (false, Some("PodFailed"), None),
        ),
        (
            "pod succeeded",
            runtime_of(vec![]),
            PodStatus::default(),
            SUCCEEDED,
            (false, Some("PodCompleted"), None),
        ),
        (
            "container triggers RestartAllContainers rule",
            runtime_of(vec![
                runtime_status("container1", "c1", RuntimeContainerState::Running, 10),
                exited("trigger", "c2", 42),
            ]),
            PodStatus::default(),
            RUNNING,
            started,
        ),
        (
            "container triggers RestartAllContainers rule, cleaning up",
            runtime_of(vec![exited("container1", "c1", 0), exited("trigger", "c2", 42)]),
            restarting.clone(),
            RUNNING,
            started,
        ),
        (
            "container triggers RestartAllContainers rule, cleaned up",
            runtime_of(vec![]),
            restarting.clone(),
            PENDING,
            (false, None, None),
        ),
        (
            "another exit code",
            runtime_of(vec![exited("trigger", "c2", 1)]),
            PodStatus::default(),
            RUNNING,
            (false, None, None),
        ),
    ] {
        let c = all_containers_restarting_condition(&pod, &runtime, &old, phase);
        assert_eq!(c.type_, ALL_CONTAINERS_RESTARTING);
        assert_eq!(c.observed_generation, None, "{name}");
        assert_eq!(
            (c.status == "True", c.reason.as_deref(), c.message.as_deref()),
            want,
            "{name}"
        );
    }
    // The condition is generated last, only for a pod with such a rule, without observedGeneration.
    pod.metadata.generation = Some(3);
    let runtime = runtime_of(vec![
        runtime_status("container1", "c1", RuntimeContainerState::Running, 10),
        exited("trigger", "c2", 42),
    ]);
    let s = status_of(&pod, &runtime, at(100));
    let conditions = s.conditions.unwrap();
    let last = conditions.last().unwrap();
    assert_eq!(
        (last.type_.as_str(), last.status.as_str(), last.observed_generation),
        (ALL_CONTAINERS_RESTARTING, "True", None)
    );
    assert!(
        conditions[..conditions.len() - 1]
            .iter()
            .all(|c| c.observed_generation == Some(3))
    );
    let plain = pod_with(&["app"], vec![], "Always");
    let s = status_of(&plain, &runtime_of(vec![]), at(100));
    assert!(
        !s.conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == ALL_CONTAINERS_RESTARTING)
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
    let cases: Vec<(&str, bool, PodStatus, PodStatus, PodStatus)> = vec![
        ("no change", false, base(), base(), base()),
        (
            "add DisruptionTarget condition when transitioning into failed phase",
            false,
            base(),
            with(failed(base()), by_kubelet()),
            expect(FAILED, [vec![by_kubelet()], failed_ready()].concat(), None, "Message"),
        ),
        (
            "don't add DisruptionTarget condition when transitioning into failed phase, but there might still be running containers",
            true,
            base(),
            with(failed(base()), by_kubelet()),
            expect(RUNNING, base().conditions.unwrap(), None, "Message"),
        ),
        (
            "preserve DisruptionTarget condition",
            false,
            with(base(), by_kubelet()),
            base(),
            expect(
                RUNNING,
                [base().conditions.unwrap(), vec![by_kubelet()]].concat(),
                None,
                "Message",
            ),
        ),
        (
            "override DisruptionTarget condition",
            false,
            with(base(), by_eviction()),
            with(failed(base()), by_kubelet()),
            expect(FAILED, [failed_ready(), vec![by_kubelet()]].concat(), None, "Message"),
        ),
        (
            "don't override DisruptionTarget condition when remaining in running phase",
            false,
            with(base(), by_eviction()),
            with(base(), by_kubelet()),
            expect(
                RUNNING,
                [vec![by_eviction()], base().conditions.unwrap()].concat(),
                None,
                "Message",
            ),
        ),
        (
            "don't override DisruptionTarget condition when transitioning to failed phase but there might still be running containers",
            true,
            with(base(), by_eviction()),
            with(failed(base()), by_kubelet()),
            expect(
                RUNNING,
                [vec![by_eviction()], base().conditions.unwrap()].concat(),
                None,
                "Message",
            ),
        ),
        (
            "readiness changes",
            false,
            base(),
            ready_false(base()),
            ready_false(base()),
        ),
        (
            "additional pod condition",
            false,
            with(base(), feature(true)),
            base(),
            with(base(), feature(true)),
        ),
        (
            "additional pod condition and readiness changes",
            false,
            with(base(), feature(true)),
            ready_false(base()),
            with(ready_false(base()), feature(true)),
        ),
        (
            "additional pod condition changes",
            false,
            with(base(), feature(true)),
            with(base(), feature(false)),
            with(base(), feature(true)),
        ),
        (
            "phase is transitioning to failed and no containers running",
            false,
            evicting(base(), RUNNING, "Unknown", "Message"),
            evicting(base(), FAILED, "Evicted", "Was Evicted"),
            expect(FAILED, failed_ready(), Some("Evicted"), "Was Evicted"),
        ),
        (
            "phase is transitioning to failed and containers running",
            true,
            evicting(base(), RUNNING, "Unknown", "Message"),
            evicting(base(), FAILED, "Evicted", "Was Evicted"),
            expect(RUNNING, base().conditions.unwrap(), Some("Unknown"), "Message"),
        ),
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
    for (name, running, old, new, want) in cases {
        let got = merge_pod_status(&old, new, running, at(1));
        assert_eq!(key(&got), key(&want), "{name}");
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
    type Seen = (
        &'static str,
        Option<String>,
        Option<i32>,
        Option<(Option<String>, i32)>,
        i32,
    );
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
        (kind, reason, code, last, s.restart_count)
    };
    let removed: Seen = (
        "waiting",
        Some(RESTARTING_ALL_CONTAINERS.into()),
        None,
        Some((Some(RESTARTING_ALL_CONTAINERS.into()), 137)),
        1,
    );
    let error = |_code: i32| -> Option<String> { None };
    let cases: Vec<(&str, Vec<ContainerStatus>, Vec<RuntimeContainerStatus>, bool, [Seen; 2])> = vec![
        (
            "no current status, keeping previous restartCount",
            vec![
                terminated_with("containerA", -1, 5),
                terminated_with("containerB", -1, 5),
            ],
            vec![],
            false,
            [
                ("terminated", error(-1), Some(-1), None, 5),
                ("terminated", error(-1), Some(-1), None, 5),
            ],
        ),
        (
            "currently running with lower restartCount",
            vec![
                terminated_with("containerA", -1, 5),
                terminated_with("containerB", -1, 5),
            ],
            vec![running("containerA", "a2"), running("containerB", "b2")],
            false,
            [
                ("running", None, None, Some((error(-1), -1)), 6),
                ("running", None, None, Some((error(-1), -1)), 6),
            ],
        ),
        (
            "containerB dies and triggers RestartAllContainers in place",
            vec![running_old("containerA", 0), running_old("containerB", 0)],
            vec![
                running("containerA", "containerA"),
                exited("containerB", "containerB", 42),
            ],
            true,
            [
                ("running", None, None, None, 0),
                ("terminated", error(42), Some(42), None, 0),
            ],
        ),
        (
            "containerA killed",
            vec![running_old("containerA", 0), terminated_with("containerB", 42, 0)],
            vec![exited("containerA", "containerA", 137)],
            true,
            [("terminated", error(137), Some(137), None, 0), removed.clone()],
        ),
        (
            "containerA killed then removed",
            vec![
                terminated_with("containerA", 137, 0),
                terminated_with("containerB", 42, 0),
            ],
            vec![],
            true,
            [removed.clone(), removed.clone()],
        ),
        (
            "containerA killed and removed together",
            vec![running_old("containerA", 0), terminated_with("containerB", 42, 0)],
            vec![],
            true,
            [removed.clone(), removed.clone()],
        ),
        (
            "containerA rerun",
            vec![waiting_removed("containerA", 1), terminated_with("containerB", 42, 0)],
            vec![running("containerA", "containerA-new")],
            true,
            [
                (
                    "running",
                    None,
                    None,
                    Some((Some(RESTARTING_ALL_CONTAINERS.into()), 137)),
                    1,
                ),
                removed.clone(),
            ],
        ),
        (
            "containerA succeeded",
            vec![running_old("containerA", 1), terminated_with("containerB", 42, 0)],
            vec![exited("containerA", "containerA", 0)],
            true,
            [("terminated", error(0), Some(0), None, 1), removed.clone()],
        ),
        (
            "containerA failed",
            vec![running_old("containerA", 1), terminated_with("containerB", 42, 0)],
            vec![exited("containerA", "containerA", 1)],
            true,
            [("terminated", error(1), Some(1), None, 1), removed.clone()],
        ),
    ];
    for (name, old, runtime, restarting, want) in cases {
        let runtime = RuntimePodStatus {
            container_statuses: runtime,
            ..RuntimePodStatus::default()
        };
        let got = container_statuses(
            &pod,
            &pod.spec.containers,
            ListKind::Regular,
            &old,
            &runtime,
            Conversion {
                runtime_name: "containerd",
                recursive_read_only: Some(false),
                pod_restarting: restarting,
            },
        );
        let got: Vec<Seen> = got.iter().map(seen).collect();
        assert_eq!(got, want.to_vec(), "{name}");
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
    // (row, spec, API phase, pod resources (None: kept as it was), allocatedResources)
    let rows: Vec<(
        &str,
        ApiPodSpec,
        &str,
        Option<ResourceRequirements>,
        Option<resources::ResourceList>,
    )> = vec![
        (
            "pending pod",
            ApiPodSpec {
                containers: vec![sized("A", req(&both, &limits))],
                resources: Some(Box::new(req(&both, &limits))),
                ..ApiPodSpec::default()
            },
            PENDING,
            Some(req(&both, &limits)),
            list(&both),
        ),
        (
            "succeeded pod",
            ApiPodSpec {
                containers: vec![sized("A", req(&both, &[]))],
                resources: Some(Box::new(req(&both, &[]))),
                ..ApiPodSpec::default()
            },
            SUCCEEDED,
            Some(req(&both, &[])),
            list(&both),
        ),
        (
            "pod with init containers",
            ApiPodSpec {
                init_containers: vec![sized("initA", req(&both, &[]))],
                containers: vec![sized("A", req(&[("cpu", "200m"), ("memory", "200Mi")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "200m"), ("memory", "200Mi")], &[]))),
                ..ApiPodSpec::default()
            },
            RUNNING,
            None,
            list(&[("cpu", "200m"), ("memory", "200Mi")]),
        ),
        (
            "no resources set",
            ApiPodSpec {
                containers: vec![spec_container("A"), spec_container("B")],
                ..ApiPodSpec::default()
            },
            RUNNING,
            None,
            None,
        ),
        (
            "only CPU set",
            ApiPodSpec {
                containers: vec![sized("A", req(&[("cpu", "100m")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "100m")], &[]))),
                ..ApiPodSpec::default()
            },
            RUNNING,
            None,
            list(&[("cpu", "100m")]),
        ),
        (
            "only Memory set",
            ApiPodSpec {
                containers: vec![sized("A", req(&[("memory", "100Mi")], &[]))],
                resources: Some(Box::new(req(&[("memory", "100Mi")], &[]))),
                ..ApiPodSpec::default()
            },
            RUNNING,
            None,
            list(&[("memory", "100Mi")]),
        ),
        (
            "0 values for CPU and Memory",
            ApiPodSpec {
                containers: vec![sized("A", req(&[("cpu", "0"), ("memory", "0")], &[]))],
                resources: Some(Box::new(req(&[("cpu", "0"), ("memory", "0")], &[]))),
                ..ApiPodSpec::default()
            },
            RUNNING,
            None,
            list(&[("cpu", "0"), ("memory", "0")]),
        ),
    ];
    let was = req(&[("cpu", "1")], &[]);
    for (row, spec, phase, want_resources, want_allocated) in rows {
        let (resources, allocated) = resources::pod_status_resources(&spec, Some(phase), Some(&was));
        assert_eq!(allocated, want_allocated, "{row}: allocatedResources");
        assert_eq!(
            resources,
            Some(want_resources.unwrap_or_else(|| was.clone())),
            "{row}: resources"
        );
    }
}

/// `TestUpdateLastTransitionTime` (status_manager_test.go), and the old condition without a time
/// that `updateLastTransitionTime` copies as it is. Its case "should do nothing if no
/// corresponding condition" has no counterpart: `set_transition_time` is given the condition.
#[test]
fn upstream_update_last_transition_time() {
    let condition = |status: &str, time: Option<u64>| PodCondition {
        type_: "test-type".into(),
        status: status.into(),
        last_transition_time: time.map(|t| api_time(at(t))),
        ..PodCondition::default()
    };
    let now = at(100);
    for (name, new, old, want) in [
        (
            "should update last transition time if no old condition",
            condition("True", None),
            None,
            Some(100),
        ),
        (
            "should update last transition time if condition is changed",
            condition("True", None),
            Some(condition("False", Some(99))),
            Some(100),
        ),
        (
            "should keep last transition time if condition is not changed",
            condition("False", None),
            Some(condition("False", Some(99))),
            Some(99),
        ),
        (
            "an old condition without a time",
            condition("False", None),
            Some(condition("False", None)),
            None,
        ),
    ] {
        let mut c = new;
        set_transition_time(&mut c, old.as_slice(), now);
        assert_eq!(c.last_transition_time, want.map(|t| api_time(at(t))), "{name}");
    }
}
