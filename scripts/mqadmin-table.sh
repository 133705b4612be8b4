#!/usr/bin/env bash
# The stock mqadmin (RocketMQ 5.5.0 tools) against the real Apache RocketMQ 5.5.0 and against
# ringmq, command by command, into a markdown table: target/mqadmin-table.md.
#
# Usage: scripts/mqadmin-table.sh
# Env: RINGMQ_BIN (default target/debug/ringmq, built when missing), KEEP_LINES (lines of
#      output kept per cell, default 3), CMD_TIMEOUT_S (per mqadmin run, default 60).
#
# Both brokers get the same state: topic TableTopic with 20 messages with keys
# (table-key-0..19) from producer group TableProducer, and consumer group TableGroup that
# consumed them all, both clients kept running (scripts/mqadmin-table-clients.java) so
# producerConnection, consumerConnection and consumerStatus find them. Then every command
# runs against each (bounded by CMD_TIMEOUT_S), in the order of COMMANDS below, and its
# exit code and first lines are recorded. mqadmin exits 0 even when a command failed, so a
# cell is "error" when the output shows an exception or a failure line.
# A cell pair is "same" when both succeed or both fail, and their first output lines agree
# once digits, addresses and times are masked; otherwise "differs" with both first lines.
# Raw outputs are kept in target/mqadmin-table/<target>/<n>.out.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="$root/tests/java/target/rocketmq-lib"
out_md="$root/target/mqadmin-table.md"
raw="$root/target/mqadmin-table"
KEEP_LINES=${KEEP_LINES:-3}
CMD_TIMEOUT_S=${CMD_TIMEOUT_S:-60}
READY_DEADLINE_S=${READY_DEADLINE_S:-120}
export RINGMQ_BIN=${RINGMQ_BIN:-$root/target/debug/ringmq}
[[ -x "$RINGMQ_BIN" ]] || (cd "$root" && cargo build --bin ringmq) || exit 2
[[ -f "$lib/rocketmq-tools-5.5.0.jar" ]] || (cd "$root/tests/java" && mvn -B -q dependency:copy-dependencies) || exit 2

work=$(mktemp -d /tmp/mqadmin-table-XXXXXX)
client_pids=()
cleanup() {
  for pid in "${client_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  bash "$root/scripts/rocketmq.sh" stop "$work/rocketmq" >/dev/null 2>&1 || true
  bash "$root/scripts/ringmq-node.sh" stop "$work/ringmq" >/dev/null 2>&1 || true
  # The stores preallocate CommitLog segments (GiBs): keep only the logs.
  rm -rf "$work/rocketmq/store" "$work/ringmq/store"
  echo "mqadmin-table.sh: broker logs kept in $work" >&2
}
trap cleanup EXIT

TOPIC=TableTopic GROUP=TableGroup PGROUP=TableProducer
# name|arguments (after -n); $BROKER, $OFFSET_ID and $QID are filled per target.
COMMANDS=(
  'clusterList|clusterList'
  'brokerStatus|brokerStatus -b $BROKER'
  'topicList|topicList'
  'topicRoute|topicRoute -t TableTopic'
  'topicStatus|topicStatus -t TableTopic'
  'updateTopic|updateTopic -c DefaultCluster -t TableNewTopic'
  'deleteTopic|deleteTopic -c DefaultCluster -t TableNewTopic'
  'updateSubGroup|updateSubGroup -c DefaultCluster -g TableNewGroup'
  'deleteSubGroup|deleteSubGroup -c DefaultCluster -g TableNewGroup'
  'consumerProgress|consumerProgress -g TableGroup'
  'consumerConnection|consumerConnection -g TableGroup'
  'queryMsgByKey|queryMsgByKey -t TableTopic -k table-key-0'
  'queryMsgById|queryMsgById -t TableTopic -i $OFFSET_ID'
  'queryMsgByOffset|queryMsgByOffset -t TableTopic -b broker-a -i $QID -o 0'
  'resetOffsetByTime|resetOffsetByTime -g TableGroup -t TableTopic -s now'
  'getBrokerConfig|getBrokerConfig -b $BROKER'
  'updateBrokerConfig (live key)|updateBrokerConfig -b $BROKER -k autoCreateSubscriptionGroup -v true'
  'updateBrokerConfig (fileReservedTime)|updateBrokerConfig -b $BROKER -k fileReservedTime -v 72'
  'statsAll|statsAll'
  'producerConnection|producerConnection -g TableProducer -t TableTopic'
  'topicClusterList|topicClusterList -t TableTopic'
  'getConsumerConfig|getConsumerConfig -g TableGroup'
  'cloneGroupOffset|cloneGroupOffset -s TableGroup -d TableCloneGroup -t TableTopic'
  'getNamesrvConfig|getNamesrvConfig'
  'wipeWritePerm|wipeWritePerm -b broker-a'
  'addWritePerm|addWritePerm -b broker-a'
  'brokerConsumeStats|brokerConsumeStats -b $BROKER'
  'consumerStatus|consumerStatus -g TableGroup'
)

# Starts the live clients against the target in $1 and waits for READY (bounded).
prepare() {
  local dir=$1 namesrv=$2
  # Created first, with 8 queues on both: a first send that auto-creates the topic can
  # find no route on RocketMQ while the broker's registration is on its way.
  bash "$root/scripts/mqadmin.sh" updateTopic -n "$namesrv" -c DefaultCluster -t "$TOPIC" \
    -r 8 -w 8 >"$dir/create-topic.out" 2>&1
  timeout $((READY_DEADLINE_S + 900)) java -Xmx256m -XX:+UseSerialGC -Duser.home="$dir/clients-home" \
    -cp "$lib/*" "$root/scripts/mqadmin-table-clients.java" \
    "$namesrv" "$TOPIC" "$GROUP" "$PGROUP" 20 900 >"$dir/clients.out" 2>&1 &
  client_pids+=($!)
  local deadline=$((SECONDS + READY_DEADLINE_S))
  until grep -q '^READY' "$dir/clients.out"; do
    if grep -q '^FAILED' "$dir/clients.out" || ((SECONDS >= deadline)); then
      echo "mqadmin-table.sh: the clients did not get ready on $dir:" >&2
      cat "$dir/clients.out" >&2
      return 1
    fi
    sleep 0.5
  done
}

# One cell: "ok" or "error", then the kept lines.
run_all() {
  local target=$1 dir=$2
  # shellcheck disable=SC1091
  source "$dir/env"
  local ready
  ready=$(grep '^READY' "$dir/clients.out")
  OFFSET_ID=$(sed -n 's/.*offsetMsgId=\([0-9A-F]*\).*/\1/p' <<<"$ready")
  QID=$(sed -n 's/.*queueId=\([0-9]*\).*/\1/p' <<<"$ready")
  BROKER=$BROKER_ADDR
  mkdir -p "$raw/$target"
  local n=0
  for entry in "${COMMANDS[@]}"; do
    n=$((n + 1))
    local args
    args=$(eval "echo \"${entry#*|}\"")
    # shellcheck disable=SC2086
    timeout "$CMD_TIMEOUT_S" bash "$root/scripts/mqadmin.sh" $args -n "$NAMESRV_ADDR" \
      >"$raw/$target/$n.out" 2>&1
    echo $? >"$raw/$target/$n.rc"
    echo "  $target: ${entry%%|*} exit $(cat "$raw/$target/$n.rc")" >&2
  done
}

outcome() {
  local file=$1 rc=$2
  # Lines mqadmin prints when a command fails (a stack trace, a failure line), never a
  # value in a table (brokerStatus lists keys such as ...FailedTimes).
  if ((rc != 0)) || grep -qE '^(org\.apache\.rocketmq|java\.|Caused by:)|command failed|CODE: [0-9]+ |Missing required option| Failed$' "$file"; then
    echo error
  else
    echo ok
  fi
}

kept() {
  grep -v '^[[:space:]]*$' "$1" | grep -v '^\s*at ' | head -n "$KEEP_LINES" | cut -c1-160 \
    | sed -E 's/[[:space:]]+/ /g; s/\|/\\|/g' | paste -sd'\n' | sed 's/$/<br>/' | tr -d '\n' \
    | sed 's/<br>$//; s/\\n/<br>/g'
}

masked_first() {
  grep -v '^[[:space:]]*$' "$1" | head -n 1 \
    | sed -E 's/[0-9A-F]{16,}/ID/g; s/[0-9]+/N/g; s/[[:space:]]+/ /g'
}

mkdir -p "$work/rocketmq" "$work/ringmq" "$raw"
rm -rf "${raw:?}/rocketmq" "${raw:?}/ringmq"
echo "== starting RocketMQ 5.5.0 and ringmq in $work" >&2
bash "$root/scripts/rocketmq.sh" start "$work/rocketmq" >/dev/null || exit 1
bash "$root/scripts/ringmq-node.sh" start "$work/ringmq" >/dev/null || exit 1
for target in rocketmq ringmq; do
  prepare "$work/$target" "$(sed -n 's/^NAMESRV_ADDR=//p' "$work/$target/env")" || exit 1
done
for target in rocketmq ringmq; do
  run_all "$target" "$work/$target"
done
# What ringmq answered REQUEST_CODE_NOT_SUPPORTED (3) during the run, from its metrics.
metrics_url=$(sed -n 's/^ringmq: metrics on //p' "$work/ringmq/node.out")
unsupported=$(python3 - "$metrics_url" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
print(sum(float(m.group(1)) for m in re.finditer(r'^ringmq_responses_total\{[^}]*status="3"[^}]*\} (\S+)', text, re.M)))
PY
) || unsupported="unknown (metrics not read)"

ringmq_version=$("$RINGMQ_BIN" --version 2>/dev/null || echo ringmq)
{
  echo "# mqadmin against RocketMQ 5.5.0 and ringmq"
  echo
  echo "Generated by scripts/mqadmin-table.sh on $(date -u +%Y-%m-%d) ($(date -u +%H:%M) UTC):"
  echo "stock mqadmin 5.5.0 (rocketmq-tools) against Apache RocketMQ 5.5.0 (name server and"
  echo "broker) and against $ringmq_version (2 shards, SYNC_FLUSH). Each cell: outcome, exit"
  echo "code, first lines of output. ringmq's broker port answered $unsupported request(s)"
  echo "with REQUEST_CODE_NOT_SUPPORTED during the run (its metrics)."
  echo
  echo "| command | RocketMQ 5.5.0 | ringmq | comparison |"
  echo "|---|---|---|---|"
  n=0
  for entry in "${COMMANDS[@]}"; do
    n=$((n + 1))
    name=${entry%%|*}
    cells=()
    outcomes=()
    for target in rocketmq ringmq; do
      rc=$(cat "$raw/$target/$n.rc")
      o=$(outcome "$raw/$target/$n.out" "$rc")
      outcomes+=("$o")
      cells+=("**$o** (exit $rc)<br>\`$(kept "$raw/$target/$n.out" | sed 's/`/'"'"'/g; s/<br>/`<br>`/g')\`")
    done
    first_a=$(masked_first "$raw/rocketmq/$n.out")
    first_b=$(masked_first "$raw/ringmq/$n.out")
    if [[ "${outcomes[0]}" == "${outcomes[1]}" && "$first_a" == "$first_b" ]]; then
      verdict=same
    elif [[ "${outcomes[0]}" != "${outcomes[1]}" ]]; then
      verdict="differs: ${outcomes[0]} on RocketMQ, ${outcomes[1]} on ringmq"
    else
      verdict="differs: first line"
    fi
    echo "| $name | ${cells[0]} | ${cells[1]} | $verdict |"
  done
} >"$out_md"
echo "== wrote $out_md" >&2
