#!/usr/bin/env bash
# The compatibility suite: builds the ringmq binary (debug) and runs tests/compat, a
# separate Cargo project that drives a real `ringmq serve` process with the stock Rust
# RocketMQ client (rocketmq-client-rust, pinned in tests/compat/Cargo.toml).
#
# Usage: scripts/compat.sh [extra `cargo test` args, e.g. a test name or -- --nocapture]
#        COMPAT_TARGET=rocketmq scripts/compat.sh [...]
# Env:   COMPAT_TARGET  ringmq (the default) or rocketmq: the same scenarios against the
#                       real Apache RocketMQ 5.5.0 name server + broker, one pair per
#                       scenario, started through scripts/rocketmq.sh (Java, jars from
#                       Maven Central via tests/java); no ringmq binary is built or used
#        RINGMQ_BIN     use this ringmq binary instead of building target/debug/ringmq
#        RINGMQ_SET     settings ("key=value key=value") for every ringmq start; default:
#                       the disk guards raised (see below)
#        RUST_LOG       also log the client (and the node) to stderr
#        RUST_TEST_THREADS  scenarios run at once (cargo's default; 1 under rocketmq,
#                       where each scenario starts two JVMs)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

start=$(date +%s)
export COMPAT_TARGET="${COMPAT_TARGET:-ringmq}"
# ringmq counts disk use as statvfs (blocks - available) / blocks, RocketMQ as (total -
# free) / total with root's reserved blocks free; on a host with many reserved blocks
# ringmq would refuse sends as "disk full" where RocketMQ does not. The scenarios are about
# the protocol, not disk pressure: unless RINGMQ_SET is given, raise those thresholds (as
# scripts/java-compat.sh does). The harness passes RINGMQ_SET to every ringmq start.
export RINGMQ_SET=${RINGMQ_SET-diskMaxUsedSpaceRatio=95 diskSpaceCleanForciblyRatio=99 diskSpaceWarningLevelRatio=99}
case "$COMPAT_TARGET" in
  ringmq)
    if [[ -z "${RINGMQ_BIN:-}" ]]; then
      echo "== compat: building ringmq (debug)"
      cargo build --bin ringmq
      export RINGMQ_BIN="$root/target/debug/ringmq"
    fi
    echo "== compat: ringmq binary $RINGMQ_BIN"
    ;;
  rocketmq)
    command -v java >/dev/null || { echo "compat.sh: the rocketmq target needs java" >&2; exit 2; }
    # Resolve the jars once here, not in several scenarios at once.
    scripts/rocketmq.sh classpath >/dev/null
    export RUST_TEST_THREADS="${RUST_TEST_THREADS:-1}"
    echo "== compat: target RocketMQ 5.5.0 (scripts/rocketmq.sh), $RUST_TEST_THREADS scenario(s) at a time"
    ;;
  *)
    echo "compat.sh: COMPAT_TARGET=$COMPAT_TARGET: expected ringmq or rocketmq" >&2
    exit 2
    ;;
esac

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
