//! The timer scheduler of one shard: indexes the shard's `rmq_sys_wheel_timer` queue into
//! its [`TimerStore`], and delivers each timer message when it is due, earliest first.
//!
//! ```text
//!   loop:
//!     index: timer queue entries [indexed, end) ─▶ store.index (spill a full buffer, with
//!            no delivery in flight)
//!     start: while a key is due and fewer than the window are in flight
//!            (`scheduleDeliveryWindow`):
//!            read its record ─▶ a cancellation: remember it
//!                            ─▶ cancelled: nothing to deliver
//!                            ─▶ else put the message on its real queue's owner
//!     finish: the oldest delivery in flight completes ─▶ store.acknowledge (in taking order)
//!     otherwise: checkpoint if due, then sleep until the next due time (at most MAX_SLEEP;
//!                a timer send on this shard wakes it)
//! ```
//!
//! Invariants:
//! - A key is acknowledged only after its copy was acknowledged by the store that owns the
//!   real queue (PUT_OK, durable as its flush mode requires, D7), or after the record was
//!   found undeliverable (skipped, logged, counted) or cancelled. A refused or failed put
//!   is tried again after [`RETRY_AFTER`]. So a timer message is never lost and never
//!   delivered before its due time (`store::topic::timer_due`, which only moves it later).
//! - Deliveries are acknowledged in the order their keys were taken (a queue of in-flight
//!   deliveries, awaited front first), as the store requires.
//! - The store's state is borrowed only between awaits, so the shutdown checkpoint
//!   ([`Timers::checkpoint`]) can always take it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::broker::timer::copy::{CopyError, SlaveCopy};
use crate::broker::timer::errors::TimerRecordError;
use crate::broker::timer::store::progress::TimerProgress;
use crate::broker::timer::store::{Lane, TimerKey, TimerLimits, TimerStore, DUE_GONE};
use crate::broker::timer::{self, Due, TIMER_TOPIC};
use crate::broker::Broker;
use crate::io::meta::MetaFiles;
use crate::metrics::ShardMetrics;
use crate::store::record::{self, Decoded, Verify};
use crate::store::{PutStatus, StoreError};

/// Queue entries indexed per turn, so a large backlog does not hold the shard.
const INDEX_BATCH: usize = 4096;
/// How often a changed state is checkpointed: a crash delivers at most this much again.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Longest the scheduler sleeps before it looks again, whatever is due.
pub const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How long a delivery waits after the store refused or failed it.
pub const RETRY_AFTER: Duration = Duration::from_millis(500);

/// One shard's timer state, shared by its scheduler, its send path and its shutdown.
pub struct Timers {
    /// The queue of [`TIMER_TOPIC`] this shard owns.
    pub queue: i32,
    store: RefCell<TimerStore>,
    /// Woken when a timer message is stored on this shard.
    pub wake: Rc<tokio::sync::Notify>,
    /// On a slave: the copy of the master's checkpoint written under the store.
    pub copy: SlaveCopy,
}

impl Timers {
    /// Opens the shard's timer store in `<store dir>/timer`.
    pub fn open(
        files: Arc<dyn MetaFiles>,
        store_dir: &std::path::Path,
        queue: i32,
        limits: TimerLimits,
    ) -> std::io::Result<Timers> {
        let store = TimerStore::open(files, &store_dir.join("timer"), limits)?;
        Ok(Timers {
            queue,
            store: RefCell::new(store),
            wake: Rc::new(tokio::sync::Notify::new()),
            copy: SlaveCopy::default(),
        })
    }

    /// Refuses a checkpoint that claims timer-queue entries past `queue_end`: recovery
    /// would index from there and the pending timers in between would never be delivered.
    pub fn check_against_queue(&self, queue_end: u64) -> Result<(), CheckpointAhead> {
        let store = self.store.borrow();
        let claims = store.checkpoint_claims();
        if claims > queue_end {
            return Err(CheckpointAhead {
                path: store.checkpoint_path(),
                claims,
                queue_end,
            });
        }
        Ok(())
    }

    /// Timer messages stored on this shard and not yet delivered: what the timer store
    /// holds, plus what its queue has that is not indexed yet.
    pub fn pending(&self, queue_end: u64) -> u64 {
        let store = self.store.borrow();
        store.pending() + queue_end.saturating_sub(store.indexed())
    }

    /// The lowest timer-queue offset still needed (the retention hold). Computed when
    /// asked (a walk of the memory buffer), not on every scheduler pass: at one walk per
    /// delivery it took most of the shard's CPU with a large backlog
    /// (`perf/results/delivery-findings.md`). On a slave that copies its master's
    /// checkpoint, what that copy needs: the store's memory is the state it opened with.
    pub fn lowest_needed(&self) -> u64 {
        if let Some(floor) = self.copy.floor() {
            return floor;
        }
        self.store.borrow().lowest_needed_offset()
    }

    /// What a slave needs to rebuild this shard's pending timers ([`TimerStore::progress`]).
    pub fn progress(&self) -> TimerProgress {
        self.store.borrow().progress()
    }

    /// Writes the master's `progress`, clamped to this slave's timer queue ending at
    /// `queue_end`, as the store's checkpoint if it changed ([`SlaveCopy::take`]); whether
    /// it wrote.
    pub async fn take_copy(
        &self,
        progress: TimerProgress,
        queue_end: u64,
    ) -> Result<bool, CopyError> {
        let (files, path) = {
            let store = self.store.borrow();
            (store.files(), store.checkpoint_path())
        };
        let floor_now = self.lowest_needed();
        let progress = progress.clamped(queue_end);
        self.copy.take(files, path, progress, floor_now).await
    }

    /// Writes the state; at shutdown, and from the scheduler.
    pub fn checkpoint(&self) -> std::io::Result<()> {
        self.store.borrow_mut().checkpoint()
    }
}

/// A timer checkpoint that claims more of the timer queue than the queue holds.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} says the timer queue was indexed up to offset {claims}, but the queue ends at {queue_end}: \
     the pending timers in between would be dropped; fix or remove it (without it every \
     pending timer is indexed again, and one delivered already may come twice)",
    path.display()
)]
pub struct CheckpointAhead {
    pub path: std::path::PathBuf,
    pub claims: u64,
    pub queue_end: u64,
}

/// What became of a due key.
enum Outcome {
    Delivered { late_ms: u64 },
    Cancelled,
    Skipped,
}

enum InFlight {
    Done(Outcome),
    Putting(JoinHandle<Outcome>),
}

/// Runs the scheduler until aborted (at shutdown).
pub async fn run(broker: Rc<Broker>, timers: Rc<Timers>) {
    let mut in_flight: VecDeque<(TimerKey, Lane, InFlight)> = VecDeque::new();
    let mut last_checkpoint = tokio::time::Instant::now();
    loop {
        let indexed_any = index_new(&broker, &timers, in_flight.is_empty());
        let now = broker.clock.now_ms();
        // Enough in flight to keep a SYNC_FLUSH group commit full, few enough that a crash
        // re-delivers little.
        while in_flight.len() < broker.config.schedule_delivery_window {
            let Some((key, lane)) = timers.store.borrow().peek() else {
                break;
            };
            if key.due > now {
                break;
            }
            if let Err(error) = timers.store.borrow_mut().take(key, lane) {
                tracing::error!(?key, "cannot read the timer store: {error}");
                break;
            }
            let step = start(&broker, &timers, key);
            in_flight.push_back((key, lane, step));
        }
        if let Some((key, lane, step)) = in_flight.pop_front() {
            let outcome = match step {
                InFlight::Done(outcome) => outcome,
                InFlight::Putting(handle) => match handle.await {
                    Ok(outcome) => outcome,
                    // Only an abort ends a put task early: the node is stopping, and the
                    // key stays unacknowledged (delivered again after the restart).
                    Err(_) => return,
                },
            };
            finish(&broker, &timers, key, lane, outcome);
            continue;
        }
        update_figures(&broker, &timers);
        if timers.store.borrow().is_dirty() && last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
            if let Err(error) = timers.checkpoint() {
                tracing::error!("cannot checkpoint the timer store: {error}");
            }
            last_checkpoint = tokio::time::Instant::now();
        }
        if indexed_any {
            continue;
        }
        let wait = match timers.store.borrow().peek() {
            Some((key, _)) => {
                Duration::from_millis((key.due - broker.clock.now_ms()).max(0) as u64)
            }
            None => MAX_SLEEP,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
            _ = timers.wake.notified() => {}
        }
    }
}

/// Indexes up to [`INDEX_BATCH`] new entries of the timer queue; whether it indexed any.
/// A full buffer is spilled only when `idle` (no delivery in flight); until then indexing
/// waits.
fn index_new(broker: &Broker, timers: &Timers, idle: bool) -> bool {
    let mut store = timers.store.borrow_mut();
    if store.needs_spill() {
        if !idle {
            return false;
        }
        if let Err(error) = store.spill() {
            tracing::error!("cannot write a timer store run: {error}");
            return false;
        }
    }
    let from = store.indexed();
    let min = broker.store.min_offset(TIMER_TOPIC, timers.queue);
    if from < min {
        // Retention took entries never indexed: a forced run (above the forced ratio) or a
        // hold that was not registered. Said once per gap; the messages are gone.
        tracing::warn!(
            from,
            min,
            "timer queue entries [{from}, {min}) were deleted before they were indexed"
        );
        drop(store);
        return skip_to(timers, from, min);
    }
    let entries = match broker
        .store
        .queue_entries(TIMER_TOPIC, timers.queue, from, INDEX_BATCH)
    {
        Ok(entries) => entries,
        Err(error) => {
            tracing::error!("cannot read the timer queue at {from}: {error}");
            return false;
        }
    };
    for (index, entry) in entries.iter().enumerate() {
        store.index_recovered(TimerKey {
            due: entry.tags_code,
            offset: from + index as u64,
        });
        if store.needs_spill() {
            break;
        }
    }
    !entries.is_empty()
}

/// Moves the index past entries retention deleted: each counts as skipped.
fn skip_to(timers: &Timers, from: u64, to: u64) -> bool {
    let mut store = timers.store.borrow_mut();
    for offset in from..to {
        // Due at once and gone: the delivery finds no record and skips it.
        store.index_recovered(TimerKey {
            due: DUE_GONE,
            offset,
        });
    }
    true
}

/// Starts the delivery of `key`.
fn start(broker: &Rc<Broker>, timers: &Timers, key: TimerKey) -> InFlight {
    let message = match read_due(broker, timers, key) {
        Ok(Due::Cancel(uniq_key)) => {
            timers.store.borrow_mut().cancel(uniq_key, key.due + 1);
            return InFlight::Done(Outcome::Cancelled);
        }
        Ok(Due::Deliver { message, uniq_key }) => {
            if uniq_key.is_some_and(|uniq| timers.store.borrow().is_cancelled(&uniq)) {
                return InFlight::Done(Outcome::Cancelled);
            }
            message
        }
        Err(why) => {
            tracing::warn!(
                offset = key.offset,
                due = key.due,
                "timer message skipped: {why}"
            );
            return InFlight::Done(Outcome::Skipped);
        }
    };
    let broker = broker.clone();
    InFlight::Putting(tokio::task::spawn_local(async move {
        loop {
            let owner = broker.shard.owner(&message.topic, message.queue_id);
            let outcome = if owner == broker.shard.id() {
                broker.store.put(message.clone()).await
            } else {
                ShardMetrics::add(&broker.metrics.forwarded, 1);
                broker.shard.put_on(owner, message.clone()).await
            };
            match outcome {
                Ok(result) if result.status == PutStatus::Ok => {
                    let late = (broker.clock.now_ms() - key.due).max(0) as u64;
                    return Outcome::Delivered { late_ms: late };
                }
                Err(StoreError::MessageIllegal(why)) => {
                    tracing::warn!(offset = key.offset, "timer message skipped, illegal: {why}");
                    return Outcome::Skipped;
                }
                Ok(_) => tracing::warn!(
                    offset = key.offset,
                    "timer message's flush did not finish in time; delivering it again"
                ),
                Err(error) => tracing::warn!(
                    offset = key.offset,
                    "timer message not delivered yet, retrying in {RETRY_AFTER:?}: {error}"
                ),
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }))
}

/// The timer record of `key`, read back and turned into what is due.
fn read_due(broker: &Broker, timers: &Timers, key: TimerKey) -> Result<Due, TimerRecordError> {
    let entry = broker
        .store
        .queue_entry(TIMER_TOPIC, timers.queue, key.offset)
        .map_err(TimerRecordError::QueueEntry)?
        .ok_or(TimerRecordError::Gone)?;
    let bytes = broker
        .store
        .read_record(entry.phys_offset as u64, entry.size as usize)
        .map_err(TimerRecordError::Record)?;
    match record::decode(&bytes, Verify::Structure) {
        Ok(Decoded::Record(view)) => {
            timer::delivered(&view, broker.clock.now_ms()).map_err(TimerRecordError::Undeliverable)
        }
        other => Err(TimerRecordError::NoRecord(format!("{other:?}"))),
    }
}

fn finish(broker: &Broker, timers: &Timers, key: TimerKey, lane: Lane, outcome: Outcome) {
    let metrics = &broker.metrics;
    match outcome {
        Outcome::Delivered { late_ms } => {
            ShardMetrics::add(&metrics.timer_delivered, 1);
            ShardMetrics::add(&metrics.timer_lateness_ms, late_ms);
        }
        Outcome::Cancelled => ShardMetrics::add(&metrics.timer_cancelled, 1),
        Outcome::Skipped => ShardMetrics::add(&metrics.timer_skipped, 1),
    }
    timers.store.borrow_mut().acknowledge(key, lane);
}

fn update_figures(broker: &Broker, timers: &Timers) {
    let end = broker.store.max_offset(TIMER_TOPIC, timers.queue);
    broker
        .metrics
        .timer_pending
        .store(timers.pending(end), std::sync::atomic::Ordering::Relaxed);
}
