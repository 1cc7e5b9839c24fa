//! An allocation-light reading of the two list answers every relist makes (`ListPodSandbox`,
//! `ListContainers`). The answers arrive as raw bytes (a codec that does not decode) and are
//! walked field by field in the protobuf wire format; only what plegd uses is read — ids, names,
//! state, creation time, attempt, image and image ref, and the four kubelet labels — and strings are
//! borrowed from the answer, not copied (grouping into pods copies what a pod record keeps). Label
//! and annotation maps are never built. That is most of a relist's allocations gone (see
//! BENCHMARKS.md, idle cost). It is also more forgiving: a sandbox or container with a string that
//! is not UTF-8 is reported as bad data and skipped, instead of failing the whole answer.
//!
//! Field numbers are those of CRI v1 (`runtime.v1`, k8s.io/cri-api api.proto).

use std::borrow::Cow;

use bytes::{Buf, Bytes};
use prost::Message;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::convert::BadData;
use crate::container::{LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// A gRPC codec that encodes requests with prost and hands responses over as raw bytes.
pub struct RawCodec<T> {
    buffer: usize,
    request: std::marker::PhantomData<T>,
}

/// tonic's own initial receive buffer.
const DEFAULT_BUFFER: usize = 8 * 1024;
/// tonic's own yield threshold (it matters to streams only).
const YIELD_THRESHOLD: usize = 32 * 1024;

impl<T> Default for RawCodec<T> {
    fn default() -> Self {
        Self::with_buffer(DEFAULT_BUFFER)
    }
}

impl<T> RawCodec<T> {
    /// A codec whose receive buffer starts at `expected` bytes (at least tonic's 8 KiB), so that
    /// an answer of about that size is received without the buffer growing (and being copied)
    /// several times on the way.
    pub fn with_buffer(expected: usize) -> Self {
        RawCodec {
            buffer: expected.max(DEFAULT_BUFFER),
            request: std::marker::PhantomData,
        }
    }
}

/// The receive buffer for an answer like one of `last` bytes: room for the 5-byte gRPC frame
/// header and 1/16 of growth, capped at `max`.
pub fn buffer_for(last: usize, max: usize) -> usize {
    (last + 5 + last / 16).min(max)
}

pub struct RequestEncoder<T>(std::marker::PhantomData<T>);
pub struct BytesDecoder {
    buffer: usize,
}

impl<T: Message + Send + 'static> Encoder for RequestEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a CRI request: {e}")))
    }
}

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(self.buffer, YIELD_THRESHOLD)
    }
}

impl<T: Message + Send + 'static> Codec for RawCodec<T> {
    type Encode = T;
    type Decode = Bytes;
    type Encoder = RequestEncoder<T>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RequestEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesDecoder { buffer: self.buffer }
    }
}

/// A sandbox as a relist needs it. Strings borrow from the answer's bytes where they can (the
/// decoder copies nothing; grouping copies what a pod record keeps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedSandbox<'a> {
    pub id: Cow<'a, str>,
    /// From the sandbox metadata; empty when the runtime sent none.
    pub uid: Cow<'a, str>,
    pub name: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub attempt: u32,
    pub state: i32,
    pub created_at: i64,
}

/// A container as a relist needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedContainer<'a> {
    pub id: Cow<'a, str>,
    /// The sandbox the container runs in.
    pub sandbox_id: Cow<'a, str>,
    /// From the container metadata.
    pub name: Cow<'a, str>,
    pub attempt: u32,
    pub image: Cow<'a, str>,
    pub image_ref: Cow<'a, str>,
    pub state: i32,
    pub created_at: i64,
    /// The kubelet's labels (empty when absent).
    pub pod_uid: Cow<'a, str>,
    pub pod_name: Cow<'a, str>,
    pub pod_namespace: Cow<'a, str>,
    pub container_name: Cow<'a, str>,
}

/// A malformed answer: not protobuf of the expected shape. The relist fails (and is retried).
#[derive(Debug, thiserror::Error)]
#[error("malformed CRI answer: {0}")]
pub struct Malformed(String);

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

/// The fields of one message, in order.
fn fields(mut buf: &[u8]) -> impl Iterator<Item = Result<(u32, Value<'_>), Malformed>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let step = (|| {
            let (tag, wire) = decode_key(&mut buf).map_err(|e| Malformed(e.to_string()))?;
            let value = match wire {
                WireType::Varint => Value::Varint(decode_varint(&mut buf).map_err(|e| Malformed(e.to_string()))?),
                WireType::LengthDelimited => {
                    let len = decode_varint(&mut buf).map_err(|e| Malformed(e.to_string()))? as usize;
                    if len > buf.len() {
                        return Err(Malformed("a length runs past the end".into()));
                    }
                    let (head, tail) = buf.split_at(len);
                    buf = tail;
                    Value::Bytes(head)
                }
                WireType::ThirtyTwoBit | WireType::SixtyFourBit => {
                    let n = if wire == WireType::ThirtyTwoBit { 4 } else { 8 };
                    if n > buf.len() {
                        return Err(Malformed("a fixed field runs past the end".into()));
                    }
                    buf.advance(n);
                    Value::Other
                }
                // CRI has no groups, but a field this version does not know may be one: skipped
                // as prost skips it (an end without a start is malformed).
                WireType::StartGroup | WireType::EndGroup => {
                    skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| Malformed(e.to_string()))?;
                    Value::Other
                }
            };
            Ok((tag, value))
        })();
        if step.is_err() {
            buf = &[];
        }
        Some(step)
    })
}

/// A string field, borrowed, or None if it is not UTF-8.
fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// (key, value) of a map entry, borrowed.
fn map_entry(bytes: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    let (mut key, mut value): (&[u8], &[u8]) = (&[], &[]);
    for field in fields(bytes) {
        match field? {
            (1, Value::Bytes(k)) => key = k,
            (2, Value::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

/// What went wrong with one item: a bad string (skip the item) or a malformed answer (fail).
enum ItemError {
    NotUtf8,
    Malformed(Malformed),
}

impl From<Malformed> for ItemError {
    fn from(e: Malformed) -> Self {
        ItemError::Malformed(e)
    }
}

fn set_text<'a>(slot: &mut Cow<'a, str>, bytes: &'a [u8]) -> Result<(), ItemError> {
    *slot = Cow::Borrowed(text(bytes).ok_or(ItemError::NotUtf8)?);
    Ok(())
}

fn sandbox(bytes: &[u8]) -> Result<ListedSandbox<'_>, ItemError> {
    let mut s = ListedSandbox::default();
    for field in fields(bytes) {
        match field? {
            (1, Value::Bytes(b)) => set_text(&mut s.id, b)?,
            (2, Value::Bytes(meta)) => {
                for f in fields(meta) {
                    match f? {
                        (1, Value::Bytes(b)) => set_text(&mut s.name, b)?,
                        (2, Value::Bytes(b)) => set_text(&mut s.uid, b)?,
                        (3, Value::Bytes(b)) => set_text(&mut s.namespace, b)?,
                        (4, Value::Varint(v)) => s.attempt = v as u32,
                        _ => {}
                    }
                }
            }
            (3, Value::Varint(v)) => s.state = v as i32,
            (4, Value::Varint(v)) => s.created_at = v as i64,
            _ => {}
        }
    }
    Ok(s)
}

fn container(bytes: &[u8]) -> Result<ListedContainer<'_>, ItemError> {
    let mut c = ListedContainer::default();
    for field in fields(bytes) {
        match field? {
            (1, Value::Bytes(b)) => set_text(&mut c.id, b)?,
            (2, Value::Bytes(b)) => set_text(&mut c.sandbox_id, b)?,
            (3, Value::Bytes(meta)) => {
                for f in fields(meta) {
                    match f? {
                        (1, Value::Bytes(b)) => set_text(&mut c.name, b)?,
                        (2, Value::Varint(v)) => c.attempt = v as u32,
                        _ => {}
                    }
                }
            }
            (4, Value::Bytes(spec)) => {
                for f in fields(spec) {
                    if let (1, Value::Bytes(b)) = f? {
                        set_text(&mut c.image, b)?;
                    }
                }
            }
            (5, Value::Bytes(b)) => set_text(&mut c.image_ref, b)?,
            (6, Value::Varint(v)) => c.state = v as i32,
            (7, Value::Varint(v)) => c.created_at = v as i64,
            (8, Value::Bytes(entry)) => {
                let (key, value) = map_entry(entry)?;
                let slot = match key {
                    k if k == LABEL_POD_UID.as_bytes() => &mut c.pod_uid,
                    k if k == LABEL_POD_NAME.as_bytes() => &mut c.pod_name,
                    k if k == LABEL_POD_NAMESPACE.as_bytes() => &mut c.pod_namespace,
                    k if k == LABEL_CONTAINER_NAME.as_bytes() => &mut c.container_name,
                    _ => continue,
                };
                set_text(slot, value)?;
            }
            _ => {}
        }
    }
    Ok(c)
}

/// The id of an item, for reporting, read leniently.
fn lossy_id(bytes: &[u8]) -> String {
    fields(bytes)
        .find_map(|f| match f {
            Ok((1, Value::Bytes(b))) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

fn items<'a, T>(
    answer: &'a [u8],
    parse: impl Fn(&'a [u8]) -> Result<T, ItemError>,
    bad: &mut Vec<BadData>,
) -> Result<Vec<T>, Malformed> {
    let mut out = Vec::new();
    for field in fields(answer) {
        let (1, Value::Bytes(item)) = field? else { continue };
        match parse(item) {
            Ok(v) => out.push(v),
            Err(ItemError::NotUtf8) => bad.push(BadData::NotUtf8 { id: lossy_id(item) }),
            Err(ItemError::Malformed(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// The sandboxes of a `ListPodSandboxResponse` (field 1, repeated).
pub fn sandboxes<'a>(answer: &'a [u8], bad: &mut Vec<BadData>) -> Result<Vec<ListedSandbox<'a>>, Malformed> {
    items(answer, sandbox, bad)
}

/// The containers of a `ListContainersResponse` (field 1, repeated).
pub fn containers<'a>(answer: &'a [u8], bad: &mut Vec<BadData>) -> Result<Vec<ListedContainer<'a>>, Malformed> {
    items(answer, container, bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1 as cri;
    use std::collections::HashMap;

    fn encode<M: Message>(m: &M) -> Vec<u8> {
        m.encode_to_vec()
    }

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

    #[test]
    fn reads_what_prost_reads() {
        let answer = cri::ListContainersResponse {
            containers: vec![kubelet_container("c1"), kubelet_container("c2")],
        };
        let mut bad = Vec::new();
        let bytes = encode(&answer);
        let listed = containers(&bytes, &mut bad).unwrap();
        assert!(bad.is_empty());
        assert!(
            matches!(
                (&listed[0].id, &listed[0].pod_uid),
                (Cow::Borrowed(_), Cow::Borrowed(_))
            ),
            "strings borrow from the answer"
        );
        assert_eq!(listed.len(), 2);
        let c = &listed[0];
        assert_eq!(
            (
                c.id.as_ref(),
                c.name.as_ref(),
                c.attempt,
                c.image.as_ref(),
                c.image_ref.as_ref()
            ),
            ("c1", "app", 3, "busybox:1", "sha256:abc")
        );
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

        let sb = cri::PodSandbox {
            id: "s1".into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 2,
            }),
            state: 1,
            created_at: 42,
            ..Default::default()
        };
        let bytes = encode(&cri::ListPodSandboxResponse { items: vec![sb] });
        let listed = sandboxes(&bytes, &mut bad).unwrap();
        assert_eq!(
            listed,
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
    }

    #[test]
    fn a_non_utf8_item_is_skipped_not_the_answer() {
        let good = encode(&cri::ListContainersResponse {
            containers: vec![kubelet_container("c1")],
        });
        // Build an answer with a second container whose pod-name label is not UTF-8.
        let mut broken = kubelet_container("c2");
        broken.labels.insert(LABEL_POD_NAME.to_owned(), "BAD".to_owned());
        let mut bytes = encode(&cri::ListContainersResponse {
            containers: vec![broken],
        });
        let at = bytes.windows(3).position(|w| w == b"BAD").unwrap();
        bytes[at] = 0xff;
        let mut answer = good.clone();
        answer.extend_from_slice(&bytes);
        let mut bad = Vec::new();
        let listed = containers(&answer, &mut bad).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "c1");
        assert_eq!(bad, vec![BadData::NotUtf8 { id: "c2".into() }]);
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let mut bad = Vec::new();
        // Truncated varints, a bare key, an over-long varint, a group: whatever the bytes, no panic.
        for junk in [&[0x0a, 0xff, 0xff][..], &[0x0a][..], &[0xff; 11][..], &[0x0b][..]] {
            let _ = containers(junk, &mut bad);
            let _ = sandboxes(junk, &mut bad);
        }
        assert!(
            containers(&[0x0a, 0x05, 0x01], &mut bad).is_err(),
            "a length past the end"
        );
        assert!(containers(&[], &mut bad).unwrap().is_empty());
    }

    #[test]
    fn receive_buffers_fit_the_last_answer() {
        assert_eq!(buffer_for(0, 1 << 20), 5);
        assert_eq!(
            RawCodec::<cri::ListContainersRequest>::with_buffer(5).buffer,
            DEFAULT_BUFFER
        );
        assert_eq!(buffer_for(160_000, 1 << 20), 170_005);
        assert_eq!(buffer_for(4 << 20, 1 << 20), 1 << 20, "never past the message limit");
    }

    #[test]
    fn unknown_groups_are_skipped_as_prost_skips_them() {
        let mut bad = Vec::new();
        let mut answer = encode(&cri::ListContainersResponse {
            containers: vec![kubelet_container("c1")],
        });
        // Field 6 as an empty group (start 0x33, end 0x34), found by fuzzing: prost accepts it.
        answer.extend_from_slice(&[0x33, 0x34]);
        assert!(cri::ListContainersResponse::decode(answer.as_slice()).is_ok());
        assert_eq!(containers(&answer, &mut bad).unwrap().len(), 1);
        // An end without a start, or a start without an end, is malformed for both.
        for junk in [&[0x34][..], &[0x33][..]] {
            assert!(cri::ListContainersResponse::decode(junk).is_err());
            assert!(containers(junk, &mut bad).is_err());
        }
    }
}
