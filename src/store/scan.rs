//! Walks the CommitLog record by record: the one reader of the log's structure, shared by
//! recovery and the offline `store verify` / `store dump` tools.
//!
//! The walk stops at the first position that does not hold a valid record. Two kinds of
//! stop are told apart: a clean end (no further segment, or an all-zero header, which is
//! what a preallocated segment holds past its last record) and an invalid record (bad
//! magic, size, CRC, or a truncated record), whose position and reason are reported.

use std::io;

use super::record::{self, Decoded, RecordView, Verify};
use super::segment::SegmentSet;

/// Where a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanEnd {
    /// One past the last valid record (a segment start when the last thing was a blank).
    pub end: u64,
    /// Why it stopped at `end`, when that was not a clean end of data.
    pub invalid: Option<String>,
}

/// What a visitor says after a record.
pub type Visit = Result<(), String>;

/// Reads records from `from` and hands each to `visit` with its physical offset.
/// A visitor error stops the scan and is returned as the stop reason.
pub fn scan(
    segments: &SegmentSet,
    from: u64,
    verify: Verify,
    window_bytes: usize,
    mut visit: impl FnMut(u64, &RecordView<'_>) -> Visit,
) -> io::Result<ScanEnd> {
    let segment_size = segments.size();
    let mut pos = from;
    loop {
        let segment_start = segments.start_of(pos);
        if segments.file(segment_start).is_none() {
            return Ok(ScanEnd {
                end: pos,
                invalid: None,
            });
        }
        let segment_end = segment_start + segment_size;
        let mut window = window_bytes.max(4096) as u64;
        let mut buf = segments.read_bytes(pos, window.min(segment_end - pos) as usize)?;
        let mut at = 0usize;
        loop {
            let here = pos + at as u64;
            if here >= segment_end {
                pos = segment_end;
                break;
            }
            let rest = &buf[at..];
            if rest.len() >= 8 && rest[..8].iter().all(|&byte| byte == 0) {
                return Ok(ScanEnd {
                    end: here,
                    invalid: None,
                });
            }
            match record::decode(rest, verify) {
                Ok(Decoded::Record(view)) => {
                    if view.phys_offset as u64 != here {
                        return Ok(stop(
                            here,
                            format!("record claims phys offset {}", view.phys_offset),
                        ));
                    }
                    if let Err(reason) = visit(here, &view) {
                        return Ok(stop(here, reason));
                    }
                    at += view.total_size as usize;
                }
                Ok(Decoded::Blank { len }) => {
                    if here + len as u64 != segment_end {
                        return Ok(stop(
                            here,
                            format!("blank record of {len} bytes does not reach the segment end"),
                        ));
                    }
                    pos = segment_end;
                    break;
                }
                Err(record::DecodeError::Truncated { needed, .. })
                    if (here + needed as u64) <= segment_end
                        && (rest.len() as u64) < segment_end - here =>
                {
                    // The record runs past this window but fits the segment: read further.
                    pos = here;
                    window = window.max(needed as u64);
                    buf = segments.read_bytes(pos, window.min(segment_end - pos) as usize)?;
                    at = 0;
                }
                Err(error) => return Ok(stop(here, error.to_string())),
            }
        }
    }
}

fn stop(end: u64, reason: String) -> ScanEnd {
    ScanEnd {
        end,
        invalid: Some(reason),
    }
}
