//! Runtime triggers: streams that say "something changed for this container or pod", turned into
//! targeted relists. A trigger carries no state into plegd but one: containerd's `/tasks/exit` of a
//! container's init process, whose exit status and time containerd's CRI copies into the
//! container's status once it gets to it ([`Trigger::Exited`]; `runtime::exits`). Every other
//! event only names what to relist (the lesson of the kubelet's Evented PLEG), and the CRI state
//! confirms each exit taken so, and wins where it differs. The periodic relist keeps running as the safety net: every
//! `relist_period_with_triggers` (default 30 s) while the stream is connected, every `relist_period`
//! (default 1 s) from the moment it fails until it is connected again.
//!
//! Sources:
//! - **containerd**: containerd's own events service (`/tasks/start|exit|delete|oom`,
//!   `/containers/create|delete` in namespace `k8s.io`). It broadcasts to every subscriber, so it is safe
//!   beside a kubelet. `/tasks/oom` names nothing to check (an OOM kill changes no container's CRI
//!   state by itself): it is read as data, for the reason of the container's exit.
//! - **cri**: CRI `GetContainerEvents` (containerd ≥ 1.7, CRI-O). On containerd 1.7 each event goes
//!   to ONE subscriber, so plegd would take events from a kubelet that uses Evented PLEG on the
//!   same runtime (plegd warns); containerd 2.x broadcasts, and replays recent events to a new
//!   subscriber, which plegd skips (its connection's full relist covers them). containerd 2.x
//!   sends each CRI event once the CRI state it announces is in place, so there its events are
//!   checked once each ([`Trigger::ContainerExact`]), without the re-check schedule below and
//!   without locating new ids: about a third of the runtime calls of containerd's events and a
//!   fifth less CPU under churn beside a kubelet, each event coming once containerd has built it
//!   (the statuses of the pod's sandbox and of all its containers), which under load has put a
//!   burst's exits tens of ms later (BENCHMARKS.md). On other runtimes a CRI event names its pod,
//!   relisted on the schedule.
//!
//! `auto`: CRI events on containerd 2.x, containerd's events service on containerd 1.x, CRI events
//! on any other runtime that implements them. Where CRI events run on containerd, a second stream
//! of containerd's events reads its exits and OOM kills alone ([`run_exit_source`]), so that exits
//! are shown at once there too. CRI-O and other runtimes have no such event: their exits come
//! from the CRI state.
//!
//! A runtime's event can be ahead of its CRI state (containerd 1.6 publishes `/tasks/exit` 20–70 ms
//! before its CRI plugin reports the container exited). So an event that names a known container is
//! checked by probing that one container's CRI state (one cheap status call), and its pod is
//! relisted only when the probe differs from the record; a probe or relist that finds no change is
//! repeated on a schedule ([`recheck_delay`]) that ends at the first change. No event source can
//! keep plegd probing: an event for a target on a schedule joins it, and a target whose last
//! schedule found nothing gets a sparse one ([`QUIET_FOR`]).
//!
//! A stream that fails reconnects with exponential backoff, capped, forever: no permanent fallback.
//! Triggers are coalesced: everything that arrives while a relist runs is served by the next one,
//! and a pod named many times is relisted once. Targeted and periodic relists share the relister's
//! lock, so a pod is never relisted concurrently and its events never reorder.
//!
//! The rooms: the streams themselves are read by `runtime::events`; `streams.rs` holds each event
//! source's life (subscribe, forward, end, retry, and what the stream's health says);
//! `schedule.rs` keeps each target's re-check schedule in one record and plans each fresh trigger
//! (pure); `settle.rs` learns when a settling event's second probe comes (pure); `dispatch.rs` is
//! the I/O loop around them: gather, show exits, plan, check, feed back; this file holds the
//! vocabulary and starts the stages.

mod dispatch;
pub mod exit_data;
mod schedule;
mod settle;
mod streams;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::info;

use crate::kubecontainer::PodUid;
use crate::pleg::{GenericPleg, PlegContainerState};
use crate::runtime::events::{EventSubject, cri_events_follow_state};
use crate::runtime::exits::ExitFact;
use crate::runtime::{CriRuntime, RuntimeVersion};
use crate::util::backoff::ExponentialBackoff;
use crate::util::clock::Clock;
use crate::util::supervise::Stage;

pub use dispatch::{Pending, dispatch};
pub use exit_data::MAX_OOM_KILLED;
pub use schedule::{
    BATCH_PROBES, FINE_PROBES, Fresh, FreshPlan, MAX_RECHECKS, QUIET_FOR, Schedules, Target, UNLOCATABLE_FOR,
    first_attempt, recheck_delay,
};
pub use streams::{SUBSCRIBED_AFTER, UNUSABLE_AFTER, replayed, run_exit_source, run_source};

/// What a trigger asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Relist the pod that owns this container or sandbox id (a full relist if no pod record has it).
    Container(String),
    /// As [`Trigger::Container`], from an event the runtime's CRI state follows at once (containerd's
    /// `/tasks/start`, `/tasks/delete` and `/containers/delete`: its CRI plugin marks the container
    /// running right after starting its task, exited right after deleting it), where `/tasks/exit`
    /// can lead the CRI state by seconds in a burst. Only *when* to look differs: the container is
    /// probed (or located) at once and every 2 ms, even if a re-check of it is already scheduled
    /// later. Nothing of the event is taken for state, but when the records already say what it
    /// announces (`runs`: the container or sandbox runs, at `/tasks/start`; else it exited, at
    /// `/tasks/delete`), a relist has read the change: no probe, and any schedule of it ends. An
    /// event can wait in the queue while a round's relist reads its change; probed on, it found
    /// nothing for a whole schedule (~67 probes).
    ContainerSettled { id: String, runs: bool },
    /// As [`Trigger::Container`], from an event the runtime's CRI state does not follow until a
    /// settling one comes ([`Trigger::ContainerSettled`]): containerd's `/containers/create` (the
    /// container runs only at its `/tasks/start`), and a `/tasks/exit` that is no exit fact (no
    /// time in it, or for an id no record holds running: its CRI plugin shows the container
    /// exited only once it has deleted the task, `/tasks/delete`). The container is checked
    /// sparsely, on a quiet target's schedule ([`schedule::first_attempt`]): the fine probes wait
    /// for the settling event, which pulls the schedule forward. A container the records hold gets
    /// no check at once: its probe nearly never found a change. A new id is located at once, so
    /// that its start finds it in the records.
    ContainerAhead(String),
    /// As [`Trigger::ContainerSettled`], from containerd's `/containers/delete`: the container is
    /// gone from the runtime. A container a record holds is probed as after a settling event; an
    /// id no record holds is not looked for, since nothing of it can be listed any more (located,
    /// it cost two lists every 2 ms for a second, for each removed container the records had let
    /// go already).
    ContainerGone(String),
    /// A container or sandbox id from an event that follows the runtime's CRI state (containerd
    /// 2.x's CRI events: see `runtime::events::cri_events_follow_state`): the change it announces
    /// is in the CRI state already, so the id is checked once, at once, and not again on a
    /// schedule. An id the records hold is probed; one they do not hold is looked for in `pod`,
    /// the pod its event named, by one relist of that pod (located when the event named none).
    /// `announces`: the state the event says the id reached (created: `Unknown`, started, stopped,
    /// removed: `NonExistent`; None for an event type this version does not know). An id the
    /// records show in it already is not probed, since an id's state only moves forward; an id
    /// removed that no record holds is not looked for. Nothing of the event is taken for state:
    /// the pod is where to look.
    ContainerExact {
        id: String,
        pod: Option<PodUid>,
        announces: Option<PlegContainerState>,
    },
    /// The exit of a container's init process, from containerd's `/tasks/exit`: shown at once
    /// ([`GenericPleg::containers_exited`]) for a container a record holds running; any other id
    /// is checked as [`Trigger::ContainerAhead`] names it.
    Exited(ExitFact),
    /// Relist this pod.
    Pod(PodUid),
    /// Relist everything.
    All,
}

impl From<EventSubject> for Trigger {
    /// What a runtime event names, as what to relist: an unreadable name, everything.
    fn from(subject: EventSubject) -> Self {
        match subject {
            EventSubject::Pod(uid) => Trigger::Pod(uid),
            EventSubject::Container(id) => Trigger::Container(id),
            EventSubject::Unreadable => Trigger::All,
        }
    }
}

/// Which trigger source to use (`--triggers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TriggerMode {
    /// CRI GetContainerEvents on containerd 2.x (checked once each), containerd's events on
    /// containerd 1.x, else CRI GetContainerEvents if the runtime implements it, else none.
    Auto,
    /// containerd's events service (broadcast; safe beside a kubelet).
    Containerd,
    /// CRI GetContainerEvents (on containerd 1.7, takes events from a kubelet using Evented PLEG;
    /// on containerd 2.x, one check per event: fewer runtime calls, each event once containerd
    /// has built it).
    Cri,
    /// Periodic relist only.
    None,
}

/// The source a mode resolves to for a given runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Containerd,
    Cri,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Containerd => "containerd",
            Source::Cri => "cri",
        }
    }
}

impl TriggerMode {
    /// The source to start for the runtime of `version`. `Auto` takes CRI events where they follow
    /// the CRI state (containerd 2.x: each event checked once, no re-check schedule; beside the
    /// kubelet over the same churn a fifth less CPU than containerd's events, and no locating lists
    /// of new ids) and containerd's events on containerd 1.x (whose CRI events go to one subscriber
    /// and run on a schedule); on another runtime it tries CRI events, and stops quietly if the
    /// runtime does not implement them.
    pub fn source(self, version: &RuntimeVersion) -> Option<Source> {
        match self {
            TriggerMode::Auto if version.runtime_name == "containerd" && !cri_events_follow_state(version) => {
                Some(Source::Containerd)
            }
            TriggerMode::Auto | TriggerMode::Cri => Some(Source::Cri),
            TriggerMode::Containerd => Some(Source::Containerd),
            TriggerMode::None => None,
        }
    }
}

/// The first wait before a failed trigger stream is reconnected.
pub const FIRST_RECONNECT: Duration = Duration::from_millis(100);

/// Settings of trigger streams.
#[derive(Debug, Clone)]
pub struct TriggerConfig {
    /// The waits between reconnections of a failed stream (100 ms doubling to 30 s by default).
    pub backoff: ExponentialBackoff,
    /// Triggers queued for the dispatcher; past this, the next relist is a full one.
    pub queue: NonZeroUsize,
    /// containerd namespace the kubelet's pods live in.
    pub namespace: String,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        Self {
            backoff: ExponentialBackoff::constant(FIRST_RECONNECT, Duration::from_secs(30)),
            queue: NonZeroUsize::new(4096).unwrap(),
            namespace: "k8s.io".into(),
        }
    }
}

/// The sending side of the trigger queue. Never blocks: when the queue is full it raises a flag
/// that turns the next dispatch into a full relist, so no trigger is lost.
#[derive(Clone)]
pub struct TriggerSender {
    tx: mpsc::Sender<Trigger>,
    overflow: Arc<AtomicBool>,
}

impl TriggerSender {
    pub fn send(&self, trigger: Trigger) {
        if self.tx.try_send(trigger).is_err() {
            self.overflow.store(true, Ordering::Release);
        }
    }
}

/// The receiving side, consumed by [`dispatch`].
pub struct TriggerReceiver {
    rx: mpsc::Receiver<Trigger>,
    overflow: Arc<AtomicBool>,
}

pub fn trigger_queue(capacity: NonZeroUsize) -> (TriggerSender, TriggerReceiver) {
    let (tx, rx) = mpsc::channel(capacity.get());
    let overflow = Arc::new(AtomicBool::new(false));
    (
        TriggerSender {
            tx,
            overflow: overflow.clone(),
        },
        TriggerReceiver { rx, overflow },
    )
}

/// The trigger machinery for `mode` on `runtime` as named stages to run supervised: the source
/// and the dispatcher (none for `TriggerMode::None`).
pub fn stages<C: Clock>(
    mode: TriggerMode,
    version: &RuntimeVersion,
    pleg: Arc<GenericPleg<CriRuntime, C>>,
    options: TriggerConfig,
) -> Vec<(&'static str, Stage)> {
    let Some(source) = mode.source(version) else {
        return Vec::new();
    };
    let metrics = pleg.runtime().metrics().clone();
    let (sender, receiver) = trigger_queue(options.queue);
    let runtime = pleg.runtime().clone();
    info!(source = source.as_str(), "runtime triggers on");
    let version = version.clone();
    let health = pleg.trigger_health();
    let exits = (source == Source::Cri && version.runtime_name == "containerd").then(|| {
        let (runtime, options, sender) = (runtime.clone(), options.clone(), sender.clone());
        let stage: Stage = Box::pin(async move { run_exit_source(&runtime, options, sender).await });
        ("exit-source", stage)
    });
    let source_stage: Stage =
        Box::pin(async move { run_source(source, mode, &runtime, &version, options, sender, health).await });
    let dispatcher: Stage = Box::pin(dispatch(pleg, receiver, metrics));
    let mut stages = vec![("trigger-source", source_stage), ("trigger-dispatcher", dispatcher)];
    stages.extend(exits);
    stages
}

/// [`stages`] spawned as plain tasks, for tests and benches that drive a relister by hand.
#[cfg(feature = "test-util")]
pub fn spawn<C: Clock>(
    mode: TriggerMode,
    version: &RuntimeVersion,
    pleg: Arc<GenericPleg<CriRuntime, C>>,
    options: TriggerConfig,
) -> Vec<tokio::task::JoinHandle<()>> {
    stages(mode, version, pleg, options)
        .into_iter()
        .map(|(_, stage)| tokio::spawn(stage))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_resolve_to_sources() {
        let v = |name: &str, version: &str| RuntimeVersion {
            runtime_name: name.into(),
            runtime_version: version.into(),
            runtime_api_version: "v1".into(),
        };
        let (containerd2, containerd1, crio) = (
            v("containerd", "2.1.9+unknown"),
            v("containerd", "1.7.24~ds1"),
            v("cri-o", "1.34.0"),
        );
        assert_eq!(TriggerMode::Auto.source(&containerd2), Some(Source::Cri));
        assert_eq!(TriggerMode::Auto.source(&v("containerd", "v2.0.5")), Some(Source::Cri));
        assert_eq!(TriggerMode::Auto.source(&containerd1), Some(Source::Containerd));
        // A containerd version that cannot be read is not taken for 2.x.
        assert_eq!(
            TriggerMode::Auto.source(&v("containerd", "devel")),
            Some(Source::Containerd)
        );
        assert_eq!(TriggerMode::Auto.source(&crio), Some(Source::Cri));
        assert_eq!(TriggerMode::Cri.source(&containerd1), Some(Source::Cri));
        assert_eq!(TriggerMode::Containerd.source(&containerd2), Some(Source::Containerd));
        assert_eq!(TriggerMode::Containerd.source(&crio), Some(Source::Containerd));
        assert_eq!(TriggerMode::None.source(&containerd2), None);
    }

    #[tokio::test]
    async fn full_queue_turns_into_a_full_relist_flag() {
        let (tx, mut rx) = trigger_queue(NonZeroUsize::MIN);
        tx.send(Trigger::Pod("a".into()));
        tx.send(Trigger::Pod("b".into()));
        assert_eq!(rx.rx.recv().await, Some(Trigger::Pod("a".into())));
        assert!(
            rx.overflow.load(Ordering::Acquire),
            "the dropped trigger is remembered as 'relist all'"
        );
    }
}
