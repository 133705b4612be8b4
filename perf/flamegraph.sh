#!/usr/bin/env bash
# CPU flame graphs, from perf's call graphs folded by inferno.
#
#   perf/flamegraph.sh [store options]
#       `ringmq bench store` under perf (embedded store, no network); any of its options
#       may follow, e.g. --flush async --producers 64 --duration 5.
#       Output: perf/results/flamegraph-store.svg
#   perf/flamegraph.sh node [--flush sync|async] [--clients N] [--duration S]
#       A one-shard `ringmq serve` on the first CPU, profiled while `ringmq bench produce
#       --io tasks` on the second CPU drives N connections (one sync producer on each, 1 KiB,
#       the peers.sh load). Only the node is sampled.
#       Output: perf/results/flamegraph-node-<flush>-<N><TAG>.svg and a folded-stack file
#       beside it (.folded) so a reader can grep what a frame costs. TAG is the env
#       FLAME_TAG (default empty), e.g. `-after` to keep a "before" graph beside it.
#
# Installs linux-perf and inferno when missing. Run nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || (apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null)
command -v inferno-flamegraph >/dev/null || cargo install --quiet inferno
cargo build --release --quiet
mkdir -p perf/results
DATA=$(mktemp /tmp/ringmq-perf.XXXXXX)
DIR=$(mktemp -d /var/tmp/ringmq-flame.XXXXXX)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$DATA" "$DIR"
}
trap cleanup EXIT

if [ "${1:-}" != node ]; then
  perf record -F 999 --call-graph dwarf,16384 -o "$DATA" \
    target/release/ringmq bench store --dir "$DIR/store" --quiet "${@:---duration 5}"
  perf script -i "$DATA" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph > perf/results/flamegraph-store.svg
  echo "wrote perf/results/flamegraph-store.svg"
  exit 0
fi

shift
FLUSH=sync CLIENTS=64 DURATION=10
while [ $# -gt 0 ]; do
  case "$1" in
    --flush) FLUSH=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    *) echo "flamegraph.sh node: unknown option $1 (expected --flush, --clients, --duration)" >&2; exit 2 ;;
  esac
done
CPUS=$(nproc)
LOADGEN_CPU=$((CPUS > 1 ? 1 : 0))
source perf/one_shard_node.sh
start_one_shard_node target/release/ringmq "$DIR" "$FLUSH"
# A short warm-up so the profile shows the steady state, not topic creation and first files.
taskset -c "$LOADGEN_CPU" target/release/ringmq bench produce --addr "$ADDR" \
  --connections "$CLIENTS" --producers-per-connection 1 --io tasks --mode sync --size 1024 \
  --duration 2 --quiet >/dev/null
perf record -F 4999 --call-graph dwarf,16384 -p "$SERVER_PID" -o "$DATA" -- sleep "$DURATION" &
PERF_PID=$!
taskset -c "$LOADGEN_CPU" target/release/ringmq bench produce --addr "$ADDR" \
  --connections "$CLIENTS" --producers-per-connection 1 --io tasks --mode sync --size 1024 \
  --duration "$DURATION" --quiet --json | tee "$DIR/summary.json"
echo
wait "$PERF_PID" || true
OUT="perf/results/flamegraph-node-$FLUSH-$CLIENTS${FLAME_TAG:-}"
perf script -i "$DATA" 2>/dev/null | inferno-collapse-perf > "$OUT.folded"
inferno-flamegraph --title "ringmq serve, --flush $FLUSH, $CLIENTS clients" < "$OUT.folded" > "$OUT.svg"
echo "wrote $OUT.svg and $OUT.folded"
