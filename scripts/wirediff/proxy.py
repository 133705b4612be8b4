#!/usr/bin/env python3
"""Recording proxy for the RocketMQ remoting protocol (see __init__.py for the whole tool).

    python3 scripts/wirediff/proxy.py --namesrv-upstream 127.0.0.1:9876 \\
        --broker-upstream 127.0.0.1:10911 --record out.jsonl [--label ringmq]

Listens on 127.0.0.1 only: a name-server port, a broker port and, unless --no-vip, the broker's
fast ("VIP") channel at broker port - 2 (clients derive it from the broker address; stock 5.x
clients use it only with -Dcom.rocketmq.sendMessageWithVIPChannel=true, default false). The
fast channel forwards to --vip-upstream (a RocketMQ broker's port - 2), else to the broker
port. Every connection is forwarded to its upstream byte-for-byte, frame by frame, except that
the upstream broker address in JSON bodies and header values of answers (route and cluster
info) is rewritten to the proxy's broker address, and back in requests, so clients that follow
routes come back through the proxy.

Prints the listening addresses (and NAMESRV_ADDR=/BROKER_ADDR= lines) on stdout; --env-file
writes those two lines to a file once listening. SIGINT/SIGTERM stop it cleanly.

The recording (JSONL, one object per line, "t" says which):
  meta      label, addresses, settings
  exchange  role (namesrv|broker), dir (c2s: client request, broker answer; s2c: broker
            request, client answer), code, oneway, req/resp shapes (codec.message_shape),
            resp null when none came (oneway, or "unanswered": closed/evicted/stopped)
  counts    totals per (role, dir, code) and per response code; the last one is complete
  error     a frame problem, a failure of the proxy
  note      e.g. the upstream refusing connections (a restarting broker): the first refusal
            of a streak, then one line with the count when it accepts again
Memory stays bounded: bodies are never kept, only shapes; per (role, dir, code) only the first
--samples exchanges and each new shape (up to --max-shapes) are written, the rest only
counted; unanswered requests per connection are capped (--max-pending).
"""

import argparse
import asyncio
import collections
import json
import os
import random
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import codec  # noqa: E402
from codes import request_name  # noqa: E402

STDERR_ERROR_LIMIT = 20
# Distinct (role, direction, code) keys counted apart; more go to code -1.
MAX_KEYS = 2048


def log(msg):
    print("wirediff proxy: " + msg, file=sys.stderr, flush=True)


def parse_addr(text, what):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit("wirediff proxy: %s %r is not host:port" % (what, text))
    return host, int(port)


class Agg:
    __slots__ = ("n", "resp", "written", "sigs", "dropped_shapes")

    def __init__(self):
        self.n = 0
        self.resp = collections.Counter()
        self.written = 0
        self.sigs = set()
        self.dropped_shapes = 0


class Recorder:
    """Writes the JSONL recording; keeps counts and shape signatures only."""

    def __init__(self, path, samples, max_shapes):
        self.path = path
        self.samples = samples
        self.max_shapes = max_shapes
        self.aggs = {}
        self.errors = 0
        self.notes = 0
        self.refused = {}
        self.exchanges = 0
        self.orphans = 0
        self.dirty = False
        self.file = open(path, "w", encoding="utf-8") if path else None

    def _write(self, obj):
        if self.file:
            self.file.write(json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n")

    def meta(self, **fields):
        self._write(dict(fields, t="meta", time=time.time()))
        self.flush()

    def exchange(self, role, direction, code, req, resp, oneway, ms=None, unanswered=None):
        key = (role, direction, code)
        agg = self.aggs.get(key)
        if agg is None:
            if len(self.aggs) >= MAX_KEYS:  # a peer sending arbitrary codes: one bucket
                key = (role, direction, -1)
                agg = self.aggs.get(key)
            if agg is None:
                agg = self.aggs[key] = Agg()
        agg.n += 1
        self.exchanges += 1
        self.dirty = True
        if oneway:
            agg.resp["oneway"] += 1
        elif resp is None:
            agg.resp["none"] += 1
        else:
            agg.resp[str(resp["code"])] += 1
        sig = hash(codec.signature({"q": req, "r": resp, "u": bool(unanswered)}))
        new = sig not in agg.sigs
        if new:
            if len(agg.sigs) < self.max_shapes:
                agg.sigs.add(sig)
            else:
                agg.dropped_shapes += 1
                new = False
        if new or agg.written < self.samples:
            agg.written += 1
            rec = {"t": "exchange", "role": role, "dir": direction, "code": code,
                   "oneway": oneway, "req": req, "resp": resp}
            if ms is not None:
                rec["ms"] = round(ms, 2)
            if unanswered:
                rec["unanswered"] = unanswered
            self._write(rec)

    def error(self, msg, **fields):
        self.errors += 1
        self._write(dict(fields, t="error", msg=msg, time=time.time()))
        if self.errors <= STDERR_ERROR_LIMIT:
            log(msg)
        elif self.errors == STDERR_ERROR_LIMIT + 1:
            log("more errors: see the recording")

    def note(self, msg, **fields):
        """Something worth knowing that is not the proxy's failure (a broker restarting)."""
        self.notes += 1
        self._write(dict(fields, t="note", msg=msg, time=time.time()))
        log(msg)

    def refused_connect(self, listener, upstream, err):
        """The first refusal of a streak is written; the rest are counted until one succeeds."""
        streak = self.refused.get(listener)
        if streak is None:
            self.refused[listener] = [1, time.monotonic()]
            self.note("%s: upstream %s refused a connection (%s); the client's connection is "
                      "closed, and further refusals are only counted until it accepts again"
                      % (listener, upstream, err), listener=listener)
        else:
            streak[0] += 1

    def connected(self, listener):
        streak = self.refused.pop(listener, None)
        if streak is not None:
            self.note("%s: upstream accepts again, after refusing %d connection(s) over %.1f s"
                      % (listener, streak[0], time.monotonic() - streak[1]), listener=listener)

    def end_streaks(self):
        for listener, (count, start) in list(self.refused.items()):
            self.note("%s: upstream still refusing at the end: %d connection(s) over %.1f s"
                      % (listener, count, time.monotonic() - start), listener=listener)
        self.refused.clear()

    def note_orphan(self):
        self.orphans += 1

    def counts(self, final=False):
        keys = []
        for (role, direction, code), agg in sorted(self.aggs.items()):
            keys.append({"role": role, "dir": direction, "code": code, "n": agg.n,
                         "resp": dict(agg.resp), "shapes": len(agg.sigs),
                         "shapes_dropped": agg.dropped_shapes})
        self._write({"t": "counts", "final": final, "time": time.time(), "keys": keys,
                     "exchanges": self.exchanges, "errors": self.errors, "notes": self.notes,
                     "orphan_responses": self.orphans})
        self.dirty = False
        self.flush()

    def flush(self):
        if self.file:
            self.file.flush()

    def close(self):
        if self.file:
            self.file.close()
            self.file = None


class Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy, role, listener, reader, writer):
        self.proxy = proxy
        self.role = role
        self.listener = listener
        self.creader = reader
        self.cwriter = writer
        self.uwriter = None
        # opaque -> (code, request shape, start) per origin of the request.
        self.pending = {"c2s": collections.OrderedDict(), "s2c": collections.OrderedDict()}
        peer = writer.get_extra_info("peername")
        self.peer = "%s:%s" % peer[:2] if peer else "?"
        self.header_errors = 0

    async def connect(self, addr):
        return await asyncio.wait_for(asyncio.open_connection(*addr), self.proxy.connect_timeout)

    async def run(self):
        rec = self.proxy.recorder
        upstream = self.proxy.upstream_for(self.listener)
        try:
            ureader, self.uwriter = await self.connect(upstream)
        except (OSError, asyncio.TimeoutError) as e:
            rec.refused_connect(self.listener, "%s:%d" % upstream, e or "timeout")
            self.cwriter.close()
            return
        rec.connected(self.listener)
        for w in (self.cwriter, self.uwriter):
            sock = w.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
        up = asyncio.ensure_future(self.pump(self.creader, self.uwriter, "c2s"))
        down = asyncio.ensure_future(self.pump(ureader, self.cwriter, "s2c"))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for task in (up, down):
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
            for w in (self.cwriter, self.uwriter):
                try:
                    w.close()
                except Exception:
                    pass
            self.flush_pending("closed")

    def flush_pending(self, why):
        for origin, table in self.pending.items():
            while table:
                _, (code, req, _start) = table.popitem(last=False)
                self.proxy.recorder.exchange(self.role, origin, code, req, None, False,
                                             unanswered=why)

    async def pump(self, reader, writer, direction):
        rec = self.proxy.recorder
        while True:
            try:
                prefix = await reader.readexactly(4)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    rec.error("%s %s %s: stream ended inside a frame length"
                              % (self.listener, self.peer, direction), role=self.role)
                return
            except (ConnectionError, OSError):
                return
            total = int.from_bytes(prefix, "big", signed=True)
            try:
                codec.check_total(total, self.proxy.max_frame)
            except codec.FrameError as e:
                rec.error("%s %s %s: %s; closing both sides (the stream is out of step)"
                          % (self.listener, self.peer, direction, e), role=self.role)
                return
            try:
                payload = await reader.readexactly(total)
            except asyncio.IncompleteReadError:
                rec.error("%s %s %s: stream ended inside a frame of %d bytes"
                          % (self.listener, self.peer, direction, total), role=self.role)
                return
            except (ConnectionError, OSError):
                return
            out = None
            parsed = None
            try:
                ser, header, body = codec.split_frame(payload)
                h = codec.decode_header(ser, header)
                parsed = (ser, header, body, h)
                rewritten = self.proxy.rewrite(direction, ser, header, body, h)
                if rewritten is not None:
                    out = rewritten
            except (codec.FrameError, codec.HeaderError) as e:
                self.header_errors += 1
                if self.header_errors <= 3:
                    rec.error("%s %s %s: frame forwarded unread: %s"
                              % (self.listener, self.peer, direction, e), role=self.role)
            try:
                if out is None:
                    writer.write(prefix)
                    writer.write(payload)
                else:
                    writer.write(out)
                await writer.drain()
            except (ConnectionError, OSError):
                return
            if parsed is not None:
                try:
                    self.observe(direction, *parsed)
                except Exception as e:  # a shape bug must not break the forwarding
                    rec.error("%s %s %s: recording failed: %r"
                              % (self.listener, self.peer, direction, e), role=self.role)

    def observe(self, direction, ser, header, body, h):
        proxy = self.proxy
        rec = proxy.recorder
        if not h.is_response:
            origin = direction
            shape = codec.message_shape(ser, h, body, h.code, True, proxy.depth)
            if h.is_oneway:
                rec.exchange(self.role, origin, h.code, shape, None, True)
                return
            table = self.pending[origin]
            if h.opaque in table:
                code, req, _ = table.pop(h.opaque)
                rec.exchange(self.role, origin, code, req, None, False, unanswered="reused")
            table[h.opaque] = (h.code, shape, time.monotonic())
            if len(table) > proxy.max_pending:
                _, (code, req, _) = table.popitem(last=False)
                rec.exchange(self.role, origin, code, req, None, False, unanswered="evicted")
            return
        origin = "s2c" if direction == "c2s" else "c2s"
        entry = self.pending[origin].pop(h.opaque, None)
        if entry is None:
            rec.note_orphan()
            return
        code, req, start = entry
        resp = codec.message_shape(ser, h, body, code, False, proxy.depth)
        rec.exchange(self.role, origin, code, req, resp, False,
                     ms=(time.monotonic() - start) * 1000.0)


class Proxy:
    def __init__(self, args):
        self.args = args
        self.recorder = Recorder(args.record, args.samples, args.max_shapes)
        self.depth = args.depth
        self.max_frame = args.max_frame
        self.max_pending = args.max_pending
        self.connect_timeout = args.connect_timeout
        self.ns_up = parse_addr(args.namesrv_upstream, "--namesrv-upstream") \
            if args.namesrv_upstream else None
        self.broker_up = parse_addr(args.broker_upstream, "--broker-upstream") \
            if args.broker_upstream else None
        self.vip_up = parse_addr(args.vip_upstream, "--vip-upstream") \
            if getattr(args, "vip_upstream", None) else None
        self.servers = []
        self.links = set()
        self.addrs = {}
        self.rewrites = {"s2c": [], "c2s": []}

    # -- routing -----------------------------------------------------------------------------

    def upstream_for(self, listener):
        if listener == "namesrv":
            return self.ns_up
        if listener == "vip":
            return self.vip_up or self.broker_up
        return self.broker_up

    def setup_rewrites(self):
        pairs = []
        if self.broker_up and "broker" in self.addrs:
            up_host, up_port = self.broker_up
            px_host, px_port = self.addrs["broker"]
            pairs.append(("%s:%d" % (up_host, up_port), "%s:%d" % (px_host, px_port)))
            if "vip" in self.addrs and self.vip_up:
                pairs.append(("%s:%d" % self.vip_up, "%s:%d" % self.addrs["vip"]))
        for spec in self.args.rewrite or []:
            a, sep, b = spec.partition("=")
            if not sep or not a or not b:
                raise SystemExit("wirediff proxy: --rewrite %r is not FROM=TO" % spec)
            pairs.append((a, b))
        for direction, ordered in (("s2c", pairs), ("c2s", [(b, a) for a, b in pairs])):
            for a, b in ordered:
                pattern = re.compile(rb"(?<![0-9.])" + re.escape(a.encode()) + rb"(?![0-9])")
                self.rewrites[direction].append((pattern, b.encode()))

    def rewrite(self, direction, ser, header, body, h):
        """The frame with addresses rewritten, or None if nothing changed."""
        rules = self.rewrites[direction]
        if not rules:
            return None
        changed = False
        if body[:1] in (b"{", b"[") or body.lstrip()[:1] in (b"{", b"["):
            for pattern, repl in rules:
                body2 = pattern.sub(repl, body)
                if body2 != body:
                    body, changed = body2, True
        for pattern, repl in rules:
            if pattern.search(header):
                changed = True
                if ser == codec.SER_JSON:
                    header = pattern.sub(repl, header)
                else:
                    h.ext = {k: pattern.sub(repl, v.encode()).decode("utf-8", "replace")
                             for k, v in h.ext.items()}
                    if h.remark:
                        h.remark = pattern.sub(repl, h.remark.encode()).decode("utf-8", "replace")
                    header = codec.encode_binary_header(h)
        if not changed:
            return None
        return codec.encode_frame(ser, header, body)

    # -- listening ---------------------------------------------------------------------------

    def handler(self, role, listener):
        async def handle(reader, writer):
            link = Link(self, role, listener, reader, writer)
            self.links.add(link)
            try:
                await link.run()
            except Exception as e:
                self.recorder.error("%s connection from %s failed: %r" % (listener, link.peer, e),
                                    role=role)
            finally:
                self.links.discard(link)
        return handle

    @staticmethod
    def bind(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            raise
        return s

    def bind_broker(self):
        """(broker socket, vip socket or None)."""
        port = self.args.broker_port
        want_vip = not self.args.no_vip
        if port:
            main = self.bind(port)
            vip = None
            if want_vip:
                try:
                    vip = self.bind(port - 2)
                except OSError as e:
                    log("no fast channel: 127.0.0.1:%d: %s" % (port - 2, e))
            return main, vip
        if not want_vip:
            return self.bind(0), None
        for _ in range(500):
            p = random.randint(20000, 60000)
            try:
                main = self.bind(p)
            except OSError:
                continue
            try:
                vip = self.bind(p - 2)
            except OSError:
                main.close()
                continue
            return main, vip
        raise OSError("no free port P with P-2 free for the broker and its fast channel")

    async def start(self):
        loop = asyncio.get_running_loop()
        socks = []
        try:
            if self.ns_up:
                socks.append(("namesrv", "namesrv", self.bind(self.args.namesrv_port)))
            if self.broker_up:
                main, vip = self.bind_broker()
                socks.append(("broker", "broker", main))
                if vip is not None:
                    socks.append(("broker", "vip", vip))
        except OSError as e:
            for _, _, s in socks:
                s.close()
            raise SystemExit("wirediff proxy: cannot listen: %s" % e)
        for role, listener, sock in socks:
            sock.listen(1024)
            server = await asyncio.start_server(self.handler(role, listener), sock=sock,
                                                limit=1 << 20)
            self.servers.append(server)
            self.addrs[listener] = sock.getsockname()[:2]
        self.setup_rewrites()
        del loop

    def describe(self):
        lines = []
        label = " (%s)" % self.args.label if self.args.label else ""
        if "namesrv" in self.addrs:
            lines.append("wirediff proxy%s: name server 127.0.0.1:%d -> %s:%d"
                         % ((label, self.addrs["namesrv"][1]) + self.ns_up))
        if "broker" in self.addrs:
            lines.append("wirediff proxy%s: broker 127.0.0.1:%d -> %s:%d"
                         % ((label, self.addrs["broker"][1]) + self.broker_up))
        if "vip" in self.addrs:
            lines.append("wirediff proxy%s: broker fast channel 127.0.0.1:%d -> %s:%d%s"
                         % ((label, self.addrs["vip"][1]) + self.upstream_for("vip")
                            + ("" if self.vip_up else " (the broker port: no --vip-upstream)",)))
        lines.append("wirediff proxy%s: recording to %s" % (label, self.args.record or "nowhere"))
        lines.extend(self.env_lines())
        return "\n".join(lines)

    def env_lines(self):
        lines = []
        if "namesrv" in self.addrs:
            lines.append("NAMESRV_ADDR=127.0.0.1:%d" % self.addrs["namesrv"][1])
        if "broker" in self.addrs:
            lines.append("BROKER_ADDR=127.0.0.1:%d" % self.addrs["broker"][1])
        return lines

    def write_env_file(self):
        path = self.args.env_file
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(self.env_lines() + ["PROXY_PID=%d" % os.getpid()]) + "\n")
        os.replace(tmp, path)

    async def run(self):
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        self.recorder.meta(
            label=self.args.label,
            listen={k: "%s:%d" % v for k, v in self.addrs.items()},
            upstream={"namesrv": self.args.namesrv_upstream, "broker": self.args.broker_upstream,
                      "vip": "%s:%d" % self.upstream_for("vip") if self.broker_up else None},
            depth=self.depth, samples=self.args.samples, max_shapes=self.args.max_shapes,
            pid=os.getpid())
        print(self.describe(), flush=True)
        if self.args.env_file:
            self.write_env_file()
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), self.args.counts_interval)
                except asyncio.TimeoutError:
                    pass
                if self.recorder.dirty:
                    self.recorder.counts()
                else:
                    self.recorder.flush()
        finally:
            await self.shutdown()

    async def shutdown(self):
        for server in self.servers:
            server.close()
        for link in list(self.links):
            for w in (link.cwriter, link.uwriter):
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass
            link.flush_pending("proxy stopped")
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
        self.recorder.end_streaks()
        self.recorder.counts(final=True)
        log("%s%d exchanges recorded, %d errors, %d notes%s"
            % ("%s: " % self.args.label if self.args.label else "", self.recorder.exchanges,
               self.recorder.errors, self.recorder.notes,
               ", recording in %s" % self.args.record if self.args.record else ""))
        self.recorder.close()


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Recording proxy for the RocketMQ remoting protocol (127.0.0.1 only).",
        epilog="Example: proxy.py --namesrv-upstream 127.0.0.1:9876 --broker-upstream "
               "127.0.0.1:10911 --record out.jsonl; then point clients (mqadmin -n) at the "
               "printed NAMESRV_ADDR.")
    p.add_argument("--namesrv-upstream", help="host:port of the name server to forward to")
    p.add_argument("--broker-upstream", help="host:port of the broker to forward to (its "
                   "address as routes name it; rewritten to the proxy's in answers)")
    p.add_argument("--namesrv-port", type=int, default=0, help="listen port (0: free port)")
    p.add_argument("--broker-port", type=int, default=0,
                   help="listen port (0: a free port P with P-2 free for the fast channel)")
    p.add_argument("--no-vip", action="store_true", help="no fast-channel listener (port-2)")
    p.add_argument("--vip-upstream", help="host:port to forward fast-channel connections to "
                   "(a RocketMQ broker's is its port - 2); default: the broker upstream, since "
                   "port - 2 of an upstream without a fast channel may be anyone's")
    p.add_argument("--record", help="JSONL file to write (overwritten)")
    p.add_argument("--label", default="", help="name of the upstream (ringmq, rocketmq)")
    p.add_argument("--env-file", help="write NAMESRV_ADDR=/BROKER_ADDR=/PROXY_PID= here once "
                   "listening")
    p.add_argument("--rewrite", action="append", metavar="FROM=TO",
                   help="one more address to rewrite in answers (and back in requests)")
    p.add_argument("--depth", type=int, default=codec.DEFAULT_DEPTH,
                   help="JSON body shape depth (default %(default)s)")
    p.add_argument("--samples", type=int, default=5,
                   help="exchanges written per (role, dir, code) besides new shapes "
                   "(default %(default)s)")
    p.add_argument("--max-shapes", type=int, default=64,
                   help="distinct shapes written per (role, dir, code) (default %(default)s)")
    p.add_argument("--max-pending", type=int, default=4096,
                   help="unanswered requests remembered per connection (default %(default)s)")
    p.add_argument("--max-frame", type=int, default=codec.DEFAULT_MAX_FRAME,
                   help="largest frame accepted, bytes (default %(default)s)")
    p.add_argument("--connect-timeout", type=float, default=5.0, help="seconds")
    p.add_argument("--counts-interval", type=float, default=10.0,
                   help="seconds between counts records (default %(default)s)")
    args = p.parse_args(argv)
    if not args.namesrv_upstream and not args.broker_upstream:
        p.error("give --namesrv-upstream, --broker-upstream or both")
    try:
        proxy = Proxy(args)
    except OSError as e:
        print("wirediff proxy: cannot write the recording: %s" % e, file=sys.stderr)
        return 2
    try:
        asyncio.run(proxy.run())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
