//! Patch computation for the status subresource: a two-way strategic merge patch from the status the
//! apiserver holds to the one plegd wants, like the kubelet's `CreateTwoWayMergePatch`, with the
//! pod's uid as a precondition. Pure JSON in, JSON out; nothing is sent when nothing differs.
//!
//! PodStatus' patch strategies (k8s.io/api core/v1): `conditions` merge by `type`, `podIPs` and
//! `hostIPs` merge by `ip`, `resourceClaimStatuses` by `name`; every other list (container statuses included) is atomic and replaced
//! whole. A merge list is patched element by element (changed fields only, `null` for a field that
//! went away, `{"$patch": "delete"}` for an element that went away) with a `$setElementOrder`
//! directive, so conditions written by others are never touched. A JSON merge patch would replace
//! the whole list and wipe them.
//!
//! The inverse, applying such a patch, is test code (`patch_apply.rs`, built for unit tests and
//! with the `test-util` feature only): the bench's Rust apiserver applies patches with it, and the
//! tests here and the fuzz target check `apply(old, diff(old, new)) == new`.

use serde_json::{Map, Value, json};

/// The merge key of each merge list in PodStatus.
pub fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "conditions" => Some("type"),
        "podIPs" | "hostIPs" => Some("ip"),
        "resourceClaimStatuses" => Some("name"),
        _ => None,
    }
}

/// The prefix of a merge list's order directive (`$setElementOrder/conditions`).
pub const SET_ORDER: &str = "$setElementOrder/";

fn diff_element(old: &Map<String, Value>, new: &Map<String, Value>, key: &str) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.insert(k.clone(), v.clone());
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    if out.is_empty() {
        return None;
    }
    out.insert(key.to_owned(), new.get(key).cloned().unwrap_or(Value::Null));
    Some(out)
}

/// The merge key `key` of a list element, if it is an object that has one.
pub fn key_of<'a>(element: &'a Value, key: &str) -> Option<&'a Value> {
    element.as_object().and_then(|m| m.get(key))
}

/// Patch `old` list into `new` list merging on `key`: (elements, order directive) or None.
fn diff_merge_list(old: &[Value], new: &[Value], key: &str) -> Option<(Vec<Value>, Vec<Value>)> {
    let mut elements = Vec::new();
    for n in new {
        let Some(k) = key_of(n, key) else { continue };
        match old.iter().find(|o| key_of(o, key) == Some(k)) {
            None => elements.push(n.clone()),
            Some(o) => {
                if let (Some(om), Some(nm)) = (o.as_object(), n.as_object())
                    && let Some(d) = diff_element(om, nm, key)
                {
                    elements.push(Value::Object(d));
                }
            }
        }
    }
    for o in old {
        let Some(k) = key_of(o, key) else { continue };
        if !new.iter().any(|n| key_of(n, key) == Some(k)) {
            elements.push(json!({ key: k, "$patch": "delete" }));
        }
    }
    let old_order: Vec<_> = old.iter().filter_map(|o| key_of(o, key)).collect();
    let new_order: Vec<_> = new.iter().filter_map(|n| key_of(n, key)).collect();
    if elements.is_empty() && old_order == new_order {
        return None;
    }
    let order = new_order.into_iter().map(|k| json!({ key: k })).collect();
    Some((elements, order))
}

/// The strategic merge patch that turns status `old` into `new` (both JSON objects), or None when
/// they are equal.
pub fn diff_status(old: &Value, new: &Value) -> Option<Map<String, Value>> {
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let mut patch = Map::new();
    for (field, n) in new {
        let o = old.get(field);
        if o == Some(n) {
            continue;
        }
        match (merge_key(field), o.and_then(Value::as_array), n.as_array()) {
            (Some(key), Some(o), Some(n)) => {
                if let Some((elements, order)) = diff_merge_list(o, n, key) {
                    patch.insert(format!("{SET_ORDER}{field}"), Value::Array(order));
                    if !elements.is_empty() {
                        patch.insert(field.clone(), Value::Array(elements));
                    }
                }
            }
            _ => {
                patch.insert(field.clone(), n.clone());
            }
        }
    }
    for field in old.keys() {
        if !new.contains_key(field) {
            patch.insert(field.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(patch)
}

/// The body to PATCH to `pods/{name}/status`: the status patch with `metadata.uid` as a
/// precondition: the apiserver refuses it (422, `metadata.uid` is immutable) if the pod was deleted
/// and created again meanwhile.
pub fn status_patch_body(uid: &str, old: &Value, new: &Value) -> Option<Value> {
    diff_status(old, new).map(|status| json!({ "metadata": { "uid": uid }, "status": status }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::patch_apply::{apply_merge_patch, apply_strategic_merge};

    fn roundtrip(old: Value, new: Value) -> Option<Map<String, Value>> {
        let patch = diff_status(&old, &new);
        let mut applied = old.clone();
        if let Some(p) = &patch {
            apply_strategic_merge(&mut applied, &Value::Object(p.clone()));
        }
        assert_eq!(applied, new, "apply(old, diff(old, new)) == new; patch {patch:?}");
        patch
    }

    #[test]
    fn equal_statuses_give_no_patch() {
        let s = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(roundtrip(s.clone(), s), None);
    }

    #[test]
    fn scalars_change_and_vanish() {
        let p = roundtrip(json!({"phase": "Pending", "message": "x"}), json!({"phase": "Running"})).unwrap();
        assert_eq!(Value::Object(p), json!({"phase": "Running", "message": null}));
    }

    #[test]
    fn conditions_merge_by_type_and_leave_others_alone() {
        let old = json!({"conditions": [
            {"type": "example.com/Gate", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m"}
        ]});
        let new = json!({"conditions": [
            {"type": "example.com/Gate", "status": "True"},
            {"type": "Ready", "status": "True"}
        ]});
        let p = roundtrip(old, new).unwrap();
        assert_eq!(
            p["conditions"],
            json!([{"type": "Ready", "status": "True", "reason": null, "message": null}]),
            "only the changed condition, with removed fields nulled"
        );
        assert_eq!(
            p["$setElementOrder/conditions"],
            json!([{"type": "example.com/Gate"}, {"type": "Ready"}])
        );

        // Someone else's condition that plegd does not know is kept by the server when plegd patches.
        let mut server =
            json!({"conditions": [{"type": "Other", "status": "True"}, {"type": "Ready", "status": "False"}]});
        apply_strategic_merge(&mut server, &Value::Object(p));
        let types: Vec<_> = server["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].clone())
            .collect();
        assert!(types.contains(&json!("Other")), "{server}");
        assert!(types.contains(&json!("Ready")));
    }

    #[test]
    fn added_and_deleted_merge_elements() {
        let p = roundtrip(
            json!({"podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}),
            json!({"podIPs": [{"ip": "10.0.0.2"}, {"ip": "fd00::1"}]}),
        )
        .unwrap();
        assert!(
            p["podIPs"]
                .as_array()
                .unwrap()
                .contains(&json!({"ip": "10.0.0.1", "$patch": "delete"}))
        );
    }

    #[test]
    fn resource_claim_statuses_merge_by_name() {
        let old = json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "gpu-1"}, {"name": "theirs", "resourceClaimName": "t-1"}
        ]});
        let new = json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "gpu-2"}, {"name": "theirs", "resourceClaimName": "t-1"}
        ]});
        let p = roundtrip(old, new).unwrap();
        assert_eq!(
            p["resourceClaimStatuses"],
            json!([{"name": "gpu", "resourceClaimName": "gpu-2"}]),
            "only the changed claim, by name"
        );
    }

    #[test]
    fn container_statuses_are_atomic() {
        let old = json!({"containerStatuses": [{"name": "a", "ready": false}, {"name": "b", "ready": true}]});
        let new = json!({"containerStatuses": [{"name": "a", "ready": true}]});
        let p = roundtrip(old, new.clone()).unwrap();
        assert_eq!(p["containerStatuses"], new["containerStatuses"]);
    }

    #[test]
    fn body_carries_the_uid_precondition() {
        let body = status_patch_body("u-1", &json!({"phase": "Pending"}), &json!({"phase": "Running"})).unwrap();
        assert_eq!(
            body,
            json!({"metadata": {"uid": "u-1"}, "status": {"phase": "Running"}})
        );
        assert_eq!(status_patch_body("u-1", &json!({"a": 1}), &json!({"a": 1})), None);
    }

    #[test]
    fn merge_patch_replaces_lists() {
        let mut t = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}], "phase": "Pending"}});
        apply_merge_patch(
            &mut t,
            &json!({"status": {"conditions": [{"type": "C"}], "phase": null}}),
        );
        assert_eq!(t, json!({"status": {"conditions": [{"type": "C"}]}}));
    }
}
