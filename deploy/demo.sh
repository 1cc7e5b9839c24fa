#!/usr/bin/env bash
# plegd's main job, end to end on this machine: bring up an isolated containerd — the machine's own
# when it is 2.x, else containerd 2.1 from Debian unstable's package unpacked privately (the
# machine's packages untouched) — and run a short pod workload through it. Both halves of plegd are
# shown as they happen: the pod lifecycle events of `plegd watch` (stdout), and the pod status that
# `plegd run --status-mode full` writes to a test apiserver for the same pods (`status:` lines on
# stderr, beside the workload's own `workload:` lines). Cleans up when it ends. Needs root and Rust.
# PLEGD_CONTAINERD_VERSION=2.1|1.7|1.6|system picks one explicitly.
#
#   bash deploy/demo.sh            # text events
#   OUTPUT=json bash deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUTPUT=${OUTPUT:-text}

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
# A debug build: it is made in about half the time of a release build, and the demo asks little of
# it. For a node, build with `cargo build --release`.
echo "== building plegd (debug; the first build takes a few minutes)" >&2
cargo build --workspace --bins
SOCK=$(bash tests/containerd/containerd.sh start)

cleanup() {
  [ -n "${PLEGD_PID:-}" ] && kill "$PLEGD_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  bash tests/containerd/containerd.sh stop
}
trap cleanup EXIT

echo "== plegd watch --cri-socket $SOCK --relist-period 1s --output $OUTPUT" >&2
target/debug/plegd watch --cri-socket "$SOCK" --relist-period 1s --output "$OUTPUT" &
PLEGD_PID=$!
sleep 1
target/debug/workload "$SOCK" target/debug/plegd
sleep 2
