//! deploy/: every manifest validates offline against the Kubernetes 1.33 schemas (strict), and
//! carries what running plegd safely needs: minimal RBAC, the node name from the downward API, the
//! CRI socket by hostPath, no capabilities, a read-only root file system. The kind recipe parses.

use std::process::Command;

use manifests::{documents, granted, path};

#[path = "support/manifests.rs"]
mod manifests;

const MANIFESTS: [&str; 7] = [
    "deploy/rbac.yaml",
    "deploy/rbac-status.yaml",
    "deploy/rbac-full-mode.yaml",
    "deploy/rbac-events.yaml",
    "deploy/admission-policy.yaml",
    "deploy/admission-policy-conditions.yaml",
    "deploy/daemonset.yaml",
];

#[test]
fn manifests_validate_against_kubernetes_schemas() {
    let validator = Command::new("kubernetes-validate").arg("--version").output();
    if !validator.is_ok_and(|o| o.status.success()) {
        if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
            panic!("kubernetes-validate is missing (tests/run.sh installs it from PyPI)");
        }
        eprintln!("!!!!!!!! kubernetes-validate not found: manifest validation is SKIPPED !!!!!!!!");
        return;
    }
    for manifest in MANIFESTS {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", "1.33.0"])
            .arg(path(manifest))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("passed") && !text.contains("ERROR"),
            "{manifest}: {text}"
        );
    }
}

#[test]
fn manifests_keep_plegd_least_privileged() {
    let ds = documents("deploy/daemonset.yaml");
    // One file per need; tests/rbac.rs shows each mode uses exactly its files' rules.
    assert_eq!(granted(&["deploy/rbac.yaml"]), ["/pods:list", "/pods:watch"]);
    assert_eq!(granted(&["deploy/rbac-status.yaml"]), ["/pods/status:patch"]);
    assert_eq!(granted(&["deploy/rbac-full-mode.yaml"]), ["/pods:delete"]);
    assert_eq!(
        granted(&["deploy/rbac-events.yaml"]),
        ["events.k8s.io/events:create", "events.k8s.io/events:patch"]
    );

    let ds = &ds[0];
    let spec = &ds["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["tolerations"][0]["operator"], "Exists");
    let env = c["env"].as_array().unwrap();
    let node_name = env.iter().find(|e| e["name"] == "NODE_NAME").unwrap();
    assert_eq!(node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    assert!(c["resources"]["limits"]["memory"].is_string() && c["resources"]["requests"]["cpu"].is_string());
    // The runtime's socket directory, read-only: a restarted runtime's new socket shows up in it.
    let socket_dir = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cri-socket-dir")
        .unwrap();
    assert_eq!(socket_dir["hostPath"]["type"], "Directory");
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "cri-socket-dir")
        .unwrap();
    assert_eq!(mount["readOnly"], true);
    let socket_arg = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--cri-socket="))
        .next()
        .unwrap();
    assert_eq!(
        std::path::Path::new(socket_arg).parent().unwrap().to_str(),
        mount["mountPath"].as_str(),
        "--cri-socket is inside the mounted directory"
    );
    // Without --emit-events the DaemonSet needs no events RBAC.
    assert!(!c["args"].as_array().unwrap().iter().any(|a| a == "--emit-events"));
    assert!(c["livenessProbe"]["httpGet"]["path"] == "/healthz" && c["readinessProbe"]["httpGet"]["path"] == "/readyz");
}

#[test]
fn kind_recipe_parses() {
    let out = Command::new("bash")
        .arg("-n")
        .arg(path("deploy/kind/e2e.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The kind recipe's node image: pinned by version and digest, and new enough for what the
/// admission policy needs (ValidatingAdmissionPolicy GA in 1.30; the node-name claim of service
/// account tokens GA in 1.32).
#[test]
fn kind_nodes_are_pinned_to_a_version_that_runs_the_policy() {
    let cluster = &documents("deploy/kind/cluster.yaml")[0];
    let nodes = cluster["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 2, "a control plane and a worker");
    for node in nodes {
        let image = node["image"].as_str().expect("every node names its image");
        let (reference, digest) = image.split_once("@sha256:").expect("pinned by digest");
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{image}"
        );
        let version = reference
            .strip_prefix("kindest/node:v")
            .expect("a kindest/node version tag");
        let minor: u32 = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .expect("v1.MINOR.PATCH");
        assert!(minor >= 32, "{image}: the node-name claim needs Kubernetes >= 1.32");
    }
}

/// The image build: base images by digest, and a .dockerignore that keeps the build context to
/// the sources (no target/, no .git, no fuzz corpora).
#[test]
fn image_build_is_pinned_and_small() {
    let containerfile = std::fs::read_to_string(path("deploy/Containerfile")).unwrap();
    let froms: Vec<&str> = containerfile.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
    for from in froms {
        let image = from.split_whitespace().nth(1).unwrap();
        let digest = image
            .split_once("@sha256:")
            .map(|(_, d)| d)
            .unwrap_or_else(|| panic!("{from}: by digest"));
        assert!(
            digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
            "{from}"
        );
    }
    let ignore = std::fs::read_to_string(path(".dockerignore")).expect(".dockerignore");
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in [
        "target",
        ".git",
        "tests/fuzz/target",
        "tests/fuzz/corpus",
        "tests/fuzz/artifacts",
    ] {
        assert!(
            ignored
                .iter()
                .any(|i| i.trim_start_matches('/').trim_end_matches('/') == needed),
            ".dockerignore leaves out {needed}"
        );
    }
    // What the build needs stays in.
    for kept in ["Cargo.toml", "Cargo.lock", "src", "proto", "build.rs"] {
        assert!(
            !ignored.iter().any(|i| i.trim_matches('/') == kept),
            ".dockerignore keeps {kept}"
        );
    }
}
