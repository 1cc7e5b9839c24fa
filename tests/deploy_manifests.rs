//! deploy/: every install (each overlay, with every optional component) renders with kustomize and
//! validates offline against the Kubernetes 1.36 schemas (strict: unknown fields refused), grants
//! what its mode needs and no more, and carries what running plegd safely needs: the node name
//! from the downward API, the CRI socket by hostPath, a non-root user, no capabilities, a read-only root file
//! system, system-node-critical with its tolerations. The kind recipe parses.

use std::process::Command;

use manifests::{
    DASHBOARD, OPTIONAL_COMPONENTS, OVERLAYS, RBAC_EVENTS, RBAC_FULL_MODE, RBAC_READ, RBAC_STATUS, documents, granted,
    granted_by, path, render,
};
use serde_json::{Value, json};

use plegd_test_support::manifests;

/// Every overlay with every optional component, rendered.
fn installs(dir: &std::path::Path) -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    for overlay in OVERLAYS {
        out.push((format!("deploy/{overlay}"), render(overlay, &[], dir).1));
        out.push((
            format!("deploy/{overlay} + {OPTIONAL_COMPONENTS:?}"),
            render(overlay, &OPTIONAL_COMPONENTS, dir).1,
        ));
    }
    out
}

fn kubernetes_validate() -> bool {
    let validator = Command::new("kubernetes-validate").arg("--version").output();
    if validator.is_ok_and(|o| o.status.success()) {
        return true;
    }
    if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
        panic!("kubernetes-validate is missing (tests/run.sh installs it from PyPI)");
    }
    eprintln!("!!!!!!!! kubernetes-validate not found: manifest validation is SKIPPED !!!!!!!!");
    false
}

/// The fields a PodMonitor of monitoring.coreos.com/v1 may have where deploy/ sets them (the
/// operator's CRD is not among the schemas; this is its API for these fields).
fn check_pod_monitor(monitor: &Value) {
    let keys = |v: &Value| -> Vec<String> { v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default() };
    let allowed = |v: &Value, fields: &[&str], at: &str| {
        for key in keys(v) {
            assert!(fields.contains(&key.as_str()), "PodMonitor {at}.{key} is not a field");
        }
    };
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    allowed(monitor, &["apiVersion", "kind", "metadata", "spec"], "");
    allowed(
        &monitor["spec"],
        &["selector", "namespaceSelector", "scrapeClass", "podMetricsEndpoints"],
        "spec",
    );
    // Its credentials come from the scrape class, a token file of Prometheus' own: no Secret.
    assert_eq!(monitor["spec"]["scrapeClass"], "plegd");
    for endpoint in monitor["spec"]["podMetricsEndpoints"].as_array().unwrap() {
        allowed(
            endpoint,
            &["port", "path", "scheme", "interval", "relabelings"],
            "spec.podMetricsEndpoints[]",
        );
        assert_eq!(endpoint["scheme"], "https", "a token is sent over TLS alone");
        for relabeling in endpoint["relabelings"].as_array().into_iter().flatten() {
            allowed(relabeling, &["sourceLabels", "targetLabel"], "relabelings[]");
        }
    }
}

#[test]
fn every_install_validates_against_kubernetes_1_36() {
    if !kubernetes_validate() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, install) in installs(dir.path()) {
        // The Prometheus Operator's kinds are not among Kubernetes' schemas: the PodMonitor is
        // checked here, the PrometheusRule by tests/prometheus.rs (its spec is the rules file).
        let (operator, objects): (Vec<_>, Vec<_>) = install
            .into_iter()
            .partition(|d| d["apiVersion"] == "monitoring.coreos.com/v1");
        for object in &operator {
            match object["kind"].as_str() {
                Some("PodMonitor") => check_pod_monitor(object),
                Some("PrometheusRule") => assert_eq!(object["metadata"]["namespace"], "plegd-system"),
                other => panic!("{name}: an unexpected {other:?}"),
            }
        }
        let file = dir.path().join("objects.yaml");
        let yaml: Vec<String> = objects.iter().map(|d| serde_json::to_string(d).unwrap()).collect();
        std::fs::write(&file, yaml.join("\n---\n")).unwrap();
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", "1.36.0"])
            .arg(&file)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.matches("passed").count() == objects.len() && !text.contains("ERROR"),
            "{name}: {text}"
        );
    }
}

/// Each overlay grants what its mode needs (tests/rbac.rs shows plegd uses exactly that); the
/// events component adds the right to publish events.
#[test]
fn each_install_grants_its_mode_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    // Reading pods and the node's Node (its kubelet's version), and the reviews that guard /metrics.
    let read = [
        "/nodes:get",
        "/pods:list",
        "/pods:watch",
        "authentication.k8s.io/tokenreviews:create",
        "authorization.k8s.io/subjectaccessreviews:create",
    ];
    let status = ["/pods/status:patch"];
    let events = ["events.k8s.io/events:create"];
    let sorted = |parts: &[&[&str]]| {
        let mut all: Vec<String> = parts.iter().flat_map(|p| p.iter().map(|s| s.to_string())).collect();
        all.sort();
        all
    };
    for (overlay, expected) in [
        ("shadow", sorted(&[&read])),
        ("conditions", sorted(&[&read, &status])),
        ("full", sorted(&[&read, &status, &["/pods:delete"]])),
    ] {
        let install = render(overlay, &[], dir.path()).1;
        assert_eq!(
            granted_by(&[(overlay.to_owned(), install)]),
            expected,
            "deploy/{overlay}"
        );
        let with_events = render(overlay, &["events"], dir.path()).1;
        assert_eq!(
            granted_by(&[(overlay.to_owned(), with_events)]),
            sorted(&[&expected.iter().map(String::as_str).collect::<Vec<_>>(), &events]),
            "deploy/{overlay} + events"
        );
    }
    // One file per need.
    assert_eq!(granted(&[RBAC_READ]), read);
    assert_eq!(granted(&[RBAC_STATUS]), status);
    assert_eq!(granted(&[RBAC_FULL_MODE]), ["/pods:delete"]);
    assert_eq!(granted(&[RBAC_EVENTS]), events);
}

/// The admission policies: the own-node policy wherever plegd writes, the conditions-only policy
/// in conditions mode alone (in full mode it would refuse every write).
#[test]
fn each_install_has_its_admission_policies() {
    let dir = tempfile::tempdir().unwrap();
    for (overlay, expected) in [
        ("shadow", vec![]),
        (
            "conditions",
            vec!["plegd-conditions-only", "plegd-own-node-only", "plegd-pod-status-only"],
        ),
        ("full", vec!["plegd-own-node-only", "plegd-pod-status-only"]),
    ] {
        let install = render(overlay, &[], dir.path()).1;
        let names = |kind: &str| {
            let mut n: Vec<String> = install
                .iter()
                .filter(|d| d["kind"] == kind)
                .map(|d| d["metadata"]["name"].as_str().unwrap().to_owned())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names("ValidatingAdmissionPolicy"), expected, "deploy/{overlay}");
        assert_eq!(names("ValidatingAdmissionPolicyBinding"), expected, "deploy/{overlay}");
    }
}

/// Every install puts plegd's pod and Event requests in a priority level of its own (not
/// `workload-low`), which borrows no seat from the kubelets' `system` or the leases' `node-high`,
/// and whose FlowSchema matches every pod and Event right plegd's RBAC grants, and only plegd.
#[test]
fn every_install_has_plegds_own_priority_level_that_borrows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (name, install) in installs(dir.path()) {
        let of = |kind: &str| -> Vec<&Value> { install.iter().filter(|d| d["kind"] == kind).collect() };
        let (levels, schemas) = (of("PriorityLevelConfiguration"), of("FlowSchema"));
        assert_eq!((levels.len(), schemas.len()), (1, 1), "{name}");
        let (level, schema) = (levels[0], schemas[0]);
        let limited = &level["spec"]["limited"];
        assert_eq!(level["spec"]["type"], "Limited", "{name}");
        assert_eq!(
            limited["borrowingLimitPercent"], 0,
            "{name}: it never takes others' seats"
        );
        assert_eq!(
            limited["limitResponse"]["type"], "Queue",
            "{name}: a storm queues, not 429s at once"
        );
        assert_eq!(
            schema["spec"]["priorityLevelConfiguration"]["name"],
            level["metadata"]["name"]
        );
        let precedence = schema["spec"]["matchingPrecedence"].as_i64().unwrap();
        assert!(
            (901..9000).contains(&precedence),
            "{name}: after the system's schemas, before service-accounts: {precedence}"
        );
        let rules = schema["spec"]["rules"].as_array().unwrap();
        for rule in rules {
            assert_eq!(
                rule["subjects"],
                json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "plegd-system", "name": "plegd"}}]),
                "{name}: plegd alone"
            );
        }
        // Each pod or Event right of plegd's roles is matched by a rule.
        let matched = |group: &str, resource: &str, verb: &str| {
            rules
                .iter()
                .flat_map(|r| r["resourceRules"].as_array().unwrap())
                .any(|r| {
                    let has = |field: &str, v: &str| r[field].as_array().unwrap().iter().any(|x| x == v || x == "*");
                    has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
                })
        };
        let mut checked = 0;
        for role in install
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        {
            for rule in role["rules"].as_array().into_iter().flatten() {
                for group in rule["apiGroups"].as_array().into_iter().flatten() {
                    for resource in rule["resources"].as_array().into_iter().flatten() {
                        let resource = resource.as_str().unwrap();
                        if !resource.starts_with("pods") && resource != "events" {
                            continue;
                        }
                        for verb in rule["verbs"].as_array().into_iter().flatten() {
                            checked += 1;
                            assert!(
                                matched(group.as_str().unwrap(), resource, verb.as_str().unwrap()),
                                "{name}: {group}/{resource} {verb} falls outside plegd's level"
                            );
                        }
                    }
                }
            }
        }
        assert!(checked >= 2, "{name}: plegd's pod rights were found ({checked})");
    }
}

fn daemonset(install: &[Value]) -> &Value {
    let found: Vec<&Value> = install.iter().filter(|d| d["kind"] == "DaemonSet").collect();
    assert_eq!(found.len(), 1);
    found[0]
}

#[test]
fn every_install_keeps_plegd_least_privileged_and_node_critical() {
    let dir = tempfile::tempdir().unwrap();
    for (name, install) in installs(dir.path()) {
        let ds = daemonset(&install);
        let spec = &ds["spec"]["template"]["spec"];
        let c = &spec["containers"][0];
        assert_eq!(spec["priorityClassName"], "system-node-critical", "{name}");
        // Pod Security said outright for plegd's namespace, not left to the cluster's default.
        let namespace = install
            .iter()
            .find(|d| d["kind"] == "Namespace")
            .expect("the namespace");
        let labels = &namespace["metadata"]["labels"];
        assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged", "{name}");
        assert_eq!(labels["pod-security.kubernetes.io/audit"], "baseline", "{name}");
        assert_eq!(spec["tolerations"][0]["operator"], "Exists", "{name}");
        let env = c["env"].as_array().unwrap();
        let node_name = env.iter().find(|e| e["name"] == "NODE_NAME").unwrap();
        assert_eq!(node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert!(c["securityContext"]["capabilities"]["add"].is_null());
        // Never root: the image's user 65532, in group 0 for the runtime's root:root 0660 socket.
        let pod_security = &spec["securityContext"];
        assert_eq!(
            (
                &pod_security["runAsUser"],
                &pod_security["runAsGroup"],
                &pod_security["runAsNonRoot"]
            ),
            (&65532.into(), &65532.into(), &true.into()),
            "{name}"
        );
        assert_eq!(pod_security["supplementalGroups"], serde_json::json!([0]), "{name}");
        assert!(
            c["securityContext"]["runAsUser"].is_null(),
            "{name}: the pod's user, not another"
        );
        // Nothing written on the node: every node path read-only, the API socket in the pod's memory.
        for m in c["volumeMounts"].as_array().unwrap() {
            let v = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap();
            assert!(
                v["hostPath"].is_null() || m["readOnly"] == true,
                "{name}: {m} writable on the node"
            );
        }
        assert!(c["resources"]["limits"]["memory"].is_string() && c["resources"]["requests"]["cpu"].is_string());
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        let modes: Vec<&&str> = args.iter().filter(|a| a.starts_with("--status-mode=")).collect();
        assert_eq!(modes.len(), 1, "{name}: one status mode: {args:?}");
        // The runtime's socket directory, read-only: a restarted runtime's new socket shows up in it.
        let volume = |n: &str| {
            spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == n)
                .cloned()
        };
        let mount = |n: &str| {
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == n)
                .cloned()
        };
        assert_eq!(volume("cri-socket-dir").unwrap()["hostPath"]["type"], "Directory");
        assert_eq!(volume("plegd-run").unwrap()["emptyDir"]["medium"], "Memory", "{name}");
        let socket_mount = mount("cri-socket-dir").unwrap();
        assert_eq!(socket_mount["readOnly"], true);
        let socket_arg = args.iter().find_map(|a| a.strip_prefix("--cri-socket=")).unwrap();
        assert_eq!(
            std::path::Path::new(socket_arg).parent().unwrap().to_str(),
            socket_mount["mountPath"].as_str(),
            "--cri-socket is inside the mounted directory"
        );
        // Full and shadow mode and the events component read termination messages (the status
        // written or compared with the kubelet's, the ContainerDied event): the kubelet's pod
        // directory and the pod logs, read-only, at their own paths; no other install mounts them.
        let reads_messages =
            matches!(*modes[0], "--status-mode=full" | "--status-mode=shadow") || args.contains(&"--emit-events");
        for (volume_name, host) in [("kubelet-pods", "/var/lib/kubelet/pods"), ("pod-logs", "/var/log/pods")] {
            match (volume(volume_name), mount(volume_name)) {
                (Some(v), Some(m)) => {
                    assert!(
                        reads_messages,
                        "{name}: {volume_name} outside full and shadow mode and events"
                    );
                    assert_eq!(v["hostPath"]["path"], host);
                    assert_eq!(m["mountPath"], host);
                    assert_eq!(m["readOnly"], true);
                }
                (None, None) => assert!(!reads_messages, "{name}: full mode or events without {volume_name}"),
                _ => panic!("{name}: {volume_name} mounted without its volume, or the other way round"),
            }
        }
        // Events only with the events component (and then its RBAC, checked above).
        let events_on = args.contains(&"--emit-events");
        assert_eq!(events_on, name.contains("events"), "{name}");
        assert!(
            c["livenessProbe"]["httpGet"]["path"] == "/healthz" && c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        );
        // The API token: projected, an hour at most (never the automatic token, which an
        // apiserver's default --service-account-extend-token-expiration stretches to a year),
        // mounted where the in-cluster configuration reads it, with the CA and the namespace.
        assert_eq!(spec["automountServiceAccountToken"], false, "{name}");
        let sources = volume("api-token").expect("the api-token volume")["projected"]["sources"]
            .as_array()
            .unwrap()
            .clone();
        let token = sources
            .iter()
            .find_map(|s| s.get("serviceAccountToken"))
            .expect("a serviceAccountToken source");
        assert_eq!(token["path"], "token");
        assert!(token["audience"].is_null(), "{name}: the apiserver's own audience");
        let lifetime = token["expirationSeconds"].as_u64().unwrap();
        assert!((600..=3600).contains(&lifetime), "{name}: expirationSeconds {lifetime}");
        assert!(sources.iter().any(|s| s["configMap"]["name"] == "kube-root-ca.crt"));
        assert!(
            sources
                .iter()
                .any(|s| s["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == "metadata.namespace")
        );
        let token_mount = mount("api-token").unwrap();
        assert_eq!(
            token_mount["mountPath"],
            "/var/run/secrets/kubernetes.io/serviceaccount"
        );
        assert_eq!(token_mount["readOnly"], true);
    }
}

/// The dashboard component: the dashboard JSON as is, in a ConfigMap Grafana's sidecar loads.
/// No install holds a token in a Secret (a legacy service-account token never expires); where the
/// pod-monitor component scrapes plegd, plegd takes only a token for its own audience, and its
/// /metrics asks for a token (and so speaks TLS: `--metrics-tls` is left `auto`).
#[test]
fn no_install_keeps_a_token_and_metrics_readers_send_theirs_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    for (name, install) in installs(dir.path()) {
        for object in &install {
            assert_ne!(
                object["type"], "kubernetes.io/service-account-token",
                "{name}: a token kept in a Secret: {object}"
            );
        }
        let args: Vec<&str> = daemonset(&install)["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert!(args.contains(&"--metrics-address=0.0.0.0:9808"), "{name}: {args:?}");
        let annotations = &daemonset(&install)["spec"]["template"]["metadata"]["annotations"];
        assert!(
            annotations
                .as_object()
                .is_none_or(|a| !a.keys().any(|k| k.starts_with("prometheus.io/"))),
            "{name}: no invitation to jobs that send their token to every annotated pod: {annotations}"
        );
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--metrics-auth") || a.starts_with("--metrics-tls=")),
            "{name}: /metrics asks for a token over TLS as the defaults say: {args:?}"
        );
        let monitored = install.iter().any(|o| o["kind"] == "PodMonitor");
        assert_eq!(
            args.contains(&"--metrics-token-audience=plegd"),
            monitored,
            "{name}: plegd's audience exactly where the pod monitor's token is for it: {args:?}"
        );
    }
    let class: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(path("deploy/components/pod-monitor/prometheus-scrape-class.yaml")).unwrap(),
    )
    .unwrap();
    let volume = &class["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(volume["audience"], "plegd");
    assert!(
        volume["expirationSeconds"].as_u64().is_some_and(|s| s <= 3600),
        "{volume}"
    );
}

#[test]
fn the_dashboard_component_carries_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let install = render("conditions", &["grafana-dashboard"], dir.path()).1;
    let map = install.iter().find(|d| d["kind"] == "ConfigMap").expect("a ConfigMap");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["namespace"], "plegd-system");
    let carried: Value = serde_json::from_str(map["data"]["grafana-dashboard.json"].as_str().unwrap()).unwrap();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path(DASHBOARD)).unwrap()).unwrap();
    assert_eq!(carried, file);
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

/// Every test, script or manifest of tests/ (or a unit-test file of src/) that deploy/ and the
/// project's documents name is there: a reader sent to a file finds it.
#[test]
fn the_files_the_docs_name_exist() {
    let mut named = Vec::new();
    let mut files: Vec<std::path::PathBuf> = ["README.md", "SECURITY.md", "RELIABILITY.md", "BENCHMARKS.md"]
        .iter()
        .map(|f| path(f).into())
        .collect();
    files.extend(manifests::files_under(&["deploy", "systemd", "docs"]));
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (i, _) in text.match_indices("tests/") {
            // A unit-test file of src/ is named by its whole path (`src/triggers/dispatch/tests/locate.rs`).
            let path_char = |c: char| c.is_ascii_alphanumeric() || "_/.-".contains(c);
            let token = text[..i].rfind(|c: char| !path_char(c)).map_or(0, |b| b + 1);
            let start = if text[token..].starts_with("src/") { token } else { i };
            let rest = &text[start..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_/.-".contains(c)))
                .unwrap_or(rest.len());
            let cited = rest[..end].trim_end_matches('.');
            if [".rs", ".go", ".sh", ".yaml"].iter().any(|ext| cited.ends_with(ext)) {
                named.push((file.display().to_string(), cited.to_owned()));
            }
        }
    }
    assert!(named.len() > 10, "{named:?}");
    let missing: Vec<_> = named
        .iter()
        .filter(|(_, cited)| !std::path::Path::new(&path(cited)).exists())
        .collect();
    assert!(missing.is_empty(), "named but not there: {missing:?}");
}
