//! The scheduler of one delay level: reads its `SCHEDULE_TOPIC_XXXX` queue from the level's
//! cursor and writes each due message to its real queue, with up to `window` deliveries
//! in flight at once (`scheduleDeliveryWindow`).
//!
//! ```text
//!   loop:
//!     start:  while the entry at `next` is due and fewer than `window` are in
//!             flight: read its record, put the message on its real queue's owner
//!             (each put retries on its own after RETRY_AFTER until acknowledged)
//!     finish: the oldest delivery in flight completes ─▶ cursor + 1 (in queue order)
//!     otherwise: sleep until the next due time (at most MAX_SLEEP; a delayed send
//!                stored on this shard wakes it)
//! ```
//!
//! Why a window: under SYNC_FLUSH a put is acknowledged after its fsync, so one delivery
//! at a time delivered one message per fsync (p99 lateness 7.9 s with 100,000 pending,
//! `perf/results/delivery-lateness-delay-sync-flush.md`). With a window the puts of one
//! turn share a group commit, as the timer scheduler's do.
//!
//! Invariants:
//! - The cursor moves past an entry only after that entry's delivery finished: its copy
//!   acknowledged by the store owning the real queue (PUT_OK, durable as its flush mode
//!   requires, D7), or the record found undeliverable (skipped, logged, counted).
//!   Deliveries finish in queue order (`FuturesOrdered`), so the cursor never passes an
//!   entry still in flight; a crash or an abort re-delivers at most the window.
//! - Deliveries are futures owned by the scheduler, not spawned tasks: aborting the
//!   scheduler at shutdown drops them all, and nothing writes after the stop.
//! - `next` (the first entry not started) never falls below the cursor, and the two are
//!   equal whenever nothing is in flight.
//! - Puts start in queue order (`FuturesOrdered` polls new futures in the order they were
//!   pushed, and a put takes its place in the store's queue, or the owner's mailbox, on its
//!   first poll), so a level's messages reach a real queue in their order. A put the store
//!   refuses is retried on its own, and the puts behind it in the window may land before it:
//!   after a refusal (a full disk, a flush timeout) the order in the real queue may differ
//!   from the order of sending, as it may across a crash.

use std::rc::Rc;
use std::time::Duration;

use futures_util::stream::{FuturesOrdered, StreamExt};

use crate::broker::Broker;
use crate::metrics::ShardMetrics;
use crate::store::consume_queue::CqEntry;
use crate::store::record::{self, Decoded, Verify};
use crate::store::topic::SCHEDULE_TOPIC;
use crate::store::{PutStatus, StoreError};

use super::{delivered, MAX_SLEEP, RETRY_AFTER};

/// What became of one started delivery.
enum Outcome {
    /// The copy is acknowledged, `late_ms` after its due time.
    Delivered { late_ms: u64 },
    /// The record can never be delivered: move on without it.
    Skipped(String),
}

/// One delivery in flight: the queue offset it came from and its outcome once put.
type Delivery = std::pin::Pin<Box<dyn std::future::Future<Output = (u64, Outcome)>>>;

/// What the start step found at `next`.
enum Next {
    /// Entry started (or found undeliverable at once, which counts as started).
    Started,
    /// Nothing due: look again after this long.
    Wait(Duration),
}

/// One level's scheduler state.
struct Level {
    broker: Rc<Broker>,
    level: u32,
    queue_id: i32,
    delay_ms: i64,
    /// The next entry to deliver durably: what the level's cursor table holds.
    cursor: u64,
    /// The first entry not yet started.
    next: u64,
    in_flight: FuturesOrdered<Delivery>,
    /// Most deliveries in flight at once (`scheduleDeliveryWindow`).
    window: usize,
}

/// The scheduler of `level`, on the shard that owns its queue; runs until aborted (at
/// shutdown, which leaves the cursor at the last delivery finished in order).
pub async fn run_level(broker: Rc<Broker>, level: u32) {
    let delay_ms = broker
        .config
        .delay_levels
        .delay_ms(level)
        .unwrap_or_else(|| panic!("delay level {level} is not configured"));
    let wake = broker.delay_wake(level).clone();
    let cursor = broker.delay_offsets.get(level).unwrap_or(0);
    broker.metrics.delay_level_started(level);
    tracing::debug!(level, cursor, "delay scheduler running");
    let window = broker.config.schedule_delivery_window;
    assert!(
        window > 0,
        "level {level}: a delivery window of 0 would never deliver"
    );
    let mut state = Level {
        broker,
        level,
        queue_id: (level - 1) as i32,
        delay_ms: delay_ms as i64,
        cursor,
        next: cursor,
        in_flight: FuturesOrdered::new(),
        window,
    };
    loop {
        let wait = state.start_due();
        if state.in_flight.len() >= state.window {
            state.finish_oldest().await;
            continue;
        }
        tokio::select! {
            Some((offset, outcome)) = state.in_flight.next(), if !state.in_flight.is_empty() => {
                state.finish(offset, outcome);
            }
            _ = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
            _ = wake.notified() => {}
        }
    }
}

impl Level {
    /// Starts every due entry from `next` while the window has room; how long until the
    /// next entry is due.
    fn start_due(&mut self) -> Duration {
        while self.in_flight.len() < self.window {
            match self.start_next() {
                Next::Started => self.next += 1,
                Next::Wait(wait) => return wait,
            }
        }
        Duration::ZERO
    }

    fn start_next(&mut self) -> Next {
        let max = if self.in_flight.is_empty() {
            let max = correct_cursor(&self.broker, self.level, &mut self.cursor);
            self.next = self.cursor;
            max
        } else {
            self.broker.store.max_offset(SCHEDULE_TOPIC, self.queue_id)
        };
        let broker = &self.broker;
        broker
            .metrics
            .set_delay_pending(self.level, max.saturating_sub(self.cursor));
        if self.next >= max {
            return Next::Wait(MAX_SLEEP);
        }
        let entry = match broker
            .store
            .queue_entry(SCHEDULE_TOPIC, self.queue_id, self.next)
        {
            Ok(Some(entry)) => entry,
            Ok(None) => return Next::Wait(MAX_SLEEP),
            Err(error) => {
                let offset = self.next;
                tracing::error!(
                    level = self.level,
                    offset,
                    "cannot read the delay queue: {error}"
                );
                return Next::Wait(RETRY_AFTER);
            }
        };
        let now = broker.clock.now_ms();
        // A due time more than one delay ahead means the clock went back: due now.
        let due = if entry.tags_code > now.saturating_add(self.delay_ms) {
            now
        } else {
            entry.tags_code
        };
        if due > now {
            return Next::Wait(Duration::from_millis((due - now) as u64));
        }
        let offset = self.next;
        self.in_flight
            .push_back(Box::pin(deliver(broker.clone(), offset, entry, due)));
        Next::Started
    }

    async fn finish_oldest(&mut self) {
        if let Some((offset, outcome)) = self.in_flight.next().await {
            self.finish(offset, outcome);
        }
    }

    /// The delivery of `offset`, the oldest in flight, finished: the cursor moves past it.
    fn finish(&mut self, offset: u64, outcome: Outcome) {
        assert_eq!(
            offset, self.cursor,
            "delay level {} finished entry {offset} out of order (cursor {}, next {})",
            self.level, self.cursor, self.next
        );
        let broker = &self.broker;
        match outcome {
            Outcome::Delivered { late_ms } => broker.metrics.delay_delivered(self.level, late_ms),
            Outcome::Skipped(why) => {
                tracing::error!(level = self.level, offset, "delayed message skipped: {why}");
                broker.metrics.delay_skipped(self.level);
            }
        }
        self.cursor += 1;
        broker
            .delay_offsets
            .set(self.level, self.cursor, broker.now_ms());
    }
}

/// Java's `correctDelayOffset`: moves `cursor` into its queue when retention took
/// messages below it or the table names an offset the queue never reached. The queue's
/// end.
fn correct_cursor(broker: &Broker, level: u32, cursor: &mut u64) -> u64 {
    let queue_id = (level - 1) as i32;
    let (min, max) = (
        broker.store.min_offset(SCHEDULE_TOPIC, queue_id),
        broker.store.max_offset(SCHEDULE_TOPIC, queue_id),
    );
    let corrected = (*cursor).clamp(min, max.max(min));
    if corrected != *cursor {
        tracing::warn!(
            level,
            cursor = *cursor,
            corrected,
            "delay cursor outside its queue [{min}, {max}); moved"
        );
        *cursor = corrected;
        broker.delay_offsets.set(level, corrected, broker.now_ms());
    }
    max
}

/// Writes the message of the scheduled record at `entry` (queue offset `offset`, due at
/// `due`) to its real queue's owner, trying again after [`RETRY_AFTER`] while the store
/// refuses or fails it.
async fn deliver(broker: Rc<Broker>, offset: u64, entry: CqEntry, due: i64) -> (u64, Outcome) {
    loop {
        match try_deliver(&broker, &entry).await {
            Ok(true) => {
                let late_ms = (broker.clock.now_ms() - due).max(0) as u64;
                return (offset, Outcome::Delivered { late_ms });
            }
            Ok(false) => {}
            Err(why) => return (offset, Outcome::Skipped(why)),
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
}

/// One attempt: `Ok(true)` acknowledged, `Ok(false)` to be tried again (logged), `Err`
/// never deliverable.
async fn try_deliver(broker: &Broker, entry: &CqEntry) -> Result<bool, String> {
    let retry = |why: String| {
        tracing::warn!(
            phys = entry.phys_offset,
            "delayed message not delivered yet, retrying in {RETRY_AFTER:?}: {why}"
        );
        Ok(false)
    };
    let bytes = match broker
        .store
        .read_record(entry.phys_offset as u64, entry.size as usize)
    {
        Ok(bytes) => bytes,
        // Retention deleted the segment under a queue entry it kept (Java's lookup
        // finds nothing and moves on too).
        Err(_) if (entry.phys_offset as u64) < broker.store.log_start() => {
            return Err("retention deleted its record".into())
        }
        Err(error) => return retry(format!("cannot read its record: {error}")),
    };
    let record = match record::decode(&bytes, Verify::Structure) {
        Ok(Decoded::Record(view)) => delivered(&view).map_err(|why| why.to_string())?,
        other => return Err(format!("its entry points at no record: {other:?}")),
    };
    let owner = broker.shard.owner(&record.topic, record.queue_id);
    let outcome = if owner == broker.shard.id() {
        broker.store.put(record).await
    } else {
        ShardMetrics::add(&broker.metrics.forwarded, 1);
        broker.shard.put_on(owner, record).await
    };
    match outcome {
        Ok(result) if result.status == PutStatus::Ok => Ok(true),
        Ok(_) => retry("its flush did not finish in time".into()),
        Err(StoreError::MessageIllegal(why)) => Err(format!("illegal: {why}")),
        Err(error) => retry(error.to_string()),
    }
}
