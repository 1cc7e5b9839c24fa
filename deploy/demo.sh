#!/usr/bin/env bash
# plegd's main job, end to end on this machine: bring up an isolated containerd (installing it from
# the distribution's packages if missing), start `plegd watch` against it, run a short pod workload,
# and show every pod lifecycle event as it happens. Cleans up when it ends. Needs root and Rust.
#
#   bash deploy/demo.sh            # text events
#   OUTPUT=json bash deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUTPUT=${OUTPUT:-text}

command -v cargo >/dev/null || { echo "demo: cargo is needed (https://rustup.rs)" >&2; exit 1; }
bash tests/containerd/containerd.sh install
echo "== building plegd (release)" >&2
cargo build --release --quiet --bin plegd --example workload
SOCK=$(bash tests/containerd/containerd.sh start)

cleanup() {
  [ -n "${PLEGD_PID:-}" ] && kill "$PLEGD_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  bash tests/containerd/containerd.sh stop
}
trap cleanup EXIT

echo "== plegd watch --cri-socket $SOCK --relist-period 1s --output $OUTPUT" >&2
target/release/plegd watch --cri-socket "$SOCK" --relist-period 1s --output "$OUTPUT" &
PLEGD_PID=$!
sleep 1
target/release/examples/workload "$SOCK"
sleep 2
