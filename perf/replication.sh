#!/usr/bin/env bash
# Replication benchmarks (issue 25): SYNC_MASTER against ASYNC_MASTER (both ASYNC_FLUSH) at
# 16 and 64 producers, and with FLUSH_ROWS=1 SYNC_MASTER+SYNC_FLUSH against one node with
# SYNC_FLUSH; interleaved rounds of fresh processes, medians in
# perf/results/replication.md (and replication.raw.jsonl). See perf/replication.py.
#
# Usage: perf/replication.sh   env: ROUNDS (3), SECONDS_PER_RUN (5), PRODUCERS ("16 64"),
#                                   FLUSH_ROWS=1, DIR (scratch, default /var/tmp),
#                                   RINGMQ_BIN (a binary instead of building this checkout)
# Not yet here: the delaying proxy (2 ms one way, 10 KiB), the empty-slave catch-up of
# 2 GiB. Run nothing else meanwhile: the disk and both cores are shared.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
flush=()
[ -n "${FLUSH_ROWS:-}" ] && flush=(--flush-rows)
python3 perf/replication.py --ringmq "${RINGMQ_BIN:-target/release/ringmq}" \
  --rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER_RUN:-5}" --producers "${PRODUCERS:-16 64}" \
  "${flush[@]}"
