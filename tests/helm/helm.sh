#!/usr/bin/env bash
# Helm for the tests, built from its own module (helm.sh/helm/v4) through the Go module proxy, as
# tests/cluster/cluster.sh builds Kubernetes: nothing is installed machine-wide. Cached by version
# under /var/lib/plegd-test/helm (about 2 minutes on 2 cores the first time).
#
#   tests/helm/helm.sh install   # if missing; prints the helm binary's path
#   tests/helm/helm.sh plugins   # the tests' post-renderer plugin installed; prints the plugin directory (HELM_PLUGINS)
#
# PLEGD_HELM_VERSION picks the release: v4.3.2 (the default, helm.sh/helm/v4) or v3.21.4 (helm.sh/helm/v3,
# kept for one install and upgrade while Helm 3 gets security fixes). No other release: v3.22.0 is
# served by the proxy but not to be used. PLEGD_PACKAGES_DIR says where it goes (/var/lib/plegd-test).
#
# The post-renderer: Helm 4 takes only the name of a post-renderer plugin (`--post-renderer NAME`),
# Helm 3 an executable. tests/helm/plegd-test-post-render is a plugin (type postrenderer/v1, a subprocess) that
# runs `bash ARGS...` with the rendered objects on its standard input: the tests pass the script
# and its subcommand with --post-renderer-args. `plugins` installs it with `helm plugin install`
# into a data directory of the tests' own, whose plugins directory the callers name in HELM_PLUGINS.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES_DIR=${PLEGD_PACKAGES_DIR:-/var/lib/plegd-test}
VERSION=${PLEGD_HELM_VERSION:-v4.3.2}
ROOT="$PACKAGES_DIR/helm"
BIN="$ROOT/$VERSION/helm"
# The tests' post-renderer plugin, tests/helm/$PLUGIN, as `helm plugin install` puts it: a link in
# the plugins directory of helm's data directory (Helm 4.3.2 installs a local plugin there whatever
# HELM_PLUGINS says), one per checkout.
PLUGIN=plegd-test-post-render
DATA="$HERE/../../target/helm-data/$VERSION"

log() { echo "helm.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$VERSION" in
  v4.3.2) MODULE=helm.sh/helm/v4 ;;
  v3.21.4) MODULE=helm.sh/helm/v3 ;;
  *) die "PLEGD_HELM_VERSION must be v4.3.2 or v3.21.4, not '$VERSION' (v3.22.0 is not to be used)" ;;
esac

goenv() {
  env GOMODCACHE="$ROOT/gomod" GOCACHE="$ROOT/gocache" GOFLAGS="-modcacherw -buildvcs=false" \
    GOTOOLCHAIN=auto CGO_ENABLED=0 GO111MODULE=on "$@"
}

install() {
  if [ -x "$BIN" ] && "$BIN" version --short >/dev/null 2>&1; then
    echo "$BIN"
    return
  fi
  # One build at a time: tests that run in parallel may ask for the same helm at once.
  mkdir -p "$ROOT"
  exec 6>"$ROOT/build.lock"
  flock -w 900 6 || die "waited 15 min for $ROOT/build.lock: another helm build holds it"
  if [ -x "$BIN" ] && "$BIN" version --short >/dev/null 2>&1; then
    exec 6>&-
    echo "$BIN"
    return
  fi
  command -v go >/dev/null || die "Go is needed to build helm (go 1.25 or newer on the PATH)"
  log "building helm $VERSION from $MODULE (the Go module proxy; once)"
  mkdir -p "$ROOT/$VERSION"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  # Built in the module's own directory, so that its go.mod's replaces and versions are the ones
  # built (go install pkg@version would do the same but hides errors).
  (cd "$work" && goenv go mod init plegd.test/helm >/dev/null 2>&1 \
    && goenv go mod download -json "$MODULE@$VERSION" >/dev/null \
    || die "the Go module proxy refused $MODULE@$VERSION")
  local src
  src=$(goenv go mod download -json "$MODULE@$VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
  [ -d "$src" ] || die "no source for $MODULE@$VERSION"
  (cd "$src" && goenv nice -n 10 go build -trimpath \
    -ldflags "-s -w -X $MODULE/internal/version.version=$VERSION" \
    -o "$BIN.tmp" ./cmd/helm) || die "building helm failed"
  [ "$("$BIN.tmp" version --template '{{.Version}}')" = "$VERSION" ] \
    || die "the helm built says it is $("$BIN.tmp" version --short), not $VERSION"
  mv "$BIN.tmp" "$BIN"
  exec 6>&-
  log "$("$BIN" version --short)"
  echo "$BIN"
}

# plugins: the post-renderer plugin installed (Helm 4; Helm 3 runs the executable directly), once
# per plugin version; prints the plugin directory for HELM_PLUGINS.
plugins() {
  local helm
  helm=$(install)
  case "$VERSION" in v3.*) die "plugins: Helm 3 takes an executable as its post-renderer, not a plugin" ;; esac
  mkdir -p "$DATA/plugins"
  local data want have
  data=$(realpath "$DATA")
  want=$(sed -n 's/^version: "\(.*\)"$/\1/p' "$HERE/$PLUGIN/plugin.yaml")
  have=$(HELM_DATA_HOME="$data" HELM_PLUGINS="$data/plugins" "$helm" plugin list 2>/dev/null | awk -v p="$PLUGIN" '$1 == p { print $2 }')
  if [ "$have" != "$want" ]; then
    rm -rf "${data:?}/plugins/$PLUGIN"
    HELM_DATA_HOME="$data" HELM_PLUGINS="$data/plugins" "$helm" plugin install "$HERE/$PLUGIN" >&2 \
      || die "helm plugin install $HERE/$PLUGIN failed"
    have=$(HELM_DATA_HOME="$data" HELM_PLUGINS="$data/plugins" "$helm" plugin list | awk -v p="$PLUGIN" '$1 == p { print $2 }')
    [ "$have" = "$want" ] || die "helm plugin list does not show $PLUGIN $want after its install (HELM_PLUGINS=$data/plugins)"
  fi
  echo "$data/plugins"
}

case ${1:-} in
  install) install ;;
  plugins) plugins ;;
  *) echo "usage: $0 install|plugins" >&2; exit 2 ;;
esac
