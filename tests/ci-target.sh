# Sourced by tests/run.sh under CI (as root): one cargo target directory that CI's fresh clones of
# this repository share on a machine, as a CI service's build cache would, so that a warm run builds
# the dependencies of plegd (about 450 crates, for the tests, the arm64 cross build and the fuzz
# targets) not again but only plegd's own packages.
#
#   PLEGD_CI_TARGET_DIR   the directory (default /var/lib/plegd-test/cargo-target)
#   PLEGD_CI_TARGET_GIB   when it has grown beyond this many GiB (1 to 100000) it is emptied first (default 40)
#
# A run holds the directory's lock for its whole life; a second run at the same time builds in its
# own target/ instead (and says so). A clone's own packages are built again (its files are newer
# than what an earlier clone built) under the same names, which cargo takes relative to the
# workspace: they replace the earlier clone's and do not pile up. Sets CARGO_TARGET_DIR.

ci_target=${PLEGD_CI_TARGET_DIR:-/var/lib/plegd-test/cargo-target}
ci_target_gib=${PLEGD_CI_TARGET_GIB:-40}
case $ci_target_gib in
  '' | *[!0-9]* | 0*) ci_target_gib_bad=1 ;;
  *) [ ${#ci_target_gib} -le 6 ] && [ "$ci_target_gib" -le 100000 ] && ci_target_gib_bad= || ci_target_gib_bad=1 ;;
esac
if [ -n "$ci_target_gib_bad" ]; then
  echo "tests/ci-target.sh: PLEGD_CI_TARGET_GIB must be a whole number of GiB from 1 to 100000, got '$ci_target_gib'" >&2
  exit 2
fi
mkdir -p "$(dirname "$ci_target")"
exec {ci_target_lock}>"$ci_target.lock"
if flock -n "$ci_target_lock"; then
  ci_target_kib=0
  if [ -d "$ci_target" ]; then ci_target_kib=$(du -sk "$ci_target" | awk '{ print $1 }'); fi
  if [ "${ci_target_kib:-0}" -gt $((ci_target_gib * 1024 * 1024)) ]; then
    echo "tests/ci-target.sh: $ci_target holds $((ci_target_kib / 1024 / 1024)) GiB (over PLEGD_CI_TARGET_GIB=$ci_target_gib): emptied" >&2
    rm -rf "$ci_target"
  fi
  mkdir -p "$ci_target"
  export CARGO_TARGET_DIR=$ci_target
  echo "tests/ci-target.sh: building in $CARGO_TARGET_DIR (shared by CI's runs on this machine)" >&2
else
  echo "tests/ci-target.sh: another run holds $ci_target; this one builds in its own target/" >&2
  exec {ci_target_lock}>&-
fi
unset ci_target ci_target_gib ci_target_gib_bad ci_target_kib
