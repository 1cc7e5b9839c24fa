#!/usr/bin/env bash
# Runs every plegd check and test: Kubernetes' own kube-apiserver (and the rest of a node) built
# from k8s.io/kubernetes v1.37.2, clippy and the docs (warnings as errors), the dependency graph
# (cargo deny), unit tests, fake-CRI tests and the real-containerd tests, the latter on containerd
# 2.3 (the default), again on 2.4 and 1.7 (PLEGD_CONTAINERD_VERSIONS="2.3 2.4 1.7" to change) and on
# CRI-O 1.34, plegd as a DaemonSet in a real
# one-node cluster (tests/cluster_e2e.rs) and beside its kubelet (tests/kubelet_parity.rs), the
# latter two beside kubelets 1.35.4 and 1.36.3 too (PLEGD_KUBELET_VERSIONS), and its
# image for amd64 and arm64 (tests/image.rs).
# Installs what it needs on a fresh Debian machine (as root): runc, CNI plugins, busybox-static and
# protoc from the distribution's packages, containerd 2.3 and 2.4 (and the runc they pin) built from
# their Go modules once, 1.7 from Debian 13's package unpacked privately; starts an isolated containerd (tests/containerd/containerd.sh) for
# each version, runs the suites against it and cleans up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase is announced with the time since the run began, so that a run's log says where its
# minutes went (docs/testing.md's figures come from it).
phase() {
  echo "=== $* (at $((SECONDS / 60)) min $((SECONDS % 60)) s) ===" >&2
}

# A fresh clone builds everything once: incremental state would only take disk (gigabytes) there.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# CI's clones share one cargo target directory on the machine (tests/ci-target.sh): the
# dependencies are built once, a clone builds only plegd's own packages.
if [ -n "${CI:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ] && [ "$(id -u)" = 0 ]; then
  # shellcheck source=tests/ci-target.sh
  source tests/ci-target.sh
fi
TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-target}")
# The builds, the test containerds and the cluster need about 15 GiB; say so at once when they may
# not fit, rather than fail later on a short write.
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((15 * 1024 * 1024)) ]; then
  echo "tests/run.sh: warning: $((free_kib / 1024 / 1024)) GiB free where the tests build; they need about 15 GiB" >&2
fi

if [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ]; then
  read -r -a VERSIONS <<<"${PLEGD_CONTAINERD_VERSIONS:-2.3 2.4 1.7}"
  [ ${#VERSIONS[@]} -gt 0 ] || { echo "tests/run.sh: PLEGD_CONTAINERD_VERSIONS is empty (e.g. \"2.3 2.4 1.7\")" >&2; exit 2; }
  bash tests/containerd/containerd.sh install
  # Prometheus and promtool (Debian's, unpacked privately) for tests/prometheus.rs.
  bash tests/prometheus/prometheus.sh install >/dev/null
  # Start fresh so that no pod of an earlier run is seen.
  bash tests/containerd/containerd.sh stop >/dev/null 2>&1 || true
  export PLEGD_CONTAINERD_VERSION=${VERSIONS[0]}
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
  VERSIONS=()
  echo "!!! not root on Linux: the real-containerd tests will be SKIPPED (they say so in their output) !!!" >&2
  command -v protoc >/dev/null || { echo "tests/run.sh: protoc is needed to build (Debian: protobuf-compiler)" >&2; exit 1; }
fi

# Kubernetes v1.37.2 (kube-apiserver, kubelet, ... and kubectl) and etcd, built from their own
# modules through the Go module proxy (about 11 minutes once; cached by version): every test that
# talks to an apiserver talks to this kube-apiserver.
phase "Kubernetes v1.37.2 and etcd (tests/cluster/cluster.sh build)"
bash tests/cluster/cluster.sh build
# The kubelets of the two minors before the control plane's, for a node midway through a fleet's
# upgrade (PLEGD_KUBELET_VERSIONS="1.35.4 1.36.3" to change; empty: none): only the kubelet is built
# per version (cached).
read -r -a OLDER_KUBELETS <<<"${PLEGD_KUBELET_VERSIONS-1.35.4 1.36.3}"
for kubelet in "${OLDER_KUBELETS[@]}"; do
  phase "the kubelet v$kubelet (tests/cluster/cluster.sh build)"
  PLEGD_CLUSTER_KUBELET_VERSION=$kubelet bash tests/cluster/cluster.sh build
done
# Helm 4 (v4.3.2) and the Helm 3 still tested beside it (v3.21.4), each from its own module (about 2
# minutes once; cached by version), for tests/helm.rs and the chart's install on the cluster.
phase "Helm (tests/helm/helm.sh install)"
bash tests/helm/helm.sh install >/dev/null
PLEGD_HELM_VERSION=v3.21.4 bash tests/helm/helm.sh install >/dev/null

# plegd for arm64, cross-built (Rust's standard library from source), for tests/image.rs: the image
# index of both architectures, the arm64 one run under qemu-user, and its SBOM. Built unoptimized,
# as the tests build plegd for this machine: what the tests ask of it (that plegd builds for arm64
# and runs there) does not depend on the optimization, which took most of the build's time
# (docs/testing.md; deploy/image/image.sh build makes the release image, optimized).
if [ ${#VERSIONS[@]} -gt 0 ]; then
  phase "plegd for arm64 (deploy/image/image.sh cross-binary)"
  bash deploy/image/image.sh tools
  PLEGD_ARM64_BINARY=$(bash deploy/image/image.sh cross-binary dev)
  export PLEGD_ARM64_BINARY PLEGD_REQUIRE_IMAGE=1
fi

# Lints: clippy with warnings as errors over every target, and the API docs with broken links refused.
phase "clippy and docs"
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p plegd

# The dependency graph against deny.toml: licenses, a second major of a crate, sources; and
# RustSec's advisories where its database (github.com/RustSec/advisory-db) can be fetched.
# cargo-deny is installed from crates.io when missing (about 4 minutes, once).
phase "cargo deny"
if ! cargo deny --version >/dev/null 2>&1; then
  cargo install cargo-deny --locked
fi
cargo deny --locked check licenses bans sources
if timeout 120 cargo deny fetch db >/dev/null 2>&1; then
  cargo deny --locked --offline check advisories
else
  echo "!!! RustSec's advisory database cannot be fetched from here: dependency advisories NOT checked (cargo deny fetch db) !!!" >&2
fi

# The suites run under cargo-nextest (each test a process of its own); installed from crates.io
# when missing (a few minutes, once), without its self-update (`cargo nextest self update`, which
# fetches from nextest's own site and which no test uses): 4 min 15 s to build on 2 cores against
# 5 min 29 s with it (docs/testing.md).
if ! cargo nextest --version >/dev/null 2>&1; then
  phase "installing cargo-nextest"
  cargo install cargo-nextest --locked --no-default-features --features default-no-update
fi
# Twice as many tests at once as the machine has cores: the suites spend most of their time waiting
# on real components (a container's sleep, an apiserver's start, a watch), and measured on 2 cores
# the real-runtime suites kept the cores 44 % busy two at a time (docs/testing.md). The one-node
# cluster's tests take their cluster's lock and run one at a time (`run_cluster_tests`: one test
# at a time, so that none counts its wait for the lock against its 15 minutes).
export NEXTEST_TEST_THREADS=${NEXTEST_TEST_THREADS:-$((2 * $(nproc)))}
run_tests() {
  cargo nextest run --no-fail-fast "$@"
}
run_cluster_tests() {
  NEXTEST_TEST_THREADS=1 run_tests "$@"
}

phase "every test, real containerd ${VERSIONS[0]:-(none)}"
run_tests --workspace
# The binary those tests built and ran (plegd_in_containerd, systemd_unit), kept aside for the
# clusters below: a later build of the tests may write over target/debug/plegd.
CLUSTER_PLEGD=$TARGET_DIR/cluster-plegd/plegd
mkdir -p "$(dirname "$CLUSTER_PLEGD")"
cp "$TARGET_DIR/debug/plegd" "$CLUSTER_PLEGD.tmp" && mv "$CLUSTER_PLEGD.tmp" "$CLUSTER_PLEGD"

# plegd installed as deploy/ installs it into a real one-node cluster (kube-apiserver,
# controller-manager, scheduler, kubelet on a containerd of its own), from this checkout's binary:
# tests/cluster_e2e.rs and the readiness gate (tests/readiness_gate.rs), one test at a
# time; then plegd's status against the kubelet's on that node (tests/kubelet_parity.rs), on
# containerd 2.3; and a smoke of it on each other 2.x version (the DaemonSet with every component;
# the parity battery, four and a half minutes, runs on 2.3 only, and 1.7 runs the real-runtime
# suites below, not the cluster: docs/testing.md says why). The cluster is removed
# afterwards. The binary is the one the tests above built (unoptimized): an optimized build of
# its own took 5 min 47 s on a new machine for the same code, and what the clusters check (what
# plegd writes and when, beside the kubelet) does not wait on plegd's CPU; the benchmarks measure
# the optimized build (docs/testing.md).
if [ ${#VERSIONS[@]} -gt 0 ]; then
  phase "plegd in a real Kubernetes 1.37 node (tests/cluster_e2e.rs, tests/kubelet_parity.rs)"
  trap 'bash tests/cluster/cluster.sh stop; bash tests/containerd/containerd.sh stop' EXIT
  PLEGD_BINARY=$CLUSTER_PLEGD PLEGD_CLUSTER_E2E=1 run_cluster_tests --test cluster_e2e --test kubelet_parity --test readiness_gate
  bash tests/cluster/cluster.sh stop
  # The same suite in kind, on a Docker engine of the tests' own with a node image built here
  # (deploy/kind/e2e.sh, PLEGD_KIND_LOCAL=1): in CI's time, what kind's node has of its own — the
  # DaemonSet under kind's kubelet with every component (conditions, Events), and containerd
  # restarted under systemd in the node's container under plegd; shadow mode, the same there as on
  # the cluster above, runs with the whole suite: `PLEGD_KIND_LOCAL=1 bash deploy/kind/e2e.sh run`.
  phase "plegd in kind (deploy/kind/e2e.sh, part of tests/cluster_e2e.rs)"
  PLEGD_KIND_LOCAL=1 PLEGD_BINARY=$CLUSTER_PLEGD bash deploy/kind/e2e.sh run \
    conditions_with_every_component containerd_restarted_under_plegd
  # The DaemonSet with every component on the other nodes CI tries: each other containerd 2.x
  # and each older kubelet under the 1.37 control plane (a fleet midway through an upgrade), paired
  # so that each runs once — 2.4 beside the kubelet 1.36.3, 2.3 beside 1.35.4 — rather than each
  # pair (docs/testing.md: the cluster's start, not the test, is what costs).
  OTHER_CONTAINERDS=()
  for version in "${VERSIONS[@]:1}"; do
    case "$version" in 2.*) OTHER_CONTAINERDS+=("$version") ;; esac
  done
  NODES=()
  for ((i = 0; i < ${#OTHER_CONTAINERDS[@]} || i < ${#OLDER_KUBELETS[@]}; i++)); do
    k=$((${#OLDER_KUBELETS[@]} - 1 - i))
    NODES+=("${OTHER_CONTAINERDS[i]:-${VERSIONS[0]}}/$([ "$k" -ge 0 ] && echo "${OLDER_KUBELETS[k]}" || echo default)")
  done
  for node in "${NODES[@]}"; do
    containerd=${node%/*} kubelet=${node#*/}
    [ "$kubelet" = default ] && kubelet=
    phase "plegd in a node on containerd $containerd beside the kubelet ${kubelet:-of the control plane} (the DaemonSet with every component)"
    PLEGD_BINARY=$CLUSTER_PLEGD PLEGD_CLUSTER_CONTAINERD_VERSION=$containerd PLEGD_CLUSTER_KUBELET_VERSION=$kubelet \
      PLEGD_CLUSTER_E2E=1 run_cluster_tests --test cluster_e2e -E 'test(=conditions_with_every_component)'
    bash tests/cluster/cluster.sh stop
  done
fi

# The real-containerd suites again on each other version.
REAL_SUITES=(--test real_containerd --test triggers --test status_e2e --test plegd_in_containerd --test watch_cli)
for version in "${VERSIONS[@]:1}"; do
  phase "real-containerd suites on containerd $version"
  bash tests/containerd/containerd.sh stop >/dev/null
  export PLEGD_CONTAINERD_VERSION=$version
  PLEGD_TEST_CRI_SOCKET=$(bash tests/containerd/containerd.sh start)
  export PLEGD_TEST_CRI_SOCKET
  run_tests "${REAL_SUITES[@]}"
done

# The same suites against CRI-O v1.34.0, the one version the Go module proxy serves (built from its
# module by tests/crio/crio.sh once, about 3 minutes; cached), with Debian 12's conmon and runc.
# What is containerd's own (its events service, an instance killed under plegd) says so and is not
# run there; every difference between the runtimes is asserted per runtime (PLEGD_TEST_RUNTIME).
if [ ${#VERSIONS[@]} -gt 0 ]; then
  phase "real-runtime suites on CRI-O (tests/crio/crio.sh)"
  trap 'bash tests/crio/crio.sh stop; bash tests/containerd/containerd.sh stop' EXIT
  PLEGD_TEST_CRI_SOCKET=$(bash tests/crio/crio.sh start) PLEGD_TEST_RUNTIME=cri-o run_tests "${REAL_SUITES[@]}"
  bash tests/crio/crio.sh stop
fi

# Fuzz targets (CRI answer decoding and conversion, status patches), 30 s each: the minute the
# readiness gate's cluster suite needed came from here (docs/testing.md); longer by hand.
phase "fuzz targets (tests/fuzz/run.sh)"
bash tests/fuzz/run.sh 30
phase "every check passed"
