"""Self-test of the frame codec, the shape functions, the report's diff and the proxy's
forwarding and rewriting, without any broker:

    python3 -m unittest discover -s scripts/wirediff -p 'test_*.py'
    (or: cd scripts/wirediff && python3 -m unittest)
"""

import asyncio
import json
import os
import struct
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import codec  # noqa: E402
import proxy  # noqa: E402
import report  # noqa: E402


def record(topic=b"T", body=b"hello", props=b"TAGS\x01a\x02UNIQ_KEY\x01X\x02", magic=codec.MAGIC_V1,
           sysflag=0):
    """One CommitLog record (IPv4 hosts), laid out as reference §1.1."""
    topic_len = struct.pack(">b", len(topic)) if magic == codec.MAGIC_V1 \
        else struct.pack(">h", len(topic))
    rest = (struct.pack(">iiqqiq", 1, 0, 5, 1000, sysflag, 123) + b"\x7f\x00\x00\x01"
            + struct.pack(">i", 5555) + struct.pack(">q", 456) + b"\x7f\x00\x00\x01"
            + struct.pack(">i", 10911) + struct.pack(">iq", 0, 0) + struct.pack(">i", len(body))
            + body + topic_len + topic + struct.pack(">h", len(props)) + props)
    total = 12 + len(rest)
    return struct.pack(">iii", total, magic, 0) + rest


class FrameTest(unittest.TestCase):
    def test_json_frame_round_trip(self):
        h = codec.Header(code=310, language="JAVA", version=513, opaque=7, flag=0,
                         ext={"a": "group", "e": "-1"})
        frame = codec.encode_frame(codec.SER_JSON, codec.encode_json_header(h), b"body")
        frames, rest = codec.read_frames(frame + frame[:5])
        self.assertEqual(len(frames), 1)
        self.assertEqual(rest, frame[:5])
        ser, header, body = codec.split_frame(frames[0])
        self.assertEqual((ser, body), (codec.SER_JSON, b"body"))
        d = codec.decode_header(ser, header)
        self.assertEqual((d.code, d.opaque, d.version, d.ext), (310, 7, 513, h.ext))
        self.assertIn("serializeTypeCurrentRPC", d.json_keys)
        self.assertFalse(d.is_response)

    def test_java_json_header(self):
        text = (b'{"code":0,"extFields":{"queueId":"1","msgId":"C0A8","queueOffset":"42"},'
                b'"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON",'
                b'"version":479}')
        d = codec.decode_json_header(text)
        self.assertTrue(d.is_response)
        self.assertEqual(d.ext["queueOffset"], "42")
        self.assertEqual(codec.ext_shape(d.ext), {"queueId": "int", "msgId": "str",
                                                   "queueOffset": "int"})

    def test_binary_header_round_trip(self):
        h = codec.Header(code=11, language="RUST", version=479, opaque=-5, flag=3,
                         remark="r\u00e9mark", ext={"topic": "T", "queueOffset": "9"})
        data = codec.encode_binary_header(h)
        self.assertEqual(struct.unpack_from(">hBhii", data, 0), (11, 12, 479, -5, 3))
        d = codec.decode_binary_header(data)
        self.assertEqual((d.code, d.language, d.version, d.opaque, d.flag, d.remark, d.ext),
                         (11, "RUST", 479, -5, 3, "r\u00e9mark", h.ext))
        self.assertTrue(d.is_oneway)
        self.assertIsNone(d.json_keys)
        frame = codec.encode_frame(codec.SER_ROCKETMQ, data, b"")
        ser, header, body = codec.split_frame(frame[4:])
        self.assertEqual(codec.decode_header(ser, header).ext, h.ext)

    def test_binary_header_without_remark_and_ext(self):
        data = struct.pack(">hBhiiii", 105, 0, 1, 2, 0, 0, 0)
        d = codec.decode_binary_header(data)
        self.assertEqual((d.code, d.remark, d.ext, d.language), (105, None, {}, "JAVA"))

    def test_bad_frames(self):
        with self.assertRaises(codec.FrameError):
            codec.check_total(3)
        with self.assertRaises(codec.FrameError):
            codec.check_total(codec.DEFAULT_MAX_FRAME)
        with self.assertRaises(codec.FrameError):
            codec.split_frame(struct.pack(">I", 100) + b"{}")
        with self.assertRaises(codec.FrameError):
            codec.split_frame(struct.pack(">I", (7 << 24) | 2) + b"{}")
        with self.assertRaises(codec.HeaderError):
            codec.decode_binary_header(b"\x00" * 10)
        with self.assertRaises(codec.HeaderError):
            codec.decode_binary_header(struct.pack(">hBhiiii", 1, 0, 1, 2, 0, 0, 50) + b"\x00")
        with self.assertRaises(codec.HeaderError):
            codec.decode_json_header(b"[1,2]")
        with self.assertRaises(codec.HeaderError):
            codec.decode_json_header(b"{not json")


class ShapeTest(unittest.TestCase):
    def test_ext_types(self):
        cases = {"true": "bool", "false": "bool", "12": "int", "-1": "int",
                 "2147483648": "long", "1700000000000": "long", "0.5": "float", "": "empty",
                 "{\"a\":1}": "json", "[1]": "json", "{0:\"x\"}": "json", "abc": "str",
                 "{broken": "str", "True": "str"}
        for value, typ in cases.items():
            self.assertEqual(codec.ext_type(value), typ, value)

    def test_fastjson_dialect(self):
        value, standard = codec.loads_lenient('{"brokerAddrs":{0:"127.0.0.1:10911"},"x":[1,2.5]}')
        self.assertFalse(standard)
        self.assertEqual(value["brokerAddrs"], {"0": "127.0.0.1:10911"})
        value, standard = codec.loads_lenient(
            '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":5}}}')
        self.assertFalse(standard)
        self.assertEqual(list(value["offsetTable"].values()), [{"brokerOffset": 5}])
        self.assertEqual(codec.loads_lenient('{"a":true}'), ({"a": True}, True))
        with self.assertRaises(ValueError):
            codec.loads_lenient('{"a":1} x')

    def test_route_shape_maps_and_structs(self):
        body = json.dumps({
            "brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:1"}, "brokerName": "broker-a",
                             "cluster": "DefaultCluster", "enableActingMaster": False}],
            "filterServerTable": {},
            "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 4,
                            "topicSysFlag": 0, "writeQueueNums": 4}],
        }).encode()
        shape = codec.body_shape(body, 105, False)
        self.assertEqual(shape["kind"], "json")
        self.assertEqual(shape["syntax"], ["std"])
        s = shape["shape"]["obj"]
        self.assertEqual(s["brokerDatas"]["list"]["obj"]["brokerAddrs"], {"map": "str"})
        self.assertEqual(s["filterServerTable"], {"map": None})
        self.assertEqual(s["queueDatas"]["list"]["obj"]["perm"], "num")

    def test_data_keys_make_a_map(self):
        shape = codec.json_shape({"T1_ab12cd34_1": {"topicName": "x", "perm": 6},
                                  "%RETRY%g": {"topicName": "y", "order": False}})
        self.assertEqual(shape, {"map": {"obj": {"topicName": "str", "perm": "num",
                                                 "order": "bool"}}})
        # Under a known map field even field-like keys are data.
        shape = codec.json_shape({"topicConfigTable": {"test": {"perm": 6}}})
        self.assertEqual(shape, {"obj": {"topicConfigTable": {"map": {"obj": {"perm": "num"}}}}})
        # A KVTable keeps its statistic names.
        shape = codec.json_shape({"table": {"msgPutTotalTodayNow": "1", "Weird_Key": "2",
                                            "commitLogDiskRatio_/tmp/x/store": "0.5"}})
        self.assertEqual(set(shape["obj"]["table"]["obj"]),
                         {"msgPutTotalTodayNow", "Weird_Key", "commitLogDiskRatio_/…"})

    def test_depth_and_merge(self):
        self.assertEqual(codec.json_shape({"a": {"b": {"c": 1}}}, depth=2),
                         {"obj": {"a": {"obj": {"b": "obj"}}}})
        self.assertEqual(codec.json_shape([], 3), {"list": None})
        self.assertEqual(codec.json_shape([1, "x", 2]), {"list": {"any": ["num", "str"]}})
        merged = codec.merge({"obj": {"a": "num"}}, {"obj": {"b": "str"}})
        self.assertEqual(merged, {"obj": {"a": "num", "b": "str"}})
        self.assertEqual(codec.merge({"list": None}, {"list": "num"}), {"list": "num"})
        self.assertEqual(codec.merge("null", {"obj": {}}), {"any": ["null", {"obj": {}}]})

    def test_records(self):
        body = record() + record(topic=b"%RETRY%g", magic=codec.MAGIC_V2, sysflag=0x8,
                                 props=b"KEYS\x01k\x02")
        shape = codec.body_shape(body, 11, False)
        self.assertEqual(shape["kind"], "records")
        self.assertEqual(shape["magic"], ["v1", "v2"])
        self.assertEqual(shape["props"], ["KEYS", "TAGS", "UNIQ_KEY"])
        self.assertEqual(shape["sysflag"], ["TX_COMMIT"])
        self.assertEqual(shape["info"], {"n": 2})
        # Cut short: not records any more.
        self.assertNotEqual(codec.body_shape(body[:-3], 11, False)["kind"], "records")

    def test_batch_and_payload(self):
        def inner(b, props):
            return struct.pack(">iiiii", 20 + len(b) + 2 + len(props), 0, 0, 0, len(b)) + b \
                + struct.pack(">h", len(props)) + props
        body = inner(b"one", b"UNIQ_KEY\x01A\x02") + inner(b"two", b"TAGS\x01t\x02")
        shape = codec.body_shape(body, 320, True)
        self.assertEqual((shape["kind"], shape["props"]), ("batch", ["TAGS", "UNIQ_KEY"]))
        self.assertEqual(codec.body_shape(b"sync-1", 310, True),
                         {"kind": "payload", "len": ["<16"]})

    def test_other_bodies(self):
        self.assertEqual(codec.body_shape(b"", 10, False), {"kind": "empty"})
        props = codec.body_shape(b"brokerName=broker-a\nlistenPort=10911\n", 26, False)
        self.assertEqual(props, {"kind": "properties", "keys": ["brokerName", "listenPort"]})
        self.assertEqual(codec.body_shape(b"hello world", 1, False)["kind"], "text")
        self.assertEqual(codec.body_shape(b"\xff\x00\x01", 1, False),
                         {"kind": "bin", "len": ["<16"]})
        self.assertEqual(codec.len_class(70000), "<1M")

    def test_message_shape_and_signature(self):
        h = codec.Header(code=0, flag=1, remark="FOUND", ext={"offset": "5"}, json_keys=["code"])
        a = codec.message_shape(0, h, b"", 14, False)
        self.assertEqual((a["code"], a["remark"], a["ext"]), (0, True, {"offset": "int"}))
        h2 = codec.Header(code=0, flag=1, remark="other", ext={"offset": "9"}, json_keys=["code"])
        b = codec.message_shape(0, h2, b"", 14, False)
        self.assertEqual(codec.signature(a), codec.signature(b))
        self.assertNotEqual(a["info"], b["info"])


def sample(role, direction, code, resp_code, ext, body=None, remark=False, req_ext=None):
    req = {"ser": "JSON", "hdr": ["code"], "flag": 0, "remark": False, "ext": req_ext or {},
           "body": {"kind": "empty"}, "info": {"lang": "JAVA", "ver": 513}}
    resp = None
    if resp_code is not None:
        resp = {"ser": "JSON", "hdr": ["code"], "flag": 1, "remark": remark, "ext": ext,
                "body": body or {"kind": "empty"}, "code": resp_code,
                "info": {"lang": "JAVA", "ver": 513, "remark": "why" if remark else None}}
    return {"t": "exchange", "role": role, "dir": direction, "code": code, "oneway": False,
            "req": req, "resp": resp}


class ReportTest(unittest.TestCase):
    def write(self, label, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write(json.dumps({"t": "meta", "label": label}) + "\n")
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return report.Recording(f.name)

    def test_differences(self):
        body_a = {"kind": "json", "syntax": ["std"],
                  "shape": {"obj": {"brokerDatas": {"list": {"obj": {"brokerName": "str"}}}}}}
        body_b = {"kind": "json", "syntax": ["fastjson"],
                  "shape": {"obj": {"brokerDatas": {"list": {"obj": {"brokerName": "str",
                                                                     "zoneName": "str"}}}}}}
        a = self.write("ringmq", [
            sample("broker", "c2s", 310, 0, {"msgId": "str", "queueId": "int",
                                             "queueOffset": "int"}),
            sample("namesrv", "c2s", 105, 0, {}, body_a),
            sample("broker", "c2s", 11, 20, {}),
            sample("broker", "c2s", 34, 0, {}),
        ])
        b = self.write("rocketmq", [
            sample("broker", "c2s", 310, 0, {"msgId": "str", "queueId": "int",
                                             "queueOffset": "long", "MSG_REGION": "str"},
                   remark=True),
            sample("namesrv", "c2s", 105, 0, {}, body_b),
            sample("broker", "c2s", 11, 19, {}),
            sample("broker", "c2s", 41, 0, {}),
        ])
        text = report.build(a, b)
        self.assertIn("extFields `MSG_REGION`: only on rocketmq", text)
        self.assertNotIn("queueOffset", text)  # int vs long is one type
        self.assertIn("remark: never on ringmq, always on rocketmq", text)
        self.assertIn("`body.brokerDatas[]`: key only on rocketmq: `zoneName` (str)", text)
        self.assertIn("body JSON syntax: std on ringmq, fastjson on rocketmq", text)
        self.assertIn("response 20 PULL_RETRY_IMMEDIATELY (×1) only on ringmq", text)
        self.assertIn("response 19 PULL_NOT_FOUND (×1) only on rocketmq", text)
        self.assertIn("seen only on ringmq", text)
        self.assertIn("| 41 | LOCK_BATCH_MQ | broker | 0 | 1 |", text)

    def test_std_json_beside_fastjson_is_no_difference(self):
        def body(syntax):
            return {"kind": "json", "syntax": syntax, "shape": {"obj": {"offsetTable": {
                "map": None}}}}
        a = self.write("a", [sample("broker", "c2s", 208, 0, {}, body(["std"])),
                             sample("broker", "c2s", 208, 0, {}, body(["fastjson"]))])
        b = self.write("b", [sample("broker", "c2s", 208, 0, {}, body(["fastjson"]))])
        self.assertIn("None found.", report.build(a, b))

    def test_identical_recordings_have_no_differences(self):
        lines = [sample("broker", "c2s", 310, 0, {"msgId": "str"}),
                 sample("broker", "s2c", 40, 0, {}, req_ext={"consumerGroup": "str"})]
        text = report.build(self.write("x", lines), self.write("y", lines))
        self.assertIn("None found.", text)

    def test_counts_record_wins(self):
        counts = {"t": "counts", "final": True, "keys": [
            {"role": "broker", "dir": "c2s", "code": 310, "n": 1000, "resp": {"0": 1000}}]}
        rec = self.write("x", [sample("broker", "c2s", 310, 0, {}), counts])
        self.assertEqual(rec.totals[("broker", "c2s", 310)][0], 1000)
        self.assertTrue(rec.final)


class ProxyTest(unittest.TestCase):
    """A fake upstream broker behind the real proxy: forwarding, opaque matching, rewriting."""

    def test_forward_record_rewrite(self):
        asyncio.run(self._run())

    async def _run(self):
        tmp = tempfile.mkdtemp()
        rec_path = os.path.join(tmp, "rec.jsonl")

        async def upstream(reader, writer):
            while True:
                try:
                    prefix = await reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    break
                payload = await reader.readexactly(int.from_bytes(prefix, "big"))
                ser, header, body = codec.split_frame(payload)
                h = codec.decode_header(ser, header)
                if h.is_oneway or h.code == 11:  # 11: a long poll nobody answers
                    continue
                port = writer.get_extra_info("sockname")[1]
                route = json.dumps({"brokerDatas": [{"brokerAddrs": {
                    "0": "127.0.0.1:%d" % port, "1": "127.0.0.1:%d1" % port}}]}).encode()
                own = h.ext.get("addr") == "127.0.0.1:%d" % port
                resp = codec.Header(code=0, flag=1, opaque=h.opaque,
                                    ext={"seen": "own address" if own else h.ext.get("addr", "")})
                if ser == codec.SER_JSON:
                    out = codec.encode_frame(ser, codec.encode_json_header(resp), route)
                else:
                    out = codec.encode_frame(ser, codec.encode_binary_header(resp), route)
                writer.write(out)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        up_port = server.sockets[0].getsockname()[1]
        args = types.SimpleNamespace(
            record=rec_path, samples=5, max_shapes=64, depth=6, max_frame=codec.DEFAULT_MAX_FRAME,
            max_pending=4096, connect_timeout=2.0, namesrv_upstream=None,
            broker_upstream="127.0.0.1:%d" % up_port, namesrv_port=0, broker_port=0,
            no_vip=True, rewrite=None, label="fake", env_file=None, counts_interval=10.0)
        px = proxy.Proxy(args)
        await px.start()
        px_port = px.addrs["broker"][1]
        reader, writer = await asyncio.open_connection("127.0.0.1", px_port)
        try:
            for ser, opaque in ((codec.SER_JSON, 1), (codec.SER_ROCKETMQ, 2)):
                req = codec.Header(code=105, opaque=opaque,
                                   ext={"addr": "127.0.0.1:%d" % px_port})
                header = codec.encode_json_header(req) if ser == codec.SER_JSON \
                    else codec.encode_binary_header(req)
                writer.write(codec.encode_frame(ser, header, b""))
                await writer.drain()
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(int.from_bytes(prefix, "big"))
                rser, rheader, rbody = codec.split_frame(payload)
                h = codec.decode_header(rser, rheader)
                self.assertEqual((rser, h.opaque, h.code), (ser, opaque, 0))
                # The request's proxy address went upstream as the upstream's address.
                self.assertEqual(h.ext["seen"], "own address")
                addrs = json.loads(rbody)["brokerDatas"][0]["brokerAddrs"]
                self.assertEqual(addrs["0"], "127.0.0.1:%d" % px_port)
                # A longer port that merely starts with the upstream port is left alone.
                self.assertEqual(addrs["1"], "127.0.0.1:%d1" % up_port)
            oneway = codec.Header(code=15, flag=codec.FLAG_ONEWAY, opaque=3)
            writer.write(codec.encode_frame(0, codec.encode_json_header(oneway), b""))
            unanswered = codec.Header(code=11, opaque=4)
            writer.write(codec.encode_frame(0, codec.encode_json_header(unanswered), b""))
            await writer.drain()
            await asyncio.sleep(0.2)
        finally:
            writer.close()
            server.close()
        await asyncio.sleep(0.2)
        await px.shutdown()
        with open(rec_path) as f:
            lines = [json.loads(line) for line in f]
        exchanges = [x for x in lines if x["t"] == "exchange"]
        self.assertEqual([(x["code"], bool(x["resp"]), x["oneway"]) for x in exchanges[:3]],
                         [(105, True, False), (105, True, False), (15, False, True)])
        self.assertEqual(exchanges[0]["resp"]["body"]["kind"], "json")
        self.assertEqual(exchanges[1]["resp"]["ser"], "ROCKETMQ")
        final = [x for x in lines if x["t"] == "counts"][-1]
        self.assertTrue(final["final"])
        by_code = {k["code"]: k for k in final["keys"]}
        self.assertEqual(by_code[105]["resp"], {"0": 2})
        self.assertEqual(by_code[15]["resp"], {"oneway": 1})
        self.assertEqual(by_code[11]["resp"], {"none": 1})


if __name__ == "__main__":
    unittest.main()
