//! The apiserver's pod as plegd keeps it ([`ApiPod`]): the metadata without what tenants fill
//! (labels, annotations but the mirror pod's, managedFields), the status whole (status
//! patches are computed against it) and, of the spec, only what status generation and the status
//! manager read. The informer keeps one per pod of the node, so what is dropped here is dropped
//! for every pod: k8s-openapi's `Container` alone is over 2 KiB even when nearly empty, and a spec
//! carries volumes, env, commands, resources, affinity and tolerations plegd never looks at.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, EphemeralContainer, Pod, PodReadinessGate, PodSpec, PodStatus,
    ResourceRequirements, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::de::IgnoredAny;

/// This node's name, checked: a DNS subdomain (RFC 1123), as Kubernetes requires of a node's name —
/// lowercase letters, digits, `-` and `.`, each dot-separated label starting and ending with a
/// letter or digit, at most 253 characters. So it goes into the informer's field selector as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName(String);

/// Why a node name is refused (the message completes "--node-name NAME: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidNodeName {
    #[error("(or NODE_NAME) is required")]
    Empty,
    #[error(
        "{0:?}: must be a DNS subdomain (lowercase letters, digits, '-' and '.', each label starting and ending with a letter or digit; at most 253 characters)"
    )]
    NotDnsSubdomain(String),
}

/// Whether `name` is a DNS subdomain as Kubernetes validates object names
/// (`IsDNS1123Subdomain`): at most 253 characters, dot-separated labels of lowercase letters,
/// digits and '-', each starting and ending with a letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    let label_ok = |label: &str| {
        let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        label.starts_with(alnum) && label.ends_with(alnum) && label.chars().all(|c| alnum(c) || c == '-')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)
}

impl NodeName {
    pub fn new(name: &str) -> Result<Self, InvalidNodeName> {
        if name.trim().is_empty() {
            return Err(InvalidNodeName::Empty);
        }
        if !is_dns_subdomain(name) {
            return Err(InvalidNodeName::NotDnsSubdomain(name.to_owned()));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The annotation `kubectl apply` keeps: a whole copy of the applied object.
#[cfg(test)]
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A container of the spec, as far as plegd reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiContainer {
    pub name: String,
    pub image: String,
    /// `Always` on an init container makes it a sidecar (restartable init container).
    pub restart_policy: Option<String>,
    /// Whether it declares a readiness probe.
    pub readiness_probe: bool,
    /// Whether it declares a startup probe.
    pub startup_probe: bool,
    /// Its resources: what the kubelet's allocation holds for a pod it admitted (plegd does not
    /// resize; the resources the runtime applied are read from the runtime).
    pub resources: Option<Box<ResourceRequirements>>,
    /// Where the container writes its termination message (`/dev/termination-log` when unset).
    pub termination_message_path: Option<Box<str>>,
    /// `terminationMessagePolicy: FallbackToLogsOnError` (else `File`, the default).
    pub fallback_to_logs_on_error: bool,
    /// Its own restart rules (ContainerRestartRules): exit codes that restart it, or not,
    /// whatever its restart policy says.
    pub restart_policy_rules: Box<[ContainerRestartRule]>,
    /// Its volume mounts, as the status lists them (`containerStatuses[].volumeMounts`).
    pub volume_mounts: Box<[VolumeMount]>,
}

/// `terminationMessagePolicy` that falls back to the log's tail when the container failed.
const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";

impl ApiContainer {
    /// A sidecar: an init container that keeps running (`restartPolicy: Always`).
    pub fn is_restartable_init(&self) -> bool {
        self.restart_policy.as_deref() == Some("Always")
    }
}

impl From<Container> for ApiContainer {
    fn from(c: Container) -> Self {
        WireContainer::from(c).into()
    }
}

impl From<EphemeralContainer> for ApiContainer {
    fn from(c: EphemeralContainer) -> Self {
        Self::ephemeral(c.into())
    }
}

impl From<Container> for WireContainer {
    fn from(c: Container) -> Self {
        Self {
            name: Some(c.name),
            image: c.image,
            restart_policy: c.restart_policy,
            readiness_probe: c.readiness_probe.map(|_| IgnoredAny),
            startup_probe: c.startup_probe.map(|_| IgnoredAny),
            resources: c.resources,
            termination_message_path: c.termination_message_path,
            termination_message_policy: c.termination_message_policy,
            restart_policy_rules: c.restart_policy_rules,
            volume_mounts: c.volume_mounts,
        }
    }
}

impl From<EphemeralContainer> for WireContainer {
    /// What an ephemeral container has of plegd's reading ([`ApiContainer::ephemeral`] drops the rest).
    fn from(c: EphemeralContainer) -> Self {
        Self {
            name: Some(c.name),
            image: c.image,
            termination_message_path: c.termination_message_path,
            termination_message_policy: c.termination_message_policy,
            volume_mounts: c.volume_mounts,
            ..Self::default()
        }
    }
}

impl From<WireContainer> for ApiContainer {
    fn from(c: WireContainer) -> Self {
        Self {
            name: c.name.unwrap_or_default(),
            image: c.image.unwrap_or_default(),
            restart_policy: c.restart_policy,
            readiness_probe: c.readiness_probe.is_some(),
            startup_probe: c.startup_probe.is_some(),
            resources: c.resources.map(Box::new),
            termination_message_path: c.termination_message_path.map(String::into_boxed_str),
            fallback_to_logs_on_error: c.termination_message_policy.as_deref() == Some(FALLBACK_TO_LOGS_ON_ERROR),
            restart_policy_rules: c.restart_policy_rules.unwrap_or_default().into(),
            volume_mounts: c.volume_mounts.unwrap_or_default().into(),
        }
    }
}

impl ApiContainer {
    /// An ephemeral container: it has no probes, restart policy or resources of its own.
    fn ephemeral(c: WireContainer) -> Self {
        Self {
            restart_policy: None,
            readiness_probe: false,
            startup_probe: false,
            resources: None,
            restart_policy_rules: Box::default(),
            ..c.into()
        }
    }
}

/// The parts of a pod spec plegd reads. A pod without a spec has the default (no containers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiPodSpec {
    /// The node the pod is bound to; plegd writes only pods bound to its own node.
    pub node_name: Option<String>,
    pub host_network: bool,
    /// `Always` when unset.
    pub restart_policy: Option<String>,
    /// How long the pod may be active on the node, from its start time.
    pub active_deadline_seconds: Option<i64>,
    /// Its RuntimeClass (None: the runtime's default handler).
    pub runtime_class_name: Option<String>,
    /// The condition types of the pod's readiness gates.
    pub readiness_gates: Vec<String>,
    pub containers: Vec<ApiContainer>,
    pub init_containers: Vec<ApiContainer>,
    pub ephemeral_containers: Vec<ApiContainer>,
    /// Pod-level resources (PodLevelResources), if any.
    pub resources: Option<Box<ResourceRequirements>>,
    /// What running the pod costs beyond its containers (its RuntimeClass's overhead).
    pub overhead: Option<BTreeMap<String, Quantity>>,
}

/// The annotation the kubelet puts on the mirror pod of a static pod (`kubetypes.ConfigMirrorAnnotationKey`);
/// its value is the static pod's config hash, which is the static pod's uid.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod as the informer keeps it; see the module documentation. Decoded from the apiserver's JSON
/// as a [`Pod`] would be, less the metadata's managedFields, which are skipped in the JSON and never
/// built (`WirePod`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(from = "WirePod")]
pub struct ApiPod {
    /// The metadata, without managedFields, without labels, and with no annotation but
    /// [`MIRROR_POD_ANNOTATION`]: whoever may create a pod writes the labels and annotations (up to
    /// about 1.5 MiB a pod, which the informer would keep for every pod of the node), and plegd reads
    /// none of them but that one. Its status writes send no metadata but the uid, so nothing is lost
    /// by not keeping them.
    pub metadata: ObjectMeta,
    pub spec: ApiPodSpec,
    pub status: Option<PodStatus>,
}

impl From<Pod> for ApiPod {
    fn from(pod: Pod) -> Self {
        Self {
            metadata: kept_metadata(pod.metadata),
            spec: pod.spec.map(|s| WireSpec::from(s).into()).unwrap_or_default(),
            status: pod.status,
        }
    }
}

/// The metadata as plegd keeps it ([`ApiPod::metadata`]): without managedFields and labels, and
/// with no annotation but the mirror pod's.
fn kept_metadata(mut metadata: ObjectMeta) -> ObjectMeta {
    metadata.managed_fields = None;
    metadata.labels = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.retain(|key, _| key == MIRROR_POD_ANNOTATION);
    }
    if metadata.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        metadata.annotations = None;
    }
    metadata
}

impl From<PodSpec> for WireSpec {
    fn from(s: PodSpec) -> Self {
        let containers = |list: Vec<Container>| Some(list.into_iter().map(WireContainer::from).collect());
        Self {
            node_name: s.node_name,
            host_network: s.host_network,
            restart_policy: s.restart_policy,
            active_deadline_seconds: s.active_deadline_seconds,
            runtime_class_name: s.runtime_class_name,
            readiness_gates: s.readiness_gates,
            containers: containers(s.containers),
            init_containers: s.init_containers.and_then(containers),
            ephemeral_containers: s
                .ephemeral_containers
                .map(|list| list.into_iter().map(WireContainer::from).collect()),
            resources: s.resources,
            overhead: s.overhead,
        }
    }
}

/// A pod spec as the apiserver sends it, decoded only as far as [`ApiPodSpec`] reads it: volumes,
/// affinity, tolerations, security contexts … are skipped in the JSON and never built. Every field
/// is optional, a missing or null one its default, as k8s-openapi decodes a `PodSpec`.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    node_name: Option<String>,
    host_network: Option<bool>,
    restart_policy: Option<String>,
    active_deadline_seconds: Option<i64>,
    runtime_class_name: Option<String>,
    readiness_gates: Option<Vec<PodReadinessGate>>,
    containers: Option<Vec<WireContainer>>,
    init_containers: Option<Vec<WireContainer>>,
    ephemeral_containers: Option<Vec<WireContainer>>,
    resources: Option<ResourceRequirements>,
    overhead: Option<BTreeMap<String, Quantity>>,
}

impl From<WireSpec> for ApiPodSpec {
    fn from(s: WireSpec) -> Self {
        let containers =
            |list: Option<Vec<WireContainer>>| list.unwrap_or_default().into_iter().map(ApiContainer::from);
        Self {
            node_name: s.node_name,
            host_network: s.host_network.unwrap_or(false),
            restart_policy: s.restart_policy,
            active_deadline_seconds: s.active_deadline_seconds,
            runtime_class_name: s.runtime_class_name,
            readiness_gates: s
                .readiness_gates
                .unwrap_or_default()
                .into_iter()
                .map(|g| g.condition_type)
                .collect(),
            containers: containers(s.containers).collect(),
            init_containers: containers(s.init_containers).collect(),
            ephemeral_containers: s
                .ephemeral_containers
                .unwrap_or_default()
                .into_iter()
                .map(ApiContainer::ephemeral)
                .collect(),
            resources: s.resources.map(Box::new),
            overhead: s.overhead,
        }
    }
}

/// A container (or ephemeral container) as the apiserver sends it, decoded only as far as
/// [`ApiContainer`] reads it: its command, env, ports and the bodies of its probes are skipped in
/// the JSON and never built.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer {
    name: Option<String>,
    image: Option<String>,
    restart_policy: Option<String>,
    readiness_probe: Option<IgnoredAny>,
    startup_probe: Option<IgnoredAny>,
    resources: Option<ResourceRequirements>,
    termination_message_path: Option<String>,
    termination_message_policy: Option<String>,
    restart_policy_rules: Option<Vec<ContainerRestartRule>>,
    volume_mounts: Option<Vec<VolumeMount>>,
}

/// A pod as the apiserver sends it (a watch event's, a list's or a status write's answer), decoded
/// for [`ApiPod`]. The metadata's managedFields (one entry per writer, each a tree of every field
/// it set: the kubelet's and plegd's both name every status field) are skipped without being built:
/// decoded, they were ~4 % of plegd's CPU under churn beside a kubelet, for a field plegd drops.
#[derive(serde::Deserialize)]
struct WirePod {
    #[serde(default, deserialize_with = "kept_metadata_of_json")]
    metadata: ObjectMeta,
    spec: Option<WireSpec>,
    status: Option<PodStatus>,
}

impl From<WirePod> for ApiPod {
    fn from(pod: WirePod) -> Self {
        Self {
            metadata: kept_metadata(pod.metadata),
            spec: pod.spec.map(ApiPodSpec::from).unwrap_or_default(),
            status: pod.status,
        }
    }
}

/// An `ObjectMeta` decoded as k8s-openapi decodes it, less what [`kept_metadata`] drops, which is
/// skipped in the JSON and never built: `managedFields`, `labels`, and every annotation but
/// [`MIRROR_POD_ANNOTATION`] (their keys are read, borrowed where the JSON has no escapes; their
/// values are skipped).
fn kept_metadata_of_json<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    use serde::de::{DeserializeSeed, IgnoredAny, IntoDeserializer, MapAccess, Visitor};

    /// The map of an object's fields, without `managedFields` and `labels`; its annotations,
    /// filtered as they are read, are handed on last.
    struct Kept<A> {
        map: A,
        annotations: Option<BTreeMap<String, String>>,
        /// The next value asked for is `annotations`' (its key was just handed on).
        annotations_next: bool,
    }

    /// An object's annotations, of which only [`MIRROR_POD_ANNOTATION`] is built.
    struct MirrorAnnotation(BTreeMap<String, String>);

    impl<'de> serde::Deserialize<'de> for MirrorAnnotation {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Only;
            impl<'de> Visitor<'de> for Only {
                type Value = MirrorAnnotation;

                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object's annotations")
                }

                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MirrorAnnotation, A::Error> {
                    let mut kept = BTreeMap::new();
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        if key == MIRROR_POD_ANNOTATION {
                            kept.insert(key.into_owned(), map.next_value::<String>()?);
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(MirrorAnnotation(kept))
                }

                fn visit_unit<E: serde::de::Error>(self) -> Result<MirrorAnnotation, E> {
                    Ok(MirrorAnnotation(BTreeMap::new()))
                }
            }
            deserializer.deserialize_any(Only)
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Kept<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
            while let Some(key) = self.map.next_key::<Cow<'de, str>>()? {
                match key.as_ref() {
                    "managedFields" | "labels" => {
                        self.map.next_value::<IgnoredAny>()?;
                    }
                    "annotations" => {
                        let MirrorAnnotation(kept) = self.map.next_value()?;
                        self.annotations = Some(kept).filter(|k| !k.is_empty());
                    }
                    _ => {
                        let key: serde::de::value::CowStrDeserializer<'de, A::Error> = key.into_deserializer();
                        return seed.deserialize(key).map(Some);
                    }
                }
            }
            if self.annotations.is_some() {
                self.annotations_next = true;
                return seed
                    .deserialize(IntoDeserializer::<A::Error>::into_deserializer("annotations"))
                    .map(Some);
            }
            Ok(None)
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
            if std::mem::take(&mut self.annotations_next) {
                // As JSON, whose deserializer hands a map to the `Option` the field is.
                let annotations: serde_json::Map<String, serde_json::Value> = self
                    .annotations
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::Value::String(v)))
                    .collect();
                return seed
                    .deserialize(serde_json::Value::Object(annotations))
                    .map_err(serde::de::Error::custom);
            }
            self.map.next_value_seed(seed)
        }
    }

    struct Metadata;

    impl<'de> Visitor<'de> for Metadata {
        type Value = ObjectMeta;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object's metadata")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ObjectMeta, A::Error> {
            serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(Kept {
                map,
                annotations: None,
                annotations_next: false,
            }))
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<ObjectMeta, E> {
            Ok(ObjectMeta::default())
        }
    }

    deserializer.deserialize_any(Metadata)
}

impl ApiPod {
    /// A mirror pod: the apiserver's copy of a static pod the kubelet runs from a file or URL
    /// (`kubetypes.IsMirrorPod`).
    pub fn is_mirror(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
    }

    /// The uid the container runtime knows this pod by (its sandbox's metadata uid, its
    /// containers' `io.kubernetes.pod.uid` label), which keys the PLEG's records, events and cache.
    /// For a mirror pod it is not the pod's own: the kubelet runs the static pod under its config
    /// hash, and the mirror pod names that hash in [`MIRROR_POD_ANNOTATION`] (the pod manager's
    /// `TranslatePodUID`). Every other pod runs under its own uid. None for a pod without a uid.
    pub fn runtime_uid(&self) -> Option<&str> {
        let mirrored = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MIRROR_POD_ANNOTATION))
            .map(String::as_str)
            .filter(|hash| !hash.is_empty());
        mirrored.or(self.metadata.uid.as_deref())
    }

    /// Whether the apiserver removes this pod in the very request that made this copy: deleted
    /// with grace period 0 and no finalizer left. Its registry's `Delete` first stores the pod with
    /// the new deletion (which watchers see) and then deletes it at once, so a status PATCH sent
    /// after this copy is answered 404. Not always: should the delete itself fail after the copy
    /// was stored, the pod stays until a DELETE (or any update) comes again, as the kubelet's
    /// status manager sends for a finished pod ([`crate::status::decide::removal_drops_write`]).
    pub fn being_removed(&self) -> bool {
        let meta = &self.metadata;
        meta.deletion_timestamp.is_some()
            && meta.deletion_grace_period_seconds == Some(0)
            && meta.finalizers.as_ref().is_none_or(Vec::is_empty)
    }
}

/// An `ApiPod` is the core/v1 Pod resource to kube-rs (object references, the reflector's store).
impl Resource for ApiPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod node_name_tests {
    use super::*;

    #[test]
    fn a_node_name_is_a_dns_subdomain() {
        for good in ["n1", "kind-worker", "ip-10-0-0-1.ec2.internal", "0", &"a".repeat(253)] {
            assert_eq!(NodeName::new(good).map(|n| n.to_string()), Ok(good.to_owned()));
        }
        assert_eq!(NodeName::new(""), Err(InvalidNodeName::Empty));
        assert_eq!(NodeName::new("   "), Err(InvalidNodeName::Empty), "blank is not given");
        for bad in [
            "Node1",
            "-n",
            "n-",
            "a..b",
            ".a",
            "n1,metadata.name=x",
            "n 1",
            "é",
            &"a".repeat(254),
        ] {
            assert!(
                matches!(NodeName::new(bad), Err(InvalidNodeName::NotDnsSubdomain(_))),
                "{bad:?} accepted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, Probe, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use kube::ResourceExt;

    /// What a tenant writes into a pod's metadata is not kept: labels and annotations of any size
    /// are skipped, the mirror pod's annotation is kept wherever it stands among the others,
    /// escaped or not, and null maps decode.
    #[test]
    fn a_tenants_labels_and_annotations_are_never_kept() {
        let big = "x".repeat(200 * 1024);
        let labels: serde_json::Map<String, serde_json::Value> = (0..2000)
            .map(|i| (format!("example.com/l{i}"), serde_json::json!("v")))
            .collect();
        for (annotations, mirror) in [
            (
                serde_json::json!({"a": big, MIRROR_POD_ANNOTATION: "h1", "z": {"not": "a string"}}),
                Some("h1"),
            ),
            (serde_json::json!({"ESCAPED": "h2", "b": big}), Some("h2")),
            (serde_json::json!({"a": big}), None),
            (serde_json::json!(null), None),
        ] {
            let text = serde_json::json!({
                "metadata": {"name": "p", "labels": labels, "annotations": annotations, "uid": "u1"},
                "spec": {"containers": [{"name": "app", "image": "i"}]}
            })
            .to_string()
            // The mirror annotation's key with its slash escaped, as a JSON encoder may write it.
            .replace("ESCAPED", "kubernetes.io\\/config.mirror");
            let decoded: ApiPod = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: mirror {mirror:?}"));
            assert_eq!(decoded.metadata.uid.as_deref(), Some("u1"));
            assert_eq!(decoded.metadata.labels, None);
            assert_eq!(
                decoded.metadata.annotations,
                mirror.map(|h| [(MIRROR_POD_ANNOTATION.to_owned(), h.to_owned())].into())
            );
            assert_eq!(decoded.runtime_uid(), Some(mirror.unwrap_or("u1")));
        }
    }

    fn heavy(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            args: Some(vec!["--big".into()]),
            command: Some(vec!["sh".into()]),
            ..Container::default()
        }
    }

    /// Decoded from the apiserver's JSON, an `ApiPod` is what the `Pod` decoded from the same JSON
    /// gives, its managedFields never built; a pod without metadata or spec decodes too.
    #[test]
    fn decoded_from_json_as_from_a_pod_without_building_managed_fields() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": {"app": "a"},
                "annotations": {LAST_APPLIED: "{}", "kubernetes.io/config.mirror": "hash"},
                "managedFields": [
                    {"manager": "kubelet", "operation": "Update", "subresource": "status",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}, ".": {}}}},
                    {"manager": "plegd", "operation": "Apply", "fieldsV1": {"f:status": {}}}
                ],
                "finalizers": ["x"],
                "deletionGracePeriodSeconds": 30
            },
            "spec": {
                "nodeName": "n1", "restartPolicy": "Never", "hostNetwork": true,
                "activeDeadlineSeconds": 30, "runtimeClassName": "rc", "schedulerName": "default",
                "containers": [
                    {"name": "app", "image": "busybox", "command": ["sh"], "env": [{"name": "A", "value": "1"}],
                     "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                     "resources": {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}},
                     "terminationMessagePolicy": "FallbackToLogsOnError", "terminationMessagePath": "/t",
                     "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
                     "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]},
                    {"name": "bare", "image": null, "startupProbe": {}, "livenessProbe": {"tcpSocket": {"port": 80}}}
                ],
                "initContainers": [{"name": "sidecar", "image": "i", "restartPolicy": "Always", "startupProbe": {}}],
                "ephemeralContainers": [{"name": "debug", "image": "e", "targetContainerName": "app",
                                         "terminationMessagePolicy": "FallbackToLogsOnError",
                                         "restartPolicy": "Always", "readinessProbe": {}, "startupProbe": {},
                                         "resources": {"limits": {"cpu": "1"}},
                                         "restartPolicyRules": [{"action": "Restart"}],
                                         "volumeMounts": [{"name": "data", "mountPath": "/d"}]}],
                "volumes": [{"name": "data", "emptyDir": {}},
                            {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
                "affinity": {"nodeAffinity": {}},
                "resources": {"limits": {"cpu": "1"}},
                "overhead": {"memory": "1Mi"},
                "readinessGates": [{"conditionType": "g"}]
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let decoded: ApiPod = serde_json::from_value(json.clone()).unwrap();
        let pod: Pod = serde_json::from_value(json).unwrap();
        assert!(pod.metadata.managed_fields.is_some());
        assert_eq!(decoded, ApiPod::from(pod));
        assert_eq!(decoded.metadata.managed_fields, None);
        assert_eq!(decoded.metadata.labels, None);
        assert_eq!(
            decoded.metadata.annotations,
            Some([(MIRROR_POD_ANNOTATION.to_owned(), "hash".to_owned())].into())
        );
        assert_eq!(decoded.metadata.finalizers, Some(vec!["x".to_owned()]));
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(decoded.spec.containers[0].name, "app");
        // An ephemeral container has no probes, restart policy or resources of its own.
        let debug = &decoded.spec.ephemeral_containers[0];
        assert_eq!(debug.volume_mounts.len(), 1);
        assert!(debug.fallback_to_logs_on_error);
        assert!(!debug.is_restartable_init() && !debug.readiness_probe && !debug.startup_probe);
        assert!(debug.resources.is_none() && debug.restart_policy_rules.is_empty());
        assert!(decoded.spec.init_containers[0].is_restartable_init());
        for bare in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null}),
            serde_json::json!({"spec": {"containers": null}}),
            serde_json::json!({"spec": {"containers": [{"name": null}]}}),
        ] {
            let pod: Pod = serde_json::from_value(bare.clone()).unwrap();
            assert_eq!(
                serde_json::from_value::<ApiPod>(bare.clone()).unwrap(),
                ApiPod::from(pod),
                "{bare}"
            );
        }
        for bare in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null}),
        ] {
            let decoded: ApiPod = serde_json::from_value(bare).unwrap();
            assert_eq!(decoded, ApiPod::default());
        }
        // A malformed field plegd reads is an error, as for a Pod.
        for bad in [
            serde_json::json!({"metadata": {"name": 7}}),
            serde_json::json!({"spec": {"containers": [{"name": 7}]}}),
            serde_json::json!({"spec": {"containers": {}}}),
            serde_json::json!({"spec": {"hostNetwork": "yes"}}),
        ] {
            assert!(serde_json::from_value::<Pod>(bad.clone()).is_err(), "{bad}");
            assert!(serde_json::from_value::<ApiPod>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn keeps_what_plegd_reads_and_nothing_else() {
        let rule = ContainerRestartRule {
            action: "Restart".into(),
            exit_codes: Some(k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: Some(vec![42]),
            }),
        };
        let mount = VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
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
                host_network: Some(true),
                restart_policy: Some("Never".into()),
                active_deadline_seconds: Some(30),
                runtime_class_name: Some("gvisor".into()),
                readiness_gates: Some(vec![PodReadinessGate {
                    condition_type: "example.com/gate".into(),
                }]),
                volumes: Some(vec![Volume::default()]),
                containers: vec![
                    Container {
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        restart_policy: Some("Never".into()),
                        restart_policy_rules: Some(vec![rule.clone()]),
                        volume_mounts: Some(vec![mount.clone()]),
                        ..heavy("app")
                    },
                    Container {
                        readiness_probe: Some(Probe::default()),
                        startup_probe: Some(Probe::default()),
                        ..heavy("probed")
                    },
                ],
                init_containers: Some(vec![Container {
                    restart_policy: Some("Always".into()),
                    ..heavy("sidecar")
                }]),
                ephemeral_containers: Some(vec![EphemeralContainer {
                    name: "debug".into(),
                    image: Some("busybox".into()),
                    ..EphemeralContainer::default()
                }]),
                resources: Some(ResourceRequirements {
                    limits: Some([("memory".to_owned(), Quantity("1Gi".into()))].into()),
                    ..ResourceRequirements::default()
                }),
                overhead: Some([("cpu".to_owned(), Quantity("10m".into()))].into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                ..PodStatus::default()
            }),
        };
        let kept = ApiPod::from(pod);
        assert!(kept.metadata.managed_fields.is_none());
        assert!(kept.metadata.labels.is_none());
        assert!(kept.metadata.annotations.is_none(), "{:?}", kept.metadata.annotations);
        assert_eq!(kept.resource_version().as_deref(), Some("7"));
        assert_eq!(
            kept.spec,
            ApiPodSpec {
                node_name: Some("n1".into()),
                host_network: true,
                restart_policy: Some("Never".into()),
                active_deadline_seconds: Some(30),
                runtime_class_name: Some("gvisor".into()),
                readiness_gates: vec!["example.com/gate".into()],
                containers: vec![
                    ApiContainer {
                        name: "app".into(),
                        image: "busybox".into(),
                        fallback_to_logs_on_error: true,
                        restart_policy: Some("Never".into()),
                        restart_policy_rules: vec![rule].into(),
                        volume_mounts: vec![mount].into(),
                        ..ApiContainer::default()
                    },
                    ApiContainer {
                        name: "probed".into(),
                        image: "busybox".into(),
                        readiness_probe: true,
                        startup_probe: true,
                        ..ApiContainer::default()
                    },
                ],
                init_containers: vec![ApiContainer {
                    name: "sidecar".into(),
                    image: "busybox".into(),
                    restart_policy: Some("Always".into()),
                    ..ApiContainer::default()
                }],
                ephemeral_containers: vec![ApiContainer {
                    name: "debug".into(),
                    image: "busybox".into(),
                    ..ApiContainer::default()
                }],
                resources: Some(Box::new(ResourceRequirements {
                    limits: Some([("memory".to_owned(), Quantity("1Gi".into()))].into()),
                    ..ResourceRequirements::default()
                })),
                overhead: Some([("cpu".to_owned(), Quantity("10m".into()))].into()),
            }
        );
        assert!(kept.spec.init_containers[0].is_restartable_init());
        assert!(!kept.spec.containers[0].is_restartable_init());
        assert_eq!(kept.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    }

    #[test]
    fn a_pod_without_spec_has_no_containers() {
        let kept = ApiPod::from(Pod::default());
        assert_eq!(kept.spec, ApiPodSpec::default());
        assert!(!kept.spec.host_network);
    }

    #[test]
    fn is_the_core_v1_pod_resource() {
        let pod = ApiPod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..ObjectMeta::default()
            },
            ..ApiPod::default()
        };
        let reference = pod.object_ref(&());
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
        assert_eq!(reference.uid.as_deref(), Some("u1"));
        assert_eq!(
            ApiPod::url_path(&(), Some("default")),
            "/api/v1/namespaces/default/pods"
        );
    }

    /// A mirror pod is known to the runtime by its static pod's uid, the config hash its
    /// annotation names (the kubelet's `TranslatePodUID`); any other pod by its own uid.
    #[test]
    fn a_mirror_pod_runs_under_its_static_pods_uid() {
        let pod = |annotation: Option<&str>| ApiPod {
            metadata: ObjectMeta {
                uid: Some("api-uid".into()),
                annotations: annotation.map(|hash| [(MIRROR_POD_ANNOTATION.to_owned(), hash.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ApiPod::default()
        };
        let regular = pod(None);
        assert!(!regular.is_mirror());
        assert_eq!(regular.runtime_uid(), Some("api-uid"));
        let mirror = pod(Some("6f2a1c9e0b7d4e3f8a5b2c1d0e9f8a7b"));
        assert!(mirror.is_mirror());
        assert_eq!(mirror.runtime_uid(), Some("6f2a1c9e0b7d4e3f8a5b2c1d0e9f8a7b"));
        // A mirror annotation that names no hash translates to nothing: the pod's own uid.
        let blank = pod(Some(""));
        assert!(blank.is_mirror());
        assert_eq!(blank.runtime_uid(), Some("api-uid"));
        assert_eq!(ApiPod::default().runtime_uid(), None);
    }

    /// Only a deletion with grace period 0 and no finalizer is removed with the copy that shows
    /// it; a graceful deletion, or a pod a finalizer holds, stays and is written to.
    #[test]
    fn being_removed_is_a_deletion_with_grace_zero_and_no_finalizer() {
        let pod = |grace: Option<i64>, finalizers: Option<Vec<String>>| ApiPod {
            metadata: ObjectMeta {
                deletion_timestamp: grace.map(|_| Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                deletion_grace_period_seconds: grace,
                finalizers,
                ..ObjectMeta::default()
            },
            ..ApiPod::default()
        };
        assert!(pod(Some(0), None).being_removed());
        assert!(pod(Some(0), Some(vec![])).being_removed());
        assert!(!pod(Some(0), Some(vec!["example.com/keep".into()])).being_removed());
        assert!(!pod(Some(30), None).being_removed());
        assert!(!pod(None, None).being_removed());
        // A grace period without a deletion timestamp is no deletion.
        let mut odd = pod(Some(0), None);
        odd.metadata.deletion_timestamp = None;
        assert!(!odd.being_removed());
    }

    #[test]
    fn is_much_smaller_than_the_api_object() {
        // The point of the type: five containers cost a few hundred bytes, not over 10 KiB.
        assert!(
            5 * size_of::<ApiContainer>() < size_of::<Container>() / 2,
            "{} vs {}",
            size_of::<ApiContainer>(),
            size_of::<Container>()
        );
    }
}
