# Sourced by the perf scripts that profile or trace a running node.
#
# start_one_shard_node BIN DIR FLUSH: starts `BIN serve` with one shard on CPU 0, its
# store in DIR/store and its stderr in DIR/serve.log, ephemeral ports; waits up to 10 s
# for it to listen. Sets SERVER_PID and ADDR; exits the script with the log if the node
# dies or never listens.
start_one_shard_node() {
  local bin=$1 dir=$2 flush=$3
  : > "$dir/serve.log"
  taskset -c 0 "$bin" serve --dir "$dir/store" --port 0 --namesrv-port 0 --metrics-port 0 \
    --shards 1 --flush "$flush" 2>"$dir/serve.log" >/dev/null &
  SERVER_PID=$!
  ADDR=
  for _ in $(seq 1 200); do
    ADDR=$(sed -n 's/^ringmq: listening on //p' "$dir/serve.log" | tail -1)
    [ -n "$ADDR" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$dir/serve.log" >&2; exit 1; }
    sleep 0.05
  done
  echo "ringmq serve did not come up" >&2
  cat "$dir/serve.log" >&2
  exit 1
}
