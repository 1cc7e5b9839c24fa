#!/usr/bin/env bash
# plegd's image for amd64 and arm64, built on this machine without a container engine or a
# registry: each architecture's release binary with the C libraries it links, taken from Debian
# 12's own packages of that architecture, run as the non-root user 65532; an OCI image index over
# both; and a CycloneDX SBOM of every crate and package in it, beside the image.
#
#   bash deploy/image/image.sh build [--out DIR]   # both architectures, release (target/image):
#                                                  #   DIR/plegd.oci.tar, DIR/layout, DIR/plegd.cdx.json
#   bash deploy/image/image.sh assemble --out DIR --name NAME ARCH=BINARY...
#                                                  # an image index of binaries built already
#   bash deploy/image/image.sh cross-binary [PROFILE]   # plegd for arm64 (release); prints its path
#   bash deploy/image/image.sh base ARCH           # Debian's C libraries for ARCH; prints their root
#   bash deploy/image/image.sh sbom OUT            # the CycloneDX SBOM of plegd's crates
#   bash deploy/image/image.sh tools               # install what the above need, where missing
#
# PLEGD_IMAGE_NAME names the image (plegd:dev, the name deploy/ runs). Load it with
#   ctr -n k8s.io images import target/image/plegd.oci.tar          (containerd, on a node)
#   skopeo copy oci-archive:target/image/plegd.oci.tar docker://REGISTRY/plegd:TAG --all
#
# The arm64 binary is cross-built: Rust's standard library for arm64 is built from source
# (cargo -Zbuild-std, so with the nightly toolchain this machine has) from Debian's rust-src of
# the same Rust release, and linked by Debian's gcc-aarch64-linux-gnu; qemu-user runs it in the
# tests (tests/image.rs). Needs root (apt-get for the cross compiler), python3, readelf, cargo
# and, for the SBOM, cargo-cyclonedx (installed from crates.io when missing).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$REPO/deploy/image"
# Where cargo puts what it builds (CARGO_TARGET_DIR when set).
TARGET=$(cd "$REPO" && realpath -m "${CARGO_TARGET_DIR:-target}")
CACHE=${PLEGD_IMAGE_CACHE:-/var/lib/plegd-test/image}
NAME=${PLEGD_IMAGE_NAME:-plegd:dev}
# shellcheck source=../../tests/support/private-apt.sh
. "$REPO/tests/support/private-apt.sh"

log() { echo "image.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# base ARCH: Debian 12's libc6 and libgcc-s1 for ARCH (the libraries a Rust binary links),
# unpacked under $CACHE/base-ARCH/root with packages.json naming each .deb and its sha256 (apt
# checked them against the archive's signed index). Fetched again once a day, so that the image
# carries the archive's newest security release.
base() {
  case "$1" in amd64|arm64) ;; *) die "base: ARCH must be amd64 or arm64, not '$1'" ;; esac
  private_apt_locked "$CACHE/base-$1" fetch_base "$1"
}

fetch_base() {
  local arch=$1 root="$CACHE/base-$1"
  if [ -f "$root/root/packages.json" ] && [ -z "$(find "$root/root/packages.json" -mmin +1440)" ]; then
    echo "$root/root"
    return
  fi
  log "fetching Debian 12's libc6 and libgcc-s1 for $arch ($(debian_mirror))"
  private_apt_update "$root" bookworm "$arch"
  # bookworm-security's libc6, where newer than the point release's.
  echo "deb [arch=$arch signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror | sed 's#/debian$#/debian-security#') bookworm-security main" \
    >>"$root/etc/sources.list"
  private_apt "$root" apt-get -qq update 2>/dev/null || private_apt_update "$root" bookworm "$arch"
  rm -rf "$root/deb" "$root/root.tmp"
  mkdir -p "$root/deb" "$root/root.tmp"
  (cd "$root/deb" && private_apt "$root" apt-get -qq download "libc6:$arch" "libgcc-s1:$arch") \
    || die "base: apt-get download libc6:$arch libgcc-s1:$arch failed"
  local deb first=1
  {
    echo "["
    for deb in "$root"/deb/*.deb; do
      dpkg-deb -x "$deb" "$root/root.tmp"
      [ $first = 1 ] || echo ","
      first=0
      printf '{"name":"%s","version":"%s","architecture":"%s","sha256":"%s"}' \
        "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" "$(dpkg-deb -f "$deb" Architecture)" \
        "$(sha256sum "$deb" | cut -d' ' -f1)"
    done
    echo "]"
  } >"$root/root.tmp/packages.json"
  rm -rf "$root/root"
  mv "$root/root.tmp" "$root/root"
  echo "$root/root"
}

# cross_toolchain: the nightly toolchain with Rust's library source beside it (Debian sid's
# rust-src of the same release), as a toolchain of its own: hard links to the nightly's files,
# so that nothing of the installed toolchain changes. Prints its directory.
cross_toolchain() {
  private_apt_locked "$CACHE/cross-toolchain" fetch_cross_toolchain
}

fetch_cross_toolchain() {
  local nightly release src_deb tc="$CACHE/cross-toolchain"
  nightly=$(rustup run nightly rustc --print sysroot 2>/dev/null) \
    || die "the arm64 build needs Rust's nightly toolchain (rustup toolchain list shows none) for -Zbuild-std"
  release=$("$nightly/bin/rustc" --version | sed -E 's/^rustc ([0-9]+\.[0-9]+)\..*/\1/')
  if [ ! -f "$tc/release" ] || [ "$(cat "$tc/release")" != "$release $nightly" ]; then
    local apt="$CACHE/sid"
    log "fetching Debian's rust-src for Rust $release (nightly: $("$nightly/bin/rustc" --version))"
    private_apt_update "$apt" sid
    local version
    version=$(private_apt "$apt" apt-cache show rust-src | awk '/^Version:/ {print $2; exit}')
    case "$version" in
      "$release".*) ;;
      *) log "warning: Debian sid's rust-src is $version, the nightly toolchain is $release: the standard library may not build" ;;
    esac
    rm -f "$apt"/deb/rust-src_*.deb
    (cd "$apt/deb" && private_apt "$apt" apt-get -qq download rust-src) || die "apt-get download rust-src (Debian sid) failed"
    rm -rf "$tc"
    cp -al "$nightly" "$tc"
    rm -rf "$tc/lib/rustlib/src"
    mkdir -p "$tc/lib/rustlib/src.tmp"
    dpkg-deb -x "$apt"/deb/rust-src_*.deb "$tc/lib/rustlib/src.tmp"
    mkdir -p "$tc/lib/rustlib/src"
    # Debian's usr/lib/rustlib/src/rust is a link to usr/src/rustc-VERSION.
    mv "$(realpath "$tc/lib/rustlib/src.tmp/usr/lib/rustlib/src/rust")" "$tc/lib/rustlib/src/rust"
    rm -rf "$tc/lib/rustlib/src.tmp"
    echo "$release $nightly" >"$tc/release"
  fi
  echo "$tc"
}

# cyclonedx: cargo-cyclonedx from crates.io, where missing (the SBOM needs nothing else).
cyclonedx() {
  cargo cyclonedx --version >/dev/null 2>&1 && return
  log "installing cargo-cyclonedx from crates.io (a few minutes, once)"
  cargo install --locked cargo-cyclonedx >&2 || die "cargo install cargo-cyclonedx failed"
}

# tools: what the build and tests/image.rs need beyond Rust: Debian's cross compiler and
# qemu-user (apt-get, as root) and cargo-cyclonedx (crates.io), each where missing.
tools() {
  local missing=() p
  command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
  command -v readelf >/dev/null || missing+=(binutils)
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "the image needs ${missing[*]} (apt-get install ${missing[*]}, as root)"
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
      || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; } \
      || die "apt-get install ${missing[*]} failed"
  fi
  cyclonedx
  for p in aarch64-linux-gnu-gcc qemu-aarch64 readelf; do command -v "$p" >/dev/null || die "$p is still missing"; done
}

# cross_binary [PROFILE]: plegd for aarch64-unknown-linux-gnu; prints the binary's path.
cross_binary() {
  local profile=${1:-release} tc dir
  tools
  tc=$(cross_toolchain)
  log "building plegd for arm64 ($profile, the standard library from source)"
  (
    cd "$REPO"
    export RUSTC="$tc/bin/rustc" CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    "$tc/bin/cargo" build --locked --bin plegd --profile "$profile" --target aarch64-unknown-linux-gnu \
      -Zbuild-std=std,panic_abort --target-dir "$TARGET/cross" >&2
  )
  dir=$profile
  [ "$profile" != dev ] || dir=debug
  echo "$TARGET/cross/aarch64-unknown-linux-gnu/$dir/plegd"
}

# sbom OUT: cargo-cyclonedx's CycloneDX JSON of the plegd package (its crates, licenses and
# Cargo.lock's checksums), without dev- and build-only dependencies.
sbom() {
  local out=$1
  cyclonedx
  # Each package of the workspace gets one; plegd's is the one at the top.
  (cd "$REPO" && cargo cyclonedx -q --format json --spec-version 1.5 --no-build-deps --override-filename plegd-sbom >&2) \
    || die "cargo cyclonedx failed"
  mv "$REPO/plegd-sbom.json" "$out"
  find "$REPO/tests" -maxdepth 2 -name 'plegd-sbom.json' -delete
}

# assemble --out DIR --name NAME [--sbom FILE] ARCH=BINARY...
assemble() {
  local out="" name="$NAME" sbom_file="" images=() spec root
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) out=${2:?--out needs a directory}; shift 2 ;;
      --name) name=${2:?--name needs an image name}; shift 2 ;;
      --sbom) sbom_file=${2:?--sbom needs a file}; shift 2 ;;
      *=*)
        spec=$1
        [ -x "${spec#*=}" ] || die "assemble: ${spec#*=} is not an executable"
        root=$(base "${spec%%=*}")
        images+=("${spec%%=*}=$(realpath "${spec#*=}"):$root")
        shift
        ;;
      *) die "assemble: unknown argument '$1' (usage: assemble --out DIR --name NAME ARCH=BINARY...)" ;;
    esac
  done
  [ -n "$out" ] || die "assemble: --out DIR is required"
  [ ${#images[@]} -gt 0 ] || die "assemble: name at least one ARCH=BINARY (ARCH: amd64, arm64)"
  mkdir -p "$out"
  local revision
  revision=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)} \
    python3 "$HERE/oci.py" --out "$out" --name "$name" ${sbom_file:+--sbom "$sbom_file"} \
    --label "org.opencontainers.image.title=plegd" \
    --label "org.opencontainers.image.version=$(awk -F'"' '/^version =/ {print $2; exit}' "$REPO/Cargo.toml")" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    "${images[@]}"
}

build() {
  local out="$TARGET/image"
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) out=${2:?--out needs a directory}; shift 2 ;;
      *) die "build: unknown argument '$1' (usage: build [--out DIR])" ;;
    esac
  done
  log "building plegd for amd64 (release)"
  (cd "$REPO" && cargo build --locked --release --bin plegd >&2)
  local arm64
  arm64=$(cross_binary release)
  mkdir -p "$out"
  sbom "$out/plegd-crates.cdx.json"
  assemble --out "$out" --name "$NAME" --sbom "$out/plegd-crates.cdx.json" \
    "amd64=$TARGET/release/plegd" "arm64=$arm64"
  rm -f "$out/plegd-crates.cdx.json"
  log "$NAME: $out/plegd.oci.tar (amd64, arm64), SBOM $out/plegd.cdx.json"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  assemble) shift; assemble "$@" ;;
  cross-binary) shift; cross_binary "$@" ;;
  base) [ $# -eq 2 ] || die "usage: $0 base ARCH"; base "$2" ;;
  sbom) [ $# -eq 2 ] || die "usage: $0 sbom OUT"; sbom "$2" ;;
  tools) tools ;;
  *) echo "usage: $0 build [--out DIR] | assemble --out DIR --name NAME ARCH=BINARY... | cross-binary [PROFILE] | base ARCH | sbom OUT | tools" >&2; exit 2 ;;
esac
