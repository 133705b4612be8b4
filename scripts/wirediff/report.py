#!/usr/bin/env python3
"""Compares two proxy recordings: where the subject's answers differ from the reference's.

    python3 scripts/wirediff/report.py SUBJECT.jsonl REFERENCE.jsonl [--out report.md]
        [--depth N] [--max-list N]

SUBJECT is the broker under test (ringmq), REFERENCE the one it should match (Apache
RocketMQ); the columns are named by the recordings' labels. Prints markdown (and writes it to
--out). Compared per (role, direction, request code): counts, response codes, and per response
code seen on both sides the extFields names and value types, the presence of a remark, the
serialize type and the body shape (codec.py). Values -- offsets, ids, times, names -- are not
compared. Request shapes are compared too but reported apart: both sides ran the same
clients, so a request difference only says the client behaved differently.
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import codec  # noqa: E402
from codes import request_name, response_name  # noqa: E402

NUMBER_TYPES = {"int": "number", "long": "number"}
ROLE_ORDER = {"namesrv": 0, "broker": 1}
MAX_KEYS_SHOWN = 40


# ---------------------------------------------------------------------------------------------
# Loading


class Recording:
    def __init__(self, path):
        self.path = path
        self.meta = {}
        self.counts = None
        self.final = False
        self.samples = collections.defaultdict(list)
        self.errors = []
        self.error_count = 0
        self.notes = []
        self.bad_lines = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    self.bad_lines += 1  # e.g. the last line of a killed proxy
                    continue
                t = rec.get("t")
                if t == "meta":
                    self.meta = rec
                elif t == "exchange":
                    self.samples[(rec["role"], rec["dir"], rec["code"])].append(rec)
                elif t == "counts":
                    self.counts = rec
                    self.final = bool(rec.get("final"))
                elif t == "note":
                    if len(self.notes) < 20:
                        self.notes.append(rec.get("msg", ""))
                elif t == "error":
                    self.error_count += 1
                    if len(self.errors) < 10:
                        self.errors.append(rec.get("msg", ""))
        self.label = self.meta.get("label") or os.path.splitext(os.path.basename(path))[0]
        # The suite's outcome, if the runner left it beside the recording (wire-diff.sh).
        self.suite = []
        suite_path = os.path.splitext(path)[0] + ".suite.txt"
        if os.path.exists(suite_path):
            with open(suite_path, encoding="utf-8", errors="replace") as f:
                self.suite = [line.rstrip() for line in f if line.strip()][:30]
        self.totals = {}
        if self.counts:
            for k in self.counts["keys"]:
                self.totals[(k["role"], k["dir"], k["code"])] = (
                    k["n"], collections.Counter(k["resp"]))
        for key, recs in self.samples.items():
            if key not in self.totals:
                resp = collections.Counter(_resp_key(r) for r in recs)
                self.totals[key] = (len(recs), resp)


def _resp_key(rec):
    if rec.get("oneway"):
        return "oneway"
    if rec.get("resp") is None:
        return "none"
    return str(rec["resp"]["code"])


# ---------------------------------------------------------------------------------------------
# Merging samples


class ShapeAgg:
    """Everything seen in the requests (or the responses with one code) of one key."""

    def __init__(self):
        self.n = 0
        self.ser = collections.Counter()
        self.hdr = collections.Counter()
        self.json_headers = 0
        self.remarks = 0
        self.remark_examples = []
        self.ext = {}
        self.bodies = {}
        self.body_kinds = collections.Counter()
        self.lang = collections.Counter()
        self.ver = collections.Counter()
        self.unanswered = collections.Counter()

    def add(self, shape):
        self.n += 1
        self.ser[shape["ser"]] += 1
        if shape.get("hdr") is not None:
            self.json_headers += 1
            self.hdr.update(shape["hdr"])
        info = shape.get("info") or {}
        if shape.get("remark"):
            self.remarks += 1
            text = info.get("remark")
            if text and text not in self.remark_examples and len(self.remark_examples) < 3:
                self.remark_examples.append(text)
        self.lang[str(info.get("lang"))] += 1
        self.ver[str(info.get("ver"))] += 1
        for name, typ in shape.get("ext", {}).items():
            e = self.ext.setdefault(name, [0, collections.Counter()])
            e[0] += 1
            e[1][typ] += 1
        body = shape.get("body") or {"kind": "empty"}
        kind = body["kind"]
        self.body_kinds[kind] += 1
        self.bodies[kind] = codec.merge_body(self.bodies.get(kind), body)


class KeyAgg:
    def __init__(self):
        self.req = ShapeAgg()
        self.resp = collections.defaultdict(ShapeAgg)


def aggregate(recording):
    out = {}
    for key, recs in recording.samples.items():
        agg = out[key] = KeyAgg()
        for rec in recs:
            agg.req.add(rec["req"])
            rk = _resp_key(rec)
            if rec.get("resp") is not None:
                agg.resp[rk].add(rec["resp"])
            elif rk == "none":
                agg.resp[rk].unanswered[rec.get("unanswered", "?")] += 1
    return out


# ---------------------------------------------------------------------------------------------
# Describing and diffing shapes


def _kind(shape):
    if isinstance(shape, dict):
        return next(iter(shape))
    return shape


def _alts(shape):
    if isinstance(shape, dict) and "any" in shape:
        return list(shape["any"])
    return [shape]


def brief(shape, depth=2):
    """A short human description of a JSON shape."""
    if shape is None:
        return "nothing (empty)"
    if isinstance(shape, str):
        return shape
    k = _kind(shape)
    if k == "any":
        return " | ".join(brief(a, depth) for a in shape["any"])
    if depth <= 0:
        return k
    if k == "obj":
        keys = sorted(shape["obj"])
        more = ", …" if len(keys) > 8 else ""
        return "{%s%s}" % (", ".join(keys[:8]), more)
    if k == "map":
        return "map of %s" % brief(shape["map"], depth - 1)
    if k == "list":
        return "list of %s" % brief(shape["list"], depth - 1)
    return k


def _norm_scalar(k):
    return NUMBER_TYPES.get(k, k)


def diff_shapes(a, b, path, out, la, lb, depth):
    """Appends (path, message) for every structural difference between JSON shapes a, b."""
    if a is None or b is None or a == b:
        return
    if depth <= 0:
        return
    ka, kb = _kind(a), _kind(b)
    if ka == "any" or kb == "any":
        alts_a, alts_b = _alts(a), _alts(b)
        kinds_a = {_norm_scalar(_kind(x)) for x in alts_a}
        kinds_b = {_norm_scalar(_kind(x)) for x in alts_b}
        if kinds_a != kinds_b:
            out.append((path, "%s on %s, %s on %s" % (brief(a, 1), la, brief(b, 1), lb)))
        for k in kinds_a & kinds_b:
            if k in ("obj", "map", "list"):
                xa = next(x for x in alts_a if _kind(x) == k)
                xb = next(x for x in alts_b if _kind(x) == k)
                diff_shapes(xa, xb, path, out, la, lb, depth)
        return
    # A depth-truncated token ("obj", "list") against the full structure: nothing to compare.
    if isinstance(a, str) and isinstance(b, dict) and ka == kb:
        return
    if isinstance(b, str) and isinstance(a, dict) and ka == kb:
        return
    if ka == kb == "obj":
        fa, fb = a["obj"], b["obj"]
        for side, mine, other in ((la, fa, fb), (lb, fb, fa)):
            only = sorted(set(mine) - set(other))
            if only:
                out.append((path, "%s only on %s: %s" % (
                    "key" if len(only) == 1 else "%d keys" % len(only), side,
                    ", ".join("`%s` (%s)" % (k, brief(mine[k], 1)) for k in only[:MAX_KEYS_SHOWN])
                    + (", … %d more" % (len(only) - MAX_KEYS_SHOWN)
                       if len(only) > MAX_KEYS_SHOWN else ""))))
        for key in sorted(set(fa) & set(fb)):
            diff_shapes(fa[key], fb[key], "%s.%s" % (path, key), out, la, lb, depth - 1)
        return
    if ka == kb == "map":
        diff_shapes(a["map"], b["map"], path + ".*", out, la, lb, depth - 1)
        return
    if ka == kb == "list":
        diff_shapes(a["list"], b["list"], path + "[]", out, la, lb, depth - 1)
        return
    if _norm_scalar(ka) == _norm_scalar(kb):
        return
    out.append((path, "%s on %s, %s on %s" % (brief(a, 1), la, brief(b, 1), lb)))


def presence(count, n):
    if count == 0:
        return "never"
    return "always" if count == n else "sometimes"


def fmt_types(counter):
    return "/".join(sorted(counter))


def fmt_list(items, limit=12):
    items = list(items)
    shown = ", ".join("`%s`" % x for x in items[:limit])
    if len(items) > limit:
        shown += ", … (%d more)" % (len(items) - limit)
    return shown


def diff_aggs(a, b, la, lb, max_list, depth, what="response"):
    """Differences between two ShapeAggs (same key, same response code): list of strings."""
    out = []
    if a.n == 0 or b.n == 0:
        return out
    if set(a.ser) != set(b.ser):
        out.append("serialize type: %s on %s, %s on %s"
                   % (fmt_types(a.ser), la, fmt_types(b.ser), lb))
    for name in sorted(set(a.ext) | set(b.ext)):
        ea, eb = a.ext.get(name), b.ext.get(name)
        if eb is None:
            out.append("extFields `%s`: only on %s (%s, %s)"
                       % (name, la, fmt_types(ea[1]), presence(ea[0], a.n)))
        elif ea is None:
            out.append("extFields `%s`: only on %s (%s, %s)"
                       % (name, lb, fmt_types(eb[1]), presence(eb[0], b.n)))
        else:
            ta = {_norm_scalar(t) for t in ea[1]}
            tb = {_norm_scalar(t) for t in eb[1]}
            if ta != tb:
                out.append("extFields `%s`: %s on %s, %s on %s"
                           % (name, fmt_types(ea[1]), la, fmt_types(eb[1]), lb))
            pa, pb = presence(ea[0], a.n), presence(eb[0], b.n)
            if pa != pb:
                out.append("extFields `%s`: %s on %s (%d of %d samples), %s on %s (%d of %d)"
                           % (name, pa, la, ea[0], a.n, pb, lb, eb[0], b.n))
    ra, rb = presence(a.remarks, a.n), presence(b.remarks, b.n)
    if ra != rb:
        def ex(agg):
            return " (e.g. %s)" % "; ".join('"%s"' % t for t in agg.remark_examples[:2]) \
                if agg.remark_examples else ""
        out.append("remark: %s on %s%s, %s on %s%s" % (ra, la, ex(a), rb, lb, ex(b)))
    kinds_a, kinds_b = set(a.body_kinds), set(b.body_kinds)
    if kinds_a != kinds_b:
        out.append("body: %s on %s, %s on %s" % (
            "/".join(sorted(kinds_a)), la, "/".join(sorted(kinds_b)), lb))
    for kind in sorted(kinds_a & kinds_b):
        out.extend(diff_bodies(kind, a.bodies[kind], b.bodies[kind], la, lb, max_list, depth))
    return out


def diff_bodies(kind, a, b, la, lb, max_list, depth):
    out = []
    if kind == "json":
        sa, sb = set(a.get("syntax", [])), set(b.get("syntax", []))
        # "std" only says nothing needed the dialect (an empty map): a difference is one side
        # using fastjson's dialect and the other never.
        if ("fastjson" in sa) != ("fastjson" in sb) and "unread" not in sa | sb:
            out.append("body JSON syntax: %s on %s, %s on %s (fastjson = unquoted or "
                       "non-string map keys)" % ("/".join(sorted(sa)), la,
                                                 "/".join(sorted(sb)), lb))
        paths = []
        diff_shapes(a.get("shape"), b.get("shape"), "body", paths, la, lb, depth)
        for path, msg in paths[:max_list]:
            out.append("`%s`: %s" % (path, msg))
        if len(paths) > max_list:
            out.append("… %d more body differences" % (len(paths) - max_list))
        return out
    for field, what in (("magic", "record magic"), ("sysflag", "record SYSFLAG bits"),
                        ("props", "message properties"), ("keys", "keys")):
        if field not in a and field not in b:
            continue
        fa, fb = set(a.get(field, [])), set(b.get(field, []))
        if fa - fb:
            out.append("body %s %s only on %s" % (what, fmt_list(sorted(fa - fb), max_list), la))
        if fb - fa:
            out.append("body %s %s only on %s" % (what, fmt_list(sorted(fb - fa), max_list), lb))
    if "len" in a and "len" in b and not set(a["len"]) & set(b["len"]):
        out.append("body length class: %s on %s, %s on %s"
                   % ("/".join(a["len"]), la, "/".join(b["len"]), lb))
    return out


# ---------------------------------------------------------------------------------------------
# The report


def fmt_resp(counter):
    parts = []
    for rk, n in sorted(counter.items(), key=lambda kv: (not kv[0].lstrip("-").isdigit(),
                                                          int(kv[0]) if kv[0].lstrip("-").isdigit()
                                                          else 0, kv[0])):
        parts.append("%s×%d" % ("no answer" if rk == "none" else rk, n))
    return " ".join(parts) if parts else "–"


def resp_label(rk):
    if rk == "none":
        return "no answer"
    if rk == "oneway":
        return "oneway (no answer expected)"
    return "%s %s" % (rk, response_name(int(rk)))


def where(key):
    role, direction, _ = key
    return "%s%s" % ("ns" if role == "namesrv" else "broker",
                     "" if direction == "c2s" else " ⇢ client")


def build(subject, reference, max_list=20, depth=8):
    la, lb = subject.label, reference.label
    if la == lb:
        la, lb = la + " (1)", lb + " (2)"
    agg_a, agg_b = aggregate(subject), aggregate(reference)
    keys = sorted(set(subject.totals) | set(reference.totals),
                  key=lambda k: (k[1], ROLE_ORDER.get(k[0], 9), k[2]))
    sections = []
    request_notes = []
    rows = []
    for key in keys:
        code = key[2]
        na, ra = subject.totals.get(key, (0, collections.Counter()))
        nb, rb = reference.totals.get(key, (0, collections.Counter()))
        diffs = []
        if na == 0 or nb == 0:
            diffs.append("seen only on %s" % (la if nb == 0 else lb))
        else:
            ka, kb = agg_a.get(key, KeyAgg()), agg_b.get(key, KeyAgg())
            for rk in sorted(set(ra) - set(rb)):
                extra = ""
                if rk == "none":
                    why = ka.resp["none"].unanswered if "none" in ka.resp else {}
                    extra = " (%s)" % ", ".join("%s ×%d" % kv for kv in sorted(why.items())) \
                        if why else ""
                diffs.append("response %s (×%d) only on %s%s" % (resp_label(rk), ra[rk], la,
                                                                 extra))
            for rk in sorted(set(rb) - set(ra)):
                extra = ""
                if rk == "none":
                    why = kb.resp["none"].unanswered if "none" in kb.resp else {}
                    extra = " (%s)" % ", ".join("%s ×%d" % kv for kv in sorted(why.items())) \
                        if why else ""
                diffs.append("response %s (×%d) only on %s%s" % (resp_label(rk), rb[rk], lb,
                                                                 extra))
            for rk in sorted(set(ra) & set(rb)):
                if rk in ("none", "oneway"):
                    continue
                sub = diff_aggs(ka.resp.get(rk, ShapeAgg()), kb.resp.get(rk, ShapeAgg()),
                                la, lb, max_list, depth)
                diffs.extend("response %s: %s" % (resp_label(rk), d) for d in sub)
            req = diff_aggs(ka.req, kb.req, la, lb, max_list, depth, what="request")
            if key[1] == "s2c":
                # The broker's own requests to clients are answers of the broker's making.
                diffs.extend("request: %s" % d for d in req)
            elif req:
                request_notes.append((key, req))
        rows.append((key, na, nb, ra, rb, len(diffs)))
        if diffs:
            sections.append((key, diffs))

    lines = []
    lines.append("# Wire differences: %s against %s" % (la, lb))
    lines.append("")
    for rec, lab in ((subject, la), (reference, lb)):
        total = sum(n for n, _ in rec.totals.values())
        state = "final counts" if rec.final else (
            "counts of a proxy that did not stop cleanly" if rec.counts else
            "no counts record: counted from samples")
        lines.append("- **%s**: `%s`, %d exchanges (%s), %d proxy errors%s"
                     % (lab, rec.path, total, state, rec.error_count,
                        ", %d unreadable lines" % rec.bad_lines if rec.bad_lines else ""))
        if rec.suite:
            lines.append("  - suite: %s" % rec.suite[0])
            for line in rec.suite[1:]:
                lines.append("  - %s" % line)
    lines.append("")
    lines.append("Compared per request code: response codes; for each response code seen on "
                 "both sides the extFields names and value types (int and long count as one "
                 "type, a number), remark presence, serialize type, body shape (JSON keys and "
                 "types to depth %d, message-record properties, config keys, length class). "
                 "Not compared: values (offsets, ids, times, names). ns = name-server port, "
                 "⇢ client = requests the broker sent to clients." % depth)
    lines.append("")
    lines.append("## Summary")
    lines.append("")
    lines.append("| code | name | where | %s | %s | %s responses | %s responses | differences |"
                 % (la, lb, la, lb))
    lines.append("|---:|---|---|---:|---:|---|---|---:|")
    for key, na, nb, ra, rb, nd in rows:
        lines.append("| %d | %s | %s | %d | %d | %s | %s | %s |"
                     % (key[2], request_name(key[2]), where(key), na, nb, fmt_resp(ra),
                        fmt_resp(rb), nd if nd else "–"))
    lines.append("")
    lines.extend(conventions(agg_a, agg_b, la, lb))
    lines.append("## Differences per request code")
    lines.append("")
    if not sections:
        lines.append("None found.")
        lines.append("")
    for key, diffs in sections:
        lines.append("### %d %s (%s)" % (key[2], request_name(key[2]), where(key)))
        lines.append("")
        for d in diffs:
            lines.append("- " + d)
        lines.append("")
    if request_notes:
        lines.append("## Request differences (same clients; informational)")
        lines.append("")
        for key, notes in request_notes:
            lines.append("### %d %s (%s)" % (key[2], request_name(key[2]), where(key)))
            lines.append("")
            for d in notes:
                lines.append("- " + d)
            lines.append("")
    for rec, lab in ((subject, la), (reference, lb)):
        if rec.notes:
            lines.append("## Proxy notes on %s" % lab)
            lines.append("")
            for e in rec.notes:
                lines.append("- " + e)
            lines.append("")
    for rec, lab in ((subject, la), (reference, lb)):
        if rec.errors:
            lines.append("## Proxy errors on %s (first %d of %d)" % (lab, len(rec.errors),
                                                                      rec.error_count))
            lines.append("")
            for e in rec.errors:
                lines.append("- " + e)
            lines.append("")
    return "\n".join(lines)


def conventions(agg_a, agg_b, la, lb):
    """Header conventions over all answers (and broker-sent requests): serialize type,
    language, version, JSON header keys; values that only some codes use are named."""
    def collect(aggs):
        total = ShapeAgg()
        per_code = []
        for key, ka in sorted(aggs.items()):
            parts = list(ka.resp.values()) if key[1] == "c2s" else [ka.req]
            for s in parts:
                total.n += s.n
                total.ser.update(s.ser)
                total.lang.update(s.lang)
                total.ver.update(s.ver)
                total.hdr.update(s.hdr)
                total.json_headers += s.json_headers
                per_code.append((key, s))
        return total, per_code

    def describe(total, per_code, field):
        counter = getattr(total, field)
        if not counter:
            return "–"
        common = counter.most_common(1)[0][0]
        text = "%s" % common
        odd = collections.defaultdict(set)
        for key, s in per_code:
            for value in getattr(s, field):
                if value != common:
                    odd[value].add("%d %s%s" % (key[2], request_name(key[2]),
                                                " (⇢ client)" if key[1] == "s2c" else ""))
        for value, codes in sorted(odd.items()):
            text += "; %s in %s" % (value, ", ".join(sorted(codes)))
        return text

    (ta, ca), (tb, cb) = collect(agg_a), collect(agg_b)
    lines = ["## Header conventions (all answers and broker-sent requests)", ""]
    lines.append("| | %s | %s |" % (la, lb))
    lines.append("|---|---|---|")
    for name, field in (("serialize type", "ser"), ("language", "lang"), ("version", "ver")):
        lines.append("| %s | %s | %s |" % (name, describe(ta, ca, field), describe(tb, cb, field)))
    lines.append("| JSON header keys | %s | %s |" % (fmt_list(sorted(ta.hdr), 20),
                                                    fmt_list(sorted(tb.hdr), 20)))
    da, db = [], []
    for k in sorted(set(ta.hdr) | set(tb.hdr)):
        pa = presence(ta.hdr[k], ta.json_headers)
        pb = presence(tb.hdr[k], tb.json_headers)
        if pa != pb:
            da.append("`%s` %s" % (k, pa))
            db.append("`%s` %s" % (k, pb))
    if da:
        lines.append("| key presence differs | %s | %s |" % ("; ".join(da), "; ".join(db)))
    lines.append("")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("subject", help="recording of the broker under test (ringmq)")
    p.add_argument("reference", help="recording of the reference broker (RocketMQ)")
    p.add_argument("--out", help="also write the markdown here")
    p.add_argument("--depth", type=int, default=8, help="JSON shape depth compared")
    p.add_argument("--max-list", type=int, default=20, help="differences listed per item")
    args = p.parse_args(argv)
    recs = []
    for path in (args.subject, args.reference):
        try:
            recs.append(Recording(path))
        except OSError as e:
            print("report.py: cannot read %s: %s" % (path, e), file=sys.stderr)
            return 2
    text = build(recs[0], recs[1], args.max_list, args.depth)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
