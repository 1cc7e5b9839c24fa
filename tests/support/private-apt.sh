# Debian packages through a package list of a directory's own: `apt-get update`, `apt-get download`
# and `apt-cache` against Debian SUITE with their lists, archives and (empty) status under ROOT, so
# that nothing of the machine's apt state is read or changed; the callers unpack with dpkg-deb -x.
# Sourced by tests/containerd/containerd.sh, tests/prometheus/prometheus.sh and
# deploy/image/image.sh.
#
#   private_apt_update ROOT SUITE [ARCH]  # ROOT/etc/sources.list for SUITE on the machine's mirror,
#                                         # for ARCH (Debian's name: amd64, arm64) or the machine's
#   private_apt ROOT apt-get|apt-cache ARGS...
#   private_apt_locked ROOT COMMAND...      # COMMAND holding ROOT.lock (15 min at most)

# The mirror the machine's own package list names (deb822 or one-line), else Debian's.
debian_mirror() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

private_apt() {
  local root=$1 tool=$2 arch=()
  shift 2
  if [ -s "$root/etc/arch" ]; then
    arch=(-o "APT::Architecture=$(cat "$root/etc/arch")" -o "APT::Architectures=$(cat "$root/etc/arch")")
  fi
  "$tool" "${arch[@]}" -o "Dir::Etc::SourceList=$root/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$root/lists" -o "Dir::Cache::Archives=$root/archives" -o APT::Get::List-Cleanup=0 \
    -o APT::Sandbox::User=root -o "Dir::State::status=$root/etc/status" "$@"
}

private_apt_update() {
  local root=$1 suite=$2 arch=${3:-}
  mkdir -p "$root/lists/partial" "$root/archives/partial" "$root/etc" "$root/deb"
  printf '%s' "$arch" >"$root/etc/arch"
  echo "deb [${arch:+arch=$arch }signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) $suite main" >"$root/etc/sources.list"
  [ -f "$root/etc/status" ] || : >"$root/etc/status"
  private_apt "$root" apt-get -qq update
}

# COMMAND while holding ROOT.lock: scripts run at once (tests in parallel on a new machine) fetch
# into one private root once, the others waiting and then finding it done, rather than racing apt on
# the same lists and archives. COMMAND checks whether the root is complete itself.
private_apt_locked() {
  local root=$1
  shift
  mkdir -p "$(dirname "$root")"
  (
    flock -w 900 9 || { echo "${0##*/}: error: waited 15 min for $root.lock: another fetch into $root holds it" >&2; exit 1; }
    "$@"
  ) 9>"$root.lock"
}
