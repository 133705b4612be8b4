//! The CommitLog: every message of the shard, all topics mixed, appended in one sequence
//! of segment files (D2, D4, D6).
//!
//! ```text
//!   commitlog/<20-digit start offset>        (segment size S, default 1 GiB)
//!
//!   | record | record | ... | record | blank: [remaining i32][0xCBD43194] zeros... |
//!   ^ start                                                          start + S ^
//! ```
//!
//! Positions, all physical offsets with the shard id in the top 8 bits, in this order:
//!
//! ```text
//!   flushed_pos  <=  written_pos  <=  write_pos
//!   (durable)        (in page cache)  (encoded, write in flight)
//! ```
//!
//! Invariants:
//! - Only the shard's appender task writes here, and it has at most one write (plus, in
//!   SYNC_FLUSH, its fdatasync) in flight; every position only grows while the store runs.
//! - A record never spans two segments: when a record plus the 8-byte blank header does not
//!   fit in what is left, the blank record fills the rest and the record goes to the next
//!   segment, which must exist before the blank is written.
//! - Every position above is a record boundary (or a segment start after a blank).

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;

use tokio::task::JoinHandle;

use super::segment::SegmentSet;
use crate::io::FileId;

/// The work of preallocating one segment, for [`CommitLog::preallocate_after`] to spawn.
pub type Preallocation = std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<FileId>>>>;

/// A spawned [`Preallocation`]: its segment, or `None` when the task panicked.
pub type PreallocationTask = JoinHandle<Option<io::Result<FileId>>>;

/// A failed write or fdatasync of CommitLog data: what poisons the store (D11). Its text
/// is the poison's cause, which every later put hears.
#[derive(Debug)]
pub(crate) enum LogIoError {
    /// The appender's write of a batch's bytes to one segment.
    Write {
        len: usize,
        segment_start: u64,
        at: u64,
        error: io::Error,
    },
    /// The appender's fdatasync of one segment (SYNC_FLUSH).
    SegmentSync {
        segment_start: u64,
        error: io::Error,
    },
    /// The flusher's fdatasync of the segments holding `[from, to)` (ASYNC_FLUSH, stop).
    RangeSync {
        from: u64,
        to: u64,
        error: io::Error,
    },
}

impl std::fmt::Display for LogIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogIoError::Write {
                len,
                segment_start,
                at,
                error,
            } => write!(
                f,
                "write of {len} bytes to CommitLog segment {segment_start} at {at} failed: {error}"
            ),
            LogIoError::SegmentSync {
                segment_start,
                error,
            } => write!(
                f,
                "fdatasync of CommitLog segment {segment_start} failed: {error}"
            ),
            LogIoError::RangeSync { from, to, error } => write!(
                f,
                "fdatasync of the CommitLog in [{from}, {to}) failed: {error}"
            ),
        }
    }
}

impl std::error::Error for LogIoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogIoError::Write { error, .. }
            | LogIoError::SegmentSync { error, .. }
            | LogIoError::RangeSync { error, .. } => Some(error),
        }
    }
}

pub struct CommitLog {
    pub segments: Rc<RefCell<SegmentSet>>,
    segment_size: u64,
    write_pos: Cell<u64>,
    written_pos: Cell<u64>,
    flushed_pos: Cell<u64>,
    /// Woken when the written position grows: the HA streams send what is written before
    /// it is visible (under SYNC_MASTER nothing is visible before a slave holds it).
    written_grew: tokio::sync::Notify,
    /// The next segment being preallocated in the background, so a roll rarely waits.
    preallocating: RefCell<Option<(u64, PreallocationTask)>>,
}

impl CommitLog {
    /// A log whose appends resume at `end` (everything below it is durable).
    pub fn new(segments: SegmentSet, end: u64) -> CommitLog {
        let segment_size = segments.size();
        CommitLog {
            segments: Rc::new(RefCell::new(segments)),
            segment_size,
            write_pos: Cell::new(end),
            written_pos: Cell::new(end),
            flushed_pos: Cell::new(end),
            written_grew: tokio::sync::Notify::new(),
            preallocating: RefCell::new(None),
        }
    }

    pub fn segment_size(&self) -> u64 {
        self.segment_size
    }

    pub fn write_pos(&self) -> u64 {
        self.write_pos.get()
    }

    pub fn written_pos(&self) -> u64 {
        self.written_pos.get()
    }

    pub fn flushed_pos(&self) -> u64 {
        self.flushed_pos.get()
    }

    /// Where appends resume after recovery; everything below is durable.
    pub fn reset_positions(&self, end: u64) {
        let start = self.segments.borrow().base();
        assert!(
            end >= start,
            "CommitLog end {end} lies below the log's base {start}"
        );
        self.write_pos.set(end);
        self.written_pos.set(end);
        self.flushed_pos.set(end);
    }

    // The setters check the ordering `flushed <= written <= write` and that every position
    // only grows, always: one batch or one sync each, so three comparisons cost nothing,
    // and a breach means an acknowledgement could claim bytes that were never written.

    /// The appender encoded up to `pos` (its write is in flight).
    pub fn set_write_pos(&self, pos: u64) {
        let (write, written) = (self.write_pos.get(), self.written_pos.get());
        assert!(
            pos >= write && pos >= written,
            "CommitLog write position may only grow: {write} -> {pos} (written {written})"
        );
        self.write_pos.set(pos);
    }

    /// The write up to `pos` completed (the bytes are in the page cache).
    pub fn set_written_pos(&self, pos: u64) {
        let (write, written) = (self.write_pos.get(), self.written_pos.get());
        assert!(
            written <= pos && pos <= write,
            "CommitLog written position {written} -> {pos} must grow and stay within the \
             encoded position {write}"
        );
        self.written_pos.set(pos);
        if pos > written {
            self.written_grew.notify_waiters();
        }
    }

    /// Resolves when the written position grows after this call.
    pub fn written_grew(&self) -> tokio::sync::futures::Notified<'_> {
        self.written_grew.notified()
    }

    /// A sync up to `pos` completed (the bytes are durable).
    pub fn set_flushed_pos(&self, pos: u64) {
        let (written, flushed) = (self.written_pos.get(), self.flushed_pos.get());
        assert!(
            flushed <= pos && pos <= written,
            "CommitLog flushed position {flushed} -> {pos} must grow and stay within the \
             written position {written}"
        );
        self.flushed_pos.set(pos);
    }

    /// Start of the segment holding `pos`.
    pub fn segment_start(&self, pos: u64) -> u64 {
        self.segments.borrow().start_of(pos)
    }

    /// The file of the segment starting at `start`, creating and preallocating it if
    /// needed (waiting for the background preallocation when it is that segment's).
    pub async fn segment_file(&self, start: u64) -> io::Result<FileId> {
        if let Some(file) = self.segments.borrow().file(start) {
            return Ok(file);
        }
        let pending = {
            let mut slot = self.preallocating.borrow_mut();
            match slot.take() {
                Some((pending_start, handle)) if pending_start == start => Some(handle),
                other => {
                    *slot = other;
                    None
                }
            }
        };
        if let Some(handle) = pending {
            // Its error (a full disk, say) is retried below, and reported from there; its
            // panic has poisoned the store already.
            let _ = handle.await;
        }
        SegmentSet::ensure(&self.segments, start).await
    }

    /// Starts preallocating the segment after the one holding `pos`, unless that is done
    /// or under way. `spawn` runs the preallocation as a task (the store's watched one);
    /// it yields `None` when that task panicked.
    pub fn preallocate_after(
        &self,
        pos: u64,
        spawn: impl FnOnce(Preallocation) -> PreallocationTask,
    ) {
        let next = self.segment_start(pos) + self.segment_size;
        if self.segments.borrow().file(next).is_some() {
            return;
        }
        let mut slot = self.preallocating.borrow_mut();
        if slot.as_ref().is_some_and(|(start, _)| *start == next) {
            return;
        }
        let segments = self.segments.clone();
        let handle = spawn(Box::pin(async move {
            let result = SegmentSet::ensure(&segments, next).await;
            if let Err(error) = &result {
                tracing::warn!("preallocating CommitLog segment {next} failed: {error}");
            }
            result
        }));
        if let Some((_, previous)) = slot.replace((next, handle)) {
            previous.abort();
        }
    }

    /// Reads `len` bytes of the record at `phys`.
    pub fn read(&self, phys: u64, len: usize) -> io::Result<bytes::Bytes> {
        self.segments.borrow().read_bytes(phys, len)
    }

    pub fn close(&self) {
        if let Some((_, handle)) = self.preallocating.borrow_mut().take() {
            handle.abort();
        }
        self.segments.borrow_mut().close_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sim::{SimConfig, SimDisk};

    /// A log over an empty simulated directory whose appends resume at 1000.
    fn log() -> CommitLog {
        let disk: Rc<dyn crate::io::Disk> = Rc::new(SimDisk::new(SimConfig::with_seed(1)));
        let segments =
            SegmentSet::load(disk, std::path::Path::new("/log"), 64 * 1024, 0).expect("load");
        CommitLog::new(segments, 1000)
    }

    #[test]
    fn positions_advance_in_order_encoded_then_written_then_flushed() {
        let log = log();
        log.set_write_pos(1200);
        log.set_written_pos(1100);
        log.set_flushed_pos(1100);
        log.set_written_pos(1200);
        assert_eq!(
            (log.flushed_pos(), log.written_pos(), log.write_pos()),
            (1100, 1200, 1200)
        );
    }

    #[test]
    #[should_panic(
        expected = "written position 1000 -> 1100 must grow and stay within the \
                               encoded position 1000"
    )]
    fn written_past_encoded_is_refused_with_the_positions() {
        log().set_written_pos(1100);
    }

    #[test]
    #[should_panic(
        expected = "flushed position 1000 -> 1100 must grow and stay within the \
                               written position 1000"
    )]
    fn flushed_past_written_is_refused_with_the_positions() {
        let log = log();
        log.set_write_pos(1100);
        log.set_flushed_pos(1100);
    }

    #[test]
    #[should_panic(expected = "write position may only grow: 1000 -> 900")]
    fn the_write_position_never_moves_back() {
        log().set_write_pos(900);
    }
}
