#!/usr/bin/env python3
"""The node's two network paths side by side: `networkIo=epoll` against `networkIo=uring`
(issue 28), on the load of perf/peers.sh (1 KiB sends, each client on its own connection
waiting for every acknowledgement), interleaved.

For ROUNDS rounds, for each flush mode and client count, a fresh one-shard node per path
(which path goes first alternates by round), pinned to the first CPU, loaded by
`ringmq bench produce --io tasks` pinned to the second. The node's CPU time (utime+stime
from /proc/<pid>/stat) around the load gives its CPU per message.

Writes OUT/network-io-node.md (medians per row, the uring/epoll ratios) and
OUT/network-io-node.raw.jsonl (every run).

env: RINGMQ_BIN (target/release/ringmq), ROUNDS (3), CLIENTS ("1 16 64"),
     FLUSHES ("async sync"), SECONDS_PER_RUN (5), DIR (/var/tmp), OUT (perf/results)
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("RINGMQ_BIN", "target/release/ringmq")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CLIENTS = [int(c) for c in os.environ.get("CLIENTS", "1 16 64").split()]
FLUSHES = os.environ.get("FLUSHES", "async sync").split()
SECONDS = int(os.environ.get("SECONDS_PER_RUN", "5"))
SCRATCH = os.environ.get("DIR", "/var/tmp")
OUT = os.environ.get("OUT", "perf/results")
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU, LOAD_CPU = str(CPUS[0]), str(CPUS[-1])
TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def one_run(io, clients, flush):
    store = tempfile.mkdtemp(prefix="ringmq-netio-", dir=SCRATCH)
    log = open(os.path.join(store, "serve.log"), "w+")
    node = subprocess.Popen(
        ["taskset", "-c", SERVER_CPU, BIN, "serve", "--dir", os.path.join(store, "s"),
         "--port", "0", "--namesrv-port", "0", "--metrics-port", "0", "--shards", "1",
         "--flush", flush, "--set", f"networkIo={io}"],
        stderr=log, stdout=subprocess.DEVNULL)
    try:
        addr = None
        deadline = time.monotonic() + 20
        while addr is None:
            if node.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                sys.exit(f"ringmq serve ({io}) did not start: {log.read()}")
            log.seek(0)
            for line in log:
                if line.startswith("ringmq: listening on "):
                    addr = "127.0.0.1:" + line.strip().rsplit(":", 1)[1]
            time.sleep(0.05)
        log.seek(0)
        banner = [line.strip() for line in log if line.startswith("ringmq: connections on")]
        before = cpu_ticks(node.pid)
        bench = subprocess.run(
            ["taskset", "-c", LOAD_CPU, BIN, "bench", "produce", "--addr", addr,
             "--connections", str(clients), "--producers-per-connection", "1",
             "--io", "tasks", "--duration", str(SECONDS), "--size", "1024",
             "--quiet", "--json"],
            capture_output=True, text=True, check=True)
        after = cpu_ticks(node.pid)
    finally:
        node.terminate()
        node.wait()
        shutil.rmtree(store, ignore_errors=True)
    result = json.loads(bench.stdout.strip().splitlines()[-1])
    messages = result["messages"]
    return {
        "io": io, "clients": clients, "flush": flush, "banner": banner,
        "msgs_per_sec": result["msgs_per_sec"], "p50_us": result["p50_us"],
        "p99_us": result["p99_us"], "errors": result["errors"], "messages": messages,
        "cpu_us_per_msg": (after - before) * 1e6 / TICK / max(messages, 1),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = []
    with open(os.path.join(OUT, "network-io-node.raw.jsonl"), "w") as raw:
        for round_ in range(ROUNDS):
            order = ["epoll", "uring"] if round_ % 2 == 0 else ["uring", "epoll"]
            for flush in FLUSHES:
                for clients in CLIENTS:
                    for io in order:
                        run = one_run(io, clients, flush)
                        run["round"] = round_
                        runs.append(run)
                        raw.write(json.dumps(run) + "\n")
                        raw.flush()
                        print(json.dumps(run), flush=True)
    lines = [
        "# The node's network paths: epoll against io_uring",
        "",
        f"`perf/network_io_node.py`, started {started}: {ROUNDS} rounds of {SECONDS} s runs,",
        "1 KiB sends, one shard on CPU " + SERVER_CPU + ", `ringmq bench produce --io tasks` on CPU "
        + LOAD_CPU + ", one acknowledgement awaited per client. Medians over the rounds.",
        "",
        "| flush | clients | epoll msgs/s | uring msgs/s | uring/epoll | epoll CPU µs/msg | uring CPU µs/msg | uring/epoll | epoll p50 µs | uring p50 µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for flush in FLUSHES:
        for clients in CLIENTS:
            row = {}
            for io in ("epoll", "uring"):
                mine = [r for r in runs if r["io"] == io and r["clients"] == clients and r["flush"] == flush]
                row[io] = {key: statistics.median(r[key] for r in mine)
                           for key in ("msgs_per_sec", "cpu_us_per_msg", "p50_us")}
            e, u = row["epoll"], row["uring"]
            lines.append(
                f"| {flush} | {clients} | {e['msgs_per_sec']:.0f} | {u['msgs_per_sec']:.0f} | "
                f"{u['msgs_per_sec'] / e['msgs_per_sec']:.2f}x | {e['cpu_us_per_msg']:.2f} | "
                f"{u['cpu_us_per_msg']:.2f} | {u['cpu_us_per_msg'] / e['cpu_us_per_msg']:.2f}x | "
                f"{e['p50_us']:.0f} | {u['p50_us']:.0f} |")
    errors = sum(r["errors"] for r in runs)
    lines += ["", f"Send errors over all runs: {errors}. Raw runs: `network-io-node.raw.jsonl`."]
    with open(os.path.join(OUT, "network-io-node.md"), "w") as md:
        md.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
