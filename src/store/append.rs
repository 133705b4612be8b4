//! The appender: the one task that writes the CommitLog (group commit, D6), as three
//! stages around the queue of waiters released by offset (`waiters.rs`).
//!
//! ```text
//!   pending ─▶ 1. encode + write ──────▶ 2. make durable ───▶ 3. release
//!   puts       one buffer per touched     SYNC_FLUSH: one      every waiter whose end the
//!              segment, one write; the    fdatasync per        required conditions reached:
//!              batch is one waiter at     segment, then        ConsumeQueue entries in order,
//!              its end; then Written      Flushed = end        then the answers, then the
//!              = end                      (ASYNC: nothing)     arrivals wake (visible, D7)
//!
//! Stage 3 makes each record findable with the dispatch function recovery shares
//! (`dispatch.rs`).
//! ```
//!
//! Under SYNC_FLUSH a batch's write also carries zeros past its end once in a while
//! ([`zero_ahead`]), so that later fsyncs overwrite written blocks instead of converting
//! the segment's fallocated ones.
//!
//! Each turn takes every queued put (up to `max_batch_bytes`) as one batch. Under
//! SYNC_FLUSH, once a batch is answered, the next one first waits a bounded few turns for
//! the producers just answered (`gather.rs`), so producers that wait for each answer share
//! one fsync instead of taking turns in halves. Stage 1
//! encodes it (assigning queue offset, physical offset and store time), registers it as
//! one waiter at its end offset and writes it with one write per touched segment; the
//! write's completion advances the Written condition. Stage 2, under SYNC_FLUSH, syncs the
//! batch within the same turn, before the next batch is taken, and advances Flushed: puts
//! that arrive meanwhile wait and ride the next turn, so one fsync serves every producer
//! that was waiting for it, with no task hop in between. Under ASYNC_FLUSH the flusher
//! syncs in the background (`flush.rs`) and the stage does nothing. Stage 3 ([`release`])
//! releases, in offset order, every waiter whose end all the required conditions
//! (`AckCondition::for_flush_mode`) have reached: ConsumeQueue entries first, then the
//! answers (inside the answer scope, [`super::Store::set_answer_scope`]), then one wake
//! of the long-polling pulls.
//!
//! The replica's condition (SYNC_MASTER, D14): the store requires
//! `AckCondition::Replicated` besides its flush mode's; the turn's release then finds its
//! batch still held, and [`super::Store::confirm_replicated`] advances Replicated and
//! releases ([`replica_reached`]). A batch written while no replica is attached waives the
//! replica and is answered SlaveNotAvailable once flushed; a replica going away, or the
//! store stopping, waives it for every batch still held ([`waive_replica`]), as does the
//! controller-mode replica gate going down ([`follow_replica_gate`]). The flush
//! watchdog times out puts held in the queue, saying whether the flush or the replica was
//! missing. New sources of CommitLog records (retry, delay) are puts like any other and
//! need nothing here.
//!
//! A failed write or sync poisons the store (D11): every waiter still queued is answered
//! with the cause and every later put is refused. A full disk met while creating the next
//! segment fails only the puts that needed it, without poisoning: nothing was written.

use std::rc::Rc;

use bytes::Bytes;

use super::commit_log::LogIoError;
use super::consume_queue::{AppendOutcome, ConsumeQueue};
use super::dispatch::{dispatch_record, DispatchRecord, Dispatched};
use super::position::{micros_u64, to_u32, to_u64, to_usize, LogPos, QueueOffset};
use super::record::{self, BLANK_RECORD_LEN};
use super::waiters::{AckCondition, ReplicaWait};
use super::{PendingPut, Placement, PutStatus, Shared, StoreError, StoreTask, WriteLease};
use crate::config::FlushMode;
use crate::io::FileId;

/// The bytes of one batch bound for one segment.
struct Chunk {
    segment_start: u64,
    file: FileId,
    position: u64,
    bytes: Vec<u8>,
    /// Ends with the blank record that closes its segment: nothing follows it there.
    closes_segment: bool,
}

/// One placed put of a batch: what its release needs.
pub(crate) struct Encoded {
    pub put: PendingPut,
    queue: Rc<ConsumeQueue>,
    placement: Placement,
}

/// A written batch, one entry of the waiter queue.
pub(crate) struct Batch {
    pub puts: Vec<Encoded>,
    /// What its puts hear when it is released: Ok, or why it was not replicated when the
    /// replica's condition was waived for it (SlaveNotAvailable, FlushSlaveTimeout).
    pub status: PutStatus,
    /// Whether it is released only once a replica confirmed it: false when it was written
    /// without needing one (the replica gate was down) or its wait was waived.
    pub replicated: bool,
}

pub(crate) async fn run_appender(shared: Rc<Shared>) {
    loop {
        // Checked before the batch leaves `pending`: were it checked after, a failure would
        // drop a batch that is neither pending nor in flight, and its puts would never hear.
        assert!(
            !shared.appender_busy.get() && shared.in_flight.borrow().is_empty(),
            "the appender takes a batch while busy ({}) with {} puts of the last one in flight",
            shared.appender_busy.get(),
            shared.in_flight.borrow().len()
        );
        if gather_wait(&shared) {
            // Not a timer: tokio's has 1 ms granularity, more than the whole wait. Each
            // yield lets the shard poll its sockets, so the answered producers' next puts
            // are read meanwhile; the wait is bounded in time and in turns (`gather.rs`).
            tokio::task::yield_now().await;
            continue;
        }
        let batch = take_batch(&shared);
        if batch.is_empty() {
            shared.appender_idle.notify_waiters();
            if shared.closing.get() && shared.pending.borrow().is_empty() {
                return;
            }
            shared.appender_wake.notified().await;
            continue;
        }
        shared.appender_busy.set(true);
        *shared.in_flight.borrow_mut() = batch.iter().map(|put| put.slot.clone()).collect();
        super::watch::panic_point(&shared, StoreTask::Appender);
        append_batch(&shared, batch).await;
        shared.in_flight.borrow_mut().clear();
        shared.appender_busy.set(false);
    }
}

/// Whether to wait a turn for the producers the last batch answered before taking the
/// next batch (`gather.rs`).
fn gather_wait(shared: &Shared) -> bool {
    let pending = shared.pending.borrow();
    if pending.is_empty() || !shared.gather.expecting() {
        // Nothing would be delayed (the appender sleeps until a put arrives), or nobody is
        // expected back (ASYNC_FLUSH, a spent wait): no scan of the queue, no clock read.
        return false;
    }
    let max_batch = shared.config.max_batch_bytes;
    // Only the bytes up to a full batch matter.
    let mut bytes = 0usize;
    for put in pending.iter() {
        bytes += to_usize(put.encoded_len);
        if bytes >= max_batch {
            break;
        }
    }
    let now = std::time::Instant::now();
    let decision = shared
        .gather
        .decide(pending.len(), bytes, max_batch, shared.closing.get(), now);
    decision == super::gather::Decision::Wait
}

fn take_batch(shared: &Shared) -> Vec<PendingPut> {
    let mut pending = shared.pending.borrow_mut();
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    while let Some(put) = pending.front() {
        if !batch.is_empty() && bytes + to_usize(put.encoded_len) > shared.config.max_batch_bytes {
            break;
        }
        bytes += to_usize(put.encoded_len);
        batch.push(pending.pop_front().expect("front exists"));
    }
    batch
}

/// One turn of the appender: the three stages for one batch.
async fn append_batch(shared: &Rc<Shared>, batch: Vec<PendingPut>) {
    if let Some(error) = shared.poisoned() {
        for put in batch {
            put.slot.answer(Err(error.clone()));
        }
        return;
    }
    // 1. Encode and write; the batch waits in the queue from here on.
    let Some(Encoding {
        mut chunks,
        batch,
        start,
        end,
    }) = encode(shared, batch).await
    else {
        return;
    };
    shared.log.set_write_pos(end);
    let (replica, status) = replica_wait(shared);
    shared.waiters.borrow_mut().register(
        end,
        Batch {
            puts: batch,
            status,
            replicated: replica == ReplicaWait::Wait,
        },
        replica,
    );
    if let Err(cause) = write_chunks(shared, &mut chunks).await {
        return fail(shared, cause);
    }
    shared.log.set_written_pos(end);
    time_replica_wait(shared, replica, end);
    reached(shared, AckCondition::Written, end);
    // 2. Make durable.
    if let Err(cause) = make_durable(shared, &chunks, end).await {
        return fail(shared, cause);
    }
    preallocate_ahead(shared, start, end);
    // 3. Release what the required conditions now allow.
    let answered = release(shared);
    expect_back(shared, answered);
}

/// Under SYNC_FLUSH, the `answered` producers just answered are expected back for the next
/// fsync (`gather.rs`). Counted from the answers made, not the batch just synced: under
/// SYNC_MASTER the batch waits on for its replica and its producers are not coming back
/// yet, so expecting them made every next batch wait out the gather window for nobody
/// (the SYNC_FLUSH pair at 0.74 of one SYNC_FLUSH node with the slave on a tmpfs). The
/// replica's confirmation, which answers them, sets the expectation instead.
pub(crate) fn expect_back(shared: &Shared, answered: usize) {
    if shared.config.flush_mode == FlushMode::Sync {
        shared.gather.answered(
            answered,
            shared.pending.borrow().len(),
            std::time::Instant::now(),
            shared.config.group_commit_max_wait,
        );
    }
}

/// Stage 2. Under SYNC_FLUSH: one fdatasync per segment the batch touched, in the
/// appender's turn (so the batch's fsync is its only one and the next batch waits for it),
/// then Flushed reaches `end`. Under ASYNC_FLUSH nothing: the timed flusher syncs on its
/// own clock (`flush.rs`).
async fn make_durable(shared: &Shared, chunks: &[Chunk], end: u64) -> Result<(), LogIoError> {
    if shared.config.flush_mode == FlushMode::Async {
        return Ok(());
    }
    let began = tokio::time::Instant::now();
    for chunk in chunks {
        if let Err(error) = shared.disk.sync_data(chunk.file).await {
            return Err(LogIoError::SegmentSync {
                segment_start: chunk.segment_start,
                error,
            });
        }
        shared.update_stats(|stats| stats.log_syncs += 1);
    }
    let took = began.elapsed();
    shared.update_stats(|stats| stats.log_sync_micros += micros_u64(took));
    shared.gather.synced(took);
    shared.log.set_flushed_pos(end);
    reached(shared, AckCondition::Flushed, end);
    Ok(())
}

/// `condition` has reached `end`: one more input to the queue's release limit (ignored
/// when the store does not require it).
fn reached(shared: &Shared, condition: AckCondition, end: u64) {
    shared.waiters.borrow_mut().advance(condition, end);
}

/// Empties the queue of waiters and restarts it at `end`, the log's written end, with the
/// conditions the store's config requires: at open, and when a replica becomes a master
/// (`replica.rs`).
pub(crate) fn restart_waiters(shared: &Shared, end: u64) {
    shared.confirm_times.forget();
    *shared.waiters.borrow_mut() = super::waiters::Waiters::new(
        AckCondition::required(shared.config.flush_mode, shared.config.broker_role),
        end,
    );
}

/// Notes when a batch that waits for the replica was written (`confirm_timing.rs`); one
/// waived meanwhile (the replica went away during the write) is not timed.
fn time_replica_wait(shared: &Shared, replica: ReplicaWait, end: u64) {
    let waits = replica == ReplicaWait::Wait
        && shared.replica_attached.get()
        && shared.waiters.borrow().requires(AckCondition::Replicated);
    if waits {
        shared
            .confirm_times
            .written(end, tokio::time::Instant::now());
    }
}

/// Whether a batch written now waits for a replica, and what its puts hear when released:
/// a store that requires a replica but has none attached waives it (SlaveNotAvailable at
/// once, as RocketMQ's `isSlaveOK` check at every put).
///
/// A replication watermark more than `replica_fallbehind_max` behind this batch's end
/// detaches the replica first, as the replication service would: the batches still held
/// for it are answered SlaveNotAvailable too (they are released in offset order, so one
/// held batch would otherwise hold every later one for its `slaveTimeout`). The distance is
/// looked at here, per batch, because a slave that stopped confirming (a stalled process,
/// a clogged path) sends nothing that would tell the replication service it fell behind:
/// only the puts move the written end away from it. The service attaches the replica again
/// when it reports within the bound.
fn replica_wait(shared: &Shared) -> (ReplicaWait, PutStatus) {
    let requires = shared.waiters.borrow().requires(AckCondition::Replicated);
    if !requires {
        return (ReplicaWait::Wait, PutStatus::Ok);
    }
    let gate = shared.replica_gate.borrow();
    if gate.as_ref().is_some_and(|gate| !gate.needed()) {
        return (ReplicaWait::Waived, PutStatus::Ok);
    }
    drop(gate);
    let behind = shared
        .log
        .write_pos()
        .saturating_sub(shared.replicated_pos.get());
    if shared.replica_attached.get() && behind > shared.config.replica_fallbehind_max {
        shared.replica_attached.set(false);
        waive_replica(shared, PutStatus::SlaveNotAvailable);
    }
    if !shared.replica_attached.get() {
        (ReplicaWait::Waived, PutStatus::SlaveNotAvailable)
    } else {
        (ReplicaWait::Wait, PutStatus::Ok)
    }
}

/// A replica confirmed the log up to `position` ([`super::Store::confirm_replicated`]):
/// releases what that allows. The queue's own mark starts where the store opened, so a
/// confirmation below it concerns no waiter.
pub(crate) fn replica_reached(shared: &Shared, position: u64) {
    {
        let mut waiters = shared.waiters.borrow_mut();
        if position
            <= waiters
                .position(AckCondition::Replicated)
                .unwrap_or(u64::MAX)
        {
            return;
        }
        waiters.advance(AckCondition::Replicated, position);
    }
    let answered = release(shared);
    if answered > 0 {
        expect_back(shared, answered);
    }
}

/// The replica gate is down (the controllers committed a SyncStateSet of this master
/// alone): batches written while it was up stop waiting for a replica and are answered
/// SEND_OK on their flush, as every batch written from now on is. The set is the
/// durability boundary (D18) and the gate is lowered only from a committed set, so no
/// election can pick a broker that lacks them; holding them for the slave that left the set
/// would only make their producers wait out `slaveTimeout` (the failover campaign's cut
/// between master and slave showed that gap; RocketMQ's master likewise counts the
/// acknowledgements against the set as it stands).
pub(crate) fn follow_replica_gate(shared: &Shared) {
    let lowered = shared
        .replica_gate
        .borrow()
        .as_ref()
        .is_some_and(|gate| !gate.needed());
    if lowered && shared.waiters.borrow().waits_for_replica() {
        waive_replica(shared, PutStatus::Ok);
    }
}

/// Stops every held batch from waiting for a replica: each releases on its flush alone
/// and its puts hear `status` (SlaveNotAvailable when the replica went away,
/// FlushSlaveTimeout when the store stops). Releases what that allows.
pub(crate) fn waive_replica(shared: &Shared, status: PutStatus) {
    shared.confirm_times.forget();
    shared.waiters.borrow_mut().waive_replica(|batch| {
        batch.status = status;
        batch.replicated = false;
    });
    let answered = release(shared);
    if answered > 0 {
        expect_back(shared, answered);
    }
}

/// Starts preallocating the next segment once a batch from `start` to `end` has used
/// half of its segment or rolled into the next.
fn preallocate_ahead(shared: &Rc<Shared>, start: u64, end: u64) {
    let log = &shared.log;
    if end - log.segment_start(start) > log.segment_size() / 2
        || log.segment_start(end) != log.segment_start(start)
    {
        log.preallocate_after(end, |future| {
            let hook = shared.clone();
            tokio::task::spawn_local(super::watch::watched(
                shared,
                super::watch::Watchee::Store(StoreTask::Preallocator),
                async move {
                    super::watch::panic_point(&hook, StoreTask::Preallocator);
                    future.await
                },
            ))
        });
    }
}

/// A batch encoded into the bytes of its segments, ready to write.
struct Encoding {
    chunks: Vec<Chunk>,
    /// The puts placed in `chunks`, in offset order (refused ones are answered already).
    batch: Vec<Encoded>,
    /// The log position the batch starts at, and the one after its last byte.
    start: u64,
    end: u64,
}

/// Encodes `batch` from the log's write position: the records, and the blank record that
/// closes a segment the batch does not fit in. Puts that cannot be placed are answered
/// here. `None` when nothing is left to write.
async fn encode(shared: &Shared, batch: Vec<PendingPut>) -> Option<Encoding> {
    let start = shared.log.write_pos();
    let current = match open_chunk(shared, start).await {
        Ok(chunk) => chunk,
        Err(error) => {
            for put in batch {
                put.slot.answer(Err(error.clone()));
            }
            return None;
        }
    };
    let total_bytes: usize = batch.iter().map(|put| to_usize(put.encoded_len)).sum();
    let mut encoder = Encoder {
        current,
        chunks: Vec::new(),
        pos: start,
        now: shared.clock.now_ms(),
        chunk_capacity: total_bytes.min(shared.config.max_batch_bytes),
    };
    encoder.current.bytes.reserve(encoder.chunk_capacity);
    let mut encoded: Vec<Encoded> = Vec::with_capacity(batch.len());
    // Once a segment cannot be created, the rest of the batch cannot be placed either.
    let mut refused: Option<StoreError> = None;
    for put in batch {
        if let Some(error) = &refused {
            put.slot.answer(Err(error.clone()));
            continue;
        }
        if !encoder.fits(shared, put.encoded_len) {
            if let Err(error) = encoder.roll(shared).await {
                put.slot.answer(Err(error.clone()));
                refused = Some(error);
                continue;
            }
        }
        encoded.extend(encoder.place(shared, put));
    }
    encoder.finish(shared, start, encoded)
}

/// The state of [`encode`]: the chunk being filled, the full ones before it, and the log
/// position the next record goes to.
struct Encoder {
    current: Chunk,
    chunks: Vec<Chunk>,
    pos: u64,
    /// The store time of every record of the batch.
    now: i64,
    /// What a new chunk reserves: the batch's bytes, up to a batch's limit.
    chunk_capacity: usize,
}

impl Encoder {
    /// Whether a record of `len` bytes fits the current segment, leaving room for the
    /// blank record that closes it.
    fn fits(&self, shared: &Shared, len: u32) -> bool {
        let within = self.pos - self.current.segment_start;
        within + u64::from(len) + to_u64(BLANK_RECORD_LEN) <= shared.log.segment_size()
    }

    /// Closes the current segment with a blank record and moves to the next one, which
    /// must exist before the blank that points at it is written.
    async fn roll(&mut self, shared: &Shared) -> Result<(), StoreError> {
        let segment_size = shared.log.segment_size();
        let next = self.current.segment_start + segment_size;
        let file = shared.log.segment_file(next).await.map_err(|error| {
            StoreError::from_io(&format!("creating CommitLog segment {next}"), &error)
        })?;
        let within = self.pos - self.current.segment_start;
        record::encode_blank(to_u32(segment_size - within), &mut self.current.bytes);
        self.current.closes_segment = true;
        let full = std::mem::replace(
            &mut self.current,
            Chunk {
                segment_start: next,
                file,
                position: 0,
                bytes: Vec::with_capacity(self.chunk_capacity),
                closes_segment: false,
            },
        );
        self.chunks.push(full);
        self.pos = next;
        Ok(())
    }

    /// Encodes `put` at the current position with the next offset of its queue, or
    /// answers it with why it cannot be (its queue cannot be made, or a codec bug).
    fn place(&mut self, shared: &Shared, put: PendingPut) -> Option<Encoded> {
        let queue = match super::recovery::queue_for(shared, &put.input.topic, put.input.queue_id) {
            Ok(queue) => queue,
            Err(error) => {
                put.slot.answer(Err(error));
                return None;
            }
        };
        let queue_offset = queue.reserve_offset();
        let bytes = &mut self.current.bytes;
        let before = bytes.len();
        if let Err(error) = record::encode_into(
            &put.input,
            queue_offset.to_stored(),
            LogPos::new(self.pos).to_stored(),
            self.now,
            bytes,
        ) {
            // encoded_len succeeded at enqueue, so this is a codec bug; refuse, don't write.
            bytes.truncate(before);
            put.slot
                .answer(Err(StoreError::MessageIllegal(error.to_string())));
            return None;
        }
        assert_eq!(
            bytes.len() - before,
            to_usize(put.encoded_len),
            "the encoder wrote a record of another length than encoded_len said (topic {})",
            put.input.topic
        );
        let placement = Placement {
            phys_offset: self.pos,
            queue_offset: queue_offset.get(),
            size: put.encoded_len,
            store_timestamp: self.now,
        };
        put.slot.set_placed(placement);
        self.pos = placement.end();
        Some(Encoded {
            put,
            queue,
            placement,
        })
    }

    /// The batch's chunks, the last one padded ahead ([`zero_ahead`]); `None` when no
    /// byte is to be written.
    fn finish(mut self, shared: &Shared, start: u64, batch: Vec<Encoded>) -> Option<Encoding> {
        if !self.current.bytes.is_empty() {
            zero_ahead(shared, &mut self.current, self.pos);
            self.chunks.push(self.current);
        }
        if self.chunks.is_empty() {
            return None;
        }
        Some(Encoding {
            chunks: self.chunks,
            batch,
            start,
            end: self.pos,
        })
    }
}

/// SYNC_FLUSH: pads the batch's last chunk with zeros past `end`, the batch's end, when the
/// zeros an earlier batch wrote there reach less than half of `sync_zero_ahead_bytes`
/// ahead, up to the page boundary that far ahead (never past the segment).
///
/// Why: segments are fallocated, and ext4 keeps fallocated blocks as unwritten extents,
/// so an fdatasync of data written into them also converts those extents and writes the
/// metadata: about twice the fsync of an overwrite (fio, 16 KiB + fdatasync: 293 µs
/// against 144; `perf/results/prewritten-segment.md`). Zeros written ahead turn the next
/// stretch into written blocks whose pages are cached, so the fsyncs of the batches that
/// land there only write data. The batch that carries the zeros pays their writeback: the
/// default (256 KiB) kept p99 at or below no padding with 16 clients, where 1 MiB raised it
/// (`docs/performance.md`).
///
/// Invariants: the padding lies in the chunk's own segment, in bytes past the log's write
/// position, which are zeros already (fallocated) and which only this appender writes
/// next; so the padding changes no byte's value, and a crash leaves what it would have
/// left without it. Positions (written, flushed, visible) stay at `end`.
fn zero_ahead(shared: &Shared, chunk: &mut Chunk, end: u64) {
    let ahead = shared.config.sync_zero_ahead_bytes;
    if ahead == 0 || shared.config.flush_mode != FlushMode::Sync || chunk.closes_segment {
        return;
    }
    if end + ahead / 2 <= shared.zeroed_until.get() {
        return;
    }
    let segment_end = chunk.segment_start + shared.log.segment_size();
    let target = end
        .next_multiple_of(crate::config::PAGE_SIZE)
        .saturating_add(ahead)
        .min(segment_end);
    assert_eq!(
        chunk.segment_start + chunk.position + to_u64(chunk.bytes.len()),
        end,
        "the last chunk of a batch ends at the batch's end"
    );
    if target <= end {
        return;
    }
    chunk
        .bytes
        .resize(chunk.bytes.len() + to_usize(target - end), 0);
    shared.zeroed_until.set(target);
}

async fn open_chunk(shared: &Shared, pos: u64) -> Result<Chunk, StoreError> {
    let segment_start = shared.log.segment_start(pos);
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
    Ok(Chunk {
        segment_start,
        file,
        position: pos - segment_start,
        bytes: Vec::new(),
        closes_segment: false,
    })
}

async fn write_chunks(shared: &Shared, chunks: &mut [Chunk]) -> Result<(), LogIoError> {
    for chunk in chunks {
        let bytes = Bytes::from(std::mem::take(&mut chunk.bytes));
        let len = bytes.len();
        if let Err(error) = shared
            .disk
            .write_at(chunk.file, chunk.position, bytes)
            .await
        {
            return Err(LogIoError::Write {
                len,
                segment_start: chunk.segment_start,
                at: chunk.position,
                error,
            });
        }
        if chunk.closes_segment {
            // A full segment is only read from now on; its mapping need not stay.
            shared.disk.finished_writing(chunk.file);
        }
    }
    Ok(())
}

/// Poisons the store for a failed write or sync of CommitLog data and answers every
/// waiter still queued with it: none of them will be released.
fn fail(shared: &Shared, cause: LogIoError) {
    let cause = cause.to_string();
    shared.poison(cause.clone());
    // The queue is not borrowed while the answers run: a callback may queue a put.
    let waiting = shared.waiters.borrow_mut().take_all();
    for batch in waiting {
        for item in batch.puts {
            item.put
                .slot
                .answer(Err(StoreError::Poisoned(cause.clone())));
        }
    }
}

/// Stage 3: releases, in offset order, every waiter whose end all the required conditions
/// have reached, inside the answer scope; then wakes the long-polling pulls once. Nothing
/// to release costs one look at the queue's front (and no scope). Called by the appender
/// after each turn, and by whatever advances a condition outside it. Returns how many puts
/// it answered.
pub(crate) fn release(shared: &Shared) -> usize {
    if !shared.waiters.borrow().ready() {
        return 0;
    }
    // A master whose write lease lapsed may have been replaced: nothing it holds becomes
    // visible or is answered until the lease holds again, or the store stops.
    if !lease_holds(shared) && !shared.closing.get() {
        return 0;
    }
    let scope = shared.answer_scope.borrow().clone();
    let mut once = true;
    let mut answered = 0;
    scope(&mut || {
        if !std::mem::take(&mut once) {
            return;
        }
        loop {
            // Borrowed for the pop only: the answers run callbacks.
            let next = shared.waiters.borrow_mut().pop_ready();
            let Some((end, batch)) = next else {
                break;
            };
            answered += batch.puts.len();
            dispatch(shared, batch, end);
        }
        if answered > 0 {
            shared.arrivals.notify_waiters();
        }
    });
    answered
}

/// Whether the store's write lease holds (a store without one needs none).
pub(crate) fn lease_holds(shared: &Shared) -> bool {
    shared
        .write_lease
        .borrow()
        .as_ref()
        .is_none_or(WriteLease::holds)
}

/// The index could not take a visible record. The record is stored and acknowledged
/// whatever happens here: an index that cannot take it (a new file on a full disk) costs
/// lookups of that record only, so the failure is logged and counted, not a poison.
fn index_failed(shared: &Shared, item: &Encoded, error: &std::io::Error) {
    shared.update_stats(|stats| stats.index_errors += 1);
    tracing::warn!(
        "record at {} is stored but not indexed: {error}",
        item.placement.phys_offset
    );
}

/// The record `item` placed, for [`dispatch_record`].
fn dispatch_input(item: &Encoded) -> DispatchRecord<'_> {
    let input = &item.put.input;
    DispatchRecord {
        topic: &input.topic,
        queue_id: input.queue_id,
        properties: &input.properties,
        sys_flag: input.sys_flag,
        phys_offset: LogPos::new(item.placement.phys_offset),
        size: item.placement.size,
        queue_offset: QueueOffset::new(item.placement.queue_offset),
        store_timestamp: item.placement.store_timestamp,
    }
}

/// Makes one released batch visible: its ConsumeQueue entries in order, then its answers.
fn dispatch(shared: &Shared, batch: Batch, end: u64) {
    assert_may_release(shared, &batch, end);
    let Batch {
        puts: batch,
        status,
        ..
    } = batch;
    let mut bytes = 0u64;
    let hook = shared.visible_hook.borrow().clone();
    let mut last_topic: Option<&str> = None;
    for item in &batch {
        // A put whose entry cannot be taken hears why now; the others after every entry.
        if !make_visible(shared, item) {
            continue;
        }
        bytes += u64::from(item.placement.size);
        let topic = item.put.input.topic.as_str();
        if let Some(hook) = &hook {
            if last_topic != Some(topic) {
                hook(topic);
                last_topic = Some(topic);
            }
        }
    }
    shared.dispatched_pos.set(end);
    let count = to_u64(batch.len());
    for item in batch {
        // Ignored by a slot already answered above, or timed out by the watchdog.
        item.put.slot.answer_with(Ok(item.placement), status);
    }
    shared.update_stats(|stats| {
        stats.puts += count;
        stats.put_bytes += bytes;
        stats.batches += 1;
    });
}

/// D7: nothing becomes visible before it is written, and under SYNC_FLUSH synced. Checked
/// against the log's own positions, independently of the waiter queue's conditions.
fn assert_may_release(shared: &Shared, batch: &Batch, end: u64) {
    let log = &shared.log;
    let durable = match shared.config.flush_mode {
        FlushMode::Sync => log.flushed_pos(),
        FlushMode::Async => log.written_pos(),
    };
    let dispatched = shared.dispatched_pos.get();
    assert!(
        dispatched <= end && end <= durable,
        "dispatch to {end} (from {dispatched}) would pass what {:?} flush allows ({durable})",
        shared.config.flush_mode
    );
    // D7, D14: nor, where the store waits for a replica, before one confirmed it (unless
    // the batch did not wait for one: told it would not be replicated, or written while
    // the replica gate said none was needed).
    if batch.replicated && shared.waiters.borrow().requires(AckCondition::Replicated) {
        let replicated = shared.replicated_pos.get();
        assert!(
            end <= replicated,
            "dispatch to {end} would pass what the replica confirmed ({replicated})"
        );
    }
}

/// Appends `item`'s ConsumeQueue entry and index keys, counting them. An entry the queue
/// does not take is a bug or damage: it poisons the store and answers the put with why,
/// and the put is not visible (`false`).
fn make_visible(shared: &Shared, item: &Encoded) -> bool {
    match dispatch_record(shared, &item.queue, &dispatch_input(item)) {
        Ok(Dispatched {
            entry: AppendOutcome::Appended,
            indexed,
        }) => {
            item.queue.count_appended(u64::from(item.placement.size));
            match indexed {
                Ok(0) => {}
                Ok(added) => shared.update_stats(|stats| stats.index_entries += to_u64(added)),
                Err(error) => index_failed(shared, item, &error),
            }
            true
        }
        Ok(Dispatched {
            entry: AppendOutcome::Duplicate,
            ..
        }) => {
            // The appender hands out each queue offset once: a duplicate is a bug.
            let cause = format!(
                "dispatch found a duplicate entry for phys {}",
                item.placement.phys_offset
            );
            shared.poison(cause.clone());
            item.put.slot.answer(Err(StoreError::Corrupt(cause)));
            false
        }
        Err(why) => {
            let error = StoreError::Corrupt(why.to_string());
            shared.poison(error.to_string());
            item.put.slot.answer(Err(error));
            false
        }
    }
}

#[cfg(test)]
#[path = "append_tests.rs"]
mod tests;
