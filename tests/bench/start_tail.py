#!/usr/bin/env python3
"""Each pod start of a kubelet_side_by_side pass, split where its time goes, from the bench's trace.

    PLEGD_BENCH_TRACE=/tmp/trace \\
    PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug,plegd::sync_loop=debug \\
        cargo bench --bench kubelet_side_by_side -- --passes defaults
    python3 tests/bench/start_tail.py /tmp/trace/defaults

For every container start: the CRI state (the bench's floor), the runtime event announcing it as
plegd's trigger stream got it (a trigger that announces Running), plegd's ContainerStarted, and the
computed status the bench saw; p50 / p90 / p99 / max of each step, in ms, and the slowest starts
with their steps; and how long one trigger check took (a probe and the pod's status read, or a
relist of a pod), over the whole pass.
"""
import datetime
import json
import re
import sys


def at(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def pct(xs, p):
    """As the benches' stats.rs: the value at rank round((n - 1) * p)."""
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, round((len(xs) - 1) * p))]) if xs else None


def main(prefix):
    event, pleg, checks = {}, {}, []
    for line in open(prefix + "-plegd.log"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        f, t = j["fields"], at(j["timestamp"])
        if f.get("message") == "trigger" and "Running" in f.get("trigger", ""):
            m = re.search(r'id: "([0-9a-f]+)"', f["trigger"])
            if m:
                event.setdefault(m.group(1), t)
        elif f.get("message") == "lifecycle event" and f.get("event") == "ContainerStarted":
            pleg.setdefault(f.get("container"), t)
        elif f.get("message") == "trigger check" and "took_ms" in f:
            checks.append(float(f["took_ms"]))
    starts = [json.loads(l) for l in open(prefix + ".jsonl")]
    starts = [r for r in starts if r["change"] == "started" and r["seen"].get("computed")]
    steps = {"event - floor": [], "ContainerStarted - event": [], "computed - ContainerStarted": [], "computed - floor": []}
    rows = []
    for r in starts:
        c, floor, computed = r["container"], r["seen"]["floor"], r["seen"]["computed"]
        steps["computed - floor"].append((computed - floor) * 1000)
        if c in event and c in pleg:
            row = ((event[c] - floor) * 1000, (pleg[c] - event[c]) * 1000, (computed - pleg[c]) * 1000)
            for name, ms in zip(list(steps)[:3], row):
                steps[name].append(ms)
            rows.append(((computed - floor) * 1000, *row, r["pod"]))
    print(f"{len(starts)} starts, {len(rows)} with their event and ContainerStarted in plegd's log; ms:")
    for name, xs in steps.items():
        print(f"  {name:28s} p50 {pct(xs, .5)}  p90 {pct(xs, .9)}  p99 {pct(xs, .99)}  max {pct(xs, 1)}")
    print(f"  one trigger check (the whole pass, {len(checks)}): p50 {pct(checks, .5)}  p90 {pct(checks, .9)}  "
          f"p99 {pct(checks, .99)}  max {pct(checks, 1)}")
    print("slowest:")
    for total, ev, pl, comp, pod in sorted(rows, reverse=True)[:10]:
        print(f"  {pod}: {total:.0f} (event - floor {ev:.0f}, ContainerStarted - event {pl:.0f}, computed - ContainerStarted {comp:.0f})")


if __name__ == "__main__":
    main(sys.argv[1])
