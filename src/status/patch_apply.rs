//! Applying patches, as the apiserver does, for the subset of the strategic merge strategy that
//! [`super::patch`] computes (PodStatus' merge lists), and RFC 7386 JSON merge patches. Test code
//! (unit tests and the `test-util` feature): the patch tests and the fuzz target check
//! `apply(old, diff(old, new)) == new`, and the bench's Rust apiserver applies PATCHes with it.

use serde_json::{Map, Value};

use super::patch::{SET_ORDER, key_of, merge_key};

fn apply_merge_list(target: &mut Vec<Value>, patch: &[Value], key: &str) {
    for p in patch {
        let Some(k) = key_of(p, key).cloned() else { continue };
        let pos = target.iter().position(|t| key_of(t, key) == Some(&k));
        let delete = p.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                target.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => {
                if let (Some(t), Some(pm)) = (target[i].as_object_mut(), p.as_object()) {
                    for (f, v) in pm {
                        if v.is_null() {
                            t.remove(f);
                        } else {
                            t.insert(f.clone(), v.clone());
                        }
                    }
                }
            }
            (None, false) => {
                let mut element = p.clone();
                if let Some(m) = element.as_object_mut() {
                    m.retain(|_, v| !v.is_null());
                }
                target.push(element);
            }
        }
    }
}

fn apply_order(target: &mut [Value], order: &[Value], key: &str) {
    let rank = |v: &Value| {
        key_of(v, key)
            .and_then(|k| order.iter().position(|o| key_of(o, key) == Some(k)))
            .unwrap_or(usize::MAX)
    };
    // Elements the order does not name keep their relative place after the named ones.
    target.sort_by_key(rank);
}

type Object = Map<String, Value>;

/// What both patch kinds do first: a patch that is not an object replaces the target (None is
/// returned: nothing more to do); otherwise the target becomes an object if it is not one.
fn patch_target<'a, 'p>(target: &'a mut Value, patch: &'p Value) -> Option<(&'a mut Object, &'p Object)> {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return None;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    Some((target.as_object_mut()?, patch))
}

/// Apply a strategic merge patch to an object whose merge lists are those of `merge_key`
/// (applied at every depth, so a whole pod with a `status` member works too). `null` removes a
/// field, merge lists merge by key, other lists and scalars are replaced.
pub fn apply_strategic_merge(target: &mut Value, patch: &Value) {
    let Some((t, patch)) = patch_target(target, patch) else {
        return;
    };
    for (field, p) in patch {
        if field.starts_with(SET_ORDER) || field.starts_with('$') {
            continue;
        }
        if p.is_null() {
            t.remove(field);
            continue;
        }
        match (merge_key(field), p.as_array()) {
            (Some(key), Some(elements)) => {
                let list = t.entry(field.clone()).or_insert_with(|| Value::Array(Vec::new()));
                if !list.is_array() {
                    *list = Value::Array(Vec::new());
                }
                if let Some(list) = list.as_array_mut() {
                    apply_merge_list(list, elements, key);
                }
            }
            _ if p.is_object() => apply_strategic_merge(t.entry(field.clone()).or_insert(Value::Null), p),
            _ => {
                t.insert(field.clone(), p.clone());
            }
        }
    }
    for (field, order) in patch {
        if let Some(name) = field.strip_prefix(SET_ORDER)
            && let (Some(key), Some(order)) = (merge_key(name), order.as_array())
            && let Some(list) = t.get_mut(name).and_then(Value::as_array_mut)
        {
            apply_order(list, order, key);
        }
    }
}

/// RFC 7386 JSON merge patch (what `application/merge-patch+json` means): lists are replaced.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}
