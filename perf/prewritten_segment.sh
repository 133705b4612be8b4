#!/usr/bin/env bash
# What SYNC_FLUSH gains when the CommitLog segment's blocks are already written.
#
# ringmq preallocates segments with fallocate, which leaves unwritten extents on ext4:
# every fdatasync then also converts the extents its data landed in and writes that
# metadata. This script measures the node on three states of the same active segment:
#   fresh   as the node leaves it (fallocated: unwritten extents)
#   cached  zeros written over it through the page cache and synced (written extents,
#           pages cached), what warming a segment ahead of use would give
#   direct  zeros written with O_DIRECT and synced (written extents, nothing cached: a
#           1 KiB write into an uncached page must read the page first)
# For each: a one-shard `ringmq serve --flush sync` on the first CPU writes 2,000 messages
# (creating the segment), stops, the segment past its first 64 MiB is put in the state,
# then the node restarts and `ringmq bench produce --io tasks` on the second CPU drives N
# connections (one sync producer each, 1 KiB) for SECONDS. Rounds interleave the states.
# Also runs fio's 16 KiB write + fdatasync on a fallocated file and on an overwritten one.
# Output: perf/results/prewritten-segment.md
#
# Usage: perf/prewritten_segment.sh   env: ROUNDS (3), SECONDS_PER_RUN (5), CLIENTS ("16 64")
# Run nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_PER_RUN:-5}
CLIENTS=${CLIENTS:-16 64}
command -v fio >/dev/null || (apt-get update -qq && apt-get install -y -qq fio >/dev/null)
cargo build --release --quiet
BIN=$PWD/target/release/ringmq
CPUS=$(nproc)
LOADGEN_CPU=$((CPUS > 1 ? 1 : 0))
RAW=$(mktemp /tmp/prewritten.XXXXXX)
SERVER_PID=
DIR=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [ -n "$DIR" ] && rm -rf "$DIR"
  rm -f "$RAW"
}
trap cleanup EXIT

source perf/one_shard_node.sh
start_node() { start_one_shard_node "$BIN" "$DIR" sync; }
stop_node() { kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run_one() { # state clients round
  DIR=$(mktemp -d /var/tmp/ringmq-prewritten.XXXXXX)
  start_node
  taskset -c "$LOADGEN_CPU" "$BIN" bench produce --addr "$ADDR" --connections 4 \
    --producers-per-connection 1 --io tasks --mode sync --size 1024 --messages 2000 --quiet >/dev/null
  stop_node
  local segment
  segment=$(ls "$DIR"/store/shard-0/commitlog/* | head -1)
  local mib=$(( $(stat -c %s "$segment") / 1048576 - 64 ))
  case $1 in
    cached) dd if=/dev/zero of="$segment" bs=1M seek=64 count="$mib" conv=notrunc status=none ;;
    direct) dd if=/dev/zero of="$segment" bs=1M seek=64 count="$mib" conv=notrunc oflag=direct status=none ;;
  esac
  sync
  start_node
  local c0 c1 out
  c0=$(cpu_ticks "$SERVER_PID")
  out=$(taskset -c "$LOADGEN_CPU" "$BIN" bench produce --addr "$ADDR" --connections "$2" \
    --producers-per-connection 1 --io tasks --mode sync --size 1024 --duration "$SECONDS_RUN" --quiet --json)
  c1=$(cpu_ticks "$SERVER_PID")
  stop_node
  rm -rf "$DIR"; DIR=
  echo "{\"state\":\"$1\",\"clients\":$2,\"round\":$3,\"cpu_ticks\":$((c1 - c0)),\"summary\":$out}" >> "$RAW"
  echo "  round $3 $1 x$2: $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["msgs_per_sec"]), "msgs/s, p50", d["p50_us"], "us")')" >&2
}

fio_p50() { # extra fio flags...
  local file=/var/tmp/ringmq-prewritten.fio
  fio --name=p --filename="$file" --rw=write --bs=16k --size=256M --fdatasync=1 --ioengine=sync \
    --time_based --runtime=3 --output-format=json "$@" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["sync"]["lat_ns"]["percentile"]["50.000000"] / 1000)'
  rm -f "$file"
}

FIO_FALLOC=$(fio_p50)
FIO_OVERWRITE=$(fio_p50 --overwrite=1)
for round in $(seq 1 "$ROUNDS"); do
  for clients in $CLIENTS; do
    case $((round % 3)) in
      1) order="fresh cached direct" ;;
      2) order="cached direct fresh" ;;
      0) order="direct fresh cached" ;;
    esac
    for state in $order; do run_one "$state" "$clients" "$round"; done
  done
done

python3 - "$RAW" "$ROUNDS" "$SECONDS_RUN" "$FIO_FALLOC" "$FIO_OVERWRITE" "$(git rev-parse --short HEAD)" \
  > perf/results/prewritten-segment.md <<'PY'
import json, os, statistics, sys, time
raw, rounds, seconds, fio_falloc, fio_over, head = sys.argv[1:]
rows = [json.loads(line) for line in open(raw)]
clk = os.sysconf("SC_CLK_TCK")
print(f"# SYNC_FLUSH on a segment whose blocks are already written (`perf/prewritten_segment.sh`)\n")
print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {head}; {rounds} rounds of {seconds} s, "
      "states interleaved, medians. One shard on CPU 0, `bench produce --io tasks` on CPU 1, "
      "1 KiB messages, one sync producer per connection.\n")
print(f"fio, 16 KiB writes each followed by fdatasync: p50 {float(fio_falloc):.0f} µs on a fallocated "
      f"file, {float(fio_over):.0f} µs overwriting a written one.\n")
print("| clients | segment state | msgs/s | vs fresh | p50 µs | p99 µs | node CPU µs/msg |")
print("|---:|---|---:|---:|---:|---:|---:|")
for clients in sorted({r["clients"] for r in rows}):
    def med(state, key):
        picked = [r for r in rows if r["clients"] == clients and r["state"] == state]
        if key == "cpu":
            return statistics.median(r["cpu_ticks"] / clk * 1e6 / r["summary"]["messages"] for r in picked)
        return statistics.median(r["summary"][key] for r in picked)
    fresh = med("fresh", "msgs_per_sec")
    for state in ("fresh", "cached", "direct"):
        rate = med(state, "msgs_per_sec")
        print(f"| {clients} | {state} | {rate:,.0f} | {rate / fresh:.2f} | {med(state, 'p50_us'):,.0f} | "
              f"{med(state, 'p99_us'):,.0f} | {med(state, 'cpu'):.1f} |")
print("\nfresh: fallocated, as ringmq leaves a segment (unwritten extents); cached: zeros written "
      "through the page cache and synced; direct: zeros written with O_DIRECT and synced.")
PY
cat perf/results/prewritten-segment.md
