"""RocketMQ remoting frames, and the *shape* of what they carry.

Frame (reference §8.1): [total: i32 BE][serialize type: u8][header length: u24][header][body],
total = 4 + header length + body length (it does not count itself). Serialize type 0 is a JSON
header, 1 the ROCKETMQ binary header (§8.4).

A shape keeps what a client depends on and drops the values: extFields names with a value
*type* (int, long, float, bool, json, empty, str), and the body as one of

* ``empty``
* ``json``: the structure of the document up to a depth: objects with their keys (maps keyed
  by data -- topic names, broker ids, queues -- collapse into one ``map`` of their merged
  values), lists with their merged element shape, scalar types (``num``, ``float``, ``str``,
  ``bool``, ``null``); ``syntax`` says whether it was standard JSON or fastjson's dialect
  (unquoted or non-string map keys)
* ``records``: concatenated CommitLog message records (pull, pop, query, view): magic
  versions, SYSFLAG bits and property keys seen
* ``batch``: a SEND_BATCH_MESSAGE body (property keys of the inner messages)
* ``properties``: ``key=value`` lines (GET_BROKER_CONFIG): the keys
* ``payload`` / ``text`` / ``bin``: a message payload, other UTF-8 text, other bytes: a
  length class only

Everything here is pure and stdlib-only, so test_codec.py covers it without a broker.
"""

import json
import re
import struct

from codes import LANGUAGES

SER_JSON = 0
SER_ROCKETMQ = 1
SER_NAMES = {SER_JSON: "JSON", SER_ROCKETMQ: "ROCKETMQ"}

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

# Java's default com.rocketmq.remoting.frameMaxLength, applied to the whole frame.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

# Request codes whose body is the user's message payload (not worth a shape beyond its size).
PAYLOAD_CODES = {10, 310, 324, 325}
SEND_BATCH_MESSAGE = 320

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
MAGIC_BLANK = -875286124

# JSON bodies larger than this are classified as json without walking them (bounded CPU).
MAX_JSON_WALK = 8 * 1024 * 1024
# Elements of a list / values of a map merged into the element shape.
MAX_ELEMENTS = 64
# Objects with more keys than this are maps whatever their keys look like.
MAX_STRUCT_KEYS = 256
# Alternatives kept in a union shape; property / config keys kept.
MAX_UNION = 8
MAX_KEYS = 400
# Records whose properties are read per body (the rest are only counted).
MAX_RECORDS_READ = 64
DEFAULT_DEPTH = 6

# Fields whose objects are keyed by data (names, ids, queues), not by Java field names.
MAP_FIELDS = {
    "attributes", "brokerAddrs", "brokerAddrTable", "clusterAddrTable", "consumeStatsTable",
    "consumerTable", "filterServerTable", "forbiddenTable", "mqTable", "offsetTable",
    "producerTable", "statusTable", "subscriptionGroupTable", "subscriptionTable",
    "topicConfigTable", "topicQueueMappingByBroker", "topicQueueMappingDetailMap",
    "topicQueueMappingInfoMap", "groupOffsetTable", "messageRequestModeMap",
}

# Objects under these fields keep their keys even if they do not look like Java field names
# (GET_BROKER_RUNTIME_INFO's KVTable: the set of statistics is what a tool depends on).
STRUCT_FIELDS = {"table"}

# A Java bean property as fastjson writes it: lowerCamelCase. Any other key (TBW102,
# broker-a, %RETRY%g, topic@group, 0, {"topic":..}) is data, and its object a map.
_FIELD_KEY = re.compile(r"[a-z][A-Za-z0-9]*\Z")
_INT = re.compile(r"-?[0-9]+\Z")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\Z")
_PROPERTY_LINE = re.compile(r"[A-Za-z0-9_.\-]+=")


class FrameError(Exception):
    """The bytes are not a remoting frame (the stream is out of step)."""


class HeaderError(Exception):
    """The frame's header cannot be decoded."""


class Header:
    """A decoded remoting header. ``json_keys``: the JSON header's top-level keys (None for
    the binary header)."""

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext", "json_keys")

    def __init__(self, code=0, language="JAVA", version=0, opaque=0, flag=0, remark=None,
                 ext=None, json_keys=None):
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext = ext if ext is not None else {}
        self.json_keys = json_keys

    @property
    def is_response(self):
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self):
        return bool(self.flag & FLAG_ONEWAY)

    def __repr__(self):
        return ("Header(code=%r, language=%r, version=%r, opaque=%r, flag=%r, remark=%r, ext=%r)"
                % (self.code, self.language, self.version, self.opaque, self.flag, self.remark,
                   self.ext))


# ---------------------------------------------------------------------------------------------
# Frames


def check_total(total, max_frame=DEFAULT_MAX_FRAME):
    """Judges the 4-byte total field (signed) before the rest of the frame is read."""
    if total < 4:
        raise FrameError("frame length %d is below the minimum of 4" % total)
    if total + 4 > max_frame:
        raise FrameError("frame of %d bytes exceeds the limit of %d" % (total + 4, max_frame))


def split_frame(payload):
    """Splits the bytes after the total field into (serialize type, header bytes, body)."""
    if len(payload) < 4:
        raise FrameError("frame of %d bytes has no serialize-type word" % len(payload))
    word = int.from_bytes(payload[:4], "big")
    ser = word >> 24
    header_len = word & 0xFFFFFF
    if header_len > len(payload) - 4:
        raise FrameError("header length %d exceeds the %d bytes the frame has for it"
                         % (header_len, len(payload) - 4))
    if ser not in SER_NAMES:
        raise FrameError("unknown serialize type %d" % ser)
    header = payload[4:4 + header_len]
    body = payload[4 + header_len:]
    return ser, header, body


def read_frames(buf, max_frame=DEFAULT_MAX_FRAME):
    """Splits a byte buffer into whole frames: (list of payloads after the total field, rest)."""
    frames = []
    pos = 0
    while len(buf) - pos >= 4:
        total = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
        check_total(total, max_frame)
        if len(buf) - pos - 4 < total:
            break
        frames.append(bytes(buf[pos + 4:pos + 4 + total]))
        pos += 4 + total
    return frames, bytes(buf[pos:])


def encode_frame(ser, header, body=b""):
    if len(header) > 0xFFFFFF:
        raise FrameError("header of %d bytes does not fit 24 bits" % len(header))
    total = 4 + len(header) + len(body)
    return (struct.pack(">iI", total, (ser << 24) | len(header)) + header + body)


# ---------------------------------------------------------------------------------------------
# Headers


def decode_header(ser, data):
    if ser == SER_JSON:
        return decode_json_header(data)
    if ser == SER_ROCKETMQ:
        return decode_binary_header(data)
    raise HeaderError("unknown serialize type %d" % ser)


def decode_json_header(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeaderError("JSON header is not UTF-8: %s" % e)
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            doc, _ = loads_lenient(text)
        except ValueError as e:
            raise HeaderError("JSON header does not parse: %s" % e)
    if not isinstance(doc, dict):
        raise HeaderError("JSON header is a %s, not an object" % type(doc).__name__)
    ext_raw = doc.get("extFields") or {}
    if not isinstance(ext_raw, dict):
        raise HeaderError("extFields is a %s, not an object" % type(ext_raw).__name__)
    ext = {}
    for key, value in ext_raw.items():
        if value is None:
            continue
        # Java writes strings; keep whatever arrived, as text, for the type classification.
        ext[str(key)] = value if isinstance(value, str) else json.dumps(value)
    language = doc.get("language", "JAVA")
    if isinstance(language, int) and 0 <= language < len(LANGUAGES):
        language = LANGUAGES[language]
    return Header(
        code=_int(doc.get("code", 0), "code"),
        language=language,
        version=_int(doc.get("version", 0), "version"),
        opaque=_int(doc.get("opaque", 0), "opaque"),
        flag=_int(doc.get("flag", 0), "flag"),
        remark=doc.get("remark"),
        ext=ext,
        json_keys=sorted(str(k) for k in doc.keys()),
    )


def _int(value, name):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise HeaderError("%s is %r, not an integer" % (name, value))
    return value


def decode_binary_header(data):
    n = len(data)
    if n < 21:
        raise HeaderError("binary header of %d bytes is shorter than its 21 fixed bytes" % n)
    code, lang, version, opaque, flag, remark_len = struct.unpack_from(">hBhiii", data, 0)
    pos = 17
    remark = None
    if remark_len > 0:
        if pos + remark_len > n:
            raise HeaderError("remark length %d overruns the header" % remark_len)
        remark = data[pos:pos + remark_len].decode("utf-8", "replace")
        pos += remark_len
    if pos + 4 > n:
        raise HeaderError("binary header ends before the extFields length")
    (ext_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    ext = {}
    if ext_len > 0:
        end = pos + ext_len
        if end > n:
            raise HeaderError("extFields length %d overruns the header" % ext_len)
        while pos < end:
            if pos + 2 > end:
                raise HeaderError("extFields entry cut in its key length")
            (klen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise HeaderError("extFields key length %d overruns the map" % klen)
            key = data[pos:pos + klen].decode("utf-8", "replace")
            pos += klen
            (vlen,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise HeaderError("extFields value length %d overruns the map" % vlen)
            ext[key] = data[pos:pos + vlen].decode("utf-8", "replace")
            pos += vlen
    language = LANGUAGES[lang] if lang < len(LANGUAGES) else str(lang)
    return Header(code=code, language=language, version=version, opaque=opaque, flag=flag,
                  remark=remark, ext=ext, json_keys=None)


def encode_binary_header(h):
    lang = h.language
    if isinstance(lang, str):
        lang = LANGUAGES.index(lang) if lang in LANGUAGES else (int(lang) if lang.isdigit() else 7)
    out = bytearray(struct.pack(">hBhii", h.code, lang, h.version, h.opaque, h.flag))
    if h.remark:
        remark = h.remark.encode("utf-8")
        out += struct.pack(">i", len(remark)) + remark
    else:
        out += struct.pack(">i", 0)
    block = bytearray()
    for key, value in h.ext.items():
        k = key.encode("utf-8")
        v = value.encode("utf-8")
        block += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    out += struct.pack(">i", len(block)) + block
    return bytes(out)


def encode_json_header(h):
    doc = {"code": h.code, "flag": h.flag, "language": h.language, "opaque": h.opaque,
           "serializeTypeCurrentRPC": "JSON", "version": h.version}
    if h.ext:
        doc["extFields"] = h.ext
    if h.remark is not None:
        doc["remark"] = h.remark
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# fastjson's dialect: unquoted numeric keys ({0:"addr"}) and object keys ({{"topic":..}:1}).


class _Lenient:
    _NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
    _IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
    _WS = re.compile(r"[ \t\n\r]*")

    def __init__(self, text):
        self.s = text
        self.i = 0
        self.nonstandard = False

    def ws(self):
        self.i = self._WS.match(self.s, self.i).end()

    def fail(self, what):
        raise ValueError("%s at offset %d" % (what, self.i))

    def value(self, depth):
        if depth > 500:
            self.fail("nesting too deep")
        self.ws()
        if self.i >= len(self.s):
            self.fail("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        if c == '"':
            value, self.i = json.decoder.scanstring(self.s, self.i + 1)
            return value
        m = self._NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            text = m.group(0)
            return float(text) if (m.group(2) or m.group(3)) else int(text)
        m = self._IDENT.match(self.s, self.i)
        if m:
            self.i = m.end()
            word = m.group(0)
            if word == "true":
                return True
            if word == "false":
                return False
            if word == "null":
                return None
            self.nonstandard = True
            return word
        self.fail("unexpected %r" % c)

    def key(self, depth):
        self.ws()
        c = self.s[self.i:self.i + 1]
        if c == '"':
            value, self.i = json.decoder.scanstring(self.s, self.i + 1)
            return value
        self.nonstandard = True
        start = self.i
        self.value(depth + 1)
        return self.s[start:self.i]

    def obj(self, depth):
        self.i += 1
        out = {}
        self.ws()
        if self.s[self.i:self.i + 1] == "}":
            self.i += 1
            return out
        while True:
            k = self.key(depth)
            self.ws()
            if self.s[self.i:self.i + 1] != ":":
                self.fail("expected ':'")
            self.i += 1
            out[k] = self.value(depth + 1)
            self.ws()
            c = self.s[self.i:self.i + 1]
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                self.i -= 1
                self.fail("expected ',' or '}'")

    def arr(self, depth):
        self.i += 1
        out = []
        self.ws()
        if self.s[self.i:self.i + 1] == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.ws()
            c = self.s[self.i:self.i + 1]
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                self.i -= 1
                self.fail("expected ',' or ']'")


def loads_lenient(text):
    """Parses JSON or fastjson's dialect. Returns (value, standard): standard is False when the
    text needed the dialect (non-string keys, bare words). Raises ValueError."""
    try:
        return json.loads(text), True
    except ValueError:
        pass
    p = _Lenient(text)
    value = p.value(0)
    p.ws()
    if p.i != len(text):
        p.fail("trailing data")
    return value, not p.nonstandard


# ---------------------------------------------------------------------------------------------
# Shapes


def ext_type(value):
    """The type of one extFields value (Java stringifies every header field)."""
    if value in ("true", "false"):
        return "bool"
    if _INT.match(value):
        v = int(value)
        return "int" if -2 ** 31 <= v < 2 ** 31 else "long"
    if _FLOAT.match(value):
        return "float"
    if value == "":
        return "empty"
    if value[:1] in ("{", "["):
        try:
            loads_lenient(value)
            return "json"
        except ValueError:
            pass
    return "str"


def ext_shape(ext):
    return {k: ext_type(v) for k, v in ext.items()}


def len_class(n):
    if n == 0:
        return "0"
    for limit, name in ((16, "<16"), (256, "<256"), (4096, "<4K"), (65536, "<64K"),
                        (1 << 20, "<1M")):
        if n < limit:
            return name
    return ">=1M"


_PATH_IN_KEY = re.compile(r"/\S*")


def _field_name(key):
    """A struct key without the data some carry: KVTable's commitLogDiskRatio_/store/path."""
    return _PATH_IN_KEY.sub("/…", key) if "/" in key else key


def _is_map(obj, parent_key):
    if parent_key in STRUCT_FIELDS:
        return False
    if parent_key in MAP_FIELDS or len(obj) > MAX_STRUCT_KEYS:
        return True
    return any(not _FIELD_KEY.match(k) for k in obj)


def json_shape(value, depth=DEFAULT_DEPTH, parent_key=None):
    """The shape of a parsed JSON value (see the module docstring)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "num"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        if depth <= 0:
            return "list"
        elem = None
        for x in value[:MAX_ELEMENTS]:
            elem = merge(elem, json_shape(x, depth - 1, parent_key))
        return {"list": elem}
    if isinstance(value, dict):
        if depth <= 0:
            return "obj"
        if _is_map(value, parent_key):
            val = None
            for i, x in enumerate(value.values()):
                if i >= MAX_ELEMENTS:
                    break
                val = merge(val, json_shape(x, depth - 1, None))
            return {"map": val}
        return {"obj": {_field_name(k): json_shape(v, depth - 1, k) for k, v in value.items()}}
    return "str"


def _kind(shape):
    if isinstance(shape, dict):
        return next(iter(shape))
    return shape


def _alternatives(shape):
    if isinstance(shape, dict) and "any" in shape:
        return list(shape["any"])
    return [shape]


def merge(a, b):
    """Merges two JSON shapes (None is "nothing seen", e.g. the elements of an empty list)."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    ka, kb = _kind(a), _kind(b)
    if ka == kb == "obj":
        keys = dict(a["obj"])
        for k, v in b["obj"].items():
            keys[k] = merge(keys.get(k), v) if k in keys else v
        return {"obj": keys}
    if ka == kb == "map":
        return {"map": merge(a["map"], b["map"])}
    if ka == kb == "list":
        return {"list": merge(a["list"], b["list"])}
    if {ka, kb} == {"obj", "map"}:
        # A map whose keys happened to look like field names in one sample.
        obj, mp = (a, b) if ka == "obj" else (b, a)
        val = mp["map"]
        for v in obj["obj"].values():
            val = merge(val, v)
        return {"map": val}
    # A union: merge alternatives of the same kind, keep the others side by side.
    alts = []
    for alt in _alternatives(a) + _alternatives(b):
        for i, have in enumerate(alts):
            if _kind(have) == _kind(alt) or {_kind(have), _kind(alt)} == {"obj", "map"}:
                alts[i] = merge(have, alt)
                break
        else:
            alts.append(alt)
    if len(alts) == 1:
        return alts[0]
    alts.sort(key=lambda s: json.dumps(s, sort_keys=True))
    if len(alts) > MAX_UNION:
        alts = alts[:MAX_UNION] + ["…"]
    return {"any": alts}


def _properties_keys(text):
    keys = set()
    for pair in text.split("\x02"):
        if len(pair) < 3:
            continue
        k, sep, v = pair.partition("\x01")
        if sep and k and v:
            keys.add(k)
    return keys


SYSFLAG_BITS = (
    (0x1, "COMPRESSED"), (0x2, "MULTI_TAGS"), (0x10, "BORNHOST_V6"), (0x20, "STOREHOST_V6"),
    (0x40, "NEED_UNWRAP"), (0x80, "INNER_BATCH"),
)
TRANSACTION_TYPES = {0x4: "TX_PREPARED", 0x8: "TX_COMMIT", 0xC: "TX_ROLLBACK"}
COMPRESSION_TYPES = {0x100: "LZ4", 0x200: "ZSTD", 0x300: "ZLIB"}


def sysflag_names(flag):
    names = [name for bit, name in SYSFLAG_BITS if flag & bit]
    if flag & 0xC:
        names.append(TRANSACTION_TYPES[flag & 0xC])
    if flag & 0x700:
        names.append(COMPRESSION_TYPES.get(flag & 0x700, "COMPRESSION_%x" % (flag & 0x700)))
    return names


def records_shape(body):
    """The shape of concatenated CommitLog records, or None if body is not that."""
    n = len(body)
    if n < 8:
        return None
    magics, flags, props = set(), set(), set()
    pos = count = 0
    while pos < n:
        if n - pos < 8:
            return None
        total, magic = struct.unpack_from(">ii", body, pos)
        if magic == MAGIC_V1:
            mname = "v1"
        elif magic == MAGIC_V2:
            mname = "v2"
        else:
            return None
        if total < 84 or pos + total > n:
            return None
        if count < MAX_RECORDS_READ:
            rec = body[pos:pos + total]
            try:
                (sysflag,) = struct.unpack_from(">i", rec, 36)
                off = 48 + (20 if sysflag & 0x10 else 8) + 8 + (20 if sysflag & 0x20 else 8)
                off += 4 + 8  # reconsume times, prepared transaction offset
                (body_len,) = struct.unpack_from(">i", rec, off)
                off += 4 + body_len
                if magic == MAGIC_V2:
                    (topic_len,) = struct.unpack_from(">h", rec, off)
                    off += 2 + topic_len
                else:
                    topic_len = rec[off]
                    off += 1 + topic_len
                (props_len,) = struct.unpack_from(">h", rec, off)
                off += 2
                if body_len < 0 or props_len < 0 or off + props_len != total:
                    return None
                props |= _properties_keys(rec[off:off + props_len].decode("utf-8", "replace"))
            except (struct.error, IndexError):
                return None
            flags.update(sysflag_names(sysflag))
        magics.add(mname)
        count += 1
        pos += total
    return {"kind": "records", "magic": sorted(magics), "sysflag": sorted(flags),
            "props": sorted(props)[:MAX_KEYS], "info": {"n": count}}


def batch_shape(body):
    """SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages), or None."""
    pos, n, props, count = 0, len(body), set(), 0
    while pos < n:
        if n - pos < 20:
            return None
        total, _magic, _crc, _flag, body_len = struct.unpack_from(">iiiii", body, pos)
        if total < 22 or pos + total > n or body_len < 0 or 20 + body_len + 2 > total:
            return None
        off = pos + 20 + body_len
        (props_len,) = struct.unpack_from(">h", body, off)
        if props_len < 0 or 20 + body_len + 2 + props_len != total:
            return None
        props |= _properties_keys(body[off + 2:off + 2 + props_len].decode("utf-8", "replace"))
        pos += total
        count += 1
    return {"kind": "batch", "props": sorted(props)[:MAX_KEYS], "info": {"n": count}}


def body_shape(body, code, is_request, depth=DEFAULT_DEPTH):
    n = len(body)
    if n == 0:
        return {"kind": "empty"}
    if is_request and code in PAYLOAD_CODES:
        return {"kind": "payload", "len": [len_class(n)]}
    if is_request and code == SEND_BATCH_MESSAGE:
        shape = batch_shape(body)
        if shape is not None:
            return shape
    shape = records_shape(body)
    if shape is not None:
        return shape
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        return {"kind": "bin", "len": [len_class(n)]}
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        if n > MAX_JSON_WALK:
            return {"kind": "json", "syntax": ["unread"], "shape": None,
                    "info": {"len": len_class(n)}}
        try:
            value, standard = loads_lenient(text)
            return {"kind": "json", "syntax": ["std" if standard else "fastjson"],
                    "shape": json_shape(value, depth)}
        except (ValueError, RecursionError):
            pass
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and sum(1 for line in lines if _PROPERTY_LINE.match(line)) >= 0.8 * len(lines):
        keys = sorted({line.split("=", 1)[0] for line in lines if "=" in line})
        return {"kind": "properties", "keys": keys[:MAX_KEYS]}
    if all(c.isprintable() or c in "\r\n\t" for c in text[:4096]):
        return {"kind": "text", "len": [len_class(n)]}
    return {"kind": "bin", "len": [len_class(n)]}


def merge_body(a, b):
    """Merges two body shapes of the same kind (the caller keys them by kind)."""
    if a is None:
        return b
    if b is None:
        return a
    out = dict(a)
    for key in ("magic", "sysflag", "props", "keys", "len", "syntax"):
        if key in a or key in b:
            out[key] = sorted(set(a.get(key, [])) | set(b.get(key, [])))[:MAX_KEYS]
    if "shape" in a or "shape" in b:
        out["shape"] = merge(a.get("shape"), b.get("shape"))
    if "info" in a or "info" in b:
        ia, ib = a.get("info") or {}, b.get("info") or {}
        info = dict(ia)
        if "n" in ia or "n" in ib:
            info["n"] = max(ia.get("n", 0), ib.get("n", 0))
        out["info"] = info
    return out


def message_shape(ser, h, body, code, is_request, depth=DEFAULT_DEPTH):
    """Everything the diff compares about one request or response (JSON-serialisable)."""
    shape = {
        "ser": SER_NAMES.get(ser, str(ser)),
        "hdr": h.json_keys,
        "flag": h.flag,
        "remark": h.remark is not None and h.remark != "",
        "ext": ext_shape(h.ext),
        "body": body_shape(body, code, is_request, depth),
        "info": {"lang": h.language, "ver": h.version},
    }
    if not is_request:
        shape["code"] = h.code
        if shape["remark"]:
            shape["info"]["remark"] = h.remark[:160]
    return shape


def signature(shape):
    """A stable text of a shape without its informational values, for de-duplication."""
    return json.dumps(_strip_info(shape), sort_keys=True, separators=(",", ":"))


def _strip_info(x):
    if isinstance(x, dict):
        return {k: _strip_info(v) for k, v in x.items() if k != "info"}
    if isinstance(x, list):
        return [_strip_info(v) for v in x]
    return x
