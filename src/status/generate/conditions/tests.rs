use k8s_openapi::api::core::v1::{
    ContainerRestartRule, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodCondition, PodStatus,
};

use super::super::test_support::*;
use super::super::*;
use super::*;
use crate::apiserver::pod::ApiContainer;
use crate::kubecontainer::{
    RuntimeContainerState, RuntimeContainerStatus, RuntimePodStatus, SandboxState, SandboxStatus,
};

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
        KubeletMinor::V1_37,
    );
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ContainersNotInitialized"))
    );
    assert_eq!(c.message.as_deref(), Some("containers with incomplete status: [i2]"));
    let c = initialized_condition(&pod, &[], Some(&[completed_init("i1")]), PENDING, KubeletMinor::V1_37);
    assert_eq!(c.message.as_deref(), Some("containers with unknown status: [i2]"));
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[completed_init("i1"), completed_init("i2"), running_status("a")]),
        RUNNING,
        KubeletMinor::V1_37,
    );
    assert_eq!(c.status, "True");
    // A regular container that started means initialized, whatever the init containers say now.
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[waiting_status("i1", None), running_status("a")]),
        RUNNING,
        KubeletMinor::V1_37,
    );
    assert_eq!(c.status, "True");
    let c = initialized_condition(&pod, &[], None, PENDING, KubeletMinor::V1_37);
    assert_eq!(c.reason.as_deref(), Some("UnknownContainerStatuses"));
    // An empty list is not "no statuses": each init container is of unknown status.
    let c = initialized_condition(&pod, &[], Some(&[]), PENDING, KubeletMinor::V1_37);
    assert_eq!(c.reason.as_deref(), Some("ContainersNotInitialized"));
}

#[test]
fn initialized_is_pod_completed_once_succeeded() {
    let pod = pod_with(&["a"], vec![spec_container("i1")], "Never");
    let statuses = [completed_init("i1"), terminated_status("a", 0)];
    let c = initialized_condition(&pod, &[], Some(&statuses), SUCCEEDED, KubeletMinor::V1_37);
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("PodCompleted")));
    // Running: a started regular container means initialized, with no reason.
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[completed_init("i1"), running_status("a")]),
        RUNNING,
        KubeletMinor::V1_37,
    );
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", None));
    // A waiting container with a last termination has not "started" (upstream looks at the state).
    let c = initialized_condition(
        &pod,
        &[],
        Some(&[waiting_status("i1", None), waiting_status("a", Some(1))]),
        PENDING,
        KubeletMinor::V1_37,
    );
    assert_eq!(c.status, "False");
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
            kubelet: KubeletMinor::V1_37,
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
    /// The condition a row wants: its status (True or not), reason and message.
    #[derive(Debug, PartialEq)]
    struct WantCondition {
        status: bool,
        reason: Option<&'static str>,
        message: Option<&'static str>,
    }
    /// The container statuses of a row: (name, ready); None for upstream's nil.
    type ReadyStatuses<'a> = Option<&'a [(&'static str, bool)]>;
    /// A row of `TestGenerateContainersReadyCondition`.
    struct ContainersReadyCase<'a> {
        containers: &'static [&'static str],
        statuses: ReadyStatuses<'a>,
        phase: &'static str,
        want: WantCondition,
    }
    #[rustfmt::skip]
    let containers_ready: [ContainersReadyCase; 7] = [
        ContainersReadyCase { containers: &[], statuses: None, phase: RUNNING, want: WantCondition { status: false, reason: Some("UnknownContainerStatuses"), message: None } },
        ContainersReadyCase { containers: &[], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: true, reason: None, message: None } },
        ContainersReadyCase { containers: &["1234"], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unknown status: [1234]") } },
        ContainersReadyCase { containers: &["1234", "5678"], statuses: Some(&[("1234", r), ("5678", r)]), phase: RUNNING, want: WantCondition { status: true, reason: None, message: None } },
        ContainersReadyCase { containers: &["1234", "5678"], statuses: Some(&[("1234", r)]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unknown status: [5678]") } },
        ContainersReadyCase { containers: &["1234", "5678"], statuses: Some(&[("1234", r), ("5678", n)]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unready status: [5678]") } },
        ContainersReadyCase { containers: &["1234"], statuses: Some(&[("1234", n)]), phase: SUCCEEDED, want: WantCondition { status: false, reason: Some("PodCompleted"), message: None } },
    ];
    let got = |c: PodCondition| (c.status == "True", c.reason, c.message);
    let own = |c: WantCondition| (c.status, c.reason.map(str::to_owned), c.message.map(str::to_owned));
    for (
        i,
        ContainersReadyCase {
            containers,
            statuses,
            phase,
            want,
        },
    ) in containers_ready.into_iter().enumerate()
    {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let c = containers_ready_condition(&pod(containers, &[], &[]), statuses.as_deref(), phase);
        assert_eq!(c.type_, CONTAINERS_READY);
        assert_eq!(got(c), own(want), "TestGenerateContainersReadyCondition case {i}");
    }

    /// A row of `TestGeneratePodReadyCondition`: the readiness gates, and the conditions of those
    /// gates (type, True or not) the status holds.
    struct PodReadyCase<'a> {
        containers: &'static [&'static str],
        gates: &'static [&'static str],
        gate_conditions: &'static [(&'static str, bool)],
        statuses: ReadyStatuses<'a>,
        phase: &'static str,
        want: WantCondition,
    }
    #[rustfmt::skip]
    let pod_ready: [PodReadyCase; 13] = [
        PodReadyCase { containers: &[], gates: &[], gate_conditions: &[], statuses: None, phase: RUNNING, want: WantCondition { status: false, reason: Some("UnknownContainerStatuses"), message: None } },
        PodReadyCase { containers: &[], gates: &[], gate_conditions: &[], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: true, reason: None, message: None } },
        PodReadyCase { containers: &["1234"], gates: &[], gate_conditions: &[], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unknown status: [1234]") } },
        PodReadyCase { containers: &["1234", "5678"], gates: &[], gate_conditions: &[], statuses: Some(&[("1234", r), ("5678", r)]), phase: RUNNING, want: WantCondition { status: true, reason: None, message: None } },
        PodReadyCase { containers: &["1234", "5678"], gates: &[], gate_conditions: &[], statuses: Some(&[("1234", r)]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unknown status: [5678]") } },
        PodReadyCase { containers: &["1234", "5678"], gates: &[], gate_conditions: &[], statuses: Some(&[("1234", r), ("5678", n)]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unready status: [5678]") } },
        PodReadyCase { containers: &["1234"], gates: &[], gate_conditions: &[], statuses: Some(&[("1234", n)]), phase: SUCCEEDED, want: WantCondition { status: false, reason: Some("PodCompleted"), message: None } },
        PodReadyCase { containers: &[], gates: &["gate1"], gate_conditions: &[], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ReadinessGatesNotReady"), message: Some("corresponding condition of pod readiness gate \"gate1\" does not exist.") } },
        PodReadyCase { containers: &[], gates: &["gate1"], gate_conditions: &[("gate1", false)], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ReadinessGatesNotReady"), message: Some("the status of pod readiness gate \"gate1\" is not \"True\", but False") } },
        PodReadyCase { containers: &[], gates: &["gate1"], gate_conditions: &[("gate1", true)], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: true, reason: None, message: None } },
        PodReadyCase { containers: &[], gates: &["gate1", "gate2"], gate_conditions: &[("gate1", true)], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ReadinessGatesNotReady"), message: Some("corresponding condition of pod readiness gate \"gate2\" does not exist.") } },
        PodReadyCase { containers: &[], gates: &["gate1", "gate2"], gate_conditions: &[("gate1", true), ("gate2", false)], statuses: Some(&[]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ReadinessGatesNotReady"), message: Some("the status of pod readiness gate \"gate2\" is not \"True\", but False") } },
        PodReadyCase { containers: &["1234"], gates: &["gate1"], gate_conditions: &[("gate1", true)], statuses: Some(&[("1234", n)]), phase: RUNNING, want: WantCondition { status: false, reason: Some("ContainersNotReady"), message: Some("containers with unready status: [1234]") } },
    ];
    for (
        i,
        PodReadyCase {
            containers,
            gates,
            gate_conditions,
            statuses,
            phase,
            want,
        },
    ) in pod_ready.into_iter().enumerate()
    {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let conditions: Vec<_> = gate_conditions.iter().map(|(t, s)| gate(t, *s)).collect();
        let c = ready_condition(&pod(containers, &[], gates), &conditions, statuses.as_deref(), phase);
        assert_eq!(c.type_, READY);
        assert_eq!(got(c), own(want), "TestGeneratePodReadyCondition case {i}");
    }

    /// A row of `TestGeneratePodInitializedCondition`: the init containers and their statuses, the
    /// condition's status (True or not) and reason.
    struct InitializedCase<'a> {
        init: &'static [&'static str],
        statuses: ReadyStatuses<'a>,
        phase: &'static str,
        status: bool,
        reason: Option<&'static str>,
    }
    #[rustfmt::skip]
    let initialized: [InitializedCase; 7] = [
        InitializedCase { init: &["1234", "5678"], statuses: None, phase: RUNNING, status: false, reason: Some("UnknownContainerStatuses") },
        InitializedCase { init: &[], statuses: Some(&[]), phase: RUNNING, status: true, reason: None },
        InitializedCase { init: &["1234"], statuses: Some(&[]), phase: RUNNING, status: false, reason: Some("ContainersNotInitialized") },
        InitializedCase { init: &["1234", "5678"], statuses: Some(&[("1234", r), ("5678", r)]), phase: RUNNING, status: true, reason: None },
        InitializedCase { init: &["1234", "5678"], statuses: Some(&[("1234", r)]), phase: RUNNING, status: false, reason: Some("ContainersNotInitialized") },
        InitializedCase { init: &["1234", "5678"], statuses: Some(&[("1234", r), ("5678", n)]), phase: RUNNING, status: false, reason: Some("ContainersNotInitialized") },
        InitializedCase { init: &["1234"], statuses: Some(&[("1234", r)]), phase: SUCCEEDED, status: true, reason: Some("PodCompleted") },
    ];
    for (
        i,
        InitializedCase {
            init,
            statuses,
            phase,
            status,
            reason,
        },
    ) in initialized.into_iter().enumerate()
    {
        let statuses: Option<Vec<_>> = statuses.map(|s| s.iter().map(|(n, r)| ready_only(n, *r)).collect());
        let c = initialized_condition(
            &pod(&[], init, &[]),
            &[],
            statuses.as_deref(),
            phase,
            KubeletMinor::V1_37,
        );
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
        let c = ready_to_start_containers_condition(the_pod, &runtime, KubeletMinor::V1_37);
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
        let c = initialized_condition(the_pod, &old, Some(&statuses), phase, KubeletMinor::V1_37);
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
