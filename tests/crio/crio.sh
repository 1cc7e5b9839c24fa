#!/usr/bin/env bash
# An isolated CRI-O, for plegd's real-runtime tests against a second CRI runtime.
#
#   tests/crio/crio.sh build     # CRI-O v1.34.0 from its Go module (cached by version); prints its bin dir
#   tests/crio/crio.sh start     # install, build, start, import the test image; prints the CRI socket
#   tests/crio/crio.sh stop      # remove every pod, stop CRI-O, clean up
#   tests/crio/crio.sh socket    # print the CRI socket path
#
# CRI-O has no Debian package, and the Go module proxy serves github.com/cri-o/cri-o at v1.34.0 only
# (PLEGD_CRIO_VERSION to try another): built here with Go and gcc (about 3 minutes once; cached under
# /var/lib/plegd-test/crio/v1.34.0), run with Debian 12's conmon and runc (cgroupfs), images copied
# into its own store with Debian's skopeo from the same offline OCI archive the test containerd
# imports (tests/containerd/containerd.sh image). Nothing is pulled.
#
# PLEGD_CRIO_EVENTS=true|false (default true) is CRI-O's enable_pod_events: with false,
# GetContainerEvents ends as soon as it opens. Everything lives under $PLEGD_CRIO_DIR (default
# /var/lib/plegd-test/crio-run): its root, run root, socket, conmon's exits, CNI config; pods get
# IPs from a CNI bridge ($PLEGD_CRIO_BRIDGE, default plegcrio0; $PLEGD_CRIO_SUBNET, default
# 10.236.0.0/24; no gateway: no iptables). Several instances can run at once with different
# PLEGD_CRIO_DIR, bridge and subnet. Needs root and Linux.
#
# On machines without CAP_SYS_RESOURCE (no process may lower oom_score_adj), pods must not share
# a PID namespace: CRI-O then starts an infra container with oom_score_adj -998, which runc cannot
# set. The tests' pods use a PID namespace per container (as the kubelet for pods without
# shareProcessNamespace), which CRI-O runs without an infra container.
set -euo pipefail

VERSION=${PLEGD_CRIO_VERSION:-v1.34.0}
CACHE=/var/lib/plegd-test/crio
DIR=${PLEGD_CRIO_DIR:-/var/lib/plegd-test/crio-run}
SOCK="$DIR/crio.sock"
EVENTS=${PLEGD_CRIO_EVENTS:-true}
BRIDGE=${PLEGD_CRIO_BRIDGE:-plegcrio0}
SUBNET=${PLEGD_CRIO_SUBNET:-10.236.0.0/24}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN="$CACHE/$VERSION/bin"
# The test image (busybox and a static pause), under the name the tests run.
IMAGE=plegd.test/busybox:1
# What CRI-O runs with, from Debian 12; skopeo copies the test image into CRI-O's store.
PACKAGES=(conmon runc containernetworking-plugins skopeo)

log() { echo "crio.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$EVENTS" in
  true|false) ;;
  *) die "PLEGD_CRIO_EVENTS must be true or false, not '$EVENTS'" ;;
esac

need_root() {
  [ "$(uname -s)" = Linux ] || die "CRI-O needs Linux"
  [ "$(id -u)" = 0 ] || die "CRI-O needs root"
}

install() {
  need_root
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } \
      || die "apt-get install ${missing[*]} failed"
  fi
  command -v go >/dev/null || die "building CRI-O needs Go (go on PATH)"
}

# build: crio and pinns of $VERSION, once.
build() {
  if [ -x "$BIN/crio" ] && [ -x "$BIN/pinns" ]; then echo "$BIN"; return; fi
  install
  mkdir -p "$CACHE"
  exec 8>"$CACHE/build.lock"
  flock -w 3600 8 || die "waited an hour for $CACHE/build.lock: another build of CRI-O holds it"
  if [ -x "$BIN/crio" ] && [ -x "$BIN/pinns" ]; then echo "$BIN"; return; fi
  local started=$SECONDS src
  export GOMODCACHE="$CACHE/gomod" GOFLAGS=-modcacherw GOTOOLCHAIN=local
  log "fetching github.com/cri-o/cri-o@$VERSION from the Go module proxy"
  src=$(cd /tmp && go mod download -json "github.com/cri-o/cri-o@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') \
    || die "go mod download github.com/cri-o/cri-o@$VERSION failed (the proxy serves v1.34.0)"
  [ -d "$src" ] || die "go mod download github.com/cri-o/cri-o@$VERSION gave no source directory"
  rm -rf "$CACHE/$VERSION.tmp"
  mkdir -p "$CACHE/$VERSION.tmp"
  cp -r "$src" "$CACHE/$VERSION.tmp/src"
  chmod -R u+w "$CACHE/$VERSION.tmp/src"
  log "building CRI-O $VERSION (about 3 minutes on 2 cores the first time)"
  (
    cd "$CACHE/$VERSION.tmp/src"
    # The tags that need no -dev package but gcc and libc6-dev: no gpgme, ostree, btrfs or
    # devicemapper, no seccomp (the runtime's default profile is then not applied by CRI-O).
    go build -trimpath -tags "containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper btrfs_noversion" \
      -ldflags "-s -w" -o "$CACHE/$VERSION.tmp/bin/crio" ./cmd/crio
    make -C pinns >/dev/null
    cp bin/pinns "$CACHE/$VERSION.tmp/bin/pinns"
  ) >&2 || die "building CRI-O $VERSION failed"
  mkdir -p "$CACHE/$VERSION"
  rm -rf "$BIN"
  mv "$CACHE/$VERSION.tmp/bin" "$BIN"
  rm -rf "$CACHE/$VERSION.tmp"
  log "built CRI-O $("$BIN/crio" --version 2>/dev/null | awk '/^crio version/ {print $3}') in $((SECONDS - started)) s: $BIN"
  echo "$BIN"
}

write_config() {
  mkdir -p "$DIR/root" "$DIR/runroot" "$DIR/run" "$DIR/exits" "$DIR/attach" "$DIR/ns" "$DIR/logs" \
    "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/runc" "$DIR/etc"
  cat >"$DIR/etc/storage.conf" <<TOML
[storage]
driver = "overlay"
graphroot = "$DIR/root"
runroot = "$DIR/runroot"
TOML
  echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$DIR/etc/policy.json"
  cat >"$DIR/etc/crio.conf" <<TOML
[crio]
root = "$DIR/root"
runroot = "$DIR/runroot"
storage_driver = "overlay"
log_dir = "$DIR/logs"
version_file = "$DIR/run/version"
version_file_persist = "$DIR/run/version-persist"
clean_shutdown_file = "$DIR/run/clean.shutdown"

[crio.api]
listen = "$SOCK"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
cgroup_manager = "cgroupfs"
conmon = "/usr/bin/conmon"
conmon_cgroup = "pod"
default_runtime = "runc"
enable_pod_events = $EVENTS
container_exits_dir = "$DIR/exits"
container_attach_socket_dir = "$DIR/attach"
namespaces_dir = "$DIR/ns"
pinns_path = "$BIN/pinns"
decryption_keys_path = "$DIR/etc/keys"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/sbin/runc"
runtime_root = "$DIR/runc"
monitor_path = "/usr/bin/conmon"

[crio.image]
signature_policy = "$DIR/etc/policy.json"
pause_image = "$IMAGE"
pause_command = "/pause"

[crio.network]
network_dir = "$DIR/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]

[crio.metrics]
enable_metrics = false
TOML
  cat >"$DIR/cni/net.d/10-plegd.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "plegd-crio",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {"type": "host-local", "subnet": "$SUBNET", "dataDir": "$DIR/cni/ipam"}
    }
  ]
}
JSON
}

running() {
  [ -f "$DIR/crio.pid" ] && kill -0 "$(cat "$DIR/crio.pid")" 2>/dev/null && [ -S "$SOCK" ]
}

lock() {
  mkdir -p "$(dirname "$DIR")"
  exec 9>"$DIR.lock"
  flock -w 600 9 || die "waited 10 min for $DIR.lock: another start or stop of this CRI-O holds it"
}

start() {
  need_root
  build >/dev/null
  local archive
  archive=$(bash "$REPO/tests/containerd/containerd.sh" image) || die "the test image (tests/containerd/containerd.sh image) failed"
  lock
  if running; then
    [ "$(cat "$DIR/events" 2>/dev/null)" = "$EVENTS" ] \
      || die "CRI-O runs at $DIR with enable_pod_events = $(cat "$DIR/events" 2>/dev/null), not $EVENTS: stop it first"
    log "already running at $SOCK"
    echo "$SOCK"
    return
  fi
  mkdir -p "$DIR"
  echo "$EVENTS" >"$DIR/events"
  write_config
  # The test image, into CRI-O's own store.
  CONTAINERS_STORAGE_CONF="$DIR/etc/storage.conf" skopeo --policy "$DIR/etc/policy.json" copy -q \
    "oci-archive:$archive" "containers-storage:[overlay@$DIR/root+$DIR/runroot]$IMAGE" >&2 \
    || die "skopeo could not copy the test image into CRI-O's store"
  rm -f "$SOCK"
  ulimit -n "$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  CONTAINERS_STORAGE_CONF="$DIR/etc/storage.conf" setsid "$BIN/crio" --config "$DIR/etc/crio.conf" --config-dir "" \
    >>"$DIR/crio.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$DIR/crio.pid"
  local i
  for i in $(seq 1 300); do
    [ -S "$SOCK" ] && break
    kill -0 "$(cat "$DIR/crio.pid")" 2>/dev/null || { tail -20 "$DIR/crio.log" >&2; die "crio exited at start"; }
    sleep 0.1
  done
  [ -S "$SOCK" ] || die "crio did not open $SOCK within 30 s (see $DIR/crio.log)"
  log "CRI-O $VERSION running at $SOCK (enable_pod_events = $EVENTS; log: $DIR/crio.log)"
  echo "$SOCK"
}

stop() {
  need_root
  lock
  if [ -f "$DIR/crio.pid" ]; then
    local pid
    pid=$(cat "$DIR/crio.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$DIR/crio.pid"
  fi
  # Whatever runc still runs for it, and the conmons that watched it.
  if [ -d "$DIR/runc" ]; then
    local id
    for id in $(runc --root "$DIR/runc" list -q 2>/dev/null); do
      runc --root "$DIR/runc" kill "$id" KILL 2>/dev/null || true
      runc --root "$DIR/runc" delete --force "$id" 2>/dev/null || true
    done
  fi
  pkill -9 -f "conmon .*--exit-dir $DIR/exits" 2>/dev/null || true
  local m
  for m in $(findmnt -rn -o TARGET | { grep -F "$DIR/" || true; } | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$DIR"
  find /sys/fs/cgroup -depth -type d -path '*plegd-test*' -exec rmdir {} \; 2>/dev/null || true
  log "stopped and cleaned $DIR"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  socket) echo "$SOCK" ;;
  *) echo "usage: $0 build|start|stop|socket" >&2; exit 2 ;;
esac
