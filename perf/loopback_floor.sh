#!/usr/bin/env bash
# The machine's floor for one sync producer: a bare tokio TCP ping-pong over loopback with
# the frame sizes of a 1 KiB send (1,328 bytes) and its response (292 bytes), no work in
# between (examples/loopback_pingpong.rs). Three runs with the two sides on different CPUs
# (as the node and a load generator sit) and three on one CPU, for contrast.
# Results: perf/results/loopback-floor.md (and .raw.jsonl).
#
# Usage: perf/loopback_floor.sh      env: SECONDS_PER_RUN (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_SECONDS=${SECONDS_PER_RUN:-5}
OUT=perf/results
mkdir -p "$OUT"
RAW="$OUT/loopback-floor.raw.jsonl"
: > "$RAW"
cargo build --release --quiet --example loopback_pingpong
BIN=target/release/examples/loopback_pingpong
for placement in "0 1" "0 0"; do
  for run in 1 2 3; do
    # shellcheck disable=SC2086
    line=$("$BIN" "$RUN_SECONDS" $placement)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["cpus"]=sys.argv[2]; d["run"]=int(sys.argv[3]); print(json.dumps(d))' \
      "$line" "$placement" "$run" >> "$RAW"
    echo "cpus $placement run $run: $line" >&2
  done
done
python3 - "$RAW" > "$OUT/loopback-floor.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("# Loopback ping-pong floor (examples/loopback_pingpong.rs)\n")
print("Bare tokio current-thread TCP ping-pong, 1,328-byte requests, 292-byte responses, no work between read and write.")
print("Server and client CPU are per round trip, from getrusage(RUSAGE_THREAD).\n")
print("| server/client CPUs | run | round trips/s | RTT µs | server user+sys µs | client user+sys µs |")
print("|---|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['cpus'].replace(' ', '/')} | {r['run']} | {r['round_trips_per_sec']:,.0f} | {r['rtt_us']:.1f} | "
          f"{r['server_user_us']:.1f}+{r['server_sys_us']:.1f} | {r['client_user_us']:.1f}+{r['client_sys_us']:.1f} |")
for cpus in sorted({r['cpus'] for r in rows}):
    sel = [r for r in rows if r['cpus'] == cpus]
    print(f"\nMedian, CPUs {cpus.replace(' ', '/')}: {statistics.median(r['round_trips_per_sec'] for r in sel):,.0f} round trips/s, "
          f"server {statistics.median(r['server_user_us'] + r['server_sys_us'] for r in sel):.1f} µs CPU per round trip.")
PY
cat "$OUT/loopback-floor.md"
