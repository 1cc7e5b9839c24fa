//! The task tree. Every long-running stage of plegd (relister, triggers, informer, syncLoop, status
//! writers, endpoints) runs in a [`Stages`] set, named, under a cancellation token. A stage is
//! meant to run until it is cancelled: one that returns or panics before that is a failure. The
//! first failure is kept in [`StageHealth`] (so `/healthz` fails and the systemd watchdog stops),
//! logged once with its cause by the caller, and ends the daemon with a non-zero exit, so that
//! systemd or the DaemonSet restarts it. Nothing runs detached: shutdown cancels each set and waits
//! a bounded time for its stages to end.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::task::{AbortHandle, Id, JoinSet};
use tokio_util::sync::CancellationToken;

/// A stage's work, boxed so that stages of every kind go in one list.
pub type Stage = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A stage that ended while plegd was not shutting down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stage {stage} {cause}")]
pub struct StageEnded {
    pub stage: &'static str,
    /// `returned`, `panicked: <message>` or `was aborted`.
    pub cause: String,
}

/// The first stage failure, shared with whatever reports health, and the record of every stage
/// started under it.
#[derive(Debug, Clone, Default)]
pub struct StageHealth {
    ended: Arc<OnceLock<StageEnded>>,
    started: Arc<Mutex<Vec<&'static str>>>,
}

impl StageHealth {
    /// Ok while every stage runs; else which one ended and how.
    pub fn check(&self) -> Result<(), String> {
        match self.ended.get() {
            None => Ok(()),
            Some(ended) => Err(format!("{ended}; plegd is exiting")),
        }
    }

    /// The names of the stages started, in the order they started (a name once per stage).
    pub fn started(&self) -> Vec<&'static str> {
        self.started.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn fail(&self, ended: StageEnded) {
        let _ = self.ended.set(ended);
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic".to_owned()
    }
}

/// A set of named stages under one token.
pub struct Stages {
    set: JoinSet<()>,
    names: HashMap<Id, (&'static str, AbortHandle)>,
    token: CancellationToken,
    health: StageHealth,
}

impl Stages {
    pub fn new(token: CancellationToken, health: StageHealth) -> Self {
        Self {
            set: JoinSet::new(),
            names: HashMap::new(),
            token,
            health,
        }
    }

    /// Run `stage` until it ends or the set's token is cancelled (it is then dropped at its next
    /// await point).
    pub fn spawn(&mut self, name: &'static str, stage: impl Future<Output = ()> + Send + 'static) {
        let token = self.token.clone();
        let handle = self.set.spawn(async move {
            tokio::select! {
                biased;
                () = token.cancelled() => {}
                () = stage => {}
            }
        });
        self.names.insert(handle.id(), (name, handle));
        self.health.started.lock().unwrap_or_else(|e| e.into_inner()).push(name);
    }

    /// The names of the stages still running, sorted.
    pub fn running(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.names.values().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names
    }

    /// Abort one stage as a crash would end it (for tests of the supervision itself). Returns
    /// whether a stage of that name was running.
    pub fn abort(&mut self, name: &str) -> bool {
        match self.names.values().find(|(n, _)| *n == name) {
            Some((_, handle)) => {
                handle.abort();
                true
            }
            None => false,
        }
    }

    /// Wait for the first stage to end before the token is cancelled: that is a failure, kept in
    /// the health and returned. Never completes while every stage runs (or when there are none).
    pub async fn failure(&mut self) -> StageEnded {
        loop {
            let Some(result) = self.set.join_next_with_id().await else {
                return std::future::pending().await;
            };
            let (id, cause) = match result {
                Ok((id, ())) => (id, "returned".to_owned()),
                Err(e) if e.is_panic() => {
                    let id = e.id();
                    (id, format!("panicked: {}", panic_message(e.into_panic())))
                }
                Err(e) => (e.id(), "was aborted".to_owned()),
            };
            let stage = self.names.remove(&id).map_or("unnamed", |(name, _)| name);
            if self.token.is_cancelled() {
                continue;
            }
            let ended = StageEnded { stage, cause };
            self.health.fail(ended.clone());
            return ended;
        }
    }

    /// Wait until `deadline` for every stage to end on its own (told to by other means); what is
    /// still running then is cancelled and aborted. Returns the names of the stages that were.
    pub async fn finish_by(mut self, deadline: tokio::time::Instant) -> Vec<&'static str> {
        loop {
            match tokio::time::timeout_at(deadline, self.set.join_next_with_id()).await {
                Ok(None) => return Vec::new(),
                Ok(Some(result)) => {
                    let id = match &result {
                        Ok((id, ())) => *id,
                        Err(e) => e.id(),
                    };
                    self.names.remove(&id);
                }
                Err(_) => {
                    self.token.cancel();
                    let left = self.running();
                    self.set.shutdown().await;
                    return left;
                }
            }
        }
    }

    /// Cancel every stage and wait up to `drain` for them to end; what is still running then is
    /// aborted. Returns the names of the stages that had to be aborted.
    pub async fn shutdown(self, drain: Duration) -> Vec<&'static str> {
        self.token.cancel();
        self.finish_by(tokio::time::Instant::now() + drain).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages() -> (Stages, StageHealth) {
        let health = StageHealth::default();
        (Stages::new(CancellationToken::new(), health.clone()), health)
    }

    #[tokio::test]
    async fn a_stage_that_returns_is_a_failure() {
        let (mut set, health) = stages();
        set.spawn("forever", std::future::pending());
        set.spawn("quitter", async {});
        let ended = set.failure().await;
        assert_eq!(
            ended,
            StageEnded {
                stage: "quitter",
                cause: "returned".into()
            }
        );
        assert_eq!(health.check(), Err("stage quitter returned; plegd is exiting".into()));
        assert_eq!(set.running(), ["forever"]);
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_with_its_message() {
        let (mut set, health) = stages();
        set.spawn("crasher", async { panic!("index out of range") });
        let ended = set.failure().await;
        assert_eq!(ended.stage, "crasher");
        assert_eq!(ended.cause, "panicked: index out of range");
        assert!(health.check().is_err());
    }

    #[tokio::test]
    async fn an_aborted_stage_is_a_failure() {
        let (mut set, _) = stages();
        set.spawn("a", std::future::pending());
        set.spawn("b", std::future::pending());
        assert!(set.abort("b"));
        assert!(!set.abort("nonexistent"));
        let ended = set.failure().await;
        assert_eq!((ended.stage, ended.cause.as_str()), ("b", "was aborted"));
    }

    /// `finish_by`: stages told to end by other means get until the deadline to do so (their work
    /// done); one that does not is cancelled and named.
    #[tokio::test(start_paused = true)]
    async fn finish_by_waits_for_stages_to_end_then_cuts_the_rest() {
        let (mut set, _) = stages();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        set.spawn("drains", async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        set.spawn("stuck", std::future::pending());
        let left = set
            .finish_by(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst), "not cut short");
        assert_eq!(left, ["stuck"]);
    }

    #[tokio::test]
    async fn shutdown_drops_every_stage_and_is_no_failure() {
        struct Dropped(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let (mut set, health) = stages();
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for name in ["a", "b"] {
            let guard = Dropped(dropped.clone());
            set.spawn(name, async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
        }
        let left = set.shutdown(Duration::from_secs(1)).await;
        assert!(left.is_empty(), "cancelled stages end at their next await: {left:?}");
        assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(health.check(), Ok(()));
    }

    #[tokio::test]
    async fn no_stages_never_fail() {
        let (mut set, _) = stages();
        let waited = tokio::time::timeout(Duration::from_millis(50), set.failure()).await;
        assert!(waited.is_err());
    }
}
