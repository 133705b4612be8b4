#!/usr/bin/env bash
# A long deterministic crash sweep through the simulated disk, outside CI: the store's
# crash simulation (tests/crash_simulation.rs), the node-wide tables'
# (tests/table_crash_simulation.rs) and the timer store's
# (tests/timer_store_crash_simulation.rs), over the same seeds.
# Usage: scripts/crash_sweep.sh [START] [END]     (default 0 10000)
#        SWEEP_TESTS="table_crash_simulation" scripts/crash_sweep.sh 0 2000   (one of them)
# A failure prints its seed; rerun one seed with RINGMQ_SIM_SEEDS=S..S+1.
set -euo pipefail
cd "$(dirname "$0")/.."
START=${1:-0}
END=${2:-10000}
TESTS=${SWEEP_TESTS:-"crash_simulation table_crash_simulation timer_store_crash_simulation"}
for test in $TESTS; do
    echo "== $test, seeds $START..$END"
    RINGMQ_SIM_SEEDS="$START..$END" cargo test --release --test "$test" -- --nocapture
done
