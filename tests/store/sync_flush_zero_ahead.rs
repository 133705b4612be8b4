//! Under SYNC_FLUSH a batch's write also carries zeros past its end, about once per
//! `sync_zero_ahead_bytes`, so later fsyncs overwrite written blocks instead of converting
//! the segment's fallocated ones. The padding must keep one write per batch, change no
//! record, and leave a log that reopens and resumes where it ended, also after a crash.

use crate::common;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::{open_backend, DataWrites, IoChoice, IoStats};
use ringmq::store::record::{decode, Decoded, Verify};
use ringmq::store::{GetStatus, PutStatus, Store};

const MESSAGES: u64 = 30;
const ZERO_AHEAD: u64 = 1 << 20;

fn config(dir: &std::path::Path, zero_ahead: u64) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.flush_mode = FlushMode::Sync;
    config.commit_log_segment_size = 8 << 20;
    config.sync_zero_ahead_bytes = zero_ahead;
    config
}

fn bodies(store: &Store, expected: u64) -> Vec<String> {
    let got = store
        .get_messages("TopicA", 1, 0, expected as u32 + 1, None)
        .unwrap();
    assert_eq!(got.status, GetStatus::Found);
    assert_eq!(got.messages.len() as u64, expected);
    got.messages
        .iter()
        .map(|stored| match decode(&stored.bytes, Verify::Full) {
            Ok(Decoded::Record(view)) => String::from_utf8(view.body.to_vec()).unwrap(),
            other => panic!("a stored message does not decode: {other:?}"),
        })
        .collect()
}

fn expected_bodies() -> Vec<String> {
    let mut expected: Vec<String> = (0..MESSAGES).map(|i| format!("body-{i}")).collect();
    expected.push("after the reopen".into());
    expected
}

/// Puts `MESSAGES` one at a time on a real disk (one batch each), reopens, puts one more;
/// returns the first run's I/O stats and every body read back at the end.
fn put_reopen_put(zero_ahead: u64) -> (IoStats, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let stats = run_local(false, async {
        let disk = open_backend(IoChoice::Auto, DataWrites::Pwrite).unwrap();
        let store = Store::open(config(tmp.path(), zero_ahead), disk, Clock::system())
            .await
            .unwrap();
        for index in 0..MESSAGES {
            let body = format!("body-{index}");
            let put = store
                .put(message("TopicA", 1, body.as_bytes(), None, None))
                .await
                .unwrap();
            assert_eq!(put.status, PutStatus::Ok);
        }
        let stats = store.io_stats();
        store.shutdown().await.unwrap();
        stats
    });
    let read = run_local(false, async {
        let disk = open_backend(IoChoice::Auto, DataWrites::Pwrite).unwrap();
        let store = Store::open(config(tmp.path(), zero_ahead), disk, Clock::system())
            .await
            .unwrap();
        // Appends resume right after the last record, over the zeros.
        let put = store
            .put(message("TopicA", 1, b"after the reopen", None, None))
            .await
            .unwrap();
        assert_eq!(put.status, PutStatus::Ok);
        let read = bodies(&store, MESSAGES + 1);
        store.shutdown().await.unwrap();
        read
    });
    (stats, read)
}

#[test]
fn zeros_ride_the_first_batch_and_change_no_record() {
    let (padded, padded_bodies) = put_reopen_put(ZERO_AHEAD);
    let (plain, plain_bodies) = put_reopen_put(0);
    assert_eq!(padded_bodies, expected_bodies());
    assert_eq!(plain_bodies, expected_bodies());
    // One write and one fsync per batch either way (the store may write other files too:
    // compare the two runs rather than count).
    assert_eq!(
        (padded.writes, padded.syncs),
        (plain.writes, plain.syncs),
        "padded {padded:?}, plain {plain:?}"
    );
    // 30 small records stay within the first half of the window: one padding, about a
    // MiB of zeros, written once.
    let extra = padded.bytes_written - plain.bytes_written;
    assert!(
        (ZERO_AHEAD..ZERO_AHEAD + 2 * 4096).contains(&extra),
        "zeros written: {extra} (padded {padded:?}, plain {plain:?})"
    );
}

#[test]
fn a_crash_after_padded_batches_loses_no_acknowledged_message() {
    // Tiny segments: every segment's first batch pads to its end, and the log rolls.
    for seed in 0..8 {
        let sim = sim_disk(seed);
        let acknowledged = run_local(true, async {
            let mut config = StoreConfig::test_min("/store");
            config.flush_mode = FlushMode::Sync;
            config.sync_zero_ahead_bytes = ZERO_AHEAD;
            let store = Store::open(config, as_disk(&sim), Clock::starting_at(0))
                .await
                .unwrap();
            let body = vec![b'z'; 900];
            let mut acknowledged = 0u64;
            for _ in 0..200 {
                let put = store
                    .put(message("TopicA", 1, &body, None, None))
                    .await
                    .unwrap();
                assert_eq!(put.status, PutStatus::Ok, "seed {seed}");
                acknowledged += 1;
            }
            sim.crash_now();
            acknowledged
        });
        // Power back: unsynced writes are kept or dropped as the seed decides.
        sim.restart();
        run_local(true, async {
            let mut config = StoreConfig::test_min("/store");
            config.flush_mode = FlushMode::Sync;
            config.sync_zero_ahead_bytes = ZERO_AHEAD;
            let store = Store::open(config, as_disk(&sim), Clock::starting_at(0))
                .await
                .unwrap_or_else(|error| panic!("seed {seed}: reopen failed: {error}"));
            assert_eq!(
                store.max_offset("TopicA", 1),
                acknowledged,
                "seed {seed}: every acknowledged message is there after the crash"
            );
            let put = store
                .put(message("TopicA", 1, b"after the crash", None, None))
                .await
                .unwrap();
            assert_eq!(put.status, PutStatus::Ok, "seed {seed}");
            assert_eq!(
                store.max_offset("TopicA", 1),
                acknowledged + 1,
                "seed {seed}"
            );
        });
    }
}
