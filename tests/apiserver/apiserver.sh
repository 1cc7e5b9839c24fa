#!/usr/bin/env bash
# A test apiserver built from Kubernetes' own code (k8s.io/apiserver 1.36 on etcd), for plegd's tests
# and demo.
#
#   tests/apiserver/apiserver.sh install   # Go, the Kubernetes libraries and etcd, unpacked privately
#   tests/apiserver/apiserver.sh build     # install, then build the server (cached)
#   tests/apiserver/apiserver.sh start     # build, start etcd and the server; prints the kubeconfig path
#   tests/apiserver/apiserver.sh stop      # stop both, remove the state
#
# The Go toolchain (Debian unstable's golang-1.27), Kubernetes 1.36's Go libraries (golang-k8s-*-dev)
# and etcd-server come from Debian's unstable suite through a private package list, unpacked with
# dpkg -x under $PLEGD_PACKAGES_DIR/apiserver; nothing is installed machine-wide.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/support/private-apt.sh
. "$HERE/../support/private-apt.sh"
PACKAGES_DIR=${PLEGD_PACKAGES_DIR:-/var/lib/plegd-test}
ROOT="$PACKAGES_DIR/apiserver"
BUILD="$ROOT/build"
BIN="$BUILD/bin/plegd-test-apiserver"
K8S_VERSION=1.36.4
GO_PACKAGES=(golang-go golang-k8s-apiserver-dev golang-k8s-api-dev golang-k8s-apimachinery-dev
  golang-k8s-client-go-dev golang-k8s-component-base-dev golang-k8s-component-helpers-dev
  golang-k8s-kube-openapi-dev etcd-server kubectl)

log() { echo "apiserver.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

install() {
  if [ -x "$ROOT/root/usr/bin/kubectl" ] && [ -f "$ROOT/root/.complete" ]; then return; fi
  log "fetching Go, Kubernetes' Go libraries and etcd from Debian unstable ($(debian_mirror))"
  private_apt_update "$ROOT" sid
  local deps
  deps=$(private_apt "$ROOT" apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances --no-pre-depends "${GO_PACKAGES[@]}" | grep -E '^[a-z0-9]' | sort -u \
    | grep -E '^(golang-|etcd-server$|kubectl$)')
  # shellcheck disable=SC2086
  (cd "$ROOT/deb" && private_apt "$ROOT" apt-get -qq download $deps)
  rm -rf "$ROOT/root"
  mkdir -p "$ROOT/root"
  for deb in "$ROOT"/deb/*.deb; do dpkg-deb -x "$deb" "$ROOT/root"; done
  touch "$ROOT/root/.complete"
}

goenv() {
  env GOROOT="$ROOT/root/usr/lib/go-1.27" GO111MODULE=off GOPATH="$BUILD:$ROOT/root/usr/share/gocode" \
    GOTOOLCHAIN=local GOCACHE="$ROOT/gocache" GOFLAGS= CGO_ENABLED=0 \
    PATH="$ROOT/root/usr/lib/go-1.27/bin:$PATH" "$@"
}

# The packages whose OpenAPI definitions the server serves (and builds managedFields from).
OPENAPI_PACKAGES=(k8s.io/api/core/v1 k8s.io/api/events/v1 k8s.io/api/admissionregistration/v1
  k8s.io/api/authentication/v1 k8s.io/api/authorization/v1
  k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version
  k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/util/intstr)

# build: the server binary at $BIN, rebuilt when a source file here is newer.
build() {
  install
  # One build at a time (test processes may ask for it together).
  exec 9>"$ROOT/build.lock"
  flock 9
  local stale=0
  [ -x "$BIN" ] || stale=1
  for f in "$HERE"/*.go "$HERE/apiserver.sh"; do [ "$f" -nt "$BIN" ] && stale=1; done
  [ "$stale" = 1 ] || return 0
  log "building the test apiserver (k8s.io/apiserver $K8S_VERSION; about 2 min the first time)"
  local pkg="$BUILD/src/plegd.io/testapiserver"
  rm -rf "$pkg"
  mkdir -p "$pkg/openapi" "$BUILD/bin"
  cp "$HERE"/*.go "$pkg/"
  if [ ! -x "$BUILD/bin/openapi-gen" ]; then
    goenv go build -o "$BUILD/bin/openapi-gen" k8s.io/kube-openapi/cmd/openapi-gen
  fi
  touch "$BUILD/boilerplate.txt"
  (cd "$pkg" && goenv "$BUILD/bin/openapi-gen" --go-header-file "$BUILD/boilerplate.txt" \
    --output-dir "$pkg/openapi" --output-pkg plegd.io/testapiserver/openapi --output-file zz_generated.openapi.go \
    --report-filename /dev/null "${OPENAPI_PACKAGES[@]}")
  local v=k8s.io/component-base/version
  (cd "$pkg" && goenv go build -o "$BIN.tmp" -ldflags "-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=${K8S_VERSION%%.*} -X $v.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)" .)
  mv "$BIN.tmp" "$BIN"
}

RUN=${PLEGD_APISERVER_DIR:-/dev/shm/plegd-apiserver}
PORT=${PLEGD_APISERVER_PORT:-6443}
ETCD_PORT=${PLEGD_ETCD_PORT:-23790}
NODE=${PLEGD_NODE_NAME:-$(hostname)}
DEPLOY=$(cd "$HERE/../../deploy" && pwd)

wait_for() { # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what did not come up within ${seconds}s (logs in $RUN)"
    sleep 0.1
  done
}

token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# kubeconfig NAME TOKEN: $RUN/NAME.kubeconfig for the identity TOKEN stands for.
kubeconfig() {
  cat >"$RUN/$1.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: plegd-test
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority: $RUN/apiserver.crt
users:
- name: $1
  user:
    token: $2
contexts:
- name: $1
  context: {cluster: plegd-test, user: $1}
current-context: $1
KUBECONFIG
}

# start: etcd (data on tmpfs) and the server on loopback, with four identities, each with a
# kubeconfig in $RUN: admin (system:masters), plegd (plegd's service account, its token bound to
# node $NODE), plegd-other-node (the same account bound to another node), kubelet (system:node:$NODE).
# RBAC: deploy/'s rbac*.yaml files and tests/apiserver/rbac-kubelet.yaml. Prints the admin kubeconfig's path.
start() {
  build
  stop >/dev/null 2>&1 || true
  mkdir -p "$RUN"
  "$ROOT/root/usr/bin/etcd" --name plegd-test --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "plegd-test=http://127.0.0.1:$((ETCD_PORT + 1))" --log-level warn >"$RUN/etcd.log" 2>&1 &
  echo $! >"$RUN/etcd.pid"
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  local admin plegd other kubelet
  admin=$(token) plegd=$(token) other=$(token) kubelet=$(token)
  cat >"$RUN/tokens.json" <<JSON
{"tokens": [
  {"token": "$admin", "user": "plegd-test-admin", "groups": ["system:masters"]},
  {"token": "$plegd", "user": "system:serviceaccount:plegd-system:plegd", "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"], "extra": {"authentication.kubernetes.io/node-name": ["$NODE"]}},
  {"token": "$other", "user": "system:serviceaccount:plegd-system:plegd", "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"], "extra": {"authentication.kubernetes.io/node-name": ["$NODE-other"]}},
  {"token": "$kubelet", "user": "system:node:$NODE", "groups": ["system:nodes"]}
]}
JSON
  local rbac
  rbac=$( (find "$DEPLOY" -name 'rbac*.yaml' | sort; echo "$HERE/rbac-kubelet.yaml") | paste -sd, -)
  "$BIN" --etcd-servers "http://127.0.0.1:$ETCD_PORT" --secure-port "$PORT" --cert-dir "$RUN" \
    --token-file "$RUN/tokens.json" --rbac "$rbac" ${PLEGD_APISERVER_ARGS:-} >"$RUN/apiserver.log" 2>&1 &
  echo $! >"$RUN/apiserver.pid"
  kubeconfig admin "$admin"
  kubeconfig plegd "$plegd"
  kubeconfig plegd-other-node "$other"
  kubeconfig kubelet "$kubelet"
  wait_for "the test apiserver" 60 curl -sf --cacert "$RUN/apiserver.crt" -H "Authorization: Bearer $admin" "https://127.0.0.1:$PORT/readyz"
  log "serving on https://127.0.0.1:$PORT (etcd on 127.0.0.1:$ETCD_PORT); kubeconfigs in $RUN"
  echo "$RUN/admin.kubeconfig"
}

stop() {
  local pid
  for name in apiserver etcd; do
    if [ -f "$RUN/$name.pid" ]; then
      pid=$(cat "$RUN/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$RUN"
}

# unit: the Go unit tests of the ported pieces.
unit() {
  build
  (cd "$BUILD/src/plegd.io/testapiserver" && PLEGD_DEPLOY_DIR="$DEPLOY" goenv go test ./ 2>&1)
}

case "${1:-}" in
  install) install ;;
  build) build ;;
  unit) unit ;;
  start) start ;;
  stop) stop ;;
  kubectl) shift; exec "$ROOT/root/usr/bin/kubectl" --kubeconfig "$RUN/admin.kubeconfig" "$@" ;;
  *) die "usage: $0 install|build|unit|start|stop|kubectl ARGS" ;;
esac
