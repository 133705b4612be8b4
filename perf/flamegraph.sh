#!/usr/bin/env bash
# CPU flame graph of `ringmq bench store` (any of its options may follow).
# Usage: perf/flamegraph.sh --flush async --producers 64 --duration 5
# Output: perf/results/flamegraph-store.svg. Installs linux-perf and inferno if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || (apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null)
command -v inferno-flamegraph >/dev/null || cargo install --quiet inferno
cargo build --release --quiet
mkdir -p perf/results
DATA=$(mktemp /tmp/ringmq-perf.XXXXXX)
DIR=$(mktemp -d /var/tmp/ringmq-flame.XXXXXX)
trap 'rm -rf "$DATA" "$DIR"' EXIT
perf record -F 999 --call-graph dwarf,16384 -o "$DATA" \
  target/release/ringmq bench store --dir "$DIR/store" --quiet "${@:---duration 5}"
perf script -i "$DATA" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph > perf/results/flamegraph-store.svg
echo "wrote perf/results/flamegraph-store.svg"
