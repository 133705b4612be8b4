//! Offline inspection of a store directory: `ringmq store verify` and `ringmq store dump`.
//! Neither writes anything; both work on a store that is not open (or was killed), and
//! refuse one a running node holds, or a node's root given for a shard's store
//! ([`super::inspect_guard`]).
//!
//! `verify` judges damage against what the store promised: every CommitLog byte below the
//! durable point (the clean log end, or the checkpoint's safe offset after a crash) must
//! be valid records, and every ConsumeQueue entry below it must point at the matching
//! record. Invalid bytes *past* the durable point of a crashed store are its unrecovered
//! tail, which the next start cuts; they are reported, not counted as damage.

use std::io;
use std::path::Path;
use std::rc::Rc;

use serde::Serialize;

use super::checkpoint::read_checkpoint;
use super::consume_queue::{CqEntry, CQ_ENTRY_LEN};
use super::inspect_guard::hold_for_inspection;
use super::position::{to_u64, to_usize, LogPos, QueueOffset};
use super::properties;
use super::record::{self, Decoded, RecordView, Verify};
use super::scan::{scan, ScanStop};
use super::segment::{parse_segment_name, SegmentSet};
use super::{ABORT_FILE, COMMIT_LOG_DIR, CONSUME_QUEUE_DIR};
use crate::io::Disk;

const WINDOW: usize = 8 << 20;

/// What `verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    pub segments: u64,
    pub records: u64,
    pub record_bytes: u64,
    pub log_end: u64,
    pub durable_point: u64,
    pub crashed: bool,
    pub queues: u64,
    pub queue_entries: u64,
    /// Of those, the entries at the front of their queue whose records retention deleted
    /// (below the log's first segment): the queue's minimum is past them, as the next
    /// start computes it. Not checked further, and not damage.
    pub expired_queue_entries: u64,
    /// Invalid data past the durable point that the next start will cut.
    pub unrecovered_tail: Option<String>,
    /// Everything wrong below the durable point. Empty means the store is sound.
    pub damage: Vec<String>,
}

/// One line of `store dump`.
#[derive(Clone, Debug, Serialize)]
pub struct DumpedRecord<'a> {
    pub phys_offset: u64,
    pub total_size: u32,
    pub topic: &'a str,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub store_timestamp: i64,
    pub born_timestamp: i64,
    pub sys_flag: i32,
    pub flag: i32,
    pub reconsume_times: i32,
    pub keys: Option<&'a str>,
    pub tags: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    pub body_size: usize,
    pub body_crc: i32,
}

impl<'a> DumpedRecord<'a> {
    pub fn new(phys: u64, view: &RecordView<'a>) -> DumpedRecord<'a> {
        DumpedRecord {
            phys_offset: phys,
            total_size: view.total_size,
            topic: view.topic,
            queue_id: view.queue_id,
            queue_offset: view.queue_offset,
            store_timestamp: view.store_timestamp,
            born_timestamp: view.born_timestamp,
            sys_flag: view.sys_flag,
            flag: view.flag,
            reconsume_times: view.reconsume_times,
            keys: properties::get(view.properties, properties::KEYS),
            tags: properties::get(view.properties, properties::TAGS),
            uniq_key: properties::get(view.properties, properties::UNIQ_KEY),
            body_size: view.body.len(),
            body_crc: view.body_crc,
        }
    }
}

/// Opens a store's CommitLog segments for reading, inferring segment size and shard base
/// from the files themselves.
pub fn open_log(disk: Rc<dyn Disk>, dir: &Path) -> io::Result<Option<SegmentSet>> {
    let log_dir = dir.join(COMMIT_LOG_DIR);
    if !disk.exists(&log_dir) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} does not exist: is {} a ringmq store?",
                log_dir.display(),
                dir.display()
            ),
        ));
    }
    let names: Vec<u64> = disk
        .list_dir(&log_dir)?
        .iter()
        .filter_map(|name| parse_segment_name(name))
        .collect();
    let Some(&first) = names.first() else {
        return Ok(None);
    };
    let probe = disk.open(&log_dir.join(super::segment::segment_name(first)), false)?;
    let size = disk.file_len(probe)?;
    disk.close(probe);
    if size == 0 {
        return Ok(None);
    }
    let base = (first >> 56) << 56;
    SegmentSet::load(disk, &log_dir, size, base).map(Some)
}

/// Checks every record and every ConsumeQueue entry of the store in `dir`.
pub fn verify(disk: Rc<dyn Disk>, dir: &Path) -> io::Result<VerifyReport> {
    let _held = hold_for_inspection(disk.as_ref(), dir)?;
    let mut report = VerifyReport {
        crashed: disk.exists(&dir.join(ABORT_FILE)),
        ..VerifyReport::default()
    };
    let checkpoint = read_checkpoint(disk.as_ref(), dir)?;
    let Some(segments) = open_log(disk.clone(), dir)? else {
        return Ok(report);
    };
    report.segments = to_u64(segments.starts().len());
    let first = segments.first_start().unwrap_or(segments.base());
    report.durable_point = match checkpoint {
        Some(checkpoint) if checkpoint.clean && !report.crashed => checkpoint.log_end,
        Some(checkpoint) => checkpoint.safe_offset,
        None => first,
    };
    let end = scan(&segments, first, Verify::Full, WINDOW, |_, view| {
        report.records += 1;
        report.record_bytes += u64::from(view.total_size);
        Ok::<(), std::convert::Infallible>(())
    })?;
    let reason = end.reason();
    report.log_end = end.end;
    if end.end < report.durable_point {
        report.damage.push(format!(
            "the log's valid records end at {} but the checkpoint promises {} durable: {}",
            end.end,
            report.durable_point,
            reason.as_deref().unwrap_or("the data after it is missing")
        ));
    } else if !end.stop.may_cut() {
        // A whole record the next start would refuse: damage wherever it is.
        report.damage.push(format!(
            "at {}: {}",
            end.end,
            reason.as_deref().unwrap_or_default()
        ));
    } else if let Some(reason) = reason {
        report.unrecovered_tail = Some(format!("at {}: {reason}", end.end));
    }
    verify_queues(disk.as_ref(), dir, &segments, &mut report)?;
    Ok(report)
}

fn verify_queues(
    disk: &dyn Disk,
    dir: &Path,
    segments: &SegmentSet,
    report: &mut VerifyReport,
) -> io::Result<()> {
    let root = dir.join(CONSUME_QUEUE_DIR);
    if !disk.exists(&root) {
        return Ok(());
    }
    // Retention moves the log's start; the queues' entries below it went with it.
    let log_start = LogPos::new(segments.first_start().unwrap_or(segments.base()));
    for topic in disk.list_dir(&root)? {
        for queue in disk.list_dir(&root.join(&topic))? {
            report.queues += 1;
            let mut walk = QueueWalk {
                topic: &topic,
                queue: &queue,
                queue_id: queue.parse().unwrap_or(-1),
                log_start,
                expected_index: None,
                previous_end: LogPos::default(),
                retained_seen: false,
            };
            let queue_dir = root.join(&topic).join(&queue);
            for name in disk.list_dir(&queue_dir)? {
                let Some(start) = parse_segment_name(&name) else {
                    continue;
                };
                let bytes = read_whole_file(disk, &queue_dir.join(&name))?;
                walk.file(segments, start, &bytes, report);
            }
        }
    }
    Ok(())
}

fn read_whole_file(disk: &dyn Disk, path: &Path) -> io::Result<Vec<u8>> {
    let file = disk.open(path, false)?;
    let len = disk.file_len(file)?;
    let mut bytes = vec![0u8; to_usize(len)];
    crate::io::read_exact_at(disk, file, 0, &mut bytes)?;
    disk.close(file);
    Ok(bytes)
}

/// One ConsumeQueue's entries checked in order, file after file.
struct QueueWalk<'a> {
    topic: &'a str,
    queue: &'a str,
    queue_id: i32,
    log_start: LogPos,
    /// The index the next entry must have (none before the first).
    expected_index: Option<u64>,
    previous_end: LogPos,
    /// Whether an entry at or past the log's start was seen: expired entries may only
    /// come before every retained one.
    retained_seen: bool,
}

impl QueueWalk<'_> {
    /// Checks the written entries of the file starting at byte `start` of the queue.
    fn file(&mut self, segments: &SegmentSet, start: u64, bytes: &[u8], report: &mut VerifyReport) {
        let (topic, queue) = (self.topic, self.queue);
        for (slot, chunk) in bytes.chunks_exact(to_usize(CQ_ENTRY_LEN)).enumerate() {
            let entry = CqEntry::decode(chunk);
            if !entry.is_written() {
                break;
            }
            let index = start / CQ_ENTRY_LEN + to_u64(slot);
            if self
                .expected_index
                .is_some_and(|expected| expected != index)
            {
                report
                    .damage
                    .push(format!("{topic}/{queue}: entries jump to {index}"));
            }
            self.expected_index = Some(index + 1);
            report.queue_entries += 1;
            if entry.position() < self.log_start {
                if self.retained_seen {
                    report.damage.push(format!(
                        "{topic}/{queue} entry {index}: points at {}, below the log's start, after entries the log holds",
                        entry.phys_offset
                    ));
                } else {
                    report.expired_queue_entries += 1;
                }
                self.previous_end = entry.end();
                continue;
            }
            self.retained_seen = true;
            let problem = check_entry(
                segments,
                report.log_end,
                topic,
                self.queue_id,
                index,
                &entry,
                self.previous_end,
            );
            self.previous_end = entry.end();
            if let Some(problem) = problem {
                if entry.position().get() < report.durable_point {
                    report
                        .damage
                        .push(format!("{topic}/{queue} entry {index}: {problem}"));
                } else if report.unrecovered_tail.is_none() {
                    report.unrecovered_tail =
                        Some(format!("{topic}/{queue} entry {index}: {problem}"));
                }
            }
        }
    }
}

/// What is wrong with the written `entry` at `index` of `topic`/`queue_id`, if anything.
fn check_entry(
    segments: &SegmentSet,
    log_end: u64,
    topic: &str,
    queue_id: i32,
    index: u64,
    entry: &CqEntry,
    previous_end: LogPos,
) -> Option<String> {
    let phys = entry.position();
    if phys < previous_end {
        return Some(format!("phys {phys} overlaps the previous entry's record"));
    }
    if entry.end().get() > log_end {
        return Some(format!(
            "points at {phys}, past the log's valid end {log_end}"
        ));
    }
    let bytes = match segments.read_bytes(phys.get(), entry.byte_len()) {
        Ok(bytes) => bytes,
        Err(error) => return Some(format!("cannot read its record at {phys}: {error}")),
    };
    match record::decode(&bytes, Verify::Structure) {
        Ok(Decoded::Record(view)) => {
            if view.topic != topic
                || view.queue_id != queue_id
                || QueueOffset::from_stored(view.queue_offset) != Some(QueueOffset::new(index))
            {
                Some(format!(
                    "points at a record of {}/{} offset {}",
                    view.topic, view.queue_id, view.queue_offset
                ))
            } else if view.total_size != entry.size_bytes() {
                Some(format!(
                    "size {} but the record is {}",
                    entry.size, view.total_size
                ))
            } else {
                None
            }
        }
        Ok(Decoded::Blank { .. }) => Some(format!("points at a blank record at {phys}")),
        Err(error) => Some(format!("points at an invalid record at {phys}: {error}")),
    }
}

/// Calls `emit` for each valid record from the start of the log, in order, and returns
/// where and why the walk stopped (`None` reason: a clean end of data).
pub fn dump(
    disk: Rc<dyn Disk>,
    dir: &Path,
    mut emit: impl FnMut(DumpedRecord<'_>) -> io::Result<()>,
) -> io::Result<(u64, Option<String>)> {
    let _held = hold_for_inspection(disk.as_ref(), dir)?;
    let Some(segments) = open_log(disk, dir)? else {
        return Ok((0, None));
    };
    let first = segments.first_start().unwrap_or(segments.base());
    let end = scan(&segments, first, Verify::Full, WINDOW, |phys, view| {
        emit(DumpedRecord::new(phys, view))
    })?;
    let reason = end.reason();
    match end.stop {
        ScanStop::Refused(error) => Err(error),
        _ => Ok((end.end, reason)),
    }
}
