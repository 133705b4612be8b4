//! State files that disagree with the store are not believed on start: a
//! `messageRequestMode.json` entry filed under another topic or group, or under a `../`
//! key, stops the start naming it; a POP replay mark moved past the checkpoints of
//! deliveries in flight does not count them acknowledged (the queue starts over at the
//! mark's watermark, with a warning); a timer checkpoint that claims more of the timer
//! queue than exists stops the start naming it, instead of dropping a pending timer.

use crate::common;

use std::path::Path;

use common::command;
use common::raw::Raw;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::store::properties;

fn start_error(dir: &Path) -> String {
    match ringmq::node::start(common::node_config(dir)) {
        Ok(node) => {
            node.shutdown().unwrap();
            panic!("the node started on a tampered state file");
        }
        Err(error) => format!("{error:#}"),
    }
}

#[test]
fn a_request_mode_entry_filed_under_another_name_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let entry = |topic: &str, group: &str| {
        serde_json::json!({"topic": topic, "consumerGroup": group, "mode": "POP",
                           "popShareQueueNum": -1})
    };
    for (file_topic, file_group, named) in [
        ("T", "G", entry("Other", "G")),
        ("T", "G", entry("T", "OtherGroup")),
        ("../x", "G", entry("../x", "G")),
    ] {
        let body = serde_json::json!({"messageRequestModeMap": {file_topic: {file_group: named}}});
        std::fs::write(config.join("messageRequestMode.json"), body.to_string()).unwrap();
        let error = start_error(dir.path());
        assert!(
            error.contains("messageRequestMode.json") && error.contains(file_topic),
            "{file_topic}/{file_group}: {error}"
        );
    }
}

#[test]
fn a_pop_replay_mark_moved_forward_does_not_acknowledge_what_is_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, "T", 1);
    let body = serde_json::json!({"topic": "T", "consumerGroup": "G", "mode": "POP"});
    let switched =
        raw.call(command(request::SET_MESSAGE_REQUEST_MODE, &[]).with_body(body.to_string()));
    assert_eq!(switched.code, response::SUCCESS, "{switched:?}");
    for n in 0..5 {
        let sent = raw.call(send_request_v1(
            "T",
            0,
            format!("m{n}").as_bytes(),
            None,
            None,
        ));
        assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    }
    let pop = command(
        request::POP_MESSAGE,
        &[
            ("consumerGroup", "G"),
            ("topic", "T"),
            ("queueId", "0"),
            ("maxMsgNums", "32"),
            ("invisibleTime", "600000"),
            ("pollTime", "0"),
            ("bornTime", "0"),
            ("initMode", "0"),
        ],
    );
    let popped = raw.call(pop.clone());
    assert_eq!(common::pull_records(&popped.body).len(), 5, "{popped:?}");
    node.shutdown().unwrap();

    // Moved forward, past every record of the log; the floors are left as they were.
    let path = dir.path().join("shard-0").join("pop").join("replay.json");
    let mut mark: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    mark["replayFrom"] = serde_json::json!(1_000);
    std::fs::write(&path, mark.to_string()).unwrap();

    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    let committed = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[("consumerGroup", "G"), ("topic", "T"), ("queueId", "0")],
    ));
    assert_eq!(
        committed.ext_fields["offset"].to_string(),
        "0",
        "the deliveries in flight were counted acknowledged: {committed:?}"
    );
    // Handed out again rather than lost.
    let again = raw.call(pop);
    assert_eq!(common::pull_records(&again.body).len(), 5, "{again:?}");
    node.shutdown().unwrap();
}

#[test]
fn a_timer_checkpoint_past_the_end_of_the_timer_queue_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.timer_max_delay_sec = 3600;
    let node = ringmq::node::start(options).unwrap();
    let mut raw = Raw::connect(node.addr());
    let mut send = send_request_v1("T", 0, b"later", None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, "TIMER_DELAY_SEC", "3000");
    send.put_ext("properties", props);
    let sent = raw.call(send);
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    node.shutdown().unwrap();

    let path = dir
        .path()
        .join("shard-0")
        .join("timer")
        .join("checkpoint.json");
    let mut checkpoint: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    checkpoint["runsCover"] = serde_json::json!(1_000);
    checkpoint["indexed"] = serde_json::json!(1_000);
    std::fs::write(&path, checkpoint.to_string()).unwrap();

    let error = start_error(dir.path());
    assert!(
        error.contains("checkpoint.json") && error.contains("1000"),
        "{error}"
    );
}
