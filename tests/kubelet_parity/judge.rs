//! The parity test's judge: compares a pod status the kubelet wrote with the status plegd generated
//! for the same pod, field by field, and returns one [`Finding`] per field that differs.
//!
//! It shares no code with plegd: it uses only std, k8s-openapi, serde and serde_json. A judge built
//! on plegd's own comparison (`plegd::status::compare`) would share its blind spots: a field that
//! comparison skips, or a rule it gets wrong, would be skipped or gotten wrong on both sides of the
//! test, and the test would pass.
//!
//! How it compares:
//! - Every struct reachable from `PodStatus` in k8s-openapi (feature `v1_37`) is destructured with
//!   an exhaustive pattern, so that a field added to k8s-openapi stops this file from compiling
//!   instead of going unjudged.
//! - Leaf values are compared as their serde_json serialization and reported that way: times as
//!   the RFC 3339 strings the API shows, quantities as their strings, strings byte for byte (a
//!   trailing U+FFFD is a difference). A field that is not there is reported as `absent`. `absent`
//!   and an empty list, map or string are different values, as they are in the API's JSON.
//! - Maps (resource lists) are compared key by key. Lists of named items are matched by key:
//!   `containerStatuses`, `initContainerStatuses` and `ephemeralContainerStatuses` by `name`,
//!   `conditions` by `type`, `volumeMounts` by `mountPath`, `allocatedResourcesStatus` and
//!   `resourceClaimStatuses` by `name`, an `allocatedResourcesStatus` item's `resources` by
//!   `resourceID`, `nodeAllocatableResourceClaimStatuses` by `resourceClaimName` and their `mapping`
//!   and `overhead` by `name`, `volumeHealth` by `name` and its `healthConditions` by `status/reason`.
//!   An item on one side only is one finding with the whole item as JSON. The order of the items both
//!   sides have is compared too, as one finding `<list>.order` that lists both orders of keys: the
//!   kubelet writes these lists in a defined order. A key that occurs twice in a list is matched
//!   occurrence by occurrence and shown as `key#2`. `podIPs`, `hostIPs`, `resources.claims` and
//!   `extendedResourceClaimStatus.requestMappings` are compared index by index; `supplementalGroups`
//!   and `nodeAllocatableResourceClaimStatuses[…].containers` as whole values.
//! - An object (such as `state.running`) or a list on one side only is one finding with the whole
//!   of it as JSON.
//! - Findings come in the order k8s-openapi declares the fields (alphabetical, as `kubectl get -o
//!   yaml` shows them); a keyed list's items in the kubelet's order, then plegd's extra ones, then
//!   the list's `.order` finding; map keys sorted.
//!
//! Paths read like `phase`, `conditions[Ready].reason`,
//! `containerStatuses[main].state.terminated.message`,
//! `containerStatuses[main].volumeMounts[/data].readOnly`, `podIPs[0].ip`, `conditions.order`.
//!
//! Some fields plegd cannot know, whatever it does: the kubelet sets them from what only it sees.
//! Their findings are still reported with both values, marked with the reason ([`UNKNOWABLE`]):
//! - `kubelet-waiting-reason`: a container's `state.waiting.reason` and `state.waiting.message`
//!   (or the whole `state.waiting` when plegd has none) when the kubelet's waiting reason is
//!   anything other than `ContainerCreating` or `PodInitializing`: image pull errors, back-off,
//!   `CreateContainerError` and the like come from the kubelet's own actions, of which the runtime
//!   keeps no record.
//! - `probe`: a container's `ready` when its spec declares a readiness or a startup probe, and its
//!   `started` when its spec declares a startup probe (regular containers, and init containers with
//!   `restartPolicy: Always`); the `Ready` and `ContainersReady` conditions' status, reason, message
//!   and lastTransitionTime when any such container declares either probe; and the `Initialized`
//!   condition's same fields when an init container with `restartPolicy: Always` declares a startup
//!   probe (the kubelet counts such a container as initialized once it has started). All results of the
//!   kubelet's prober, which plegd does not run.
//! - `cgroup`: the pod-level `resources` once the pod has run — the kubelet's phase is `Running`,
//!   or terminal with a container that had an id: the kubelet reads them back from the pod's cgroup
//!   while its own copy of the pod says `Running` (also during the pod's termination, so a
//!   terminal pod keeps the values of that read, or of the allocation, as the timing falls), and
//!   the CRI does not report them.
//! - `device-health`: a container's `allocatedResourcesStatus`: the health of devices that the
//!   kubelet's container manager gets from device plugins and DRA drivers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, ContainerExtendedResourceRequest, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, ContainerUser, HostIP, ImageVolumeStatus, LinuxContainerUser,
    NodeAllocatableMappedResources, NodeAllocatableOverheadResources, NodeAllocatableResourceClaimStatus, Pod,
    PodCondition, PodExtendedResourceClaimStatus, PodIP, PodResourceClaimStatus, PodStatus, PodVolumeHealth,
    ResourceClaim, ResourceHealth, ResourceRequirements, ResourceStatus, VolumeHealthCondition, VolumeMountStatus,
    VolumeStatus,
};
use serde::Serialize;

/// One field where the kubelet's status and plegd's differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// e.g. `phase`, `conditions[Ready].reason`, `containerStatuses[main].state.terminated.message`,
    /// `containerStatuses[main].volumeMounts[/data].readOnly`, `podIPs[0].ip`, `conditions.order`.
    pub path: String,
    /// The kubelet's value as compact JSON (`absent` when the field is not there).
    pub kubelet: String,
    pub plegd: String,
    /// Why plegd cannot know this field (one of UNKNOWABLE's reasons), or None: a real difference.
    pub unknowable: Option<&'static str>,
}

impl fmt::Display for Finding {
    /// `path: kubelet <json>, plegd <json>`, and ` (unknowable: <kind>)` when it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: kubelet {}, plegd {}", self.path, self.kubelet, self.plegd)?;
        if let Some(why) = self.unknowable {
            let kind = UNKNOWABLE
                .iter()
                .find(|(_, reason)| *reason == why)
                .map_or(why, |(kind, _)| kind);
            write!(f, " (unknowable: {kind})")?;
        }
        Ok(())
    }
}

const WAITING_REASON: &str = "a waiting reason other than ContainerCreating or PodInitializing (image pull errors, \
     back-off, CreateContainerError, ...) and its message come from the kubelet's own actions, of which the \
     container runtime keeps no record";
const PROBE: &str = "a probed container's ready and started, and the pod conditions made from them, are results \
     of the kubelet's prober, which plegd does not run";
const CGROUP: &str = "once a pod has run, its pod-level resources are read back by the kubelet from the pod's \
     cgroup (during its termination too); the CRI does not report them";
const DEVICE_HEALTH: &str = "a container's allocatedResourcesStatus is the device health the kubelet's container \
     manager gets from device plugins and DRA drivers; the CRI does not report it";

/// Kinds of fields plegd cannot know, each with its reason, printed by the test.
pub const UNKNOWABLE: &[(&str, &str)] = &[
    ("kubelet-waiting-reason", WAITING_REASON),
    ("probe", PROBE),
    ("cgroup", CGROUP),
    ("device-health", DEVICE_HEALTH),
];

/// Every field of the two statuses, compared. `pod` is the pod (its spec says which containers have probes).
pub fn judge(pod: &Pod, kubelet: &PodStatus, plegd: &PodStatus) -> Vec<Finding> {
    let mut judge = Judge {
        probes: Probes::of(pod),
        findings: Vec::new(),
    };
    judge.pod_status(kubelet, plegd);
    judge.findings
}

const ABSENT: &str = "absent";

/// A value as compact JSON; never panics (a value serde_json refuses is shown as such).
fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("<not serializable: {e}>"))
}

fn shown<T: Serialize + ?Sized>(value: Option<&T>) -> String {
    value.map_or_else(|| ABSENT.to_owned(), json)
}

/// `base.field`, or `field` at the top.
fn at(base: &str, field: &str) -> String {
    if base.is_empty() {
        field.to_owned()
    } else {
        format!("{base}.{field}")
    }
}

/// What a container's spec declares that the kubelet's prober acts on.
#[derive(Debug, Default, Clone, Copy)]
struct Probed {
    readiness: bool,
    startup: bool,
}

/// The probes of a pod's regular containers and of its init containers with `restartPolicy: Always`
/// (sidecars); other init containers and ephemeral containers are never probed.
#[derive(Debug, Default)]
struct Probes {
    containers: Vec<(String, Probed)>,
    sidecars: Vec<(String, Probed)>,
}

impl Probes {
    fn of(pod: &Pod) -> Self {
        let Some(spec) = pod.spec.as_ref() else {
            return Self::default();
        };
        let probed = |c: &Container| {
            let probed = Probed {
                readiness: c.readiness_probe.is_some(),
                startup: c.startup_probe.is_some(),
            };
            (c.name.clone(), probed)
        };
        Self {
            containers: spec.containers.iter().map(probed).collect(),
            sidecars: spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(probed)
                .collect(),
        }
    }

    /// The probes of the container(s) named `name` in `list` (a malformed spec may repeat a name).
    fn find(list: &[(String, Probed)], name: &str) -> Probed {
        list.iter()
            .filter(|(n, _)| n == name)
            .fold(Probed::default(), |acc, (_, p)| Probed {
                readiness: acc.readiness || p.readiness,
                startup: acc.startup || p.startup,
            })
    }

    /// Whether the kubelet's prober decides the pod condition `type_`.
    fn condition(&self, type_: &str) -> bool {
        let any = |list: &[(String, Probed)], f: fn(&Probed) -> bool| list.iter().any(|(_, p)| f(p));
        match type_ {
            "Ready" | "ContainersReady" => {
                let probed = |p: &Probed| p.readiness || p.startup;
                any(&self.containers, probed) || any(&self.sidecars, probed)
            }
            "Initialized" => any(&self.sidecars, |p| p.startup),
            _ => false,
        }
    }
}

/// Which list of container statuses a status is in: says which spec its probes are in.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Init,
    Regular,
    Ephemeral,
}

/// The kubelet's waiting reason of `state` is unknowable to plegd.
fn waiting_unknowable(kubelet_state: Option<&ContainerState>) -> Option<&'static str> {
    let reason = kubelet_state?.waiting.as_ref()?.reason.as_deref()?;
    (!matches!(reason, "ContainerCreating" | "PodInitializing")).then_some(WAITING_REASON)
}

/// A key and which occurrence of it in its list this is (0 for the first).
type Key = (String, usize);

fn keys<T>(items: &[T], key: &impl Fn(&T) -> String) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::with_capacity(items.len());
    for item in items {
        let k = key(item);
        let n = keys.iter().filter(|(seen, _)| *seen == k).count();
        keys.push((k, n));
    }
    keys
}

fn label((key, n): &Key) -> String {
    if *n == 0 {
        key.clone()
    } else {
        format!("{key}#{}", n + 1)
    }
}

struct Judge {
    probes: Probes,
    findings: Vec<Finding>,
}

impl Judge {
    // The shapes: leaves, objects, maps, keyed and indexed lists.

    /// A leaf, compared as JSON.
    fn leaf<T: Serialize + ?Sized>(
        &mut self,
        path: &str,
        k: Option<&T>,
        p: Option<&T>,
        unknowable: Option<&'static str>,
    ) {
        let (kubelet, plegd) = (shown(k), shown(p));
        if kubelet != plegd {
            self.findings.push(Finding {
                path: path.to_owned(),
                kubelet,
                plegd,
                unknowable,
            });
        }
    }

    /// An optional object: `fields` when both sides have it, one finding when only one does.
    fn object<T: Serialize>(
        &mut self,
        path: &str,
        k: Option<&T>,
        p: Option<&T>,
        unknowable: Option<&'static str>,
        fields: impl FnOnce(&mut Self, &str, &T, &T),
    ) {
        match (k, p) {
            (Some(k), Some(p)) => fields(self, path, k, p),
            _ => self.leaf(path, k, p, unknowable),
        }
    }

    /// A map, key by key (`path[key]`).
    fn map<V: Serialize>(
        &mut self,
        path: &str,
        k: Option<&BTreeMap<String, V>>,
        p: Option<&BTreeMap<String, V>>,
        unknowable: Option<&'static str>,
    ) {
        let (Some(k), Some(p)) = (k, p) else {
            return self.leaf(path, k, p, unknowable);
        };
        let keys: BTreeSet<&String> = k.keys().chain(p.keys()).collect();
        for key in keys {
            self.leaf(&format!("{path}[{key}]"), k.get(key), p.get(key), unknowable);
        }
    }

    /// A list whose items are matched by `key` (`path[key]`), and the order of the keys both have.
    fn keyed<T: Serialize>(
        &mut self,
        path: &str,
        k: Option<&[T]>,
        p: Option<&[T]>,
        key: impl Fn(&T) -> String,
        unknowable: Option<&'static str>,
        mut item: impl FnMut(&mut Self, &str, &T, &T),
    ) {
        let (Some(k), Some(p)) = (k, p) else {
            return self.leaf(path, k, p, unknowable);
        };
        let (k_keys, p_keys) = (keys(k, &key), keys(p, &key));
        for (k_item, k_key) in k.iter().zip(&k_keys) {
            let item_path = format!("{path}[{}]", label(k_key));
            match p_keys.iter().position(|p_key| p_key == k_key) {
                Some(j) => item(self, &item_path, k_item, &p[j]),
                None => self.leaf(&item_path, Some(k_item), None, unknowable),
            }
        }
        for (p_item, p_key) in p.iter().zip(&p_keys) {
            if !k_keys.contains(p_key) {
                self.leaf(&format!("{path}[{}]", label(p_key)), None, Some(p_item), unknowable);
            }
        }
        let k_common: Vec<&Key> = k_keys.iter().filter(|key| p_keys.contains(key)).collect();
        let p_common: Vec<&Key> = p_keys.iter().filter(|key| k_keys.contains(key)).collect();
        if k_common != p_common {
            let order = |keys: &[Key]| json(&keys.iter().map(label).collect::<Vec<_>>());
            self.findings.push(Finding {
                path: format!("{path}.order"),
                kubelet: order(&k_keys),
                plegd: order(&p_keys),
                unknowable,
            });
        }
    }

    /// A list compared index by index (`path[i]`).
    fn indexed<T: Serialize>(
        &mut self,
        path: &str,
        k: Option<&[T]>,
        p: Option<&[T]>,
        unknowable: Option<&'static str>,
        mut item: impl FnMut(&mut Self, &str, &T, &T),
    ) {
        let (Some(k), Some(p)) = (k, p) else {
            return self.leaf(path, k, p, unknowable);
        };
        for i in 0..k.len().max(p.len()) {
            let item_path = format!("{path}[{i}]");
            match (k.get(i), p.get(i)) {
                (Some(k), Some(p)) => item(self, &item_path, k, p),
                (k, p) => self.leaf(&item_path, k, p, unknowable),
            }
        }
    }

    // The types, each destructured exhaustively (the kubelet's side; plegd's is read by field).

    fn pod_status(&mut self, k: &PodStatus, p: &PodStatus) {
        let PodStatus {
            allocated_resources,
            conditions,
            container_statuses,
            ephemeral_container_statuses,
            extended_resource_claim_status,
            host_ip,
            host_ips,
            init_container_statuses,
            message,
            node_allocatable_resource_claim_statuses,
            nominated_node_name,
            observed_generation,
            phase,
            pod_ip,
            pod_ips,
            qos_class,
            reason,
            resize,
            resource_claim_statuses,
            resources,
            start_time,
            volume_health,
        } = k;
        self.map(
            "allocatedResources",
            allocated_resources.as_ref(),
            p.allocated_resources.as_ref(),
            None,
        );
        self.keyed(
            "conditions",
            conditions.as_deref(),
            p.conditions.as_deref(),
            |c| c.type_.clone(),
            None,
            Self::pod_condition,
        );
        self.container_statuses(
            "containerStatuses",
            Kind::Regular,
            container_statuses.as_deref(),
            p.container_statuses.as_deref(),
        );
        self.container_statuses(
            "ephemeralContainerStatuses",
            Kind::Ephemeral,
            ephemeral_container_statuses.as_deref(),
            p.ephemeral_container_statuses.as_deref(),
        );
        self.object(
            "extendedResourceClaimStatus",
            extended_resource_claim_status.as_ref(),
            p.extended_resource_claim_status.as_ref(),
            None,
            Self::pod_extended_resource_claim_status,
        );
        self.leaf("hostIP", host_ip.as_ref(), p.host_ip.as_ref(), None);
        self.indexed(
            "hostIPs",
            host_ips.as_deref(),
            p.host_ips.as_deref(),
            None,
            Self::host_ip,
        );
        self.container_statuses(
            "initContainerStatuses",
            Kind::Init,
            init_container_statuses.as_deref(),
            p.init_container_statuses.as_deref(),
        );
        self.leaf("message", message.as_ref(), p.message.as_ref(), None);
        self.keyed(
            "nodeAllocatableResourceClaimStatuses",
            node_allocatable_resource_claim_statuses.as_deref(),
            p.node_allocatable_resource_claim_statuses.as_deref(),
            |s| s.resource_claim_name.clone(),
            None,
            Self::node_allocatable_resource_claim_status,
        );
        self.leaf(
            "nominatedNodeName",
            nominated_node_name.as_ref(),
            p.nominated_node_name.as_ref(),
            None,
        );
        self.leaf(
            "observedGeneration",
            observed_generation.as_ref(),
            p.observed_generation.as_ref(),
            None,
        );
        self.leaf("phase", phase.as_ref(), p.phase.as_ref(), None);
        self.leaf("podIP", pod_ip.as_ref(), p.pod_ip.as_ref(), None);
        self.indexed("podIPs", pod_ips.as_deref(), p.pod_ips.as_deref(), None, Self::pod_ip);
        self.leaf("qosClass", qos_class.as_ref(), p.qos_class.as_ref(), None);
        self.leaf("reason", reason.as_ref(), p.reason.as_ref(), None);
        self.leaf("resize", resize.as_ref(), p.resize.as_ref(), None);
        self.keyed(
            "resourceClaimStatuses",
            resource_claim_statuses.as_deref(),
            p.resource_claim_statuses.as_deref(),
            |s| s.name.clone(),
            None,
            Self::pod_resource_claim_status,
        );
        let ran = container_statuses
            .iter()
            .chain(init_container_statuses)
            .flatten()
            .any(|c| c.container_id.is_some());
        let has_run = match phase.as_deref() {
            Some("Running") => true,
            Some("Succeeded" | "Failed") => ran,
            _ => false,
        };
        let cgroup = has_run.then_some(CGROUP);
        self.resource_requirements("resources", resources.as_ref(), p.resources.as_ref(), cgroup);
        self.leaf("startTime", start_time.as_ref(), p.start_time.as_ref(), None);
        self.keyed(
            "volumeHealth",
            volume_health.as_deref(),
            p.volume_health.as_deref(),
            |h| h.name.clone(),
            None,
            Self::pod_volume_health,
        );
    }

    fn pod_condition(&mut self, path: &str, k: &PodCondition, p: &PodCondition) {
        let PodCondition {
            last_probe_time,
            last_transition_time,
            message,
            observed_generation,
            reason,
            status,
            type_,
        } = k;
        let probe = self.probes.condition(type_).then_some(PROBE);
        self.leaf(
            &at(path, "lastProbeTime"),
            last_probe_time.as_ref(),
            p.last_probe_time.as_ref(),
            None,
        );
        self.leaf(
            &at(path, "lastTransitionTime"),
            last_transition_time.as_ref(),
            p.last_transition_time.as_ref(),
            probe,
        );
        self.leaf(&at(path, "message"), message.as_ref(), p.message.as_ref(), probe);
        self.leaf(
            &at(path, "observedGeneration"),
            observed_generation.as_ref(),
            p.observed_generation.as_ref(),
            None,
        );
        self.leaf(&at(path, "reason"), reason.as_ref(), p.reason.as_ref(), probe);
        self.leaf(&at(path, "status"), Some(status), Some(&p.status), probe);
        self.leaf(&at(path, "type"), Some(type_), Some(&p.type_), None);
    }

    fn container_statuses(
        &mut self,
        path: &str,
        kind: Kind,
        k: Option<&[ContainerStatus]>,
        p: Option<&[ContainerStatus]>,
    ) {
        self.keyed(
            path,
            k,
            p,
            |s| s.name.clone(),
            None,
            |judge, path, k, p| {
                let probed = match kind {
                    Kind::Regular => Probes::find(&judge.probes.containers, &k.name),
                    Kind::Init => Probes::find(&judge.probes.sidecars, &k.name),
                    Kind::Ephemeral => Probed::default(),
                };
                judge.container_status(path, probed, k, p);
            },
        );
    }

    fn container_status(&mut self, path: &str, probed: Probed, k: &ContainerStatus, p: &ContainerStatus) {
        let ContainerStatus {
            allocated_resources,
            allocated_resources_status,
            container_id,
            image,
            image_id,
            last_state,
            name,
            ready,
            resources,
            restart_count,
            started,
            state,
            stop_signal,
            user,
            volume_mounts,
        } = k;
        self.map(
            &at(path, "allocatedResources"),
            allocated_resources.as_ref(),
            p.allocated_resources.as_ref(),
            None,
        );
        self.keyed(
            &at(path, "allocatedResourcesStatus"),
            allocated_resources_status.as_deref(),
            p.allocated_resources_status.as_deref(),
            |s| s.name.clone(),
            Some(DEVICE_HEALTH),
            Self::resource_status,
        );
        self.leaf(
            &at(path, "containerID"),
            container_id.as_ref(),
            p.container_id.as_ref(),
            None,
        );
        self.leaf(&at(path, "image"), Some(image), Some(&p.image), None);
        self.leaf(&at(path, "imageID"), Some(image_id), Some(&p.image_id), None);
        self.object(
            &at(path, "lastState"),
            last_state.as_ref(),
            p.last_state.as_ref(),
            None,
            |judge, path, k, p| judge.container_state(path, None, k, p),
        );
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
        let ready_probe = (probed.readiness || probed.startup).then_some(PROBE);
        self.leaf(&at(path, "ready"), Some(ready), Some(&p.ready), ready_probe);
        self.resource_requirements(&at(path, "resources"), resources.as_ref(), p.resources.as_ref(), None);
        self.leaf(
            &at(path, "restartCount"),
            Some(restart_count),
            Some(&p.restart_count),
            None,
        );
        self.leaf(
            &at(path, "started"),
            started.as_ref(),
            p.started.as_ref(),
            probed.startup.then_some(PROBE),
        );
        let waiting = waiting_unknowable(state.as_ref());
        self.object(
            &at(path, "state"),
            state.as_ref(),
            p.state.as_ref(),
            None,
            |judge, path, k, p| judge.container_state(path, waiting, k, p),
        );
        self.leaf(
            &at(path, "stopSignal"),
            stop_signal.as_ref(),
            p.stop_signal.as_ref(),
            None,
        );
        self.object(
            &at(path, "user"),
            user.as_ref(),
            p.user.as_ref(),
            None,
            Self::container_user,
        );
        self.keyed(
            &at(path, "volumeMounts"),
            volume_mounts.as_deref(),
            p.volume_mounts.as_deref(),
            |m| m.mount_path.clone(),
            None,
            Self::volume_mount_status,
        );
    }

    /// `waiting`: whether the kubelet's waiting reason and message are unknowable (in `state`, not
    /// `lastState`).
    fn container_state(&mut self, path: &str, waiting: Option<&'static str>, k: &ContainerState, p: &ContainerState) {
        let ContainerState {
            running,
            terminated,
            waiting: k_waiting,
        } = k;
        self.object(
            &at(path, "running"),
            running.as_ref(),
            p.running.as_ref(),
            None,
            Self::container_state_running,
        );
        self.object(
            &at(path, "terminated"),
            terminated.as_ref(),
            p.terminated.as_ref(),
            None,
            Self::container_state_terminated,
        );
        // On one side only, the object stands for its reason and message (its only fields); it is
        // unknowable only when it is the kubelet's, with an unknowable reason.
        self.object(
            &at(path, "waiting"),
            k_waiting.as_ref(),
            p.waiting.as_ref(),
            waiting,
            |judge, path, k, p| judge.container_state_waiting(path, waiting, k, p),
        );
    }

    fn container_state_running(&mut self, path: &str, k: &ContainerStateRunning, p: &ContainerStateRunning) {
        let ContainerStateRunning { started_at } = k;
        self.leaf(&at(path, "startedAt"), started_at.as_ref(), p.started_at.as_ref(), None);
    }

    fn container_state_terminated(&mut self, path: &str, k: &ContainerStateTerminated, p: &ContainerStateTerminated) {
        let ContainerStateTerminated {
            container_id,
            exit_code,
            finished_at,
            message,
            reason,
            signal,
            started_at,
        } = k;
        self.leaf(
            &at(path, "containerID"),
            container_id.as_ref(),
            p.container_id.as_ref(),
            None,
        );
        self.leaf(&at(path, "exitCode"), Some(exit_code), Some(&p.exit_code), None);
        self.leaf(
            &at(path, "finishedAt"),
            finished_at.as_ref(),
            p.finished_at.as_ref(),
            None,
        );
        self.leaf(&at(path, "message"), message.as_ref(), p.message.as_ref(), None);
        self.leaf(&at(path, "reason"), reason.as_ref(), p.reason.as_ref(), None);
        self.leaf(&at(path, "signal"), signal.as_ref(), p.signal.as_ref(), None);
        self.leaf(&at(path, "startedAt"), started_at.as_ref(), p.started_at.as_ref(), None);
    }

    fn container_state_waiting(
        &mut self,
        path: &str,
        unknowable: Option<&'static str>,
        k: &ContainerStateWaiting,
        p: &ContainerStateWaiting,
    ) {
        let ContainerStateWaiting { message, reason } = k;
        self.leaf(&at(path, "message"), message.as_ref(), p.message.as_ref(), unknowable);
        self.leaf(&at(path, "reason"), reason.as_ref(), p.reason.as_ref(), unknowable);
    }

    fn container_user(&mut self, path: &str, k: &ContainerUser, p: &ContainerUser) {
        let ContainerUser { linux } = k;
        self.object(
            &at(path, "linux"),
            linux.as_ref(),
            p.linux.as_ref(),
            None,
            Self::linux_container_user,
        );
    }

    fn linux_container_user(&mut self, path: &str, k: &LinuxContainerUser, p: &LinuxContainerUser) {
        let LinuxContainerUser {
            gid,
            supplemental_groups,
            uid,
        } = k;
        self.leaf(&at(path, "gid"), Some(gid), Some(&p.gid), None);
        self.leaf(
            &at(path, "supplementalGroups"),
            supplemental_groups.as_ref(),
            p.supplemental_groups.as_ref(),
            None,
        );
        self.leaf(&at(path, "uid"), Some(uid), Some(&p.uid), None);
    }

    fn volume_mount_status(&mut self, path: &str, k: &VolumeMountStatus, p: &VolumeMountStatus) {
        let VolumeMountStatus {
            mount_path,
            name,
            read_only,
            recursive_read_only,
            volume_status,
        } = k;
        self.leaf(&at(path, "mountPath"), Some(mount_path), Some(&p.mount_path), None);
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
        self.leaf(&at(path, "readOnly"), read_only.as_ref(), p.read_only.as_ref(), None);
        self.leaf(
            &at(path, "recursiveReadOnly"),
            recursive_read_only.as_ref(),
            p.recursive_read_only.as_ref(),
            None,
        );
        self.object(
            &at(path, "volumeStatus"),
            volume_status.as_ref(),
            p.volume_status.as_ref(),
            None,
            Self::volume_status,
        );
    }

    fn volume_status(&mut self, path: &str, k: &VolumeStatus, p: &VolumeStatus) {
        let VolumeStatus { image } = k;
        self.object(
            &at(path, "image"),
            image.as_ref(),
            p.image.as_ref(),
            None,
            Self::image_volume_status,
        );
    }

    fn image_volume_status(&mut self, path: &str, k: &ImageVolumeStatus, p: &ImageVolumeStatus) {
        let ImageVolumeStatus { image_ref } = k;
        self.leaf(&at(path, "imageRef"), Some(image_ref), Some(&p.image_ref), None);
    }

    fn resource_requirements(
        &mut self,
        path: &str,
        k: Option<&ResourceRequirements>,
        p: Option<&ResourceRequirements>,
        unknowable: Option<&'static str>,
    ) {
        self.object(path, k, p, unknowable, |judge, path, k, p| {
            let ResourceRequirements {
                claims,
                limits,
                requests,
            } = k;
            judge.indexed(
                &at(path, "claims"),
                claims.as_deref(),
                p.claims.as_deref(),
                unknowable,
                |judge, path, k, p| judge.resource_claim(path, unknowable, k, p),
            );
            judge.map(&at(path, "limits"), limits.as_ref(), p.limits.as_ref(), unknowable);
            judge.map(
                &at(path, "requests"),
                requests.as_ref(),
                p.requests.as_ref(),
                unknowable,
            );
        });
    }

    fn resource_claim(&mut self, path: &str, unknowable: Option<&'static str>, k: &ResourceClaim, p: &ResourceClaim) {
        let ResourceClaim { name, request } = k;
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), unknowable);
        self.leaf(&at(path, "request"), request.as_ref(), p.request.as_ref(), unknowable);
    }

    /// Under a container's `allocatedResourcesStatus`: all device health.
    fn resource_status(&mut self, path: &str, k: &ResourceStatus, p: &ResourceStatus) {
        let ResourceStatus { name, resources } = k;
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), Some(DEVICE_HEALTH));
        self.keyed(
            &at(path, "resources"),
            resources.as_deref(),
            p.resources.as_deref(),
            |h| h.resource_id.clone(),
            Some(DEVICE_HEALTH),
            Self::resource_health,
        );
    }

    fn resource_health(&mut self, path: &str, k: &ResourceHealth, p: &ResourceHealth) {
        let ResourceHealth {
            health,
            message,
            resource_id,
        } = k;
        self.leaf(
            &at(path, "health"),
            health.as_ref(),
            p.health.as_ref(),
            Some(DEVICE_HEALTH),
        );
        self.leaf(
            &at(path, "message"),
            message.as_ref(),
            p.message.as_ref(),
            Some(DEVICE_HEALTH),
        );
        self.leaf(
            &at(path, "resourceID"),
            Some(resource_id),
            Some(&p.resource_id),
            Some(DEVICE_HEALTH),
        );
    }

    fn host_ip(&mut self, path: &str, k: &HostIP, p: &HostIP) {
        let HostIP { ip } = k;
        self.leaf(&at(path, "ip"), Some(ip), Some(&p.ip), None);
    }

    fn pod_ip(&mut self, path: &str, k: &PodIP, p: &PodIP) {
        let PodIP { ip } = k;
        self.leaf(&at(path, "ip"), Some(ip), Some(&p.ip), None);
    }

    fn pod_resource_claim_status(&mut self, path: &str, k: &PodResourceClaimStatus, p: &PodResourceClaimStatus) {
        let PodResourceClaimStatus {
            name,
            resource_claim_name,
        } = k;
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
        self.leaf(
            &at(path, "resourceClaimName"),
            resource_claim_name.as_ref(),
            p.resource_claim_name.as_ref(),
            None,
        );
    }

    fn pod_extended_resource_claim_status(
        &mut self,
        path: &str,
        k: &PodExtendedResourceClaimStatus,
        p: &PodExtendedResourceClaimStatus,
    ) {
        let PodExtendedResourceClaimStatus {
            request_mappings,
            resource_claim_name,
        } = k;
        self.indexed(
            &at(path, "requestMappings"),
            Some(request_mappings.as_slice()),
            Some(p.request_mappings.as_slice()),
            None,
            Self::container_extended_resource_request,
        );
        self.leaf(
            &at(path, "resourceClaimName"),
            Some(resource_claim_name),
            Some(&p.resource_claim_name),
            None,
        );
    }

    fn container_extended_resource_request(
        &mut self,
        path: &str,
        k: &ContainerExtendedResourceRequest,
        p: &ContainerExtendedResourceRequest,
    ) {
        let ContainerExtendedResourceRequest {
            container_name,
            request_name,
            resource_name,
        } = k;
        self.leaf(
            &at(path, "containerName"),
            Some(container_name),
            Some(&p.container_name),
            None,
        );
        self.leaf(
            &at(path, "requestName"),
            Some(request_name),
            Some(&p.request_name),
            None,
        );
        self.leaf(
            &at(path, "resourceName"),
            Some(resource_name),
            Some(&p.resource_name),
            None,
        );
    }

    fn node_allocatable_resource_claim_status(
        &mut self,
        path: &str,
        k: &NodeAllocatableResourceClaimStatus,
        p: &NodeAllocatableResourceClaimStatus,
    ) {
        let NodeAllocatableResourceClaimStatus {
            containers,
            mapping,
            overhead,
            resource_claim_name,
        } = k;
        self.leaf(
            &at(path, "containers"),
            containers.as_ref(),
            p.containers.as_ref(),
            None,
        );
        self.keyed(
            &at(path, "mapping"),
            mapping.as_deref(),
            p.mapping.as_deref(),
            |m| m.name.clone(),
            None,
            Self::node_allocatable_mapped_resources,
        );
        self.keyed(
            &at(path, "overhead"),
            overhead.as_deref(),
            p.overhead.as_deref(),
            |o| o.name.clone(),
            None,
            Self::node_allocatable_overhead_resources,
        );
        self.leaf(
            &at(path, "resourceClaimName"),
            Some(resource_claim_name),
            Some(&p.resource_claim_name),
            None,
        );
    }

    fn node_allocatable_mapped_resources(
        &mut self,
        path: &str,
        k: &NodeAllocatableMappedResources,
        p: &NodeAllocatableMappedResources,
    ) {
        let NodeAllocatableMappedResources { name, quantity } = k;
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
        self.leaf(&at(path, "quantity"), Some(quantity), Some(&p.quantity), None);
    }

    fn node_allocatable_overhead_resources(
        &mut self,
        path: &str,
        k: &NodeAllocatableOverheadResources,
        p: &NodeAllocatableOverheadResources,
    ) {
        let NodeAllocatableOverheadResources {
            name,
            per_container,
            per_pod,
        } = k;
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
        self.leaf(
            &at(path, "perContainer"),
            per_container.as_ref(),
            p.per_container.as_ref(),
            None,
        );
        self.leaf(&at(path, "perPod"), per_pod.as_ref(), p.per_pod.as_ref(), None);
    }

    fn pod_volume_health(&mut self, path: &str, k: &PodVolumeHealth, p: &PodVolumeHealth) {
        let PodVolumeHealth {
            health_conditions,
            last_transition_time,
            name,
        } = k;
        // A health condition's identity is its status and reason together.
        self.keyed(
            &at(path, "healthConditions"),
            health_conditions.as_deref(),
            p.health_conditions.as_deref(),
            |c| format!("{}/{}", c.status, c.reason),
            None,
            Self::volume_health_condition,
        );
        self.leaf(
            &at(path, "lastTransitionTime"),
            last_transition_time.as_ref(),
            p.last_transition_time.as_ref(),
            None,
        );
        self.leaf(&at(path, "name"), Some(name), Some(&p.name), None);
    }

    fn volume_health_condition(&mut self, path: &str, k: &VolumeHealthCondition, p: &VolumeHealthCondition) {
        let VolumeHealthCondition {
            message,
            reason,
            status,
        } = k;
        self.leaf(&at(path, "message"), message.as_ref(), p.message.as_ref(), None);
        self.leaf(&at(path, "reason"), Some(reason), Some(&p.reason), None);
        self.leaf(&at(path, "status"), Some(status), Some(&p.status), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(json!({ "metadata": { "name": "p", "namespace": "parity" }, "spec": spec })).unwrap()
    }

    fn plain_pod() -> Pod {
        pod(json!({
            "initContainers": [{ "name": "init" }, { "name": "sidecar", "restartPolicy": "Always" }],
            "containers": [{ "name": "main" }, { "name": "side" }],
        }))
    }

    fn status(value: Value) -> PodStatus {
        serde_json::from_value(value).unwrap()
    }

    /// `value` with the JSON at `pointer` replaced by `new`.
    fn with(mut value: Value, pointer: &str, new: Value) -> Value {
        *value.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer}")) = new;
        value
    }

    fn kind(finding: &Finding) -> Option<&'static str> {
        let why = finding.unknowable?;
        Some(
            UNKNOWABLE
                .iter()
                .find(|(_, reason)| *reason == why)
                .expect("a reason of UNKNOWABLE")
                .0,
        )
    }

    /// The findings as `(path, kind)`, to assert on in one go.
    fn paths(findings: &[Finding]) -> Vec<(&str, Option<&'static str>)> {
        findings.iter().map(|f| (f.path.as_str(), kind(f))).collect()
    }

    fn judged(pod: &Pod, kubelet: &Value, plegd: &Value) -> Vec<Finding> {
        judge(pod, &status(kubelet.clone()), &status(plegd.clone()))
    }

    fn container(name: &str) -> Value {
        json!({
            "name": name,
            "allocatedResources": { "cpu": "100m", "memory": "64Mi" },
            "allocatedResourcesStatus": [{
                "name": "claim:gpu/r0",
                "resources": [{ "resourceID": "gpu-0", "health": "Healthy", "message": "fine" }],
            }],
            "containerID": format!("containerd://{name}-2"),
            "image": "docker.io/library/busybox:1.36",
            "imageID": "docker.io/library/busybox@sha256:0123",
            "lastState": { "terminated": {
                "containerID": format!("containerd://{name}-1"),
                "exitCode": 137,
                "finishedAt": "2025-01-01T00:00:09Z",
                "message": "killed",
                "reason": "Error",
                "signal": 9,
                "startedAt": "2025-01-01T00:00:05Z",
            }},
            "ready": true,
            "resources": {
                "claims": [{ "name": "gpu", "request": "r0" }],
                "limits": { "memory": "64Mi" },
                "requests": { "cpu": "100m", "memory": "64Mi" },
            },
            "restartCount": 1,
            "started": true,
            "state": { "running": { "startedAt": "2025-01-01T00:00:10Z" } },
            "stopSignal": "SIGTERM",
            "user": { "linux": { "gid": 0, "supplementalGroups": [0, 10], "uid": 0 } },
            "volumeMounts": [
                { "mountPath": "/data", "name": "data", "readOnly": false, "recursiveReadOnly": "Disabled" },
                { "mountPath": "/img", "name": "img", "readOnly": true,
                  "volumeStatus": { "image": { "imageRef": "docker.io/library/busybox@sha256:0123" } } },
            ],
        })
    }

    /// A status with every field of PodStatus set (see `the_full_status_sets_every_field`).
    fn full() -> Value {
        let t = |s: u32| format!("2025-01-01T00:00:{s:02}Z");
        json!({
            "allocatedResources": { "cpu": "300m", "memory": "192Mi" },
            "conditions": [
                { "type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": t(1), "observedGeneration": 1 },
                { "type": "Initialized", "status": "True", "lastTransitionTime": t(2), "observedGeneration": 1 },
                { "type": "Ready", "status": "False", "reason": "ContainersNotReady",
                  "message": "containers with unready status: [side]", "lastTransitionTime": t(3),
                  "lastProbeTime": t(4), "observedGeneration": 1 },
                { "type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                  "message": "containers with unready status: [side]", "lastTransitionTime": t(3), "observedGeneration": 1 },
                { "type": "PodScheduled", "status": "True", "lastTransitionTime": t(0), "observedGeneration": 1 },
            ],
            "containerStatuses": [container("main"), container("side")],
            "ephemeralContainerStatuses": [{
                "name": "debug", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "waiting": { "reason": "ContainerCreating", "message": "pulling" } },
            }],
            "extendedResourceClaimStatus": {
                "requestMappings": [{ "containerName": "main", "requestName": "container-0-request-0", "resourceName": "example.com~1gpu" }],
                "resourceClaimName": "p-extended-resources-x1",
            },
            "hostIP": "10.0.0.1",
            "hostIPs": [{ "ip": "10.0.0.1" }, { "ip": "fd00::1" }],
            "initContainerStatuses": [
                with(container("init"), "/state", json!({ "terminated": {
                    "containerID": "containerd://init-2", "exitCode": 0, "finishedAt": t(8), "message": "ok Grü",
                    "reason": "Completed", "signal": 15, "startedAt": t(7),
                }})),
                container("sidecar"),
            ],
            "message": "a message",
            "nodeAllocatableResourceClaimStatuses": [{
                "containers": ["main", "side"],
                "mapping": [{ "name": "cpu", "quantity": "1" }, { "name": "memory", "quantity": "1Gi" }],
                "overhead": [{ "name": "memory", "perContainer": "1Mi", "perPod": "2Mi" }],
                "resourceClaimName": "p-cpu-x2",
            }],
            "nominatedNodeName": "node-1",
            "observedGeneration": 1,
            "phase": "Running",
            "podIP": "10.244.0.5",
            "podIPs": [{ "ip": "10.244.0.5" }, { "ip": "fd00:10:244::5" }],
            "qosClass": "Burstable",
            "reason": "a reason",
            "resize": "InProgress",
            "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "p-gpu-x3" }],
            "resources": {
                "claims": [{ "name": "gpu" }],
                "limits": { "memory": "256Mi" },
                "requests": { "cpu": "300m", "memory": "192Mi" },
            },
            "startTime": t(0),
            "volumeHealth": [{
                "healthConditions": [{ "message": "slow", "reason": "Slow", "status": "Degraded" }],
                "lastTransitionTime": t(5),
                "name": "data",
            }],
        })
    }

    #[test]
    fn the_full_status_sets_every_field() {
        let value = full();
        let full = status(value.clone());
        // Nothing in the fixture was misspelled (and so dropped).
        assert_eq!(serde_json::to_value(&full).unwrap(), value);
        // Every field is set; a field added to k8s-openapi breaks this pattern too.
        let PodStatus {
            allocated_resources,
            conditions,
            container_statuses,
            ephemeral_container_statuses,
            extended_resource_claim_status,
            host_ip,
            host_ips,
            init_container_statuses,
            message,
            node_allocatable_resource_claim_statuses,
            nominated_node_name,
            observed_generation,
            phase,
            pod_ip,
            pod_ips,
            qos_class,
            reason,
            resize,
            resource_claim_statuses,
            resources,
            start_time,
            volume_health,
        } = &full;
        assert!(allocated_resources.is_some() && conditions.is_some() && container_statuses.is_some());
        assert!(ephemeral_container_statuses.is_some() && extended_resource_claim_status.is_some());
        assert!(host_ip.is_some() && host_ips.is_some() && init_container_statuses.is_some() && message.is_some());
        assert!(node_allocatable_resource_claim_statuses.is_some() && nominated_node_name.is_some());
        assert!(observed_generation.is_some() && phase.is_some() && pod_ip.is_some() && pod_ips.is_some());
        assert!(qos_class.is_some() && reason.is_some() && resize.is_some() && resource_claim_statuses.is_some());
        assert!(resources.is_some() && start_time.is_some() && volume_health.is_some());
        let ContainerStatus {
            allocated_resources,
            allocated_resources_status,
            container_id,
            image: _,
            image_id: _,
            last_state,
            name: _,
            ready: _,
            resources,
            restart_count: _,
            started,
            state,
            stop_signal,
            user,
            volume_mounts,
        } = &container_statuses.as_ref().unwrap()[0];
        assert!(allocated_resources.is_some() && allocated_resources_status.is_some() && container_id.is_some());
        assert!(last_state.is_some() && resources.is_some() && started.is_some() && state.is_some());
        assert!(stop_signal.is_some() && user.is_some() && volume_mounts.is_some());
    }

    #[test]
    fn identical_statuses_give_no_finding() {
        assert_eq!(judged(&plain_pod(), &full(), &full()), []);
        assert_eq!(judge(&plain_pod(), &PodStatus::default(), &PodStatus::default()), []);
        // Nor with probes, nor without a spec.
        let probed = pod(json!({ "containers": [{ "name": "main", "readinessProbe": {}, "startupProbe": {} }] }));
        assert_eq!(judged(&probed, &full(), &full()), []);
        assert_eq!(judged(&Pod::default(), &full(), &full()), []);
    }

    #[test]
    fn a_phase_difference() {
        let findings = judged(&plain_pod(), &full(), &with(full(), "/phase", json!("Pending")));
        assert_eq!(
            findings,
            [Finding {
                path: "phase".into(),
                kubelet: r#""Running""#.into(),
                plegd: r#""Pending""#.into(),
                unknowable: None,
            }]
        );
    }

    #[test]
    fn a_condition_on_one_side_only() {
        let mut plegd = full();
        let scheduled = plegd["conditions"].as_array_mut().unwrap().pop().unwrap();
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            findings,
            [Finding {
                path: "conditions[PodScheduled]".into(),
                kubelet: json(&scheduled),
                plegd: "absent".into(),
                unknowable: None,
            }]
        );
        // And the other way round.
        let findings = judged(&plain_pod(), &plegd, &full());
        assert_eq!(paths(&findings), [("conditions[PodScheduled]", None)]);
        assert_eq!(
            (findings[0].kubelet.as_str(), findings[0].plegd.as_str()),
            ("absent", json(&scheduled).as_str())
        );
    }

    #[test]
    fn condition_order() {
        let mut plegd = full();
        plegd["conditions"].as_array_mut().unwrap().swap(2, 3);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            findings,
            [Finding {
                path: "conditions.order".into(),
                kubelet: r#"["PodReadyToStartContainers","Initialized","Ready","ContainersReady","PodScheduled"]"#
                    .into(),
                plegd: r#"["PodReadyToStartContainers","Initialized","ContainersReady","Ready","PodScheduled"]"#.into(),
                unknowable: None,
            }]
        );
    }

    #[test]
    fn a_container_status_on_one_side_only() {
        let mut plegd = full();
        plegd["containerStatuses"].as_array_mut().unwrap().remove(0);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(paths(&findings), [("containerStatuses[main]", None)]);
        assert_eq!(findings[0].kubelet, json(&container("main")));
        assert_eq!(findings[0].plegd, "absent");
    }

    #[test]
    fn a_terminated_message_differing_by_a_trailing_replacement_character() {
        let pointer = "/initContainerStatuses/0/state/terminated/message";
        let kubelet = with(full(), pointer, json!("ok Grü\u{FFFD}"));
        let findings = judged(&plain_pod(), &kubelet, &full());
        assert_eq!(
            findings,
            [Finding {
                path: "initContainerStatuses[init].state.terminated.message".into(),
                kubelet: "\"ok Grü\u{FFFD}\"".into(),
                plegd: "\"ok Grü\"".into(),
                unknowable: None,
            }]
        );
    }

    #[test]
    fn absent_and_empty_differ() {
        let base = json!({ "phase": "Pending" });
        let findings = judged(&plain_pod(), &base, &json!({ "phase": "Pending", "conditions": [] }));
        assert_eq!(paths(&findings), [("conditions", None)]);
        assert_eq!(
            (findings[0].kubelet.as_str(), findings[0].plegd.as_str()),
            ("absent", "[]")
        );

        let findings = judged(&plain_pod(), &json!({ "phase": "Pending", "message": "" }), &base);
        assert_eq!(paths(&findings), [("message", None)]);
        assert_eq!(
            (findings[0].kubelet.as_str(), findings[0].plegd.as_str()),
            (r#""""#, "absent")
        );

        let mut plegd = full();
        plegd["containerStatuses"][0]["volumeMounts"] = json!([]);
        plegd["allocatedResources"] = json!({});
        plegd["containerStatuses"][1].as_object_mut().unwrap().remove("started");
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [
                ("allocatedResources[cpu]", None),
                ("allocatedResources[memory]", None),
                ("containerStatuses[main].volumeMounts[/data]", None),
                ("containerStatuses[main].volumeMounts[/img]", None),
                ("containerStatuses[side].started", None),
            ]
        );
        assert_eq!(
            (findings[4].kubelet.as_str(), findings[4].plegd.as_str()),
            ("true", "absent")
        );

        // A string "absent" is not the absence of a value.
        let findings = judged(&plain_pod(), &json!({ "reason": "absent" }), &json!({}));
        assert_eq!(
            (findings[0].kubelet.as_str(), findings[0].plegd.as_str()),
            (r#""absent""#, "absent")
        );
    }

    fn waiting(reason: &str, message: &str) -> Value {
        json!({ "waiting": { "reason": reason, "message": message } })
    }

    #[test]
    fn the_kubelets_waiting_reason_is_unknowable() {
        let kubelet = with(
            full(),
            "/containerStatuses/0/state",
            waiting("CrashLoopBackOff", "back-off 10s restarting"),
        );
        let plegd = with(full(), "/containerStatuses/0/state", waiting("ContainerCreating", ""));
        let findings = judged(&plain_pod(), &kubelet, &plegd);
        assert_eq!(
            paths(&findings),
            [
                (
                    "containerStatuses[main].state.waiting.message",
                    Some("kubelet-waiting-reason")
                ),
                (
                    "containerStatuses[main].state.waiting.reason",
                    Some("kubelet-waiting-reason")
                ),
            ]
        );
        // Init and ephemeral containers alike.
        for pointer in ["/initContainerStatuses/1/state", "/ephemeralContainerStatuses/0/state"] {
            let kubelet = with(full(), pointer, waiting("ErrImagePull", "not found"));
            let plegd = with(full(), pointer, waiting("ContainerCreating", ""));
            let findings = judged(&plain_pod(), &kubelet, &plegd);
            assert_eq!(findings.len(), 2, "{findings:?}");
            assert!(
                findings.iter().all(|f| kind(f) == Some("kubelet-waiting-reason")),
                "{findings:?}"
            );
        }
    }

    #[test]
    fn a_knowable_waiting_reason_is_a_real_difference() {
        for (k, p) in [
            ("ContainerCreating", "CrashLoopBackOff"),
            ("PodInitializing", "ContainerCreating"),
        ] {
            let kubelet = with(full(), "/containerStatuses/0/state", waiting(k, "m"));
            let plegd = with(full(), "/containerStatuses/0/state", waiting(p, "m"));
            let findings = judged(&plain_pod(), &kubelet, &plegd);
            assert_eq!(
                paths(&findings),
                [("containerStatuses[main].state.waiting.reason", None)]
            );
        }
    }

    #[test]
    fn waiting_on_the_kubelets_side_only() {
        // The kubelet in back-off shows the container waiting; a status showing it terminated still
        // differs for real, and so does its lastState.
        let terminated = full()["containerStatuses"][0]["lastState"].clone();
        let kubelet = with(
            full(),
            "/containerStatuses/0/state",
            waiting("CrashLoopBackOff", "back-off"),
        );
        let plegd = with(full(), "/containerStatuses/0/state", terminated);
        let findings = judged(&plain_pod(), &kubelet, &plegd);
        assert_eq!(
            paths(&findings),
            [
                ("containerStatuses[main].state.terminated", None),
                ("containerStatuses[main].state.waiting", Some("kubelet-waiting-reason")),
            ]
        );
        // Waiting on plegd's side only is plegd's claim: real.
        let findings = judged(&plain_pod(), &plegd, &kubelet);
        assert!(findings.iter().all(|f| f.unknowable.is_none()), "{findings:?}");
        // lastState is not the waiting state.
        let kubelet = with(
            full(),
            "/containerStatuses/0/lastState",
            waiting("CrashLoopBackOff", "back-off"),
        );
        let plegd = with(
            full(),
            "/containerStatuses/0/lastState",
            waiting("ContainerCreating", "back-off"),
        );
        let findings = judged(&plain_pod(), &kubelet, &plegd);
        assert_eq!(
            paths(&findings),
            [("containerStatuses[main].lastState.waiting.reason", None)]
        );
    }

    /// `full()` with `ready`, `started` of every container and the status of every condition flipped.
    fn flipped() -> Value {
        let mut value = full();
        for list in [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ] {
            for c in value[list].as_array_mut().unwrap() {
                c["ready"] = json!(!c["ready"].as_bool().unwrap());
                c["started"] = json!(!c["started"].as_bool().unwrap_or(false));
            }
        }
        for c in value["conditions"].as_array_mut().unwrap() {
            c["status"] = json!(if c["status"] == "True" { "False" } else { "True" });
        }
        value
    }

    /// The unknowable findings of `flipped()` against `full()` for `pod`, and how many are real.
    fn probed(pod: &Pod) -> (Vec<String>, usize) {
        let findings = judged(pod, &full(), &flipped());
        assert!(
            findings
                .iter()
                .all(|f| f.unknowable.is_none() || kind(f) == Some("probe")),
            "{findings:?}"
        );
        let unknowable = findings
            .iter()
            .filter(|f| f.unknowable.is_some())
            .map(|f| f.path.clone())
            .collect();
        (unknowable, findings.iter().filter(|f| f.unknowable.is_none()).count())
    }

    #[test]
    fn without_probes_ready_started_and_conditions_are_real() {
        let (unknowable, real) = probed(&plain_pod());
        assert_eq!(unknowable, Vec::<String>::new());
        // ready and started of 5 containers, status of 5 conditions.
        assert_eq!(real, 15);
    }

    #[test]
    fn a_readiness_probe_makes_ready_and_the_ready_conditions_unknowable() {
        let pod = pod(json!({
            "initContainers": [{ "name": "init" }, { "name": "sidecar", "restartPolicy": "Always" }],
            "containers": [{ "name": "main", "readinessProbe": { "exec": { "command": ["true"] } } }, { "name": "side" }],
        }));
        let (unknowable, real) = probed(&pod);
        assert_eq!(
            unknowable,
            [
                "conditions[Ready].status",
                "conditions[ContainersReady].status",
                "containerStatuses[main].ready",
            ]
        );
        assert_eq!(real, 12);
        // Only their status, reason, message and lastTransitionTime.
        let mut plegd = full();
        for field in [
            "reason",
            "message",
            "lastTransitionTime",
            "lastProbeTime",
            "observedGeneration",
        ] {
            plegd["conditions"][2].as_object_mut().unwrap().remove(field);
        }
        let findings = judged(&pod, &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [
                ("conditions[Ready].lastProbeTime", None),
                ("conditions[Ready].lastTransitionTime", Some("probe")),
                ("conditions[Ready].message", Some("probe")),
                ("conditions[Ready].observedGeneration", None),
                ("conditions[Ready].reason", Some("probe")),
            ]
        );
        // A Ready condition on one side only is real.
        plegd["conditions"].as_array_mut().unwrap().remove(2);
        assert_eq!(paths(&judged(&pod, &full(), &plegd)), [("conditions[Ready]", None)]);
    }

    #[test]
    fn a_startup_probe_makes_started_and_ready_unknowable() {
        let pod = pod(json!({
            "initContainers": [{ "name": "init" }, { "name": "sidecar", "restartPolicy": "Always" }],
            "containers": [{ "name": "main" }, { "name": "side", "startupProbe": { "exec": { "command": ["true"] } } }],
        }));
        let (unknowable, real) = probed(&pod);
        assert_eq!(
            unknowable,
            [
                "conditions[Ready].status",
                "conditions[ContainersReady].status",
                "containerStatuses[side].ready",
                "containerStatuses[side].started",
            ]
        );
        assert_eq!(real, 11);
    }

    #[test]
    fn a_sidecars_probes_count_and_other_init_containers_are_never_probed() {
        let pod = pod(json!({
            "initContainers": [
                { "name": "init", "readinessProbe": {}, "startupProbe": {} },
                { "name": "sidecar", "restartPolicy": "Always", "startupProbe": {} },
            ],
            "containers": [{ "name": "main" }, { "name": "side" }],
            "ephemeralContainers": [{ "name": "debug", "readinessProbe": {}, "startupProbe": {} }],
        }));
        let (unknowable, real) = probed(&pod);
        assert_eq!(
            unknowable,
            [
                "conditions[Initialized].status",
                "conditions[Ready].status",
                "conditions[ContainersReady].status",
                "initContainerStatuses[sidecar].ready",
                "initContainerStatuses[sidecar].started",
            ]
        );
        assert_eq!(real, 10);
        // A sidecar's readiness probe alone leaves Initialized real.
        let pod = self::pod(json!({
            "initContainers": [{ "name": "sidecar", "restartPolicy": "Always", "readinessProbe": {} }],
            "containers": [{ "name": "main" }],
        }));
        let (unknowable, _) = probed(&pod);
        assert_eq!(
            unknowable,
            [
                "conditions[Ready].status",
                "conditions[ContainersReady].status",
                "initContainerStatuses[sidecar].ready",
            ]
        );
    }

    #[test]
    fn the_pod_level_resources_of_a_running_pod_are_unknowable() {
        let plegd = with(full(), "/resources/requests/cpu", json!("250m"));
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(paths(&findings), [("resources.requests[cpu]", Some("cgroup"))]);
        let mut plegd = full();
        plegd.as_object_mut().unwrap().remove("resources");
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(paths(&findings), [("resources", Some("cgroup"))]);
        let plegd = with(full(), "/resources/claims/0/name", json!("other"));
        assert_eq!(
            paths(&judged(&plain_pod(), &full(), &plegd)),
            [("resources.claims[0].name", Some("cgroup"))]
        );

        // Nor of a terminal pod whose containers ran (the kubelet read its cgroup as it ended it).
        let kubelet = with(full(), "/phase", json!("Failed"));
        let plegd = with(kubelet.clone(), "/resources/requests/cpu", json!("250m"));
        assert_eq!(
            paths(&judged(&plain_pod(), &kubelet, &plegd)),
            [("resources.requests[cpu]", Some("cgroup"))]
        );
        // But a terminal pod none of whose containers ever had an id never had a cgroup read.
        let mut never_ran = kubelet;
        for list in [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ] {
            for status in never_ran[list].as_array_mut().into_iter().flatten() {
                status.as_object_mut().unwrap().remove("containerID");
            }
        }
        let plegd = with(never_ran.clone(), "/resources/requests/cpu", json!("250m"));
        assert_eq!(
            paths(&judged(&plain_pod(), &never_ran, &plegd)),
            [("resources.requests[cpu]", None)]
        );
        // Not while the kubelet's phase is anything else.
        let kubelet = with(full(), "/phase", json!("Pending"));
        let plegd = with(kubelet.clone(), "/resources/requests/cpu", json!("250m"));
        assert_eq!(
            paths(&judged(&plain_pod(), &kubelet, &plegd)),
            [("resources.requests[cpu]", None)]
        );
        // Nor a container's resources, which the CRI reports.
        let plegd = with(full(), "/containerStatuses/0/resources/limits/memory", json!("128Mi"));
        assert_eq!(
            paths(&judged(&plain_pod(), &full(), &plegd)),
            [("containerStatuses[main].resources.limits[memory]", None)]
        );
    }

    #[test]
    fn allocated_resources_status_is_device_health() {
        let plegd = with(
            full(),
            "/containerStatuses/1/allocatedResourcesStatus/0/resources/0/health",
            json!("Unknown"),
        );
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [(
                "containerStatuses[side].allocatedResourcesStatus[claim:gpu/r0].resources[gpu-0].health",
                Some("device-health")
            )]
        );
        let mut plegd = full();
        plegd["initContainerStatuses"][0]
            .as_object_mut()
            .unwrap()
            .remove("allocatedResourcesStatus");
        plegd["containerStatuses"][0]["allocatedResourcesStatus"] = json!([]);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [
                (
                    "containerStatuses[main].allocatedResourcesStatus[claim:gpu/r0]",
                    Some("device-health")
                ),
                (
                    "initContainerStatuses[init].allocatedResourcesStatus",
                    Some("device-health")
                ),
            ]
        );
        // Allocated resources themselves are real.
        let plegd = with(full(), "/containerStatuses/0/allocatedResources/cpu", json!("200m"));
        assert_eq!(
            paths(&judged(&plain_pod(), &full(), &plegd)),
            [("containerStatuses[main].allocatedResources[cpu]", None)]
        );
    }

    #[test]
    fn volume_mounts_are_keyed_by_mount_path() {
        let mut plegd = full();
        let mounts = plegd["containerStatuses"][0]["volumeMounts"].as_array_mut().unwrap();
        mounts.swap(0, 1);
        mounts[1]["readOnly"] = json!(true);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            findings,
            [
                Finding {
                    path: "containerStatuses[main].volumeMounts[/data].readOnly".into(),
                    kubelet: "false".into(),
                    plegd: "true".into(),
                    unknowable: None,
                },
                Finding {
                    path: "containerStatuses[main].volumeMounts.order".into(),
                    kubelet: r#"["/data","/img"]"#.into(),
                    plegd: r#"["/img","/data"]"#.into(),
                    unknowable: None,
                },
            ]
        );
    }

    #[test]
    fn pod_ips_are_compared_by_index() {
        let plegd = with(
            full(),
            "/podIPs",
            json!([{ "ip": "fd00:10:244::5" }, { "ip": "10.244.0.5" }, { "ip": "10.0.0.9" }]),
        );
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            findings,
            [
                Finding {
                    path: "podIPs[0].ip".into(),
                    kubelet: r#""10.244.0.5""#.into(),
                    plegd: r#""fd00:10:244::5""#.into(),
                    unknowable: None,
                },
                Finding {
                    path: "podIPs[1].ip".into(),
                    kubelet: r#""fd00:10:244::5""#.into(),
                    plegd: r#""10.244.0.5""#.into(),
                    unknowable: None,
                },
                Finding {
                    path: "podIPs[2]".into(),
                    kubelet: "absent".into(),
                    plegd: r#"{"ip":"10.0.0.9"}"#.into(),
                    unknowable: None,
                },
            ]
        );
        let plegd = with(full(), "/hostIPs", json!([{ "ip": "10.0.0.1" }]));
        assert_eq!(paths(&judged(&plain_pod(), &full(), &plegd)), [("hostIPs[1]", None)]);
    }

    #[test]
    fn container_status_order() {
        let mut plegd = full();
        plegd["initContainerStatuses"].as_array_mut().unwrap().swap(0, 1);
        plegd["containerStatuses"].as_array_mut().unwrap().swap(0, 1);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [("containerStatuses.order", None), ("initContainerStatuses.order", None)]
        );
        assert_eq!(findings[1].kubelet, r#"["init","sidecar"]"#);
        assert_eq!(findings[1].plegd, r#"["sidecar","init"]"#);
        // One side's extra item alone is no order finding; the common items out of order are.
        let mut plegd = full();
        let statuses = plegd["containerStatuses"].as_array_mut().unwrap();
        statuses.insert(
            0,
            json!({ "name": "extra", "image": "", "imageID": "", "ready": false, "restartCount": 0 }),
        );
        assert_eq!(
            paths(&judged(&plain_pod(), &full(), &plegd)),
            [("containerStatuses[extra]", None)]
        );
        plegd["containerStatuses"].as_array_mut().unwrap().swap(1, 2);
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [("containerStatuses[extra]", None), ("containerStatuses.order", None)]
        );
        assert_eq!(findings[1].plegd, r#"["extra","side","main"]"#);
    }

    #[test]
    fn repeated_keys_are_matched_occurrence_by_occurrence() {
        let mut kubelet = full();
        let again = kubelet["containerStatuses"][0].clone();
        kubelet["containerStatuses"].as_array_mut().unwrap().push(again);
        let findings = judged(&plain_pod(), &kubelet, &full());
        assert_eq!(paths(&findings), [("containerStatuses[main#2]", None)]);
        // And a spec repeating a name neither panics nor loses a probe.
        let pod = pod(json!({ "containers": [{ "name": "main" }, { "name": "main", "readinessProbe": {} }] }));
        let findings = judged(&pod, &full(), &with(full(), "/containerStatuses/0/ready", json!(false)));
        assert_eq!(paths(&findings), [("containerStatuses[main].ready", Some("probe"))]);
    }

    #[test]
    fn maps_are_compared_key_by_key() {
        let mut plegd = full();
        plegd["allocatedResources"] = json!({ "cpu": "0.3", "ephemeral-storage": "1Gi" });
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            findings,
            [
                Finding {
                    path: "allocatedResources[cpu]".into(),
                    kubelet: r#""300m""#.into(),
                    plegd: r#""0.3""#.into(),
                    unknowable: None,
                },
                Finding {
                    path: "allocatedResources[ephemeral-storage]".into(),
                    kubelet: "absent".into(),
                    plegd: r#""1Gi""#.into(),
                    unknowable: None,
                },
                Finding {
                    path: "allocatedResources[memory]".into(),
                    kubelet: r#""192Mi""#.into(),
                    plegd: "absent".into(),
                    unknowable: None,
                },
            ]
        );
    }

    #[test]
    fn times_compare_as_the_api_shows_them() {
        // The API shows seconds: a fraction is not a difference, a second is.
        let pointer = "/containerStatuses/0/state/running/startedAt";
        let plegd = with(full(), pointer, json!("2025-01-01T00:00:10.75Z"));
        assert_eq!(judged(&plain_pod(), &full(), &plegd), []);
        let plegd = with(full(), pointer, json!("2025-01-01T00:00:11Z"));
        let findings = judged(&plain_pod(), &full(), &plegd);
        assert_eq!(
            paths(&findings),
            [("containerStatuses[main].state.running.startedAt", None)]
        );
        assert_eq!(
            (findings[0].kubelet.as_str(), findings[0].plegd.as_str()),
            (r#""2025-01-01T00:00:10Z""#, r#""2025-01-01T00:00:11Z""#)
        );
    }

    /// JSON pointers to every value in `value` (below the top).
    fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
        let children: Vec<(String, &Value)> = match value {
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v))
                .collect(),
            Value::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
            _ => return,
        };
        for (key, child) in children {
            let pointer = format!("{at}/{key}");
            out.push(pointer.clone());
            pointers(child, pointer, out);
        }
    }

    #[test]
    fn every_value_changed_or_removed_is_found() {
        let base = full();
        let kubelet = status(base.clone());
        let mut all = Vec::new();
        pointers(&base, String::new(), &mut all);
        let (mut changed, mut removed) = (0, 0);
        for pointer in &all {
            let value = base.pointer(pointer).unwrap();
            let changes: Vec<Value> = match value {
                Value::String(s) => vec![json!(format!("{s}x")), json!("1999-12-31T23:59:59Z")],
                Value::Number(n) => vec![json!(n.as_i64().unwrap() + 1)],
                Value::Bool(b) => vec![json!(!b)],
                _ => vec![],
            };
            // The first change that is still a PodStatus (a time does not take an `x`).
            if let Some(plegd) = changes
                .into_iter()
                .find_map(|new| serde_json::from_value::<PodStatus>(with(base.clone(), pointer, new)).ok())
            {
                changed += 1;
                assert_ne!(judge(&plain_pod(), &kubelet, &plegd), [], "{pointer} changed");
                assert_ne!(judge(&plain_pod(), &plegd, &kubelet), [], "{pointer} changed");
            }
            // Removed, where the API allows.
            let (parent, last) = pointer.rsplit_once('/').unwrap();
            let mut without = base.clone();
            let target = if parent.is_empty() {
                &mut without
            } else {
                without.pointer_mut(parent).unwrap()
            };
            match target {
                Value::Object(map) => {
                    map.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Value::Array(items) => {
                    items.remove(last.parse::<usize>().unwrap());
                }
                _ => unreachable!(),
            }
            // (k8s-openapi reads a required field that is not there as its default: no change.)
            if let Some(plegd) = serde_json::from_value::<PodStatus>(without)
                .ok()
                .filter(|plegd| *plegd != kubelet)
            {
                removed += 1;
                let findings = judge(&plain_pod(), &kubelet, &plegd);
                assert_ne!(findings, [], "{pointer} removed");
                assert_eq!(findings, judge(&plain_pod(), &kubelet, &plegd), "deterministic");
            }
        }
        assert!(
            changed > 150 && removed > 150,
            "{changed} changed, {removed} removed of {}",
            all.len()
        );
    }

    #[test]
    fn unknowable_kinds_are_distinct_and_shown() {
        for (i, (kind, reason)) in UNKNOWABLE.iter().enumerate() {
            for (other_kind, other_reason) in &UNKNOWABLE[i + 1..] {
                assert!(kind != other_kind && reason != other_reason);
            }
        }
        let kubelet = with(
            full(),
            "/containerStatuses/0/state",
            waiting("ImagePullBackOff", "Back-off pulling"),
        );
        let findings = judged(&plain_pod(), &kubelet, &full());
        assert_eq!(
            findings.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                r#"containerStatuses[main].state.running: kubelet absent, plegd {"startedAt":"2025-01-01T00:00:10Z"}"#,
                r#"containerStatuses[main].state.waiting: kubelet {"message":"Back-off pulling","reason":"ImagePullBackOff"}, plegd absent (unknowable: kubelet-waiting-reason)"#,
            ]
        );
    }
}
