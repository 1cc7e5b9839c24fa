//! Shadow mode's end of a sync: what the syncLoop does with the differences
//! [`decide`](crate::status::decide::decide) found between the status plegd generated and the
//! apiserver's. Pure: [`shadow_step`] plans, the syncLoop counts, logs or asks for a newer read.

use crate::status::compare::Difference;

/// What a sync in shadow mode does with its differences.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ShadowStep<'a> {
    /// Someone wrote the apiserver's status after plegd's runtime read (the kubelet saw a change
    /// first): nothing is counted; the pod is compared again from a read after that status
    /// arrived. plegd's lag is not its difference.
    CompareAgain,
    /// Each difference plegd can know, by its field label (the metric's, bounded) and by its path
    /// (the log's); what it cannot know (`compare::UNKNOWABLE`) is left out. Both empty when the
    /// statuses agree.
    Count { fields: Vec<&'a str>, paths: Vec<&'a str> },
}

/// The step for `differences` found from a runtime read that is `fresh`: newer than the arrival of
/// the apiserver's status it was compared with (the pod's cache entry, or the whole cache after a
/// complete relist).
pub(super) fn shadow_step(differences: &[Difference], fresh: bool) -> ShadowStep<'_> {
    if !fresh {
        return ShadowStep::CompareAgain;
    }
    let knowable = || differences.iter().filter(|d| d.unknowable.is_none());
    ShadowStep::Count {
        fields: knowable().map(Difference::field).collect(),
        paths: knowable().map(|d| d.path.as_str()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use serde_json::json;

    use super::*;
    use crate::status::compare::{Probed, differences};

    fn status(v: serde_json::Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    /// The apiserver's status says Running and a probed container ready; plegd's says Pending and
    /// not ready.
    fn apart() -> Vec<Difference> {
        let container =
            |ready: bool| json!({"name": "app", "ready": ready, "restartCount": 0, "image": "i", "imageID": ""});
        let apiserver = status(json!({"phase": "Running", "containerStatuses": [container(true)]}));
        let plegd = status(json!({"phase": "Pending", "containerStatuses": [container(false)]}));
        let probed = Probed {
            readiness: vec!["app".into()],
            ..Probed::default()
        };
        differences(&apiserver, &plegd, &probed)
    }

    #[test]
    fn a_fresh_read_counts_what_plegd_can_know() {
        let differences = apart();
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert_eq!(
            shadow_step(&differences, true),
            ShadowStep::Count {
                fields: vec!["phase"],
                paths: vec!["phase"],
            },
            "the probed container's readiness is the prober's, not counted"
        );
    }

    #[test]
    fn a_read_older_than_the_apiservers_status_compares_again() {
        assert_eq!(shadow_step(&apart(), false), ShadowStep::CompareAgain);
        assert_eq!(shadow_step(&[], false), ShadowStep::CompareAgain);
    }

    #[test]
    fn agreeing_statuses_count_nothing() {
        assert_eq!(
            shadow_step(&[], true),
            ShadowStep::Count {
                fields: vec![],
                paths: vec![],
            }
        );
    }

    /// A container's name is in the path the log shows, not in the field the metric counts.
    #[test]
    fn fields_are_labels_and_paths_name_the_container() {
        let apiserver = status(
            json!({"containerStatuses": [{"name": "app", "ready": false, "restartCount": 1, "image": "i", "imageID": ""}]}),
        );
        let plegd = status(
            json!({"containerStatuses": [{"name": "app", "ready": false, "restartCount": 2, "image": "i", "imageID": ""}]}),
        );
        let differences = differences(&apiserver, &plegd, &Probed::default());
        assert_eq!(
            shadow_step(&differences, true),
            ShadowStep::Count {
                fields: vec!["containerStatuses[*].restartCount"],
                paths: vec!["containerStatuses[app].restartCount"],
            }
        );
    }
}
