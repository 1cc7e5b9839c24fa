//! The two list calls every relist makes (`ListPodSandbox`, `ListContainers`), as prost messages
//! generated from `proto/runtime/v1/relist.proto`: CRI v1 on the wire, with only the fields plegd
//! reads. Unknown fields are skipped by prost; strings arrive as `Bytes` slices of the received
//! answer (no copies) and are checked for UTF-8 here, one item at a time, so that a sandbox or
//! container with a bad string is reported and skipped instead of failing the whole answer. No
//! label or annotation map is built.
//!
//! An answer arrives with its items still encoded (`repeated bytes`); [`decode_sandboxes`] and
//! [`decode_containers`] decode each item from its own bytes, so that every string is a cheap
//! slice of that item (decoded in one go from tonic's receive buffer, each string would split
//! that buffer instead: a relist of 110 pods took about 4 % longer that way). A malformed item
//! fails the whole answer, as it would decoded in one go. [`sandboxes`] and [`containers`] then
//! read the items into the runtime's view of what was listed ([`ListedSandbox`],
//! [`ListedContainer`]), borrowing from them; `convert` groups those into pods. Nothing here does
//! I/O or panics on any input.

use std::borrow::Cow;

use bytes::Bytes;
use prost::{DecodeError, Message};

use super::convert::{BadData, ListedContainer, ListedSandbox};
use crate::kubecontainer::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

tonic::include_proto!("runtime.v1");

/// A string field, borrowed, or None if it is not UTF-8.
fn text(bytes: &Bytes) -> Option<Cow<'_, str>> {
    std::str::from_utf8(bytes).ok().map(Cow::Borrowed)
}

fn sandbox(s: &PodSandbox) -> Option<ListedSandbox<'_>> {
    let mut listed = ListedSandbox {
        id: text(&s.id)?,
        state: s.state,
        created_at: s.created_at,
        ..ListedSandbox::default()
    };
    if let Some(meta) = &s.metadata {
        listed.name = text(&meta.name)?;
        listed.uid = text(&meta.uid)?;
        listed.namespace = text(&meta.namespace)?;
        listed.attempt = meta.attempt;
    }
    Some(listed)
}

fn container(c: &Container) -> Option<ListedContainer<'_>> {
    let mut listed = ListedContainer {
        id: text(&c.id)?,
        sandbox_id: text(&c.pod_sandbox_id)?,
        state: c.state,
        created_at: c.created_at,
        ..ListedContainer::default()
    };
    if let Some(meta) = &c.metadata {
        listed.name = text(&meta.name)?;
        listed.attempt = meta.attempt;
    }
    // As in a map, a key sent twice keeps its last value.
    for label in &c.labels {
        let slot = match &label.key[..] {
            k if k == LABEL_POD_UID.as_bytes() => &mut listed.pod_uid,
            k if k == LABEL_POD_NAME.as_bytes() => &mut listed.pod_name,
            k if k == LABEL_POD_NAMESPACE.as_bytes() => &mut listed.pod_namespace,
            k if k == LABEL_CONTAINER_NAME.as_bytes() => &mut listed.container_name,
            _ => continue,
        };
        *slot = text(&label.value)?;
    }
    Some(listed)
}

/// Read every item, skipping (and reporting) those with a string that is not UTF-8.
fn read<'a, M, T>(
    items: &'a [M],
    id: impl Fn(&M) -> &Bytes,
    read_one: impl Fn(&'a M) -> Option<T>,
    bad: &mut Vec<BadData>,
) -> Vec<T> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match read_one(item) {
            Some(listed) => out.push(listed),
            None => bad.push(BadData::NotUtf8 {
                id: String::from_utf8_lossy(id(item)).into_owned(),
            }),
        }
    }
    out
}

fn decode_each<M: Message + Default>(items: Vec<Bytes>) -> Result<Vec<M>, DecodeError> {
    items.into_iter().map(M::decode).collect()
}

/// The sandboxes of a `ListPodSandbox` answer, decoded.
pub fn decode_sandboxes(answer: ListPodSandboxResponse) -> Result<Vec<PodSandbox>, DecodeError> {
    decode_each(answer.items)
}

/// The containers of a `ListContainers` answer, decoded.
pub fn decode_containers(answer: ListContainersResponse) -> Result<Vec<Container>, DecodeError> {
    decode_each(answer.containers)
}

/// The sandboxes of a `ListPodSandbox` answer as listed.
pub fn sandboxes<'a>(items: &'a [PodSandbox], bad: &mut Vec<BadData>) -> Vec<ListedSandbox<'a>> {
    read(items, |s| &s.id, sandbox, bad)
}

/// The containers of a `ListContainers` answer as listed.
pub fn containers<'a>(items: &'a [Container], bad: &mut Vec<BadData>) -> Vec<ListedContainer<'a>> {
    read(items, |c| &c.id, container, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1 as cri;
    use prost::Message;
    use std::collections::HashMap;

    fn kubelet_container(id: &str) -> cri::Container {
        let labels: HashMap<String, String> = [
            (LABEL_POD_UID.to_owned(), "u1".to_owned()),
            (LABEL_POD_NAME.to_owned(), "web".to_owned()),
            (LABEL_POD_NAMESPACE.to_owned(), "ns".to_owned()),
            (LABEL_CONTAINER_NAME.to_owned(), "app".to_owned()),
            ("io.kubernetes.other".to_owned(), "x".to_owned()),
        ]
        .into();
        cri::Container {
            id: id.into(),
            pod_sandbox_id: "s1".into(),
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 3,
            }),
            image: Some(cri::ImageSpec {
                image: "busybox:1".into(),
                ..Default::default()
            }),
            image_ref: "sha256:abc".into(),
            state: cri::ContainerState::ContainerRunning as i32,
            created_at: 1_700_000_000_000_000_000,
            labels,
            annotations: [("io.kubernetes.container.hash".to_owned(), "1234".to_owned())].into(),
            image_id: "sha256:def".into(),
        }
    }

    /// What the runtime sent, decoded as plegd decodes it: the answer from one buffer, as tonic
    /// hands it over, then each item from its bytes.
    fn decode_container_answer(wire: impl Into<Bytes>) -> Result<Vec<Container>, DecodeError> {
        decode_containers(ListContainersResponse::decode(wire.into())?)
    }

    fn decode_sandbox_answer(wire: impl Into<Bytes>) -> Result<Vec<PodSandbox>, DecodeError> {
        decode_sandboxes(ListPodSandboxResponse::decode(wire.into())?)
    }

    #[test]
    fn reads_what_the_full_cri_messages_read() {
        let full = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1"), kubelet_container("c2")],
        };
        let answer = decode_container_answer(full.encode_to_vec()).unwrap();
        let mut bad = Vec::new();
        let listed = containers(&answer, &mut bad);
        assert!(bad.is_empty());
        assert!(
            matches!(
                (&listed[0].id, &listed[0].pod_uid),
                (Cow::Borrowed(_), Cow::Borrowed(_))
            ),
            "strings borrow from the answer"
        );
        let expected: Vec<ListedContainer> = full.containers.into_iter().map(Into::into).collect();
        assert_eq!(listed, expected);
        let c = &listed[0];
        assert_eq!((c.id.as_ref(), c.name.as_ref(), c.attempt), ("c1", "app", 3));
        assert_eq!((c.state, c.created_at), (1, 1_700_000_000_000_000_000));
        assert_eq!(
            (
                c.pod_uid.as_ref(),
                c.pod_name.as_ref(),
                c.pod_namespace.as_ref(),
                c.container_name.as_ref()
            ),
            ("u1", "web", "ns", "app")
        );

        let sandbox = cri::PodSandbox {
            id: "s1".into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 2,
            }),
            state: 1,
            created_at: 42,
            labels: [("a".to_owned(), "b".to_owned())].into(),
            runtime_handler: "runc".into(),
            ..Default::default()
        };
        let answer =
            decode_sandbox_answer(cri::ListPodSandboxResponse { items: vec![sandbox] }.encode_to_vec()).unwrap();
        assert_eq!(
            sandboxes(&answer, &mut bad),
            [ListedSandbox {
                id: "s1".into(),
                uid: "u1".into(),
                name: "web".into(),
                namespace: "ns".into(),
                attempt: 2,
                state: 1,
                created_at: 42
            }]
        );
        assert!(bad.is_empty());
    }

    #[test]
    fn strings_are_slices_of_the_answer_not_copies() {
        let wire = Bytes::from(
            cri::ListContainersResponse {
                containers: vec![kubelet_container("c1")],
            }
            .encode_to_vec(),
        );
        let answer = decode_container_answer(wire.clone()).unwrap();
        let id = &answer[0].id;
        let within = wire.as_ptr_range();
        assert!(within.contains(&id.as_ptr()), "the id points into the received buffer");
    }

    #[test]
    fn a_non_utf8_item_is_skipped_not_the_answer() {
        let good = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1")],
        }
        .encode_to_vec();
        // A second container whose pod-name label is not UTF-8.
        let mut broken = kubelet_container("c2");
        broken.labels.insert(LABEL_POD_NAME.to_owned(), "BAD".to_owned());
        let mut bytes = cri::ListContainersResponse {
            containers: vec![broken],
        }
        .encode_to_vec();
        let at = bytes.windows(3).position(|w| w == b"BAD").unwrap();
        bytes[at] = 0xff;
        let mut wire = good;
        wire.extend_from_slice(&bytes);
        let answer = decode_container_answer(wire).unwrap();
        let mut bad = Vec::new();
        let listed = containers(&answer, &mut bad);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "c1");
        assert_eq!(bad, vec![BadData::NotUtf8 { id: "c2".into() }]);

        // A label plegd does not read may hold anything.
        let mut other = kubelet_container("c3");
        other.labels.insert("io.kubernetes.other".to_owned(), "BAD".to_owned());
        let mut wire = cri::ListContainersResponse {
            containers: vec![other],
        }
        .encode_to_vec();
        let at = wire.windows(3).position(|w| w == b"BAD").unwrap();
        wire[at] = 0xff;
        let answer = decode_container_answer(wire).unwrap();
        bad.clear();
        assert_eq!(containers(&answer, &mut bad).len(), 1);
        assert!(bad.is_empty());
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        // Truncated varints, a bare key, an over-long varint, a group start without an end, a
        // length past the end: whatever the bytes, an error and no panic.
        for junk in [
            &[0x0a, 0xff, 0xff][..],
            &[0x0a][..],
            &[0xff; 11][..],
            &[0x0b][..],
            &[0x0a, 0x05, 0x01][..],
            // Answers whose one item is malformed (its id runs past the item's end; a group start
            // without an end): the whole answer fails, as it would decoded in one go.
            &[0x0a, 0x02, 0x0a, 0x05][..],
            &[0x0a, 0x01, 0x0b][..],
        ] {
            assert!(decode_container_answer(junk).is_err());
            assert!(decode_sandbox_answer(junk).is_err());
            assert!(cri::ListContainersResponse::decode(junk).is_err());
        }
        assert!(decode_container_answer(&[][..]).unwrap().is_empty());
    }

    #[test]
    fn unknown_groups_are_skipped_as_the_full_messages_skip_them() {
        let mut wire = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1")],
        }
        .encode_to_vec();
        // Field 6 as an empty group (start 0x33, end 0x34): prost accepts it.
        wire.extend_from_slice(&[0x33, 0x34]);
        assert!(cri::ListContainersResponse::decode(wire.as_slice()).is_ok());
        assert_eq!(decode_container_answer(wire.clone()).unwrap().len(), 1);
        // A group as field 15 (unknown to CRI's Container) inside the item.
        let item = kubelet_container("c1").encode_to_vec();
        let mut within = vec![0x0a];
        prost::encoding::encode_varint(item.len() as u64 + 2, &mut within);
        within.extend_from_slice(&item);
        within.extend_from_slice(&[0x7b, 0x7c]);
        assert!(cri::ListContainersResponse::decode(within.as_slice()).is_ok());
        assert_eq!(decode_container_answer(within).unwrap().len(), 1);
        for junk in [&[0x34][..], &[0x33][..]] {
            assert!(cri::ListContainersResponse::decode(junk).is_err());
            assert!(decode_container_answer(junk).is_err());
        }
    }

    #[test]
    fn requests_are_what_the_runtime_expects() {
        let ours = ListContainersRequest {
            filter: Some(ContainerFilter {
                id: "c1".into(),
                label_selector: [(LABEL_POD_UID.to_owned(), "u1".to_owned())].into(),
            }),
        };
        let theirs = cri::ListContainersRequest::decode(ours.encode_to_vec().as_slice()).unwrap();
        let filter = theirs.filter.unwrap();
        assert_eq!(
            (filter.id.as_str(), filter.label_selector[LABEL_POD_UID].as_str()),
            ("c1", "u1")
        );
        let ours = ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                id: "s1".into(),
                label_selector: [(LABEL_POD_UID.to_owned(), "u1".to_owned())].into(),
            }),
        };
        let theirs = cri::ListPodSandboxRequest::decode(ours.encode_to_vec().as_slice()).unwrap();
        let filter = theirs.filter.unwrap();
        assert_eq!(
            (filter.id.as_str(), filter.label_selector[LABEL_POD_UID].as_str()),
            ("s1", "u1")
        );
    }
}
