//! An operator's reset of a POP group (INVOKE_BROKER_TO_RESET_OFFSET) and a commit that
//! moves past deliveries in flight (UPDATE_CONSUMER_OFFSET) hold across a clean restart
//! and a SIGKILL: the revive log replay does not bring back the offsets from before them,
//! nor the backlog, nor the deliveries that were in flight.

use crate::common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::command;
use common::raw::Raw;
use common::serve::Serve;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::RemotingCommand;

const TOPIC: &str = "T";
/// Reset by an operator.
const RESET: &str = "G3";
/// Committed past its deliveries in flight.
const COMMITTED: &str = "G4";
const PER_QUEUE: u64 = 40;

fn pop(raw: &mut Raw, group: &str, queue: i32) -> RemotingCommand {
    raw.call(command(
        request::POP_MESSAGE,
        &[
            ("consumerGroup", group),
            ("topic", TOPIC),
            ("queueId", &queue.to_string()),
            ("maxMsgNums", "16"),
            ("invisibleTime", "60000"),
            ("pollTime", "0"),
            ("bornTime", "0"),
            ("initMode", "0"),
        ],
    ))
}

/// The queue offsets a pop answer hands out.
fn offsets(answer: &RemotingCommand) -> Vec<u64> {
    if answer.code != response::SUCCESS {
        return Vec::new();
    }
    common::pull_records(&answer.body)
        .iter()
        .map(|record| record.queue_offset as u64)
        .collect()
}

fn committed(raw: &mut Raw, group: &str, queue: i32) -> i64 {
    let answer = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[
            ("consumerGroup", group),
            ("topic", TOPIC),
            ("queueId", &queue.to_string()),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.ext_fields["offset"].parse().unwrap()
}

/// Two queues of `PER_QUEUE` messages; `RESET` popped partly (some acked, some in flight)
/// and reset to the end; `COMMITTED` popped and committed past its deliveries.
fn consume_partly_then_move_the_offsets(raw: &mut Raw) {
    common::create_topic(raw, TOPIC, 2);
    for group in [RESET, COMMITTED] {
        let body = serde_json::json!({"topic": TOPIC, "consumerGroup": group, "mode": "POP"});
        let answer =
            raw.call(command(request::SET_MESSAGE_REQUEST_MODE, &[]).with_body(body.to_string()));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    for queue in 0..2 {
        for n in 0..PER_QUEUE {
            let sent = raw.call(send_request_v1(
                TOPIC,
                queue,
                format!("m{n}").as_bytes(),
                None,
                None,
            ));
            assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        }
    }
    for queue in 0..2 {
        assert_eq!(offsets(&pop(raw, RESET, queue)).len(), 16);
    }
    assert_eq!(
        offsets(&pop(raw, COMMITTED, 0)),
        (0..16).collect::<Vec<_>>()
    );
    assert_eq!(committed(raw, RESET, 0), 0, "in flight from offset 0");

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let reset = raw.call(command(
        request::INVOKE_BROKER_TO_RESET_OFFSET,
        &[
            ("topic", TOPIC),
            ("group", RESET),
            ("timestamp", &(now + 1).to_string()),
            ("isForce", "true"),
        ],
    ));
    assert_eq!(reset.code, response::SUCCESS, "{reset:?}");
    let commit = raw.call(command(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", COMMITTED),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("commitOffset", "30"),
        ],
    ));
    assert_eq!(commit.code, response::SUCCESS, "{commit:?}");
    check_the_moved_offsets(raw, "before the restart");
}

fn check_the_moved_offsets(raw: &mut Raw, when: &str) {
    for queue in 0..2 {
        assert_eq!(
            committed(raw, RESET, queue),
            PER_QUEUE as i64,
            "{RESET} queue {queue} {when}"
        );
    }
    assert_eq!(committed(raw, COMMITTED, 0), 30, "{COMMITTED} {when}");
}

/// After the restart: the offsets hold, nothing from before them comes, new messages do.
fn check_after_the_restart(raw: &mut Raw, when: &str) {
    check_the_moved_offsets(raw, when);
    for queue in 0..2 {
        let again = pop(raw, RESET, queue);
        assert_eq!(offsets(&again), Vec::<u64>::new(), "{when}: {again:?}");
    }
    assert_eq!(
        offsets(&pop(raw, COMMITTED, 0)),
        (30..PER_QUEUE).collect::<Vec<_>>(),
        "{when}"
    );
    let sent = raw.call(send_request_v1(TOPIC, 0, b"new", None, None));
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    assert_eq!(offsets(&pop(raw, RESET, 0)), vec![PER_QUEUE], "{when}");
}

#[test]
fn a_pop_groups_reset_and_a_commit_past_its_deliveries_survive_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    consume_partly_then_move_the_offsets(&mut raw);
    node.shutdown().unwrap();
    let node = common::start_node(dir.path());
    let mut raw = Raw::connect(node.addr());
    check_after_the_restart(&mut raw, "after a clean restart");
    node.shutdown().unwrap();
}

#[test]
fn a_pop_groups_reset_and_a_commit_past_its_deliveries_survive_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--shards", "1"];
    let node = Serve::start(dir.path(), &args, "first run");
    let mut raw = Raw::connect(node.addr);
    consume_partly_then_move_the_offsets(&mut raw);
    // At once: the replay mark on disk (if any) is from before the moves.
    node.kill();
    let node = Serve::start(dir.path(), &args, "after SIGKILL");
    let mut raw = Raw::connect(node.addr);
    check_after_the_restart(&mut raw, "after a SIGKILL");
}
