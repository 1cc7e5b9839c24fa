#!/usr/bin/env bash
# Keeps the latest /metrics of the plegd the cluster's DaemonSet runs (tests/cluster/cluster.sh), for
# plegd's own counters over a bench (plegd_trigger_relists_total, …): run it beside
# `cargo bench --bench kubelet_side_by_side`; the last scrape before the bench removes plegd stays.
#
#   bash tests/bench/plegd_metrics.sh OUT        # until interrupted; OUT: the latest scrape
#
# plegd answers /metrics only to a token allowed to get it (SECURITY.md): the script binds
# deploy/components/pod-monitor's ClusterRole to a service account of its own, in a namespace of its
# own (the bench deletes plegd-system), and reads from inside plegd's network namespace.
set -euo pipefail
OUT=${1:?usage: plegd_metrics.sh OUT}
BIN=/var/lib/plegd-test/cluster/bin/v1.37.2/kubectl
KUBECONFIG_FILE=/var/lib/plegd-test/cluster/run/admin.kubeconfig
kubectl() { "$BIN" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
token=""
while true; do
  if [ -z "$token" ] && kubectl get ns >/dev/null 2>&1; then
    kubectl create namespace bench-metrics >/dev/null 2>&1 || true
    kubectl -n bench-metrics create serviceaccount reader >/dev/null 2>&1 || true
    kubectl create clusterrole bench-metrics-reader --verb=get --non-resource-url=/metrics >/dev/null 2>&1 || true
    kubectl create clusterrolebinding bench-metrics-reader --clusterrole=bench-metrics-reader \
      --serviceaccount=bench-metrics:reader >/dev/null 2>&1 || true
    token=$(kubectl -n bench-metrics create token reader --duration=24h 2>/dev/null || true)
  fi
  pid=$(pgrep -f '^/usr/local/bin/plegd run' | head -1 || true)
  if [ -n "$pid" ] && [ -n "$token" ] &&
    nsenter -t "$pid" -n curl -sf -m 2 -H "Authorization: Bearer $token" \
      http://127.0.0.1:9808/metrics >"$OUT.new" 2>/dev/null &&
    grep -q '^plegd_' "$OUT.new"; then
    mv "$OUT.new" "$OUT"
  fi
  sleep 3
done
