//! Background durability: the ASYNC_FLUSH flusher, the checkpointer, and clean shutdown.
//!
//! The flusher (ASYNC_FLUSH only) wakes every `flushIntervalCommitLog` and syncs the
//! CommitLog once at least `flushCommitLogLeastPages` 4 KiB pages are dirty, or anything
//! at all is dirty and `flushCommitLogThoroughInterval` has passed since the last sync
//! (RocketMQ's timed flush, `flushCommitLogTimed`). It runs on its clock only: the
//! appender does not wake it when pages pile up. Waking it at 4 dirty pages meant one
//! fdatasync per ~15 messages of a lone producer (2,517 syncs for 37,084 messages) and
//! cost about a quarter of the node's CPU per message with 16 producers (34 against 26
//! µs/msg, measured twice); what a power loss can take is one interval of writes either
//! way, which is what ASYNC_FLUSH promises.
//!
//! The flush watchdog answers a put that has waited too long with why: FLUSH_DISK_TIMEOUT
//! after `syncFlushTimeout` when it still waits for its write or flush (queued, in the
//! batch being written, or written and held in the queue of waiters), FLUSH_SLAVE_TIMEOUT
//! after `slaveTimeout` when it is durable here and waits only for a replica (SYNC_MASTER,
//! D14). The message stays stored and becomes visible once what it waited for comes, but
//! its producer is not left hanging. Both timeouts count from the put's queueing, in ticks
//! of a tenth of the shorter one, so a put is answered between 1 and 1.1 of its timeout,
//! never before it, and putting costs no timer at all.
//!
//! The checkpointer writes each ConsumeQueue's in-memory tail out, syncs the queues, does
//! the same for the index, and records `safe = min(dispatched, flushed)`: below it the
//! CommitLog and the queue and index entries pointing into it are durable, which is what
//! recovery relies on.

use std::rc::Rc;

use tokio::time::Instant;

use super::commit_log::LogIoError;
use super::consume_queue::ConsumeQueue;
use super::segment::SegmentSet;
use super::waiters::AckCondition;
use super::watch::panic_point;
use super::{PutStatus, Shared, StoreError, StoreTask, ABORT_FILE};

pub(crate) async fn run_async_flusher(shared: Rc<Shared>) {
    let config = &shared.config;
    let mut last_sync = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.flush_interval) => {}
            _ = shared.flusher_wake.notified() => {}
        }
        panic_point(&shared, StoreTask::Flusher);
        if shared.closing.get() || shared.poisoned().is_some() {
            return;
        }
        let (flushed, written) = (shared.log.flushed_pos(), shared.log.written_pos());
        if written == flushed {
            continue;
        }
        let enough_pages = written - flushed >= config.flush_least_pages * 4096;
        if !enough_pages && last_sync.elapsed() < config.flush_thorough_interval {
            continue;
        }
        let _flushing = shared.flush_lock.lock().await;
        // A replica's truncation may have moved the positions back meanwhile.
        let (flushed, written) = (shared.log.flushed_pos(), shared.log.written_pos());
        if let Err(cause) = sync_log(&shared, flushed, written).await {
            shared.poison(cause.to_string());
            return;
        }
        last_sync = Instant::now();
    }
}

/// Syncs the CommitLog segments holding `[from, to)` and advances the flushed position.
async fn sync_log(shared: &Shared, from: u64, to: u64) -> Result<(), LogIoError> {
    if from >= to {
        return Ok(());
    }
    let segments = shared.log.segments.clone();
    let first = segments.borrow().start_of(from);
    let last = segments.borrow().start_of(to - 1);
    let began = tokio::time::Instant::now();
    SegmentSet::sync_range(&segments, from, to)
        .await
        .map_err(|error| LogIoError::RangeSync { from, to, error })?;
    let took = super::position::micros_u64(began.elapsed());
    let synced = (last - first) / shared.log.segment_size() + 1;
    shared.update_stats(|stats| {
        stats.log_syncs += synced;
        stats.log_sync_micros += took;
    });
    shared.log.set_flushed_pos(to);
    Ok(())
}

/// Watchdog ticks per the shorter timeout that applies: a put times out between its
/// timeout and a tenth past it (a put waits at least a whole number of ticks after the
/// tick it was queued in, so never less than its timeout).
pub(crate) const TIMEOUT_TICKS: u64 = 10;
// At least one tick, or nothing would ever be overdue.
const _: () = assert!(TIMEOUT_TICKS >= 1);

/// The watchdog's tick, and the ticks after which a put is overdue for its flush and for
/// its replica: a tenth of the shorter timeout that applies (`slaveTimeout` only where the
/// store waits for a replica), so the shorter one is [`TIMEOUT_TICKS`] ticks.
pub(crate) fn watchdog_ticks(shared: &Shared) -> (std::time::Duration, u64, u64) {
    let config = &shared.config;
    let waits_for_replica = shared.waiters.borrow().requires(AckCondition::Replicated);
    let shortest = if waits_for_replica {
        config.sync_flush_timeout.min(config.slave_timeout)
    } else {
        config.sync_flush_timeout
    };
    let period = (shortest / super::position::to_u32(TIMEOUT_TICKS))
        .max(std::time::Duration::from_millis(1));
    let ticks = |timeout: std::time::Duration| {
        let ticks = (timeout.as_nanos() * u128::from(TIMEOUT_TICKS)).div_ceil(shortest.as_nanos());
        u64::try_from(ticks).unwrap_or(u64::MAX)
    };
    (
        period,
        ticks(config.sync_flush_timeout),
        ticks(config.slave_timeout),
    )
}

pub(crate) async fn run_flush_watchdog(shared: Rc<Shared>) {
    let (period, flush_ticks, replica_ticks) = watchdog_ticks(&shared);
    loop {
        tokio::time::sleep(period).await;
        panic_point(&shared, StoreTask::Watchdog);
        let tick = shared.watchdog_tick.get() + 1;
        shared.watchdog_tick.set(tick);
        let overdue = |enqueued: u64, after: u64| {
            assert!(
                enqueued <= tick,
                "a put was queued at watchdog tick {enqueued}, after the current tick {tick}"
            );
            // Queued somewhere within tick `enqueued`: only once more than `after` ticks
            // have passed has it surely waited `after` whole ticks, its full timeout.
            // (`>=` answered up to a tick early: FLUSH_SLAVE_TIMEOUT at 2.63 s of a 3 s
            // slaveTimeout, while the slave might still have confirmed in time.)
            tick - enqueued > after
        };
        for slot in shared.in_flight.borrow().iter() {
            if overdue(slot.enqueued_tick, flush_ticks) {
                slot.time_out(PutStatus::FlushDiskTimeout);
            }
        }
        // Written batches still held by an acknowledgement condition (empty between the
        // appender's turns unless a replica's condition holds them, D14): each is overdue
        // for what it still waits for.
        for (batch, durable_here) in shared.waiters.borrow().iter() {
            let (after, reason) = if durable_here {
                (replica_ticks, PutStatus::FlushSlaveTimeout)
            } else {
                (flush_ticks, PutStatus::FlushDiskTimeout)
            };
            for item in &batch.puts {
                if overdue(item.put.slot.enqueued_tick, after) {
                    item.put.slot.time_out(reason);
                }
            }
        }
        // The queue is in arrival order, so the overdue puts are at its front.
        for put in shared.pending.borrow().iter() {
            if !overdue(put.slot.enqueued_tick, flush_ticks) {
                break;
            }
            put.slot.time_out(PutStatus::FlushDiskTimeout);
        }
    }
}

pub(crate) async fn run_checkpointer(shared: Rc<Shared>) {
    loop {
        tokio::time::sleep(shared.config.checkpoint_interval).await;
        panic_point(&shared, StoreTask::Checkpointer);
        if shared.closing.get() || shared.poisoned().is_some() {
            return;
        }
        let _checkpointing = shared.checkpoint_lock.lock().await;
        match checkpoint(&shared, false).await {
            Ok(()) => {}
            // Queue entries stay in memory and the old checkpoint stays valid, so a full
            // disk only delays the checkpoint; the next round tries again.
            Err(StoreError::DiskFull(cause)) => {
                tracing::warn!("checkpoint postponed: {cause}");
            }
            Err(error) => {
                shared.poison(error.to_string());
                return;
            }
        }
    }
}

/// Writes out and syncs every ConsumeQueue, then records the safe offset.
pub(crate) async fn checkpoint(shared: &Shared, clean: bool) -> Result<(), StoreError> {
    let dispatched = shared.dispatched_pos.get();
    let queues: Vec<Rc<ConsumeQueue>> = shared.all_queues();
    for queue in &queues {
        queue.write_out().await.map_err(|error| {
            let context = format!("writing consume queue {}/{}", queue.topic, queue.queue_id);
            StoreError::from_io(&context, &error)
        })?;
    }
    for queue in &queues {
        queue.sync().await.map_err(|error| {
            let context = format!("syncing consume queue {}/{}", queue.topic, queue.queue_id);
            StoreError::from_io(&context, &error)
        })?;
    }
    if let Some(index) = &shared.index {
        index
            .write_out_and_sync(clean)
            .await
            .map_err(|error| StoreError::from_io("writing the index", &error))?;
    }
    let safe = dispatched.min(shared.log.flushed_pos());
    let last = shared
        .checkpoint
        .borrow()
        .as_ref()
        .and_then(|file| file.last());
    if let Some(last) = last {
        // Recovery trusts everything below the safe offset; it only ever moves forward.
        assert!(
            safe >= last.safe_offset,
            "the checkpoint's safe offset would move back from {} to {safe}",
            last.safe_offset
        );
    }
    let Some(mut file) = shared.checkpoint.borrow_mut().take() else {
        return Ok(());
    };
    let unchanged = file
        .last()
        .is_some_and(|last| last.safe_offset == safe && last.clean == clean);
    let result = if unchanged {
        Ok(())
    } else {
        let log_end = if clean { safe } else { 0 };
        file.write(safe, log_end, clean, shared.clock.now_ms())
            .await
            .map_err(|error| StoreError::from_io("writing the checkpoint", &error))
    };
    *shared.checkpoint.borrow_mut() = Some(file);
    result
}

/// Lowers the checkpoint's safe offset to `to` at most, durably (a crash from then on
/// recovers from at or below `to`): the first step of a replica's truncation
/// (`replica_cut.rs`), the one place the safe offset moves back. The caller holds the
/// checkpoint lock.
pub(crate) async fn lower_checkpoint(shared: &Shared, to: u64) -> Result<(), StoreError> {
    let Some(mut file) = shared.checkpoint.borrow_mut().take() else {
        return Ok(());
    };
    let result = match file.last() {
        Some(last) if last.safe_offset <= to && !last.clean => Ok(()),
        last => {
            let safe = last.map_or(to, |last| last.safe_offset.min(to));
            file.write(safe, 0, false, shared.clock.now_ms()).await
        }
    };
    *shared.checkpoint.borrow_mut() = Some(file);
    result.map_err(|error| StoreError::from_io("lowering the checkpoint", &error))
}

pub(crate) async fn shutdown(shared: &Rc<Shared>) -> Result<(), StoreError> {
    if shared.closing.replace(true) {
        return Ok(());
    }
    // Let the appender finish what was queued before the refusal began.
    shared.appender_wake.notify_one();
    while !shared.pending.borrow().is_empty() || shared.appender_busy.get() {
        let idle = shared.appender_idle.notified();
        shared.appender_wake.notify_one();
        idle.await;
    }
    for task in shared.tasks.borrow_mut().drain(..) {
        task.abort();
    }
    // Batches still held for a replica are durable here: they stop waiting, so they are
    // visible before the clean checkpoint, and their puts hear FLUSH_SLAVE_TIMEOUT.
    if shared.poisoned().is_none() {
        super::append::waive_replica(shared, PutStatus::FlushSlaveTimeout);
    }
    let result = finish(shared).await;
    shared.log.close();
    for queue in shared.all_queues() {
        queue.close();
    }
    if let Some(index) = &shared.index {
        index.close();
    }
    if let Some(file) = shared.checkpoint.borrow_mut().take() {
        file.close();
    }
    shared.lock_file.borrow_mut().take();
    result
}

async fn finish(shared: &Shared) -> Result<(), StoreError> {
    if let Some(error) = shared.poisoned() {
        return Err(error);
    }
    // The local conditions are reached in the appender's turn, and the replica's was
    // waived above, so an idle appender leaves nothing waiting.
    {
        let waiters = shared.waiters.borrow();
        assert!(
            waiters.is_empty(),
            "shutdown found {} written batches unreleased (released up to {}, limit {})",
            waiters.len(),
            waiters.released(),
            waiters.limit()
        );
    }
    let (flushed, written) = (shared.log.flushed_pos(), shared.log.written_pos());
    sync_log(shared, flushed, written)
        .await
        .map_err(|cause| StoreError::Poisoned(cause.to_string()))?;
    checkpoint(shared, true).await?;
    let abort = shared.config.dir.join(ABORT_FILE);
    shared
        .disk
        .remove_file(&abort)
        .and_then(|()| shared.disk.sync_dir(&shared.config.dir))
        .map_err(|error| StoreError::from_io("removing the abort marker", &error))
}
