//! Transactional messages against an in-process node (reference-2 §3): a prepared send
//! waits as a half message, invisible in its topic; END_TRANSACTION commits it (once) or
//! rolls it back (for good); a half nobody decides is checked back on a connection of its
//! producer group, and one still undecided after `transactionCheckMax` checks is moved to
//! TRANS_CHECK_MAX_TIME_TOPIC; decisions survive a restart; bad input gets a clear status.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use common::{node_config, pull_records, scrape_metrics as scrape, wait_for};
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::broker::transaction::halves::{
    CHECK_MAX_TOPIC, HALF_TOPIC, PGROUP, TRANSACTION_COMMIT, TRAN_MSG,
};
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, queue_request, send_request_v1};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::store::properties;

const GROUP: &str = "tx-producers";
const PATIENCE: Duration = Duration::from_secs(20);

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = node_config(dir);
    // Checks come quickly, so the tests see several rounds.
    options.transaction_time_out = Duration::from_millis(200);
    options.transaction_check_interval = Duration::from_millis(200);
    options
}

fn start(options: NodeConfig) -> NodeHandle {
    ringmq::node::start(options).expect("node starts")
}

/// A prepared SEND_MESSAGE of `body` to Orders queue 0 from producer group `group`.
fn prepared(body: &str, group: &str) -> RemotingCommand {
    let mut send = send_request_v1("Orders", 0, body.as_bytes(), Some("TagA"), None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TRAN_MSG, "true");
    properties::push_pair(&mut props, PGROUP, group);
    send.put_ext("properties", props);
    send.put_ext("sysFlag", 4);
    send
}

/// What a producer keeps from a prepared send's answer.
#[derive(Clone, Debug)]
struct Half {
    queue_offset: i64,
    commit_log_offset: u64,
    msg_id: String,
}

fn send_prepared(raw: &mut Raw, body: &str) -> Half {
    let answer = raw.call(prepared(body, GROUP));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(answer.opt_str("queueId"), Some("0"), "the queue asked for");
    let (_, commit_log_offset) =
        decode_offset_msg_id(answer.opt_str("msgId").unwrap()).expect("an offset msgId");
    Half {
        queue_offset: answer.opt_str("queueOffset").unwrap().parse().unwrap(),
        commit_log_offset,
        msg_id: answer.opt_str("transactionId").unwrap().to_owned(),
    }
}

fn end(half: &Half, group: &str, decision: i32, from_check: bool) -> RemotingCommand {
    let mut command = RemotingCommand::request(request::END_TRANSACTION, ExtFields::new());
    command.put_ext("producerGroup", group);
    command.put_ext("tranStateTableOffset", half.queue_offset);
    command.put_ext("commitLogOffset", half.commit_log_offset);
    command.put_ext("commitOrRollback", decision);
    command.put_ext("fromTransactionCheck", from_check);
    command.put_ext("msgId", &half.msg_id);
    command.put_ext("transactionId", &half.msg_id);
    command
}

fn oneway(mut command: RemotingCommand) -> RemotingCommand {
    command.flag |= ringmq::remoting::ONEWAY_FLAG;
    command
}

fn max_offset(raw: &mut Raw, topic: &str, queue: i32) -> i64 {
    let answer = raw.call(queue_request(request::GET_MAX_OFFSET, topic, queue));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.opt_str("offset").unwrap().parse().unwrap()
}

/// The bodies in Orders queue 0.
fn delivered(raw: &mut Raw) -> Vec<String> {
    let answer = raw.call(pull_request("Orders", 0, 0, 32, None, None));
    if answer.code != response::SUCCESS {
        return Vec::new();
    }
    pull_records(&answer.body)
        .iter()
        .map(|record| String::from_utf8_lossy(record.body).into_owned())
        .collect()
}

fn producer_heartbeat(group: &str) -> RemotingCommand {
    let body = serde_json::json!({
        "clientID": "127.0.0.1@tx-test",
        "producerDataSet": [{"groupName": group}],
        "consumerDataSet": [],
    });
    RemotingCommand::request(request::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

#[test]
fn a_committed_half_is_delivered_once_and_a_second_decision_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(options(dir.path()));
    let mut raw = Raw::connect(node.addr());
    let half = send_prepared(&mut raw, "paid");
    assert_eq!(
        max_offset(&mut raw, "Orders", 0),
        0,
        "a half is not in its topic"
    );
    assert_eq!(max_offset(&mut raw, HALF_TOPIC, 0), 1);

    let answer = raw.call(end(&half, GROUP, 8, false));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(delivered(&mut raw), vec!["paid"]);
    let pulled = raw.call(pull_request("Orders", 0, 0, 32, None, None));
    let records = pull_records(&pulled.body);
    let record = &records[0];
    assert_eq!(record.sys_flag & 0xC, TRANSACTION_COMMIT);
    assert_eq!(
        record.prepared_transaction_offset as u64,
        half.commit_log_offset
    );
    assert_eq!(properties::get(record.properties, TRAN_MSG), None);
    assert_eq!(properties::get(record.properties, "REAL_TOPIC"), None);
    assert_eq!(properties::get(record.properties, PGROUP), Some(GROUP));

    for decision in [8, 12] {
        let again = raw.call(end(&half, GROUP, decision, true));
        assert_eq!(again.code, response::SUCCESS, "{again:?}");
        assert!(
            again
                .remark
                .as_deref()
                .unwrap_or("")
                .contains("decided before"),
            "{again:?}"
        );
    }
    assert_eq!(delivered(&mut raw), vec!["paid"], "written once");
    node.shutdown().unwrap();
}

#[test]
fn a_rolled_back_half_is_never_delivered_even_when_a_late_commit_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(options(dir.path()));
    let mut raw = Raw::connect(node.addr());
    let half = send_prepared(&mut raw, "cancelled");
    assert_eq!(
        raw.call(end(&half, GROUP, 12, true)).code,
        response::SUCCESS
    );
    // The delayed oneway COMMIT of the producer's own decision arrives after the check's
    // rollback: it must not flip the outcome.
    raw.send(oneway(end(&half, GROUP, 8, false)));
    let committed = send_prepared(&mut raw, "later");
    assert_eq!(
        raw.call(end(&committed, GROUP, 8, false)).code,
        response::SUCCESS
    );
    assert_eq!(delivered(&mut raw), vec!["later"]);
    node.shutdown().unwrap();
}

#[test]
fn end_transaction_refuses_what_is_not_the_named_half() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(options(dir.path()));
    let mut raw = Raw::connect(node.addr());
    let plain = raw.call(send_request_v1("Orders", 0, b"plain", None, None));
    let (_, plain_offset) = decode_offset_msg_id(plain.opt_str("msgId").unwrap()).unwrap();
    let half = send_prepared(&mut raw, "h");

    let refused = |raw: &mut Raw, command: RemotingCommand, words: &str| {
        let answer = raw.call(command);
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        let remark = answer.remark.unwrap_or_default();
        assert!(remark.contains(words), "{remark:?} lacks {words:?}");
    };
    let not_a_half = Half {
        commit_log_offset: plain_offset,
        ..half.clone()
    };
    refused(&mut raw, end(&not_a_half, GROUP, 8, false), "not");
    refused(
        &mut raw,
        end(&half, "another-group", 8, false),
        "producer group",
    );
    let forged = Half {
        queue_offset: 7,
        ..half.clone()
    };
    refused(
        &mut raw,
        end(&forged, GROUP, 8, false),
        "no half message at queue offset 7",
    );
    let negative = Half {
        queue_offset: -1,
        ..half.clone()
    };
    refused(&mut raw, end(&negative, GROUP, 8, false), "negative");
    refused(&mut raw, end(&half, GROUP, 5, false), "commitOrRollback 5");
    let mut missing = end(&half, GROUP, 8, false);
    missing.ext_fields.remove("producerGroup");
    let answer = raw.call(missing);
    assert_ne!(answer.code, response::SUCCESS, "{answer:?}");

    // Unknown (0) leaves the half waiting; nothing above decided it.
    assert_eq!(
        raw.call(end(&half, GROUP, 0, false)).code,
        response::SUCCESS
    );
    assert_eq!(
        max_offset(&mut raw, "Orders", 0),
        1,
        "only the plain message"
    );
    assert_eq!(
        raw.call(end(&half, GROUP, 8, false)).code,
        response::SUCCESS
    );
    assert_eq!(delivered(&mut raw), vec!["plain", "h"]);
    node.shutdown().unwrap();
}

#[test]
fn transactional_batches_system_topics_and_a_refusing_broker_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.reject_transaction_message = true;
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    let answer = raw.call(prepared("x", GROUP));
    assert_eq!(answer.code, response::NO_PERMISSION, "{answer:?}");
    assert!(answer
        .remark
        .unwrap()
        .contains("sending transaction message is forbidden"));
    node.shutdown().unwrap();

    let node = start(options(dir.path()));
    let mut raw = Raw::connect(node.addr());
    let mut to_system = prepared("x", GROUP);
    to_system.put_ext("topic", HALF_TOPIC);
    assert_eq!(raw.call(to_system).code, response::NO_PERMISSION);
    let mut no_group = prepared("x", "");
    no_group.put_ext(
        "properties",
        properties::encode([(TRAN_MSG, "true"), (properties::UNIQ_KEY, "AB")]),
    );
    let answer = raw.call(no_group);
    assert_eq!(answer.code, response::MESSAGE_ILLEGAL, "{answer:?}");

    let mut body = Vec::new();
    ringmq::remoting::send_header::encode_batch(
        &[ringmq::remoting::send_header::BatchItem {
            flag: 0,
            body: bytes::Bytes::from_static(b"a"),
            properties: properties::encode([(TRAN_MSG, "true"), (PGROUP, GROUP)]),
        }],
        &mut body,
    )
    .unwrap();
    let mut batch = ringmq::remoting::requests::send_request_v2("Orders", 0, &body, None, None);
    batch.code = request::SEND_BATCH_MESSAGE;
    let answer = raw.call(batch);
    assert_eq!(answer.code, response::MESSAGE_ILLEGAL, "{answer:?}");
    assert!(answer.remark.unwrap().contains("transactional"));
    assert_eq!(max_offset(&mut raw, "Orders", 0), 0);
    assert_eq!(max_offset(&mut raw, HALF_TOPIC, 0), 0);
    node.shutdown().unwrap();
}

#[test]
fn an_undecided_half_is_checked_back_on_its_producers_connection_and_the_answer_decides_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(options(dir.path()));
    let mut producer = Raw::connect(node.addr());
    assert_eq!(
        producer.call(producer_heartbeat(GROUP)).code,
        response::SUCCESS
    );
    let half = send_prepared(&mut producer, "unknown at first");

    let check = producer.next(PATIENCE, |frame| {
        frame.code == request::CHECK_TRANSACTION_STATE && !frame.is_response()
    });
    assert!(check.is_oneway(), "{check:?}");
    assert_eq!(check.opt_str("tranStateTableOffset"), Some("0"));
    assert_eq!(
        check.opt_str("commitLogOffset"),
        Some(half.commit_log_offset.to_string().as_str())
    );
    assert_eq!(check.opt_str("msgId"), Some(half.msg_id.as_str()));
    assert_eq!(check.opt_str("topic"), Some("Orders"));
    let records = pull_records(&check.body);
    assert_eq!((records[0].topic, records[0].queue_id), ("Orders", 0));
    assert_eq!(properties::get(records[0].properties, PGROUP), Some(GROUP));

    // Checked again each round until answered; the answer names the same half.
    producer.send(oneway(end(&half, GROUP, 8, true)));
    let mut reader = Raw::connect(node.addr());
    wait_for(PATIENCE, "the checked half committed", || {
        delivered(&mut reader) == vec!["unknown at first"]
    });
    node.shutdown().unwrap();
}

#[test]
fn a_half_never_answered_is_moved_to_the_check_max_topic_after_its_last_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.transaction_check_max = 2;
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    send_prepared(&mut raw, "orphan");
    wait_for(PATIENCE, "the orphan moved", || {
        max_offset(&mut raw, CHECK_MAX_TOPIC, 0) == 1
    });
    let moved = raw.call(pull_request(CHECK_MAX_TOPIC, 0, 0, 32, None, None));
    let records = pull_records(&moved.body);
    assert_eq!(records[0].body, b"orphan");
    assert_eq!(
        properties::get(records[0].properties, "TRANSACTION_CHECK_TIMES"),
        Some("2")
    );
    assert_eq!(max_offset(&mut raw, "Orders", 0), 0, "never delivered");
    node.shutdown().unwrap();
}

#[test]
fn decisions_survive_a_restart_and_what_was_undecided_is_checked_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    // No check before the restart.
    config.transaction_time_out = Duration::from_secs(3600);
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    let committed = send_prepared(&mut raw, "committed");
    let rolled_back = send_prepared(&mut raw, "rolled back");
    let undecided = send_prepared(&mut raw, "undecided");
    assert_eq!(
        raw.call(end(&committed, GROUP, 8, false)).code,
        response::SUCCESS
    );
    assert_eq!(
        raw.call(end(&rolled_back, GROUP, 12, false)).code,
        response::SUCCESS
    );
    drop(raw);
    node.shutdown().unwrap();

    let node = start(options(dir.path()));
    let mut producer = Raw::connect(node.addr());
    assert_eq!(
        producer.call(producer_heartbeat(GROUP)).code,
        response::SUCCESS
    );
    let check = producer.next(PATIENCE, |frame| {
        frame.code == request::CHECK_TRANSACTION_STATE && !frame.is_response()
    });
    assert_eq!(
        check.opt_str("tranStateTableOffset"),
        Some(undecided.queue_offset.to_string().as_str()),
        "only the undecided half is checked"
    );
    for late in [&committed, &rolled_back] {
        let answer = producer.call(end(late, GROUP, 8, true));
        assert!(answer.remark.unwrap_or_default().contains("decided before"));
    }
    assert_eq!(
        producer.call(end(&undecided, GROUP, 12, true)).code,
        response::SUCCESS
    );
    assert_eq!(delivered(&mut producer), vec!["committed"]);
    node.shutdown().unwrap();
}

/// The sum over shards of the samples of `name`.
fn total(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn with_two_shards_each_half_waits_on_its_queues_shard_and_the_metrics_count_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.shards = 2;
    config.transaction_time_out = Duration::from_secs(3600);
    config.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    let mut halves = Vec::new();
    for queue in 0..4 {
        let mut send = prepared(&format!("q{queue}"), GROUP);
        send.put_ext("queueId", queue);
        let answer = raw.call(send);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let (_, offset) = decode_offset_msg_id(answer.opt_str("msgId").unwrap()).unwrap();
        let owner = ringmq::shard::routing::queue_owner("Orders", queue, 2);
        assert_eq!(
            (offset >> 56) as u8,
            owner,
            "the half is on its queue's shard"
        );
        halves.push(Half {
            queue_offset: answer.opt_str("queueOffset").unwrap().parse().unwrap(),
            commit_log_offset: offset,
            msg_id: answer.opt_str("transactionId").unwrap().to_owned(),
        });
    }
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    wait_for(PATIENCE, "the pending gauge", || {
        total(&scrape(metrics), "ringmq_transaction_halves_pending") == 4
    });
    for (queue, half) in halves.iter().enumerate() {
        let decision = if queue % 2 == 0 { 8 } else { 12 };
        let answer = raw.call(end(half, GROUP, decision, false));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    for queue in 0..4 {
        let expected = i64::from(queue % 2 == 0);
        assert_eq!(
            max_offset(&mut raw, "Orders", queue),
            expected,
            "queue {queue}"
        );
    }
    let text = scrape(metrics);
    assert_eq!(
        total(&text, "ringmq_transaction_prepared_total"),
        4,
        "{text}"
    );
    assert_eq!(total(&text, "ringmq_transaction_commits_total"), 2);
    assert_eq!(total(&text, "ringmq_transaction_rollbacks_total"), 2);
    assert_eq!(total(&text, "ringmq_transaction_halves_pending"), 0);
    node.shutdown().unwrap();
}

#[test]
fn the_pending_halves_of_a_group_are_listed_oldest_first_with_their_checks() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.transaction_time_out = Duration::from_secs(3600);
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    let first = send_prepared(&mut raw, "one");
    send_prepared(&mut raw, "two");
    let answer = raw.call(prepared("other's", "another-group"));
    assert_eq!(answer.code, response::SUCCESS);
    assert_eq!(
        raw.call(end(&first, GROUP, 12, false)).code,
        response::SUCCESS
    );

    let list = |raw: &mut Raw, limit: &str| {
        let mut command =
            RemotingCommand::request(request::RINGMQ_LIST_PENDING_HALVES, ExtFields::new());
        command.put_ext("producerGroup", GROUP);
        command.put_ext("limit", limit);
        raw.call(command)
    };
    let answer = list(&mut raw, "10");
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let shard = &body["shards"][0];
    assert_eq!(shard["pending"], 2, "{body}");
    let halves = shard["halves"].as_array().unwrap();
    assert_eq!(halves.len(), 1, "only the group's undecided half: {body}");
    assert_eq!(halves[0]["topic"], "Orders");
    assert_eq!(halves[0]["halfOffset"], 1);
    assert_eq!(halves[0]["checks"], 0);
    for bad in ["0", "1001", "x"] {
        assert_ne!(list(&mut raw, bad).code, response::SUCCESS, "limit {bad}");
    }
    node.shutdown().unwrap();
}

#[test]
fn a_committed_message_that_asks_for_a_delay_level_waits_its_delay_after_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.message_delay_level = ringmq::broker::delay::DelayLevels::parse("500ms 1s").unwrap();
    config.transaction_time_out = Duration::from_secs(3600);
    let node = start(config);
    let mut raw = Raw::connect(node.addr());
    let mut send = prepared("later", GROUP);
    let mut props = properties::normalized(send.opt_str("properties").unwrap()).into_owned();
    properties::push_pair(&mut props, ringmq::broker::delay::DELAY, "1");
    send.put_ext("properties", props);
    let answer = raw.call(send);
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(
        max_offset(&mut raw, ringmq::store::topic::SCHEDULE_TOPIC, 0),
        0,
        "a prepared message is never delayed"
    );
    let (_, offset) = decode_offset_msg_id(answer.opt_str("msgId").unwrap()).unwrap();
    let half = Half {
        queue_offset: answer.opt_str("queueOffset").unwrap().parse().unwrap(),
        commit_log_offset: offset,
        msg_id: answer.opt_str("transactionId").unwrap().to_owned(),
    };
    let committed_at = std::time::Instant::now();
    assert_eq!(
        raw.call(end(&half, GROUP, 8, false)).code,
        response::SUCCESS
    );
    assert_eq!(
        max_offset(&mut raw, ringmq::store::topic::SCHEDULE_TOPIC, 0),
        1
    );
    wait_for(PATIENCE, "the delayed commit", || {
        delivered(&mut raw) == vec!["later"]
    });
    assert!(
        committed_at.elapsed() >= Duration::from_millis(450),
        "delivered {:?} after the commit, before its level's 500 ms",
        committed_at.elapsed()
    );
    node.shutdown().unwrap();
}

#[test]
fn a_check_whose_producer_is_gone_is_counted_and_the_next_producer_of_the_group_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path());
    config.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    let node = start(config);
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    let mut gone = Raw::connect(node.addr());
    assert_eq!(gone.call(producer_heartbeat(GROUP)).code, response::SUCCESS);
    let half = send_prepared(&mut gone, "orphaned for a while");
    drop(gone);
    wait_for(PATIENCE, "a check with no producer to ask", || {
        total(&scrape(metrics), "ringmq_transaction_checks_unsent_total") > 0
    });
    let mut next = Raw::connect(node.addr());
    assert_eq!(next.call(producer_heartbeat(GROUP)).code, response::SUCCESS);
    let check = next.next(PATIENCE, |frame| {
        frame.code == request::CHECK_TRANSACTION_STATE && !frame.is_response()
    });
    assert_eq!(check.opt_str("msgId"), Some(half.msg_id.as_str()));
    assert_eq!(
        next.call(end(&half, GROUP, 8, true)).code,
        response::SUCCESS
    );
    assert_eq!(delivered(&mut next), vec!["orphaned for a while"]);
    node.shutdown().unwrap();
}
