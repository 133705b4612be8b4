#!/usr/bin/env bash
# What a network path on io_uring could save the node at most (issue 28): the bare
# ping-pong of examples/loopback_pingpong.rs with 1, 16 and 64 connections, its server on
# tokio's epoll reactor (as the node's shards are) or on a bare io_uring loop (one
# io_uring_enter per turn carrying every send and receive of it), with a single-shot recv
# per read (`uring`) or one multishot recv per connection into provided buffers
# (`uring-multishot`). The server does no work
# between read and write, so its CPU per round trip is network work only: the difference
# between the two is the most a node on io_uring would save per message, before adding
# back whatever joining a ring to the node's runtime costs.
#
# Rounds rotate which server goes first. Server on CPU 0, client on CPU 1, frames of a
# 1 KiB send (1,328 bytes) and its response (292 bytes).
# Results: perf/results/network-io-floor.md (and .raw.jsonl).
#
# Usage: perf/network_io_floor.sh      env: ROUNDS (default 3), SECONDS_PER_RUN (default 5),
#                                      CONNECTIONS (default "1 16 64"), PINGPONG_BIN (a built
#                                      examples/loopback_pingpong instead of building it).
# Run nothing else meanwhile: both CPUs are in use.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
RUN_SECONDS=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-1 16 64}
OUT=perf/results
mkdir -p "$OUT"
RAW="$OUT/network-io-floor.raw.jsonl"
: > "$RAW"
if [ -z "${PINGPONG_BIN:-}" ]; then
  cargo build --release --quiet --example loopback_pingpong
fi
BIN=${PINGPONG_BIN:-target/release/examples/loopback_pingpong}
for round in $(seq 1 "$ROUNDS"); do
  case $((round % 3)) in
    1) order="epoll uring uring-multishot" ;;
    2) order="uring uring-multishot epoll" ;;
    *) order="uring-multishot epoll uring" ;;
  esac
  for connections in $CONNECTIONS; do
    for io in $order; do
      line=$("$BIN" "$RUN_SECONDS" 0 1 1328 292 "$connections" "$io")
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["round"]=int(sys.argv[2]); print(json.dumps(d))' \
        "$line" "$round" >> "$RAW"
      echo "round $round, $connections connections, $io: $line" >&2
    done
  done
done
python3 - "$RAW" "$(date -u '+%Y-%m-%d %H:%M UTC')" > "$OUT/network-io-floor.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds = max(r["round"] for r in rows)
print("# The network's floor on epoll and on io_uring (perf/network_io_floor.sh)\n")
print(f"{sys.argv[2]}, {rounds} rounds of examples/loopback_pingpong.rs: server on CPU 0, client on CPU 1, "
      "1,328-byte requests and 292-byte responses, one in flight per connection, all connections "
      "on one thread each side. The server does nothing between read and write, so its CPU per "
      "round trip (user + system, getrusage(RUSAGE_THREAD)) is network work only. Medians.\n")
print("| connections | server | round trips/s | server CPU µs per round trip (user+sys) | client CPU µs |")
print("|---:|---|---:|---:|---:|")
med = lambda sel, f: statistics.median(f(r) for r in sel)
summary = {}
for n in sorted({r["connections"] for r in rows}):
    for io in ("epoll", "uring", "uring-multishot"):
        sel = [r for r in rows if r["connections"] == n and r["server_io"] == io]
        if not sel:
            continue
        server = med(sel, lambda r: r["server_user_us"] + r["server_sys_us"])
        summary[(n, io)] = server
        print(f"| {n} | {io} | {med(sel, lambda r: r['round_trips_per_sec']):,.0f} | "
              f"{server:.2f} ({med(sel, lambda r: r['server_user_us']):.2f}+{med(sel, lambda r: r['server_sys_us']):.2f}) | "
              f"{med(sel, lambda r: r['client_user_us'] + r['client_sys_us']):.2f} |")
print()
for n in sorted({n for n, _ in summary}):
    for io in ("uring", "uring-multishot"):
        if (n, "epoll") in summary and (n, io) in summary:
            e, u = summary[(n, "epoll")], summary[(n, io)]
            print(f"- {n} connections, {io}: saves {e - u:.2f} µs of server CPU per round trip "
                  f"against epoll ({100 * (e - u) / e:.0f}% of epoll's).")
PY
cat "$OUT/network-io-floor.md"
