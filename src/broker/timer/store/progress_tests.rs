use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use super::super::{Lane, TimerLimits, CHECKPOINT};
use super::*;
use crate::io::meta::replace_file;
use crate::io::sim::{SimConfig, SimDisk};

fn key(due: i64, offset: u64) -> TimerKey {
    TimerKey { due, offset }
}

fn small() -> TimerLimits {
    TimerLimits {
        buffer_entries: 4,
        block_entries: 2,
    }
}

fn disk(seed: u64) -> Arc<SimDisk> {
    Arc::new(SimDisk::new(SimConfig::with_seed(seed)))
}

/// The master's timer queue, in queue order: a key's offset is its place.
const QUEUE: [(i64, u64); 13] = [
    (10, 0),
    (20, 1),
    (15, 2),
    (25, 3),
    (100, 4),
    (60, 5),
    (90, 6),
    (70, 7),
    (80, 8),
    (30, 9),
    (40, 10),
    (50, 11),
    (45, 12),
];

fn queue() -> Vec<TimerKey> {
    QUEUE
        .iter()
        .map(|&(due, offset)| key(due, offset))
        .collect()
}

/// Takes the next key if it is due at `now`.
fn take_due(store: &mut TimerStore, now: i64) -> Option<(TimerKey, Lane)> {
    let (key, lane) = store.peek()?;
    if key.due > now {
        return None;
    }
    store.take(key, lane).unwrap();
    Some((key, lane))
}

/// Takes and acknowledges every key due at `now`; what it delivered.
fn drain_due(store: &mut TimerStore, now: i64) -> Vec<TimerKey> {
    let mut out = Vec::new();
    while let Some((key, lane)) = take_due(store, now) {
        store.acknowledge(key, lane);
        out.push(key);
    }
    out
}

fn index_spilling(store: &mut TimerStore, keys: &[TimerKey]) {
    for &k in keys {
        store.index(k);
        if store.needs_spill() {
            store.spill().unwrap();
        }
    }
}

/// A master with all of it: delivered keys from a drained run at the lowest offsets, a
/// run and a buffer still pending, a normal key in flight, late keys waiting, in flight
/// and done above `delivered`, and a cancellation. Its keys not acknowledged.
fn busy_master(disk: &Arc<SimDisk>, dir: &Path) -> (TimerStore, BTreeSet<TimerKey>) {
    let queue = queue();
    let mut store = TimerStore::open(disk.clone(), dir, small()).unwrap();
    // Offsets 0-3 fill the first run, 4-7 the second; 8 and 9 wait in the buffer.
    index_spilling(&mut store, &queue[..10]);
    assert_eq!(store.run_count(), 2);
    let mut acked: Vec<TimerKey> = drain_due(&mut store, 35);
    assert_eq!(
        acked,
        vec![key(10, 0), key(15, 2), key(20, 1), key(25, 3), key(30, 9)]
    );
    let (in_flight, lane) = take_due(&mut store, 60).unwrap();
    assert_eq!((in_flight, lane), (key(60, 5), Lane::Normal));
    // Stored before the scheduler took 60, indexed after: the late lane.
    for &k in &queue[10..] {
        store.index(k);
    }
    let (late, lane) = take_due(&mut store, 60).unwrap();
    assert_eq!((late, lane), (key(40, 10), Lane::Late));
    store.acknowledge(late, lane);
    acked.push(late);
    let (late_in_flight, lane) = take_due(&mut store, 60).unwrap();
    assert_eq!((late_in_flight, lane), (key(50, 11), Lane::Late));
    store.cancel("K".into(), 1000);
    // As the scheduler does every second: the drained run, wholly delivered, goes.
    store.checkpoint().unwrap();
    store.check_invariants().unwrap();
    let pending = queue
        .iter()
        .copied()
        .filter(|k| !acked.contains(k))
        .collect();
    (store, pending)
}

/// Writes `progress` as a slave's checkpoint in an empty directory, opens a store there as
/// a promoted slave would, indexes `queue` from where it says, and delivers everything:
/// what it delivered, and the store.
fn rebuild(progress: &TimerProgress, queue: &[TimerKey], seed: u64) -> (BTreeSet<TimerKey>, bool) {
    let disk = disk(seed);
    let dir = Path::new("/slave/timer");
    replace_file(&*disk, &dir.join(CHECKPOINT), &progress.slave_checkpoint()).unwrap();
    let mut store = TimerStore::open(disk.clone(), dir, small()).unwrap();
    assert!(
        store.checkpoint_claims() <= progress.claims(),
        "{} claimed, {} in the progress",
        store.checkpoint_claims(),
        progress.claims()
    );
    for &k in &queue[store.indexed() as usize..] {
        store.index_recovered(k);
        if store.needs_spill() {
            store.spill().unwrap();
        }
    }
    store.check_invariants().unwrap();
    let cancelled = store.is_cancelled("K");
    let delivered = drain_due(&mut store, i64::MAX);
    let set: BTreeSet<TimerKey> = delivered.iter().copied().collect();
    assert_eq!(set.len(), delivered.len(), "delivered twice: {delivered:?}");
    (set, cancelled)
}

#[test]
fn the_slave_checkpoint_rebuilds_exactly_the_masters_pending_set() {
    let disk = disk(11);
    let (master, pending) = busy_master(&disk, Path::new("/master/timer"));
    let progress = master.progress();
    assert_eq!(progress.runs_cover, 4, "offsets 0-3 are all delivered");
    assert_eq!(progress.indexed, 13);
    let wire = serde_json::to_vec(&progress).unwrap();
    assert_eq!(TimerProgress::parse(&wire).unwrap(), progress);

    let (rebuilt, cancelled) = rebuild(&progress, &queue(), 12);
    assert_eq!(rebuilt, pending, "none delivered again, none lost");
    assert!(cancelled, "the cancellation is copied");

    // Recovery from higher up loses what the master still holds below: from its indexed
    // (its late lane only), or from where its own runs start being needed.
    let mut from_indexed = progress.clone();
    from_indexed.runs_cover = progress.indexed;
    let (lost, _) = rebuild(&from_indexed, &queue(), 13);
    assert!(lost.len() < pending.len(), "{lost:?}");
    let mut from_runs = progress.clone();
    from_runs.runs_cover = master.runs_cover;
    assert_eq!(from_runs.runs_cover, 8, "the master's last spill");
    let (lost, _) = rebuild(&from_runs, &queue(), 14);
    assert!(!lost.contains(&key(100, 4)), "{lost:?}");
}

#[test]
fn a_slave_behind_its_master_claims_only_what_it_holds_and_loses_nothing() {
    let disk = disk(21);
    let (master, pending) = busy_master(&disk, Path::new("/master/timer"));
    let progress = master.progress();
    for queue_end in [13, 12, 10, 6, 0] {
        let clamped = progress.clone().clamped(queue_end);
        assert!(clamped.claims() <= queue_end, "{clamped:?}");
        // What the slave holds opens as a master's, and the entries it gets later are
        // indexed as new.
        let (rebuilt, _) = rebuild(&clamped, &queue(), 22 + queue_end);
        assert!(
            rebuilt.is_superset(&pending),
            "slave at {queue_end} lost {:?}",
            pending.difference(&rebuilt).collect::<Vec<_>>()
        );
        let again: Vec<&TimerKey> = rebuilt.difference(&pending).collect();
        assert!(
            again.iter().all(|k| k.offset >= queue_end),
            "slave at {queue_end} delivers again {again:?}, below what it held"
        );
        if queue_end == 10 {
            assert_eq!(again, vec![&key(40, 10)], "the late key done up there");
        }
    }
}

#[test]
fn a_recovering_masters_progress_loses_nothing() {
    let disk = disk(31);
    let dir = Path::new("/master/timer");
    let (mut master, _) = busy_master(&disk, dir);
    master.checkpoint().unwrap();
    drop(master);
    let mut master = TimerStore::open(disk.clone(), dir, small()).unwrap();
    assert!(master.recovering());
    // Between index batches the restored late lane and the run are delivered.
    let delivered = drain_due(&mut master, 65);
    assert_eq!(
        delivered,
        vec![key(50, 11), key(45, 12), key(60, 5)],
        "the late lane first, then the run"
    );
    let progress = master.progress();
    let wire = serde_json::to_vec(&progress).unwrap();
    let progress = TimerProgress::parse(&wire).unwrap();
    assert!(progress.recovering.is_some(), "{progress:?}");
    // What the master has not delivered: the rest of its run, and what it will index again.
    let pending: BTreeSet<TimerKey> = [key(100, 4), key(90, 6), key(70, 7), key(80, 8)].into();
    let (rebuilt, cancelled) = rebuild(&progress, &queue(), 32);
    assert!(cancelled);
    assert!(rebuilt.is_superset(&pending), "{rebuilt:?}");
    // The one it delivered from its run while recovering comes again, as after a crash.
    let again: Vec<&TimerKey> = rebuilt.difference(&pending).collect();
    assert_eq!(again, vec![&key(60, 5)]);
}

/// A valid progress as JSON, changed by `edit`, parsed.
fn parse_edited(edit: impl FnOnce(&mut serde_json::Value)) -> Result<TimerProgress, String> {
    let disk = disk(41);
    let (master, _) = busy_master(&disk, Path::new("/master/timer"));
    let mut json = serde_json::to_value(master.progress()).unwrap();
    edit(&mut json);
    TimerProgress::parse(&serde_json::to_vec(&json).unwrap()).map_err(|error| error.to_string())
}

#[track_caller]
fn refused(edit: impl FnOnce(&mut serde_json::Value), says: &str) {
    let why = parse_edited(edit).expect_err("refused");
    assert!(why.contains(says), "'{why}' does not say '{says}'");
    assert!(
        why.starts_with("the master's timer progress is refused"),
        "{why}"
    );
}

#[test]
fn a_progress_that_is_not_well_formed_is_refused_naming_why() {
    assert!(parse_edited(|_| {}).is_ok());
    for body in [&b"{"[..], b"", b"[]", b"null", b"{\"version\":1}"] {
        let why = TimerProgress::parse(body).unwrap_err().to_string();
        assert!(why.contains("not a timer progress"), "{why}");
    }
    refused(|p| p["version"] = 2.into(), "version 2");
    refused(|p| p["extra"] = 1.into(), "unknown field `extra`");
    refused(
        |p| p["indexed"] = (-1).into(),
        "invalid value: integer `-1`",
    );
    refused(
        |p| p["runsCover"] = (-3).into(),
        "invalid value: integer `-3`",
    );
    refused(|p| p["late"][0]["offset"] = (-1).into(), "invalid value");
    refused(
        |p| p["runsCover"] = 14.into(),
        "runsCover 14 is past indexed 13",
    );
}

#[test]
fn a_progress_with_keys_the_master_cannot_have_is_refused() {
    let late = |offset: u64, due: i64| serde_json::json!({ "due": due, "offset": offset });
    refused(|p| p["late"][0] = late(13, 50), "late-lane key");
    refused(
        |p| p["late"][0] = late(20, 50),
        "at or past what the master indexed (13)",
    );
    refused(|p| p["late"][1] = p["late"][0].clone(), "twice");
    refused(|p| p["late"][0]["due"] = (-5).into(), "negative due time");
    refused(|p| p["delivered"] = late(13, 30), "delivered");
    refused(|p| p["lateDone"][0] = late(3, 25), "not above delivered");
    refused(
        |p| p["lateDone"][0] = p["late"][0].clone(),
        "both waiting and done",
    );
    refused(|p| p["cancelled"]["K"] = (-1).into(), "cancellation 'K'");
    refused(|p| p["cancelled"][""] = 5.into(), "names no key");
    let rule = |below: u64, late: serde_json::Value| {
        let delivered = serde_json::json!({ "due": 20, "offset": 1 });
        serde_json::json!({ "below": below, "delivered": delivered, "late": late })
    };
    refused(
        |p| p["recovering"] = rule(13, serde_json::json!([])),
        "already",
    );
    refused(
        |p| p["recovering"] = rule(20, serde_json::json!([late(20, 5)])),
        "recovering late key",
    );
    // A retention gap's mark is a due time keys can have.
    assert!(parse_edited(|p| p["late"][0]["due"] = i64::MIN.into()).is_ok());
    assert!(parse_edited(|p| p["recovering"] = rule(20, serde_json::json!([late(19, 5)]))).is_ok());
}
