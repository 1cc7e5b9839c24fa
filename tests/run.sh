#!/usr/bin/env bash
# Runs every plegd test: unit tests, fake-CRI tests and the real-containerd tests.
# Installs what it needs on a fresh Debian machine (as root): containerd, runc, CNI plugins,
# busybox-static and protoc from the distribution's packages, then starts an isolated containerd
# (tests/containerd/containerd.sh), runs the suite against it and cleans up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ]; then
  bash tests/containerd/containerd.sh install
  # Start fresh so that no pod of an earlier run is seen.
  bash tests/containerd/containerd.sh stop >/dev/null 2>&1 || true
  PLEGD_TEST_CRI_SOCKET=$(bash tests/containerd/containerd.sh start)
  export PLEGD_TEST_CRI_SOCKET
  export PLEGD_REQUIRE_CONTAINERD=1
  trap 'bash tests/containerd/containerd.sh stop' EXIT
  # Offline validation of deploy/ against the Kubernetes schemas.
  if ! command -v kubernetes-validate >/dev/null; then
    python3 -m pip install -q --disable-pip-version-check kubernetes-validate
    # Wherever this Python puts scripts (pyenv shims may not be refreshed by `python3 -m pip`).
    PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
    export PATH
    hash -r
  fi
else
  echo "!!! not root on Linux: the real-containerd tests will be SKIPPED (they say so in their output) !!!" >&2
  command -v protoc >/dev/null || { echo "tests/run.sh: protoc is needed to build (Debian: protobuf-compiler)" >&2; exit 1; }
fi

# The image that runs plegd inside containerd is built from the release binary.
cargo build --release --bin plegd
export PLEGD_RELEASE_BINARY="$PWD/target/release/plegd"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi

# Fuzz targets (CRI answer decoding and conversion, status patches), 60 s each.
bash tests/fuzz/run.sh 60
