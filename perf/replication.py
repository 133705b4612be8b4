#!/usr/bin/env python3
"""Replication benchmarks of issue 25 in one run; called by perf/replication.sh.

Each round starts fresh processes for every row, in a rotating order (1 KiB at each
producer count unless said):

  async-master    a master (brokerRole=ASYNC_MASTER, ASYNC_FLUSH) and its slave
  sync-master     a master (SYNC_MASTER, ASYNC_FLUSH) and its slave
  single-sync     one node alone, SYNC_FLUSH                                (--flush-rows)
  sync-sync       a SYNC_MASTER with SYNC_FLUSH and its slave with SYNC_FLUSH (--flush-rows)
  sync-sync-rmq   a SYNC_MASTER with SYNC_FLUSH, its slave ASYNC_FLUSH: the slave acks
                  what it wrote, as RocketMQ's does                         (--flush-rows)

and at 64 producers with 10 KiB messages (--delay-rows), SYNC_MASTER+ASYNC_FLUSH:

  direct-10k      master and slave connected directly
  proxy-10k       through examples/delay_proxy.rs adding nothing (what the proxy costs)
  delay-10k       through the proxy adding 2 ms in each direction (one-way delay 2 ms)

then once (--catch-up GiB): a master alone is filled with that many GiB (64 KiB messages),
an empty slave (ASYNC_FLUSH) is started and timed until its commitLogMaxOffset reaches the
master's, and `dd` writes as many bytes sequentially with one fdatasync at the end, in the
same scratch directory: the disk's limit, measured in the same run.

`ringmq bench produce --io tasks`: N connections of one producer each, waiting for every
acknowledgement, to 8 queues. Every node has one shard; master and slave run on the first
CPU, the load generator (and the proxy) on the second. The run waits until the slave
streams (the master answers SEND_OK) before it measures. Per row: throughput, p50 and p99,
and the CPU per message of the master and of the slave (utime+stime from /proc over the
measured seconds / messages acknowledged). The report gives medians over rounds and the
ratios the issue sets targets for.
"""
import argparse
import shutil
import json
import os
import re
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
DELAY_US = 2000
CATCH_UP_MESSAGE = 64 * 1024


class Row:
    def __init__(self, role, flush, slave_flush=None, size=1024, delay_us=None):
        self.role, self.flush, self.size, self.delay_us = role, flush, size, delay_us
        # None: no slave.
        self.slave_flush = slave_flush


ROWS = {
    "async-master": Row("ASYNC_MASTER", "ASYNC_FLUSH", "ASYNC_FLUSH"),
    "sync-master": Row("SYNC_MASTER", "ASYNC_FLUSH", "ASYNC_FLUSH"),
    "single-sync": Row("ASYNC_MASTER", "SYNC_FLUSH"),
    "sync-sync": Row("SYNC_MASTER", "SYNC_FLUSH", "SYNC_FLUSH"),
    "sync-sync-rmq": Row("SYNC_MASTER", "SYNC_FLUSH", "ASYNC_FLUSH"),
    "direct-10k": Row("SYNC_MASTER", "ASYNC_FLUSH", "ASYNC_FLUSH", size=10240),
    "proxy-10k": Row("SYNC_MASTER", "ASYNC_FLUSH", "ASYNC_FLUSH", size=10240, delay_us=0),
    "delay-10k": Row("SYNC_MASTER", "ASYNC_FLUSH", "ASYNC_FLUSH", size=10240, delay_us=DELAY_US),
}
BASE_ROWS = ["async-master", "sync-master"]
FLUSH_ROWS = ["single-sync", "sync-sync", "sync-sync-rmq"]
DELAY_ROWS = ["direct-10k", "proxy-10k", "delay-10k"]
DELAY_PRODUCERS = 64


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
    return subprocess.Popen(pinned(SERVER_CPU, [binary, "serve", "--broker-conf", conf]),
                            stdout=log, stderr=subprocess.STDOUT)


def wait_port(port, proc, limit=30):
    deadline = time.time() + limit
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a process exited with {proc.returncode} before it listened")
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


def bench(binary, port, producers, seconds=None, size=1024, messages=None):
    argv = [binary, "bench", "produce", "--addr", f"127.0.0.1:{port}", "--io", "tasks",
            "--connections", str(producers), "--producers-per-connection", "1",
            "--size", str(size), "--json", "--quiet"]
    argv += ["--messages", str(messages)] if messages else ["--duration", str(seconds)]
    # `bench produce` exits 1 when every send failed (the probe before the slave streams):
    # its summary is still the last line.
    out = subprocess.run(pinned(LOADGEN_CPU, argv), capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"bench produce exited {out.returncode}: {out.stderr.strip()}")
    return json.loads(lines[-1])


def start_proxy(proxy, target_port, delay_us):
    argv = pinned(LOADGEN_CPU, [proxy, "0", f"127.0.0.1:{target_port}", str(delay_us)])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if line[:1] != ["listening"]:
        raise SystemExit(f"the delay proxy did not start: {line}")
    return proc, int(line[1])


def wait_streaming(binary, port, row):
    """Until the slave streams, a SYNC_MASTER answers SLAVE_NOT_AVAILABLE: wait for OK."""
    deadline = time.time() + 30
    while True:
        probe = bench(binary, port, 1, 1)
        if probe["errors"] == 0 and probe["messages"] > 0:
            return
        if time.time() > deadline:
            raise SystemExit(f"{row}: no SEND_OK within 30 s: {probe['errors_by_code']}")


def stop(procs):
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def slave_store(scratch):
    """The slave's store: SLAVE_DIR when set (another disk; a tmpfs to see what sharing one
    disk costs the SYNC_FLUSH rows), else beside the master's."""
    base = os.environ.get("SLAVE_DIR")
    if not base:
        return f"{scratch}/s"
    return os.path.join(base, "ringmq-slave-" + os.path.basename(scratch))


def run_row(args, name, producers, scratch):
    row = ROWS[name]
    port, ha = free_port(), free_port()
    procs = []
    try:
        master = start(args.ringmq, node_conf(row.role, row.flush, port, ha, f"{scratch}/m", 0),
                       scratch, f"{name}-{producers}-master")
        procs.append(master)
        wait_port(port, master)
        slave = None
        if row.slave_flush is not None:
            master_ha = ha
            if row.delay_us is not None:
                proxy, master_ha = start_proxy(args.proxy, ha, row.delay_us)
                procs.append(proxy)
            sport = free_port()
            slave = start(args.ringmq, node_conf("SLAVE", row.slave_flush, sport, None,
                                                 slave_store(scratch), 1, master_ha=master_ha),
                          scratch, f"{name}-{producers}-slave")
            procs.append(slave)
            wait_port(sport, slave)
        wait_streaming(args.ringmq, port, name)
        nodes = [p for p in (master, slave) if p is not None]
        before = {p.pid: cpu_seconds(p.pid) for p in nodes}
        result = bench(args.ringmq, port, producers, args.seconds, size=row.size)
        after = {p.pid: cpu_seconds(p.pid) for p in nodes}
        messages = max(result["messages"], 1)
        result["master_cpu_us"] = (after[master.pid] - before[master.pid]) / messages * 1e6
        if slave is not None:
            result["slave_cpu_us"] = (after[slave.pid] - before[slave.pid]) / messages * 1e6
        return result
    finally:
        stop(procs)


def commit_log_max(binary, port):
    out = subprocess.run([binary, "admin", "-b", f"127.0.0.1:{port}", "--timeout", "2s",
                          "broker-status", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return int(json.loads(out.stdout)["table"]["commitLogMaxOffset"])


def catch_up(args, scratch):
    """An empty slave catching up a master holding args.catch_up GiB, and dd beside it."""
    port, ha, sport = free_port(), free_port(), free_port()
    total = int(args.catch_up * (1 << 30))
    procs = []
    try:
        master = start(args.ringmq, node_conf("ASYNC_MASTER", "ASYNC_FLUSH", port, ha,
                                              f"{scratch}/m", 0), scratch, "catch-up-master")
        procs.append(master)
        wait_port(port, master)
        fill = bench(args.ringmq, port, 8, size=CATCH_UP_MESSAGE,
                     messages=total // CATCH_UP_MESSAGE)
        end = commit_log_max(args.ringmq, port)
        print(f"catch-up: master filled to {end} bytes at {fill['mb_per_sec']:.0f} MB/s",
              file=sys.stderr)
        if end < total * 0.95:
            # Most often puts refused for disk space (diskSpaceWarningLevelRatio).
            raise SystemExit(f"catch-up: the master holds {end} of {total} bytes after the "
                             f"fill: {fill['errors']} sends failed {fill['errors_by_code']}")
        master_cpu = cpu_seconds(master.pid)
        began = time.time()
        slave = start(args.ringmq, node_conf("SLAVE", "ASYNC_FLUSH", sport, None, f"{scratch}/s",
                                             1, master_ha=ha), scratch, "catch-up-slave")
        procs.append(slave)
        # The slave streams before its remoting port listens: its CPU counts from its start.
        cpu_before = (master_cpu, 0.0)
        wait_port(sport, slave)
        first_seen = None
        while True:
            held = commit_log_max(args.ringmq, sport) or 0
            now = time.time()
            if held > 0 and first_seen is None:
                first_seen = (now, held)
            if held >= end:
                break
            if now - began > args.catch_up_limit:
                raise SystemExit(f"catch-up: the slave holds {held} of {end} after "
                                 f"{args.catch_up_limit} s")
            time.sleep(0.1)
        elapsed = now - began
        cpu_after = (cpu_seconds(master.pid), cpu_seconds(slave.pid))
    finally:
        stop(procs)
    streamed = elapsed if first_seen is None else now - first_seen[0]
    result = {
        "bytes": end, "seconds": elapsed, "mb_per_sec": end / elapsed / 1e6,
        "streaming_mb_per_sec": (end - (first_seen or (0, 0))[1]) / max(streamed, 1e-3) / 1e6,
        "master_cpu_s_per_gib": (cpu_after[0] - cpu_before[0]) / (end / (1 << 30)),
        "slave_cpu_s_per_gib": (cpu_after[1] - cpu_before[1]) / (end / (1 << 30)),
    }
    result["dd_mb_per_sec"] = dd_write(scratch, end)
    return result


def dd_write(scratch, size):
    """Sequential writes of `size` bytes in 1 MiB blocks, one fdatasync at the end."""
    target = os.path.join(scratch, "dd.out")
    blocks = max(size >> 20, 1)
    began = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={blocks}",
                    "conv=fdatasync"], check=True, capture_output=True)
    elapsed = time.time() - began
    os.remove(target)
    return (blocks << 20) / elapsed / 1e6


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ringmq", required=True)
    parser.add_argument("--proxy", help="examples/delay_proxy.rs's binary (--delay-rows)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--producers", default="16 64")
    parser.add_argument("--flush-rows", action="store_true")
    parser.add_argument("--delay-rows", action="store_true")
    parser.add_argument("--catch-up", type=float, default=0, help="GiB; 0 skips it")
    parser.add_argument("--catch-up-limit", type=float, default=120, help="seconds")
    parser.add_argument("--out", default="perf/results/replication.md")
    args = parser.parse_args()
    if args.delay_rows and not args.proxy:
        parser.error("--delay-rows needs --proxy")
    rows = BASE_ROWS + (FLUSH_ROWS if args.flush_rows else [])
    producers = [int(p) for p in args.producers.split()]
    plan = [(n, rows) for n in producers]
    if args.delay_rows:
        plan.append((DELAY_PRODUCERS, DELAY_ROWS))
    figures = {(row, n): [] for n, group in plan for row in group}
    scratch_root = os.environ.get("DIR", "/var/tmp")
    for r in range(args.rounds):
        for n, group in plan:
            order = group[r % len(group):] + group[:r % len(group)]
            for row in order:
                with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
                    try:
                        result = run_row(args, row, n, scratch)
                    finally:
                        shutil.rmtree(slave_store(scratch), ignore_errors=True)
                figures[(row, n)].append(result)
                print(f"round {r} {row} {n}: {result['msgs_per_sec']:.0f} msg/s "
                      f"p50 {result['p50_us']} us errors {result['errors']}", file=sys.stderr)
    caught = None
    if args.catch_up > 0:
        with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
            caught = catch_up(args, scratch)
        print(f"catch-up: {caught}", file=sys.stderr)
    report(figures, plan, caught, args)


def report(figures, plan, caught, args):
    lines = ["# Replication benchmark (perf/replication.sh)", "",
             f"{args.rounds} rounds of {args.seconds} s per row, interleaved; medians. "
             "One shard per node; master and slave on CPU 0, the load generator (and the "
             "delay proxy) on CPU 1; each producer waits for every acknowledgement. CPU per "
             "message: the process's utime+stime over the measured seconds / messages "
             "acknowledged.", "",
             "| row | producers | size | msg/s | p50 µs | p99 µs | errors | master CPU µs/msg | slave CPU µs/msg |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    med = {}
    for n, group in plan:
        for row in group:
            runs = figures[(row, n)]
            m = {key: median([run.get(key, float("nan")) for run in runs])
                 for key in ("msgs_per_sec", "p50_us", "p99_us", "errors", "master_cpu_us", "slave_cpu_us")}
            med[(row, n)] = m
            lines.append(f"| {row} | {n} | {ROWS[row].size} | {m['msgs_per_sec']:.0f} | {m['p50_us']:.0f} | "
                         f"{m['p99_us']:.0f} | {m['errors']:.0f} | {m['master_cpu_us']:.1f} | {m['slave_cpu_us']:.1f} |")
    lines += ["", "| ratio | producers | value | target |", "|---|---:|---:|---|"]
    lines += ratios(med, args)
    if caught is not None:
        lines += ["", f"Catch-up: an empty slave (ASYNC_FLUSH) copies a master holding "
                  f"{caught['bytes'] / (1 << 30):.2f} GiB (64 KiB messages, read from the page cache); "
                  "from the slave's start to its commitLogMaxOffset reaching the master's, polled "
                  "every 0.1 s. dd: the same bytes written sequentially in 1 MiB blocks, one "
                  "fdatasync at the end, in the same directory.", "",
                  "| catch-up | value | target |", "|---|---:|---|",
                  f"| MB/s, slave start to caught up | {caught['mb_per_sec']:.0f} | ≥ 200, or the disk's limit |",
                  f"| MB/s, first poll holding bytes to caught up | {caught['streaming_mb_per_sec']:.0f} | |",
                  f"| disk limit (dd, MB/s) | {caught['dd_mb_per_sec']:.0f} | |",
                  f"| master CPU s per GiB | {caught['master_cpu_s_per_gib']:.2f} | |",
                  f"| slave CPU s per GiB | {caught['slave_cpu_s_per_gib']:.2f} | |"]
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as out:
        out.write(text)
    with open(args.out.replace(".md", ".raw.jsonl"), "w") as out:
        for (row, n), runs in figures.items():
            for run in runs:
                out.write(json.dumps({"row": row, "producers": n, **run}) + "\n")
        if caught is not None:
            out.write(json.dumps({"row": "catch-up", **caught}) + "\n")
    print(text)


def ratios(med, args):
    lines = []
    for n in sorted({n for (_, n) in med}):
        if ("sync-master", n) in med:
            a, s = med[("async-master", n)], med[("sync-master", n)]
            target = {16: "≥ 0.70", 64: "≥ 0.85"}.get(n, "")
            lines.append(f"| SYNC_MASTER / ASYNC_MASTER throughput | {n} | {s['msgs_per_sec'] / a['msgs_per_sec']:.2f} | {target} |")
            lines.append(f"| SYNC_MASTER − ASYNC_MASTER p50 µs | {n} | {s['p50_us'] - a['p50_us']:.0f} | ≤ 150 |")
            lines.append(f"| CPU per replicated message, master / slave µs (sync-master) | {n} | {s['master_cpu_us']:.1f} / {s['slave_cpu_us']:.1f} | (reported) |")
        if ("sync-sync", n) in med:
            single = med[("single-sync", n)]
            for row, what in (("sync-sync", "slave SYNC_FLUSH"), ("sync-sync-rmq", "slave ASYNC_FLUSH")):
                value = med[(row, n)]["msgs_per_sec"] / single["msgs_per_sec"]
                lines.append(f"| SYNC_MASTER+SYNC_FLUSH ({what}) / single SYNC_FLUSH | {n} | {value:.2f} | ≥ 0.90 at 64 |")
    if ("delay-10k", DELAY_PRODUCERS) in med:
        direct = med[("direct-10k", DELAY_PRODUCERS)]["msgs_per_sec"]
        proxy = med[("proxy-10k", DELAY_PRODUCERS)]["msgs_per_sec"]
        delay = med[("delay-10k", DELAY_PRODUCERS)]["msgs_per_sec"]
        lines.append(f"| 2 ms one way / direct, 10 KiB, SYNC_MASTER | {DELAY_PRODUCERS} | {delay / direct:.2f} | ≥ 0.50 |")
        # Through the proxy both links are the same path but for the delay: the fairer ratio
        # when the proxy changes the direct path's figure (it buffers on the other CPU).
        lines.append(f"| 2 ms one way / proxy adding nothing | {DELAY_PRODUCERS} | {delay / proxy:.2f} | ≥ 0.50 |")
        lines.append(f"| proxy adding nothing / direct (is the proxy a bottleneck?) | {DELAY_PRODUCERS} | {proxy / direct:.2f} | not below 0.9 |")
    return lines


if __name__ == "__main__":
    main()
