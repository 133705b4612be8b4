//! POP consumption on a node of two shards: SET_MESSAGE_REQUEST_MODE (401) switches a
//! group to POP in QUERY_ASSIGNMENT's answer; POP_MESSAGE (200050) hands out messages with
//! every response header field; what is not acknowledged (ACK_MESSAGE 200051,
//! BATCH_ACK_MESSAGE 200151 in both bitset encodings) within its invisible time comes
//! back with one more reconsume time, to any member; CHANGE_MESSAGE_INVISIBLETIME
//! (200053) gives a new handle and voids the old; past the group's `retryMaxTimes` a
//! message goes to `%DLQ%<group>`; the committed offset is the lowest offset in flight;
//! a parked pop wakes on an arrival; the in-flight state survives a restart. Bad input
//! gets a clear status with the header fields the clients decode.

use crate::common;

use std::time::{Duration, Instant};

use common::command;
use common::raw::Raw;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v1};
use ringmq::remoting::RemotingCommand;

const TOPIC: &str = "Popped";
const GROUP: &str = "pop-group";
const QUEUES: i32 = 4;

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options
}

fn set_pop_mode(raw: &mut Raw, topic: &str, group: &str, mode: &str) -> RemotingCommand {
    let body = serde_json::json!({"topic": topic, "consumerGroup": group, "mode": mode});
    raw.call(command(request::SET_MESSAGE_REQUEST_MODE, &[]).with_body(body.to_string()))
}

fn pop(raw: &mut Raw, queue: i32, max: i32, invisible_ms: i64, poll_ms: i64) -> RemotingCommand {
    let (queue, max, invisible, poll) = (
        queue.to_string(),
        max.to_string(),
        invisible_ms.to_string(),
        poll_ms.to_string(),
    );
    raw.call(command(
        request::POP_MESSAGE,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", &queue),
            ("maxMsgNums", &max),
            ("invisibleTime", &invisible),
            ("pollTime", &poll),
            ("bornTime", "0"),
            ("initMode", "0"),
        ],
    ))
}

/// A popped message as the client sees it: queue, offset, reconsume times, body, and the
/// handle fields it acks with.
#[derive(Clone, Debug)]
struct Popped {
    queue: i32,
    offset: u64,
    reconsume_times: i32,
    body: String,
    pop_time: i64,
    start: u64,
}

/// Checks the header fields every pop response carries, and reads the messages.
fn popped(answer: &RemotingCommand) -> Vec<Popped> {
    for field in ["popTime", "invisibleTime", "reviveQid", "restNum"] {
        let value = answer
            .ext_fields
            .get(field)
            .unwrap_or_else(|| panic!("{field} missing in {answer:?}"));
        assert!(value.parse::<i64>().is_ok(), "{field}={value}");
    }
    assert!(
        answer.ext_fields["restNum"].parse::<u64>().is_ok(),
        "restNum is never negative: {answer:?}"
    );
    if answer.code != response::SUCCESS {
        return Vec::new();
    }
    let pop_time: i64 = answer.ext_fields["popTime"].parse().unwrap();
    let start_info = answer.ext_fields["startOffsetInfo"].to_string();
    let list_info = answer.ext_fields["msgOffsetInfo"].to_string();
    let start_parts: Vec<&str> = start_info.split(' ').collect();
    assert_eq!(start_parts.len(), 3, "{start_info}");
    assert_eq!(start_parts[0], "0", "mark 0: {start_info}");
    let start: u64 = start_parts[2].parse().unwrap();
    let listed: Vec<u64> = list_info
        .split(' ')
        .nth(2)
        .unwrap()
        .split(',')
        .map(|o| o.parse().unwrap())
        .collect();
    let records = common::pull_records(&answer.body);
    assert_eq!(records.len(), listed.len(), "{list_info}");
    records
        .iter()
        .map(|record| {
            let offset = record.queue_offset as u64;
            assert!(listed.contains(&offset), "{offset} not in {list_info}");
            assert!(offset >= start, "{offset} below the start {start}");
            assert_eq!(start_parts[1], record.queue_id.to_string());
            Popped {
                queue: record.queue_id,
                offset,
                reconsume_times: record.reconsume_times,
                body: String::from_utf8(record.body.to_vec()).unwrap(),
                pop_time,
                start,
            }
        })
        .collect()
}

fn handle(message: &Popped, invisible_ms: i64) -> String {
    format!(
        "{} {} {invisible_ms} 0 0 broker-a {} {}",
        message.start, message.pop_time, message.queue, message.offset
    )
}

fn ack(raw: &mut Raw, message: &Popped) -> RemotingCommand {
    let (queue, offset, extra) = (
        message.queue.to_string(),
        message.offset.to_string(),
        handle(message, 1000),
    );
    raw.call(command(
        request::ACK_MESSAGE,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", &queue),
            ("extraInfo", &extra),
            ("offset", &offset),
        ],
    ))
}

/// A batch ack of `messages` (one pop of one queue), the bitset as the Rust client
/// (byte array) or Java (base64) sends it.
fn batch_ack(raw: &mut Raw, messages: &[&Popped], base64: bool) -> RemotingCommand {
    let first = messages[0];
    let mut bytes = vec![0u8; 8];
    for message in messages {
        let bit = (message.offset - first.start) as usize;
        bytes[bit / 8] |= 1 << (bit % 8);
    }
    let bits = if base64 {
        serde_json::Value::String(common::encode_base64(&bytes))
    } else {
        serde_json::json!(bytes)
    };
    let body = serde_json::json!({
        "brokerName": "broker-a",
        "acks": [{"c": GROUP, "t": TOPIC, "r": "0", "so": first.start, "q": first.queue,
                  "rq": 0, "pt": first.pop_time, "it": 1000, "b": bits}]
    });
    raw.call(command(request::BATCH_ACK_MESSAGE, &[]).with_body(body.to_string()))
}

fn committed(raw: &mut Raw, queue: i32) -> i64 {
    let queue = queue.to_string();
    let answer = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", &queue),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.ext_fields["offset"].parse().unwrap()
}

fn send(raw: &mut Raw, queue: i32, body: &str) {
    let sent = raw.call(send_request_v1(
        TOPIC,
        queue,
        body.as_bytes(),
        Some("T"),
        None,
    ));
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
}

/// Pops `queue` until something comes or `limit` passes.
fn pop_until_found(raw: &mut Raw, queue: i32, invisible_ms: i64, limit: Duration) -> Vec<Popped> {
    let deadline = Instant::now() + limit;
    loop {
        let answer = pop(raw, queue, 32, invisible_ms, 0);
        let found = popped(&answer);
        if !found.is_empty() {
            return found;
        }
        assert_eq!(answer.code, response::POLLING_TIMEOUT, "{answer:?}");
        assert!(
            Instant::now() < deadline,
            "nothing popped from queue {queue} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn setup(raw: &mut Raw) {
    common::create_topic(raw, TOPIC, QUEUES as u32);
    let switched = set_pop_mode(raw, TOPIC, GROUP, "POP");
    assert_eq!(switched.code, response::SUCCESS, "{switched:?}");
}

#[test]
fn a_group_switched_to_pop_is_assigned_every_queue_in_pop_mode() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, TOPIC, QUEUES as u32);
    let assignment = |raw: &mut Raw| {
        let body = serde_json::json!({"topic": TOPIC, "consumerGroup": GROUP,
            "clientId": "c1", "strategyName": "AVG", "messageModel": "CLUSTERING"});
        let answer = raw.call(command(request::QUERY_ASSIGNMENT, &[]).with_body(body.to_string()));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let json: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        json["messageQueueAssignments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["messageQueue"]["queueId"].as_i64().unwrap(),
                    a["mode"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    // No heartbeat: a pull group's unknown client gets nothing.
    assert!(assignment(&mut raw).is_empty());
    setup(&mut raw);
    let pop_queues = assignment(&mut raw);
    assert_eq!(
        pop_queues,
        (0..QUEUES as i64)
            .map(|q| (q, "POP".to_string()))
            .collect::<Vec<_>>()
    );
    // Persisted: a restart keeps the mode.
    drop(raw);
    node.shutdown().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    assert_eq!(assignment(&mut raw), pop_queues);
    // Back to PULL.
    assert_eq!(
        set_pop_mode(&mut raw, TOPIC, GROUP, "PULL").code,
        response::SUCCESS
    );
    assert!(assignment(&mut raw).is_empty());
}

/// The first pop of each queue: its four messages, none consumed before.
fn pop_every_queue_once(raw: &mut Raw, invisible_ms: i64) -> Vec<Popped> {
    let mut first: Vec<Popped> = Vec::new();
    for queue in 0..QUEUES {
        let answer = pop(raw, queue, 32, invisible_ms, 0);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let got = popped(&answer);
        assert_eq!(
            got.iter().map(|m| m.body.clone()).collect::<Vec<_>>(),
            (0..4).map(|i| format!("q{queue}-m{i}")).collect::<Vec<_>>()
        );
        assert!(got.iter().all(|m| m.reconsume_times == 0));
        first.extend(got);
    }
    first
}

/// Queue 0: single acks of all but offset 1. Queue 1: a byte-array batch ack of 0 and 2.
/// Queue 2: a base64 batch ack of everything. Queue 3: nothing acknowledged.
fn acknowledge_some(raw: &mut Raw, first: &[Popped]) {
    for message in first.iter().filter(|m| m.queue == 0 && m.offset != 1) {
        let answer = ack(raw, message);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let q1: Vec<&Popped> = first
        .iter()
        .filter(|m| m.queue == 1 && m.offset % 2 == 0)
        .collect();
    assert_eq!(batch_ack(raw, &q1, false).code, response::SUCCESS);
    let q2: Vec<&Popped> = first.iter().filter(|m| m.queue == 2).collect();
    assert_eq!(batch_ack(raw, &q2, true).code, response::SUCCESS);
    // Acked twice: NO_MESSAGE naming why.
    let twice = ack(raw, first.iter().find(|m| m.queue == 0).unwrap());
    assert_eq!(twice.code, response::NO_MESSAGE, "{twice:?}");
    assert!(
        twice.remark.as_deref().unwrap_or("").contains("in flight"),
        "{twice:?}"
    );
    // The committed offset is the lowest offset still in flight.
    assert_eq!(committed(raw, 0), 1);
    assert_eq!(committed(raw, 1), 1);
    assert_eq!(committed(raw, 2), 4);
    assert_eq!(committed(raw, 3), 0);
}

fn pop_counters_count_deliveries_and_acks(node: &ringmq::node::NodeHandle) {
    let metrics = ringmq::metrics::render(node.metrics().shards());
    let sum = |name: &str| -> u64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(&format!("{name}{{")))
            .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(sum("ringmq_pop_delivered_total"), 16 + 7);
    assert_eq!(sum("ringmq_pop_redelivered_total"), 7);
    assert_eq!(sum("ringmq_pop_acks_total"), 16);
    assert_eq!(sum("ringmq_pop_stale_acks_total"), 2);
}

#[test]
fn unacknowledged_messages_come_back_after_their_invisible_time_and_acks_commit() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    for queue in 0..QUEUES {
        for i in 0..4 {
            send(&mut raw, queue, &format!("q{queue}-m{i}"));
        }
    }
    const INVISIBLE: i64 = 800;
    // Taken before the first pop is sent: every pop time is at or after it.
    let popped_at = Instant::now();
    let first = pop_every_queue_once(&mut raw, INVISIBLE);
    // Nothing more to pop now: POLLING_TIMEOUT with every header field.
    let empty = pop(&mut raw, 0, 32, INVISIBLE, 0);
    assert_eq!(empty.code, response::POLLING_TIMEOUT, "{empty:?}");
    popped(&empty);
    acknowledge_some(&mut raw, &first);

    // After the invisible time, what was not acknowledged comes back, reconsumeTimes 1,
    // to another connection (any member).
    let mut other = Raw::connect(node.addr());
    let mut again: Vec<Popped> = Vec::new();
    for queue in [0, 1, 3] {
        again.extend(pop_until_found(
            &mut other,
            queue,
            INVISIBLE,
            Duration::from_secs(10),
        ));
    }
    assert!(
        popped_at.elapsed() >= Duration::from_millis(INVISIBLE as u64),
        "redelivered after {:?}, before the invisible time",
        popped_at.elapsed()
    );
    let mut keys: Vec<(i32, u64)> = again.iter().map(|m| (m.queue, m.offset)).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![(0, 1), (1, 1), (1, 3), (3, 0), (3, 1), (3, 2), (3, 3)]
    );
    assert!(again.iter().all(|m| m.reconsume_times == 1), "{again:?}");
    let q2_again = pop(&mut other, 2, 32, INVISIBLE, 0);
    assert_eq!(
        q2_again.code,
        response::POLLING_TIMEOUT,
        "acknowledged: {q2_again:?}"
    );
    // The old handle of a redelivered message is stale.
    let old = first
        .iter()
        .find(|m| m.queue == 0 && m.offset == 1)
        .unwrap();
    assert_eq!(ack(&mut raw, old).code, response::NO_MESSAGE);
    for message in &again {
        assert_eq!(
            ack(&mut other, message).code,
            response::SUCCESS,
            "{message:?}"
        );
    }
    for queue in 0..QUEUES {
        assert_eq!(committed(&mut raw, queue), 4, "queue {queue}");
    }
    pop_counters_count_deliveries_and_acks(&node);
    // Pops count as the group's gets, as pulls do (the per-key series are sampled every
    // 10 s on each shard).
    let series =
        format!("ringmq_group_messages_out_total{{group=\"{GROUP}\",topic=\"{TOPIC}\"}} 23");
    common::wait_for(Duration::from_secs(25), &series, || {
        node.metrics().render().lines().any(|line| line == series)
    });
}

#[test]
fn a_changed_invisible_time_gives_a_new_handle_and_voids_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    send(&mut raw, 1, "later");
    let message = pop_until_found(&mut raw, 1, 60_000, Duration::from_secs(5)).remove(0);
    let change = |raw: &mut Raw, message: &Popped, invisible: i64| {
        let (queue, offset, extra, invisible) = (
            message.queue.to_string(),
            message.offset.to_string(),
            handle(message, 60_000),
            invisible.to_string(),
        );
        raw.call(command(
            request::CHANGE_MESSAGE_INVISIBLETIME,
            &[
                ("consumerGroup", GROUP),
                ("topic", TOPIC),
                ("queueId", &queue),
                ("extraInfo", &extra),
                ("offset", &offset),
                ("invisibleTime", &invisible),
            ],
        ))
    };
    let changed = change(&mut raw, &message, 300);
    assert_eq!(changed.code, response::SUCCESS, "{changed:?}");
    let new_pop_time: i64 = changed.ext_fields["popTime"].parse().unwrap();
    assert!(new_pop_time >= message.pop_time);
    assert_eq!(&changed.ext_fields["invisibleTime"], "300");
    assert_eq!(&changed.ext_fields["reviveQid"], "0");
    // The old handle is void, for acks and changes alike; the error carries the fields.
    assert_eq!(ack(&mut raw, &message).code, response::NO_MESSAGE);
    let stale = change(&mut raw, &message, 300);
    assert_eq!(stale.code, response::NO_MESSAGE, "{stale:?}");
    assert!(stale.ext_fields.get("popTime").is_some(), "{stale:?}");
    // It comes back after 300 ms instead of 60 s, with one more reconsume time.
    let again = pop_until_found(&mut raw, 1, 60_000, Duration::from_secs(5)).remove(0);
    assert_eq!((again.offset, again.reconsume_times), (message.offset, 1));
    // A bad invisible time is refused, with the fields.
    let bad = change(&mut raw, &again, 0);
    assert_eq!(bad.code, response::INVALID_PARAMETER, "{bad:?}");
    assert!(bad.ext_fields.get("reviveQid").is_some());
}

#[test]
fn past_the_retry_maximum_a_popped_message_goes_to_the_dlq() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    let group = serde_json::json!({"groupName": GROUP, "retryMaxTimes": 1,
        "consumeEnable": true, "retryQueueNums": 1});
    let upserted = raw.call(
        command(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(group.to_string()),
    );
    assert_eq!(upserted.code, response::SUCCESS, "{upserted:?}");
    send(&mut raw, 2, "doomed");
    // Delivered with reconsume times 0 and 1 (the maximum), then dead-lettered.
    for times in 0..=1 {
        let message = pop_until_found(&mut raw, 2, 200, Duration::from_secs(5)).remove(0);
        assert_eq!(message.reconsume_times, times);
    }
    let dlq = format!("%DLQ%{GROUP}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = pop(&mut raw, 2, 32, 200, 0);
        assert!(
            popped(&answer).is_empty(),
            "delivered past the maximum: {answer:?}"
        );
        let mut pull = pull_request(&dlq, 0, 0, 32, None, None);
        pull.ext_fields.insert("consumerGroup".into(), "dlq-reader");
        let pulled = raw.call(pull);
        if pulled.code == response::SUCCESS {
            let bodies = common::pull_bodies(&pulled.body);
            assert_eq!(bodies, vec!["doomed".to_string()]);
            break;
        }
        assert!(Instant::now() < deadline, "not in {dlq} within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(committed(&mut raw, 2), 1, "the dead message is consumed");
}

#[test]
fn a_parked_pop_wakes_when_a_message_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    let addr = node.addr();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || {
        let mut parked = Raw::connect(addr);
        let answer = pop(&mut parked, 3, 32, 10_000, 8_000);
        (answer, started.elapsed())
    });
    // Send once the pop is parked (the gauge counts it).
    common::wait_for(Duration::from_secs(5), "the pop to park", || {
        node.metrics()
            .shards()
            .iter()
            .map(|s| s.parked_pulls.load(std::sync::atomic::Ordering::Relaxed))
            .sum::<i64>()
            > 0
    });
    send(&mut raw, 3, "wake up");
    let (answer, took) = waiter.join().unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(popped(&answer)[0].body, "wake up");
    assert!(
        took < Duration::from_secs(8),
        "answered at the poll deadline: {took:?}"
    );
    // A pop with a poll time and nothing coming answers POLLING_TIMEOUT at its deadline.
    let started = Instant::now();
    let timeout = pop(&mut raw, 0, 32, 10_000, 300);
    assert_eq!(timeout.code, response::POLLING_TIMEOUT, "{timeout:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn a_pop_of_any_queue_finds_messages_on_either_shard() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    for queue in 0..QUEUES {
        send(&mut raw, queue, &format!("any-{queue}"));
    }
    let mut bodies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while bodies.len() < QUEUES as usize {
        let answer = pop(&mut raw, -1, 32, 60_000, 0);
        for message in popped(&answer) {
            assert_eq!(ack(&mut raw, &message).code, response::SUCCESS);
            bodies.push(message.body);
        }
        assert!(Instant::now() < deadline, "popped only {bodies:?}");
    }
    bodies.sort();
    assert_eq!(
        bodies,
        (0..QUEUES).map(|q| format!("any-{q}")).collect::<Vec<_>>()
    );
}

#[test]
fn popped_messages_in_flight_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    for i in 0..3 {
        send(&mut raw, 0, &format!("r{i}"));
    }
    // Taken before the pop is sent: the node's pop time is at or after it.
    let popped_at = Instant::now();
    let first = pop_until_found(&mut raw, 0, 1500, Duration::from_secs(5));
    assert_eq!(first.len(), 3);
    assert_eq!(ack(&mut raw, &first[0]).code, response::SUCCESS);
    drop(raw);
    node.shutdown().unwrap();

    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    // Still invisible: the first pop after the restart hands nothing out (none of the
    // deliveries in flight is taken for new).
    let early = pop(&mut raw, 0, 32, 60_000, 0);
    assert_eq!(early.code, response::POLLING_TIMEOUT, "{early:?}");
    assert_eq!(committed(&mut raw, 0), 1, "the lowest offset in flight");
    // The handle from before the restart still acknowledges.
    assert_eq!(ack(&mut raw, &first[1]).code, response::SUCCESS);
    assert_eq!(
        ack(&mut raw, &first[0]).code,
        response::NO_MESSAGE,
        "acked before"
    );
    // The third comes back after its invisible time, and nothing else does.
    let again = pop_until_found(&mut raw, 0, 60_000, Duration::from_secs(10));
    // The node keeps pop times and deadlines in whole milliseconds of its wall clock
    // (`Clock::now_ms`, floored), and the restarted node reads the wall clock afresh, so
    // by this thread's `Instant` the deadline can fall up to 1 ms early for the flooring
    // and about 1 ms more for the wall clock's slew between the two starts. Any earlier
    // is a redelivery before the invisible time.
    let slack = Duration::from_millis(2);
    assert!(
        popped_at.elapsed() + slack >= Duration::from_millis(1500),
        "redelivered {:?} after the pop, before its invisible time",
        popped_at.elapsed()
    );
    assert_eq!(
        again
            .iter()
            .map(|m| (m.offset, m.reconsume_times))
            .collect::<Vec<_>>(),
        vec![(2, 1)]
    );
    assert_eq!(ack(&mut raw, &again[0]).code, response::SUCCESS);
    assert_eq!(committed(&mut raw, 0), 3);
}

/// Pops with one header field wrong: a status and a remark naming it, and every header
/// field still there.
fn bad_pops_are_refused(raw: &mut Raw) {
    let base = [
        ("consumerGroup", GROUP),
        ("topic", TOPIC),
        ("queueId", "0"),
        ("maxMsgNums", "32"),
        ("invisibleTime", "60000"),
        ("pollTime", "0"),
        ("bornTime", "0"),
        ("initMode", "0"),
    ];
    let with = |changes: &[(&str, &str)]| {
        let mut fields: Vec<(&str, &str)> = base
            .iter()
            .filter(|(key, _)| !changes.iter().any(|(changed, _)| changed == key))
            .copied()
            .collect();
        fields.extend(changes.iter().filter(|(_, value)| !value.is_empty()));
        command(request::POP_MESSAGE, &fields)
    };
    for (changes, code, says) in [
        (
            vec![("maxMsgNums", "33")],
            response::INVALID_PARAMETER,
            "maxMsgNums 33",
        ),
        (
            vec![("maxMsgNums", "0")],
            response::INVALID_PARAMETER,
            "maxMsgNums 0",
        ),
        (
            vec![("invisibleTime", "0")],
            response::INVALID_PARAMETER,
            "invisibleTime 0",
        ),
        (
            vec![("invisibleTime", "")],
            response::SYSTEM_ERROR,
            "invisibleTime",
        ),
        (
            vec![("order", "true")],
            response::INVALID_PARAMETER,
            "orderly POP",
        ),
        (
            vec![("topic", "Nowhere")],
            response::TOPIC_NOT_EXIST,
            "Nowhere",
        ),
        (vec![("queueId", "9")], response::INVALID_PARAMETER, "9"),
        (vec![("queueId", "-2")], response::INVALID_PARAMETER, "-2"),
        (
            vec![("consumerGroup", "bad group!")],
            response::INVALID_PARAMETER,
            "bad group",
        ),
        (
            vec![("expType", "SQL92"), ("exp", "a > 1")],
            response::SUBSCRIPTION_PARSE_FAILED,
            "SQL92",
        ),
    ] {
        let answer = raw.call(with(&changes));
        assert_eq!(answer.code, code, "{changes:?}: {answer:?}");
        let remark = answer.remark.clone().unwrap_or_default();
        assert!(remark.contains(says), "{changes:?}: {remark}");
        popped(&answer);
    }
}

fn bad_acks_are_refused(raw: &mut Raw) {
    // Acks: a malformed handle, a handle never popped, an unknown topic, a queue out of
    // range.
    let ack_with = |extra: &str, topic: &str, queue: &str| {
        command(
            request::ACK_MESSAGE,
            &[
                ("consumerGroup", GROUP),
                ("topic", topic),
                ("queueId", queue),
                ("extraInfo", extra),
                ("offset", "0"),
            ],
        )
    };
    let answer = raw.call(ack_with("1 2", TOPIC, "0"));
    assert_eq!(answer.code, response::INVALID_PARAMETER, "{answer:?}");
    assert!(answer.remark.unwrap().contains("2 fields"));
    let never = raw.call(ack_with("0 123 60000 0 0 broker-a 0 0", TOPIC, "0"));
    assert_eq!(never.code, response::NO_MESSAGE, "{never:?}");
    let unknown = raw.call(ack_with("0 123 60000 0 0 broker-a 0 0", "Nowhere", "0"));
    assert_eq!(unknown.code, response::TOPIC_NOT_EXIST, "{unknown:?}");
    let range = raw.call(ack_with("0 123 60000 0 0 broker-a 9 0", TOPIC, "9"));
    assert_eq!(range.code, response::MESSAGE_ILLEGAL, "{range:?}");
    // Batch acks: a body that is not JSON, a bitset that is not base64, a retry mark.
    for (body, says) in [
        ("{nope", "bad BATCH_ACK_MESSAGE body"),
        (
            r#"{"acks":[{"c":"pop-group","t":"Popped","r":"0","so":0,"q":0,"pt":1,"b":"*"}]}"#,
            "not base64",
        ),
        (
            r#"{"acks":[{"c":"pop-group","t":"Popped","r":"1","so":0,"q":0,"pt":1,"b":[1]}]}"#,
            "mark",
        ),
    ] {
        let answer = raw.call(command(request::BATCH_ACK_MESSAGE, &[]).with_body(body.to_string()));
        assert_eq!(
            answer.code,
            response::INVALID_PARAMETER,
            "{body}: {answer:?}"
        );
        assert!(answer.remark.unwrap().contains(says), "{body}");
    }
}

#[test]
fn bad_pop_requests_get_a_clear_status_with_the_header_fields() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    setup(&mut raw);
    bad_pops_are_refused(&mut raw);
    bad_acks_are_refused(&mut raw);
    // Request modes: an unknown mode, a retry topic, an unknown topic.
    let bad_mode = set_pop_mode(&mut raw, TOPIC, GROUP, "PUSH");
    assert_eq!(bad_mode.code, response::INVALID_PARAMETER, "{bad_mode:?}");
    let retry = set_pop_mode(&mut raw, "%RETRY%pop-group", GROUP, "POP");
    assert_eq!(retry.code, response::INVALID_PARAMETER, "{retry:?}");
    let unknown = set_pop_mode(&mut raw, "Nowhere", GROUP, "POP");
    assert_eq!(unknown.code, response::TOPIC_NOT_EXIST, "{unknown:?}");
}
