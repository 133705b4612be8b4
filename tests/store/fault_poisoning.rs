//! The failure policy (D11): a failed CommitLog write or fsync poisons the
//! store, which then refuses every write naming the cause; a full disk is a clear error
//! that poisons nothing. In every case, what was acknowledged before stays readable.

use crate::common;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::store::{GetStatus, OpenKind, Store, StoreError};

fn config() -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = FlushMode::Sync;
    config
}

/// Puts `count` messages to T/0 and returns how many were acknowledged.
async fn put_many(store: &Store, count: usize) -> usize {
    let mut acked = 0;
    for index in 0..count {
        if store
            .put(message("T", 0, format!("m{index}").as_bytes(), None, None))
            .await
            .is_ok()
        {
            acked += 1;
        }
    }
    acked
}

fn assert_poisoned_with(error: &StoreError, cause: &str) {
    match error {
        StoreError::Poisoned(text) => assert!(
            text.contains(cause),
            "cause '{text}' should mention '{cause}'"
        ),
        other => panic!("expected Poisoned, got {other:?}"),
    }
}

#[test]
fn a_failed_fsync_poisons_the_store_and_every_later_put_names_the_cause() {
    let sim = sim_disk(11);
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(put_many(&store, 5).await, 5);
        sim.fail_next_sync(libc::EIO);
        let error = store
            .put(message("T", 0, b"doomed", None, None))
            .await
            .unwrap_err();
        assert_poisoned_with(&error, "fdatasync");
        let later = store
            .put(message("T", 0, b"later", None, None))
            .await
            .unwrap_err();
        assert_poisoned_with(&later, "fdatasync");
        assert!(store.poison_cause().unwrap().contains("Input/output error"));
        assert_eq!(
            store.max_offset("T", 0),
            5,
            "the failed batch never became visible"
        );
        assert!(
            store.shutdown().await.is_err(),
            "a poisoned store does not claim a clean stop"
        );
    });
    // The process dies; what was acknowledged is still there after recovery.
    sim.crash_now();
    sim.restart();
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert!(matches!(store.opened(), OpenKind::Recovered { .. }));
        let got = store.get_messages("T", 0, 0, 32, None).unwrap();
        assert!(
            got.messages.len() >= 5,
            "acknowledged messages lost: {} left",
            got.messages.len()
        );
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_failed_write_poisons_the_store() {
    let sim = sim_disk(12);
    run_local(true, async {
        let store = Store::open(config(), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(put_many(&store, 3).await, 3);
        sim.fail_next_write(libc::EIO);
        let error = store
            .put(message("T", 0, b"doomed", None, None))
            .await
            .unwrap_err();
        assert_poisoned_with(&error, "write of");
        assert_poisoned_with(
            &store
                .put(message("T", 0, b"x", None, None))
                .await
                .unwrap_err(),
            "write of",
        );
        let got = store.get_messages("T", 0, 0, 32, None).unwrap();
        assert_eq!(
            got.messages.len(),
            3,
            "reads still serve what was acknowledged"
        );
    });
}

#[test]
fn a_full_disk_refuses_puts_clearly_without_poisoning_and_recovers_when_space_returns() {
    let sim = sim_disk(13);
    run_local(true, async {
        let config = config();
        let segment = config.commit_log_segment_size;
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(put_many(&store, 1).await, 1);
        // Room for the first segment, queue files and the checkpoint, not a second segment.
        sim.set_capacity(Some(segment + 16 * 1024));
        let body = vec![1u8; 2000];
        let mut acked = 1u64;
        let refusal = loop {
            match store.put(message("T", 0, &body, None, None)).await {
                Ok(_) => acked += 1,
                Err(error) => break error,
            }
            assert!(acked < 1000, "the disk never filled up");
        };
        match &refusal {
            StoreError::DiskFull(text) => assert!(text.contains("No space left"), "{text}"),
            other => panic!("expected DiskFull, got {other:?}"),
        }
        assert!(
            store.poison_cause().is_none(),
            "a full disk must not poison the store"
        );
        assert_eq!(store.max_offset("T", 0), acked);
        let got = store.get_messages("T", 0, 0, 1, None).unwrap();
        assert_eq!(got.status, GetStatus::Found);
        sim.set_capacity(None);
        let next = store.put(message("T", 0, &body, None, None)).await.unwrap();
        assert_eq!(
            next.placement.unwrap().queue_offset,
            acked,
            "no offset was burned by the refusal"
        );
        assert!(
            next.placement.unwrap().phys_offset >= segment,
            "it went to the new segment"
        );
        store.shutdown().await.unwrap();
    });
}

/// A store with a 200 ms flush timeout holding `stored` messages, whose fsyncs from now
/// on take 2 s.
async fn open_with_a_stalled_fsync(sim: &ringmq::io::sim::SimDisk, stored: usize) -> Store {
    let mut config = config();
    config.sync_flush_timeout = std::time::Duration::from_millis(200);
    let store = Store::open(config, as_disk(sim), Clock::starting_at(0))
        .await
        .unwrap();
    assert_eq!(put_many(&store, stored).await, stored);
    sim.set_sync_latency(Some(std::time::Duration::from_secs(2)));
    store
}

#[test]
fn a_flush_slower_than_the_timeout_answers_flush_disk_timeout_and_the_message_still_lands() {
    let sim = sim_disk(14);
    run_local(true, async {
        let store = open_with_a_stalled_fsync(&sim, 2).await;
        let started = tokio::time::Instant::now();
        let result = store
            .put(message("T", 0, b"slow", None, None))
            .await
            .unwrap();
        let waited = started.elapsed();
        assert_eq!(result.status, ringmq::store::PutStatus::FlushDiskTimeout);
        assert!(
            waited >= std::time::Duration::from_millis(200)
                && waited < std::time::Duration::from_millis(400),
            "answered after {waited:?}; the timeout is 200 ms"
        );
        let placement = result
            .placement
            .expect("the message was encoded before the timeout");
        assert_eq!(placement.queue_offset, 2);
        assert_eq!(
            store.max_offset("T", 0),
            2,
            "not visible before its fsync completes (D7)"
        );
        sim.set_sync_latency(None);
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        assert_eq!(
            store.max_offset("T", 0),
            3,
            "visible once the slow fsync completed"
        );
        let got = store.get_messages("T", 0, 2, 1, None).unwrap();
        assert_eq!(got.messages[0].phys_offset, placement.phys_offset);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_callback_put_hears_flush_disk_timeout_once_even_when_the_fsync_completes_later() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let sim = sim_disk(16);
    run_local(true, async {
        let store = open_with_a_stalled_fsync(&sim, 1).await;
        let outcomes = Rc::new(RefCell::new(Vec::new()));
        let seen = outcomes.clone();
        store.put_with(message("T", 0, b"slow", None, None), move |outcome| {
            seen.borrow_mut().push(outcome)
        });
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        {
            let got = outcomes.borrow();
            assert_eq!(got.len(), 1, "answered by the watchdog");
            let result = got[0].as_ref().unwrap();
            assert_eq!(result.status, ringmq::store::PutStatus::FlushDiskTimeout);
            assert_eq!(result.placement.unwrap().queue_offset, 1);
        }
        sim.set_sync_latency(None);
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        assert_eq!(store.max_offset("T", 0), 2, "the message landed");
        assert_eq!(outcomes.borrow().len(), 1, "the later answer is ignored");
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_failed_background_fsync_under_async_flush_poisons_the_store_too() {
    let sim = sim_disk(15);
    run_local(true, async {
        let mut config = config();
        config.flush_mode = FlushMode::Async;
        let store = Store::open(config, as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        assert_eq!(
            put_many(&store, 5).await,
            5,
            "acknowledged from the page cache"
        );
        sim.fail_next_sync(libc::EIO);
        // More than flushCommitLogLeastPages (4) pages dirty: the appender wakes the flusher
        // at once, ahead of the checkpointer's own (queue) fsync a second later.
        let body = vec![3u8; 2048];
        let mut acked = 5;
        for _ in 0..10 {
            if store.put(message("T", 0, &body, None, None)).await.is_ok() {
                acked += 1;
            }
        }
        assert!(
            acked >= 12,
            "the first pages were acknowledged before the flush ({acked})"
        );
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while store.poison_cause().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the failed background fsync was never noticed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            store.poison_cause().unwrap().contains("fdatasync"),
            "{:?}",
            store.poison_cause()
        );
        let refused = store
            .put(message("T", 0, b"after", None, None))
            .await
            .unwrap_err();
        assert_poisoned_with(&refused, "fdatasync");
        let readable = store
            .get_messages("T", 0, 0, 32, None)
            .unwrap()
            .messages
            .len();
        assert_eq!(readable, acked, "everything acknowledged stays readable");
    });
}
