//! deploy/'s manifests as the tests read them: each YAML document as JSON, the RBAC rules a file
//! grants, and the service account plegd runs as.
#![allow(dead_code)]

use serde_json::Value;

/// `relative` (e.g. "deploy/rbac.yaml") under the repository.
pub fn path(relative: &str) -> String {
    format!("{}/{relative}", env!("CARGO_MANIFEST_DIR"))
}

/// Each YAML document of a manifest, as JSON.
pub fn documents(manifest: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path(manifest)).unwrap_or_else(|e| panic!("{manifest}: {e}"));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{manifest}: {e}"))
}

/// The one document of `kind` (and, when given, `name`) in a manifest.
pub fn document(manifest: &str, kind: &str, name: Option<&str>) -> Value {
    let mut found: Vec<Value> = documents(manifest)
        .into_iter()
        .filter(|d| d["kind"] == kind && name.is_none_or(|n| d["metadata"]["name"] == n))
        .collect();
    assert_eq!(found.len(), 1, "{manifest}: one {kind} {name:?}");
    found.remove(0)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// What the ClusterRoles of `manifests` grant, as sorted `group/resource:verb` ("" is the core
/// group), after checking that each role is bound to plegd's service account and nothing else.
pub fn granted(manifests: &[&str]) -> Vec<String> {
    let account = service_account();
    let mut out = Vec::new();
    for manifest in manifests {
        let docs = documents(manifest);
        for role in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
            let name = role["metadata"]["name"].as_str().unwrap();
            let bindings: Vec<&Value> = docs
                .iter()
                .filter(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == name)
                .collect();
            assert_eq!(bindings.len(), 1, "{manifest}: ClusterRole {name} has one binding");
            let subjects = bindings[0]["subjects"].as_array().unwrap();
            assert_eq!(subjects.len(), 1, "{manifest}: {name} is bound to one subject");
            let subject = (
                subjects[0]["namespace"].as_str().unwrap_or_default().to_owned(),
                subjects[0]["name"].as_str().unwrap_or_default().to_owned(),
            );
            assert_eq!(subjects[0]["kind"], "ServiceAccount", "{manifest}: {name}");
            assert_eq!(
                subject, account,
                "{manifest}: {name} is bound to plegd's service account"
            );
            for rule in role["rules"].as_array().unwrap() {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            out.push(format!("{group}/{resource}:{verb}"));
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// plegd's service account (namespace, name) as rbac.yaml defines it; the DaemonSet must run as it.
pub fn service_account() -> (String, String) {
    let account = document("deploy/rbac.yaml", "ServiceAccount", None);
    let namespace = account["metadata"]["namespace"].as_str().unwrap().to_owned();
    let name = account["metadata"]["name"].as_str().unwrap().to_owned();
    let ds = document("deploy/daemonset.yaml", "DaemonSet", None);
    assert_eq!(
        ds["metadata"]["namespace"],
        namespace.as_str(),
        "the DaemonSet's namespace"
    );
    assert_eq!(
        ds["spec"]["template"]["spec"]["serviceAccountName"],
        name.as_str(),
        "the DaemonSet's service account"
    );
    (namespace, name)
}

/// The user name the apiserver gives plegd's service account tokens.
pub fn service_account_user() -> String {
    let (namespace, name) = service_account();
    format!("system:serviceaccount:{namespace}:{name}")
}
