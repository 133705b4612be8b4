"""wirediff: the differential wire check between ringmq and Apache RocketMQ 5.5.0.

README
======

What it answers: for every request code stock clients send, where do ringmq's answers
differ from RocketMQ's in *shape* -- response code, extFields names and value types (int,
long, float, bool, json, empty, str; int and long compare as one number type), remark
present or not, serialize type, and body shape (empty; JSON keys and value types to a depth,
with data-keyed objects collapsed into maps; message records' magic, SYSFLAG bits and property
keys; config keys; length class of other bytes). Values (offsets, ids, times, names) are not
compared. Requests the broker sends to clients (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE, ...) are compared the same way.

Pieces (Python 3 standard library only):

* ``proxy.py``  -- asyncio recording proxy: a name-server port, a broker port (and the
  fast channel at broker port - 2), 127.0.0.1 only, forwarding frame by frame; rewrites the
  upstream broker address in JSON answers (routes, cluster info) to its own so clients that
  follow routes come back through it; records shapes, never bodies, to JSONL.
* ``report.py`` -- compares two recordings, prints markdown.
* ``codec.py``  -- frames, JSON and binary headers, fastjson-dialect JSON, shapes.
* ``codes.py``  -- request/response code names (RocketMQ 5.5.0).
* ``test_codec.py`` -- self-test, no broker needed:
  ``python3 -m unittest discover -s scripts/wirediff``

The whole check (both brokers, the Java scenario suite, mqadmin commands, the report)::

    scripts/wire-diff.sh                    # both, then target/wire-diff/report.md
    scripts/wire-diff.sh both -Dtest=SendModesTest
    scripts/wire-diff.sh ringmq             # re-record one side, report against the other
    scripts/wire-diff.sh report             # remake the report only
    MQADMIN=0 scripts/wire-diff.sh          # without the mqadmin round

It uses target/release/ringmq (RINGMQ_BIN overrides; it never builds), runs the suite from a
snapshot of tests/java copied to target/wire-diff/java (both brokers see the same scenarios),
gives the suite a directory whose env names the proxy and whose control script restarts the
real broker, and keeps recordings, Maven logs, proxy logs and surefire reports in
target/wire-diff/.

Standalone, in front of any broker (e.g. for mqadmin by hand)::

    python3 scripts/wirediff/proxy.py --namesrv-upstream 127.0.0.1:9876 \\
        --broker-upstream 127.0.0.1:10911 --record /tmp/a.jsonl --label rocketmq
    # prints NAMESRV_ADDR=127.0.0.1:P / BROKER_ADDR=127.0.0.1:Q; point clients at them
    # (mqadmin ... -n 127.0.0.1:P), stop with Ctrl-C, record the other broker the same way:
    python3 scripts/wirediff/report.py /tmp/b.jsonl /tmp/a.jsonl --out /tmp/report.md

Limits:

* Only what goes through the proxy is seen. A client that takes a broker address from
  elsewhere than a route -- e.g. from a message id (viewMessage by offsetMsgId decodes the
  STOREHOST) or the store host inside a pulled record -- connects to the broker directly.
* Rewriting covers JSON bodies and header values; addresses inside binary bodies (message
  records' STOREHOST, msgId) are left alone, as rewriting them would change the values.
* A real broker's registration with its name server does not pass the proxy (it is not a
  client's traffic), so REGISTER_BROKER is not compared.
* Shapes are heuristics: an object is a map when its keys do not look like Java field names
  (lowerCamelCase) or when its field is a known map (codec.MAP_FIELDS); a map whose keys all
  happen to look like fields is compared as an object.
* Counts and response-code mixes depend on timing (long polls, retries of a failing
  scenario, route registration delays), so a response code seen on one side only is a lead,
  not always a bug; a code that fails on one broker often shows up there many more times.
* Samples: per (role, direction, code) the first 5 exchanges and every new shape (up to 64)
  are written; the counts are complete. "sometimes/always" presence is over those samples.
"""
