//! Putting messages and reading them back: offsets, visibility, tag filtering, timestamps,
//! segment rolls with blank records, and a clean restart that needs no scan.

use crate::common;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::store::properties::java_string_hash;
use ringmq::store::record::{decode, Decoded, Verify};
use ringmq::store::{GetStatus, OpenKind, PutStatus, Store, StoreError};

const T0: i64 = 1_700_000_000_000;

fn config(flush: FlushMode) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = flush;
    config
}

#[test]
fn put_assigns_consecutive_offsets_and_reads_return_the_stored_bytes() {
    for flush in [FlushMode::Sync, FlushMode::Async] {
        let sim = sim_disk(1);
        run_local(true, async {
            let store = Store::open(config(flush), as_disk(&sim), Clock::starting_at(T0))
                .await
                .unwrap();
            assert_eq!(store.opened(), OpenKind::Fresh);
            let mut previous_end = 0;
            for index in 0..10u64 {
                let body = format!("body-{index}");
                let result = store
                    .put(message(
                        "TopicA",
                        2,
                        body.as_bytes(),
                        Some("TagA"),
                        Some("k"),
                    ))
                    .await
                    .unwrap();
                assert_eq!(result.status, PutStatus::Ok);
                let placement = result.placement.unwrap();
                assert_eq!(placement.queue_offset, index);
                assert_eq!(
                    placement.phys_offset, previous_end,
                    "records are contiguous"
                );
                previous_end = placement.phys_offset + placement.size as u64;
            }
            assert_eq!(store.max_offset("TopicA", 2), 10);
            assert_eq!(store.min_offset("TopicA", 2), 0);
            let got = store.get_messages("TopicA", 2, 3, 4, None).unwrap();
            assert_eq!(got.status, GetStatus::Found);
            assert_eq!(got.messages.len(), 4);
            assert_eq!(got.next_begin_offset, 7);
            for (index, stored) in got.messages.iter().enumerate() {
                let Ok(Decoded::Record(view)) = decode(&stored.bytes, Verify::Full) else {
                    panic!("stored bytes do not decode");
                };
                assert_eq!(view.body, format!("body-{}", index + 3).as_bytes());
                assert_eq!(view.queue_offset as u64, stored.queue_offset);
                assert_eq!(view.phys_offset as u64, stored.phys_offset);
                assert_eq!(view.store_host.port(), 10911);
            }
            assert_eq!(
                store.get_messages("TopicA", 2, 10, 4, None).unwrap().status,
                GetStatus::OffsetOverflowOne
            );
            assert_eq!(
                store.get_messages("TopicA", 2, 11, 4, None).unwrap().status,
                GetStatus::OffsetOverflowBadly
            );
            assert_eq!(
                store.get_messages("TopicA", 9, 0, 4, None).unwrap().status,
                GetStatus::NoMessageInQueue
            );
            store.shutdown().await.unwrap();
        });
    }
}

#[test]
fn tag_filter_skips_entries_whose_tag_hash_is_not_subscribed() {
    let sim = sim_disk(2);
    run_local(true, async {
        let store = Store::open(
            config(FlushMode::Sync),
            as_disk(&sim),
            Clock::starting_at(T0),
        )
        .await
        .unwrap();
        for index in 0..12 {
            let tag = if index % 3 == 0 { "TagA" } else { "TagB" };
            store
                .put(message("T", 0, b"x", Some(tag), None))
                .await
                .unwrap();
        }
        let codes = [java_string_hash("TagA")];
        let got = store.get_messages("T", 0, 0, 32, Some(&codes)).unwrap();
        let offsets: Vec<u64> = got
            .messages
            .iter()
            .map(|message| message.queue_offset)
            .collect();
        assert_eq!(offsets, vec![0, 3, 6, 9]);
        assert_eq!(got.next_begin_offset, 12);
        let none = store
            .get_messages("T", 0, 0, 32, Some(&[java_string_hash("TagC")]))
            .unwrap();
        assert_eq!(none.status, GetStatus::NoMatchedMessage);
        assert_eq!(
            none.next_begin_offset, 12,
            "a filtered-out range is skipped, not re-read"
        );
        store.shutdown().await.unwrap();
    });
}

#[test]
fn offset_by_timestamp_finds_the_first_message_stored_at_or_after_it() {
    let sim = sim_disk(3);
    run_local(true, async {
        let store = Store::open(
            config(FlushMode::Sync),
            as_disk(&sim),
            Clock::starting_at(T0),
        )
        .await
        .unwrap();
        for _ in 0..5 {
            store.put(message("T", 1, b"x", None, None)).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(store.earliest_store_time("T", 1).unwrap(), Some(T0));
        assert_eq!(store.offset_by_timestamp("T", 1, T0).unwrap(), 0);
        assert_eq!(store.offset_by_timestamp("T", 1, T0 + 150).unwrap(), 2);
        assert_eq!(store.offset_by_timestamp("T", 1, T0 + 200).unwrap(), 2);
        assert_eq!(store.offset_by_timestamp("T", 1, T0 + 10_000).unwrap(), 5);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn segments_roll_with_a_blank_record_and_no_record_spans_two_files() {
    let sim = sim_disk(4);
    run_local(true, async {
        let config = config(FlushMode::Async);
        let segment = config.commit_log_segment_size;
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        let body = vec![7u8; 3000];
        let mut placements = Vec::new();
        for _ in 0..100 {
            placements.push(
                store
                    .put(message("Roll", 0, &body, None, None))
                    .await
                    .unwrap()
                    .placement
                    .unwrap(),
            );
        }
        assert!(
            placements.last().unwrap().phys_offset > 2 * segment,
            "the log spans several segments"
        );
        for placement in &placements {
            let start = placement.phys_offset / segment;
            let end = (placement.phys_offset + placement.size as u64 - 1) / segment;
            assert_eq!(
                start, end,
                "record at {} spans a segment boundary",
                placement.phys_offset
            );
        }
        let got = store.get_messages("Roll", 0, 0, 32, None).unwrap();
        // 3116-byte records: the 32-message cap (maxTransferCountOnMessageInDisk) binds
        // before the 256 KiB byte cap would (84 records).
        assert_eq!(got.messages.len(), 32);
        store.shutdown().await.unwrap();
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        assert_eq!(store.opened(), OpenKind::Clean);
        let mut offset = 0;
        while offset < 100 {
            let got = store.get_messages("Roll", 0, offset, 32, None).unwrap();
            for message in &got.messages {
                assert_eq!(
                    message.phys_offset,
                    placements[message.queue_offset as usize].phys_offset
                );
            }
            offset = got.next_begin_offset;
        }
        store.shutdown().await.unwrap();
    });
}

#[test]
fn clean_restart_resumes_without_a_scan_and_keeps_queue_offsets() {
    let sim = sim_disk(5);
    run_local(true, async {
        let store = Store::open(
            config(FlushMode::Sync),
            as_disk(&sim),
            Clock::starting_at(T0),
        )
        .await
        .unwrap();
        for _ in 0..70 {
            store
                .put(message("Q", 0, b"abc", None, None))
                .await
                .unwrap();
        }
        let end = store.log_positions().write;
        store.shutdown().await.unwrap();
        let store = Store::open(
            config(FlushMode::Sync),
            as_disk(&sim),
            Clock::starting_at(T0),
        )
        .await
        .unwrap();
        assert_eq!(store.opened(), OpenKind::Clean);
        let positions = store.log_positions();
        let (flushed, written, write) = (positions.flushed, positions.written, positions.write);
        assert_eq!((flushed, written, write), (end, end, end));
        assert_eq!(
            store.max_offset("Q", 0),
            70,
            "70 entries span two 64-entry queue files"
        );
        let next = store
            .put(message("Q", 0, b"abc", None, None))
            .await
            .unwrap()
            .placement
            .unwrap();
        assert_eq!(next.queue_offset, 70);
        assert_eq!(next.phys_offset, end);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn bad_messages_get_clear_errors_and_nothing_is_written() {
    let sim = sim_disk(6);
    run_local(true, async {
        let config = config(FlushMode::Sync);
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        let too_big = vec![0u8; config.max_message_size + 1];
        let cases = [
            (message("T", 0, &too_big, None, None), "maxMessageSize"),
            (message("bad/topic", 0, b"x", None, None), "character"),
            (
                message(&"t".repeat(128), 0, b"x", None, None),
                "at most 127",
            ),
            (message("T", -1, b"x", None, None), "negative"),
        ];
        for (input, expected) in cases {
            match store.put(input).await {
                Err(StoreError::MessageIllegal(text)) => assert!(text.contains(expected), "{text}"),
                other => panic!("expected MessageIllegal({expected}), got {other:?}"),
            }
        }
        let positions = store.log_positions();
        let (flushed, written, write) = (positions.flushed, positions.written, positions.write);
        assert_eq!((flushed, written, write), (0, 0, 0));
        store.shutdown().await.unwrap();
    });
}

#[test]
fn invalid_config_is_refused_naming_the_key() {
    let sim = sim_disk(7);
    run_local(true, async {
        let mut config = config(FlushMode::Sync);
        config.commit_log_segment_size = 1000;
        match Store::open(config, as_disk(&sim), Clock::starting_at(T0)).await {
            Err(StoreError::Config(text)) => {
                assert!(text.contains("mapedFileSizeCommitLog"), "{text}")
            }
            other => panic!("expected a config error, got {:?}", other.err()),
        }
    });
}

#[test]
fn physical_offsets_carry_the_shard_id_in_their_top_byte_and_name_the_segments() {
    let sim = sim_disk(8);
    run_local(true, async {
        let mut config = config(FlushMode::Sync);
        config.shard_id = 3;
        let base = 3u64 << 56;
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        let body = vec![9u8; 3000];
        let mut placements = Vec::new();
        for _ in 0..40 {
            placements.push(
                store
                    .put(message("S", 0, &body, None, None))
                    .await
                    .unwrap()
                    .placement
                    .unwrap(),
            );
        }
        for placement in &placements {
            assert_eq!(placement.phys_offset >> 56, 3, "shard id in the top byte");
        }
        assert_eq!(
            placements[0].phys_offset, base,
            "shard 3's log starts at 3 << 56"
        );
        let got = store.get_messages("S", 0, 0, 1, None).unwrap();
        let Ok(Decoded::Record(view)) = decode(&got.messages[0].bytes, Verify::Full) else {
            panic!("no record");
        };
        assert_eq!(
            view.phys_offset as u64, base,
            "the stored PHYSICALOFFSET field carries it too"
        );
        let end = store.log_positions().write;
        drop(store);
        // Segment files are named by their full start offset.
        let names =
            ringmq::io::Disk::list_dir(&sim, std::path::Path::new("/store/commitlog")).unwrap();
        assert_eq!(names[0], format!("{base:020}"));
        assert!(names.len() >= 2, "{names:?}");
        // A crash (the store was dropped without a clean stop) recovers on the same shard.
        sim.crash_now();
        sim.restart();
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        assert!(matches!(store.opened(), OpenKind::Recovered { .. }));
        assert_eq!(store.log_positions().write, end);
        assert_eq!(store.max_offset("S", 0), 40);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn put_with_hands_each_outcome_to_its_callback_once_and_refusals_at_once() {
    use std::cell::RefCell;
    use std::rc::Rc;
    for flush in [FlushMode::Sync, FlushMode::Async] {
        let sim = sim_disk(21);
        run_local(true, async {
            let store = Store::open(config(flush), as_disk(&sim), Clock::starting_at(T0))
                .await
                .unwrap();
            let outcomes = Rc::new(RefCell::new(Vec::new()));
            for index in 0..5u64 {
                let outcomes = outcomes.clone();
                let body = format!("body-{index}");
                store.put_with(
                    message("TopicA", 1, body.as_bytes(), Some("TagA"), None),
                    move |outcome| outcomes.borrow_mut().push((index, outcome)),
                );
            }
            assert!(
                outcomes.borrow().is_empty(),
                "nothing is answered before the appender has run"
            );
            for _ in 0..1000 {
                if outcomes.borrow().len() == 5 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let got = outcomes.borrow_mut().drain(..).collect::<Vec<_>>();
            assert_eq!(got.len(), 5, "{flush:?}: every put was answered");
            for (index, outcome) in got {
                let result = outcome.unwrap();
                assert_eq!(result.status, PutStatus::Ok);
                assert_eq!(result.placement.unwrap().queue_offset, index);
            }
            assert_eq!(store.max_offset("TopicA", 1), 5, "visible once answered");

            // A refused put is answered before put_with returns.
            let refused = outcomes.clone();
            store.put_with(message("TopicA", -1, b"x", None, None), move |outcome| {
                refused.borrow_mut().push((99, outcome))
            });
            let got = outcomes.borrow_mut().drain(..).collect::<Vec<_>>();
            assert_eq!(got.len(), 1);
            assert!(
                matches!(&got[0].1, Err(StoreError::MessageIllegal(why)) if why.contains("negative")),
                "{:?}",
                got[0].1
            );
            assert_eq!(store.stats().put_errors, 1, "the refusal is counted");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert!(outcomes.borrow().is_empty(), "each callback runs once");
            store.shutdown().await.unwrap();
        });
    }
}

#[test]
fn put_all_queues_a_group_into_one_write_and_stops_at_the_first_refusal() {
    for flush in [FlushMode::Sync, FlushMode::Async] {
        let sim = sim_disk(22);
        run_local(true, async {
            let store = Store::open(config(flush), as_disk(&sim), Clock::starting_at(T0))
                .await
                .unwrap();
            let before = store.stats();
            let bodies: Vec<String> = (0..5).map(|i| format!("batch-{i}")).collect();
            let outcomes = store
                .put_all(
                    bodies
                        .iter()
                        .map(|body| message("TopicB", 0, body.as_bytes(), None, None)),
                )
                .await;
            let offsets: Vec<u64> = outcomes
                .iter()
                .map(|outcome| outcome.as_ref().unwrap().placement.unwrap().queue_offset)
                .collect();
            assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
            let after = store.stats();
            assert_eq!(after.puts - before.puts, 5);
            assert_eq!(
                after.batches - before.batches,
                1,
                "{flush:?}: the group shares one appender turn"
            );

            let outcomes = store
                .put_all([
                    message("TopicB", 0, b"ok-1", None, None),
                    message("TopicB", 0, b"ok-2", None, None),
                    message("TopicB", -1, b"refused", None, None),
                    message("TopicB", 0, b"never", None, None),
                ])
                .await;
            assert_eq!(outcomes.len(), 3, "nothing after the refusal is attempted");
            assert!(outcomes[..2].iter().all(|outcome| outcome.is_ok()));
            assert!(matches!(&outcomes[2], Err(StoreError::MessageIllegal(_))));
            assert_eq!(
                store.max_offset("TopicB", 0),
                7,
                "the two before it are stored"
            );
            store.shutdown().await.unwrap();
        });
    }
}

#[test]
fn schedule_topic_entries_carry_the_delivery_time_live_and_after_a_crash() {
    use ringmq::store::topic::SCHEDULE_TOPIC;
    let sim = sim_disk(12);
    run_local(true, async {
        let mut config = config(FlushMode::Sync);
        config.schedule_delays_ms = vec![1000, 5000];
        let store = Store::open(config.clone(), as_disk(&sim), Clock::starting_at(T0))
            .await
            .unwrap();
        let mut expected = Vec::new();
        for (queue, delay) in [(0, 1000), (1, 5000), (1, 5000)] {
            let placement = store
                .put(message(SCHEDULE_TOPIC, queue, b"wait", Some("TagA"), None))
                .await
                .unwrap()
                .placement
                .unwrap();
            expected.push((
                queue,
                placement.queue_offset,
                placement.store_timestamp + delay,
            ));
        }
        // Another topic keeps the tag hash.
        store
            .put(message("Plain", 0, b"now", Some("TagA"), None))
            .await
            .unwrap();
        let codes = |store: &Store| {
            expected
                .iter()
                .map(|&(queue, offset, _)| {
                    store
                        .queue_entry(SCHEDULE_TOPIC, queue, offset)
                        .unwrap()
                        .unwrap()
                        .tags_code
                })
                .collect::<Vec<_>>()
        };
        let due: Vec<i64> = expected.iter().map(|&(_, _, due)| due).collect();
        assert_eq!(codes(&store), due);
        let plain = store.queue_entry("Plain", 0, 0).unwrap().unwrap();
        assert_eq!(plain.tags_code, java_string_hash("TagA") as i64);
        assert_eq!(store.queue_entry(SCHEDULE_TOPIC, 0, 1).unwrap(), None);
        drop(store);
        // Recovery rebuilds the entries past the checkpoint from the records: the same
        // delivery times.
        sim.crash_now();
        sim.restart();
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(T0 + 60_000))
            .await
            .unwrap();
        assert!(matches!(store.opened(), OpenKind::Recovered { .. }));
        assert_eq!(codes(&store), due);
        store.shutdown().await.unwrap();
    });
}
