#!/usr/bin/env bash
# The stall the node's periodic table writes cause on their shard (issue 24 item 3).
#
# For each round, and each binary given (default: this checkout's release build), starts a
# fresh one-shard node (ASYNC_FLUSH, a directory on /var/tmp, free ports), waits for it to
# listen and runs perf/table_flush_stall.py against it. Binaries alternate within a round, so
# two builds are compared interleaved on the same noisy machine. One JSON line per run.
#
# Usage: perf/table_flush_stall.sh [BIN ...]
#   env: ROUNDS (3), GROUPS_N (2000), RUN_SECONDS (20), DIR (scratch, default /var/tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
GROUPS_N=${GROUPS_N:-2000}
RUN_SECONDS=${RUN_SECONDS:-20}
if [ "$#" = 0 ]; then
  cargo build --release --quiet
  set -- target/release/ringmq
fi
for round in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    dir=$(mktemp -d "${DIR:-/var/tmp}/ringmq-stall-XXXXXX")
    "$bin" serve --dir "$dir/store" --port 0 --namesrv-port 0 --metrics-port 0 --shards 1 \
      2> "$dir/serve.log" &
    pid=$!
    addr=
    for _ in $(seq 1 200); do
      addr=$(sed -n 's/^ringmq: listening on //p' "$dir/serve.log" 2>/dev/null)
      [ -n "$addr" ] && break
      sleep 0.05
    done
    [ -n "$addr" ] || { cat "$dir/serve.log" >&2; kill "$pid"; exit 1; }
    result=$(python3 perf/table_flush_stall.py "$addr" "$GROUPS_N" "$RUN_SECONDS")
    echo "{\"round\": $round, \"binary\": \"$bin\", \"result\": $result}"
    kill -TERM "$pid"; wait "$pid" || true
    rm -rf "$dir"
  done
done
