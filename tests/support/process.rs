//! plegd as a subprocess: starting `plegd run`, and reading what /proc and its HTTP endpoint say
//! about it (for tests and benches alike).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `plegd run` for `node` on `cri_socket` and the apiserver of `kubeconfig`, output discarded; the
/// caller adds the rest of the flags.
pub fn plegd_run(binary: &str, node: &str, cri_socket: &Path, kubeconfig: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["run", "--node-name", node, "--api-socket", "off"])
        .arg("--cri-socket")
        .arg(cri_socket)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// A child process killed (and reaped) when dropped: a test that fails leaves no plegd behind.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `plegd run` child with its metrics endpoint on a port of its own and its log in a file;
/// killed when dropped.
pub struct RunningPlegd {
    child: KillOnDrop,
    port: u16,
    log: std::path::PathBuf,
}

impl RunningPlegd {
    /// Start `command` (from [`plegd_run`], with its flags) with `--metrics-address` on a free
    /// port and stderr in `dir/plegd.log`.
    pub fn spawn(mut command: Command, dir: &Path) -> Self {
        let port = free_port();
        let log = dir.join("plegd.log");
        let child = command
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")))
            .spawn()
            .expect("spawn plegd");
        Self {
            child: KillOnDrop(child),
            port,
            log,
        }
    }

    /// SIGTERM, as systemd or the kubelet stops it, then wait up to `timeout` for it to exit:
    /// its exit status (a panic when it did not exit).
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for plegd") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "plegd did not exit within {timeout:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A metric's value, 0 when it is not (yet) there.
    pub fn metric(&self, name: &str) -> f64 {
        http_get(self.port, "/metrics")
            .and_then(|(_, body)| metric(&body, name))
            .unwrap_or(0.0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many log lines contain `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }
}

/// Flags of a fast-relisting full-mode plegd against the fake CRI server (which sends no events).
pub const FULL_MODE_FAST_RELIST: [&str; 6] = [
    "--status-mode",
    "full",
    "--triggers",
    "none",
    "--relist-period",
    "200ms",
];

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A plain HTTP/1.1 GET on loopback: (status code, body). (A bearer token is sent over TLS
/// alone: see [`crate::serve::tls::https_get`].)
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(10)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// The value of the sample named exactly `name` (labels included) in a Prometheus text body.
pub use plegd::metrics::sample as metric;

/// A numeric field of /proc/PID/status (`VmRSS:` in kB, `Threads:`), 0 when unreadable.
pub fn status_field(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

pub fn rss_mib(pid: u32) -> f64 {
    status_field(pid, "VmRSS:") / 1024.0
}

pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

pub fn clock_ticks() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().expect("getconf");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    field(11) + field(12)
}

/// The TCP connections process `pid` holds open to `port` on the far end (established, IPv4 or
/// IPv6): its socket descriptors matched with the kernel's tables of its network namespace.
pub fn tcp_connections_to(pid: u32, port: u16) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let sockets: std::collections::HashSet<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(remote), Some(state), Some(inode)) = (fields.get(2), fields.get(3), fields.get(9)) else {
                continue;
            };
            let far_port = remote.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            // 01: ESTABLISHED.
            if far_port == Some(port) && *state == "01" && sockets.contains(*inode) {
                count += 1;
            }
        }
    }
    count
}
