//! RINGMQ_GET_TIMER_PROGRESS (30000) and RINGMQ_TAKE_TIMER_PROGRESS (30001) against
//! in-process nodes (issue 25 item 4/7): a master answers the progress of the shard the
//! request names, whichever shard the connection reached; a shard the node does not have,
//! a node with the timer wheel off and a slave are refused saying why; and the hand-over
//! inside a slave node is refused when a connection brings it.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use common::{create_topic, node_config, wait_for};
use ringmq::broker::timer::store::progress::TimerProgress;
use ringmq::broker::timer::TIMER_DELAY_MS;
use ringmq::config::BrokerRole;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{queue_request, send_request_v1};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::shard::routing::queue_owner;
use ringmq::store::properties;

const TOPIC: &str = "TimedProgress";
const PATIENCE: Duration = Duration::from_secs(20);

fn start(configure: impl FnOnce(&mut NodeConfig)) -> (tempfile::TempDir, ringmq::node::NodeHandle) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.shards = 2;
    configure(&mut config);
    let node = ringmq::node::start(config).expect("node starts");
    (dir, node)
}

fn progress_of(shard: &str) -> RemotingCommand {
    RemotingCommand::request(
        request::RINGMQ_GET_TIMER_PROGRESS,
        ExtFields::from([("shard", shard)]),
    )
}

#[track_caller]
fn refused(answer: &RemotingCommand, code: i32, says: &str) {
    assert_eq!(answer.code, code, "{answer:?}");
    let remark = answer.remark.as_deref().unwrap_or_default();
    assert!(remark.contains(says), "'{remark}' does not say '{says}'");
}

/// The progress answered for `shard`, checked as a slave checks it, as JSON.
fn progress(raw: &mut Raw, shard: u8) -> serde_json::Value {
    let answer = raw.call(progress_of(&shard.to_string()));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    TimerProgress::parse(&answer.body).expect("a progress a slave takes");
    serde_json::from_slice(&answer.body).unwrap()
}

#[test]
fn a_master_answers_the_timer_progress_of_the_shard_asked_about() {
    let (_dir, node) = start(|_| {});
    let mut raw = Raw::connect(node.addr());
    create_topic(&mut raw, TOPIC, 4);
    // A timer on a queue of shard 1 only.
    let queue = (0..4).find(|&q| queue_owner(TOPIC, q, 2) == 1).unwrap();
    let mut send = send_request_v1(TOPIC, queue, b"soon", None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TIMER_DELAY_MS, "100");
    send.put_ext("properties", props);
    assert_eq!(raw.call(send).code, response::SUCCESS);
    wait_for(PATIENCE, "the timer delivered", || {
        let answer = raw.call(queue_request(request::GET_MAX_OFFSET, TOPIC, queue));
        answer.opt_str("offset") == Some("1")
    });
    wait_for(PATIENCE, "shard 1's progress says delivered", || {
        !progress(&mut raw, 1)["delivered"].is_null()
    });
    let shard1 = progress(&mut raw, 1);
    assert_eq!(shard1["indexed"], 1, "{shard1}");
    assert_eq!(shard1["runsCover"], 1, "delivered: nothing below is needed");
    let shard0 = progress(&mut raw, 0);
    assert_eq!(shard0["indexed"], 0, "{shard0}");
    assert!(shard0["delivered"].is_null(), "{shard0}");

    refused(
        &raw.call(progress_of("2")),
        response::INVALID_PARAMETER,
        "'2' is not a shard of this broker: it has 2 (0 to 1)",
    );
    refused(
        &raw.call(progress_of("one")),
        response::INVALID_PARAMETER,
        "not a shard",
    );
    let no_shard = RemotingCommand::request(request::RINGMQ_GET_TIMER_PROGRESS, ExtFields::new());
    refused(
        &raw.call(no_shard),
        response::INVALID_PARAMETER,
        "not a shard",
    );
    // The hand-over is the slave node's own: a connection's mark is removed.
    let mut take = RemotingCommand::request(
        request::RINGMQ_TAKE_TIMER_PROGRESS,
        ExtFields::from([("shard", "1")]),
    )
    .with_body(serde_json::to_vec(&shard1).unwrap());
    take.put_ext(ringmq::broker::requests::query::SHARD_ONLY, "true");
    refused(
        &raw.call(take),
        response::NO_PERMISSION,
        "internal to a slave node",
    );
    node.shutdown().unwrap();
}

#[test]
fn a_node_with_the_timer_wheel_off_or_a_slave_has_no_progress_to_give() {
    let (_dir, node) = start(|config| config.timer_wheel_enable = false);
    let mut raw = Raw::connect(node.addr());
    refused(
        &raw.call(progress_of("1")),
        response::SYSTEM_ERROR,
        "timerWheelEnable is off",
    );
    node.shutdown().unwrap();

    let (_dir, node) = start(|config| {
        config.broker_role = BrokerRole::Slave;
        config.broker_id = 1;
        // Nobody there: the slave serves all the same.
        config.ha_master_address = Some("127.0.0.1:9".into());
    });
    let mut raw = Raw::connect(node.addr());
    for shard in ["0", "1"] {
        refused(
            &raw.call(progress_of(shard)),
            response::SYSTEM_ERROR,
            "this broker is a slave",
        );
    }
    node.shutdown().unwrap();
}
