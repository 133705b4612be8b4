#!/usr/bin/env bash
# A node's memory under clients that send and never read (issue 10, defect 1).
#
# For each binary given (default: this checkout's release build), starts a fresh node with
# one shard (ASYNC_FLUSH, temporary directory, free ports), waits for it to listen, and
# runs perf/unread_clients.py against it: CONNECTIONS connections (default 200) writing
# pipelined GET_ALL_TOPIC_CONFIG requests for RUN_SECONDS (default 9) without reading. Prints
# one JSON line per binary with the node's RSS before and at its peak.
#
# Usage: perf/unread_clients.sh [BIN ...]     env: CONNECTIONS, RUN_SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${CONNECTIONS:-200}
SECONDS_TO_RUN=${RUN_SECONDS:-9}
if [ "$#" = 0 ]; then
  cargo build --release --quiet
  set -- target/release/ringmq
fi
for bin in "$@"; do
  dir=$(mktemp -d /var/tmp/ringmq-unread-XXXXXX)
  "$bin" serve --dir "$dir/store" --port 0 --namesrv-port 0 --metrics-port 0 --shards 1 \
    2> "$dir/serve.log" &
  pid=$!
  addr=
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/^ringmq: listening on //p' "$dir/serve.log")
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { cat "$dir/serve.log" >&2; kill "$pid"; exit 1; }
  result=$(python3 perf/unread_clients.py "$addr" "$pid" "$CONNECTIONS" "$SECONDS_TO_RUN")
  echo "{\"binary\": \"$bin\", \"result\": $result}"
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$dir"
done
