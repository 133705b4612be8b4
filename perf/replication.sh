#!/usr/bin/env bash
# Replication benchmarks (issue 25), one run, interleaved rounds of fresh processes,
# medians in perf/results/replication.md (and replication.raw.jsonl); see perf/replication.py:
#   - SYNC_MASTER against ASYNC_MASTER (both ASYNC_FLUSH) at 16 and 64 producers, 1 KiB;
#   - SYNC_MASTER+SYNC_FLUSH against one SYNC_FLUSH node (slave SYNC_FLUSH, and slave
#     ASYNC_FLUSH as RocketMQ acks), 1 KiB;
#   - 2 ms added one way between master and slave by examples/delay_proxy.rs (the kernel
#     here has no netem), 10 KiB, 64 producers, SYNC_MASTER, against direct and against the
#     proxy adding nothing;
#   - an empty slave catching up a master holding CATCH_UP_GIB, beside dd's sequential
#     write of as many bytes;
#   - CPU per replicated message of master and slave, in every row.
# About 6 minutes with the defaults, after the build. The catch-up needs about 3x
# CATCH_UP_GIB free in DIR, below the store's diskSpaceWarningLevelRatio (else the fill is
# refused and the run stops saying so).
#
# Usage: perf/replication.sh   env: ROUNDS (3), SECONDS_PER_RUN (5), PRODUCERS ("16 64"),
#                                   FLUSH_ROWS (1; empty skips), DELAY_ROWS (1; empty skips),
#                                   CATCH_UP_GIB (2; 0 skips), DIR (scratch, default /var/tmp),
#                                   SLAVE_DIR (the rows' slave stores there, e.g. a tmpfs),
#                                   RINGMQ_BIN, PROXY_BIN (binaries instead of building)
# Run nothing else meanwhile: the disk and both cores are shared.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RINGMQ_BIN:-}" ] || [ -z "${PROXY_BIN:-}" ]; then
  cargo build --release --quiet --bin ringmq --example delay_proxy
fi
args=()
[ -n "${FLUSH_ROWS-1}" ] && args+=(--flush-rows)
[ -n "${DELAY_ROWS-1}" ] && args+=(--delay-rows)
python3 perf/replication.py --ringmq "${RINGMQ_BIN:-target/release/ringmq}" \
  --proxy "${PROXY_BIN:-target/release/examples/delay_proxy}" \
  --rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER_RUN:-5}" --producers "${PRODUCERS:-16 64}" \
  --catch-up "${CATCH_UP_GIB:-2}" "${args[@]}"
