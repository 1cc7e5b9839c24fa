#!/usr/bin/env bash
# 100 pods created at once on the cluster's node (tests/cluster/cluster.sh), plegd installed with its
# trigger and relister debug log: how long after each container's or sandbox's containerd
# `/tasks/start` plegd's PLEG sends ContainerStarted (p50 / p90 / p99 / max), from plegd's own log.
#
#   cargo build --release --bin plegd && bash tests/bench/start_trace.sh     # ~3 min
#
# Leaves the cluster running with plegd removed (`cluster.sh stop` ends it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=/var/lib/plegd-test/cluster/bin/v1.37.2/kubectl
kubectl() { "$BIN" --kubeconfig /var/lib/plegd-test/cluster/run/admin.kubeconfig "$@"; }
work=$(mktemp -d)
bash tests/cluster/cluster.sh start --plegd conditions >"$work/cluster.log" 2>&1
kubectl -n plegd-system set env ds/plegd \
  PLEGD_LOG_LEVEL='info,plegd::triggers=debug,plegd::pleg=debug' >/dev/null
kubectl -n plegd-system rollout status ds/plegd --timeout=120s >/dev/null
sleep 5
node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
kubectl create namespace start-trace >/dev/null
python3 - "$node" >"$work/pods.json" <<'PY'
import json, sys
pod = lambda i: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"s{i}", "namespace": "start-trace"},
                 "spec": {"nodeName": sys.argv[1], "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "main", "image": "plegd.test/busybox:1", "imagePullPolicy": "Never",
                                          "command": ["sleep", "3600"]}]}}
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod(i) for i in range(100)]}))
PY
kubectl create -f "$work/pods.json" >/dev/null
sleep 45
kubectl -n plegd-system logs ds/plegd --tail=-1 >"$work/plegd.log"
kubectl delete namespace start-trace --wait=true --timeout=120s >/dev/null
bash tests/cluster/cluster.sh remove-plegd >/dev/null 2>&1
python3 - "$work/plegd.log" <<'PY'
import datetime, json, sys
at = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
start, seen = {}, {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    f, t = j["fields"], at(j["timestamp"])
    if f.get("message") == "trigger" and f.get("topic") == "/tasks/start":
        start.setdefault(f["trigger"].split('"')[1], t)
    if f.get("message") == "lifecycle event" and f.get("event") == "ContainerStarted":
        seen.setdefault(f["container"], t)
lags = sorted((seen[c] - start[c]) * 1000 for c in start if c in seen)
n = len(lags)
if n == 0:
    sys.exit("no start traced (is the debug log on?)")
q = lambda p: lags[min(n - 1, int(n * p))]
print(f"/tasks/start -> ContainerStarted over {n} starts ({len(start) - n} never seen): "
      f"p50 {q(0.5):.0f} ms, p90 {q(0.9):.0f} ms, p99 {q(0.99):.0f} ms, max {lags[-1]:.0f} ms")
PY
rm -rf "$work"
