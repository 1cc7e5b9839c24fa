#!/usr/bin/env python3
"""Each spread crash of a gated backend in a traffic pass followed through plegd, from the trace.

    PLEGD_BENCH_TRACE=/tmp/traffic PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug,plegd::status=debug \\
        cargo bench --profile release-without-lto --bench traffic -- --passes defaults
    python3 tests/bench/traffic_trace.py /tmp/traffic/defaults

For every crash, in ms from the kill (the bench's clock): containerd's /tasks/exit as plegd's
trigger stream got it, its cgroup's OOM count read (an exit of status 137), plegd's ContainerDied,
its PATCH of the pod's status sent, plegd's condition written (the apiserver's answer), then what
the bench saw: the pod with plegd's condition False, with Ready False (the kubelet's write), the
endpoint not ready (the EndpointSlice controller's). The first of each after the kill and before
the next crash of the pass (spread crashes are seconds apart). Then, from the apiserver's audit
log (DIR/PASS-audit.log), each write's side of it: plegd's PATCH of the pod's status, the kubelet's
GET of the pod and its PATCH, the EndpointSlice controller's update: when received (ms from the
kill) and how long the apiserver took. Then p50 / p90 of each.
"""
import datetime
import json
import sys

STEPS = ["exit event", "reason read", "ContainerDied", "status sent", "condition written", "condition seen", "Ready seen", "endpoint"]
# From the apiserver's audit log, where the trace has it: when each write of the crash's pod (and
# its Service's EndpointSlice) was received and how long the apiserver took to answer it.
AUDIT = [
    ("plegd PATCH", "received"), ("plegd PATCH", "took"),
    ("kubelet GET", "received"), ("kubelet GET", "took"),
    ("kubelet PATCH", "received"), ("kubelet PATCH", "took"),
    ("EndpointSlice update", "received"), ("EndpointSlice update", "took"),
]


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


def audit_writes(path):
    """(received, took, who, verb, resource, namespace, name) of each request the audit log answered."""
    writes = []
    try:
        lines = open(path)
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete":
            continue
        received = at(event["requestReceivedTimestamp"])
        target = event.get("objectRef", {})
        resource = target.get("resource", "") + ("/" + target["subresource"] if target.get("subresource") else "")
        writes.append((received, at(event["stageTimestamp"]) - received, event["user"].get("username", ""),
                       event.get("verb"), resource, target.get("namespace"), target.get("name")))
    writes.sort()
    return writes


def audit_row(writes, pod, start, end):
    """The crash's requests: the first of each kind after the kill."""
    kinds = {
        "plegd PATCH": lambda w: w[2].endswith(":plegd") and w[3] == "patch" and w[4] == "pods/status" and w[6] == pod,
        "kubelet GET": lambda w: w[2].startswith("system:node:") and w[3] == "get" and w[4] == "pods" and w[6] == pod,
        "kubelet PATCH": lambda w: w[2].startswith("system:node:") and w[3] == "patch" and w[4] == "pods/status" and w[6] == pod,
        "EndpointSlice update": lambda w: w[2].endswith(":endpointslice-controller") and w[4] == "endpointslices"
        and w[5] == "traffic-gated",
    }
    row = {}
    for w in writes:
        if not start <= w[0] < end:
            continue
        for kind, match in kinds.items():
            if (kind, "received") not in row and match(w):
                row[(kind, "received")] = w[0] - start
                row[(kind, "took")] = w[1]
    return row


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
    writes = audit_writes(prefix + "-audit.log")
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
        if writes is not None and crash.get("pod"):
            row.update(audit_row(writes, crash["pod"], start, end))
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
    if writes is None:
        print("\n(no audit log in the trace: the apiserver's side not shown)")
        return
    print("\n| the apiserver's side, ms | received p50 | p90 | took p50 | p90 |")
    print("|---|---:|---:|---:|---:|")
    for kind in dict.fromkeys(k for k, _ in AUDIT):
        cells = []
        for what in ("received", "took"):
            values = [r[(kind, what)] for r in rows if (kind, what) in r]
            cells += [f"{pct(values, 0.5):.0f}", f"{pct(values, 0.9):.0f}"]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
