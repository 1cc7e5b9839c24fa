//! deploy/admission-policy.yaml and admission-policy-conditions.yaml, evaluated as the apiserver
//! evaluates a ValidatingAdmissionPolicy: match constraints, match conditions, variables, then
//! validations, with a CEL implementation (the `cel` crate), on requests plegd makes and requests
//! it must not be able to make. The RBAC side of each request is judged from deploy/rbac*.yaml.
//!
//! Each policy knows plegd by its service account's user name; here that name is derived from
//! rbac.yaml and the DaemonSet, so renaming the account or its namespace in one place only fails.

#[path = "support/manifests.rs"]
mod manifests;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodStatus;
use manifests::{document, granted, service_account_user};
use serde_json::{Value, json};

const NODE_CLAIM: &str = "authentication.kubernetes.io/node-name";
const OWN: &str = "plegd.io/ContainersRunning";

/// An admission request, as the CEL variables `request`, `object` and `oldObject` see it.
struct Request {
    user: String,
    /// The node-name claim of the user's token, if it has one.
    node: Option<String>,
    operation: &'static str,
    /// "pods" or "pods/status".
    resource: &'static str,
    object: Value,
    old_object: Value,
}

impl Request {
    fn request(&self) -> Value {
        let (resource, sub) = self.resource.split_once('/').unwrap_or((self.resource, ""));
        let mut user = json!({"username": self.user, "groups": ["system:serviceaccounts", "system:authenticated"]});
        if let Some(node) = &self.node {
            user["extra"] = json!({ NODE_CLAIM: [node] });
        }
        json!({
            "operation": self.operation,
            "resource": {"group": "", "version": "v1", "resource": resource},
            "subResource": sub,
            "userInfo": user,
        })
    }
}

/// A change made to a pod status in a test request.
type Change = fn(&mut Value);

fn eval(expression: &str, vars: &BTreeMap<&str, Value>) -> Result<Value, String> {
    let program = cel::Program::compile(expression).map_err(|e| format!("compile {expression}: {e}"))?;
    let mut context = cel::Context::default();
    for (name, value) in vars {
        context
            .add_variable(*name, value.clone())
            .map_err(|e| format!("variable {name}: {e}"))?;
    }
    let value = program.execute(&context).map_err(|e| format!("{expression}: {e}"))?;
    value.json().map_err(|e| format!("{expression}: result {e}"))
}

fn must_be_bool(expression: &str, vars: &BTreeMap<&str, Value>) -> Result<bool, String> {
    match eval(expression, vars)? {
        Value::Bool(b) => Ok(b),
        other => Err(format!("{expression}: not a bool but {other}")),
    }
}

/// What one policy (and its binding) says of `request`: Ok when it admits it (or does not apply),
/// Err(message) when it denies it. An expression that fails to evaluate denies, as failurePolicy
/// Fail makes the apiserver do.
fn admit(manifest: &str, request: &Request) -> Result<(), String> {
    let policy = document(manifest, "ValidatingAdmissionPolicy", None);
    let name = policy["metadata"]["name"].as_str().unwrap();
    let binding = document(manifest, "ValidatingAdmissionPolicyBinding", None);
    assert_eq!(
        binding["spec"]["policyName"], name,
        "{manifest}: the binding names the policy"
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]), "{manifest}");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{manifest}");
    let spec = &policy["spec"];
    let matches = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|rule| {
            rule["apiGroups"] == json!([""])
                && rule["operations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o == request.operation)
                && rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == request.resource)
        });
    if !matches {
        return Ok(());
    }
    let mut vars = BTreeMap::from([
        ("request", request.request()),
        ("object", request.object.clone()),
        ("oldObject", request.old_object.clone()),
    ]);
    for condition in spec["matchConditions"].as_array().into_iter().flatten() {
        if !must_be_bool(condition["expression"].as_str().unwrap(), &vars)? {
            return Ok(());
        }
    }
    let mut variables = serde_json::Map::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        vars.insert("variables", Value::Object(variables.clone()));
        let value = eval(variable["expression"].as_str().unwrap(), &vars)?;
        variables.insert(variable["name"].as_str().unwrap().to_owned(), value);
    }
    vars.insert("variables", Value::Object(variables));
    for validation in spec["validations"].as_array().unwrap() {
        let expression = validation["expression"].as_str().unwrap();
        if !must_be_bool(expression, &vars)? {
            return Err(validation["message"].as_str().unwrap_or(expression).to_owned());
        }
    }
    Ok(())
}

/// Whether plegd's RBAC (the files of one mode) lets its service account make `request`.
fn rbac_allows(files: &[&str], request: &Request) -> bool {
    let verb = match request.operation {
        "UPDATE" => "patch",
        "DELETE" => "delete",
        "CREATE" => "create",
        other => panic!("no verb for {other}"),
    };
    request.user == service_account_user() && granted(files).contains(&format!("/{}:{verb}", request.resource))
}

const FULL: [&str; 3] = [
    "deploy/rbac.yaml",
    "deploy/rbac-status.yaml",
    "deploy/rbac-full-mode.yaml",
];
const CONDITIONS: [&str; 2] = ["deploy/rbac.yaml", "deploy/rbac-status.yaml"];
const NODE_POLICY: &str = "deploy/admission-policy.yaml";
const CONDITIONS_POLICY: &str = "deploy/admission-policy-conditions.yaml";

fn pod(node: &str) -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {
            "phase": "Running",
            "hostIP": "192.0.2.10",
            "startTime": "2026-11-23T10:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T10:00:01Z"},
                {"type": OWN, "status": "True", "lastTransitionTime": "2026-11-23T10:00:01Z"}
            ],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "sha256:1", "state": {"running": {"startedAt": "2026-11-23T10:00:01Z"}}}]
        }
    })
}

/// The pod after `change` to its status.
fn changed(node: &str, change: impl FnOnce(&mut Value)) -> Value {
    let mut p = pod(node);
    change(&mut p["status"]);
    p
}

fn own_condition_false(status: &mut Value) {
    status["conditions"][1] = json!({"type": OWN, "status": "False", "reason": "ContainersNotRunning", "lastTransitionTime": "2026-11-23T10:05:00Z"});
}

fn status_write(user: &str, token_node: Option<&str>, pod_node: &str, change: impl FnOnce(&mut Value)) -> Request {
    Request {
        user: user.to_owned(),
        node: token_node.map(str::to_owned),
        operation: "UPDATE",
        resource: "pods/status",
        object: changed(pod_node, change),
        old_object: pod(pod_node),
    }
}

#[test]
fn plegd_writes_only_on_its_own_node() {
    let plegd = service_account_user();
    // Its own node, its own condition: both policies admit, RBAC allows.
    let own = status_write(&plegd, Some("n1"), "n1", own_condition_false);
    assert_eq!(admit(NODE_POLICY, &own), Ok(()));
    assert_eq!(admit(CONDITIONS_POLICY, &own), Ok(()));
    assert!(rbac_allows(&CONDITIONS, &own));

    // A pod of another node.
    let other = status_write(&plegd, Some("n1"), "n2", own_condition_false);
    assert!(rbac_allows(&CONDITIONS, &other), "RBAC alone cannot tell nodes apart");
    let denied = admit(NODE_POLICY, &other).unwrap_err();
    assert!(denied.contains("its own node"), "{denied}");

    // A token without the node claim (not bound to a pod on a node) is refused everywhere.
    let unbound = status_write(&plegd, None, "n1", own_condition_false);
    assert!(admit(NODE_POLICY, &unbound).is_err());

    // A pod not yet bound to any node.
    let mut pending = status_write(&plegd, Some("n1"), "n1", own_condition_false);
    pending.old_object["spec"].as_object_mut().unwrap().remove("nodeName");
    assert!(admit(NODE_POLICY, &pending).is_err());

    // The pod as it was decides, not the object sent.
    let mut moved = status_write(&plegd, Some("n1"), "n2", own_condition_false);
    moved.object["spec"]["nodeName"] = json!("n1");
    assert!(admit(NODE_POLICY, &moved).is_err());
}

#[test]
fn deletes_in_full_mode_only_on_its_own_node() {
    let plegd = service_account_user();
    let delete = |node: &str| Request {
        user: plegd.clone(),
        node: Some("n1".into()),
        operation: "DELETE",
        resource: "pods",
        object: Value::Null,
        old_object: pod(node),
    };
    assert_eq!(admit(NODE_POLICY, &delete("n1")), Ok(()));
    assert!(admit(NODE_POLICY, &delete("n2")).is_err());
    assert!(rbac_allows(&FULL, &delete("n1")));
    assert!(
        !rbac_allows(&CONDITIONS, &delete("n1")),
        "no deletes without rbac-full-mode.yaml"
    );
}

#[test]
fn other_users_are_left_to_their_own_rules() {
    // The kubelet of node n2 writing a pod of n2: neither policy applies to it.
    let kubelet = status_write("system:node:n2", None, "n2", |s| s["phase"] = json!("Failed"));
    assert_eq!(admit(NODE_POLICY, &kubelet), Ok(()));
    assert_eq!(admit(CONDITIONS_POLICY, &kubelet), Ok(()));
    // An account named plegd in another namespace is not plegd: no policy, and no RBAC either.
    let imposter = status_write(
        "system:serviceaccount:default:plegd",
        Some("n1"),
        "n2",
        own_condition_false,
    );
    assert_eq!(admit(NODE_POLICY, &imposter), Ok(()));
    assert!(!rbac_allows(&FULL, &imposter));
}

#[test]
fn status_only_never_spec() {
    let plegd = service_account_user();
    // An update of the pod itself (its spec) is not something plegd may do at all.
    let spec = Request {
        user: plegd.clone(),
        node: Some("n1".into()),
        operation: "UPDATE",
        resource: "pods",
        object: {
            let mut p = pod("n1");
            p["spec"]["containers"][0]["image"] = json!("evil");
            p
        },
        old_object: pod("n1"),
    };
    assert!(!rbac_allows(&FULL, &spec), "no update or patch on pods");
    assert!(
        granted(&FULL)
            .iter()
            .all(|g| !g.starts_with("/pods:") || g == "/pods:list" || g == "/pods:watch" || g == "/pods:delete")
    );
}

#[test]
fn conditions_mode_changes_only_its_own_condition() {
    let plegd = service_account_user();
    let write = |change: fn(&mut Value)| status_write(&plegd, Some("n1"), "n1", change);
    // Its own condition: changed, added or removed.
    assert_eq!(admit(CONDITIONS_POLICY, &write(own_condition_false)), Ok(()));
    let mut added = write(|s| {
        s["conditions"].as_array_mut().unwrap().pop();
    });
    std::mem::swap(&mut added.object, &mut added.old_object);
    assert_eq!(admit(CONDITIONS_POLICY, &added), Ok(()));
    // Anything the kubelet owns is refused: another condition, the phase, container statuses, a
    // field the pod did not have.
    let denied: [(&str, Change); 5] = [
        ("Ready condition", |s| s["conditions"][0]["status"] = json!("False")),
        ("phase", |s| s["phase"] = json!("Failed")),
        ("container status", |s| {
            s["containerStatuses"][0]["restartCount"] = json!(1)
        }),
        ("new field", |s| s["message"] = json!("plegd says so")),
        ("removed field", |s| {
            s.as_object_mut().unwrap().remove("hostIP");
        }),
    ];
    for (what, change) in denied {
        let request = write(change);
        assert!(admit(CONDITIONS_POLICY, &request).is_err(), "{what} must be refused");
        // Full mode (without the conditions policy) writes the whole status on its own node.
        assert_eq!(admit(NODE_POLICY, &request), Ok(()), "{what} in full mode");
    }
}

/// Every PodStatus field of the Kubernetes API plegd is built against, by its JSON name. The struct
/// literal names every field: a new field in k8s-openapi stops this from compiling, and the
/// conditions policy must then learn it.
fn pod_status_fields() -> Vec<String> {
    let status = PodStatus {
        conditions: Some(vec![]),
        container_statuses: Some(vec![]),
        ephemeral_container_statuses: Some(vec![]),
        host_ip: Some(String::new()),
        host_ips: Some(vec![]),
        init_container_statuses: Some(vec![]),
        message: Some(String::new()),
        nominated_node_name: Some(String::new()),
        observed_generation: Some(0),
        phase: Some(String::new()),
        pod_ip: Some(String::new()),
        pod_ips: Some(vec![]),
        qos_class: Some(String::new()),
        reason: Some(String::new()),
        resize: Some(String::new()),
        resource_claim_statuses: Some(vec![]),
        start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default())),
    };
    let json = serde_json::to_value(status).unwrap();
    json.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn conditions_policy_covers_every_status_field() {
    let policy = document(CONDITIONS_POLICY, "ValidatingAdmissionPolicy", None);
    let fields_check = policy["spec"]["validations"][1]["expression"].as_str().unwrap();
    for field in pod_status_fields() {
        if field == "conditions" {
            continue;
        }
        assert!(
            fields_check.contains(&format!("has(object.status.{field})")),
            "the conditions policy does not guard status.{field}"
        );
        // And the guard works: a change of just that field is refused.
        let plegd = service_account_user();
        let request = status_write(&plegd, Some("n1"), "n1", |s| s[field.as_str()] = json!("changed"));
        assert!(admit(CONDITIONS_POLICY, &request).is_err(), "status.{field} changed");
    }
}

#[test]
fn policies_follow_plegds_service_account() {
    let user = service_account_user();
    for manifest in [NODE_POLICY, CONDITIONS_POLICY] {
        let policy = document(manifest, "ValidatingAdmissionPolicy", None);
        for condition in policy["spec"]["matchConditions"].as_array().unwrap() {
            let expression = condition["expression"].as_str().unwrap();
            let vars = |username: &str| BTreeMap::from([("request", json!({"userInfo": {"username": username}}))]);
            assert_eq!(
                must_be_bool(expression, &vars(&user)),
                Ok(true),
                "{manifest}: the policy must apply to {user}, plegd's service account in rbac.yaml and the DaemonSet"
            );
            assert_eq!(
                must_be_bool(expression, &vars("system:node:n1")),
                Ok(false),
                "{manifest}"
            );
        }
    }
}
