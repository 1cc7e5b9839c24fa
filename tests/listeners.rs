//! plegd's HTTP listeners under what any pod can send them, the `plegd run` binary as the
//! DaemonSet runs it (`--health-address` for the probes, `--metrics-address` for Prometheus): the
//! kubelet's probes keep passing, one client cannot take the places of others, request heads are
//! bounded, and /metrics answers only a token the apiserver authorizes. Fake CRI server + the test
//! apiserver built from Kubernetes' own code. The clients of the floods speak from other loopback
//! addresses (127.0.x.y) than the probe (127.0.0.1), as other pods do from their own IPs.

use plegd_test_support as support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::{FULL_MODE_FAST_RELIST, KillOnDrop, free_port, http_get, metric, plegd_run};
use support::tls::{Trust, certificates, https_get};
use support::wait_for;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// A connection to `port` from the loopback address 127.0.`a`.`b`.
async fn connect_from(a: u8, b: u8, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, a, b), 0).into())?;
    socket
        .connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into())
        .await
}

/// A plegd in full mode with pod-0 running, its metrics and health listeners on free ports, and
/// the ports.
struct Setup {
    cri: FakeServer,
    api: Apiserver,
    uid: String,
    metrics_port: u16,
    health_port: u16,
    _plegd: KillOnDrop,
    dir: tempfile::TempDir,
}

impl Setup {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("plegd.log")).unwrap_or_default()
    }

    /// The fingerprint of the certificate plegd made itself, as it logged it.
    fn self_signed_fingerprint(&self) -> String {
        let log = self.log();
        log.lines()
            .filter(|l| l.contains("a self-signed certificate plegd made"))
            .find_map(|l| l.split("sha256=").nth(1)?.split_whitespace().next().map(str::to_owned))
            .unwrap_or_else(|| panic!("no self-signed certificate in plegd's log:\n{log}"))
    }

    /// An HTTPS GET of /metrics with `token`, trusting plegd's self-made certificate: the status
    /// code, 0 when there is no answer.
    async fn scrape_tls(&self, token: Option<String>) -> (u16, String) {
        let trust = Trust::Pinned(self.self_signed_fingerprint());
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.metrics_port));
        tokio::task::spawn_blocking(move || https_get(address, "localhost", &trust, "/metrics", token.as_deref()))
            .await
            .unwrap()
            .unwrap_or_default()
    }
}

async fn setup(extra: &[&str]) -> Setup {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let uid = api.create_bound_pod("pod-0", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&uid, "pod-0", 1);
    let (metrics_port, health_port) = (free_port(), free_port());
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("n1".into()));
    let log = std::fs::File::create(dir.path().join("plegd.log")).unwrap();
    let plegd = KillOnDrop(
        plegd_run(PLEGD, "n1", &cri.path, &kubeconfig)
            .stderr(log)
            .args(FULL_MODE_FAST_RELIST)
            .args(["--metrics-address", &format!("127.0.0.1:{metrics_port}")])
            .args(["--health-address", &format!("127.0.0.1:{health_port}")])
            .args(extra)
            .spawn()
            .expect("spawn plegd run"),
    );
    plegd::serve::listen::raise_fd_limit();
    wait_for("plegd ready", Duration::from_secs(30), || async move {
        get(health_port, "/readyz").await.is_some_and(|(code, _)| code == 200)
    })
    .await;
    api.wait_all_running(1, Duration::from_secs(20)).await;
    Setup {
        cri,
        api,
        uid,
        metrics_port,
        health_port,
        _plegd: plegd,
        dir,
    }
}

async fn get(port: u16, path: &'static str) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || http_get(port, path)).await.unwrap()
}

/// The probe as the kubelet makes it: a new connection, one GET, an answer within 1 s (the
/// probes' default timeoutSeconds).
async fn probe(port: u16, path: &'static str) -> Option<u16> {
    let started = Instant::now();
    let answer = get(port, path).await.map(|(code, _)| code);
    (started.elapsed() < Duration::from_secs(1)).then_some(answer).flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_starves_the_probes() {
    let s = setup(&[]).await;
    // 4,100 keep-alive connections on the probes' listener from 1,025 addresses, each sending one
    // GET /healthz and staying open; and 4,100 more that send nothing at all.
    let mut held = Vec::new();
    for i in 0..4100u32 {
        let (a, b) = (1 + (i / 4 / 250) as u8, 2 + ((i / 4) % 250) as u8);
        let Ok(mut stream) = connect_from(a, b, s.health_port).await else {
            continue;
        };
        if i % 2 == 0 {
            use tokio::io::AsyncWriteExt;
            let _ = stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: plegd\r\nConnection: keep-alive\r\n\r\n")
                .await;
        }
        held.push(stream);
    }
    for i in 0..4100u32 {
        let (a, b) = (20 + (i / 4 / 250) as u8, 2 + ((i / 4) % 250) as u8);
        if let Ok(stream) = connect_from(a, b, s.health_port).await {
            held.push(stream);
        }
    }
    // The kubelet's probes pass, each at once, again and again.
    for _ in 0..10 {
        assert_eq!(probe(s.health_port, "/healthz").await, Some(200), "liveness");
        assert_eq!(probe(s.health_port, "/readyz").await, Some(200), "readiness");
    }
    // One address holding 2,000 connections to /metrics takes 32 places, not the listener.
    let mut greedy = Vec::new();
    for _ in 0..2000 {
        if let Ok(stream) = connect_from(200, 1, s.metrics_port).await {
            greedy.push(stream);
        }
    }
    let body = wait_until_metrics(
        s.metrics_port,
        "plegd_connections_refused_total{listener=\"http\"}",
        2000.0 - 32.0,
    )
    .await;
    assert!(
        metric(&body, "plegd_connections_evicted_total{listener=\"health\"}").unwrap_or(0.0) > 0.0,
        "the probes' listener made room by closing its oldest connections\n{body}"
    );
    // And a container's death still reaches the apiserver.
    s.cri.fake.exit_container(&format!("ctr-{}-0", s.uid), 7);
    wait_for(
        "the exit written beside the floods",
        Duration::from_secs(10),
        || async { s.api.exit_code("pod-0").await == Some(7) },
    )
    .await;
    drop((held, greedy));
}

/// /metrics (from 127.0.0.1, not the greedy address) once `name` has reached `at_least`.
async fn wait_until_metrics(port: u16, name: &'static str, at_least: f64) -> String {
    let mut body = String::new();
    for _ in 0..100 {
        body = get(port, "/metrics").await.map(|(_, b)| b).unwrap_or_default();
        if metric(&body, name).unwrap_or(0.0) >= at_least {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} did not reach {at_least}\n{body}");
}

/// Request heads past 16 KiB are refused (431) and their connections closed, on both listeners;
/// one within it is served. (hyper's own limit, about 400 KiB, would let a 20 KiB head through.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_are_bounded() {
    let s = setup(&[]).await;
    let send = |port: u16, header_bytes: usize| async move {
        tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            let head = format!(
                "GET /healthz HTTP/1.1\r\nHost: plegd\r\nX-Long: {}\r\nConnection: close\r\n\r\n",
                "a".repeat(header_bytes)
            );
            let _ = stream.write_all(head.as_bytes());
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer)
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned()
        })
        .await
        .unwrap()
    };
    for port in [s.metrics_port, s.health_port] {
        assert_eq!(send(port, 15 * 1024).await, "200", "port {port}: a head within 16 KiB");
        assert_eq!(send(port, 20 * 1024).await, "431", "port {port}: a head past 16 KiB");
    }
    // 20 connections each sending 450 KB of one header that never ends: each closed, and plegd
    // still answers.
    let port = s.health_port;
    let closed = tokio::task::spawn_blocking(move || {
        (0..20)
            .filter(|_| {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nX-Long: ");
                for _ in 0..450 {
                    if stream.write_all(&[b'a'; 1000]).is_err() {
                        break;
                    }
                }
                let mut answer = Vec::new();
                // Closed by plegd: the read ends (or is reset), never times out.
                match stream.read_to_end(&mut answer) {
                    Ok(_) => true,
                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
                }
            })
            .count()
    })
    .await
    .unwrap();
    assert_eq!(closed, 20);
    assert_eq!(probe(s.health_port, "/healthz").await, Some(200));
}

/// With `--metrics-auth kubernetes`, /metrics answers only a token the apiserver authenticates
/// for a user allowed to get /metrics (deploy/components/pod-monitor's reader); the probes need
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_an_authorized_token() {
    let s = setup(&["--metrics-auth", "kubernetes"]).await;
    let port = s.metrics_port;
    let scrape = |token: Option<String>| s.scrape_tls(token);
    let status = |answer: &(u16, String)| answer.0.to_string();
    assert_eq!(status(&scrape(None).await), "401");
    assert_eq!(status(&scrape(Some("not-a-token".into())).await), "401");
    let kubelet = s.api.token_for(&Identity::Kubelet);
    assert_eq!(
        status(&scrape(Some(kubelet)).await),
        "403",
        "authenticated, not allowed"
    );
    let reader = s.api.token_for(&Identity::MetricsReader);
    // The token file is read again by the server when it changes.
    let mut answer = (0, String::new());
    for _ in 0..50 {
        answer = scrape(Some(reader.clone())).await;
        if status(&answer) == "200" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status(&answer), "200", "{answer:?}");
    assert!(
        answer.1.contains("plegd_metrics_auth_total{result=\"allowed\"}"),
        "{answer:?}"
    );
    // The probes need no token (and their own listener no TLS).
    assert_eq!(probe(s.health_port, "/healthz").await, Some(200));
    let trust = Trust::Pinned(s.self_signed_fingerprint());
    let healthz = tokio::task::spawn_blocking(move || {
        https_get(([127, 0, 0, 1], port).into(), "localhost", &trust, "/healthz", None)
    })
    .await
    .unwrap();
    assert_eq!(healthz.map(|(c, _)| c), Ok(200));
    // The reviews plegd asked for.
    let reviews: Vec<String> = s
        .api
        .requests()
        .await
        .into_iter()
        .filter(|r| r.path.contains("tokenreviews") || r.path.contains("subjectaccessreviews"))
        .map(|r| format!("{} {} {}", r.user, r.path, r.status))
        .collect();
    assert!(
        reviews
            .iter()
            .any(|r| r.contains("subjectaccessreviews") && r.ends_with("201")),
        "{reviews:?}"
    );
}

/// /metrics filled by many pod addresses, each within its share of 32 connections (130 addresses:
/// 4,160 connections, past the listener's 4,096): a scrape from another address still gets in, as
/// its connection closes the oldest held one, and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pod_addresses_keep_a_scrape_out() {
    let s = setup(&[]).await;
    let mut held = Vec::new();
    for address in 0..130u32 {
        let (a, b) = (40 + (address / 250) as u8, 2 + (address % 250) as u8);
        for _ in 0..32 {
            if let Ok(stream) = connect_from(a, b, s.metrics_port).await {
                held.push(stream);
            }
        }
    }
    let body = wait_until_metrics(
        s.metrics_port,
        "plegd_connections_evicted_total{listener=\"http\"}",
        1.0,
    )
    .await;
    assert_eq!(
        metric(&body, "plegd_connections_refused_total{listener=\"http\"}").unwrap_or(0.0),
        0.0,
        "no address went past its share, and nobody was refused\n{body}"
    );
    for _ in 0..5 {
        assert_eq!(
            probe(s.metrics_port, "/metrics").await,
            Some(200),
            "a scrape from a new address"
        );
    }
    drop(held);
}

/// With `--metrics-token-audience`, /metrics answers only a reader's token issued for that audience
/// (which the apiserver itself refuses, so a node that sees it cannot use it there); the same
/// reader's token for the apiserver is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_token_must_be_for_plegds_audience_when_one_is_set() {
    let s = setup(&["--metrics-auth", "kubernetes", "--metrics-token-audience", "plegd.test"]).await;
    let scrape = |token: String| async { Some(s.scrape_tls(Some(token)).await.0).filter(|c| *c != 0) };
    let for_apiserver = s.api.token_for(&Identity::MetricsReader);
    assert_eq!(scrape(for_apiserver).await, Some(401), "a token for the apiserver");
    let for_plegd = s.api.metrics_reader_token(Some("plegd.test"));
    // (The reader's rights may take a moment to reach the apiserver's authorizer: 403 meanwhile.)
    let mut answer = None;
    for _ in 0..50 {
        answer = scrape(for_plegd.clone()).await;
        if answer == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answer, Some(200), "a token for plegd's audience");
    // The apiserver refuses that token itself.
    let review = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": for_plegd}});
    let reviews: kube::Api<k8s_openapi::api::authentication::v1::TokenReview> = kube::Api::all(s.api.client());
    let answered = reviews
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(review).unwrap(),
        )
        .await
        .expect("a TokenReview");
    assert_ne!(
        answered.status.and_then(|st| st.authenticated),
        Some(true),
        "the apiserver takes no token for plegd"
    );
}

/// Wherever /metrics asks for a token it speaks TLS: with no certificate given, one plegd made
/// (its fingerprint logged, so a reader can pin it); a plain HTTP request gets no answer and is
/// counted; a client that trusts another CA is refused the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_that_ask_for_a_token_speak_tls() {
    let s = setup(&["--metrics-auth", "kubernetes"]).await;
    let port = s.metrics_port;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let plain = tokio::task::spawn_blocking(move || http_get(port, "/healthz"))
        .await
        .unwrap();
    assert_eq!(plain, None, "plain HTTP gets no HTTP answer");
    let other_ca = certificates(s.dir.path(), "other", &["localhost"]).ca;
    let refused =
        tokio::task::spawn_blocking(move || https_get(address, "localhost", &Trust::Ca(other_ca), "/healthz", None))
            .await
            .unwrap();
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("certificate")),
        "{refused:?}"
    );
    // A reader that pins plegd's certificate gets in (once its rights reach the apiserver's
    // authorizer: 403 meanwhile), and sees what was counted.
    let reader = s.api.token_for(&Identity::MetricsReader);
    let mut answer = (0, String::new());
    for _ in 0..50 {
        answer = s.scrape_tls(Some(reader.clone())).await;
        if answer.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, body) = answer;
    assert_eq!(code, 200, "{body}");
    assert!(
        metric(&body, "plegd_tls_handshake_errors_total{listener=\"http\"}").unwrap_or(0.0) >= 2.0,
        "the plain request and the distrustful client\n{body}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expiry = metric(&body, "plegd_tls_certificate_expiry_timestamp_seconds").unwrap_or(0.0);
    assert!(
        expiry > now + 300.0 * 24.0 * 3600.0,
        "a self-made certificate lasts a year: {expiry}\n{body}"
    );
}

/// With certificate files (a Secret that cert-manager keeps), /metrics serves them to a reader
/// that trusts their CA, and serves new ones when they change (a renewal), with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_serve_the_certificate_files_and_their_renewals() {
    let dir = tempfile::tempdir().unwrap();
    let first = certificates(dir.path(), "first", &["plegd.test", "127.0.0.1"]);
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::copy(&first.cert, &cert).unwrap();
    std::fs::copy(&first.key, &key).unwrap();
    let s = setup(&[
        "--metrics-auth",
        "kubernetes",
        "--metrics-tls-cert-file",
        cert.to_str().unwrap(),
        "--metrics-tls-private-key-file",
        key.to_str().unwrap(),
    ])
    .await;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], s.metrics_port));
    let get_as = |ca: std::path::PathBuf| async move {
        tokio::task::spawn_blocking(move || https_get(address, "plegd.test", &Trust::Ca(ca), "/healthz", None))
            .await
            .unwrap()
    };
    assert_eq!(get_as(first.ca.clone()).await.map(|(c, _)| c), Ok(200));
    assert!(!s.log().contains("self-signed"), "{}", s.log());
    // A renewal, as the kubelet updates a Secret's volume: new files swapped in.
    let second = certificates(dir.path(), "second", &["plegd.test"]);
    std::fs::rename(&second.key, &key).unwrap();
    std::fs::rename(&second.cert, &cert).unwrap();
    wait_for(
        "the renewed certificate served (checked every 10 s as connections come)",
        Duration::from_secs(60),
        || {
            let ca = second.ca.clone();
            async move { get_as(ca).await.is_ok_and(|(c, _)| c == 200) }
        },
    )
    .await;
    assert!(get_as(first.ca.clone()).await.is_err(), "the old certificate is gone");
    let trust = Trust::Ca(second.ca.clone());
    let token = s.api.token_for(&Identity::MetricsReader);
    let mut body = String::new();
    for _ in 0..50 {
        let (trust, token) = (trust.clone(), token.clone());
        body = tokio::task::spawn_blocking(move || https_get(address, "plegd.test", &trust, "/metrics", Some(&token)))
            .await
            .unwrap()
            .map(|(_, b)| b)
            .unwrap_or_default();
        if metric(&body, "plegd_tls_certificate_reloads_total{result=\"loaded\"}").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        metric(&body, "plegd_tls_certificate_reloads_total{result=\"loaded\"}"),
        Some(1.0),
        "{body}"
    );
}
