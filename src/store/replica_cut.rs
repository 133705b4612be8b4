//! Where a replica's log begins and ends other than by appends: an empty replica starting
//! at its master's first segment ([`Store::start_replica_at`]), one that fell below what
//! its master retains starting again there ([`Store::restart_replica_at`]), and a replica
//! cut back to the last point its master's log agrees with ([`Store::truncate_replica`]).
//!
//! The truncation is recovery's cut at a chosen offset, with recovery's code (one home):
//!
//! ```text
//!   1. checkpoint safe offset lowered to ≤ to   a crash from here on recovers at or below
//!                                               `to`: the old tail, or the cut one
//!   2. CommitLog cut at `to`                    recovery's cut_log_at: later segments
//!                                               removed, the rest of `to`'s zeroed, synced
//!   3. ConsumeQueues and index cut at `to`      the cuts load and open make after a crash
//!                                               (ConsumeQueue::cut_from, Index::cut_from),
//!                                               written out and synced
//!   4. positions at `to`, checkpoint at `to`    a crash after this cannot bring the cut
//!                                               records back
//! ```
//!
//! A crash between the steps leaves a log that recovery takes: step 1 makes every later
//! state one it scans from at or below `to`. A failure of any step poisons the store: its
//! files are consistent only after a reopen, whose recovery finishes the cut. A caller
//! dropped part way (a stop aborting the HA stream) does not stop the steps: they run as
//! a task of their own ([`to_the_end`]), which a clean stop waits for.

use std::future::Future;
use std::rc::Rc;

use super::position::{to_u64, to_usize, LogPos};
use super::record::{self, Decoded, Verify};
use super::recovery::cut_log_at;
use super::replica::{BusyGuard, StoreRole};
use super::scan::claims_position;
use super::watch::{watched, Watchee};
use super::{flush, Shared, Store, StoreError};

/// Why [`Store::truncate_replica`] refused or failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaTruncateError {
    #[error("the store is a master: only a replica's log is truncated")]
    NotReplica,
    #[error("another replica append or truncation of this store is under way")]
    Busy,
    #[error("cannot truncate to {to}: the log starts at {start}")]
    BelowStart { to: u64, start: u64 },
    #[error("cannot truncate to {to}: the whole records end at {end}")]
    PastEnd { to: u64, end: u64 },
    #[error("cannot truncate to {to}: no record starts there ({why})")]
    NotRecordBoundary { to: u64, why: String },
    /// A step failed; the store is poisoned and a reopen finishes the cut.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a truncation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaTruncated {
    /// Where the replica's received bytes ended before.
    pub from: u64,
    pub to: u64,
    /// CommitLog segments removed (wholly past `to`).
    pub removed_segments: usize,
}

/// Why [`Store::start_replica_at`] refused or failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaStartError {
    #[error("the store is a master: only a replica starts at its master's offset")]
    NotReplica,
    #[error("another replica append or truncation of this store is under way")]
    Busy,
    #[error(
        "the store is not empty (its log holds [{start}, {end}), {queues} queue(s)): only an \
         empty replica starts at its master's offset"
    )]
    NotEmpty { start: u64, end: u64, queues: usize },
    #[error(
        "{base} is not a CommitLog segment base of this shard (base {shard_base}, segments \
         of {segment_size} bytes)"
    )]
    NotSegmentBase {
        base: u64,
        shard_base: u64,
        segment_size: u64,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Store {
    /// The CommitLog's segment size.
    pub fn segment_size(&self) -> u64 {
        self.shared.log.segment_size()
    }

    /// The base of the segment holding `offset` (at or past the shard's first offset).
    pub fn segment_base_of(&self, offset: u64) -> u64 {
        self.shared.log.segment_start(offset)
    }

    /// Makes an empty replica's log begin at `base`, a segment base of the shard at or past
    /// its first offset (its master's minimum, when retention deleted the master's older
    /// segments): the segment file named by it is created, and the next frame starts
    /// there, so offsets line up with the master's. Queues that begin past offset 0 then
    /// begin where their first record says (`dispatch.rs`, `may_begin_queue_at`).
    pub async fn start_replica_at(&self, base: u64) -> Result<(), ReplicaStartError> {
        let shared = &self.shared;
        if shared.role.get() != StoreRole::Replica {
            return Err(ReplicaStartError::NotReplica);
        }
        let _busy = BusyGuard::take(&shared.replica).ok_or(ReplicaStartError::Busy)?;
        if let Some(error) = shared.poisoned() {
            return Err(error.into());
        }
        check_empty(shared)?;
        check_segment_base(shared, base)?;
        shared.log.segment_file(base).await.map_err(|error| {
            StoreError::from_io(&format!("creating CommitLog segment {base}"), &error)
        })?;
        move_to(shared, base);
        let _checkpointing = shared.checkpoint_lock.lock().await;
        flush::checkpoint(shared, false).await?;
        tracing::warn!(
            "replica {} starts at its master's offset {base}",
            shared.config.dir.display()
        );
        shared.replica.notify_progress();
        Ok(())
    }

    /// Cuts a replica's log at `to`, a record boundary at or below the end of its whole
    /// records, with everything that points past it (ConsumeQueue entries, index keys), and
    /// makes the cut durable; the next frame starts at `to`. The HA stream calls it at
    /// every handshake, to the last offset its master's log agrees with (to its own
    /// records' end when they agree: that drops an incomplete record). See the module
    /// docs for the steps and what a crash between them leaves.
    pub async fn truncate_replica(
        &self,
        to: u64,
    ) -> Result<ReplicaTruncated, ReplicaTruncateError> {
        let store = self.clone();
        let change = async move { store.truncate_replica_steps(to).await };
        match to_the_end(&self.shared, "replica truncation", change).await {
            Ok(done) => done,
            Err(error) => Err(error.into()),
        }
    }

    async fn truncate_replica_steps(
        &self,
        to: u64,
    ) -> Result<ReplicaTruncated, ReplicaTruncateError> {
        let shared = &self.shared;
        if shared.role.get() != StoreRole::Replica {
            return Err(ReplicaTruncateError::NotReplica);
        }
        let _busy = BusyGuard::take(&shared.replica).ok_or(ReplicaTruncateError::Busy)?;
        refuse_if_stopping(shared)?;
        check_boundary(shared, to)?;
        let from = super::replica::received_end(shared);
        // Retention, the checkpointer and the flusher wait: each reads or moves what the
        // cut moves back.
        let _cleaning = shared.cleaning.lock().await;
        let _checkpointing = shared.checkpoint_lock.lock().await;
        let _flushing = shared.flush_lock.lock().await;
        let removed_segments = cut(shared, to).await.map_err(|error| {
            let cause = format!("truncating the replica's log to {to}: {error}");
            shared.poison(cause.clone());
            StoreError::Poisoned(cause)
        })?;
        shared.replica.update_stats(|stats| stats.truncations += 1);
        shared.replica.notify_progress();
        tracing::warn!(
            "replica {} truncated from {from} to {to} (removed {removed_segments} segment(s))",
            shared.config.dir.display()
        );
        Ok(ReplicaTruncated {
            from,
            to,
            removed_segments,
        })
    }
}

/// Refuses an offset that is not a segment base of the store's shard.
fn check_segment_base(shared: &Shared, base: u64) -> Result<(), ReplicaStartError> {
    let shard_base = shared.config.offset_base();
    let segment_size = shared.log.segment_size();
    let same_shard = base >> 56 == shard_base >> 56;
    if base < shard_base || !(base - shard_base).is_multiple_of(segment_size) || !same_shard {
        return Err(ReplicaStartError::NotSegmentBase {
            base,
            shard_base,
            segment_size,
        });
    }
    Ok(())
}

impl Store {
    /// Starts a replica's log again at `base`, a segment base (its master's minimum, when
    /// the replica fell below what its master retains): every segment, every queue entry
    /// and every index file goes, then the log begins at `base` as
    /// [`Store::start_replica_at`] makes it. A crash part way leaves the store empty or
    /// started at `base` (recovery scans from the first present segment), never a mix.
    pub async fn restart_replica_at(
        &self,
        base: u64,
    ) -> Result<ReplicaTruncated, ReplicaStartError> {
        let store = self.clone();
        let change = async move { store.restart_replica_steps(base).await };
        match to_the_end(&self.shared, "replica restart", change).await {
            Ok(done) => done,
            Err(error) => Err(error.into()),
        }
    }

    async fn restart_replica_steps(
        &self,
        base: u64,
    ) -> Result<ReplicaTruncated, ReplicaStartError> {
        let shared = &self.shared;
        if shared.role.get() != StoreRole::Replica {
            return Err(ReplicaStartError::NotReplica);
        }
        let _busy = BusyGuard::take(&shared.replica).ok_or(ReplicaStartError::Busy)?;
        refuse_if_stopping(shared)?;
        check_segment_base(shared, base)?;
        let from = super::replica::received_end(shared);
        let _cleaning = shared.cleaning.lock().await;
        let _checkpointing = shared.checkpoint_lock.lock().await;
        let _flushing = shared.flush_lock.lock().await;
        let removed_segments = restart(shared, base).await.map_err(|error| {
            let cause = format!("starting the replica's log again at {base}: {error}");
            shared.poison(cause.clone());
            StoreError::Poisoned(cause)
        })?;
        shared.replica.update_stats(|stats| stats.truncations += 1);
        shared.replica.notify_progress();
        tracing::warn!(
            "replica {} starts again at its master's offset {base}: dropped its log up to \
             {from} ({removed_segments} segment(s))",
            shared.config.dir.display()
        );
        Ok(ReplicaTruncated {
            from,
            to: base,
            removed_segments,
        })
    }
}

/// A poisoned store refuses; so does one whose stop began: the stop took the replica slot
/// before this task did and then let it go (`drop_incomplete`), and its clean checkpoint
/// must not race a cut.
fn refuse_if_stopping(shared: &Shared) -> Result<(), StoreError> {
    match shared.poisoned() {
        Some(error) => Err(error),
        None if shared.closing.get() => Err(StoreError::ShuttingDown),
        None => Ok(()),
    }
}

/// Runs `change`, a cut of the replica's files that must not stop part way, as a task of
/// its own, and returns its outcome. Its caller may be dropped meanwhile: a clean stop
/// aborts the HA stream that awaits it. Stopped between cutting the log and moving the
/// positions, the cut would leave positions that claim zeroed bytes, and the stop would
/// write them into a clean checkpoint (the next start serves the zeros as records). As a
/// task it goes on: the stop waits for the replica slot it holds (`drop_incomplete`), so
/// for its end; an abandon (a kill) aborts it with the store's other tasks, and recovery
/// finishes the cut from the checkpoint it lowered first. A panic in it poisons the store,
/// as one in any store task does.
async fn to_the_end<T: 'static>(
    shared: &Rc<Shared>,
    name: &'static str,
    change: impl Future<Output = T> + 'static,
) -> Result<T, StoreError> {
    if shared.closing.get() {
        return Err(StoreError::ShuttingDown);
    }
    let (done, outcome) = tokio::sync::oneshot::channel();
    let watched = watched(shared, Watchee::Shard(name), change);
    let task = tokio::task::spawn_local(async move {
        if let Some(output) = watched.await {
            let _ = done.send(output);
        }
    });
    {
        let mut tasks = shared.tasks.borrow_mut();
        // One such task per handshake: the finished ones go.
        tasks.retain(|task| !task.is_finished());
        tasks.push(task);
    }
    // No outcome: the task panicked (the store is poisoned) or the store was abandoned.
    outcome
        .await
        .map_err(|_| shared.poisoned().unwrap_or(StoreError::ShuttingDown))
}

/// The steps of [`Store::restart_replica_at`]; returns the segments removed.
async fn restart(shared: &Shared, base: u64) -> Result<usize, StoreError> {
    let io_error =
        |context: &'static str| move |error: std::io::Error| StoreError::from_io(context, &error);
    let shard_base = shared.config.offset_base();
    // From here a crash recovers an empty store, or (once the new segment exists) one
    // started at `base`.
    flush::lower_checkpoint(shared, shard_base).await?;
    let removed = shared.log.segments.borrow().starts().len();
    shared
        .log
        .segments
        .borrow_mut()
        .remove_from(shard_base)
        .map_err(io_error("removing the CommitLog"))?;
    cut_entries(shared, shard_base).await?;
    shared
        .log
        .segment_file(base)
        .await
        .map_err(io_error("creating the CommitLog segment"))?;
    move_to(shared, base);
    flush::checkpoint(shared, false).await?;
    Ok(removed)
}

/// Cuts every ConsumeQueue and the index before their first entry at or past `to`.
async fn cut_entries(shared: &Shared, to: u64) -> Result<(), StoreError> {
    for queue in shared.all_queues() {
        queue
            .cut_from(LogPos::new(to))
            .await
            .map_err(|error| StoreError::from_io("cutting a consume queue", &error))?;
    }
    if let Some(index) = &shared.index {
        index
            .cut_from(to)
            .await
            .map_err(|error| StoreError::from_io("cutting the index", &error))?;
    }
    Ok(())
}

/// Refuses a store that holds anything: records, segments or queues.
fn check_empty(shared: &Shared) -> Result<(), ReplicaStartError> {
    let start = shared.log_start();
    let end = shared.log.written_pos();
    let segments = shared.log.segments.borrow().starts().len();
    let queues = shared.all_queues().len();
    if segments > 0 || end != shared.config.offset_base() || queues > 0 {
        return Err(ReplicaStartError::NotEmpty { start, end, queues });
    }
    Ok(())
}

/// Every position of the log, the stream's and the waiters' at `end`.
fn move_to(shared: &Shared, end: u64) {
    shared.log.reset_positions(end);
    shared.dispatched_pos.set(end);
    shared
        .replicated_pos
        .set(shared.replicated_pos.get().min(end));
    shared.zeroed_until.set(end);
    shared.replica.reset(end);
    super::append::restart_waiters(shared, end);
}

/// Checks that `to` is a record boundary the replica holds: the log's start, the end of
/// its whole records, a segment base, or where a whole record that names its position
/// starts (or the blank closing its segment).
fn check_boundary(shared: &Shared, to: u64) -> Result<(), ReplicaTruncateError> {
    let (start, end) = (shared.log_start(), shared.log.written_pos());
    if to < start {
        return Err(ReplicaTruncateError::BelowStart { to, start });
    }
    if to > end {
        return Err(ReplicaTruncateError::PastEnd { to, end });
    }
    let segment_start = shared.log.segment_start(to);
    if to == end || to == segment_start {
        return Ok(());
    }
    let segment_end = segment_start + shared.log.segment_size();
    let not_boundary = |why: String| ReplicaTruncateError::NotRecordBoundary { to, why };
    let header = shared
        .log
        .read(to, record::BLANK_RECORD_LEN)
        .map_err(|error| not_boundary(error.to_string()))?;
    let size = u32::from_be_bytes(header[..4].try_into().expect("4 bytes"));
    let len = u64::from(size).clamp(to_u64(record::BLANK_RECORD_LEN), segment_end - to);
    let bytes = shared
        .log
        .read(to, to_usize(len))
        .map_err(|error| not_boundary(error.to_string()))?;
    match record::decode(&bytes, Verify::Full) {
        Ok(Decoded::Record(view)) if claims_position(to, &view) => Ok(()),
        Ok(Decoded::Record(view)) => Err(not_boundary(format!(
            "the record there names phys offset {}",
            view.phys_offset
        ))),
        Ok(Decoded::Blank { len }) if to + u64::from(len) == segment_end => Ok(()),
        Ok(Decoded::Blank { len }) => Err(not_boundary(format!(
            "a blank of {len} bytes that does not reach the segment end"
        ))),
        Err(error) => Err(not_boundary(error.to_string())),
    }
}

/// The steps of the module docs; returns the segments removed.
async fn cut(shared: &Shared, to: u64) -> Result<usize, StoreError> {
    let io_error =
        |context: &'static str| move |error: std::io::Error| StoreError::from_io(context, &error);
    flush::lower_checkpoint(shared, to).await?;
    let removed = cut_log_at(shared, to)
        .await
        .map_err(io_error("cutting the CommitLog"))?;
    cut_entries(shared, to).await?;
    // What stays must be durable before the positions say so: under ASYNC_FLUSH the
    // flusher may not have synced it yet.
    let flushed = shared.log.flushed_pos().min(to);
    super::segment::SegmentSet::sync_range(&shared.log.segments, flushed, to)
        .await
        .map_err(io_error("syncing the CommitLog below the cut"))?;
    move_to(shared, to);
    flush::checkpoint(shared, false).await?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::super::replica::{BusyGuard, ReplicaState};

    #[test]
    fn a_take_that_finds_the_slot_held_leaves_it_held() {
        let state = ReplicaState::new(0);
        let held = BusyGuard::take(&state).expect("a free slot");
        assert!(BusyGuard::take(&state).is_none(), "a held slot taken again");
        assert!(
            BusyGuard::take(&state).is_none(),
            "a failed take freed the slot its holder still holds"
        );
        drop(held);
        assert!(BusyGuard::take(&state).is_some(), "a freed slot not taken");
    }
}
