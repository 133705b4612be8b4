#!/usr/bin/env python3
"""Clients that send requests and never read the answers, against a running node.

Opens CONNECTIONS connections to ADDR (each with a 4 KiB receive buffer), and for SECONDS
keeps writing pipelined requests on every one of them as fast as the sockets take them,
never reading. Samples the node's resident memory (VmRSS of PID) every 0.25 s and prints
one JSON line: the RSS before, the peak, the requests written, and how many connections the
node closed. A node with backpressure stops reading such connections, so their writes
block (the script keeps trying) and the RSS stays bounded; one without keeps answering
into memory.

Usage: perf/unread_clients.py ADDR PID [CONNECTIONS=200] [SECONDS=9] [CODE=21]
CODE 21 is GET_ALL_TOPIC_CONFIG, whose answer is the topic table (some KiB).
"""
import json
import selectors
import socket
import struct
import sys
import time


def frame(code, opaque):
    header = json.dumps({
        "code": code, "flag": 0, "language": "JAVA", "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON", "version": 317, "extFields": {},
    }).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    pid = int(sys.argv[2])
    connections = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 9.0
    code = int(sys.argv[5]) if len(sys.argv) > 5 else 21
    before = rss_kib(pid)
    selector = selectors.DefaultSelector()
    pending = {}
    for _ in range(connections):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.setblocking(False)
        pending[sock] = b""
        selector.register(sock, selectors.EVENT_WRITE)
    opaque = 0
    written = 0
    closed = 0
    peak = before
    started = time.monotonic()
    next_sample = started
    batch = b"".join(frame(code, i) for i in range(64))
    while time.monotonic() - started < seconds:
        for key, _ in selector.select(timeout=0.05):
            sock = key.fileobj
            if not pending[sock]:
                pending[sock] = batch
                opaque += 64
            try:
                sent = sock.send(pending[sock])
            except BlockingIOError:
                continue
            except OSError:
                selector.unregister(sock)
                closed += 1
                continue
            pending[sock] = pending[sock][sent:]
            if not pending[sock]:
                written += 64
        now = time.monotonic()
        if now >= next_sample:
            peak = max(peak, rss_kib(pid))
            next_sample = now + 0.25
    peak = max(peak, rss_kib(pid))
    print(json.dumps({
        "connections": connections, "seconds": seconds, "code": code,
        "rss_before_mib": round(before / 1024, 1), "rss_peak_mib": round(peak / 1024, 1),
        "requests_written": written, "connections_closed_by_node": closed,
    }))


if __name__ == "__main__":
    main()
