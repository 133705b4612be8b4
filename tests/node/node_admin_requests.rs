//! The admin requests on a node of two shards, each answered with the whole node's view:
//! GET_TOPIC_STATS_INFO (202) per queue, GET_CONSUME_STATS (208) with the lag a commit
//! leaves, GET_CONSUMER_CONNECTION_LIST (203) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)
//! from a heartbeat, GET_BROKER_RUNTIME_INFO (28), GET_ALL_TOPIC_LIST_FROM_NAMESERVER
//! (206), and INVOKE_BROKER_TO_RESET_OFFSET (222), which moves committed offsets to a time
//! and tells the group's live client with RESET_CONSUMER_CLIENT_OFFSET (220). Unknown
//! topics and groups get the codes the tools expect.

use crate::common;

use common::command;

use std::collections::BTreeMap;
use std::time::Duration;

use common::raw::Raw;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::RemotingCommand;
use serde_json::Value;

const TOPIC: &str = "Inspected";
const QUEUES: i32 = 4;
const GROUP: &str = "inspecting-group";

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options
}

fn ok(answer: &RemotingCommand) -> Value {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    serde_json::from_slice(&answer.body).unwrap_or_else(|error| {
        panic!(
            "body is not JSON ({error}): {}",
            String::from_utf8_lossy(&answer.body)
        )
    })
}

/// An `offsetTable` of fastjson's shape (queue objects as keys) as queue id → value. The
/// key must be exactly the object a Java broker writes.
fn offset_table(answer: &RemotingCommand) -> BTreeMap<i32, Value> {
    if answer.is_response() {
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let text = std::str::from_utf8(&answer.body).unwrap();
    let mut standard = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{\"brokerName\":") {
        let end = start + rest[start..].find('}').unwrap() + 1;
        let key: Value = serde_json::from_str(&rest[start..end]).unwrap();
        let fields: Vec<&String> = key.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["brokerName", "queueId", "topic"], "{text}");
        assert_eq!(key["topic"], TOPIC, "{text}");
        standard.push_str(&rest[..start]);
        standard.push_str(&format!("\"{}\"", key["queueId"]));
        rest = &rest[end..];
    }
    standard.push_str(rest);
    let parsed: Value = serde_json::from_str(&standard).unwrap();
    parsed["offsetTable"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(queue, value)| (queue.parse().unwrap(), value.clone()))
        .collect()
}

fn send(raw: &mut Raw, queue: i32, text: &str) {
    let answer = raw.call(send_request_v1(TOPIC, queue, text.as_bytes(), None, None));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

fn commit(raw: &mut Raw, queue: i32, offset: i64) {
    let (queue, offset) = (queue.to_string(), offset.to_string());
    let answer = raw.call(command(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", &queue),
            ("commitOffset", &offset),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
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

fn reset_request(topic: &str, group: &str, timestamp: i64, force: bool) -> RemotingCommand {
    let timestamp = timestamp.to_string();
    command(
        request::INVOKE_BROKER_TO_RESET_OFFSET,
        &[
            ("topic", topic),
            ("group", group),
            ("timestamp", &timestamp),
            ("isForce", if force { "true" } else { "false" }),
        ],
    )
}

/// A reset of the test's group and topic; the notices it causes are skipped.
fn reset(raw: &mut Raw, timestamp: i64, force: bool) -> RemotingCommand {
    raw.call(reset_request(TOPIC, GROUP, timestamp, force))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// 202: every queue, wherever its shard, last updated after `middle`.
fn topic_stats_cover_every_queue(raw: &mut Raw, middle: i64) {
    // 202: every queue, wherever its shard.
    let stats =
        offset_table(&raw.call(command(request::GET_TOPIC_STATS_INFO, &[("topic", TOPIC)])));
    assert_eq!(stats.len(), QUEUES as usize, "{stats:?}");
    for (queue, entry) in &stats {
        assert_eq!(entry["minOffset"], 0, "queue {queue}");
        assert_eq!(entry["maxOffset"], *queue as i64 + 3, "queue {queue}");
        let last = entry["lastUpdateTimestamp"].as_i64().unwrap();
        assert!(last > middle && last <= now_ms(), "queue {queue}: {last}");
    }
    // The shards' own marker is not a client's to set: the answer is still the whole node's.
    let marked = offset_table(&raw.call(command(
        request::GET_TOPIC_STATS_INFO,
        &[("topic", TOPIC), ("_ringmqShardOnly", "true")],
    )));
    assert_eq!(marked, stats, "a client's shard-only marker is ignored");
    let unknown = raw.call(command(
        request::GET_TOPIC_STATS_INFO,
        &[("topic", "NoSuchTopic")],
    ));
    assert_eq!(unknown.code, response::TOPIC_NOT_EXIST, "{unknown:?}");
}

/// 208: the lag a commit leaves, with and without the topic named.
fn consume_stats_show_the_lag_of_a_commit(raw: &mut Raw, first_batch_done: i64) {
    // 208: the lag a commit leaves, with and without the topic named.
    commit(raw, 0, 1);
    commit(raw, 3, 4);
    for pairs in [
        vec![("consumerGroup", GROUP), ("topic", TOPIC)],
        vec![("consumerGroup", GROUP)],
    ] {
        let progress = offset_table(&raw.call(command(request::GET_CONSUME_STATS, &pairs)));
        assert_eq!(progress.len(), QUEUES as usize, "{progress:?}");
        for (queue, entry) in &progress {
            let expected = match queue {
                0 => 1,
                3 => 4,
                _ => 0,
            };
            assert_eq!(entry["brokerOffset"], *queue as i64 + 3, "queue {queue}");
            assert_eq!(entry["consumerOffset"], expected, "queue {queue}");
            let last = entry["lastTimestamp"].as_i64().unwrap();
            assert_eq!(last > 0, expected > 0, "queue {queue}: {last}");
            assert!(last <= first_batch_done, "queue {queue}: {last}");
        }
    }
    let nobody = raw.call(command(
        request::GET_CONSUME_STATS,
        &[("consumerGroup", "nobody")],
    ));
    assert!(
        offset_table(&nobody).is_empty(),
        "an unknown group has no progress"
    );
}

/// 203 and 201: a heartbeat makes the group visible with its subscription.
fn a_heartbeat_makes_the_group_visible(raw: &mut Raw) {
    // 203 and 201: a heartbeat makes the group visible with its subscription.
    let connections = [("consumerGroup", GROUP)];
    let offline = raw.call(command(request::GET_CONSUMER_CONNECTION_LIST, &connections));
    assert_eq!(offline.code, response::CONSUMER_NOT_ONLINE, "{offline:?}");
    let beat = raw.call(common::consumer_heartbeat(
        "admin-test@1",
        GROUP,
        TOPIC,
        "*",
    ));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let listed = ok(&raw.call(command(request::GET_CONSUMER_CONNECTION_LIST, &connections)));
    assert_eq!(
        listed["connectionSet"][0]["clientId"], "admin-test@1",
        "{listed}"
    );
    let addr = listed["connectionSet"][0]["clientAddr"].as_str().unwrap();
    assert!(addr.starts_with("127.0.0.1:"), "{listed}");
    assert_eq!(
        listed["subscriptionTable"][TOPIC]["subString"], "*",
        "{listed}"
    );
    assert_eq!(listed["messageModel"], "CLUSTERING", "{listed}");
    let groups = ok(&raw.call(command(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[])));
    assert_eq!(
        groups["subscriptionGroupTable"][GROUP]["groupName"], GROUP,
        "{groups}"
    );
}

/// Without force a queue only moves back: to the end (-1) changes nothing, and a time
/// before every message moves each queue to its minimum; an unknown topic or group is
/// refused.
fn resets_without_force_only_move_back(raw: &mut Raw, expected: &BTreeMap<i32, Value>) {
    // Without force a queue only moves back: to the end (-1) changes nothing, and a time
    // before every message moves each queue to its minimum.
    assert_eq!(offset_table(&reset(raw, -1, false)), *expected);
    let to_start = offset_table(&reset(raw, 1_000, false));
    assert!(to_start.values().all(|offset| offset == 0), "{to_start:?}");
    let to_end = offset_table(&reset(raw, -1, true));
    let ends: BTreeMap<i32, Value> = (0..QUEUES).map(|q| (q, Value::from(q + 3))).collect();
    assert_eq!(to_end, ends);

    let unknown_topic = raw.call(reset_request("NoSuchTopic", GROUP, 0, true));
    assert_eq!(
        unknown_topic.code,
        response::TOPIC_NOT_EXIST,
        "{unknown_topic:?}"
    );
    let unknown_group = raw.call(reset_request(TOPIC, "nobody", 0, true));
    assert_eq!(
        unknown_group.code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST,
        "{unknown_group:?}"
    );
}

/// 28: the node's figures; 206 on the name server.
fn runtime_info_and_the_namesrv_topic_list(raw: &mut Raw, node: &ringmq::node::NodeHandle) {
    // 28: the node's figures.
    let info = ok(&raw.call(command(request::GET_BROKER_RUNTIME_INFO, &[])));
    let table = &info["table"];
    let sent: i64 = (0..QUEUES).map(|q| q as i64 + 3).sum();
    assert_eq!(table["msgPutTotalSinceBoot"], sent.to_string(), "{info}");
    assert_eq!(table["shardCount"], "2", "{info}");
    assert!(table["brokerVersionDesc"]
        .as_str()
        .unwrap()
        .starts_with("ringmq "));
    assert!(
        table["runtime"].as_str().unwrap().starts_with("[ 0 days"),
        "{info}"
    );

    // 206 on the name server.
    let mut namesrv = Raw::connect(node.namesrv_addr());
    let topics = ok(&namesrv.call(command(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[])));
    let names: Vec<&str> = topics["topicList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert!(names.contains(&TOPIC), "{topics}");
}

#[test]
fn admin_requests_answer_for_the_whole_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, TOPIC, QUEUES as u32);

    // Queue q gets q + 1 messages before `middle`, and 2 more after it.
    for queue in 0..QUEUES {
        for i in 0..=queue {
            send(&mut raw, queue, &format!("early {queue}/{i}"));
        }
    }
    let first_batch_done = now_ms();
    common::wait_for(Duration::from_secs(5), "the clock to move on", || {
        now_ms() > first_batch_done + 2
    });
    let middle = now_ms();
    common::wait_for(Duration::from_secs(5), "the clock to move on", || {
        now_ms() > middle + 2
    });
    for queue in 0..QUEUES {
        for i in 0..2 {
            send(&mut raw, queue, &format!("late {queue}/{i}"));
        }
    }

    topic_stats_cover_every_queue(&mut raw, middle);

    consume_stats_show_the_lag_of_a_commit(&mut raw, first_batch_done);

    a_heartbeat_makes_the_group_visible(&mut raw);

    // 222: back to `middle` (each queue to its first late message), and the client is told.
    let opaque = raw.send(reset_request(TOPIC, GROUP, middle, true));
    let notices = std::cell::RefCell::new(Vec::new());
    let answer = raw.next(Duration::from_secs(10), |frame| {
        if frame.code == request::RESET_CONSUMER_CLIENT_OFFSET && !frame.is_response() {
            notices.borrow_mut().push(frame.clone());
        }
        frame.is_response() && frame.opaque == opaque
    });
    let offsets = offset_table(&answer);
    let expected: BTreeMap<i32, Value> = (0..QUEUES).map(|q| (q, Value::from(q + 1))).collect();
    assert_eq!(offsets, expected, "{answer:?}");
    for queue in 0..QUEUES {
        assert_eq!(
            committed(&mut raw, queue),
            queue as i64 + 1,
            "queue {queue}"
        );
    }
    // The notice is queued before the answer; wait for it if the answer overtook it.
    if notices.borrow().is_empty() {
        let notice = raw.next(Duration::from_secs(10), |frame| {
            frame.code == request::RESET_CONSUMER_CLIENT_OFFSET && !frame.is_response()
        });
        notices.borrow_mut().push(notice);
    }
    let notices = notices.into_inner();
    assert_eq!(notices.len(), 1, "one live client, one notice: {notices:?}");
    let notice = &notices[0];
    assert_eq!(&notice.ext_fields["group"], GROUP);
    assert_eq!(&notice.ext_fields["timestamp"], middle.to_string().as_str());
    assert_eq!(
        offset_table(notice),
        expected,
        "the notice carries the same table"
    );

    resets_without_force_only_move_back(&mut raw, &expected);

    runtime_info_and_the_namesrv_topic_list(&mut raw, &node);
    node.shutdown().unwrap();
}
