#!/usr/bin/env bash
# Consume throughput and node CPU of pulls (the D8 zero-copy read path).
#
# A fresh `ringmq serve` (async flush) in a temporary directory; `ringmq bench produce`
# stores MESSAGES messages of SIZE bytes (16 producers), then `ringmq bench consume` pulls them all
# back over 4 connections. Around the consume run the node's CPU time (utime+stime from
# /proc/<pid>/stat) is read, giving node CPU microseconds per consumed message.
# Prints one JSON line: the consume summary plus node_cpu_us_per_msg and the mode.
#
# Usage: perf/pull_bench.sh
#   env: BIN (default target/release/ringmq, build it first), MESSAGES (default 400000),
#        SIZE (message body bytes, default 1024),
#        BODY_SEND (sendfile or mmap; unset: the binary's default, for builds without
#        the flag), DIR (default /var/tmp).
# The load generator shares the machine with the node: the figures are a floor.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ringmq}
MESSAGES=${MESSAGES:-400000}
SIZE=${SIZE:-1024}
BASE=${DIR:-/var/tmp}
TICKS=$(getconf CLK_TCK)

cpu_ticks() { # pid -> utime+stime
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

dir=$(mktemp -d "$BASE/ringmq-pull-bench-XXXXXX")
NODE_PID=
cleanup() {
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

extra=()
[ -n "${BODY_SEND:-}" ] && extra=(--body-send "$BODY_SEND")
log="$dir/serve.log"
"$BIN" serve --dir "$dir/store" --port 0 --namesrv-port 0 --flush async "${extra[@]}" 2> "$log" &
NODE_PID=$!
addr=
for _ in $(seq 1 200); do
  addr=$(sed -n 's/^ringmq: listening on //p' "$log")
  [ -n "$addr" ] && break
  kill -0 "$NODE_PID" || { cat "$log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$addr" ] || { echo "the node did not start" >&2; exit 1; }

"$BIN" bench produce --addr "$addr" --connections 4 --producers-per-connection 4 \
  --size "$SIZE" --mode sync --messages "$MESSAGES" --quiet --json > /dev/null
before=$(cpu_ticks "$NODE_PID")
json=$("$BIN" bench consume --addr "$addr" --connections 4 --messages "$MESSAGES" \
  --duration 120 --quiet --json)
after=$(cpu_ticks "$NODE_PID")
python3 -c '
import json, sys
d = json.loads(sys.argv[1])
ticks, after, before = map(float, sys.argv[2:5])
d["node_cpu_us_per_msg"] = round((after - before) / ticks * 1e6 / d["messages"], 2) if d["messages"] else 0
d["body_send"] = sys.argv[5] or "default"
d["size"] = int(sys.argv[6])
print(json.dumps(d))
' "$json" "$TICKS" "$after" "$before" "${BODY_SEND:-}" "$SIZE"
