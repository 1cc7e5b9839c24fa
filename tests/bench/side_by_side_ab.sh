#!/usr/bin/env bash
# Two plegd builds beside the kubelet, runs alternating (A, B, A, B, ...): each run is
# `cargo bench --bench kubelet_side_by_side -- --passes defaults` with that build installed
# (PLEGD_BINARY), traced (PLEGD_BENCH_TRACE, plegd's trigger and relister debug log), and a line per
# run of what BENCHMARKS.md's A/B tables show. Builds a plegd at each commit in a worktree of its own.
#
#   bash tests/bench/side_by_side_ab.sh COMMIT_A COMMIT_B [PAIRS]    # PAIRS: 2; ~8 min a pair
#
# Output: OUT (default /tmp/side-by-side-ab)/{a,b}-N.log and their traces; the summary last.
set -euo pipefail
cd "$(dirname "$0")/../.."
A=${1:?usage: side_by_side_ab.sh COMMIT_A COMMIT_B [PAIRS]}
B=${2:?usage: side_by_side_ab.sh COMMIT_A COMMIT_B [PAIRS]}
PAIRS=${3:-2}
case $PAIRS in ''|*[!0-9]*|0) echo "side_by_side_ab.sh: PAIRS: a whole number of 1 or more, not '$PAIRS'" >&2; exit 2 ;; esac
OUT=${OUT:-/tmp/side-by-side-ab}
rm -rf "$OUT"; mkdir -p "$OUT"
for side in a b; do
  commit=$A; [ "$side" = b ] && commit=$B
  tree="$OUT/tree-$side"
  git worktree add -q --detach "$tree" "$commit"
  (cd "$tree" && CARGO_TARGET_DIR="$PWD/../target-$side" cargo build -q --release --bin plegd)
  # Named plegd: the bench finds plegd's process by its path in the image (/usr/local/bin/plegd).
  mkdir -p "$OUT/bin-$side"
  cp "$OUT/target-$side/release/plegd" "$OUT/bin-$side/plegd"
  git worktree remove --force "$tree"
done
for i in $(seq 1 "$PAIRS"); do
  for side in a b; do
    PLEGD_BINARY="$OUT/bin-$side/plegd" PLEGD_BENCH_TRACE="$OUT/$side-$i" \
      PLEGD_CLUSTER_PLEGD_LOG_LEVEL='info,plegd::triggers=debug,plegd::pleg=debug' \
      cargo bench -q --bench kubelet_side_by_side -- --passes defaults >"$OUT/$side-$i.log" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
for log in sorted(glob.glob(f"{out}/[ab]-*.log")):
    rows, sec = {}, None
    for l in open(log):
        for start, name in (("pod starts", "starts"), ("exits, spread", "spread"), ("exits, one burst", "burst")):
            if l.startswith(start):
                sec = name
        m = re.match(r"\| (.*?) \| (\d+) \| (-?\d+) \| (-?\d+) \| (-?\d+) \|", l)
        if m and sec:
            rows[(sec, m.group(1))] = f"{m.group(3)} / {m.group(4)}"
        m = re.match(r"\| (plegd|kubelet) \| ([\d.]+) \|", l)
        if m:
            rows[("cpu", m.group(1))] = m.group(2)
    name = os.path.basename(log)[:-4]
    trace = open(f"{out}/{name}/defaults-plegd.log").read() if os.path.exists(f"{out}/{name}/defaults-plegd.log") else ""
    g = lambda s, k: rows.get((s, k), "-")
    print(f"{name}: floor (spread) {g('spread', 'CRI-state floor')}; kubelet (spread) {g('spread', 'kubelet: container status')}; "
          f"spread computed − floor {g('spread', 'plegd: computed status (shadow) − floor, per change')}; "
          f"condition − floor {g('spread', 'plegd: condition (conditions mode) − floor, per change')}; "
          f"burst computed − floor {g('burst', 'plegd: computed status (shadow) − floor, per change')}; "
          f"starts computed − floor {g('starts', 'plegd: computed status (shadow) − floor, per change')}; "
          f"trigger checks {trace.count(chr(34) + 'trigger check' + chr(34))}, complete relists {trace.count('trigger batch relist')}; "
          f"CPU s plegd {g('cpu', 'plegd')}, kubelet {g('cpu', 'kubelet')}")
PY
