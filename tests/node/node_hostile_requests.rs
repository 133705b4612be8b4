//! Well-formed requests with hostile contents: each is refused with a clear code and the
//! node keeps serving everyone else.
//!
//! - A physical offset that points inside a stored body at bytes forged to look like a
//!   record (magic, size, own offset, CRC) is no record: VIEW_MESSAGE_BY_ID finds nothing
//!   and CONSUMER_SEND_MSG_BACK writes nothing.
//! - UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER on a system topic are refused as
//!   RocketMQ 5 refuses them, and the delayed, timed and POP messages the node keeps in
//!   those topics are delivered as if nothing had been asked.
//! - A BATCH_ACK_MESSAGE whose bitsets set more bits than a pop hands out is refused at
//!   once; pings from another connection are answered within 100 ms meanwhile. So is one
//!   with more entries or bitset bytes than `maxBatchAckEntries` and
//!   `maxBatchAckBitsetBytes` allow.
//! - Parked pops are bounded per connection (past it POLLING_FULL at once) and end with
//!   their connection, so a client that parks many and hangs up leaves nothing parked.
//!   Parked pops of any queue whose queues are on other shards too cost nothing while
//!   parked (no look at the other shards) and are woken by an arrival on any shard.
//! - A heartbeat that registers thousands of subscriptions or a megabyte expression is
//!   refused whole (INVALID_PARAMETER naming the bound) while pings stay under 100 ms;
//!   past `maxClientRegistrations` in the client table a heartbeat registering more is
//!   SYSTEM_BUSY, counted; 2,000 clients heartbeating at once over eight connections
//!   leave pings under 100 ms.
//! - A flood of heartbeats naming new groups leaves pings under 100 ms (the subscription
//!   group table is written off the reactor, many creations to a write); auto-creation
//!   stops at `maxSubscriptionGroups`, counted.

use crate::common;

use std::time::{Duration, Instant};

use common::raw::Raw;
use common::{command, message};
use ringmq::broker::delay::DelayLevels;
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v1, send_request_v2};
use ringmq::remoting::RemotingCommand;
use ringmq::store::{properties, record};

/// Longest a test waits for a delivery.
/// Longest a test waits for a delivery (and, shorter than a parked pop's 20 s, for a
/// hung-up connection's pops to end).
const PATIENCE: Duration = Duration::from_secs(10);

/// Sends `body` to `topic` queue 0; its physical offset.
fn send(raw: &mut Raw, topic: &str, body: &[u8]) -> u64 {
    let answer = raw.call(send_request_v2(topic, 0, body, None, None));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    decode_offset_msg_id(&answer.ext_fields["msgId"]).unwrap().1
}

fn view(raw: &mut Raw, phys: u64) -> ringmq::remoting::RemotingCommand {
    raw.call(command(
        request::VIEW_MESSAGE_BY_ID,
        &[("offset", &phys.to_string())],
    ))
}

/// A record claiming to be `topic` queue 0 offset 0 at `phys`, valid in every byte.
fn forged_record(topic: &str, phys: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let input = message(topic, 0, b"forged", Some("Forged"), None);
    record::encode_into(&input, 0, phys as i64, 1_700_000_000_000, &mut out).unwrap();
    out
}

#[test]
fn an_offset_inside_a_body_that_mimics_a_record_is_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    let topic = "Carrier";
    // A carrier of the forged record's length tells where the next one (same length,
    // same headers) lands, and where its body starts inside it.
    let len = forged_record(topic, 0).len();
    let first = send(&mut raw, topic, &vec![b'x'; len]);
    let first_view = view(&mut raw, first);
    assert_eq!(first_view.code, response::SUCCESS, "{first_view:?}");
    let first_bytes = first_view.body.to_vec();
    let body_at = first_bytes
        .windows(len)
        .position(|w| w.iter().all(|b| *b == b'x'))
        .expect("the carrier's body inside its record");
    let second_at = first + first_bytes.len() as u64;
    let forged_at = second_at + body_at as u64;
    let second = send(&mut raw, topic, &forged_record(topic, forged_at));
    assert_eq!(second, second_at, "the carrier landed where predicted");

    let viewed = view(&mut raw, forged_at);
    assert_eq!(viewed.code, response::SYSTEM_ERROR, "{viewed:?}");
    let sent_back = raw.call(command(
        request::CONSUMER_SEND_MSG_BACK,
        &[
            ("offset", &forged_at.to_string()),
            ("group", "forger"),
            ("delayLevel", "-1"),
            ("originTopic", topic),
        ],
    ));
    assert_eq!(sent_back.code, response::SYSTEM_ERROR, "{sent_back:?}");
    assert!(
        sent_back
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("look message by offset failed"),
        "{sent_back:?}"
    );
    // Nothing went to the dead-letter queue, and the real records are still found.
    let mut pull = pull_request("%DLQ%forger", 0, 0, 32, Some(Duration::ZERO), None);
    pull.ext_fields.insert("consumerGroup".into(), "forger");
    let dlq = raw.call(pull);
    assert_ne!(dlq.code, response::SUCCESS, "{dlq:?}");
    assert_eq!(view(&mut raw, second).code, response::SUCCESS);
    node.shutdown().unwrap();
}

/// A SEND_MESSAGE of `body` to `topic` queue 0 with the extra properties `extra`.
fn send_with(raw: &mut Raw, topic: &str, body: &str, extra: &[(&str, &str)]) {
    let mut send = send_request_v1(topic, 0, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    for (key, value) in extra {
        properties::push_pair(&mut props, key, value);
    }
    send.put_ext("properties", props);
    let answer = raw.call(send);
    assert_eq!(answer.code, response::SUCCESS, "{topic}: {answer:?}");
}

fn max_offset(raw: &mut Raw, topic: &str) -> i64 {
    let answer = raw.call(ringmq::client::queue_request(
        request::GET_MAX_OFFSET,
        topic,
        0,
    ));
    answer.ext_fields["offset"].parse().unwrap()
}

fn pop_request(group: &str, topic: &str, invisible_ms: i64) -> RemotingCommand {
    command(
        request::POP_MESSAGE,
        &[
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", "0"),
            ("maxMsgNums", "32"),
            ("invisibleTime", &invisible_ms.to_string()),
            ("pollTime", "0"),
            ("bornTime", "0"),
            ("initMode", "0"),
        ],
    )
}

fn set_pop_mode(raw: &mut Raw, topic: &str, group: &str) {
    let body = serde_json::json!({"topic": topic, "consumerGroup": group, "mode": "POP"});
    let answer =
        raw.call(command(request::SET_MESSAGE_REQUEST_MODE, &[]).with_body(body.to_string()));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

/// Waits (bounded) until `what` holds.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn admin_requests_cannot_create_change_or_delete_system_topics() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.message_delay_level = DelayLevels::parse("1s 2s").unwrap();
    options.timer_max_delay_sec = 60;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    // In flight meanwhile: a delayed message, a timed one and an unacknowledged pop.
    send_with(&mut raw, "Delayed", "d", &[("DELAY", "1")]);
    let due = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1_000;
    send_with(
        &mut raw,
        "Timed",
        "t",
        &[("TIMER_DELIVER_MS", &due.to_string())],
    );
    common::create_topic(&mut raw, "Popped", 1);
    set_pop_mode(&mut raw, "Popped", "popper");
    send_with(&mut raw, "Popped", "p", &[]);
    let popped = raw.call(pop_request("popper", "Popped", 1_000));
    assert_eq!(popped.code, response::SUCCESS, "{popped:?}");

    for topic in [
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_wheel_timer",
        "rmq_sys_ringmq_pop_log",
        "TBW102",
    ] {
        let expected = format!("The topic[{topic}] is conflict with system topic.");
        let created = raw.call(command(
            request::UPDATE_AND_CREATE_TOPIC,
            &[
                ("topic", topic),
                ("readQueueNums", "1"),
                ("writeQueueNums", "1"),
                ("perm", "2"),
                ("topicFilterType", "SINGLE_TAG"),
            ],
        ));
        assert_eq!(created.code, response::SYSTEM_ERROR, "{topic}: {created:?}");
        assert_eq!(created.remark.as_deref(), Some(expected.as_str()));
        let deleted = raw.call(command(
            request::DELETE_TOPIC_IN_BROKER,
            &[("topic", topic)],
        ));
        assert_eq!(deleted.code, response::SYSTEM_ERROR, "{topic}: {deleted:?}");
        assert_eq!(deleted.remark.as_deref(), Some(expected.as_str()));
    }

    wait_until("the delayed message", || {
        max_offset(&mut raw, "Delayed") == 1
    });
    wait_until("the timed message", || max_offset(&mut raw, "Timed") == 1);
    wait_until("the pop to come back", || {
        let again = raw.call(pop_request("popper", "Popped", 60_000));
        again.code == response::SUCCESS && common::pull_records(&again.body)[0].reconsume_times == 1
    });
    node.shutdown().unwrap();
}

/// Runs `hostile` on its own thread while this one pings the node (GET_MAX_OFFSET) from
/// another connection until it is done; the slowest ping, which must stay under 100 ms.
fn pings_stay_fast_while(addr: std::net::SocketAddr, hostile: impl FnOnce() + Send + 'static) {
    let mut ping = Raw::connect(addr);
    let runner = std::thread::spawn(hostile);
    let mut slowest = Duration::ZERO;
    let mut pings = 0;
    while !runner.is_finished() || pings == 0 {
        let began = Instant::now();
        let answer = ping.call(ringmq::client::queue_request(
            request::GET_MAX_OFFSET,
            "T",
            0,
        ));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        slowest = slowest.max(began.elapsed());
        pings += 1;
    }
    runner.join().expect("the hostile client's checks");
    assert!(
        slowest < Duration::from_millis(100),
        "the slowest of {pings} pings took {slowest:?} while the hostile request ran"
    );
}

#[test]
fn a_batch_ack_setting_more_bits_than_a_pop_hands_out_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    set_pop_mode(&mut raw, "T", "acker");
    send_with(&mut raw, "T", "x", &[]);
    let popped = raw.call(pop_request("acker", "T", 60_000));
    assert_eq!(popped.code, response::SUCCESS, "{popped:?}");
    let pop_time: i64 = popped.ext_fields["popTime"].parse().unwrap();
    // Every bit of 64 KiB set, in each of 20 entries: half a million offsets each.
    let bits = common::encode_base64(&vec![0xFF; 64 * 1024]);
    let acks: Vec<serde_json::Value> = (0..20)
        .map(|_| {
            serde_json::json!({"c": "acker", "t": "T", "r": "0", "so": 0, "q": 0, "rq": 0,
                               "pt": pop_time, "it": 60_000, "b": bits})
        })
        .collect();
    let body = serde_json::json!({"brokerName": "broker-a", "acks": acks}).to_string();
    let addr = node.addr();
    pings_stay_fast_while(addr, move || {
        let mut hostile = Raw::connect(addr);
        let answer = hostile.call(command(request::BATCH_ACK_MESSAGE, &[]).with_body(body));
        assert_eq!(answer.code, response::INVALID_PARAMETER, "{answer:?}");
        assert!(
            answer.remark.as_deref().unwrap_or("").contains("bits"),
            "{answer:?}"
        );
    });
    // Nothing was acknowledged: the message is still in flight.
    let committed = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[("consumerGroup", "acker"), ("topic", "T"), ("queueId", "0")],
    ));
    assert_eq!(
        committed.ext_fields["offset"].to_string(),
        "0",
        "{committed:?}"
    );
    node.shutdown().unwrap();
}

/// A BATCH_ACK_MESSAGE body of `entries` entries acknowledging from offset 0 of `T`
/// queue 0 with the bitset `bits` each.
fn batch_ack_body(group: &str, pop_time: i64, entries: usize, bits: &[u8]) -> String {
    let acks: Vec<serde_json::Value> = (0..entries)
        .map(|_| {
            serde_json::json!({"c": group, "t": "T", "r": "0", "so": 0, "q": 0, "rq": 0,
                               "pt": pop_time, "it": 60_000, "b": bits})
        })
        .collect();
    serde_json::json!({"brokerName": "broker-a", "acks": acks}).to_string()
}

#[test]
fn batch_acks_past_the_configured_entry_and_bitset_bounds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.max_batch_ack_entries = 2;
    options.max_batch_ack_bitset_bytes = 8;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    set_pop_mode(&mut raw, "T", "acker");
    send_with(&mut raw, "T", "x", &[]);
    let popped = raw.call(pop_request("acker", "T", 60_000));
    assert_eq!(popped.code, response::SUCCESS, "{popped:?}");
    let pop_time: i64 = popped.ext_fields["popTime"].parse().unwrap();
    let refused = |raw: &mut Raw, body: String, key: &str| {
        let answer = raw.call(command(request::BATCH_ACK_MESSAGE, &[]).with_body(body));
        assert_eq!(answer.code, response::INVALID_PARAMETER, "{answer:?}");
        assert!(
            answer.remark.as_deref().unwrap_or("").contains(key),
            "{answer:?}"
        );
    };
    // Three entries where two are allowed; nine bytes of bitset where eight are.
    refused(
        &mut raw,
        batch_ack_body("acker", pop_time, 3, &[1]),
        "maxBatchAckEntries",
    );
    refused(
        &mut raw,
        batch_ack_body("acker", pop_time, 1, &[1, 0, 0, 0, 0, 0, 0, 0, 0]),
        "maxBatchAckBitsetBytes",
    );
    refused(
        &mut raw,
        batch_ack_body("acker", pop_time, 2, &[1, 0, 0, 0, 0]),
        "maxBatchAckBitsetBytes",
    );
    // Within both bounds it acknowledges.
    let fine = raw.call(
        command(request::BATCH_ACK_MESSAGE, &[]).with_body(batch_ack_body(
            "acker",
            pop_time,
            2,
            &[1, 0, 0, 0],
        )),
    );
    assert_eq!(fine.code, response::SUCCESS, "{fine:?}");
    let committed = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[("consumerGroup", "acker"), ("topic", "T"), ("queueId", "0")],
    ));
    assert_eq!(&committed.ext_fields["offset"], "1", "{committed:?}");
    node.shutdown().unwrap();
}

/// A pop of any queue of `topic` that parks for up to `poll_ms`.
fn parked_pop(group: &str, topic: &str, poll_ms: i64) -> RemotingCommand {
    let mut pop = pop_request(group, topic, 60_000);
    pop.put_ext("queueId", "-1");
    pop.put_ext("pollTime", poll_ms.to_string());
    pop
}

#[test]
fn parked_pops_beyond_a_connections_bound_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    set_pop_mode(&mut raw, "T", "parker");
    // The default bound is 256 parked requests per connection.
    for _ in 0..300 {
        raw.send(parked_pop("parker", "T", 20_000));
    }
    for n in 0..44 {
        let refused = raw.next(Duration::from_secs(5), |frame| frame.is_response());
        assert_eq!(
            refused.code,
            response::POLLING_FULL,
            "answer {n}: {refused:?}"
        );
        assert!(
            refused
                .remark
                .as_deref()
                .unwrap_or("")
                .contains("connection"),
            "{refused:?}"
        );
    }
    node.shutdown().unwrap();
}

#[test]
fn parked_pops_end_with_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    // One shard, so both connections count against the same bound.
    options.shards = 1;
    options.max_parked_pulls = 10;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    set_pop_mode(&mut raw, "T", "parker");
    let mut hangs_up = Raw::connect(node.addr());
    for _ in 0..11 {
        hangs_up.send(parked_pop("parker", "T", 20_000));
    }
    // Ten park and fill the node's bound: the eleventh is refused.
    let full = hangs_up.next(Duration::from_secs(5), |frame| frame.is_response());
    assert_eq!(full.code, response::POLLING_FULL, "{full:?}");
    drop(hangs_up);
    // Well before the parked pops' 20 s: a pop parks again (and times out) instead of
    // being refused.
    wait_until("the hung-up connection's pops to end", || {
        raw.call(parked_pop("parker", "T", 50)).code == response::POLLING_TIMEOUT
    });
    node.shutdown().unwrap();
}

/// Requests sent to another shard's mailbox so far, all shards.
fn forwarded(node: &ringmq::node::NodeHandle) -> u64 {
    node.metrics()
        .shards()
        .iter()
        .map(|shard| shard.forwarded.load(std::sync::atomic::Ordering::Relaxed))
        .sum()
}

/// Requests parked right now, all shards (sampled once a second).
fn parked(node: &ringmq::node::NodeHandle) -> u64 {
    counted(node, |shard| {
        shard
            .parked_pulls
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(0) as u64
    })
}

#[test]
fn parked_pops_of_any_queue_cost_nothing_and_wake_on_another_shards_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    // Two shards, and two queues: each shard owns one, so every pop of any queue has a
    // queue on the other shard, whichever shard its connection landed on.
    options.shards = 2;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 2);
    set_pop_mode(&mut raw, "T", "parker");
    let mut parker = Raw::connect(node.addr());
    for _ in 0..200 {
        parker.send(parked_pop("parker", "T", 20_000));
    }
    wait_until("200 pops to park", || parked(&node) == 200);
    // Parked, they look at no queue of the other shard: nothing crosses a mailbox.
    let before = forwarded(&node);
    std::thread::sleep(Duration::from_secs(2));
    let polled = forwarded(&node) - before;
    assert_eq!(
        polled, 0,
        "200 parked pops sent {polled} requests to the other shard in 2 s"
    );
    // A message on either queue (one of them is on the other shard) is handed out at once.
    for queue in 0..2 {
        let began = Instant::now();
        let sent = raw.call(send_request_v2("T", queue, b"wake", None, None));
        assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        let popped = parker.next(Duration::from_secs(5), |frame| frame.is_response());
        assert_eq!(popped.code, response::SUCCESS, "queue {queue}: {popped:?}");
        let took = began.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "the pop of queue {queue}'s message was answered {took:?} after the send"
        );
    }
    node.shutdown().unwrap();
}

/// A consumer heartbeat of `client` in `group` with `subscriptions` subscriptions, each
/// with the expression `expression`.
fn heartbeat(client: &str, group: &str, subscriptions: usize, expression: &str) -> RemotingCommand {
    let subs: Vec<serde_json::Value> = (0..subscriptions)
        .map(|n| {
            serde_json::json!({"classFilterMode": false, "topic": format!("T{n}"),
                "subString": expression, "tagsSet": [], "codeSet": [],
                "subVersion": 1_700_000_000_000_i64, "expressionType": "TAG"})
        })
        .collect();
    let body = serde_json::json!({
        "clientID": client,
        "producerDataSet": [],
        "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": false, "subscriptionDataSet": subs}],
        "heartbeatFingerprint": 0,
        "withoutSub": false
    });
    command(request::HEART_BEAT, &[]).with_body(body.to_string())
}

#[test]
fn a_heartbeat_with_thousands_of_subscriptions_or_a_huge_expression_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let addr = node.addr();
    pings_stay_fast_while(addr, move || {
        let mut hostile = Raw::connect(addr);
        for n in 0..20 {
            let many = hostile.call(heartbeat(&format!("c{n}"), "many", 5_000, "*"));
            assert_eq!(many.code, response::INVALID_PARAMETER, "{many:?}");
            assert!(
                many.remark
                    .as_deref()
                    .unwrap_or("")
                    .contains("subscriptions"),
                "{many:?}"
            );
        }
        let huge = hostile.call(heartbeat("c", "huge", 1, &"a||".repeat(350_000)));
        assert_eq!(huge.code, response::INVALID_PARAMETER, "{huge:?}");
        assert!(
            huge.remark.as_deref().unwrap_or("").contains("bytes"),
            "{huge:?}"
        );
    });
    // An ordinary one is registered.
    let mut raw = Raw::connect(addr);
    let fine = raw.call(heartbeat("ok", "fine", 2, "TagA || TagB"));
    assert_eq!(fine.code, response::SUCCESS, "{fine:?}");
    node.shutdown().unwrap();
}

/// Sends `beats` pipelined from one connection, in rounds of 100, and checks every answer.
fn heartbeat_flood(raw: &mut Raw, beats: Vec<RemotingCommand>, expected: i32) {
    for round in beats.chunks(100) {
        for beat in round {
            raw.send(beat.clone());
        }
        for _ in round {
            let answer = raw.next(PATIENCE, |frame| frame.is_response());
            assert_eq!(answer.code, expected, "{answer:?}");
        }
    }
}

/// Sums a counter of every shard's metrics.
fn counted(
    node: &ringmq::node::NodeHandle,
    pick: fn(&ringmq::metrics::ShardMetrics) -> u64,
) -> u64 {
    node.metrics()
        .shards()
        .iter()
        .map(|shard| pick(shard))
        .sum()
}

#[test]
fn a_flood_of_heartbeats_with_new_group_names_keeps_pings_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    // One shard: the pings share the reactor that creates the groups.
    options.shards = 1;
    let node = ringmq::node::start(options).unwrap();
    let addr = node.addr();
    pings_stay_fast_while(addr, move || {
        let mut hostile = Raw::connect(addr);
        let beats = (0..2_000)
            .map(|n| heartbeat(&format!("c{n}"), &format!("new-group-{n}"), 1, "*"))
            .collect();
        heartbeat_flood(&mut hostile, beats, response::SUCCESS);
    });
    // Every group reaches the file, written off the reactor.
    let file = dir.path().join("config").join("subscriptionGroup.json");
    wait_until("the flood's groups in subscriptionGroup.json", || {
        std::fs::read_to_string(&file).is_ok_and(|text| text.contains("\"new-group-1999\""))
    });
    node.shutdown().unwrap();
}

#[test]
fn auto_creation_stops_at_max_subscription_groups_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    // TOOLS_CONSUMER and two more.
    options.max_subscription_groups = 3;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    let pull = |raw: &mut Raw, group: &str| {
        let mut pull = pull_request("T", 0, 0, 1, None, None);
        pull.put_ext("consumerGroup", group);
        raw.call(pull)
    };
    for group in ["a", "b"] {
        let pulled = pull(&mut raw, group);
        assert_ne!(
            pulled.code,
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            "{group}: {pulled:?}"
        );
    }
    let refused = pull(&mut raw, "c");
    assert_eq!(
        refused.code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST,
        "{refused:?}"
    );
    assert!(
        refused
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("maxSubscriptionGroups"),
        "{refused:?}"
    );
    // A heartbeat of a new group still registers its client; the group is not created.
    let beat = raw.call(heartbeat("c@1", "d", 1, "*"));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let all = raw.call(command(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]));
    let table: serde_json::Value = serde_json::from_slice(&all.body).unwrap();
    let names: Vec<&String> = table["subscriptionGroupTable"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(names, ["TOOLS_CONSUMER", "a", "b"]);
    assert_eq!(
        counted(&node, |shard| shard
            .subscription_groups_refused
            .load(std::sync::atomic::Ordering::Relaxed)),
        2
    );
    // Groups that exist are served at the bound.
    assert_ne!(
        pull(&mut raw, "a").code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST
    );
    node.shutdown().unwrap();
}

#[test]
fn heartbeats_past_max_client_registrations_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.max_client_registrations = 10;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    for n in 0..10 {
        let beat = raw.call(heartbeat(&format!("c{n}@1"), "g", 1, "*"));
        assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    }
    let refused = raw.call(heartbeat("c10@1", "g", 1, "*"));
    assert_eq!(refused.code, response::SYSTEM_BUSY, "{refused:?}");
    assert!(
        refused
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("maxClientRegistrations"),
        "{refused:?}"
    );
    // A client already registered keeps heartbeating.
    let again = raw.call(heartbeat("c0@1", "g", 1, "*"));
    assert_eq!(again.code, response::SUCCESS, "{again:?}");
    let members = raw.call(command(
        request::GET_CONSUMER_LIST_BY_GROUP,
        &[("consumerGroup", "g")],
    ));
    let list: serde_json::Value = serde_json::from_slice(&members.body).unwrap();
    assert_eq!(list["consumerIdList"].as_array().unwrap().len(), 10);
    assert_eq!(
        counted(&node, |shard| shard
            .heartbeats_refused
            .load(std::sync::atomic::Ordering::Relaxed)),
        1
    );
    node.shutdown().unwrap();
}

#[test]
fn many_clients_heartbeating_at_once_keep_pings_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.shards = 1;
    let node = ringmq::node::start(options).unwrap();
    let addr = node.addr();
    // The heartbeating connections stay open until the check below: a closed connection
    // unregisters its clients, as RocketMQ's channel close does.
    let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = open.clone();
    pings_stay_fast_while(addr, move || {
        // Eight connections of 250 clients each, every client in its own group with
        // eight subscriptions, all at once.
        let connections: Vec<_> = (0..8)
            .map(|connection| {
                std::thread::spawn(move || {
                    let mut raw = Raw::connect(addr);
                    let beats = (0..250)
                        .map(|n| {
                            let client = format!("client-{connection}-{n}@1");
                            heartbeat(&client, &format!("app-{connection}-{n}"), 8, "TagA || TagB")
                        })
                        .collect();
                    heartbeat_flood(&mut raw, beats, response::SUCCESS);
                    raw
                })
            })
            .collect();
        for connection in connections {
            let raw = connection
                .join()
                .expect("a heartbeating connection's checks");
            kept.lock().unwrap().push(raw);
        }
    });
    // All 2,000 are registered.
    let mut raw = Raw::connect(addr);
    let members = raw.call(command(
        request::GET_CONSUMER_LIST_BY_GROUP,
        &[("consumerGroup", "app-7-249")],
    ));
    assert_eq!(members.code, response::SUCCESS, "{members:?}");
    drop(open);
    node.shutdown().unwrap();
}
