#!/usr/bin/env python3
"""plegd's perf samples by the task (stage) each ran in: the first frame from the root that names one.

    perf record -F 499 --call-graph dwarf,16384 -p <plegd> -- sleep 105    # beside the side-by-side bench
    perf script -F comm,tid,ip,sym > /tmp/perf.txt
    python3 tests/bench/perf_by_task.py /tmp/perf.txt
"""
import collections
import re
import sys

TASKS = [
    ("trigger dispatcher", r"plegd::triggers::dispatch"),
    ("trigger streams", r"plegd::triggers::streams|plegd::runtime::events"),
    ("relister (periodic)", r"plegd::pleg::GenericPleg.*run"),
    ("syncLoop", r"plegd::sync_loop"),
    ("status manager", r"plegd::status::manager"),
    ("informer", r"plegd::informer|plegd::watch|kube_runtime"),
    ("observe server", r"plegd::observe"),
    ("metrics and health", r"plegd::metrics|plegd::http|plegd::listen"),
    ("gRPC client's HTTP/2 connection", r"h2::proto::connection|H2ClientFuture|hyper::proto::h2::client::conn_task"),
    ("tower buffer", r"tower::buffer"),
    ("apiserver HTTP/1.1 connection", r"hyper::proto::h1|UpgradeableConnection|hyper::client::conn::http1"),
    ("tokio parked and woken", r"park_internal|Driver::turn|park_timeout"),
    # Last: a sample whose stack was cut (deeper than perf's 16 KiB copy) before the task's frame
    # still names the pod decoding it was in (the informer's watch events, status writes' answers).
    ("pod decoding, stack cut", r"plegd::pod::"),
]
SUBS = {
    "trigger dispatcher": [("complete relists", r"relist_locked"), ("pod relists", r"relist_pod"),
                           ("probes", r"probe"), ("locates", r"locate")],
}


def samples(path):
    cur = []
    for line in open(path):
        if not line.strip():
            if cur:
                yield cur
            cur = []
        elif line.startswith((" ", "\t")):
            parts = line.strip().split(None, 1)
            cur.append(parts[1] if len(parts) > 1 else "?")
    if cur:
        yield cur


def main(path):
    tasks, subs, total = collections.Counter(), collections.Counter(), 0
    for frames in samples(path):
        total += 1
        root_first = list(reversed(frames))
        task, at = "other", None
        for i, f in enumerate(root_first):
            task = next((name for name, pat in TASKS if re.search(pat, f)), None)
            if task:
                at = i
                break
        task = task or "other"
        tasks[task] += 1
        for name, pat in SUBS.get(task, []):
            if any(re.search(pat, f) for f in root_first[at:]):
                subs[(task, name)] += 1
                break
    print(f"{total} samples")
    for task, n in tasks.most_common():
        print(f"{100 * n / total:5.1f} %  {task}")
        for (t, name), m in sorted(subs.items(), key=lambda kv: -kv[1]):
            if t == task:
                print(f"{100 * m / total:9.1f} %  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
