#!/usr/bin/env bash
# Delivery lateness of delay levels and timer messages under a large backlog, and the
# throughput of CONSUMER_SEND_MSG_BACK (36) against plain sends.
#
# Each repetition (RUNS, default 3) runs three benchmarks, each against a fresh node
# (`ringmq serve`, release, 1 shard, in a temporary directory, pinned to NODE_CPU with
# taskset; the load generator pinned to LOAD_CPU):
#   1. ringmq bench delayed: DELAY_MESSAGES (100,000) messages with DELAY levels 1..6 in
#      turn, the node's messageDelayLevel set to DELAY_LEVELS ("1s 2s 5s 10s 20s 30s"
#      instead of RocketMQ's default 1s..2h, so a run takes about a minute);
#   2. ringmq bench timers: TIMER_MESSAGES (1,000,000) messages with TIMER_DELIVER_MS
#      spread at random over [TIMER_LEAD, TIMER_LEAD + TIMER_SPAN] s (40-90 s) after the
#      first send, so the whole backlog is pending at once when the sends take less than
#      TIMER_LEAD (the summary counts the sends acknowledged after the first due time);
#   3. ringmq bench send-back: SENDBACK_MESSAGES (100,000) plain sends, then one
#      CONSUMER_SEND_MSG_BACK of each (delayLevel 0: the node's default levels, so the
#      copies wait at level 3, 10 s, in SCHEDULE_TOPIC_XXXX).
# Delay and timer runs are separate (never both kinds pending at once). Sends are one
# message per request (a batch cannot be delayed or timed), CONNECTIONS (4) x INFLIGHT (64)
# in flight, SIZE (128) byte bodies. Lateness = the delivered copy's store timestamp minus
# its due time (delay: its SCHEDULE_TOPIC_XXXX record's store time + the level's delay;
# timer: TIMER_OUT_MS), and the consumer's receipt time minus the due time (long-polling
# pulls, running from before the first send). The node's memory: VmRSS when the sends end,
# the largest VmRSS sampled every 100 ms, and VmHWM, from /proc/<pid>/status.
# The node's own counters (ringmq_delay_* / ringmq_timer_* / ringmq_retries_total) are
# scraped from its metrics endpoint at the end of each run.
#
# Results: perf/results/delivery-lateness.md (medians over the runs, then every run) and
# perf/results/delivery-lateness.raw.jsonl (one JSON line per benchmark run).
#
# Usage: perf/delivery_bench.sh
#   env: RUNS (3), DELAY_MESSAGES, DELAY_LEVELS, TIMER_MESSAGES, TIMER_LEAD, TIMER_SPAN,
#        SENDBACK_MESSAGES, SIZE, CONNECTIONS, INFLIGHT, GRACE (120 s past the last due
#        time before missing deliveries are given up on; a run ends as soon as everything
#        sent was received), NODE_SET (extra node settings, `key=value` separated by
#        spaces, e.g. "timer_memory_entries=1024", for every node), FLUSH (the node's flushDiskType:
#        unset for its default, ASYNC_FLUSH; or SYNC_FLUSH), NODE_CPU (1), LOAD_CPU (0),
#        DIR (/var/tmp), RINGMQ_BIN (a binary to measure instead of building this
#        checkout), RESULTS_TAG (appended to the results' names), ONLY (delay, timer or
#        sendback: run just that one).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DELAY_MESSAGES=${DELAY_MESSAGES:-100000}
DELAY_LEVELS=${DELAY_LEVELS:-1s 2s 5s 10s 20s 30s}
TIMER_MESSAGES=${TIMER_MESSAGES:-1000000}
TIMER_LEAD=${TIMER_LEAD:-40}
TIMER_SPAN=${TIMER_SPAN:-50}
SENDBACK_MESSAGES=${SENDBACK_MESSAGES:-100000}
SIZE=${SIZE:-128}
CONNECTIONS=${CONNECTIONS:-4}
INFLIGHT=${INFLIGHT:-64}
GRACE=${GRACE:-120}
NODE_SET=${NODE_SET:-}
NODE_CPU=${NODE_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
BASE=${DIR:-/var/tmp}
ONLY=${ONLY:-}
OUT=perf/results
NAME="delivery-lateness${RESULTS_TAG:-}"
RAW="$OUT/$NAME.raw.jsonl"
LOADS=$(mktemp)
mkdir -p "$OUT"
: > "$RAW"
if [ -z "${RINGMQ_BIN:-}" ]; then
  cargo build --release --quiet
fi
BIN=${RINGMQ_BIN:-target/release/ringmq}
NODE_ARGS=()
[ -n "${FLUSH:-}" ] && NODE_ARGS=(--set "flush_disk_type=$FLUSH")
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

start_node() { # serve args... -> NODE_PID, ADDR, METRICS
  DIR_NOW=$(mktemp -d "$BASE/ringmq-delivery-bench-XXXXXX")
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
  METRICS=$(sed -n 's/^ringmq: metrics on //p' "$log")
}

stop_node() {
  kill -TERM "$NODE_PID"; wait "$NODE_PID" || true
  NODE_PID=
  rm -rf "$DIR_NOW"
  DIR_NOW=
}

record() { # label run json exit-status -> one line of $RAW (with the node's counters)
  python3 - "$@" "$METRICS" "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW" <<'PY'
import json, sys, urllib.request
label, run, text, status, metrics, load = sys.argv[1:]
d = json.loads(text) if text.strip() else {"failed": True}
d.update(label=label, run=int(run), exit_status=int(status), loadavg=load)
counters = {}
try:
    for line in urllib.request.urlopen(metrics, timeout=5).read().decode().splitlines():
        if line.startswith(("ringmq_delay_", "ringmq_timer_", "ringmq_retries", "ringmq_dead")):
            name, value = line.rsplit(" ", 1)
            counters[name] = float(value)
except Exception as error:  # the figures above stand without them
    counters["error"] = str(error)
d["node_counters"] = counters
print(json.dumps(d))
PY
}

run_bench() { # label run bench-args... (node already started)
  local label=$1 run=$2 json status=0
  shift 2
  echo "== run $run: $label (node $NODE_PID on $ADDR, CPU $NODE_CPU; load on CPU $LOAD_CPU)" >&2
  machine_load "run $run $label"
  json=$(taskset -c "$LOAD_CPU" "$BIN" bench "$@" --addr "$ADDR" --node-pid "$NODE_PID" \
    --size "$SIZE" --connections "$CONNECTIONS" --inflight "$INFLIGHT" --json --quiet) || status=$?
  record "$label" "$run" "$json" "$status"
  echo "   $(tail -1 "$RAW" | cut -c1-400)..." >&2
}

for run in $(seq 1 "$RUNS"); do
  if [ -z "$ONLY" ] || [ "$ONLY" = delay ]; then
    start_node --set "message_delay_level=$DELAY_LEVELS"
    run_bench delay "$run" delayed --messages "$DELAY_MESSAGES" --levels "$DELAY_LEVELS" --grace "$GRACE"
    stop_node
  fi
  if [ -z "$ONLY" ] || [ "$ONLY" = timer ]; then
    start_node
    run_bench timer "$run" timers --messages "$TIMER_MESSAGES" --lead "$TIMER_LEAD" --span "$TIMER_SPAN" --grace "$GRACE"
    stop_node
  fi
  if [ -z "$ONLY" ] || [ "$ONLY" = sendback ]; then
    start_node
    run_bench sendback "$run" send-back --messages "$SENDBACK_MESSAGES"
    stop_node
  fi
done
machine_load "end"
ELAPSED=$(( $(date +%s) - SCRIPT_START ))

python3 - "$RAW" "$OUT/$NAME.md" "$LOADS" "$ELAPSED" "$(nproc)" "$NODE_CPU" "$LOAD_CPU" \
  "$DELAY_MESSAGES" "$DELAY_LEVELS" "$TIMER_MESSAGES" "$TIMER_LEAD" "$TIMER_SPAN" \
  "$SENDBACK_MESSAGES" "$SIZE" "$CONNECTIONS" "$INFLIGHT" "${FLUSH:-ASYNC_FLUSH (default)}" \
  "$GRACE" "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "${NODE_SET:-none}" <<'PY'
import json, statistics, sys
(raw, out, loads, elapsed, cores, node_cpu, load_cpu, delay_n, levels, timer_n, lead, span,
 sendback_n, size, conns, inflight, flush, grace, commit, node_set) = sys.argv[1:]
rows = [json.loads(line) for line in open(raw)]

def get(row, path):
    for key in path.split("."):
        if not isinstance(row, dict) or key not in row or row[key] is None:
            return None
        row = row[key]
    return row

def median(label, path):
    values = [get(r, path) for r in rows if r["label"] == label]
    values = [v for v in values if v is not None]
    if not values:
        return ""
    m = statistics.median(values)
    return f"{m:.0f}" if abs(m) >= 100 or float(m).is_integer() else f"{m:.2f}"

def mb(label, path):
    values = [get(r, path) for r in rows if r["label"] == label]
    values = [v for v in values if v is not None]
    return f"{statistics.median(values) / 1024:.0f}" if values else ""

L = [
    "# Delivery lateness under a backlog, and send-back throughput (`perf/delivery_bench.sh`)",
    "",
    f"Command: `perf/delivery_bench.sh` (commit {commit}); {len(set(r['run'] for r in rows))} runs, "
    f"{elapsed} s in all. Machine: {cores} cores; the node (`ringmq serve`, release, 1 shard, "
    f"flushDiskType {flush}) pinned to CPU {node_cpu}, the load generator (`ringmq bench`) to "
    f"CPU {load_cpu}, a fresh node in a temporary directory for every benchmark run; extra node "
    f"settings: {node_set}.",
    "",
    "Settings:",
    f"- delayed: {delay_n} messages, `DELAY` levels 1..n in turn, the node's `messageDelayLevel` "
    f"set to `{levels}` (not RocketMQ's default 1s..2h, so a run takes about a minute); the level-1 "
    "messages start coming due while the sends are still going on.",
    f"- timers: {timer_n} messages, `TIMER_DELIVER_MS` spread at random over {lead}-{float(lead) + float(span):.0f} s "
    "after the first send (the whole backlog is pending at once if the sends end before the first due "
    "time: see `sent after 1st due`). Delay and timer runs are separate.",
    f"- send-back: {sendback_n} plain sends, then one CONSUMER_SEND_MSG_BACK (36, delayLevel 0, the node's "
    "default levels: the copies wait at level 3, 10 s, in SCHEDULE_TOPIC_XXXX) of each stored message.",
    f"- {size}-byte bodies, one message per request (a batch cannot be delayed or timed), {conns} connections x "
    f"{inflight} requests in flight; consumers: one long-polling pull loop per queue (4 queues) from before "
    f"the first send. Missing deliveries are given up on {grace} s after the last due time.",
    "",
    "Lateness: `store` = the delivered copy's store timestamp minus its due time (delay: its "
    "SCHEDULE_TOPIC_XXXX record's store time + the level's delay; timer: `TIMER_OUT_MS`); `receipt` = the "
    "consumer's receipt time minus the due time (adds the pull path and the load generator's own "
    "scheduling). Milliseconds, one wall clock. `early` counts deliveries before their due time. "
    "Memory: the node's VmRSS when the last send was acknowledged (`at backlog`), the largest VmRSS "
    "sampled every 100 ms, and VmHWM, in MB; VmRSS counts the pages of the store's mapped files the node "
    "touched, so RssAnon (heap and stacks, what pending timers cost) is given apart. Target from the issue: p99 lateness under 50 ms.",
    "",
    "## Medians over the runs",
    "",
    "| benchmark | sent | delivered | missing | dup | early (store) | store p50 | store p99 | store max | receipt p50 | receipt p99 | receipt max | send msgs/s | VmRSS at backlog MB | VmRSS peak MB | VmHWM MB | RssAnon at backlog MB | RssAnon peak MB |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for label in ("delay", "timer"):
    if not any(r["label"] == label for r in rows):
        continue
    L.append(
        f"| {label} | {median(label, 'send.messages')} | {median(label, 'delivered')} | {median(label, 'missing')} | "
        f"{median(label, 'duplicates')} | {median(label, 'lateness_store.early')} | "
        f"{median(label, 'lateness_store.p50_ms')} | {median(label, 'lateness_store.p99_ms')} | {median(label, 'lateness_store.max_ms')} | "
        f"{median(label, 'lateness_receipt.p50_ms')} | {median(label, 'lateness_receipt.p99_ms')} | {median(label, 'lateness_receipt.max_ms')} | "
        f"{median(label, 'send.msgs_per_sec')} | {mb(label, 'node_memory.rss_at_backlog_kb')} | "
        f"{mb(label, 'node_memory.rss_sampled_peak_kb')} | {mb(label, 'node_memory.vmhwm_kb')} | "
        f"{mb(label, 'node_memory.anon_at_backlog_kb')} | {mb(label, 'node_memory.anon_sampled_peak_kb')} |"
    )
if any(r["label"] == "sendback" for r in rows):
    L += [
        "",
        "| send-back benchmark | messages | plain send msgs/s | send-back msgs/s | send-back / plain | plain p99 us | send-back p99 us | node CPU us/msg plain | node CPU us/msg send-back | copies scheduled |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| sendback | {median('sendback', 'send_back.messages')} | {median('sendback', 'plain.msgs_per_sec')} | "
        f"{median('sendback', 'send_back.msgs_per_sec')} | {median('sendback', 'ratio')} | "
        f"{median('sendback', 'plain.p99_us')} | {median('sendback', 'send_back.p99_us')} | "
        f"{median('sendback', 'plain.node_cpu_us_per_msg')} | {median('sendback', 'send_back.node_cpu_us_per_msg')} | "
        f"{median('sendback', 'scheduled_copies')} |",
    ]
L += [
    "",
    "## Every run",
    "",
    "| run | benchmark | exit | sent | send errors | send s | delivered | missing | dup | pending at send end | sent after 1st due | early | store p50/p90/p99/p99.9/max ms | receipt p50/p99/max ms | VmRSS backlog/peak/HWM MB | RssAnon backlog/peak/end, RssFile end MB | node CPU us/msg | load avg |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---|",
]
def kb(v):
    return f"{v / 1024:.0f}" if v is not None else "?"
for r in rows:
    if r["label"] == "sendback" or r.get("failed"):
        continue
    s, c, m = r["lateness_store"], r["lateness_receipt"], r["node_memory"]
    L.append(
        f"| {r['run']} | {r['label']} | {r['exit_status']} | {r['send']['messages']} | {r['send']['errors']} | "
        f"{r['send']['elapsed_s']:.1f} | {r['delivered']} | {r['missing']} | {r['duplicates']} | "
        f"{r['pending_at_send_end']} | {r['sent_after_first_due']} | {s['early']} | "
        f"{s['p50_ms']}/{s['p90_ms']}/{s['p99_ms']}/{s['p999_ms']}/{s['max_ms']} | {c['p50_ms']}/{c['p99_ms']}/{c['max_ms']} | "
        f"{kb(m['rss_at_backlog_kb'])}/{kb(m['rss_sampled_peak_kb'])}/{kb(m['vmhwm_kb'])} | "
        f"{kb(m.get('anon_at_backlog_kb'))}/{kb(m.get('anon_sampled_peak_kb'))}/{kb(m.get('anon_at_end_kb'))}, {kb(m.get('file_at_end_kb'))} | "
        f"{(r['node_cpu_us_per_msg'] or 0):.1f} | {r['loadavg']} |"
    )
for r in rows:
    if r["label"] == "sendback" and not r.get("failed"):
        p, b = r["plain"], r["send_back"]
        L.append(
            f"| {r['run']} | sendback | {r['exit_status']} | {p['messages']} plain, {b['messages']} back | "
            f"{p['errors']}+{b['errors']} | {p['elapsed_s']:.1f}+{b['elapsed_s']:.1f} | plain {p['msgs_per_sec']:.0f}/s, "
            f"back {b['msgs_per_sec']:.0f}/s, ratio {r['ratio']:.2f} | | | | | | plain p50/p99 {p['p50_us']}/{p['p99_us']} us; "
            f"back p50/p99 {b['p50_us']}/{b['p99_us']} us | | | | {(b['node_cpu_us_per_msg'] or 0):.1f} (back) | {r['loadavg']} |"
        )
for r in rows:
    if r.get("failed"):
        L.append(f"| {r['run']} | {r['label']} | {r['exit_status']} | the benchmark printed no summary | | | | | | | | | | | | | | {r['loadavg']} |")
per_level = [r for r in rows if r["label"] == "delay" and r.get("per_level")]
if per_level:
    L += ["", "Delay lateness (store) per level, ms, each run: p50/p99/max", ""]
    L.append("| run | " + " | ".join(f"level {l['level']} ({l['delay_ms'] / 1000:g} s)" for l in per_level[0]["per_level"]) + " |")
    L.append("|---:|" + "---|" * len(per_level[0]["per_level"]))
    for r in per_level:
        L.append(f"| {r['run']} | " + " | ".join(f"{l['p50_ms']}/{l['p99_ms']}/{l['max_ms']}" for l in r["per_level"]) + " |")
L += ["", "The node's own counters at the end of each run, those not 0 (its lateness is due time to the copy's acknowledgement, summed):", ""]
for r in rows:
    c = r.get("node_counters", {})
    picked = {k: v for k, v in c.items()
              if k == "error" or (v and ("lateness" in k or "delivered" in k or "retries" in k or "skipped" in k))}
    L.append(f"- run {r['run']} {r['label']}: " + (", ".join(f"`{k}` {v:g}" if isinstance(v, float) else f"`{k}` {v}" for k, v in sorted(picked.items())) or "none"))
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
