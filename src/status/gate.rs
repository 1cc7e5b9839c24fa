//! plegd's condition as a readiness gate (pure): which pods name it, and the two ways plegd lets go
//! of it so that no gated pod waits on a condition nobody sets (docs/readiness-gate.md).
//!
//! - **Handed back** ([`handed_back`]): a plegd that stops hands its node's gated pods to the kubelet.
//!   The condition keeps its status and transition time (what plegd last read from the runtime) and
//!   takes the reason [`KUBELET_REPORTED`]; from then on the admission policy
//!   `plegd-readiness-gate-kubelet` (deploy/components/readiness-gate) makes it follow the kubelet's
//!   own container statuses at the kubelet's next write, until a plegd takes it back.
//! - **Released** ([`released`]): before the gate itself is uninstalled, every gated pod's condition
//!   is set True with the reason [`GATE_RELEASED`], so that no policy or plegd is needed any more:
//!   Ready is then the kubelet's alone (its ContainersReady), as if the pod had no gate. The status
//!   says what it is: the gate's release, not a container that was seen running.
//!
//! Neither writes a value read from nowhere: a handed-back condition is plegd's last runtime read,
//! a released one is marked as released.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use super::generate::{CONTAINERS_RUNNING, set_transition_time};

/// The reason of a condition that follows the kubelet's container statuses: set by the admission
/// policy `plegd-readiness-gate-kubelet`, or by a plegd handing its pods back as it stops.
pub const KUBELET_REPORTED: &str = "KubeletReported";

/// The reason of a condition the gate's uninstall set True for good (`plegd release-gates`).
pub const GATE_RELEASED: &str = "GateReleased";

/// The message of a handed-back condition.
pub const HANDED_BACK_MESSAGE: &str =
    "plegd stopped on this node: the condition follows the kubelet's container statuses until plegd is back";

/// The message of a released condition.
pub const RELEASED_MESSAGE: &str = "plegd's readiness gate was uninstalled: readiness is the kubelet's alone (this condition no longer follows the containers)";

/// Whether a pod's readiness gates (their condition types) name plegd's condition.
pub fn is_gated(readiness_gates: &[String]) -> bool {
    readiness_gates.iter().any(|g| g == CONTAINERS_RUNNING)
}

/// plegd's condition in `status`, if any.
pub fn own_condition(status: Option<&PodStatus>) -> Option<&PodCondition> {
    status?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == CONTAINERS_RUNNING)
}

/// Whether plegd's write of its condition waits for a runtime read of the pod newer than the pod's
/// status (`read_is_newer`: plegd's read is newer than that status's arrival). It does where the
/// condition follows the kubelet ([`KUBELET_REPORTED`]: the kubelet's own write set it through the
/// policy, or a plegd handed it back): the kubelet read its containers for that write, so a runtime
/// read of plegd's from before it is older than the fact it would overwrite (a container the
/// kubelet restarted after plegd's read would be said not running, a flip of the gate with no
/// change of the containers). A newer read comes with the next relist of the pod (its containers'
/// events trigger one), and the write is decided from it.
pub fn waits_for_newer_read(status: Option<&PodStatus>, read_is_newer: bool) -> bool {
    !read_is_newer && own_condition(status).is_some_and(|c| c.reason.as_deref() == Some(KUBELET_REPORTED))
}

/// The status that hands a gated pod back to the kubelet: `status` with plegd's condition given the
/// reason [`KUBELET_REPORTED`] (its status and transition time kept). None when there is nothing to
/// hand back: no condition of plegd's, or one that already follows the kubelet or was released.
pub fn handed_back(status: Option<&PodStatus>) -> Option<PodStatus> {
    let own = own_condition(status)?;
    if matches!(own.reason.as_deref(), Some(KUBELET_REPORTED | GATE_RELEASED)) {
        return None;
    }
    let mut status = status?.clone();
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == CONTAINERS_RUNNING {
            c.reason = Some(KUBELET_REPORTED.to_owned());
            c.message = Some(HANDED_BACK_MESSAGE.to_owned());
        }
    }
    Some(status)
}

/// The condition that releases a gated pod for good: True, reason [`GATE_RELEASED`], its transition
/// time moved only if its status changes. None when the pod's condition is released already.
pub fn released(status: Option<&PodStatus>, now: SystemTime) -> Option<PodCondition> {
    let own = own_condition(status);
    if own.is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some(GATE_RELEASED)) {
        return None;
    }
    let mut condition = PodCondition {
        type_: CONTAINERS_RUNNING.to_owned(),
        status: "True".to_owned(),
        reason: Some(GATE_RELEASED.to_owned()),
        message: Some(RELEASED_MESSAGE.to_owned()),
        ..PodCondition::default()
    };
    set_transition_time(&mut condition, own.map(std::slice::from_ref).unwrap_or_default(), now);
    Some(condition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::generate::test_support::at;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn with(conditions: Vec<PodCondition>) -> PodStatus {
        PodStatus {
            conditions: Some(conditions),
            ..PodStatus::default()
        }
    }

    fn own(status: &str, reason: &str) -> PodCondition {
        PodCondition {
            type_: CONTAINERS_RUNNING.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some("container app exited with code 137".into()),
            last_transition_time: Some(time(1_000)),
            ..PodCondition::default()
        }
    }

    fn ready() -> PodCondition {
        PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..PodCondition::default()
        }
    }

    #[test]
    fn only_plegds_condition_makes_a_pod_gated() {
        assert!(is_gated(&["example.com/Other".into(), CONTAINERS_RUNNING.into()]));
        assert!(!is_gated(&["example.com/Other".into()]));
        assert!(!is_gated(&[]));
    }

    #[test]
    fn a_condition_of_plegds_is_handed_back_with_its_status_and_time() {
        let status = with(vec![ready(), own("False", "ContainerDied")]);
        let back = handed_back(Some(&status)).expect("handed back");
        let c = own_condition(Some(&back)).unwrap();
        assert_eq!(c.status, "False", "the status plegd last read stays");
        assert_eq!(c.reason.as_deref(), Some(KUBELET_REPORTED));
        assert_eq!(c.message.as_deref(), Some(HANDED_BACK_MESSAGE));
        assert_eq!(c.last_transition_time, Some(time(1_000)));
        assert_eq!(
            back.conditions.as_ref().unwrap()[0],
            ready(),
            "others' conditions untouched"
        );
    }

    #[test]
    fn nothing_is_handed_back_twice_or_without_a_condition() {
        assert_eq!(handed_back(None), None);
        assert_eq!(handed_back(Some(&with(vec![ready()]))), None);
        assert_eq!(handed_back(Some(&with(vec![own("True", KUBELET_REPORTED)]))), None);
        assert_eq!(handed_back(Some(&with(vec![own("True", GATE_RELEASED)]))), None);
    }

    #[test]
    fn a_release_sets_true_and_moves_the_time_only_on_a_change() {
        let from_false = released(Some(&with(vec![own("False", "ContainerDied")])), at(5)).unwrap();
        assert_eq!(from_false.status, "True");
        assert_eq!(from_false.reason.as_deref(), Some(GATE_RELEASED));
        assert_ne!(
            from_false.last_transition_time,
            Some(time(1_000)),
            "False to True moves it"
        );
        let from_true = released(Some(&with(vec![own("True", "AllContainersRunning")])), at(5)).unwrap();
        assert_eq!(
            from_true.last_transition_time,
            Some(time(1_000)),
            "True stays True: kept"
        );
        let absent = released(Some(&with(vec![ready()])), at(5)).unwrap();
        assert!(absent.last_transition_time.is_some());
        assert_eq!(released(Some(&with(vec![own("True", GATE_RELEASED)])), at(5)), None);
    }

    #[test]
    fn a_condition_the_kubelet_set_is_overwritten_only_from_a_newer_read() {
        let with = |reason: &str| PodStatus {
            conditions: Some(vec![PodCondition {
                type_: CONTAINERS_RUNNING.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(waits_for_newer_read(Some(&with(KUBELET_REPORTED)), false));
        assert!(!waits_for_newer_read(Some(&with(KUBELET_REPORTED)), true));
        // plegd's own condition, a released one, or none: written from the read plegd has.
        assert!(!waits_for_newer_read(Some(&with("ContainersRunning")), false));
        assert!(!waits_for_newer_read(Some(&with(GATE_RELEASED)), false));
        assert!(!waits_for_newer_read(Some(&PodStatus::default()), false));
        assert!(!waits_for_newer_read(None, false));
    }
}
