//! What one pod costs plegd to decode from the apiserver's JSON (every watch event of the informer,
//! every status write's answer): as a whole k8s-openapi `Pod` then converted to `ApiPod` (what plegd
//! did before), against straight into `ApiPod`, whose managedFields are skipped in the JSON and never
//! built. The pod is a real one from kube-apiserver 1.37 (tests/bench/fixtures/: created with
//! kubectl apply, its status written by the kubelet), with the managedFields entry plegd's condition
//! writes adds. Interleaved round by round; medians and their ratio.
//!
//!     cargo bench --bench pod_decode
//!     cargo bench --bench pod_decode -- --rounds 50 --per-round 2000

mod args;
mod stats;

use std::hint::black_box;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use plegd::apiserver::pod::ApiPod;

use args::arg;
use stats::percentile;

const FIXTURE: &str = include_str!("fixtures/pod-1.37-status-writers.json");

/// Microseconds per decode of `json`, `n` times, by `decode`.
fn time(n: usize, json: &[u8], decode: impl Fn(&[u8]) -> ApiPod) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        black_box(decode(black_box(json)));
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    let rounds: usize = arg("--rounds").unwrap_or(30);
    let per_round: usize = arg("--per-round").unwrap_or(2000);
    // As the apiserver sends it: compact.
    let value: serde_json::Value = serde_json::from_str(FIXTURE).expect("the fixture is JSON");
    let json = serde_json::to_vec(&value).unwrap();
    let whole = |b: &[u8]| ApiPod::from(serde_json::from_slice::<Pod>(b).expect("a pod"));
    let straight = |b: &[u8]| serde_json::from_slice::<ApiPod>(b).expect("a pod");
    assert_eq!(whole(&json), straight(&json), "both decodes give the same ApiPod");
    let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        a.push(time(per_round, &json, whole));
        b.push(time(per_round, &json, straight));
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let managed = serde_json::to_vec(&value["metadata"]["managedFields"]).unwrap().len();
    println!(
        "pod JSON {} bytes ({managed} of them managedFields), {rounds} rounds of {per_round} decodes\n",
        json.len()
    );
    println!("| decode | µs per pod, median | p10 | p90 |\n|---|---|---|---|");
    for (name, t) in [
        ("Pod, then ApiPod::from", &a),
        ("ApiPod straight (managedFields skipped)", &b),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            percentile(t, 0.5),
            percentile(t, 0.1),
            percentile(t, 0.9)
        );
    }
    println!("\nratio of medians: {:.2}×", percentile(&a, 0.5) / percentile(&b, 0.5));
}
