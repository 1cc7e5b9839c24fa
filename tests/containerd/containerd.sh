#!/usr/bin/env bash
# An isolated containerd with its CRI plugin, for plegd's tests and demo.
#
#   tests/containerd/containerd.sh install   # Debian packages, if missing (apt-get update once)
#   tests/containerd/containerd.sh build VERSION   # 2.3 or 2.4 built, once; prints its bin directory
#   tests/containerd/containerd.sh start     # install, build the offline image, start, import it
#   tests/containerd/containerd.sh stop      # remove every pod, stop containerd, clean up
#   tests/containerd/containerd.sh socket    # print the CRI socket path
#   tests/containerd/containerd.sh kill      # kill -9 containerd only (its shims and pods live on)
#   tests/containerd/containerd.sh import-binary BINARY IMAGE   # BINARY + its libraries as IMAGE
#   tests/containerd/containerd.sh import ARCHIVE   # an OCI archive (deploy/image/image.sh's)
#   tests/containerd/containerd.sh oci-archive ROOTFS NAME ENTRYPOINT_JSON OUT   # ROOTFS as one layer
#   tests/containerd/containerd.sh binary-archive BINARY IMAGE OUT   # import-binary's image, as a file
#
# PLEGD_CONTAINERD_VERSION picks the containerd: 2.3 (the default: containerd's long-term release)
# and 2.4 built from github.com/containerd/containerd/v2's own module (v2.3.7, v2.4.2), with the runc
# both pin (v1.5.2) built from its module; 1.7 from Debian 13's package (with this machine's runc);
# `system` for whatever containerd this machine has installed. Builds are once per machine, cached
# under /var/lib/plegd-test/containerd-v<version> (`build VERSION` prints its bin directory); the
# package is fetched with apt-get download through a private package list and unpacked under
# /var/lib/plegd-test/<suite>; the machine's packages are not touched. Several
# instances can run at once with different PLEGD_CONTAINERD_DIR, PLEGD_CNI_BRIDGE and
# PLEGD_CNI_SUBNET; an instance directory holds one version at a time (stop it to change).
#
# Everything lives under $PLEGD_CONTAINERD_DIR (default /var/lib/plegd-test/containerd): its own
# root, state, sockets and CNI config, so it never touches a containerd the machine already runs.
# Pods get IPs from a CNI bridge (plegd0, 10.234.0.0/24, no masquerade, no gateway unless
# PLEGD_CNI_GATEWAY=true: no iptables).
# Needs root and Linux. Nothing is pulled: the image is built locally from busybox-static and a
# static pause binary.
set -euo pipefail

DIR=${PLEGD_CONTAINERD_DIR:-/var/lib/plegd-test/containerd}
SOCK="$DIR/containerd.sock"
IMAGE=${PLEGD_TEST_IMAGE:-plegd.test/busybox:1}
BRIDGE=${PLEGD_CNI_BRIDGE:-plegd0}
SUBNET=${PLEGD_CNI_SUBNET:-10.234.0.0/24}
# true: the bridge takes the subnet's first address and is the pods' default route (the bridge
# plugin then turns on net.ipv4.ip_forward), for a kubelet probing pods and pods reaching the node.
GATEWAY=${PLEGD_CNI_GATEWAY:-false}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/support/private-apt.sh
. "$HERE/../support/private-apt.sh"
VERSION=${PLEGD_CONTAINERD_VERSION:-2.3}
PACKAGES_DIR=${PLEGD_PACKAGES_DIR:-/var/lib/plegd-test}
PACKAGES=(containerd runc busybox-static containernetworking-plugins protobuf-compiler iproute2 gcc libc6-dev systemd curl
  libseccomp-dev pkg-config)

log() { echo "containerd.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
  [ "$(uname -s)" = Linux ] || die "a real containerd needs Linux"
  [ "$(id -u)" = 0 ] || die "a real containerd needs root (run as root, or skip the real-runtime tests)"
}

install() {
  need_root
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # npm installs buf for tests/proto_lint.rs; any npm will do.
  command -v npm >/dev/null || missing+=(npm)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# use_debian_containerd SUITE: containerd from Debian SUITE, unpacked privately under
# $PACKAGES_DIR/SUITE; its usr/bin goes first on PATH so that its own shim is used. Debian 13's 1.7
# runs on Debian 12's libc6 (>= 2.34) and uses the system's runc.
use_debian_containerd() {
  local suite=$1 root="$PACKAGES_DIR/$1"
  if [ ! -x "$root/root/usr/bin/containerd" ]; then
    log "fetching containerd from Debian $suite ($(debian_mirror))"
    private_apt_update "$root" "$suite"
    rm -f "$root"/deb/containerd_*.deb
    (cd "$root/deb" && private_apt "$root" apt-get -qq download containerd)
    rm -rf "$root/root.tmp"
    dpkg-deb -x "$root"/deb/containerd_*.deb "$root/root.tmp"
    mv "$root/root.tmp" "$root/root"
  fi
  export PATH="$root/root/usr/bin:$PATH"
}

# use_containerd: the binaries of $VERSION first on PATH (containerd starts its shim, and the shim
# runc, from PATH).
use_containerd() {
  case "$VERSION" in
    2.3|2.4) local bin; bin=$(build_containerd "$VERSION") || exit 1; export PATH="$bin:$PATH" ;;
    1.7) use_debian_containerd "$SUITE" ;;
  esac
}

case "$GATEWAY" in
  true|false) ;;
  *) die "PLEGD_CNI_GATEWAY must be true or false, not '$GATEWAY'" ;;
esac

# The releases each built line is built at, and the runc they pin (script/setup/runc-version).
declare -A RELEASES=([2.3]=2.3.7 [2.4]=2.4.2)
RUNC_RELEASE=1.5.2

case "$VERSION" in
  2.3|2.4|1.6|system) SUITE= ;;
  1.7) SUITE=trixie ;;
  *) die "PLEGD_CONTAINERD_VERSION must be 2.3, 2.4, 1.7, 1.6 or system, not '$VERSION'" ;;
esac

# goenv COMMAND...: Go with the builds' own module and build caches (shared by every version).
goenv() {
  env GOMODCACHE="$PACKAGES_DIR/go/mod" GOCACHE="$PACKAGES_DIR/go/cache" GOFLAGS="-modcacherw -buildvcs=false" \
    GOTOOLCHAIN=auto GO111MODULE=on "$@"
}

# build_recipe RELEASE: what a build of RELEASE is made of, as its .complete records it.
build_recipe() {
  echo "containerd v$1 runc v$RUNC_RELEASE; $(sed -n '/^build_containerd()/,/^}/p' "$HERE/containerd.sh" | sha256sum | cut -d' ' -f1)"
}

# build_containerd LINE (2.3, 2.4): containerd, its runc shim and ctr from containerd's module at
# the line's release, as containerd's Makefile builds them (its tags; the shim with no_grpc, static;
# the version stamped; no cgo), and runc from its module at the release containerd pins, as runc's
# Makefile builds its static binary (seccomp from libseccomp's static library) but without
# libpathrs (a Rust library its Makefile links: runc keeps its own path handling). Both modules
# have no replace lines, so `go install MODULE/cmd@VERSION` builds them as released. Once per
# machine (about 2 min each on 2 cores, runc 1 min); prints the bin directory.
build_containerd() {
  local line=$1 release=${RELEASES[$1]:-} out pkg=github.com/containerd/containerd/v2
  [ -n "$release" ] || die "build: no containerd $line to build (2.3 or 2.4)"
  out="$PACKAGES_DIR/containerd-v$release"
  if [ "$(cat "$out/.complete" 2>/dev/null)" = "$(build_recipe "$release")" ]; then echo "$out/bin"; return; fi
  command -v go >/dev/null || die "no go on PATH (containerd v$release builds with Go 1.26)"
  mkdir -p "$PACKAGES_DIR"
  exec 7>"$PACKAGES_DIR/containerd-build.lock"
  flock -w 1800 7 || die "waited 30 min for $PACKAGES_DIR/containerd-build.lock: another containerd build holds it"
  if [ "$(cat "$out/.complete" 2>/dev/null)" = "$(build_recipe "$release")" ]; then exec 7>&-; echo "$out/bin"; return; fi
  install >&2
  local start=$SECONDS ld="-s -w -X $pkg/version.Version=v$release -X $pkg/version.Package=$pkg"
  rm -rf "$out" && mkdir -p "$out/bin.tmp"
  log "building containerd v$release and runc v$RUNC_RELEASE from their modules (about 5 min on 2 cores, once)"
  goenv GOBIN="$out/bin.tmp" CGO_ENABLED=0 nice -n 10 go install -trimpath -tags urfave_cli_no_docs -ldflags "$ld" \
    "$pkg/cmd/containerd@v$release" "$pkg/cmd/ctr@v$release" >&2 \
    || die "building containerd v$release failed (go install $pkg/cmd/containerd@v$release)"
  goenv GOBIN="$out/bin.tmp" CGO_ENABLED=0 nice -n 10 go install -trimpath -tags "urfave_cli_no_docs no_grpc" \
    -ldflags "$ld -extldflags -static" "$pkg/cmd/containerd-shim-runc-v2@v$release" >&2 \
    || die "building containerd-shim-runc-v2 v$release failed"
  goenv GOBIN="$out/bin.tmp" CGO_ENABLED=1 nice -n 10 go install -trimpath -buildmode=pie \
    -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-X main.gitCommit=v$RUNC_RELEASE -linkmode external -extldflags -static-pie" \
    "github.com/opencontainers/runc@v$RUNC_RELEASE" >&2 || die "building runc v$RUNC_RELEASE failed (needs gcc, libseccomp-dev, pkg-config)"
  "$out/bin.tmp/containerd" --version | grep -q " v$release\b" || die "containerd --version says '$("$out/bin.tmp/containerd" --version)'"
  "$out/bin.tmp/runc" --version | grep -q "^runc version $RUNC_RELEASE$" || die "runc --version says '$("$out/bin.tmp/runc" --version | head -1)'"
  mv "$out/bin.tmp" "$out/bin"
  build_recipe "$release" >"$out/.complete"
  exec 7>&-
  log "built containerd v$release and runc v$RUNC_RELEASE in $((SECONDS - start))s: $out/bin"
  echo "$out/bin"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# oci_archive ROOTFS NAME ENTRYPOINT_JSON OUT: an OCI image-layout tarball with ROOTFS as its one
# layer, tagged NAME (io.containerd.image.name), for `ctr images import`.
oci_archive() {
  local rootfs=$1 name=$2 entrypoint=$3 out=$4 work
  work=$(mktemp -d)
  mkdir -p "$work/layout/blobs/sha256"
  tar --numeric-owner --owner=0 --group=0 --mtime='2020-01-01' --sort=name -C "$rootfs" -cf "$work/layer.tar" .
  local diff_id; diff_id=$(sha "$work/layer.tar")
  gzip -n -c "$work/layer.tar" >"$work/layer.tar.gz"
  local layer; layer=$(sha "$work/layer.tar.gz")
  local layer_size; layer_size=$(stat -c %s "$work/layer.tar.gz")
  mv "$work/layer.tar.gz" "$work/layout/blobs/sha256/$layer"
  cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":$entrypoint,"Env":["PATH=/bin:/usr/local/bin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created_by":"plegd tests/containerd/containerd.sh"}]}
JSON
  local config; config=$(sha "$work/config.json")
  local config_size; config_size=$(stat -c %s "$work/config.json")
  mv "$work/config.json" "$work/layout/blobs/sha256/$config"
  cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$layer_size}]}
JSON
  local manifest; manifest=$(sha "$work/manifest.json")
  local manifest_size; manifest_size=$(stat -c %s "$work/manifest.json")
  mv "$work/manifest.json" "$work/layout/blobs/sha256/$manifest"
  cat >"$work/layout/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifest_size,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
JSON
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  tar -C "$work/layout" -cf "$out.tmp" .
  mv "$out.tmp" "$out"
  rm -rf "$work"
}

# The test image: busybox + applets, passwd/group, and /pause (also the sandbox image).
build_image() {
  local out="$DIR/image" work
  if [ -f "$out/image.tar" ] && [ "$out/image.tar" -nt "$HERE/containerd.sh" ] && [ "$out/image.tar" -nt "$HERE/pause.c" ]; then
    return
  fi
  log "building the offline test image $IMAGE"
  work=$(mktemp -d)
  mkdir -p "$work/rootfs/bin" "$work/rootfs/etc" "$work/rootfs/tmp" "$out"
  gcc -static -O2 -o "$work/rootfs/pause" "$HERE/pause.c"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  for applet in sh sleep echo cat true false ls kill env head dd yes mkdir rm id hostname ip; do
    ln -s busybox "$work/rootfs/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$work/rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/rootfs/etc/group"
  oci_archive "$work/rootfs" "$IMAGE" '["/pause"]' "$out/image.tar"
  rm -rf "$work"
}

# import_binary BINARY NAME: an image with BINARY as /usr/local/bin/<its name> and the shared
# libraries it loads (as ldd lists them), imported into the running instance as NAME.
import_binary() {
  running || die "import-binary: containerd is not running (start it first)"
  local work
  work=$(mktemp -d)
  binary_archive "$1" "$2" "$work/image.tar"
  ctr -a "$SOCK" -n k8s.io images import "$work/image.tar" >/dev/null
  log "imported $1 as $2 ($(du -h "$work/image.tar" | cut -f1))"
  rm -rf "$work"
}

# binary_archive BINARY NAME OUT: the OCI archive import_binary imports.
binary_archive() {
  local binary=$1 name=$2 out=$3 work base
  [ -x "$binary" ] || die "import-binary: $binary is not an executable"
  work=$(mktemp -d)
  base=$(basename "$binary")
  mkdir -p "$work/rootfs/usr/local/bin" "$work/rootfs/etc" "$work/rootfs/tmp" "$work/rootfs/run"
  cp "$binary" "$work/rootfs/usr/local/bin/$base"
  local lib
  for lib in $(ldd "$binary" | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$work/rootfs$(dirname "$lib")"
    cp -L "$lib" "$work/rootfs$lib"
  done
  printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"$work/rootfs/etc/passwd"
  printf 'root:x:0:\n' >"$work/rootfs/etc/group"
  oci_archive "$work/rootfs" "$name" "[\"/usr/local/bin/$base\"]" "$out"
  rm -rf "$work"
}

# import_archive ARCHIVE: the images an OCI archive names, this machine's platform of each.
import_archive() {
  [ -f "$1" ] || die "import: $1 is not a file"
  running || die "import: containerd is not running (start it first)"
  ctr -a "$SOCK" -n k8s.io images import "$1" >/dev/null
  log "imported $1"
}

# What both config versions say alike: this instance's own sockets, no debug or metrics listener,
# its own plugin directory.
config_common() {
  cat <<TOML
root = "$DIR/root"
state = "$DIR/state"

[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$DIR/containerd-ttrpc.sock"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"
TOML
}

# containerd 1.x: a version-2 config.
write_config_v2() {
  {
    echo "version = 2"
    # A top-level key: before the tables of config_common.
    echo 'disabled_plugins = ["io.containerd.grpc.v1.introspection-service-unused"]'
    config_common
    cat <<TOML

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
    max_conf_num = 1
TOML
  } >"$DIR/config.toml"
}

# containerd 2.x: a version-3 config (the CRI plugin split into images and runtime), NRI off so
# that it leaves no shared /var/run/nri/nri.sock behind.
write_config_v3() {
  {
    echo "version = 3"
    config_common
    cat <<TOML
[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      sandboxer = "podsandbox"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$DIR/cni/net.d"
    max_conf_num = 1
TOML
  } >"$DIR/config.toml"
}

write_config() {
  mkdir -p "$DIR/root" "$DIR/state" "$DIR/opt" "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/cni/cache"
  # The config format follows the binary that will read it.
  local major; major=$(containerd --version | awk '{print $3}' | sed 's/^v//; s/\..*//')
  if [ "${major:-1}" -ge 2 ] 2>/dev/null; then write_config_v3; else write_config_v2; fi
  cat >"$DIR/cni/net.d/10-plegd.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "plegd-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": $GATEWAY,
      "isDefaultGateway": $GATEWAY,
      "ipMasq": false,
      "ipam": {"type": "host-local", "subnet": "$SUBNET", "dataDir": "$DIR/cni/ipam"}
    }
  ]
}
JSON
}

running() {
  [ -f "$DIR/containerd.pid" ] && kill -0 "$(cat "$DIR/containerd.pid")" 2>/dev/null && [ -S "$SOCK" ]
}

# One start or stop at a time: parallel test processes share one instance.
lock() {
  mkdir -p "$(dirname "$DIR")"
  exec 9>"$DIR.lock"
  flock -w 600 9 || die "waited 10 min for $DIR.lock: another start or stop of this containerd holds it"
}

start() {
  need_root
  install
  use_containerd
  lock
  mkdir -p "$DIR"
  build_image
  if running; then
    local have; have=$(cat "$DIR/version" 2>/dev/null || echo unknown)
    [ "$have" = "$VERSION" ] || die "containerd $have is running at $DIR, not $VERSION: stop it first (PLEGD_CONTAINERD_DIR=$DIR $0 stop)"
    log "already running at $SOCK"
    echo "$SOCK"
    return
  fi
  echo "$VERSION" >"$DIR/version"
  write_config
  rm -f "$SOCK"
  # As containerd's own systemd unit (LimitNOFILE=infinity): each container holds stdio fifos and
  # each pod a shim connection, so a node's worth of pods outgrows a login shell's limit.
  ulimit -n "$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  # fd 9 holds the start/stop lock: containerd must not inherit it.
  setsid containerd --config "$DIR/config.toml" >>"$DIR/containerd.log" 2>&1 </dev/null 9>&- &
  echo $! >"$DIR/containerd.pid"
  for _ in $(seq 1 200); do
    if [ -S "$SOCK" ] && ctr -a "$SOCK" version >/dev/null 2>&1; then break; fi
    kill -0 "$(cat "$DIR/containerd.pid")" 2>/dev/null || { tail -20 "$DIR/containerd.log" >&2; die "containerd exited at start"; }
    sleep 0.1
  done
  [ -S "$SOCK" ] || die "containerd did not open $SOCK within 20 s (see $DIR/containerd.log)"
  ctr -a "$SOCK" -n k8s.io images import "$DIR/image/image.tar" >/dev/null
  log "containerd $(containerd --version | awk '{print $3}') ($VERSION) running at $SOCK (log: $DIR/containerd.log)"
  echo "$SOCK"
}

# Kill and delete every task and container in the k8s.io namespace: sandboxes are containers too.
remove_all() {
  [ -S "$SOCK" ] || return 0
  # In parallel: a node's worth of pods is thousands of ctr calls.
  ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null \
    | xargs -r -P 8 -I{} ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL {} >/dev/null 2>&1 || true
  ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null \
    | xargs -r -P 8 -I{} sh -c 'for _ in 1 2 3 4 5 6 7 8 9 10; do ctr -a "$1" -n k8s.io tasks delete -f "$2" && break; sleep 0.1; done' _ "$SOCK" {} >/dev/null 2>&1 || true
  ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null \
    | xargs -r -P 8 -I{} ctr -a "$SOCK" -n k8s.io containers delete {} >/dev/null 2>&1 || true
}

stop() {
  need_root
  lock
  # The ctr of the version that runs there.
  case "$(cat "$DIR/version" 2>/dev/null || true)" in
    2.3|2.4) local release=${RELEASES[$(cat "$DIR/version")]}
      [ ! -x "$PACKAGES_DIR/containerd-v$release/bin/ctr" ] || export PATH="$PACKAGES_DIR/containerd-v$release/bin:$PATH" ;;
    1.7) [ ! -x "$PACKAGES_DIR/trixie/root/usr/bin/ctr" ] || export PATH="$PACKAGES_DIR/trixie/root/usr/bin:$PATH" ;;
  esac
  remove_all
  if [ -f "$DIR/containerd.pid" ]; then
    local pid; pid=$(cat "$DIR/containerd.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$DIR/containerd.pid"
  fi
  # Shims of this instance that outlived it, and what they ran.
  pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $SOCK" 2>/dev/null || true
  local m
  for m in $(findmnt -rn -o TARGET | { grep -F "$DIR/" || true; } | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$DIR/state" "$DIR/root" "$DIR/opt" "$DIR/cni" "$SOCK" "$DIR/containerd-ttrpc.sock" "$DIR/version"
  # Pod cgroup parents that containerd never removes (children first).
  find /sys/fs/cgroup -depth -type d -path '*plegd-test*' -exec rmdir {} \; 2>/dev/null || true
  find /sys/fs/cgroup -maxdepth 2 -type d -name 'plegd-test' -exec rmdir {} \; 2>/dev/null || true
  log "stopped and cleaned $DIR"
}

kill_containerd() {
  need_root
  [ -f "$DIR/containerd.pid" ] && kill -9 "$(cat "$DIR/containerd.pid")" 2>/dev/null || true
  rm -f "$DIR/containerd.pid"
}

case "${1:-}" in
  install) install ;;
  build) [ $# -eq 2 ] || die "usage: $0 build 2.3|2.4"; build_containerd "$2" ;;
  kill) kill_containerd ;;
  import-binary) need_root; import_binary "${2:?usage: import-binary BINARY IMAGE}" "${3:?usage: import-binary BINARY IMAGE}" ;;
  import) need_root; import_archive "${2:?usage: import ARCHIVE}" ;;
  binary-archive) [ $# -eq 4 ] || die "usage: $0 binary-archive BINARY IMAGE OUT"; binary_archive "$2" "$3" "$4" ;;
  oci-archive) [ $# -eq 5 ] || die "usage: $0 oci-archive ROOTFS NAME ENTRYPOINT_JSON OUT"; oci_archive "$2" "$3" "$4" "$5" ;;
  image) need_root; install; mkdir -p "$DIR"; build_image; echo "$DIR/image/image.tar" ;;
  start) start ;;
  stop) stop ;;
  socket) echo "$SOCK" ;;
  *) echo "usage: $0 install|build|image|start|stop|socket|kill|import-binary|import" >&2; exit 2 ;;
esac
