//! Deterministic crash simulation through the `sim` disk.
//!
//! Each seed runs several lives of one store. In each life, producers append messages of
//! random topics, queues, tags and sizes while readers read random ranges; the disk loses
//! power after a random number of operations; the unsynced writes are kept, dropped or
//! torn; the store reopens and recovers. After every recovery the model is checked:
//! - every message acknowledged under SYNC_FLUSH (and, under ASYNC_FLUSH, every one the
//!   flusher had synced before the crash) reads back byte-identical at the same offsets;
//! - every ConsumeQueue entry points at a valid record of its queue, in order, with no
//!   gaps, and nothing at or past the recovered log end is served;
//! - queue offsets continue where the recovered queue ends;
//! - the index finds every acknowledged message by its key, and serves whole records only
//!   (IndexFiles of 255 entries, so lives cross file boundaries);
//! - in half the seeds retention deletes every closed segment it may, every few ms, so
//!   crashes also land inside cleanups: what it deleted is below its queue's minimum and
//!   found by no key, nothing served points below the log's start, the rest reads back;
//! - while a store is open, a second store on its directory is refused by the lock (taken
//!   through the disk seam), and a crash releases it for the next life.
//!
//! A failure names its seed;
//! `RINGMQ_SIM_SEEDS=START..END cargo test --test store crash_simulation::acknowledged`
//! sweeps other seeds.

use crate::common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use common::{as_disk, message, run_local, sim_disk, sim_seeds, Rng};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::store::record::{decode, Decoded, Verify};
use ringmq::store::{GetStatus, OpenKind, PutStatus, Store, StoreError};

const TOPICS: [&str; 3] = ["Orders", "Payments", "%RETRY%group_a"];
const QUEUES: i32 = 3;

/// What the model knows about one acknowledged message.
#[derive(Clone, Debug)]
struct Acked {
    phys_offset: u64,
    size: u32,
    body: Vec<u8>,
    tag: Option<String>,
    /// Its one key (`KEYS`), unique in the run: the index must find it by that key.
    key: String,
}

/// (topic, queue id, queue offset).
type MessageKey = (String, i32, u64);

/// Acknowledged messages by where they are.
type Model = BTreeMap<MessageKey, Acked>;

#[test]
fn acknowledged_messages_survive_random_crashes() {
    let seeds = sim_seeds(0..48);
    for seed in seeds {
        let outcome = std::panic::catch_unwind(|| simulate(seed));
        if outcome.is_err() {
            panic!("crash simulation failed for seed {seed}; rerun it alone with RINGMQ_SIM_SEEDS={seed}..{}", seed + 1);
        }
    }
}

fn simulate(seed: u64) {
    let mut rng = Rng::new(seed);
    let sim = sim_disk(seed);
    let flush = if rng.chance(70) {
        FlushMode::Sync
    } else {
        FlushMode::Async
    };
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = flush;
    config.commit_log_segment_size = [16 * 1024, 64 * 1024][rng.range(0, 2) as usize];
    config.max_message_size = 4 * 1024;
    config.consume_queue_entries_per_file = rng.range(4, 40);
    config.checkpoint_interval = std::time::Duration::from_millis(rng.range(5, 200));
    config.flush_interval = std::time::Duration::from_millis(rng.range(5, 100));
    if rng.chance(50) {
        // Retention: every closed segment expires at once and the cleaner runs often, so
        // crashes land in the middle of cleanups too.
        config.retention.file_reserved = std::time::Duration::ZERO;
        config.retention.delete_when = (0..24).collect();
        config.retention.clean_interval = std::time::Duration::from_millis(rng.range(1, 10));
        config.retention.delete_batch_max = rng.range(1, 4) as usize;
    }
    let mut model = Model::new();
    let lives = rng.range(3, 7);
    for life in 0..lives {
        let crash_after = rng.range(1, 400);
        let life_seed = rng.next_u64();
        run_life(&sim, &config, &mut model, life, crash_after, life_seed);
        assert!(
            sim.is_crashed(),
            "seed {seed} life {life}: the disk should have lost power"
        );
        sim.restart();
    }
    // A last life without a crash: recover, check, stop cleanly, reopen without a scan.
    run_local(true, async {
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        check_store(&store, &model, "final recovery");
        store.shutdown().await.unwrap();
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(store.opened(), OpenKind::Clean);
        check_store(&store, &model, "clean reopen");
        store.shutdown().await.unwrap();
    });
}

fn run_life(
    sim: &SimDisk,
    config: &StoreConfig,
    model: &mut Model,
    life: u64,
    crash_after: u64,
    seed: u64,
) {
    let shared_model = Rc::new(RefCell::new(std::mem::take(model)));
    run_local(true, async {
        let store = open_after_crash(sim, config, &shared_model, life).await;
        sim.crash_after_ops(crash_after);
        // Acks under ASYNC_FLUSH count once the flusher has synced past them.
        let async_acks: Rc<RefCell<Vec<(MessageKey, Acked)>>> = Rc::default();
        let mut tasks = Vec::new();
        for worker in 0..4u64 {
            let producer = Producer {
                store: store.clone(),
                model: shared_model.clone(),
                async_acks: async_acks.clone(),
                flush: config.flush_mode,
                max_body: config.max_message_size,
                life,
                worker,
            };
            let rng = Rng::new(seed ^ worker.wrapping_mul(0x1234_5678_9ABC));
            tasks.push(tokio::task::spawn_local(producer.run(rng)));
        }
        // Wait until every worker is done or the disk has lost power.
        for task in tasks {
            let _ = task.await;
        }
        if !sim.is_crashed() {
            // The workload ended first: cut the power now, mid-flight of nothing.
            sim.crash_now();
        }
        let flushed = store.log_positions().flushed;
        for (key, acked) in async_acks.borrow_mut().drain(..) {
            if acked.phys_offset + u64::from(acked.size) <= flushed {
                shared_model.borrow_mut().insert(key, acked);
            }
        }
        // The store is abandoned here, as a crashed process would leave it.
    });
    *model = Rc::try_unwrap(shared_model)
        .map(RefCell::into_inner)
        .unwrap_or_else(|shared| shared.borrow().clone());
}

/// Opens the store for `life`: after a crash (every life but the first) it must have
/// recovered by scanning, holding the model; a second open of the directory is refused.
async fn open_after_crash(
    sim: &SimDisk,
    config: &StoreConfig,
    model: &RefCell<Model>,
    life: u64,
) -> Store {
    let store = Store::open(
        config.clone(),
        as_disk(sim),
        Clock::starting_at(i64::try_from(life).unwrap() * 1_000_000),
    )
    .await
    .unwrap_or_else(|error| panic!("life {life}: reopen failed: {error}"));
    if life > 0 {
        assert!(
            matches!(store.opened(), OpenKind::Recovered { .. }),
            "life {life}: a crash must be recovered by scanning, got {:?}",
            store.opened()
        );
    }
    check_store(
        &store,
        &model.borrow(),
        &format!("life {life} after recovery"),
    );
    match Store::open(config.clone(), as_disk(sim), Clock::starting_at(0)).await {
        Err(StoreError::Locked(_)) => {}
        Err(other) => panic!("life {life}: a second open failed otherwise: {other}"),
        Ok(_) => panic!("life {life}: a second store opened the same directory"),
    }
    store
}

/// One of a life's four workers: puts random messages (and reads random ranges) until
/// its count is done or the store is poisoned by the power loss.
struct Producer {
    store: Store,
    model: Rc<RefCell<Model>>,
    async_acks: Rc<RefCell<Vec<(MessageKey, Acked)>>>,
    flush: FlushMode,
    max_body: usize,
    life: u64,
    worker: u64,
}

impl Producer {
    async fn run(self, mut rng: Rng) {
        for number in 0..400u64 {
            if self.store.poison_cause().is_some() {
                return;
            }
            if rng.chance(20) {
                read_random(&self.store, &mut rng);
                continue;
            }
            if rng.chance(10) {
                // Paused time moves only while every task waits: this lets the
                // checkpointer and the cleaner take turns between the puts.
                let pause = rng.range(1, 20);
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            }
            self.put_random(&mut rng, number).await;
        }
    }

    /// Puts one random message and records it as acknowledged: at once under
    /// SYNC_FLUSH, else once the flush is known to have passed it.
    async fn put_random(&self, rng: &mut Rng, number: u64) {
        let topic = TOPICS[rng.range(0, TOPICS.len() as u64) as usize];
        let queue_id = rng.range(0, QUEUES as u64) as i32;
        let size = if rng.chance(10) {
            rng.range(1000, self.max_body as u64)
        } else {
            rng.range(0, 300)
        };
        let body: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
        let tag = rng.chance(50).then(|| format!("Tag{}", rng.range(0, 3)));
        let key = format!("l{}-w{}-n{number}", self.life, self.worker);
        let input = message(topic, queue_id, &body, tag.as_deref(), Some(&key));
        let Ok(result) = self.store.put(input).await else {
            return;
        };
        let placement = result.placement.expect("placed");
        let acked = Acked {
            phys_offset: placement.phys_offset,
            size: placement.size,
            body,
            tag,
            key,
        };
        let key = (topic.to_string(), queue_id, placement.queue_offset);
        match (self.flush, result.status) {
            (FlushMode::Sync, PutStatus::Ok) => {
                self.model.borrow_mut().insert(key, acked);
            }
            _ => self.async_acks.borrow_mut().push((key, acked)),
        }
    }
}

fn read_random(store: &Store, rng: &mut Rng) {
    let topic = TOPICS[rng.range(0, TOPICS.len() as u64) as usize];
    let queue_id = rng.range(0, QUEUES as u64) as i32;
    let max = store.max_offset(topic, queue_id);
    let from = rng.range(0, max + 2);
    let got = store
        .get_messages(topic, queue_id, from, 8, None)
        .expect("reads never fail");
    for stored in &got.messages {
        match decode(&stored.bytes, Verify::Full) {
            Ok(Decoded::Record(view)) => {
                assert_eq!(view.topic, topic);
                assert_eq!(view.queue_offset as u64, stored.queue_offset);
            }
            other => panic!("a read served bytes that are not a valid record: {other:?}"),
        }
    }
}

/// Every acknowledged message reads back identically, unless retention deleted its
/// segment (then it is below its queue's minimum and not found by key); every served
/// entry is valid and at or past the log's start.
fn check_store(store: &Store, model: &Model, when: &str) {
    let log_end = store.log_positions().write;
    let log_start = store.log_start();
    for (key, acked) in model {
        if acked.phys_offset < log_start {
            check_deleted(store, key, acked, log_start, when);
        } else {
            check_kept(store, key, acked, when);
        }
    }
    for (topic, queue_id) in store.queues() {
        check_queue(store, &topic, queue_id, (log_start, log_end), when);
    }
}

/// An acknowledged message retention deleted: below its queue's minimum, found by no key.
fn check_deleted(store: &Store, key: &MessageKey, acked: &Acked, log_start: u64, when: &str) {
    let (topic, queue_id, queue_offset) = key;
    let got = store
        .get_messages(topic, *queue_id, *queue_offset, 1, None)
        .unwrap();
    // Below its queue's minimum, or the whole queue is gone (min == max).
    assert!(
        matches!(
            got.status,
            GetStatus::OffsetTooSmall | GetStatus::NoMessageInQueue
        ) && got.messages.is_empty(),
        "{when}: {topic}/{queue_id}@{queue_offset} lies below the log start \
         {log_start} but its queue answers {:?}",
        got.status
    );
    let found = store
        .lookup_keys(topic, &acked.key, 64, 0, i64::MAX)
        .unwrap();
    assert!(
        found.records.iter().all(|r| r.phys_offset >= log_start),
        "{when}: a key lookup served a deleted record"
    );
}

/// An acknowledged message still held: it reads back identically, and the index finds it.
fn check_kept(store: &Store, key: &MessageKey, acked: &Acked, when: &str) {
    let (topic, queue_id, queue_offset) = key;
    let got = store
        .get_messages(topic, *queue_id, *queue_offset, 1, None)
        .unwrap();
    assert_eq!(
        got.status,
        GetStatus::Found,
        "{when}: acknowledged {topic}/{queue_id}@{queue_offset} is gone (queue max {})",
        got.max_offset
    );
    let stored = &got.messages[0];
    assert_eq!(
        stored.phys_offset, acked.phys_offset,
        "{when}: {topic}/{queue_id}@{queue_offset} moved"
    );
    let Ok(Decoded::Record(view)) = decode(&stored.bytes, Verify::Full) else {
        panic!("{when}: {topic}/{queue_id}@{queue_offset} does not decode");
    };
    assert_eq!(view.total_size, acked.size);
    assert_eq!(
        view.body,
        &acked.body[..],
        "{when}: body of {topic}/{queue_id}@{queue_offset} differs"
    );
    assert_eq!(view.topic, topic);
    assert_eq!(view.queue_id, *queue_id);
    assert_eq!(
        ringmq::store::properties::get(view.properties, "TAGS"),
        acked.tag.as_deref(),
        "{when}: tag differs"
    );
    check_found_by_key(store, key, acked, when);
}

/// The index finds `acked` by its key, among records that are all whole.
fn check_found_by_key(store: &Store, key: &MessageKey, acked: &Acked, when: &str) {
    let (topic, queue_id, queue_offset) = key;
    let found = store
        .lookup_keys(topic, &acked.key, 64, 0, i64::MAX)
        .unwrap();
    assert!(
        found
            .records
            .iter()
            .any(|r| r.phys_offset == acked.phys_offset),
        "{when}: the index does not find {topic}/{queue_id}@{queue_offset} by key {} \
         (found {:?})",
        acked.key,
        found.records
    );
    let mut bytes = Vec::new();
    found.body.copy_into(&mut bytes).unwrap();
    let mut at = 0usize;
    for record in &found.records {
        let one = &bytes[at..at + record.size as usize];
        at += record.size as usize;
        let Ok(Decoded::Record(view)) = decode(one, Verify::Full) else {
            panic!(
                "{when}: a key lookup served an invalid record at {}",
                record.phys_offset
            );
        };
        assert_eq!(view.phys_offset as u64, record.phys_offset);
    }
}

/// Every entry of the queue, from its minimum to its end, points at a valid record of
/// the queue, in order, within `[log_start, log_end)`; nothing is served past the end.
fn check_queue(store: &Store, topic: &str, queue_id: i32, log: (u64, u64), when: &str) {
    let (log_start, log_end) = log;
    let max = store.max_offset(topic, queue_id);
    let mut offset = store.min_offset(topic, queue_id);
    let mut previous_end = 0;
    while offset < max {
        let got = store
            .get_messages(topic, queue_id, offset, 32, None)
            .unwrap();
        assert_eq!(
            got.status,
            GetStatus::Found,
            "{when}: {topic}/{queue_id}@{offset} unreadable below max {max}"
        );
        for stored in &got.messages {
            assert!(
                stored.phys_offset >= previous_end,
                "{when}: entries out of order"
            );
            assert!(
                stored.phys_offset >= log_start,
                "{when}: an entry points below the log start {log_start}"
            );
            let Ok(Decoded::Record(view)) = decode(&stored.bytes, Verify::Full) else {
                panic!(
                    "{when}: {topic}/{queue_id}@{} points at an invalid record",
                    stored.queue_offset
                );
            };
            assert_eq!((view.topic, view.queue_id), (topic, queue_id));
            assert_eq!(
                view.queue_offset as u64, stored.queue_offset,
                "{when}: queue offset mismatch"
            );
            previous_end = stored.phys_offset + view.total_size as u64;
            assert!(
                previous_end <= log_end,
                "{when}: an entry points past the recovered log end {log_end}"
            );
        }
        offset = got.next_begin_offset;
    }
    let past = store.get_messages(topic, queue_id, max, 1, None).unwrap();
    assert!(
        past.messages.is_empty(),
        "{when}: something is served past the end"
    );
    let expected = if max == store.min_offset(topic, queue_id) {
        GetStatus::NoMessageInQueue
    } else {
        GetStatus::OffsetOverflowOne
    };
    assert_eq!(
        past.status, expected,
        "{when}: wrong status at the end of {topic}/{queue_id}"
    );
}
