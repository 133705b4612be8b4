#!/usr/bin/env bash
# ringmq against Redis streams and the real Apache RocketMQ 5.5.0 broker on the same load,
# interleaved in one run (issues 11 and "Beside the real thing").
#
# Installs what it needs (redis-server, redis-tools and fio through apt-get, when
# missing), builds the release binary and the loopback ping-pong, then runs
# perf/peers.py: for ROUNDS rounds, each round measuring fio's fdatasync latency and disk
# bandwidth and the loopback round trip, then every row of
#   {durable: ringmq SYNC_FLUSH vs Redis appendfsync always,
#    page cache: ringmq ASYNC_FLUSH vs Redis appendfsync everysec}
#   x {1, 16, 64 clients, each on its own connection, waiting for every acknowledgement}
# with 1 KiB messages, ringmq and Redis alternating. The servers run on the first CPU, the
# load generators (`ringmq bench produce --io tasks`, `redis-benchmark`, each one thread
# and one event loop) on the second, where the machine has two.
# Results: perf/results/peers.md (medians, with the machine state) and peers.raw.jsonl.
#
# Usage: perf/peers.sh     env: ROUNDS (3), SECONDS_PER_RUN (5), CLIENTS ("1 16 64"),
#                               DIR (scratch, default /var/tmp), RINGMQ_BIN (a binary to
#                               measure instead of building this checkout), BASE (a commit,
#                               e.g. HEAD~1: built in a temporary worktree and run beside
#                               this checkout in the same rotation, before and after in one
#                               run; or BASE_BIN, a binary of it), NO_ROCKETMQ=1 (leave the
#                               real broker out), WARMUP (20: seconds of unmeasured load a
#                               fresh RocketMQ broker gets first), CONSUME=1 (also read a
#                               backlog of CONSUME_MESSAGES, 1000000, from ringmq and RocketMQ)
# Run nothing else meanwhile: the disk and both cores are shared.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v fio >/dev/null || missing+=(fio)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
fi
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
cargo build --release --quiet --example loopback_pingpong
base_args=()
if [ -n "${BASE:-}" ] && [ -z "${BASE_BIN:-}" ]; then
  base_sha=$(git rev-parse --short "$BASE")
  worktree=$(mktemp -d /var/tmp/ringmq-peers-base.XXXXXX)
  trap 'git worktree remove --force "$worktree" >/dev/null 2>&1 || true' EXIT
  git worktree add --detach --quiet "$worktree" "$base_sha"
  (cd "$worktree" && CARGO_TARGET_DIR="$PWD/../$(basename "$worktree")-target" cargo build --release --quiet)
  mkdir -p target/compare
  cp "$worktree/../$(basename "$worktree")-target/release/ringmq" "target/compare/ringmq-$base_sha"
  rm -rf "$worktree/../$(basename "$worktree")-target"
  BASE_BIN="target/compare/ringmq-$base_sha"
fi
if [ -n "${BASE_BIN:-}" ]; then
  base_args=(--ringmq-base "$BASE_BIN" --base-label "${BASE:-$(basename "$BASE_BIN")}")
fi
rocketmq_args=()
[ -n "${NO_ROCKETMQ:-}" ] && rocketmq_args+=(--no-rocketmq)
[ -n "${CONSUME:-}" ] && rocketmq_args+=(--consume --consume-messages "${CONSUME_MESSAGES:-1000000}")
python3 perf/peers.py "${rocketmq_args[@]}" --warmup "${WARMUP:-20}" \
  --ringmq "${RINGMQ_BIN:-target/release/ringmq}" "${base_args[@]}" \
  --pingpong target/release/examples/loopback_pingpong \
  --rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER_RUN:-5}" \
  --clients "${CLIENTS:-1 16 64}" --dir "${DIR:-/var/tmp}" \
  --out perf/results
