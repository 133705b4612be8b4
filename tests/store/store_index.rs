//! The store's index on its own: lookups keep the newest `max` records across rolled
//! files and honour the time window (time paused and advanced, not waited for); a store
//! reopened with another index geometry is refused naming both keys, before anything is
//! touched; with `messageIndexEnable` off nothing is indexed and lookups find nothing.

use crate::common;

use std::time::Duration;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::StoreConfig;
use ringmq::store::index_file::Geometry;
use ringmq::store::{Store, StoreError};

const START_MS: i64 = 1_800_000_000_000;

fn config() -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    // Four entries per file (entry 0 unused): three messages with one key each fill one.
    config.index_geometry = Geometry {
        slots: 4,
        entries: 4,
    };
    config
}

#[test]
fn lookups_keep_the_newest_records_across_files_within_the_time_window() {
    let sim = sim_disk(7);
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(START_MS))
            .await
            .unwrap();
        let mut placed = Vec::new();
        for i in 0..10 {
            let input = message("Keyed", 0, format!("m{i}").as_bytes(), None, Some("same"));
            placed.push(store.put(input).await.unwrap().placement.unwrap());
            // Ten seconds apart, so the window below can cut between them.
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        let phys = |i: usize| placed[i].phys_offset;
        let everything = store.lookup_keys("Keyed", "same", 64, 0, i64::MAX).unwrap();
        let found: Vec<u64> = everything.records.iter().map(|r| r.phys_offset).collect();
        assert_eq!(
            found,
            (0..10).map(phys).collect::<Vec<_>>(),
            "all, in log order"
        );
        assert_eq!(everything.body.chunks().len(), 10, "one chunk per record");

        let newest = store.lookup_keys("Keyed", "same", 4, 0, i64::MAX).unwrap();
        let found: Vec<u64> = newest.records.iter().map(|r| r.phys_offset).collect();
        assert_eq!(
            found,
            (6..10).map(phys).collect::<Vec<_>>(),
            "the newest four"
        );

        // Messages 3..=5 were stored at START + 30 s .. START + 50 s.
        let window = store
            .lookup_keys("Keyed", "same", 64, START_MS + 30_000, START_MS + 50_000)
            .unwrap();
        let found: Vec<u64> = window.records.iter().map(|r| r.phys_offset).collect();
        assert_eq!(found, (3..=5).map(phys).collect::<Vec<_>>(), "the window");

        let other_topic = store.lookup_keys("Other", "same", 64, 0, i64::MAX).unwrap();
        assert!(other_topic.records.is_empty(), "keys are per topic");
        assert!(store.stats().index_entries >= 10, "{:?}", store.stats());
        store.shutdown().await.unwrap();

        // A clean reopen finds the same, from files written out whole.
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(START_MS))
            .await
            .unwrap();
        let again = store.lookup_keys("Keyed", "same", 64, 0, i64::MAX).unwrap();
        assert_eq!(again.records, everything.records);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_store_reopened_with_another_index_geometry_is_refused_naming_the_keys() {
    let sim = sim_disk(8);
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(START_MS))
            .await
            .unwrap();
        store
            .put(message("Keyed", 0, b"x", None, Some("k")))
            .await
            .unwrap();
        store.shutdown().await.unwrap();
        let mut other = config();
        other.index_geometry.slots = 8;
        match Store::open(other, as_disk(&sim), Clock::starting_at(START_MS)).await {
            Err(StoreError::Config(why)) => {
                assert!(
                    why.contains("maxHashSlotNum") && why.contains("maxIndexNum"),
                    "{why}"
                );
            }
            Err(other) => panic!("refused otherwise: {other}"),
            Ok(_) => panic!("a store opened with another index geometry"),
        }
        // Nothing was touched: the original geometry still opens and finds the message.
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(START_MS))
            .await
            .unwrap();
        let found = store.lookup_keys("Keyed", "k", 64, 0, i64::MAX).unwrap();
        assert_eq!(found.records.len(), 1);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn with_the_index_off_nothing_is_indexed_and_lookups_find_nothing() {
    let sim = sim_disk(9);
    run_local(true, async {
        let mut config = config();
        config.message_index_enable = false;
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(START_MS))
            .await
            .unwrap();
        store
            .put(message("Keyed", 0, b"x", None, Some("k")))
            .await
            .unwrap();
        let found = store.lookup_keys("Keyed", "k", 64, 0, i64::MAX).unwrap();
        assert!(found.records.is_empty());
        assert_eq!(store.stats().index_entries, 0);
        store.shutdown().await.unwrap();
    });
}
