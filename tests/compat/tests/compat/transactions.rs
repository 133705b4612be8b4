//! Transactional messages (reference-2 §3) with the stock `TransactionMQProducer`: half
//! messages (SEND with `TRAN_MSG`, sysFlag PREPARED), END_TRANSACTION (37, oneway) with the
//! local transaction's decision, and the broker's check-back (CHECK_TRANSACTION_STATE, 39)
//! for a decision left UNKNOW.
//!
//! Both scenarios run the broker with the check service's RocketMQ keys shortened
//! ([`TX_SETTINGS`]: a half may be checked 1 s after it was sent, rounds every 1 s), so a
//! check-back comes within seconds on either target.
//!
//! RocketMQ 5.5.0 also gets `transactionOpBatchInterval=100` ([`tx_settings`]). It records
//! a decision (the op message in `RMQ_SYS_TRANS_OP_HALF_TOPIC`) in batches written every
//! `transactionOpBatchInterval` (3 s by default), and its check service takes a half with
//! no op yet for undecided: with the 1 s keys and the default batching, every half was
//! checked back twice (A and B too) and every commit answered to a check was written again,
//! so A and C were each delivered twice (seen in a run: 30 checks for 15 halves, the op
//! topic still empty 1.4 s after the last send). RocketMQ is exact only while a decision
//! is recorded before `transactionTimeOut` and before the next check round.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq_compat::node::Node;
use ringmq_compat::{
    client_config, prepare_topic, raw, run_clients, seed, start_member, ConsumerSpec, Delivery,
    Member,
};
use rocketmq_client_rust::{
    ClientRuntime, LocalTransactionState, TransactionListener, TransactionMQProducer,
};
use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_model::result::SendStatus;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

use super::{
    check_deliveries, duplicates, message, numbered, offset_of_msg_id, wait_for_all, Expected,
};

/// The check service's keys (RocketMQ's names, in ms): a half is checked once it is 1 s old,
/// in rounds 1 s apart.
const TX_SETTINGS: [&str; 2] = ["transactionTimeOut=1000", "transactionCheckInterval=1000"];

/// [`TX_SETTINGS`], and under the rocketmq target its op batching shortened to 100 ms (see
/// the module's doc), printed.
fn tx_settings() -> Vec<&'static str> {
    let mut settings = TX_SETTINGS.to_vec();
    if ringmq_compat::node::is_rocketmq() {
        println!(
            "ADAPTED under COMPAT_TARGET=rocketmq: transactionOpBatchInterval=100 (default 3000): \
             RocketMQ checks back a decided half whose op is not written yet, and commits it again"
        );
        settings.push("transactionOpBatchInterval=100");
    }
    settings
}

/// After the committed messages arrived: how long nothing more may be checked back or
/// delivered (three check rounds).
const QUIET: Duration = Duration::from_secs(3);
/// Messages per set.
const PER_SET: usize = 5;
/// sysFlag's transaction bits and their values (`MessageSysFlag`).
const TRANSACTION_MASK: i32 = 0x3 << 2;
const TRANSACTION_COMMIT_TYPE: i32 = 0x2 << 2;
/// `ResponseCode.MESSAGE_ILLEGAL`.
const MESSAGE_ILLEGAL: i32 = 13;

/// What a message's local transaction decides, named in its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Decision {
    /// COMMIT_MESSAGE when it runs, and when checked.
    Commit,
    /// ROLLBACK_MESSAGE when it runs, and when checked.
    Rollback,
    /// UNKNOW when it runs; COMMIT_MESSAGE when the broker checks it back.
    UnknownThenCommit,
}

impl Decision {
    const ALL: [Decision; 3] = [
        Decision::Commit,
        Decision::Rollback,
        Decision::UnknownThenCommit,
    ];

    fn name(self) -> &'static str {
        match self {
            Decision::Commit => "tx-commit",
            Decision::Rollback => "tx-rollback",
            Decision::UnknownThenCommit => "tx-unknown",
        }
    }

    /// The decision a body of this run names (`{seed}-{name}-{i}`), if any.
    fn of(seed: u64, body: &str) -> Option<Decision> {
        Decision::ALL
            .into_iter()
            .find(|d| body.starts_with(&format!("{seed}-{}-", d.name())))
    }
}

/// One CHECK_TRANSACTION_STATE as the listener saw it, and its answer.
#[derive(Clone, Debug)]
struct Check {
    body: String,
    topic: String,
    uniq_key: Option<String>,
    producer_group: Option<String>,
    commit_log_offset: i64,
    answer: LocalTransactionState,
    /// The wall clock just before the answer went back to the client (ms since the epoch):
    /// END_TRANSACTION leaves after it.
    answered_ms: i64,
}

/// The local transactions: decides by the body, and records every call.
#[derive(Clone)]
struct Ledger {
    seed: u64,
    executed: Arc<Mutex<Vec<String>>>,
    checks: Arc<Mutex<Vec<Check>>>,
}

impl Ledger {
    fn new(seed: u64) -> Ledger {
        Ledger {
            seed,
            executed: Arc::default(),
            checks: Arc::default(),
        }
    }

    fn checks(&self) -> Vec<Check> {
        self.checks.lock().unwrap().clone()
    }

    fn executed(&self) -> Vec<String> {
        self.executed.lock().unwrap().clone()
    }
}

impl TransactionListener for Ledger {
    fn execute_local_transaction(
        &self,
        msg: &dyn MessageTrait,
        _arg: Option<&(dyn Any + Send + Sync)>,
    ) -> LocalTransactionState {
        let body = msg
            .get_body()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        self.executed.lock().unwrap().push(body.clone());
        match Decision::of(self.seed, &body) {
            Some(Decision::Commit) => LocalTransactionState::CommitMessage,
            Some(Decision::Rollback) => LocalTransactionState::RollbackMessage,
            _ => LocalTransactionState::Unknown,
        }
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> LocalTransactionState {
        let inner = msg.message_inner();
        let body = String::from_utf8_lossy(inner.body_slice()).into_owned();
        let answer = match Decision::of(self.seed, &body) {
            Some(Decision::Commit | Decision::UnknownThenCommit) => {
                LocalTransactionState::CommitMessage
            }
            Some(Decision::Rollback) => LocalTransactionState::RollbackMessage,
            None => LocalTransactionState::Unknown,
        };
        self.checks.lock().unwrap().push(Check {
            body,
            topic: msg.topic().to_string(),
            uniq_key: inner.property("UNIQ_KEY").map(str::to_string),
            producer_group: inner.property("PGROUP").map(str::to_string),
            commit_log_offset: msg.commit_log_offset(),
            answer,
            answered_ms: super::now_ms(),
        });
        answer
    }
}

/// A started transactional producer of `group` with `listener`.
async fn start_tx_producer(
    runtime: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    listener: Ledger,
) -> TransactionMQProducer {
    let mut producer = TransactionMQProducer::builder(Arc::clone(runtime))
        .client_config(client_config(namesrv, &format!("{group}-producer")))
        .producer_group(group.to_string())
        .name_server_addr(namesrv.to_string())
        .send_msg_timeout(5_000)
        .transaction_listener(listener)
        .build();
    producer
        .start()
        .await
        .expect("start the transactional producer");
    producer
}

/// The end offset of `queue` of `topic`, or what the broker answered instead (the half and
/// op topics, printed only: where they live is the broker's business).
fn end_or_answer(broker: &str, topic: &str, queue: i32) -> String {
    match raw::request(
        broker,
        30,
        serde_json::json!({"topic": topic, "queueId": queue.to_string()}),
    ) {
        Ok(r) if r.code == 0 => format!("{}", r.ext_fields["offset"]),
        Ok(r) => format!("code {} {:?}", r.code, r.remark),
        Err(e) => format!("{e}"),
    }
}

/// What a half send returned, kept to compare with what is checked back and delivered.
#[derive(Clone, Debug)]
struct HalfSent {
    decision: Decision,
    key: String,
    msg_id: String,
    offset_msg_id: Option<String>,
}

/// Scenario: a `TransactionMQProducer` sends three sets of half messages, interleaved: its
/// local transaction commits set A, rolls back set B, and answers UNKNOW for set C, which
/// it then commits when the broker checks it back. A CLUSTERING push consumer, subscribed
/// before the first send, gets exactly A ∪ C, each once, with its body, tags, keys and the
/// msgId the producer got (`UNIQ_KEY`), on the user's topic without the half's
/// `REAL_TOPIC` and `REAL_QID`, with sysFlag COMMIT and the half it committed in its
/// PREPARED TRANSACTION OFFSET field, and never a message of C before its check
/// was answered. The topic holds A ∪ C and nothing else (GET_MAX_OFFSET). The broker checks
/// back every message of C, with the message on its own topic, its `UNIQ_KEY` and `PGROUP`,
/// and checks back none of A or B (decided at once), not even during [`QUIET`] after the
/// last delivery (three check rounds).
///
/// What the stock client cannot show: a CHECK_TRANSACTION_STATE without a body (or whose
/// body names another producer group) never reaches the listener (the client logs
/// "missing body" and drops it), so such a check of A or B would not be counted here;
/// RUST_LOG shows it.
#[test]
fn a_transactional_producer_delivers_exactly_the_committed_messages() {
    let seed = seed();
    println!("seed {seed}");
    let started = Instant::now();
    let node = Node::start_with("async", &tx_settings());
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatTx{seed}");
    let group = format!("PG_tx_{seed}");
    run_clients("tx", |runtime| {
        let (namesrv, broker, topic, group) = (&namesrv, &broker, &topic, &group);
        async move {
            prepare_topic(&runtime, namesrv, broker, topic).await;
            let member = start_member(
                &runtime,
                ConsumerSpec {
                    namesrv,
                    group: &format!("CG_tx_{seed}"),
                    instance: &format!("tx-consumer-{seed}"),
                    topic,
                    expression: "*",
                    model: MessageModel::Clustering,
                },
            )
            .await;
            let ledger = Ledger::new(seed);
            let mut producer = start_tx_producer(&runtime, namesrv, group, ledger.clone()).await;

            let mut sent: BTreeMap<String, HalfSent> = BTreeMap::new();
            let mut expected: BTreeMap<String, Expected> = BTreeMap::new();
            for i in 0..PER_SET {
                for decision in Decision::ALL {
                    let (body, key) = numbered(seed, decision.name(), i);
                    let result = producer
                        .send_message_in_transaction(
                            message(topic, &body, "TagTx", &key),
                            None::<()>,
                        )
                        .await
                        .unwrap_or_else(|e| panic!("seed {seed}: half send {body}: {e}"));
                    let state = result.local_transaction_state;
                    let half = result
                        .send_result
                        .unwrap_or_else(|| panic!("seed {seed}: {body}: no send result"));
                    assert_eq!(
                        half.send_status,
                        SendStatus::SendOk,
                        "seed {seed}: {body}: {half}"
                    );
                    let want_state = match decision {
                        Decision::Commit => LocalTransactionState::CommitMessage,
                        Decision::Rollback => LocalTransactionState::RollbackMessage,
                        Decision::UnknownThenCommit => LocalTransactionState::Unknown,
                    };
                    assert_eq!(
                        state,
                        Some(want_state),
                        "seed {seed}: local transaction of {body}"
                    );
                    let msg_id = half
                        .msg_id
                        .as_ref()
                        .unwrap_or_else(|| panic!("seed {seed}: {body}: no msgId"))
                        .to_string();
                    // The send response's transactionId is the message's unique key.
                    assert_eq!(
                        half.transaction_id.as_deref(),
                        Some(msg_id.as_str()),
                        "seed {seed}: {body}: transactionId of {half}"
                    );
                    if i == 0 {
                        println!(
                            "seed {seed}: half {body}: msgId {msg_id}, offsetMsgId {:?}, \
                             transactionId {:?}, queue {:?}, queueOffset {}",
                            half.offset_msg_id,
                            half.transaction_id,
                            half.message_queue,
                            half.queue_offset
                        );
                    }
                    if decision != Decision::Rollback {
                        expected.insert(body.clone(), Expected::new("TagTx", key.clone()));
                    }
                    sent.insert(
                        body,
                        HalfSent {
                            decision,
                            key,
                            msg_id,
                            offset_msg_id: half.offset_msg_id.clone(),
                        },
                    );
                }
            }
            let sent_at = Instant::now();
            assert_eq!(
                ledger.executed().len(),
                3 * PER_SET,
                "seed {seed}: the local transaction ran once per half"
            );

            wait_for_all(
                "A and C: committed at once, and after their check-back",
                &[&member],
                &expected,
            )
            .await;
            let all_in = sent_at.elapsed();
            // Quiet: nothing more checked back or delivered for three check rounds.
            let activity = || (member.collector.len(), ledger.checks().len());
            let before = activity();
            let quiet_until = Instant::now() + QUIET;
            while Instant::now() < quiet_until && activity() == before {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }

            let checks = ledger.checks();
            let deliveries = member.collector.deliveries();
            report(seed, &checks, &sent, all_in, broker);
            check_deliveries(&deliveries, &expected, seed);
            assert_eq!(
                duplicates(&deliveries),
                vec![],
                "seed {seed}: delivered more than once"
            );
            check_checks(seed, group, topic, &checks, &sent);
            check_committed(seed, topic, &deliveries, &checks, &sent);

            // The topic holds exactly the committed messages: no rolled-back one, no commit
            // written twice.
            let queues = member
                .allocator
                .allocations(topic)
                .last()
                .map(|a| a.all.clone())
                .expect("the member allocated the topic's queues");
            let ends: BTreeMap<i32, i64> = queues
                .iter()
                .map(|q| (*q, raw::max_offset(broker, topic, *q)))
                .collect();
            assert_eq!(
                ends.values().sum::<i64>(),
                expected.len() as i64,
                "seed {seed}: messages in {topic} (queue ends {ends:?})"
            );

            member.shutdown().await;
            producer.shutdown().await;
        }
    });
    println!("seed {seed}: scenario took {:?}", started.elapsed());
    drop(node);
}

/// Prints what the broker did: checks per body, and the half and op topics' ends.
fn report(
    seed: u64,
    checks: &[Check],
    sent: &BTreeMap<String, HalfSent>,
    all_in: Duration,
    broker: &str,
) {
    let mut per_body: BTreeMap<&str, usize> = BTreeMap::new();
    for check in checks {
        *per_body.entry(check.body.as_str()).or_default() += 1;
    }
    println!(
        "seed {seed}: A and C delivered {all_in:?} after the last half send; {} check(s): {per_body:?}",
        checks.len()
    );
    if let Some(first) = checks.first() {
        let half = sent.get(&first.body);
        println!("seed {seed}: first check {first:?}; its half send {half:?}");
    }
    println!(
        "seed {seed}: RMQ_SYS_TRANS_HALF_TOPIC q0 end {}, RMQ_SYS_TRANS_OP_HALF_TOPIC q0 end {}",
        end_or_answer(broker, "RMQ_SYS_TRANS_HALF_TOPIC", 0),
        end_or_answer(broker, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)
    );
}

/// Every message of C was checked back (on its own topic, with its msgId and the producer's
/// group), and none of A or B.
fn check_checks(
    seed: u64,
    group: &str,
    topic: &str,
    checks: &[Check],
    sent: &BTreeMap<String, HalfSent>,
) {
    let decided: Vec<&Check> = checks
        .iter()
        .filter(|c| {
            sent.get(&c.body)
                .is_none_or(|h| h.decision != Decision::UnknownThenCommit)
        })
        .collect();
    assert!(
        decided.is_empty(),
        "seed {seed}: checked back though decided at once (or not a half of this run): {decided:?}"
    );
    let checked: BTreeSet<&str> = checks.iter().map(|c| c.body.as_str()).collect();
    let unchecked: Vec<&String> = sent
        .iter()
        .filter(|(body, h)| {
            h.decision == Decision::UnknownThenCommit && !checked.contains(body.as_str())
        })
        .map(|(body, _)| body)
        .collect();
    assert!(
        unchecked.is_empty(),
        "seed {seed}: UNKNOW halves never checked back: {unchecked:?}"
    );
    for check in checks {
        let half = &sent[&check.body];
        assert_eq!(
            check.topic, topic,
            "seed {seed}: the checked message's topic: {check:?}"
        );
        assert_eq!(
            check.uniq_key.as_deref(),
            Some(half.msg_id.as_str()),
            "seed {seed}: the checked message's UNIQ_KEY is the msgId its send got: {check:?}"
        );
        assert_eq!(
            check.producer_group.as_deref(),
            Some(group),
            "seed {seed}: the checked message's PGROUP: {check:?}"
        );
    }
}

/// What a committed message looks like when delivered: its msgId, no `REAL_TOPIC` or
/// `REAL_QID`, sysFlag COMMIT, the half it committed in PREPARED TRANSACTION OFFSET (A: the
/// half its send stored; C: the half its answered check named), and C not before its check
/// was answered.
fn check_committed(
    seed: u64,
    topic: &str,
    deliveries: &[Delivery],
    checks: &[Check],
    sent: &BTreeMap<String, HalfSent>,
) {
    for delivery in deliveries {
        let half = &sent[&delivery.body];
        assert_eq!(delivery.topic, topic, "seed {seed}: {delivery:?}");
        assert_eq!(
            delivery.keys,
            vec![half.key.clone()],
            "seed {seed}: {delivery:?}"
        );
        assert_eq!(
            delivery.picked.get("UNIQ_KEY"),
            Some(&half.msg_id),
            "seed {seed}: delivered with the msgId its send got: {delivery:?}"
        );
        // The half's real topic and queue are gone. (`TRAN_MSG=true`, `PGROUP` and
        // `__transactionId__` stay on a committed message in RocketMQ 5.5.0: not checked.)
        assert!(
            !delivery.picked.contains_key("REAL_QID"),
            "seed {seed}: REAL_QID left on a committed message: {delivery:?}"
        );
        assert_eq!(
            delivery.real_topic, None,
            "seed {seed}: REAL_TOPIC left: {delivery:?}"
        );
        assert_eq!(
            delivery.sys_flag & TRANSACTION_MASK,
            TRANSACTION_COMMIT_TYPE,
            "seed {seed}: sysFlag {:#x} of a committed message: {delivery:?}",
            delivery.sys_flag
        );
        match half.decision {
            Decision::Commit => {
                let half_offset = half
                    .offset_msg_id
                    .as_deref()
                    .map(|id| offset_of_msg_id(id) as i64);
                assert_eq!(
                    Some(delivery.prepared_transaction_offset),
                    half_offset,
                    "seed {seed}: PREPARED TRANSACTION OFFSET of {}: the half's offset ({:?}): {delivery:?}",
                    delivery.body,
                    half.offset_msg_id
                );
            }
            Decision::UnknownThenCommit => {
                let answered: Vec<&Check> = checks
                    .iter()
                    .filter(|c| {
                        c.body == delivery.body && c.answer == LocalTransactionState::CommitMessage
                    })
                    .collect();
                let first = answered.first().unwrap_or_else(|| {
                    panic!("seed {seed}: {} delivered, never checked", delivery.body)
                });
                assert!(
                    delivery.received_ms >= first.answered_ms,
                    "seed {seed}: {} delivered {} ms before its check was answered: {delivery:?}",
                    delivery.body,
                    first.answered_ms - delivery.received_ms
                );
                assert!(
                    answered
                        .iter()
                        .any(|c| c.commit_log_offset == delivery.prepared_transaction_offset),
                    "seed {seed}: PREPARED TRANSACTION OFFSET {} of {} names none of the halves \
                     its checks named ({:?})",
                    delivery.prepared_transaction_offset,
                    delivery.body,
                    answered
                        .iter()
                        .map(|c| c.commit_log_offset)
                        .collect::<Vec<_>>()
                );
            }
            Decision::Rollback => {
                panic!("seed {seed}: a rolled-back message delivered: {delivery:?}")
            }
        }
    }
}

/// Scenario: a transactional send of a batch (the stock client sends it: SEND_BATCH_MESSAGE
/// with `TRAN_MSG` and sysFlag PREPARED) is refused, the local transaction never runs, and
/// nothing of it reaches the topic; a single transactional send after it still commits.
/// RocketMQ 5.5.0 refuses a batch whose sysFlag has a transaction type with
/// MESSAGE_ILLEGAL (13), in `CommitLog.asyncPutMessages`, before anything is written.
#[test]
fn a_transactional_batch_send_is_refused() {
    let seed = seed();
    println!("seed {seed}");
    let started = Instant::now();
    let node = Node::start_with("async", &tx_settings());
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatTxBatch{seed}");
    let group = format!("PG_txbatch_{seed}");
    run_clients("tx-batch", |runtime| {
        let (namesrv, broker, topic, group) = (&namesrv, &broker, &topic, &group);
        async move {
            prepare_topic(&runtime, namesrv, broker, topic).await;
            let member = start_member(
                &runtime,
                ConsumerSpec {
                    namesrv,
                    group: &format!("CG_txbatch_{seed}"),
                    instance: &format!("txbatch-consumer-{seed}"),
                    topic,
                    expression: "*",
                    model: MessageModel::Clustering,
                },
            )
            .await;
            let ledger = Ledger::new(seed);
            let mut producer = start_tx_producer(&runtime, namesrv, group, ledger.clone()).await;

            // Built as the stock producer builds a batch for send_batch: each message with a
            // unique key, the body the encoded messages.
            let mut batched = Vec::new();
            for i in 0..3 {
                let (body, key) = numbered(seed, Decision::Commit.name(), 100 + i);
                batched.push(message(topic, &body, "TagTx", &key));
            }
            let mut batch = MessageBatch::generate_from_messages(batched).expect("a batch");
            for msg in &mut batch.messages {
                MessageClientIDSetter::set_uniq_id(msg);
            }
            MessageClientIDSetter::set_uniq_id(&mut batch.final_message);
            let body = rocketmq_protocol::common::message::message_decoder::encode_messages(
                &batch.messages,
            );
            batch.set_body(body);
            let refused = producer
                .send_message_in_transaction(batch, None::<()>)
                .await;
            println!("seed {seed}: transactional batch send: {refused:?}");
            match &refused {
                // The broker's answer, not a check in the client: MESSAGE_ILLEGAL.
                Err(error) => assert_eq!(
                    error.broker_response_code(),
                    Some(MESSAGE_ILLEGAL),
                    "seed {seed}: the refusal's response code: {error:?}"
                ),
                Ok(result) => panic!(
                    "seed {seed}: a transactional batch was accepted: state {:?}, {:?}",
                    result.local_transaction_state, result.send_result
                ),
            }
            assert_eq!(
                ledger.executed(),
                Vec::<String>::new(),
                "seed {seed}: the local transaction ran for a refused batch"
            );

            // A single transactional send still works, and is all the topic gets.
            let (body, key) = numbered(seed, Decision::Commit.name(), 0);
            let result = producer
                .send_message_in_transaction(message(topic, &body, "TagTx", &key), None::<()>)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: single half send after the batch: {e}"));
            assert_eq!(
                result.local_transaction_state,
                Some(LocalTransactionState::CommitMessage)
            );
            let expected = BTreeMap::from([(body, Expected::new("TagTx", key))]);
            wait_for_all("the single committed message", &[&member], &expected).await;
            settle(&member, QUIET).await;
            let deliveries = member.collector.deliveries();
            check_deliveries(&deliveries, &expected, seed);
            assert_eq!(
                duplicates(&deliveries),
                vec![],
                "seed {seed}: delivered twice"
            );
            let ends: BTreeMap<i32, i64> = member
                .allocator
                .allocations(topic)
                .last()
                .map(|a| a.all.clone())
                .expect("the member allocated the topic's queues")
                .iter()
                .map(|q| (*q, raw::max_offset(broker, topic, *q)))
                .collect();
            assert_eq!(
                ends.values().sum::<i64>(),
                1,
                "seed {seed}: messages in {topic} (queue ends {ends:?})"
            );
            member.shutdown().await;
            producer.shutdown().await;
        }
    });
    println!("seed {seed}: scenario took {:?}", started.elapsed());
    drop(node);
}

/// Waits until `quiet` has passed with no new delivery (or one arrives: the caller's checks
/// report it).
async fn settle(member: &Member, quiet: Duration) {
    let before = member.collector.len();
    let until = Instant::now() + quiet;
    while Instant::now() < until && member.collector.len() == before {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
