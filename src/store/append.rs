//! The appender: the one task that writes the CommitLog (group commit, D6).
//!
//! Each turn takes every queued put (up to `max_batch_bytes`) as one batch, encodes it
//! into one buffer per touched segment, issues the write, and under SYNC_FLUSH the
//! fdatasync, before taking the next batch; puts that arrive meanwhile wait and ride the
//! next turn, so one fsync serves every producer that was waiting for it. Only then is the
//! batch dispatched to the ConsumeQueues (visible, D7) and answered.
//!
//! A failed write or sync poisons the store (D11): the batch is answered with the cause
//! and every later put is refused. A full disk met while creating the next segment fails
//! only the puts that needed it, without poisoning: nothing was written.

use std::rc::Rc;

use bytes::Bytes;

use super::consume_queue::{AppendOutcome, ConsumeQueue, CqEntry};
use super::record::{self, BLANK_RECORD_LEN};
use super::{PendingPut, Placement, Shared, StoreError, StoreTask};
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

struct Encoded {
    put: PendingPut,
    queue: Rc<ConsumeQueue>,
    placement: Placement,
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

fn take_batch(shared: &Shared) -> Vec<PendingPut> {
    let mut pending = shared.pending.borrow_mut();
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    while let Some(put) = pending.front() {
        if !batch.is_empty() && bytes + put.encoded_len as usize > shared.config.max_batch_bytes {
            break;
        }
        bytes += put.encoded_len as usize;
        batch.push(pending.pop_front().expect("front exists"));
    }
    batch
}

async fn append_batch(shared: &Rc<Shared>, batch: Vec<PendingPut>) {
    if let Some(error) = shared.poisoned() {
        for put in batch {
            put.slot.answer(Err(error.clone()));
        }
        return;
    }
    let log = &shared.log;
    let segment_size = log.segment_size();
    let now = shared.clock.now_ms();
    let start_pos = log.write_pos();
    let mut pos = start_pos;
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut encoded: Vec<Encoded> = Vec::with_capacity(batch.len());
    let mut refused: Option<StoreError> = None;

    let mut current = match open_chunk(shared, pos).await {
        Ok(chunk) => chunk,
        Err(error) => {
            for put in batch {
                put.slot.answer(Err(error.clone()));
            }
            return;
        }
    };
    let total_bytes: usize = batch.iter().map(|put| put.encoded_len as usize).sum();
    current
        .bytes
        .reserve(total_bytes.min(shared.config.max_batch_bytes));

    for put in batch {
        if let Some(error) = &refused {
            put.slot.answer(Err(error.clone()));
            continue;
        }
        let len = put.encoded_len as u64;
        let within = pos - current.segment_start;
        if within + len + BLANK_RECORD_LEN as u64 > segment_size {
            // The next segment must exist before the blank that points at it is written.
            let next = current.segment_start + segment_size;
            match log.segment_file(next).await {
                Ok(file) => {
                    record::encode_blank((segment_size - within) as u32, &mut current.bytes);
                    current.closes_segment = true;
                    let full = std::mem::replace(
                        &mut current,
                        Chunk {
                            segment_start: next,
                            file,
                            position: 0,
                            bytes: Vec::with_capacity(
                                total_bytes.min(shared.config.max_batch_bytes),
                            ),
                            closes_segment: false,
                        },
                    );
                    chunks.push(full);
                    pos = next;
                }
                Err(error) => {
                    let error =
                        StoreError::from_io(&format!("creating CommitLog segment {next}"), &error);
                    put.slot.answer(Err(error.clone()));
                    refused = Some(error);
                    continue;
                }
            }
        }
        let queue = match super::recovery::queue_for(shared, &put.input.topic, put.input.queue_id) {
            Ok(queue) => queue,
            Err(error) => {
                put.slot.answer(Err(error));
                continue;
            }
        };
        let queue_offset = queue.reserve_offset();
        let before = current.bytes.len();
        if let Err(error) = record::encode_into(
            &put.input,
            queue_offset as i64,
            pos as i64,
            now,
            &mut current.bytes,
        ) {
            // encoded_len succeeded at enqueue, so this is a codec bug; refuse, don't write.
            current.bytes.truncate(before);
            put.slot
                .answer(Err(StoreError::MessageIllegal(error.to_string())));
            continue;
        }
        assert_eq!(
            current.bytes.len() - before,
            len as usize,
            "the encoder wrote a record of another length than encoded_len said (topic {})",
            put.input.topic
        );
        let placement = Placement {
            phys_offset: pos,
            queue_offset,
            size: len as u32,
            store_timestamp: now,
        };
        put.slot.set_placed(placement);
        encoded.push(Encoded {
            put,
            queue,
            placement,
        });
        pos += len;
    }
    if !current.bytes.is_empty() {
        chunks.push(current);
    }
    if chunks.is_empty() {
        return;
    }
    log.set_write_pos(pos);

    if let Err(error) = write_chunks(shared, &mut chunks).await {
        return fail(shared, encoded, error);
    }
    log.set_written_pos(pos);
    match shared.config.flush_mode {
        FlushMode::Sync => {
            for chunk in &chunks {
                if let Err(error) = shared.disk.sync_data(chunk.file).await {
                    let cause = format!(
                        "fdatasync of CommitLog segment {} failed: {error}",
                        chunk.segment_start
                    );
                    return fail(shared, encoded, cause);
                }
                shared.update_stats(|stats| stats.log_syncs += 1);
            }
            log.set_flushed_pos(pos);
        }
        // ASYNC_FLUSH: the timed flusher syncs on its own clock (see `flush.rs`).
        FlushMode::Async => {}
    }
    if pos - log.segment_start(start_pos) > segment_size / 2
        || log.segment_start(pos) != log.segment_start(start_pos)
    {
        log.preallocate_after(pos, |future| {
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
    let scope = shared.answer_scope.borrow().clone();
    let mut encoded = Some(encoded);
    scope(&mut || {
        if let Some(encoded) = encoded.take() {
            dispatch(shared, encoded, pos)
        }
    });
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

async fn write_chunks(shared: &Shared, chunks: &mut [Chunk]) -> Result<(), String> {
    for chunk in chunks {
        let bytes = Bytes::from(std::mem::take(&mut chunk.bytes));
        let len = bytes.len();
        if let Err(error) = shared
            .disk
            .write_at(chunk.file, chunk.position, bytes)
            .await
        {
            return Err(format!(
                "write of {len} bytes to CommitLog segment {} at {} failed: {error}",
                chunk.segment_start, chunk.position
            ));
        }
        if chunk.closes_segment {
            // A full segment is only read from now on; its mapping need not stay.
            shared.disk.finished_writing(chunk.file);
        }
    }
    Ok(())
}

fn fail(shared: &Shared, encoded: Vec<Encoded>, cause: String) {
    shared.poison(cause.clone());
    for item in encoded {
        item.put
            .slot
            .answer(Err(StoreError::Poisoned(cause.clone())));
    }
}

/// Makes the batch visible: ConsumeQueue entries, then the answers, then the wake-up.
fn dispatch(shared: &Shared, encoded: Vec<Encoded>, end: u64) {
    // D7: nothing becomes visible before it is written, and under SYNC_FLUSH synced.
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
    let mut bytes = 0u64;
    let count = encoded.len() as u64;
    for item in encoded {
        let entry = CqEntry {
            phys_offset: item.placement.phys_offset as i64,
            size: item.placement.size as i32,
            tags_code: item.put.tags_code,
        };
        let outcome = item
            .queue
            .append(item.placement.queue_offset, entry)
            .map_err(StoreError::Corrupt);
        match outcome {
            Ok(AppendOutcome::Appended) => {
                bytes += item.placement.size as u64;
                item.put.slot.answer(Ok(item.placement));
            }
            Ok(AppendOutcome::Duplicate) => {
                let cause = format!(
                    "dispatch found a duplicate entry for phys {}",
                    entry.phys_offset
                );
                shared.poison(cause.clone());
                item.put.slot.answer(Err(StoreError::Corrupt(cause)));
            }
            Err(error) => {
                shared.poison(error.to_string());
                item.put.slot.answer(Err(error));
            }
        }
    }
    shared.dispatched_pos.set(end);
    shared.update_stats(|stats| {
        stats.puts += count;
        stats.put_bytes += bytes;
        stats.batches += 1;
    });
    shared.arrivals.notify_waiters();
}
