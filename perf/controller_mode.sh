#!/usr/bin/env bash
# What controller mode costs and whether it holds still (issue 31), release binary, loopback.
#
#   perf/controller_mode.sh overhead   ROUNDS rounds; in each, the same produce load for
#       SECONDS_PER_RUN s against a classic group (scripts/ringmq-node.sh start-cluster-ha: a
#       SYNC_MASTER and its SLAVE) and against a controller-mode group (start-cluster-controller:
#       three controllers, two brokers from RocketMQ's quick-start file, allAckInSyncStateSet=true,
#       so both acknowledge what master and slave hold), which goes first alternating. Prints
#       every rate, the medians and their ratio (controller mode / classic).
#   perf/controller_mode.sh soak       one controller-mode group: SECONDS_PER_RUN s unthrottled
#       (the maximum rate), then SOAK_SECONDS (default 600) at SOAK_PERCENT (default 80) percent
#       of it. Fails unless the master, its epoch and the SyncStateSet are the same at the end
#       and every send was acknowledged.
#
# Env: RINGMQ_BIN (default target/release/ringmq, built when missing), FLUSH (sync|async, default
# sync), ROUNDS (3), SECONDS_PER_RUN (20), CONNECTIONS (4), PRODUCERS_PER_CONNECTION (4), SIZE
# (1024), DIR (scratch, default a fresh temporary directory, removed at the end). Both brokers run 2 shards on this
# machine's two cores with the controllers and the load generator: run nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
[[ $what == overhead || $what == soak ]] || { echo "usage: $0 overhead|soak" >&2; exit 2; }
if [[ -z ${RINGMQ_BIN:-} ]]; then
  cargo build --release --quiet --bin ringmq
  RINGMQ_BIN=$PWD/target/release/ringmq
fi
export RINGMQ_BIN FLUSH=${FLUSH:-sync}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
SOAK_SECONDS=${SOAK_SECONDS:-600}
SOAK_PERCENT=${SOAK_PERCENT:-80}
made_dir=
if [[ -z ${DIR:-} ]]; then
  DIR=$(mktemp -d "${TMPDIR:-/tmp}/ringmq-controller-mode-XXXXXX")
  made_dir=$DIR
fi
load=(--connections "${CONNECTIONS:-4}" --producers-per-connection "${PRODUCERS_PER_CONNECTION:-4}"
  --size "${SIZE:-1024}" --json --quiet)
running=()
# Stops what runs; removes the scratch directory if this run made it (a soak leaves GBs).
cleanup() {
  for d in "${running[@]}"; do [[ -n $d ]] || continue; scripts/ringmq-node.sh stop-cluster "$d" >/dev/null 2>&1 || true; done
  [[ -z $made_dir ]] || rm -rf "$made_dir"
}
trap cleanup EXIT

# group_state DIR: "master epoch syncStateSetEpoch in-sync-count" as the controllers keep broker-a.
group_state() {
  # shellcheck disable=SC1091
  (source "$1/env" && "$RINGMQ_BIN" admin controller -a "$CONTROLLER_ADDR" -n "$NAMESRV_ADDR" --json) |
    python3 -c 'import json,sys
g=json.load(sys.stdin)["groups"]["broker-a"]
print(g.get("masterAddress"), g["masterEpoch"], g["syncStateSetEpoch"], len(g["inSyncReplicas"]))'
}

# start KIND DIR: a fresh group of KIND (ha|controller); prints the master's address once
# both brokers hold what the master acknowledges. Runs in a command substitution's subshell:
# the caller adds DIR to `running` first, so the exit trap stops it.
start() {
  local kind=$1 dir=$2 state
  rm -rf "$dir" && mkdir -p "$dir"
  scripts/ringmq-node.sh "start-cluster-$kind" "$dir" >"$dir/start.log" 2>&1
  if [[ $kind == ha ]]; then
    # shellcheck disable=SC1091
    (source "$dir/env" && echo "$BROKER_A_ADDR")
    return
  fi
  for _ in $(seq 600); do
    state=$(group_state "$dir")
    if [[ ${state##* } == 2 ]]; then echo "${state%% *}"; return; fi
    sleep 0.1
  done
  echo "the controller-mode group never had both brokers in its SyncStateSet: $state" >&2
  exit 1
}

stop() { scripts/ringmq-node.sh stop-cluster "$1" >/dev/null 2>&1; running=("${running[@]/$1}"); rm -rf "$1"; }

# rate ADDR ARGS...: the bench's JSON summary of a produce run against ADDR.
produce() { local addr=$1; shift; "$RINGMQ_BIN" bench produce --addr "$addr" "${load[@]}" "$@"; }

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

if [[ $what == overhead ]]; then
  : >"$DIR/rates"
  for ((round = 0; round < ROUNDS; round++)); do
    order=(ha controller)
    ((round % 2 == 0)) || order=(controller ha)
    for kind in "${order[@]}"; do
      running+=("$DIR/$kind")
      master=$(start "$kind" "$DIR/$kind")
      summary=$(produce "$master" --duration "$SECONDS_PER_RUN")
      stop "$DIR/$kind"
      rate=$(field msgs_per_sec <<<"$summary")
      errors=$(field errors <<<"$summary")
      p99=$(field p99_us <<<"$summary")
      echo "round $round $kind: $rate msgs/s, p99 ${p99} us, $errors errors"
      echo "$kind $rate" >>"$DIR/rates"
    done
  done
  ha=$(awk '$1 == "ha" {print $2}' "$DIR/rates" | median)
  controller=$(awk '$1 == "controller" {print $2}' "$DIR/rates" | median)
  python3 -c "print(f'medians: classic SYNC_MASTER {float($ha):.0f} msgs/s, controller mode {float($controller):.0f} msgs/s, ratio {float($controller)/float($ha):.3f}')"
  exit 0
fi

running+=("$DIR/soak")
master=$(start controller "$DIR/soak")
before=$(group_state "$DIR/soak")
max=$(produce "$master" --duration "$SECONDS_PER_RUN" | field msgs_per_sec)
target=$(python3 -c "print(int(float($max) * $SOAK_PERCENT / 100))")
echo "maximum $max msgs/s; soaking ${SOAK_SECONDS}s at $target msgs/s (${SOAK_PERCENT}%); controllers: $before"
summary=$(produce "$master" --duration "$SOAK_SECONDS" --rate "$target")
after=$(group_state "$DIR/soak")
echo "soak: $summary"
echo "controllers before: $before; after: $after (master, master epoch, SyncStateSet epoch, in sync)"
errors=$(field errors <<<"$summary")
if [[ $before != "$after" || $errors != 0 ]]; then
  echo "FAILED: the group changed or sends failed ($errors errors)" >&2
  exit 1
fi
echo "held: no master change, no SyncStateSet change, no failed send"
