#!/usr/bin/env bash
# A long deterministic crash sweep through the simulated disk, outside CI: the store's
# crash simulation (tests/store/crash_simulation.rs), the node-wide tables'
# (tests/store/table_crash_simulation.rs) and the timer store's
# (tests/store/timer_store_crash_simulation.rs), over the same seeds. They are modules
# of the `store` test binary; each module's tests are selected by their exact names
# (a plain filter `crash_simulation::` would also match `table_crash_simulation::`).
# Usage: scripts/crash_sweep.sh [START] [END]     (default 0 10000)
#        SWEEP_TESTS="table_crash_simulation" scripts/crash_sweep.sh 0 2000   (one of them)
# A failure prints its seed; rerun one seed with RINGMQ_SIM_SEEDS=S..S+1.
set -euo pipefail
cd "$(dirname "$0")/.."
START=${1:-0}
END=${2:-10000}
TESTS=${SWEEP_TESTS:-"crash_simulation table_crash_simulation timer_store_crash_simulation"}
cargo test --release --test store --no-run --quiet
for module in $TESTS; do
    names=$(cargo test --release --quiet --test store -- --list 2>/dev/null |
        sed -n "s/^\(${module}::[A-Za-z0-9_]*\): test$/\1/p")
    if [ -z "$names" ]; then
        echo "no tests in module $module of the store binary" >&2
        exit 1
    fi
    echo "== $module, seeds $START..$END"
    # shellcheck disable=SC2086 # one argument per test name
    RINGMQ_SIM_SEEDS="$START..$END" cargo test --release --test store -- --exact $names --nocapture
done
