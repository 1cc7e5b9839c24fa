//! CRI answers → pods: the allocation-light wire decoder against prost, then the grouping.
//!
//! The first byte picks how the rest is read:
//! - even: raw bytes. Two little-endian bytes give the length of a `ListPodSandboxResponse`, that
//!   many bytes follow, the rest is a `ListContainersResponse`. Whatever the bytes, nothing panics;
//!   on an answer prost itself would write (decoding and re-encoding gives the same bytes) the wire
//!   decoder agrees with prost. (On other bytes the two may differ by design: prost reads a map
//!   field sent with the wrong wire type as an entry, the wire decoder skips it as Go does.)
//! - odd: structured. Sandboxes and containers with arbitrary strings, numbers, labels and
//!   annotations are encoded with prost, and the wire decoder must read back exactly what plegd
//!   takes from prost's types, with no bad data.
//!
//! Either way, the pods that come out are sorted by uid with no uid twice, no container or sandbox
//! id is in two places, and no id is empty.
#![no_main]

use std::collections::{HashMap, HashSet};

use arbitrary::{Result, Unstructured};
use k8s_cri::v1 as cri;
use libfuzzer_sys::fuzz_target;
use plegd::container::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use plegd::runtime::convert::{BadData, group_pods};
use plegd::runtime::wire::{self, ListedContainer, ListedSandbox, Malformed};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        raw(data);
    } else {
        let _ = structured(&mut Unstructured::new(data));
    }
});

/// Decode with both decoders; they must agree on answers prost would write itself.
fn both<'a, M: Message + Default + Clone, T: PartialEq + std::fmt::Debug>(
    answer: &'a [u8],
    ours: fn(&'a [u8], &mut Vec<BadData>) -> std::result::Result<Vec<T>, Malformed>,
    theirs: fn(M) -> Vec<T>,
    bad: &mut Vec<BadData>,
) -> Option<Vec<T>> {
    let mut item_bad = Vec::new();
    let decoded = ours(answer, &mut item_bad);
    if let Ok(message) = M::decode(answer)
        && message.encode_to_vec() == answer
    {
        let ours = decoded
            .as_ref()
            .expect("the wire decoder rejects an answer prost writes");
        assert_eq!(ours, &theirs(message), "the wire decoder differs from prost");
        assert!(item_bad.is_empty(), "bad data in an answer prost writes: {item_bad:?}");
    }
    bad.extend(item_bad);
    decoded.ok()
}

fn sandbox_items(m: cri::ListPodSandboxResponse) -> Vec<ListedSandbox<'static>> {
    m.items.into_iter().map(Into::into).collect()
}

fn container_items(m: cri::ListContainersResponse) -> Vec<ListedContainer<'static>> {
    m.containers.into_iter().map(Into::into).collect()
}

fn raw(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*head)).min(rest.len());
    let (sandbox_answer, container_answer) = rest.split_at(split);
    let mut bad = Vec::new();
    let sandboxes = both(sandbox_answer, wire::sandboxes, sandbox_items, &mut bad);
    let containers = both(container_answer, wire::containers, container_items, &mut bad);
    if let (Some(sandboxes), Some(containers)) = (sandboxes, containers) {
        check_pods(sandboxes, containers, bad);
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
    let sandboxes = wire::sandboxes(&sandbox_answer, bad).expect("the wire decoder rejects prost's sandboxes");
    let listed = wire::containers(&container_answer, bad).expect("the wire decoder rejects prost's containers");
    assert!(bad.is_empty(), "bad data in valid answers: {bad:?}");
    assert_eq!(sandboxes, sandbox_items(cri::ListPodSandboxResponse { items }));
    assert_eq!(listed, container_items(cri::ListContainersResponse { containers }));
    check_pods(sandboxes, listed, std::mem::take(bad));
    Ok(())
}

fn check_pods(sandboxes: Vec<ListedSandbox<'_>>, containers: Vec<ListedContainer<'_>>, mut bad: Vec<BadData>) {
    let pods = group_pods(sandboxes, containers, &mut bad);
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
