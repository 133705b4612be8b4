#!/usr/bin/env bash
# The node over the network: `ringmq serve` (release build) loaded by `ringmq bench`.
#
# For SYNC_FLUSH and for ASYNC_FLUSH, a fresh node in a temporary directory:
#   ringmq bench produce, 1 KiB messages, sync mode, 1 producer, then 16 (4 conns x 4);
#   the 1-producer run twice: with its I/O as `--io auto` picks (a blocking thread), then
#   with `--io tasks` (the multiplexing client), to show what the producer's own I/O costs;
#   ringmq bench consume of everything produced, from the earliest offset.
# Around each produce run the node's CPU time (utime+stime from /proc/<pid>/stat, in
# ticks of `getconf CLK_TCK`) is read, giving node CPU microseconds per message.
# Just before each produce run, the machine's bare loopback round trip is measured for 2 s
# (examples/loopback_pingpong.rs, its server on shard 0's CPU, its client on the load
# generator's CPUs): one producer's sends cannot beat it, and on a VM it moves from run to
# run (perf/loopback_floor.sh), so each row carries the floor it ran on.
# Results: perf/results/node-bench-<shards>shard.md (and .raw.jsonl).
#
# Usage: perf/node_bench.sh      env: SECONDS_PER_RUN (default 5), DIR (default /var/tmp),
#                                     SHARDS (default: the node's default, one per CPU),
#                                     LOADGEN_CPUS (where the load generator runs: a taskset
#                                     CPU list, or `any` for wherever the scheduler puts it;
#                                     default: the CPUs the shards leave free, as shard i is
#                                     pinned to the i-th CPU this process may use, or `any`
#                                     when there are none).
#                                     RINGMQ_BIN (a ringmq binary to measure instead of
#                                     building this checkout; perf/compare_commits.sh
#                                     uses it), RESULTS_TAG (appended to the results name).
# Results go to perf/results/node-bench-<shards>shard.md for the default placement, or
# node-bench-<shards>shard-loadgen-<any|cpus-list>.md when LOADGEN_CPUS is given.
# The load generator shares the machine with the node: on few cores the figures are a
# floor, not the node's ceiling. Kept off the shards' CPUs, it measures the node rather
# than the two competing for a core, which is also how they sit in production (apart).
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_SECONDS=${SECONDS_PER_RUN:-5}
BASE=${DIR:-/var/tmp}
OUT=perf/results
mkdir -p "$OUT"
# The CPUs this process may use, in order: shard i is pinned to the i-th (src/shard/pin.rs).
read -r -a CPUS <<< "$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
SHARDS=${SHARDS:-${#CPUS[@]}}
NAME="node-bench-${SHARDS}shard"
if [ -n "${LOADGEN_CPUS:-}" ]; then
  if [ "$LOADGEN_CPUS" = any ]; then
    NAME="$NAME-loadgen-any"
  else
    NAME="$NAME-loadgen-cpus-${LOADGEN_CPUS//,/_}"
  fi
elif [ "$SHARDS" -lt "${#CPUS[@]}" ]; then
  LOADGEN_CPUS=$(IFS=,; echo "${CPUS[*]:$SHARDS}")
else
  LOADGEN_CPUS=any
fi
LOADGEN=()
if [ "$LOADGEN_CPUS" != any ]; then
  LOADGEN=(taskset -c "$LOADGEN_CPUS")
fi
NAME="$NAME${RESULTS_TAG:-}"
RAW="$OUT/$NAME.raw.jsonl"
: > "$RAW"
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
cargo build --release --quiet --example loopback_pingpong
BIN=${RINGMQ_BIN:-target/release/ringmq}
FLOOR_BIN=target/release/examples/loopback_pingpong
# The floor's server sits where shard 0 does, its client where the load generator goes.
FLOOR_SERVER_CPU=${CPUS[0]}
FLOOR_CLIENT_CPUS=-
if [ "$LOADGEN_CPUS" != any ]; then
  FLOOR_CLIENT_CPUS=$LOADGEN_CPUS
fi
TICKS=$(getconf CLK_TCK)

cpu_ticks() { # pid -> utime+stime
  # Fields after the command name (which is in parentheses): utime is the 12th, stime the 13th.
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

record() { # label cpu_us_per_msg json [loopback_floor_round_trips_per_sec]
  python3 -c 'import json,sys; d=json.loads(sys.argv[3]); d["label"]=sys.argv[1]; d["node_cpu_us_per_msg"]=float(sys.argv[2]); d["loopback_floor_rt_per_sec"]=float(sys.argv[4]) if len(sys.argv) > 4 else None; print(json.dumps(d))' "$@" >> "$RAW"
}

loopback_floor() { # -> round trips per second of a bare ping-pong, 2 s
  "$FLOOR_BIN" 2 "$FLOOR_SERVER_CPU" "$FLOOR_CLIENT_CPUS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["round_trips_per_sec"])'
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
  for run in "1 auto" "1 tasks" "16 auto"; do
    read -r producers io <<< "$run"
    if [ "$producers" = 1 ]; then conns=1; per=1; else conns=4; per=4; fi
    floor=$(loopback_floor)
    before=$(cpu_ticks "$NODE_PID")
    json=$("${LOADGEN[@]}" "$BIN" bench produce --addr "$addr" --connections $conns --producers-per-connection $per \
      --size 1024 --mode sync --io "$io" --duration "$RUN_SECONDS" --quiet --json)
    after=$(cpu_ticks "$NODE_PID")
    messages=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["messages"])' "$json")
    total=$((total + messages))
    cpu=$(python3 -c 'import sys; t,a,b,m=map(float,sys.argv[1:]); print((a-b)/t*1e6/m if m else 0)' "$TICKS" "$after" "$before" "$messages")
    record "$flush produce $producers producers" "$cpu" "$json" "$floor"
    echo "   produce x$producers (loopback floor $floor round trips/s): $json" >&2
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

python3 - "$RAW" "$OUT/$NAME.md" "$RUN_SECONDS" "$(nproc)" "$SHARDS" "$LOADGEN_CPUS" <<'PY'
import json, sys
raw, out, seconds, cores, shards, loadgen_cpus = sys.argv[1:]
placement = ("the load generator placed by the scheduler" if loadgen_cpus == "any"
             else f"the load generator kept on CPUs {loadgen_cpus}, shard i on CPU i")
rows = [json.loads(line) for line in open(raw)]
lines = [
    "# ringmq node over the network (`perf/node_bench.sh`)",
    "",
    f"`ringmq serve` (release, {shards} shards) loaded by `ringmq bench` on the same machine ({cores} cores,",
    f"{placement}),",
    f"1 KiB messages, sync-mode sends, {seconds} s per produce run; consume reads back",
    "everything produced. Latency: send (request to response) for produce, end-to-end",
    "(born timestamp to receipt, ms resolution) for consume. Node CPU: utime+stime of the",
    "node process over the run, per message. Consume runs after the produce runs, so its",
    "end-to-end latency is mostly the age of the messages (up to ~3 runs), not delivery time.",
    "Loopback floor: round trips per second of a bare tokio ping-pong with no work in it,",
    "measured just before the run (examples/loopback_pingpong.rs): the machine's state then.",
    "",
    "Producer I/O: `threads`, one blocking socket per producer; `tasks`, producers as tasks on",
    "the multiplexing client (`ringmq bench produce --io`).",
    "",
    "| run | producer I/O | messages | msgs/s | MB/s | p50 us | p99 us | p99.9 us | max us | node CPU us/msg | loopback floor rt/s | errors |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for r in rows:
    floor = r.get("loopback_floor_rt_per_sec")
    lines.append(
        f"| {r['label']} | {r.get('io', '')} | {r['messages']} | {r['msgs_per_sec']:.0f} | {r['mb_per_sec']:.1f} | "
        f"{r['p50_us']} | {r['p99_us']} | {r['p999_us']} | {r['max_us']} | "
        f"{r['node_cpu_us_per_msg']:.1f} | {f'{floor:.0f}' if floor else ''} | {r['errors']} |"
    )
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
