#!/usr/bin/env python3
"""Parks N POP requests for "any queue" (queueId -1) on a ringmq node and reports the node's
CPU over a window while they are parked, and after the clients close.
Usage: perf/parked_pops_cpu.py BROKER_ADDR PID TOPIC N WINDOW_S  (issue 23 item 16; the topic
should have queues on every shard, e.g. `ringmq admin topic-create -t T -r 8 -w 8`)."""
import json, socket, struct, sys, time

def frame(code, opaque, fields):
    header = json.dumps({"code": code, "language": "JAVA", "version": 479, "opaque": opaque,
                         "flag": 0, "extFields": fields, "serializeTypeCurrentRPC": "JSON"}).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header

def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime

def main():
    addr, pid, topic, n, window = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    host, port = addr.rsplit(":", 1)
    hz = 100
    t0, c0 = time.time(), cpu_ticks(pid)
    time.sleep(window)
    idle = (cpu_ticks(pid) - c0) / hz / (time.time() - t0)
    socks = []
    for i in range(n):
        s = socket.create_connection((host, int(port)))
        s.sendall(frame(200050, i, {"consumerGroup": "probe-group", "topic": topic, "queueId": "-1",
                                    "maxMsgNums": "32", "invisibleTime": "60000", "pollTime": "120000",
                                    "bornTime": str(int(time.time() * 1000)), "initMode": "0"}))
        socks.append(s)
    time.sleep(2)  # let every pop reach its park
    t0, c0 = time.time(), cpu_ticks(pid)
    time.sleep(window)
    parked = (cpu_ticks(pid) - c0) / hz / (time.time() - t0)
    answered = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(65536):
                answered += 1
        except BlockingIOError:
            pass
    for s in socks:
        s.close()
    time.sleep(2)
    t0, c0 = time.time(), cpu_ticks(pid)
    time.sleep(window)
    after = (cpu_ticks(pid) - c0) / hz / (time.time() - t0)
    print(f"node CPU (cores): idle {idle:.3f}, with {n} parked any-queue pops {parked:.3f}, after they closed {after:.3f}; pops answered before the end of the window: {answered}")

main()
