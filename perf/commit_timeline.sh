#!/usr/bin/env bash
# Where a SYNC_FLUSH group-commit cycle spends its time, from kernel tracepoints.
#
# A one-shard `ringmq serve --flush sync` on the first CPU, `ringmq bench produce --io tasks`
# on the second driving N connections (one sync producer each, 1 KiB). For one second of
# the run, perf records the node's io_uring submissions and completions and its sendto and
# recvfrom calls; the script cuts the trace into cycles at each fsync submission and
# reports the median of each phase:
#   fsync     submission of the fdatasync to its completion (the disk)
#   wake      completion to the first reply sent (the shard noticing and answering)
#   replies   first to last reply sent after it, and how many
#   requests  first to last request read after the replies, and how many
#   to fsync  last request read to the next fdatasync submitted (encode, write, submit)
# Tracing adds a few µs to every syscall, so the CPU phases read somewhat long; the
# shape (which phases overlap, which wait for which) is what this shows.
# Output: perf/results/commit-timeline-<N>.md
#
# Usage: perf/commit_timeline.sh [CLIENTS (64)] [SECONDS (4)]. Run nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-64}
SECONDS_RUN=${2:-4}
command -v perf >/dev/null || (apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null)
cargo build --release --quiet
DIR=$(mktemp -d /var/tmp/ringmq-timeline.XXXXXX)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
CPUS=$(nproc)
LOADGEN_CPU=$((CPUS > 1 ? 1 : 0))
source perf/one_shard_node.sh
start_one_shard_node target/release/ringmq "$DIR" sync
# Record one second from the middle of the run.
(sleep $((SECONDS_RUN / 2)); perf record -q -e io_uring:io_uring_submit_req -e io_uring:io_uring_complete \
  -e syscalls:sys_enter_sendto -e syscalls:sys_enter_recvfrom -p "$SERVER_PID" \
  -o "$DIR/trace.data" -- sleep 1 >/dev/null 2>&1) &
TRACER=$!
taskset -c "$LOADGEN_CPU" target/release/ringmq bench produce --addr "$ADDR" \
  --connections "$CLIENTS" --producers-per-connection 1 --io tasks --mode sync --size 1024 \
  --duration "$SECONDS_RUN" --quiet --json > "$DIR/summary.json"
wait "$TRACER"
perf script -i "$DIR/trace.data" 2>/dev/null > "$DIR/trace.txt"
python3 - "$DIR/trace.txt" "$DIR/summary.json" "$CLIENTS" "perf/results/commit-timeline-$CLIENTS.md" <<'PY'
import json, re, statistics, sys, time
trace, summary_path, clients, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
events = []
for line in open(trace):
    m = re.search(r"\s(\d+\.\d+):\s+\S+?:(\S+):", line)
    if not m:
        continue
    t, name = float(m.group(1)) * 1e6, m.group(2)
    if name == "io_uring_submit_req":
        if "FSYNC" not in line:
            continue
        kind = "fsync"
    elif name == "io_uring_complete":
        # The fsync's completion is posted by the io-wq worker that ran it.
        if "iou-wrk" not in line:
            continue
        kind = "done"
    elif name == "sys_enter_sendto":
        kind = "send"
    elif name == "sys_enter_recvfrom":
        kind = "recv"
    else:
        continue
    events.append((t, kind))
cycles = []
starts = [i for i, (_, k) in enumerate(events) if k == "fsync"]
for a, b in zip(starts, starts[1:]):
    span = events[a:b + 1]
    t_submit = span[0][0]
    done = [t for t, k in span if k == "done"]
    if not done:
        continue
    t_done = done[0]
    sends = [t for t, k in span if k == "send" and t >= t_done]
    recvs = [t for t, k in span if k == "recv" and t >= t_done]
    during = sum(1 for t, k in span if k == "recv" and t < t_done)
    if not sends or not recvs:
        continue
    cycles.append({
        "fsync": t_done - t_submit,
        "wake": sends[0] - t_done,
        "replies": sends[-1] - sends[0], "replies_n": len(sends),
        "requests": recvs[-1] - recvs[0], "requests_n": len(recvs),
        "to_fsync": span[-1][0] - recvs[-1],
        "cycle": span[-1][0] - t_submit,
        "read_during_fsync": during,
    })
if not cycles:
    sys.exit("no complete cycle in the trace")
med = lambda key: statistics.median(c[key] for c in cycles)
summary = json.load(open(summary_path))
cycle = med("cycle")
rows = [
    ("fsync (disk)", med("fsync"), ""),
    ("wake: completion to first reply", med("wake"), ""),
    ("replies sent", med("replies"), f"{med('replies_n'):.0f} replies"),
    ("requests read", med("requests"), f"{med('requests_n'):.0f} requests"),
    ("last request to next fsync", med("to_fsync"), "encode, write, submit"),
]
with open(out, "w") as f:
    f.write(f"# One SYNC_FLUSH group-commit cycle, {clients} clients (`perf/commit_timeline.sh`)\n\n")
    f.write(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(cycles)} cycles traced in one "
            f"second of a {summary['elapsed_s']:.0f} s run that made {summary['msgs_per_sec']:,.0f} msgs/s "
            f"(p50 {summary['p50_us']} µs) while traced. Medians per cycle; tracing slows every syscall a little.\n\n")
    f.write("| phase | µs | share of cycle | |\n|---|---:|---:|---|\n")
    for name, value, note in rows:
        f.write(f"| {name} | {value:,.0f} | {value / cycle:.0%} | {note} |\n")
    f.write(f"| **cycle** (fsync submission to the next) | {cycle:,.0f} | 100% | |\n\n")
    f.write(f"Requests read while the fsync was in flight, median per cycle: {med('read_during_fsync'):.0f}.\n")
print(open(out).read())
PY
