#!/usr/bin/env bash
# The Java scenario suite (tests/java, stock rocketmq-client and rocketmq-tools 5.5.0) against
# ringmq, against the real Apache RocketMQ 5.5.0 broker, or both, one after the other.
#
# Usage: scripts/java-compat.sh [ringmq|rocketmq|both] [-Dtest=Pattern ...extra mvn args]
#   default target: ringmq. Each target gets its own fresh broker (scripts/ringmq-node.sh or
#   scripts/rocketmq.sh), stopped at the end whatever happened. Surefire reports are kept in
#   target/java-compat/<target>/ and summarised by scripts/java-compat-table.py. A scenario
#   listed in tests/java/expected-failures.txt for a target may fail there (and must).
# Env: RINGMQ_BIN (else target/debug/ringmq, built), FLUSH for ringmq (sync|async).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
which=${1:-ringmq}
[[ $# -gt 0 ]] && shift
out="$root/target/java-compat"
mkdir -p "$out"
# ringmq counts disk use as statvfs (blocks - available) / blocks; RocketMQ counts
# (total - free) / total, free including the blocks reserved for root. On a host with many
# reserved blocks (this workplace's disk reads 90% that way with tens of GiB free) ringmq
# then refuses sends as "disk full" where RocketMQ does not. The scenarios are about the
# protocol, not disk pressure: unless RINGMQ_SET is given, raise those thresholds.
export RINGMQ_SET=${RINGMQ_SET-diskMaxUsedSpaceRatio=95 diskSpaceCleanForciblyRatio=99 diskSpaceWarningLevelRatio=99}

run_against() {
  local target=$1; shift
  local control dir
  case "$target" in
    ringmq) control="$root/scripts/ringmq-node.sh" ;;
    rocketmq) control="$root/scripts/rocketmq.sh" ;;
    *) echo "java-compat.sh: unknown target '$target' (ringmq, rocketmq or both)" >&2; exit 2 ;;
  esac
  dir=$(mktemp -d "/tmp/java-compat-$target-XXXXXX")
  echo "== java-compat: $target broker in $dir"
  bash "$control" start "$dir" || { echo "java-compat.sh: $target did not start" >&2; return 1; }
  local rc=0
  rm -rf "$root/tests/java/target/surefire-reports" "$out/$target"
  (cd "$root/tests/java" && mvn -B -Dcompat.dir="$dir" -Dcompat.control="$control" \
      -Dcompat.target="$target" test "$@" 2>&1 | grep -v '^\[INFO\] Download' \
      | tee "$out/$target.log" | grep -E '^\[(ERROR|WARNING)\]|Tests run:|BUILD') || true
  cp -r "$root/tests/java/target/surefire-reports" "$out/$target" 2>/dev/null || true
  # Judged by the reports against tests/java/expected-failures.txt, not by Maven's exit code:
  # a listed failure is expected, an unlisted one (or a listed pass) fails the run.
  python3 "$root/scripts/java-compat-table.py" "$out" --verdict "$target" \
    --expected "$root/tests/java/expected-failures.txt" || rc=1
  bash "$control" stop "$dir" || true
  if ((rc != 0)); then
    # Keep the logs, not the store: a ringmq store preallocates a 1 GiB segment per shard.
    rm -rf "$dir/store"
    echo "== java-compat: $target: scenarios failed (exit $rc); broker logs kept in $dir"
  else
    rm -rf "$dir"
  fi
  return $rc
}

# Build ringmq and resolve the jars before any broker starts, so no start deadline counts them.
if [[ "$which" != rocketmq && -z "${RINGMQ_BIN:-}" ]]; then
  (cd "$root" && cargo build --bin ringmq)
fi
(cd "$root/tests/java" && mvn -B -q dependency:copy-dependencies test-compile)

status=0
case "$which" in
  both) run_against rocketmq "$@" || status=1; run_against ringmq "$@" || status=1 ;;
  *) run_against "$which" "$@" || status=1 ;;
esac
python3 "$root/scripts/java-compat-table.py" "$out" || true
exit $status
