//! Deterministic crash simulation of transactions through the `sim` disk.
//!
//! Each seed runs several lives of one SYNC_FLUSH shard (its store on the simulated disk,
//! its broker and transaction state as a node opens them). In each life a producer sends
//! prepared messages and decides them (commit or rollback, each half's intent fixed when
//! it is sent) with END_TRANSACTION, and the check service runs rounds now and then
//! (moving the cursor, which is carried to the next life as the offsets file would carry
//! it: the latest, an older one or none). The disk loses power after a random number of
//! operations; the shard is opened again. After every recovery:
//! - a decision that was answered holds: a committed half's message is in its queue, a
//!   rolled-back half's never is, and the opposite decision now is answered "decided
//!   before" and changes nothing;
//! - no message is in a queue that its producer did not commit (rolled back, undecided,
//!   or a half whose send was never answered);
//! - a committed half's message is there more than once only within the recommits the
//!   shard counted (a commit whose op record a crash took, written again).
//!
//! A last life without a crash decides every half the producer knows and checks that
//! every commit arrived and no rollback did. A failure names its seed;
//! `RINGMQ_SIM_SEEDS=START..END cargo test --test store transaction_crash_simulation`
//! sweeps other seeds.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use common::{as_disk, pull_records, run_local, sim_disk, sim_seeds, Rng};
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::broker::tables::consumer_offsets::ConsumerOffsets;
use ringmq::broker::tables::topics::TopicTable;
use ringmq::broker::transaction::halves::{CHECK_GROUP, HALF_TOPIC, PGROUP, TRAN_MSG};
use ringmq::broker::{Broker, BrokerIdentity, NodeTables};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::metrics::ShardMetrics;
use ringmq::node_config::{broker_config, NodeConfig};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::shard::ShardContext;
use ringmq::store::{properties, Store};

const TOPIC: &str = "Orders";
const QUEUES: i32 = 2;
const GROUP: &str = "tx";

fn peer() -> SocketAddr {
    "127.0.0.1:40000".parse().unwrap()
}

/// A half the producer was told of.
#[derive(Clone, Debug)]
struct Half {
    queue_offset: i64,
    commit_log_offset: u64,
    msg_id: String,
    commit: bool,
    /// The decision was answered SUCCESS.
    decided: bool,
    /// A decision was sent and failed (the crash): it may have been stored all the same.
    attempted: bool,
    /// Checked `transactionCheckMax` times before its producer decided: moved to
    /// TRANS_CHECK_MAX_TIME_TOPIC, never delivered, later decisions change nothing.
    discarded: bool,
}

#[derive(Default)]
struct Model {
    /// By body.
    halves: BTreeMap<String, Half>,
    /// Bodies of prepared sends whose answer never came (the crash): undecided for ever.
    unanswered: Vec<String>,
    /// The check cursor the offsets file holds for the next life.
    cursor: Option<i64>,
    /// Commits counted as possible second writes, over all lives.
    recommits: u64,
    next: u64,
}

#[test]
fn transaction_decisions_survive_random_crashes() {
    for seed in sim_seeds(0..48) {
        let outcome = std::panic::catch_unwind(|| simulate(seed));
        if outcome.is_err() {
            panic!(
                "transaction crash simulation failed for seed {seed}; rerun it alone with RINGMQ_SIM_SEEDS={seed}..{}",
                seed + 1
            );
        }
    }
}

fn simulate(seed: u64) {
    let mut rng = Rng::new(seed);
    let sim = sim_disk(seed);
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = FlushMode::Sync;
    config.commit_log_segment_size = 64 * 1024;
    config.consume_queue_entries_per_file = rng.range(8, 64);
    let mut model = Model::default();
    let lives = rng.range(3, 6);
    for life in 0..lives {
        let crash_after = rng.range(5, 400);
        run_life(
            &sim,
            &config,
            &mut model,
            life,
            Some(crash_after),
            rng.next_u64(),
        );
        assert!(sim.is_crashed(), "seed {seed} life {life}: no power loss");
        sim.restart();
    }
    run_life(&sim, &config, &mut model, lives, None, rng.next_u64());
}

/// The shard as a node opens it: store, broker, transaction state.
struct Shard {
    store: Store,
    broker: Rc<Broker>,
    offsets: Arc<ConsumerOffsets>,
    _tables: tempfile::TempDir,
}

async fn open(sim: &SimDisk, config: &StoreConfig, cursor: Option<i64>) -> Shard {
    let clock = Clock::starting_at(1_000_000);
    let store = Store::open(config.clone(), as_disk(sim), clock)
        .await
        .expect("the store reopens");
    let tables_dir = tempfile::tempdir().unwrap();
    let tables = NodeTables::new(
        TopicTable::load(tables_dir.path(), true, QUEUES as u32).unwrap(),
        ConsumerOffsets::in_memory(tables_dir.path()),
        ringmq::broker::tables::subscription_groups::SubscriptionGroups::load(
            tables_dir.path(),
            true,
        )
        .unwrap(),
    );
    if let Some(cursor) = cursor {
        tables
            .consumer_offsets
            .commit(CHECK_GROUP, HALF_TOPIC, 0, cursor);
    }
    let offsets = tables.consumer_offsets.clone();
    let node = NodeConfig {
        transaction_time_out: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let broker = Rc::new(Broker::new(
        store.clone(),
        BrokerIdentity {
            broker_name: "broker-a".into(),
            cluster_name: "DefaultCluster".into(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
        },
        broker_config(&node),
        tables,
        clock,
        ShardContext::single(),
        Arc::new(ShardMetrics::new(0)),
    ));
    ringmq::broker::transaction::service::open(&broker).expect("the transaction state opens");
    Shard {
        store,
        broker,
        offsets,
        _tables: tables_dir,
    }
}

fn prepared(body: &str, queue: i32) -> RemotingCommand {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TRAN_MSG, "true");
    properties::push_pair(&mut props, PGROUP, GROUP);
    send.put_ext("properties", props);
    send.put_ext("sysFlag", 4);
    send
}

fn end(half: &Half, commit: bool) -> RemotingCommand {
    let mut command = RemotingCommand::request(request::END_TRANSACTION, ExtFields::new());
    command.put_ext("producerGroup", GROUP);
    command.put_ext("tranStateTableOffset", half.queue_offset);
    command.put_ext("commitLogOffset", half.commit_log_offset);
    command.put_ext("commitOrRollback", if commit { 8 } else { 12 });
    command.put_ext("msgId", &half.msg_id);
    command
}

/// Every body in the topic's queues, with how often it is there.
fn delivered(store: &Store) -> BTreeMap<String, u32> {
    let mut seen = BTreeMap::new();
    for queue in 0..QUEUES {
        let end = store.max_offset(TOPIC, queue);
        let mut at = store.min_offset(TOPIC, queue);
        while at < end {
            let got = store.get_messages(TOPIC, queue, at, 32, None).unwrap();
            let records: Vec<_> = got
                .messages
                .iter()
                .map(|message| message.bytes.clone())
                .collect();
            if records.is_empty() {
                break;
            }
            for bytes in &records {
                for record in pull_records(bytes) {
                    *seen
                        .entry(String::from_utf8_lossy(record.body).into_owned())
                        .or_insert(0) += 1;
                }
            }
            at += records.len() as u64;
        }
    }
    seen
}

/// The recovery's promises (module doc).
async fn check(shard: &Shard, model: &mut Model, life: u64) {
    let seen = delivered(&shard.store);
    for (body, count) in &seen {
        let half = model.halves.get(body).unwrap_or_else(|| {
            panic!("life {life}: {body:?} was delivered but never committed by its producer")
        });
        assert!(
            half.commit,
            "life {life}: rolled-back {body:?} was delivered"
        );
        assert!(*count >= 1);
    }
    let duplicates: u64 = seen.values().map(|&count| u64::from(count - 1)).sum();
    assert!(
        duplicates <= model.recommits,
        "life {life}: {duplicates} duplicates, only {} recommits counted",
        model.recommits
    );
    for (body, half) in model.halves.clone() {
        if !half.decided {
            continue;
        }
        assert_eq!(
            seen.contains_key(&body),
            half.commit && !half.discarded,
            "life {life}: the answered decision for {body:?} (commit {}) did not hold",
            half.commit
        );
        let again =
            ringmq::broker::transaction::end_transaction(&shard.broker, &end(&half, !half.commit))
                .await;
        assert_eq!(again.code, response::SUCCESS, "life {life}: {again:?}");
        assert!(
            again
                .remark
                .as_deref()
                .unwrap_or("")
                .contains("decided before"),
            "life {life}: {body:?} was answered but is undecided after the recovery: {again:?}"
        );
    }
    assert_eq!(
        delivered(&shard.store),
        seen,
        "life {life}: a repeated decision changed the topic"
    );
    for body in &model.unanswered {
        assert!(
            !seen.contains_key(body),
            "life {life}: unanswered {body:?} delivered"
        );
    }
}

fn run_life(
    sim: &SimDisk,
    config: &StoreConfig,
    model: &mut Model,
    life: u64,
    crash_after: Option<u64>,
    seed: u64,
) {
    run_local(true, async {
        let shard = open(sim, config, model.cursor).await;
        check(&shard, model, life).await;
        let Some(crash_after) = crash_after else {
            decide_everything(&shard, model, life).await;
            shard.store.shutdown().await.unwrap();
            return;
        };
        let mut rng = Rng::new(seed);
        sim.crash_after_ops(crash_after);
        for _ in 0..400u32 {
            match rng.range(0, 10) {
                0..=3 => send(&shard, model, &mut rng).await,
                4..=7 => decide_one(&shard, model, &mut rng).await,
                8 => {
                    tokio::time::sleep(Duration::from_millis(rng.range(1, 300))).await;
                    ringmq::broker::transaction::check::round(
                        &shard.broker,
                        shard.broker_transactions(),
                    )
                    .await;
                }
                _ => tokio::time::sleep(Duration::from_millis(rng.range(1, 50))).await,
            }
            if sim.is_crashed() {
                break;
            }
        }
        if !sim.is_crashed() {
            sim.crash_now();
        }
        model.recommits += shard.broker_transactions().figures().recommits;
        // What the offsets file may hold at the crash: the latest cursor, an older one, none.
        let latest = shard.offsets.query(CHECK_GROUP, HALF_TOPIC, 0);
        model.cursor = match rng.range(0, 4) {
            0 | 1 => latest.or(model.cursor),
            2 => model.cursor,
            _ => None,
        };
        drop(shard);
    });
}

impl Shard {
    fn broker_transactions(&self) -> &ringmq::broker::transaction::Transactions {
        self.broker
            .transactions()
            .expect("the transaction state is open")
    }
}

async fn send(shard: &Shard, model: &mut Model, rng: &mut Rng) {
    model.next += 1;
    let body = format!("m{}", model.next);
    let queue = rng.range(0, QUEUES as u64) as i32;
    let answer = ringmq::broker::requests::send::send_message(
        &shard.broker,
        &prepared(&body, queue),
        peer(),
    )
    .await;
    if answer.code != response::SUCCESS {
        model.unanswered.push(body);
        return;
    }
    let (_, commit_log_offset) = decode_offset_msg_id(answer.opt_str("msgId").unwrap()).unwrap();
    model.halves.insert(
        body,
        Half {
            queue_offset: answer.opt_str("queueOffset").unwrap().parse().unwrap(),
            commit_log_offset,
            msg_id: answer.opt_str("transactionId").unwrap().to_owned(),
            commit: rng.chance(60),
            decided: false,
            attempted: false,
            discarded: false,
        },
    );
}

async fn decide_one(shard: &Shard, model: &mut Model, rng: &mut Rng) {
    let undecided: Vec<String> = model
        .halves
        .iter()
        .filter(|(_, half)| !half.decided)
        .map(|(body, _)| body.clone())
        .collect();
    if undecided.is_empty() {
        return;
    }
    let body = &undecided[rng.below(undecided.len())];
    let half = model.halves.get_mut(body).unwrap();
    let answer =
        ringmq::broker::transaction::end_transaction(&shard.broker, &end(half, half.commit)).await;
    if answer.code != response::SUCCESS {
        half.attempted = true;
        return;
    }
    half.decided = true;
    if is_decided_before(&answer) {
        settle_decided_before(&shard.store, body, half);
    }
}

fn is_decided_before(answer: &RemotingCommand) -> bool {
    answer
        .remark
        .as_deref()
        .unwrap_or("")
        .contains("decided before")
}

/// A half its producer had not decided (in an answered call) was found decided: by its own
/// earlier call that failed in the crash but was stored, or by the check service, which
/// moved it.
fn settle_decided_before(store: &Store, body: &str, half: &mut Half) {
    if moved(store).iter().any(|moved| moved == body) {
        half.discarded = true;
    } else {
        assert!(
            half.attempted,
            "{body:?} was decided by nobody, yet a decision finds it decided"
        );
    }
}

/// The bodies moved to TRANS_CHECK_MAX_TIME_TOPIC.
fn moved(store: &Store) -> Vec<String> {
    let topic = ringmq::broker::transaction::halves::CHECK_MAX_TOPIC;
    let end = store.max_offset(topic, 0);
    let got = store
        .get_messages(topic, 0, 0, end.max(1) as u32, None)
        .unwrap();
    got.messages
        .iter()
        .flat_map(|message| {
            pull_records(&message.bytes)
                .iter()
                .map(|record| String::from_utf8_lossy(record.body).into_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The last life: the producer answers for every half it knows, as checks would ask it.
async fn decide_everything(shard: &Shard, model: &mut Model, life: u64) {
    for (body, half) in model.halves.iter_mut() {
        if half.decided {
            continue;
        }
        let answer =
            ringmq::broker::transaction::end_transaction(&shard.broker, &end(half, half.commit))
                .await;
        assert_eq!(
            answer.code,
            response::SUCCESS,
            "life {life}: {body:?}: {answer:?}"
        );
        half.decided = true;
        if is_decided_before(&answer) {
            settle_decided_before(&shard.store, body, half);
        }
    }
    model.recommits += shard.broker_transactions().figures().recommits;
    let seen = delivered(&shard.store);
    for (body, half) in &model.halves {
        assert_eq!(
            seen.contains_key(body),
            half.commit && !half.discarded,
            "life {life}: {body:?}"
        );
    }
    let duplicates: u64 = seen.values().map(|&count| u64::from(count - 1)).sum();
    assert!(
        duplicates <= model.recommits,
        "{duplicates} > {}",
        model.recommits
    );
}
