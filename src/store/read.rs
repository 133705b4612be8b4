//! Reading a queue for a pull: ConsumeQueue entries → the records a pull may take →
//! CommitLog byte ranges, adjacent records coalesced (D8).
//!
//! ```text
//!   ConsumeQueue  [e0][e1][e2][e3] ...      (phys, size, tag code), visible entries only
//!        │ select: tag filter, max count, max bytes
//!        ▼
//!   records       r0 r1 r3                  (phys, queue offset, size)
//!        │ coalesce: r0 and r1 touch in the same segment → one range
//!        ▼
//!   FileBody      [seg0 @a +(s0+s1)] [seg1 @b +s3]   sent with sendfile by the writer
//! ```
//!
//! Invariants:
//! - Only visible records are served: the ConsumeQueue holds an entry only once its record
//!   is visible (D7), and this module reads nothing the ConsumeQueue does not point at.
//! - A range never spans two segments (they are different files), even if two records
//!   happen to touch across a segment boundary.
//! - [`Store::read_messages`] is the one implementation; [`Store::get_messages`] is a thin
//!   copying wrapper over it for tools and tests that want bytes in memory.

use bytes::Bytes;

use super::consume_queue::CqEntry;
use super::position::{java_int, to_u64, to_usize};
use super::{GetResult, GetStatus, Store, StoreError, StoredMessage};
use crate::io::file_body::FileBody;

/// Where one served record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLoc {
    pub phys_offset: u64,
    pub queue_offset: u64,
    pub size: u32,
}

/// A pull's read: the status and offsets of [`GetResult`], and the records as file ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRead {
    pub status: GetStatus,
    pub next_begin_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    /// The served records, in queue order.
    pub records: Vec<RecordLoc>,
    /// Their bytes, back to back: exactly the sum of `records`' sizes.
    pub body: FileBody,
}

/// How much one pull may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// At least 1.
    pub max_count: usize,
    /// A pull always takes its first record, even a larger one.
    pub max_bytes: usize,
}

/// Picks the records of `entries` (queue offsets from `first`) a pull takes, and the queue
/// offset the next pull starts at (past every entry examined, filtered out or not).
pub fn select(
    entries: &[CqEntry],
    first: u64,
    limits: ReadLimits,
    tag_codes: Option<&[i32]>,
) -> (Vec<RecordLoc>, u64) {
    let mut records = Vec::new();
    let mut bytes_total = 0usize;
    let mut next = first;
    for (index, entry) in entries.iter().enumerate() {
        if records.len() >= limits.max_count {
            break;
        }
        if !records.is_empty() && bytes_total + entry.byte_len() > limits.max_bytes {
            break;
        }
        let queue_offset = first + to_u64(index);
        next = queue_offset + 1;
        // RocketMQ's `codeSet` filter: the tag hash truncated to an int.
        if tag_codes.is_some_and(|codes| !codes.contains(&java_int(entry.tags_code))) {
            continue;
        }
        bytes_total += entry.byte_len();
        records.push(RecordLoc {
            phys_offset: entry.position().get(),
            queue_offset,
            size: entry.size_bytes(),
        });
    }
    (records, next)
}

/// A run of CommitLog bytes within one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysRange {
    pub start: u64,
    pub len: u64,
}

/// Merges records that follow each other in the log into one range, never across a
/// segment boundary (`segment_of` maps an address to its segment's start).
pub fn coalesce(records: &[RecordLoc], segment_of: impl Fn(u64) -> u64) -> Vec<PhysRange> {
    let mut ranges: Vec<PhysRange> = Vec::new();
    for record in records {
        let (start, len) = (record.phys_offset, u64::from(record.size));
        match ranges.last_mut() {
            Some(last)
                if last.start + last.len == start
                    && segment_of(last.start) == segment_of(start) =>
            {
                last.len += len
            }
            _ => ranges.push(PhysRange { start, len }),
        }
    }
    ranges
}

/// Entries examined per pull when filtering by tag: filtered-out entries cost a scan, so
/// the window is bounded to keep one read cheap.
const FILTER_SCAN_WINDOW: usize = 800;

impl Store {
    /// Reads up to `max_count` visible messages of a queue from `offset`, keeping only those
    /// whose tag hash is in `tag_codes` when it is given (RocketMQ's `codeSet` filter), as
    /// file ranges of the CommitLog (the store's `max_transfer_*` settings cap it too).
    pub fn read_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max_count: u32,
        tag_codes: Option<&[i32]>,
    ) -> Result<PullRead, StoreError> {
        let config = &self.shared.config;
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(empty(GetStatus::NoMessageInQueue, 0, 0, 0));
        };
        let (min, max) = (queue.min_offset(), queue.max_offset());
        if max == min {
            return Ok(empty(GetStatus::NoMessageInQueue, min, min, max));
        }
        if offset < min {
            return Ok(empty(GetStatus::OffsetTooSmall, min, min, max));
        }
        if offset == max {
            return Ok(empty(GetStatus::OffsetOverflowOne, offset, min, max));
        }
        if offset > max {
            return Ok(empty(GetStatus::OffsetOverflowBadly, max, min, max));
        }
        let limits = ReadLimits {
            max_count: to_usize(max_count.clamp(1, config.max_transfer_count)),
            max_bytes: config.max_transfer_bytes,
        };
        let window = if tag_codes.is_some() {
            FILTER_SCAN_WINDOW.max(limits.max_count)
        } else {
            limits.max_count
        };
        let entries = queue
            .read_entries(offset, window)
            .map_err(|error| StoreError::from_io("reading a consume queue", &error))?;
        let (records, next) = select(&entries, offset, limits, tag_codes);
        let mut body = FileBody::new();
        {
            let segments = self.shared.log.segments.borrow();
            for range in coalesce(&records, |address| segments.start_of(address)) {
                let chunk = segments
                    .body_chunk(range.start, range.len)
                    .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
                body.push(chunk);
            }
        }
        let status = if records.is_empty() {
            GetStatus::NoMatchedMessage
        } else {
            GetStatus::Found
        };
        Ok(PullRead {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            records,
            body,
        })
    }

    /// [`Store::read_messages`], with each record's bytes copied into memory.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max_count: u32,
        tag_codes: Option<&[i32]>,
    ) -> Result<GetResult, StoreError> {
        let read = self.read_messages(topic, queue_id, offset, max_count, tag_codes)?;
        let mut all = Vec::with_capacity(to_usize(read.body.len()));
        read.body
            .copy_into(&mut all)
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
        let all = Bytes::from(all);
        let mut at = 0usize;
        let messages = read
            .records
            .iter()
            .map(|record| {
                let bytes = all.slice(at..at + to_usize(record.size));
                at += to_usize(record.size);
                StoredMessage {
                    phys_offset: record.phys_offset,
                    queue_offset: record.queue_offset,
                    bytes,
                }
            })
            .collect();
        Ok(GetResult {
            status: read.status,
            next_begin_offset: read.next_begin_offset,
            min_offset: read.min_offset,
            max_offset: read.max_offset,
            messages,
        })
    }
}

fn empty(status: GetStatus, next: u64, min: u64, max: u64) -> PullRead {
    PullRead {
        status,
        next_begin_offset: next,
        min_offset: min,
        max_offset: max,
        records: Vec::new(),
        body: FileBody::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(phys: i64, size: i32, tags_code: i64) -> CqEntry {
        CqEntry {
            phys_offset: phys,
            size,
            tags_code,
        }
    }

    fn loc(phys: u64, queue_offset: u64, size: u32) -> RecordLoc {
        RecordLoc {
            phys_offset: phys,
            queue_offset,
            size,
        }
    }

    const ALL: ReadLimits = ReadLimits {
        max_count: 32,
        max_bytes: 1 << 20,
    };

    #[test]
    fn select_takes_everything_within_limits() {
        let entries = [entry(0, 100, 1), entry(100, 50, 2), entry(400, 10, 1)];
        let (records, next) = select(&entries, 7, ALL, None);
        assert_eq!(
            records,
            vec![loc(0, 7, 100), loc(100, 8, 50), loc(400, 9, 10)]
        );
        assert_eq!(next, 10);
    }

    #[test]
    fn select_stops_at_max_count() {
        let entries = [entry(0, 10, 0), entry(10, 10, 0), entry(20, 10, 0)];
        let limits = ReadLimits {
            max_count: 2,
            ..ALL
        };
        let (records, next) = select(&entries, 0, limits, None);
        assert_eq!(records.len(), 2);
        assert_eq!(next, 2);
    }

    #[test]
    fn select_stops_before_max_bytes_but_always_takes_one() {
        let entries = [entry(0, 60, 0), entry(60, 50, 0), entry(110, 10, 0)];
        let limits = ReadLimits {
            max_bytes: 100,
            ..ALL
        };
        let (records, next) = select(&entries, 0, limits, None);
        assert_eq!(records, vec![loc(0, 0, 60)]);
        assert_eq!(next, 1, "the entry that did not fit is read next time");
        let tiny = ReadLimits {
            max_bytes: 1,
            ..ALL
        };
        let (records, _) = select(&entries, 0, tiny, None);
        assert_eq!(
            records,
            vec![loc(0, 0, 60)],
            "an oversized first record is served"
        );
    }

    #[test]
    fn select_filters_by_tag_code_and_moves_past_skipped_entries() {
        let entries = [
            entry(0, 10, 5),
            entry(10, 10, 6),
            entry(20, 10, 5),
            entry(30, 10, 6),
        ];
        let (records, next) = select(&entries, 3, ALL, Some(&[5]));
        assert_eq!(records, vec![loc(0, 3, 10), loc(20, 5, 10)]);
        assert_eq!(next, 7);
        let (records, next) = select(&entries, 3, ALL, Some(&[9]));
        assert!(records.is_empty());
        assert_eq!(next, 7, "a pull that matched nothing still moves on");
    }

    #[test]
    fn select_compares_tag_codes_as_ints() {
        // The ConsumeQueue stores the sign-extended i32 hash.
        let entries = [entry(0, 10, -5)];
        let (records, _) = select(&entries, 0, ALL, Some(&[-5]));
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn coalesce_merges_touching_records_of_one_segment() {
        let segment = |address: u64| address - address % 1000;
        let records = [
            loc(0, 0, 100),
            loc(100, 1, 50),
            loc(150, 2, 10),
            loc(300, 3, 20), // a gap: another queue's records sit in between
            loc(320, 4, 20),
        ];
        assert_eq!(
            coalesce(&records, segment),
            vec![
                PhysRange { start: 0, len: 160 },
                PhysRange {
                    start: 300,
                    len: 40
                }
            ]
        );
    }

    #[test]
    fn coalesce_never_crosses_a_segment() {
        let segment = |address: u64| address - address % 1000;
        let records = [loc(900, 0, 100), loc(1000, 1, 10), loc(1010, 2, 10)];
        assert_eq!(
            coalesce(&records, segment),
            vec![
                PhysRange {
                    start: 900,
                    len: 100
                },
                PhysRange {
                    start: 1000,
                    len: 20
                }
            ]
        );
    }

    #[test]
    fn coalesce_keeps_out_of_order_records_apart() {
        let segment = |_| 0;
        let records = [loc(100, 0, 10), loc(0, 1, 100)];
        assert_eq!(coalesce(&records, segment).len(), 2);
        assert!(coalesce(&[], segment).is_empty());
    }
}
