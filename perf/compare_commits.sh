#!/usr/bin/env bash
# Two commits side by side on the node and store benchmarks, interleaved in one run.
#
# Builds BASE (default: the commit before HEAD) in a temporary worktree and this checkout,
# both release, then for each of ROUNDS rounds runs perf/node_bench.sh and one round of
# perf/store_vs_fio.sh with each binary, alternating which goes first, so both see the
# same machine states. Writes perf/results/compare-commits.md: the median of every row for
# each binary and their ratio (HEAD / BASE); each round's files go to perf/results/compare-commits/.
#
# Usage: perf/compare_commits.sh [BASE] [ROUNDS]    env: SHARDS (default 1), SECONDS_PER_RUN
# (default 5), BASE_BIN (a prebuilt BASE binary: skips its build), DIR (scratch space).
# Run nothing else meanwhile: the disk and both cores are shared with the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE_REV=${1:-HEAD~1}
ROUNDS=${2:-3}
export SHARDS=${SHARDS:-1}
export SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
OUT=perf/results
BASE_SHA=$(git rev-parse --short "$BASE_REV")
HEAD_SHA=$(git rev-parse --short HEAD)

cargo build --release --quiet
cargo build --release --quiet --example loopback_pingpong
mkdir -p target/compare
cp target/release/ringmq "target/compare/ringmq-$HEAD_SHA"
HEAD_BIN="$PWD/target/compare/ringmq-$HEAD_SHA"
if [ -n "${BASE_BIN:-}" ]; then
  BASE_BIN=$(realpath "$BASE_BIN")
else
  tree=$(mktemp -d "${TMPDIR:-/tmp}/ringmq-base-XXXXXX")
  git worktree add --quiet --detach "$tree" "$BASE_REV"
  # A target directory of its own that outlives the worktree, so a rerun builds incrementally.
  (cd "$tree" && CARGO_TARGET_DIR="$ROOT/target/compare/base-target" cargo build --release --quiet)
  cp "target/compare/base-target/release/ringmq" "target/compare/ringmq-$BASE_SHA"
  git worktree remove --force "$tree"
  BASE_BIN="$PWD/target/compare/ringmq-$BASE_SHA"
fi

run_one() { # name binary round
  echo "== round $3: $1" >&2
  RINGMQ_BIN="$2" RESULTS_TAG="-cmp-$1-r$3" perf/node_bench.sh >/dev/null
  RINGMQ_BIN="$2" RESULTS_TAG="-cmp-$1-r$3" perf/store_vs_fio.sh 1 >/dev/null
}

# Rounds of an earlier comparison would be counted again: clear them.
rm -f "$OUT"/*-cmp-base-r*.* "$OUT"/*-cmp-head-r*.* "$OUT"/compare-commits/*-cmp-*
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then
    run_one head "$HEAD_BIN" "$round"; run_one base "$BASE_BIN" "$round"
  else
    run_one base "$BASE_BIN" "$round"; run_one head "$HEAD_BIN" "$round"
  fi
done

python3 - "$OUT" "$ROUNDS" "$SHARDS" "$BASE_SHA" "$HEAD_SHA" <<'PY'
import glob, json, statistics, sys
out, rounds, shards, base, head = sys.argv[1:]
def rows(pattern, key):
    found = {}
    for path in sorted(glob.glob(pattern)):
        for line in open(path):
            d = json.loads(line)
            label = d["label"] + (f" ({d['io']})" if d.get("io") and "produce" in d["label"] else "")
            found.setdefault(label, []).append(d)
    return found
lines = [f"# {head} against {base} (`perf/compare_commits.sh`, {rounds} rounds, medians)", "",
         f"Both release builds, interleaved round by round; node runs with {shards} shard(s).", "",
         "| benchmark | row | base msgs/s | head msgs/s | head/base | base node CPU us/msg | head node CPU us/msg |",
         "|---|---|---:|---:|---:|---:|---:|"]
for bench, pattern in (("node", f"{out}/node-bench-*-cmp-{{}}-r*.raw.jsonl"),
                       ("store", f"{out}/store-vs-fio-cmp-{{}}-r*.raw.jsonl")):
    b = rows(pattern.format("base"), "msgs_per_sec")
    h = rows(pattern.format("head"), "msgs_per_sec")
    for label in b:
        if label not in h or "msgs_per_sec" not in b[label][0]:
            continue
        bm = statistics.median(r["msgs_per_sec"] for r in b[label])
        hm = statistics.median(r["msgs_per_sec"] for r in h[label])
        cpu = lambda rs: (f"{statistics.median(r['node_cpu_us_per_msg'] for r in rs):.1f}"
                          if "node_cpu_us_per_msg" in rs[0] else "")
        lines.append(f"| {bench} | {label} | {bm:.0f} | {hm:.0f} | {hm / bm if bm else 0:.2f} | {cpu(b[label])} | {cpu(h[label])} |")
    for label in ("fio_buffered", "fio_64k_fdatasync"):
        if label in b and label in h:
            bm = statistics.median(r["mb_per_sec"] for r in b[label])
            hm = statistics.median(r["mb_per_sec"] for r in h[label])
            lines.append(f"| {bench} | {label} MB/s (same disk, for scale) | {bm:.0f} | {hm:.0f} | {hm / bm:.2f} | | |")
open(f"{out}/compare-commits.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
# Each round's own results files go beside the summary, out of the main results folder.
mkdir -p "$OUT/compare-commits"
mv "$OUT"/*-cmp-base-r*.* "$OUT"/*-cmp-head-r*.* "$OUT/compare-commits/"
