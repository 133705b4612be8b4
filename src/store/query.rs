//! Finding records other than by queue offset: by key through the index (QUERY_MESSAGE)
//! and by physical offset (VIEW_MESSAGE_BY_ID), served as file ranges like pulls (D8).
//!
//! Invariants:
//! - Only visible records are served: an offset at or past what was dispatched, or one
//!   that does not start a record, finds nothing, so a made-up id can never read the
//!   middle of a record. A record start is what the record index says it is: the bytes'
//!   magic and own PHYSICALOFFSET are checked first (cheap), then the ConsumeQueue entry
//!   the record names (topic, queue id, queue offset) must point back at this offset with
//!   this size. Magic, size and even a CRC can be forged inside a message body by a
//!   producer who predicts where its body will land; the queue entry cannot.
//! - Each record found is its own chunk of the body, so a caller merging the answers of
//!   several shards can keep any subset of them.

use super::index::IndexHit;
use super::position::{micros_u64, to_u64, to_usize, LogPos};
use super::record::{
    self, Decoded, RecordView, Verify, MAGIC_POS, MAGIC_V1, MAGIC_V2, PHYS_OFFSET_POS,
    TOTAL_SIZE_POS,
};
use super::{Store, StoreError};
use crate::io::file_body::{BodyChunk, FileBody};

/// Bytes of a record's head read to check that an offset starts one.
const HEAD_LEN: usize = PHYS_OFFSET_POS + 8;

/// One record a lookup serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundRecord {
    pub phys_offset: u64,
    pub size: u32,
    /// As the index knows it (to the second); the record's own is in its bytes.
    pub store_timestamp: i64,
}

/// Records found by key, with their bytes: chunk `i` of `body` is record `i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyLookup {
    pub records: Vec<FoundRecord>,
    pub body: FileBody,
    /// The index's newest end: `indexLastUpdateTimestamp`, `indexLastUpdatePhyoffset`.
    pub last_update_timestamp: i64,
    pub last_update_phys_offset: i64,
}

impl Store {
    /// The records indexed under `topic#key` stored within `[begin_ms, end_ms]`, at most
    /// `max` (the newest), in CommitLog order. Empty when the index is off.
    pub fn lookup_keys(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<KeyLookup, StoreError> {
        let Some(index) = &self.shared.index else {
            return Ok(KeyLookup::default());
        };
        let began = std::time::Instant::now();
        let lookup = self.lookup_in(index, topic, key, max, begin_ms, end_ms);
        let took = micros_u64(began.elapsed());
        self.shared.update_stats(|stats| {
            stats.index_queries += 1;
            stats.index_query_micros += took;
        });
        lookup
    }

    fn lookup_in(
        &self,
        index: &super::index::Index,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<KeyLookup, StoreError> {
        let mut hits: Vec<IndexHit> = index
            .lookup(topic, key, max, begin_ms, end_ms)
            .map_err(|error| StoreError::from_io("reading the index", &error))?;
        hits.sort_by_key(|hit| hit.phys_offset);
        hits.dedup_by_key(|hit| hit.phys_offset);
        let (last_update_timestamp, last_update_phys_offset) = index.last_update();
        let mut lookup = KeyLookup {
            last_update_timestamp,
            last_update_phys_offset,
            ..KeyLookup::default()
        };
        for hit in hits {
            if let Some((size, chunk)) = self.record_at(hit.phys_offset)? {
                lookup.records.push(FoundRecord {
                    phys_offset: hit.phys_offset,
                    size,
                    store_timestamp: hit.store_timestamp,
                });
                lookup.body.push(chunk);
            }
        }
        Ok(lookup)
    }

    /// The visible record that starts at `phys`: its size and its bytes as one chunk, or
    /// `None` if no visible record starts there (outside the log, past what is visible, or
    /// inside a record).
    pub fn record_at(&self, phys: u64) -> Result<Option<(u32, BodyChunk)>, StoreError> {
        let visible_end = self.shared.dispatched_pos.get();
        if phys < self.shared.config.offset_base()
            || phys.saturating_add(to_u64(HEAD_LEN)) > visible_end
        {
            return Ok(None);
        }
        let segments = self.shared.log.segments.borrow();
        let start = segments.start_of(phys);
        if phys - start + to_u64(HEAD_LEN) > segments.size() || segments.file(start).is_none() {
            return Ok(None);
        }
        let mut head = [0u8; HEAD_LEN];
        segments
            .read_exact(phys, &mut head)
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
        let be_i32 = |at: usize| i32::from_be_bytes(head[at..at + 4].try_into().expect("4"));
        // A negative size is no record's.
        let size = u32::try_from(be_i32(TOTAL_SIZE_POS)).unwrap_or(0);
        let magic = be_i32(MAGIC_POS);
        let own_phys = i64::from_be_bytes(
            head[PHYS_OFFSET_POS..PHYS_OFFSET_POS + 8]
                .try_into()
                .expect("8"),
        );
        let starts_record = (magic == MAGIC_V1 || magic == MAGIC_V2)
            && LogPos::from_stored(own_phys) == Some(LogPos::new(phys))
            && to_usize(size) >= HEAD_LEN
            && phys - start + u64::from(size) <= segments.size()
            && phys + u64::from(size) <= visible_end;
        if !starts_record {
            return Ok(None);
        }
        let bytes = segments
            .read_bytes(phys, to_usize(size))
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
        let Ok(Decoded::Record(view)) = record::decode(&bytes, Verify::Structure) else {
            return Ok(None);
        };
        if !self.indexed_at(&view, phys, size)? {
            return Ok(None);
        }
        let chunk = segments
            .body_chunk(phys, u64::from(size))
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
        Ok(Some((size, chunk)))
    }

    /// Whether the ConsumeQueue entry the record `view` names is this record: at `phys`,
    /// `size` bytes long. Every stored record is dispatched to its queue (`append::dispatch`),
    /// so a record start without its entry is bytes inside another record's body.
    fn indexed_at(&self, view: &RecordView<'_>, phys: u64, size: u32) -> Result<bool, StoreError> {
        let Ok(queue_offset) = u64::try_from(view.queue_offset) else {
            return Ok(false);
        };
        let Some(queue) = self.shared.queue(view.topic, view.queue_id) else {
            return Ok(false);
        };
        if queue_offset < queue.min_offset() || queue_offset >= queue.max_offset() {
            return Ok(false);
        }
        let entries = queue
            .read_entries(queue_offset, 1)
            .map_err(|error| StoreError::from_io("reading a consume queue", &error))?;
        Ok(entries.first().is_some_and(|entry| {
            entry.position() == LogPos::new(phys) && entry.size_bytes() == size
        }))
    }
}
