#!/usr/bin/env bash
# A Docker engine of the tests' own, for kind on a machine that has none: Debian sid's docker.io
# (with its containerd and tini) and kind, unpacked privately (the machine's packages are not
# touched), dockerd started by hand in a network namespace of its own (its bridges and iptables
# rules stay there) and a mount namespace of its own (its overlay mounts too).
#
#   tests/kind/docker.sh install   # fetch and unpack (once; cached under /var/lib/plegd-test/kind)
#   tests/kind/docker.sh start     # start dockerd; prints the file to source for DOCKER_HOST, PATH
#   tests/kind/docker.sh stop      # stop it and remove every trace: containers, data, namespace
#   tests/kind/docker.sh run CMD...   # CMD in the engine's network namespace, with its env
#
# Needs root, Linux, and Debian 12's runc and iptables (installed where missing).
set -euo pipefail

CACHE=/var/lib/plegd-test/kind
ROOT="$CACHE/packages/root"
DATA=${PLEGD_DOCKER_DIR:-/var/lib/plegd-test/kind-docker}
RUN="$DATA/run"
NETNS=plegd-docker
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../support/private-apt.sh
. "$HERE/../support/private-apt.sh"

log() { echo "docker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
  [ "$(uname -s)" = Linux ] || die "a Docker engine needs Linux"
  [ "$(id -u)" = 0 ] || die "a Docker engine needs root"
}

install() {
  need_root
  local missing=() p
  for p in runc iptables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  fi
  [ -x "$ROOT/usr/sbin/dockerd" ] && [ -x "$ROOT/usr/bin/kind" ] && return
  log "fetching docker.io, docker-cli, containerd, tini-static and kind from Debian sid ($(debian_mirror))"
  local apt="$CACHE/packages"
  private_apt_update "$apt" sid
  rm -f "$apt"/deb/*.deb
  (cd "$apt/deb" && private_apt "$apt" apt-get -qq download docker.io docker-cli containerd tini-static kind) \
    || die "apt-get download (Debian sid) failed"
  rm -rf "$ROOT.tmp"
  local deb
  for deb in "$apt"/deb/*.deb; do dpkg-deb -x "$deb" "$ROOT.tmp"; done
  ln -sf tini-static "$ROOT.tmp/usr/bin/docker-init"
  rm -rf "$ROOT"
  mv "$ROOT.tmp" "$ROOT"
}

running() {
  [ -f "$RUN/dockerd.pid" ] && kill -0 "$(cat "$RUN/dockerd.pid")" 2>/dev/null && [ -S "$RUN/docker.sock" ]
}

# The environment the engine's clients need, as a file to source.
write_env() {
  cat >"$DATA/env" <<ENV
export DOCKER_HOST=unix://$RUN/docker.sock
export PATH=$ROOT/usr/bin:$ROOT/usr/sbin:\$PATH
ENV
}

start() {
  need_root
  install
  mkdir -p "$DATA" "$RUN"
  exec 9>"$DATA.lock"
  flock -w 600 9 || die "waited 10 min for $DATA.lock: another start or stop of this Docker engine holds it"
  write_env
  if running; then echo "$DATA/env"; return; fi
  ip netns add "$NETNS" 2>/dev/null || true
  ip netns exec "$NETNS" ip link set lo up
  mkdir -p "$RUN/cgroup"
  # `ip netns exec` would mount a sysfs over /sys and hide /sys/fs/cgroup (dockerd: "Devices cgroup
  # isn't mounted"): a mount namespace of its own instead, with the namespace's sysfs and the
  # host's cgroup mounts moved back in.
  PATH="$ROOT/usr/bin:$ROOT/usr/sbin:$PATH" setsid unshare --mount --propagation slave -- \
    nsenter --net="/run/netns/$NETNS" -- bash -c '
      set -e
      mount --rbind /sys/fs/cgroup "$1/cgroup"
      mount -t sysfs sysfs /sys
      mount --move "$1/cgroup" /sys/fs/cgroup
      exec dockerd --data-root "$2/data" --exec-root "$1/exec" --pidfile "$1/dockerd.pid" \
        -H "unix://$1/docker.sock" --exec-opt native.cgroupdriver=cgroupfs --cgroup-parent /plegd-docker \
        --storage-driver overlay2 --userland-proxy=false
    ' _ "$RUN" "$DATA" >>"$DATA/dockerd.log" 2>&1 </dev/null 9>&- &
  local i
  for i in $(seq 1 300); do
    [ -S "$RUN/docker.sock" ] && DOCKER_HOST="unix://$RUN/docker.sock" "$ROOT/usr/bin/docker" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  DOCKER_HOST="unix://$RUN/docker.sock" "$ROOT/usr/bin/docker" version >/dev/null 2>&1 \
    || { tail -20 "$DATA/dockerd.log" >&2; die "dockerd did not answer within 30 s (see $DATA/dockerd.log)"; }
  log "Docker $("$ROOT/usr/bin/docker" --version | awk '{print $3}' | tr -d ,) running at $RUN/docker.sock (log: $DATA/dockerd.log)"
  echo "$DATA/env"
}

stop() {
  need_root
  exec 9>"$DATA.lock"
  flock -w 600 9 || die "waited 10 min for $DATA.lock: another start or stop of this Docker engine holds it"
  if running; then
    local pid
    pid=$(cat "$RUN/dockerd.pid")
    # Containers first (kind's nodes), then the engine.
    DOCKER_HOST="unix://$RUN/docker.sock" "$ROOT/usr/bin/docker" ps -aq 2>/dev/null \
      | xargs -r env DOCKER_HOST="unix://$RUN/docker.sock" "$ROOT/usr/bin/docker" rm -f >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  pkill -9 -f "containerd --config $RUN/exec/containerd/containerd.toml" 2>/dev/null || true
  pkill -9 -f "containerd-shim-runc-v2 -namespace moby .*$RUN/exec" 2>/dev/null || true
  ip netns del "$NETNS" 2>/dev/null || true
  local m
  for m in $(findmnt -rn -o TARGET | { grep -F "$DATA/" || true; } | sort -r); do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$DATA"
  find /sys/fs/cgroup -depth -type d -path '*plegd-docker*' -exec rmdir {} \; 2>/dev/null || true
  log "stopped and removed $DATA"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  run)
    shift
    [ -f "$DATA/env" ] || die "the engine is not running (start it first)"
    # shellcheck disable=SC1091
    . "$DATA/env"
    exec nsenter --net="/run/netns/$NETNS" -- "$@"
    ;;
  *) echo "usage: $0 install|start|stop|run CMD..." >&2; exit 2 ;;
esac
