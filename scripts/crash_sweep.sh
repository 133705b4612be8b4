#!/usr/bin/env bash
# A long deterministic crash sweep through the simulated disk, outside CI.
# Usage: scripts/crash_sweep.sh [START] [END]     (default 0 10000)
# A failure prints its seed; rerun one seed with RINGMQ_SIM_SEEDS=S..S+1.
set -euo pipefail
cd "$(dirname "$0")/.."
START=${1:-0}
END=${2:-10000}
RINGMQ_SIM_SEEDS="$START..$END" cargo test --release --test crash_simulation -- --nocapture
