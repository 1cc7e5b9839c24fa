#!/usr/bin/env python3
"""What plegd's trigger checks found over a kubelet_side_by_side pass, from its debug log.

    PLEGD_BENCH_TRACE=/tmp/trace PLEGD_CLUSTER_PLEGD_LOG_LEVEL=info,plegd::triggers=debug,plegd::pleg=debug \\
        cargo bench --bench kubelet_side_by_side -- --passes defaults
    python3 tests/bench/check_trace.py /tmp/trace/defaults-plegd.log

Counts the dispatcher's checks by kind (a probe of a container the records hold, a locate of an id
they do not, a pod relist), by attempt in the target's schedule (0 is the check at once; 1–59 the
fine probes 2 ms apart; 60 on the doubling waits) and by whether the check found a change; the batch
relists; and the targets whose schedule ran to its end without finding one.
"""
import collections
import json
import sys


def band(attempt):
    if attempt <= 1:
        return str(attempt)
    if attempt < 10:
        return "2-9"
    return "10-59" if attempt < 60 else "60+"


def main(log):
    checks, batches, read_already = [], 0, 0
    for line in open(log):
        try:
            fields = json.loads(line).get("fields", {})
        except ValueError:
            continue
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


if __name__ == "__main__":
    main(sys.argv[1])
