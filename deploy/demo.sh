#!/usr/bin/env bash
# plegd's main job, end to end on this machine: bring up an isolated containerd — the machine's own
# when it is 2.3 or newer, else containerd 2.3 (the long-term release) built from its own Go module
# once (tests/containerd/containerd.sh; the machine's packages untouched) — and a Kubernetes 1.37 control plane built from Kubernetes' own code
# (tests/cluster/cluster.sh: kube-apiserver, controller manager, scheduler and a kubelet of its own,
# built once through the Go module proxy), and run a short pod workload through them on
# `demo-node`, a node no kubelet runs: plegd writes its pods' whole status, as on such a node. Both
# halves of plegd are shown as they happen: the pod lifecycle events of `plegd watch` (stdout), and
# the pod status `plegd run --status-mode full` writes for the same pods, as `kubectl get pods
# --watch` follows it (`kubectl:` lines on stderr, beside the workload's own `workload:` lines).
# Then plegd as the DaemonSet the node's kubelet runs (deploy/conditions), its condition on a pod
# the kubelet runs (`daemonset:` lines); and with its readiness gate (components/readiness-gate),
# one backend crash behind each of two Services, one gated and one not, while requests go through
# kube-proxy: how many failed, and for how long (`traffic:` lines). The cluster is tests/cluster/cluster.sh's: one started by
# hand is stopped at the end. Cleans up when it ends. Needs root, Go and Rust; the first run builds
# Kubernetes (about 11 minutes on 2 cores) and plegd (a few minutes), later runs take under a minute.
# PLEGD_CONTAINERD_VERSION=2.3|2.4|1.7|1.6|system picks one explicitly.
#
#   bash deploy/demo.sh            # text events
#   OUTPUT=json bash deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUTPUT=${OUTPUT:-text}
NODE=demo-node
command -v cargo >/dev/null || { echo "demo: cargo is needed (https://rustup.rs)" >&2; exit 1; }
bash tests/containerd/containerd.sh install
if [ -z "${PLEGD_CONTAINERD_VERSION:-}" ]; then
  case "$(containerd --version 2>/dev/null | awk '{print $3}' | sed 's/^v//')" in
    2.[3-9].*|2.[1-9][0-9].*|[3-9].*) PLEGD_CONTAINERD_VERSION=system ;;
    *) PLEGD_CONTAINERD_VERSION=2.3 ;;
  esac
fi
export PLEGD_CONTAINERD_VERSION
case "$PLEGD_CONTAINERD_VERSION" in
  system) where="this machine's" ;;
  2.3|2.4) where="built from its Go module once, about 2 minutes" ;;
  *) where="fetched from Debian's packages, unpacked privately" ;;
esac
echo "== containerd: $PLEGD_CONTAINERD_VERSION ($where)" >&2
echo "== Kubernetes v1.37.2 (tests/cluster/cluster.sh; the first run builds it, about 11 minutes)" >&2
bash tests/cluster/cluster.sh build
# A debug build: it is made in about half the time of a release build, and the demo asks little of
# it. For a node, build with `cargo build --release`.
echo "== building plegd (debug; the first build takes a few minutes)" >&2
cargo build --workspace --bins
# What cargo built (CARGO_TARGET_DIR when set).
BIN=$(realpath -m "${CARGO_TARGET_DIR:-target}")/debug
SOCK=$(bash tests/containerd/containerd.sh start)
RUN=$(mktemp -d)
PIDS=()
KUBECTL() { bash tests/cluster/cluster.sh kubectl "$@"; }
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash tests/cluster/cluster.sh stop
  bash tests/containerd/containerd.sh stop
  rm -rf "$RUN"
}
trap cleanup EXIT
ADMIN=$(bash tests/cluster/cluster.sh start | tail -1)
# A plegd install left in a cluster started by hand (its conditions-only admission policy would
# refuse full mode's writes) is removed first; one with the readiness gate is released by this
# plegd (`plegd release-gates`) before it goes.
PLEGD_BINARY="$BIN/plegd" bash tests/cluster/cluster.sh remove-plegd >/dev/null
# plegd's rights in full mode (deploy/full without its DaemonSet: no kubelet runs demo-node), the
# node object, and plegd's token bound to it (its node-name claim is what the admission policy checks).
KUBECTL kustomize deploy/full | KUBECTL apply -f - --dry-run=client -o json \
  | jq '{apiVersion: "v1", kind: "List", items: [(.items // [.])[] | select(.kind != "DaemonSet")]}' >"$RUN/full.json"
KUBECTL apply -f "$RUN/full.json" >/dev/null
echo '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "'"$NODE"'"}}' | KUBECTL apply -f - >/dev/null
TOKEN=$(KUBECTL -n plegd-system create token plegd --bound-object-kind Node --bound-object-name "$NODE" --duration 1h)
jq -n --arg server "$(KUBECTL config view --raw -o jsonpath='{.clusters[0].cluster.server}')" \
  --arg ca "$(KUBECTL config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')" --arg token "$TOKEN" \
  '{apiVersion: "v1", kind: "Config", clusters: [{name: "demo", cluster: {server: $server, "certificate-authority": $ca}}],
    users: [{name: "plegd", user: {token: $token}}], contexts: [{name: "plegd", context: {cluster: "demo", user: "plegd"}}],
    "current-context": "plegd"}' >"$RUN/plegd.kubeconfig"
KUBECTL create namespace plegd-test >/dev/null

echo "== kubectl get pods --namespace plegd-test --watch --output-watch-events" >&2
# Each line as kubectl prints it, prefixed; its column widths are its own.
KUBECTL get pods --namespace plegd-test --watch --output-watch-events > >(sed -u 's/^/  kubectl:  /' >&2) 2>&1 &
PIDS+=($!)
echo "== plegd run --status-mode full --node-name $NODE --kubeconfig $RUN/plegd.kubeconfig (its log: $RUN/plegd-run.log)" >&2
"$BIN/plegd" run --status-mode full --node-name "$NODE" --kubeconfig "$RUN/plegd.kubeconfig" \
  --cri-socket "$SOCK" --api-socket off --metrics-address off >"$RUN/plegd-run.log" 2>&1 &
PIDS+=($!)
echo "== plegd watch --cri-socket $SOCK --relist-period 1s --output $OUTPUT" >&2
"$BIN/plegd" watch --cri-socket "$SOCK" --relist-period 1s --output "$OUTPUT" &
PIDS+=($!)
sleep 1
status=0
"$BIN/workload" "$SOCK" "$ADMIN" || status=$?
sleep 2
if [ "$status" != 0 ]; then
  echo "== the workload failed; plegd run's log:" >&2
  tail -n 40 "$RUN/plegd-run.log" >&2
  exit "$status"
fi
for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done

# Part two: plegd as the DaemonSet the node's kubelet runs (deploy/conditions, its image made from
# this build), writing its condition beside the kubelet's status. demo-node goes first: no kubelet
# would ever run the DaemonSet's pod there.
KUBECTL delete node "$NODE" >/dev/null
echo "== kubectl apply -k deploy/conditions: plegd beside the kubelet (its image from target/debug/plegd)" >&2
PLEGD_BINARY="$BIN/plegd" bash tests/cluster/cluster.sh start --plegd conditions >/dev/null
KUBELET_NODE=$(KUBECTL -n plegd-system get pods -o jsonpath='{.items[0].spec.nodeName}')
KUBECTL create namespace demo >/dev/null
KUBECTL -n demo run failer --image=plegd.test/busybox:1 --image-pull-policy=Never --restart=Never \
  --overrides='{"spec": {"nodeName": "'"$KUBELET_NODE"'"}}' --command -- sh -c 'sleep 2; exit 3' >/dev/null
echo "== kubectl -n demo run failer -- sh -c 'sleep 2; exit 3' (on $KUBELET_NODE, run by its kubelet)" >&2
KUBECTL -n demo wait pod/failer --for=condition=plegd.io/ContainersRunning=False --timeout=90s >/dev/null
KUBECTL -n demo wait pod/failer --for=jsonpath='{.status.phase}'=Failed --timeout=90s >/dev/null
KUBECTL -n demo get pod failer -o jsonpath='{range .status.conditions[*]}  daemonset:  {.type}={.status} {.reason} {.message}{"\n"}{end}' >&2
echo "  daemonset:  phase=$(KUBECTL -n demo get pod failer -o jsonpath='{.status.phase}') (the kubelet's)" >&2

# One backend crash behind a Service, with plegd's readiness gate and without.
mkdir -p "$RUN/gate"
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n' \
  "$(realpath --relative-to "$RUN/gate" deploy/conditions)" "$(realpath --relative-to "$RUN/gate" deploy/components/readiness-gate)" \
  >"$RUN/gate/kustomization.yaml"
echo "== plegd with its readiness gate (components/readiness-gate); two Services of 2 HTTP backends each, one in a namespace labelled plegd.io/readiness-gate=enabled" >&2
PLEGD_BINARY="$BIN/plegd" bash tests/cluster/cluster.sh start --plegd "$RUN/gate" >/dev/null
for ns in gated plain; do
  KUBECTL create namespace "traffic-$ns" >/dev/null
  [ "$ns" = plain ] || KUBECTL label namespace "traffic-$ns" plegd.io/readiness-gate=enabled >/dev/null
  for i in 1 2; do
    port=$(( $([ "$ns" = gated ] && echo 8100 || echo 8200) + i ))
    KUBECTL -n "traffic-$ns" run "backend-$i" --image=plegd.test/busybox:1 --image-pull-policy=Never --labels=app=backend \
      --port="$port" --overrides='{"spec": {"nodeName": "'"$KUBELET_NODE"'", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "backend-'"$i"'", "image": "plegd.test/busybox:1", "imagePullPolicy": "Never",
          "ports": [{"name": "http", "containerPort": '"$port"'}],
          "command": ["sh", "-c", "mkdir -p /tmp/www && hostname > /tmp/www/id && exec busybox httpd -f -p '"$port"' -h /tmp/www"]}]}}' >/dev/null
  done
  KUBECTL -n "traffic-$ns" create service clusterip backend --tcp=80:http >/dev/null
  KUBECTL -n "traffic-$ns" patch service backend --type=merge -p '{"spec": {"selector": {"app": "backend"}}}' >/dev/null
done
for ns in gated plain; do KUBECTL -n "traffic-$ns" wait pod --all --for=condition=Ready --timeout=90s >/dev/null; done
# Requests through each Service's ClusterIP, one connection each, for 8 s; a line per request:
# the time in ms and curl's HTTP code (000: refused or timed out).
send() {
  local ip=$1 end=$(( $(date +%s%3N) + 8000 ))
  while [ "$(date +%s%3N)" -lt "$end" ]; do
    echo "$(date +%s%3N) $(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://$ip/id")"
  done
}
for ns in gated plain; do
  ip=$(KUBECTL -n "traffic-$ns" get service backend -o jsonpath='{.spec.clusterIP}')
  send "$ip" >"$RUN/traffic-$ns.log" &
  PIDS+=($!)
done
sleep 3
killed=$(date +%s%3N)
pkill -KILL -f 'busybox httpd -f -p 8101 ' ; pkill -KILL -f 'busybox httpd -f -p 8201 '
echo "  traffic:  killed one backend of each Service (SIGKILL), requests going on" >&2
wait "${PIDS[@]: -2}" 2>/dev/null || true
for ns in gated plain; do
  awk -v killed="$killed" -v ns="$ns" '$2 != "200" && $1 >= killed { n++; if (!first) first = $1; last = $1 }
    END { printf "  traffic:  %s Service: %d requests failed, the last %d ms after the kill\n", (ns == "gated" ? "gated" : "ungated"), n, (n ? last - killed : 0) }' \
    "$RUN/traffic-$ns.log" >&2
done
echo "  traffic:  (the gated endpoint left as soon as plegd saw the exit; the other at the kubelet's next relist)" >&2
exit 0
