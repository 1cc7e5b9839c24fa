//! The informer: a kube-rs watcher and reflector over the pods bound to this node (field selector
//! `spec.nodeName=NODE`), each kept as an [`ApiPod`] (only what plegd reads of it). Every change is
//! forwarded to the syncLoop as a [`PodChange`]. Errors are logged, counted and retried with
//! backoff, never sooner than a `Retry-After` the apiserver asked for; the stream never ends on an
//! error. Ready once the first complete list has been seen.
//!
//! The first list, and every list again after a watch that could not resume, is by default a
//! streaming list ([`InitialList::Stream`]): one WATCH with `sendInitialEvents=true`, which the
//! apiserver answers from its watch cache one pod at a time (client-go's reflector does the same
//! with its WatchListClient gate, the default from 1.35). An apiserver that refuses it (the WatchList
//! feature gate off, before 1.34) is asked again with paged LISTs, for as long as this plegd runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::apiserver::pod::{ApiPod, NodeName};
use crate::metrics::Metrics;
use crate::util::backoff::{ExponentialBackoff, RetryAfter, RetryAfterBackoff};
use crate::util::supervise::Stage;

/// The watch's retry waits after an error (jittered; kube-runtime's own default has the same bounds).
const WATCH_RETRY_INITIAL: std::time::Duration = std::time::Duration::from_millis(800);
const WATCH_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Pods per page of the informer's list (kube-runtime's default is 500; client-go's reflector too).
/// A page is read whole before it is decoded, and a tenant who may create pods can bind them to
/// any node with up to about 1.5 MiB each (the apiserver's request limit): 500 such pods were
/// 750 MiB in one answer, 10 are at most 15 MiB. What plegd keeps of each pod is small whatever its
/// size ([`ApiPod`]). The cost is requests: a node of 110 pods lists in 11, once at start and after
/// a watch that could not resume (the apiserver serves the pages from its watch cache).
pub const LIST_PAGE_SIZE: u32 = 10;

/// How the informer lists the pods of its node (`--initial-list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialList {
    /// A streaming list: one WATCH with `sendInitialEvents=true` from the apiserver's watch cache,
    /// one pod at a time in memory; paged LISTs where the apiserver refuses it.
    Stream,
    /// Consistent LISTs of 10 pods a page (LIST_PAGE_SIZE; served from the watch cache once it has
    /// caught up with etcd, else from etcd), then a WATCH.
    Pages,
    /// LISTs with `resourceVersion=0` (whatever the watch cache holds, never etcd), in pages where the
    /// apiserver pages them, then a WATCH.
    Cache,
}

impl InitialList {
    fn config(self, node_name: &NodeName, watch_timeout: std::time::Duration) -> watcher::Config {
        // The apiserver ends each watch after `watch_timeout`; kube's watcher gives up one silent
        // for longer (a dead connection) and watches again.
        let config = watcher::Config::default()
            .fields(&format!("spec.nodeName={node_name}"))
            .page_size(LIST_PAGE_SIZE)
            .timeout(u32::try_from(watch_timeout.as_secs()).unwrap_or(u32::MAX));
        match self {
            InitialList::Stream => config.streaming_lists(),
            InitialList::Pages => config,
            InitialList::Cache => config.any_semantic(),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            InitialList::Stream => "stream",
            InitialList::Pages => "pages",
            InitialList::Cache => "cache",
        }
    }
}

/// The list to use after `error` under `list`: paged LISTs once the apiserver refused a streaming
/// list as a request it does not take (400 or 422: `sendInitialEvents` forbidden while its WatchList
/// gate is off), else the same one (pure).
fn list_after(list: InitialList, error: &watcher::Error) -> InitialList {
    match (list, error) {
        (InitialList::Stream, watcher::Error::WatchStartFailed(kube::Error::Api(status)))
            if status.code == 400 || status.code == 422 =>
        {
            InitialList::Pages
        }
        _ => list,
    }
}

/// A pod that changed, for the syncLoop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodChange {
    /// Added or modified.
    Applied {
        uid: String,
        key: ObjectRef<ApiPod>,
    },
    Deleted {
        uid: String,
    },
}

/// The informer's cache and readiness.
#[derive(Clone)]
pub struct Informer {
    pub store: Store<ApiPod>,
    ready: Arc<AtomicBool>,
}

impl Informer {
    /// An informer over `store`, for tests that fill the store themselves.
    #[cfg(test)]
    pub(crate) fn from_store(store: Store<ApiPod>) -> Self {
        Self {
            store,
            ready: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether the first complete list has been seen.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// The changes the syncLoop is told of once `event` is in `store` (pure over the store): a pod
/// applied or deleted by the watch, and, when a list is complete, every pod it holds. A list's pods
/// are kept apart until it is complete (kube's reflector swaps them in at `InitDone`): a change sent
/// for one of them before would name a pod the store does not hold yet, which the syncLoop cannot
/// sync and forgets at its next housekeeping.
fn changes_after(event: &Event<ApiPod>, store: &Store<ApiPod>) -> Vec<PodChange> {
    match event {
        Event::Apply(pod) => change_of(pod).into_iter().collect(),
        Event::Delete(pod) => pod
            .metadata
            .uid
            .clone()
            .map(|uid| PodChange::Deleted { uid })
            .into_iter()
            .collect(),
        Event::Init | Event::InitApply(_) => Vec::new(),
        Event::InitDone => store.state().iter().filter_map(|pod| change_of(pod)).collect(),
    }
}

fn change_of(pod: &ApiPod) -> Option<PodChange> {
    let uid = pod.metadata.uid.clone()?;
    Some(PodChange::Applied {
        uid,
        key: ObjectRef::from_obj(pod),
    })
}

/// The informer over the pods bound to `node_name`, listed as `list` says, and the stage that
/// runs its watch; changes go to `changes`. Its retries wait at least as long as `retry_after`.
pub fn start(
    client: kube::Client,
    watch_timeout: std::time::Duration,
    list: InitialList,
    node_name: &NodeName,
    changes: mpsc::Sender<PodChange>,
    retry_after: Arc<RetryAfter>,
    metrics: Arc<Metrics>,
) -> (Informer, Stage) {
    // Decoded straight into what the store keeps: no whole `Pod`, no managedFields built.
    let api: Api<ApiPod> = Api::all(client);
    let (store, mut writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    let informer = Informer {
        store,
        ready: ready.clone(),
    };
    let node_name = node_name.clone();
    let store = writer.as_reader();
    let stage: Stage = Box::pin(async move {
        let mut list = list;
        loop {
            let backoff = RetryAfterBackoff::new(
                ExponentialBackoff::constant(WATCH_RETRY_INITIAL, WATCH_RETRY_MAX),
                retry_after.clone(),
            );
            let stream = watcher::watcher(api.clone(), list.config(&node_name, watch_timeout)).backoff(backoff);
            futures_util::pin_mut!(stream);
            let mut switched = false;
            while let Some(item) = stream.next().await {
                let found = match item {
                    Ok(event) => {
                        writer.apply_watcher_event(&event);
                        if matches!(event, Event::InitDone) && !ready.swap(true, Ordering::AcqRel) {
                            info!(node = %node_name, list = list.as_str(), "informer synced");
                        }
                        changes_after(&event, &store)
                    }
                    Err(error) => {
                        metrics.informer_errors.inc();
                        let next = list_after(list, &error);
                        if next != list {
                            warn!(
                                error = %error,
                                "the apiserver refused a streaming list (its WatchList feature gate is off?); listing in pages from now on"
                            );
                            list = next;
                            switched = true;
                            break;
                        }
                        warn!(error = %error, "pod watch failed; retrying with backoff");
                        Vec::new()
                    }
                };
                for change in found {
                    if changes.send(change).await.is_err() {
                        debug!("syncLoop is gone; informer stops");
                        return;
                    }
                }
            }
            if !switched {
                // kube's watcher never ends; were it to, the supervisor hears of it.
                return;
            }
        }
    });
    (informer, stage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> watcher::Error {
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                "Invalid",
            )
            .with_code(code),
        )))
    }

    #[test]
    fn a_streaming_list_refused_as_invalid_falls_back_to_pages_and_nothing_else_does() {
        assert_eq!(list_after(InitialList::Stream, &refused(422)), InitialList::Pages);
        assert_eq!(list_after(InitialList::Stream, &refused(400)), InitialList::Pages);
        // Overload, authorization and server faults are retried as they are.
        for code in [403, 429, 500, 503] {
            assert_eq!(
                list_after(InitialList::Stream, &refused(code)),
                InitialList::Stream,
                "{code}"
            );
        }
        // A watch that fails once it runs is no refusal of the streaming list.
        let failed = watcher::Error::WatchFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure("gone", "Expired").with_code(410),
        )));
        assert_eq!(list_after(InitialList::Stream, &failed), InitialList::Stream);
        // The other lists are what the user chose.
        assert_eq!(list_after(InitialList::Pages, &refused(422)), InitialList::Pages);
        assert_eq!(list_after(InitialList::Cache, &refused(422)), InitialList::Cache);
    }

    fn pod(name: &str) -> ApiPod {
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        ApiPod::from(pod)
    }

    /// Every change the syncLoop is told of names a pod the store holds when it is told: a list's
    /// pods only once the list is complete (before the fix, each was sent as it came, the store
    /// did not hold it yet, the syncLoop could not sync it and forgot it at its housekeeping, and a
    /// node whose list took longer than that under a fleet's load never had its pods written).
    #[test]
    fn a_lists_pods_are_changes_once_the_store_holds_them() {
        let (store, mut writer) = reflector::store::<ApiPod>();
        let mut told = Vec::new();
        let events = [
            Event::Init,
            Event::InitApply(pod("a")),
            Event::InitApply(pod("b")),
            Event::InitApply(pod("c")),
            Event::InitDone,
            Event::Apply(pod("d")),
            Event::Delete(pod("a")),
            // A list again (after 410 Gone): b is gone meanwhile.
            Event::Init,
            Event::InitApply(pod("c")),
            Event::InitApply(pod("d")),
            Event::InitDone,
        ];
        for event in &events {
            writer.apply_watcher_event(event);
            for change in changes_after(event, &store) {
                if let PodChange::Applied { key, .. } = &change {
                    assert!(store.get(key).is_some(), "{change:?} after {event:?}: not in the store");
                }
                told.push(change);
            }
        }
        let names = |from: usize, to: usize| -> Vec<String> {
            let mut n: Vec<String> = told[from..to]
                .iter()
                .map(|c| match c {
                    PodChange::Applied { key, .. } => key.name.clone(),
                    PodChange::Deleted { uid } => format!("deleted {uid}"),
                })
                .collect();
            n.sort();
            n
        };
        assert_eq!(told.len(), 3 + 2 + 2);
        assert_eq!(names(0, 3), ["a", "b", "c"], "the first list, whole, at its end");
        assert_eq!(names(3, 5), ["d", "deleted uid-a"]);
        assert_eq!(names(5, 7), ["c", "d"], "the second list, whole: b is no longer there");
    }

    #[test]
    fn each_list_asks_the_apiserver_as_it_says() {
        let node = NodeName::new("n1").unwrap();
        let timeout = std::time::Duration::from_secs(120);
        let stream = InitialList::Stream.config(&node, timeout);
        assert_eq!(
            stream.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        let pages = InitialList::Pages.config(&node, timeout);
        assert_eq!(pages.initial_list_strategy, watcher::InitialListStrategy::ListWatch);
        assert_eq!(pages.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(pages.page_size, Some(LIST_PAGE_SIZE));
        let cache = InitialList::Cache.config(&node, timeout);
        assert_eq!(cache.list_semantic, watcher::ListSemantic::Any);
        for config in [stream, pages, cache] {
            assert_eq!(config.field_selector.as_deref(), Some("spec.nodeName=n1"));
            assert_eq!(config.timeout, Some(120));
        }
    }
}
