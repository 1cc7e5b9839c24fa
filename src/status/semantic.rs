//! A pod status as the apiserver holds it: the typed value that Go's types keep of what was written,
//! so that two statuses are compared the way the kubelet compares them (`apiequality.Semantic`
//! over Go structs), never as JSON shapes. Pure; no I/O.
//!
//! The apiserver decodes a written status into Go structs and writes the stored object back with
//! Go's encoding. What cannot survive that round trip is not a difference:
//! - a field that is a struct value in Go (a container status' `state` and `lastState`) has no
//!   "absent": an empty one is written back as `{}`, which reads here as `Some` of an empty
//!   value, and a missing one the same way;
//! - an `omitempty` string, number or bool at its zero value (`""`, `0`, `false`) is dropped;
//! - an empty list or map is dropped (`apiequality.Semantic` also holds nil and empty equal).
//!
//! [`canonical`] maps a status to the one form every such equivalent has, so that
//! `canonical(a) == canonical(b)` exactly when the apiserver would store the same object for both
//! (as far as the fields plegd knows reach), and a patch computed between canonical forms carries
//! only real changes. Pointers in Go (`started`, `resources`, `user`, `recursiveReadOnly`, …) keep
//! their `Some`, as a nil and an empty pointer differ there too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
    ResourceRequirements,
};

fn string(s: &mut Option<String>) {
    if s.as_deref() == Some("") {
        *s = None;
    }
}

fn number<T: Default + PartialEq>(n: &mut Option<T>) {
    if n.as_ref() == Some(&T::default()) {
        *n = None;
    }
}

fn list<T>(l: &mut Option<Vec<T>>, each: impl FnMut(&mut T)) {
    match l {
        Some(items) if items.is_empty() => *l = None,
        Some(items) => items.iter_mut().for_each(each),
        None => {}
    }
}

fn map<K, V>(m: &mut Option<BTreeMap<K, V>>) {
    if m.as_ref().is_some_and(BTreeMap::is_empty) {
        *m = None;
    }
}

fn condition(c: &mut PodCondition) {
    string(&mut c.message);
    string(&mut c.reason);
    number(&mut c.observed_generation);
}

fn waiting(w: &mut ContainerStateWaiting) {
    string(&mut w.message);
    string(&mut w.reason);
}

fn terminated(t: &mut ContainerStateTerminated) {
    string(&mut t.container_id);
    string(&mut t.message);
    string(&mut t.reason);
    number(&mut t.signal);
}

/// A Go struct value: never absent, so an empty one and a missing one are both `None` here.
fn state(s: &mut Option<ContainerState>) {
    if let Some(st) = s {
        if let Some(w) = &mut st.waiting {
            waiting(w);
        }
        if let Some(t) = &mut st.terminated {
            terminated(t);
        }
        if st.running.is_none() && st.terminated.is_none() && st.waiting.is_none() {
            *s = None;
        }
    }
}

fn resources(r: &mut ResourceRequirements) {
    list(&mut r.claims, |c| string(&mut c.request));
    map(&mut r.limits);
    map(&mut r.requests);
}

fn container_status(c: &mut ContainerStatus) {
    state(&mut c.state);
    state(&mut c.last_state);
    string(&mut c.container_id);
    map(&mut c.allocated_resources);
    list(&mut c.allocated_resources_status, |s| {
        list(&mut s.resources, |h| string(&mut h.health))
    });
    if let Some(r) = &mut c.resources {
        resources(r);
    }
    if let Some(linux) = c.user.as_mut().and_then(|u| u.linux.as_mut()) {
        list(&mut linux.supplemental_groups, |_| {});
    }
    list(&mut c.volume_mounts, |m| number(&mut m.read_only));
}

/// The canonical form of `status` (module doc).
pub fn canonical(status: &PodStatus) -> PodStatus {
    let mut s = status.clone();
    list(&mut s.conditions, condition);
    list(&mut s.container_statuses, container_status);
    list(&mut s.init_container_statuses, container_status);
    list(&mut s.ephemeral_container_statuses, container_status);
    list(&mut s.host_ips, |_| {});
    list(&mut s.pod_ips, |_| {});
    list(&mut s.resource_claim_statuses, |_| {});
    string(&mut s.host_ip);
    string(&mut s.message);
    string(&mut s.nominated_node_name);
    string(&mut s.phase);
    string(&mut s.pod_ip);
    string(&mut s.qos_class);
    string(&mut s.reason);
    string(&mut s.resize);
    number(&mut s.observed_generation);
    s
}

/// Whether the apiserver would hold the same status for `a` and `b`.
pub fn equal(a: &PodStatus, b: &PodStatus) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStateRunning, PodIP};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    fn parse(v: serde_json::Value) -> PodStatus {
        serde_json::from_value(v).unwrap()
    }

    /// What a real apiserver returns for a status plegd wrote: every container status with
    /// `"lastState": {}`, every condition with `"lastProbeTime": null`, empty strings of non-omitempty
    /// Go fields — as seen from k8s.io/apiserver 1.36 on etcd.
    #[test]
    fn what_the_apiserver_writes_back_equals_what_was_sent() {
        let sent = parse(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T01:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
                "state": {"running": {"startedAt": "2026-11-25T01:00:00Z"}}}],
            "podIPs": [{"ip": "10.0.0.1"}], "podIP": "10.0.0.1",
        }));
        let stored = parse(json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-25T01:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
                "state": {"running": {"startedAt": "2026-11-25T01:00:00Z"}}, "lastState": {}}],
            "podIPs": [{"ip": "10.0.0.1"}], "podIP": "10.0.0.1",
        }));
        assert_ne!(sent, stored, "the two differ as plain values");
        assert!(equal(&sent, &stored));
        assert_eq!(canonical(&stored), canonical(&sent));
    }

    #[test]
    fn zero_values_of_omitempty_fields_are_absent() {
        let mut a = PodStatus {
            message: Some(String::new()),
            observed_generation: Some(0),
            pod_ips: Some(vec![]),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some(String::new()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let b = PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(equal(&a, &b));
        a.observed_generation = Some(2);
        assert!(!equal(&a, &b), "a value that is not zero is a difference");
    }

    #[test]
    fn real_differences_stay_differences() {
        let running = |started: &str| ContainerStatus {
            name: "app".into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(started.parse().unwrap())),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = PodStatus {
            container_statuses: Some(vec![running("2026-11-25T01:00:00Z")]),
            ..Default::default()
        };
        let b = PodStatus {
            container_statuses: Some(vec![running("2026-11-25T01:00:01Z")]),
            ..Default::default()
        };
        assert!(!equal(&a, &b));
        let c = PodStatus {
            pod_ips: Some(vec![PodIP { ip: "10.0.0.2".into() }]),
            ..a.clone()
        };
        assert!(!equal(&a, &c));
        // A pointer in Go: `started: false` is not the same as no `started`.
        let mut d = a.clone();
        d.container_statuses.as_mut().unwrap()[0].started = Some(false);
        assert!(!equal(&a, &d));
    }

    #[test]
    fn an_empty_state_is_no_state() {
        let with = ContainerStatus {
            name: "app".into(),
            state: Some(ContainerState::default()),
            last_state: Some(ContainerState::default()),
            ..Default::default()
        };
        let without = ContainerStatus {
            name: "app".into(),
            ..Default::default()
        };
        let a = PodStatus {
            init_container_statuses: Some(vec![with]),
            ..Default::default()
        };
        let b = PodStatus {
            init_container_statuses: Some(vec![without]),
            ..Default::default()
        };
        assert!(equal(&a, &b));
    }
}
