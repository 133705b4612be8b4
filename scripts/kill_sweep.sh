#!/usr/bin/env bash
# Repeats the real-process SIGKILL test with different kill moments.
# Usage: scripts/kill_sweep.sh [ROUNDS]     (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
cargo build --release --tests --quiet
for seed in $(seq 1 "$ROUNDS"); do
  echo "kill seed $seed"
  RINGMQ_KILL_SEED=$seed cargo test --release --quiet --test process kill_process::
done
