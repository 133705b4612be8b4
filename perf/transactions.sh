#!/usr/bin/env bash
# Transactional messages (issue 27): what a transaction costs against a plain send, and
# the node's check-backs of a large backlog of undecided halves.
#
# 1. Throughput. One node (`ringmq serve`, release, 1 shard, ASYNC_FLUSH unless FLUSH
#    says otherwise, a temporary directory, free ports on 127.0.0.1, pinned to NODE_CPU;
#    the load generator pinned to LOAD_CPU). For each client count in CLIENTS (16 64),
#    ROUNDS (3) rounds, each round the two benchmarks back to back, SECONDS_PER_RUN (5) s
#    each, SIZE (1024) byte bodies:
#      plain:        ringmq bench produce --connections N --producers-per-connection 1
#                    --io tasks --mode sync (N connections from one event loop, one
#                    message in flight each);
#      transactions: ringmq bench transactions --clients N (the same clients, one
#                    transaction in flight each: half send, then END_TRANSACTION COMMIT,
#                    its answer awaited; COMMIT=oneway sends it oneway as stock clients do).
#    The node's CPU time over each run (utime+stime of /proc/<pid>/stat) per message or
#    transaction is recorded too. Reported: the medians and the ratio of the median
#    transactions/s to the median plain msgs/s (issue target: at least 0.5).
# 2. Pending. A fresh node with transactionTimeOut=TX_TIMEOUT_MS (30000: longer than
#    the load takes, so the node holds the whole backlog when the load ends; the summary
#    says whether checks began earlier) and transactionCheckInterval=TX_CHECK_INTERVAL_MS
#    (1000). ringmq bench transactions --pending PENDING (1,000,000) sends the halves
#    (PENDING_SIZE (128) byte bodies, 4 connections x 64 in flight) over connections
#    other than its producer connection, which registered the group by HEART_BEAT and
#    answers every CHECK_TRANSACTION_STATE with a oneway END_TRANSACTION COMMIT. Reported:
#    check-back lateness (a check's arrival minus the half's store time plus
#    transactionTimeOut, p50/p99/max; also from the half's acknowledgement), halves
#    checked, never checked and checked twice, and the node's VmRSS/RssAnon before and
#    after the load (and the sampled peak, at the end) from /proc/<pid>/status.
#
# Results: perf/results/transactions.md (medians, then every run) and
# perf/results/transactions.raw.jsonl (one JSON line per benchmark run).
#
# Usage: perf/transactions.sh
#   env: ROUNDS, CLIENTS ("16 64"), SECONDS_PER_RUN, SIZE, COMMIT (request or oneway),
#        PENDING, PENDING_SIZE, TX_TIMEOUT_MS, TX_CHECK_INTERVAL_MS, GRACE (120 s past the
#        last half's eligibility before unchecked halves are given up on), FLUSH
#        (SYNC_FLUSH or ASYNC_FLUSH, default the node's), NODE_SET (extra node settings,
#        `key=value` separated by spaces), NODE_CPU (1), LOAD_CPU (0), DIR (/var/tmp),
#        RINGMQ_BIN (a binary to measure instead of building this checkout), RESULTS_TAG
#        (appended to the results' names), ONLY (throughput or pending).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-16 64}
RUN_SECONDS=${SECONDS_PER_RUN:-5}
SIZE=${SIZE:-1024}
COMMIT=${COMMIT:-request}
PENDING=${PENDING:-1000000}
PENDING_SIZE=${PENDING_SIZE:-128}
TX_TIMEOUT_MS=${TX_TIMEOUT_MS:-30000}
TX_CHECK_INTERVAL_MS=${TX_CHECK_INTERVAL_MS:-1000}
GRACE=${GRACE:-120}
NODE_SET=${NODE_SET:-}
NODE_CPU=${NODE_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
BASE=${DIR:-/var/tmp}
ONLY=${ONLY:-}
OUT=perf/results
NAME="transactions${RESULTS_TAG:-}"
RAW="$OUT/$NAME.raw.jsonl"
LOADS=$(mktemp)
mkdir -p "$OUT"
: > "$RAW"
case "$COMMIT" in
  request) COMMIT_ARGS=() ;;
  oneway) COMMIT_ARGS=(--oneway-commit) ;;
  *) echo "COMMIT=$COMMIT: request or oneway" >&2; exit 2 ;;
esac
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
BIN=${RINGMQ_BIN:-target/release/ringmq}
# Every listener on loopback only. The disk guards off (as the store's own tests set them):
# on a machine whose filesystem reserves much of its space (statvfs `f_bavail` far below
# `f_bfree`), the node would count it as over 90 % used and refuse every send with
# SERVICE_NOT_AVAILABLE, and delete segments before their time at 85 %; the benchmark
# writes a few GB at most.
NODE_ARGS=(--set "bind_address=127.0.0.1" --set "disk_space_warning_level_ratio=100"
  --set "disk_space_clean_forcibly_ratio=100")
[ -n "${FLUSH:-}" ] && NODE_ARGS+=(--set "flush_disk_type=$FLUSH")
for setting in $NODE_SET; do NODE_ARGS+=(--set "$setting"); done
SCRIPT_START=$(date +%s)

machine_load() { # label -> appends uptime and the busiest processes to $LOADS
  {
    echo "== $1 ($(date -u +%H:%M:%S) UTC)"
    uptime
    top -bn1 | sed -n '7,14p'
    # Compilers running beside the benchmark make its figures noisy: said in the results.
    local compilers
    compilers=$(ps -eo comm= | grep -xE 'rustc|cc|cc1|cc1plus|ld|rust-lld|clippy-driver' | sort | uniq -c | xargs || true)
    if [ -n "$compilers" ]; then
      echo "BUSY: compilers running: $compilers"
    fi
  } >> "$LOADS"
}

NODE_PID=
DIR_NOW=
cleanup() {
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  fi
  [ -n "$DIR_NOW" ] && rm -rf "$DIR_NOW"
  rm -f "$LOADS"
  return 0
}
trap cleanup EXIT

start_node() { # serve args... -> NODE_PID, ADDR
  DIR_NOW=$(mktemp -d "$BASE/ringmq-tx-bench-XXXXXX")
  local log="$DIR_NOW/serve.log"
  taskset -c "$NODE_CPU" "$BIN" serve --dir "$DIR_NOW/store" --port 0 --namesrv-port 0 \
    --metrics-port 0 --shards 1 "${NODE_ARGS[@]}" "$@" 2> "$log" &
  NODE_PID=$!
  ADDR=
  for _ in $(seq 1 200); do
    ADDR=$(sed -n 's/^ringmq: listening on //p' "$log")
    [ -n "$ADDR" ] && break
    kill -0 "$NODE_PID" || { cat "$log" >&2; exit 1; }
    sleep 0.05
  done
  [ -n "$ADDR" ] || { echo "the node did not start" >&2; cat "$log" >&2; exit 1; }
}

stop_node() {
  kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  NODE_PID=
  rm -rf "$DIR_NOW"
  DIR_NOW=
}

cpu_ticks() { # pid -> utime+stime
  # Fields after the command name (which is in parentheses): utime is the 12th, stime the 13th.
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

record() { # label clients round json exit-status node-cpu-ticks -> one line of $RAW
  python3 - "$@" "$(getconf CLK_TCK)" "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW" <<'PY'
import json, sys
label, clients, rnd, text, status, ticks, hz, load = sys.argv[1:]
d = json.loads(text) if text.strip() else {"failed": True}
d.update(label=label, clients=int(clients), round=int(rnd), exit_status=int(status), loadavg=load)
done = d.get("messages", d.get("transactions", d.get("halves")))
d["node_cpu_us_per_msg"] = int(ticks) / int(hz) * 1e6 / done if done else None
print(json.dumps(d))
PY
}

run_bench() { # label clients round bench-args... (node already started)
  local label=$1 clients=$2 rnd=$3 json status=0 before after
  shift 3
  echo "== $label, $clients clients, round $rnd (node $NODE_PID on $ADDR, CPU $NODE_CPU; load on CPU $LOAD_CPU)" >&2
  machine_load "round $rnd $label $clients"
  before=$(cpu_ticks "$NODE_PID")
  json=$(taskset -c "$LOAD_CPU" "$BIN" bench "$@" --addr "$ADDR" --json --quiet) || status=$?
  after=$(cpu_ticks "$NODE_PID")
  record "$label" "$clients" "$rnd" "$json" "$status" "$((after - before))"
  echo "   $(tail -1 "$RAW" | cut -c1-300)..." >&2
}

if [ -z "$ONLY" ] || [ "$ONLY" = throughput ]; then
  start_node
  for clients in $CLIENTS; do
    for rnd in $(seq 1 "$ROUNDS"); do
      run_bench plain "$clients" "$rnd" produce --connections "$clients" --producers-per-connection 1 \
        --io tasks --mode sync --size "$SIZE" --duration "$RUN_SECONDS"
      run_bench transactions "$clients" "$rnd" transactions --clients "$clients" --size "$SIZE" \
        --duration "$RUN_SECONDS" "${COMMIT_ARGS[@]}"
    done
  done
  stop_node
fi
if [ -z "$ONLY" ] || [ "$ONLY" = pending ]; then
  start_node --set "transactionTimeOut=$TX_TIMEOUT_MS" --set "transactionCheckInterval=$TX_CHECK_INTERVAL_MS"
  run_bench pending 4 1 transactions --pending "$PENDING" --size "$PENDING_SIZE" \
    --topic TxPendingBench --connections 4 --inflight 64 --check-timeout-ms "$TX_TIMEOUT_MS" \
    --grace "$GRACE" --node-pid "$NODE_PID"
  stop_node
fi
machine_load "end"
ELAPSED=$(( $(date +%s) - SCRIPT_START ))

python3 - "$RAW" "$OUT/$NAME.md" "$LOADS" "$ELAPSED" "$(nproc)" "$NODE_CPU" "$LOAD_CPU" \
  "$RUN_SECONDS" "$SIZE" "$COMMIT" "$PENDING" "$PENDING_SIZE" "$TX_TIMEOUT_MS" \
  "$TX_CHECK_INTERVAL_MS" "$GRACE" "${FLUSH:-ASYNC_FLUSH (default)}" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "${NODE_SET:-none}" <<'PY'
import json, statistics, sys
(raw, out, loads, elapsed, cores, node_cpu, load_cpu, seconds, size, commit, pending_n,
 pending_size, timeout_ms, interval_ms, grace, flush, commit_id, node_set) = sys.argv[1:]
rows = [json.loads(line) for line in open(raw)]

def med(label, clients, key):
    values = [r[key] for r in rows
              if r["label"] == label and r["clients"] == clients and r.get(key) is not None]
    return statistics.median(values) if values else None

def fmt(v, digits=0):
    return "" if v is None else f"{v:.{digits}f}"

L = [
    "# Transactional messages: throughput against plain sends, and check-backs of pending halves (`perf/transactions.sh`)",
    "",
    f"Command: `perf/transactions.sh` (commit {commit_id}); {elapsed} s in all. Machine: {cores} cores; the "
    f"node (`ringmq serve`, release, 1 shard, flushDiskType {flush}, listening on 127.0.0.1) pinned to "
    f"CPU {node_cpu}, the load generator (`ringmq bench`) to CPU {load_cpu}; `diskSpaceWarningLevelRatio` and "
    "`diskSpaceCleanForciblyRatio` 100 (the disk guards off: a filesystem that reserves much of its space would "
    f"otherwise have the node refuse sends); extra node settings: {node_set}.",
    "",
    f"Throughput: one node for all of it; for each client count, rounds of `bench produce` (plain, "
    f"`--connections N --producers-per-connection 1 --io tasks --mode sync`) and `bench transactions "
    f"--clients N` (half send, then END_TRANSACTION COMMIT sent as `{commit}`), interleaved, {seconds} s "
    f"each, {size}-byte bodies; every client has one message (one transaction) in flight. Ratio = median "
    "transactions/s over median plain msgs/s; issue target at least 0.5. A transaction is two round trips "
    "and (on the node) the half, the committed message and the op record. Latency in microseconds "
    "(a transaction's: from its half send to its commit answered).",
    "",
    "## Throughput: medians over the rounds",
    "",
    "| clients | plain msgs/s | transactions/s | ratio | plain p50/p99 us | transaction p50/p99 us | prepare p50/p99 us | commit p50/p99 us | node CPU us/msg plain | node CPU us/transaction | rounds |",
    "|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|",
]
for clients in sorted({r["clients"] for r in rows if r["label"] == "transactions"}):
    plain, tx = med("plain", clients, "msgs_per_sec"), med("transactions", clients, "tx_per_sec")
    ratio = tx / plain if plain and tx is not None else None
    def step(which, pct):
        values = [r[which][pct] for r in rows if r["label"] == "transactions" and r["clients"] == clients and which in r]
        return fmt(statistics.median(values)) if values else ""
    n = sum(1 for r in rows if r["label"] == "transactions" and r["clients"] == clients)
    L.append(
        f"| {clients} | {fmt(plain)} | {fmt(tx)} | {fmt(ratio, 2)} | "
        f"{fmt(med('plain', clients, 'p50_us'))}/{fmt(med('plain', clients, 'p99_us'))} | "
        f"{fmt(med('transactions', clients, 'p50_us'))}/{fmt(med('transactions', clients, 'p99_us'))} | "
        f"{step('prepare_latency', 'p50_us')}/{step('prepare_latency', 'p99_us')} | "
        f"{step('commit_latency', 'p50_us')}/{step('commit_latency', 'p99_us')} | "
        f"{fmt(med('plain', clients, 'node_cpu_us_per_msg'), 1)} | {fmt(med('transactions', clients, 'node_cpu_us_per_msg'), 1)} | {n} |"
    )
L += [
    "",
    "## Throughput: every run",
    "",
    "| round | clients | benchmark | exit | done | errors | per s | p50 us | p99 us | max us | node CPU us each | load avg |",
    "|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
]
for r in rows:
    if r["label"] == "pending":
        continue
    if r.get("failed"):
        L.append(f"| {r['round']} | {r['clients']} | {r['label']} | {r['exit_status']} | the benchmark printed no summary | | | | | | | {r['loadavg']} |")
        continue
    done = r.get("messages", r.get("transactions"))
    rate = r.get("msgs_per_sec", r.get("tx_per_sec"))
    errors = f"{r['errors']} {r['errors_by_code']}" if r["errors"] else "0"
    L.append(
        f"| {r['round']} | {r['clients']} | {r['label']} | {r['exit_status']} | {done} | {errors} | {rate:.0f} | "
        f"{r['p50_us']} | {r['p99_us']} | {r['max_us']} | {fmt(r['node_cpu_us_per_msg'], 1)} | {r['loadavg']} |"
    )

def mb(kb):
    return "?" if kb is None else f"{kb / 1024:.0f}"

for r in (r for r in rows if r["label"] == "pending"):
    L += [
        "",
        "## Pending halves and check-backs",
        "",
        f"A fresh node with `transactionTimeOut={timeout_ms}` and `transactionCheckInterval={interval_ms}` (ms). "
        f"`bench transactions --pending {pending_n}`: {pending_size}-byte halves, 4 connections x 64 in flight, "
        "never decided by the sender; a separate producer connection registered by HEART_BEAT answers each "
        "CHECK_TRANSACTION_STATE with a oneway END_TRANSACTION COMMIT (fromTransactionCheck=true). "
        "Lateness = a check's arrival minus (the half's store time, from the check's body, + transactionTimeOut); "
        "`from ack` uses the time the sender saw the half acknowledged instead. It includes up to one check "
        f"interval by design (the node checks in rounds). Unchecked halves are given up on {grace} s after the last "
        "became eligible. Memory from /proc/<pid>/status of the node, MB.",
        "",
    ]
    if r.get("failed"):
        L.append(f"The benchmark printed no summary (exit {r['exit_status']}).")
        continue
    s, a, m = r["lateness_store"], r["lateness_ack"], r["node_memory"]
    L += [
        "| figure | value |",
        "|---|---|",
        f"| exit status | {r['exit_status']} |",
        f"| halves acknowledged (errors) | {r['halves']} ({r['load_errors']}{' ' + str(r['load_errors_by_code']) if r['load_errors'] else ''}) |",
        f"| load | {r['load_elapsed_s']:.1f} s, {r['halves_per_sec']:.0f} halves/s, send p50/p99 {r['load_latency']['p50_us']}/{r['load_latency']['p99_us']} us |",
        f"| checks received / halves checked / never checked / checked again | {r['checks']} / {r['checked']} / {r['unchecked']} / {r['duplicates']} |",
        f"| foreign / unreadable checks / checks without a record | {r['foreign']} / {r['unreadable']} / {r['without_record']} |",
        f"| halves checked before the load ended / acknowledged after the first was eligible | {r['checked_during_load']} / {r['acked_after_first_eligible']} |",
        f"| check-back lateness ms, from store time: p50 / p99 / p99.9 / max (early) | {s['p50_ms']} / {s['p99_ms']} / {s['p999_ms']} / {s['max_ms']} ({s['early']} of {s['count']}) |",
        f"| check-back lateness ms, from ack: p50 / p99 / p99.9 / max (early) | {a['p50_ms']} / {a['p99_ms']} / {a['p999_ms']} / {a['max_ms']} ({a['early']} of {a['count']}) |",
        f"| first checks spread over | {r['check_span_s']:.1f} s ({r['checked_per_sec']:.0f} halves/s) |",
        f"| messages in the topic at the end (the committed halves) | {r['topic_messages']} |",
        f"| node VmRSS before / after the load / sampled peak / at end / VmHWM | {mb(m['rss_before_kb'])} / {mb(m['rss_after_load_kb'])} / {mb(m['rss_sampled_peak_kb'])} / {mb(m['rss_at_end_kb'])} / {mb(m['vmhwm_kb'])} |",
        f"| node RssAnon before / after the load / sampled peak / at end | {mb(m['anon_before_kb'])} / {mb(m['anon_after_load_kb'])} / {mb(m['anon_sampled_peak_kb'])} / {mb(m['anon_at_end_kb'])} |",
        f"| node CPU us per half (load and checks) | {fmt(r['node_cpu_us_per_msg'], 1)} |",
        f"| heartbeat failures / checker connection closed | {r['heartbeat_failures']} / {r['checker_closed']} |",
        f"| whole run | {r['elapsed_s']:.1f} s, load avg at the end {r['loadavg']} |",
    ]
load_text = open(loads).read()
busy = [line for line in load_text.splitlines() if line.startswith("BUSY")]
L += ["", "## Machine load during the runs", ""]
if busy:
    L += [f"**Other processes were compiling during {len(busy)} of the {load_text.count('== ')} load checks "
          "(at the start of each benchmark and at the end): the figures are noisy.**", ""]
else:
    L += ["No compiler was running at any load check (at the start of each benchmark and at the end).", ""]
L += ["```"] + load_text.rstrip().splitlines() + ["```"]
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
