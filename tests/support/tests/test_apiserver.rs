//! The test apiserver (support/apiserver.rs) behaves as a kube-apiserver does for what plegd's
//! tests lean on: kubectl, an independent client, agrees with it; kube-rs' watcher lists again
//! after 410 Gone; a PATCH with a stale uid gets 422.

use std::time::{Duration, Instant};

use plegd_test_support as support;
use serde_json::{Value, json};
use support::apiserver::Apiserver;

/// Run kubectl against `kubeconfig` off the async runtime.
async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    let kubeconfig = kubeconfig.to_owned();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(support::apiserver::kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .output()
    })
    .await
    .expect("kubectl task")
    .expect("run kubectl")
}

/// `kubectl patch pod web -n default --subresource=status --type=KIND -p BODY`.
async fn kubectl_patch_status(kubeconfig: &std::path::Path, kind: &str, body: &str) -> std::process::Output {
    let kind = format!("--type={kind}");
    kubectl(
        kubeconfig,
        &[
            "patch",
            "pod",
            "web",
            "-n",
            "default",
            "--subresource=status",
            &kind,
            "-p",
            body,
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_agrees_the_test_apiserver_behaves_like_one() {
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.create_pod(json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "example.com/Gate", "status": "True"}, {"type": "Ready", "status": "False"}]}})).await;
    api.create_pod(json!({"metadata": {"name": "db", "namespace": "default"}, "spec": {"nodeName": "n2", "containers": [{"name": "app", "image": "x"}]}})).await;

    let out = kubectl(
        &kc,
        &[
            "get",
            "pods",
            "-A",
            "-o",
            "json",
            "--field-selector",
            "spec.nodeName=n1",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "kubectl get: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("web")], "field selector honoured");
    // Short names, as kubectl users type them.
    for (short, wanted) in [("po", "web"), ("ns", "kube-system")] {
        let out = kubectl(&kc, &["get", short, "-A", "-o", "name"]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(wanted),
            "kubectl get {short}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A strategic merge patch of the status merges conditions by type.
    let out = kubectl_patch_status(
        &kc,
        "strategic",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    )
    .await;
    assert!(
        out.status.success(),
        "kubectl patch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = api.pod("default", "web").await.unwrap();
    let conditions = pod["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 2, "{conditions:?}");
    let has = |t: &str, s: &str| conditions.iter().any(|c| c["type"] == t && c["status"] == s);
    assert!(has("example.com/Gate", "True"), "{conditions:?}");
    assert!(has("Ready", "True"), "{conditions:?}");
    let rv_after_patch: u64 = pod["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // A merge patch replaces the list.
    let out = kubectl_patch_status(
        &kc,
        "merge",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#,
    )
    .await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pod = api.pod("default", "web").await.unwrap();
    let conditions = pod["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(
        (&conditions[0]["type"], &conditions[0]["status"]),
        (&json!("Ready"), &json!("False"))
    );
    assert!(
        pod["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv_after_patch,
        "every write bumps the resourceVersion"
    );

    // kubectl watch sees a change.
    let kc2 = kc.clone();
    let watcher = tokio::spawn(async move {
        kubectl(
            &kc2,
            &[
                "get",
                "pods",
                "-n",
                "default",
                "--watch-only",
                "-o",
                "json",
                "--request-timeout",
                "10s",
            ],
        )
        .await
    });
    // The deletion only once kubectl's watch is open (its answer started, in the audit log):
    // kubectl's start and discovery may take a while on a loaded machine.
    support::wait_for("kubectl's watch open", Duration::from_secs(20), || async {
        api.requests()
            .await
            .iter()
            .any(|r| r.method == "GET" && r.path == "/api/v1/namespaces/default/pods" && r.query.contains("watch=true"))
    })
    .await;
    api.delete("default", "db").await;
    let out = watcher.await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"db\""),
        "kubectl --watch saw the deletion: {text} / {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A PATCH carries no storage precondition: a `metadata.uid` that is not the stored pod's fails
    // metadata validation, 422 (the answer plegd reads as "the pod was replaced").
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(api.client(), "default");
    let err = pods
        .patch_status(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(json!({"metadata": {"uid": "not-it"}, "status": {"phase": "Failed"}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("metadata.uid")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_relists_after_410_gone() {
    use futures_util::StreamExt;
    use kube::runtime::watcher;
    let api = Apiserver::start().await;
    api.create_pod(
        json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x"}]}}),
    ).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(api.client());
    let stream = watcher::watcher(pods, watcher::Config::default().fields("spec.nodeName=n1"));
    futures_util::pin_mut!(stream);
    let mut inits = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while inits < 2 && Instant::now() < deadline {
        if let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(5), stream.next()).await
            && matches!(event, Ok(watcher::Event::InitDone))
        {
            inits += 1;
            if inits == 1 {
                // Compact history and cut the watch: its restart from the old version gets 410.
                api.create_pod(json!({"metadata": {"name": "b", "namespace": "default"}, "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "x"}]}})).await;
                api.compact().await;
                api.set_down(true).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                api.set_down(false).await;
            }
        }
    }
    assert_eq!(inits, 2, "the watcher listed again after 410 Gone");
    let lists = api
        .requests()
        .await
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.query.contains("watch=true"))
        .count();
    assert!(lists >= 2, "two LISTs: {:?}", api.requests().await);
}
