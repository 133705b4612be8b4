//! The replica side of the store (D14): a store written not by puts but by byte ranges of
//! its master's CommitLog, byte-identical per shard, so physical offsets (and offsetMsgIds)
//! mean the same on both.
//!
//! ```text
//!   master's log  | r1 | r2 | r3 ...... | r4 | blank ...|| r5 ...
//!   frames        [at=a  )[at=b          )[at=c      )  [at=next segment base ...
//!                         ^ a frame may end mid-record, never past its segment's end
//!
//!   replica:      records end ≤ received end (next `at`)
//!                 [whole records, dispatched][incomplete record: written, kept in memory]
//! ```
//!
//! [`Store::append_replica`] takes the frame at `at`, which must be where the last one
//! ended (the received end). The frame is checked first (`replica_verify.rs`: every
//! record it completes passes recovery's checks and continues its queue), then written
//! with one write, then the whole records are made durable as the flush mode requires
//! (SYNC_FLUSH: synced in the same call; ASYNC_FLUSH: the flusher syncs later) and
//! dispatched with the one dispatch function (`dispatch.rs`): visible to pulls on the
//! replica. An incomplete record at the frame's end is written too (byte identity) and
//! kept in memory until the next frame completes it; it is never visible, and the log's
//! positions (written, flushed, the checkpoint's safe offset) stay at whole records, so
//! recovery cuts such a tail as torn. A blank record closes its segment: the next frame
//! starts at the next segment's base (or goes on with the blank's zeros up to it).
//!
//! A record that fails a check is a broken or lying peer: the frame is written only up to
//! it, the bytes of it earlier frames wrote are zeroed (synced), and the call says where
//! and why. Nothing past the last good record is visible or survives.
//!
//! Invariants (asserted):
//! - records end == the CommitLog's written position, a record boundary; `received` is
//!   records end plus the incomplete bytes, or lies inside the blank that ended the
//!   segment (then records end is the next segment's base);
//! - a replica refuses puts ([`StoreError::Replica`]) and a master refuses frames; one
//!   append or truncation runs at a time (a second is refused, `Busy`).
//!
//! What the replica reports to its master ([`ReplicaProgress::ack`]): the end of its whole
//! records, written under ASYNC_FLUSH (in the page cache, like RocketMQ's slave), flushed
//! under SYNC_FLUSH (which this call reaches before it returns).
//!
//! Pipelining: an append awaits its write (and, under SYNC_FLUSH, its sync). The HA stream
//! task (`replication::slave_link`) reads the socket into a bounded queue while an append
//! runs, and joins what arrived meanwhile, contiguous frames of one segment, into the next
//! call (`replication::slave_batch`): the network and the disk overlap, one sync covers
//! every frame of a step, and a slow disk fills the queue instead of stalling the reads.

use std::cell::{Cell, RefCell};

use bytes::Bytes;
use tokio::sync::Notify;

use super::commit_log::LogIoError;
use super::dispatch::{dispatch_record, DispatchRecord};
use super::position::{to_u64, to_usize, LogPos};
use super::record::{self, Decoded, Verify};
use super::replica_verify::{plan, plan_in_blank, Plan};
use super::{Shared, Store, StoreError};
use crate::config::{BrokerRole, FlushMode};

pub use super::replica_cut::{ReplicaStartError, ReplicaTruncateError, ReplicaTruncated};
pub use super::replica_source::{ReplicaRange, ReplicaRangeError};
pub use super::replica_verify::RecordFault;

/// Who writes a store's CommitLog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreRole {
    /// Puts, through the appender.
    Master,
    /// Its master's stream ([`Store::append_replica`]); puts are refused.
    Replica,
}

impl StoreRole {
    /// The role a store opens in: a SLAVE's is a replica.
    pub fn for_broker_role(role: BrokerRole) -> StoreRole {
        match role {
            BrokerRole::Slave => StoreRole::Replica,
            BrokerRole::AsyncMaster | BrokerRole::SyncMaster => StoreRole::Master,
        }
    }
}

/// Why [`Store::append_replica`] refused a frame. Nothing of a refused frame is visible.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaAppendError {
    #[error("the store is a master: its log is written by puts, not by a master's stream")]
    NotReplica,
    #[error("another replica append or truncation of this store is under way")]
    Busy,
    #[error("a frame at {at} does not continue the replica's log, which goes on at {expected}")]
    Discontinuous { at: u64, expected: u64 },
    #[error(
        "a frame of {len} bytes at {at} crosses the end of CommitLog segment {segment_start} \
         at {segment_end}"
    )]
    CrossesSegment {
        at: u64,
        len: u64,
        segment_start: u64,
        segment_end: u64,
    },
    #[error(
        "replicated record at {at} refused: {fault}; the replica's log was cut back to \
         {cut_to}"
    )]
    BadRecord {
        at: u64,
        fault: RecordFault,
        /// Where the next frame must start: the end of the last good record.
        cut_to: u64,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why [`Store::set_role`] refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RoleError {
    #[error("{pending} puts are still queued or being written: the store cannot become a replica")]
    PutsInFlight { pending: usize },
    #[error(
        "the replica holds an incomplete record in [{records_end}, {received}): truncate to \
         {records_end} before it becomes a master"
    )]
    IncompleteRecord { records_end: u64, received: u64 },
    #[error("another replica append or truncation of this store is under way")]
    Busy,
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAppended {
    /// Whole records the frame completed (dispatched and visible).
    pub records: usize,
    /// Where the whole records end now.
    pub records_end: u64,
    /// Where the next frame must start.
    pub next_at: u64,
}

/// A replica's position in its master's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaProgress {
    /// Where the next frame must start: the end of the bytes received and written.
    pub next_at: u64,
    /// Where the whole (verified, dispatched) records end: a record boundary.
    pub records_end: u64,
    /// What to report to the master: the whole records as durable as the flush mode
    /// requires (written under ASYNC_FLUSH, flushed under SYNC_FLUSH).
    pub ack: u64,
}

/// Counters of the replica side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    pub frames: u64,
    pub bytes: u64,
    pub records: u64,
    /// Frames refused for a bad record.
    pub bad_records: u64,
    pub truncations: u64,
}

/// A replica's stream state (in [`Shared`]).
pub(crate) struct ReplicaState {
    /// Where the next frame must start.
    received: Cell<u64>,
    /// The bytes `[records end, received)`: an incomplete record, already written.
    incomplete: RefCell<Bytes>,
    /// While `received` lies inside the blank that closed its segment: that segment's end,
    /// where a frame may start too.
    blank_until: Cell<Option<u64>>,
    busy: Cell<bool>,
    progress: Notify,
    stats: Cell<ReplicaStats>,
}

impl ReplicaState {
    pub fn new(end: u64) -> ReplicaState {
        ReplicaState {
            received: Cell::new(end),
            incomplete: RefCell::new(Bytes::new()),
            blank_until: Cell::new(None),
            busy: Cell::new(false),
            progress: Notify::new(),
            stats: Cell::new(ReplicaStats::default()),
        }
    }

    /// Forgets the stream's state: the next frame starts at `end`, a record boundary.
    pub fn reset(&self, end: u64) {
        self.received.set(end);
        *self.incomplete.borrow_mut() = Bytes::new();
        self.blank_until.set(None);
    }

    pub fn update_stats(&self, change: impl FnOnce(&mut ReplicaStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }

    pub fn notify_progress(&self) {
        self.progress.notify_waiters();
    }
}

/// The end of what a replica received: its next frame's start, or its whole records' end
/// while it is inside a blank.
pub(crate) fn received_end(shared: &Shared) -> u64 {
    shared.replica.received.get().max(shared.log.written_pos())
}

/// Holds the store's one replica operation slot; frees it when dropped.
pub(crate) struct BusyGuard<'a>(&'a ReplicaState);

impl<'a> BusyGuard<'a> {
    /// The slot, or `None` when an append or truncation holds it.
    pub fn take(state: &'a ReplicaState) -> Option<BusyGuard<'a>> {
        // Built only when taken: a guard built and dropped by a failed take would free
        // the slot its holder still holds (`then_some` builds its argument either way).
        (!state.busy.replace(true)).then(|| BusyGuard(state))
    }
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.set(false);
        // Whatever the operation did, those waiting for the slot (a stop) look again.
        self.0.progress.notify_waiters();
    }
}

/// Waits until no replica operation holds the slot, then takes it.
async fn wait_for_slot(state: &ReplicaState) -> BusyGuard<'_> {
    loop {
        // Created before the check: a release after it wakes this wait.
        let released = state.progress.notified();
        if let Some(guard) = BusyGuard::take(state) {
            return guard;
        }
        released.await;
    }
}

impl Store {
    /// Master or replica.
    pub fn role(&self) -> StoreRole {
        self.shared.role.get()
    }

    /// Switches the store's role. To replica: refused while puts are queued or being
    /// written; the stream goes on at the written end. To master (a promotion): refused
    /// while an incomplete record is held ([`Store::truncate_replica`] to the records'
    /// end first); puts resume at the written end, acknowledged as the store's config
    /// says (a SLAVE's config: as an ASYNC_MASTER).
    pub fn set_role(&self, role: StoreRole) -> Result<(), RoleError> {
        let shared = &self.shared;
        let _busy = BusyGuard::take(&shared.replica).ok_or(RoleError::Busy)?;
        let written = shared.log.written_pos();
        match role {
            StoreRole::Replica => {
                let pending = shared.pending.borrow().len() + shared.in_flight.borrow().len();
                let waiting = shared.waiters.borrow().len();
                if pending + waiting > 0 || shared.appender_busy.get() {
                    return Err(RoleError::PutsInFlight {
                        pending: pending + waiting,
                    });
                }
                shared.replica.reset(written);
            }
            StoreRole::Master => {
                let received = shared.replica.received.get();
                if received > written {
                    return Err(RoleError::IncompleteRecord {
                        records_end: written,
                        received,
                    });
                }
                shared.replica.reset(written);
                super::append::restart_waiters(shared, written);
            }
        }
        if shared.role.replace(role) != role {
            tracing::warn!(
                "store {} is now a {role:?} at {written}",
                shared.config.dir.display()
            );
        }
        Ok(())
    }

    /// The replica's position in its master's log.
    pub fn replica_progress(&self) -> ReplicaProgress {
        let shared = &self.shared;
        let log = &shared.log;
        ReplicaProgress {
            next_at: shared.replica.received.get(),
            records_end: log.written_pos(),
            ack: match shared.config.flush_mode {
                FlushMode::Sync => log.flushed_pos(),
                FlushMode::Async => log.written_pos(),
            },
        }
    }

    /// Resolves when the replica's progress moves after this call (an append or a
    /// truncation finished): when the HA stream reports its ack.
    pub fn replica_progressed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.replica.progress.notified()
    }

    pub fn replica_stats(&self) -> ReplicaStats {
        self.shared.replica.stats.get()
    }

    /// Appends a frame of the master's CommitLog: `bytes` are the master's log from `at`,
    /// which must be [`ReplicaProgress::next_at`] (or, while that lies in the blank that
    /// closed a segment, the next segment's base), within one segment. Returns once the
    /// frame is written, its whole records as durable as the flush mode requires and
    /// dispatched (visible). See the module docs for what a refusal leaves.
    pub async fn append_replica(
        &self,
        at: u64,
        bytes: Bytes,
    ) -> Result<ReplicaAppended, ReplicaAppendError> {
        let shared = &self.shared;
        check_writable(shared)?;
        let _busy = BusyGuard::take(&shared.replica).ok_or(ReplicaAppendError::Busy)?;
        let segment_end = check_frame(shared, at, to_u64(bytes.len()))?;
        let blank_until = shared.replica.blank_until.get();
        if blank_until == Some(at) {
            // The master skipped the rest of the blank: the next segment starts here.
            shared.replica.reset(at);
        }
        let plan = if blank_until.is_some_and(|end| end != at) {
            plan_in_blank(shared.log.written_pos(), at, &bytes, segment_end)
        } else {
            plan_frame(shared, &bytes, segment_end)
        };
        apply_plan(shared, at, &bytes, plan, segment_end).await
    }
}

fn plan_frame(shared: &Shared, bytes: &Bytes, segment_end: u64) -> Plan {
    let incomplete = shared.replica.incomplete.borrow().clone();
    plan(
        shared,
        shared.log.written_pos(),
        &incomplete,
        bytes,
        segment_end,
    )
}

/// Refuses a frame to a master, or to a store that takes no writes.
fn check_writable(shared: &Shared) -> Result<(), ReplicaAppendError> {
    if shared.role.get() != StoreRole::Replica {
        return Err(ReplicaAppendError::NotReplica);
    }
    if let Some(error) = shared.poisoned() {
        return Err(error.into());
    }
    if shared.closing.get() {
        return Err(StoreError::ShuttingDown.into());
    }
    Ok(())
}

/// Checks where a frame starts and that it stays in its segment; returns the segment's
/// end.
fn check_frame(shared: &Shared, at: u64, len: u64) -> Result<u64, ReplicaAppendError> {
    let replica = &shared.replica;
    let expected = replica.received.get();
    if at != expected && replica.blank_until.get() != Some(at) {
        return Err(ReplicaAppendError::Discontinuous { at, expected });
    }
    let segment_start = shared.log.segment_start(at);
    let segment_end = segment_start + shared.log.segment_size();
    if at + len > segment_end {
        return Err(ReplicaAppendError::CrossesSegment {
            at,
            len,
            segment_start,
            segment_end,
        });
    }
    Ok(segment_end)
}

/// Writes what the plan allows, advances the positions, dispatches the whole records, and
/// cuts back a refused record's bytes.
async fn apply_plan(
    shared: &Shared,
    at: u64,
    frame: &Bytes,
    plan: Plan,
    segment_end: u64,
) -> Result<ReplicaAppended, ReplicaAppendError> {
    // The next segment exists before the blank that points at it is written, as the
    // appender's roll has it (`append.rs`).
    if plan.closes_segment {
        shared
            .log
            .segment_file(segment_end)
            .await
            .map_err(|error| {
                StoreError::from_io(&format!("creating CommitLog segment {segment_end}"), &error)
            })?;
    }
    let write_end = plan
        .fault
        .as_ref()
        .map_or(at + to_u64(frame.len()), |f| f.0);
    if write_end > at {
        write_bytes(shared, at, frame.slice(..to_usize(write_end - at))).await?;
    }
    let advanced = plan.records_end > shared.log.written_pos();
    if advanced {
        make_durable(shared, plan.records_end).await?;
    }
    dispatch_plan(shared, &plan)?;
    let replica = &shared.replica;
    replica.update_stats(|stats| {
        stats.frames += 1;
        stats.bytes += write_end.saturating_sub(at);
        stats.records += to_u64(plan.records.len());
    });
    if let Some((bad, fault)) = plan.fault {
        cut_incomplete(shared, bad, at).await?;
        let cut_to = shared.log.written_pos();
        replica.reset(cut_to);
        replica.update_stats(|stats| stats.bad_records += 1);
        replica.notify_progress();
        tracing::warn!(
            "replica {}: record at {bad} refused ({fault}); cut back to {cut_to}",
            shared.config.dir.display()
        );
        return Err(ReplicaAppendError::BadRecord {
            at: bad,
            fault,
            cut_to,
        });
    }
    replica.received.set(write_end);
    replica.blank_until.set(plan.blank_until);
    *replica.incomplete.borrow_mut() = plan.incomplete();
    assert_state(shared);
    replica.notify_progress();
    Ok(ReplicaAppended {
        records: plan.records.len(),
        records_end: plan.records_end,
        next_at: write_end,
    })
}

/// The invariants of the module docs.
fn assert_state(shared: &Shared) {
    let replica = &shared.replica;
    let (received, records_end) = (replica.received.get(), shared.log.written_pos());
    let incomplete = to_u64(replica.incomplete.borrow().len());
    match replica.blank_until.get() {
        None => assert_eq!(
            records_end + incomplete,
            received,
            "a replica's whole records end at {records_end} and its {incomplete} incomplete \
             bytes must reach the received end {received}"
        ),
        Some(segment_end) => assert!(
            incomplete == 0 && records_end == segment_end && received < segment_end,
            "inside a blank a replica received up to {received}, before the segment end \
             {segment_end} where its records end ({records_end}), with no incomplete bytes \
             ({incomplete})"
        ),
    }
}

/// Writes `bytes` at `at` (within one segment); a failure poisons the store (D11).
async fn write_bytes(shared: &Shared, at: u64, bytes: Bytes) -> Result<(), StoreError> {
    let segment_start = shared.log.segment_start(at);
    let file = shared
        .log
        .segment_file(segment_start)
        .await
        .map_err(|error| {
            StoreError::from_io(
                &format!("creating CommitLog segment {segment_start}"),
                &error,
            )
        })?;
    let len = bytes.len();
    if let Err(error) = shared.disk.write_at(file, at - segment_start, bytes).await {
        return Err(poison(
            shared,
            LogIoError::Write {
                len,
                segment_start,
                at: at - segment_start,
                error,
            },
        ));
    }
    Ok(())
}

fn poison(shared: &Shared, cause: LogIoError) -> StoreError {
    let cause = cause.to_string();
    shared.poison(cause.clone());
    StoreError::Poisoned(cause)
}

/// The whole records up to `end` are written: so is the log's written position, and under
/// SYNC_FLUSH its flushed one once the segments holding them are synced.
async fn make_durable(shared: &Shared, end: u64) -> Result<(), StoreError> {
    let log = &shared.log;
    let from = log.written_pos();
    log.set_write_pos(end);
    log.set_written_pos(end);
    if shared.config.flush_mode == FlushMode::Sync {
        super::segment::SegmentSet::sync_range(&log.segments, log.flushed_pos(), end)
            .await
            .map_err(|error| {
                poison(
                    shared,
                    LogIoError::RangeSync {
                        from,
                        to: end,
                        error,
                    },
                )
            })?;
        shared.update_stats(|stats| stats.log_syncs += 1);
        log.set_flushed_pos(end);
    }
    Ok(())
}

/// Makes the plan's whole records visible, in order, with the one dispatch function. They
/// were checked before they were written, so a refusal here is a bug or a failed queue
/// file: it poisons the store.
fn dispatch_plan(shared: &Shared, plan: &Plan) -> Result<(), StoreError> {
    let hook = shared.visible_hook.borrow().clone();
    let mut last_topic: Option<String> = None;
    for &offset in &plan.records {
        let phys = plan.start + to_u64(offset);
        let Ok(Decoded::Record(view)) = record::decode(&plan.buf[offset..], Verify::Structure)
        else {
            unreachable!("the record at {phys} was verified whole before it was written");
        };
        let refused = |why: String| {
            let cause = format!("replicated record at {phys} cannot be dispatched: {why}");
            shared.poison(cause.clone());
            StoreError::Poisoned(cause)
        };
        let queue = super::recovery::queue_for(shared, view.topic, view.queue_id)
            .map_err(|error| refused(error.to_string()))?;
        let record = DispatchRecord::from_view(LogPos::new(phys), &view)
            .ok_or_else(|| refused("negative queue offset".to_string()))?;
        let dispatched =
            dispatch_record(shared, &queue, &record).map_err(|why| refused(why.to_string()))?;
        if let Err(error) = dispatched.indexed {
            shared.update_stats(|stats| stats.index_errors += 1);
            tracing::warn!("replicated record at {phys} is stored but not indexed: {error}");
        }
        // Once per run of one topic, as the appender tells it.
        if let Some(hook) = &hook {
            if last_topic.as_deref() != Some(view.topic) {
                hook(view.topic);
                last_topic = Some(view.topic.to_string());
            }
        }
    }
    if plan.records_end > shared.dispatched_pos.get() {
        shared.dispatched_pos.set(plan.records_end);
    }
    if !plan.records.is_empty() {
        shared.arrivals.notify_waiters();
    }
    Ok(())
}

/// Zeroes `[from, to)`, the bytes of a refused record that earlier frames wrote, and
/// syncs them: they must not survive.
async fn cut_incomplete(shared: &Shared, from: u64, to: u64) -> Result<(), StoreError> {
    if from >= to {
        return Ok(());
    }
    write_bytes(shared, from, Bytes::from(vec![0u8; to_usize(to - from)])).await?;
    super::segment::SegmentSet::sync_range(&shared.log.segments, from, to)
        .await
        .map_err(|error| poison(shared, LogIoError::RangeSync { from, to, error }))
}

/// A clean stop of a replica: its incomplete record's bytes are zeroed, so the clean
/// checkpoint's end is the end of the log on disk too.
pub(crate) async fn drop_incomplete(shared: &Shared) -> Result<(), StoreError> {
    if shared.role.get() != StoreRole::Replica || shared.poisoned().is_some() {
        return Ok(());
    }
    // An append under way finishes first; the stop refuses later ones (`closing`), which
    // it sets before this returns and anything else runs.
    let _busy = wait_for_slot(&shared.replica).await;
    let (records_end, received) = (shared.log.written_pos(), shared.replica.received.get());
    if received > records_end {
        cut_incomplete(shared, records_end, received).await?;
    }
    shared.replica.reset(records_end);
    Ok(())
}
