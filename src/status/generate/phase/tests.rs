use k8s_openapi::api::core::v1::{ContainerStateWaiting, ContainerStatus};

use super::super::test_support::*;
use super::super::*;
use super::*;
use crate::apiserver::pod::{ApiContainer, ApiPod, ApiPodSpec};

#[test]
fn phase_by_restart_policy_and_state() {
    /// A pod of one container "a" under `policy`, its container statuses, the phase.
    struct PolicyCase {
        policy: &'static str,
        statuses: fn() -> Vec<ContainerStatus>,
        want: &'static str,
    }
    let cases = [
        PolicyCase {
            policy: "Always",
            statuses: || vec![running_status("a")],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Always",
            statuses: || vec![terminated_status("a", 0)],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Always",
            statuses: || vec![terminated_status("a", 1)],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Always",
            statuses: || vec![waiting_status("a", None)],
            want: PENDING,
        },
        PolicyCase {
            policy: "Always",
            statuses: || vec![waiting_status("a", Some(1))],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Always",
            statuses: Vec::new,
            want: PENDING,
        },
        PolicyCase {
            policy: "OnFailure",
            statuses: || vec![terminated_status("a", 0)],
            want: SUCCEEDED,
        },
        PolicyCase {
            policy: "OnFailure",
            statuses: || vec![terminated_status("a", 1)],
            want: RUNNING,
        },
        PolicyCase {
            policy: "OnFailure",
            statuses: || vec![running_status("a")],
            want: RUNNING,
        },
        PolicyCase {
            policy: "OnFailure",
            statuses: || vec![waiting_status("a", Some(2))],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Never",
            statuses: || vec![terminated_status("a", 0)],
            want: SUCCEEDED,
        },
        PolicyCase {
            policy: "Never",
            statuses: || vec![terminated_status("a", 1)],
            want: FAILED,
        },
        PolicyCase {
            policy: "Never",
            statuses: || vec![running_status("a")],
            want: RUNNING,
        },
        PolicyCase {
            policy: "Never",
            statuses: || vec![waiting_status("a", None)],
            want: PENDING,
        },
    ];
    for PolicyCase { policy, statuses, want } in cases {
        let pod = pod_with(&["a"], vec![], policy);
        assert_eq!(
            get_phase(&pod, &statuses(), false, true, KubeletMinor::V1_37),
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
            true,
            KubeletMinor::V1_37
        ),
        FAILED
    );
    assert_eq!(
        get_phase(
            &pod,
            &[terminated_status("a", 0), running_status("b")],
            false,
            true,
            KubeletMinor::V1_37
        ),
        RUNNING
    );
    assert_eq!(
        get_phase(&pod, &[terminated_status("a", 0)], false, true, KubeletMinor::V1_37),
        PENDING,
        "b unknown"
    );
}

#[test]
fn terminal_pod_with_always_reports_the_outcome() {
    let pod = pod_with(&["a", "b"], vec![], "Always");
    let statuses = [terminated_status("a", 0), terminated_status("b", 0)];
    assert_eq!(get_phase(&pod, &statuses, true, true, KubeletMinor::V1_37), SUCCEEDED);
    let statuses = [terminated_status("a", 0), terminated_status("b", 137)];
    assert_eq!(get_phase(&pod, &statuses, true, true, KubeletMinor::V1_37), FAILED);
}

#[test]
fn init_containers_and_sidecars() {
    let pod = pod_with(&["a"], vec![spec_container("init")], "Always");
    assert_eq!(
        get_phase(
            &pod,
            &[running_status("init"), waiting_status("a", None)],
            false,
            false,
            KubeletMinor::V1_37
        ),
        PENDING
    );
    assert_eq!(
        get_phase(
            &pod,
            &[terminated_status("init", 0), running_status("a")],
            false,
            true,
            KubeletMinor::V1_37
        ),
        RUNNING
    );
    let never = pod_with(&["a"], vec![spec_container("init")], "Never");
    assert_eq!(
        get_phase(
            &never,
            &[terminated_status("init", 1), waiting_status("a", None)],
            false,
            false,
            KubeletMinor::V1_37
        ),
        FAILED
    );
    assert_eq!(
        get_phase(
            &never,
            &[waiting_status("init", Some(1)), waiting_status("a", None)],
            false,
            false,
            KubeletMinor::V1_37
        ),
        FAILED
    );
    let always = pod_with(&["a"], vec![spec_container("init")], "Always");
    assert_eq!(
        get_phase(
            &always,
            &[terminated_status("init", 1), waiting_status("a", None)],
            false,
            false,
            KubeletMinor::V1_37
        ),
        PENDING
    );

    // A sidecar that runs but has not started keeps the pod pending until a container started.
    let pod = pod_with(&["a"], vec![sidecar("side")], "Always");
    let mut side = running_status("side");
    side.started = Some(false);
    assert_eq!(
        get_phase(
            &pod,
            &[side.clone(), waiting_status("a", None)],
            false,
            false,
            KubeletMinor::V1_37
        ),
        PENDING
    );
    assert_eq!(
        get_phase(
            &pod,
            &[running_status("side"), running_status("a")],
            false,
            true,
            KubeletMinor::V1_37
        ),
        RUNNING
    );
    // A sidecar restarting after the pod initialized does not send it back to Pending.
    assert_eq!(
        get_phase(&pod, &[side, running_status("a")], false, true, KubeletMinor::V1_37),
        RUNNING
    );
    // Terminated sidecars do not count towards the outcome.
    let never = pod_with(&["a"], vec![sidecar("side")], "Never");
    assert_eq!(
        get_phase(
            &never,
            &[terminated_status("side", 143), terminated_status("a", 0)],
            false,
            true,
            KubeletMinor::V1_37
        ),
        SUCCEEDED
    );
    // A missing sidecar status is unknown.
    assert_eq!(
        get_phase(&never, &[running_status("a")], false, true, KubeletMinor::V1_37),
        PENDING
    );
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

/// Upstream's getPhase tables (kubelet v1.37.2, kubelet_pods_test.go), every case:
/// `TestPodPhaseWithRestartAlways`, `…AlwaysInitContainers`,
/// `…AlwaysRestartableInitContainers`, `…AlwaysAndPodHasRun`, `…Never`, `…NeverInitContainers`,
/// `…NeverRestartableInitContainers`, `…OnFailure`. Each row passes upstream's `podIsTerminal`
/// and `podHasInitialized` arguments: the row's own where upstream's table has the field, else
/// the `false` its loop passes. Regular containers are A and B (`…AndPodHasRun`: A only); X is
/// the init container (a sidecar where the table says so), Y the sidecar of `…AndPodHasRun`.
#[test]
fn upstream_pod_phase_tables() {
    /// One upstream table: its test's name (after `TestPodPhaseWith`), the pod's restart policy,
    /// init and regular containers, and its rows.
    struct PhaseTable {
        table: &'static str,
        policy: &'static str,
        init: Vec<ApiContainer>,
        regular: &'static [&'static str],
        cases: &'static [PhaseCase],
    }
    /// One row: the container statuses in [`shorthand`] (name, state), getPhase's arguments, the phase.
    struct PhaseCase {
        name: &'static str,
        statuses: &'static [(&'static str, &'static str)],
        pod_is_terminal: bool,
        pod_has_initialized: bool,
        want: &'static str,
    }
    #[rustfmt::skip]
    let tables: [PhaseTable; 8] = [
        PhaseTable { table: "RestartAlways", policy: "Always", init: vec![], regular: &["A", "B"], cases: &[
            PhaseCase { name: "waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "all running", statuses: &[("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "all stopped with restart always", statuses: &[("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "all succeeded with restart always, but the pod is terminal", statuses: &[("A", "T0"), ("B", "T0")], pod_is_terminal: true, pod_has_initialized: false, want: SUCCEEDED },
            PhaseCase { name: "all stopped with restart always, but the pod is terminal", statuses: &[("A", "T0"), ("B", "T1")], pod_is_terminal: true, pod_has_initialized: false, want: FAILED },
            PhaseCase { name: "mixed state #1 with restart always", statuses: &[("A", "R"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "mixed state #2 with restart always", statuses: &[("A", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "mixed state #3 with restart always", statuses: &[("A", "R"), ("B", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "backoff crashloop container with restart always", statuses: &[("A", "R"), ("B", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
        ] },
        PhaseTable { table: "RestartAlwaysInitContainers", policy: "Always", init: vec![spec_container("X")], regular: &["A", "B"], cases: &[
            PhaseCase { name: "empty, waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container running", statuses: &[("X", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container terminated non-zero", statuses: &[("X", "T1")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container waiting, terminated zero", statuses: &[("X", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container waiting, terminated non-zero", statuses: &[("X", "WL1")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container waiting, not terminated", statuses: &[("X", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container succeeded", statuses: &[("X", "T0"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
        ] },
        PhaseTable { table: "RestartAlwaysRestartableInitContainers", policy: "Always", init: vec![sidecar("X")], regular: &["A", "B"], cases: &[
            PhaseCase { name: "empty, waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container running", statuses: &[("X", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container stopped", statuses: &[("X", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, terminated zero", statuses: &[("X", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, terminated non-zero", statuses: &[("X", "WL1")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, not terminated", statuses: &[("X", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container started, 1/2 regular container running", statuses: &[("X", "S"), ("A", "R")], pod_is_terminal: false, pod_has_initialized: true, want: PENDING },
            PhaseCase { name: "restartable init container started, all regular containers running", statuses: &[("X", "S"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "restartable init container running, all regular containers running", statuses: &[("X", "R"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "restartable init container stopped, all regular containers running", statuses: &[("X", "T0"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "backoff crashloop restartable init container, all regular containers running", statuses: &[("X", "WL0"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "all regular containers succeeded and restartable init container failed with restart always, but the pod is terminal", statuses: &[("X", "T1"), ("A", "T0"), ("B", "T0")], pod_is_terminal: true, pod_has_initialized: true, want: SUCCEEDED },
            PhaseCase { name: "all regular containers succeeded and restartable init container succeeded with restart always, but the pod is terminal", statuses: &[("X", "T0"), ("A", "T0"), ("B", "T0")], pod_is_terminal: true, pod_has_initialized: true, want: SUCCEEDED },
            PhaseCase { name: "re-initializing the pod after the sandbox is recreated", statuses: &[("X", "R"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
        ] },
        PhaseTable { table: "RestartAlwaysAndPodHasRun", policy: "Always", init: vec![spec_container("X"), sidecar("Y")], regular: &["A"], cases: &[
            PhaseCase { name: "regular init containers, restartable init container and regular container are all running", statuses: &[("X", "R"), ("Y", "R"), ("A", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "regular containers is stopped, restartable init container and regular int container are both running", statuses: &[("X", "R"), ("Y", "R"), ("A", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "re-created sandbox: regular init container is succeeded, restartable init container is running, old regular containers is stopped", statuses: &[("X", "T0"), ("Y", "R"), ("A", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "regular init container is succeeded, restartable init container is running, regular containers is stopped", statuses: &[("X", "T0"), ("Y", "R"), ("A", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "regular init container is succeeded, restartable init container and regular containers are both running", statuses: &[("X", "T0"), ("Y", "R"), ("A", "R")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
        ] },
        PhaseTable { table: "RestartNever", policy: "Never", init: vec![], regular: &["A", "B"], cases: &[
            PhaseCase { name: "waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "all running with restart never", statuses: &[("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "all succeeded with restart never", statuses: &[("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: SUCCEEDED },
            PhaseCase { name: "all failed with restart never", statuses: &[("A", "T1"), ("B", "T1")], pod_is_terminal: false, pod_has_initialized: false, want: FAILED },
            PhaseCase { name: "mixed state #1 with restart never", statuses: &[("A", "R"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "mixed state #2 with restart never", statuses: &[("A", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "mixed state #3 with restart never", statuses: &[("A", "R"), ("B", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
        ] },
        PhaseTable { table: "RestartNeverInitContainers", policy: "Never", init: vec![spec_container("X")], regular: &["A", "B"], cases: &[
            PhaseCase { name: "empty, waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container running", statuses: &[("X", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container terminated non-zero", statuses: &[("X", "T1")], pod_is_terminal: false, pod_has_initialized: false, want: FAILED },
            PhaseCase { name: "init container waiting, terminated zero", statuses: &[("X", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container waiting, terminated non-zero", statuses: &[("X", "WL1")], pod_is_terminal: false, pod_has_initialized: false, want: FAILED },
            PhaseCase { name: "init container waiting, not terminated", statuses: &[("X", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "init container succeeded", statuses: &[("X", "T0"), ("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
        ] },
        PhaseTable { table: "RestartNeverRestartableInitContainers", policy: "Never", init: vec![sidecar("X")], regular: &["A", "B"], cases: &[
            PhaseCase { name: "empty, waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container running", statuses: &[("X", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container stopped", statuses: &[("X", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, terminated zero", statuses: &[("X", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, terminated non-zero", statuses: &[("X", "WL1")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container waiting, not terminated", statuses: &[("X", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "restartable init container started, one main container running", statuses: &[("X", "S"), ("A", "R")], pod_is_terminal: false, pod_has_initialized: true, want: PENDING },
            PhaseCase { name: "restartable init container started, main containers succeeded", statuses: &[("X", "S"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "restartable init container re-running, main containers succeeded", statuses: &[("X", "R"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: RUNNING },
            PhaseCase { name: "all containers succeeded", statuses: &[("X", "T0"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: SUCCEEDED },
            PhaseCase { name: "restartable init container terminated non-zero, main containers succeeded", statuses: &[("X", "T1"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: SUCCEEDED },
            PhaseCase { name: "backoff crashloop restartable init container, main containers succeeded", statuses: &[("X", "WL0"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: SUCCEEDED },
            PhaseCase { name: "backoff crashloop with non-zero restartable init container, main containers succeeded", statuses: &[("X", "WL1"), ("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: true, want: SUCCEEDED },
        ] },
        PhaseTable { table: "RestartOnFailure", policy: "OnFailure", init: vec![], regular: &["A", "B"], cases: &[
            PhaseCase { name: "waiting", statuses: &[], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "all running with restart onfailure", statuses: &[("A", "R"), ("B", "R")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "all succeeded with restart onfailure", statuses: &[("A", "T0"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: SUCCEEDED },
            PhaseCase { name: "all failed with restart never", statuses: &[("A", "T1"), ("B", "T1")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "mixed state #1 with restart onfailure", statuses: &[("A", "R"), ("B", "T0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
            PhaseCase { name: "mixed state #2 with restart onfailure", statuses: &[("A", "R")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "mixed state #3 with restart onfailure", statuses: &[("A", "R"), ("B", "W")], pod_is_terminal: false, pod_has_initialized: false, want: PENDING },
            PhaseCase { name: "backoff crashloop container with restart onfailure", statuses: &[("A", "R"), ("B", "WL0")], pod_is_terminal: false, pod_has_initialized: false, want: RUNNING },
        ] },
    ];
    for PhaseTable {
        table,
        policy,
        init,
        regular,
        cases,
    } in tables
    {
        let pod = pod_with(regular, init, policy);
        for PhaseCase {
            name,
            statuses,
            pod_is_terminal,
            pod_has_initialized,
            want,
        } in cases
        {
            let statuses: Vec<ContainerStatus> = statuses.iter().map(|(n, s)| shorthand(n, s)).collect();
            assert_eq!(
                get_phase(
                    &pod,
                    &statuses,
                    *pod_is_terminal,
                    *pod_has_initialized,
                    KubeletMinor::V1_37
                ),
                *want,
                "TestPodPhaseWith{table}: {name}"
            );
        }
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
    let rac: Rules<'_> = &[("RestartAllContainers", "In", &[42])];
    let with_rule = || with_policy("container", never, rac);
    let sidecar_with_rule = || with_policy("container", Some("Always"), rac);
    /// One row: the pod's restart policy, its init and regular containers, their statuses in
    /// [`shorthand`] (name, state), the phase.
    struct RestartPolicyPhaseCase {
        name: &'static str,
        pod_policy: &'static str,
        init: Vec<ApiContainer>,
        containers: Vec<ApiContainer>,
        statuses: Vec<(&'static str, &'static str)>,
        want: &'static str,
    }
    #[rustfmt::skip]
    let cases = vec![
        // TestPodPhaseWithContainerRestartPolicy
        RestartPolicyPhaseCase { name: "container with restart policy Never failed", pod_policy: "Always", init: vec![], containers: vec![with_policy("failed-container", never, &[])], statuses: vec![("failed-container", "T1")], want: FAILED },
        RestartPolicyPhaseCase { name: "container with restart policy OnFailure failed", pod_policy: "Always", init: vec![], containers: vec![with_policy("failed-container", Some("OnFailure"), &[])], statuses: vec![("failed-container", "T1")], want: RUNNING },
        RestartPolicyPhaseCase { name: "container with restart policy Always failed", pod_policy: "Always", init: vec![], containers: vec![with_policy("failed-container", Some("Always"), &[])], statuses: vec![("failed-container", "T1")], want: RUNNING },
        RestartPolicyPhaseCase { name: "At least one container with restartable container-level restart policy failed", pod_policy: "Never", init: vec![], containers: vec![with_policy("containerA", Some("Always"), &[]), spec_container("containerB")], statuses: vec![("containerA", "T0"), ("containerB", "T1")], want: RUNNING },
        RestartPolicyPhaseCase { name: "All containers without restartable container-level restart policy failed", pod_policy: "Always", init: vec![], containers: vec![with_policy("containerA", never, &[]), with_policy("containerB", Some("OnFailure"), &[])], statuses: vec![("containerA", "T1"), ("containerB", "T0")], want: FAILED },
        RestartPolicyPhaseCase { name: "All containers succeeded", pod_policy: "Always", init: vec![], containers: vec![with_policy("containerA", never, &[]), with_policy("containerB", Some("OnFailure"), &[])], statuses: vec![("containerA", "T0"), ("containerB", "T0")], want: SUCCEEDED },
        // TestPodPhaseWithContainerRestartPolicyInitContainers
        RestartPolicyPhaseCase { name: "init container with restart policy Never failed", pod_policy: "Always", init: vec![with_policy("failed-container", never, &[])], containers: vec![spec_container("container")], statuses: vec![("failed-container", "T1")], want: FAILED },
        RestartPolicyPhaseCase { name: "init container with restart policy OnFailure failed", pod_policy: "Never", init: vec![with_policy("failed-container", Some("OnFailure"), &[])], containers: vec![spec_container("container")], statuses: vec![("failed-container", "T1")], want: PENDING },
        RestartPolicyPhaseCase { name: "container with restart policy Always failed", pod_policy: "Never", init: vec![with_policy("failed-container", Some("Always"), &[])], containers: vec![spec_container("container")], statuses: vec![("failed-container", "T1")], want: PENDING },
        // TestPodPhaseWithRestartAllContainers: trigger
        RestartPolicyPhaseCase { name: "regular container triggers RestartAllContainers", pod_policy: "Never", init: vec![], containers: vec![with_rule()], statuses: vec![("container", "T42")], want: RUNNING },
        RestartPolicyPhaseCase { name: "init container triggers RestartAllContainers", pod_policy: "Never", init: vec![with_rule()], containers: vec![], statuses: vec![("container", "T42"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "sidecar container triggers RestartAllContainers", pod_policy: "Never", init: vec![sidecar_with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "T42"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "sidecar container triggers RestartAllContainers, kills another init container", pod_policy: "Never", init: vec![sidecar_with_rule(), spec_container("init")], containers: vec![spec_container("regular")], statuses: vec![("container", "T42"), ("init", "W"), ("regular", "W")], want: PENDING },
        // … cleanup
        RestartPolicyPhaseCase { name: "regular container triggers RestartAllContainers, cleaned up", pod_policy: "Never", init: vec![], containers: vec![with_rule()], statuses: vec![("container", "RAC")], want: RUNNING },
        RestartPolicyPhaseCase { name: "init container triggers RestartAllContainers, cleaned up", pod_policy: "Never", init: vec![with_rule()], containers: vec![], statuses: vec![("container", "RAC"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "sidecar container triggers RestartAllContainers, cleaned up", pod_policy: "Never", init: vec![sidecar_with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "RAC"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "sidecar container triggers RestartAllContainers, kills another init container, cleaned up", pod_policy: "Never", init: vec![sidecar_with_rule(), spec_container("init")], containers: vec![spec_container("regular")], statuses: vec![("container", "RAC"), ("container", "RAC"), ("regular", "W")], want: PENDING },
        // … startup
        RestartPolicyPhaseCase { name: "regular container triggered RestartAllContainers; init container succeeded", pod_policy: "Never", init: vec![spec_container("init")], containers: vec![with_rule()], statuses: vec![("init", "T0"), ("container", "RAC")], want: RUNNING },
        RestartPolicyPhaseCase { name: "regular container triggered RestartAllContainers; init container failed", pod_policy: "Never", init: vec![spec_container("init")], containers: vec![with_rule()], statuses: vec![("init", "T1"), ("container", "RAC")], want: FAILED },
        RestartPolicyPhaseCase { name: "init container triggered RestartAllContainers", pod_policy: "Never", init: vec![with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "T42"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "init container triggered RestartAllContainers; init container succeeds", pod_policy: "Never", init: vec![with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "T0"), ("regular", "W")], want: PENDING },
        RestartPolicyPhaseCase { name: "sidecar container triggered RestartAllContainers kills regular container", pod_policy: "Never", init: vec![sidecar_with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "RAC"), ("regular", "RAC")], want: RUNNING },
        RestartPolicyPhaseCase { name: "sidecar container triggered RestartAllContainers kills regular container; sidecar running", pod_policy: "Never", init: vec![sidecar_with_rule()], containers: vec![spec_container("regular")], statuses: vec![("container", "R"), ("regular", "RAC")], want: RUNNING },
        RestartPolicyPhaseCase { name: "sidecar container triggered RestartAllContainers; kills init container; sidecar running", pod_policy: "Never", init: vec![sidecar_with_rule(), spec_container("init")], containers: vec![spec_container("regular")], statuses: vec![("container", "R"), ("container", "RAC"), ("regular", "W")], want: PENDING },
    ];
    for RestartPolicyPhaseCase {
        name,
        pod_policy,
        init,
        containers,
        statuses,
        want,
    } in cases
    {
        let pod = ApiPod {
            spec: ApiPodSpec {
                restart_policy: Some(pod_policy.into()),
                init_containers: init,
                containers,
                ..ApiPodSpec::default()
            },
            ..ApiPod::default()
        };
        let statuses: Vec<ContainerStatus> = statuses.iter().map(|(n, st)| shorthand(n, st)).collect();
        assert_eq!(
            get_phase(&pod, &statuses, false, true, KubeletMinor::V1_37),
            want,
            "{name}"
        );
    }
}

/// `TestContainerHasRestartablePolicy` (pkg/api/v1/pod/util_test.go), every case, and
/// `TestFindMatchingContainerRestartRule`'s.
#[test]
fn upstream_container_should_restart() {
    let restart_in: Rules<'_> = &[("Restart", "In", &[42, 50, 60])];
    let restart_not_in: Rules<'_> = &[("Restart", "NotIn", &[0, 1, 2])];
    /// One row: the container's restart policy and rules, the pod's policy, the exit code, whether
    /// the container restarts.
    struct ShouldRestartCase {
        name: &'static str,
        policy: Option<&'static str>,
        rules: Rules<'static>,
        pod_policy: Option<&'static str>,
        exit_code: i32,
        want: bool,
    }
    #[rustfmt::skip]
    let cases: [ShouldRestartCase; 12] = [
        ShouldRestartCase { name: "Rule: 'In' operator matches with 'Restart' action", policy: Some("Never"), rules: restart_in, pod_policy: None, exit_code: 42, want: true },
        ShouldRestartCase { name: "Rule: 'NotIn' operator matches with 'Restart' action", policy: Some("Never"), rules: restart_not_in, pod_policy: None, exit_code: 99, want: true },
        ShouldRestartCase { name: "Rule: 'In' operator does not match, should fall back to container policy", policy: Some("Never"), rules: &[("Restart", "In", &[10, 20])], pod_policy: None, exit_code: 30, want: false },
        ShouldRestartCase { name: "Rule: 'NotIn' operator does not match, should fall back to container policy", policy: Some("Never"), rules: &[("Restart", "NotIn", &[10, 20])], pod_policy: None, exit_code: 10, want: false },
        ShouldRestartCase { name: "Container Policy: 'Always'", policy: Some("Always"), rules: &[], pod_policy: Some("Never"), exit_code: 0, want: true },
        ShouldRestartCase { name: "Container Policy: 'OnFailure' with exit code 0", policy: Some("OnFailure"), rules: &[], pod_policy: Some("Never"), exit_code: 0, want: false },
        ShouldRestartCase { name: "Container Policy: 'OnFailure' with non-zero exit code", policy: Some("OnFailure"), rules: &[], pod_policy: Some("Never"), exit_code: 1, want: true },
        ShouldRestartCase { name: "Container Policy: 'Never' should return false", policy: Some("Never"), rules: &[], pod_policy: Some("Always"), exit_code: 1, want: false },
        ShouldRestartCase { name: "Pod Policy: Fallback to pod 'Always'", policy: None, rules: &[], pod_policy: Some("Always"), exit_code: 0, want: true },
        ShouldRestartCase { name: "Pod Policy: Fallback to pod 'OnFailure' with non-zero exit code", policy: None, rules: &[], pod_policy: Some("OnFailure"), exit_code: 1, want: true },
        ShouldRestartCase { name: "Pod Policy: Fallback to pod 'Never'", policy: None, rules: &[], pod_policy: Some("Never"), exit_code: 1, want: false },
        ShouldRestartCase { name: "Pod Policy: Fallback with no policies specified should return true", policy: None, rules: &[], pod_policy: None, exit_code: 0, want: true },
    ];
    for ShouldRestartCase {
        name,
        policy,
        rules,
        pod_policy,
        exit_code,
        want,
    } in cases
    {
        let c = with_policy("c", policy, rules);
        assert_eq!(
            container_should_restart(&c, pod_policy, exit_code, KubeletMinor::V1_37),
            want,
            "{name}"
        );
    }
    let both: Rules<'_> = &[("Restart", "In", &[42, 50, 60]), ("Restart", "In", &[42])];
    /// One row of `TestFindMatchingContainerRestartRule`: the rules, the exit code, the index of
    /// the rule that matches.
    struct MatchingRuleCase {
        name: &'static str,
        rules: Rules<'static>,
        exit_code: i32,
        want: Option<usize>,
    }
    #[rustfmt::skip]
    let finds: [MatchingRuleCase; 5] = [
        MatchingRuleCase { name: "a rule with op In matches", rules: restart_in, exit_code: 42, want: Some(0) },
        MatchingRuleCase { name: "a rule with op NotIn matches", rules: restart_not_in, exit_code: 99, want: Some(0) },
        MatchingRuleCase { name: "matches the first rule if two rules both matched", rules: both, exit_code: 42, want: Some(0) },
        MatchingRuleCase { name: "no rules matched", rules: restart_in, exit_code: 100, want: None },
        MatchingRuleCase { name: "no rules defined", rules: &[], exit_code: 0, want: None },
    ];
    for MatchingRuleCase {
        name,
        rules,
        exit_code,
        want,
    } in finds
    {
        let c = with_policy("c", None, rules);
        let found = matching_restart_rule(&c, exit_code);
        assert_eq!(found, want.map(|i| &c.restart_policy_rules[i]), "{name}");
    }
    // A rule without exit codes, or with an unknown operator, never matches.
    let mut c = with_policy("c", Some("Never"), &[("Restart", "Between", &[1])]);
    assert!(!container_should_restart(&c, None, 1, KubeletMinor::V1_37));
    c.restart_policy_rules[0].exit_codes = None;
    assert!(!container_should_restart(&c, None, 1, KubeletMinor::V1_37));
}
