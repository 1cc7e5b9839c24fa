use k8s_openapi::api::core::v1::{ContainerStateWaiting, ContainerStatus};

use super::super::test_support::*;
use super::super::*;
use super::*;
use crate::pod::{ApiContainer, ApiPod, ApiPodSpec};

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
