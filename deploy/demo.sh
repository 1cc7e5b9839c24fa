#!/usr/bin/env bash
# plegd's main job, end to end on this machine: bring up an isolated containerd — the machine's own
# when it is 2.x, else containerd 2.1 from Debian unstable's package unpacked privately (the
# machine's packages untouched) — and an apiserver built from Kubernetes' own code on etcd
# (tests/apiserver; Go, etcd and kubectl from Debian's packages, unpacked privately), and run a short
# pod workload through them. Both halves of plegd are shown as they happen: the pod lifecycle events
# of `plegd watch` (stdout), and the pod status `plegd run --status-mode full` writes for the same
# pods, as `kubectl get pods --watch` follows it (`kubectl:` lines on stderr, beside the workload's
# own `workload:` lines). Cleans up when it ends. Needs root and Rust; the first run downloads and
# builds for a few minutes.
# PLEGD_CONTAINERD_VERSION=2.1|1.7|1.6|system picks one explicitly.
#
#   bash deploy/demo.sh            # text events
#   OUTPUT=json bash deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUTPUT=${OUTPUT:-text}
NODE=demo-node
# The apiserver's own state and ports: not those of `tests/apiserver/apiserver.sh start` by hand.
export PLEGD_APISERVER_DIR=${PLEGD_APISERVER_DIR:-/dev/shm/plegd-demo-apiserver}
export PLEGD_APISERVER_PORT=${PLEGD_APISERVER_PORT:-16443}
export PLEGD_ETCD_PORT=${PLEGD_ETCD_PORT:-23890}
export PLEGD_NODE_NAME=$NODE

command -v cargo >/dev/null || { echo "demo: cargo is needed (https://rustup.rs)" >&2; exit 1; }
bash tests/containerd/containerd.sh install
if [ -z "${PLEGD_CONTAINERD_VERSION:-}" ]; then
  case "$(containerd --version 2>/dev/null | awk '{print $3}' | sed 's/^v//')" in
    2.*) PLEGD_CONTAINERD_VERSION=system ;;
    *) PLEGD_CONTAINERD_VERSION=2.1 ;;
  esac
fi
export PLEGD_CONTAINERD_VERSION
echo "== containerd: $PLEGD_CONTAINERD_VERSION ($( [ "$PLEGD_CONTAINERD_VERSION" = system ] && echo "this machine's" || echo "fetched from Debian's packages, unpacked privately"))" >&2
echo "== the apiserver: k8s.io/apiserver 1.36 on etcd (tests/apiserver/apiserver.sh)" >&2
bash tests/apiserver/apiserver.sh build
# A debug build: it is made in about half the time of a release build, and the demo asks little of
# it. For a node, build with `cargo build --release`.
echo "== building plegd (debug; the first build takes a few minutes)" >&2
cargo build --workspace --bins
SOCK=$(bash tests/containerd/containerd.sh start)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash tests/apiserver/apiserver.sh stop
  bash tests/containerd/containerd.sh stop
}
trap cleanup EXIT
bash tests/apiserver/apiserver.sh start >/dev/null
RUN=$PLEGD_APISERVER_DIR
KUBECTL() { bash tests/apiserver/apiserver.sh kubectl "$@"; }
KUBECTL create namespace plegd-test >/dev/null

echo "== kubectl get pods --namespace plegd-test --watch --output-watch-events" >&2
# Each line as kubectl prints it, prefixed; its column widths are its own.
KUBECTL get pods --namespace plegd-test --watch --output-watch-events > >(sed -u 's/^/  kubectl:  /' >&2) 2>&1 &
PIDS+=($!)
echo "== plegd run --status-mode full --node-name $NODE --kubeconfig $RUN/plegd.kubeconfig (its log: $RUN/plegd-run.log)" >&2
target/debug/plegd run --status-mode full --node-name "$NODE" --kubeconfig "$RUN/plegd.kubeconfig" \
  --cri-socket "$SOCK" --api-socket off --metrics-address off >"$RUN/plegd-run.log" 2>&1 &
PIDS+=($!)
echo "== plegd watch --cri-socket $SOCK --relist-period 1s --output $OUTPUT" >&2
target/debug/plegd watch --cri-socket "$SOCK" --relist-period 1s --output "$OUTPUT" &
PIDS+=($!)
sleep 1
status=0
target/debug/workload "$SOCK" "$RUN/admin.kubeconfig" || status=$?
sleep 2
if [ "$status" != 0 ]; then
  echo "== the workload failed; plegd run's log:" >&2
  tail -n 40 "$RUN/plegd-run.log" >&2
fi
exit "$status"
