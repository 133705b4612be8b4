//! Transactions hold on a promoted slave (issue 27: "what it builds must hold on a
//! promoted slave too"). A SYNC_MASTER and its slave of two shards: on the master, halves
//! are prepared on queues of both shards; some are committed, some rolled back, the rest
//! left undecided (the master's `transactionTimeOut` is an hour, so it checks none). The
//! master dies; the slave, caught up, is started as the group's master with short check
//! settings. Then:
//! - the committed messages are in the topic once (the master's commit, replicated), the
//!   rolled-back ones never;
//! - the promoted broker checks back exactly the undecided halves with the producer
//!   group, and the producer's answers decide them there: its commits arrive, its
//!   rollbacks do not;
//! - a late decision for a half the master decided changes nothing.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::process_replication::{
    pair_master, read_topic, StreamingPair, PAIR_MASTER, PAIR_SLAVE,
};
use common::pull_records;
use common::raw::Raw;
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::broker::transaction::halves::{PGROUP, TRAN_MSG};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::store::properties;

const TOPIC: &str = "Ledger";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const GROUP: &str = "ledger-tx";
const LIMIT: Duration = Duration::from_secs(30);

/// What a producer keeps of a prepared send.
struct Half {
    queue_offset: String,
    commit_log_offset: u64,
    msg_id: String,
    commit: bool,
}

fn prepare(raw: &mut Raw, queue: i32, body: &str, commit: bool) -> Half {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TRAN_MSG, "true");
    properties::push_pair(&mut props, PGROUP, GROUP);
    send.put_ext("properties", props);
    send.put_ext("sysFlag", 4);
    let answer = raw.call(send);
    assert_eq!(answer.code, response::SUCCESS, "{body}: {answer:?}");
    let (_, commit_log_offset) = decode_offset_msg_id(answer.opt_str("msgId").unwrap()).unwrap();
    Half {
        queue_offset: answer.opt_str("queueOffset").unwrap().to_owned(),
        commit_log_offset,
        msg_id: answer.opt_str("transactionId").unwrap().to_owned(),
        commit,
    }
}

fn end(half: &Half, commit: bool, from_check: bool) -> RemotingCommand {
    let mut command = RemotingCommand::request(request::END_TRANSACTION, ExtFields::new());
    command.put_ext("producerGroup", GROUP);
    command.put_ext("tranStateTableOffset", &half.queue_offset);
    command.put_ext("commitLogOffset", half.commit_log_offset);
    command.put_ext("commitOrRollback", if commit { 8 } else { 12 });
    command.put_ext("fromTransactionCheck", from_check);
    command.put_ext("msgId", &half.msg_id);
    command
}

fn heartbeat() -> RemotingCommand {
    let body = serde_json::json!({
        "clientID": "127.0.0.1@ledger",
        "producerDataSet": [{"groupName": GROUP}],
        "consumerDataSet": [],
    });
    RemotingCommand::request(request::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

/// The bodies `broker` holds in the topic, sorted, each as often as it holds it.
fn delivered(broker: SocketAddr) -> Vec<String> {
    let mut bodies: Vec<String> = read_topic(broker, TOPIC, &QUEUES)
        .into_values()
        .map(|body| String::from_utf8(body).expect("text"))
        .collect();
    bodies.sort();
    bodies
}

/// Answers the promoted broker's checks with each half's decision until every undecided
/// half was checked (each once at least); the bodies checked.
fn answer_checks(
    pair: &StreamingPair,
    producer: &mut Raw,
    halves: &BTreeMap<String, Half>,
) -> BTreeSet<String> {
    assert_eq!(producer.call(heartbeat()).code, response::SUCCESS);
    let open: BTreeSet<String> = halves
        .keys()
        .filter(|body| body.starts_with("open"))
        .cloned()
        .collect();
    let mut checked = BTreeSet::new();
    pair.cluster.wait_until(
        LIMIT,
        "every undecided half checked back and answered",
        || {
            let Some(frame) = producer.poll(Duration::from_millis(200)) else {
                return checked == open;
            };
            if frame.code == request::CHECK_TRANSACTION_STATE && !frame.is_response() {
                let body = String::from_utf8_lossy(pull_records(&frame.body)[0].body).into_owned();
                assert!(
                    open.contains(&body),
                    "{body} was decided on the master, yet checked"
                );
                let half = &halves[&body];
                assert_eq!(frame.opt_str("msgId"), Some(half.msg_id.as_str()));
                let mut answer = end(half, half.commit, true);
                answer.flag |= ringmq::remoting::ONEWAY_FLAG;
                producer.send(answer);
                checked.insert(body);
            }
            checked == open
        },
    );
    checked
}

/// Prepares 16 halves on the master, over every queue, and decides half of them: the
/// halves by body (`decided-…` or `open-…`, `…-commit-…` or `…-rollback-…`).
fn prepare_on_master(master: SocketAddr) -> BTreeMap<String, Half> {
    let mut raw = Raw::connect(master);
    let mut halves = BTreeMap::new();
    for (n, &queue) in QUEUES.iter().cycle().take(16).enumerate() {
        let commit = n % 2 == 0;
        let decided = n % 4 < 2;
        let body = format!(
            "{}-{}-{n}",
            if decided { "decided" } else { "open" },
            if commit { "commit" } else { "rollback" }
        );
        let half = prepare(&mut raw, queue, &body, commit);
        if decided {
            let answer = raw.call(end(&half, commit, false));
            assert_eq!(answer.code, response::SUCCESS, "{body}: {answer:?}");
        }
        halves.insert(body, half);
    }
    halves
}

#[test]
fn a_promoted_slave_keeps_the_decisions_and_checks_back_what_was_undecided() {
    let master_spec = pair_master().set("transactionTimeOut", 3_600_000);
    let mut pair = StreamingPair::start_with(master_spec, TOPIC, &QUEUES, LIMIT);
    let halves = prepare_on_master(pair.master);
    let committed_by_master: Vec<String> = halves
        .iter()
        .filter(|(body, half)| half.commit && body.starts_with("decided"))
        .map(|(body, _)| body.clone())
        .collect();
    // A probe per queue (a StreamingPair's SEND_OK) is in the topic too.
    let of_transactions = |bodies: Vec<String>| -> Vec<String> {
        bodies.into_iter().filter(|body| body != "probe").collect()
    };
    pair.cluster
        .wait_until(LIMIT, "the master delivers its commits", || {
            of_transactions(delivered(pair.master)) == committed_by_master
        });
    pair.wait_caught_up(LIMIT);

    pair.cluster.broker(PAIR_MASTER).kill();
    let promoted = pair.cluster.broker(PAIR_SLAVE);
    promoted.stop();
    promoted.set("brokerId", 0);
    promoted.set("brokerRole", "ASYNC_MASTER");
    promoted.set("haMasterAddress", "");
    promoted.set("transactionTimeOut", 300);
    promoted.set("transactionCheckInterval", 300);
    promoted.start();

    let mut producer = Raw::connect(pair.slave);
    let checked = answer_checks(&pair, &mut producer, &halves);
    assert_eq!(checked.len(), 8, "the undecided halves");
    let mut expected: Vec<String> = halves
        .iter()
        .filter(|(_, half)| half.commit)
        .map(|(body, _)| body.clone())
        .collect();
    expected.sort();
    pair.cluster.wait_until(
        LIMIT,
        "the promoted broker delivers every commit once",
        || of_transactions(delivered(pair.slave)) == expected,
    );
    for (body, half) in halves
        .iter()
        .filter(|(body, _)| body.starts_with("decided"))
    {
        let late = producer.call(end(half, !half.commit, true));
        assert_eq!(late.code, response::SUCCESS, "{body}: {late:?}");
        assert!(
            late.remark.unwrap_or_default().contains("decided before"),
            "{body}"
        );
    }
    assert_eq!(
        of_transactions(delivered(pair.slave)),
        expected,
        "late decisions changed nothing"
    );
}
