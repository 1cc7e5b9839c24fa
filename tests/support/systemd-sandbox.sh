#!/usr/bin/env bash
# A real systemd (PID 1 of its own pid namespace) for tests/systemd_unit.rs, that manages only the
# units in DIR/units: its own mount, uts, ipc and cgroup namespaces, a private /run, and cgroup
# hierarchies rooted in a cgroup of its own (plegd-sd-NAME), so nothing of the machine's is touched
# but one setting of the network namespace it shares with the machine: systemd raises
# net.unix.max_dgram_qlen (10 → 512) as it starts, which `clean` puts back.
#
#   systemd-sandbox.sh boot DIR NAME      # runs systemd in the foreground until killed
#   systemd-sandbox.sh clean NAME         # removes the sandbox's cgroups once it is gone
# Needs root, util-linux's unshare, and systemd.
set -euo pipefail
HIERARCHIES=(systemd pids devices memory unified)

case "${1:-}" in
  boot)
    dir=$2 name=$3
    # The first sandbox to boot keeps the machine's value; `clean` of the last one gone restores it.
    [ -e "/run/plegd-sd-max_dgram_qlen" ] || cat /proc/sys/net/unix/max_dgram_qlen >/run/plegd-sd-max_dgram_qlen
    for h in "${HIERARCHIES[@]}"; do
      mkdir -p "/sys/fs/cgroup/$h/plegd-sd-$name"
      echo $$ >"/sys/fs/cgroup/$h/plegd-sd-$name/cgroup.procs"
    done
    exec unshare --fork --pid --mount --uts --ipc --cgroup --mount-proc "$0" inside "$dir"
    ;;
  inside)
    dir=$2
    mount --make-rprivate /
    mount -t tmpfs tmpfs /run
    # Inside the cgroup namespace, fresh mounts show only the sandbox's own subtree.
    mount -t tmpfs cgroup /sys/fs/cgroup
    for h in systemd:none,name=systemd pids:pids devices:devices memory:memory; do
      mkdir -p "/sys/fs/cgroup/${h%%:*}"
      mount -t cgroup -o "${h#*:}" cgroup "/sys/fs/cgroup/${h%%:*}"
    done
    mkdir -p /sys/fs/cgroup/unified
    mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
    mount --bind "$dir/units" /etc/systemd/system
    exec /lib/systemd/systemd --system --unit=plegd-test.target
    ;;
  clean)
    name=$2
    if [ -e /run/plegd-sd-max_dgram_qlen ] && ! pgrep -f 'systemd --system --unit=plegd-test.target' >/dev/null; then
      cat /run/plegd-sd-max_dgram_qlen >/proc/sys/net/unix/max_dgram_qlen
      rm -f /run/plegd-sd-max_dgram_qlen
    fi
    for h in "${HIERARCHIES[@]}"; do
      [ -d "/sys/fs/cgroup/$h/plegd-sd-$name" ] || continue
      find "/sys/fs/cgroup/$h/plegd-sd-$name" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    ;;
  *)
    echo "usage: $0 boot DIR NAME | clean NAME" >&2
    exit 2
    ;;
esac
