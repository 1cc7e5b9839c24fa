# Debian packages through a package list of a directory's own: `apt-get update`, `apt-get download`
# and `apt-cache` against Debian SUITE with their lists, archives and (empty) status under ROOT, so
# that nothing of the machine's apt state is read or changed; the callers unpack with dpkg-deb -x.
# Sourced by tests/containerd/containerd.sh and tests/apiserver/apiserver.sh.
#
#   private_apt_update ROOT SUITE         # ROOT/etc/sources.list for SUITE on the machine's mirror
#   private_apt ROOT apt-get|apt-cache ARGS...

# The mirror the machine's own package list names (deb822 or one-line), else Debian's.
debian_mirror() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

private_apt() {
  local root=$1 tool=$2
  shift 2
  "$tool" -o "Dir::Etc::SourceList=$root/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$root/lists" -o "Dir::Cache::Archives=$root/archives" -o APT::Get::List-Cleanup=0 \
    -o APT::Sandbox::User=root -o "Dir::State::status=$root/etc/status" "$@"
}

private_apt_update() {
  local root=$1 suite=$2
  mkdir -p "$root/lists/partial" "$root/archives/partial" "$root/etc" "$root/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) $suite main" >"$root/etc/sources.list"
  [ -f "$root/etc/status" ] || : >"$root/etc/status"
  private_apt "$root" apt-get -qq update
}
