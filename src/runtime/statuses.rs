//! The two status reads that inspect a changed pod (`PodSandboxStatus`, `ContainerStatus`), decoded
//! from the slim messages of `proto/runtime/v1/relist.proto`, whose strings are bytes, and handed on
//! as CRI's own messages to [`super::convert`] and [`super::termination`].
//!
//! Decoded with `string` fields, one string that is not UTF-8 anywhere in an answer (a reason, a
//! message, an annotation, a mount) fails the whole read, and with it every inspection of the pod
//! for as long as the runtime reports that string: its events are withheld and FailedSync repeats.
//! Here it costs that one field instead:
//! - text (reason, message, image, names, label and annotation values, runtime handler) is kept
//!   with U+FFFD in place of its bad bytes: what the apiserver stores when the kubelet writes such a
//!   string (Go's encoding/json makes the same replacement);
//! - a path (a mount's, the log's) or an IP is left out: plegd reads no file it cannot name
//!   exactly and writes no address that is not one;
//! - a label or annotation whose key is not UTF-8 is left out: no key plegd reads can be one.
//!
//! Each is reported as [`BadData::NotUtf8Field`]. Pure: no I/O, and no panic on any input.

use std::collections::HashMap;

use bytes::Bytes;
use k8s_cri::v1 as cri;

use super::convert::BadData;
use super::lists;

/// What reads a status' strings: the id it is reported under and where reports go.
struct Strings<'a> {
    id: &'a str,
    bad: &'a mut Vec<BadData>,
}

impl Strings<'_> {
    fn report(&mut self, field: &'static str, kept: bool) {
        self.bad.push(BadData::NotUtf8Field {
            id: self.id.to_owned(),
            field,
            kept,
        });
    }

    /// A text field: bad bytes become U+FFFD.
    fn text(&mut self, field: &'static str, bytes: &Bytes) -> String {
        match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            Err(_) => {
                self.report(field, true);
                String::from_utf8_lossy(bytes).into_owned()
            }
        }
    }

    /// A field that must be exact (a path, an address): None if it is not UTF-8.
    fn exact(&mut self, field: &'static str, bytes: &Bytes) -> Option<String> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Some(text.to_owned()),
            Err(_) => {
                self.report(field, false);
                None
            }
        }
    }

    /// A map sent as its entries. As in a map, a key sent twice keeps its last value.
    fn map(
        &mut self,
        key_field: &'static str,
        value_field: &'static str,
        entries: &[lists::Label],
    ) -> HashMap<String, String> {
        let mut map = HashMap::with_capacity(entries.len());
        for entry in entries {
            let Some(key) = self.exact(key_field, &entry.key) else {
                continue;
            };
            let value = self.text(value_field, &entry.value);
            map.insert(key, value);
        }
        map
    }
}

/// A `ContainerStatus` answer's status for container `requested`, as CRI's message, with only the
/// fields plegd reads.
pub fn container_status(
    requested: &str,
    status: &lists::ContainerStatus,
    bad: &mut Vec<BadData>,
) -> cri::ContainerStatus {
    let mut s = Strings { id: requested, bad };
    cri::ContainerStatus {
        id: s.text("id", &status.id),
        metadata: status.metadata.as_ref().map(|m| cri::ContainerMetadata {
            name: s.text("metadata.name", &m.name),
            attempt: m.attempt,
        }),
        state: status.state,
        created_at: status.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        image: status.image.as_ref().map(|i| cri::ImageSpec {
            image: s.text("image", &i.image),
            ..Default::default()
        }),
        image_ref: s.text("image_ref", &status.image_ref),
        image_id: s.text("image_id", &status.image_id),
        reason: s.text("reason", &status.reason),
        message: s.text("message", &status.message),
        labels: s.map("label key", "label value", &status.labels),
        annotations: s.map("annotation key", "annotation value", &status.annotations),
        mounts: status
            .mounts
            .iter()
            .filter_map(|m| {
                let container_path = s.exact("mount container_path", &m.container_path);
                let host_path = s.exact("mount host_path", &m.host_path);
                Some(cri::Mount {
                    container_path: container_path?,
                    host_path: host_path?,
                    ..Default::default()
                })
            })
            .collect(),
        log_path: s.exact("log_path", &status.log_path).unwrap_or_default(),
        resources: status.resources.as_ref().map(|r| cri::ContainerResources {
            linux: r.linux.as_ref().map(|l| cri::LinuxContainerResources {
                cpu_period: l.cpu_period,
                cpu_quota: l.cpu_quota,
                cpu_shares: l.cpu_shares,
                memory_limit_in_bytes: l.memory_limit_in_bytes,
                ..Default::default()
            }),
            windows: None,
        }),
        user: status.user.as_ref().map(|u| cri::ContainerUser {
            linux: u.linux.as_ref().map(|l| cri::LinuxContainerUser {
                uid: l.uid,
                gid: l.gid,
                supplemental_groups: l.supplemental_groups.clone(),
            }),
        }),
    }
}

/// A `PodSandboxStatus` answer's status for sandbox `requested`, as CRI's message, with only the
/// fields plegd reads.
pub fn sandbox_status(
    requested: &str,
    status: &lists::PodSandboxStatus,
    bad: &mut Vec<BadData>,
) -> cri::PodSandboxStatus {
    let mut s = Strings { id: requested, bad };
    cri::PodSandboxStatus {
        id: s.text("id", &status.id),
        metadata: status.metadata.as_ref().map(|m| cri::PodSandboxMetadata {
            name: s.text("metadata.name", &m.name),
            uid: s.text("metadata.uid", &m.uid),
            namespace: s.text("metadata.namespace", &m.namespace),
            attempt: m.attempt,
        }),
        state: status.state,
        created_at: status.created_at,
        network: status.network.as_ref().map(|n| cri::PodSandboxNetworkStatus {
            ip: s.exact("network.ip", &n.ip).unwrap_or_default(),
            additional_ips: n
                .additional_ips
                .iter()
                .filter_map(|ip| s.exact("network.additional_ips", &ip.ip))
                .map(|ip| cri::PodIp { ip })
                .collect(),
        }),
        linux: status.linux.as_ref().map(|l| cri::LinuxPodSandboxStatus {
            namespaces: l.namespaces.as_ref().map(|n| cri::Namespace {
                options: n.options.as_ref().map(|o| cri::NamespaceOption {
                    network: o.network,
                    ..Default::default()
                }),
            }),
        }),
        labels: HashMap::new(),
        annotations: HashMap::new(),
        runtime_handler: s.text("runtime_handler", &status.runtime_handler),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A full CRI status with every field plegd reads set.
    fn full_container() -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: "c1".into(),
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 3,
            }),
            state: cri::ContainerState::ContainerExited as i32,
            created_at: 1,
            started_at: 2,
            finished_at: 3,
            exit_code: 137,
            image: Some(cri::ImageSpec {
                image: "busybox:1".into(),
                ..Default::default()
            }),
            image_ref: "sha256:abc".into(),
            reason: "OOMKilled".into(),
            message: "out of memory".into(),
            labels: [("io.kubernetes.container.name".to_owned(), "app".to_owned())].into(),
            annotations: [("io.kubernetes.container.restartCount".to_owned(), "3".to_owned())].into(),
            mounts: vec![cri::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: "/var/lib/kubelet/pods/u/containers/app/x".into(),
                ..Default::default()
            }],
            log_path: "/var/log/pods/ns_p_u/app/3.log".into(),
            resources: Some(cri::ContainerResources {
                linux: Some(cri::LinuxContainerResources {
                    cpu_period: 100_000,
                    cpu_quota: 50_000,
                    cpu_shares: 512,
                    memory_limit_in_bytes: 64 << 20,
                    ..Default::default()
                }),
                windows: None,
            }),
            image_id: String::new(),
            user: Some(cri::ContainerUser {
                linux: Some(cri::LinuxContainerUser {
                    uid: 1000,
                    gid: 1000,
                    supplemental_groups: vec![1000, 4],
                }),
            }),
        }
    }

    fn full_sandbox() -> cri::PodSandboxStatus {
        cri::PodSandboxStatus {
            id: "s1".into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: "web".into(),
                uid: "u1".into(),
                namespace: "ns".into(),
                attempt: 1,
            }),
            state: cri::PodSandboxState::SandboxReady as i32,
            created_at: 5,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.0.0.5".into(),
                additional_ips: vec![cri::PodIp { ip: "fd00::5".into() }],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                }),
            }),
            labels: HashMap::new(),
            annotations: HashMap::new(),
            runtime_handler: "runc".into(),
        }
    }

    /// The wire bytes of `message` with the first occurrence of `from` replaced by bytes of the same
    /// length that are not UTF-8 (every length prefix stays right).
    fn spoil(encoded: Vec<u8>, from: &str) -> Bytes {
        let at = encoded
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap_or_else(|| panic!("{from} is in the message"));
        let mut bytes = encoded;
        bytes[at..at + from.len()].fill(0xff);
        Bytes::from(bytes)
    }

    #[test]
    fn a_valid_container_status_reads_as_cri_decodes_it() {
        let full = full_container();
        let wire = Bytes::from(full.encode_to_vec());
        let slim = lists::ContainerStatus::decode(wire).unwrap();
        let mut bad = Vec::new();
        assert_eq!(container_status("c1", &slim, &mut bad), full);
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn a_valid_sandbox_status_reads_as_cri_decodes_it() {
        let full = full_sandbox();
        let wire = Bytes::from(full.encode_to_vec());
        let slim = lists::PodSandboxStatus::decode(wire).unwrap();
        let mut bad = Vec::new();
        assert_eq!(sandbox_status("s1", &slim, &mut bad), full);
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn a_bad_text_field_is_kept_with_replacement_characters_and_reported() {
        let mut full = full_container();
        full.message = "disk XXXX full".into();
        full.annotations.insert("note".into(), "YYYY".into());
        let wire = spoil(spoil(full.encode_to_vec(), "XXXX").to_vec(), "YYYY");
        // Decoded with CRI's own message, the whole answer fails.
        assert!(cri::ContainerStatus::decode(wire.clone()).is_err());
        let slim = lists::ContainerStatus::decode(wire).unwrap();
        let mut bad = Vec::new();
        let read = container_status("c1", &slim, &mut bad);
        assert_eq!(read.message, "disk \u{fffd}\u{fffd}\u{fffd}\u{fffd} full");
        assert_eq!(read.annotations["note"], "\u{fffd}".repeat(4));
        assert_eq!(read.reason, "OOMKilled");
        assert_eq!(read.exit_code, 137);
        assert_eq!(
            bad,
            vec![
                BadData::NotUtf8Field {
                    id: "c1".into(),
                    field: "message",
                    kept: true
                },
                BadData::NotUtf8Field {
                    id: "c1".into(),
                    field: "annotation value",
                    kept: true
                },
            ]
        );
        assert_eq!(bad[0].kind(), "not_utf8");
        assert_eq!(
            bad[0].to_string(),
            "message of c1 is not UTF-8; kept with U+FFFD for its bad bytes"
        );
    }

    #[test]
    fn a_bad_path_or_key_is_left_out_and_reported() {
        let mut full = full_container();
        full.mounts.push(cri::Mount {
            container_path: "/data".into(),
            host_path: "/srv/ZZZZ".into(),
            ..Default::default()
        });
        full.log_path = "/var/log/pods/WWWW.log".into();
        full.labels.insert("VVVV".into(), "x".into());
        let mut wire = full.encode_to_vec();
        for from in ["ZZZZ", "WWWW", "VVVV"] {
            wire = spoil(wire, from).to_vec();
        }
        let slim = lists::ContainerStatus::decode(Bytes::from(wire)).unwrap();
        let mut bad = Vec::new();
        let read = container_status("c1", &slim, &mut bad);
        assert_eq!(read.mounts, full_container().mounts, "the spoilt mount is left out");
        assert_eq!(read.log_path, "");
        assert_eq!(read.labels, full_container().labels);
        let fields: Vec<_> = bad
            .iter()
            .map(|b| match b {
                BadData::NotUtf8Field { field, kept, .. } => (*field, *kept),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            fields,
            [("label key", false), ("mount host_path", false), ("log_path", false)]
        );
        assert_eq!(bad[2].to_string(), "log_path of c1 is not UTF-8; not used");
    }

    #[test]
    fn a_bad_ip_is_left_out_and_the_rest_of_the_sandbox_read() {
        let mut full = full_sandbox();
        full.network
            .as_mut()
            .unwrap()
            .additional_ips
            .push(cri::PodIp { ip: "QQQQ".into() });
        full.runtime_handler = "RRRR".into();
        let wire = spoil(spoil(full.encode_to_vec(), "QQQQ").to_vec(), "RRRR");
        assert!(cri::PodSandboxStatus::decode(wire.clone()).is_err());
        let slim = lists::PodSandboxStatus::decode(wire).unwrap();
        let mut bad = Vec::new();
        let read = sandbox_status("s1", &slim, &mut bad);
        assert_eq!(read.network, full_sandbox().network);
        assert_eq!(read.runtime_handler, "\u{fffd}".repeat(4));
        assert_eq!(read.state, cri::PodSandboxState::SandboxReady as i32);
        assert_eq!(bad.len(), 2, "{bad:?}");
    }

    #[test]
    fn any_bytes_decode_or_fail_without_a_panic() {
        // Truncations and bit flips of a valid answer: decoding may fail, reading never panics.
        let wire = full_container().encode_to_vec();
        for cut in 0..wire.len() {
            let mut bytes = wire[..cut].to_vec();
            if let Some(b) = bytes.get_mut(cut / 2) {
                *b ^= 0x80;
            }
            if let Ok(slim) = lists::ContainerStatus::decode(Bytes::from(bytes)) {
                let _ = container_status("c1", &slim, &mut Vec::new());
            }
        }
    }
}
