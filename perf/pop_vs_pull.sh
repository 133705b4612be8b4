#!/usr/bin/env bash
# POP with batch acknowledgement against plain pull, in one run, interleaved.
#
# One fresh `ringmq serve` (release, async flush, 1 shard) pinned to NODE_CPU with
# taskset, in a temporary directory; the load generator pinned to LOAD_CPU. `ringmq bench
# produce` stores MESSAGES messages of SIZE bytes into the topic's 8 queues once; then
# RUNS rounds each consume all of them twice, in turn, with a fresh consumer group:
#   pull: `ringmq bench consume` (PULL_MESSAGE, 32 a pull, 4 connections), zero copy;
#   pop:  `ringmq bench consume --pop` (POP_MESSAGE, 32 a pop, 4 connections), each pop
#         acknowledged with one BATCH_ACK_MESSAGE before the next (its checkpoint and ack
#         records are written through the CommitLog).
# Around each consume the node's CPU time is read (utime+stime, /proc/<pid>/stat).
# Prints a markdown table of every run, the medians and the pop/pull ratio, and writes it
# to perf/results/pop-vs-pull.md.
#
# Usage: perf/pop_vs_pull.sh
#   env: BIN (default target/release/ringmq; build it first), MESSAGES (200000), SIZE
#        (1024), RUNS (3), NODE_CPU (1), LOAD_CPU (0), DIR (/var/tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ringmq}
MESSAGES=${MESSAGES:-200000}
SIZE=${SIZE:-1024}
RUNS=${RUNS:-3}
NODE_CPU=${NODE_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
BASE=${DIR:-/var/tmp}
TICKS=$(getconf CLK_TCK)
OUT=perf/results/pop-vs-pull.md

cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

dir=$(mktemp -d "$BASE/ringmq-pop-bench-XXXXXX")
NODE_PID=
cleanup() {
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

log="$dir/serve.log"
taskset -c "$NODE_CPU" "$BIN" serve --dir "$dir/store" --port 0 --namesrv-port 0 \
  --metrics-port 0 --flush async --shards 1 2> "$log" &
NODE_PID=$!
addr=
for _ in $(seq 1 200); do
  addr=$(sed -n 's/^ringmq: listening on //p' "$log")
  [ -n "$addr" ] && break
  kill -0 "$NODE_PID" || { cat "$log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$addr" ] || { echo "the node did not start" >&2; exit 1; }

load() { taskset -c "$LOAD_CPU" "$BIN" bench "$@"; }
load produce --addr "$addr" --connections 4 --producers-per-connection 4 \
  --size "$SIZE" --mode sync --messages "$MESSAGES" --quiet --json > /dev/null

rows="$dir/rows.jsonl"
for run in $(seq 1 "$RUNS"); do
  for mode in pull pop; do
    flag=()
    [ "$mode" = pop ] && flag=(--pop)
    before=$(cpu_ticks "$NODE_PID")
    json=$(load consume --addr "$addr" --connections 4 --group "bench-$mode-$run" \
      --messages "$MESSAGES" --duration 300 --quiet --json "${flag[@]}")
    after=$(cpu_ticks "$NODE_PID")
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
ticks, after, before = map(float, sys.argv[2:5])
print(json.dumps({"run": int(sys.argv[5]), "mode": sys.argv[6], "msgs_per_sec": d["msgs_per_sec"],
  "messages": d["messages"], "errors": d["errors"], "requests": d["pulls"],
  "node_cpu_us_per_msg": round((after - before) / ticks * 1e6 / d["messages"], 2) if d["messages"] else 0}))
' "$json" "$TICKS" "$after" "$before" "$run" "$mode" >> "$rows"
  done
done

python3 - "$rows" "$MESSAGES" "$SIZE" "$(uptime)" > "$dir/report.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
messages, size, load = sys.argv[2], sys.argv[3], sys.argv[4]
print("# POP with batch acknowledgement against pull\n")
print(f"`perf/pop_vs_pull.sh`: 1 shard (async flush), {messages} messages of {size} bytes in 8 queues,")
print("4 connections, 32 messages a request; node and load generator on separate cores;")
print(f"runs interleaved pull, pop. Machine after the run: `{load.strip()}`.\n")
print("| run | mode | msgs/s | node CPU µs/msg | requests | errors |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['run']} | {r['mode']} | {r['msgs_per_sec']:.0f} | {r['node_cpu_us_per_msg']} | {r['requests']} | {r['errors']} |")
med = {m: statistics.median([r["msgs_per_sec"] for r in rows if r["mode"] == m]) for m in ("pull", "pop")}
cpu = {m: statistics.median([r["node_cpu_us_per_msg"] for r in rows if r["mode"] == m]) for m in ("pull", "pop")}
ratios = [p["msgs_per_sec"] / q["msgs_per_sec"] for p in rows if p["mode"] == "pop" for q in rows if q["mode"] == "pull" and q["run"] == p["run"]]
print(f"\nMedians: pull {med['pull']:.0f} msgs/s ({cpu['pull']} µs node CPU/msg), pop {med['pop']:.0f} msgs/s ({cpu['pop']} µs/msg).")
print(f"Pop/pull per round: {', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f} (target: at least 0.30).")
PY
cp "$dir/report.md" "$OUT"
cat "$OUT"
