//! The two list calls every relist makes (`ListPodSandbox`, `ListContainers`), as prost messages
//! generated from `proto/runtime/v1/relist.proto`: CRI v1 on the wire, with only the fields plegd
//! reads. Unknown fields are skipped by prost. No label or annotation map is built.
//!
//! An answer arrives with its items still encoded (`repeated bytes`: decoded in one go from
//! tonic's receive buffer, each string would split that buffer instead, which costs more; see
//! BENCHMARKS.md). [`read_sandboxes`] and [`read_containers`] decode the items one at a time into
//! one message they reuse (no list of decoded messages, no label list per container) and hand each
//! on as the runtime's view of what was listed ([`ListedSandbox`], [`ListedContainer`]), its
//! strings borrowed from the item's bytes: no string is copied before grouping (`convert`) keeps
//! it. Strings are checked for UTF-8 one item
//! at a time, so that a sandbox or container with a bad string is reported and skipped instead of
//! failing the whole answer; a malformed item fails the whole answer, as it would decoded in one
//! go. Nothing here does I/O or panics on any input.
//!
//! The same generated code holds the slim status reads and event stream messages, read by
//! [`super::statuses`] and the CRI trigger source.

use std::borrow::Cow;

use bytes::Bytes;
use prost::{DecodeError, Message};

use super::convert::{BadData, ListedContainer, ListedSandbox};
use crate::kubecontainer::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

tonic::include_proto!("runtime.v1");

/// `field` as a part of `item`. prost decodes a `bytes` field from a `Bytes` buffer as a slice of
/// that buffer (no copy), so a field lies inside the item it came from: borrowed from the item, it
/// lives as long as the answer instead of as long as the reused message. None if it does not lie
/// inside (it never happens; the caller then copies it).
fn part_of<'a>(item: &'a [u8], field: &[u8]) -> Option<&'a [u8]> {
    if field.is_empty() {
        return Some(&[]);
    }
    let start = (field.as_ptr() as usize).checked_sub(item.as_ptr() as usize)?;
    item.get(start..start.checked_add(field.len())?)
}

/// A string field of `item`, or None if it is not UTF-8.
fn text<'a>(item: &'a [u8], field: &Bytes) -> Option<Cow<'a, str>> {
    match part_of(item, field) {
        Some(part) => std::str::from_utf8(part).ok().map(Cow::Borrowed),
        None => std::str::from_utf8(field).ok().map(|s| Cow::Owned(s.to_owned())),
    }
}

fn sandbox<'a>(item: &'a [u8], s: &PodSandbox) -> Option<ListedSandbox<'a>> {
    let mut listed = ListedSandbox {
        id: text(item, &s.id)?,
        state: s.state,
        created_at: s.created_at,
        ..ListedSandbox::default()
    };
    if let Some(meta) = &s.metadata {
        listed.name = text(item, &meta.name)?;
        listed.uid = text(item, &meta.uid)?;
        listed.namespace = text(item, &meta.namespace)?;
        listed.attempt = meta.attempt;
    }
    Some(listed)
}

fn container<'a>(item: &'a [u8], c: &Container) -> Option<ListedContainer<'a>> {
    let mut listed = ListedContainer {
        id: text(item, &c.id)?,
        sandbox_id: text(item, &c.pod_sandbox_id)?,
        state: c.state,
        created_at: c.created_at,
        ..ListedContainer::default()
    };
    if let Some(meta) = &c.metadata {
        listed.name = text(item, &meta.name)?;
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
        *slot = text(item, &label.value)?;
    }
    Some(listed)
}

/// Decode each item into one reused message and read it with `read_one`; an item with a string
/// that is not UTF-8 is handed on as [`BadData::NotUtf8`]. The first malformed item ends it.
fn read<'a, M: Message + Default, T>(
    items: &'a [Bytes],
    id: impl Fn(&M) -> &Bytes,
    read_one: impl Fn(&'a [u8], &M) -> Option<T>,
    mut each: impl FnMut(Result<T, BadData>),
) -> Result<(), DecodeError> {
    let mut message = M::default();
    for item in items {
        message.clear();
        message.merge(item.clone())?;
        each(read_one(item, &message).ok_or_else(|| BadData::NotUtf8 {
            id: String::from_utf8_lossy(id(&message)).into_owned(),
        }));
    }
    Ok(())
}

/// The sandboxes of a `ListPodSandbox` answer (its `items`), each as listed or as bad data.
pub fn read_sandboxes<'a>(
    items: &'a [Bytes],
    each: impl FnMut(Result<ListedSandbox<'a>, BadData>),
) -> Result<(), DecodeError> {
    read(items, |s: &PodSandbox| &s.id, sandbox, each)
}

/// The containers of a `ListContainers` answer (its `containers`), each as listed or as bad data.
pub fn read_containers<'a>(
    items: &'a [Bytes],
    each: impl FnMut(Result<ListedContainer<'a>, BadData>),
) -> Result<(), DecodeError> {
    read(items, |c: &Container| &c.id, container, each)
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

    fn kubelet_sandbox(id: &str) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 2,
            }),
            state: 1,
            created_at: 42,
            ..Default::default()
        }
    }

    /// The items of an answer as tonic hands it over: decoded from one buffer.
    fn container_items(wire: impl Into<Bytes>) -> Result<Vec<Bytes>, DecodeError> {
        Ok(ListContainersResponse::decode(wire.into())?.containers)
    }

    fn sandbox_items(wire: impl Into<Bytes>) -> Result<Vec<Bytes>, DecodeError> {
        Ok(ListPodSandboxResponse::decode(wire.into())?.items)
    }

    /// Every item read, as a relist reads them.
    fn containers<'a>(items: &'a [Bytes], bad: &mut Vec<BadData>) -> Result<Vec<ListedContainer<'a>>, DecodeError> {
        let mut listed = Vec::new();
        read_containers(items, |c| match c {
            Ok(c) => listed.push(c),
            Err(b) => bad.push(b),
        })?;
        Ok(listed)
    }

    fn sandboxes<'a>(items: &'a [Bytes], bad: &mut Vec<BadData>) -> Result<Vec<ListedSandbox<'a>>, DecodeError> {
        let mut listed = Vec::new();
        read_sandboxes(items, |s| match s {
            Ok(s) => listed.push(s),
            Err(b) => bad.push(b),
        })?;
        Ok(listed)
    }

    /// Whether an answer reads without error.
    fn reads(wire: &[u8]) -> (bool, bool) {
        let bad = &mut Vec::new();
        let containers = container_items(wire.to_vec()).and_then(|items| containers(&items, bad).map(drop));
        let sandboxes = sandbox_items(wire.to_vec()).and_then(|items| sandboxes(&items, bad).map(drop));
        (containers.is_ok(), sandboxes.is_ok())
    }

    #[test]
    fn reads_what_the_full_cri_messages_read() {
        let full = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1"), kubelet_container("c2")],
        };
        let items = container_items(full.encode_to_vec()).unwrap();
        let mut bad = Vec::new();
        let listed = containers(&items, &mut bad).unwrap();
        assert!(bad.is_empty());
        let borrowed = |s: &Cow<str>| matches!(s, Cow::Borrowed(_));
        for c in &listed {
            assert!(
                [
                    &c.id,
                    &c.sandbox_id,
                    &c.name,
                    &c.pod_uid,
                    &c.pod_name,
                    &c.pod_namespace,
                    &c.container_name
                ]
                .into_iter()
                .all(borrowed),
                "strings borrow from the answer"
            );
        }
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
            labels: [("a".to_owned(), "b".to_owned())].into(),
            runtime_handler: "runc".into(),
            ..kubelet_sandbox("s1")
        };
        let items = sandbox_items(cri::ListPodSandboxResponse { items: vec![sandbox] }.encode_to_vec()).unwrap();
        assert_eq!(
            sandboxes(&items, &mut bad).unwrap(),
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
        let items = container_items(wire.clone()).unwrap();
        let listed = containers(&items, &mut Vec::new()).unwrap();
        let within = wire.as_ptr_range();
        for s in [&listed[0].id, &listed[0].pod_uid, &listed[0].container_name] {
            assert!(within.contains(&s.as_ptr()), "{s} points into the received buffer");
        }
    }

    #[test]
    fn non_ascii_strings_are_read_whole() {
        let mut c = kubelet_container("c-ü");
        c.labels.insert(LABEL_POD_UID.to_owned(), "uid-日本".to_owned());
        c.labels.insert(LABEL_CONTAINER_NAME.to_owned(), "äpp-🦀".to_owned());
        let wire = cri::ListContainersResponse {
            containers: vec![c.clone()],
        }
        .encode_to_vec();
        let items = container_items(wire).unwrap();
        let mut bad = Vec::new();
        let listed = containers(&items, &mut bad).unwrap();
        assert!(bad.is_empty());
        assert_eq!(listed, [ListedContainer::from(c)]);
        assert_eq!(
            (listed[0].pod_uid.as_ref(), listed[0].container_name.as_ref()),
            ("uid-日本", "äpp-🦀")
        );
    }

    #[test]
    fn a_field_is_borrowed_from_its_item_only_if_it_lies_inside() {
        let item = Bytes::from_static(b"0123456789");
        assert_eq!(part_of(&item, &item.slice(2..5)), Some(&b"234"[..]));
        assert_eq!(part_of(&item, &item.slice(7..)), Some(&b"789"[..]));
        assert_eq!(part_of(&item, &item.slice(3..3)), Some(&b""[..]));
        // Equal bytes elsewhere (a copy) are not part of the item, nor is a field running past it.
        let copy = Bytes::copy_from_slice(b"234");
        assert_eq!(part_of(&item, &copy), None);
        assert_eq!(part_of(&item.slice(0..5), &item.slice(3..7)), None);
        assert_eq!(part_of(&item.slice(5..), &item.slice(2..4)), None);
        // A copy is read all the same, owned.
        assert!(matches!(text(&item, &copy), Some(Cow::Owned(s)) if s == "234"));
        assert!(matches!(text(&item, &item.slice(2..5)), Some(Cow::Borrowed("234"))));
        assert_eq!(text(&item, &Bytes::from_static(b"\xff")), None);
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
        let items = container_items(wire).unwrap();
        let mut bad = Vec::new();
        let listed = containers(&items, &mut bad).unwrap();
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
        let items = container_items(wire).unwrap();
        bad.clear();
        assert_eq!(containers(&items, &mut bad).unwrap().len(), 1);
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
            assert_eq!(reads(junk), (false, false), "{junk:?}");
            assert!(cri::ListContainersResponse::decode(junk).is_err());
        }
        let empty = container_items(&[][..]).unwrap();
        assert!(containers(&empty, &mut Vec::new()).unwrap().is_empty());

        // A good item, then a malformed one: the answer fails as a whole.
        let mut wire = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1")],
        }
        .encode_to_vec();
        wire.extend_from_slice(&[0x0a, 0x02, 0x0a, 0x05]);
        let items = container_items(wire).unwrap();
        assert!(containers(&items, &mut Vec::new()).is_err());
    }

    #[test]
    fn the_reused_message_carries_nothing_from_one_item_to_the_next() {
        let bare = cri::Container {
            id: "c2".into(),
            ..Default::default()
        };
        let wire = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1"), bare.clone()],
        }
        .encode_to_vec();
        let items = container_items(wire).unwrap();
        let listed = containers(&items, &mut Vec::new()).unwrap();
        assert_eq!(listed[1], ListedContainer::from(bare));
        assert_eq!(
            (listed[1].name.as_ref(), listed[1].pod_uid.as_ref(), listed[1].attempt),
            ("", "", 0)
        );

        let full = kubelet_sandbox("s1");
        let bare = cri::PodSandbox {
            id: "s2".into(),
            ..Default::default()
        };
        let wire = cri::ListPodSandboxResponse {
            items: vec![full, bare.clone()],
        }
        .encode_to_vec();
        let items = sandbox_items(wire).unwrap();
        let listed = sandboxes(&items, &mut Vec::new()).unwrap();
        assert_eq!(listed[1], ListedSandbox::from(bare));
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
        assert!(reads(&wire).0, "the container answer reads");
        let items = container_items(wire).unwrap();
        assert_eq!(containers(&items, &mut Vec::new()).unwrap().len(), 1);
        // A group as field 15 (unknown to CRI's Container) inside the item.
        let item = kubelet_container("c1").encode_to_vec();
        let mut within = vec![0x0a];
        prost::encoding::encode_varint(item.len() as u64 + 2, &mut within);
        within.extend_from_slice(&item);
        within.extend_from_slice(&[0x7b, 0x7c]);
        assert!(cri::ListContainersResponse::decode(within.as_slice()).is_ok());
        let items = container_items(within).unwrap();
        assert_eq!(containers(&items, &mut Vec::new()).unwrap().len(), 1);
        for junk in [&[0x34][..], &[0x33][..]] {
            assert!(cri::ListContainersResponse::decode(junk).is_err());
            assert_eq!(reads(junk), (false, false));
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
