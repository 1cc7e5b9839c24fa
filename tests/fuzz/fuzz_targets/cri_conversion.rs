//! CRI answers → pods: the slim list messages plegd decodes, read item by item as a relist reads
//! them, against CRI's full ones, then the grouping.
//!
//! The first byte picks how the rest is read:
//! - 2 modulo 4: raw bytes as a status answer, read as `ContainerStatus` and as `PodSandboxStatus`
//!   are read (`plegd::runtime::statuses`): nothing panics, and on bytes the full CRI message would
//!   write itself, the slim one reads exactly the fields plegd takes from the full one, with no bad
//!   data.
//! - other even: raw bytes. Two little-endian bytes give the length of a `ListPodSandboxResponse`, that
//!   many bytes follow, the rest is a `ListContainersResponse`. Whatever the bytes, nothing panics;
//!   on an answer the full messages would write themselves (decoding and re-encoding gives the same
//!   bytes) the slim messages decode it too and plegd reads from them exactly what it takes from
//!   the full ones, with no bad data.
//! - odd: structured. Sandboxes and containers with arbitrary strings, numbers, labels and
//!   annotations are encoded with the full messages, and plegd must read back exactly what it takes
//!   from them, with no bad data.
//!
//! Either way, the pods that come out are sorted by uid with no uid twice, no container or sandbox
//! id is in two places, and no id is empty.
#![no_main]

use std::collections::{HashMap, HashSet};

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use k8s_cri::v1 as cri;
use libfuzzer_sys::fuzz_target;
use plegd::kubecontainer::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use plegd::runtime::convert::{BadData, ListedContainer, ListedSandbox, PodGrouping};
use plegd::runtime::{lists, statuses};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    if mode % 4 == 2 {
        raw_status(data);
    } else if mode % 2 == 0 {
        raw(data);
    } else {
        let _ = structured(&mut Unstructured::new(data));
    }
});

fn full_sandboxes(m: cri::ListPodSandboxResponse) -> Vec<ListedSandbox<'static>> {
    m.items.into_iter().map(Into::into).collect()
}

fn full_containers(m: cri::ListContainersResponse) -> Vec<ListedContainer<'static>> {
    m.containers.into_iter().map(Into::into).collect()
}

type Decoded<T> = std::result::Result<T, prost::DecodeError>;

/// The items of an answer, decoded from one buffer as tonic hands it over.
fn sandbox_items(answer: &[u8]) -> Decoded<Vec<Bytes>> {
    Ok(lists::ListPodSandboxResponse::decode(Bytes::copy_from_slice(answer))?.items)
}

fn container_items(answer: &[u8]) -> Decoded<Vec<Bytes>> {
    Ok(lists::ListContainersResponse::decode(Bytes::copy_from_slice(answer))?.containers)
}

/// Every item read as a relist reads them, bad data aside.
fn slim_sandboxes<'a>(items: &'a [Bytes], bad: &mut Vec<BadData>) -> Decoded<Vec<ListedSandbox<'a>>> {
    let mut listed = Vec::new();
    lists::read_sandboxes(items, |s| match s {
        Ok(s) => listed.push(s),
        Err(b) => bad.push(b),
    })?;
    Ok(listed)
}

fn slim_containers<'a>(items: &'a [Bytes], bad: &mut Vec<BadData>) -> Decoded<Vec<ListedContainer<'a>>> {
    let mut listed = Vec::new();
    lists::read_containers(items, |c| match c {
        Ok(c) => listed.push(c),
        Err(b) => bad.push(b),
    })?;
    Ok(listed)
}

/// Whether the full message decodes `answer` and writes it back byte for byte.
fn written_by_full<M: Message + Default>(answer: &[u8]) -> Option<M> {
    M::decode(answer).ok().filter(|m| m.encode_to_vec() == answer)
}

fn raw(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*head)).min(rest.len());
    let (sandbox_answer, container_answer) = rest.split_at(split);
    let sandbox_items = sandbox_items(sandbox_answer);
    let container_items = container_items(container_answer);
    let mut bad = Vec::new();
    let sandboxes = sandbox_items.as_ref().ok().and_then(|items| slim_sandboxes(items, &mut bad).ok());
    let containers = container_items.as_ref().ok().and_then(|items| slim_containers(items, &mut bad).ok());
    let full_sandbox = written_by_full::<cri::ListPodSandboxResponse>(sandbox_answer);
    let full_container = written_by_full::<cri::ListContainersResponse>(container_answer);
    let both_full = full_sandbox.is_some() && full_container.is_some();
    if let Some(full) = full_sandbox {
        let ours = sandboxes.as_ref().expect("the slim messages reject sandboxes the full ones write");
        assert_eq!(ours, &full_sandboxes(full), "the slim sandboxes differ from the full ones");
    }
    if let Some(full) = full_container {
        let ours = containers.as_ref().expect("the slim messages reject containers the full ones write");
        assert_eq!(ours, &full_containers(full), "the slim containers differ from the full ones");
    }
    if both_full {
        assert!(bad.is_empty(), "bad data in answers the full messages write: {bad:?}");
    }
    if let (Some(sandboxes), Some(containers)) = (sandboxes, containers) {
        check_pods(sandboxes, containers, bad);
    }
}

/// A full container status with only the fields plegd reads.
fn read_of_container(full: cri::ContainerStatus) -> cri::ContainerStatus {
    cri::ContainerStatus {
        image: full.image.map(|i| cri::ImageSpec {
            image: i.image,
            ..Default::default()
        }),
        mounts: full
            .mounts
            .into_iter()
            .map(|m| cri::Mount {
                container_path: m.container_path,
                host_path: m.host_path,
                ..Default::default()
            })
            .collect(),
        resources: full.resources.map(|r| cri::ContainerResources {
            linux: r.linux.map(|l| cri::LinuxContainerResources {
                cpu_period: l.cpu_period,
                cpu_quota: l.cpu_quota,
                cpu_shares: l.cpu_shares,
                memory_limit_in_bytes: l.memory_limit_in_bytes,
                ..Default::default()
            }),
            windows: None,
        }),
        ..full
    }
}

/// A full sandbox status with only the fields plegd reads.
fn read_of_sandbox(full: cri::PodSandboxStatus) -> cri::PodSandboxStatus {
    cri::PodSandboxStatus {
        linux: full.linux.map(|l| cri::LinuxPodSandboxStatus {
            namespaces: l.namespaces.map(|n| cri::Namespace {
                options: n.options.map(|o| cri::NamespaceOption {
                    network: o.network,
                    ..Default::default()
                }),
            }),
        }),
        labels: HashMap::new(),
        annotations: HashMap::new(),
        ..full
    }
}

fn raw_status(data: &[u8]) {
    let mut bad = Vec::new();
    if let Ok(slim) = lists::ContainerStatus::decode(Bytes::copy_from_slice(data)) {
        let ours = statuses::container_status("c", &slim, &mut bad);
        if let Some(full) = written_by_full::<cri::ContainerStatus>(data) {
            assert_eq!(ours, read_of_container(full), "the slim container status differs from the full one");
            assert!(bad.is_empty(), "bad data in a status the full message writes: {bad:?}");
        }
    } else {
        assert!(written_by_full::<cri::ContainerStatus>(data).is_none());
    }
    bad.clear();
    if let Ok(slim) = lists::PodSandboxStatus::decode(Bytes::copy_from_slice(data)) {
        let ours = statuses::sandbox_status("s", &slim, &mut bad);
        if let Some(full) = written_by_full::<cri::PodSandboxStatus>(data) {
            assert_eq!(ours, read_of_sandbox(full), "the slim sandbox status differs from the full one");
            assert!(bad.is_empty(), "bad data in a status the full message writes: {bad:?}");
        }
    } else {
        assert!(written_by_full::<cri::PodSandboxStatus>(data).is_none());
    }
}

/// Labels as the kubelet sets them, some of the time, among arbitrary others.
fn labels(u: &mut Unstructured) -> Result<HashMap<String, String>> {
    let mut labels: HashMap<String, String> = u.arbitrary()?;
    for key in [LABEL_POD_UID, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_CONTAINER_NAME] {
        if u.arbitrary()? {
            labels.insert(key.to_owned(), small(u)?);
        }
    }
    Ok(labels)
}

/// A string from a small set (so that ids and uids collide often) or an arbitrary one.
fn small(u: &mut Unstructured) -> Result<String> {
    Ok(if u.arbitrary()? {
        format!("x{}", u.int_in_range(0..=3u8)?)
    } else {
        u.arbitrary()?
    })
}

fn structured(u: &mut Unstructured) -> Result<()> {
    let bad = &mut Vec::new();
    let mut items = Vec::new();
    for _ in 0..u.int_in_range(0..=6u8)? {
        items.push(cri::PodSandbox {
            id: small(u)?,
            metadata: if u.arbitrary()? {
                Some(cri::PodSandboxMetadata {
                    name: u.arbitrary()?,
                    uid: small(u)?,
                    namespace: u.arbitrary()?,
                    attempt: u.arbitrary()?,
                })
            } else {
                None
            },
            state: u.arbitrary()?,
            created_at: u.arbitrary()?,
            labels: labels(u)?,
            annotations: u.arbitrary()?,
            runtime_handler: u.arbitrary()?,
        });
    }
    let mut containers = Vec::new();
    for _ in 0..u.int_in_range(0..=10u8)? {
        containers.push(cri::Container {
            id: small(u)?,
            pod_sandbox_id: small(u)?,
            metadata: if u.arbitrary()? {
                Some(cri::ContainerMetadata {
                    name: u.arbitrary()?,
                    attempt: u.arbitrary()?,
                })
            } else {
                None
            },
            image: if u.arbitrary()? {
                Some(cri::ImageSpec {
                    image: u.arbitrary()?,
                    annotations: u.arbitrary()?,
                    ..Default::default()
                })
            } else {
                None
            },
            image_ref: u.arbitrary()?,
            state: u.arbitrary()?,
            created_at: u.arbitrary()?,
            labels: labels(u)?,
            annotations: u.arbitrary()?,
            image_id: u.arbitrary()?,
        });
    }
    let sandbox_answer = cri::ListPodSandboxResponse { items: items.clone() }.encode_to_vec();
    let container_answer = cri::ListContainersResponse {
        containers: containers.clone(),
    }
    .encode_to_vec();
    let sandbox_items = sandbox_items(&sandbox_answer).expect("the slim messages reject a sandbox answer");
    let container_items = container_items(&container_answer).expect("the slim messages reject a container answer");
    let sandboxes =
        slim_sandboxes(&sandbox_items, bad).expect("the slim messages reject sandboxes the full ones write");
    let listed =
        slim_containers(&container_items, bad).expect("the slim messages reject containers the full ones write");
    assert!(bad.is_empty(), "bad data in valid answers: {bad:?}");
    assert_eq!(sandboxes, full_sandboxes(cri::ListPodSandboxResponse { items }));
    assert_eq!(listed, full_containers(cri::ListContainersResponse { containers }));
    check_pods(sandboxes, listed, std::mem::take(bad));
    Ok(())
}

fn check_pods(sandboxes: Vec<ListedSandbox<'_>>, containers: Vec<ListedContainer<'_>>, mut bad: Vec<BadData>) {
    let mut grouping = PodGrouping::default();
    for sandbox in sandboxes {
        grouping.add_sandbox(sandbox, &mut bad);
    }
    for container in containers {
        grouping.add_container(container, &mut bad);
    }
    let pods = grouping.into_pods();
    for pair in pods.windows(2) {
        assert!(pair[0].id < pair[1].id, "pods not sorted by uid, or a uid twice");
    }
    let mut ids = HashSet::new();
    for pod in &pods {
        for c in pod.sandboxes.iter().chain(&pod.containers) {
            assert!(!c.id.is_empty(), "an empty id in pod {}", pod.id);
            assert!(ids.insert(c.id.clone()), "id {} in two places", c.id);
        }
    }
    for b in &bad {
        assert!(!b.kind().is_empty());
    }
}
