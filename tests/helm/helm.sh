#!/usr/bin/env bash
# Helm for the tests, built from its own module (helm.sh/helm/v3) through the Go module proxy, as
# tests/cluster/cluster.sh builds Kubernetes: nothing is installed machine-wide. Cached by version
# under /var/lib/plegd-test/helm (about 2 minutes on 2 cores the first time).
#
#   tests/helm/helm.sh install   # if missing; prints the helm binary's path
#
# PLEGD_HELM_VERSION picks another release of helm.sh/helm/v3 (v3.22.0); PLEGD_PACKAGES_DIR where
# it goes (/var/lib/plegd-test).
set -euo pipefail
PACKAGES_DIR=${PLEGD_PACKAGES_DIR:-/var/lib/plegd-test}
VERSION=${PLEGD_HELM_VERSION:-v3.22.0}
ROOT="$PACKAGES_DIR/helm"
BIN="$ROOT/$VERSION/helm"

log() { echo "helm.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

goenv() {
  env GOMODCACHE="$ROOT/gomod" GOCACHE="$ROOT/gocache" GOFLAGS="-modcacherw -buildvcs=false" \
    GOTOOLCHAIN=auto CGO_ENABLED=0 GO111MODULE=on "$@"
}

install() {
  if [ -x "$BIN" ] && "$BIN" version --short >/dev/null 2>&1; then
    echo "$BIN"
    return
  fi
  command -v go >/dev/null || die "Go is needed to build helm (go 1.24 or newer on the PATH)"
  log "building helm $VERSION from helm.sh/helm/v3 (the Go module proxy; once)"
  mkdir -p "$ROOT/$VERSION"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  # A module of its own that requires helm at that version, so that its go.mod's replaces and
  # versions are the ones built (go install pkg@version would do the same but hides errors).
  (cd "$work" && goenv go mod init plegd.test/helm >/dev/null 2>&1 \
    && goenv go mod download -json "helm.sh/helm/v3@$VERSION" >/dev/null \
    || die "the Go module proxy refused helm.sh/helm/v3@$VERSION")
  local src
  src=$(goenv go mod download -json "helm.sh/helm/v3@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
  [ -d "$src" ] || die "no source for helm.sh/helm/v3@$VERSION"
  (cd "$src" && goenv nice -n 10 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION" \
    -o "$BIN.tmp" ./cmd/helm) || die "building helm failed"
  mv "$BIN.tmp" "$BIN"
  log "$("$BIN" version --short)"
  echo "$BIN"
}

case ${1:-} in
  install) install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
