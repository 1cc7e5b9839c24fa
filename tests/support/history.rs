//! What makes a sequence of stored pod statuses one the kubelet could have written, checked over
//! every version the test apiserver stored. Each rule names the upstream code that guarantees it.

use serde_json::Value;

fn phase(s: &Value) -> &str {
    s["phase"].as_str().unwrap_or_default()
}

fn terminal(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

fn statuses(s: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    let lists = [
        ("containerStatuses", s["containerStatuses"].as_array()),
        ("initContainerStatuses", s["initContainerStatuses"].as_array()),
    ];
    lists
        .into_iter()
        .flat_map(|(list, items)| items.into_iter().flatten().map(move |c| (list, c)))
}

fn state_kind(c: &Value) -> &'static str {
    let st = &c["state"];
    if !st["running"].is_null() {
        "running"
    } else if !st["terminated"].is_null() {
        "terminated"
    } else if !st["waiting"].is_null() {
        "waiting"
    } else {
        "none"
    }
}

/// Panics, naming the pod, the version and the rule, unless every stored version of a pod (whole
/// objects, oldest first, as `TestApiserver::pod_versions` gives them) has a status the kubelet
/// could have written after the one before, for the pod's spec:
/// - the phase is one of the four, and a terminal phase never changes (`mergePodStatus`, the
///   apiserver's own validation);
/// - a restart count never goes down (`convertToAPIContainerStatuses` keeps the old one);
/// - a container id that terminated never runs again (the runtime never restarts a container);
/// - under `Never` no terminated container, under `OnFailure` none that exited 0, goes back to
///   running or waiting (`checkContainerStateTransition`);
/// - a ready container is running, except an init container that exited 0 (prober manager);
/// - `Ready` and `ContainersReady` are True only if every regular container is ready and the pod
///   is not terminal (`GeneratePodReadyCondition`).
pub fn assert_kubelet_could_have_written(versions: &[Value]) {
    let mut last_phase = String::new();
    let mut restart_counts: std::collections::HashMap<String, i64> = Default::default();
    let mut ended_ids: std::collections::HashSet<String> = Default::default();
    let mut ended: std::collections::HashMap<String, i64> = Default::default();
    for (n, object) in versions.iter().enumerate() {
        let pod = object["metadata"]["name"].as_str().unwrap_or_default();
        let spec = &object["spec"];
        let restart_policy = spec["restartPolicy"].as_str().unwrap_or("Always");
        let sidecars: Vec<&str> = spec["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["restartPolicy"] == "Always")
            .filter_map(|c| c["name"].as_str())
            .collect();
        let s = &object["status"];
        let at = |rule: &str| format!("{pod} version {n}: {rule}\n{s:#}");
        let p = phase(s);
        assert!(
            matches!(p, "" | "Pending" | "Running" | "Succeeded" | "Failed"),
            "{}",
            at("unknown phase")
        );
        assert!(
            !terminal(&last_phase) || p == last_phase,
            "{}",
            at(&format!("a terminal phase ({last_phase}) changed"))
        );
        if !p.is_empty() {
            last_phase = p.to_owned();
        }
        for (list, c) in statuses(s) {
            let name = format!("{list}[{}]", c["name"].as_str().unwrap_or_default());
            let count = c["restartCount"].as_i64().unwrap_or(0);
            let before = restart_counts.insert(name.clone(), count).unwrap_or(0);
            assert!(
                count >= before,
                "{}",
                at(&format!("{name}: restartCount {before} -> {count}"))
            );
            let kind = state_kind(c);
            let id = c["containerID"].as_str().unwrap_or_default();
            if !id.is_empty() && kind == "running" {
                assert!(!ended_ids.contains(id), "{}", at(&format!("{name}: {id} ran again")));
            }
            if let Some(code) = ended.get(&name)
                && kind != "terminated"
            {
                let refused = match restart_policy {
                    "Never" => true,
                    "OnFailure" => *code == 0,
                    _ => false,
                };
                // A sidecar restarts whatever the pod's policy.
                let sidecar =
                    list == "initContainerStatuses" && c["name"].as_str().is_some_and(|n| sidecars.contains(&n));
                assert!(
                    !refused || sidecar,
                    "{}",
                    at(&format!(
                        "{name}: terminated ({code}) went back to {kind} under {restart_policy}"
                    ))
                );
            }
            if kind == "terminated" {
                let t = &c["state"]["terminated"];
                ended.insert(name.clone(), t["exitCode"].as_i64().unwrap_or(0));
                if !id.is_empty() {
                    ended_ids.insert(id.to_owned());
                }
            }
            if c["ready"] == true {
                let completed_init = list == "initContainerStatuses"
                    && kind == "terminated"
                    && c["state"]["terminated"]["exitCode"] == 0;
                assert!(
                    kind == "running" || completed_init,
                    "{}",
                    at(&format!("{name}: ready while {kind}"))
                );
            }
        }
        for type_ in ["Ready", "ContainersReady"] {
            let Some(cond) = s["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            else {
                continue;
            };
            if cond["status"] == "True" {
                let all_ready = s["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true));
                assert!(all_ready && !terminal(p), "{}", at(&format!("{type_} True")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The checker the real-runtime scenarios use catches each thing it claims to.
    #[test]
    fn history_rules_catch_what_they_name() {
        fn running(id: &str, restarts: i64) -> Value {
            json!({"name": "app", "containerID": id, "ready": true, "restartCount": restarts, "state": {"running": {}}})
        }
        fn exited(id: &str, code: i64, restarts: i64) -> Value {
            json!({"name": "app", "containerID": id, "ready": false, "restartCount": restarts,
                   "state": {"terminated": {"exitCode": code}}})
        }
        fn version(policy: &str, phase: &str, c: Value) -> Value {
            json!({"metadata": {"name": "p"}, "spec": {"restartPolicy": policy},
                   "status": {"phase": phase, "containerStatuses": [c]}})
        }
        fn fails(policy: &str, steps: &[(&str, Value)]) -> bool {
            let versions: Vec<Value> = steps
                .iter()
                .map(|(phase, c)| version(policy, phase, c.clone()))
                .collect();
            std::panic::catch_unwind(move || assert_kubelet_could_have_written(&versions)).is_err()
        }
        let restart = [
            ("Running", running("c://1", 0)),
            ("Running", exited("c://1", 2, 0)),
            ("Running", running("c://2", 1)),
        ];
        assert!(!fails("Always", &restart));
        assert!(fails("Never", &restart), "no restart under Never");
        assert!(!fails("OnFailure", &restart));
        let after_success = [("Running", exited("c://1", 0, 0)), ("Running", running("c://2", 1))];
        assert!(fails("OnFailure", &after_success));
        assert!(fails(
            "Always",
            &[("Running", running("c://1", 1)), ("Running", running("c://1", 0))]
        ));
        assert!(fails(
            "Always",
            &[("Running", exited("c://1", 1, 0)), ("Running", running("c://1", 0))]
        ));
        assert!(fails(
            "Always",
            &[("Failed", exited("c://1", 1, 0)), ("Running", exited("c://1", 1, 0))]
        ));
        let mut ready_exited = exited("c://1", 1, 0);
        ready_exited["ready"] = json!(true);
        assert!(fails("Always", &[("Running", ready_exited)]));
        let mut ready_pod = version("Always", "Running", exited("c://1", 1, 0));
        ready_pod["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        assert!(std::panic::catch_unwind(|| assert_kubelet_could_have_written(&[ready_pod])).is_err());
        // A sidecar restarts under Never.
        let sidecar = |c: Value| {
            json!({"metadata": {"name": "p"},
                   "spec": {"restartPolicy": "Never", "initContainers": [{"name": "app", "restartPolicy": "Always"}]},
                   "status": {"phase": "Running", "initContainerStatuses": [c]}})
        };
        assert_kubelet_could_have_written(&[sidecar(exited("c://1", 1, 0)), sidecar(running("c://2", 1))]);
    }
}
