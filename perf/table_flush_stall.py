#!/usr/bin/env python3
"""How long the node's periodic table writes stall the requests of the shard that runs them
(issue 24 item 3). Against a running one-shard node at BROKER_ADDR:

1. creates topic TOPIC with 8 queues (UPDATE_AND_CREATE_TOPIC) and commits one offset for each
   of GROUPS groups x 8 queues, so consumerOffset.json holds GROUPS*8 entries;
2. for SECONDS seconds, a second process commits offsets round-robin over those entries in a
   closed loop (the table is dirty at every flush tick), while this process sends
   GET_MAX_OFFSET on its own connection in a closed loop and records each round trip.

Prints one JSON line: pings, p50/p99/p99.9/max in microseconds, and how many round trips took
over 1 ms and over 5 ms. The offset flush runs once a second on shard 0, so a flush that
waits for its fsyncs on the reactor shows as one slow ping per second.
Usage: perf/table_flush_stall.py BROKER_ADDR GROUPS SECONDS"""
import json, multiprocessing, socket, struct, sys, time

TOPIC = "StallTopic"

def frame(code, opaque, fields):
    header = json.dumps({"code": code, "language": "JAVA", "version": 479, "opaque": opaque,
                         "flag": 0, "extFields": fields, "serializeTypeCurrentRPC": "JSON"}).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header

def read_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the node closed the connection")
        out += chunk
    return bytes(out)

def call(sock, code, opaque, fields):
    sock.sendall(frame(code, opaque, fields))
    total, header_len = struct.unpack(">II", read_exact(sock, 8))
    header = json.loads(read_exact(sock, header_len & 0xFFFFFF))
    read_exact(sock, total - 4 - (header_len & 0xFFFFFF))
    return header

def connect(addr):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(30)  # a node that stops answering fails the run instead of hanging it
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock

def commit(sock, opaque, group, queue_id, offset):
    answer = call(sock, 15, opaque, {"consumerGroup": f"stall-group-{group}", "topic": TOPIC,
                                     "queueId": str(queue_id), "commitOffset": str(offset)})
    assert answer["code"] == 0, answer

def committer(addr, groups, seconds):
    sock = connect(addr)
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        commit(sock, n, n % groups, (n // groups) % 8, n)
        n += 1

def main():
    addr, groups, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sock = connect(addr)
    answer = call(sock, 17, 1, {"topic": TOPIC, "readQueueNums": "8", "writeQueueNums": "8",
                                "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                                "order": "false"})
    assert answer["code"] == 0, answer
    for group in range(groups):
        for queue_id in range(8):
            commit(sock, 2, group, queue_id, 1)
    time.sleep(1.5)  # the first flush of the filled table lands before the measurement
    load = multiprocessing.Process(target=committer, args=(addr, groups, seconds))
    load.start()
    rtts = []
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        began = time.perf_counter()
        answer = call(sock, 30, n, {"topic": TOPIC, "queueId": "0"})
        rtts.append(time.perf_counter() - began)
        assert answer["code"] == 0, answer
        n += 1
    load.join()
    rtts.sort()
    pick = lambda q: round(rtts[min(len(rtts) - 1, int(q * len(rtts)))] * 1e6)
    print(json.dumps({"pings": len(rtts), "p50_us": pick(0.5), "p99_us": pick(0.99),
                      "p999_us": pick(0.999), "max_us": round(rtts[-1] * 1e6),
                      "over_1ms": sum(r > 0.001 for r in rtts),
                      "over_5ms": sum(r > 0.005 for r in rtts)}))

main()
