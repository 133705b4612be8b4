//! Walks the CommitLog record by record: the one reader of the log's structure, shared by
//! recovery and the offline `store verify` / `store dump` tools.
//!
//! The walk stops at the first position that does not hold a record it can hand on, and
//! says why as a [`ScanStop`], a type rather than a message, because recovery decides
//! from it alone whether the bytes from there on may be deleted:
//!
//! - [`ScanStop::CleanEnd`]: no further segment, or an all-zero header (what a
//!   preallocated segment holds past its last record).
//! - [`ScanStop::Invalid`]: the bytes are not a whole record: bad magic, a size that
//!   disagrees with the fields or runs past the segment, or a body CRC / CRC32C mismatch.
//!   This is what a torn or never-finished write leaves, and the only stop after which
//!   recovery may cut the tail.
//! - [`ScanStop::Inconsistent`]: a record whose CRC32C holds (so it was written whole)
//!   but which cannot be what the appender wrote there: its phys offset field names
//!   another position, or a text field is not UTF-8. A crash cannot produce this.
//! - [`ScanStop::Refused`]: a valid record the visitor could not take (recovery: one it
//!   cannot dispatch).
//!
//! Invariant: the CRCs are checked before anything else is read into a [`RecordView`]
//! (the decoder checks them before the UTF-8 of the text fields under [`Verify::Full`]),
//! so every stop other than `Invalid` is at a record that was written whole.

use std::fmt;
use std::io;

use super::position::{to_u64, to_usize, LogPos};
use super::record::{self, DecodeError, Decoded, RecordView, Verify};
use super::segment::SegmentSet;

/// Why the bytes at a position are not a whole record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidRecord {
    /// Neither a record's nor a blank's magic code.
    Magic(u32),
    /// The size field disagrees with the fields or with the segment.
    Size(String),
    /// The body CRC or the record CRC32C does not match, or the CRC32C is missing.
    Crc(String),
}

impl fmt::Display for InvalidRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidRecord::Magic(magic) => write!(f, "unknown magic code {magic:#010x}"),
            InvalidRecord::Size(why) => write!(f, "bad size: {why}"),
            InvalidRecord::Crc(why) => write!(f, "bad checksum: {why}"),
        }
    }
}

/// Why a scan stopped where it did; see the module docs for what each allows.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanStop<E> {
    CleanEnd,
    Invalid(InvalidRecord),
    Inconsistent(String),
    Refused(E),
}

impl<E> ScanStop<E> {
    /// Whether the bytes from the stop on can only be an unfinished write, which recovery
    /// may discard: a clean end or an invalid record, never a whole record.
    pub fn may_cut(&self) -> bool {
        matches!(self, ScanStop::CleanEnd | ScanStop::Invalid(_))
    }
}

impl<E: fmt::Display> fmt::Display for ScanStop<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanStop::CleanEnd => write!(f, "end of data"),
            ScanStop::Invalid(why) => write!(f, "invalid record: {why}"),
            ScanStop::Inconsistent(why) => write!(f, "inconsistent record: {why}"),
            ScanStop::Refused(error) => write!(f, "{error}"),
        }
    }
}

/// Where a scan stopped.
#[derive(Debug, PartialEq, Eq)]
pub struct ScanEnd<E> {
    /// One past the last record handed on (a segment start when the last thing was a
    /// blank): the position of whatever stopped the walk.
    pub end: u64,
    pub stop: ScanStop<E>,
}

impl<E: fmt::Display> ScanEnd<E> {
    /// The stop as text, `None` for a clean end (what the offline tools print).
    pub fn reason(&self) -> Option<String> {
        match self.stop {
            ScanStop::CleanEnd => None,
            _ => Some(self.stop.to_string()),
        }
    }
}

/// Sorts a decoder error into the stop it makes. Exhaustive on purpose: a new decoder
/// error must be placed on one side of the cut line or the other.
pub(crate) fn stop_for<E>(error: DecodeError) -> ScanStop<E> {
    match error {
        DecodeError::BadMagic(magic) => ScanStop::Invalid(InvalidRecord::Magic(magic)),
        error @ (DecodeError::Truncated { .. } | DecodeError::SizeMismatch { .. }) => {
            ScanStop::Invalid(InvalidRecord::Size(error.to_string()))
        }
        error @ (DecodeError::BodyCrc { .. }
        | DecodeError::MissingRecordCrc
        | DecodeError::RecordCrc { .. }) => {
            ScanStop::Invalid(InvalidRecord::Crc(error.to_string()))
        }
        // Checked after the CRCs under Verify::Full, so the record was written whole.
        error @ DecodeError::BadUtf8(_) => ScanStop::Inconsistent(error.to_string()),
    }
}

/// Reads records from `from` and hands each to `visit` with its physical offset.
/// A visitor error stops the scan as [`ScanStop::Refused`]. Only [`Verify::Full`] tells
/// an invalid record from an inconsistent one, so that is what every caller passes.
pub fn scan<E>(
    segments: &SegmentSet,
    from: u64,
    verify: Verify,
    window_bytes: usize,
    mut visit: impl FnMut(u64, &RecordView<'_>) -> Result<(), E>,
) -> io::Result<ScanEnd<E>> {
    assert!(
        verify == Verify::Full,
        "a scan must verify CRCs to tell torn records from whole ones (asked for {verify:?})"
    );
    let mut pos = from;
    loop {
        let segment_start = segments.start_of(pos);
        if segments.file(segment_start).is_none() {
            return Ok(stop(pos, missing_segment(segments, segment_start)));
        }
        let mut walk = SegmentWalk {
            segments,
            verify,
            window: to_u64(window_bytes.max(4096)),
            segment_end: segment_start + segments.size(),
        };
        match walk.records(pos, &mut visit)? {
            Ok(next_segment) => pos = next_segment,
            Err(end) => return Ok(end),
        }
    }
}

/// The stop at a segment that is not there: the end of the log, unless a later segment
/// is present. A missing segment with later ones present is no end of data: cutting there
/// would delete the acknowledged records of every later segment.
fn missing_segment<E>(segments: &SegmentSet, segment_start: u64) -> ScanStop<E> {
    match segments.last_start().filter(|&last| last > segment_start) {
        Some(last) => ScanStop::Inconsistent(format!(
            "CommitLog segment {} is missing while segment {} is present",
            super::segment::segment_name(segment_start),
            super::segment::segment_name(last)
        )),
        None => ScanStop::CleanEnd,
    }
}

/// The walk through one present segment, reading it a window at a time.
struct SegmentWalk<'a> {
    segments: &'a SegmentSet,
    verify: Verify,
    /// Bytes read at a time; grows to hold a record longer than it.
    window: u64,
    segment_end: u64,
}

impl SegmentWalk<'_> {
    /// The bytes from `pos` to the window's or the segment's end, whichever comes first.
    fn read_from(&self, pos: u64) -> io::Result<bytes::Bytes> {
        let len = self.window.min(self.segment_end - pos);
        self.segments.read_bytes(pos, to_usize(len))
    }

    /// Hands on the records from `pos` to the segment's end: `Ok(next segment's start)`
    /// when the segment ends (its blank record, or its last byte), else `Err` with where
    /// and why the scan stops.
    fn records<E>(
        &mut self,
        mut pos: u64,
        visit: &mut impl FnMut(u64, &RecordView<'_>) -> Result<(), E>,
    ) -> io::Result<Result<u64, ScanEnd<E>>> {
        let segment_end = self.segment_end;
        let mut buf = self.read_from(pos)?;
        let mut at = 0usize;
        loop {
            let here = pos + to_u64(at);
            if here >= segment_end {
                return Ok(Ok(segment_end));
            }
            let rest = &buf[at..];
            if rest.len() >= 8 && rest[..8].iter().all(|&byte| byte == 0) {
                return Ok(Err(stop(here, ScanStop::CleanEnd)));
            }
            match record::decode(rest, self.verify) {
                Ok(Decoded::Record(view)) => {
                    if let Err(stopped) = hand_on(here, &view, visit) {
                        return Ok(Err(stop(here, stopped)));
                    }
                    at += to_usize(view.total_size);
                }
                Ok(Decoded::Blank { len }) => {
                    if here + u64::from(len) != segment_end {
                        return Ok(Err(stop(
                            here,
                            ScanStop::Invalid(InvalidRecord::Size(format!(
                                "blank record of {len} bytes does not reach the segment end"
                            ))),
                        )));
                    }
                    return Ok(Ok(segment_end));
                }
                Err(DecodeError::Truncated { needed, .. })
                    if (here + to_u64(needed)) <= segment_end
                        && to_u64(rest.len()) < segment_end - here =>
                {
                    // The record runs past this window but fits the segment: read further.
                    pos = here;
                    self.window = self.window.max(to_u64(needed));
                    buf = self.read_from(pos)?;
                    at = 0;
                }
                Err(error) => return Ok(Err(stop(here, stop_for(error)))),
            }
        }
    }
}

/// Hands the whole record at `here` to `visit`, unless it names another position (a
/// record with a valid CRC32C the appender cannot have written there).
fn hand_on<E>(
    here: u64,
    view: &RecordView<'_>,
    visit: &mut impl FnMut(u64, &RecordView<'_>) -> Result<(), E>,
) -> Result<(), ScanStop<E>> {
    if !claims_position(here, view) {
        return Err(ScanStop::Inconsistent(format!(
            "record with a valid CRC32C claims phys offset {}",
            view.phys_offset
        )));
    }
    visit(here, view).map_err(ScanStop::Refused)
}

/// Whether the record's phys offset field names `here`, where it lies: what the appender
/// wrote into every record (a replica checks its master's records the same way).
pub(crate) fn claims_position(here: u64, view: &RecordView<'_>) -> bool {
    LogPos::from_stored(view.phys_offset) == Some(LogPos::new(here))
}

fn stop<E>(end: u64, stop: ScanStop<E>) -> ScanEnd<E> {
    ScanEnd { end, stop }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_ends_and_invalid_records_may_be_cut() {
        assert!(ScanStop::<String>::CleanEnd.may_cut());
        assert!(ScanStop::<String>::Invalid(InvalidRecord::Magic(7)).may_cut());
        assert!(!ScanStop::<String>::Inconsistent("x".into()).may_cut());
        assert!(!ScanStop::Refused("x".to_string()).may_cut());
    }

    #[test]
    fn a_missing_segment_before_a_present_one_is_inconsistent_not_an_end() {
        use crate::io::sim::{SimConfig, SimDisk};
        use crate::io::Disk;
        use std::rc::Rc;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let disk: Rc<dyn Disk> = Rc::new(SimDisk::new(SimConfig::with_seed(1)));
            let size = 64 * 1024;
            let set = std::cell::RefCell::new(
                SegmentSet::load(disk.clone(), std::path::Path::new("/log"), size, 0)
                    .expect("load"),
            );
            // Segment 0 closes with a blank, segment `size` is missing, `2 * size` exists.
            let first = SegmentSet::ensure(&set, 0).await.expect("segment 0");
            SegmentSet::ensure(&set, 2 * size).await.expect("segment 2");
            let mut blank = Vec::new();
            record::encode_blank(u32::try_from(size).expect("a test segment"), &mut blank);
            disk.write_at(first, 0, blank.into()).await.expect("blank");
            let end = scan(&set.borrow(), 0, Verify::Full, 4096, |_, _| {
                Ok::<(), String>(())
            })
            .expect("scan");
            assert_eq!(end.end, size);
            let missing = crate::store::segment::segment_name(size);
            assert!(
                matches!(&end.stop, ScanStop::Inconsistent(why) if why.contains(&missing)),
                "expected an inconsistent stop naming {missing}, got {:?}",
                end.stop
            );
            assert!(!end.stop.may_cut());
        });
    }

    #[test]
    fn every_decoder_error_lands_on_its_side_of_the_cut_line() {
        let cases = [
            (DecodeError::BadMagic(1), true),
            (
                DecodeError::Truncated {
                    needed: 9,
                    available: 8,
                },
                true,
            ),
            (
                DecodeError::SizeMismatch {
                    stored: 1,
                    computed: 2,
                },
                true,
            ),
            (
                DecodeError::BodyCrc {
                    stored: 1,
                    computed: 2,
                },
                true,
            ),
            (DecodeError::MissingRecordCrc, true),
            (
                DecodeError::RecordCrc {
                    stored: 1,
                    computed: 2,
                },
                true,
            ),
            (DecodeError::BadUtf8("topic"), false),
        ];
        for (error, cut) in cases {
            let text = error.to_string();
            assert_eq!(stop_for::<String>(error).may_cut(), cut, "{text}");
        }
    }
}
