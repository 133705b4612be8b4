//! Recovery may cut the CommitLog only at an invalid record (bad magic, size or CRC: what a
//! torn write leaves). A record written whole (its CRC32C holds) that recovery cannot take
//! stops the open with a corruption error naming its offset, and nothing of the log is
//! deleted or zeroed: the acknowledged records after it stay on disk.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::store::record::{self, Decoded, Verify};
use ringmq::store::segment::segment_name;
use ringmq::store::{OpenKind, Placement, Store, StoreError, COMMIT_LOG_DIR};

const MESSAGES: usize = 5;
/// The record rewritten in each test; the ones after it were acknowledged.
const VICTIM: usize = 1;

fn config() -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = FlushMode::Sync;
    // No checkpoint after the open's own: recovery scans every record put below.
    config.checkpoint_interval = Duration::from_secs(3600);
    config
}

/// Puts MESSAGES acknowledged messages to `abc`/0, then crashes the process.
fn store_then_crash(sim: &SimDisk) -> Vec<Placement> {
    let placements = run_local(true, async {
        let store = Store::open(config(), as_disk(sim), Clock::starting_at(0))
            .await
            .unwrap();
        let mut placements = Vec::new();
        for index in 0..MESSAGES {
            let body = format!("m{index}");
            let put = store
                .put(message("abc", 0, body.as_bytes(), None, None))
                .await
                .unwrap();
            placements.push(put.placement.unwrap());
        }
        placements
    });
    sim.crash_now();
    sim.restart();
    placements
}

fn segment_path(phys: u64) -> (PathBuf, u64) {
    let config = config();
    let (base, size) = (config.offset_base(), config.commit_log_segment_size);
    let start = base + (phys - base) / size * size;
    let path = PathBuf::from("/store")
        .join(COMMIT_LOG_DIR)
        .join(segment_name(start));
    (path, start)
}

/// Overwrites the victim's bytes with what the record encoder makes of `topic` at
/// `claimed_phys` (so the CRC32C is the encoder's own, valid), durably.
fn rewrite_victim(sim: &SimDisk, victim: Placement, topic: &str, claimed_phys: u64) {
    let body = format!("m{VICTIM}");
    let input = message(topic, 0, body.as_bytes(), None, None);
    let mut bytes = Vec::new();
    record::encode_into(
        &input,
        victim.queue_offset as i64,
        claimed_phys as i64,
        victim.store_timestamp,
        &mut bytes,
    )
    .unwrap();
    assert_eq!(
        bytes.len(),
        victim.size as usize,
        "same length as the victim"
    );
    assert!(
        matches!(record::decode(&bytes, Verify::Full), Ok(Decoded::Record(_))),
        "the rewritten record is valid by magic, size and CRC"
    );
    let (path, start) = segment_path(victim.phys_offset);
    run_local(true, async {
        let disk = as_disk(sim);
        let file = disk.open(&path, false).unwrap();
        disk.write_at(file, victim.phys_offset - start, Bytes::from(bytes))
            .await
            .unwrap();
        disk.sync_data(file).await.unwrap();
        disk.close(file);
    });
}

fn open_error(sim: &SimDisk) -> StoreError {
    run_local(true, async {
        match Store::open(config(), as_disk(sim), Clock::starting_at(0)).await {
            Ok(store) => panic!("the open succeeded: {:?}", store.opened()),
            Err(error) => error,
        }
    })
}

/// Opens, expects a corruption error naming `at`, and checks the log is byte for byte
/// what it was.
fn assert_open_refused_and_nothing_deleted(sim: &SimDisk, at: u64) {
    let (path, _) = segment_path(at);
    let before = sim.durable_image(&path).expect("segment exists");
    let listing = |sim: &SimDisk| {
        use ringmq::io::Disk;
        sim.list_dir(&PathBuf::from("/store").join(COMMIT_LOG_DIR))
            .unwrap()
    };
    let segments_before = listing(sim);
    for attempt in 0..2 {
        match open_error(sim) {
            StoreError::Corrupt(text) => assert!(
                text.contains(&format!("record at {at} ")),
                "attempt {attempt}: the error should name offset {at}: {text}"
            ),
            other => panic!("attempt {attempt}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            sim.durable_image(&path).expect("segment still exists"),
            before,
            "attempt {attempt}: the CommitLog segment changed"
        );
        assert_eq!(listing(sim), segments_before, "attempt {attempt}");
    }
}

#[test]
fn a_whole_record_whose_topic_todays_rules_refuse_stops_the_open_and_deletes_nothing() {
    let sim = sim_disk(41);
    let placements = store_then_crash(&sim);
    let victim = placements[VICTIM];
    // Same length as "abc", refused by the topic rules ('/').
    rewrite_victim(&sim, victim, "a/c", victim.phys_offset);
    assert_open_refused_and_nothing_deleted(&sim, victim.phys_offset);
}

#[test]
fn a_whole_record_that_claims_another_position_stops_the_open_and_deletes_nothing() {
    let sim = sim_disk(42);
    let placements = store_then_crash(&sim);
    let victim = placements[VICTIM];
    rewrite_victim(&sim, victim, "abc", victim.phys_offset + 4096);
    assert_open_refused_and_nothing_deleted(&sim, victim.phys_offset);
    // `store verify` calls it damage, not an unrecovered tail the next start would cut.
    let report =
        ringmq::store::inspect::verify(as_disk(&sim), std::path::Path::new("/store")).unwrap();
    let at = format!("at {}: inconsistent record", victim.phys_offset);
    assert!(
        report.damage.iter().any(|damage| damage.contains(&at)),
        "verify should report '{at}': {:?}",
        report.damage
    );
    assert_eq!(report.unrecovered_tail, None);
}

#[test]
fn a_record_with_a_bad_crc_still_ends_the_log_where_it_starts() {
    let sim = sim_disk(43);
    let placements = store_then_crash(&sim);
    let victim = placements[VICTIM];
    let (path, start) = segment_path(victim.phys_offset);
    run_local(true, async {
        use ringmq::io::Disk;
        let file = sim.open(&path, false).unwrap();
        // The last digit of the CRC32C property (the record's last byte is its `\x02`).
        let at = victim.phys_offset - start + victim.size as u64 - 2;
        let mut digit = [0u8; 1];
        ringmq::io::read_exact_at(&sim, file, at, &mut digit).unwrap();
        assert!(digit[0].is_ascii_digit(), "{digit:?}");
        let flipped = if digit[0] == b'0' { b'1' } else { b'0' };
        sim.write_at(file, at, Bytes::copy_from_slice(&[flipped]))
            .await
            .unwrap();
        sim.sync_data(file).await.unwrap();
        sim.close(file);
    });
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(
            store.opened(),
            OpenKind::Recovered {
                from: config().offset_base(),
                to: victim.phys_offset
            },
            "the invalid record ends the log"
        );
        assert_eq!(store.max_offset("abc", 0), VICTIM as u64);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_missing_middle_segment_stops_the_open_naming_it_and_deletes_nothing() {
    use ringmq::io::Disk;
    let sim = sim_disk(44);
    let log_dir = PathBuf::from("/store").join(COMMIT_LOG_DIR);
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        let body = vec![5u8; 8 * 1024];
        // Over three 64 KiB segments of acknowledged records.
        for _ in 0..30 {
            store
                .put(message("abc", 0, &body, None, None))
                .await
                .unwrap();
        }
    });
    sim.crash_now();
    sim.restart();
    let mut names = sim.list_dir(&log_dir).unwrap();
    names.sort();
    assert!(names.len() >= 3, "at least three segments: {names:?}");
    let missing = names[1].clone();
    sim.remove_file(&log_dir.join(&missing)).unwrap();
    sim.sync_dir(&log_dir).unwrap();
    let later: Vec<_> = names[2..]
        .iter()
        .map(|name| (name.clone(), sim.durable_image(&log_dir.join(name))))
        .collect();
    let listing_before = sim.list_dir(&log_dir).unwrap();
    for attempt in 0..2 {
        match open_error(&sim) {
            StoreError::Corrupt(text) => assert!(
                text.contains(&missing) && text.contains("missing"),
                "attempt {attempt}: the error should name segment {missing}: {text}"
            ),
            other => panic!("attempt {attempt}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            sim.list_dir(&log_dir).unwrap(),
            listing_before,
            "attempt {attempt}"
        );
        for (name, image) in &later {
            assert!(image.is_some(), "{name} was durable before the open");
            assert_eq!(
                &sim.durable_image(&log_dir.join(name)),
                image,
                "attempt {attempt}: segment {name} changed"
            );
        }
    }
}
