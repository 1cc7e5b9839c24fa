//! plegd as an operator's Prometheus sees it. A real Prometheus (Debian's, unpacked privately by
//! tests/prometheus/prometheus.sh) scrapes two `plegd run` on a real containerd against the test
//! apiserver — one writing statuses (full mode, Kubernetes Events on) for one node, one in shadow
//! mode for another, whose pod no one writes the status of — and
//! evaluates deploy/'s alerting rules:
//! - every metric docs/operating.md's table lists is there, with the type and the labels it gives, and nothing
//!   else is; `promtool check metrics` finds nothing wrong with /metrics;
//! - every query of the Grafana dashboard returns data;
//! - the alerts made true by a fault are: the apiserver refusing status writes
//!   (PlegdStatusWritesFailing), plegd restarting (PlegdRestarting), the runtime stopped
//!   (PlegdRuntimeUnreachable, PlegdPLEGUnhealthy, PlegdTriggersDown) — each
//!   seen in Prometheus' ALERTS (pending: its expression holds and `for` runs; the rules' own `for`
//!   is kept). The other alerts' faults cannot be made on demand here; promtool's unit tests
//!   (tests/prometheus/alerts.test.yaml, run below) show them firing and not firing.

use plegd_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::apiserver::{Apiserver, Identity};
use support::containerd::{Containerd, PrivateContainerd, TEST_NAMESPACE, TestPod, containerd};
use support::manifests::{DASHBOARD, path};
use support::process::{KillOnDrop, free_port, plegd_run};
use support::tls::{Certificates, certificates};
use support::wait_for;

const RULES: &str = "deploy/components/alerts/plegd.rules.yaml";
const NODE: &str = "node-prom";
const SHADOW_NODE: &str = "node-prom-shadow";

/// Prometheus' and promtool's directory, None (loudly) where they cannot be had.
fn prometheus_bin() -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(path("tests/prometheus/prometheus.sh"))
        .arg("install")
        .stderr(Stdio::inherit())
        .output()
        .expect("run prometheus.sh");
    if out.status.success() {
        let dir = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        return Some(PathBuf::from(dir));
    }
    if std::env::var("PLEGD_REQUIRE_CONTAINERD").is_ok_and(|v| v == "1") {
        panic!("tests/prometheus/prometheus.sh install failed");
    }
    eprintln!("!!!!!!!! Prometheus could not be installed: these tests are SKIPPED !!!!!!!!");
    None
}

/// An HTTP/1.0 GET on loopback (a Go server answers it without chunks): (status, body).
fn get(port: u16, path_and_query: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path_and_query} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

struct Prometheus {
    _child: KillOnDrop,
    port: u16,
}

impl Prometheus {
    /// Scrape `targets` (plegd metrics ports) every second over TLS, trusting `ca` and sending
    /// the token in `token_file`, as an operator's scrape job does; evaluate `rules` every second.
    fn start(bin: &Path, dir: &Path, targets: &[u16], ca: &Path, token_file: &Path, rules: &str) -> Self {
        let port = free_port();
        let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: plegd\n    scheme: https\n    tls_config:\n      ca_file: {}\n    authorization:\n      credentials_file: {}\n    static_configs:\n      - targets: [{}]\n",
                path(rules),
                ca.display(),
                token_file.display(),
                targets.join(", ")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(bin.join("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(["--log.level=warn", "--web.enable-lifecycle"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start prometheus");
        Self {
            _child: KillOnDrop(child),
            port,
        }
    }

    /// The `data` of an API answer.
    async fn api(&self, path_and_query: String) -> Value {
        let port = self.port;
        let answer = tokio::task::spawn_blocking(move || get(port, &path_and_query))
            .await
            .unwrap();
        let Some((200, body)) = answer else {
            panic!("Prometheus API: {answer:?}");
        };
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["status"], "success", "{v}");
        v["data"].clone()
    }

    async fn query(&self, expr: &str) -> Vec<Value> {
        let query: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
        self.api(format!("/api/v1/query?query={query}")).await["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts whose expression holds now, by name (pending or firing).
    async fn active_alerts(&self) -> BTreeSet<String> {
        self.api("/api/v1/alerts".into()).await["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned))
            .collect()
    }

    async fn wait_for_alert(&self, name: &str, timeout: Duration) {
        wait_for(&format!("alert {name}"), timeout, || async {
            self.active_alerts().await.contains(name)
        })
        .await;
    }
}

/// docs/operating.md's metric table: name → (type, labels).
fn documented_metrics() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let readme = std::fs::read_to_string(path("docs/operating.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 6 || !cells[1].starts_with("`plegd_") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_owned();
        let labels = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        out.insert(name, (cells[2].to_owned(), labels));
    }
    assert!(out.len() >= 30, "docs/operating.md's metric table: {out:?}");
    out
}

/// The family a series name belongs to, as docs/operating.md names it (counters with `_total`).
fn family(name: &str, documented: &BTreeMap<String, (String, BTreeSet<String>)>) -> Option<String> {
    if documented.contains_key(name) {
        return Some(name.to_owned());
    }
    ["_bucket", "_count", "_sum"]
        .iter()
        .filter_map(|s| name.strip_suffix(s))
        .find(|base| documented.contains_key(*base))
        .map(str::to_owned)
}

/// A pod bound to `node` on the apiserver and run, with one container, in the runtime.
async fn run_bound_pod(api: &Apiserver, cd: &Containerd, name: &str, node: &str) -> TestPod {
    let created = api
        .create_pod(serde_json::json!({
            "metadata": {"name": name, "namespace": TEST_NAMESPACE},
            "spec": {"nodeName": node, "restartPolicy": "Never", "hostNetwork": true,
                     "containers": [{"name": "app", "image": "plegd.test/busybox:1"}]}
        }))
        .await;
    let pod = cd
        .run_pod_as(name, TEST_NAMESPACE, &support::apiserver::uid(&created), true, None)
        .await;
    cd.run_container(&pod, "app", "sleep 600").await;
    pod
}

/// The audience of the token Prometheus sends plegd.
const AUDIENCE: &str = "plegd.test";

/// One plegd's flags: against `socket` and `kubeconfig`, metrics on `port` as the DaemonSet serves
/// them (a token for plegd's audience asked for, over TLS with `tls`'s certificate), relisting
/// every second and unhealthy after 5 s (so that the PLEG alert's fault takes seconds, not
/// minutes).
fn plegd(
    node: &str,
    socket: &Path,
    kubeconfig: &Path,
    port: u16,
    tls: &Certificates,
    log: &Path,
    extra: &[&str],
) -> KillOnDrop {
    let mut command = plegd_run(env!("CARGO_BIN_EXE_plegd"), node, socket, kubeconfig);
    command
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-auth", "kubernetes", "--metrics-token-audience", AUDIENCE])
        .arg("--metrics-tls-cert-file")
        .arg(&tls.cert)
        .arg("--metrics-tls-private-key-file")
        .arg(&tls.key)
        .args([
            "--relist-threshold",
            "5s",
            "--relist-period",
            "1s",
            "--relist-period-with-triggers",
            "2s",
        ])
        .args(extra)
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()));
    KillOnDrop(command.spawn().expect("spawn plegd"))
}

#[test]
fn alert_rules_pass_their_unit_tests_and_the_operator_rule_is_the_same() {
    let Some(bin) = prometheus_bin() else { return };
    let check = Command::new(bin.join("promtool"))
        .args(["check", "rules"])
        .arg(path(RULES))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    let test = Command::new(bin.join("promtool"))
        .args(["test", "rules", "alerts.test.yaml"])
        .current_dir(path("tests/prometheus"))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    // Every alert has a unit test, a severity and a runbook that docs/operating.md has.
    let rules: Value = serde_saphyr::from_str(&std::fs::read_to_string(path(RULES)).unwrap()).unwrap();
    let tests = std::fs::read_to_string(path("tests/prometheus/alerts.test.yaml")).unwrap();
    let readme = std::fs::read_to_string(path("docs/operating.md"))
        .unwrap()
        .to_lowercase();
    for rule in rules["groups"][0]["rules"].as_array().unwrap() {
        let name = rule["alert"].as_str().unwrap();
        assert!(
            tests.contains(&format!("alertname: {name}")),
            "{name} has no promtool test"
        );
        assert!(rule["labels"]["severity"].is_string(), "{name}: severity");
        let runbook = rule["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = runbook
            .strip_prefix("docs/operating.md#")
            .expect("a section of docs/operating.md");
        assert_eq!(
            anchor,
            name.to_lowercase(),
            "{name}: the runbook is the alert's own section"
        );
        assert!(
            readme.contains(&format!("\n### {anchor}\n")),
            "docs/operating.md has no section for {name}"
        );
    }
    // PlegdRuntimeUnreachable hears every list call plegd makes, unary or streaming (a runtime that
    // streams its lists, as containerd 2.4, fails in StreamPodSandboxes and StreamContainers).
    let unreachable = rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "PlegdRuntimeUnreachable")
        .expect("the PlegdRuntimeUnreachable rule");
    let expr = unreachable["expr"].as_str().unwrap();
    let lists = plegd::metrics::known::RUNTIME_OPERATIONS
        .into_iter()
        .filter(|op| op.starts_with("List") || op.starts_with("Stream"));
    for op in lists {
        assert!(
            expr.contains(op),
            "PlegdRuntimeUnreachable misses the list call {op}: {expr}"
        );
    }
    // The PrometheusRule carries the same rules.
    let operator: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(path("deploy/components/alerts/prometheus-rule.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"], rules);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_plegd_and_hears_its_faults() {
    let Some(bin) = prometheus_bin() else { return };
    let Some(shared) = containerd().await else { return };
    let version = format!("{}.{}", shared.version().await.0, shared.version().await.1);
    // A containerd of this test's own: it is stopped below.
    let Some(instance) = PrivateContainerd::start("prom", &version, 236).await else {
        return;
    };
    let cd = instance.handle.clone();
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let writer_dir = dir.path().join("writer");
    let shadow_dir = dir.path().join("shadow");
    std::fs::create_dir_all(&writer_dir).unwrap();
    std::fs::create_dir_all(&shadow_dir).unwrap();
    let kubeconfig = api.kubeconfig_as(&writer_dir, &Identity::Plegd(NODE.into()));
    let shadow_kubeconfig = api.kubeconfig_as(&shadow_dir, &Identity::Plegd(SHADOW_NODE.into()));
    let (writer_port, shadow_port) = (free_port(), free_port());
    // The serving certificate (cert-manager's, in a cluster) and Prometheus' token for plegd.
    let tls = certificates(dir.path(), "metrics", &["127.0.0.1"]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, api.metrics_reader_token(Some(AUDIENCE))).unwrap();
    let writer_log = dir.path().join("writer.log");
    let shadow_log = dir.path().join("shadow.log");
    let _writer = plegd(
        NODE,
        &cd.socket,
        &kubeconfig,
        writer_port,
        &tls,
        &writer_log,
        &["--status-mode", "full", "--emit-events"],
    );
    let start_shadow = || {
        plegd(
            SHADOW_NODE,
            &cd.socket,
            &shadow_kubeconfig,
            shadow_port,
            &tls,
            &shadow_log,
            &["--status-mode", "shadow"],
        )
    };
    let mut shadow = start_shadow();
    let prometheus = Prometheus::start(
        &bin,
        dir.path(),
        &[writer_port, shadow_port],
        &tls.ca,
        &token_file,
        RULES,
    );

    // A pod's life: running, one container exiting.
    let created = api
        .create_pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": TEST_NAMESPACE},
            "spec": {"nodeName": NODE, "restartPolicy": "Never", "hostNetwork": true,
                     "containers": [{"name": "app", "image": "plegd.test/busybox:1"},
                                    {"name": "side", "image": "plegd.test/busybox:1"}]}
        }))
        .await;
    let uid = support::apiserver::uid(&created);
    let pod = cd.run_pod_as("web", TEST_NAMESPACE, &uid, true, None).await;
    cd.run_container(&pod, "app", "sleep 600").await;
    cd.run_container(&pod, "side", "sleep 2; exit 3").await;
    // The shadow plegd's pod, whose status no one writes: every field plegd computes differs.
    let shadowed = run_bound_pod(&api, &cd, "shadowed", SHADOW_NODE).await;
    let logs = || {
        ["prometheus.log", "writer.log", "shadow.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!("--- {f}:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while prometheus.query("up == 1").await.len() != 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "both plegd scraped: up = {:?}\n{}",
            prometheus.query("up").await,
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for("the exit written and scraped", Duration::from_secs(60), || async {
        !prometheus
            .query("plegd_pleg_events_total{kind=\"ContainerDied\"} > 0")
            .await
            .is_empty()
            && !prometheus
                .query("plegd_status_writes_total{result=\"ok\"} > 0")
                .await
                .is_empty()
            && !prometheus.query("plegd_shadow_differences_total > 0").await.is_empty()
    })
    .await;

    // Every documented metric, with its type and labels; nothing undocumented.
    let documented = documented_metrics();
    let metadata = prometheus.api("/api/v1/metadata".into()).await;
    for (name, (kind, labels)) in &documented {
        let meta = &metadata[name.strip_suffix("_total").unwrap_or(name)];
        let meta = if meta.is_null() { &metadata[name.as_str()] } else { meta };
        assert_eq!(
            meta[0]["type"].as_str(),
            Some(kind.as_str()),
            "{name}: documented as a {kind}, scraped as {meta}"
        );
        let series_name = if kind == "histogram" {
            format!("{name}_count")
        } else {
            name.clone()
        };
        let series = prometheus.api(format!("/api/v1/series?match[]={series_name}")).await;
        let series = series.as_array().cloned().unwrap_or_default();
        assert!(!series.is_empty(), "{name}: no series");
        for s in &series {
            let got: BTreeSet<String> = s
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| !["__name__", "instance", "job"].contains(&k.as_str()))
                .cloned()
                .collect();
            assert_eq!(&got, labels, "{name}: labels");
        }
    }
    let names = prometheus
        .api("/api/v1/label/__name__/values?match[]=%7Bjob%3D%22plegd%22%7D".into())
        .await;
    for name in names.as_array().unwrap().iter().filter_map(|n| n.as_str()) {
        if name.starts_with("plegd_") {
            assert!(
                family(name, &documented).is_some(),
                "{name} is scraped but not in docs/operating.md's metric table"
            );
        }
    }

    // promtool finds nothing wrong with the exposition.
    let (ca, token) = (tls.ca.clone(), std::fs::read_to_string(&token_file).unwrap());
    let (_, body) = tokio::task::spawn_blocking(move || {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], writer_port));
        support::tls::https_get(
            address,
            "127.0.0.1",
            &support::tls::Trust::Ca(ca),
            "/metrics",
            Some(&token),
        )
    })
    .await
    .unwrap()
    .expect("/metrics");
    let mut promtool = Command::new(bin.join("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // Every query of the dashboard returns data.
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path(DASHBOARD)).unwrap()).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            // A rate needs two scrapes of a series.
            wait_for(
                &format!("data for dashboard panel {:?}: {expr}", panel["title"]),
                Duration::from_secs(15),
                || async { !prometheus.query(expr).await.is_empty() },
            )
            .await;
        }
    }
    // No alert while all is well: none pending or firing (a rule evaluated just as a scrape or a
    // relist ran late may be pending for one evaluation; a rule that holds while all is well
    // stays).
    wait_for("no alert while all is well", Duration::from_secs(20), || async {
        prometheus.active_alerts().await.is_empty()
    })
    .await;

    // The apiserver refuses status writes: PlegdStatusWritesFailing.
    api.set_status_patch_500(true).await;
    let refused = run_bound_pod(&api, &cd, "refused", NODE).await;
    prometheus
        .wait_for_alert("PlegdStatusWritesFailing", Duration::from_secs(60))
        .await;
    api.set_status_patch_500(false).await;

    // plegd restarts twice (as after a stage ended): PlegdRestarting.
    for _ in 0..2 {
        drop(shadow);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        shadow = start_shadow();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    prometheus
        .wait_for_alert("PlegdRestarting", Duration::from_secs(60))
        .await;

    // The runtime stops.
    cd.cleanup(&pod).await;
    cd.cleanup(&shadowed).await;
    cd.cleanup(&refused).await;
    drop(instance);
    for alert in ["PlegdRuntimeUnreachable", "PlegdPLEGUnhealthy", "PlegdTriggersDown"] {
        prometheus.wait_for_alert(alert, Duration::from_secs(90)).await;
    }
    drop(shadow);
}
