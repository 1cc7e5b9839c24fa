//! deploy/'s admission policies (components/admission-policy, components/conditions-policy) loaded into
//! kube-apiserver 1.37 (support/apiserver.rs), as API objects, and enforced by its own
//! ValidatingAdmissionPolicy plugin (its CEL, its variable bindings) on real requests from plegd's
//! service account with its node's token (TokenRequest), a kubelet's stand-in and an administrator.
//! The field list of the conditions policy is checked against PodStatus as the server's OpenAPI
//! (Kubernetes 1.37) describes it, so that a field added by a newer API fails this test until the
//! policy guards it.

use plegd_test_support as support;

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::apiserver::{Apiserver, Identity, PLEGD_USER};
use support::manifests::{CONDITIONS_POLICY, NODE_POLICY, document, documents, service_account_user};

/// Create every object of `manifest` as the administrator.
async fn apply(api: &Apiserver, manifest: &str) {
    for doc in documents(manifest) {
        let kind = doc["kind"].as_str().unwrap().to_owned();
        let plural = match kind.as_str() {
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
            "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
            other => panic!("{manifest}: unexpected {other}"),
        }
        .to_owned();
        let resource = ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind,
            plural,
        };
        let objects: Api<DynamicObject> = Api::all_with(api.client(), &resource);
        let object: DynamicObject = serde_json::from_value(doc).unwrap();
        objects
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{manifest}: {e}"));
    }
}

/// A strategic merge patch of the pod's status as `identity`: Ok, or Err((code, message)).
async fn patch_status(api: &Apiserver, identity: &Identity, name: &str, status: Value) -> Result<(), (u16, String)> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(api.client_as(identity).await, "default");
    match pods
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": status})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message.clone())),
        Err(e) => panic!("PATCH {name}/status: {e}"),
    }
}

/// The properties of PodStatus the server serves, from its OpenAPI v3 document.
async fn served_pod_status_fields(api: &Apiserver) -> Vec<String> {
    let text = api
        .client()
        .request_text(http::Request::get("/openapi/v3/api/v1").body(Vec::new()).unwrap())
        .await
        .expect("OpenAPI v3 of /api/v1");
    let doc: Value = serde_json::from_str(&text).unwrap();
    let properties = doc["components"]["schemas"]["io.k8s.api.core.v1.PodStatus"]["properties"]
        .as_object()
        .expect("PodStatus in the OpenAPI document");
    properties.keys().cloned().collect()
}

/// The policies are enforced only once the plugin has read them: wait until a request they deny
/// is denied.
async fn wait_enforced(api: &Apiserver, name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = patch_status(api, &Identity::Plegd("n2".into()), name, json!({"message": "probe"})).await;
        if matches!(r, Err((403, _))) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the policies were not enforced: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_enforces_plegds_admission_policies() {
    let api = Apiserver::start().await;
    apply(&api, NODE_POLICY).await;
    apply(&api, CONDITIONS_POLICY).await;
    api.create_pod(json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x",
            "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "hostIP": "198.51.100.7", "hostIPs": [{"ip": "198.51.100.7"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}}]}}))
        .await;
    wait_enforced(&api, "web").await;
    let plegd = Identity::Plegd("n1".into());
    let own = |status: &str| json!({"conditions": [{"type": "plegd.io/ContainersRunning", "status": status}]});

    // plegd on the pod's node: its own condition, added and changed.
    assert_eq!(patch_status(&api, &plegd, "web", own("True")).await, Ok(()));
    assert_eq!(patch_status(&api, &plegd, "web", own("False")).await, Ok(()));
    // plegd of another node: nothing.
    let other = patch_status(&api, &Identity::Plegd("n2".into()), "web", own("True")).await;
    assert!(
        matches!(&other, Err((403, m)) if m.contains("plegd-own-node-only")),
        "{other:?}"
    );
    // The kubelet is not plegd: the policies leave it alone.
    assert_eq!(
        patch_status(&api, &Identity::Kubelet, "web", json!({"phase": "Succeeded"})).await,
        Ok(())
    );
    // Anything the kubelet owns, from plegd in conditions mode: refused by the conditions policy.
    let owned = [
        json!({"conditions": [{"type": "Ready", "status": "False"}]}),
        json!({"phase": "Failed"}),
        json!({"message": "plegd says so"}),
        json!({"containerStatuses": [{"name": "app", "ready": false, "restartCount": 1, "image": "x", "imageID": "", "state": {"running": {}}}]}),
        // Fields of 1.34-1.37 the policy of 1.33 let through (volumeHealth of 1.37 is not here: its
        // feature gate is off by default, and the apiserver drops it from any write).
        json!({"allocatedResources": {"cpu": "1"}}),
        json!({"resources": {"requests": {"cpu": "1"}}}),
        // (The resource claim statuses are refused in every mode by plegd-pod-status-only: below,
        // in the comparison with a kubelet.)
    ];
    for status in owned {
        let r = patch_status(&api, &plegd, "web", status.clone()).await;
        assert!(
            matches!(&r, Err((403, m)) if m.contains("plegd-conditions-only")),
            "{status} from plegd must be refused by the conditions policy: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conditions_policy_guards_every_status_field_the_apiserver_serves() {
    let api = Apiserver::start().await;
    let policy = document(CONDITIONS_POLICY, "ValidatingAdmissionPolicy", None);
    let fields_check = policy["spec"]["validations"][1]["expression"].as_str().unwrap();
    let fields = served_pod_status_fields(&api).await;
    assert!(fields.len() > 15, "{fields:?}");
    let unguarded: Vec<&String> = fields
        .iter()
        .filter(|f| *f != "conditions" && !fields_check.contains(&format!("has(object.status.{f})")))
        .collect();
    assert!(
        unguarded.is_empty(),
        "{CONDITIONS_POLICY} does not guard status fields of Kubernetes 1.37: {unguarded:?}"
    );
}

/// A request as `identity` (DELETE of a pod or a PATCH of a pod itself): Ok, or Err((code, message)).
async fn pod_request(api: &Apiserver, identity: &Identity, name: &str, delete: bool) -> Result<(), (u16, String)> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(api.client_as(identity).await, "default");
    let answer = if delete {
        pods.delete(name, &kube::api::DeleteParams::default()).await.map(|_| ())
    } else {
        let labels = json!({"metadata": {"labels": {"plegd": "was-here"}}});
        pods.patch(name, &PatchParams::default(), &Patch::Strategic(labels))
            .await
            .map(|_| ())
    };
    match answer {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message.clone())),
        Err(e) => panic!("{name}: {e}"),
    }
}

fn refused_by(answer: &Result<(), (u16, String)>, policy: &str) -> bool {
    matches!(answer, Err((403, m)) if m.contains(policy))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policies_hold_at_their_edges() {
    let api = Apiserver::start().await;
    apply(&api, NODE_POLICY).await;
    apply(&api, CONDITIONS_POLICY).await;
    let status = json!({"phase": "Running", "hostIP": "198.51.100.7", "hostIPs": [{"ip": "198.51.100.7"}],
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "plegd.io/ContainersRunning", "status": "True"}]});
    for (name, node) in [
        ("web", Some("n1")),
        ("pending", None),
        ("elsewhere", Some("n2")),
        ("mine", Some("n1")),
    ] {
        let mut pod = json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "x"}]}, "status": status.clone()});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        api.create_pod(pod).await;
    }
    wait_enforced(&api, "web").await;
    let plegd = Identity::Plegd("n1".into());
    let own = |s: &str| json!({"conditions": [{"type": "plegd.io/ContainersRunning", "status": s}]});

    // A token bound to no node is refused, even for a pod of a node.
    let unbound = patch_status(&api, &Identity::PlegdWithoutNodeClaim, "web", own("False")).await;
    assert!(refused_by(&unbound, "plegd-own-node-only"), "{unbound:?}");
    // A pod not bound to any node yet is no node's.
    let pending = patch_status(&api, &plegd, "pending", own("False")).await;
    assert!(refused_by(&pending, "plegd-own-node-only"), "{pending:?}");

    // Its own condition: removed, and added again.
    let removed = json!({"conditions": [{"type": "plegd.io/ContainersRunning", "$patch": "delete"}]});
    assert_eq!(patch_status(&api, &plegd, "web", removed).await, Ok(()));
    assert_eq!(patch_status(&api, &plegd, "web", own("True")).await, Ok(()));
    // A field the kubelet wrote, removed by plegd: refused in conditions mode.
    let gone = patch_status(&api, &plegd, "web", json!({"hostIP": null, "hostIPs": null})).await;
    assert!(refused_by(&gone, "plegd-conditions-only"), "{gone:?}");

    // Deletes (full mode's RBAC is loaded): a pod of its own node, never another node's.
    let elsewhere = pod_request(&api, &plegd, "elsewhere", true).await;
    assert!(refused_by(&elsewhere, "plegd-own-node-only"), "{elsewhere:?}");
    assert_eq!(pod_request(&api, &plegd, "mine", true).await, Ok(()));
    // The pod itself (its spec, its labels) is not plegd's to change at all: RBAC refuses.
    let spec = pod_request(&api, &plegd, "web", false).await;
    assert!(
        matches!(&spec, Err((403, m)) if m.contains("cannot patch resource \"pods\"")),
        "{spec:?}"
    );
    assert!(api.pod("default", "elsewhere").await.is_some());
}

/// The tests above speak as the user the manifests give plegd (deploy/base/rbac.yaml's ServiceAccount,
/// which the DaemonSet runs as): a rename in one place only fails here, and the policies, whose
/// matchConditions name that user, are then shown to apply to it (or not) by the server itself.
#[test]
fn the_tests_speak_as_plegds_service_account() {
    assert_eq!(PLEGD_USER, service_account_user());
    for manifest in [NODE_POLICY, CONDITIONS_POLICY] {
        let policies: Vec<Value> = documents(manifest)
            .into_iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .collect();
        assert!(!policies.is_empty(), "{manifest}");
        for policy in policies {
            let conditions = policy["spec"]["matchConditions"].to_string();
            assert!(
                conditions.contains(PLEGD_USER),
                "{manifest} must match {PLEGD_USER}: {conditions}"
            );
        }
    }
}

/// What became of one change sent through `pods/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Refused (403), with the name of what refused it.
    Refused(String),
    /// Accepted and stored.
    Stored,
    /// Accepted, and the stored pod has the field as before (the apiserver resets or drops it).
    Ignored,
}

impl Outcome {
    /// Whether the change took effect.
    fn changed(&self) -> bool {
        *self == Outcome::Stored
    }
}

/// One change a writer may try through `pods/status`: the patch, and where in the pod it lands.
struct Change {
    what: &'static str,
    patch: Value,
    pointer: &'static str,
}

/// Every change the comparison sends: the pod's metadata, the status fields NodeRestriction keeps
/// from nodes, and the kubelet's own status fields.
fn changes() -> Vec<Change> {
    let claim = json!({"resourceClaimName": "claim-1", "containers": ["app"]});
    vec![
        Change {
            what: "metadata.labels (a new label)",
            patch: json!({"metadata": {"labels": {"tier": "other"}}}),
            pointer: "/metadata/labels/tier",
        },
        Change {
            what: "metadata.labels (a label changed)",
            patch: json!({"metadata": {"labels": {"app": "other"}}}),
            pointer: "/metadata/labels/app",
        },
        Change {
            what: "metadata.labels (a label removed)",
            patch: json!({"metadata": {"labels": {"app": null}}}),
            pointer: "/metadata/labels/app",
        },
        Change {
            what: "metadata.annotations",
            patch: json!({"metadata": {"annotations": {"example.com/x": "y"}}}),
            pointer: "/metadata/annotations/example.com~1x",
        },
        Change {
            what: "metadata.finalizers",
            patch: json!({"metadata": {"finalizers": ["example.com/pin"]}}),
            pointer: "/metadata/finalizers",
        },
        Change {
            what: "metadata.ownerReferences",
            patch: json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "00000000-0000-0000-0000-000000000001"}]}}),
            pointer: "/metadata/ownerReferences",
        },
        Change {
            what: "status.resourceClaimStatuses",
            patch: json!({"status": {"resourceClaimStatuses": [{"name": "claim", "resourceClaimName": "other-claim"}]}}),
            pointer: "/status/resourceClaimStatuses",
        },
        Change {
            what: "status.extendedResourceClaimStatus",
            patch: json!({"status": {"extendedResourceClaimStatus": {"resourceClaimName": "claim-x", "requestMappings": [{"containerName": "app", "resourceName": "example.com/gpu", "requestName": "r"}]}}}),
            pointer: "/status/extendedResourceClaimStatus",
        },
        Change {
            what: "status.nodeAllocatableResourceClaimStatuses",
            patch: json!({"status": {"nodeAllocatableResourceClaimStatuses": [claim]}}),
            pointer: "/status/nodeAllocatableResourceClaimStatuses",
        },
        Change {
            what: "status.conditions (plegd.io/ContainersRunning)",
            patch: json!({"status": {"conditions": [{"type": "plegd.io/ContainersRunning", "status": "False"}]}}),
            pointer: "/status/conditions/1",
        },
        Change {
            what: "status.conditions (Ready)",
            patch: json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            pointer: "/status/conditions/0/status",
        },
        Change {
            what: "status.phase",
            patch: json!({"status": {"phase": "Failed"}}),
            pointer: "/status/phase",
        },
        Change {
            what: "status.message",
            patch: json!({"status": {"message": "written"}}),
            pointer: "/status/message",
        },
    ]
}

/// A pod of node n1 with something in each field a change touches.
fn comparison_pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}, "annotations": {"note": "a"}},
        "spec": {"nodeName": "n1",
            "resourceClaims": [{"name": "claim", "resourceClaimTemplateName": "template"}],
            "containers": [{"name": "app", "image": "x",
                "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "hostIP": "198.51.100.7", "hostIPs": [{"ip": "198.51.100.7"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "", "state": {"running": {}}}]}})
}

/// Send `change` as `identity` to a fresh pod `name` and say what became of it.
async fn try_change(api: &Apiserver, identity: &Identity, name: &str, change: &Change) -> Outcome {
    api.create_pod(comparison_pod(name)).await;
    let before = api.pod("default", name).await.expect("the pod just made");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(api.client_as(identity).await, "default");
    let answer = pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(change.patch.clone()))
        .await;
    let after = api.pod("default", name).await.expect("the pod");
    match answer {
        Ok(_) if before.pointer(change.pointer) == after.pointer(change.pointer) => Outcome::Ignored,
        Ok(_) => Outcome::Stored,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let by = ["plegd-own-node-only", "plegd-pod-status-only", "plegd-conditions-only"]
                .into_iter()
                .find(|by| s.message.contains(by))
                .or_else(|| s.message.contains("cannot patch resource").then_some("RBAC"))
                // NodeRestriction's own words: `node "n1" cannot update ...`.
                .or_else(|| s.message.contains("is forbidden: node \"").then_some("NodeRestriction"))
                .unwrap_or_else(|| panic!("{}: refused by what? {}", change.what, s.message));
            assert_eq!(before, after, "{}: refused, yet the pod changed", change.what);
            Outcome::Refused(by.to_owned())
        }
        Err(e) => panic!("{} as {identity:?}: {e}", change.what),
    }
}

/// The objects of an install of `deploy/<mode>` that decide what plegd may do: its namespace,
/// service account, RBAC and admission policies, as kustomize renders the overlay.
fn install_rules(mode: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let (_, documents) = support::manifests::render(mode, &[], dir.path());
    let kinds = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    documents
        .into_iter()
        .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
        .collect()
}

/// plegd's node-bound token may change through `pods/status` nothing that a kubelet's own
/// credentials (user `system:node:n1`, judged by the Node authorizer and NodeRestriction) may not,
/// in each mode as its overlay installs it (RBAC and admission policies from kustomize). Metadata
/// and resource claim statuses never change. Prints the table SECURITY.md gives.
async fn plegd_may_change_no_more_than_a_kubelet(mode: &str) {
    let api = Apiserver::start_with(support::apiserver::Options {
        rbac: vec!["tests/support/rbac-kubelet.yaml".into()],
        ..Default::default()
    })
    .await;
    let rules = install_rules(mode);
    let policies: Vec<String> = rules
        .iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    api.apply(&rules);
    let plegd = Identity::Plegd("n1".into());
    let node = Identity::Node("n1".into());
    let all = changes();
    // The policies are enforced once the plugin has read them: each refuses its probe by name.
    let probes: Vec<(&str, &Change)> = [
        ("plegd-own-node-only", "status.conditions (plegd.io/ContainersRunning)"),
        ("plegd-pod-status-only", "metadata.labels (a new label)"),
        ("plegd-conditions-only", "status.message"),
    ]
    .into_iter()
    .filter(|(policy, _)| policies.iter().any(|p| p == policy))
    .map(|(policy, what)| (policy, all.iter().find(|c| c.what == what).unwrap()))
    .collect();
    for (i, (policy, change)) in probes.iter().enumerate() {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let who = if *policy == "plegd-own-node-only" {
            Identity::Plegd("n2".into())
        } else {
            plegd.clone()
        };
        for attempt in 0.. {
            let outcome = try_change(&api, &who, &format!("probe-{i}-{attempt}"), change).await;
            if outcome == Outcome::Refused((*policy).to_owned()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "deploy/{mode}: {policy} was not enforced in 30 s: {outcome:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let mut table = format!(
        "deploy/{mode}: | change through pods/status | a kubelet (system:node:n1) | plegd (node-bound token) |\n"
    );
    for (i, change) in all.iter().enumerate() {
        let kubelet = try_change(&api, &node, &format!("node-{i}"), change).await;
        let ours = try_change(&api, &plegd, &format!("plegd-{i}"), change).await;
        table.push_str(&format!("| {} | {kubelet:?} | {ours:?} |\n", change.what));
        assert!(
            !ours.changed() || kubelet.changed(),
            "deploy/{mode}: plegd changed {} where a kubelet may not ({kubelet:?})",
            change.what
        );
        if change.pointer.starts_with("/metadata") || change.what.contains("ResourceClaim") {
            assert!(!ours.changed(), "deploy/{mode}: plegd changed {}", change.what);
        }
        if mode == "shadow" {
            assert_eq!(ours, Outcome::Refused("RBAC".into()), "{}", change.what);
        }
        if change.what.contains("plegd.io/ContainersRunning") && mode != "shadow" {
            assert_eq!(ours, Outcome::Stored, "deploy/{mode}: plegd's own condition");
        }
    }
    eprintln!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_conditions_mode_plegd_may_change_no_more_than_a_kubelet() {
    plegd_may_change_no_more_than_a_kubelet("conditions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_full_mode_plegd_may_change_no_more_than_a_kubelet() {
    plegd_may_change_no_more_than_a_kubelet("full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_shadow_mode_plegd_may_change_nothing() {
    plegd_may_change_no_more_than_a_kubelet("shadow").await;
}
