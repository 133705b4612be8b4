#!/usr/bin/env bash
# The compatibility suite: builds the ringmq binary (debug) and runs tests/compat, a
# separate Cargo project that drives a real `ringmq serve` process with the stock Rust
# RocketMQ client (rocketmq-client-rust, pinned in tests/compat/Cargo.toml).
#
# Usage: scripts/compat.sh [extra `cargo test` args, e.g. a test name or -- --nocapture]
# Env:   RINGMQ_BIN  use this ringmq binary instead of building target/debug/ringmq
#        RUST_LOG    also log the client (and the node) to stderr
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

start=$(date +%s)
if [[ -z "${RINGMQ_BIN:-}" ]]; then
  echo "== compat: building ringmq (debug)"
  cargo build --bin ringmq
  export RINGMQ_BIN="$root/target/debug/ringmq"
fi
echo "== compat: ringmq binary $RINGMQ_BIN"

cd tests/compat
echo "== compat: building the suite (tests/compat, --locked)"
build_start=$(date +%s)
cargo build --locked --tests
build_end=$(date +%s)

echo "== compat: running the suite"
# The client re-runs its queue rebalance every 20 s by default; 1 s lets a group settle
# within seconds. The variable's name has dots, so it goes through env(1). (The harness
# sets the same value itself when it is unset.)
env "rocketmq.client.rebalance.waitInterval=${REBALANCE_WAIT_MS:-1000}" \
  cargo test --locked --test compat "$@"
end=$(date +%s)
echo "== compat: suite build $((build_end - build_start)) s, tests $((end - build_end)) s, total $((end - start)) s"
