#!/usr/bin/env bash
# Prometheus and promtool for the tests, from Debian's packages (unstable's, 3.x), unpacked privately
# with apt-get download and dpkg-deb -x: nothing is installed machine-wide, no service is started.
#
#   tests/prometheus/prometheus.sh install   # if missing; prints the directory holding both binaries
#
# PLEGD_PROMETHEUS_SUITE picks another Debian suite (bookworm: 2.42); PLEGD_PACKAGES_DIR where the
# packages go (/var/lib/plegd-test).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../support/private-apt.sh
. "$HERE/../support/private-apt.sh"
PACKAGES_DIR=${PLEGD_PACKAGES_DIR:-/var/lib/plegd-test}
SUITE=${PLEGD_PROMETHEUS_SUITE:-sid}
ROOT="$PACKAGES_DIR/prometheus-$SUITE"

log() { echo "prometheus.sh: $*" >&2; }

install() {
  local bin="$ROOT/root/usr/bin"
  if [ -x "$bin/promtool" ] && [ -x "$bin/prometheus" ] && [ -f "$ROOT/root/.complete" ]; then
    echo "$bin"
    return
  fi
  log "fetching prometheus from Debian $SUITE ($(debian_mirror))"
  private_apt_update "$ROOT" "$SUITE"
  rm -rf "$ROOT/deb" "$ROOT/root"
  mkdir -p "$ROOT/deb" "$ROOT/root"
  (cd "$ROOT/deb" && private_apt "$ROOT" apt-get -qq download prometheus promtool)
  for deb in "$ROOT"/deb/*.deb; do dpkg-deb -x "$deb" "$ROOT/root"; done
  "$bin/promtool" --version >/dev/null
  "$bin/prometheus" --version >/dev/null
  touch "$ROOT/root/.complete"
  log "$("$bin/prometheus" --version 2>&1 | head -1)"
  echo "$bin"
}

case ${1:-} in
  install) private_apt_locked "$ROOT" install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
