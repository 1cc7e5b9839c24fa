#!/usr/bin/env bash
# A one-node Kubernetes cluster built from Kubernetes' own code, on this machine, for plegd's
# tests against a real kubelet.
#
#   tests/cluster/cluster.sh modules  # only resolve and download the Go modules the build needs
#   tests/cluster/cluster.sh build    # kube-apiserver, kube-controller-manager, kube-scheduler,
#                                     # kubelet, kubectl and etcd, built once per version (cached)
#   tests/cluster/cluster.sh bin      # build, then print the directory of the binaries
#   tests/cluster/cluster.sh start [--plegd OVERLAY]
#                                     # build, then certificates, etcd, the control plane, a
#                                     # containerd of its own and the kubelet; waits for the node
#                                     # to be Ready; prints the admin kubeconfig's path last.
#                                     # --plegd: plegd beside the kubelet, as deploy/OVERLAY installs
#                                     # it (conditions, full, shadow, or a kustomization directory),
#                                     # its image made offline from PLEGD_BINARY
#                                     # (target/release/plegd)
#   tests/cluster/cluster.sh stop     # stop everything, remove its processes, mounts, cgroups,
#                                     # interfaces, sysctls and state
#   tests/cluster/cluster.sh kubectl ARGS...   # kubectl as the cluster's admin
#   tests/cluster/cluster.sh restart COMPONENT  # containerd (killed, its pods live on, started
#                                     # again), kubelet, kube-apiserver, etcd,
#                                     # kube-controller-manager or kube-scheduler (stopped and
#                                     # started with the same flags); returns when it serves again
#   tests/cluster/cluster.sh remove-plegd  # the plegd install removed, the cluster left running
#   tests/cluster/cluster.sh helm ARGS...  # helm (tests/helm/helm.sh) as the cluster's admin;
#                                     # install and upgrade run PLEGD_BINARY's image, the chart's
#                                     # objects moved onto this cluster's layout (post-render)
#   tests/cluster/cluster.sh operator-crds INSTALL_YAML  # the Prometheus operator's CRD files the
#                                     # YAML file needs (PodMonitor, PrometheusRule, Prometheus)
#   tests/cluster/cluster.sh install-crds YAML  # those CRDs installed, and Established
#   tests/cluster/cluster.sh mounted-token POD_UID VOLUME  # the token the kubelet mounted in a pod
#   tests/cluster/cluster.sh import-binary BINARY IMAGE  # an image of BINARY and the libraries
#                                     # it loads, in the node's containerd (a client the test
#                                     # image's busybox is not: curl, for TLS)
#   tests/cluster/cluster.sh compact  # etcd compacted to its newest revision: watches older than
#                                     # that are answered 410 Gone
#
# The Kubernetes commands come from the k8s.io/kubernetes module at PLEGD_K8S_VERSION (1.37.2)
# through the Go module proxy, in one binary (tests/cluster/kubernetes/main.go) with a symlink per
# command, built as Kubernetes' own release is (CGO_ENABLED=0, -trimpath, its build tags, the
# version stamped); etcd at the version kubeadm of that release names, from
# go.etcd.io/etcd/server/v3 (tests/cluster/etcd/main.go). Modules, build cache and binaries stay
# under $PLEGD_CLUSTER_DIR (/var/lib/plegd-test/cluster); the running cluster under its run/.
#
# The kubelet's version: PLEGD_CLUSTER_KUBELET_VERSION (1.35.4, 1.36.3 or 1.37.2; the control
# plane's by default): a node of an older minor under the 1.37 control plane, as a fleet midway
# through an upgrade runs. Only the kubelet is built per version (from k8s.io/kubernetes at that
# version, cached beside the rest); a cluster running another kubelet is started anew by start.
# The kubelet's feature gates: PLEGD_CLUSTER_KUBELET_FEATURE_GATES (NAME=true|false,...), e.g.
# EventedPLEG=true; a running cluster's kubelet is restarted with other ones by start.
# plegd's log level (--plegd): PLEGD_CLUSTER_PLEGD_LOG_LEVEL (its PLEGD_LOG_LEVEL, e.g.
# info,plegd::triggers=debug,plegd::pleg=debug), else the install's own.
#
# The node: named PLEGD_NODE_NAME (default: the host name), its IP (PLEGD_CLUSTER_NODE_IP,
# 10.236.0.1) on an interface of its own, plegdk8s-node (traffic stays on this machine; the kubelet
# refuses a loopback node IP), pods on the CNI bridge plegdk8s0 (10.236.1.0/24, the bridge their
# gateway: the kubelet probes them, they reach the node's IP), services in 10.236.128.0/24 through
# kube-proxy (iptables mode, its defaults) in this machine's network namespace. containerd is
# tests/containerd/containerd.sh's 2.3 (PLEGD_CLUSTER_CONTAINERD_VERSION=2.4 or 1.7 for those) with a directory of its own ($PLEGD_CLUSTER_DIR/containerd),
# never the one the other tests use. The kubelet writes sysctls and creates cgroups
# (/plegd-cluster in each hierarchy) on the machine: run this on CI and test machines only.
# Needs root and Linux.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PLEGD_IMAGE=plegd.test/plegd:dev
K8S_VERSION=${PLEGD_K8S_VERSION:-1.37.2}
CLUSTER=${PLEGD_CLUSTER_DIR:-/var/lib/plegd-test/cluster}
BIN="$CLUSTER/bin/v$K8S_VERSION"
# The kubelet versions a node may run under this control plane (the supported skew: three minors).
KUBELET_VERSIONS=(1.35.4 1.36.3 1.37.2)
KUBELET_VERSION=${PLEGD_CLUSTER_KUBELET_VERSION:-$K8S_VERSION}
RUN="$CLUSTER/run"
NODE=${PLEGD_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
NODE_IP=${PLEGD_CLUSTER_NODE_IP:-10.236.0.1}
NODE_LINK=plegdk8s-node
POD_BRIDGE=plegdk8s0
POD_SUBNET=10.236.1.0/24
SERVICE_RANGE=10.236.128.0/24
SERVICE_IP=10.236.128.1
APISERVER_PORT=${PLEGD_CLUSTER_APISERVER_PORT:-16443}
ETCD_PORT=${PLEGD_CLUSTER_ETCD_PORT:-24790}
CGROUP_ROOT=/plegd-cluster
CONTAINERD=(env PLEGD_CONTAINERD_DIR="$CLUSTER/containerd" PLEGD_CONTAINERD_VERSION="${PLEGD_CLUSTER_CONTAINERD_VERSION:-2.3}"
  PLEGD_CNI_BRIDGE="$POD_BRIDGE" PLEGD_CNI_SUBNET="$POD_SUBNET" PLEGD_CNI_GATEWAY=true "$HERE/../containerd/containerd.sh")
# The Prometheus operator whose CRDs an install with components/pod-monitor or components/alerts
# needs (the newest version of its module the Go module proxy serves).
PROMETHEUS_OPERATOR_VERSION=${PLEGD_PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl pod-status-served)
# The sysctls the kubelet sets when it does not only check them (protectKernelDefaults: false), and
# the forwarding the CNI bridge plugin turns on for the pods' gateway, and kube-proxy's route_localnet.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet)
# Directories the kubelet creates whatever its root directory (its device plugin socket, its
# container log links): removed by stop when they did not exist before start.
MACHINE_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /usr/libexec/kubernetes /etc/kubernetes /run/kubernetes)
# Where the CNI plugins cache each sandbox's result (containerd gives them no other directory); other
# containerd instances share it, so only this cluster's sandboxes' files go.
CNI_CACHE=/var/lib/cni
# The chains the kubelet creates: to tell the iptables mode in use, and KUBE-FIREWALL (jumped to
# from INPUT and OUTPUT) against martian packets to 127.0.0.0/8.
IPTABLES_CHAINS=(mangle:KUBE-IPTABLES-HINT mangle:KUBE-KUBELET-CANARY nat:KUBE-KUBELET-CANARY filter:KUBE-KUBELET-CANARY
  filter:KUBE-FIREWALL)

log() { echo "cluster.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
  [ "$(uname -s)" = Linux ] || die "a kubelet needs Linux"
  [ "$(id -u)" = 0 ] || die "a kubelet needs root (run as root)"
}

# ---------------------------------------------------------------------------------------------
# build

# goenv COMMAND...: Go with this directory's own module and build caches. The toolchain is the
# machine's when it is new enough for the go.mod at hand, else the one go.mod names, through the
# module proxy (GOTOOLCHAIN=auto).
goenv() {
  env GOMODCACHE="$CLUSTER/gomod" GOCACHE="$CLUSTER/gocache" GOFLAGS="-modcacherw -buildvcs=false" \
    GOTOOLCHAIN=auto CGO_ENABLED=0 GO111MODULE=on "$@"
}

# download MODULE@VERSION: the module into the cache; prints its go.mod's path.
download() {
  local json
  json=$(goenv go mod download -json "$1") || die "the Go module proxy refused $1 (go mod download -json $1): $json"
  if echo "$json" | grep -q '"Error"'; then
    die "the Go module proxy refused $1 (go mod download -json $1): $(echo "$json" | grep '"Error"')"
  fi
  echo "$json" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p'
}

# go_directives GOMOD: its go and godebug lines (a godebug block too).
go_directives() {
  grep -E '^go [0-9]' "$1"
  sed -n '/^godebug (/,/^)/p; /^godebug [^(]/p' "$1"
}

# etcd_version: the etcd kubeadm of this release deploys (DefaultEtcdVersion, "3.7.0-0" -> 3.7.0).
etcd_version() {
  local dir="$CLUSTER/gomod/k8s.io/kubernetes@v$K8S_VERSION"
  [ -d "$dir" ] || download "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  sed -n 's/^\s*DefaultEtcdVersion = "\([0-9.]*\)-[0-9]*"$/\1/p' "$dir/cmd/kubeadm/app/constants/constants.go" \
    | grep . || die "no DefaultEtcdVersion in k8s.io/kubernetes@v$K8S_VERSION's cmd/kubeadm/app/constants/constants.go"
}

# The Kubernetes module: k8s.io/kubernetes with each of its staging modules (which its own go.mod
# replaces with ./staging/src/..., a replacement a dependent module does not inherit) replaced by
# the published tag of this release.
kubernetes_module() {
  local src=$1
  mkdir -p "$src"
  kubernetes_gomod "$K8S_VERSION" plegd.test/cluster/kubernetes >"$src/go.mod"
  grep -q "=> k8s.io/api v0\." "$src/go.mod" || die "no staging modules found in k8s.io/kubernetes v$K8S_VERSION's go.mod"
  cp "$HERE/kubernetes/main.go" "$src/main.go"
  log "resolving k8s.io/kubernetes v$K8S_VERSION's modules ($(grep -c ' => ' "$src/go.mod") staging modules)"
  (cd "$src" && goenv go mod tidy) || die "go mod tidy failed in $src (run it there to see which module the proxy refuses)"
}

# kubernetes_gomod VERSION MODULE: a go.mod requiring k8s.io/kubernetes at VERSION, each of its
# staging modules replaced by the published tag of that release.
kubernetes_gomod() {
  local version=$1 module=$2 gomod staging_version
  gomod=$(download "k8s.io/kubernetes@v$version")
  staging_version="v0.${version#*.}"
  echo "module $module"
  echo
  go_directives "$gomod"
  echo
  echo "require k8s.io/kubernetes v$version"
  echo
  echo "replace ("
  sed -n '/^replace (/,/^)/p' "$gomod" | awk -v v="$staging_version" \
    '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }'
  echo ")"
}

etcd_module() {
  local src=$1 version=$2 gomod
  gomod=$(download "go.etcd.io/etcd/server/v3@v$version")
  mkdir -p "$src"
  {
    echo "module plegd.test/cluster/etcd"
    echo
    go_directives "$gomod"
    echo
    echo "require go.etcd.io/etcd/server/v3 v$version"
  } >"$src/go.mod"
  cp "$HERE/etcd/main.go" "$src/main.go"
  log "resolving go.etcd.io/etcd/server/v3 v$version's modules"
  (cd "$src" && goenv go mod tidy) || die "go mod tidy failed in $src (run it there to see which module the proxy refuses)"
}

# The -X flags of Kubernetes' hack/lib/version.sh: without them every command reports
# v0.0.0-master, and so does the node's kubeletVersion. The build date is the release's commit
# time, as the module proxy records it.
version_ldflags() {
  local version=${1:-$K8S_VERSION} info major minor date flags="" pkg
  info="$CLUSTER/gomod/cache/download/k8s.io/kubernetes/@v/v$version.info"
  date=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
  [ -n "$date" ] || date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  major=${version%%.*}
  minor=$(echo "$version" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  echo "$flags"
}

# modules: the Kubernetes and etcd modules resolved and downloaded, nothing compiled.
modules() {
  local etcd
  etcd=$(etcd_version)
  kubernetes_module "$CLUSTER/src/kubernetes-v$K8S_VERSION"
  etcd_module "$CLUSTER/src/etcd-v$etcd" "$etcd"
  # go mod tidy fetches go.mod files only where it can; the build needs every package's source.
  (cd "$CLUSTER/src/kubernetes-v$K8S_VERSION" && goenv go mod download) || die "go mod download failed in $CLUSTER/src/kubernetes-v$K8S_VERSION"
  (cd "$CLUSTER/src/etcd-v$etcd" && goenv go mod download) || die "go mod download failed in $CLUSTER/src/etcd-v$etcd"
}

# sources: what the binaries are built from here, as .complete records it.
sources() { cat "$HERE/kubernetes/main.go" "$HERE/etcd/main.go" | sha256sum | cut -d' ' -f1; }

# built: the binaries of this version exist, from these sources.
built() {
  [ -f "$BIN/.complete" ] && [ -x "$BIN/kubernetes" ] && [ -x "$BIN/etcd" ] || return 1
  [ "$(cat "$BIN/.complete")" = "$(sources)" ] || return 1
  local c
  for c in "${COMMANDS[@]}"; do [ -L "$BIN/$c" ] || return 1; done
}

# One build or download at a time: two Go builds of this size at once only slow each other down.
build_lock() {
  mkdir -p "$CLUSTER"
  exec 8>"$CLUSTER/build.lock"
  flock -w 3600 8 || die "waited an hour for $CLUSTER/build.lock: another build of Kubernetes holds it"
}

build() {
  build_lock
  if built; then build_kubelet; return; fi
  command -v go >/dev/null || die "no go on PATH (Kubernetes $K8S_VERSION builds with Go 1.26 or newer, or with the toolchain its go.mod names)"
  local start=$SECONDS etcd src tags=selinux,notest,grpcnotrace
  etcd=$(etcd_version)
  src="$CLUSTER/src/kubernetes-v$K8S_VERSION"
  modules
  log "modules ready after $((SECONDS - start))s; building (about 11 min on 2 cores the first time)"
  mkdir -p "$BIN"
  rm -f "$BIN/.complete"
  local t=$SECONDS
  (cd "$src" && goenv nice -n 10 go build -trimpath -tags "$tags" -ldflags "-s -w$(version_ldflags)" \
    -o "$BIN/kubernetes.tmp" .) || die "building k8s.io/kubernetes v$K8S_VERSION failed (in $src)"
  mv "$BIN/kubernetes.tmp" "$BIN/kubernetes"
  log "built $BIN/kubernetes in $((SECONDS - t))s ($(du -h "$BIN/kubernetes" | cut -f1))"
  t=$SECONDS
  (cd "$CLUSTER/src/etcd-v$etcd" && goenv nice -n 10 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .) \
    || die "building etcd v$etcd failed (in $CLUSTER/src/etcd-v$etcd)"
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "built $BIN/etcd in $((SECONDS - t))s ($(du -h "$BIN/etcd" | cut -f1))"
  local c
  for c in "${COMMANDS[@]}"; do ln -sfn kubernetes "$BIN/$c"; done
  check_versions "$etcd"
  sources >"$BIN/.complete"
  log "built Kubernetes v$K8S_VERSION and etcd v$etcd in $((SECONDS - start))s: $BIN"
  build_kubelet
}

# build_kubeadm: kubeadm v$K8S_VERSION from the same sources and flags as the cluster's binary, for
# kind's node image (tests/kind/node-image.sh); once, cached beside it. Prints its path.
build_kubeadm() {
  build >&2
  if [ -x "$BIN/kubeadm" ] && [ "$BIN/kubeadm" -nt "$BIN/.complete" ]; then echo "$BIN/kubeadm"; return; fi
  local t=$SECONDS
  log "building kubeadm v$K8S_VERSION (about 3 min on 2 cores the first time)"
  # The cluster binary's module (its replaces of Kubernetes' staging modules), in a copy of its own:
  # kubeadm needs a few modules more, which -mod=mod adds there.
  local src="$CLUSTER/src/kubeadm-v$K8S_VERSION"
  rm -rf "$src"
  mkdir -p "$src"
  cp "$CLUSTER/src/kubernetes-v$K8S_VERSION/go.mod" "$CLUSTER/src/kubernetes-v$K8S_VERSION/go.sum" "$src/"
  (cd "$src" && goenv nice -n 10 go build -mod=mod -trimpath -tags selinux,notest,grpcnotrace \
    -ldflags "-s -w$(version_ldflags)" -o "$BIN/kubeadm.tmp" k8s.io/kubernetes/cmd/kubeadm) >&2 \
    || die "building kubeadm v$K8S_VERSION failed"
  mv "$BIN/kubeadm.tmp" "$BIN/kubeadm"
  [ "$("$BIN/kubeadm" version -o short)" = "v$K8S_VERSION" ] || die "kubeadm version says $("$BIN/kubeadm" version -o short)"
  log "built $BIN/kubeadm in $((SECONDS - t))s"
  echo "$BIN/kubeadm"
}

# kubelet_bin: the kubelet the node runs: the cluster's own, or one of another version
# (PLEGD_CLUSTER_KUBELET_VERSION) built by build_kubelet.
kubelet_bin() {
  if [ "$KUBELET_VERSION" = "$K8S_VERSION" ]; then echo "$BIN/kubelet"; else echo "$CLUSTER/bin/kubelet-v$KUBELET_VERSION/kubelet"; fi
}

# check_kubelet_version: PLEGD_CLUSTER_KUBELET_VERSION is one a node may run under this control plane.
check_kubelet_version() {
  local v
  for v in "${KUBELET_VERSIONS[@]}"; do [ "$v" = "$KUBELET_VERSION" ] && return; done
  die "PLEGD_CLUSTER_KUBELET_VERSION=$KUBELET_VERSION: must be one of ${KUBELET_VERSIONS[*]} (a kubelet of the three minors up to the control plane's $K8S_VERSION)"
}

# build_kubelet: the kubelet of PLEGD_CLUSTER_KUBELET_VERSION, where it is not the control plane's:
# cmd/kubelet of k8s.io/kubernetes at that version, built as the cluster's binary is (the same tags,
# flags and version stamp), once per version.
build_kubelet() {
  check_kubelet_version
  [ "$KUBELET_VERSION" = "$K8S_VERSION" ] && return
  local bin src dir t=$SECONDS
  bin=$(kubelet_bin)
  dir=$(dirname "$bin")
  if [ -x "$bin" ] && [ "$("$bin" --version 2>&1)" = "Kubernetes v$KUBELET_VERSION" ]; then return; fi
  src="$CLUSTER/src/kubelet-v$KUBELET_VERSION"
  log "building the kubelet v$KUBELET_VERSION (its module's own dependencies; a few minutes on 2 cores the first time)"
  rm -rf "$src"
  mkdir -p "$src" "$dir"
  kubernetes_gomod "$KUBELET_VERSION" plegd.test/cluster/kubelet >"$src/go.mod"
  grep -q "=> k8s.io/api v0\." "$src/go.mod" || die "no staging modules found in k8s.io/kubernetes v$KUBELET_VERSION's go.mod"
  (cd "$src" && goenv nice -n 10 go build -mod=mod -trimpath -tags selinux,notest,grpcnotrace \
    -ldflags "-s -w$(version_ldflags "$KUBELET_VERSION")" -o "$bin.tmp" k8s.io/kubernetes/cmd/kubelet) \
    || die "building the kubelet v$KUBELET_VERSION failed (in $src)"
  mv "$bin.tmp" "$bin"
  [ "$("$bin" --version 2>&1)" = "Kubernetes v$KUBELET_VERSION" ] || die "the kubelet built says '$("$bin" --version 2>&1)', not 'Kubernetes v$KUBELET_VERSION'"
  log "built $bin in $((SECONDS - t))s"
}

# check_versions ETCD_VERSION: each command reports the version it was built as.
check_versions() {
  local c out
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
    out=$("$BIN/$c" --version 2>&1) || die "$c --version failed: $out"
    [ "$out" = "Kubernetes v$K8S_VERSION" ] || die "$c --version says '$out', not 'Kubernetes v$K8S_VERSION'"
  done
  out=$("$BIN/kubectl" version --client 2>&1) || die "kubectl version --client failed: $out"
  echo "$out" | grep -qx "Client Version: v$K8S_VERSION" || die "kubectl version --client says '$out'"
  out=$("$BIN/etcd" --version 2>&1) || die "etcd --version failed: $out"
  echo "$out" | grep -qx "etcd Version: $1" || die "etcd --version says '$out', not etcd Version: $1"
}

# ---------------------------------------------------------------------------------------------
# certificates

# ossl ARGS...: openssl, its complaint shown when it fails.
ossl() {
  local err
  err=$(openssl "$@" 2>&1 >/dev/null) || die "openssl $1 failed: $err"
}

# cert NAME SUBJECT [SANS [CA]]: $RUN/pki/NAME.{key,crt}, signed by the cluster's CA (or pki/CA).
cert() {
  local name=$1 subject=$2 sans=${3:-} ca=${4:-ca} pki="$RUN/pki" ext
  ext=$(mktemp)
  {
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage = serverAuth, clientAuth"
      echo "subjectAltName = $sans"
    else
      echo "extendedKeyUsage = clientAuth"
    fi
  } >"$ext"
  ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$name.key" \
    -subj "$subject" -out "$pki/$name.csr"
  ossl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$ext" -out "$pki/$name.crt"
  rm -f "$ext" "$pki/$name.csr"
}

certificates() {
  local pki="$RUN/pki"
  mkdir -p "$pki"
  chmod 700 "$pki"
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/ca.key" \
    -subj "/CN=plegd-cluster-ca" -days 30 -sha256 -out "$pki/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kube-proxy "/CN=system:kube-proxy"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert kubelet-server "/CN=$NODE" "IP:$NODE_IP,DNS:$NODE"
  cert controller-manager-server "/CN=kube-controller-manager" "IP:127.0.0.1,DNS:localhost"
  cert scheduler-server "/CN=kube-scheduler" "IP:127.0.0.1,DNS:localhost"
  # The front proxy: kube-apiserver's client identity towards aggregated apiservers, and the CA
  # every component trusts request headers from.
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/front-proxy-ca.key" \
    -subj "/CN=plegd-cluster-front-proxy-ca" -days 30 -sha256 -out "$pki/front-proxy-ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
  cert front-proxy-client "/CN=front-proxy-client" "" front-proxy-ca
  # The service account token signing key.
  ossl genrsa -out "$pki/sa.key" 2048
  ossl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
}

# kubeconfig NAME: $RUN/NAME.kubeconfig with the client certificate pki/NAME.
kubeconfig() {
  cat >"$RUN/$1.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: plegd-cluster
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority: $RUN/pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $RUN/pki/$1.crt
    client-key: $RUN/pki/$1.key
contexts:
- name: $1
  context: {cluster: plegd-cluster, user: $1}
current-context: $1
KUBECONFIG
}

# ---------------------------------------------------------------------------------------------
# start and stop

wait_for() { # wait_for WHAT SECONDS PIDNAME COMMAND...: until COMMAND succeeds, while PIDNAME lives
  local what=$1 seconds=$2 pidname=$3; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$pidname" ] && ! kill -0 "$(cat "$RUN/$pidname.pid")" 2>/dev/null; then
      tail -20 "$RUN/$pidname.log" >&2
      die "$pidname exited (log: $RUN/$pidname.log)"
    fi
    [ $SECONDS -lt $deadline ] || die "$what not within ${seconds}s (logs in $RUN)"
    sleep 0.2
  done
}

# spawn NAME COMMAND...: COMMAND in a session of its own, logging to $RUN/NAME.log.
spawn() {
  local name=$1; shift
  # fd 9 holds the start/stop lock and fd 8 the build lock: the cluster's processes must not
  # inherit them.
  setsid "$@" >>"$RUN/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$RUN/$name.pid"
  # The command line, for restart.
  printf '%s\0' "$@" >"$RUN/$name.cmd"
}

# kubectl as the admin, its discovery cache in the run directory (not ~/.kube/cache).
kubectl_admin() { "$BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" --cache-dir "$RUN/kubectl-cache" "$@"; }

healthz() { # healthz URL: 200 with the admin certificate
  curl -sf --cacert "$RUN/pki/ca.crt" --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" "$1"
}

node_ready() {
  [ "$(kubectl_admin get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

running() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    [ -f "$RUN/$name.pid" ] && kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null || return 1
  done
}

lock() {
  mkdir -p "$CLUSTER"
  exec 9>"$CLUSTER/run.lock"
  flock -w 900 9 || die "waited 15 min for $CLUSTER/run.lock: another start or stop of the cluster holds it"
}

# What the kubelet changes on the machine, as it was: restored by stop.
save_machine_state() {
  local s t c p
  : >"$RUN/sysctls"
  for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")" >>"$RUN/sysctls"; done
  : >"$RUN/iptables-chains"
  if command -v iptables >/dev/null; then
    for c in "${IPTABLES_CHAINS[@]}"; do
      for t in iptables ip6tables; do
        "$t" -w -t "${c%%:*}" -S "${c#*:}" >/dev/null 2>&1 || echo "$t ${c%%:*} ${c#*:}" >>"$RUN/iptables-chains"
      done
    done
  fi
  : >"$RUN/created-paths"
  for p in "${MACHINE_PATHS[@]}"; do [ -e "$p" ] || echo "$p" >>"$RUN/created-paths"; done
  [ -e "$CNI_CACHE" ] || touch "$RUN/created-cni-cache"
}

kubelet_config() {
  mkdir -p "$RUN/manifests" "$RUN/pod-logs" "$RUN/kubelet"
  cat >"$RUN/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
# This machine is cgroup v1, which kubelets from 1.35 on refuse unless told.
failCgroupV1: false
failSwapOn: false
# An overlay root has no rootfs info for the kubelet to account local storage by.
localStorageCapacityIsolation: false
# The offline images are never pulled again: never evict pods or remove images for space.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
protectKernelDefaults: false
staticPodPath: $RUN/manifests
podLogsDir: $RUN/pod-logs
volumePluginDir: $RUN/kubelet/volume-plugins
rotateCertificates: false
serverTLSBootstrap: false
tlsCertFile: $RUN/pki/kubelet-server.crt
tlsPrivateKeyFile: $RUN/pki/kubelet-server.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
YAML
  kubelet_feature_gates >>"$RUN/kubelet.yaml"
}

# The kubelet's feature gates from PLEGD_CLUSTER_KUBELET_FEATURE_GATES (NAME=true|false, comma
# separated; e.g. EventedPLEG=true), as KubeletConfiguration's featureGates.
kubelet_feature_gates() {
  local gates=${PLEGD_CLUSTER_KUBELET_FEATURE_GATES:-} gate
  [ -n "$gates" ] || return 0
  echo "featureGates:"
  IFS=, read -ra gates <<<"$gates"
  for gate in "${gates[@]}"; do
    [[ $gate =~ ^[A-Za-z0-9]+=(true|false)$ ]] \
      || die "PLEGD_CLUSTER_KUBELET_FEATURE_GATES: '$gate' is not NAME=true or NAME=false"
    echo "  ${gate%%=*}: ${gate#*=}"
  done
}

# plegd_binary: the plegd to run in the cluster, checked before anything starts.
plegd_binary() {
  local binary=${PLEGD_BINARY:-$REPO/target/release/plegd}
  [ -x "$binary" ] || die "--plegd: no plegd binary at $binary (cargo build --release --bin plegd, or set PLEGD_BINARY)"
  command -v jq >/dev/null || die "--plegd needs jq (apt-get install jq)"
  echo "$binary"
}

# plegd_overlay OVERLAY: the kustomization directory OVERLAY names.
plegd_overlay() {
  local dir
  if [ -f "$REPO/deploy/$1/kustomization.yaml" ]; then dir="$REPO/deploy/$1"
  elif [ -f "$1/kustomization.yaml" ]; then dir=$(cd "$1" && pwd)
  else die "--plegd: '$1' is neither one of deploy/'s overlays (conditions, full, shadow) nor a kustomization directory"
  fi
  echo "$dir"
}

# The plegd DaemonSet as the install renders it, moved onto this cluster's layout, which a static
# component cannot say (the paths depend on PLEGD_CLUSTER_DIR, and a mount's path is its merge
# key): the node paths it mounts become this cluster's (its containerd's socket directory and —
# where the install mounts them — the kubelet's root and pod log
# directories, mounted at the same paths since the runtime reports them, and named to plegd as a
# kubelet with another --root-dir and podLogsDir needs), and kube-apiserver at the node's IP (no
# kube-proxy serves the service IP). The image is tests/cluster/local-image's; the pod template names
# the binary in it by its digest, so that a new binary rolls plegd's pods.
PLEGD_ON_CLUSTER='
def node_path:
  if . == "/run/containerd" then $containerd
  elif . == "/var/lib/kubelet" or startswith("/var/lib/kubelet/") then $kubelet_root + .[16:]
  elif . == "/var/log/pods" or startswith("/var/log/pods/") then $pod_logs + .[13:]
  else . end;
def kubelet_path: . == "/var/lib/kubelet" or startswith("/var/lib/kubelet/") or . == "/var/log/pods" or startswith("/var/log/pods/");
.items |= map(
  if .kind == "DaemonSet" and .metadata.name == "plegd" then
    .spec.template.spec.volumes |= map(if .hostPath then .hostPath.path |= node_path else . end)
    | .spec.template.spec.containers |= map(
        .volumeMounts |= map(if .mountPath | kubelet_path then .mountPath |= node_path else . end)
        | .env = ([(.env // [])[] | select(.name | IN("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "PLEGD_KUBELET_ROOT_DIR", "PLEGD_POD_LOGS_DIR") | not)]
            + [{name: "KUBERNETES_SERVICE_HOST", value: $apiserver_host}, {name: "KUBERNETES_SERVICE_PORT", value: $apiserver_port},
               {name: "PLEGD_KUBELET_ROOT_DIR", value: $kubelet_root}, {name: "PLEGD_POD_LOGS_DIR", value: $pod_logs}]
            | if $log_level == "" then . else map(select(.name != "PLEGD_LOG_LEVEL")) + [{name: "PLEGD_LOG_LEVEL", value: $log_level}] end))
    | .spec.template.metadata.annotations[$binary_key] = $binary
  else . end)'
# The same install, whatever plegd binary its image holds.
WITHOUT_BINARY='.items |= map(if .kind == "DaemonSet" then del(.spec.template.metadata.annotations["plegd.test/binary-sha256"]) else . end)'

# operator_crds INSTALL_YAML: the paths of the custom resource definitions of the kinds the
# install has that a cluster lacks: the Prometheus operator's PodMonitor and PrometheusRule
# (components/pod-monitor, components/alerts), and Prometheus (the scrape class
# components/pod-monitor asks of one), as the operator's own module at
# PROMETHEUS_OPERATOR_VERSION ships them (example/prometheus-operator-crd), through the Go module
# proxy. deploy/kind/e2e.sh uses them too.
operator_crds() {
  local kind file dir=""
  for kind in PodMonitor PrometheusRule Prometheus; do
    grep -qx "kind: $kind" "$1" || continue
    case $kind in
      PodMonitor) file=monitoring.coreos.com_podmonitors.yaml ;;
      PrometheusRule) file=monitoring.coreos.com_prometheusrules.yaml ;;
      Prometheus) file=monitoring.coreos.com_prometheuses.yaml ;;
    esac
    if [ -z "$dir" ]; then
      download "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" >/dev/null
      dir="$CLUSTER/gomod/github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION/example/prometheus-operator-crd"
    fi
    [ -f "$dir/$file" ] || die "no $file in $dir"
    echo "$dir/$file"
  done
}

# install_crds INSTALL_YAML: operator_crds installed, and established.
install_crds() {
  local f
  for f in $(operator_crds "$1"); do
    kubectl_admin apply --server-side -f "$f" >&2
    # Polled, not `kubectl wait`: a definition just made has no conditions yet, and kubectl wait
    # then fails at once ("accessor error: <nil>") instead of waiting.
    wait_for "$(basename "$f") Established" 60 "" crd_established "$f"
  done
}

# crd_established FILE: the custom resource definition in FILE is Established.
crd_established() {
  [ "$(kubectl_admin get -f "$1" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ]
}

# import_plegd_image BINARY: plegd's image as deploy/image/image.sh makes it (non-root, BINARY and
# Debian's C libraries), for this machine's architecture, into the node's containerd.
import_plegd_image() {
  bash "$REPO/deploy/image/image.sh" assemble --out "$RUN/plegd-image" --name "$PLEGD_IMAGE" \
    "$(dpkg --print-architecture)=$1" >/dev/null || die "could not assemble plegd's image of $1"
  "${CONTAINERD[@]}" import "$RUN/plegd-image/plegd.oci.tar" 8>&- 9>&-
}

# deploy_plegd DIR: plegd's image imported offline, the overlay in DIR applied as PLEGD_ON_CLUSTER
# moves it, and its DaemonSet rolled out.
deploy_plegd() {
  local dir=$1 binary
  binary=$(plegd_binary)
  import_plegd_image "$binary"
  # The install as given, with the component a local image needs (tests/cluster/local-image).
  mkdir -p "$RUN/plegd-install"
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n' \
    "$(realpath --relative-to "$RUN/plegd-install" "$dir")" "$(realpath --relative-to "$RUN/plegd-install" "$HERE/local-image")" \
    >"$RUN/plegd-install/kustomization.yaml"
  kubectl_admin kustomize "$RUN/plegd-install" >"$RUN/plegd-overlay.yaml" || die "--plegd: could not render $dir"
  # Before the objects are read: kubectl knows no kind whose definition is not installed.
  install_crds "$RUN/plegd-overlay.yaml"
  kubectl_admin create --dry-run=client -o json -f "$RUN/plegd-overlay.yaml" \
    | jq -s '{apiVersion: "v1", kind: "List", items: .}' >"$RUN/plegd-overlay.json" || die "--plegd: could not read $dir's objects"
  jq --arg containerd "$CLUSTER/containerd" --arg kubelet_root "$RUN/kubelet" \
    --arg pod_logs "$RUN/pod-logs" --arg apiserver_host "$NODE_IP" --arg binary "$(sha256sum "$binary" | cut -c1-64)" --arg binary_key plegd.test/binary-sha256 \
    --arg apiserver_port "$APISERVER_PORT" --arg log_level "${PLEGD_CLUSTER_PLEGD_LOG_LEVEL:-}" "$PLEGD_ON_CLUSTER" "$RUN/plegd-overlay.json" >"$RUN/plegd.json.new" \
    || die "--plegd: could not move $dir onto this cluster (see $RUN/plegd-overlay.json)"
  jq -e '.items[] | select(.kind == "DaemonSet" and .metadata.name == "plegd")' "$RUN/plegd.json.new" >/dev/null \
    || die "--plegd: $dir has no DaemonSet named plegd"
  # Another install than the one running: the one running goes first, every object of it (an
  # apply alone would leave its policies, roles and arguments behind).
  # (A new binary alone is no other install: its digest in the pod template rolls the pods.)
  if [ -f "$RUN/plegd.json" ] && ! cmp -s <(jq "$WITHOUT_BINARY" "$RUN/plegd.json") <(jq "$WITHOUT_BINARY" "$RUN/plegd.json.new"); then
    log "removing the plegd install that runs now"
    uninstall_plegd || die "could not remove the plegd install that runs now ($RUN/plegd.json)"
  fi
  mv "$RUN/plegd.json.new" "$RUN/plegd.json"
  kubectl_admin apply -f "$RUN/plegd.json" >&2
  if ! kubectl_admin -n plegd-system rollout status ds/plegd --timeout=120s >&2; then
    kubectl_admin -n plegd-system get pods -o wide >&2 || true
    kubectl_admin -n plegd-system get events --sort-by=.lastTimestamp >&2 || true
    kubectl_admin -n plegd-system logs ds/plegd --tail=20 >&2 || true
    die "plegd's DaemonSet did not roll out within 120 s"
  fi
  log "plegd ($dir, $binary) running beside the kubelet"
}

start() {
  local plegd=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --plegd) [ $# -ge 2 ] || die "--plegd needs an overlay (conditions, full, shadow or a directory)"
        plegd=$(plegd_overlay "$2"); plegd_binary >/dev/null; shift 2 ;;
      *) die "start: unknown argument '$1' (usage: start [--plegd OVERLAY])" ;;
    esac
  done
  need_root
  kubelet_feature_gates >/dev/null
  build
  lock
  # A node running another containerd than the one asked for is started anew, never reused.
  local wanted=${PLEGD_CLUSTER_CONTAINERD_VERSION:-2.3} was_version was_kubelet
  was_version=$(cat "$RUN/containerd.version" 2>/dev/null || echo unknown)
  was_kubelet=$(cat "$RUN/kubelet.version" 2>/dev/null || echo unknown)
  if running && [ "$was_version" != "$wanted" ]; then
    log "running on containerd $was_version, $wanted asked for (PLEGD_CLUSTER_CONTAINERD_VERSION): starting anew"
  elif running && [ "$was_kubelet" != "$KUBELET_VERSION" ]; then
    log "running a kubelet v$was_kubelet, v$KUBELET_VERSION asked for (PLEGD_CLUSTER_KUBELET_VERSION): starting anew"
  elif running && healthz "https://$NODE_IP:$APISERVER_PORT/readyz" >/dev/null 2>&1 && node_ready; then
    log "already running (node $NODE Ready)"
    # Other kubelet feature gates than it runs with: the kubelet restarts with them.
    local was
    was=$(cat "$RUN/kubelet.yaml")
    CONTAINERD_SOCK=$("${CONTAINERD[@]}" socket)
    kubelet_config
    if [ "$was" != "$(cat "$RUN/kubelet.yaml")" ]; then
      log "the kubelet's configuration changed (PLEGD_CLUSTER_KUBELET_FEATURE_GATES): restarting it"
      restart kubelet
    fi
    # A cluster started before kube-proxy was part of it gets one.
    if ! { [ -f "$RUN/kube-proxy.pid" ] && kill -0 "$(cat "$RUN/kube-proxy.pid")" 2>/dev/null; }; then
      [ -f "$RUN/kube-proxy.kubeconfig" ] || { cert kube-proxy "/CN=system:kube-proxy"; kubeconfig kube-proxy; }
      start_kube_proxy
    fi
    if [ -n "$plegd" ]; then deploy_plegd "$plegd"; fi
    echo "$RUN/admin.kubeconfig"
    return
  fi
  stop_locked
  local t0=$SECONDS
  mkdir -p "$RUN"
  echo "$wanted" >"$RUN/containerd.version"
  echo "$KUBELET_VERSION" >"$RUN/kubelet.version"
  save_machine_state

  # The node's address: a private /32 on an interface of its own, a dummy one, or a bridge with
  # no ports where the kernel has no dummy driver.
  ip link add "$NODE_LINK" type dummy 2>/dev/null || ip link add "$NODE_LINK" type bridge \
    || die "could not create the interface $NODE_LINK (neither dummy nor bridge)"
  ip addr add "$NODE_IP/32" dev "$NODE_LINK"
  ip link set "$NODE_LINK" up

  # The kubelet dials the runtime first and takes its cgroup driver from it.
  CONTAINERD_SOCK=$("${CONTAINERD[@]}" start 8>&- 9>&- | tail -1) || die "containerd did not start"

  certificates
  local name
  for name in admin controller-manager scheduler kubelet kube-proxy; do kubeconfig "$name"; done

  spawn etcd "$BIN/etcd" --name "$NODE" --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "$NODE=http://127.0.0.1:$((ETCD_PORT + 1))" --log-level warn
  wait_for "etcd's /health" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  cat >"$RUN/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
YAML
  spawn kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$RUN/pki/apiserver.crt" --tls-private-key-file "$RUN/pki/apiserver.key" \
    --client-ca-file "$RUN/pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --enable-priority-and-fairness=true \
    --allow-privileged=true \
    --service-cluster-ip-range "$SERVICE_RANGE" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$RUN/pki/sa.pub" --service-account-signing-key-file "$RUN/pki/sa.key" \
    --kubelet-client-certificate "$RUN/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$RUN/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$RUN/pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --requestheader-client-ca-file "$RUN/pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$RUN/pki/front-proxy-client.crt" --proxy-client-key-file "$RUN/pki/front-proxy-client.key" \
    --audit-policy-file "$RUN/audit-policy.yaml" --audit-log-path "$RUN/audit.log" \
    --audit-log-maxsize 100 --audit-log-maxbackup 1
  wait_for "kube-apiserver's /readyz" 120 kube-apiserver healthz "https://$NODE_IP:$APISERVER_PORT/readyz"

  spawn kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$RUN/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$RUN/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --controllers '*' \
    --tls-cert-file "$RUN/pki/controller-manager-server.crt" --tls-private-key-file "$RUN/pki/controller-manager-server.key" \
    --use-service-account-credentials=true \
    --flex-volume-plugin-dir "$RUN/controller-manager/volume-plugins" \
    --service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
    --cluster-signing-cert-file "$RUN/pki/ca.crt" --cluster-signing-key-file "$RUN/pki/ca.key"
  spawn kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig "$RUN/scheduler.kubeconfig" \
    --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
    --tls-cert-file "$RUN/pki/scheduler-server.crt" --tls-private-key-file "$RUN/pki/scheduler-server.key" \
    --bind-address 127.0.0.1 --leader-elect=false

  # The kubelet's cgroups live under a root of their own in each hierarchy, removed by stop.
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -L "${h%/}" ] || [ "$(basename "$h")" = unified ] || mkdir -p "$h${CGROUP_ROOT#/}"
  done
  kubelet_config
  spawn kubelet "$(kubelet_bin)" --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" \
    --root-dir "$RUN/kubelet" --cert-dir "$RUN/kubelet/pki" --hostname-override "$NODE" --node-ip "$NODE_IP"
  wait_for "node $NODE Ready" 120 kubelet node_ready
  start_kube_proxy
  wait_for "kube-controller-manager's /healthz" 30 kube-controller-manager healthz https://127.0.0.1:10257/healthz
  wait_for "kube-scheduler's /healthz" 30 kube-scheduler healthz https://127.0.0.1:10259/healthz
  wait_for "the default service account" 60 kube-controller-manager kubectl_admin get serviceaccount default
  log "node $NODE Ready after $((SECONDS - t0))s:"
  kubectl_admin get nodes -o wide >&2
  if [ -n "$plegd" ]; then deploy_plegd "$plegd"; fi
  echo "$RUN/admin.kubeconfig"
}

# start_kube_proxy: kube-proxy on the node, as a cluster's nodes run it: iptables mode (its default
# on Linux), its default sync settings (minSyncPeriod 1 s, syncPeriod 30 s), its rules in this
# machine's network namespace for the cluster's own Service range only. The conntrack table and
# timeouts are left as the machine has them (nothing to restore). Ready once its first sync is done.
start_kube_proxy() {
  cat >"$RUN/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $RUN/kube-proxy.kubeconfig
hostnameOverride: $NODE
clusterCIDR: $POD_SUBNET
mode: iptables
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
YAML
  spawn kube-proxy "$BIN/kube-proxy" --config "$RUN/kube-proxy.yaml"
  wait_for "kube-proxy's /healthz" 60 kube-proxy curl -sf http://127.0.0.1:10256/healthz
}

# stop_processes NAME...: TERM, then KILL after 10 s, the processes (and their sessions) in
# $RUN/NAME.pid, all at once.
stop_processes() {
  local name pid pids=()
  for name in "$@"; do
    [ -f "$RUN/$name.pid" ] || continue
    pid=$(cat "$RUN/$name.pid")
    rm -f "$RUN/$name.pid"
    kill -0 "$pid" 2>/dev/null || continue
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
}

stop_locked() {
  local m h s t table chain p
  # The kubelet first: it would restart the pods containerd.sh removes.
  stop_processes kubelet kube-proxy
  # kube-proxy's own rules and chains (iptables), removed by kube-proxy itself.
  if [ -x "$BIN/kube-proxy" ] && [ -f "$RUN/kube-proxy.yaml" ]; then
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || log "kube-proxy --cleanup failed"
  fi
  if [ -d "$CLUSTER/containerd" ]; then
    # containerd.sh kills the sandboxes without a CNI DEL: their cached results stay behind.
    local id
    for id in $(ls "$CLUSTER/containerd/root/io.containerd.grpc.v1.cri/sandboxes" 2>/dev/null); do
      rm -f "$CNI_CACHE"/results/*-"$id"-*
    done
    "${CONTAINERD[@]}" stop 8>&- 9>&- || log "containerd.sh stop failed"
    rm -rf "$CLUSTER/containerd"
  fi
  # etcd last: kube-apiserver's graceful shutdown waits on it.
  stop_processes kube-scheduler kube-controller-manager kube-apiserver
  stop_processes etcd
  # The kubelet's mounts (its root directory, bind-mounted shared onto itself, and the pods'
  # volumes), deepest first.
  for m in $(findmnt -rn -o TARGET | { grep -E "^$RUN(/|$)" || true; } | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
  # Pod cgroups (children first), then the root of each hierarchy.
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h${CGROUP_ROOT#/}" ] || continue
    find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ ! -d "$h${CGROUP_ROOT#/}" ] || log "could not remove the cgroup $h${CGROUP_ROOT#/} (processes left in it?)"
  done
  ip link del "$NODE_LINK" 2>/dev/null || true
  ip link del "$POD_BRIDGE" 2>/dev/null || true
  if [ -f "$RUN/sysctls" ]; then
    while IFS= read -r s; do sysctl -qw "$s" || log "could not restore $s"; done <"$RUN/sysctls"
  fi
  if [ -f "$RUN/iptables-chains" ]; then
    while read -r t table chain; do
      # The rules that jump to it first, then the chain.
      "$t" -w -t "$table" -S 2>/dev/null | { grep -E "^-A [A-Z]+ .*-j $chain( |$)" || true; } \
        | while read -r _ rule; do
          # shellcheck disable=SC2086 # the rule's words, as iptables -S printed them
          "$t" -w -t "$table" -D $rule 2>/dev/null || true
        done
      "$t" -w -t "$table" -F "$chain" 2>/dev/null || true
      "$t" -w -t "$table" -X "$chain" 2>/dev/null || true
    done <"$RUN/iptables-chains"
  fi
  # The kubelet links each container's log into /var/log/containers.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$RUN/*" -delete 2>/dev/null || true
  fi
  if [ -f "$RUN/created-paths" ]; then
    while IFS= read -r p; do rm -rf "$p"; done <"$RUN/created-paths"
  fi
  if [ -f "$RUN/created-cni-cache" ]; then
    rmdir "$CNI_CACHE/results" "$CNI_CACHE" 2>/dev/null || true
  fi
  rm -rf "$RUN"
}

stop() {
  need_root
  lock
  stop_locked
  log "stopped and cleaned $RUN"
}

# restart COMPONENT: as the usage says.
restart() {
  need_root
  lock
  running || die "restart: no cluster is running (start it first)"
  local name=$1 cmd
  case "$name" in
    containerd)
      CONTAINERD_SOCK=$("${CONTAINERD[@]}" socket)
      "${CONTAINERD[@]}" kill 8>&- 9>&-
      "${CONTAINERD[@]}" start 8>&- 9>&- >/dev/null || die "containerd did not start again"
      wait_for "the kubelet's runtime Ready" 60 kubelet node_ready
      ;;
    etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
      [ -f "$RUN/$name.cmd" ] || die "restart: no command line recorded for $name ($RUN/$name.cmd)"
      mapfile -d '' -t cmd <"$RUN/$name.cmd"
      stop_processes "$name"
      spawn "$name" "${cmd[@]}"
      case "$name" in
        etcd) wait_for "etcd's /health" 30 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health" ;;
        kube-apiserver) wait_for "kube-apiserver's /readyz" 120 kube-apiserver healthz "https://$NODE_IP:$APISERVER_PORT/readyz" ;;
        kube-controller-manager) wait_for "kube-controller-manager's /healthz" 60 "$name" healthz https://127.0.0.1:10257/healthz ;;
        kube-scheduler) wait_for "kube-scheduler's /healthz" 60 "$name" healthz https://127.0.0.1:10259/healthz ;;
        kubelet) wait_for "the kubelet's /healthz" 60 kubelet curl -sf http://127.0.0.1:10248/healthz
          wait_for "node $NODE Ready" 60 kubelet node_ready ;;
        kube-proxy) wait_for "kube-proxy's /healthz" 60 kube-proxy curl -sf http://127.0.0.1:10256/healthz ;;
      esac
      ;;
    *) die "restart: unknown component '$name' (containerd, kubelet, kube-proxy, kube-apiserver, etcd, kube-controller-manager, kube-scheduler)" ;;
  esac
  log "$name restarted"
}

# uninstall_plegd: every object of the install in $RUN/plegd.json deleted, as a user uninstalls it:
# with the readiness gate (components/readiness-gate), `plegd release-gates` first (the kubelet
# policy's deletion waits for it).
uninstall_plegd() {
  if jq -e '.items[] | select(.kind == "MutatingAdmissionPolicy" and .metadata.name == "plegd-readiness-gate-kubelet")' \
    "$RUN/plegd.json" >/dev/null; then
    "$(plegd_binary)" release-gates --kubeconfig "$RUN/admin.kubeconfig" >&2 || return 1
  fi
  kubectl_admin delete -f "$RUN/plegd.json" --ignore-not-found --wait=true --timeout=180s >&2
}

# remove_plegd: the plegd install that runs, if any, removed (every object of it).
remove_plegd() {
  need_root
  lock
  [ -f "$RUN/plegd.json" ] || { log "no plegd install to remove"; return; }
  uninstall_plegd || die "could not remove the plegd install ($RUN/plegd.json)"
  rm -f "$RUN/plegd.json"
  log "plegd removed"
}

# compact: etcd's history compacted up to its newest revision.
compact() {
  need_root
  running || die "compact: no cluster is running (start it first)"
  local rev
  rev=$(curl -sf -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/range" -d '{"key":"AA=="}' | jq -r .header.revision) \
    || die "compact: could not read etcd's revision"
  curl -sf -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null \
    || die "compact: etcd refused to compact to revision $rev"
  log "etcd compacted to revision $rev"
}

# helm_plegd ARGS...: helm (tests/helm/helm.sh) as the cluster's admin. install and upgrade run
# this checkout's plegd image (imported offline, never pulled) and move the chart's objects onto
# this cluster's layout as deploy_plegd moves an overlay's (post_render); the rest run as given.
helm_plegd() {
  need_root
  [ -f "$RUN/admin.kubeconfig" ] || die "no cluster is running (start it first)"
  local helm
  helm=$(bash "$REPO/tests/helm/helm.sh" install) || die "helm: tests/helm/helm.sh install failed"
  case ${1:-} in
    install|upgrade)
      local binary
      binary=$(plegd_binary)
      import_plegd_image "$binary"
      # shellcheck source=tests/helm/post-renderer.sh
      . "$REPO/tests/helm/post-renderer.sh"
      helm_post_renderer "$helm" || die "helm: its post-renderer could not be set up (tests/helm/helm.sh plugins)"
      "$helm" --kubeconfig "$RUN/admin.kubeconfig" "$@" \
        --set image.repository="${PLEGD_IMAGE%:*}" --set image.tag="${PLEGD_IMAGE##*:}" --set image.pullPolicy=Never \
        "${POST_RENDERER[@]}" --post-renderer-args "$HERE/cluster.sh" --post-renderer-args post-render >&2
      ;;
    *) "$helm" --kubeconfig "$RUN/admin.kubeconfig" "$@" ;;
  esac
}

# post_render: helm's rendered objects (standard input) moved onto this cluster's layout
# (PLEGD_ON_CLUSTER), as YAML documents on standard output.
post_render() {
  local binary
  binary=$(plegd_binary)
  kubectl_admin create --dry-run=client -o json -f - \
    | jq -s '{apiVersion: "v1", kind: "List", items: .}' \
    | jq --arg containerd "$CLUSTER/containerd" --arg kubelet_root "$RUN/kubelet" \
      --arg pod_logs "$RUN/pod-logs" --arg apiserver_host "$NODE_IP" --arg binary "$(sha256sum "$binary" | cut -c1-64)" \
      --arg binary_key plegd.test/binary-sha256 --arg apiserver_port "$APISERVER_PORT" \
      --arg log_level "${PLEGD_CLUSTER_PLEGD_LOG_LEVEL:-}" "$PLEGD_ON_CLUSTER" \
    | jq -c '.items[]' | sed 's/^/---\n/' || die "post-render: could not move helm's objects onto this cluster"
}

case "${1:-}" in
  modules) build_lock; modules ;;
  build) build ;;
  bin) build >&2; echo "$BIN" ;;
  kubeadm) build_lock; build_kubeadm ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  kubectl) shift; [ -f "$RUN/admin.kubeconfig" ] || die "no cluster is running (start it first)"; kubectl_admin "$@" ;;
  restart) [ $# -eq 2 ] || die "usage: $0 restart COMPONENT"; restart "$2" ;;
  compact) compact ;;
  mounted-token)
    [ $# -eq 3 ] || die "usage: $0 mounted-token POD_UID VOLUME"
    # The file itself, not the `token` link beside it: the kubelet gives the link to the pod's
    # user in a sticky, world-writable directory, which fs.protected_symlinks forbids even root to
    # follow.
    cat "$RUN/kubelet/pods/$2/volumes/kubernetes.io~projected/$3/..data/token" || die "no token of volume $3 in pod $2"
    ;;
  remove-plegd) remove_plegd ;;
  helm) shift; helm_plegd "$@" ;;
  post-render) post_render ;;
  operator-crds) [ $# -eq 2 ] || die "usage: $0 operator-crds INSTALL_YAML"; operator_crds "$2" ;;
  install-crds) [ $# -eq 2 ] || die "usage: $0 install-crds YAML"; install_crds "$2" ;;
  import-binary) [ $# -eq 3 ] || die "usage: $0 import-binary BINARY IMAGE"; "${CONTAINERD[@]}" import-binary "$2" "$3" 8>&- 9>&- ;;
  *) echo "usage: $0 modules|build|bin|kubeadm|start|stop|kubectl ARGS...|restart COMPONENT|compact|remove-plegd|operator-crds INSTALL_YAML|install-crds YAML|import-binary BINARY IMAGE" >&2; exit 2 ;;
esac
