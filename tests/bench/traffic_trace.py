#!/usr/bin/env python3
"""Each spread crash of a gated backend in a traffic pass followed through plegd, from the trace.

    PLEGD_BENCH_TRACE=/tmp/traffic PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug,plegd::status=debug \\
        cargo bench --profile release-without-lto --bench traffic -- --passes defaults
    python3 tests/bench/traffic_trace.py /tmp/traffic/defaults

For every crash, in ms from the kill (the bench's clock): containerd's /tasks/exit as plegd's
trigger stream got it, its cgroup's OOM count read (an exit of status 137), plegd's ContainerDied,
its PATCH of the pod's status sent, plegd's condition written (the apiserver's answer), then what the bench saw: the pod
with plegd's condition False, with Ready False (the kubelet's write), the endpoint not ready (the
EndpointSlice controller's). The first of each after the kill and before the next crash of the
pass (spread crashes are seconds apart). Then p50 / p90 of each step.
"""
import datetime
import json
import sys

STEPS = ["exit event", "reason read", "ContainerDied", "status sent", "condition written", "condition seen", "Ready seen", "endpoint"]


def at(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1000.0


def pct(xs, p):
    """As the benches' stats.rs: the value at rank round((n - 1) * p)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))] if xs else float("nan")


def step_of(fields):
    message = fields.get("message", "")
    if message.startswith("exit event: its reason waits") or (
        message == "trigger" and "Exited" in fields.get("trigger", "") and fields.get("source") == "containerd"
    ):
        return "exit event"
    if message.startswith("exit event: its reason read"):
        return "reason read"
    if message == "lifecycle event" and fields.get("event") == "ContainerDied":
        return "ContainerDied"
    if message == "sending the status":
        return "status sent"
    if message == "status written":
        return "condition written"
    return None


def main(prefix):
    crashes = [json.loads(line) for line in open(prefix + ".jsonl")]
    kills = sorted(c["killed_at_ms"] for c in crashes if c["kind"] == "spread")
    gated = [c for c in crashes if c["kind"] == "spread" and c["group"] == "gated"]
    events = []
    for line in open(prefix + "-plegd.log"):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        step = step_of(entry.get("fields", {}))
        if step:
            events.append((at(entry["timestamp"]), step))
    events.sort()
    rows = []
    for crash in gated:
        start = crash["killed_at_ms"]
        later = [k for k in kills if k > start]
        end = later[0] if later else float("inf")
        row = {}
        for t, step in events:
            if start <= t < end and step not in row:
                if step in ("status sent", "condition written") and "ContainerDied" not in row:
                    continue
                row[step] = t - start
        row["condition seen"] = crash.get("condition_ms")
        row["Ready seen"] = crash.get("ready_ms")
        row["endpoint"] = crash.get("endpoint_ms")
        rows.append(row)
    print("| crash | " + " | ".join(STEPS) + " |")
    print("|---|" + "---:|" * len(STEPS))
    for n, row in enumerate(rows):
        cells = ["" if row.get(s) is None else f"{row[s]:.0f}" for s in STEPS]
        print(f"| {n} | " + " | ".join(cells) + " |")
    for p in (0.5, 0.9):
        cells = [f"{pct([r[s] for r in rows if r.get(s) is not None], p):.0f}" for s in STEPS]
        print(f"| p{round(p * 100)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
