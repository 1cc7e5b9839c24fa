#!/usr/bin/env python3
"""Each exit of a kubelet_side_by_side pass followed through plegd, from the bench's trace.

    PLEGD_BENCH_TRACE=/tmp/trace PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug \\
        cargo bench --bench kubelet_side_by_side -- --passes defaults
    python3 tests/bench/exit_trace.py /tmp/trace/defaults

For every exit: containerd's /tasks/exit and /tasks/delete as plegd's trigger stream got them (and,
for an exit of status 137, when its cgroup's OOM count was read), the
CRI state (the bench's floor), the check that found the change, plegd's ContainerDied, and the
computed status the bench saw; in ms from the floor. Then p50 / p99 of each step, per round, and
the slowest exits with their steps.
"""
import datetime
import json
import sys


def at(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def pct(xs, p):
    """As the benches' stats.rs: the value at rank round((n - 1) * p)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))] if xs else float("nan")


def main(prefix):
    changes = [json.loads(l) for l in open(prefix + ".jsonl")]
    exits = [c for c in changes if c["change"] == "exited" and c.get("container")]
    ids = {c["container"] for c in exits}
    steps = {i: {} for i in ids}  # id -> step -> first time
    checks = {i: [] for i in ids}
    batches = []

    def first(i, step, t):
        steps[i].setdefault(step, t)

    for line in open(prefix + "-plegd.log"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        f, t = j.get("fields", {}), at(j["timestamp"])
        msg = f.get("message")
        if msg in ("trigger", "exit event", "exit event: its reason waits on the cgroup's OOM count") \
                and f.get("source") == "containerd":
            trig = f.get("trigger", "") + f.get("container", "")
            for i in ids:
                if i in trig:
                    first(i, f.get("topic"), t)
        elif msg == "exit event: its reason read" and f.get("source") == "containerd":
            trig = f.get("container", "")
            for i in ids:
                if i in trig:
                    first(i, "reason", t)
        elif msg == "lifecycle event" and f.get("container") in ids and f.get("event") == "ContainerDied":
            first(f["container"], "died", t)
        elif msg == "trigger check":
            c = f.get("container", "")
            for i in ids:
                if i in c:
                    checks[i].append((t, f.get("attempt"), f.get("fresh"), f.get("changed")))
                    # The check that found the exit: the first change after its /tasks/exit (the
                    # container's start was found by an earlier one).
                    if f.get("changed") in (True, "true") and "/tasks/exit" in steps[i]:
                        first(i, "found", t)
        elif msg == "trigger batch relist":
            batches.append(t)

    batches.sort()
    for rnd in ("spread", "burst"):
        rows = []
        for c in exits:
            if c["round"] != rnd:
                continue
            s, seen = steps[c["container"]], c["seen"]
            floor = seen.get("floor")
            if floor is None:
                continue
            rel = lambda t: None if t is None else (t - floor) * 1000
            rows.append({
                "pod": c["pod"], "id": c["container"][:12],
                "finished": rel(c["cri"]), "exit": rel(s.get("/tasks/exit")), "reason": rel(s.get("reason")),
                "delete": rel(s.get("/tasks/delete")),
                "found": rel(s.get("found")), "died": rel(s.get("died")),
                "computed": rel(seen.get("computed")), "condition": rel(seen.get("plegd")),
                "checks": [((t - floor) * 1000, a, fr, ch) for t, a, fr, ch in checks[c["container"]]],
                "batches": [round((b - floor) * 1000) for b in batches if -300 < (b - floor) * 1000 < 1000],
            })
        if not rows:
            continue
        print(f"\n{rnd}: {len(rows)} exits, ms from the CRI state (the floor); p50 / p99 / max")
        for k in ("finished", "exit", "reason", "delete", "found", "died", "computed", "condition"):
            xs = [r[k] for r in rows if r[k] is not None]
            print(f"  {k:10} n={len(xs):3}  {pct(xs, .5):8.1f} {pct(xs, .99):8.1f} {max(xs) if xs else float('nan'):8.1f}")
        died_to_computed = [r["computed"] - r["died"] for r in rows if r["computed"] is not None and r["died"] is not None]
        print(f"  computed − died       {pct(died_to_computed, .5):8.1f} {pct(died_to_computed, .99):8.1f}")
        print("  slowest (computed − floor):")
        for r in sorted(rows, key=lambda r: -(r["computed"] or 0))[:6]:
            fmt = lambda v: "—" if v is None else f"{v:.0f}"
            print(f"    {r['pod']} {r['id']}: finished {fmt(r['finished'])} exit {fmt(r['exit'])} delete {fmt(r['delete'])}"
                  f" found {fmt(r['found'])} died {fmt(r['died'])} computed {fmt(r['computed'])} condition {fmt(r['condition'])}")
            near = [f"{t:.0f}:{a}{'F' if fr in (True, 'true') else ''}{'!' if ch in (True, 'true') else ''}" for t, a, fr, ch in r["checks"] if t > -400]
            print(f"      checks {' '.join(near[:30])}")
            print(f"      batch relists {r['batches'][:20]}")


if __name__ == "__main__":
    main(sys.argv[1])
