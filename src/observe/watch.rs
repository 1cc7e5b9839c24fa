//! `plegd watch`: the PLEG alone, against a CRI socket, with no apiserver. It prints one line per
//! lifecycle event on stdout (text or JSON lines) while logs go to stderr. It keeps running when the
//! runtime goes away and picks up again when the runtime returns: the relister keeps relisting and
//! the first successful relist after the outage reports everything that changed meanwhile. It never
//! talks to an apiserver.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::metrics::Metrics;
use crate::observe::print::{OutputFormat, format_event};
use crate::pleg::{GenericPleg, PlegConfig, PodLifecycleEvent};
use crate::runtime::{CriConfig, CriRuntime, RuntimeError};
use crate::triggers::{self, TriggerConfig, TriggerMode};
use crate::util::clock::SystemClock;
use crate::util::supervise::{StageEnded, StageHealth, Stages};

#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub cri_socket: PathBuf,
    pub pleg: PlegConfig,
    pub cri: CriConfig,
    pub output: OutputFormat,
    pub triggers: TriggerMode,
    pub trigger_config: TriggerConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The runtime could not be reached or is not CRI v1 at start. Not retried: say what to fix.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Writing an event failed for another reason than a closed reader.
    #[error("writing events failed: {0}")]
    Output(std::io::Error),
    /// A stage (relister, triggers) ended: the watch is blind, so it ends with an error.
    #[error(transparent)]
    StageEnded(#[from] StageEnded),
}

/// Lines waiting for the writer thread (a paused reader holds up at most this many, then the
/// PLEG's own channel, which loses nothing).
const PRINT_BUFFER: usize = 1024;

/// How long lines already computed may take to be written at shutdown (a reader that never reads
/// again does not hold plegd).
const FLUSH_AT_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(5);

/// The writer of event lines: a thread of its own, so that a reader that stops reading (a paused
/// pipe, a terminal scrolled back) blocks only it — never the relister or the trigger stream.
pub struct Printer {
    lines: Option<mpsc::Sender<String>>,
    done: tokio::sync::oneshot::Receiver<Result<(), std::io::Error>>,
}

impl Printer {
    /// Start writing to `out`, each line flushed so that a pipe sees events as they happen.
    pub fn start(mut out: impl Write + Send + 'static) -> Self {
        let (lines, mut rx) = mpsc::channel::<String>(PRINT_BUFFER);
        let (done_tx, done) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut result = Ok(());
            while let Some(line) = rx.blocking_recv() {
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    result = if e.kind() == std::io::ErrorKind::BrokenPipe {
                        Ok(())
                    } else {
                        Err(e)
                    };
                    break;
                }
            }
            let _ = done_tx.send(result);
        });
        Self {
            lines: Some(lines),
            done,
        }
    }

    /// Hand one event to the writer; waits (without blocking a thread) while it is behind. False
    /// once the writer has stopped (the reader went away or writing failed).
    pub async fn print(&self, event: &PodLifecycleEvent, format: OutputFormat) -> bool {
        match &self.lines {
            Some(lines) => lines.send(format_event(event, format)).await.is_ok(),
            None => false,
        }
    }

    /// No more lines: wait up to `timeout` for those handed over to be written. The writer's
    /// error, if writing failed for another reason than a closed reader.
    pub async fn finish(mut self, timeout: std::time::Duration) -> Result<(), WatchError> {
        self.lines = None;
        match tokio::time::timeout(timeout, &mut self.done).await {
            Ok(Ok(result)) => result.map_err(WatchError::Output),
            // Still blocked on a reader that does not read: leave it (the process exits).
            Ok(Err(_)) | Err(_) => Ok(()),
        }
    }
}

/// Hand events to the printer until the channel closes or the writer stops. Room at the writer is
/// taken before an event is: cancelled while waiting, it has taken none (nothing is lost).
async fn forward(events: &mut mpsc::Receiver<PodLifecycleEvent>, printer: &Printer, format: OutputFormat) {
    let Some(lines) = &printer.lines else { return };
    loop {
        let Ok(room) = lines.reserve().await else { return };
        let Some(event) = events.recv().await else { return };
        room.send(format_event(&event, format));
    }
}

/// Write events as lines until the channel closes or the reader goes away (see [`Printer`]).
pub async fn print_events(
    mut events: mpsc::Receiver<PodLifecycleEvent>,
    format: OutputFormat,
    out: impl Write + Send + 'static,
) -> Result<(), WatchError> {
    let printer = Printer::start(out);
    forward(&mut events, &printer, format).await;
    printer.finish(FLUSH_AT_SHUTDOWN).await
}

/// Run `plegd watch` until `shutdown` completes or stdout is closed. At shutdown the events
/// already computed are still written (up to a few seconds for a reader that does not read).
pub async fn watch(
    options: WatchConfig,
    out: impl Write + Send + 'static,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WatchError> {
    let metrics = Arc::new(Metrics::new());
    let (runtime, version) = CriRuntime::connect(&options.cri_socket, &options.cri, metrics.clone()).await?;
    info!(
        socket = %options.cri_socket.display(),
        runtime = %version.runtime_name,
        version = %version.runtime_version,
        api = %version.runtime_api_version,
        relist_period = ?options.pleg.relist_period(),
        "watching the container runtime"
    );
    let (pleg, mut events) = GenericPleg::new(runtime, SystemClock, metrics, options.pleg);
    let pleg = Arc::new(pleg);
    let mut stages = Stages::new(CancellationToken::new(), StageHealth::default());
    for (name, stage) in triggers::stages(options.triggers, &version, pleg.clone(), options.trigger_config) {
        stages.spawn(name, stage);
    }
    let relist_stop = CancellationToken::new();
    let mut relister = Stages::new(CancellationToken::new(), StageHealth::default());
    relister.spawn("relister", pleg.run_until(relist_stop.clone()));
    let printer = Printer::start(out);
    let format = options.output;
    let ended = tokio::select! {
        () = forward(&mut events, &printer, format) => None,
        ended = stages.failure() => Some(ended),
        ended = relister.failure() => Some(ended),
        () = shutdown => None,
    };
    // Stop the sources; the relist under way finishes and what it computed (and kept back for a
    // full channel) is written, while the channel is still read. One deadline for it all: a
    // reader that does not read holds plegd no longer than that.
    let deadline = tokio::time::Instant::now() + FLUSH_AT_SHUTDOWN;
    stages.shutdown(std::time::Duration::from_secs(1)).await;
    relist_stop.cancel();
    let relisted = relister.finish_by(deadline);
    tokio::pin!(relisted);
    let hand_over = async {
        loop {
            tokio::select! {
                _ = &mut relisted => break,
                Some(event) = events.recv() => {
                    if !printer.print(&event, format).await {
                        return;
                    }
                }
            }
        }
        while let Ok(event) = events.try_recv() {
            if !printer.print(&event, format).await {
                return;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, hand_over).await;
    let written = printer
        .finish(deadline.saturating_duration_since(tokio::time::Instant::now()))
        .await;
    match ended {
        Some(ended) => Err(WatchError::StageEnded(ended)),
        None => written,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pleg::PodLifecycleEventType;

    /// A writer that blocks until released, as a pipe nobody reads does.
    struct Paused {
        released: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
        written: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Write for Paused {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (lock, cvar) = &*self.released;
            let mut released = lock.lock().unwrap();
            while !*released {
                released = cvar.wait(released).unwrap();
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reader that stops reading blocks only the writer thread: on plegd's one async thread the
    /// other work (here a ticker standing for the relister) goes on, events wait in the PLEG's
    /// channel, and once the reader reads again every line comes out, in order.
    #[tokio::test(flavor = "current_thread")]
    async fn a_paused_reader_blocks_nothing_else() {
        let released = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        // A write made on the async thread itself would block this one-thread runtime, timers
        // and all, so that the test would hang rather than fail: a thread of its own releases the
        // reader after 30 s, and the test then fails on the flag it leaves.
        let rescued = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (released, rescued) = (released.clone(), rescued.clone());
            std::thread::spawn(move || {
                let (lock, cvar) = &*released;
                let held = lock.lock().unwrap();
                let (mut held, _) = cvar
                    .wait_timeout_while(held, std::time::Duration::from_secs(30), |released| !*released)
                    .unwrap();
                if !*held {
                    rescued.store(true, std::sync::atomic::Ordering::SeqCst);
                    *held = true;
                    cvar.notify_all();
                }
            });
        }
        let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = Paused {
            released: released.clone(),
            written: written.clone(),
        };
        let (tx, rx) = mpsc::channel(8);
        let printing = tokio::spawn(print_events(rx, OutputFormat::Json, out));
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let event = |n: i32| PodLifecycleEvent {
            kind: PodLifecycleEventType::ContainerDied,
            pod_uid: "u1".into(),
            container_id: Some(format!("c{n}")),
            namespace: None,
            pod: None,
            container: None,
            sandbox: false,
            exit_code: Some(n),
            reason: None,
            message: None,
            timestamp: std::time::UNIX_EPOCH,
        };
        let sender = tokio::spawn(async move {
            for n in 0..2000 {
                tx.send(event(n)).await.unwrap();
            }
        });
        // 20 ticks: 100 ms on an idle machine; a loaded one may take longer, but a blocked thread
        // would never give them.
        let went_on = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while ticks.load(std::sync::atomic::Ordering::SeqCst) < 20 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            !rescued.load(std::sync::atomic::Ordering::SeqCst),
            "the paused reader blocked the async thread"
        );
        assert!(went_on.is_ok(), "the other work went on");
        assert!(written.lock().unwrap().is_empty());

        let (lock, cvar) = &*released;
        *lock.lock().unwrap() = true;
        cvar.notify_all();
        sender.await.unwrap();
        printing.await.unwrap().unwrap();
        ticker.abort();
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let codes: Vec<i64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["exit_code"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(codes, (0..2000).collect::<Vec<i64>>());
    }
}
