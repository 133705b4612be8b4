#!/usr/bin/env python3
"""SYNC_MASTER against ASYNC_MASTER, and SYNC_MASTER with SYNC_FLUSH against a single node
with SYNC_FLUSH, interleaved in one run; called by perf/replication.sh (issue 25).

Each round starts fresh processes for every row, in a rotating order:

  async-master   a master (brokerRole=ASYNC_MASTER, ASYNC_FLUSH) and its slave
  sync-master    a master (brokerRole=SYNC_MASTER, ASYNC_FLUSH) and its slave
  single-sync    one node alone, SYNC_FLUSH                       (with --flush-rows)
  sync-sync      a SYNC_MASTER with SYNC_FLUSH and its slave       (with --flush-rows)

for each producer count: `ringmq bench produce --io tasks` with N connections of one
producer each, waiting for every acknowledgement, 1 KiB messages to 8 queues. Every node
has one shard; master and slave run on the first CPU, the load generator on the second.
The run waits until the slave streams (the master answers SEND_OK) before it measures.
Per row: throughput, p50 and p99, and the CPU per message of the master and of the slave
(utime+stime from /proc over the measured seconds). The report gives medians over rounds
and the ratios the issue sets targets for.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU = str(CPUS[0])
LOADGEN_CPU = str(CPUS[1]) if len(CPUS) > 1 else None
ROWS = {
    "async-master": ("ASYNC_MASTER", "ASYNC_FLUSH", True),
    "sync-master": ("SYNC_MASTER", "ASYNC_FLUSH", True),
    "single-sync": ("ASYNC_MASTER", "SYNC_FLUSH", False),
    "sync-sync": ("SYNC_MASTER", "SYNC_FLUSH", True),
}


def pinned(cpu, argv):
    return ["taskset", "-c", cpu] + argv if cpu is not None else argv


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(binary, conf_lines, scratch, name):
    conf = os.path.join(scratch, f"{name}.conf")
    with open(conf, "w") as out:
        out.write("\n".join(conf_lines) + "\n")
    log = open(os.path.join(scratch, f"{name}.log"), "w")
    proc = subprocess.Popen(pinned(SERVER_CPU, [binary, "serve", "--broker-conf", conf]),
                            stdout=log, stderr=subprocess.STDOUT)
    return proc


def wait_port(port, proc, limit=30):
    deadline = time.time() + limit
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a node exited with {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port} after {limit} s")


def node_conf(role, flush, port, ha_port, store, broker_id, master_ha=None):
    lines = [
        "brokerClusterName=BenchCluster", "brokerName=bench", f"brokerId={broker_id}",
        f"brokerRole={role}", f"flushDiskType={flush}", "brokerIP1=127.0.0.1",
        f"listenPort={port}", f"namesrvPort={free_port()}", "metricsExporterType=DISABLE",
        f"storePathRootDir={store}", "shards=1", "pinShardThreads=false",
    ]
    if ha_port is not None:
        lines.append(f"haListenPort={ha_port}")
    if master_ha is not None:
        lines.append(f"haMasterAddress=127.0.0.1:{master_ha}")
    return lines


def bench(binary, port, producers, seconds, extra=()):
    argv = [binary, "bench", "produce", "--addr", f"127.0.0.1:{port}", "--io", "tasks",
            "--connections", str(producers), "--producers-per-connection", "1",
            "--size", "1024", "--duration", str(seconds), "--json", "--quiet", *extra]
    out = subprocess.run(pinned(LOADGEN_CPU, argv), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_row(binary, row, producers, seconds, scratch):
    role, flush, with_slave = ROWS[row]
    port, ha = free_port(), free_port()
    procs = []
    try:
        master = start(binary, node_conf(role, flush, port, ha, f"{scratch}/{row}-m", 0),
                       scratch, f"{row}-{producers}-master")
        procs.append(master)
        wait_port(port, master)
        slave = None
        if with_slave:
            sport = free_port()
            slave = start(binary, node_conf("SLAVE", flush, sport, None, f"{scratch}/{row}-s",
                                            1, master_ha=ha), scratch, f"{row}-{producers}-slave")
            procs.append(slave)
            wait_port(sport, slave)
        # Until the slave streams, a SYNC_MASTER answers SLAVE_NOT_AVAILABLE: wait for OK.
        deadline = time.time() + 30
        while True:
            probe = bench(binary, port, 1, 1)
            if probe["errors"] == 0 and probe["messages"] > 0:
                break
            if time.time() > deadline:
                raise SystemExit(f"{row}: no SEND_OK within 30 s: {probe['errors_by_code']}")
        before = {p.pid: cpu_seconds(p.pid) for p in procs}
        result = bench(binary, port, producers, seconds)
        after = {p.pid: cpu_seconds(p.pid) for p in procs}
        messages = max(result["messages"], 1)
        result["master_cpu_us"] = (after[master.pid] - before[master.pid]) / messages * 1e6
        if slave is not None:
            result["slave_cpu_us"] = (after[slave.pid] - before[slave.pid]) / messages * 1e6
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ringmq", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--producers", default="16 64")
    parser.add_argument("--flush-rows", action="store_true")
    parser.add_argument("--out", default="perf/results/replication.md")
    args = parser.parse_args()
    rows = ["async-master", "sync-master"] + (["single-sync", "sync-sync"] if args.flush_rows else [])
    producers = [int(p) for p in args.producers.split()]
    figures = {(row, n): [] for row in rows for n in producers}
    scratch_root = os.environ.get("DIR", "/var/tmp")
    for r in range(args.rounds):
        order = rows[r % len(rows):] + rows[:r % len(rows)]
        for n in producers:
            for row in order:
                with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
                    result = run_row(args.ringmq, row, n, args.seconds, scratch)
                figures[(row, n)].append(result)
                print(f"round {r} {row} {n}: {result['msgs_per_sec']:.0f} msg/s "
                      f"p50 {result['p50_us']} us errors {result['errors']}", file=sys.stderr)
    report(figures, rows, producers, args)


def report(figures, rows, producers, args):
    lines = ["# Replication benchmark (perf/replication.sh)", "",
             f"{args.rounds} rounds of {args.seconds} s per row, interleaved; medians. "
             "One shard per node; master and slave on CPU 0, the load generator on CPU 1; "
             "1 KiB messages, each producer waiting for every acknowledgement.", "",
             "| row | producers | msg/s | p50 µs | p99 µs | errors | master CPU µs/msg | slave CPU µs/msg |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    med = {}
    for n in producers:
        for row in rows:
            runs = figures[(row, n)]
            m = {key: median([run.get(key, float("nan")) for run in runs])
                 for key in ("msgs_per_sec", "p50_us", "p99_us", "errors", "master_cpu_us", "slave_cpu_us")}
            med[(row, n)] = m
            lines.append(f"| {row} | {n} | {m['msgs_per_sec']:.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} | "
                         f"{m['errors']:.0f} | {m['master_cpu_us']:.1f} | {m['slave_cpu_us']:.1f} |")
    lines += ["", "| ratio | producers | value | target |", "|---|---:|---:|---|"]
    for n in producers:
        a, s = med[("async-master", n)], med[("sync-master", n)]
        target = {16: "≥ 0.70", 64: "≥ 0.85"}.get(n, "")
        lines.append(f"| SYNC_MASTER / ASYNC_MASTER throughput | {n} | {s['msgs_per_sec'] / a['msgs_per_sec']:.2f} | {target} |")
        lines.append(f"| SYNC_MASTER − ASYNC_MASTER p50 µs | {n} | {s['p50_us'] - a['p50_us']:.0f} | ≤ 150 |")
        if ("sync-sync", n) in med:
            ss, single = med[("sync-sync", n)], med[("single-sync", n)]
            lines.append(f"| SYNC_MASTER+SYNC_FLUSH / single SYNC_FLUSH | {n} | {ss['msgs_per_sec'] / single['msgs_per_sec']:.2f} | ≥ 0.90 at 64 |")
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as out:
        out.write(text)
    with open(args.out.replace(".md", ".raw.jsonl"), "w") as out:
        for (row, n), runs in figures.items():
            for run in runs:
                out.write(json.dumps({"row": row, "producers": n, **run}) + "\n")
    print(text)


if __name__ == "__main__":
    main()
