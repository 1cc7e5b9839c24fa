//! The informer: a kube-rs watcher and reflector over the pods bound to this node (field selector
//! `spec.nodeName=NODE`), each kept as an [`ApiPod`] (only what plegd reads of it). Every change is
//! forwarded to the syncLoop as a [`PodChange`]. Errors are logged, counted and retried with
//! backoff; the stream never ends on an error. Ready once the first complete list has been seen.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::pod::{ApiPod, NodeName};
use crate::supervise::Stage;

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

fn change_of(pod: &ApiPod) -> Option<PodChange> {
    let uid = pod.metadata.uid.clone()?;
    Some(PodChange::Applied {
        uid,
        key: ObjectRef::from_obj(pod),
    })
}

/// The informer over the pods bound to `node_name` and the stage that runs its watch; changes go
/// to `changes`.
pub fn start(
    client: kube::Client,
    watch_timeout: std::time::Duration,
    node_name: &NodeName,
    changes: mpsc::Sender<PodChange>,
    metrics: Arc<Metrics>,
) -> (Informer, Stage) {
    // Decoded straight into what the store keeps: no whole `Pod`, no managedFields built.
    let api: Api<ApiPod> = Api::all(client);
    // The apiserver ends each watch after `watch_timeout`; kube's watcher gives up one silent for
    // longer (a dead connection) and watches again.
    let config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .page_size(LIST_PAGE_SIZE)
        .timeout(u32::try_from(watch_timeout.as_secs()).unwrap_or(u32::MAX));
    let (store, writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    let informer = Informer {
        store,
        ready: ready.clone(),
    };
    let node = node_name.as_str().to_owned();
    let stage: Stage = Box::pin(async move {
        let stream = watcher::watcher(api, config)
            .backoff(crate::backoff::ExponentialBackoff::constant(
                WATCH_RETRY_INITIAL,
                WATCH_RETRY_MAX,
            ))
            .reflect(writer);
        futures_util::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let change = match item {
                Ok(Event::Apply(pod)) | Ok(Event::InitApply(pod)) => change_of(&pod),
                Ok(Event::Delete(pod)) => pod.metadata.uid.clone().map(|uid| PodChange::Deleted { uid }),
                Ok(Event::Init) => None,
                Ok(Event::InitDone) => {
                    if !ready.swap(true, Ordering::AcqRel) {
                        info!(node = %node, "informer synced");
                    }
                    None
                }
                Err(error) => {
                    metrics.informer_errors.inc();
                    warn!(error = %error, "pod watch failed; retrying with backoff");
                    None
                }
            };
            if let Some(change) = change
                && changes.send(change).await.is_err()
            {
                debug!("syncLoop is gone; informer stops");
                return;
            }
        }
    });
    (informer, stage)
}
