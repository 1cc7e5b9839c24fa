//! Termination messages read from node files that do not answer. A file on a hung volume (NFS,
//! FUSE) under a pod's directory must not stall the relist that reads it, nor every later one, nor
//! a restarted plegd: its read gets a deadline, its message is left out and counted, and it is not
//! read again. Through the fake CRI server (which reports the file), with a real hung FUSE mount.

use plegd_test_support as support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_cri::v1::ContainerState as Cri;
use plegd::metrics::Metrics;
use plegd::pleg::{GenericPleg, PlegConfig, PodLifecycleEvent, PodLifecycleEventType as E};
use plegd::runtime::termination::HostFiles;
use plegd::runtime::{CriConfig, CriRuntime};
use plegd::util::clock::FakeClock;
use support::fake_cri::FakeServer;
use support::hung_volume::HungVolume;
use tokio::sync::mpsc;

/// Longer than any deadline of a read, far shorter than forever.
const RELIST_BOUND: Duration = Duration::from_secs(20);

struct Plegd {
    pleg: GenericPleg<CriRuntime, FakeClock>,
    events: mpsc::Receiver<PodLifecycleEvent>,
    clock: FakeClock,
    metrics: Arc<Metrics>,
}

async fn plegd(server: &FakeServer, node: &Path) -> Plegd {
    let metrics = Arc::new(Metrics::new());
    let options = CriConfig {
        host_files: HostFiles::new(&node.join("kubelet"), &node.join("logs")),
        ..CriConfig::default()
    };
    let (runtime, _) = CriRuntime::connect(&server.path, &options, metrics.clone())
        .await
        .expect("connect to the fake");
    let clock = FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let (pleg, events) = GenericPleg::new(runtime, clock.clone(), metrics.clone(), PlegConfig::default());
    Plegd {
        pleg,
        events,
        clock,
        metrics,
    }
}

impl Plegd {
    /// One relist, which must finish; the events it sent.
    async fn relist(&mut self) -> Vec<PodLifecycleEvent> {
        self.clock.advance(Duration::from_secs(1));
        tokio::time::timeout(RELIST_BOUND, self.pleg.relist())
            .await
            .expect("the relist finishes")
            .expect("relist");
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }

    fn bad_data(&self, kind: &str) -> u64 {
        let series = format!("plegd_runtime_bad_data_total{{kind=\"{kind}\"}} ");
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&series).and_then(|v| v.parse().ok()))
            .unwrap_or(0)
    }
}

fn died<'a>(events: &'a [PodLifecycleEvent], id: &str) -> &'a PodLifecycleEvent {
    events
        .iter()
        .find(|e| e.kind == E::ContainerDied && e.container_id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("no ContainerDied for {id}: {events:#?}"))
}

/// A pod with three exited containers: one whose message file is on a hung volume, one whose
/// message file is a FIFO (opening one for reading waits for a writer), one with a plain file.
/// The relist finishes and the plain file's message is there; the other two are left out and
/// counted (read_timeout, refused_path). The pod's next inspection does not read the hung file
/// again; a restarted plegd reads it once more, within the same deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_volume_stalls_no_relist() {
    let node = tempfile::tempdir().unwrap();
    let containers = node.path().join("kubelet/pods/u1/containers");
    for name in ["hung", "fifo", "plain"] {
        std::fs::create_dir_all(containers.join(name)).unwrap();
    }
    let volume = match HungVolume::mount(&containers.join("hung")) {
        Ok(volume) => volume,
        Err(error) => {
            // tests/run.sh, as root, runs every test: there this one must not be skipped.
            assert_ne!(
                std::env::var("PLEGD_REQUIRE_CONTAINERD").as_deref(),
                Ok("1"),
                "cannot mount FUSE ({error}), which the run as root requires"
            );
            eprintln!("SKIPPED a_hung_volume_stalls_no_relist: cannot mount FUSE ({error}); needs root and /dev/fuse");
            return;
        }
    };
    let fifo = containers.join("fifo/1a2b");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(containers.join("plain/1a2b"), b"plain message").unwrap();

    let server = FakeServer::start().await;
    server
        .fake
        .add_sandbox("u1", "web", "default", "sb-1", true, "10.9.0.1");
    for name in ["hung", "fifo", "plain"] {
        let id = format!("ctr-{name}");
        server
            .fake
            .add_container("u1", "sb-1", &id, name, Cri::ContainerRunning);
        server
            .fake
            .set_termination_message_file(&id, &containers.join(format!("{name}/1a2b")));
    }

    let mut p = plegd(&server, node.path()).await;
    p.relist().await;
    for name in ["hung", "fifo", "plain"] {
        server.fake.exit_container(&format!("ctr-{name}"), 1);
    }
    let events = p.relist().await;
    assert_eq!(died(&events, "ctr-plain").message.as_deref(), Some("plain message"));
    assert_eq!(died(&events, "ctr-hung").message, None);
    assert_eq!(died(&events, "ctr-fifo").message, None);
    assert_eq!(p.bad_data("read_timeout"), 1);
    assert_eq!(p.bad_data("refused_path"), 1);

    // The pod changes again: its status is read again, the hung file is not.
    server
        .fake
        .add_container("u1", "sb-1", "ctr-late", "late", Cri::ContainerRunning);
    let events = p.relist().await;
    assert!(events.iter().any(|e| e.kind == E::ContainerStarted), "{events:#?}");
    assert_eq!(p.bad_data("read_timeout"), 1, "not read again");

    // A restarted plegd meets the same file: one deadline, no hang.
    let mut restarted = plegd(&server, node.path()).await;
    let events = restarted.relist().await;
    assert_eq!(died(&events, "ctr-plain").message.as_deref(), Some("plain message"));
    assert_eq!(restarted.bad_data("read_timeout"), 1);
    drop(volume);
}

/// Node directories plegd was not given (the DaemonSet mounts neither `/var/lib/kubelet/pods` nor
/// `/var/log/pods` in `conditions` mode): an exit is reported without a message, and that is not
/// bad runtime data (it was a `refused_path` warning at every exit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_directories_not_given_are_no_bad_data() {
    let node = tempfile::tempdir().unwrap();
    let server = FakeServer::start().await;
    server
        .fake
        .add_sandbox("u1", "web", "default", "sb-1", true, "10.9.0.1");
    server
        .fake
        .add_container("u1", "sb-1", "ctr-1", "app", Cri::ContainerRunning);
    server
        .fake
        .set_termination_message_file("ctr-1", &node.path().join("kubelet/pods/u1/containers/app/1a2b"));
    let mut p = plegd(&server, node.path()).await;
    p.relist().await;
    server.fake.exit_container("ctr-1", 2);
    let events = p.relist().await;
    assert_eq!(died(&events, "ctr-1").exit_code, Some(2));
    assert_eq!(died(&events, "ctr-1").message, None);
    assert_eq!(p.bad_data("refused_path"), 0);
    assert_eq!(p.bad_data("read_timeout"), 0);
}
