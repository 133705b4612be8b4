//! GET_ALL_DELAY_OFFSET (45) against an in-process node with two shards: the answer is
//! the whole node's cursor table in Java's `DelayOffsetSerializeWrapper` shape, whichever
//! shard the connection reaches, with each level's cursor exactly at the number of its
//! messages once they are delivered; the table (with its dataVersion) survives a restart.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use common::{node_config, wait_for};
use ringmq::broker::delay::{DelayLevels, DELAY};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{queue_request, send_request_v1};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::shard::routing::queue_owner;
use ringmq::store::properties;
use ringmq::store::topic::SCHEDULE_TOPIC;

/// Four short levels; level 4 is never used, so it must not appear in the table.
const LEVELS: &str = "100ms 200ms 300ms 400ms";
/// Messages sent per level (levels 1 to 3).
const SENT: [u64; 3] = [3, 1, 2];
const PATIENCE: Duration = Duration::from_secs(20);

fn start(dir: &std::path::Path) -> ringmq::node::NodeHandle {
    let mut options = node_config(dir);
    options.shards = 2;
    options.message_delay_level = DelayLevels::parse(LEVELS).unwrap();
    ringmq::node::start(options).expect("node starts")
}

fn delayed_send(topic: &str, queue: i32, body: &str, level: u64) -> RemotingCommand {
    let mut send = send_request_v1(topic, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, DELAY, &level.to_string());
    send.put_ext("properties", props);
    send
}

fn get_all_delay_offset(raw: &mut Raw) -> serde_json::Value {
    let answer = raw.call(RemotingCommand::request(
        request::GET_ALL_DELAY_OFFSET,
        ExtFields::new(),
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    serde_json::from_slice(&answer.body).expect("a JSON body")
}

fn max_offset(raw: &mut Raw, topic: &str, queue: i32) -> u64 {
    let answer = raw.call(queue_request(request::GET_MAX_OFFSET, topic, queue));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.opt_str("offset").unwrap().parse().unwrap()
}

#[test]
fn get_all_delay_offset_answers_every_shards_cursors_exactly() {
    // The used levels' queues are on both shards: a shard-local answer would miss some.
    let owners: std::collections::BTreeSet<u8> = (0..SENT.len() as i32)
        .map(|queue| queue_owner(SCHEDULE_TOPIC, queue, 2))
        .collect();
    assert_eq!(owners.len(), 2, "levels 1-3 span both shards");

    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    // Several connections, so both shards answer some.
    let mut connections: Vec<Raw> = (0..4).map(|_| Raw::connect(node.addr())).collect();
    for raw in &mut connections {
        let empty = get_all_delay_offset(raw);
        assert_eq!(empty["offsetTable"], serde_json::json!({}), "{empty}");
        assert_eq!(empty["dataVersion"]["counter"], 0, "{empty}");
    }

    let mut sent = 0;
    for (index, &count) in SENT.iter().enumerate() {
        let level = index as u64 + 1;
        for i in 0..count {
            let raw = &mut connections[sent % 4];
            let answer = raw.call(delayed_send("Cursors", 0, &format!("l{level}m{i}"), level));
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            sent += 1;
        }
    }
    let total: u64 = SENT.iter().sum();
    wait_for(PATIENCE, "every delayed message delivered", || {
        max_offset(&mut connections[0], "Cursors", 0) == total
    });
    // A cursor moves right after its delivery is acknowledged: wait for the last moves.
    let expected = serde_json::json!({"1": 3, "2": 1, "3": 2});
    wait_for(PATIENCE, "the cursors past every delivery", || {
        get_all_delay_offset(&mut connections[0])["offsetTable"] == expected
    });
    for raw in &mut connections {
        let table = get_all_delay_offset(raw);
        assert_eq!(table["offsetTable"], expected, "{table}");
        // One version per cursor move: six deliveries, six moves.
        assert_eq!(table["dataVersion"]["counter"], 6, "{table}");
        assert_eq!(table["dataVersion"]["stateVersion"], 0, "{table}");
        assert!(table["dataVersion"]["timestamp"].as_i64().unwrap() > 0);
    }
    let before = get_all_delay_offset(&mut connections[0]);
    drop(connections);
    node.shutdown().unwrap();

    // The file holds the same encoding, and a restart answers the same table.
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("config/delayOffset.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file, before);
    let node = start(dir.path());
    let mut raw = Raw::connect(node.addr());
    assert_eq!(get_all_delay_offset(&mut raw), before);
    node.shutdown().unwrap();
}
