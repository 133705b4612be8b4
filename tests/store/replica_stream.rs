//! A replica store written by its master's CommitLog bytes (`store/replica.rs`): streamed
//! in random frame splits, it is byte-identical to its master per segment and answers
//! the same queue and key queries; forged frames are refused and leave nothing behind;
//! truncation then a new master's tail matches the new master; an empty replica starts
//! at its master's first segment when retention deleted the older ones.
//!
//! The seeded tests name their seed on failure;
//! `RINGMQ_SIM_SEEDS=START..END cargo test --test store replica_stream::` sweeps others.

use crate::common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::{as_disk, message, run_local, sim_disk, sim_seeds, Rng};
use ringmq::clock::Clock;
use ringmq::config::{BrokerRole, FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::io::Disk;
use ringmq::store::record::{body_crc, encode_into, RecordInput};
use ringmq::store::replica::{RecordFault, ReplicaAppendError, StoreRole};
use ringmq::store::{Store, StoreError};

pub(crate) const TOPICS: [&str; 3] = ["Orders", "Payments", "%RETRY%group_a"];
pub(crate) const QUEUES: i32 = 3;

/// A small store: 16 KiB segments, so a few dozen messages cross several.
pub(crate) fn config(dir: &str, role: BrokerRole, flush: FlushMode) -> StoreConfig {
    let mut config = StoreConfig::test_min(dir);
    config.commit_log_segment_size = 16 * 1024;
    config.max_message_size = 2 * 1024;
    config.consume_queue_entries_per_file = 8;
    config.flush_mode = flush;
    config.broker_role = role;
    config
}

pub(crate) async fn open(sim: &SimDisk, config: &StoreConfig) -> Store {
    Store::open(
        config.clone(),
        as_disk(sim),
        Clock::starting_at(1_800_000_000_000),
    )
    .await
    .unwrap_or_else(|error| panic!("opening {}: {error}", config.dir.display()))
}

/// Puts `count` random messages, each with a unique key `{tag}-{n}`.
pub(crate) async fn put_some(store: &Store, rng: &mut Rng, count: usize, tag: &str) {
    let inputs: Vec<RecordInput> = (0..count)
        .map(|n| {
            let topic = TOPICS[rng.range(0, TOPICS.len() as u64) as usize];
            let queue = rng.range(0, QUEUES as u64) as i32;
            let len = rng.range(1, 1500) as usize;
            let body = vec![b'a' + (n % 26) as u8; len];
            let key = format!("{tag}-{n}");
            message(topic, queue, &body, Some("TagA"), Some(&key))
        })
        .collect();
    for outcome in store.put_all(inputs).await {
        outcome.expect("a put on the master");
    }
}

/// Streams the master's log into the replica from where the replica goes on, in frames
/// of random sizes (down to a byte), until the replica has everything written.
pub(crate) async fn stream(master: &Store, replica: &Store, rng: &mut Rng) {
    loop {
        let progress = replica.replica_progress();
        // Inside the blank that closed a segment the master may send its zeros or skip
        // to the next segment's base: the replica takes either.
        let next = if progress.next_at < progress.records_end && rng.chance(50) {
            progress.records_end
        } else {
            progress.next_at
        };
        let cap = match rng.range(0, 4) {
            0 => rng.range(1, 9),
            1 => rng.range(9, 300),
            _ => rng.range(300, 20_000),
        } as usize;
        let Some(range) = master.replica_range(next, cap).expect("a range") else {
            break;
        };
        replica
            .append_replica(range.start, range.bytes)
            .await
            .unwrap_or_else(|error| panic!("append at {next}: {error}"));
    }
}

/// The bytes of a file as the disk holds it now.
pub(crate) fn file_bytes(disk: &dyn Disk, path: &std::path::Path) -> Vec<u8> {
    let file = disk.open(path, false).expect("open");
    let len = disk.file_len(file).expect("len") as usize;
    let mut bytes = vec![0u8; len];
    ringmq::io::read_exact_at(disk, file, 0, &mut bytes).expect("read");
    disk.close(file);
    bytes
}

/// The segment names of a store's CommitLog.
pub(crate) fn segments(disk: &dyn Disk, dir: &str) -> Vec<String> {
    let mut names = disk
        .list_dir(&std::path::Path::new(dir).join("commitlog"))
        .expect("list");
    names.sort();
    names
}

/// Every segment of the replica equals the master's of the same name, byte for byte; the
/// master has every segment up to the one holding its written end, and so does the replica
/// (the master may have preallocated one more).
pub(crate) fn assert_byte_identical(
    master_disk: &dyn Disk,
    master_dir: &str,
    replica_disk: &dyn Disk,
    replica_dir: &str,
    context: &str,
) {
    let replica_segments = segments(replica_disk, replica_dir);
    let master_segments = segments(master_disk, master_dir);
    assert!(
        !replica_segments.is_empty(),
        "{context}: the replica has no segment"
    );
    for name in &replica_segments {
        assert!(
            master_segments.contains(name),
            "{context}: replica segment {name} is not the master's ({master_segments:?})"
        );
        let path = |dir: &str| std::path::Path::new(dir).join("commitlog").join(name);
        let (ours, theirs) = (
            file_bytes(replica_disk, &path(replica_dir)),
            file_bytes(master_disk, &path(master_dir)),
        );
        if ours != theirs {
            let first = ours.iter().zip(&theirs).position(|(a, b)| a != b);
            panic!("{context}: segment {name} differs first at byte {first:?}");
        }
    }
}

/// The replica answers every queue and key query as the master does.
pub(crate) fn assert_same_answers(master: &Store, replica: &Store, keys: &[String], context: &str) {
    // A queue only a cut tail created is empty, as one never created is.
    let mut queues = master.queues();
    queues.extend(replica.queues());
    queues.sort();
    queues.dedup();
    for (topic, queue_id) in queues {
        let (min, max) = (
            master.min_offset(&topic, queue_id),
            master.max_offset(&topic, queue_id),
        );
        let (their_min, their_max) = (
            replica.min_offset(&topic, queue_id),
            replica.max_offset(&topic, queue_id),
        );
        if min == max && their_min == their_max {
            // Empty on both: where an empty queue stands is not in the log (a master's
            // queue whose records retention deleted, one a cut tail created).
            continue;
        }
        assert_eq!(
            (min, max),
            (
                replica.min_offset(&topic, queue_id),
                replica.max_offset(&topic, queue_id)
            ),
            "{context}: offsets of {topic}/{queue_id}"
        );
        let entries = |store: &Store| store.queue_entries(&topic, queue_id, min, 10_000).unwrap();
        assert_eq!(
            entries(master),
            entries(replica),
            "{context}: entries of {topic}/{queue_id}"
        );
    }
    for key in keys {
        for topic in TOPICS {
            let found = |store: &Store| {
                let mut hits: Vec<u64> = store
                    .lookup_keys(topic, key, 32, 0, i64::MAX)
                    .unwrap()
                    .records
                    .iter()
                    .map(|record| record.phys_offset)
                    .collect();
                hits.sort_unstable();
                hits
            };
            assert_eq!(
                found(master),
                found(replica),
                "{context}: key {key} of {topic}"
            );
        }
    }
}

pub(crate) fn keys(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{tag}-{n}")).collect()
}

/// Runs `test(seed)` for every seed, naming the one that fails.
pub(crate) fn for_seeds(default: std::ops::Range<u64>, name: &str, test: impl Fn(u64)) {
    for seed in sim_seeds(default) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(seed))).is_err() {
            panic!(
                "{name} failed for seed {seed}; rerun it alone with RINGMQ_SIM_SEEDS={seed}..{}",
                seed + 1
            );
        }
    }
}

#[test]
fn a_replica_fed_random_frame_splits_is_byte_identical_to_its_master() {
    for_seeds(0..8, "random frame splits", |seed| {
        let mut rng = Rng::new(seed);
        let flush = if rng.chance(50) {
            FlushMode::Sync
        } else {
            FlushMode::Async
        };
        let (master_sim, replica_sim) = (sim_disk(seed), sim_disk(seed + 1000));
        let master_config = config("/master", BrokerRole::AsyncMaster, flush);
        let replica_config = config("/replica", BrokerRole::Slave, flush);
        run_local(true, async {
            let master = open(&master_sim, &master_config).await;
            let replica = open(&replica_sim, &replica_config).await;
            assert_eq!(replica.role(), StoreRole::Replica);
            let mut total = 0;
            for round in 0..4 {
                let count = rng.range(5, 40) as usize;
                put_some(&master, &mut rng, count, &format!("r{round}")).await;
                total += count;
                stream(&master, &replica, &mut rng).await;
            }
            assert!(master.log_file_bytes() >= 3 * 16 * 1024, "several segments");
            let written = master.log_positions().written;
            let progress = replica.replica_progress();
            assert_eq!(
                (progress.next_at, progress.records_end, progress.ack),
                (written, written, written)
            );
            assert_byte_identical(
                &*as_disk(&master_sim),
                "/master",
                &*as_disk(&replica_sim),
                "/replica",
                "streamed",
            );
            let keys: Vec<String> = (0..4)
                .flat_map(|round| keys(&format!("r{round}"), 40))
                .collect();
            assert_same_answers(&master, &replica, &keys, "streamed");
            assert!(replica.replica_stats().records as usize == total);
            replica.shutdown().await.unwrap();
            // A clean reopen answers the same.
            let replica = open(&replica_sim, &replica_config).await;
            assert_same_answers(&master, &replica, &keys, "reopened");
            replica.shutdown().await.unwrap();
            master.shutdown().await.unwrap();
        });
    });
}

#[test]
fn a_replica_refuses_puts_and_a_master_refuses_frames() {
    let sim = sim_disk(5);
    run_local(true, async {
        let replica = open(
            &sim,
            &config("/replica", BrokerRole::Slave, FlushMode::Sync),
        )
        .await;
        let refused = replica.put(message("Orders", 0, b"x", None, None)).await;
        assert_eq!(refused, Err(StoreError::Replica));
        let master = open(
            &sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Sync),
        )
        .await;
        assert_eq!(
            master.append_replica(0, Bytes::from_static(b"x")).await,
            Err(ReplicaAppendError::NotReplica)
        );
        // Switched, each takes what the other refused.
        replica.set_role(StoreRole::Master).unwrap();
        replica
            .put(message("Orders", 0, b"x", None, None))
            .await
            .unwrap();
        master.set_role(StoreRole::Replica).unwrap();
        assert!(master
            .put(message("Orders", 0, b"x", None, None))
            .await
            .is_err());
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

#[test]
fn a_frame_at_the_wrong_offset_or_across_a_segment_end_is_refused() {
    let (master_sim, replica_sim) = (sim_disk(7), sim_disk(8));
    run_local(true, async {
        let master = open(
            &master_sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Sync),
        )
        .await;
        let replica = open(
            &replica_sim,
            &config("/replica", BrokerRole::Slave, FlushMode::Sync),
        )
        .await;
        put_some(&master, &mut Rng::new(7), 30, "k").await;
        let range = master.replica_range(0, 100).unwrap().unwrap();
        assert_eq!(
            replica.append_replica(1, range.bytes.slice(1..)).await,
            Err(ReplicaAppendError::Discontinuous { at: 1, expected: 0 })
        );
        let segment = replica.segment_size();
        assert_eq!(
            replica
                .append_replica(0, Bytes::from(vec![0u8; segment as usize + 1]))
                .await,
            Err(ReplicaAppendError::CrossesSegment {
                at: 0,
                len: segment + 1,
                segment_start: 0,
                segment_end: segment
            })
        );
        // Nothing of either was taken: the stream starts at 0 and ends identical.
        assert_eq!(replica.replica_progress().next_at, 0);
        stream(&master, &replica, &mut Rng::new(70)).await;
        assert_byte_identical(
            &*as_disk(&master_sim),
            "/master",
            &*as_disk(&replica_sim),
            "/replica",
            "after refusals",
        );
        // The master's ranges never cross a segment nor pass the written end.
        let written = master.log_positions().written;
        let near_end = master.segment_base_of(written) - 10;
        let range = master.replica_range(near_end, 1 << 20).unwrap().unwrap();
        assert_eq!(range.bytes.len(), 10);
        assert!(master.replica_range(written + 1, 10).is_err());
        assert_eq!(master.replica_range(written, 10).unwrap(), None);
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

/// A record for `at` as a master would write it, with `queue_offset` and `phys` forged
/// as the caller likes (a valid CRC32C either way).
fn forged_record(queue_offset: i64, phys: i64) -> Vec<u8> {
    let body = b"forged".as_slice();
    let mut input = message("Orders", 0, body, None, None);
    input.body_crc = body_crc(body);
    input.born_host = SocketAddr::from(([10, 0, 0, 9], 1));
    let mut out = Vec::new();
    encode_into(&input, queue_offset, phys, 1_800_000_000_000, &mut out).expect("encode");
    out
}

/// Streams everything, then offers `forged` at the end in two frames (the first ends
/// mid-record and is taken), and checks the refusal leaves no byte of it, visible or not.
fn refuse_forged(
    seed: u64,
    forge: impl Fn(&Store, u64) -> Vec<u8>,
    expect: impl Fn(&RecordFault) -> bool,
) {
    let (master_sim, replica_sim) = (sim_disk(seed), sim_disk(seed + 1));
    let replica_config = config("/replica", BrokerRole::Slave, FlushMode::Sync);
    run_local(true, async {
        let master = open(
            &master_sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Sync),
        )
        .await;
        let replica = open(&replica_sim, &replica_config).await;
        let mut rng = Rng::new(seed);
        put_some(&master, &mut rng, 12, "f").await;
        stream(&master, &replica, &mut rng).await;
        let end = replica.replica_progress().records_end;
        let forged = forge(&replica, end);
        let half = forged.len() / 2;
        let taken = replica
            .append_replica(end, Bytes::copy_from_slice(&forged[..half]))
            .await
            .unwrap();
        assert_eq!(
            (taken.records, taken.records_end, taken.next_at),
            (0, end, end + half as u64)
        );
        match replica
            .append_replica(end + half as u64, Bytes::copy_from_slice(&forged[half..]))
            .await
        {
            Err(ReplicaAppendError::BadRecord { at, fault, cut_to }) => {
                assert_eq!((at, cut_to), (end, end));
                assert!(expect(&fault), "unexpected fault {fault:?}");
            }
            other => panic!("a forged record was not refused: {other:?}"),
        }
        let progress = replica.replica_progress();
        assert_eq!((progress.next_at, progress.records_end), (end, end));
        let on_disk = replica.read_log(end, forged.len()).unwrap();
        assert!(
            on_disk.iter().all(|&byte| byte == 0),
            "the forged bytes survive on disk"
        );
        // The real stream goes on from there and ends identical; so does a crash now.
        put_some(&master, &mut rng, 12, "g").await;
        stream(&master, &replica, &mut rng).await;
        assert_byte_identical(
            &*as_disk(&master_sim),
            "/master",
            &*as_disk(&replica_sim),
            "/replica",
            "after the forgery",
        );
        replica_sim.crash_now();
        replica_sim.restart();
        let replica = open(&replica_sim, &replica_config).await;
        let mut all = keys("f", 12);
        all.extend(keys("g", 12));
        assert_same_answers(&master, &replica, &all, "recovered");
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

#[test]
fn a_record_with_a_bad_checksum_is_refused_and_cut_back() {
    refuse_forged(
        11,
        |replica, end| {
            let next = replica.max_offset("Orders", 0) as i64;
            let mut record = forged_record(next, end as i64);
            let last = record.len() - 1;
            record[last - 40] ^= 0x55;
            record
        },
        |fault| matches!(fault, RecordFault::Invalid(_)),
    );
}

#[test]
fn a_record_naming_another_phys_offset_is_refused() {
    refuse_forged(
        12,
        |replica, end| forged_record(replica.max_offset("Orders", 0) as i64, end as i64 + 64),
        |fault| matches!(fault, RecordFault::PhysOffset { .. }),
    );
}

#[test]
fn a_record_skipping_queue_offsets_is_refused() {
    refuse_forged(
        13,
        |replica, end| forged_record(replica.max_offset("Orders", 0) as i64 + 5, end as i64),
        |fault| matches!(fault, RecordFault::QueueOffset { .. }),
    );
}

#[test]
fn garbage_where_a_record_must_start_is_refused() {
    refuse_forged(
        14,
        |replica, end| {
            // A plausible header (size, magic), then garbage.
            let mut record = forged_record(replica.max_offset("Orders", 0) as i64, end as i64);
            record[8..].fill(0x42);
            record
        },
        |fault| matches!(fault, RecordFault::Invalid(_)),
    );
}

/// A crash right after a truncation cannot bring the cut records back; the replica goes
/// on from the cut. Returns the reopened replica.
async fn crash_after_truncation(
    master: &Store,
    replica: Store,
    sim: &SimDisk,
    config: &StoreConfig,
    common: u64,
) -> Store {
    let again = replica.truncate_replica(common).await.unwrap();
    assert_eq!(again.to, common);
    sim.crash_now();
    sim.restart();
    let replica = open(sim, config).await;
    assert_eq!(replica.log_positions().written, common);
    for key in keys("new", 35) {
        for topic in TOPICS {
            let found = replica.lookup_keys(topic, &key, 8, 0, i64::MAX).unwrap();
            assert!(
                found.records.is_empty(),
                "{key} of {topic} survived the cut"
            );
        }
    }
    stream(master, &replica, &mut Rng::new(common)).await;
    replica
}

#[test]
fn a_truncated_replica_takes_a_new_masters_tail_and_matches_it() {
    for_seeds(0..4, "truncate then a new tail", |seed| {
        let mut rng = Rng::new(seed);
        let flush = if rng.chance(50) {
            FlushMode::Sync
        } else {
            FlushMode::Async
        };
        let sims = [sim_disk(seed), sim_disk(seed + 100), sim_disk(seed + 200)];
        let old_config = config("/old", BrokerRole::AsyncMaster, flush);
        let new_config = config("/new", BrokerRole::Slave, flush);
        let follower_config = config("/follower", BrokerRole::Slave, flush);
        run_local(true, async {
            let old = open(&sims[0], &old_config).await;
            let new = open(&sims[1], &new_config).await;
            let follower = open(&sims[2], &follower_config).await;
            // A common prefix on all three, then `new` is promoted.
            put_some(&old, &mut rng, 40, "p").await;
            stream(&old, &new, &mut rng).await;
            stream(&old, &follower, &mut rng).await;
            let common = new.replica_progress().records_end;
            new.set_role(StoreRole::Master).unwrap();
            // The old master goes on alone (its tail is never replicated to `new`), the
            // follower takes part of it, ending mid-record.
            put_some(&old, &mut rng, 30, "old").await;
            stream(&old, &follower, &mut rng).await;
            put_some(&old, &mut rng, 3, "old-last").await;
            let next = follower.replica_progress().next_at;
            let partial = old.replica_range(next, 10).unwrap().unwrap();
            follower
                .append_replica(partial.start, partial.bytes)
                .await
                .unwrap();
            assert_eq!(follower.replica_progress().next_at, next + 10);
            put_some(&new, &mut rng, 35, "new").await;
            // The follower and the old master (now a replica) truncate to the common point
            // and take the new master's tail.
            old.set_role(StoreRole::Replica).unwrap();
            for (replica, dir, sim) in
                [(&follower, "/follower", &sims[2]), (&old, "/old", &sims[0])]
            {
                let cut = replica.truncate_replica(common).await.unwrap();
                assert_eq!(cut.to, common);
                assert!(cut.from > common);
                stream(&new, replica, &mut rng).await;
                assert_byte_identical(&*as_disk(&sims[1]), "/new", &*as_disk(sim), dir, dir);
                let mut all = keys("p", 40);
                all.extend(keys("new", 35));
                all.extend(keys("old", 30));
                assert_same_answers(&new, replica, &all, dir);
            }
            let follower =
                crash_after_truncation(&new, follower, &sims[2], &follower_config, common).await;
            assert_byte_identical(
                &*as_disk(&sims[1]),
                "/new",
                &*as_disk(&sims[2]),
                "/follower",
                "after a crash",
            );
            for store in [follower, old, new] {
                store.shutdown().await.unwrap();
            }
        });
    });
}

#[test]
fn truncation_only_cuts_at_a_record_boundary_the_replica_holds() {
    let (master_sim, replica_sim) = (sim_disk(21), sim_disk(22));
    run_local(true, async {
        let master = open(
            &master_sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Sync),
        )
        .await;
        let replica = open(
            &replica_sim,
            &config("/replica", BrokerRole::Slave, FlushMode::Sync),
        )
        .await;
        put_some(&master, &mut Rng::new(21), 10, "b").await;
        stream(&master, &replica, &mut Rng::new(22)).await;
        let end = replica.replica_progress().records_end;
        use ringmq::store::replica::ReplicaTruncateError;
        assert_eq!(
            replica.truncate_replica(end + 1).await,
            Err(ReplicaTruncateError::PastEnd { to: end + 1, end })
        );
        assert!(matches!(
            replica.truncate_replica(3).await,
            Err(ReplicaTruncateError::NotRecordBoundary { to: 3, .. })
        ));
        assert!(matches!(
            master.truncate_replica(0).await,
            Err(ReplicaTruncateError::NotReplica)
        ));
        // The second record's start is a boundary.
        let first = replica.queue_entries("Orders", 0, 0, 1).unwrap();
        let second = replica.queue_entries("Orders", 0, 1, 1).unwrap();
        if let (Some(_), Some(entry)) = (first.first(), second.first()) {
            let to = entry.phys_offset as u64;
            replica.truncate_replica(to).await.unwrap();
            assert_eq!(replica.max_offset("Orders", 0), 1);
        }
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

#[test]
fn an_empty_replica_started_at_a_later_segment_base_lines_up_with_its_master() {
    for_seeds(0..3, "start at a later base", |seed| {
        let mut rng = Rng::new(seed);
        let (master_sim, replica_sim) = (sim_disk(seed), sim_disk(seed + 50));
        let mut master_config = config("/master", BrokerRole::AsyncMaster, FlushMode::Sync);
        master_config.retention.file_reserved = std::time::Duration::ZERO;
        master_config.retention.delete_when = (0..24).collect();
        master_config.retention.delete_batch_max = 100;
        let replica_config = config("/replica", BrokerRole::Slave, FlushMode::Sync);
        run_local(true, async {
            let master = open(&master_sim, &master_config).await;
            put_some(&master, &mut rng, 120, "old").await;
            // Retention deletes only below the checkpoint: wait for one past the puts
            // (virtual time, a bounded number of checkpoint rounds).
            let written = master.log_positions().written;
            for _ in 0..100 {
                if master.checkpointed_safe_offset() >= written {
                    break;
                }
                tokio::time::sleep(master_config.checkpoint_interval).await;
            }
            master.clean_now().await.unwrap();
            let start = master.log_start();
            assert!(start > 0, "retention deleted the first segments");
            let replica = open(&replica_sim, &replica_config).await;
            use ringmq::store::replica::ReplicaStartError;
            assert!(matches!(
                replica.start_replica_at(start + 1).await,
                Err(ReplicaStartError::NotSegmentBase { .. })
            ));
            replica.start_replica_at(start).await.unwrap();
            assert_eq!(replica.log_start(), start);
            assert!(matches!(
                replica.start_replica_at(start).await,
                Err(ReplicaStartError::NotEmpty { .. })
            ));
            put_some(&master, &mut rng, 20, "new").await;
            stream(&master, &replica, &mut rng).await;
            assert_byte_identical(
                &*as_disk(&master_sim),
                "/master",
                &*as_disk(&replica_sim),
                "/replica",
                "later base",
            );
            let mut all = keys("new", 20);
            all.extend(keys("old", 120));
            // Queries of what the replica holds: every queue's entries from the master's
            // minimum on (the master trimmed its queues to its log start).
            assert_same_answers(&master, &replica, &all, "later base");
            let begun_late = replica.queues().into_iter().filter(|(topic, queue_id)| {
                replica.min_offset(topic, *queue_id) % master_config.consume_queue_entries_per_file
                    != 0
            });
            assert!(
                begun_late.count() > 0,
                "some queue begins inside its first file"
            );
            // Recovered after a crash, and cleanly reopened, it answers the same.
            replica_sim.crash_now();
            replica_sim.restart();
            let replica = open(&replica_sim, &replica_config).await;
            assert_same_answers(&master, &replica, &all, "later base, recovered");
            replica.shutdown().await.unwrap();
            let replica = open(&replica_sim, &replica_config).await;
            assert_same_answers(&master, &replica, &all, "later base, reopened");
            replica.shutdown().await.unwrap();
            master.shutdown().await.unwrap();
        });
    });
}

#[test]
fn a_blank_record_holding_anything_but_zeros_is_refused() {
    let (master_sim, replica_sim) = (sim_disk(31), sim_disk(32));
    run_local(true, async {
        let master = open(
            &master_sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Sync),
        )
        .await;
        let replica = open(
            &replica_sim,
            &config("/replica", BrokerRole::Slave, FlushMode::Sync),
        )
        .await;
        let mut rng = Rng::new(31);
        put_some(&master, &mut rng, 30, "z").await;
        // Stream up to the first blank: the frames stop right after its header.
        let segment = master.segment_size();
        let mut blank_at = None;
        while blank_at.is_none() {
            let next = replica.replica_progress().next_at;
            let range = master
                .replica_range(next, 1)
                .unwrap()
                .expect("the log goes on");
            replica
                .append_replica(range.start, range.bytes)
                .await
                .unwrap();
            let progress = replica.replica_progress();
            if progress.records_end == segment {
                blank_at = Some(progress.next_at);
            }
        }
        let at = blank_at.unwrap();
        assert!(at < segment, "the blank's header ended the last frame");
        let refused = replica
            .append_replica(at, Bytes::from_static(&[0, 0, 7]))
            .await;
        assert!(
            matches!(
                refused,
                Err(ReplicaAppendError::BadRecord { fault: RecordFault::BlankNotZero { at: bad }, cut_to, .. })
                    if bad == at + 2 && cut_to == segment
            ),
            "{refused:?}"
        );
        assert_eq!(replica.replica_progress().next_at, segment);
        assert!(replica
            .read_log(at, (segment - at) as usize)
            .unwrap()
            .iter()
            .all(|&b| b == 0));
        stream(&master, &replica, &mut rng).await;
        assert_byte_identical(
            &*as_disk(&master_sim),
            "/master",
            &*as_disk(&replica_sim),
            "/replica",
            "after the blank",
        );
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

#[test]
fn a_crash_while_a_replica_starts_at_a_later_base_leaves_it_empty_or_started() {
    let base = 3 * 16 * 1024;
    let replica_config = config("/replica", BrokerRole::Slave, FlushMode::Sync);
    for ops in 1..10 {
        let sim = sim_disk(40 + ops);
        run_local(true, async {
            let replica = open(&sim, &replica_config).await;
            sim.crash_after_ops(ops);
            let _ = replica.start_replica_at(base).await;
            if !sim.is_crashed() {
                sim.crash_now();
            }
        });
        sim.restart();
        run_local(true, async {
            let replica = open(&sim, &replica_config).await;
            let progress = replica.replica_progress();
            assert!(
                [0, base].contains(&replica.log_start()) && progress.next_at == replica.log_start(),
                "crash after {ops} ops: the log starts at {} and goes on at {}",
                replica.log_start(),
                progress.next_at
            );
            if replica.log_start() == 0 {
                replica.start_replica_at(base).await.unwrap();
            }
            assert_eq!(replica.replica_progress().next_at, base);
            replica.shutdown().await.unwrap();
        });
    }
}

#[test]
fn a_replica_below_its_masters_retention_starts_again_at_the_masters_minimum() {
    let (master_sim, replica_sim) = (sim_disk(61), sim_disk(62));
    let mut master_config = config("/master", BrokerRole::AsyncMaster, FlushMode::Sync);
    master_config.retention.file_reserved = std::time::Duration::ZERO;
    master_config.retention.delete_when = (0..24).collect();
    master_config.retention.delete_batch_max = 100;
    let replica_config = config("/replica", BrokerRole::Slave, FlushMode::Sync);
    run_local(true, async {
        let mut rng = Rng::new(61);
        let master = open(&master_sim, &master_config).await;
        let replica = open(&replica_sim, &replica_config).await;
        put_some(&master, &mut rng, 20, "early").await;
        stream(&master, &replica, &mut rng).await;
        // The replica is away while the master writes on and deletes what it had.
        put_some(&master, &mut rng, 120, "away").await;
        let written = master.log_positions().written;
        for _ in 0..100 {
            if master.checkpointed_safe_offset() >= written {
                break;
            }
            tokio::time::sleep(master_config.checkpoint_interval).await;
        }
        master.clean_now().await.unwrap();
        let start = master.log_start();
        let next = replica.replica_progress().next_at;
        use ringmq::store::replica::ReplicaRangeError;
        assert_eq!(
            master.replica_range(next, 100),
            Err(ReplicaRangeError::BelowStart { next, start })
        );
        let restarted = replica.restart_replica_at(start).await.unwrap();
        assert_eq!((restarted.from, restarted.to), (next, start));
        assert_eq!(replica.log_start(), start);
        put_some(&master, &mut rng, 20, "back").await;
        stream(&master, &replica, &mut rng).await;
        assert_byte_identical(
            &*as_disk(&master_sim),
            "/master",
            &*as_disk(&replica_sim),
            "/replica",
            "restarted",
        );
        assert_same_answers(&master, &replica, &keys("back", 20), "restarted");
        for key in keys("early", 20) {
            for topic in TOPICS {
                let found = replica.lookup_keys(topic, &key, 8, 0, i64::MAX).unwrap();
                assert!(
                    found.records.is_empty(),
                    "{key} of {topic} outlived the restart"
                );
            }
        }
        replica_sim.crash_now();
        replica_sim.restart();
        let replica = open(&replica_sim, &replica_config).await;
        assert_same_answers(&master, &replica, &keys("back", 20), "restarted, recovered");
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}

#[test]
fn whole_records_a_replica_takes_wake_its_long_polls_and_partial_ones_do_not() {
    let (master_sim, replica_sim) = (sim_disk(71), sim_disk(72));
    run_local(true, async {
        let master = open(
            &master_sim,
            &config("/master", BrokerRole::AsyncMaster, FlushMode::Async),
        )
        .await;
        let replica = open(
            &replica_sim,
            &config("/replica", BrokerRole::Slave, FlushMode::Async),
        )
        .await;
        put_some(&master, &mut Rng::new(71), 2, "w").await;
        let first = master.queue_entries("Orders", 0, 0, 1).unwrap();
        let whole = master.replica_range(0, 1 << 20).unwrap().unwrap().bytes;
        let wait = std::time::Duration::from_secs(1);
        let arrived = replica.arrivals();
        replica.append_replica(0, whole.slice(..10)).await.unwrap();
        assert!(
            tokio::time::timeout(wait, arrived).await.is_err(),
            "woken by a partial record"
        );
        let arrived = replica.arrivals();
        replica.append_replica(10, whole.slice(10..)).await.unwrap();
        assert!(
            tokio::time::timeout(wait, arrived).await.is_ok(),
            "not woken by whole records"
        );
        assert_eq!(replica.queue_entries("Orders", 0, 0, 1).unwrap(), first);
        replica.shutdown().await.unwrap();
        master.shutdown().await.unwrap();
    });
}
