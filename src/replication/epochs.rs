//! One shard store's epoch history (reference-2 §6.4): which master epoch wrote which
//! byte range of the shard's CommitLog, and the consistent point two histories share.
//!
//! An entry `(epoch, start)` says: the bytes from `start` up to the next entry's start
//! (or the store's max offset, for the last entry) were written by the master of `epoch`.
//! Ends are never stored; they are implied, as in RocketMQ's `EpochFileCache`.
//!
//! Invariants, asserted on every change (always on):
//! - epochs strictly increase from entry to entry;
//! - starts never decrease. RocketMQ's `appendEntry` wants them strictly increasing; ringmq
//!   keeps an epoch that wrote nothing (a master elected and replaced before its first
//!   write), since dropping it would hide that the epoch happened, and an empty range
//!   changes no consistent point.
//!
//! ringmq keeps one epoch history per shard store (issue 25: one HA stream per shard, and
//! each shard's CommitLog is its own offset space), written as [`super::epoch_file`]'s
//! text beside that store; reading and writing the file is the caller's.
//!
//! Why same epoch and same start mean the same bytes: an epoch has one master, and an
//! entry reaches a history only two ways, by that master starting the epoch at its own
//! max offset, or by a slave appending it when it copies the epoch's first bytes from that
//! master after truncating to a consistent point. Either way everything below `start` is
//! that master's log, and within the epoch both sides hold a prefix of what it wrote.

/// One entry: the master of `epoch` wrote the bytes from `start` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EpochEntry {
    pub epoch: u32,
    pub start: u64,
}

/// Why an entry cannot join a history.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// Epochs must strictly increase: an entry for an epoch at or below the last one.
    #[error("epoch {epoch} does not follow epoch {last}: epochs must strictly increase")]
    EpochNotIncreasing { last: u32, epoch: u32 },
    /// Starts must not decrease: a newer epoch that starts before the last one.
    #[error(
        "epoch {epoch} starts at {start}, before epoch {last_epoch}'s start {last_start}: \
         starts must not decrease"
    )]
    StartBackwards {
        last_epoch: u32,
        last_start: u64,
        epoch: u32,
        start: u64,
    },
}

/// A shard store's epoch history, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    /// An empty history: a store no master has written yet.
    pub fn new() -> EpochCache {
        EpochCache::default()
    }

    /// A history from entries oldest first (a decoded file or a master's handshake reply),
    /// refused when the entries break an invariant.
    pub fn from_entries(entries: &[EpochEntry]) -> Result<EpochCache, EpochError> {
        let mut cache = EpochCache::new();
        for &entry in entries {
            cache.append(entry)?;
        }
        Ok(cache)
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn last_epoch(&self) -> Option<u32> {
        self.last().map(|entry| entry.epoch)
    }

    /// The entry of `epoch`, if this history has it.
    pub fn get(&self, epoch: u32) -> Option<EpochEntry> {
        self.index_of(epoch).map(|at| self.entries[at])
    }

    /// Where `epoch`'s bytes end: the next entry's start, or `max_offset` for the last
    /// entry (never below its own start: an epoch that wrote nothing ends where it began).
    /// `None` when the history has no such epoch.
    pub fn end_of(&self, epoch: u32, max_offset: u64) -> Option<u64> {
        let at = self.index_of(epoch)?;
        Some(self.end_at(at, max_offset))
    }

    /// The newest entry whose range holds `offset` (start <= offset), with its end (`None`
    /// for the last entry, whose end is the store's max). `None` when `offset` lies before
    /// the first entry's start, or the history is empty.
    pub fn covering(&self, offset: u64) -> Option<(EpochEntry, Option<u64>)> {
        let at = self.entries.partition_point(|entry| entry.start <= offset);
        let at = at.checked_sub(1)?;
        let end = self.entries.get(at + 1).map(|next| next.start);
        Some((self.entries[at], end))
    }

    /// Adds the newest epoch; refused when it would break an invariant (a lower or equal
    /// epoch, or a start before the last one), the history unchanged.
    pub fn append(&mut self, entry: EpochEntry) -> Result<(), EpochError> {
        if let Some(last) = self.last() {
            if entry.epoch <= last.epoch {
                return Err(EpochError::EpochNotIncreasing {
                    last: last.epoch,
                    epoch: entry.epoch,
                });
            }
            if entry.start < last.start {
                return Err(EpochError::StartBackwards {
                    last_epoch: last.epoch,
                    last_start: last.start,
                    epoch: entry.epoch,
                    start: entry.start,
                });
            }
        }
        self.entries.push(entry);
        self.assert_invariants();
        Ok(())
    }

    /// Drops every entry that starts at or after `offset` and keeps the rest: the history
    /// of a log truncated to `offset` bytes (RocketMQ's `truncateSuffixByOffset`).
    pub fn truncate_from(&mut self, offset: u64) {
        let keep = self.entries.partition_point(|entry| entry.start < offset);
        self.entries.truncate(keep);
        self.assert_invariants();
    }

    fn index_of(&self, epoch: u32) -> Option<usize> {
        self.entries
            .binary_search_by_key(&epoch, |entry| entry.epoch)
            .ok()
    }

    fn end_at(&self, at: usize, max_offset: u64) -> u64 {
        match self.entries.get(at + 1) {
            Some(next) => next.start,
            None => max_offset.max(self.entries[at].start),
        }
    }

    fn assert_invariants(&self) {
        for pair in self.entries.windows(2) {
            assert!(
                pair[0].epoch < pair[1].epoch,
                "epoch history out of order: epoch {} then {}",
                pair[0].epoch,
                pair[1].epoch
            );
            assert!(
                pair[0].start <= pair[1].start,
                "epoch history starts go backwards: epoch {} at {} then epoch {} at {}",
                pair[0].epoch,
                pair[0].start,
                pair[1].epoch,
                pair[1].start
            );
        }
    }
}

/// The offset up to which a slave's log is the same as its master's (reference-2 §6.4,
/// RocketMQ's `findConsistentPoint`): walk the local entries newest first, take the first
/// epoch the master has with the same start, and answer min(its local end, its master
/// end). `None` when no epoch matches: the two logs share no provable prefix, and only an
/// operator can decide which to keep.
///
/// The point never passes `local_max`, even for a torn local history whose entries start
/// past the log's end (bytes lost after the entry was written): the slave cannot keep what
/// it does not have. An empty local history answers `None`: whether an empty store may
/// start from zero is the caller's decision (see [`super::slave_state`]).
pub fn find_consistent_point(
    local: &EpochCache,
    local_max: u64,
    master: &EpochCache,
    master_max: u64,
) -> Option<u64> {
    for (at, entry) in local.entries.iter().enumerate().rev() {
        let Some(theirs) = master.get(entry.epoch) else {
            continue;
        };
        if theirs.start != entry.start {
            continue;
        }
        let local_end = local.end_at(at, local_max).min(local_max);
        let master_end = master.end_of(entry.epoch, master_max)?;
        return Some(local_end.min(master_end));
    }
    None
}

#[cfg(test)]
#[path = "epochs_tests.rs"]
mod tests;
