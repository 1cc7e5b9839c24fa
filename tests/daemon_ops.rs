//! `plegd run` as an operator runs it: the real binary against the fake CRI server and the test
//! apiserver built from Kubernetes' own code, under a NOTIFY_SOCKET like systemd's, with its HTTP endpoint and API socket, followed
//! by `plegd events`, and stopped with SIGTERM.

use plegd_test_support as support;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::apiserver::{Apiserver, Identity};
use support::fake_cri::FakeServer;
use support::process::{KillOnDrop, free_port, http_get, metric};
use support::wait_until;

const PLEGD: &str = env!("CARGO_BIN_EXE_plegd");

/// Notifications received on the test NOTIFY_SOCKET so far.
struct Notifications {
    socket: UnixDatagram,
    seen: Vec<String>,
}

impl Notifications {
    fn drain(&mut self) -> &[String] {
        let mut buf = [0u8; 512];
        while let Ok(n) = self.socket.recv(&mut buf) {
            self.seen.push(String::from_utf8_lossy(&buf[..n]).trim().to_owned());
        }
        &self.seen
    }

    fn count(&mut self, message: &str) -> usize {
        self.drain().iter().filter(|m| m.lines().any(|l| l == message)).count()
    }

    /// Fill the socket's queue, as a manager that reads late leaves it: datagrams of the test's own
    /// (lines no one counts) until one is refused. How many fit depends on the machine
    /// (`net.unix.max_dgram_qlen`: 10 by default, 512 once a systemd has started in this network
    /// namespace) and on memory; whether it is full, not how long plegd took, is what counts.
    /// Each from a socket of its own, as plegd sends each notification: one sender's own buffer
    /// would refuse it sooner, while the queue still had room for others.
    fn fill_queue(&self) -> bool {
        let path = self.socket.local_addr().unwrap();
        let path = path.as_pathname().unwrap().to_owned();
        for _ in 0..100_000 {
            let probe = UnixDatagram::unbound().unwrap();
            probe.set_nonblocking(true).unwrap();
            match probe.send_to(b"TEST=1\n", &path) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) => panic!("filling the notify socket: {e}"),
            }
        }
        false
    }
}

/// A follower: `plegd events` with its JSON lines on a channel.
fn follow(socket: &std::path::Path, extra: &[&str]) -> (Child, mpsc::Receiver<Value>) {
    let mut child = Command::new(PLEGD)
        .args(["events", "--output", "json", "--socket"])
        .arg(socket)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn plegd events");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    (child, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_plegd_run() {
    let cri = FakeServer::start().await;
    let api = Apiserver::start().await;
    let web = api.create_bound_pod("web", "n1", 1, "Never").await;
    let db = api.create_bound_pod("db", "n1", 1, "Never").await;
    cri.fake.add_running_pod(&web, "web", 1);
    cri.fake.add_running_pod(&db, "db", 1);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig_as(dir.path(), &Identity::Plegd("n1".into()));
    let notify_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&notify_path).unwrap();
    socket.set_nonblocking(true).unwrap();
    let mut notes = Notifications {
        socket,
        seen: Vec::new(),
    };
    let api_socket = dir.path().join("run").join("plegd.sock");
    let log_path = dir.path().join("plegd.log");
    let port = free_port();

    let mut plegd = KillOnDrop(
        Command::new(PLEGD)
            .args([
                "run",
                "--node-name",
                "n1",
                "--status-mode",
                "full",
                "--triggers",
                "none",
            ])
            .args([
                "--relist-period",
                "200ms",
                "--relist-threshold",
                "1s",
                "--cri-timeout",
                "5s",
                "--log-format",
                "json",
            ])
            .arg("--cri-socket")
            .arg(&cri.path)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--api-socket")
            .arg(&api_socket)
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "400000")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("plegd's log file"))
            .spawn()
            .expect("spawn plegd run"),
    );
    // plegd's last log lines, for a failure's message.
    let log_tail = || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };

    // systemd: READY after the first relist, then watchdog pings while healthy.
    wait_until("READY=1", Duration::from_secs(15), || notes.count("READY=1") == 1).await;
    wait_until("two WATCHDOG=1", Duration::from_secs(5), || {
        notes.count("WATCHDOG=1") >= 2
    })
    .await;
    wait_until("/readyz 200", Duration::from_secs(10), || {
        http_get(port, "/readyz").is_some_and(|(c, _)| c == 200)
    })
    .await;
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    assert!(api_socket.exists(), "the API socket is served");

    let (mut all, all_rx) = follow(&api_socket, &[]);
    let (mut died_only, died_rx) = follow(&api_socket, &["--type", "ContainerDied", "--pod", "web"]);
    // Events are live, not replayed: both followers subscribed before the exit.
    wait_until("two event subscriptions", Duration::from_secs(10), || {
        http_get(port, "/metrics")
            .is_some_and(|(_, m)| m.contains("plegd_observer_subscriptions{service=\"events\"} 2"))
    })
    .await;

    cri.fake.exit_container(&format!("ctr-{web}-0"), 7);
    let died = died_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a ContainerDied line");
    assert_eq!(
        (died["type"].clone(), died["pod"].clone(), died["exit_code"].clone()),
        (json!("ContainerDied"), json!("web"), json!(7))
    );
    let first = all_rx.recv_timeout(Duration::from_secs(10)).expect("an event line");
    assert_eq!(first["pod_uid"], web.as_str());
    support::wait_for("web Failed in the apiserver", Duration::from_secs(10), || async {
        api.pod("default", "web")
            .await
            .is_some_and(|p| p["status"]["phase"] == "Failed")
    })
    .await;

    let (code, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(code, 200);
    for needle in [
        "plegd_pleg_events_total{kind=\"ContainerDied\"} 1",
        "plegd_running_pods 2",
        "plegd_running_containers{container_state=\"running\"} 1",
        "plegd_running_containers{container_state=\"exited\"} 1",
        "plegd_pleg_relist_duration_seconds_count",
        "plegd_pleg_relist_interval_seconds_count",
        "plegd_pleg_last_seen_seconds",
        "plegd_pleg_discard_events_total 0",
        "plegd_status_writes_total{result=\"ok\"}",
        "plegd_pod_status_sync_duration_seconds_count",
        "plegd_event_latency_seconds_count",
        "plegd_node_cpus",
        "plegd_apiserver_requests_total{verb=\"PATCH\",code=\"200\"}",
        "plegd_apiserver_requests_total{verb=\"WATCH\",code=\"200\"}",
    ] {
        assert!(metrics.contains(needle), "/metrics lacks {needle}:\n{metrics}");
    }
    let gauge = |name: &str| metric(&metrics, name).unwrap_or(0.0);
    let rss = gauge("plegd_process_resident_memory_bytes");
    assert!(rss > 1e6, "RSS is reported: {rss}");
    // Sockets to the runtime and the apiserver, the listener, the log: a handful, far from a leak.
    let fds = gauge("plegd_process_open_fds");
    assert!((4.0..200.0).contains(&fds), "open fds are reported: {fds}");
    // Relister, syncLoop, informer, status writers, listeners…
    let tasks = gauge("plegd_runtime_tasks");
    assert!((3.0..500.0).contains(&tasks), "live tasks are reported: {tasks}");

    // The runtime hangs: relists stop succeeding, /healthz flips after the 1 s threshold and the
    // watchdog is no longer pinged; once the runtime answers again, both come back.
    cri.fake.delay("ListPodSandbox", Duration::from_secs(30));
    wait_until("/healthz 503", Duration::from_secs(10), || {
        http_get(port, "/healthz").is_some_and(|(c, _)| c == 503)
    })
    .await;
    let (_, why) = http_get(port, "/healthz").unwrap();
    assert!(why.contains("pleg was last seen active"), "{why}");
    let pings = notes.count("WATCHDOG=1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(notes.count("WATCHDOG=1"), pings, "no watchdog pings while unhealthy");
    cri.fake.delay("ListPodSandbox", Duration::ZERO);
    wait_until("/healthz 200 again", Duration::from_secs(15), || {
        http_get(port, "/healthz").is_some_and(|(c, _)| c == 200)
    })
    .await;

    // A manager that reads its socket late: with the socket's queue full, plegd's next ping is
    // refused (and said once in its log), and plegd goes on — its work may all run on one thread,
    // which a ping that waited for the manager would stop.
    wait_until("the notify socket's queue full", Duration::from_secs(10), || {
        notes.fill_queue()
    })
    .await;
    wait_until(
        "a ping refused by the full socket, in plegd's log",
        Duration::from_secs(15),
        || std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("systemd notification not sent")),
    )
    .await;
    let answered = http_get(port, "/healthz");
    assert_eq!(
        answered.map(|(c, _)| c),
        Some(200),
        "plegd answers while the manager reads late"
    );
    let pings = notes.count("WATCHDOG=1");
    wait_until("pings again once the manager reads", Duration::from_secs(10), || {
        notes.count("WATCHDOG=1") > pings
    })
    .await;

    // SIGTERM with a status write in flight (the apiserver is slow): it lands before plegd exits 0.
    api.set_delay(Some(Duration::from_millis(1500))).await;
    cri.fake.exit_container(&format!("ctr-{db}-0"), 3);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        api.pod("default", "db").await.unwrap()["status"]["phase"] != "Failed",
        "the write is still in flight"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &plegd.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Its stop is bounded by --shutdown-timeout (10 s) and two stage drains of 2 s each; the rest
    // is slack for a loaded machine. A daemon that hangs on its way out never exits.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = plegd.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "plegd did not exit after SIGTERM; its log ends:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "a clean exit; its log ends:\n{}", log_tail());
    assert_eq!(
        api.pod("default", "db").await.unwrap()["status"]["phase"],
        "Failed",
        "the pending write was flushed"
    );
    assert_eq!(notes.count("STOPPING=1"), 1);
    assert!(!api_socket.exists(), "the API socket is removed");
    // The followers end when the daemon goes away.
    for child in [&mut all, &mut died_only] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "plegd events did not end with the daemon");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[test]
fn events_without_a_daemon_is_one_clear_line() {
    let out = Command::new(PLEGD)
        .args(["events", "--socket", "/nonexistent/plegd.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no plegd API socket at /nonexistent/plegd.sock"), "{err}");
}
