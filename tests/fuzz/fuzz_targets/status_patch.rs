//! Status patch computation: for any two pod statuses of the shapes plegd writes, the patch from the
//! old one to the new one, applied to the old one, gives the new one; applied to the old one plus a
//! condition somebody else wrote, it gives the new one and leaves that condition alone; and it is
//! empty exactly when nothing differs.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use plegd::status::patch::{diff_status, status_patch_body};
use serde_json::{Map, Value, json};

use plegd::status::patch_apply::apply_strategic_merge;

/// A small value space, so that old and new often share values and the patch has work to do.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Word(u8);

impl Word {
    fn json(self) -> Value {
        Value::String(format!("v{}", self.0 % 6))
    }
}

#[derive(Arbitrary, Debug)]
struct Condition {
    kind: u8,
    status: Option<Word>,
    reason: Option<Word>,
    message: Option<Word>,
    last_transition_time: Option<Word>,
}

#[derive(Arbitrary, Debug)]
struct ContainerStatus {
    name: Word,
    ready: bool,
    restart_count: u8,
    state: Option<(Word, Option<Word>)>,
}

#[derive(Arbitrary, Debug)]
struct Status {
    phase: Option<Word>,
    message: Option<Word>,
    reason: Option<Word>,
    host_ip: Option<Word>,
    start_time: Option<Word>,
    /// plegd always writes conditions (a list of none at least).
    conditions: Vec<Condition>,
    pod_ips: Option<Vec<Word>>,
    host_ips: Option<Vec<Word>>,
    container_statuses: Option<Vec<ContainerStatus>>,
}

const KINDS: [&str; 5] = [
    "PodScheduled",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodReadyToStartContainers",
];

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(k.to_owned(), v);
    }
}

/// A merge list as the apiserver holds one: every element has its key, no key twice.
fn merge_list(elements: impl Iterator<Item = Value>, key: &str) -> Value {
    let mut out: Vec<Value> = Vec::new();
    for e in elements {
        if !out.iter().any(|o| o[key] == e[key]) {
            out.push(e);
        }
    }
    Value::Array(out)
}

impl Status {
    fn json(&self) -> Value {
        let mut m = Map::new();
        put(&mut m, "phase", self.phase.map(Word::json));
        put(&mut m, "message", self.message.map(Word::json));
        put(&mut m, "reason", self.reason.map(Word::json));
        put(&mut m, "hostIP", self.host_ip.map(Word::json));
        put(&mut m, "startTime", self.start_time.map(Word::json));
        put(
            &mut m,
            "conditions",
            Some(&self.conditions).map(|cs| {
                let elements = cs.iter().map(|c| {
                    let mut e = Map::new();
                    e.insert("type".into(), json!(KINDS[usize::from(c.kind) % KINDS.len()]));
                    put(&mut e, "status", c.status.map(Word::json));
                    put(&mut e, "reason", c.reason.map(Word::json));
                    put(&mut e, "message", c.message.map(Word::json));
                    put(&mut e, "lastTransitionTime", c.last_transition_time.map(Word::json));
                    Value::Object(e)
                });
                merge_list(elements, "type")
            }),
        );
        for (field, ips) in [("podIPs", &self.pod_ips), ("hostIPs", &self.host_ips)] {
            put(
                &mut m,
                field,
                ips.as_ref()
                    .map(|ips| merge_list(ips.iter().map(|ip| json!({ "ip": ip.json() })), "ip")),
            );
        }
        put(
            &mut m,
            "containerStatuses",
            self.container_statuses.as_ref().map(|cs| {
                Value::Array(
                    cs.iter()
                        .map(|c| {
                            let mut e = json!({
                                "name": c.name.json(),
                                "ready": c.ready,
                                "restartCount": c.restart_count,
                            });
                            if let Some((state, reason)) = c.state {
                                let mut inner = Map::new();
                                put(&mut inner, "reason", reason.map(Word::json));
                                e["state"] = json!({ state.json().as_str().unwrap_or_default(): inner });
                            }
                            e
                        })
                        .collect(),
                )
            }),
        );
        Value::Object(m)
    }
}

fn apply(target: &Value, patch: &Map<String, Value>) -> Value {
    let mut out = target.clone();
    apply_strategic_merge(&mut out, &Value::Object(patch.clone()));
    out
}

fuzz_target!(|pair: (Status, Status)| {
    let (old, new) = (pair.0.json(), pair.1.json());
    let Some(patch) = diff_status(&old, &new) else {
        assert_eq!(old, new, "no patch although the statuses differ");
        return;
    };
    assert_ne!(old, new, "a patch although nothing differs: {patch:?}");
    assert_eq!(
        apply(&old, &patch),
        new,
        "apply(old, diff(old, new)) != new; patch {patch:?}"
    );

    // A condition of a type plegd does not own, written by somebody else, survives the patch.
    let foreign = json!({ "type": "example.com/Gate", "status": "True" });
    let mut server = old.clone();
    if let Some(list) = server.get_mut("conditions").and_then(Value::as_array_mut) {
        list.push(foreign.clone());
    }
    let after = apply(&server, &patch);
    let conditions = after
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions.contains(&foreign),
        "the foreign condition was lost; patch {patch:?}"
    );
    let mut without = after.clone();
    if let Some(list) = without.get_mut("conditions").and_then(Value::as_array_mut) {
        list.retain(|c| *c != foreign);
    }
    assert_eq!(
        without, new,
        "the patch did something else beside the foreign condition; patch {patch:?}"
    );

    // The body sent to the apiserver carries the uid precondition and the same patch.
    let body = status_patch_body("uid-1", &old, &new).expect("a body when there is a patch");
    assert_eq!(body["metadata"]["uid"], "uid-1");
    assert_eq!(body["status"], Value::Object(patch));
});
