//! A real `ringmq serve` process (two shards, SYNC_FLUSH, checks every 300 ms for halves
//! older than 300 ms) killed with SIGKILL at seeded random moments while a producer sends
//! prepared messages and decides some of them (each message's decision, commit or
//! rollback, is fixed before it is sent, as a producer's local transaction would fix it).
//! At the end, with one more start, the producer answers every check with that decision.
//! Then:
//! - every message whose commit was answered, and every acknowledged prepared message the
//!   producer means to commit, is delivered (the checks bring the undecided ones);
//! - no message the producer rolls back is delivered, and nothing is delivered that was
//!   never sent;
//! - copies delivered twice (a commit written before a kill whose op record was not) are
//!   counted and printed, not refused.
//!
//! `RINGMQ_KILL_SEED` picks the moments and the decisions; the seed is printed, and named
//! in every failure.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::model::wait_until_delivered;
use common::pull_records;
use common::raw::Raw;
use common::serve::{kill_seed, Serve};
use common::Rng;
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::broker::transaction::halves::{PGROUP, TRAN_MSG};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::{ExtFields, RemotingCommand, ONEWAY_FLAG};
use ringmq::store::properties;

const TOPIC: &str = "Payments";
const QUEUES: i32 = 4;
const GROUP: &str = "payments-tx";
const KILLS: usize = 4;
/// Longest the final start may take to bring every commit.
const PATIENCE: Duration = Duration::from_secs(30);

fn start(dir: &Path, seed: u64) -> Serve {
    let args = [
        "--flush",
        "sync",
        "--shards",
        "2",
        "--segment-size",
        "1048576",
        "--set",
        "maxMessageSize=8192",
        "--set",
        "transactionTimeOut=300",
        "--set",
        "transactionCheckInterval=300",
        // Never discarded within the test, whatever the kills cost.
        "--set",
        "transactionCheckMax=63",
    ];
    Serve::start(dir, &args, &format!("seed {seed}"))
}

fn prepared(queue: i32, body: &str) -> RemotingCommand {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TRAN_MSG, "true");
    properties::push_pair(&mut props, PGROUP, GROUP);
    send.put_ext("properties", props);
    send.put_ext("sysFlag", 4);
    send
}

/// END_TRANSACTION naming a half by the fields a send answer or a check carries.
fn end(
    queue_offset: &str,
    commit_log_offset: u64,
    msg_id: &str,
    commit: bool,
    from_check: bool,
) -> RemotingCommand {
    let mut command = RemotingCommand::request(request::END_TRANSACTION, ExtFields::new());
    command.put_ext("producerGroup", GROUP);
    command.put_ext("tranStateTableOffset", queue_offset);
    command.put_ext("commitLogOffset", commit_log_offset);
    command.put_ext("commitOrRollback", if commit { 8 } else { 12 });
    command.put_ext("fromTransactionCheck", from_check);
    command.put_ext("msgId", msg_id);
    command
}

fn heartbeat() -> RemotingCommand {
    let body = serde_json::json!({
        "clientID": "127.0.0.1@kill-tx",
        "producerDataSet": [{"groupName": GROUP}],
        "consumerDataSet": [],
    });
    RemotingCommand::request(request::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

/// What the producer knows of one message.
#[derive(Default)]
struct Sent {
    commit: bool,
    /// The prepared send was acknowledged.
    acked: bool,
    /// Its decision was answered SUCCESS.
    decided: bool,
}

/// `KILLS` rounds of prepared sends and decisions, each ended by a SIGKILL.
fn send_through_kills(dir: &Path, seed: u64, rng: &mut Rng) -> BTreeMap<String, Sent> {
    let mut sent: BTreeMap<String, Sent> = BTreeMap::new();
    let mut next_id = 0u64;
    for round in 0..KILLS {
        let serve = start(dir, seed);
        let addr = serve.addr;
        let run_for = Duration::from_millis(rng.range(300, 1500));
        let killer = serve.kill_after(run_for);
        let mut raw = Raw::connect(addr);
        let until = Instant::now() + run_for + Duration::from_secs(2);
        let (mut acked_now, mut decided_now) = (0, 0);
        while Instant::now() < until {
            let queue = rng.range(0, QUEUES as u64) as i32;
            let body = format!("p{next_id}-r{round}");
            next_id += 1;
            let commit = rng.chance(60);
            // Recorded before the send: a kill may store it without acknowledging it.
            sent.insert(
                body.clone(),
                Sent {
                    commit,
                    ..Sent::default()
                },
            );
            let Some(answer) = raw.try_call(prepared(queue, &body)) else {
                break; // killed
            };
            assert_eq!(answer.code, response::SUCCESS, "seed {seed}: {answer:?}");
            sent.get_mut(&body).unwrap().acked = true;
            acked_now += 1;
            if rng.chance(30) {
                continue; // left for the checks
            }
            let (_, offset) = decode_offset_msg_id(answer.opt_str("msgId").unwrap()).unwrap();
            let decision = end(
                answer.opt_str("queueOffset").unwrap(),
                offset,
                answer.opt_str("transactionId").unwrap(),
                commit,
                false,
            );
            let Some(answer) = raw.try_call(decision) else {
                break;
            };
            assert_eq!(answer.code, response::SUCCESS, "seed {seed}: {answer:?}");
            sent.get_mut(&body).unwrap().decided = true;
            decided_now += 1;
        }
        killer.join().unwrap();
        println!(
            "seed {seed}: round {round}: killed after {run_for:?}, {acked_now} prepared and {decided_now} decided"
        );
    }
    sent
}

/// Answers every check on a producer connection with the message's decision until `stop`;
/// returns the checks answered.
fn answer_checks(
    mut producer: Raw,
    decisions: HashMap<String, bool>,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(frame) = producer.poll(Duration::from_millis(100)) else {
            continue;
        };
        if frame.code != request::CHECK_TRANSACTION_STATE || frame.is_response() {
            continue;
        }
        let records = pull_records(&frame.body);
        let body = String::from_utf8_lossy(records[0].body).into_owned();
        let commit = decisions.get(&body).copied().unwrap_or(false);
        let mut decision = end(
            frame.opt_str("tranStateTableOffset").unwrap(),
            frame.opt_str("commitLogOffset").unwrap().parse().unwrap(),
            frame.opt_str("msgId").unwrap_or(""),
            commit,
            true,
        );
        decision.flag |= ONEWAY_FLAG;
        producer.send(decision);
        answered += 1;
    }
    answered
}

#[test]
fn sigkill_during_transactions_delivers_every_commit_and_no_rollback() {
    let began = Instant::now();
    let seed = kill_seed(0x7a_c0de);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let sent = send_through_kills(dir.path(), seed, &mut rng);

    let serve = start(dir.path(), seed);
    let mut producer = Raw::connect(serve.addr);
    assert_eq!(producer.call(heartbeat()).code, response::SUCCESS);
    let decisions: HashMap<String, bool> = sent
        .iter()
        .map(|(body, s)| (body.clone(), s.commit))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let stop = stop.clone();
        std::thread::spawn(move || answer_checks(producer, decisions, stop))
    };
    let must_arrive: Vec<&String> = sent
        .iter()
        .filter(|(_, s)| s.commit && s.acked)
        .map(|(body, _)| body)
        .collect();
    assert!(
        must_arrive.len() > 20,
        "seed {seed}: only {} commits",
        must_arrive.len()
    );
    let mut raw = Raw::connect(serve.addr);
    let delivered = wait_until_delivered(
        &mut raw,
        TOPIC,
        QUEUES,
        &must_arrive,
        PATIENCE,
        "every committed message delivered",
        |record| record.queue_id,
    );
    stop.store(true, Ordering::Relaxed);
    let checks = checker.join().unwrap();
    let mut duplicates = 0;
    for (body, copies) in &delivered {
        let what = sent
            .get(body)
            .unwrap_or_else(|| panic!("seed {seed}: {body} delivered but never sent"));
        assert!(
            what.commit,
            "seed {seed}: {body} is rolled back by its producer, yet delivered"
        );
        duplicates += copies.len() - 1;
    }
    let decided = sent.values().filter(|s| s.decided).count();
    println!(
        "seed {seed}: {} prepared and acknowledged, {decided} decided by their producer, {checks} checks answered, {} delivered, {duplicates} delivered twice after a kill; {:?} in all",
        sent.values().filter(|s| s.acked).count(),
        delivered.len(),
        began.elapsed()
    );
    serve.kill();
}
