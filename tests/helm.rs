//! deploy/helm/plegd, with a real `helm` (Helm 4, v4.3.2, built from helm.sh/helm/v4 by
//! tests/helm/helm.sh; and Helm 3, v3.21.4, where both are said): it lints with both; for every mode, with no optional component and with all of them, it renders exactly the
//! objects the matching kustomize install renders (names, RBAC verbs, policies, probes, security
//! context: everything but the Namespace, which `helm install --create-namespace` makes); and its
//! values schema (JSON Schema draft-07, as it declares) refuses wrong values with a message that
//! names the value under both Helms' validators (Helm 4's is a 2020-12 validator that honours the
//! declared draft).
//! On the one-node cluster the chart is installed, upgraded and uninstalled: tests/cluster_e2e.rs.

use std::collections::BTreeMap;
use std::process::Command;

use plegd_test_support::manifests::{HELM_3, OPTIONAL_COMPONENTS, OVERLAYS, helm, helm_3, path, render};
use serde_json::{Value, json};

/// The chart.
const CHART: &str = "deploy/helm/plegd";
/// The namespace deploy/ installs into.
const NAMESPACE: &str = "plegd-system";

/// The chart's values that match kustomize `components` added to the overlay of `mode`.
fn values_for(mode: &str, components: &[&str]) -> Vec<String> {
    let mut set = vec![format!("statusMode={mode}")];
    for component in components {
        set.push(
            match *component {
                "events" => "events.enabled=true",
                "pod-monitor" => "podMonitor.enabled=true",
                "grafana-dashboard" => "grafanaDashboard.enabled=true",
                "alerts" => "prometheusRule.enabled=true",
                "metrics-certificate" => "metricsCertificate.enabled=true",
                "readiness-gate" => "readinessGate.enabled=true",
                other => panic!("no value for component {other}"),
            }
            .to_owned(),
        );
    }
    set
}

/// `helm template` of the chart with `set` values: its documents, or helm's error. The apiserver it
/// renders for serves MutatingAdmissionPolicy (Kubernetes >= 1.36).
fn template(helm: &std::path::Path, set: &[String]) -> Result<Vec<Value>, String> {
    template_for(helm, set, &[MAP_API])
}

/// The API version and kind of MutatingAdmissionPolicy, as helm's capabilities name it.
const MAP_API: &str = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy";

/// [`template`] for an apiserver that serves `api_versions` besides helm's defaults.
fn template_for(helm: &std::path::Path, set: &[String], api_versions: &[&str]) -> Result<Vec<Value>, String> {
    let mut command = Command::new(helm);
    command.args(["template", "plegd", &path(CHART), "--namespace", NAMESPACE]);
    for api in api_versions {
        command.args(["--api-versions", api]);
    }
    for value in set {
        command.args(["--set", value]);
    }
    let out = command.output().expect("run helm template");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("helm template {set:?}: {e}\n{text}"));
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// Whether a rendered object is one of the chart's hooks (the readiness gate's pre-delete release,
/// which kustomize has no way to run).
fn is_hook(doc: &Value) -> bool {
    doc["metadata"]["annotations"].get("helm.sh/hook").is_some()
}

/// Objects by kind and name, in a form where what has no order has none (a pod's volumes and
/// mounts, which kustomize's strategic merge puts first and the chart may put elsewhere); the
/// chart's hooks left out.
fn by_name(documents: Vec<Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for mut doc in documents {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Namespace" || is_hook(&doc) {
            continue;
        }
        if kind == "DaemonSet" {
            let pod = &mut doc["spec"]["template"]["spec"];
            sort_by(&mut pod["volumes"], "name");
            for container in pod["containers"].as_array_mut().into_iter().flatten() {
                sort_by(&mut container["volumeMounts"], "mountPath");
            }
        }
        let name = format!("{kind}/{}", doc["metadata"]["name"].as_str().unwrap_or_default());
        assert!(out.insert(name.clone(), doc).is_none(), "{name} twice");
    }
    out
}

fn sort_by(list: &mut Value, key: &str) {
    if let Some(items) = list.as_array_mut() {
        items.sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
    }
}

#[test]
fn the_chart_lints_in_every_mode_with_helm_4_and_helm_3() {
    for (which, helm) in [("v4.3.2", helm()), (HELM_3, helm_3())] {
        for mode in OVERLAYS {
            let out = Command::new(&helm)
                .args(["lint", "--strict", &path(CHART), "--set"])
                .arg(format!("statusMode={mode}"))
                .output()
                .expect("run helm lint");
            assert!(
                out.status.success(),
                "helm {which} lint --strict ({mode}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn the_values_schema_declares_its_draft() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path(&format!("{CHART}/values.schema.json"))).unwrap()).unwrap();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft-07/schema#");
}

#[test]
fn the_chart_renders_what_kustomize_renders() {
    let helm = helm();
    let dir = tempfile::tempdir().unwrap();
    for mode in OVERLAYS {
        // The chart refuses the readiness gate in shadow mode (no condition is written for it).
        let every: Vec<&str> = OPTIONAL_COMPONENTS
            .into_iter()
            .filter(|c| mode != "shadow" || *c != "readiness-gate")
            .collect();
        for components in [&[][..], &every[..]] {
            let what = format!("deploy/{mode} + {components:?}");
            let kustomize = by_name(render(mode, components, dir.path()).1);
            let chart =
                by_name(template(&helm, &values_for(mode, components)).unwrap_or_else(|e| panic!("{what}: {e}")));
            let names = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(names(&chart), names(&kustomize), "{what}: the objects");
            for (name, object) in &kustomize {
                assert_eq!(&chart[name], object, "{what}: {name}");
            }
        }
    }
}

#[test]
fn the_values_change_what_they_name() {
    let helm = helm();
    let set = |values: &[&str]| {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        by_name(template(&helm, &values).unwrap())
    };
    let objects = set(&[
        "image.repository=registry.example/plegd",
        "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "resources.limits.memory=256Mi",
        "priorityClassName=",
        "nodeSelector.kubernetes\\.io/os=linux",
        "updateStrategy.rollingUpdate.maxUnavailable=1",
        "extraArgs[0]=--relist-period=2s",
        "prometheus.namespace=observability",
        "podMonitor.enabled=true",
        "prometheus.serviceAccount=prometheus",
        "admissionPolicies=false",
        "runtimeSocketGroup=990",
    ]);
    let ds = &objects["DaemonSet/plegd"];
    let pod = &ds["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example/plegd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(container["resources"]["limits"]["memory"], "256Mi");
    assert!(pod.get("priorityClassName").is_none(), "{pod}");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["securityContext"]["supplementalGroups"], json!([990]));
    assert_eq!(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1);
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.last(), Some(&"--relist-period=2s"), "{args:?}");
    let from = &objects["NetworkPolicy/plegd"]["spec"]["ingress"][0]["from"][0];
    assert_eq!(
        from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "observability"
    );
    let reader = &objects["ClusterRoleBinding/plegd-metrics-reader"]["subjects"][0];
    assert_eq!(
        (&reader["name"], &reader["namespace"]),
        (&"prometheus".into(), &"observability".into())
    );
    assert!(
        !objects.keys().any(|k| k.starts_with("ValidatingAdmissionPolicy")),
        "admissionPolicies=false: {:?}",
        objects.keys()
    );
    // Another namespace: every object and reference to it follows.
    let out = Command::new(&helm)
        .args(["template", "plegd", &path(CHART), "--namespace", "node-agents"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success() && !text.contains(NAMESPACE), "{text}");
    assert!(text.contains("system:serviceaccount:node-agents:plegd"), "{text}");
}

#[test]
fn wrong_values_are_refused_with_a_message_that_names_them_by_helm_4_and_helm_3() {
    for (which, helm) in [("v4.3.2", helm()), (HELM_3, helm_3())] {
        for (value, named) in [
            ("statusMode=fast", "statusMode"),
            ("statusmode=full", "statusmode"),
            ("image.digest=latest", "digest"),
            ("image.pullPolicy=Sometimes", "pullPolicy"),
            ("updateStrategy.type=Recreate", "type"),
            ("updateStrategy.rollingUpdate.maxUnavailable=0", "maxUnavailable"),
            ("extraArgs[0]=relist-period=2s", "extraArgs"),
            ("events.enabled=yes", "enabled"),
            ("prometheus.namespace=Monitoring", "namespace"),
            ("resources.requests.memory=lots", "memory"),
            ("runtimeSocketGroup=-1", "runtimeSocketGroup"),
        ] {
            let error = template(&helm, &[value.to_owned()]).expect_err(value);
            assert!(
                error.contains("values don't meet the specifications of the schema") && error.contains(named),
                "helm {which}, {value}: {error}"
            );
        }
    }
}

#[test]
fn the_readiness_gate_uninstalls_through_a_release_hook_and_is_refused_where_it_cannot_work() {
    let helm = helm();
    let set = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    let documents = template(&helm, &set(&["readinessGate.enabled=true"])).unwrap();
    let hooks: Vec<&Value> = documents.iter().filter(|d| is_hook(d)).collect();
    let mut names: Vec<String> = hooks
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ClusterRole/plegd-release-gates",
            "ClusterRoleBinding/plegd-release-gates",
            "Job/plegd-release-gates",
            "ServiceAccount/plegd-release-gates",
            "ValidatingAdmissionPolicy/plegd-release-gates",
            "ValidatingAdmissionPolicyBinding/plegd-release-gates",
        ]
    );
    for hook in &hooks {
        let annotations = &hook["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "pre-delete", "{hook}");
        assert_eq!(
            annotations["helm.sh/hook-delete-policy"],
            "before-hook-creation,hook-succeeded"
        );
    }
    let job = hooks.iter().find(|d| d["kind"] == "Job").unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"], json!(["release-gates"]));
    assert_eq!(container["image"], "plegd:dev");
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"],
        "plegd-release-gates"
    );
    // The release's account may list pods, write their status, and touch the gate's two policies
    // by name: nothing else.
    let role = hooks.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingadmissionpolicies"],
             "resourceNames": ["plegd-readiness-gate"], "verbs": ["delete"]},
            {"apiGroups": ["admissionregistration.k8s.io"],
             "resources": ["mutatingadmissionpolicies", "mutatingadmissionpolicybindings"],
             "resourceNames": ["plegd-readiness-gate-kubelet"], "verbs": ["get", "patch"]},
        ])
    );
    // Without the gate: no hook at all.
    assert!(!template(&helm, &[]).unwrap().iter().any(is_hook));

    // Shadow mode writes no condition: refused, nothing rendered.
    let error = template(&helm, &set(&["readinessGate.enabled=true", "statusMode=shadow"])).expect_err("shadow");
    assert!(
        error.contains("readinessGate.enabled needs statusMode conditions or full"),
        "{error}"
    );
    // An apiserver without MutatingAdmissionPolicy (helm's own defaults lack it): refused before
    // anything is installed, with what to do.
    let error = template_for(&helm, &set(&["readinessGate.enabled=true"]), &[]).unwrap_err();
    assert!(
        error.contains("readinessGate.enabled needs MutatingAdmissionPolicy")
            && error.contains("nothing was installed"),
        "{error}"
    );
}
