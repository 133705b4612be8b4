//! CONSUMER_SEND_MSG_BACK (36) on a node of two shards: a handed-back message goes to
//! `%RETRY%<group>` after its delay level, with `reconsumeTimes` one higher, `RETRY_TOPIC`
//! and `ORIGIN_MESSAGE_ID` set once and kept, and the same UNIQ_KEY; once it has been
//! tried `maxReconsumeTimes` times (or with `delayLevel` -1) it goes to `%DLQ%<group>`
//! instead, at once. The original is read on the shard its offset names, the copy
//! written on the shard that owns its queue. Bad input: an offset that starts no record,
//! an illegal group name, a missing field; and an unknown group without auto-creation.

use crate::common;

use std::time::{Duration, Instant};

use common::command;
use common::raw::Raw;
use ringmq::broker::delay::DelayLevels;
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v1};
use ringmq::remoting::RemotingCommand;
use ringmq::store::properties;

const TOPIC: &str = "Failing";
const GROUP: &str = "failing-group";
const QUEUES: i32 = 4;

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options.message_delay_level = DelayLevels::parse("200ms 400ms 600ms 800ms 1s").unwrap();
    options
}

/// What a pulled record says, owned.
#[derive(Debug)]
struct Pulled {
    phys: i64,
    queue_offset: i64,
    reconsume_times: i32,
    topic: String,
    body: Vec<u8>,
    properties: String,
}

fn pull_all(raw: &mut Raw, topic: &str, queue: i32) -> Vec<Pulled> {
    let mut pull = pull_request(topic, queue, 0, 32, None, None);
    pull.ext_fields.insert("consumerGroup".into(), GROUP);
    let answer = raw.call(pull);
    if answer.code != response::SUCCESS {
        return Vec::new();
    }
    common::pull_records(&answer.body)
        .iter()
        .map(|r| Pulled {
            phys: r.phys_offset,
            queue_offset: r.queue_offset,
            reconsume_times: r.reconsume_times,
            topic: r.topic.to_string(),
            body: r.body.to_vec(),
            properties: r.user_properties().to_string(),
        })
        .collect()
}

fn send_back(raw: &mut Raw, phys: i64, delay_level: i32, max: Option<i32>) -> RemotingCommand {
    let (offset, level) = (phys.to_string(), delay_level.to_string());
    let mut fields = vec![
        ("offset", offset.as_str()),
        ("group", GROUP),
        ("delayLevel", level.as_str()),
        ("originTopic", TOPIC),
    ];
    let max_text = max.map(|m| m.to_string());
    if let Some(max) = &max_text {
        fields.push(("maxReconsumeTimes", max.as_str()));
    }
    raw.call(command(request::CONSUMER_SEND_MSG_BACK, &fields))
}

/// Waits (bounded) until `topic` queue 0 holds `count` messages; returns them.
fn wait_for_messages(raw: &mut Raw, topic: &str, count: usize) -> Vec<Pulled> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = pull_all(raw, topic, 0);
        if found.len() >= count {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} holds {} of {count} messages after 20 s",
            found.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One message per queue, so some live on each shard: each one's (physical offset,
/// UNIQ_KEY, msgId).
fn send_one_per_queue(raw: &mut Raw) -> Vec<(i64, String, String)> {
    // One message per queue, so some live on each shard.
    let mut originals = Vec::new();
    for queue in 0..QUEUES {
        let sent = raw.call(send_request_v1(
            TOPIC,
            queue,
            format!("body {queue}").as_bytes(),
            Some("TagF"),
            Some("key-f"),
        ));
        assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        let (_, phys) = decode_offset_msg_id(&sent.ext_fields["msgId"]).unwrap();
        let uniq = sent.ext_fields["transactionId"].to_string();
        originals.push((phys as i64, uniq, sent.ext_fields["msgId"].to_string()));
    }
    originals
}

/// Each retry is in the retry topic, tried once, and keeps its original's topic, tags,
/// keys and id.
fn retries_carry_their_origin(
    retries: &[Pulled],
    retry_topic: &str,
    originals: &[(i64, String, String)],
) {
    for retry in retries {
        assert_eq!(retry.topic, retry_topic);
        assert_eq!(retry.reconsume_times, 1, "{retry:?}");
        let props = &retry.properties;
        assert_eq!(
            properties::get(props, "RETRY_TOPIC"),
            Some(TOPIC),
            "{props:?}"
        );
        assert_eq!(properties::get(props, "TAGS"), Some("TagF"));
        assert_eq!(properties::get(props, "KEYS"), Some("key-f"));
        assert_eq!(
            properties::get(props, "DELAY"),
            None,
            "delivered: no DELAY left"
        );
        let uniq = properties::get(props, "UNIQ_KEY").unwrap();
        let original = originals.iter().find(|(_, u, _)| u == uniq);
        let (_, _, original_id) = original.unwrap_or_else(|| panic!("uniq {uniq} kept"));
        assert_eq!(
            properties::get(props, "ORIGIN_MESSAGE_ID"),
            Some(original_id.as_str())
        );
    }
}

fn bad_send_backs_are_refused(raw: &mut Raw, originals: &[(i64, String, String)]) {
    // Bad input.
    let inside = send_back(raw, originals[0].0 + 1, 0, None);
    assert_eq!(inside.code, response::SYSTEM_ERROR, "{inside:?}");
    assert!(inside
        .remark
        .as_deref()
        .unwrap()
        .contains("look message by offset failed"));
    let nowhere = send_back(raw, 7 << 56, 0, None);
    assert_eq!(nowhere.code, response::SYSTEM_ERROR, "{nowhere:?}");
    let bad_group = raw.call(command(
        request::CONSUMER_SEND_MSG_BACK,
        &[("offset", "0"), ("group", "bad group"), ("delayLevel", "0")],
    ));
    assert_eq!(bad_group.code, response::SYSTEM_ERROR, "{bad_group:?}");
    let missing = raw.call(command(
        request::CONSUMER_SEND_MSG_BACK,
        &[("offset", "0"), ("group", GROUP)],
    ));
    assert_ne!(missing.code, response::SUCCESS, "{missing:?}");
    assert!(
        missing.remark.as_deref().unwrap().contains("delayLevel"),
        "{missing:?}"
    );
}

#[test]
fn a_handed_back_message_is_retried_later_then_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, TOPIC, QUEUES as u32);
    let originals = send_one_per_queue(&mut raw);
    let shards: std::collections::BTreeSet<i64> =
        originals.iter().map(|(phys, _, _)| phys >> 56).collect();
    assert_eq!(shards.len(), 2, "the originals live on both shards");

    // First send-back of each: level 0 means 3 + reconsumeTimes 0 = level 3 (600 ms).
    let handed_back = Instant::now();
    for (phys, _, _) in &originals {
        let answer = send_back(&mut raw, *phys, 0, None);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let retry_topic = format!("%RETRY%{GROUP}");
    let retries = wait_for_messages(&mut raw, &retry_topic, originals.len());
    assert!(
        handed_back.elapsed() >= Duration::from_millis(600),
        "retries arrived after {:?}, before their 600 ms level",
        handed_back.elapsed()
    );
    retries_carry_their_origin(&retries, &retry_topic, &originals);

    // The retry handed back again with maxReconsumeTimes 1: tried once already, so DLQ.
    let retry = &retries[0];
    let answer = send_back(&mut raw, retry.phys, 0, Some(1));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let dlq_topic = format!("%DLQ%{GROUP}");
    let dead = wait_for_messages(&mut raw, &dlq_topic, 1);
    assert_eq!(dead[0].reconsume_times, 2);
    assert_eq!(dead[0].body, retry.body);
    assert_eq!(dead[0].queue_offset, 0);
    let props = &dead[0].properties;
    assert_eq!(
        properties::get(props, "RETRY_TOPIC"),
        Some(TOPIC),
        "kept from the first retry"
    );
    assert_eq!(
        properties::get(props, "ORIGIN_MESSAGE_ID"),
        properties::get(&retry.properties, "ORIGIN_MESSAGE_ID"),
        "kept from the first retry"
    );
    // delayLevel -1 goes to the DLQ at once, whatever the count.
    let answer = send_back(&mut raw, originals[1].0, -1, None);
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    wait_for_messages(&mut raw, &dlq_topic, 2);

    bad_send_backs_are_refused(&mut raw, &originals);
    node.shutdown().unwrap();
}

#[test]
fn without_auto_creation_an_unknown_group_cannot_send_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.auto_create_subscription_group = false;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    let sent = raw.call(send_request_v1(TOPIC, 0, b"m", None, None));
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    let (_, phys) = decode_offset_msg_id(&sent.ext_fields["msgId"]).unwrap();
    let answer = send_back(&mut raw, phys as i64, 0, None);
    assert_eq!(
        answer.code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST,
        "{answer:?}"
    );
    node.shutdown().unwrap();
}

/// SEND_MESSAGE to `%RETRY%<group>` as a client sends it when a send-back failed (part 2
/// §1.3): tried more than `maxReconsumeTimes` it is stored in `%DLQ%<group>` instead, and
/// so is any retry of a group that holds an orderly lock.
#[test]
fn a_retry_send_past_its_maximum_or_from_an_orderly_group_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut raw = Raw::connect(node.addr());
    let retry_topic = format!("%RETRY%{GROUP}");
    let dlq_topic = format!("%DLQ%{GROUP}");
    let retry_send = |times: i32, max: i32| {
        let mut send = send_request_v1(
            &retry_topic,
            0,
            format!("tried {times}").as_bytes(),
            None,
            None,
        );
        send.ext_fields
            .insert("reconsumeTimes".into(), times.to_string().as_str());
        send.ext_fields
            .insert("maxReconsumeTimes".into(), max.to_string().as_str());
        send
    };
    // Within the maximum: a retry (no DELAY here, so visible at once).
    let answer = raw.call(retry_send(3, 3));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(wait_for_messages(&mut raw, &retry_topic, 1).len(), 1);
    // Past it: the DLQ.
    let answer = raw.call(retry_send(4, 3));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let dead = wait_for_messages(&mut raw, &dlq_topic, 1);
    assert_eq!(dead[0].body, b"tried 4");
    assert_eq!(
        pull_all(&mut raw, &retry_topic, 0).len(),
        1,
        "not in the retry topic"
    );

    // A group holding an orderly lock: every retry send goes to the DLQ.
    let topic = "OrderedFailing";
    let sent = raw.call(send_request_v1(topic, 0, b"x", None, None));
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    let lock = serde_json::json!({
        "consumerGroup": GROUP, "clientId": "orderly@1", "onlyThisBroker": false,
        "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": topic}],
    });
    let locked = raw.call(
        RemotingCommand::request(request::LOCK_BATCH_MQ, Default::default())
            .with_body(lock.to_string()),
    );
    assert_eq!(locked.code, response::SUCCESS, "{locked:?}");
    assert!(
        String::from_utf8_lossy(&locked.body).contains(topic),
        "{locked:?}"
    );
    let answer = raw.call(retry_send(0, 16));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let dead = wait_for_messages(&mut raw, &dlq_topic, 2);
    assert_eq!(dead[1].body, b"tried 0");
    node.shutdown().unwrap();
}
