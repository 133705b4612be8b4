#!/usr/bin/env bash
# The node over the network: `ringmq serve` (release build) loaded by `ringmq bench`.
#
# For SYNC_FLUSH and for ASYNC_FLUSH, a fresh node in a temporary directory:
#   ringmq bench produce, 1 KiB messages, sync mode, 1 producer, then 16 (4 conns x 4);
#   ringmq bench consume of everything produced, from the earliest offset.
# Around each produce run the node's CPU time (utime+stime from /proc/<pid>/stat, in
# ticks of `getconf CLK_TCK`) is read, giving node CPU microseconds per message.
# Results: perf/results/node-bench-<shards>shard.md (and .raw.jsonl).
#
# Usage: perf/node_bench.sh      env: SECONDS_PER_RUN (default 5), DIR (default /var/tmp),
#                                     SHARDS (default: the node's default, one per CPU),
#                                     LOADGEN_CPUS (default: unset, the scheduler places the
#                                     load generator; a taskset CPU list keeps it there, e.g.
#                                     1 with SHARDS=1, whose one shard is pinned to CPU 0).
# Results go to perf/results/node-bench-<shards>shard.md, or
# node-bench-<shards>shard-loadgen-cpus-<list>.md with LOADGEN_CPUS.
# The load generator shares the machine with the node: on few cores the figures are a
# floor, not the node's ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_SECONDS=${SECONDS_PER_RUN:-5}
BASE=${DIR:-/var/tmp}
OUT=perf/results
mkdir -p "$OUT"
SHARDS=${SHARDS:-$(nproc)}
NAME="node-bench-${SHARDS}shard"
LOADGEN=()
if [ -n "${LOADGEN_CPUS:-}" ]; then
  LOADGEN=(taskset -c "$LOADGEN_CPUS")
  NAME="$NAME-loadgen-cpus-${LOADGEN_CPUS//,/_}"
fi
RAW="$OUT/$NAME.raw.jsonl"
: > "$RAW"
cargo build --release --quiet
BIN=target/release/ringmq
TICKS=$(getconf CLK_TCK)

cpu_ticks() { # pid -> utime+stime
  # Fields after the command name (which is in parentheses): utime is the 12th, stime the 13th.
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

record() { # label cpu_us_per_msg json
  python3 -c 'import json,sys; d=json.loads(sys.argv[3]); d["label"]=sys.argv[1]; d["node_cpu_us_per_msg"]=float(sys.argv[2]); print(json.dumps(d))' "$1" "$2" "$3" >> "$RAW"
}

NODE_PID=
cleanup() {
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  fi
}
trap cleanup EXIT

for flush in sync async; do
  dir=$(mktemp -d "$BASE/ringmq-node-bench-XXXXXX")
  log="$dir/serve.log"
  "$BIN" serve --dir "$dir/store" --port 0 --namesrv-port 0 --metrics-port 0 \
    --shards "$SHARDS" --flush "$flush" 2> "$log" &
  NODE_PID=$!
  addr=
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/^ringmq: listening on //p' "$log")
    [ -n "$addr" ] && break
    kill -0 "$NODE_PID" || { cat "$log" >&2; exit 1; }
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "the node did not start" >&2; exit 1; }
  echo "== $flush flush: node $NODE_PID on $addr" >&2
  total=0
  for producers in 1 16; do
    if [ "$producers" = 1 ]; then conns=1; per=1; else conns=4; per=4; fi
    before=$(cpu_ticks "$NODE_PID")
    json=$("${LOADGEN[@]}" "$BIN" bench produce --addr "$addr" --connections $conns --producers-per-connection $per \
      --size 1024 --mode sync --duration "$RUN_SECONDS" --quiet --json)
    after=$(cpu_ticks "$NODE_PID")
    messages=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["messages"])' "$json")
    total=$((total + messages))
    cpu=$(python3 -c 'import sys; t,a,b,m=map(float,sys.argv[1:]); print((a-b)/t*1e6/m if m else 0)' "$TICKS" "$after" "$before" "$messages")
    record "$flush produce $producers producers" "$cpu" "$json"
    echo "   produce x$producers: $json" >&2
  done
  before=$(cpu_ticks "$NODE_PID")
  json=$("${LOADGEN[@]}" "$BIN" bench consume --addr "$addr" --connections 4 --messages "$total" --duration 60 --quiet --json)
  after=$(cpu_ticks "$NODE_PID")
  cpu=$(python3 -c 'import sys; t,a,b,m=map(float,sys.argv[1:]); print((a-b)/t*1e6/m if m else 0)' "$TICKS" "$after" "$before" "$total")
  record "$flush consume" "$cpu" "$json"
  echo "   consume: $json" >&2
  kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  NODE_PID=
  rm -rf "$dir"
done

python3 - "$RAW" "$OUT/$NAME.md" "$RUN_SECONDS" "$(nproc)" "$SHARDS" "${LOADGEN_CPUS:-}" <<'PY'
import json, sys
raw, out, seconds, cores, shards, loadgen_cpus = sys.argv[1:]
placement = (f"the load generator kept on CPUs {loadgen_cpus}" if loadgen_cpus
             else "the load generator placed by the scheduler")
rows = [json.loads(line) for line in open(raw)]
lines = [
    "# ringmq node over the network (`perf/node_bench.sh`)",
    "",
    f"`ringmq serve` (release, {shards} shards) loaded by `ringmq bench` on the same machine ({cores} cores,",
    f"{placement}),",
    f"1 KiB messages, sync-mode sends, {seconds} s per produce run; consume reads back",
    "everything produced. Latency: send (request to response) for produce, end-to-end",
    "(born timestamp to receipt, ms resolution) for consume. Node CPU: utime+stime of the",
    "node process over the run, per message. Consume runs after both produce runs, so its",
    "end-to-end latency is mostly the age of the messages (up to ~2 runs), not delivery time.",
    "",
    "| run | messages | msgs/s | MB/s | p50 us | p99 us | p99.9 us | max us | node CPU us/msg | errors |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for r in rows:
    lines.append(
        f"| {r['label']} | {r['messages']} | {r['msgs_per_sec']:.0f} | {r['mb_per_sec']:.1f} | "
        f"{r['p50_us']} | {r['p99_us']} | {r['p999_us']} | {r['max_us']} | "
        f"{r['node_cpu_us_per_msg']:.1f} | {r['errors']} |"
    )
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
