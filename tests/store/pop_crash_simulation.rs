//! Deterministic crash simulation of the POP state through the `sim` disk.
//!
//! Each seed runs several lives of one SYNC_FLUSH store. In each life a consumer pops,
//! acknowledges and changes invisible times on a few queues, as `broker::pop` does: a
//! checkpoint or ack record is appended to the revive log (`pop_log::append`) and only
//! once it is stored does the table change and the "client" learn of it; every so often
//! the replay mark (`pop_log::next_mark`, written through the disk seam) and the
//! committed offsets (the table's watermarks, in a file replaced through the seam) are
//! written. The disk loses power after a random number of operations; the store reopens
//! and the table is rebuilt by `pop_log::rebuild` from the stored mark (its floors, and
//! the stored committed offsets for queues it does not name). After every recovery:
//! - every delivery the client holds and did not get acknowledged is in flight again with
//!   its pop time (the handle still acks) and its deadline: nothing popped is lost. The
//!   one exception the crash allows: a later pop of it whose checkpoint append failed in
//!   the crash but was stored may stand instead (its client never got it; the message is
//!   still in flight and comes again at that pop's deadline);
//! - no delivery whose ack was stored is in flight: an acknowledged message is not
//!   delivered again (an ack whose append failed in the crash may have been stored or
//!   not: either is accepted);
//! - every queue's cursor is past every offset ever handed out, so nothing the client
//!   holds is handed out again as new;
//! - the table's invariants hold (`PopTable::check`).
//!
//! A failure names its seed; `RINGMQ_SIM_SEEDS=START..END cargo test --test
//! pop_crash_simulation` sweeps other seeds.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use common::{as_disk, message, run_local, sim_disk, sim_seeds, Rng};
use ringmq::broker::pop::log::{self as pop_log, Mark, ReplayMark, POP_LOG_TOPIC};
use ringmq::broker::pop::state::{Delivery, LogRecord, PopTable, QueueKey};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::meta::{replace_file, MetaFiles};
use ringmq::io::sim::SimDisk;
use ringmq::store::Store;

const TOPIC: &str = "Work";
const QUEUES: i32 = 3;
const LOG_QUEUE: i32 = 0;
const INVISIBLE: i64 = 1_000;

fn key(queue: i32) -> QueueKey {
    QueueKey::new("g", TOPIC, queue)
}

fn host() -> SocketAddr {
    "127.0.0.1:10911".parse().unwrap()
}

/// What the client holds and what it was told, across lives.
#[derive(Default)]
struct Model {
    /// (queue, offset) -> pop time of the delivery the client holds, unacknowledged.
    held: BTreeMap<(i32, u64), i64>,
    /// (queue, offset, pop time) acknowledged with a stored ack record.
    acked: Vec<(i32, u64, i64)>,
    /// Highest offset ever handed out per queue.
    handed: BTreeMap<i32, u64>,
    /// (queue, offset, pop time) whose ack record's append failed in the crash: it may
    /// have been stored all the same (the client was told it failed), so after the
    /// recovery it is either still in flight or acknowledged.
    uncertain: Vec<(i32, u64, i64)>,
    /// (queue, pop time) of checkpoints whose append failed in the crash but may have
    /// been stored: such a pop (its client never got it) may stand after the recovery,
    /// with its own pop time, in place of an earlier delivery's.
    uncertain_pops: Vec<(i32, i64)>,
}

#[test]
fn popped_deliveries_survive_random_crashes() {
    for seed in sim_seeds(0..64) {
        let outcome = std::panic::catch_unwind(|| simulate(seed));
        if outcome.is_err() {
            panic!(
                "POP crash simulation failed for seed {seed}; rerun it alone with RINGMQ_SIM_SEEDS={seed}..{}",
                seed + 1
            );
        }
    }
}

fn offsets_path() -> &'static Path {
    Path::new("/store/pop-test-offsets.json")
}

fn read_offsets(sim: &SimDisk) -> BTreeMap<i32, u64> {
    match sim.read_file(offsets_path()) {
        Ok(bytes) => serde_json::from_slice(&bytes).expect("the offsets file is whole"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(error) => panic!("cannot read the offsets: {error}"),
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
        let crash_after = rng.range(5, 300);
        let life_seed = rng.next_u64();
        run_life(
            &sim,
            &config,
            &mut model,
            life,
            Some(crash_after),
            life_seed,
        );
        assert!(sim.is_crashed(), "seed {seed} life {life}: no power loss");
        sim.restart();
    }
    // A last life without a crash: recover and check.
    run_life(&sim, &config, &mut model, lives, None, rng.next_u64());
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
        let store = Store::open(config.clone(), as_disk(sim), Clock::starting_at(0))
            .await
            .unwrap_or_else(|error| panic!("life {life}: reopen failed: {error}"));
        let files: std::sync::Arc<dyn MetaFiles> = std::sync::Arc::new(sim.clone());
        let mark = ReplayMark::new(files.clone(), Path::new("/store"));
        let written = mark.read().expect("the mark is whole");
        let floors = read_offsets(sim);
        let (mut table, _) = pop_log::rebuild(&store, LOG_QUEUE, &written, |key| {
            floors.get(&key.queue_id).copied().unwrap_or(0)
        })
        .unwrap_or_else(|why| panic!("life {life}: rebuild failed: {why}"));
        settle_uncertain(&table, model);
        check(&table, model, life);
        let Some(crash_after) = crash_after else {
            store.shutdown().await.unwrap();
            return;
        };
        // Open every queue at its committed offset, as the first pop would (a replayed
        // queue is open already, at its replayed state).
        for queue in 0..QUEUES {
            table.open(&key(queue), floors.get(&queue).copied().unwrap_or(0));
        }
        let mut consumer = Consumer {
            store: &store,
            table,
            model,
            files,
            mark,
            written,
        };
        let mut rng = Rng::new(seed);
        sim.crash_after_ops(crash_after);
        let mut now = 1_000_000 + life as i64 * 100_000;
        for _ in 0..300u32 {
            now += rng.range(1, 200) as i64;
            let queue = rng.range(0, QUEUES as u64) as i32;
            let ok = match rng.range(0, 10) {
                // Produce a message to the queue.
                0..=2 => store
                    .put(message(TOPIC, queue, b"m", None, None))
                    .await
                    .is_ok(),
                3..=5 => consumer.pop(queue, now).await,
                6..=8 => consumer.ack_some(queue, now, &mut rng).await,
                _ => consumer.write_marks(),
            };
            consumer.table.check();
            if !ok || sim.is_crashed() {
                break;
            }
        }
        if !sim.is_crashed() {
            sim.crash_now();
        }
        drop(store);
    });
}

/// The consumer of one life, doing what `broker::pop` does: each change is appended to
/// the revive log first, and only once it is stored does the table change and the
/// "client" (the model) learn of it. Each step says whether it fully succeeded.
struct Consumer<'a> {
    store: &'a Store,
    table: PopTable,
    model: &'a mut Model,
    files: std::sync::Arc<dyn MetaFiles>,
    mark: ReplayMark,
    /// The replay mark last written.
    written: Mark,
}

impl Consumer<'_> {
    /// Pop: due ones first, then new ones up to the queue's end.
    async fn pop(&mut self, queue: i32, now: i64) -> bool {
        let k = key(queue);
        let table = &mut self.table;
        let revived = table.take_due(&k, now, 8, now, INVISIBLE, 1000);
        let mut deliveries = revived.deliveries;
        let cursor = table.queue(&k).map_or(0, |s| s.cursor);
        let end = self.store.max_offset(TOPIC, queue);
        let fresh: Vec<Delivery> = (cursor..end.min(cursor + 4))
            .map(|offset| Delivery {
                offset,
                attempts: 0,
            })
            .collect();
        table.take_new(&k, &fresh, cursor.max(end.min(cursor + 4)), now, INVISIBLE);
        deliveries.extend(fresh);
        if deliveries.is_empty() {
            return true;
        }
        let offsets: Vec<u64> = deliveries.iter().map(|d| d.offset).collect();
        let record = LogRecord::Checkpoint {
            key: k.clone(),
            pop_time: now,
            invisible_time: INVISIBLE,
            deliveries,
        };
        match pop_log::append(self.store, LOG_QUEUE, &record, host(), now).await {
            Ok(at) => {
                self.table.set_ck(&k, &offsets, now, at);
                for offset in offsets {
                    self.model.held.insert((queue, offset), now);
                    let top = self.model.handed.entry(queue).or_insert(0);
                    *top = (*top).max(offset);
                }
                true
            }
            Err(_) => {
                self.table.give_back(&k, &offsets, now, now);
                self.model.uncertain_pops.push((queue, now));
                false
            }
        }
    }

    /// Ack some held deliveries of the queue, each chosen by a coin.
    async fn ack_some(&mut self, queue: i32, now: i64, rng: &mut Rng) -> bool {
        let k = key(queue);
        let chosen: Vec<(u64, i64)> = self
            .model
            .held
            .iter()
            .filter(|((q, _), _)| *q == queue)
            .filter(|_| rng.chance(50))
            .map(|((_, offset), pop_time)| (*offset, *pop_time))
            .collect();
        for (offset, pop_time) in chosen {
            if !self.table.is_inflight(&k, offset, pop_time) {
                // Handed out again since (it fell due): the old handle is stale.
                continue;
            }
            let record = LogRecord::Ack {
                key: k.clone(),
                offsets: vec![offset],
                pop_time,
            };
            match pop_log::append(self.store, LOG_QUEUE, &record, host(), now).await {
                Ok(_) => {
                    assert!(self.table.ack(&k, offset, pop_time));
                    self.model.held.remove(&(queue, offset));
                    self.model.acked.push((queue, offset, pop_time));
                }
                Err(_) => {
                    self.model.uncertain.push((queue, offset, pop_time));
                    return false;
                }
            }
        }
        true
    }

    /// Write the replay mark and the committed offsets, as the node does every second.
    fn write_marks(&mut self) -> bool {
        let end = self.store.max_offset(POP_LOG_TOPIC, LOG_QUEUE);
        let next = pop_log::next_mark(&self.table, end, &self.written);
        let marked = self.mark.write(&next).is_ok();
        if marked {
            self.written = next;
        }
        let offsets: BTreeMap<i32, u64> = (0..QUEUES)
            .filter_map(|q| self.table.watermark(&key(q)).map(|w| (q, w)))
            .collect();
        let json = serde_json::to_vec(&offsets).unwrap();
        marked && replace_file(&*self.files, offsets_path(), &json).is_ok()
    }
}

/// An ack whose outcome the crash left open counts as done if its delivery is gone.
fn settle_uncertain(table: &PopTable, model: &mut Model) {
    for (queue, offset, pop_time) in std::mem::take(&mut model.uncertain) {
        if !table.is_inflight(&key(queue), offset, pop_time)
            && model.held.get(&(queue, offset)) == Some(&pop_time)
        {
            model.held.remove(&(queue, offset));
            model.acked.push((queue, offset, pop_time));
        }
    }
}

fn check(table: &PopTable, model: &Model, life: u64) {
    table.check();
    for ((queue, offset), pop_time) in &model.held {
        let k = key(*queue);
        let entry = table.queue(&k).and_then(|state| state.get(*offset));
        let Some(entry) = entry else {
            panic!(
                "life {life}: held delivery {queue}/{offset} popped at {pop_time} is not in flight after recovery: {:?}",
                table.queue(&k)
            );
        };
        if entry.pop_time == *pop_time {
            assert_eq!(
                entry.deadline,
                pop_time + INVISIBLE,
                "life {life}: {queue}/{offset} has another deadline"
            );
        } else {
            // Only a pop whose checkpoint may have been stored in the crash replaces it.
            assert!(
                model.uncertain_pops.contains(&(*queue, entry.pop_time)),
                "life {life}: held {queue}/{offset} popped at {pop_time} is in flight at {} after recovery, which no pop stored",
                entry.pop_time
            );
        }
    }
    for (queue, offset, pop_time) in &model.acked {
        let k = key(*queue);
        let back = table
            .queue(&k)
            .and_then(|s| s.get(*offset))
            .is_some_and(|entry| entry.pop_time == *pop_time);
        assert!(
            !back,
            "life {life}: acknowledged {queue}/{offset} (popped at {pop_time}) is in flight again"
        );
    }
    for (queue, top) in &model.handed {
        let cursor = table.queue(&key(*queue)).map_or(0, |s| s.cursor);
        // Nothing held or acknowledged is handed out again as new: the cursor is past
        // every such offset.
        let needs = model
            .held
            .keys()
            .filter(|(q, _)| q == queue)
            .map(|(_, o)| *o)
            .chain(
                model
                    .acked
                    .iter()
                    .filter(|(q, _, _)| q == queue)
                    .map(|(_, o, _)| *o),
            )
            .max();
        if let Some(needed) = needs {
            assert!(
                cursor > needed,
                "life {life}: queue {queue}'s cursor {cursor} would hand out {needed} again as new (top {top})"
            );
        }
    }
}
