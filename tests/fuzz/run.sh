#!/usr/bin/env bash
# Runs every fuzz target for a fixed budget: `bash tests/fuzz/run.sh [seconds per target]` (default
# 60). Installs cargo-fuzz from crates.io if it is missing. Fuzzing needs unstable compiler flags;
# RUSTC_BOOTSTRAP=1 lets the stable toolchain take them. Targets run without a sanitizer (plegd is
# safe Rust: what is looked for is a panic or a broken invariant). A finding fails the run and is kept
# under tests/fuzz/artifacts/<target>/ with the command that reproduces it; the corpus grows in
# tests/fuzz/corpus/<target>/ across runs on one machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
case $seconds in '' | *[!0-9]*) echo "tests/fuzz/run.sh: seconds must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
dir=(--fuzz-dir tests/fuzz)
# Beside the rest of the build when CARGO_TARGET_DIR names where it goes (CI's shared cache).
build=()
[ -z "${CARGO_TARGET_DIR:-}" ] || build=(--target-dir "$(realpath -m "$CARGO_TARGET_DIR")/fuzz")
cargo fuzz build "${dir[@]}" "${build[@]}" -O -s none

status=0
for target in $(cargo fuzz list "${dir[@]}"); do
  log=$(mktemp)
  if cargo fuzz run "${dir[@]}" "${build[@]}" -O -s none "$target" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' || echo '?')
    corpus=$(find "tests/fuzz/corpus/$target" -type f | wc -l)
    echo "fuzz $target: ${seconds} s, $runs executions, no finding (corpus $corpus inputs)"
  else
    status=1
    echo "fuzz $target: FINDING" >&2
    grep -E 'panicked|^thread|Test unit written|cargo fuzz run' "$log" >&2 || tail -40 "$log" >&2
  fi
  rm -f "$log"
done
exit $status
