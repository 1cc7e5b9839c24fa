//! Two statuses of one pod compared field by field, as typed values: the apiserver's (what the kubelet
//! wrote) and plegd's computed one. Used by shadow mode (counted and logged) and by the status stream
//! of the observation API (`plegd status`). Pure; no I/O.
//!
//! Both sides are first brought to the form the apiserver stores ([`super::semantic::canonical`]), so a
//! difference is one the apiserver would keep. Lists whose items have a key are matched by it
//! (conditions by `type`, container statuses by `name`, IPs by `ip`, volume mounts by `mountPath`),
//! so a path names what differs: `conditions[Ready].status`,
//! `containerStatuses[app].state.terminated.exitCode`.
//!
//! Some fields are set from the kubelet's own actions, which the runtime keeps no record of; plegd
//! cannot know them ([`UNKNOWABLE`]). Such a difference is reported with its reason and is not a
//! plegd bug: shadow mode does not count it.

use k8s_openapi::api::core::v1::PodStatus;
use serde_json::Value;

use super::generate::CONTAINERS_RUNNING;
use super::semantic::canonical;

/// One field where the two statuses differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Where: `phase`, `conditions[Ready].status`, `containerStatuses[app].restartCount`, …
    pub path: String,
    /// The apiserver's value (`null`: absent).
    pub apiserver: Value,
    /// plegd's value (`null`: absent).
    pub plegd: Value,
    /// Why plegd cannot know this field, if it cannot (see [`UNKNOWABLE`]).
    pub unknowable: Option<&'static str>,
    /// The path with every list key but a condition's type as `[*]` (see [`Self::field`]).
    field: String,
}

impl Difference {
    /// A difference at `path`, whose label ([`Self::field`]) is `field`.
    fn new(path: String, field: String, apiserver: Value, plegd: Value, unknowable: Option<&'static str>) -> Self {
        Difference {
            path,
            apiserver,
            plegd,
            unknowable,
            field,
        }
    }

    /// The path without container names, IPs or mount paths, for a metric label of bounded
    /// cardinality: `containerStatuses[*].restartCount`. Condition types are kept. Built beside
    /// the path, not parsed from it: a key is anyone's text (a mount path may hold `]`).
    pub fn field(&self) -> &str {
        &self.field
    }
}

/// The waiting reasons the kubelet sets from its own actions (pkg/kubelet/images/types.go,
/// pkg/kubelet/container/sync_result.go, kuberuntime's back-off): image pulls, back-off, a failed
/// create or start, hooks. The runtime keeps no record of them.
pub const KUBELET_WAITING_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RegistryUnavailable",
    "SignatureValidationFailed",
    "CreateContainerConfigError",
    "CreateContainerError",
    "PreCreateHookError",
    "PreStartHookError",
    "PostStartHookError",
    "RunContainerError",
    "KillContainerError",
    "VerifyNonRootError",
];

/// Fields plegd cannot know, each with its reason: the kubelet sets them from what it did, not from
/// anything the runtime reports. docs/kubernetes-versions.md ("What plegd cannot know") lists the same.
pub const UNKNOWABLE: &[(&str, &str)] = &[
    (
        "waiting",
        "a waiting reason the kubelet sets from its own actions (image pull, back-off, a failed create or start, a hook); the runtime keeps no record of it",
    ),
    (
        "probe",
        "readiness and startup come from the kubelet's probes of a container that declares them",
    ),
    (
        "cgroup",
        "once a pod runs, the kubelet reads its pod-level resources back from the pod's cgroup, which the CRI does not report",
    ),
    (
        "deleted-instance",
        "before 1.36 the kubelet writes a container's last state only from an instance the runtime holds, and deletes the instance before the newest as soon as a container dies; its status names that instance until its next sync, while a read after the deletion no longer finds it",
    ),
];

fn reason(kind: &str) -> &'static str {
    UNKNOWABLE
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, r)| *r)
        .unwrap_or("unknown")
}

/// The key of a list item, for the lists that have one.
fn key_of(list: &str, item: &Value) -> Option<String> {
    let field = match list {
        "conditions" => "type",
        "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" | "resourceClaimStatuses" => {
            "name"
        }
        "podIPs" | "hostIPs" => "ip",
        "volumeMounts" => "mountPath",
        _ => return None,
    };
    item.get(field).and_then(Value::as_str).map(str::to_owned)
}

/// Where the walk is: the path, its label template, and within a container's status, which
/// container (list and name) and the path inside it.
#[derive(Debug, Clone, Default)]
struct At {
    path: String,
    field: String,
    container: Option<(String, String)>,
    /// The path inside the container's status, list keys as `[*]` (`state.terminated.exitCode`).
    inner: String,
}

impl At {
    fn key(&self, key: &str) -> At {
        let join = |base: &str| {
            if base.is_empty() {
                key.to_owned()
            } else {
                format!("{base}.{key}")
            }
        };
        At {
            path: join(&self.path),
            field: join(&self.field),
            container: self.container.clone(),
            inner: if self.container.is_some() {
                join(&self.inner)
            } else {
                String::new()
            },
        }
    }

    fn item(&self, list: &str, key: &str) -> At {
        let label = if list == "conditions" {
            format!("[{key}]")
        } else {
            "[*]".to_owned()
        };
        let container = matches!(
            list,
            "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses"
        ) && self.container.is_none();
        At {
            path: format!("{}[{key}]", self.path),
            field: format!("{}{label}", self.field),
            container: if container {
                Some((list.to_owned(), key.to_owned()))
            } else {
                self.container.clone()
            },
            inner: if container {
                String::new()
            } else {
                format!("{}[*]", self.inner)
            },
        }
    }
}

/// One difference as the walk finds it.
struct Raw {
    at: At,
    apiserver: Value,
    plegd: Value,
}

fn walk(at: &At, list_name: &str, a: &Value, b: &Value, out: &mut Vec<Raw>) {
    // An absent keyed list is an empty one: its items are what differs.
    let empty = Value::Array(Vec::new());
    let (a, b) = match (a, b) {
        (Value::Null, Value::Array(_)) => (&empty, b),
        (Value::Array(_), Value::Null) => (a, &empty),
        _ => (a, b),
    };
    // Most of two statuses of one pod is equal: no path is built below an equal value.
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                walk(
                    &at.key(key),
                    key,
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(items_a), Value::Array(items_b))
            if items_a.iter().chain(items_b).all(|i| key_of(list_name, i).is_some()) =>
        {
            let (ka, kb) = (keyed(list_name, items_a), keyed(list_name, items_b));
            let mut seen = std::collections::BTreeSet::new();
            for key in ka.iter().chain(&kb).map(|(k, _)| k) {
                if !seen.insert(key) {
                    continue;
                }
                let sub = at.item(list_name, key);
                match (find(&ka, key), find(&kb, key)) {
                    (Some(x), Some(y)) => walk(&sub, "", x, y, out),
                    (x, y) => out.push(Raw {
                        at: sub,
                        apiserver: x.cloned().unwrap_or(Value::Null),
                        plegd: y.cloned().unwrap_or(Value::Null),
                    }),
                }
            }
            // Order matters to a reader of a list too (the kubelet sorts container statuses).
            let order = |items: &[(String, &Value)]| items.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
            let (oa, ob) = (order(&ka), order(&kb));
            let common =
                |o: &[String], other: &[String]| o.iter().filter(|k| other.contains(k)).cloned().collect::<Vec<_>>();
            if common(&oa, &ob) != common(&ob, &oa) {
                out.push(Raw {
                    at: at.key("order"),
                    apiserver: Value::from(oa),
                    plegd: Value::from(ob),
                });
            }
        }
        (a, b) => out.push(Raw {
            at: at.clone(),
            apiserver: a.clone(),
            plegd: b.clone(),
        }),
    }
}

/// The items of keyed list `list` with their keys.
fn keyed<'v>(list: &str, items: &'v [Value]) -> Vec<(String, &'v Value)> {
    items.iter().map(|i| (key_of(list, i).unwrap_or_default(), i)).collect()
}

/// The item of a keyed list with `key`.
fn find<'v>(items: &[(String, &'v Value)], key: &str) -> Option<&'v Value> {
    items.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// What of the pod's spec the comparison needs: which containers have probes.
#[derive(Debug, Clone, Default)]
pub struct Probed {
    /// Containers (any kind) with a readiness probe.
    pub readiness: Vec<String>,
    /// Containers (any kind) with a startup probe.
    pub startup: Vec<String>,
}

impl Probed {
    /// The probed containers of `pod`.
    pub fn of(pod: &crate::apiserver::pod::ApiPod) -> Probed {
        let mut probed = Probed::default();
        for c in pod.spec.containers.iter().chain(&pod.spec.init_containers) {
            if c.readiness_probe {
                probed.readiness.push(c.name.clone());
            }
            if c.startup_probe {
                probed.startup.push(c.name.clone());
            }
        }
        probed
    }
}

/// Why the difference at `at` is one plegd cannot know (`apiserver_status`: the apiserver's side).
fn unknowable(at: &At, probed: &Probed, apiserver_status: &Value) -> Option<&'static str> {
    if let Some((list, name)) = &at.container {
        let field = at.inner.as_str();
        if (field == "ready" && probed.readiness.contains(name))
            || (field == "started" && probed.startup.contains(name))
        {
            return Some(reason("probe"));
        }
        // While the kubelet holds a container in a waiting reason of its own (a crash loop's
        // back-off, an image pull, a failed create), it shows the newest instance's end as
        // `lastState` and no `state.terminated`, where the runtime shows that instance
        // terminated and the one before it as `lastState`: all of the container's state and
        // last state are the kubelet's then.
        let in_state = ["state", "lastState"]
            .iter()
            .any(|s| field == *s || field.starts_with(&format!("{s}.")));
        if in_state {
            let waiting_reason = apiserver_status
                .get(list)
                .and_then(Value::as_array)
                .and_then(|items| {
                    items
                        .iter()
                        .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
                })
                .and_then(|i| i.pointer("/state/waiting/reason"))
                .and_then(Value::as_str);
            if waiting_reason.is_some_and(|r| KUBELET_WAITING_REASONS.contains(&r)) {
                return Some(reason("waiting"));
            }
        }
        return None;
    }
    // The kubelet reads a pod's resources back from its cgroup once the pod runs (and keeps them
    // when it ends); before, they are the spec's, which plegd computes as it does.
    let pending = apiserver_status.get("phase").and_then(Value::as_str) == Some("Pending");
    if !pending && (at.path == "resources" || at.path.starts_with("resources.")) {
        return Some(reason("cgroup"));
    }
    // Readiness a probe decides makes ContainersReady and Ready the prober's too.
    if !probed.readiness.is_empty()
        && (at.path.starts_with("conditions[Ready].") || at.path.starts_with("conditions[ContainersReady]."))
    {
        return Some(reason("probe"));
    }
    None
}

/// Where plegd's `computed` status differs from the apiserver's `actual` one (module doc). plegd's
/// own condition (`plegd.io/ContainersRunning`) is left out: the kubelet never writes it.
/// Beside a kubelet that takes a last state only from the runtime (before 1.36:
/// [`KubeletMinor::restart_all_containers`](super::generate::KubeletMinor::restart_all_containers)
/// off): a last state the apiserver's status names and plegd's lacks, of an instance the runtime no
/// longer holds (`held`: the container ids of plegd's read, without their scheme), is the kubelet's
/// own deletion after its read, not plegd's difference ("deleted-instance").
pub fn mark_deleted_instances(differences: &mut [Difference], held: impl Fn(&str) -> bool) {
    for d in differences.iter_mut() {
        // The whole last state (plegd's has none) or its `terminated` (plegd's is empty).
        let terminated = if d.field.ends_with("].lastState") {
            d.apiserver.get("terminated")
        } else if d.field.ends_with("].lastState.terminated") {
            Some(&d.apiserver)
        } else {
            None
        };
        let plegd_none = d.plegd.is_null() || d.plegd.as_object().is_some_and(serde_json::Map::is_empty);
        let last_state = terminated.is_some() && plegd_none;
        let gone = terminated
            .and_then(|t| t.get("containerID"))
            .and_then(Value::as_str)
            .map(|id| id.split_once("://").map_or(id, |(_, id)| id))
            .is_some_and(|id| !held(id));
        if d.unknowable.is_none() && last_state && gone {
            d.unknowable = Some(reason("deleted-instance"));
        }
    }
}

pub fn differences(actual: &PodStatus, computed: &PodStatus, probed: &Probed) -> Vec<Difference> {
    let without_own = |s: &PodStatus| {
        let mut s = canonical(s);
        if let Some(conditions) = s.conditions.as_mut() {
            conditions.retain(|c| c.type_ != CONTAINERS_RUNNING);
            if conditions.is_empty() {
                s.conditions = None;
            }
        }
        serde_json::to_value(s).unwrap_or(Value::Null)
    };
    let (a, b) = (without_own(actual), without_own(computed));
    let mut raw = Vec::new();
    walk(&At::default(), "", &a, &b, &mut raw);
    raw.into_iter()
        .map(|Raw { at, apiserver, plegd }| {
            let unknowable = unknowable(&at, probed, &a);
            Difference::new(at.path, at.field, apiserver, plegd, unknowable)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 1.35 kubelet's last state of an instance the runtime deleted since: not plegd's
    /// difference; of an instance the runtime holds, or where plegd shows another, it is.
    #[test]
    fn a_last_state_of_a_deleted_instance_is_the_kubelets() {
        let with_last = |id: &str| {
            status(
                json!({"containerStatuses": [{"name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                "lastState": {"terminated": {"exitCode": 1, "containerID": format!("containerd://{id}")}}}]}),
            )
        };
        let plegd = status(
            json!({"containerStatuses": [{"name": "app", "image": "i", "imageID": "", "ready": false, "restartCount": 2}]}),
        );
        let mut found = differences(&with_last("old"), &plegd, &Probed::default());
        assert_eq!(found.len(), 1, "{found:?}");
        mark_deleted_instances(&mut found, |id| id == "new");
        assert_eq!(found[0].unknowable, Some(reason("deleted-instance")));
        let mut found = differences(&with_last("old"), &plegd, &Probed::default());
        mark_deleted_instances(&mut found, |id| id == "old");
        assert_eq!(found[0].unknowable, None, "the runtime holds it: plegd should show it");
        let mut found = differences(&with_last("old"), &with_last("other"), &Probed::default());
        mark_deleted_instances(&mut found, |_| false);
        assert!(found.iter().all(|d| d.unknowable.is_none()), "{found:?}");
    }

    fn status(v: Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    fn paths(d: &[Difference]) -> Vec<&str> {
        d.iter().map(|d| d.path.as_str()).collect()
    }

    #[test]
    fn equal_statuses_have_no_difference() {
        let s = status(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T01:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "x",
                "state": {"running": {"startedAt": "2026-11-25T01:00:00Z"}}}],
        }));
        assert!(differences(&s, &s, &Probed::default()).is_empty());
    }

    /// What the apiserver stores alike is alike: empty strings, empty lists, `lastState: {}`.
    #[test]
    fn stored_forms_compare_equal() {
        let a = status(json!({"phase": "Running", "message": "", "podIPs": [],
            "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "image": "i", "imageID": "", "lastState": {}}]}));
        let b = status(json!({"phase": "Running",
            "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "image": "i", "imageID": ""}]}));
        assert_eq!(differences(&a, &b, &Probed::default()), vec![]);
    }

    /// Keyed lists are matched by key, and a path names the item and the field.
    #[test]
    fn paths_name_the_item_and_the_field() {
        let a = status(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"terminated": {"exitCode": 1}}},
                {"name": "b", "ready": true, "restartCount": 2, "image": "i", "imageID": ""}],
            "podIPs": [{"ip": "10.0.0.1"}],
        }));
        let b = status(json!({
            "phase": "Failed",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False", "reason": "PodFailed"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"terminated": {"exitCode": 2}}},
                {"name": "b", "ready": true, "restartCount": 3, "image": "i", "imageID": ""},
                {"name": "c", "ready": false, "restartCount": 0, "image": "i", "imageID": ""}],
        }));
        let d = differences(&a, &b, &Probed::default());
        assert_eq!(
            paths(&d),
            vec![
                "conditions[Ready].reason",
                "conditions[Ready].status",
                "conditions.order",
                "containerStatuses[a].state.terminated.exitCode",
                "containerStatuses[b].restartCount",
                "containerStatuses[c]",
                "phase",
                "podIPs[10.0.0.1]",
            ]
        );
        assert_eq!(d[3].apiserver, json!(1));
        assert_eq!(d[3].plegd, json!(2));
        assert_eq!(d[5].apiserver, Value::Null);
        assert!(d.iter().all(|d| d.unknowable.is_none()));
        assert_eq!(d[3].field(), "containerStatuses[*].state.terminated.exitCode");
        assert_eq!(d[0].field(), "conditions[Ready].reason");
        assert_eq!(d[7].field(), "podIPs[*]");
    }

    #[test]
    fn plegds_own_condition_is_not_compared() {
        let a = status(json!({"conditions": [{"type": "Ready", "status": "True"}]}));
        let b = status(
            json!({"conditions": [{"type": "Ready", "status": "True"}, {"type": CONTAINERS_RUNNING, "status": "True"}]}),
        );
        assert!(differences(&a, &b, &Probed::default()).is_empty());
    }

    /// A container crash-looping, as the kubelet writes it (waiting in back-off, the newest
    /// instance's end as its last state) and as plegd's `convert` makes it from the runtime (the
    /// newest instance terminated, the one before as its last state): every state and last-state
    /// difference is the kubelet's; the restart count is still compared.
    #[test]
    fn a_crash_loop_is_the_kubelets_state() {
        let term = |id: &str, code: i32, at: &str| {
            json!({"terminated": {"exitCode": code, "reason": "Error", "containerID": id,
                "startedAt": at, "finishedAt": at}})
        };
        let a = status(json!({"phase": "Running", "containerStatuses": [
            {"name": "crash", "ready": false, "restartCount": 2, "image": "i", "imageID": "x", "containerID": "containerd://c3",
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
             "lastState": term("containerd://c3", 1, "2026-11-25T01:00:03Z")}]}));
        let b = status(json!({"phase": "Running", "containerStatuses": [
            {"name": "crash", "ready": false, "restartCount": 3, "image": "i", "imageID": "x", "containerID": "containerd://c3",
             "state": term("containerd://c3", 1, "2026-11-25T01:00:03Z"),
             "lastState": term("containerd://c2", 2, "2026-11-25T01:00:02Z")}]}));
        let d = differences(&a, &b, &Probed::default());
        let marked: Vec<(&str, bool)> = d.iter().map(|d| (d.path.as_str(), d.unknowable.is_some())).collect();
        assert_eq!(
            marked,
            vec![
                ("containerStatuses[crash].lastState.terminated.containerID", true),
                ("containerStatuses[crash].lastState.terminated.exitCode", true),
                ("containerStatuses[crash].lastState.terminated.finishedAt", true),
                ("containerStatuses[crash].lastState.terminated.startedAt", true),
                ("containerStatuses[crash].restartCount", false),
                ("containerStatuses[crash].state.terminated", true),
                ("containerStatuses[crash].state.waiting", true),
            ]
        );
        // Not in a kubelet's waiting reason: the same last state is plegd's to explain.
        let mut a2 = a.clone();
        a2.container_statuses.as_mut().unwrap()[0].state = None;
        let d = differences(&a2, &b, &Probed::default());
        assert!(d.iter().any(|d| d.path.contains("lastState") && d.unknowable.is_none()));
    }

    /// Pod-level resources are read from the cgroup once the pod runs: while it is pending, a
    /// difference is plegd's.
    #[test]
    fn pod_resources_are_the_kubelets_only_while_the_pod_runs() {
        let with = |phase: &str, cpu: &str| status(json!({"phase": phase, "resources": {"requests": {"cpu": cpu}}}));
        for phase in ["Running", "Succeeded", "Failed"] {
            let d = differences(&with(phase, "1"), &with(phase, "2"), &Probed::default());
            assert_eq!(d.len(), 1);
            assert!(d[0].unknowable.is_some(), "{phase}");
        }
        let pending = differences(&with("Pending", "1"), &with("Pending", "2"), &Probed::default());
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].unknowable, None);
    }

    /// A label never carries a key's text, whatever it holds.
    #[test]
    fn labels_carry_no_key_text() {
        let mounts = |ro: bool| {
            status(
                json!({"containerStatuses": [{"name": "a]b", "ready": false, "restartCount": 0, "image": "i",
                "imageID": "", "volumeMounts": [{"name": "v", "mountPath": "/d].x[", "readOnly": ro}]}]}),
            )
        };
        let d = differences(&mounts(true), &mounts(false), &Probed::default());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path, "containerStatuses[a]b].volumeMounts[/d].x[].readOnly");
        assert_eq!(d[0].field(), "containerStatuses[*].volumeMounts[*].readOnly");
    }

    /// The kubelet's back-off and probes are its own: reported, with why plegd cannot know them.
    #[test]
    fn what_only_the_kubelet_knows_is_marked() {
        let a = status(json!({
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "crash", "ready": false, "restartCount": 1, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}},
                {"name": "web", "ready": true, "restartCount": 0, "image": "i", "imageID": ""},
                {"name": "other", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}}],
        }));
        let b = status(json!({
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "crash", "ready": false, "restartCount": 1, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "web", "ready": false, "restartCount": 0, "image": "i", "imageID": ""},
                {"name": "other", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "PodInitializing"}}}],
        }));
        let probed = Probed {
            readiness: vec!["web".into()],
            startup: vec![],
        };
        let d = differences(&a, &b, &probed);
        let marked: Vec<(&str, bool)> = d.iter().map(|d| (d.path.as_str(), d.unknowable.is_some())).collect();
        assert_eq!(
            marked,
            vec![
                ("conditions[Ready].status", true),
                ("containerStatuses[crash].state.waiting.message", true),
                ("containerStatuses[crash].state.waiting.reason", true),
                ("containerStatuses[web].ready", true),
                ("containerStatuses[other].state.waiting.reason", false),
            ]
        );
        // Without the probe, the same readiness difference is plegd's to explain.
        let d = differences(&a, &b, &Probed::default());
        assert!(
            d.iter()
                .any(|d| d.path == "containerStatuses[web].ready" && d.unknowable.is_none())
        );
    }
}
