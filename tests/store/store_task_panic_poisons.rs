//! The failure policy for panics (D11): a panic in any store task (appender,
//! flusher, checkpointer, flush watchdog, segment preallocator) or in a shard task run
//! under the store's watch poisons the store with the panic message and counts it. Every
//! put that was waiting hears that error at once (not FLUSH_DISK_TIMEOUT after the flush
//! timeout), every later put is refused with it, and shutdown does not wait for the dead
//! task.

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::store::{PutResult, Store, StoreError, StoreTask};
use tokio::time::Instant;

const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

fn config(flush_mode: FlushMode) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = flush_mode;
    config.sync_flush_timeout = FLUSH_TIMEOUT;
    config
}

/// A store over `sim` with [`config`], its clock at 0.
async fn open(sim: &SimDisk, flush_mode: FlushMode) -> Store {
    Store::open(config(flush_mode), as_disk(sim), Clock::starting_at(0))
        .await
        .unwrap()
}

/// `outcome` is the poison, and its text says `cause`.
fn assert_poisoned_with<T: std::fmt::Debug>(outcome: &Result<T, StoreError>, cause: &str) {
    match outcome {
        Err(StoreError::Poisoned(text)) => {
            assert!(text.contains(cause), "'{text}' should say '{cause}'")
        }
        other => panic!("expected the store poisoned ('{cause}'), got {other:?}"),
    }
}

fn assert_poisoned_by(outcome: &Result<PutResult, StoreError>, task: &str) {
    let cause = format!("the {task} task panicked: injected panic in the {task} task");
    assert_poisoned_with(outcome, &cause);
}

/// Shuts down within a bound (a dead appender must not make it wait) and expects the
/// poison back.
async fn shut_down_poisoned(store: &Store) {
    let stopped = tokio::time::timeout(Duration::from_secs(60), store.shutdown())
        .await
        .expect("shutdown waited for a dead task");
    assert!(
        matches!(stopped, Err(StoreError::Poisoned(_))),
        "a poisoned store does not claim a clean stop: {stopped:?}"
    );
}

#[test]
fn a_panic_in_the_appender_answers_every_waiting_put_with_the_panic_and_refuses_later_ones() {
    let sim = sim_disk(51);
    run_local(true, async {
        let store = open(&sim, FlushMode::Sync).await;
        store
            .put(message("T", 0, b"before", None, None))
            .await
            .unwrap();
        store.inject_task_panic(StoreTask::Appender);
        let heard = Rc::new(RefCell::new(Vec::new()));
        let sink = heard.clone();
        store.put_with(message("T", 0, b"callback", None, None), move |outcome| {
            sink.borrow_mut().push(outcome)
        });
        let started = Instant::now();
        let outcomes = store
            .put_all(
                (0..3).map(|index| message("T", 0, format!("m{index}").as_bytes(), None, None)),
            )
            .await;
        let waited = started.elapsed();
        assert_eq!(outcomes.len(), 3);
        for outcome in &outcomes {
            assert_poisoned_by(outcome, "appender");
        }
        assert_eq!(
            heard.borrow().len(),
            1,
            "the callback put was answered once"
        );
        assert_poisoned_by(&heard.borrow()[0], "appender");
        assert!(
            waited < FLUSH_TIMEOUT,
            "answered after {waited:?}, not at once (the flush timeout is {FLUSH_TIMEOUT:?})"
        );
        assert_poisoned_by(
            &store.put(message("T", 0, b"later", None, None)).await,
            "appender",
        );
        assert_eq!(store.stats().task_panics, 1);
        assert_eq!(store.max_offset("T", 0), 1, "what was acknowledged stays");
        assert_eq!(
            store
                .get_messages("T", 0, 0, 8, None)
                .unwrap()
                .messages
                .len(),
            1,
            "and stays readable"
        );
        shut_down_poisoned(&store).await;
    });
}

#[test]
fn a_panicking_answer_callback_run_by_the_appender_poisons_the_store_with_its_message() {
    let sim = sim_disk(52);
    run_local(true, async {
        let store = open(&sim, FlushMode::Sync).await;
        store.put_with(message("T", 0, b"first", None, None), |_| {
            panic!("the callback broke")
        });
        // Rides the same batch: dispatched after the panicking answer.
        let second = store.put(message("T", 0, b"second", None, None)).await;
        assert_poisoned_with(&second, "the appender task panicked: the callback broke");
        assert_eq!(store.stats().task_panics, 1);
        shut_down_poisoned(&store).await;
    });
}

/// Opens a store, asks `task` to panic, drives it until the store is poisoned, and checks
/// the cause, the count, a later put and the shutdown.
fn check_background_task(seed: u64, flush_mode: FlushMode, task: StoreTask) {
    let sim = sim_disk(seed);
    run_local(true, async {
        let store = open(&sim, flush_mode).await;
        store.inject_task_panic(task);
        let deadline = Instant::now() + Duration::from_secs(120);
        let body = vec![7u8; 2048];
        while store.poison_cause().is_none() {
            assert!(
                Instant::now() < deadline,
                "the {} panic was never noticed",
                task.name()
            );
            // Puts move the appender past half a segment, which starts a preallocation.
            let _ = store.put(message("T", 0, &body, None, None)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let cause = store.poison_cause().unwrap();
        let expected = format!("the {} task panicked: injected panic", task.name());
        assert!(
            cause.contains(&expected),
            "'{cause}' should say '{expected}'"
        );
        assert_eq!(store.stats().task_panics, 1, "{}", task.name());
        assert_poisoned_by(
            &store.put(message("T", 0, b"later", None, None)).await,
            task.name(),
        );
        shut_down_poisoned(&store).await;
    });
}

#[test]
fn a_panic_in_the_flusher_poisons_the_store() {
    check_background_task(53, FlushMode::Async, StoreTask::Flusher);
}

#[test]
fn a_panic_in_the_checkpointer_poisons_the_store() {
    check_background_task(54, FlushMode::Sync, StoreTask::Checkpointer);
}

#[test]
fn a_panic_in_the_flush_watchdog_poisons_the_store() {
    check_background_task(55, FlushMode::Sync, StoreTask::Watchdog);
}

#[test]
fn a_panic_in_the_segment_preallocator_poisons_the_store() {
    check_background_task(56, FlushMode::Sync, StoreTask::Preallocator);
}

#[test]
fn a_panicking_shard_task_run_under_the_stores_watch_poisons_it() {
    let sim = sim_disk(57);
    run_local(true, async {
        let store = open(&sim, FlushMode::Sync).await;
        let ended = tokio::task::spawn_local(store.watch("client sweep", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("sweep broke at {}", 3)
        }))
        .await
        .expect("the watcher ends the task itself");
        assert_eq!(ended, None, "a panicked task has no output");
        let refused = store.put(message("T", 0, b"later", None, None)).await;
        assert_poisoned_with(&refused, "the client sweep task panicked: sweep broke at 3");
        assert_eq!(store.stats().task_panics, 1);
        shut_down_poisoned(&store).await;
    });
}

#[test]
fn answer_callbacks_that_panic_every_time_still_let_every_put_hear_and_shutdown_finish() {
    let sim = sim_disk(58);
    run_local(true, async {
        let store = open(&sim, FlushMode::Sync).await;
        // Every callback panics: the first poisons the store, the others panic again while
        // the poison is answered to them.
        for index in 0..3 {
            store.put_with(
                message("T", 0, format!("cb{index}").as_bytes(), None, None),
                move |_| panic!("callback {index} broke"),
            );
        }
        // Ride the same batch, after the callbacks.
        let outcomes = tokio::time::timeout(
            Duration::from_secs(60),
            store.put_all(
                (0..3).map(|index| message("T", 0, format!("m{index}").as_bytes(), None, None)),
            ),
        )
        .await
        .expect("a put waiting behind panicking callbacks never heard an answer");
        assert_eq!(outcomes.len(), 3);
        for outcome in &outcomes {
            assert_poisoned_with(outcome, "the appender task panicked: callback 0 broke");
        }
        assert_eq!(store.stats().task_panics, 1);
        shut_down_poisoned(&store).await;
    });
}
