//! One ConsumeQueue: the index of one (topic, queueId) into the CommitLog.
//!
//! ```text
//!   consumequeue/<topic>/<queueId>/00000000000000000000   entries [0, N)
//!                                  00000000000006000000   entries [N, 2N)   (N = 300 000)
//!
//!   entry k at logical byte offset k*20:
//!   +----------------------+-------------+----------------------+
//!   | phys offset  i64 (8) | size i32 (4)| tags code  i64 (8)   |
//!   +----------------------+-------------+----------------------+
//! ```
//!
//! Invariants:
//! - The queue offset of a message is the index of its entry; entries are contiguous from
//!   `min_offset` to `max_offset` and their physical offsets strictly increase.
//! - Entries `[written, max_offset)` live only in memory (`tail`) until the checkpointer
//!   writes them out; readers see both, so visibility never waits on ConsumeQueue I/O.
//! - An entry is appended only once its record is visible under the flush policy (D7):
//!   the dispatcher calls [`ConsumeQueue::append`] after the CommitLog write (and fsync).
//! - Bytes past the end on disk are zero; recovery zeroes them after a cut.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use super::position::{to_u64, to_usize, LogPos, QueueOffset};
use super::segment::SegmentSet;
use crate::io::Disk;

pub const CQ_ENTRY_LEN: u64 = 20;
// phys offset i64, size i32, tags code i64 (RocketMQ's CQ_STORE_UNIT_SIZE).
const _: () = assert!(CQ_ENTRY_LEN == 8 + 4 + 8);
/// [`CQ_ENTRY_LEN`] as a buffer length.
const ENTRY_BYTES: usize = 20;
const _: () = assert!(ENTRY_BYTES as u64 == CQ_ENTRY_LEN);

/// One 20-byte ConsumeQueue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEntry {
    pub phys_offset: i64,
    pub size: i32,
    /// Java `String.hashCode` of the TAGS property, sign-extended; 0 without a tag.
    pub tags_code: i64,
}

impl CqEntry {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.phys_offset.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.tags_code.to_be_bytes());
    }

    /// Decodes the first 20 bytes of `bytes` (which must hold them).
    pub fn decode(bytes: &[u8]) -> CqEntry {
        CqEntry {
            phys_offset: i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes")),
            size: i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
            tags_code: i64::from_be_bytes(bytes[12..20].try_into().expect("8 bytes")),
        }
    }

    /// What RocketMQ's ConsumeQueue recovery accepts as a written entry.
    pub fn is_written(&self) -> bool {
        self.phys_offset >= 0 && self.size > 0
    }

    /// The entry of a record at CommitLog position `position` of `size` bytes. Panics if
    /// either does not fit the entry's fields (no shard's offsets reach 2^63).
    pub fn for_record(position: LogPos, size: u32, tags_code: i64) -> CqEntry {
        let entry = CqEntry {
            phys_offset: i64::try_from(position.get())
                .unwrap_or_else(|_| panic!("CommitLog position {position} does not fit an entry")),
            size: i32::try_from(size)
                .unwrap_or_else(|_| panic!("a record of {size} bytes does not fit an entry")),
            tags_code,
        };
        assert!(
            entry.is_written(),
            "an entry for a record must be written: {entry:?}"
        );
        entry
    }

    /// The record's CommitLog position. Only for a written entry ([`CqEntry::is_written`]):
    /// a queue holds no other, so anything else is a bug and panics with the entry.
    pub fn position(&self) -> LogPos {
        LogPos::from_stored(self.phys_offset)
            .unwrap_or_else(|| panic!("a written entry has no negative position: {self:?}"))
    }

    /// The record's length in bytes, for a written entry (see [`CqEntry::position`]).
    pub fn size_bytes(&self) -> u32 {
        u32::try_from(self.size)
            .unwrap_or_else(|_| panic!("a written entry has no negative size: {self:?}"))
    }

    /// The record's length, as a buffer length.
    pub fn byte_len(&self) -> usize {
        to_usize(self.size_bytes())
    }

    /// Where the record ends, for a written entry.
    pub fn end(&self) -> LogPos {
        self.position().plus(u64::from(self.size_bytes()))
    }
}

impl QueueState {
    /// One past the last entry, written or in the tail.
    fn end(&self) -> u64 {
        self.written + to_u64(self.tail.len())
    }
}

/// Why [`ConsumeQueue::append`] refused an entry: its queue offset does not continue the
/// queue (it is below the end for a record past the last one, or leaves a gap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueAppendError {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: u64,
    /// The queue's end: the offset the entry had to have.
    pub max_offset: u64,
    pub phys_offset: i64,
}

impl std::fmt::Display for QueueAppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let QueueAppendError {
            topic,
            queue_id,
            queue_offset,
            max_offset,
            phys_offset,
        } = self;
        if queue_offset < max_offset {
            write!(
                f,
                "consume queue {topic}/{queue_id}: entry for queue offset {queue_offset} (phys \
                 {phys_offset}) arrives after offset {max_offset} was written for an earlier \
                 record"
            )
        } else {
            write!(
                f,
                "consume queue {topic}/{queue_id}: entries [{max_offset}, {queue_offset}) are \
                 missing before phys {phys_offset} (delete the store's checkpoint file to \
                 rebuild every queue from the CommitLog)"
            )
        }
    }
}

impl std::error::Error for QueueAppendError {}

struct QueueState {
    min_offset: u64,
    /// Entries below this are written to the files (maybe not yet synced).
    written: u64,
    /// Entries `[written, written + tail.len())`.
    tail: Vec<CqEntry>,
    /// Segment starts written since the last sync.
    dirty: BTreeSet<u64>,
    /// End (offset + size) of the last entry's record: the idempotence check of re-dispatch.
    last_record_end: LogPos,
}

/// What appending an entry did.
#[derive(Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    Appended,
    /// Already present (re-dispatch after recovery).
    Duplicate,
}

pub struct ConsumeQueue {
    pub topic: String,
    pub queue_id: i32,
    files: RefCell<SegmentSet>,
    state: RefCell<QueueState>,
    /// The next queue offset the appender hands out; ahead of `max_offset` by the messages
    /// encoded but not yet visible.
    reserved: Cell<u64>,
    /// Messages and record bytes this process appended to the queue (the live appender's
    /// dispatch, not recovery's): the per-topic figures of the metrics sampler.
    appended: Cell<(u64, u64)>,
}

impl ConsumeQueue {
    /// Counts one message of `size` record bytes appended by the live appender.
    pub fn count_appended(&self, size: u64) {
        let (messages, bytes) = self.appended.get();
        self.appended.set((messages + 1, bytes + size));
    }

    /// Messages and record bytes appended since the store opened.
    pub fn appended(&self) -> (u64, u64) {
        self.appended.get()
    }

    /// Hands out the next queue offset for a message being appended.
    pub fn reserve_offset(&self) -> QueueOffset {
        // After recovery re-dispatched records, max_offset has moved past `reserved`.
        let next = self.reserved.get().max(self.max_offset());
        self.reserved.set(next + 1);
        QueueOffset::new(next)
    }

    /// Opens the queue in `dir`, finding its end: the first entry that is not written, or
    /// (when `cut_at` is given, after a crash) whose record starts at or past `cut_at`.
    /// Entries past the end are zeroed and wholly-dead files removed (`find_end`).
    pub async fn load(
        disk: Rc<dyn Disk>,
        dir: &Path,
        topic: &str,
        queue_id: i32,
        entries_per_file: u64,
        cut_at: Option<LogPos>,
    ) -> io::Result<ConsumeQueue> {
        let file_size = entries_per_file * CQ_ENTRY_LEN;
        let files = RefCell::new(SegmentSet::load(disk, dir, file_size, 0)?);
        let (end_entry, last_record_end) = find_end(&files, entries_per_file, cut_at).await?;
        let min_offset = first_entry(&files.borrow(), entries_per_file)?.unwrap_or(end_entry);
        Ok(ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            files,
            state: RefCell::new(QueueState {
                min_offset: min_offset.min(end_entry),
                written: end_entry,
                tail: Vec::new(),
                dirty: BTreeSet::new(),
                last_record_end,
            }),
            reserved: Cell::new(0),
            appended: Cell::new((0, 0)),
        })
    }

    /// Cuts the queue before its first entry whose record starts at or past `cut`, as
    /// recovery's [`ConsumeQueue::load`] does after a crash (the same `find_end`), on a
    /// live queue: its tail is written out first, the cut entries are zeroed on disk and
    /// synced. A replica truncating to its master's log (`replica_cut.rs`) calls it.
    pub async fn cut_from(&self, cut: LogPos) -> io::Result<()> {
        self.write_out().await?;
        let entries_per_file = self.files.borrow().size() / CQ_ENTRY_LEN;
        let (end, last_record_end) = find_end(&self.files, entries_per_file, Some(cut)).await?;
        self.sync().await?;
        let mut state = self.state.borrow_mut();
        assert!(
            state.tail.is_empty() && end <= state.written,
            "consume queue {}/{}: a cut at {cut} found its end at {end}, past the {} entries \
             written ({} in the tail)",
            self.topic,
            self.queue_id,
            state.written,
            state.tail.len()
        );
        state.written = end;
        state.min_offset = state.min_offset.min(end);
        state.last_record_end = last_record_end;
        self.reserved.set(0);
        Ok(())
    }

    /// Makes a queue with no entries begin at `offset`, past its end: its old files (no
    /// entry of them is live) are removed, and entries go on from `offset`, the entries
    /// before it in its first file left unwritten (`find_end` skips them). Only where
    /// the log lacks the queue's history (`dispatch.rs`, `may_begin_queue_at`).
    pub fn begin_at(&self, offset: QueueOffset) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        let (min, end) = (state.min_offset, state.end());
        assert!(
            min == end && offset.get() > end,
            "consume queue {}/{} may begin at {offset} only when empty and before it: it \
             holds [{min}, {end})",
            self.topic,
            self.queue_id
        );
        self.files.borrow_mut().remove_from(0)?;
        state.min_offset = offset.get();
        state.written = offset.get();
        state.dirty.clear();
        state.last_record_end = LogPos::default();
        self.reserved.set(offset.get());
        Ok(())
    }

    /// A queue with no entries yet; its directory (and the parents' entries) made durable.
    pub fn new_empty(
        disk: Rc<dyn Disk>,
        dir: &Path,
        topic: &str,
        queue_id: i32,
        entries_per_file: u64,
    ) -> io::Result<ConsumeQueue> {
        let files = SegmentSet::load(disk.clone(), dir, entries_per_file * CQ_ENTRY_LEN, 0)?;
        let mut ancestor = dir.parent();
        for _ in 0..2 {
            if let Some(parent) = ancestor {
                disk.sync_dir(parent)?;
                ancestor = parent.parent();
            }
        }
        Ok(ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            files: RefCell::new(files),
            state: RefCell::new(QueueState {
                min_offset: 0,
                written: 0,
                tail: Vec::new(),
                dirty: BTreeSet::new(),
                last_record_end: LogPos::default(),
            }),
            reserved: Cell::new(0),
            appended: Cell::new((0, 0)),
        })
    }

    pub fn min_offset(&self) -> u64 {
        self.state.borrow().min_offset
    }

    /// One past the last entry.
    pub fn max_offset(&self) -> u64 {
        self.state.borrow().end()
    }

    /// Appends the entry for the message at queue offset `queue_offset`.
    pub fn append(
        &self,
        queue_offset: QueueOffset,
        entry: CqEntry,
    ) -> Result<AppendOutcome, QueueAppendError> {
        let mut state = self.state.borrow_mut();
        let max = state.end();
        let queue_offset = queue_offset.get();
        let refused = || QueueAppendError {
            topic: self.topic.clone(),
            queue_id: self.queue_id,
            queue_offset,
            max_offset: max,
            phys_offset: entry.phys_offset,
        };
        if queue_offset < max {
            if entry.end() <= state.last_record_end {
                return Ok(AppendOutcome::Duplicate);
            }
            return Err(refused());
        }
        if queue_offset > max {
            return Err(refused());
        }
        state.last_record_end = entry.end();
        state.tail.push(entry);
        Ok(AppendOutcome::Appended)
    }

    /// Up to `max` entries starting at `from` (fewer at the end of the queue).
    pub fn read_entries(&self, from: u64, max: usize) -> io::Result<Vec<CqEntry>> {
        let state = self.state.borrow();
        let end = state.end().min(from.saturating_add(to_u64(max)));
        if from >= end || from < state.min_offset {
            return Ok(Vec::new());
        }
        let mut entries = Vec::with_capacity(to_usize(end - from));
        let mut next = from;
        let files = self.files.borrow();
        while next < end.min(state.written) {
            let address = next * CQ_ENTRY_LEN;
            let segment_end_entry = (files.start_of(address) + files.size()) / CQ_ENTRY_LEN;
            let count = end.min(state.written).min(segment_end_entry) - next;
            let bytes = files.read_bytes(address, to_usize(count * CQ_ENTRY_LEN))?;
            entries.extend(bytes.chunks_exact(ENTRY_BYTES).map(CqEntry::decode));
            next += count;
        }
        while next < end {
            entries.push(state.tail[to_usize(next - state.written)]);
            next += 1;
        }
        Ok(entries)
    }

    /// Moves the minimum past every entry whose record starts below `log_start` (retention
    /// deleted it), and forgets the files wholly below the new minimum, never the last
    /// one: the queue's offsets go on from where they were. Returns those files' paths for
    /// the caller to unlink.
    pub fn trim_below(&self, log_start: LogPos) -> io::Result<Vec<std::path::PathBuf>> {
        let (min, max) = (self.min_offset(), self.max_offset());
        let first = self.read_entries(min, 1)?;
        if first
            .first()
            .is_none_or(|entry| entry.position() >= log_start)
        {
            return Ok(Vec::new());
        }
        // Physical offsets increase with the queue offset: find the first entry at or past
        // `log_start` by bisection.
        let (mut low, mut high) = (min, max);
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = self.read_entries(mid, 1)?;
            let below = entry
                .first()
                .is_some_and(|entry| entry.position() < log_start);
            if below {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        if low == min {
            return Ok(Vec::new());
        }
        self.state.borrow_mut().min_offset = low;
        Ok(self.files.borrow_mut().detach_below(low * CQ_ENTRY_LEN))
    }

    /// Writes the in-memory tail out to the files (page cache; see [`ConsumeQueue::sync`]).
    pub async fn write_out(&self) -> io::Result<()> {
        let (first, bytes) = {
            let state = self.state.borrow();
            if state.tail.is_empty() {
                return Ok(());
            }
            let mut bytes = Vec::with_capacity(state.tail.len() * ENTRY_BYTES);
            for entry in &state.tail {
                entry.encode(&mut bytes);
            }
            (state.written, Bytes::from(bytes))
        };
        let count = to_u64(bytes.len()) / CQ_ENTRY_LEN;
        let (disk, file_size) = {
            let files = self.files.borrow();
            (files.disk_handle(), files.size())
        };
        let mut address = first * CQ_ENTRY_LEN;
        let mut done = 0usize;
        while done < bytes.len() {
            let start = address - address % file_size;
            let len = to_usize(start + file_size - address).min(bytes.len() - done);
            let file = SegmentSet::ensure(&self.files, start).await?;
            disk.write_at(file, address - start, bytes.slice(done..done + len))
                .await?;
            self.state.borrow_mut().dirty.insert(start);
            done += len;
            address += to_u64(len);
        }
        let mut state = self.state.borrow_mut();
        // One writer (the checkpoint); appends meanwhile only grow the tail.
        assert!(
            state.written == first && to_u64(state.tail.len()) >= count,
            "consume queue {}/{}: wrote out entries [{first}, {}) but the queue now has {} \
             written and {} in its tail",
            self.topic,
            self.queue_id,
            first + count,
            state.written,
            state.tail.len()
        );
        state.written += count;
        state.tail.drain(..to_usize(count));
        Ok(())
    }

    /// Syncs every file written since the last sync.
    pub async fn sync(&self) -> io::Result<()> {
        let dirty = std::mem::take(&mut self.state.borrow_mut().dirty);
        let disk = self.files.borrow().disk_handle();
        for start in dirty {
            let file = self.files.borrow().file(start);
            if let Some(file) = file {
                disk.sync_data(file).await?;
            }
        }
        Ok(())
    }

    pub fn close(&self) {
        self.files.borrow_mut().close_all();
    }
}

/// Finds a queue's end in its files: the first entry that is not written, out of order,
/// or (with `cut_at`) whose record starts at or past `cut_at`. The first file's leading
/// unwritten entries, before a written one, are skipped: a queue that began past its
/// file's start ([`ConsumeQueue::begin_at`]). Zeroes the entries past the end (syncing
/// what it zeroed) and removes the files wholly past it. Returns the end and the end of
/// the last entry's record. The one home of the cut for recovery and truncation.
async fn find_end(
    files: &RefCell<SegmentSet>,
    entries_per_file: u64,
    cut_at: Option<LogPos>,
) -> io::Result<(u64, LogPos)> {
    let file_size = entries_per_file * CQ_ENTRY_LEN;
    let starts = files.borrow().starts();
    for (index, &start) in starts.iter().enumerate().rev() {
        let bytes = files.borrow().read_bytes(start, to_usize(file_size))?;
        let lead = if index == 0 {
            leading_unwritten(&bytes)
        } else {
            0
        };
        let mut valid = 0u64;
        let mut last_record_end = LogPos::default();
        for chunk in bytes.chunks_exact(ENTRY_BYTES).skip(to_usize(lead)) {
            let entry = CqEntry::decode(chunk);
            if !entry.is_written() {
                break;
            }
            let past_cut = cut_at.is_some_and(|cut| entry.position() >= cut);
            let out_of_order = valid > 0 && entry.position() < last_record_end;
            if past_cut || out_of_order {
                break;
            }
            last_record_end = entry.end();
            valid += 1;
        }
        if valid == 0 && index > 0 {
            files.borrow_mut().remove_from(start)?;
            continue;
        }
        let end_entry = start / CQ_ENTRY_LEN + lead + valid;
        if lead + valid < entries_per_file {
            SegmentSet::zero_tail(files, end_entry * CQ_ENTRY_LEN).await?;
        }
        if index + 1 < starts.len() {
            files.borrow_mut().remove_from(starts[index + 1])?;
        }
        return Ok((end_entry, last_record_end));
    }
    Ok((0, LogPos::default()))
}

/// How many unwritten entries open a file before its first written one (0 when it holds
/// none: an empty file is no queue that began late).
fn leading_unwritten(bytes: &[u8]) -> u64 {
    let lead = bytes
        .chunks_exact(ENTRY_BYTES)
        .take_while(|chunk| !CqEntry::decode(chunk).is_written())
        .count();
    if lead * ENTRY_BYTES >= bytes.len() {
        0
    } else {
        to_u64(lead)
    }
}

/// The queue offset of the first file's first written entry (`None` without files or
/// without a written entry in the first file).
fn first_entry(files: &SegmentSet, entries_per_file: u64) -> io::Result<Option<u64>> {
    let Some(start) = files.first_start() else {
        return Ok(None);
    };
    let first = files.read_bytes(start, ENTRY_BYTES)?;
    if CqEntry::decode(&first).is_written() {
        return Ok(Some(start / CQ_ENTRY_LEN));
    }
    let bytes = files.read_bytes(start, to_usize(entries_per_file * CQ_ENTRY_LEN))?;
    let lead = leading_unwritten(&bytes);
    Ok((lead > 0).then_some(start / CQ_ENTRY_LEN + lead))
}

#[cfg(test)]
mod tests {
    use super::CqEntry;
    use crate::store::position::LogPos;

    #[test]
    fn an_entry_gives_its_record_as_typed_positions() {
        let entry = CqEntry::for_record(LogPos::new(1 << 56), 300, -7);
        assert_eq!(
            (entry.phys_offset, entry.size, entry.tags_code),
            (1_i64 << 56, 300, -7)
        );
        assert_eq!(
            (entry.position().get(), entry.size_bytes(), entry.byte_len()),
            (1 << 56, 300, 300)
        );
        assert_eq!(entry.end().get(), (1 << 56) + 300);
        let mut bytes = Vec::new();
        entry.encode(&mut bytes);
        assert_eq!(CqEntry::decode(&bytes), entry);
    }

    #[test]
    #[should_panic(expected = "no negative position")]
    fn an_unwritten_entry_has_no_position() {
        let unwritten = CqEntry {
            phys_offset: -1,
            size: 0,
            tags_code: 0,
        };
        unwritten.position();
    }
}
