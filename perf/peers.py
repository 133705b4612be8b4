#!/usr/bin/env python3
"""ringmq against Redis streams, NATS JetStream and the real Apache RocketMQ 5.5.0 broker,
interleaved in one run; called by perf/peers.sh.

Each round measures the machine first (fio: 4 KiB writes each followed by fdatasync, for
the fsync latency; 64 KiB writes each followed by fdatasync, for the durable bandwidth;
the loopback round trip of examples/loopback_pingpong.rs), then runs every row with the
servers taking turns (which goes first rotates with the round):

  durable     ringmq `serve --flush sync`   vs  redis-server --appendfsync always
                                            vs  nats-server, JetStream sync_interval: always
                                            vs  RocketMQ flushDiskType=SYNC_FLUSH
  page cache  ringmq `serve --flush async`  vs  redis-server --appendfsync everysec
                                            vs  nats-server, JetStream's default sync
                                                interval (an fsync every 2 minutes)
                                            vs  RocketMQ flushDiskType=ASYNC_FLUSH

for each client count: N connections, each with one client waiting for every
acknowledgement, 1 KiB messages (ringmq: `bench produce --io tasks`, SEND_MESSAGE_V2 to 8
queues of one topic; Redis: `redis-benchmark -c N`, XADD of one 1 KiB field to one stream;
NATS: `peer_load nats-produce` (perf/peer_load, async-nats: one thread, one event loop),
JetStream publishes to the one subject of a file-backed stream, each awaiting its PubAck;
RocketMQ: the same `ringmq bench produce` as for ringmq, which speaks remoting to both, to
the same 8-queue topic created first with mqadmin). Every server is fresh per round and
mode, runs on the first CPU (ringmq with one shard; nats-server's Go runtime sees that one
CPU; RocketMQ's name server and broker JVMs both pinned there), and the load generators on
the second. nats-server listens on 127.0.0.1 only (no monitoring, cluster or leaf port),
its store in the scratch directory, its stream created by `peer_load nats-setup` before
anything is measured. The RocketMQ JVMs are warmed up before the measured seconds: a fresh
broker first takes `--warmup` seconds (20) of the same load at 16 clients, whose figures
are dropped. Its CPU per message counts the name server and the broker processes.

With --consume, each round also measures the consume side, each server fresh and in its
page-cache mode: a backlog of `--consume-messages` (1,000,000) 1 KiB messages, then read
back from the start, with the server's CPU per message read and the reader's:
  ringmq, RocketMQ  written by `bench produce --mode async`, read by `ringmq bench consume`
                    (4 connections, 32 messages per pull);
  Redis             written by `peer_load redis-fill` (pipelined XADDs, the backlog spread
                    over 4 streams), read by `peer_load redis-consume` (a connection per
                    stream, XREAD COUNT 32 after the last id read);
  NATS              written by `peer_load nats-fill` (256 PubAcks outstanding), read by
                    `peer_load nats-consume`: one ephemeral pull consumer, ack policy none,
                    deliver all, through the client's message stream (200 messages per pull
                    request, the client's default, the next asked for at half).
Per row: throughput, p50/p99 latency, the server's CPU per message (utime+stime of the
whole process from /proc), ringmq's fdatasyncs per message (its metrics), the load
generator's CPU per message (rusage of the child), and for durable rows the physical limit
min(N / (fsync p50 + RTT), durable bandwidth / 1 KiB).

With --ringmq-base, a second ringmq binary (an earlier commit) runs every row as one more
server in the same rotation, and the report adds a table of the two ringmq builds side
by side: before and after measured in one run, interleaved.

Each round also measures what the first write to fresh memory costs (system time per
4 KiB page of a child that fills 512 MiB): on a VM that hands freed memory back to its
host, every new page-cache page costs that much, for every server alike.

The report checks issue 28's targets: ringmq's CPU per message at or below every peer's on
every row, consume rows included; its throughput at least 1.5x RocketMQ's and NATS's on
every row, at least 1.25x Redis's on the page-cache rows at 16 and 64 clients and 1.5x on
the durable rows; one client durable, p50 within the fsync p50 + 2 loopback round trips.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU = str(CPUS[0])
LOADGEN_CPU = str(CPUS[1]) if len(CPUS) > 1 else None
MESSAGE = 1024
# ringmq --flush, Redis appendfsync, RocketMQ flushDiskType, NATS JetStream sync_interval
# (None: the server's default).
MODES = {"durable": ("sync", "always", "SYNC_FLUSH", "always"),
         "page cache": ("async", "everysec", "ASYNC_FLUSH", None)}
PEER_NAMES = {"redis": "Redis", "nats": "NATS", "rocketmq": "RocketMQ"}


def pinned(cpu, argv):
    return ["taskset", "-c", cpu] + argv if cpu is not None else argv


def cpu_seconds(pid):
    """utime+stime of every thread of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_child(argv, timeout, may_fail=False):
    """Runs argv to the end; returns (stdout, CPU seconds the child used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 and not may_fail:
        sys.exit(f"{' '.join(argv[:6])} ... failed ({done.returncode}): {done.stderr[-2000:]}"
                 f"{done.stdout[-2000:]}")
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, used


def fio(directory, block, seconds):
    path = os.path.join(directory, "fio.peers")
    out, _ = run_child(
        ["fio", "--name=peers", f"--filename={path}", "--rw=write", f"--bs={block}",
         "--size=256M", "--fdatasync=1", "--ioengine=sync", "--time_based",
         f"--runtime={seconds}", "--output-format=json"],
        timeout=seconds + 120,
    )
    os.remove(path)
    job = json.loads(out)["jobs"][0]
    return job["sync"]["lat_ns"]["percentile"]["50.000000"] / 1000.0, job["write"]["bw_bytes"]


def fresh_page_us():
    """System time per 4 KiB page a child spends filling 512 MiB it just allocated."""
    size = 512 << 20
    _, used = run_child([sys.executable, "-c", f"b = bytearray(b'\\x01') * {size}"], timeout=300)
    return used * 1e6 / (size / 4096)


def loopback_rtt_us(pingpong):
    out, _ = run_child([pingpong, "2", SERVER_CPU, LOADGEN_CPU or "-"], timeout=60)
    return 1e6 / json.loads(out)["round_trips_per_sec"]


def wait_for(what, check, limit=30.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    sys.exit(f"{what} did not come up within {limit} s")


class Ringmq:
    def __init__(self, binary, scratch, flush):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="ringmq-peers-", dir=scratch)
        self.log = open(os.path.join(self.dir, "serve.log"), "w+")
        self.proc = subprocess.Popen(
            pinned(SERVER_CPU, [binary, "serve", "--dir", os.path.join(self.dir, "store"),
                                "--port", "0", "--namesrv-port", "0", "--metrics-port", "0",
                                "--shards", "1", "--flush", flush]),
            stderr=self.log, stdout=subprocess.DEVNULL)

        def started():
            self.log.seek(0)
            text = self.log.read()
            if self.proc.poll() is not None:
                sys.exit(f"ringmq serve exited: {text}")
            addr = metrics = None
            for line in text.splitlines():
                if line.startswith("ringmq: listening on "):
                    addr = line.split()[-1]
                if line.startswith("ringmq: metrics on "):
                    metrics = line.split()[-1]
            return (addr, metrics) if addr and metrics else None

        self.addr, self.metrics = wait_for("ringmq serve", started)

    def fsyncs(self):
        """(CommitLog fdatasyncs so far, seconds spent in them) from the node's metrics."""
        # The shard copies its store counters into the metrics once a second: wait that
        # long so the figure covers everything done so far (the node is idle meanwhile).
        time.sleep(1.1)
        with urllib.request.urlopen(self.metrics, timeout=10) as page:
            text = page.read().decode()
        total = lambda name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                                 if line.startswith(name + "{"))
        return total("ringmq_fsyncs_total"), total("ringmq_fsync_seconds_total")

    def row(self, clients, seconds):
        cpu0, fsync0 = cpu_seconds(self.proc.pid), self.fsyncs()
        out, loadgen_cpu = run_child(
            pinned(LOADGEN_CPU, [self.binary, "bench", "produce", "--addr", self.addr,
                                 "--connections", str(clients), "--producers-per-connection",
                                 "1", "--io", "tasks", "--mode", "sync", "--size", str(MESSAGE),
                                 "--duration", str(seconds), "--quiet", "--json"]),
            timeout=seconds + 120)
        cpu1, fsync1 = cpu_seconds(self.proc.pid), self.fsyncs()
        syncs, sync_seconds = fsync1[0] - fsync0[0], fsync1[1] - fsync0[1]
        summary = json.loads(out)
        messages = summary["messages"]
        if summary["errors"] or messages == 0:
            sys.exit(f"ringmq produce had errors: {summary}")
        return {
            "msgs_per_sec": summary["msgs_per_sec"],
            "p50_us": summary["p50_us"], "p99_us": summary["p99_us"],
            "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / messages,
            "fsyncs_per_msg": syncs / messages,
            # The node's own mean fdatasync, to set beside fio's (None under ASYNC_FLUSH,
            # where the flusher syncs a few times a second).
            "fsync_mean_us": sync_seconds * 1e6 / syncs if syncs and sync_seconds else None,
            "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / messages,
            "messages": messages,
        }

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class RocketMQ:
    """The real Apache RocketMQ 5.5.0 name server and broker (scripts/rocketmq.sh), pinned
    to the server CPU, with one 8-queue topic created by mqadmin."""

    def __init__(self, loadgen, scratch, flush, warmup, topic="BenchTopic"):
        self.loadgen = loadgen
        self.dir = tempfile.mkdtemp(prefix="rocketmq-peers-", dir=scratch)
        env = dict(os.environ, FLUSH=flush)
        done = subprocess.run(pinned(SERVER_CPU, ["bash", "scripts/rocketmq.sh", "start", self.dir]),
                              capture_output=True, text=True, timeout=300, env=env)
        if done.returncode != 0:
            self.stop()
            sys.exit(f"RocketMQ did not start: {done.stderr[-2000:]}")
        try:
            self._ready(loadgen, topic, warmup)
        except BaseException:
            self.stop()
            raise

    def _ready(self, loadgen, topic, warmup):
        """Creates the topic and warms the started broker up."""
        values = dict(line.split("=", 1) for line in open(os.path.join(self.dir, "env")).read().split())
        self.addr, self.namesrv = values["BROKER_ADDR"], values["NAMESRV_ADDR"]
        self.pids = [int(values["NAMESRV_PID"]), int(values["BROKER_PID"])]
        classpath = subprocess.run(["bash", "scripts/rocketmq.sh", "classpath"], check=True,
                                   capture_output=True, text=True).stdout.strip()
        created = subprocess.run(
            ["java", "-Xmx256m", f"-Duser.home={self.dir}/home", "-cp", classpath,
             "org.apache.rocketmq.tools.command.MQAdminStartup", "updateTopic", "-n", self.namesrv,
             "-c", "DefaultCluster", "-t", topic, "-r", "8", "-w", "8"],
            capture_output=True, text=True, timeout=120)
        if created.returncode != 0 or "success" not in created.stdout:
            sys.exit(f"mqadmin updateTopic failed: {created.stdout[-1000:]} {created.stderr[-1000:]}")
        if warmup:
            # Unmeasured: RocketMQ's flow control (SYSTEM_BUSY) may refuse a few sends of
            # a broker still warming up; the load still did its job.
            produce(self.loadgen, self.addr, 16, warmup, busy_ok=True)

    def cpu(self):
        return sum(cpu_seconds(pid) for pid in self.pids)

    def row(self, clients, seconds):
        # SYSTEM_BUSY answers are RocketMQ's own flow control: counted in the row
        # (`refused`), its throughput counting only the stored messages.
        return measured_produce(self.loadgen, self.addr, clients, seconds, self.cpu,
                                busy_ok=True)

    def stop(self):
        subprocess.run(["bash", "scripts/rocketmq.sh", "stop", self.dir], capture_output=True,
                       timeout=180)
        shutil.rmtree(self.dir, ignore_errors=True)


def produce(loadgen, addr, clients, seconds, mode="sync", messages=None, busy_ok=False):
    """`ringmq bench produce` against `addr`; returns (summary, load generator CPU seconds).
    With `busy_ok`, SYSTEM_BUSY answers (code 2: RocketMQ's flow control) are tolerated and
    the summary's `messages` counts the stored ones."""
    limit = ["--messages", str(messages)] if messages else ["--duration", str(seconds)]
    # 4 sends in flight per connection: RocketMQ answers SYSTEM_BUSY (2) to a deeper queue.
    limit += ["--inflight", "4"] if mode == "async" else []
    out, cpu = run_child(
        pinned(LOADGEN_CPU, [loadgen, "bench", "produce", "--addr", addr,
                             "--connections", str(clients), "--producers-per-connection",
                             "1", "--io", "tasks", "--mode", mode, "--size", str(MESSAGE),
                             "--quiet", "--json"] + limit),
        timeout=(seconds or 600) + 600, may_fail=busy_ok)
    summary = json.loads(out)
    if busy_ok and set(summary["errors_by_code"]) <= {"2"}:
        return summary, cpu
    if summary["errors"] or summary["messages"] == 0:
        sys.exit(f"bench produce against {addr} had errors: {summary}")
    return summary, cpu


def measured_produce(loadgen, addr, clients, seconds, server_cpu, busy_ok=False):
    cpu0 = server_cpu()
    summary, loadgen_cpu = produce(loadgen, addr, clients, seconds, busy_ok=busy_ok)
    cpu1 = server_cpu()
    messages = summary["messages"]
    return {
        "msgs_per_sec": summary["msgs_per_sec"],
        "p50_us": summary["p50_us"], "p99_us": summary["p99_us"],
        "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / messages,
        "fsyncs_per_msg": None,
        "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / messages,
        "messages": messages,
        "refused": summary.get("errors", 0),
    }


def measured_consume(loadgen, addr, messages, server_cpu):
    """Writes a backlog of `messages`, then reads it back with the pull loop."""
    stored = 0
    for _ in range(100):
        if stored >= messages:
            break
        summary, _ = produce(loadgen, addr, 16, None, mode="async", messages=messages - stored,
                             busy_ok=True)
        stored += summary["messages"]
    if stored < messages:
        sys.exit(f"could not write a backlog of {messages} to {addr}: {stored} stored")
    cpu0 = server_cpu()
    out, loadgen_cpu = run_child(
        pinned(LOADGEN_CPU, [loadgen, "bench", "consume", "--addr", addr, "--connections", "4",
                             "--from-offset", "earliest", "--messages", str(messages),
                             "--duration", "900", "--quiet", "--json"]), timeout=1200)
    cpu1 = server_cpu()
    summary = json.loads(out)
    read = summary["messages"]
    if read < messages:
        sys.exit(f"bench consume against {addr} read {read} of {messages}: {summary}")
    return {"msgs_per_sec": summary["msgs_per_sec"],
            "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / read,
            "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / read, "messages": read}


class Redis:
    PAYLOAD = "x" * MESSAGE

    def __init__(self, scratch, appendfsync):
        self.dir = tempfile.mkdtemp(prefix="redis-peers-", dir=scratch)
        self.port = free_port()
        self.proc = subprocess.Popen(
            pinned(SERVER_CPU, ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "yes", "--appendfsync",
                                appendfsync, "--dir", self.dir, "--daemonize", "no",
                                "--logfile", os.path.join(self.dir, "redis.log")]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def pong():
            if self.proc.poll() is not None:
                sys.exit("redis-server exited")
            done = subprocess.run(["redis-cli", "-p", str(self.port), "ping"],
                                  capture_output=True, text=True)
            return done.stdout.strip() == "PONG"

        wait_for("redis-server", pong)

    def bench(self, clients, count, stream):
        out, cpu = run_child(
            pinned(LOADGEN_CPU, ["redis-benchmark", "-p", str(self.port), "-c", str(clients),
                                 "-n", str(count), "--csv", "XADD", stream, "*", "f",
                                 self.PAYLOAD]),
            timeout=600)
        values = out.strip().splitlines()[-1].split('","')
        values = [v.strip('"') for v in values]
        return float(values[1]), float(values[4]) * 1000, float(values[6]) * 1000, cpu

    def row(self, clients, seconds, stream):
        # redis-benchmark counts requests, not seconds: a short run sets the count.
        rps, _, _, _ = self.bench(clients, max(1000, 200 * clients), stream + "-probe")
        count = max(1000, int(rps * seconds))
        cpu0 = cpu_seconds(self.proc.pid)
        rps, p50, p99, loadgen_cpu = self.bench(clients, count, stream)
        cpu1 = cpu_seconds(self.proc.pid)
        subprocess.run(["redis-cli", "-p", str(self.port), "flushall"], capture_output=True)
        return {
            "msgs_per_sec": rps, "p50_us": p50, "p99_us": p99,
            "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / count,
            "fsyncs_per_msg": None,
            "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / count,
            "messages": count,
        }

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def consume(self, peer_load, messages):
        """A backlog of `messages` over 4 streams, read back by one connection per stream."""
        target = ["--port", str(self.port), "--key", "backlog", "--streams", "4"]

        def settled():
            # An AOF rewrite the fill set off runs in a forked child on the server CPU:
            # let it finish before the measured read.
            done = subprocess.run(["redis-cli", "-p", str(self.port), "info", "persistence"],
                                  capture_output=True, text=True)
            return "aof_rewrite_in_progress:0" in done.stdout and \
                "aof_rewrite_scheduled:0" in done.stdout

        return measured_peer_consume(
            [peer_load, "redis-fill", "--messages", str(messages), "--size", str(MESSAGE)] + target,
            [peer_load, "redis-consume", "--messages", str(messages), "--count", "32"] + target,
            messages, self.cpu, settled)

    def stop(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
                       capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Nats:
    """nats-server with JetStream, pinned to the server CPU, listening on 127.0.0.1 only
    (no monitoring, cluster or leaf port), its store in a scratch directory; one
    file-backed stream of one subject, created before anything is measured."""

    def __init__(self, binary, peer_load, scratch, sync_interval):
        self.peer_load = peer_load
        self.dir = tempfile.mkdtemp(prefix="nats-peers-", dir=scratch)
        port = free_port()
        self.url = f"127.0.0.1:{port}"
        config = [f'listen: "127.0.0.1:{port}"', 'server_name: "peers"', "jetstream {",
                  f'  store_dir: "{os.path.join(self.dir, "store")}"']
        if sync_interval:
            config.append(f"  sync_interval: {sync_interval}")
        config.append("}")
        path = os.path.join(self.dir, "nats.conf")
        with open(path, "w") as out:
            out.write("\n".join(config) + "\n")
        log = os.path.join(self.dir, "nats.log")
        self.proc = subprocess.Popen(pinned(SERVER_CPU, [binary, "-c", path, "-l", log]),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ready():
            if self.proc.poll() is not None:
                sys.exit(f"nats-server exited: {open(log).read()[-2000:] if os.path.exists(log) else ''}")
            return os.path.exists(log) and "Server is ready" in open(log).read()

        try:
            wait_for("nats-server", ready)
            run_child([peer_load, "nats-setup", "--url", self.url], timeout=60)
        except BaseException:
            self.stop()  # sys.exit included: leave no server behind
            raise

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def row(self, clients, seconds):
        cpu0 = self.cpu()
        out, loadgen_cpu = run_child(
            pinned(LOADGEN_CPU, [self.peer_load, "nats-produce", "--url", self.url, "--clients",
                                 str(clients), "--seconds", str(seconds), "--size", str(MESSAGE)]),
            timeout=seconds + 120)
        cpu1 = self.cpu()
        summary = json.loads(out)
        messages = summary["messages"]
        if summary["errors"] or messages == 0:
            sys.exit(f"nats-produce had errors: {summary}")
        return {
            "msgs_per_sec": summary["msgs_per_sec"],
            "p50_us": summary["p50_us"], "p99_us": summary["p99_us"],
            "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / messages,
            "fsyncs_per_msg": None,
            "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / messages,
            "messages": messages,
        }

    def consume(self, peer_load, messages):
        """A backlog of `messages`, read back by one ephemeral pull consumer."""
        return measured_peer_consume(
            [peer_load, "nats-fill", "--url", self.url, "--messages", str(messages),
             "--size", str(MESSAGE), "--inflight", "256"],
            [peer_load, "nats-consume", "--url", self.url, "--messages", str(messages),
             "--batch", "200"],
            messages, self.cpu)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measured_peer_consume(fill, read, messages, server_cpu, settled=None):
    """Runs `fill` (a peer_load command writing a backlog of `messages`), waits for
    `settled`, then measures `read` (one reading it all back)."""
    out, _ = run_child(pinned(LOADGEN_CPU, fill), timeout=1800)
    written = json.loads(out)
    if written["errors"] or written["messages"] < messages:
        sys.exit(f"{fill[1]} wrote {written['messages']} of {messages}: {written}")
    if settled:
        wait_for("the server settling after the fill", settled, limit=600)
    cpu0 = server_cpu()
    out, loadgen_cpu = run_child(pinned(LOADGEN_CPU, read), timeout=1800)
    cpu1 = server_cpu()
    summary = json.loads(out)
    got = summary["messages"]
    if got < messages or summary["bytes"] < got * MESSAGE:
        sys.exit(f"{read[1]} read {got} of {messages}: {summary}")
    return {"msgs_per_sec": summary["msgs_per_sec"],
            "server_cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / got,
            "loadgen_cpu_us_per_msg": loadgen_cpu * 1e6 / got, "messages": got}


def machine_state(scratch, nats_server=None):
    model = "?"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/loadavg") as load:
        loadavg = " ".join(load.read().split()[:3])
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    fs = subprocess.run(["df", "-T", scratch], capture_output=True, text=True).stdout.splitlines()
    nats = "?"
    if nats_server:
        # "nats-server: v2.15.1"
        nats = subprocess.run([nats_server, "--version"], capture_output=True,
                              text=True).stdout.split()[-1].lstrip("v")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "kernel": platform.release(), "cpu": model, "cpus": len(CPUS),
        "loadavg_before": loadavg, "redis": redis.split()[2] if redis else "?", "nats": nats,
        "scratch": fs[-1] if fs else scratch,
        "placement": f"servers on CPU {SERVER_CPU}, load generators on CPU {LOADGEN_CPU or 'any'}",
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio(ours, theirs):
    return ours / theirs if ours and theirs else None


def cpu_check(what, ours, theirs):
    """ringmq's server CPU per message at or below each peer's in `theirs` ({server: µs})."""
    met = ours is not None and bool(theirs) and all(
        value is not None and ours <= value for value in theirs.values())
    figure = f"ringmq {fmt(ours, 1)} vs " + ", ".join(
        f"{PEER_NAMES[name]} {fmt(value, 1)}" for name, value in theirs.items()) + " µs"
    return (f"{what}: ringmq CPU per message at or below every peer's", met, figure)


def throughput_check(what, ours, theirs, factor):
    """ringmq's msgs/s at least `factor` times each peer's in `theirs` ({server: msgs/s})."""
    ratios = {name: ratio(ours, value) for name, value in theirs.items()}
    met = bool(ratios) and all(r is not None and r >= factor for r in ratios.values())
    names = " and ".join(PEER_NAMES[name] for name in theirs)
    figure = ", ".join(f"{fmt(r, 2)}x {PEER_NAMES[name]}" for name, r in ratios.items())
    return (f"{what}: ringmq at least {factor}x {names}", met, figure)


def targets(rows, consume_rows, args, fsync_p50, rtt):
    """Issue 28's targets, each (what, met, figure)."""
    pick = lambda server, load, clients, key: median(
        [r[key] for r in rows if (r["load"], r["clients"], r["server"]) == (load, clients, server)])
    present = {r["server"] for r in rows}
    peers = [p for p in ("redis", "nats", "rocketmq") if p in present]
    checks = []
    for load in MODES:
        for clients in args.clients:
            row = f"{load}, {clients} client{'' if clients == 1 else 's'}"
            checks.append(cpu_check(row, pick("ringmq", load, clients, "server_cpu_us_per_msg"),
                                    {p: pick(p, load, clients, "server_cpu_us_per_msg") for p in peers}))
            ours = pick("ringmq", load, clients, "msgs_per_sec")
            brokers = {p: pick(p, load, clients, "msgs_per_sec") for p in ("rocketmq", "nats") if p in peers}
            if brokers:
                checks.append(throughput_check(row, ours, brokers, 1.5))
            factor = 1.5 if load == "durable" else 1.25 if clients in (16, 64) else None
            if factor and "redis" in peers:
                checks.append(throughput_check(row, ours, {"redis": pick("redis", load, clients, "msgs_per_sec")},
                                               factor))
            if load == "durable" and clients == 1:
                p50 = pick("ringmq", load, clients, "p50_us")
                bound = fsync_p50 + 2 * rtt if fsync_p50 and rtt else None
                checks.append(("durable, 1 client: p50 within fsync p50 + 2 round trips",
                               p50 is not None and bound is not None and p50 <= bound,
                               f"{fmt(p50)} vs {fmt(bound)} µs"))
    if consume_rows:
        pick = lambda server, key: median([r[key] for r in consume_rows if r["server"] == server])
        readers = [p for p in ("redis", "nats", "rocketmq") if any(r["server"] == p for r in consume_rows)]
        checks.append(cpu_check("consume backlog", pick("ringmq", "server_cpu_us_per_msg"),
                                {p: pick(p, "server_cpu_us_per_msg") for p in readers}))
        brokers = {p: pick(p, "msgs_per_sec") for p in ("rocketmq", "nats") if p in readers}
        if brokers:
            checks.append(throughput_check("consume backlog", pick("ringmq", "msgs_per_sec"), brokers, 1.5))
    return checks


def peer_rows(peer, client_counts, pick, both, loadgen):
    """The rows of a "ringmq against `peer`" table: throughput, their ratio, latency and
    CPU per message of both, and with `loadgen` the load generators' CPU per message."""
    lines = []
    for load in MODES:
        for clients in client_counts:
            value = lambda server, key: pick(server, load, clients, key)
            ours, theirs = value("ringmq", "msgs_per_sec"), value(peer, "msgs_per_sec")
            line = (f"| {load} | {clients} | {fmt(ours)} | {fmt(theirs)} | "
                    f"{fmt(ratio(ours, theirs), 2)} | "
                    f"{both('ringmq', load, clients)} | {both(peer, load, clients)} | "
                    f"{fmt(value('ringmq', 'server_cpu_us_per_msg'), 1)} | "
                    f"{fmt(value(peer, 'server_cpu_us_per_msg'), 1)} |")
            if loadgen:
                line += (f" {fmt(value('ringmq', 'loadgen_cpu_us_per_msg'), 1)} / "
                         f"{fmt(value(peer, 'loadgen_cpu_us_per_msg'), 1)} |")
            lines.append(line)
    return lines


def report(rows, machine_rounds, state, args, path, consume_rows=()):
    fsync_p50 = median([m["fsync_p50_us"] for m in machine_rounds])
    rtt = median([m["rtt_us"] for m in machine_rounds])
    bandwidth = median([m["durable_bw_bytes"] for m in machine_rounds])
    present = {r["server"] for r in rows}
    pick = lambda server, load, clients, key: median(
        [r[key] for r in rows if (r["load"], r["clients"], r["server"]) == (load, clients, server)])
    both = lambda server, load, clients: (f"{fmt(pick(server, load, clients, 'p50_us'))} / "
                                          f"{fmt(pick(server, load, clients, 'p99_us'))}")
    nats = f", NATS server {state['nats']}" if "nats" in present else ""
    lines = [
        "# ringmq against its peers: Redis streams, NATS JetStream and Apache RocketMQ 5.5.0 "
        "(`perf/peers.sh`)", "",
        f"{state['date']}; {state['cpus']} CPUs ({state['cpu']}), kernel {state['kernel']}, "
        f"Redis {state['redis']}{nats}; {state['placement']}; load average before the run "
        f"{state['loadavg_before']}; scratch `{state['scratch']}`.", "",
        f"{args.rounds} rounds of {args.seconds} s per row, interleaved (the servers take "
        "turns row by row, and which goes first rotates with the round); medians over the "
        "rounds. 1 KiB messages; N connections, each "
        "with one client waiting for every acknowledgement. ringmq: one shard, `bench produce "
        "--io tasks` (one thread, one event loop); Redis: `redis-benchmark -c N` XADD.", "",
        f"Measured in the same run: fio fdatasync p50 {fmt(fsync_p50)} µs (4 KiB writes), "
        f"durable bandwidth {fmt(bandwidth / 1e6 if bandwidth else None, 1)} MB/s (64 KiB writes "
        f"each followed by fdatasync), loopback round trip {fmt(rtt, 1)} µs "
        "(`examples/loopback_pingpong.rs`), first write to fresh memory "
        f"{fmt(median([m.get('fresh_page_us') for m in machine_rounds]), 1)} µs of system time per "
        "4 KiB page (each new page-cache page costs the writing server that much).", "",
        "| load | N | ringmq msgs/s | Redis msgs/s | ringmq/Redis | ringmq p50 / p99 µs | "
        "Redis p50 / p99 µs | ringmq CPU µs/msg | Redis CPU µs/msg | ringmq fsyncs/msg | "
        "ringmq fsync mean µs | physical limit msgs/s | ringmq % of limit | "
        "loadgen CPU µs/msg (ringmq / Redis) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for load in MODES:
        for clients in args.clients:
            ours, theirs = pick("ringmq", load, clients, "msgs_per_sec"), pick("redis", load, clients, "msgs_per_sec")
            limit = pick("ringmq", load, clients, "physical_limit")
            share = 100 * ours / limit if ours and limit else None
            lines.append(
                f"| {load} | {clients} | {fmt(ours)} | {fmt(theirs)} | {fmt(ratio(ours, theirs), 2)} | "
                f"{both('ringmq', load, clients)} | {both('redis', load, clients)} | "
                f"{fmt(pick('ringmq', load, clients, 'server_cpu_us_per_msg'), 1)} | "
                f"{fmt(pick('redis', load, clients, 'server_cpu_us_per_msg'), 1)} | "
                f"{fmt(pick('ringmq', load, clients, 'fsyncs_per_msg'), 3)} | "
                f"{fmt(pick('ringmq', load, clients, 'fsync_mean_us') if load == 'durable' else None)} | "
                f"{fmt(limit)} | {fmt(share)} | "
                f"{fmt(pick('ringmq', load, clients, 'loadgen_cpu_us_per_msg'), 1)} / "
                f"{fmt(pick('redis', load, clients, 'loadgen_cpu_us_per_msg'), 1)} |")
    if "nats" in present:
        lines += ["", f"## ringmq against NATS JetStream {state['nats']}, same run", "",
                  "NATS: nats-server on the server CPU, JetStream with one file-backed stream of "
                  "one subject; durable rows with `sync_interval: always` (an fsync per stored "
                  "message), page-cache rows with the default sync interval (2 minutes). Load: "
                  "`perf/peer_load nats-produce` (async-nats, one thread, one event loop), N "
                  "connections, each awaiting the PubAck of every JetStream publish.", "",
                  "| load | N | ringmq msgs/s | NATS msgs/s | ringmq/NATS | "
                  "ringmq p50 / p99 µs | NATS p50 / p99 µs | ringmq CPU µs/msg | "
                  "NATS CPU µs/msg | loadgen CPU µs/msg (ringmq / NATS) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += peer_rows("nats", args.clients, pick, both, loadgen=True)
    if "rocketmq" in present:
        lines += ["", "## ringmq against Apache RocketMQ 5.5.0, same run", "",
                  "Same load generator for both (`ringmq bench produce`, remoting); RocketMQ's "
                  "name server and broker JVMs on the server CPU, warmed up with "
                  f"{args.warmup} s of unmeasured load per fresh broker; its CPU per message counts "
                  "both processes.", "",
                  "| load | N | ringmq msgs/s | RocketMQ msgs/s | ringmq/RocketMQ | "
                  "ringmq p50 / p99 µs | RocketMQ p50 / p99 µs | ringmq CPU µs/msg | "
                  "RocketMQ CPU µs/msg |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += peer_rows("rocketmq", args.clients, pick, both, loadgen=False)
    if consume_rows:
        readers = {
            "ringmq": "`bench produce --mode async --inflight 4` (16 connections); `bench consume`, "
                      "4 connections, 32 per pull",
            "rocketmq": "the same as ringmq's",
            "redis": "`peer_load redis-fill` (pipelined XADDs over 4 streams); `peer_load "
                     "redis-consume`, a connection per stream, XREAD COUNT 32 after the last id",
            "nats": "`peer_load nats-fill` (256 PubAcks outstanding); `peer_load nats-consume`, "
                    "one ephemeral pull consumer, ack policy none, 200 per pull request",
        }
        lines += ["", f"## Reading a backlog of {args.consume_messages:,} messages, same run", "",
                  "Each server fresh, in its page-cache mode (ringmq and RocketMQ ASYNC_FLUSH, Redis "
                  "appendfsync everysec, NATS the default sync interval): the backlog written, then "
                  "read back from the start; only the read is measured.", "",
                  "| server | msgs/s | ringmq/server | server CPU µs/msg | loadgen CPU µs/msg | "
                  "written by; read by |", "|---|---:|---:|---:|---:|---|"]
        consume_pick = lambda server, key: median([r[key] for r in consume_rows if r["server"] == server])
        ours = consume_pick("ringmq", "msgs_per_sec")
        for server in [s for s in ("ringmq", "redis", "nats", "rocketmq")
                       if any(r["server"] == s for r in consume_rows)]:
            theirs = consume_pick(server, "msgs_per_sec")
            lines.append(f"| {server} | {fmt(theirs)} | "
                         f"{fmt(ratio(ours, theirs), 2) if server != 'ringmq' else '-'} | "
                         f"{fmt(consume_pick(server, 'server_cpu_us_per_msg'), 2)} | "
                         f"{fmt(consume_pick(server, 'loadgen_cpu_us_per_msg'), 2)} | {readers[server]} |")
    if "ringmq-base" in present:
        lines += ["", f"## This ringmq against the earlier one ({args.base_label}), same run", "",
                  "| load | N | earlier msgs/s | this msgs/s | this/earlier | earlier CPU µs/msg | "
                  "this CPU µs/msg | earlier p50 µs | this p50 µs |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for load in MODES:
            for clients in args.clients:
                base, head = pick("ringmq-base", load, clients, "msgs_per_sec"), pick("ringmq", load, clients, "msgs_per_sec")
                lines.append(
                    f"| {load} | {clients} | {fmt(base)} | {fmt(head)} | {fmt(ratio(head, base), 2)} | "
                    f"{fmt(pick('ringmq-base', load, clients, 'server_cpu_us_per_msg'), 1)} | "
                    f"{fmt(pick('ringmq', load, clients, 'server_cpu_us_per_msg'), 1)} | "
                    f"{fmt(pick('ringmq-base', load, clients, 'p50_us'))} | "
                    f"{fmt(pick('ringmq', load, clients, 'p50_us'))} |")
    lines += ["", "## Targets (issue 28)", "",
              "Node CPU per message at or below every peer's on every row, consume included; "
              "throughput at least 1.5x RocketMQ and NATS on every row, at least 1.25x Redis on "
              "the page-cache rows at 16 and 64 clients and 1.5x Redis on the durable rows; one "
              "client durable, p50 within the fsync p50 + 2 loopback round trips. Peers left out "
              "of the run are left out of the checks.", "",
              "| target | result | figure |", "|---|---|---:|"]
    for what, met, figure in targets(rows, consume_rows, args, fsync_p50, rtt):
        lines.append(f"| {what} | {'met' if met else 'missed'} | {figure} |")
    lines += ["", "Rerun: `perf/peers.sh` (env ROUNDS, SECONDS_PER_RUN, CLIENTS, DIR, NO_NATS, "
              f"NO_ROCKETMQ, CONSUME, OUT); raw rows in `{os.path.join(args.out, 'peers.raw.jsonl')}`. "
              "Run nothing else meanwhile."]
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ringmq", required=True)
    parser.add_argument("--ringmq-base", help="an earlier ringmq binary to run beside --ringmq")
    parser.add_argument("--base-label", default="earlier build")
    parser.add_argument("--pingpong", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", default="1 16 64")
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--out", default="perf/results")
    parser.add_argument("--no-rocketmq", action="store_true", help="leave RocketMQ out")
    parser.add_argument("--no-nats", action="store_true", help="leave NATS JetStream out")
    parser.add_argument("--nats-server", help="the nats-server binary (required unless --no-nats)")
    parser.add_argument("--peer-load", help="perf/peer_load's binary (NATS load, Redis consume)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="seconds of unmeasured load a fresh RocketMQ broker takes first")
    parser.add_argument("--consume", action="store_true",
                        help="also measure reading a backlog (every server)")
    parser.add_argument("--consume-messages", type=int, default=1_000_000)
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split()]
    if not args.no_nats and not args.nats_server:
        parser.error("--nats-server is required unless --no-nats")
    if (args.consume or not args.no_nats) and not args.peer_load:
        parser.error("--peer-load is required for NATS and for the consume rows")
    os.makedirs(args.out, exist_ok=True)
    state = machine_state(args.dir, None if args.no_nats else args.nats_server)
    rows, machine_rounds, consume_rows = [], [], []
    raw = open(os.path.join(args.out, "peers.raw.jsonl"), "w")
    for round_number in range(1, args.rounds + 1):
        fsync_p50, _ = fio(args.dir, "4k", 3)
        _, bandwidth = fio(args.dir, "64k", 3)
        rtt = loopback_rtt_us(args.pingpong)
        fresh = fresh_page_us()
        machine = {"round": round_number, "fsync_p50_us": fsync_p50,
                   "durable_bw_bytes": bandwidth, "rtt_us": rtt, "fresh_page_us": fresh}
        machine_rounds.append(machine)
        raw.write(json.dumps({"machine": machine}) + "\n")
        print(f"round {round_number}: fsync p50 {fsync_p50:.0f} us, durable "
              f"{bandwidth / 1e6:.0f} MB/s, rtt {rtt:.1f} us, fresh page {fresh:.1f} us",
              file=sys.stderr)
        for load, (flush, appendfsync, rocketmq_flush, nats_sync) in MODES.items():
            # Started inside the `try`, so a server that fails to start (or an exit on
            # the way) still stops the ones started before it.
            servers = {}
            try:
                servers["ringmq"] = Ringmq(args.ringmq, args.dir, flush)
                if args.ringmq_base:
                    servers["ringmq-base"] = Ringmq(args.ringmq_base, args.dir, flush)
                if not args.no_rocketmq:
                    servers["rocketmq"] = RocketMQ(args.ringmq, args.dir, rocketmq_flush,
                                                   args.warmup)
                if not args.no_nats:
                    servers["nats"] = Nats(args.nats_server, args.peer_load, args.dir, nats_sync)
                servers["redis"] = Redis(args.dir, appendfsync)
                names = list(servers)
                for clients in args.clients:
                    # Which server goes first rotates with the round.
                    start = (round_number - 1) % len(names)
                    order = names[start:] + names[:start]
                    for server in order:
                        if server == "redis":
                            row = servers[server].row(clients, args.seconds,
                                                      f"peers-{round_number}-{clients}")
                        else:
                            row = servers[server].row(clients, args.seconds)
                        limit = None
                        if load == "durable":
                            limit = min(clients * 1e6 / (fsync_p50 + rtt), bandwidth / MESSAGE)
                        row.update({"round": round_number, "load": load, "clients": clients,
                                    "server": server, "physical_limit": limit})
                        rows.append(row)
                        raw.write(json.dumps(row) + "\n")
                        raw.flush()
                        print(f"  {load} {clients} {server}: {row['msgs_per_sec']:.0f} msgs/s, "
                              f"p50 {row['p50_us']:.0f} us, CPU {row['server_cpu_us_per_msg']:.1f} us/msg",
                              file=sys.stderr)
            finally:
                for server in servers.values():
                    server.stop()
        if args.consume:
            consumers = {"ringmq": lambda: Ringmq(args.ringmq, args.dir, "async")}
            if not args.no_rocketmq:
                consumers["rocketmq"] = lambda: RocketMQ(args.ringmq, args.dir, "ASYNC_FLUSH", 0)
            if not args.no_nats:
                consumers["nats"] = lambda: Nats(args.nats_server, args.peer_load, args.dir, None)
            consumers["redis"] = lambda: Redis(args.dir, "everysec")
            names = list(consumers)
            start = (round_number - 1) % len(names)
            for server in names[start:] + names[:start]:
                instance = consumers[server]()
                try:
                    if server in ("redis", "nats"):
                        row = instance.consume(args.peer_load, args.consume_messages)
                    else:
                        cpu = instance.cpu if server == "rocketmq" else (lambda: cpu_seconds(instance.proc.pid))
                        row = measured_consume(args.ringmq, instance.addr, args.consume_messages, cpu)
                finally:
                    instance.stop()
                row.update({"round": round_number, "load": "consume backlog", "server": server})
                consume_rows.append(row)
                raw.write(json.dumps(row) + "\n")
                raw.flush()
                print(f"  consume {server}: {row['msgs_per_sec']:.0f} msgs/s, "
                      f"CPU {row['server_cpu_us_per_msg']:.1f} us/msg", file=sys.stderr)
    raw.close()
    report(rows, machine_rounds, state, args, os.path.join(args.out, "peers.md"), consume_rows)


if __name__ == "__main__":
    main()
