//! The kubelet minor whose status plegd generates: the status a kubelet writes depends on its
//! version and its default feature gates, and in shadow mode plegd is compared with the node's own
//! kubelet, of 1.35, 1.36 or 1.37 under a 1.37 control plane. Every difference between them that
//! touches a pod's status is one switch here, named after what it changes and read where it
//! changes it; each was read from the three versions' own source (k8s.io/kubernetes v1.35.4,
//! v1.36.3, v1.37.2) and has its table test beside the code it switches.
//!
//! What is the same in the three needs no switch: getPhase (but for the restart-all rule below),
//! restart policies and rules (ContainerRestartRules on in all), observedGeneration (locked on),
//! the terminal phase, the status manager's merge, the readiness, container resources and user,
//! volume mounts, pod and host IPs. What differs only in what plegd does not write either (device
//! health in `allocatedResourcesStatus`, resize conditions) or only in timing (the early
//! PodReadyToStartContainers write of 1.36) needs none either.

use std::fmt;

/// A kubelet minor plegd generates the status of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KubeletMinor {
    V1_35,
    V1_36,
    V1_37,
}

/// How the minor plegd uses fits the kubelet's own version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// One of the minors plegd knows.
    Exact,
    /// Older than the oldest plegd knows: that one's rules, the closest.
    Older,
    /// Newer than the newest plegd knows: that one's rules, until plegd learns the new minor.
    Newer,
}

impl Fit {
    pub fn as_str(self) -> &'static str {
        match self {
            Fit::Exact => "exact",
            Fit::Older => "older",
            Fit::Newer => "newer",
        }
    }
}

/// A kubelet version that is not one (`--kubelet-version`, or a Node's `kubeletVersion`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: not a Kubernetes version (v1.MINOR[.PATCH], e.g. v1.35.4)")]
pub struct InvalidKubeletVersion(pub String);

impl KubeletMinor {
    /// Every minor plegd knows, oldest first.
    pub const ALL: [KubeletMinor; 3] = [KubeletMinor::V1_35, KubeletMinor::V1_36, KubeletMinor::V1_37];
    pub const OLDEST: KubeletMinor = KubeletMinor::V1_35;
    pub const NEWEST: KubeletMinor = KubeletMinor::V1_37;

    pub fn minor(self) -> u32 {
        match self {
            KubeletMinor::V1_35 => 35,
            KubeletMinor::V1_36 => 36,
            KubeletMinor::V1_37 => 37,
        }
    }

    /// `1.35`, as a metric label and a log field say it.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeletMinor::V1_35 => "1.35",
            KubeletMinor::V1_36 => "1.36",
            KubeletMinor::V1_37 => "1.37",
        }
    }

    /// The minor whose rules a kubelet of `version` gets, and how it fits. `version` is what a
    /// Node's `status.nodeInfo.kubeletVersion` says (`v1.35.4`, `v1.36.3-eks-1a2b3c`,
    /// `v1.37.0-rc.1+k3s1`) or what `--kubelet-version` is given (`1.35` too).
    pub fn of_version(version: &str) -> Result<(KubeletMinor, Fit), InvalidKubeletVersion> {
        let invalid = || InvalidKubeletVersion(version.to_owned());
        let numbers = version.trim().strip_prefix('v').unwrap_or(version.trim());
        let mut parts = numbers.splitn(3, '.');
        let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
            return Err(invalid());
        };
        let number = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
        };
        if let Some(patch) = parts.next() {
            let digits = patch.split(['-', '+']).next().unwrap_or_default();
            number(digits).ok_or_else(invalid)?;
        }
        let (Some(1), Some(minor)) = (number(major), number(minor)) else {
            return Err(invalid());
        };
        Ok(match Self::ALL.into_iter().find(|m| m.minor() == minor) {
            Some(known) => (known, Fit::Exact),
            None if minor < Self::OLDEST.minor() => (Self::OLDEST, Fit::Older),
            None => (Self::NEWEST, Fit::Newer),
        })
    }

    /// RestartAllContainersOnContainerExits (alpha and off in 1.35, beta and on from 1.36): one
    /// gate, so one switch, whatever it touches. With it: the AllContainersRestarting condition is
    /// generated and the kubelet's own; Initialized stays True once True; a pod restarting all its
    /// containers shows them waiting with RestartingAllContainers; a restart count is never lower
    /// than the status says, and a container running after a terminated one counts one more; the
    /// last termination comes from the old status when the runtime no longer holds it; a
    /// `RestartAllContainers` rule restarts (getPhase, checkContainerStateTransition). Without it
    /// (1.35): none of these, and a restart count and a last state are the runtime's alone.
    pub fn restart_all_containers(self) -> bool {
        self >= KubeletMinor::V1_36
    }

    /// An init container the runtime no longer has, in a pod whose regular containers were
    /// created, shows Completed (kubernetes#131317, from 1.36; ungated). In 1.35 it stays waiting
    /// with PodInitializing and the pod Pending.
    pub fn lost_init_containers_completed(self) -> bool {
        self >= KubeletMinor::V1_36
    }

    /// PodReadyToStartContainers False carries the reason `PodSandboxNotReady` and what
    /// `PodSandboxChanged` found as its message (kubernetes#135300, from 1.37; ungated). Before:
    /// False with neither.
    pub fn ready_to_start_reason(self) -> bool {
        self >= KubeletMinor::V1_37
    }

    /// The pod-level `status.resources` and `status.allocatedResources`, for every pod
    /// (InPlacePodLevelResourcesVerticalScaling: alpha and off in 1.35, beta and on from 1.36).
    pub fn pod_level_resources(self) -> bool {
        self >= KubeletMinor::V1_36
    }

    /// Whether a condition of `type_` is the kubelet's own (`PodConditionByKubelet`): it is
    /// generated on every write and replaces the apiserver's; every other type is kept as it is.
    pub fn owns_condition(self, type_: &str) -> bool {
        super::KUBELET_CONDITIONS.contains(&type_)
            && (type_ != super::ALL_CONTAINERS_RESTARTING || self.restart_all_containers())
    }
}

impl fmt::Display for KubeletMinor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_nodes_and_flags_give_them() {
        for (version, want) in [
            ("v1.35.4", (KubeletMinor::V1_35, Fit::Exact)),
            ("v1.36.3", (KubeletMinor::V1_36, Fit::Exact)),
            ("v1.37.2", (KubeletMinor::V1_37, Fit::Exact)),
            ("1.36", (KubeletMinor::V1_36, Fit::Exact)),
            ("v1.36", (KubeletMinor::V1_36, Fit::Exact)),
            ("v1.35.4-eks-1a2b3c", (KubeletMinor::V1_35, Fit::Exact)),
            ("v1.37.0-rc.1+k3s1", (KubeletMinor::V1_37, Fit::Exact)),
            ("v1.34.9", (KubeletMinor::V1_35, Fit::Older)),
            ("v1.28.0", (KubeletMinor::V1_35, Fit::Older)),
            ("v1.38.0", (KubeletMinor::V1_37, Fit::Newer)),
            (" v1.35.4\n", (KubeletMinor::V1_35, Fit::Exact)),
        ] {
            assert_eq!(KubeletMinor::of_version(version), Ok(want), "{version}");
        }
        for bad in [
            "",
            "v",
            "1",
            "v2.35.0",
            "v1.x.0",
            "v1.35.x",
            "v1..3",
            "latest",
            "v1.99999.0",
        ] {
            assert_eq!(
                KubeletMinor::of_version(bad),
                Err(InvalidKubeletVersion(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    /// The switches, as the three versions' sources have them.
    #[test]
    fn each_switch_turns_where_its_version_turned_it() {
        use KubeletMinor::*;
        let by = |switch: fn(KubeletMinor) -> bool| ALL_MINORS.map(switch);
        const ALL_MINORS: [KubeletMinor; 3] = KubeletMinor::ALL;
        assert_eq!(by(KubeletMinor::restart_all_containers), [false, true, true]);
        assert_eq!(by(KubeletMinor::lost_init_containers_completed), [false, true, true]);
        assert_eq!(by(KubeletMinor::ready_to_start_reason), [false, false, true]);
        assert_eq!(by(KubeletMinor::pod_level_resources), [false, true, true]);
        assert!(!V1_35.owns_condition(super::super::ALL_CONTAINERS_RESTARTING));
        assert!(V1_36.owns_condition(super::super::ALL_CONTAINERS_RESTARTING));
        for minor in KubeletMinor::ALL {
            assert!(minor.owns_condition(super::super::READY), "{minor}");
            assert!(!minor.owns_condition("example.com/Gate"), "{minor}");
        }
    }
}
