//! Retention on tiny segments, with time paused and advanced instead of waited for:
//! - expired segments go oldest first, never the active one, and the queue and index
//!   files below them go with them; queue minimums move, reads below them are
//!   OFFSET_TOO_SMALL, queue offsets go on, nothing above the minimum changes;
//! - `deleteWhen` hours (UTC) gate expired segments, and the cleaner's own timer deletes
//!   them in such an hour without being called;
//! - at `diskSpaceWarningLevelRatio` puts are refused naming the ratio, the forced ratio
//!   deletes unexpired segments, and puts are accepted once a run finds space;
//! - a crash that left segments deleted but the files pointing into them (queue, index)
//!   in place opens consistently: everything is trimmed to the log's first segment.

use crate::common;

use std::time::Duration;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::StoreConfig;
use ringmq::io::sim::SimDisk;
use ringmq::io::Disk;
use ringmq::store::retention::RetentionConfig;
use ringmq::store::{GetStatus, Store, StoreError};

/// 2030-01-01T02:00:00Z: two hours before the `deleteWhen` hour the tests use.
const TWO_AM: i64 = 1_893_463_200_000;
const HOUR: Duration = Duration::from_secs(3600);
const SEGMENT: u64 = 16 * 1024;

fn config(delete_when: Vec<u8>) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.commit_log_segment_size = SEGMENT;
    config.max_message_size = 4 * 1024;
    config.consume_queue_entries_per_file = 16;
    config.retention = RetentionConfig {
        file_reserved: HOUR,
        delete_when,
        max_used_percent: 75,
        clean_forcibly_percent: 85,
        warning_percent: 90,
        delete_batch_max: 100,
        // Only the tests' own calls clean, unless a test waits this long.
        clean_interval: Duration::from_secs(100 * 24 * 3600),
    };
    config
}

const ALL_HOURS: fn() -> Vec<u8> = || (0..24).collect();

/// Puts `count` 1 KiB messages over queues 0 and 1 of "Old", each with key `m<i>`;
/// returns their queue offsets.
async fn fill(store: &Store, count: usize) -> Vec<(i32, u64)> {
    let mut placed = Vec::new();
    for i in 0..count {
        let queue = (i % 2) as i32;
        let body = vec![b'a' + (i % 26) as u8; 1024];
        let key = format!("m{i}");
        let result = store
            .put(message("Old", queue, &body, None, Some(&key)))
            .await
            .unwrap();
        placed.push((queue, result.placement.unwrap().queue_offset));
    }
    placed
}

fn segment_count(sim: &SimDisk) -> usize {
    Disk::list_dir(sim, std::path::Path::new("/store/commitlog"))
        .unwrap()
        .len()
}

/// A queue retention trimmed: its minimum moved past the deleted entries, below it is
/// too small, and everything from it up reads back from at or past the log start.
fn check_trimmed_queue(store: &Store, queue: i32) {
    let min = store.min_offset("Old", queue);
    let max = store.max_offset("Old", queue);
    assert!(min > 0 && min <= max, "queue {queue}: [{min}, {max})");
    let below = store.get_messages("Old", queue, 0, 1, None).unwrap();
    assert_eq!(below.status, GetStatus::OffsetTooSmall);
    assert_eq!(below.next_begin_offset, min);
    // Everything from the minimum up reads back, and lies at or past the log start.
    let mut offset = min;
    while offset < max {
        let got = store.get_messages("Old", queue, offset, 32, None).unwrap();
        assert_eq!(got.status, GetStatus::Found, "queue {queue} at {offset}");
        for stored in &got.messages {
            assert!(stored.phys_offset >= store.log_start());
        }
        offset = got.next_begin_offset;
    }
}

#[test]
fn expired_segments_go_oldest_first_with_their_queue_and_index_files_never_the_active_one() {
    let sim = sim_disk(11);
    run_local(true, async {
        let store = Store::open(
            config(ALL_HOURS()),
            as_disk(&sim),
            Clock::starting_at(TWO_AM),
        )
        .await
        .unwrap();
        let placed = fill(&store, 200).await;
        let before = segment_count(&sim);
        assert!(before >= 10, "{before} segments");
        // Not expired yet: half the reserved time (the checkpointer runs meanwhile).
        tokio::time::sleep(HOUR / 2).await;
        let report = store.clean_now().await.unwrap();
        assert_eq!(report.segments, 0, "nothing expired yet: {report:?}");
        tokio::time::sleep(HOUR).await;
        let report = store.clean_now().await.unwrap();
        assert!(report.segments >= before - 2, "{report:?} of {before}");
        assert!(segment_count(&sim) >= 1);
        assert_eq!(segment_count(&sim), before - report.segments);
        assert!(report.queue_files > 0, "{report:?}");
        assert_eq!(store.log_start(), report.log_start);
        assert_eq!(store.log_start() % SEGMENT, 0);

        for queue in 0..2 {
            check_trimmed_queue(&store, queue);
        }
        // A deleted message is not found by key; a kept one is.
        let deleted = store.lookup_keys("Old", "m0", 64, 0, i64::MAX).unwrap();
        assert!(deleted.records.is_empty(), "{:?}", deleted.records);
        let last = format!("m{}", placed.len() - 1);
        let kept = store.lookup_keys("Old", &last, 64, 0, i64::MAX).unwrap();
        assert_eq!(kept.records.len(), 1);
        // Offsets go on.
        let next = store
            .put(message("Old", 0, b"after", None, None))
            .await
            .unwrap();
        let last_of_queue_0 = placed
            .iter()
            .filter(|(q, _)| *q == 0)
            .map(|(_, o)| *o)
            .max();
        assert_eq!(
            Some(next.placement.unwrap().queue_offset),
            last_of_queue_0.map(|o| o + 1)
        );
        let stats = store.stats().retention;
        assert_eq!(stats.segments_deleted, report.segments as u64);
        assert_eq!(stats.bytes_deleted, report.bytes);
        store.shutdown().await.unwrap();

        // A clean reopen sees the same minimums.
        let mins: Vec<u64> = (0..2).map(|q| store.min_offset("Old", q)).collect();
        let store = Store::open(
            config(ALL_HOURS()),
            as_disk(&sim),
            Clock::starting_at(TWO_AM),
        )
        .await
        .unwrap();
        let reopened: Vec<u64> = (0..2).map(|q| store.min_offset("Old", q)).collect();
        assert_eq!(reopened, mins);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn delete_when_hours_gate_expired_segments_and_the_cleaner_runs_on_its_own_timer() {
    let sim = sim_disk(12);
    run_local(true, async {
        let mut config = config(vec![4]);
        config.retention.clean_interval = Duration::from_secs(600);
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(TWO_AM))
            .await
            .unwrap();
        fill(&store, 100).await;
        let before = segment_count(&sim);
        // 03:05: expired, but not a deleteWhen hour; the timer ran several times.
        tokio::time::sleep(HOUR + Duration::from_secs(300)).await;
        assert_eq!(segment_count(&sim), before, "deleted outside deleteWhen");
        assert_eq!(store.stats().retention.segments_deleted, 0);
        // 04:05: the timer's next runs delete.
        tokio::time::sleep(HOUR).await;
        assert!(store.stats().retention.segments_deleted > 0);
        assert!(segment_count(&sim) < before);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_nearly_full_disk_refuses_puts_forces_cleanup_and_accepts_puts_again() {
    let sim = sim_disk(13);
    run_local(true, async {
        // No deleteWhen hour and nothing expired: only the disk can make it delete.
        let store = Store::open(config(vec![]), as_disk(&sim), Clock::starting_at(TWO_AM))
            .await
            .unwrap();
        fill(&store, 200).await;
        // Let the checkpointer record a safe offset past the old segments.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let space = Disk::space(&sim, std::path::Path::new("/store")).unwrap();
        let used = space.total - space.available;
        sim.set_capacity(Some(used * 100 / 92));
        let report = store.clean_now().await.unwrap();
        assert!(report.used_percent >= 90, "{report:?}");
        assert!(
            report.segments > 0,
            "forced above the forcible ratio: {report:?}"
        );
        match store.put(message("Old", 0, b"x", None, None)).await {
            Err(StoreError::DiskFull(why)) => {
                assert!(why.contains("diskSpaceWarningLevelRatio"), "{why}")
            }
            other => panic!("a put at the warning ratio: {other:?}"),
        }
        assert_eq!(store.stats().retention.puts_refused_for_space, 1);
        // The next run finds the space the last one freed.
        let report = store.clean_now().await.unwrap();
        assert!(report.used_percent < 90, "{report:?}");
        store
            .put(message("Old", 0, b"x", None, None))
            .await
            .expect("accepted again");
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_crash_between_deleting_segments_and_their_queue_files_opens_trimmed() {
    let sim = sim_disk(14);
    run_local(true, async {
        let store = Store::open(
            config(ALL_HOURS()),
            as_disk(&sim),
            Clock::starting_at(TWO_AM),
        )
        .await
        .unwrap();
        fill(&store, 200).await;
        store.shutdown().await.unwrap();
    });
    // What a crash in the middle of a run leaves: the oldest segments gone, every queue
    // and index file still there.
    let dir = std::path::Path::new("/store/commitlog");
    let names = Disk::list_dir(&sim, dir).unwrap();
    for name in &names[..names.len() / 2] {
        Disk::remove_file(&sim, &dir.join(name)).unwrap();
    }
    run_local(true, async {
        let store = Store::open(
            config(ALL_HOURS()),
            as_disk(&sim),
            Clock::starting_at(TWO_AM),
        )
        .await
        .unwrap();
        let log_start = store.log_start();
        assert!(log_start > 0);
        for queue in 0..2 {
            let (min, max) = (
                store.min_offset("Old", queue),
                store.max_offset("Old", queue),
            );
            assert!(min > 0 && min < max, "queue {queue}: [{min}, {max})");
            let (mut offset, mut read) = (min, 0u64);
            while offset < max {
                let got = store.get_messages("Old", queue, offset, 32, None).unwrap();
                assert_eq!(got.status, GetStatus::Found, "queue {queue} at {offset}");
                assert!(got.messages.iter().all(|m| m.phys_offset >= log_start));
                read += got.messages.len() as u64;
                offset = got.next_begin_offset;
            }
            assert_eq!(read, max - min, "queue {queue}");
        }
        let deleted = store.lookup_keys("Old", "m0", 64, 0, i64::MAX).unwrap();
        assert!(deleted.records.is_empty());
        store
            .put(message("Old", 0, b"after", None, None))
            .await
            .unwrap();
        store.shutdown().await.unwrap();
    });
}
