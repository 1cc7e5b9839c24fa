//! deploy/'s manifests as the tests read them: each YAML document as JSON, an overlay as kustomize
//! renders it, the RBAC rules a file grants, and the service account plegd runs as.

use std::path::PathBuf;

use serde_json::Value;

/// deploy/'s files, where the kustomize layout keeps them.
pub const RBAC_READ: &str = "deploy/base/rbac.yaml";
pub const RBAC_STATUS: &str = "deploy/components/status-writes/rbac-status.yaml";
pub const RBAC_FULL_MODE: &str = "deploy/full/rbac-full-mode.yaml";
pub const RBAC_EVENTS: &str = "deploy/components/events/rbac-events.yaml";
pub const NODE_POLICY: &str = "deploy/components/admission-policy/admission-policy.yaml";
pub const CONDITIONS_POLICY: &str = "deploy/components/conditions-policy/admission-policy-conditions.yaml";
pub const DAEMONSET: &str = "deploy/base/daemonset.yaml";
pub const DASHBOARD: &str = "deploy/components/grafana-dashboard/grafana-dashboard.json";
/// Every RBAC file of deploy/.
pub const RBAC_FILES: [&str; 4] = [RBAC_READ, RBAC_STATUS, RBAC_FULL_MODE, RBAC_EVENTS];
/// The overlays, one per status mode.
pub const OVERLAYS: [&str; 3] = ["conditions", "full", "shadow"];
/// The optional components an operator adds to an overlay (the admission policies and the
/// network policy are in the overlays already).
pub const OPTIONAL_COMPONENTS: [&str; 6] = [
    "events",
    "pod-monitor",
    "grafana-dashboard",
    "alerts",
    "metrics-certificate",
    "readiness-gate",
];

/// An install as `kubectl apply -k` makes it: overlay `deploy/<overlay>` with `components` (names
/// under deploy/components) added, rendered by kustomize (kubectl 1.37's, built by
/// tests/cluster/cluster.sh). Returns the rendered YAML, written to a
/// file in `dir`, and its documents.
pub fn render(overlay: &str, components: &[&str], dir: &std::path::Path) -> (PathBuf, Vec<Value>) {
    let root = kustomization(
        &dir.join(format!("install-{overlay}-{}", components.join("-"))),
        overlay,
        components,
    );
    let out = std::process::Command::new(kubectl())
        .arg("kustomize")
        .arg(&root)
        .output()
        .expect("run kubectl kustomize");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kustomize deploy/{overlay} + {components:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = root.join("rendered.yaml");
    std::fs::write(&rendered, &text).unwrap();
    let documents = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("rendered {overlay}: {e}"));
    (rendered, documents)
}

/// kubectl v1.37.2, as tests/cluster/cluster.sh builds it (once per version, cached).
pub fn kubectl() -> PathBuf {
    built("tests/cluster/cluster.sh", "bin", "kubectl", &[]).join("kubectl")
}

/// The tested Helm, v4.3.2, as tests/helm/helm.sh builds it (once per version, cached).
pub fn helm() -> PathBuf {
    built("tests/helm/helm.sh", "install", "helm", &[])
}

/// The Helm 3 that is still tested beside it while Helm 3 gets security fixes: v3.21.4.
pub fn helm_3() -> PathBuf {
    built(
        "tests/helm/helm.sh",
        "install",
        "helm",
        &[("PLEGD_HELM_VERSION", HELM_3)],
    )
}

/// The release of [`helm_3`].
pub const HELM_3: &str = "v3.21.4";

/// The path a build script of the repository prints last, once it has built `what`.
fn built(script: &str, command: &str, what: &str, env: &[(&str, &str)]) -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(path(script))
        .arg(command)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {script} {command}: {e}"));
    assert!(
        out.status.success(),
        "building {what} failed: run `bash {script} {command}` to see why"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A kustomization in directory `root` (made if missing) that installs deploy/`overlay` with
/// `components` (names under deploy/components), as a user's own overlay would; returns `root`,
/// canonical.
pub fn kustomization(root: &std::path::Path, overlay: &str, components: &[&str]) -> PathBuf {
    std::fs::create_dir_all(root).unwrap();
    let root = root.canonicalize().unwrap();
    // kustomize takes no absolute path: the repository's directories, relative to `root`.
    let repo = std::path::Path::new(&path("")).canonicalize().unwrap();
    let up = "../".repeat(root.components().count() - 1);
    let from_root = |relative: &str| format!("{up}{}/{relative}", repo.display().to_string().trim_start_matches('/'));
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n",
        from_root(&format!("deploy/{overlay}"))
    );
    if !components.is_empty() {
        text.push_str("components:\n");
        for component in components {
            text.push_str(&format!(
                "  - {}\n",
                from_root(&format!("deploy/components/{component}"))
            ));
        }
    }
    std::fs::write(root.join("kustomization.yaml"), text).unwrap();
    root
}

/// Every file under the repository's directories `relative` (e.g. "deploy"), at any depth.
pub fn files_under(relative: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = relative.iter().map(|d| PathBuf::from(path(d))).collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
        {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files
}

/// `relative` (e.g. "deploy/base/rbac.yaml") under the repository.
pub fn path(relative: &str) -> String {
    format!("{}/{relative}", crate::REPO)
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
    let docs: Vec<(String, Vec<Value>)> = manifests.iter().map(|m| (m.to_string(), documents(m))).collect();
    granted_by(&docs)
}

/// What the ClusterRoles of each named set of documents grant (see [`granted`]).
pub fn granted_by(sets: &[(String, Vec<Value>)]) -> Vec<String> {
    let account = service_account();
    let mut out = Vec::new();
    for (manifest, docs) in sets {
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

/// plegd's service account (namespace, name) as the base's rbac.yaml defines it; the DaemonSet must run as it.
pub fn service_account() -> (String, String) {
    let account = document(RBAC_READ, "ServiceAccount", None);
    let namespace = account["metadata"]["namespace"].as_str().unwrap().to_owned();
    let name = account["metadata"]["name"].as_str().unwrap().to_owned();
    let ds = document(DAEMONSET, "DaemonSet", None);
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
