//! The stages with a second acknowledgement condition: a store opened as SYNC_MASTER,
//! whose fake replica (the test, D14) confirms through [`Store::confirm_replicated`] what
//! SYNC_FLUSH alone would release; and the reasons a put is not replicated.

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;

use super::*;
use crate::clock::Clock;
use crate::config::{BrokerRole, StoreConfig};
use crate::io::sim::{SimConfig, SimDisk};
use crate::store::record::RecordInput;
use crate::store::{PutResult, PutStatus, Store};

type Heard = Rc<RefCell<Vec<Result<PutResult, StoreError>>>>;

fn run<F: Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

fn input(body: &[u8]) -> RecordInput {
    RecordInput {
        topic: "Held".to_string(),
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
        store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: record::body_crc(body),
        body: Bytes::copy_from_slice(body),
        properties: String::new(),
    }
}

/// A SYNC_MASTER store flushed `flush_mode`, with a replica attached or not.
async fn sync_master(sim: &SimDisk, flush_mode: FlushMode, attached: bool) -> Store {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = flush_mode;
    config.broker_role = BrokerRole::SyncMaster;
    let store = Store::open(config, Rc::new(sim.clone()), Clock::starting_at(0))
        .await
        .unwrap();
    store.set_replica_attached(attached);
    store
}

/// A SYNC_FLUSH SYNC_MASTER store with its replica attached.
async fn store_held_by_a_replica(sim: &SimDisk) -> Store {
    sync_master(sim, FlushMode::Sync, true).await
}

fn put(store: &Store, body: &[u8], heard: &Heard) {
    let heard = heard.clone();
    store.put_with(input(body), move |outcome| heard.borrow_mut().push(outcome));
}

/// Lets the store's tasks run until the log is synced up to `end`.
async fn until_flushed(store: &Store, end: u64) {
    for _ in 0..10_000 {
        if store.log_positions().flushed >= end {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "the log was not flushed to {end}: {:?}",
        store.log_positions()
    );
}

fn confirm(store: &Store, position: u64) {
    store.confirm_replicated(position);
}

/// Lets the store's tasks run until `heard` holds `count` outcomes.
async fn until_heard(heard: &Heard, count: usize) {
    for _ in 0..10_000 {
        if heard.borrow().len() >= count {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("heard {} outcomes, not {count}", heard.borrow().len());
}

fn statuses(heard: &Heard) -> Vec<PutStatus> {
    heard
        .borrow()
        .iter()
        .map(|outcome| outcome.as_ref().expect("stored").status)
        .collect()
}

#[test]
fn a_replica_condition_holds_visibility_and_answers_until_it_advances() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(3));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        put(&store, b"first", &heard);
        until_flushed(&store, 1).await;
        let first_end = store.log_positions().flushed;
        put(&store, b"second", &heard);
        until_flushed(&store, first_end + 1).await;
        let second_end = store.log_positions().flushed;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Flushed, so SYNC_FLUSH alone would have released both; the replica holds them.
        assert!(heard.borrow().is_empty());
        assert_eq!(store.max_offset("Held", 0), 0);
        assert_eq!(store.shared.waiters.borrow().len(), 2);
        assert_eq!(store.stats().log_syncs, 2, "one fsync per batch, as before");

        confirm(&store, first_end - 1);
        assert!(heard.borrow().is_empty(), "released short of the first end");
        confirm(&store, first_end);
        assert_eq!(store.max_offset("Held", 0), 1);
        assert_eq!(heard.borrow().len(), 1);
        confirm(&store, second_end);
        assert_eq!(store.max_offset("Held", 0), 2);
        let offsets: Vec<_> = heard
            .borrow()
            .iter()
            .map(|outcome| {
                let result = outcome.as_ref().unwrap();
                assert_eq!(result.status, PutStatus::Ok);
                result.placement.unwrap().queue_offset
            })
            .collect();
        assert_eq!(offsets, [0, 1]);
        assert_eq!(store.shared.dispatched_pos.get(), second_end);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_batch_is_visible_before_any_of_its_puts_is_answered() {
    for flush_mode in [FlushMode::Sync, FlushMode::Async] {
        run(async {
            let mut config = StoreConfig::test_min("/store");
            config.flush_mode = flush_mode;
            let sim = SimDisk::new(SimConfig::with_seed(6));
            let store = Store::open(config, Rc::new(sim), Clock::starting_at(0))
                .await
                .unwrap();
            let seen = Rc::new(RefCell::new(Vec::new()));
            for body in [&b"a"[..], b"b", b"c"] {
                let (seen, reader) = (seen.clone(), store.clone());
                store.put_with(input(body), move |outcome| {
                    assert!(outcome.is_ok(), "{outcome:?}");
                    seen.borrow_mut().push(reader.max_offset("Held", 0));
                });
            }
            for _ in 0..10_000 {
                if seen.borrow().len() == 3 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(*seen.borrow(), [3, 3, 3], "{flush_mode:?}");
            assert_eq!(store.stats().batches, 1);
            store.shutdown().await.unwrap();
        });
    }
}

#[test]
fn a_put_held_by_the_replica_times_out_with_flush_slave_timeout_and_is_visible_once_released() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(4));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        // Paused time: the sleeps let the watchdog's ticks pass. Queued late in a
        // watchdog tick (a tenth of slaveTimeout), the put still waits its whole
        // slaveTimeout (the watchdog once answered up to a tick early)...
        let timeout = store.config().slave_timeout;
        tokio::time::sleep(timeout / 10 - std::time::Duration::from_millis(1)).await;
        put(&store, b"late", &heard);
        until_flushed(&store, 1).await;
        let end = store.log_positions().flushed;
        tokio::time::sleep(timeout - std::time::Duration::from_millis(1)).await;
        assert!(heard.borrow().is_empty(), "timed out before slaveTimeout");
        // ...and within a tenth past it.
        tokio::time::sleep(timeout / 10 + std::time::Duration::from_millis(2)).await;
        // Flushed, so what it missed is the replica.
        assert_eq!(
            heard.borrow()[0].as_ref().unwrap().status,
            PutStatus::FlushSlaveTimeout
        );
        assert_eq!(store.max_offset("Held", 0), 0);
        confirm(&store, end);
        assert_eq!(store.max_offset("Held", 0), 1);
        assert_eq!(
            heard.borrow().len(),
            1,
            "a timed-out put hears nothing more"
        );
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_failed_sync_answers_every_held_batch_with_the_poison() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(5));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        put(&store, b"held", &heard);
        until_flushed(&store, 1).await;
        sim.fail_next_sync(libc::EIO);
        put(&store, b"failing", &heard);
        for _ in 0..10_000 {
            if heard.borrow().len() == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(heard.borrow().len(), 2, "both batches are answered");
        for outcome in heard.borrow().iter() {
            match outcome {
                Err(StoreError::Poisoned(cause)) => assert!(cause.contains("fdatasync")),
                other => panic!("expected the poison, got {other:?}"),
            }
        }
        assert!(store.shared.waiters.borrow().is_empty());
        assert_eq!(store.max_offset("Held", 0), 0);
        assert!(store.shutdown().await.is_err());
    });
}

/// Lets the store's tasks run until the appender is idle with nothing queued.
async fn until_idle(store: &Store) {
    for _ in 0..10_000 {
        if store.shared.pending.borrow().is_empty() && !store.shared.appender_busy.get() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the appender did not go idle");
}

#[test]
fn a_sync_master_put_waits_for_the_watermark_under_either_flush_mode() {
    for flush_mode in [FlushMode::Sync, FlushMode::Async] {
        run(async {
            let sim = SimDisk::new(SimConfig::with_seed(7));
            let store = sync_master(&sim, flush_mode, true).await;
            let heard: Heard = Rc::default();
            put(&store, b"one", &heard);
            put(&store, b"two", &heard);
            until_idle(&store).await;
            let written = store.log_positions().written;
            assert!(written > 0, "{flush_mode:?}");
            assert!(
                heard.borrow().is_empty(),
                "{flush_mode:?}: answered before the replica"
            );
            assert_eq!(store.max_offset("Held", 0), 0, "{flush_mode:?}");
            confirm(&store, written);
            until_heard(&heard, 2).await;
            assert_eq!(statuses(&heard), [PutStatus::Ok, PutStatus::Ok]);
            assert_eq!(store.max_offset("Held", 0), 2);
            assert_eq!(store.log_positions().replicated, written);
            store.shutdown().await.unwrap();
        });
    }
}

#[test]
fn a_sync_master_put_without_a_replica_answers_slave_not_available_once_flushed() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(8));
        let store = sync_master(&sim, FlushMode::Sync, false).await;
        let heard: Heard = Rc::default();
        put(&store, b"alone", &heard);
        until_heard(&heard, 1).await;
        assert_eq!(statuses(&heard), [PutStatus::SlaveNotAvailable]);
        // Stored, flushed and visible: only the replica is missing.
        let placement = heard.borrow()[0].as_ref().unwrap().placement.unwrap();
        let end = placement.end();
        assert!(store.log_positions().flushed >= end);
        assert_eq!(store.max_offset("Held", 0), 1);
        assert_eq!(store.log_positions().replicated, 0);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_sync_master_put_whose_flush_stalls_times_out_with_flush_disk_timeout() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(9));
        let store = store_held_by_a_replica(&sim).await;
        let config = store.config();
        let timeout = config.sync_flush_timeout.max(config.slave_timeout);
        sim.set_sync_latency(Some(timeout * 4));
        let heard: Heard = Rc::default();
        put(&store, b"slow disk", &heard);
        tokio::time::sleep(timeout * 2).await;
        // Neither flushed nor replicated: the flush is what it missed first.
        assert_eq!(statuses(&heard), [PutStatus::FlushDiskTimeout]);
        assert_eq!(store.log_positions().flushed, 0);
        sim.set_sync_latency(None);
        tokio::time::sleep(timeout * 4).await;
        store.set_replica_attached(false);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_replica_going_away_answers_the_puts_it_held_slave_not_available() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(10));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        put(&store, b"held", &heard);
        until_flushed(&store, 1).await;
        until_idle(&store).await;
        assert!(heard.borrow().is_empty());
        store.set_replica_attached(false);
        assert_eq!(statuses(&heard), [PutStatus::SlaveNotAvailable]);
        assert_eq!(store.max_offset("Held", 0), 1);
        // Later puts do not wait for a replica either, until one is attached again.
        put(&store, b"next", &heard);
        until_heard(&heard, 2).await;
        assert_eq!(statuses(&heard)[1], PutStatus::SlaveNotAvailable);
        store.shutdown().await.unwrap();
    });
}

/// Controller mode: a batch written while the replica gate was up is held for the
/// replica; once the gate is lowered (the set shrank to the master) it is answered SEND_OK
/// on its flush at the lease's next recheck, not after `slaveTimeout`. With the gate still up
/// the same wait leaves it held.
#[test]
fn a_lowered_replica_gate_releases_the_puts_held_for_the_replica_with_send_ok() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(12));
        let store = store_held_by_a_replica(&sim).await;
        let gate = crate::store::ReplicaGate::new(true);
        store.set_replica_gate(gate.clone());
        let lease = crate::store::WriteLease::new();
        lease.renew_until(tokio::time::Instant::now() + std::time::Duration::from_secs(3600));
        store.set_write_lease(lease);
        let heard: Heard = Rc::default();
        put(&store, b"held for the replica", &heard);
        until_flushed(&store, 1).await;
        until_idle(&store).await;
        tokio::time::sleep(crate::store::write_lease::RECHECK * 5).await;
        assert!(heard.borrow().is_empty(), "answered while the gate was up");

        gate.set_needed(false);
        tokio::time::sleep(crate::store::write_lease::RECHECK * 2).await;
        assert_eq!(statuses(&heard), [PutStatus::Ok]);
        assert_eq!(store.max_offset("Held", 0), 1);
        // Later puts need no replica while the gate is down.
        put(&store, b"after", &heard);
        until_heard(&heard, 2).await;
        assert_eq!(statuses(&heard), [PutStatus::Ok, PutStatus::Ok]);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn a_stop_releases_the_puts_a_replica_held_with_flush_slave_timeout() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(11));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        put(&store, b"held at the stop", &heard);
        until_flushed(&store, 1).await;
        let end = store.log_positions().flushed;
        store.shutdown().await.unwrap();
        assert_eq!(statuses(&heard), [PutStatus::FlushSlaveTimeout]);
        // Visible before the clean checkpoint, which a restart resumes from.
        let store = store_held_by_a_replica(&sim).await;
        assert_eq!(store.opened(), crate::store::OpenKind::Clean);
        assert_eq!(store.max_offset("Held", 0), 1);
        assert_eq!(store.log_positions().write, end);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn an_async_master_keeps_the_watermark_but_does_not_wait_for_it() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(12));
        let mut config = StoreConfig::test_min("/store");
        config.flush_mode = FlushMode::Sync;
        let store = Store::open(config, Rc::new(sim), Clock::starting_at(0))
            .await
            .unwrap();
        let heard: Heard = Rc::default();
        put(&store, b"async master", &heard);
        until_heard(&heard, 1).await;
        assert_eq!(statuses(&heard), [PutStatus::Ok]);
        let written = store.log_positions().written;
        store.confirm_replicated(written);
        assert_eq!(store.log_positions().replicated, written);
        store.shutdown().await.unwrap();
    });
}

#[test]
#[should_panic(expected = "may only move forward: 200 -> 100")]
fn the_watermark_moving_back_is_a_bug() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(13));
        let store = store_held_by_a_replica(&sim).await;
        let heard: Heard = Rc::default();
        put(&store, &[7; 300], &heard);
        until_flushed(&store, 300).await;
        store.confirm_replicated(200);
        store.confirm_replicated(100);
    });
}

#[test]
#[should_panic(expected = "the CommitLog is written only up to 0")]
fn a_watermark_past_the_written_end_is_a_bug() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(14));
        let store = store_held_by_a_replica(&sim).await;
        store.confirm_replicated(1);
    });
}

#[test]
fn the_watchdog_ticks_by_the_shorter_timeout_that_applies() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(15));
        let mut config = StoreConfig::test_min("/store");
        config.sync_flush_timeout = std::time::Duration::from_millis(5000);
        config.slave_timeout = std::time::Duration::from_millis(3000);
        let async_master = Store::open(config.clone(), Rc::new(sim.clone()), Clock::starting_at(0))
            .await
            .unwrap();
        // As before the replica's condition: a tenth of syncFlushTimeout, 10 ticks.
        let ticks = crate::store::flush::watchdog_ticks(&async_master.shared);
        assert_eq!(ticks, (std::time::Duration::from_millis(500), 10, 6));
        async_master.shutdown().await.unwrap();
        config.broker_role = BrokerRole::SyncMaster;
        let sync_master = Store::open(config, Rc::new(sim), Clock::starting_at(0))
            .await
            .unwrap();
        let ticks = crate::store::flush::watchdog_ticks(&sync_master.shared);
        assert_eq!(ticks, (std::time::Duration::from_millis(300), 17, 10));
        sync_master.shutdown().await.unwrap();
    });
}

/// Group commit (`gather.rs`) expects back the producers that were answered, not those of
/// the batch just synced: a SYNC_MASTER batch synced but held for its replica answers
/// nobody, so the next batch must not wait for anyone; the replica's confirmation, which
/// answers them, is what makes the appender expect them.
#[test]
fn group_commit_expects_the_producers_a_replica_confirmation_answered() {
    run(async {
        let sim = SimDisk::new(SimConfig::with_seed(5));
        let store = store_held_by_a_replica(&sim).await;
        // As if fsyncs took 2 ms: a wait window of 1 ms (zero would never expect anyone).
        store
            .shared
            .gather
            .synced(std::time::Duration::from_millis(2));
        let heard: Heard = Rc::default();
        put(&store, b"held", &heard);
        until_flushed(&store, 1).await;
        let end = store.log_positions().flushed;
        until_idle(&store).await;
        assert!(heard.borrow().is_empty(), "held for the replica");
        assert!(
            !store.shared.gather.expecting(),
            "a synced batch held for its replica answered nobody, so nobody is expected"
        );
        confirm(&store, end);
        assert_eq!(statuses(&heard), [PutStatus::Ok]);
        assert!(
            store.shared.gather.expecting(),
            "the producer the confirmation answered is expected back"
        );
        store.shutdown().await.unwrap();
    });
}
