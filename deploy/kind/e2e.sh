#!/usr/bin/env bash
# plegd's end-to-end suite (tests/cluster_e2e.rs) in a kind cluster: the same assertions the tests
# make on tests/cluster/cluster.sh's node built from Kubernetes' own code, on kind's node (a
# container around the same processes) where Docker is available.
#
#   bash deploy/kind/e2e.sh [run TEST...]   # create the cluster, build and load the images, run the
#                                       # suite (or the tests named), delete the cluster
#
# Needs docker, kind (v0.31.0 or newer), kubectl, jq, Go (the Prometheus operator's CRDs come from
# its Go module) and Rust, and network access for kind's node image (deploy/kind/cluster.yaml, two
# nodes of kindest/node). PLEGD_BINARY names the plegd binary the image holds (else a release
# build).
#
# PLEGD_KIND_LOCAL=1: on a machine with no Docker engine and no registry (what tests/run.sh runs),
# everything is the project's own: a Docker engine of the tests (tests/kind/docker.sh, removed
# afterwards), kind from Debian, and a node image built here from Kubernetes' own code
# (tests/kind/node-image.sh; tests/kind/cluster.yaml: one node, no kube-proxy or kindnetd, which are
# images to pull, so plegd reaches the apiserver at the node's address).
#
# The suite calls this script back with the commands it needs of a cluster, the same as
# tests/cluster/cluster.sh's:
#
#   deploy/kind/e2e.sh start [--plegd DIR]   # prints the kubeconfig's path last; with --plegd, the
#                                             # kustomization DIR installed (the one before removed)
#   deploy/kind/e2e.sh kubectl ARGS...
#   deploy/kind/e2e.sh restart containerd|kubelet   # on every node (systemd inside kind's nodes)
#   deploy/kind/e2e.sh restart etcd|kube-apiserver  # the control plane's static pod, started again
#   deploy/kind/e2e.sh compact                      # etcd compacted to its newest revision
#   deploy/kind/e2e.sh remove-plegd
#   deploy/kind/e2e.sh import-binary BINARY IMAGE   # BINARY and its libraries as IMAGE, on every node
#   deploy/kind/e2e.sh install-crds YAML            # the Prometheus operator's CRDs YAML's kinds need
#   deploy/kind/e2e.sh mounted-token POD_UID VOLUME # the token the kubelet mounted in a pod
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${CLUSTER:-plegd-e2e}
STATE=${PLEGD_KIND_STATE:-$REPO/target/kind-e2e}
KUBECONFIG_FILE="$STATE/kubeconfig"
LOCAL=${PLEGD_KIND_LOCAL:-}
case "$LOCAL" in
  ""|1) ;;
  *) echo "e2e.sh: error: PLEGD_KIND_LOCAL must be 1 or unset, not '$LOCAL'" >&2; exit 2 ;;
esac

log() { echo "e2e.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# install_crds YAML: the Prometheus operator's CRDs of the kinds the install has (tests/cluster/cluster.sh
# finds them).
install_crds() {
  local f crds
  crds=$(bash "$REPO/tests/cluster/cluster.sh" operator-crds "$1") || die "the Prometheus operator's CRDs are not at hand"
  for f in $crds; do
    k apply --server-side -f "$f" >&2
    # Polled, not `kubectl wait`: a definition just made has no conditions yet, and kubectl wait
    # then fails at once ("accessor error: <nil>") instead of waiting.
    local deadline=$((SECONDS + 60))
    until [ "$(k get -f "$f" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ]; do
      [ "$SECONDS" -lt "$deadline" ] || die "$(basename "$f") not Established within 60 s"
      sleep 0.2
    done
  done
}

# without_kube_proxy FILE: the install in FILE, its DaemonSet told the apiserver's address on the
# node (the service's address needs kube-proxy, which the local cluster has not).
without_kube_proxy() {
  local host
  host=$(k get nodes -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}')
  k create --dry-run=client -o json -f "$1" \
    | jq -s --arg host "$host" '{apiVersion: "v1", kind: "List", items: [.[] | if .kind == "List" then .items[] else . end]}
        | .items |= map(if .kind == "DaemonSet" then .spec.template.spec.containers |= map(.env = ((.env // [])
            + [{name: "KUBERNETES_SERVICE_HOST", value: $host}, {name: "KUBERNETES_SERVICE_PORT", value: "6443"}])) else . end)'
}

deploy_plegd() {
  local dir=$1
  mkdir -p "$STATE"
  k kustomize "$dir" >"$STATE/plegd.yaml.new"
  # Before the objects are read: kubectl knows no kind whose definition is not installed.
  install_crds "$STATE/plegd.yaml.new"
  if [ -n "$LOCAL" ]; then
    without_kube_proxy "$STATE/plegd.yaml.new" >"$STATE/plegd.json" || die "could not read $dir's objects"
    mv "$STATE/plegd.json" "$STATE/plegd.yaml.new"
  fi
  if [ -f "$STATE/plegd.yaml" ] && ! cmp -s "$STATE/plegd.yaml" "$STATE/plegd.yaml.new"; then
    k delete -f "$STATE/plegd.yaml" --ignore-not-found --wait=true --timeout=180s >&2
  fi
  mv "$STATE/plegd.yaml.new" "$STATE/plegd.yaml"
  k apply -f "$STATE/plegd.yaml" >&2
  k -n plegd-system rollout status ds/plegd --timeout=180s >&2
}

case "${1:-}" in
  start)
    [ -f "$KUBECONFIG_FILE" ] || die "no kind cluster of this script's (run bash deploy/kind/e2e.sh)"
    if [ "${2:-}" = --plegd ]; then deploy_plegd "${3:?--plegd needs a kustomization directory}"; fi
    echo "$KUBECONFIG_FILE"
    ;;
  kubectl) shift; k "$@" ;;
  # helm (tests/helm/helm.sh) on the kind cluster; the chart's default image, plegd:dev, is the one
  # loaded into kind's node.
  helm)
    shift
    helm=$(bash "$REPO/tests/helm/helm.sh" install)
    case "${1:-}" in
      # The local cluster has no kube-proxy: the chart's objects as deploy_plegd moves an overlay's.
      install|upgrade)
        if [ -n "$LOCAL" ]; then
          # shellcheck source=tests/helm/post-renderer.sh
          . "$REPO/tests/helm/post-renderer.sh"
          helm_post_renderer "$helm" || die "helm: its post-renderer could not be set up (tests/helm/helm.sh plugins)"
          set -- "$@" "${POST_RENDERER[@]}" --post-renderer-args "$0" --post-renderer-args post-render
        fi ;;
    esac
    "$helm" --kubeconfig "$KUBECONFIG_FILE" "$@"
    ;;
  post-render)
    cat >"$STATE/helm.yaml"
    without_kube_proxy "$STATE/helm.yaml" | jq -c '.items[]' | sed 's/^/---\n/' || die "post-render: could not read helm's objects"
    ;;
  restart)
    case "${2:-}" in
      # On every node: the suite's node is one of them.
      containerd|kubelet)
        for n in $(kind get nodes --name "$CLUSTER"); do docker exec "$n" systemctl restart "$2"; done
        k wait --for condition=Ready nodes --all --timeout=120s >&2 ;;
      # Static pods of the control-plane node: their container stopped, the kubelet starts a new one.
      etcd|kube-apiserver)
        cp=$(kind get nodes --name "$CLUSTER" | grep control-plane | head -1)
        old=$(docker exec "$cp" crictl ps --name "^$2\$" -q)
        [ -n "$old" ] || die "restart: no running $2 container on $cp"
        # shellcheck disable=SC2086 # one id per word
        docker exec "$cp" crictl stop $old >&2
        # The kubelet starts a new container of the static pod; then the apiserver answers again.
        new=$old
        for _ in $(seq 1 120); do
          new=$(docker exec "$cp" crictl ps --name "^$2\$" -q 2>/dev/null || true)
          [ -z "$new" ] || [ "$new" = "$old" ] || break
          sleep 1
        done
        [ -n "$new" ] && [ "$new" != "$old" ] || die "restart: no new $2 container 120 s after the old one stopped"
        for _ in $(seq 1 120); do k get --raw /readyz >/dev/null 2>&1 && break; sleep 1; done
        k get --raw /readyz >/dev/null || die "restart: the apiserver is not ready 120 s after $2 restarted" ;;
      *) die "restart: containerd, kubelet, etcd or kube-apiserver" ;;
    esac
    ;;
  compact)
    # etcd's own API over its client TLS, from the control-plane node (curl and jq are in kind's
    # node images): its revision, then a compaction to it.
    cp=$(kind get nodes --name "$CLUSTER" | grep control-plane | head -1)
    docker exec "$cp" sh -c '
      set -e
      e() { curl -sf --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/apiserver-etcd-client.crt \
        --key /etc/kubernetes/pki/apiserver-etcd-client.key "https://127.0.0.1:2379/v3/kv/$1" -d "$2"; }
      rev=$(e range "{\"key\":\"AA==\"}" | jq -r .header.revision)
      e compaction "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
      echo "etcd compacted to revision $rev"' >&2 || die "compact: etcd refused"
    ;;
  mounted-token)
    [ $# -eq 3 ] || die "usage: $0 mounted-token POD_UID VOLUME"
    # The file itself, not the `token` link beside it: the kubelet gives the link to the pod's
    # user (65532) in a sticky, world-writable directory, which fs.protected_symlinks forbids even
    # root to follow.
    for node in $(kind get nodes --name "$CLUSTER"); do
      docker exec "$node" cat "/var/lib/kubelet/pods/$2/volumes/kubernetes.io~projected/$3/..data/token" 2>/dev/null && exit 0
    done
    die "no token of volume $3 in pod $2 on any node"
    ;;
  remove-plegd)
    if [ -f "$STATE/plegd.yaml" ]; then k delete -f "$STATE/plegd.yaml" --ignore-not-found --wait=true >&2; rm -f "$STATE/plegd.yaml"; fi
    ;;
  install-crds) [ $# -eq 2 ] || die "usage: $0 install-crds YAML"; install_crds "$2" ;;
  import-binary)
    [ $# -eq 3 ] || die "usage: $0 import-binary BINARY IMAGE"
    mkdir -p "$STATE"
    bash "$REPO/tests/containerd/containerd.sh" binary-archive "$2" "$3" "$STATE/binary.tar"
    kind load image-archive "$STATE/binary.tar" --name "$CLUSTER" >&2
    ;;
  ""|run)
    [ "${1:-}" != run ] || shift
    if [ -n "$LOCAL" ] && [ -z "${PLEGD_KIND_IN_ENGINE:-}" ]; then
      # The engine of the tests, its node image, and this script again inside the engine's
      # network namespace (where kind's node and its published apiserver port are).
      # What the suite fetches from the Go module proxy, fetched here: the engine's network
      # namespace has no way out.
      printf 'kind: PodMonitor\n---\nkind: PrometheusRule\n---\nkind: Prometheus\n' >"$STATE.kinds.yaml"
      bash "$REPO/tests/cluster/cluster.sh" operator-crds "$STATE.kinds.yaml" >/dev/null
      rm -f "$STATE.kinds.yaml"
      bash "$REPO/tests/kind/docker.sh" start >/dev/null
      trap 'bash "$REPO/tests/kind/docker.sh" stop' EXIT
      # Built outside the namespace (it fetches from Debian's archive and the Go module proxy);
      # it reaches the engine through its socket.
      bash "$REPO/tests/kind/node-image.sh" build >/dev/null
      PATH="$(bash "$REPO/tests/cluster/cluster.sh" bin):$PATH" PLEGD_KIND_IN_ENGINE=1 \
        bash "$REPO/tests/kind/docker.sh" run bash "$0" run "$@"
      exit
    fi
    for tool in docker kind kubectl jq go cargo python3 readelf; do
      command -v "$tool" >/dev/null || die "$tool is needed"
    done
    mkdir -p "$STATE"
    config="$REPO/deploy/kind/cluster.yaml"
    [ -z "$LOCAL" ] || config="$REPO/tests/kind/cluster.yaml"
    started=$SECONDS
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    kind create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$KUBECONFIG_FILE" --wait 180s
    trap 'kind delete cluster --name "$CLUSTER"; rm -rf "$STATE"' EXIT
    # CoreDNS' image is not in the local node image; nothing in the suite resolves names.
    [ -z "$LOCAL" ] || k -n kube-system scale deployment coredns --replicas=0 >&2
    # plegd's image (deploy/image/image.sh's, of this machine's architecture), and the suite's
    # test image (busybox and a pause binary, as the local cluster's containerd has it), loaded
    # into the node: nothing is pulled.
    binary=${PLEGD_BINARY:-}
    if [ -z "$binary" ]; then
      (cd "$REPO" && cargo build --locked --release --bin plegd)
      binary="$(cd "$REPO" && realpath -m "${CARGO_TARGET_DIR:-target}")/release/plegd"
    fi
    bash "$REPO/deploy/image/image.sh" assemble --out "$STATE/image" --name plegd:dev \
      "$(dpkg --print-architecture)=$binary" >/dev/null
    kind load image-archive "$STATE/image/plegd.oci.tar" --name "$CLUSTER"
    kind load image-archive "$(bash "$REPO/tests/containerd/containerd.sh" image)" --name "$CLUSTER"
    log "kind cluster ready with plegd's image in $((SECONDS - started)) s"
    cd "$REPO"
    if ! cargo nextest --version >/dev/null 2>&1; then cargo install cargo-nextest --locked --no-default-features --features default-no-update; fi
    # The tests share the one cluster and take its lock: one at a time, so that none counts its
    # wait for the lock against its 15 minutes (.config/nextest.toml).
    PLEGD_BINARY=$binary PLEGD_CLUSTER_E2E=1 PLEGD_CLUSTER_SCRIPT="$REPO/deploy/kind/e2e.sh" \
      cargo nextest run --no-fail-fast --test-threads 1 --test cluster_e2e "$@"
    ;;
  *) echo "usage: $0 [run] [TEST...] | start [--plegd DIR] | kubectl ARGS... | helm ARGS... | restart COMPONENT | compact | remove-plegd | import-binary BINARY IMAGE | install-crds YAML | mounted-token POD_UID VOLUME" >&2; exit 2 ;;
esac
