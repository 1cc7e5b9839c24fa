//! deploy/admission-policy.yaml and admission-policy-conditions.yaml loaded into the test apiserver
//! built from k8s.io/apiserver 1.36 (support/apiserver.rs), as API objects, and enforced by its own
//! ValidatingAdmissionPolicy plugin (its CEL, its variable bindings) on real requests from plegd's
//! service account with its node's token, the kubelet and an administrator. The field list of
//! the conditions policy is checked against PodStatus as the server's OpenAPI (Kubernetes 1.36)
//! describes it, so that a field added by a newer API fails this test until the policy guards it.

mod support;

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::apiserver::{Apiserver, Identity};
use support::manifests::{document, documents};

const NODE_POLICY: &str = "deploy/admission-policy.yaml";
const CONDITIONS_POLICY: &str = "deploy/admission-policy-conditions.yaml";

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
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x"}]},
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
        // Fields of 1.34-1.36 the policy of 1.33 let through.
        json!({"allocatedResources": {"cpu": "1"}}),
        json!({"resources": {"requests": {"cpu": "1"}}}),
        json!({"extendedResourceClaimStatus": {"resourceClaimName": "claim", "requestMappings": [{"containerName": "app", "resourceName": "example.com/gpu", "requestName": "r"}]}}),
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
        "{CONDITIONS_POLICY} does not guard status fields of Kubernetes 1.36: {unguarded:?}"
    );
}
