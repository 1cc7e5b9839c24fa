//! Volume mount statuses (RecursiveReadOnlyMounts): `containerStatuses[].volumeMounts` from the
//! spec, `resolveRecursiveReadOnly`, and whether the pod's runtime handler supports recursive
//! read-only mounts.

use k8s_openapi::api::core::v1::{VolumeMount, VolumeMountStatus};

use crate::apiserver::pod::{ApiContainer, ApiPod};
use crate::kubecontainer::RuntimePodStatus;

/// Whether the runtime handler of the pod supports recursive read-only mounts
/// (`runtimeClassSupportsRecursiveReadOnlyMounts`): the handler its newest sandbox runs under, or,
/// before it has one, the default handler when it names no RuntimeClass. None when plegd cannot
/// tell: the runtime could not be asked, or the pod's RuntimeClass is not resolved yet (plegd does
/// not read RuntimeClasses).
pub fn supports_recursive_read_only(
    pod: &ApiPod,
    runtime: &RuntimePodStatus,
    handlers: Option<&[String]>,
) -> Option<bool> {
    let handler = match runtime.sandbox_statuses.first() {
        Some(sandbox) => sandbox.runtime_handler.as_str(),
        None if pod.spec.runtime_class_name.is_none() => "",
        None => return None,
    };
    Some(handlers?.iter().any(|h| h == handler))
}

/// `containerStatuses[].volumeMounts` (RecursiveReadOnlyMounts), from the spec, for a status the
/// runtime has not reported yet: name, path and readOnly, and for a read-only mount whether it is
/// recursively read-only (`resolveRecursiveReadOnly`; Disabled where that fails, as the kubelet
/// logs and goes on). None when a mount asks for it where plegd cannot tell whether the runtime
/// supports it: nothing is written rather than a guess.
pub(super) fn volume_mount_statuses(spec: &ApiContainer, supported: Option<bool>) -> Option<Vec<VolumeMountStatus>> {
    if spec.volume_mounts.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(spec.volume_mounts.len());
    for m in &spec.volume_mounts {
        let read_only = m.read_only.unwrap_or(false);
        let mut status = VolumeMountStatus {
            name: m.name.clone(),
            mount_path: m.mount_path.clone(),
            read_only: m.read_only,
            ..VolumeMountStatus::default()
        };
        if read_only {
            // Whether the answer depends on the runtime's support, which plegd may not know.
            let asks = resolve_recursive_read_only(m, true) != resolve_recursive_read_only(m, false);
            let supported = if asks { supported? } else { false };
            let enabled = resolve_recursive_read_only(m, supported).unwrap_or(false);
            status.recursive_read_only = Some(if enabled { "Enabled" } else { "Disabled" }.to_owned());
        }
        out.push(status);
    }
    Some(out)
}

/// `resolveRecursiveReadOnly`: whether a mount is made recursively read-only, or why it cannot be.
fn resolve_recursive_read_only(m: &VolumeMount, runtime_supports: bool) -> Result<bool, String> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if !m.read_only.unwrap_or(false) {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not read-only",
            m.name
        ));
    }
    if let Some(propagation) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {propagation:?}",
            m.name
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            m.name
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;

    use super::*;
    use crate::apiserver::pod::ApiPod;
    use crate::kubecontainer::{RuntimeContainerState, RuntimePodStatus};
    use crate::status::generate::test_support::*;
    use crate::status::generate::*;

    /// `TestResolveRecursiveReadOnly` (kubelet_pods_test.go), every case.
    #[test]
    fn upstream_resolve_recursive_read_only() {
        let m = |ro: bool, rro: Option<&str>, propagation: Option<&str>| VolumeMount {
            name: "foo".into(),
            read_only: Some(ro),
            recursive_read_only: rro.map(str::to_owned),
            mount_propagation: propagation.map(str::to_owned),
            ..VolumeMount::default()
        };
        let (prop, not_ro, unsupported, unknown) = (
            "not compatible with propagation",
            "not read-only",
            "not supported by the runtime",
            "unknown recursive read-only mode",
        );
        #[rustfmt::skip]
        let cases: [(VolumeMount, bool, Result<bool, &str>); 16] = [
            (m(false, None, None), true, Ok(false)),
            (m(true, None, None), true, Ok(false)),
            (m(true, Some("Disabled"), None), true, Ok(false)),
            (m(true, Some("IfPossible"), None), true, Ok(true)),
            (m(true, Some("IfPossible"), Some("None")), true, Ok(true)),
            (m(true, Some("IfPossible"), Some("HostToContainer")), true, Err(prop)),
            (m(true, Some("IfPossible"), Some("Bidirectional")), true, Err(prop)),
            (m(false, Some("IfPossible"), None), true, Err(not_ro)),
            (m(false, Some("IfPossible"), None), false, Err(not_ro)),
            (m(true, Some("Enabled"), None), true, Ok(true)),
            (m(true, Some("Enabled"), Some("None")), true, Ok(true)),
            (m(true, Some("Enabled"), Some("HostToContainer")), true, Err(prop)),
            (m(true, Some("Enabled"), Some("Bidirectional")), true, Err(prop)),
            (m(false, Some("Enabled"), None), true, Err(not_ro)),
            (m(true, Some("Enabled"), None), false, Err(unsupported)),
            (m(true, Some("foo"), None), true, Err(unknown)),
        ];
        for (i, (mount, supported, want)) in cases.into_iter().enumerate() {
            match (resolve_recursive_read_only(&mount, supported), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "case {}", i + 1),
                (Err(got), Err(want)) => assert!(got.contains(want), "case {}: {got}", i + 1),
                (got, want) => panic!("case {}: {got:?}, want {want:?}", i + 1),
            }
        }
    }

    /// `containerStatuses[].volumeMounts` (RecursiveReadOnlyMounts, GA): from the spec while the
    /// runtime has not reported the container, recursiveReadOnly only on read-only mounts (Enabled
    /// where asked for and the pod's runtime handler supports it, else Disabled); then copied from
    /// the previous status as they were ("immutable"), none when there was none. Where plegd
    /// cannot tell whether the handler supports them, nothing is written.
    #[test]
    fn volume_mounts_from_the_spec_then_as_they_were() {
        use k8s_openapi::api::core::v1::VolumeMount;
        let mount = |name: &str, ro: bool, rro: Option<&str>| VolumeMount {
            name: name.into(),
            mount_path: format!("/{name}"),
            read_only: ro.then_some(true),
            recursive_read_only: rro.map(str::to_owned),
            ..VolumeMount::default()
        };
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.spec.containers[0].volume_mounts = vec![
            mount("rw", false, None),
            mount("ro", true, None),
            mount("rro", true, Some("IfPossible")),
            mount("rro-enabled", true, Some("Enabled")),
            mount("rw-asks", false, Some("Enabled")),
        ]
        .into();
        let mut pod_shared = pod.clone();
        pod_shared.spec.containers[0].volume_mounts[3].mount_propagation = Some("HostToContainer".into());
        let waiting = RuntimePodStatus {
            id: "u1".into(),
            sandbox_statuses: vec![ready_sandbox("10.1.0.5")],
            ..RuntimePodStatus::default()
        };
        let generate_with = |pod: &ApiPod, runtime: &RuntimePodStatus, handlers: Option<&[String]>| {
            generate(&StatusInput {
                pod,
                runtime,
                runtime_name: "containerd",
                node_ips: &[],
                recursive_read_only_handlers: handlers,
                stop_signals: false,
                kubelet: KubeletMinor::V1_37,
                now: at(100),
            })
        };
        let rro_of = |s: &PodStatus| -> Option<Vec<(String, Option<String>)>> {
            s.container_statuses.as_ref().unwrap()[0]
                .volume_mounts
                .as_ref()
                .map(|v| {
                    v.iter()
                        .map(|m| (m.name.clone(), m.recursive_read_only.clone()))
                        .collect()
                })
        };
        let want = |enabled: &str, shared: &str| {
            Some(vec![
                ("rw".to_owned(), None),
                ("ro".to_owned(), Some("Disabled".to_owned())),
                ("rro".to_owned(), Some(enabled.to_owned())),
                ("rro-enabled".to_owned(), Some(shared.to_owned())),
                ("rw-asks".to_owned(), None),
            ])
        };
        let default_handler = [String::new()];
        let s = generate_with(&pod, &waiting, Some(&default_handler));
        assert_eq!(rro_of(&s), want("Enabled", "Enabled"));
        let m = &s.container_statuses.as_ref().unwrap()[0]
            .volume_mounts
            .as_ref()
            .unwrap()[1];
        assert_eq!((m.mount_path.as_str(), m.read_only), ("/ro", Some(true)));
        // A runtime that lists no handler supporting them (containerd 1.7 lists none at all).
        assert_eq!(
            rro_of(&generate_with(&pod, &waiting, Some(&[]))),
            want("Disabled", "Disabled")
        );
        // Propagation other than None cannot be recursively read-only.
        assert_eq!(
            rro_of(&generate_with(&pod_shared, &waiting, Some(&default_handler))),
            want("Enabled", "Disabled")
        );
        // The sandbox runs under another handler than the default.
        let mut other = waiting.clone();
        other.sandbox_statuses[0].runtime_handler = "kata".into();
        assert_eq!(
            rro_of(&generate_with(&pod, &other, Some(&default_handler))),
            want("Disabled", "Disabled")
        );
        // Unknown: the runtime could not be asked, or a RuntimeClass before any sandbox.
        assert_eq!(rro_of(&generate_with(&pod, &waiting, None)), None);
        let mut classed = pod.clone();
        classed.spec.runtime_class_name = Some("gvisor".into());
        let no_sandbox = RuntimePodStatus {
            id: "u1".into(),
            ..RuntimePodStatus::default()
        };
        assert_eq!(
            rro_of(&generate_with(&classed, &no_sandbox, Some(&default_handler))),
            None
        );

        // Once the runtime reports the container: copied from the status before.
        let running = RuntimePodStatus {
            container_statuses: vec![runtime_status("app", "c1", RuntimeContainerState::Running, 10)],
            ..waiting.clone()
        };
        let mut seen = pod.clone();
        seen.status = Some(s.clone());
        seen.spec.containers[0].volume_mounts = Box::new([]);
        assert_eq!(
            rro_of(&generate_with(&seen, &running, Some(&[]))),
            want("Enabled", "Enabled")
        );
        // First seen already running, with no status before: none.
        assert_eq!(rro_of(&generate_with(&pod, &running, Some(&default_handler))), None);
    }
}
