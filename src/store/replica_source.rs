//! The master side of replication: the ranges of its CommitLog its HA stream sends
//! (`replica.rs` is the side that takes them).
//!
//! A range starts where the replica goes on (its next frame's `at`), never passes the
//! written end (bytes in the page cache, whole records: the appender advances the written
//! position a batch at a time) and never crosses a segment's end, so every range is one
//! frame a replica takes. A range may end mid-record (the cap) and may hold the zeros of
//! the blank that closes a segment; the replica takes both.

use bytes::Bytes;

use super::position::{to_u64, to_usize};
use super::{Store, StoreError};

/// Why [`Store::replica_range`] has no range for an offset.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaRangeError {
    #[error(
        "offset {next} lies below the log's start {start}: retention deleted it, the replica \
         must start again from {start}"
    )]
    BelowStart { next: u64, start: u64 },
    #[error("offset {next} lies past the written end {written}")]
    PastEnd { next: u64, written: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A range of the log for a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaRange {
    /// Where it starts (the frame's `at`).
    pub start: u64,
    pub bytes: Bytes,
}

impl Store {
    /// The log's bytes from `next` for a replica: up to `cap` bytes, never past the written
    /// end, never across a segment end. `None` when `next` is the written end (nothing to
    /// send yet: wait for [`Store::arrivals`] or poll).
    pub fn replica_range(
        &self,
        next: u64,
        cap: usize,
    ) -> Result<Option<ReplicaRange>, ReplicaRangeError> {
        let shared = &self.shared;
        let (start, written) = (shared.log_start(), shared.log.written_pos());
        if next < start {
            return Err(ReplicaRangeError::BelowStart { next, start });
        }
        if next > written {
            return Err(ReplicaRangeError::PastEnd { next, written });
        }
        let segment_end = shared.log.segment_start(next) + shared.log.segment_size();
        let end = written
            .min(segment_end)
            .min(next.saturating_add(to_u64(cap)));
        if end == next {
            return Ok(None);
        }
        let bytes = shared
            .log
            .read(next, to_usize(end - next))
            .map_err(|error| StoreError::from_io("reading the CommitLog for a replica", &error))?;
        Ok(Some(ReplicaRange { start: next, bytes }))
    }
}
