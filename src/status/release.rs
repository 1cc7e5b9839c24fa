//! `plegd release-gates`: the readiness gate's uninstall (I/O shell around [`super::gate::released`]).
//! Run once, cluster-wide, before the gate's policies and plegd go (the chart's pre-delete hook):
//! 1. the admission policy that adds the gate to new pods is deleted (with it, its bindings stop
//!    acting), so that no pod created from now on names it;
//! 2. every pod whose readiness gates name plegd's condition gets it True with the reason
//!    `GateReleased` (a strategic merge of that one condition, with the pod's uid as precondition),
//!    pass after pass until a pass finds none left: a pod admitted while the policy's deletion
//!    reached the apiserver's admission is caught by the next pass;
//! 3. the policy that makes a gated pod follow its kubelet where no plegd reports it
//!    (`plegd-readiness-gate-kubelet`) and its binding lose their finalizer
//!    (`plegd.io/release-gates`): their deletion (`kubectl delete -k`, `helm uninstall`) waits for
//!    it, so that they keep gated pods following their kubelets until the gates are released.
//!
//! After it, no gated pod waits on plegd: its Ready is the kubelet's alone. It must never run while
//! the gate is meant to stay: a released pod no longer drops out of its Service before the kubelet
//! notices a crash (until it is created again).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::gate::{is_gated, released};
use crate::apiserver::client::{ClientError, kube_clients};
use crate::metrics::Metrics;
use crate::util::backoff::{ExponentialBackoff, RetryAfter, RetryAfterBackoff};

/// The policy that adds the gate at pod CREATE (deploy/components/readiness-gate).
pub const GATE_POLICY: &str = "plegd-readiness-gate";

/// The policy (and its binding, of the same name) that makes a gated pod follow its kubelet where no
/// plegd reports it; its deletion waits for [`FINALIZER`].
pub const KUBELET_POLICY: &str = "plegd-readiness-gate-kubelet";
/// The finalizer that holds [`KUBELET_POLICY`] until the gates are released.
pub const FINALIZER: &str = "plegd.io/release-gates";

/// Passes over the cluster's pods at the most: each catches pods admitted during the one before.
const PASSES: usize = 5;
/// Tries of one pod's write before it counts as not released.
const TRIES: u32 = 4;
/// The backoff between tries of one pod's write: (initial, cap).
const WRITE_BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));
/// Pods a page when listing.
const PAGE: u32 = 500;

/// What `plegd release-gates` is run with.
#[derive(Debug, Clone)]
pub struct ReleaseConfig {
    pub kubeconfig: Option<PathBuf>,
    pub apiserver_timeout: Duration,
    /// The policy to delete first ([`GATE_POLICY`]).
    pub policy: String,
}

/// What a release did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Gated pods whose condition was set True (GateReleased).
    pub released: usize,
    /// Gated pods found released already.
    pub already: usize,
    /// Whether the policy was there to delete.
    pub policy_deleted: bool,
    /// How many of the kubelet policy and its binding had their finalizer removed (0 where the
    /// component is not installed, or it was removed before).
    pub unfinalized: usize,
}

/// Why the release did not finish. Each is final for this run; running it again is safe.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot delete the MutatingAdmissionPolicy {name}")]
    DeletePolicy {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot remove the finalizer {FINALIZER} of the {kind} {name}")]
    Finalizer {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot list the cluster's pods")]
    List(#[source] kube::Error),
    #[error("{count} gated pods could not be released (first: {first}); run plegd release-gates again")]
    Unreleased { count: usize, first: String },
    #[error("gated pods were still being created after {PASSES} passes: is the policy {0} back?")]
    StillGating(String),
}

/// The status patch that releases `pod`'s gate, or None when it has no gate or is released already:
/// plegd's condition alone (conditions merge by type), with the uid as precondition.
pub fn release_patch(pod: &Pod, now: SystemTime) -> Option<Value> {
    if !gated(pod) {
        return None;
    }
    let condition = released(pod.status.as_ref(), now)?;
    Some(json!({
        "metadata": { "uid": pod.metadata.uid },
        "status": { "conditions": [condition] },
    }))
}

/// Whether `pod`'s readiness gates name plegd's condition.
fn gated(pod: &Pod) -> bool {
    let gates: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .map(|g| g.condition_type.clone())
        .collect();
    is_gated(&gates)
}

/// Run the release (see the module documentation).
pub async fn release_gates(config: &ReleaseConfig) -> Result<Released, ReleaseError> {
    let retry_after = Arc::new(RetryAfter::default());
    let clients = kube_clients(
        config.kubeconfig.as_ref(),
        config.apiserver_timeout,
        Arc::new(Metrics::new()),
        Arc::clone(&retry_after),
    )
    .await?;
    let client = clients.requests;
    let mut done = Released {
        policy_deleted: delete_policy(&client, &config.policy).await?,
        ..Released::default()
    };
    let pods: Api<Pod> = Api::all(client);
    for pass in 1..=PASSES {
        let (released, already, failed) = release_pass(&pods, &retry_after).await?;
        done.released += released;
        if pass == 1 {
            done.already = already;
        }
        if let Some((count, first)) = failed {
            return Err(ReleaseError::Unreleased { count, first });
        }
        info!(pass, released, "release pass");
        if released == 0 {
            done.unfinalized = remove_finalizers(&pods.clone().into_client()).await?;
            return Ok(done);
        }
    }
    Err(ReleaseError::StillGating(config.policy.clone()))
}

/// The admissionregistration.k8s.io/v1 objects of a kind: (kind, plural).
const POLICY: (&str, &str) = ("MutatingAdmissionPolicy", "mutatingadmissionpolicies");
const BINDING: (&str, &str) = ("MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings");

fn admission(client: &kube::Client, (kind, plural): (&str, &str)) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural))
}

/// The JSON patch that removes [`FINALIZER`] from `finalizers`, tested in place (a concurrent
/// change fails it rather than remove another one); None when it is not there.
pub fn finalizer_removal(finalizers: &[String]) -> Option<json_patch::Patch> {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{PatchOperation, RemoveOperation, TestOperation};
    let at = finalizers.iter().position(|f| f == FINALIZER)?.to_string();
    let path = || PointerBuf::from_tokens(["metadata", "finalizers", at.as_str()]);
    Some(json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: path(),
            value: Value::from(FINALIZER),
        }),
        PatchOperation::Remove(RemoveOperation { path: path() }),
    ]))
}

/// Remove [`FINALIZER`] from the kubelet policy and its binding; how many had it.
async fn remove_finalizers(client: &kube::Client) -> Result<usize, ReleaseError> {
    let mut removed = 0;
    for which in [POLICY, BINDING] {
        let api = admission(client, which);
        let error = |source| ReleaseError::Finalizer {
            kind: which.0,
            name: KUBELET_POLICY.to_owned(),
            source,
        };
        let object = match api.get_opt(KUBELET_POLICY).await.map_err(error)? {
            Some(object) => object,
            None => continue,
        };
        let Some(patch) = finalizer_removal(object.metadata.finalizers.as_deref().unwrap_or_default()) else {
            continue;
        };
        api.patch(KUBELET_POLICY, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(error)?;
        removed += 1;
    }
    Ok(removed)
}

/// Delete the policy; whether it was there.
async fn delete_policy(client: &kube::Client, name: &str) -> Result<bool, ReleaseError> {
    match admission(client, POLICY).delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(policy = name, "policy deleted: no new pod gets the gate");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(ReleaseError::DeletePolicy {
            name: name.to_owned(),
            source,
        }),
    }
}

/// One pass over every pod: (released, already released, failures as (count, first)).
async fn release_pass(
    pods: &Api<Pod>,
    retry_after: &Arc<RetryAfter>,
) -> Result<(usize, usize, Option<(usize, String)>), ReleaseError> {
    let mut released = 0;
    let mut already = 0;
    let mut failed: Option<(usize, String)> = None;
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = pods.list(&params).await.map_err(ReleaseError::List)?;
        for pod in &page.items {
            if !gated(pod) {
                continue;
            }
            let Some(patch) = release_patch(pod, SystemTime::now()) else {
                already += 1;
                continue;
            };
            match write(pods, pod, &patch, retry_after).await {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(error) => {
                    let name = format!(
                        "{}/{}: {error}",
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default()
                    );
                    warn!(pod = %name, "gate not released");
                    let entry = failed.get_or_insert((0, name));
                    entry.0 += 1;
                }
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((released, already, failed)),
        }
    }
}

/// Write one pod's release: Ok(true) when written, Ok(false) when the pod is gone or another one
/// (its name now holds a new pod: uid precondition), else the last error after [`TRIES`]. Between
/// tries, the shared backoff, never shorter than the apiserver's last `Retry-After`.
async fn write(pods: &Api<Pod>, pod: &Pod, patch: &Value, retry_after: &Arc<RetryAfter>) -> Result<bool, kube::Error> {
    let (Some(namespace), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else {
        return Ok(false);
    };
    let api: Api<Pod> = Api::namespaced(pods.clone().into_client(), namespace);
    let mut waits = RetryAfterBackoff::new(
        ExponentialBackoff::constant(WRITE_BACKOFF.0, WRITE_BACKOFF.1),
        Arc::clone(retry_after),
    );
    let mut tries = 0;
    loop {
        tries += 1;
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return Ok(false),
            Err(kube::Error::Api(status)) if status.code == 422 && status.message.contains("metadata.uid") => {
                return Ok(false);
            }
            Err(error) if tries >= TRIES => return Err(error),
            Err(_) => tokio::time::sleep(waits.next().unwrap_or(WRITE_BACKOFF.1)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::gate::GATE_RELEASED;
    use crate::status::generate::CONTAINERS_RUNNING;
    use crate::status::generate::test_support::at;
    use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodSpec, PodStatus};

    fn pod(gates: &[&str], condition: Option<(&str, &str)>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("web-1".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: (*g).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: condition.map(|(status, reason)| {
                    vec![PodCondition {
                        type_: CONTAINERS_RUNNING.into(),
                        status: status.into(),
                        reason: Some(reason.into()),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_gated_pod_is_released_by_its_condition_alone_with_its_uid() {
        let patch = release_patch(&pod(&[CONTAINERS_RUNNING], Some(("False", "ContainerDied"))), at(3)).unwrap();
        assert_eq!(patch["metadata"], json!({"uid": "u-1"}));
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["type"], CONTAINERS_RUNNING);
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0]["reason"], GATE_RELEASED);
        assert_eq!(
            patch.as_object().unwrap().len(),
            2,
            "nothing but the uid and the condition: {patch}"
        );
    }

    #[test]
    fn only_plegds_finalizer_is_removed_where_it_stands() {
        let finalizers = vec!["example.com/keep".to_owned(), FINALIZER.to_owned()];
        assert_eq!(
            finalizer_removal(&finalizers).map(|p| serde_json::to_value(p).unwrap()),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
        assert_eq!(finalizer_removal(&finalizers[..1]), None);
    }

    #[test]
    fn pods_without_the_gate_or_released_already_are_left_alone() {
        assert_eq!(
            release_patch(&pod(&["example.com/Other"], Some(("False", "X"))), at(3)),
            None
        );
        assert_eq!(release_patch(&pod(&[], None), at(3)), None);
        assert_eq!(
            release_patch(&pod(&[CONTAINERS_RUNNING], Some(("True", GATE_RELEASED))), at(3)),
            None
        );
        assert!(
            release_patch(&pod(&[CONTAINERS_RUNNING], None), at(3)).is_some(),
            "absent: released"
        );
    }
}
