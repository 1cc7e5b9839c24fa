//! The two list calls every relist makes (`ListPodSandbox`, `ListContainers`), as prost messages
//! generated from `proto/runtime/v1/relist.proto`: CRI v1 on the wire, with only the fields plegd
//! reads. Unknown fields are skipped by prost; strings arrive as `Bytes` slices of the received
//! answer (no copies) and are checked for UTF-8 here, one item at a time, so that a sandbox or
//! container with a bad string is reported and skipped instead of failing the whole answer. No
//! label or annotation map is built.
//!
//! [`sandboxes`] and [`containers`] read an answer into the runtime's view of what was listed
//! ([`ListedSandbox`], [`ListedContainer`]), borrowing from it; `convert` groups those into pods.
//! Nothing here does I/O or panics on any input.

use std::borrow::Cow;

use bytes::Bytes;

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

/// The sandboxes of a `ListPodSandbox` answer.
pub fn sandboxes<'a>(answer: &'a ListPodSandboxResponse, bad: &mut Vec<BadData>) -> Vec<ListedSandbox<'a>> {
    read(&answer.items, |s| &s.id, sandbox, bad)
}

/// The containers of a `ListContainers` answer.
pub fn containers<'a>(answer: &'a ListContainersResponse, bad: &mut Vec<BadData>) -> Vec<ListedContainer<'a>> {
    read(&answer.containers, |c| &c.id, container, bad)
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

    /// What the runtime sent, decoded as plegd decodes it: from one buffer, as tonic hands it over.
    fn decode<M: Message + Default>(answer: &impl Message) -> M {
        M::decode(Bytes::from(answer.encode_to_vec())).unwrap()
    }

    #[test]
    fn reads_what_the_full_cri_messages_read() {
        let full = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1"), kubelet_container("c2")],
        };
        let answer: ListContainersResponse = decode(&full);
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
        let answer: ListPodSandboxResponse = decode(&cri::ListPodSandboxResponse { items: vec![sandbox] });
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
        let answer = ListContainersResponse::decode(wire.clone()).unwrap();
        let id = &answer.containers[0].id;
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
        let answer = ListContainersResponse::decode(Bytes::from(wire)).unwrap();
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
        let answer = ListContainersResponse::decode(Bytes::from(wire)).unwrap();
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
        ] {
            assert!(ListContainersResponse::decode(junk).is_err());
            assert!(ListPodSandboxResponse::decode(junk).is_err());
        }
        assert!(ListContainersResponse::decode(&[][..]).unwrap().containers.is_empty());
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
        assert_eq!(
            ListContainersResponse::decode(wire.as_slice())
                .unwrap()
                .containers
                .len(),
            1
        );
        for junk in [&[0x34][..], &[0x33][..]] {
            assert!(cri::ListContainersResponse::decode(junk).is_err());
            assert!(ListContainersResponse::decode(junk).is_err());
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
