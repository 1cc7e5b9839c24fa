#!/usr/bin/env bash
# kind's node image for Kubernetes v1.37.2, built here with no pull: `kind build node-image` fetches
# its base image and the cluster's component images from registries, which these machines cannot
# reach. The same parts, from what the project builds already and Debian's archive:
#   - a Debian 12 root file system (debootstrap) with the packages kind's base image installs;
#   - kind v0.33.0's own base files (entrypoint, systemd units, kubelet drop-ins) from its Go module,
#     put in place as its images/base/Dockerfile does;
#   - containerd v2.3.7 and the runc it pins (v1.5.2), as tests/containerd/containerd.sh builds them
#     from their modules (cached), Debian 12's CNI plugins with a bridge network (kind's kindnetd is an image to pull), crictl v1.37.0 built from
#     sigs.k8s.io/cri-tools;
#   - kubeadm, kubelet and kubectl v1.37.2 built from k8s.io/kubernetes (tests/cluster/cluster.sh);
#   - kube-apiserver, kube-controller-manager, kube-scheduler, etcd and pause images made from the
#     same binaries and preloaded into the node's containerd, as kind preloads its own.
# containerd runs with restrict_oom_score_adj = true: on machines whose processes lack
# CAP_SYS_RESOURCE, runc cannot give a container a negative oom_score_adj.
#
#   tests/kind/node-image.sh build   # the image (plegd.test/kind-node:v1.37.2) in the test Docker engine
#
# Needs the engine of tests/kind/docker.sh running; the root file system, crictl and kubeadm are
# cached under /var/lib/plegd-test/kind (about 6 minutes the first time, 1 after).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=/var/lib/plegd-test/kind
K8S_VERSION=v1.37.2
KIND_VERSION=v0.33.0
CRICTL_VERSION=v1.37.0
ETCD_IMAGE_TAG=3.7.0-0
PAUSE_TAGS=(3.10.2 3.10)
NODE_IMAGE=plegd.test/kind-node:$K8S_VERSION
# What kind's base image installs (images/base/Dockerfile), from Debian 12, and runc and the CNI
# plugins the node runs.
PACKAGES=systemd,systemd-sysv,dbus,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,procps,bash,ca-certificates,curl,jq,e2fsprogs,runc,containernetworking-plugins,socat

log() { echo "node-image.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

docker_env() {
  local env=/var/lib/plegd-test/kind-docker/env
  [ -f "$env" ] || die "the test Docker engine is not running (bash tests/kind/docker.sh start)"
  # shellcheck disable=SC1090
  . "$env"
}

rootfs() {
  [ -f "$CACHE/rootfs/.complete" ] && return
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || die "apt-get install debootstrap failed"
  log "debootstrap: Debian 12 with $PACKAGES"
  rm -rf "$CACHE/rootfs.tmp"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$CACHE/rootfs.tmp" \
    "$(. "$REPO/tests/support/private-apt.sh"; debian_mirror)" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (see $CACHE/debootstrap.log)"; }
  touch "$CACHE/rootfs.tmp/.complete"
  rm -rf "$CACHE/rootfs"
  mv "$CACHE/rootfs.tmp" "$CACHE/rootfs"
}

build_crictl() {
  [ -x "$CACHE/bin/crictl" ] && return
  log "building crictl $CRICTL_VERSION (sigs.k8s.io/cri-tools)"
  GOBIN="$CACHE/bin" GOMODCACHE="$CACHE/gomod" GOFLAGS=-modcacherw CGO_ENABLED=0 GOTOOLCHAIN=local \
    go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" >&2 || die "go install crictl failed"
}

kind_files() {
  local dir
  dir=$(cd /tmp && GOMODCACHE="$CACHE/gomod" GOFLAGS=-modcacherw go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || die "go mod download sigs.k8s.io/kind@$KIND_VERSION failed"
  [ -d "$dir/images/base/files" ] || die "sigs.k8s.io/kind@$KIND_VERSION has no images/base/files"
  echo "$dir/images/base/files"
}

# one_layer_image DIR NAME: an OCI archive of DIR as NAME's one layer (tests/containerd/containerd.sh's).
one_layer_image() {
  bash "$REPO/tests/containerd/containerd.sh" oci-archive "$1" "$2" "$3" "$4"
}

build() {
  docker_env
  command -v go >/dev/null || die "the node image needs Go (kubeadm, crictl)"
  local started=$SECONDS bin kubeadm files containerd_bin work node
  bin=$(bash "$REPO/tests/cluster/cluster.sh" bin)
  containerd_bin=$(bash "$REPO/tests/containerd/containerd.sh" build 2.3)
  kubeadm=$(bash "$REPO/tests/cluster/cluster.sh" kubeadm)
  rootfs
  build_crictl
  files=$(kind_files)
  work=$(mktemp -d "$CACHE/node.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  node="$work/node"
  log "assembling the node's file system"
  cp -a "$CACHE/rootfs" "$node"
  rm -f "$node/.complete"
  # kind's images/base/Dockerfile, step by step.
  install -m 0755 "$files"/usr/local/bin/* "$node/usr/local/bin/"
  mkdir -p "$node/kind/bin" "$node/etc/containerd" "$node/etc/default" "$node/etc/sysctl.d" \
    "$node/etc/systemd/system/kubelet.service.d" "$node/etc/kubernetes/manifests"
  cp "$files/kind/README.txt" "$node/kind/" 2>/dev/null || true
  install -m 0755 "$files"/kind/bin/* "$node/kind/bin/"
  install -m 0644 "$files/etc/crictl.yaml" "$node/etc/"
  install -m 0644 "$files"/etc/default/* "$node/etc/default/"
  install -m 0644 "$files"/etc/sysctl.d/* "$node/etc/sysctl.d/"
  install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice "$node/etc/systemd/system/"
  install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$node/etc/systemd/system/kubelet.service.d/"
  # containerd as kind configures it, but for a machine without CAP_SYS_RESOURCE.
  sed 's/^\(\s*restrict_oom_score_adj\s*=\s*\).*/\1true/' "$files/etc/containerd/config.toml" >"$node/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$node/etc/containerd/config.toml" || die "kind's containerd config has no restrict_oom_score_adj"
  find "$node/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
  rm -f "$node"/lib/systemd/system/multi-user.target.wants/* "$node"/etc/systemd/system/*.wants/* \
    "$node"/lib/systemd/system/local-fs.target.wants/* "$node"/lib/systemd/system/sockets.target.wants/*udev* \
    "$node"/lib/systemd/system/sockets.target.wants/*initctl* "$node"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$node/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$node/sbin/init"
  systemctl --root="$node" enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  systemctl --root="$node" mask systemd-binfmt.service >/dev/null 2>&1
  # containerd, its shim, ctr and runc (found before Debian's /usr/sbin/runc on systemd's PATH).
  install -m 0755 "$containerd_bin/containerd" "$containerd_bin/ctr" "$containerd_bin/containerd-shim-runc-v2" \
    "$containerd_bin/runc" "$node/usr/local/bin/"
  "$node/usr/local/bin/ctr" oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' >"$node/etc/containerd/cri-base.json"
  install -m 0755 "$CACHE/bin/crictl" "$node/usr/local/bin/"
  # CNI: Debian's plugins where kind looks for them, and a bridge network for the pods.
  rm -rf "$node/opt/cni/bin"
  mkdir -p "$node/opt/cni" "$node/etc/cni/net.d"
  ln -s /usr/lib/cni "$node/opt/cni/bin"
  cat >"$node/etc/cni/net.d/10-bridge.conflist" <<'JSON'
{
  "cniVersion": "0.4.0",
  "name": "kind-bridge",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  # Kubernetes: kubeadm, and the kubelet and kubectl of the project's binary.
  install -m 0755 "$kubeadm" "$node/usr/bin/kubeadm"
  install -m 0755 "$bin/kubernetes" "$node/usr/bin/kubernetes"
  ln -sf kubernetes "$node/usr/bin/kubelet"
  ln -sf kubernetes "$node/usr/bin/kubectl"
  mkdir -p "$node/kind"
  echo "$K8S_VERSION" >"$node/kind/version"

  # The images kubeadm runs, each one static binary (and the pause binary), preloaded below.
  log "making the control plane's images"
  mkdir -p "$work/images"
  local c dir
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    dir="$work/rootfs-$c"
    mkdir -p "$dir/usr/local/bin"
    cp "$bin/kubernetes" "$dir/usr/local/bin/kubernetes"
    ln -s kubernetes "$dir/usr/local/bin/$c"
    one_layer_image "$dir" "registry.k8s.io/$c:$K8S_VERSION" "[\"/usr/local/bin/$c\"]" "$work/images/$c.tar"
    rm -rf "$dir"
  done
  dir="$work/rootfs-etcd"
  mkdir -p "$dir/usr/local/bin"
  cp "$bin/etcd" "$dir/usr/local/bin/etcd"
  one_layer_image "$dir" "registry.k8s.io/etcd:$ETCD_IMAGE_TAG" '["/usr/local/bin/etcd"]' "$work/images/etcd.tar"
  rm -rf "$dir"
  local tag
  for tag in "${PAUSE_TAGS[@]}"; do
    dir="$work/rootfs-pause"
    mkdir -p "$dir"
    gcc -static -O2 -o "$dir/pause" "$REPO/tests/containerd/pause.c"
    one_layer_image "$dir" "registry.k8s.io/pause:$tag" '["/pause"]' "$work/images/pause-$tag.tar"
    rm -rf "$dir"
  done

  log "importing the node's base into Docker"
  tar -C "$node" -cf - . | docker import --change 'ENV container=docker' --change 'STOPSIGNAL SIGRTMIN+3' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "plegd.test/kind-base:$K8S_VERSION" >/dev/null
  rm -rf "$node"
  # Preloaded as kind preloads: in a node container whose containerd imports them, then committed.
  log "preloading the images into the node's containerd"
  local id
  id=$(docker run -d --privileged --entrypoint sleep "plegd.test/kind-base:$K8S_VERSION" infinity)
  docker exec "$id" mkdir -p /kind/images
  docker cp "$work/images/." "$id:/kind/images/" >/dev/null
  docker exec "$id" bash -c '
    set -e
    containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
    for f in /kind/images/*.tar; do
      ctr -n k8s.io images import --label io.cri-containerd.pinned=pinned --no-unpack "$f" >/dev/null
    done
    ctr -n k8s.io images ls -q
    kill %1; wait || true
    rm -rf /kind/images /tmp/containerd.log' >&2 || { docker rm -f "$id" >/dev/null; die "preloading the images failed"; }
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' "$id" "$NODE_IMAGE" >/dev/null
  docker rm -f "$id" >/dev/null
  docker rmi "plegd.test/kind-base:$K8S_VERSION" >/dev/null
  log "$NODE_IMAGE built in $((SECONDS - started)) s"
  echo "$NODE_IMAGE"
}

case "${1:-}" in
  build) build ;;
  *) echo "usage: $0 build" >&2; exit 2 ;;
esac
