//! Deterministic crash simulation of the timer store (`broker/timer_store.rs`) on the
//! simulated disk.
//!
//! Each seed runs several lives over one store with a tiny memory bound (so runs are
//! written often). The test keeps the timer queue itself, the durable log the scheduler
//! indexes from: a list of keys, each due a little before or after the test's clock. In a
//! life the store is opened, the queue is indexed again from what the store asks for, and
//! a seeded mix of appends, indexing (spilling a full buffer with no delivery in flight,
//! as the scheduler does), clock steps, takes of due keys, acknowledgements in taking
//! order and checkpoints runs until the disk loses power after a seeded number of disk
//! operations (inside a run write, a checkpoint's temp file, its rename, a directory sync
//! or a run's removal). Unsynced writes are then kept, dropped or torn, and names not
//! synced are lost. Throughout, and after every crash:
//! - the store opens, and its invariants hold (`TimerStore::check_invariants`);
//! - every key taken is a queue entry with the queue's due time, at or before the clock
//!   (nothing early), and none is taken twice in one life;
//! - a key from the normal lane is the lowest of every indexed key that is neither
//!   acknowledged nor in flight (due order: nothing is passed over, so nothing is late);
//! - no key acknowledged before the last completed checkpoint comes out again; keys
//!   acknowledged after it may (counted as duplicates);
//! - the retention hold (`lowest_needed_offset`) never passes a key still needed;
//! - a message whose cancellation (a queue entry due 1 ms before it, at a later offset,
//!   applied with `cancel` when taken, as the scheduler does) was acknowledged in this life
//!   or settled by a checkpoint is found cancelled (`is_cancelled`) when it is taken for
//!   the first time.
//!
//! After the last life the store is opened once more and drained with the clock far
//! ahead: every key of the queue was then acknowledged at least once (nothing lost), and
//! a checkpoint leaves no run file behind.
//!
//! A failure names its seed. `RINGMQ_SIM_SEEDS=START..END cargo test --test
//! timer_store_crash_simulation` runs other seeds; `RINGMQ_SIM_TRACE=1` prints every
//! operation and the store's state after it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use common::{sim_disk, sim_seeds, Rng};
use ringmq::broker::timer::store::{Lane, TimerKey, TimerLimits, TimerStore};
use ringmq::io::meta::MetaFiles;
use ringmq::io::sim::SimDisk;

const DIR: &str = "/node/shard-0/timer";

/// What a run of seeds saw, to show the interesting cases are reached.
#[derive(Default)]
struct Seen {
    crashes: u64,
    runs_written: u64,
    duplicates: u64,
    late_takes: u64,
    keys: u64,
    /// Cancelled messages taken after their cancellation was acknowledged.
    cancelled: u64,
}

#[test]
fn timer_store_after_any_crash_loses_no_key_and_gives_none_early_or_out_of_order() {
    let seeds = sim_seeds(0..500);
    let mut seen = Seen::default();
    for seed in seeds.clone() {
        match std::panic::catch_unwind(|| simulate(seed)) {
            Ok(one) => {
                seen.crashes += one.crashes;
                seen.runs_written += one.runs_written;
                seen.duplicates += one.duplicates;
                seen.late_takes += one.late_takes;
                seen.keys += one.keys;
                seen.cancelled += one.cancelled;
            }
            Err(_) => panic!(
                "timer store crash simulation failed for seed {seed}; rerun it alone with \
                 RINGMQ_SIM_SEEDS={seed}..{}",
                seed + 1
            ),
        }
    }
    println!(
        "{} seeds: {} keys, {} crashes, {} runs written, {} late-lane takes, {} keys \
         delivered again after a crash, {} cancelled messages kept from delivery",
        seeds.end - seeds.start,
        seen.keys,
        seen.crashes,
        seen.runs_written,
        seen.late_takes,
        seen.duplicates,
        seen.cancelled
    );
    if seeds.end - seeds.start >= 100 {
        assert!(
            seen.runs_written > 0
                && seen.late_takes > 0
                && seen.duplicates > 0
                && seen.cancelled > 0,
            "the workload must write runs, use the late lane and crash after \
             uncheckpointed acknowledgements"
        );
    }
}

/// What the test knows across lives.
struct Model {
    seed: u64,
    /// The timer queue: entry `i` is the key at offset `i`, due when the key says.
    queue: Vec<TimerKey>,
    /// Keys acknowledged by the last completed checkpoint made with recovery caught up: never
    /// to come out again.
    settled: BTreeSet<TimerKey>,
    /// Keys acknowledged in this life since: they may come out again after a crash.
    unsettled: BTreeSet<TimerKey>,
    /// Keys ever acknowledged: one that comes out again is a duplicate.
    acknowledged: BTreeSet<TimerKey>,
    /// Keys of the queue never acknowledged, in key order.
    open: BTreeSet<TimerKey>,
    /// Cancellations: the offset of a cancelled message → its cancellation's key, and the
    /// offset of a cancellation → the key of the message it cancels.
    cancel_of: BTreeMap<u64, TimerKey>,
    target_of: BTreeMap<u64, TimerKey>,
    now: i64,
    seen: Seen,
}

fn trace() -> bool {
    std::env::var_os("RINGMQ_SIM_TRACE").is_some()
}

/// One life's deliveries in flight, in taking order, as the scheduler keeps them.
type InFlight = VecDeque<(TimerKey, Lane)>;

fn simulate(seed: u64) -> Seen {
    let mut rng = Rng::new(seed);
    let sim = sim_disk(seed);
    let files: Arc<dyn MetaFiles> = Arc::new(sim.clone());
    let limits = TimerLimits {
        buffer_entries: rng.range(1, 9) as usize,
        block_entries: rng.range(1, 5) as usize,
    };
    let mut model = Model {
        seed,
        queue: Vec::new(),
        settled: BTreeSet::new(),
        unsettled: BTreeSet::new(),
        acknowledged: BTreeSet::new(),
        open: BTreeSet::new(),
        cancel_of: BTreeMap::new(),
        target_of: BTreeMap::new(),
        now: 10_000,
        seen: Seen::default(),
    };
    let lives = rng.range(3, 8);
    for life in 0..lives {
        if trace() {
            eprintln!("life {life}");
        }
        let mut store = open(&files, limits, &model, life);
        // About five disk operations per spill or checkpoint: crash anywhere in the life.
        let ops = rng.range(20, 120);
        sim.crash_after_ops(rng.range(1, ops / 2 + 4));
        live(&mut rng, &sim, &mut store, &mut model, ops, life);
        if !sim.is_crashed() {
            sim.crash_now();
        }
        model.seen.crashes += 1;
        // What the crash did not settle is what the next life's checkpoints must not
        // settle either: the store may hold those keys again.
        model.unsettled.clear();
        drop(store);
        sim.restart();
    }

    drain_after_the_last_start(&files, limits, &mut model, lives);
    model.seen.keys = model.queue.len() as u64;
    model.seen
}

/// The last start: everything left comes out, in due order, and nothing is lost.
fn drain_after_the_last_start(
    files: &Arc<dyn MetaFiles>,
    limits: TimerLimits,
    model: &mut Model,
    lives: u64,
) {
    let seed = model.seed;
    let mut store = open(files, limits, model, lives);
    model.now = i64::MAX / 2;
    let mut in_flight = InFlight::new();
    let mut taken = BTreeSet::new();
    loop {
        index_some(&mut store, model, &in_flight, usize::MAX, lives)
            .expect("the disk works after the last start");
        if !take_due(&mut store, model, &mut in_flight, &mut taken, 1, lives)
            .expect("the disk works")
        {
            break;
        }
        acknowledge_one(&mut store, model, &mut in_flight);
    }
    assert!(store.peek().is_none(), "seed {seed}: drained");
    assert_eq!(store.pending(), 0, "seed {seed}: nothing pending");
    assert_eq!(store.indexed(), model.queue.len() as u64, "seed {seed}");
    let lost: Vec<&TimerKey> = model.open.iter().take(10).collect();
    assert!(
        lost.is_empty(),
        "seed {seed}: {} queue keys never delivered, such as {lost:?}",
        model.open.len()
    );
    store.checkpoint().expect("the disk works");
    store
        .check_invariants()
        .unwrap_or_else(|broken| panic!("seed {seed}: after the drain: {broken}"));
    assert_eq!(store.run_count(), 0, "seed {seed}: every run delivered");
    assert_eq!(
        files.list_dir(Path::new(DIR)).unwrap(),
        vec!["checkpoint.json".to_string()],
        "seed {seed}: no run file left behind"
    );
}

/// Opens the store as the scheduler's start does; it must open whatever the crash left.
fn open(files: &Arc<dyn MetaFiles>, limits: TimerLimits, model: &Model, life: u64) -> TimerStore {
    let seed = model.seed;
    let store = TimerStore::open(files.clone(), Path::new(DIR), limits).unwrap_or_else(|error| {
        panic!("seed {seed}: life {life}: the store does not open: {error}")
    });
    assert!(
        store.indexed() <= model.queue.len() as u64,
        "seed {seed}: life {life}: indexed {} past the queue's end {}",
        store.indexed(),
        model.queue.len()
    );
    check(&store, model, &InFlight::new(), life);
    let names = files.list_dir(Path::new(DIR)).unwrap();
    assert!(
        names
            .iter()
            .all(|name| name == "checkpoint.json" || name.starts_with("run-")),
        "seed {seed}: life {life}: left after the open: {names:?}"
    );
    assert_eq!(
        names.iter().filter(|name| name.starts_with("run-")).count(),
        store.run_count(),
        "seed {seed}: life {life}: a run file the checkpoint does not name: {names:?}"
    );
    store
}

fn live(
    rng: &mut Rng,
    sim: &SimDisk,
    store: &mut TimerStore,
    model: &mut Model,
    ops: u64,
    life: u64,
) {
    let seed = model.seed;
    let mut in_flight = InFlight::new();
    let mut taken = BTreeSet::new();
    let window = rng.range(1, 5) as usize;
    for _ in 0..ops {
        let outcome = match rng.range(0, 100) {
            0..=24 => {
                // Timer sends: most due ahead, some already due (a send stored just
                // before a later-due key was taken, or indexed after a restart).
                for _ in 0..rng.range(1, 4) {
                    let due = model.now + rng.range(0, 400) as i64 - 60;
                    let key = TimerKey {
                        due,
                        offset: model.queue.len() as u64,
                    };
                    model.queue.push(key);
                    model.open.insert(key);
                }
                // Sometimes a cancellation of a message still ahead: as the send path stores
                // it, due 1 ms before the message, at a later offset.
                if rng.chance(30) {
                    let target = model.queue[rng.below(model.queue.len())];
                    let free = !model.target_of.contains_key(&target.offset)
                        && !model.cancel_of.contains_key(&target.offset);
                    if free && target.due - 1 > model.now {
                        let key = TimerKey {
                            due: target.due - 1,
                            offset: model.queue.len() as u64,
                        };
                        model.queue.push(key);
                        model.open.insert(key);
                        model.cancel_of.insert(target.offset, key);
                        model.target_of.insert(key.offset, target);
                    }
                }
                Ok(())
            }
            25..=44 => {
                let count = rng.range(1, 8) as usize;
                index_some(store, model, &in_flight, count, life)
            }
            45..=59 => {
                model.now += rng.range(0, 120) as i64;
                Ok(())
            }
            60..=79 => take_due(store, model, &mut in_flight, &mut taken, window, life).map(|_| ()),
            80..=93 => {
                for _ in 0..rng.range(1, 4) {
                    acknowledge_one(store, model, &mut in_flight);
                }
                Ok(())
            }
            _ => checkpoint(store, model),
        };
        if trace() {
            eprintln!(
                "  now {} queue {} {store:?} in flight {in_flight:?} result {outcome:?}",
                model.now,
                model.queue.len()
            );
        }
        if let Err(error) = outcome {
            assert!(
                sim.is_crashed(),
                "seed {seed}: life {life}: a disk error without a crash: {error}"
            );
            return;
        }
        check(store, model, &in_flight, life);
    }
}

/// Indexes up to `count` queue entries, spilling a full buffer first when no delivery is
/// in flight (and stopping when one is), as the scheduler's `index_new` does.
fn index_some(
    store: &mut TimerStore,
    model: &mut Model,
    in_flight: &InFlight,
    count: usize,
    life: u64,
) -> std::io::Result<()> {
    for _ in 0..count {
        let next = store.indexed() as usize;
        if next >= model.queue.len() {
            break;
        }
        if store.needs_spill() {
            if !in_flight.is_empty() {
                break;
            }
            let runs = store.run_count();
            let settles = !store.recovering();
            store.spill()?;
            if settles {
                settle(model);
            }
            if store.run_count() > runs {
                model.seen.runs_written += 1;
            }
        }
        store.index_recovered(model.queue[next]);
        assert_eq!(
            store.indexed() as usize,
            next + 1,
            "seed {}: life {life}: indexed in queue order",
            model.seed
        );
    }
    Ok(())
}

/// Takes due keys until `window` are in flight; whether it took any.
fn take_due(
    store: &mut TimerStore,
    model: &mut Model,
    in_flight: &mut InFlight,
    taken: &mut BTreeSet<TimerKey>,
    window: usize,
    life: u64,
) -> std::io::Result<bool> {
    let seed = model.seed;
    let mut any = false;
    while in_flight.len() < window {
        let Some((key, lane)) = store.peek() else {
            break;
        };
        if key.due > model.now {
            break;
        }
        let queued = model.queue.get(key.offset as usize).copied();
        assert_eq!(
            queued,
            Some(key),
            "seed {seed}: life {life}: {key:?} ({lane:?}) is not the queue's entry at its offset"
        );
        // (The late lane a checkpoint saved comes back at the open, before the queue is
        // indexed again up to it.)
        assert!(
            lane == Lane::Late || key.offset < store.indexed(),
            "seed {seed}: life {life}: {key:?} taken before it was indexed"
        );
        assert!(
            !model.settled.contains(&key),
            "seed {seed}: life {life}: {key:?} ({lane:?}) again, though its acknowledgement \
             was checkpointed"
        );
        assert!(
            taken.insert(key),
            "seed {seed}: life {life}: {key:?} ({lane:?}) taken twice in one life"
        );
        if lane == Lane::Normal {
            // Due order: no indexed key still to deliver comes before it.
            let indexed = store.indexed();
            let earlier = model
                .open
                .range(..key)
                .find(|open| open.offset < indexed && !in_flight.iter().any(|(k, _)| k == *open));
            assert!(
                earlier.is_none(),
                "seed {seed}: life {life}: {key:?} taken while {earlier:?} waits"
            );
        } else {
            model.seen.late_takes += 1;
        }
        if model.acknowledged.contains(&key) {
            model.seen.duplicates += 1;
        }
        if trace() {
            eprintln!("take {key:?} {lane:?}");
        }
        store.take(key, lane)?;
        // What the scheduler's delivery start does with a cancellation or its message.
        if let Some(target) = model.target_of.get(&key.offset) {
            store.cancel(uniq_key(target), key.due + 1);
        } else if let Some(cancellation) = model.cancel_of.get(&key.offset) {
            let cancelled = store.is_cancelled(&uniq_key(&key));
            let known =
                model.settled.contains(cancellation) || model.unsettled.contains(cancellation);
            // (A message delivered before comes again only after a crash; its cancellation
            // may have been forgotten once a later key was delivered.)
            if known && !model.acknowledged.contains(&key) {
                assert!(
                    cancelled,
                    "seed {seed}: life {life}: {key:?} taken after its cancellation \
                     {cancellation:?} was acknowledged, but not cancelled"
                );
                model.seen.cancelled += 1;
            }
        }
        in_flight.push_back((key, lane));
        any = true;
    }
    Ok(any)
}

/// The unique key the message at `key` would carry.
fn uniq_key(key: &TimerKey) -> String {
    format!("U{}", key.offset)
}

/// The oldest delivery in flight completed.
fn acknowledge_one(store: &mut TimerStore, model: &mut Model, in_flight: &mut InFlight) {
    let Some((key, lane)) = in_flight.pop_front() else {
        return;
    };
    if trace() {
        eprintln!("ack {key:?} {lane:?}");
    }
    store.acknowledge(key, lane);
    model.open.remove(&key);
    model.acknowledged.insert(key);
    model.unsettled.insert(key);
}

fn checkpoint(store: &mut TimerStore, model: &mut Model) -> std::io::Result<()> {
    let settles = !store.recovering();
    store.checkpoint()?;
    if settles {
        settle(model);
    }
    Ok(())
}

/// A checkpoint completed, with recovery caught up: what was acknowledged is settled
/// (while recovering, a checkpoint keeps the opened one's rule, and what was acknowledged
/// may come again).
fn settle(model: &mut Model) {
    if trace() {
        eprintln!("settled {:?}", model.unsettled);
    }
    let unsettled = std::mem::take(&mut model.unsettled);
    model.settled.extend(unsettled);
}

/// The invariants that hold between any two operations.
fn check(store: &TimerStore, model: &Model, in_flight: &InFlight, life: u64) {
    let seed = model.seed;
    store
        .check_invariants()
        .unwrap_or_else(|broken| panic!("seed {seed}: life {life}: {broken}"));
    let indexed = store.indexed();
    let needed = model
        .open
        .iter()
        .filter(|key| key.offset < indexed)
        .map(|key| key.offset)
        .chain(in_flight.iter().map(|(key, _)| key.offset))
        .min();
    if let Some(needed) = needed {
        assert!(
            store.lowest_needed_offset() <= needed,
            "seed {seed}: life {life}: the retention hold is at {}, but the key at {needed} \
             is still needed (in flight: {in_flight:?}; {store:?})",
            store.lowest_needed_offset()
        );
    }
    let waiting = model
        .open
        .iter()
        .filter(|key| key.offset < indexed && !in_flight.iter().any(|(k, _)| k == *key))
        .count() as u64;
    assert!(
        store.pending() >= waiting,
        "seed {seed}: life {life}: {} pending, but {waiting} indexed keys wait",
        store.pending()
    );
}
