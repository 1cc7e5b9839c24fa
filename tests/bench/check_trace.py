#!/usr/bin/env python3
"""What plegd's trigger checks found over a kubelet_side_by_side pass, from its debug log.

    PLEGD_BENCH_TRACE=/tmp/trace PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug \\
        cargo bench --bench kubelet_side_by_side -- --passes defaults
    python3 tests/bench/check_trace.py /tmp/trace/defaults-plegd.log [/tmp/trace/defaults.jsonl]

Counts the dispatcher's checks by kind (a probe of a container the records hold, a locate of an id
they do not, a pod relist), by attempt in the target's schedule (0 is the check at once; 1–59 the
fine probes 2 ms apart; 60 on the doubling waits) and by whether the check found a change; the batch
relists; and the targets whose schedule ran to its end without finding one.

Given the pass's changes too (the `.jsonl`, whose container ids are the bench's containers; every
other id checked is taken to be a sandbox), it also counts the checks of containers and of sandboxes
by the last containerd event that named the id before the check, and the lag from that event to the
check that found the change (how long the CRI state took to follow the event, as the schedule saw it).
"""
import collections
import datetime
import json
import re
import sys

ID = re.compile(r'"([0-9a-f]{64})"')


def band(attempt):
    if attempt <= 1:
        return str(attempt)
    if attempt < 10:
        return "2-9"
    return "10-59" if attempt < 60 else "60+"


def lines(log):
    for line in open(log):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        yield record, record.get("fields", {})


def main(log, changes=None):
    checks, batches, read_already = [], 0, 0
    for _, fields in lines(log):
        message = fields.get("message")
        if message == "trigger check":
            checks.append(fields)
        elif message == "trigger batch relist":
            batches += 1
        elif message == "trigger check: the records hold a change already":
            read_already += 1
    named = lambda v: v not in (None, "None")
    found = lambda c: c.get("changed") in (True, "true")
    kinds = collections.Counter()
    ended = collections.Counter()
    for c in checks:
        kind = ("probe" if named(c.get("pod")) else "locate") if named(c.get("container")) else "pod"
        attempt = int(c.get("attempt", 0))
        kinds[(kind, band(attempt), found(c))] += 1
        if attempt == 67 and not found(c):
            ended[kind] += 1
    print(f"{len(checks)} checks, {batches} batch relists, {read_already} re-checks ended by the records")
    print("| kind | attempt | found a change | checks |")
    print("|---|---|---|---|")
    for (kind, b, f), n in sorted(kinds.items()):
        print(f"| {kind} | {b} | {'yes' if f else 'no'} | {n} |")
    print("schedules that ran to their end without a change:", dict(ended))
    if changes:
        by_event(log, {json.loads(line)["container"] for line in open(changes)})


def by_event(log, containers):
    """Checks of the bench's containers and of the other ids (sandboxes) by the last event that
    named the id, and the lag from that event to the check that found the change."""
    when = lambda record: datetime.datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()
    last = {}
    count, lags = collections.Counter(), collections.defaultdict(list)
    for record, fields in lines(log):
        message = fields.get("message")
        named = ID.search(fields.get("trigger" if message == "trigger" else "container", "") or "")
        if not named:
            continue
        id = named.group(1)
        if message == "trigger":
            last[id] = (fields.get("topic"), when(record))
        elif message == "trigger check" and id in last:
            topic, at = last[id]
            key = ("container" if id in containers else "sandbox", topic)
            count[key] += 1
            if fields.get("changed") in (True, "true"):
                lags[key].append(1000 * (when(record) - at))
    print("| id | last event | checks | found | lag p10 / p50 / p90 / max ms |")
    print("|---|---|---|---|---|")
    for key in sorted(count):
        found = sorted(lags[key])
        q = lambda p: f"{found[min(len(found) - 1, int(p * len(found)))]:.0f}"
        spread = f"{q(.1)} / {q(.5)} / {q(.9)} / {found[-1]:.0f}" if found else "-"
        print(f"| {key[0]} | {key[1]} | {count[key]} | {len(found)} | {spread} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
