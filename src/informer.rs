//! The informer: a kube-rs watcher and reflector over the pods bound to this node (field selector
//! `spec.nodeName=NODE`), slimmed before it is stored ([`slim_pod`]). Every change is forwarded to
//! the syncLoop as a [`PodChange`]. Errors are logged, counted and retried with backoff; the stream
//! never ends on an error. Ready once the first complete list has been seen.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::status::generate::slim_spec;

/// A pod that changed, for the syncLoop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodChange {
    /// Added or modified.
    Applied {
        uid: String,
        key: ObjectRef<Pod>,
    },
    Deleted {
        uid: String,
    },
}

/// The informer's cache and readiness.
#[derive(Clone)]
pub struct Informer {
    pub store: Store<Pod>,
    ready: Arc<AtomicBool>,
}

impl Informer {
    /// Whether the first complete list has been seen.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// The annotation `kubectl apply` keeps: a whole copy of the applied object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the store keeps of a pod: no managedFields, no last-applied copy, and only the parts of the
/// spec that status generation reads ([`slim_spec`]). The status is kept whole: it is what status
/// patches are computed against.
pub fn slim_pod(pod: &mut Pod) {
    pod.managed_fields_mut().clear();
    pod.annotations_mut().remove(LAST_APPLIED);
    if let Some(spec) = pod.spec.as_mut() {
        slim_spec(spec);
    }
}

fn change_of(pod: &Pod) -> Option<PodChange> {
    let uid = pod.metadata.uid.clone()?;
    Some(PodChange::Applied {
        uid,
        key: ObjectRef::from_obj(pod),
    })
}

/// Start watching the pods bound to `node_name`; changes go to `changes`.
pub fn start(
    client: kube::Client,
    node_name: &str,
    changes: mpsc::Sender<PodChange>,
    metrics: Arc<Metrics>,
) -> (Informer, tokio::task::JoinHandle<()>) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    let (store, writer) = reflector::store();
    let ready = Arc::new(AtomicBool::new(false));
    let informer = Informer {
        store,
        ready: ready.clone(),
    };
    let node = node_name.to_owned();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(api, config)
            .default_backoff()
            .modify(slim_pod)
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
                    metrics.count_runtime_error("informer_watch");
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
    (informer, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn the_store_keeps_a_slim_pod() {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some("u1".into()),
                annotations: Some(
                    [
                        (LAST_APPLIED.to_owned(), "{}".to_owned()),
                        ("keep".to_owned(), "me".to_owned()),
                    ]
                    .into(),
                ),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                volumes: Some(vec![Volume::default()]),
                containers: vec![Container {
                    name: "app".into(),
                    args: Some(vec!["--big".into()]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        };
        slim_pod(&mut pod);
        assert!(pod.metadata.managed_fields.as_deref().unwrap_or_default().is_empty());
        assert_eq!(pod.annotations().len(), 1);
        assert_eq!(pod.annotations()["keep"], "me");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.volumes.is_none() && spec.containers[0].args.is_none());
        assert_eq!(spec.containers[0].name, "app");
    }
}
