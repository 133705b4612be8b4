//! The timer store: one shard's pending timer messages in due-time order, held mostly on
//! disk, so a million pending timers cost a few megabytes of memory.
//!
//! An entry is a [`TimerKey`]: the due time and the record's offset in the shard's
//! `rmq_sys_wheel_timer` queue (whose ConsumeQueue entry carries the due time, D9, so the
//! queue itself is the durable log of every timer; this store is an index over it that
//! recovery can rebuild from a checkpoint).
//!
//! ```text
//!   index(key) ─▶ key ≤ taken? ── yes ─▶ late lane (FIFO, delivered first)
//!                      │ no
//!                      └─▶ buffer (in memory, at most `buffer_entries`)
//!                             │ full: spill
//!                             ▼
//!                     run-<seq>.bin: sorted keys + trailer, read back a block at a time
//!   next due = min(late front, buffer first, every run's head)    (a heap over run heads)
//! ```
//!
//! Files in the store's directory:
//! - `run-<seq>.bin`: `len` keys of 16 bytes (due i64, offset u64, big-endian) in key
//!   order, then a 16-byte trailer: `len` (u64), CRC32C of the keys (u32), magic (u32).
//!   Written whole and fsynced before any checkpoint names it; never changed after.
//! - `checkpoint.json`: written with `io::meta::replace_file`, so a crash leaves the old or
//!   the new one: the runs, `runsCover`, `indexed`, `delivered`, the late lane and the
//!   cancellations.
//!
//! Invariants (asserted where they are kept):
//! - Keys of the normal lane are taken in increasing order; `taken` is the last one.
//!   A key indexed at or below `taken` goes to the late lane (its record was stored before
//!   the scheduler took a later-due key but indexed after it), so nothing is ever missed.
//! - `delivered` (≤ `taken`) is the last normal key whose delivery was acknowledged; every
//!   normal key at or below it was delivered (the scheduler acknowledges in taking order).
//! - Every entry at a queue offset below `runs_cover` is in a run listed by the checkpoint,
//!   in the late lane, or at or below `delivered`. The buffer holds entries from
//!   `runs_cover` on, so a spill (which sets `runs_cover = indexed`) happens only with no
//!   delivery in flight.
//! - A run's file is removed only after a checkpoint that no longer lists it, and only once
//!   every key in it is at or below `delivered`.
//!
//! Recovery ([`TimerStore::open`]): runs are opened at their first key above `delivered`;
//! the queue is indexed again from `runs_cover` with [`TimerStore::index_recovered`], which
//! skips keys at or below the checkpoint's `delivered` at offsets below its `indexed`
//! (those were delivered) and the keys of the saved late lane (restored as they were).
//! That rule is the opened checkpoint's, fixed: `delivered` moves on while recovery indexes,
//! and a key above the checkpoint's was not delivered whatever was delivered since. Until
//! recovery has indexed up to the checkpoint's `indexed` ([`TimerStore::recovering`]), a
//! checkpoint keeps that rule (`recovering`), so a second crash skips no more than the
//! first. What a crash can cost is duplicates: deliveries acknowledged after the last
//! checkpoint, or while recovering, are made again. Nothing is lost, and nothing is
//! delivered before its due time, since due times come from the queue.
//!
//! A slave keeps a checkpoint of its master's store this same recovery opens: the master's
//! progress without its runs ([`progress`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::io::meta::{replace_file, MetaFiles};

pub mod progress;

/// The due time of a timer-queue entry retention deleted before it was indexed: due at
/// once, and skipped when its record is not found (`scheduler`).
pub const DUE_GONE: i64 = i64::MIN;

/// A pending timer: when it is due, and its record's offset in the shard's timer queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimerKey {
    pub due: i64,
    pub offset: u64,
}

const KEY_LEN: usize = 16;
const TRAILER_LEN: usize = 16;
const RUN_MAGIC: u32 = 0x524d_5452; // "RMTR"
const CHECKPOINT: &str = "checkpoint.json";
const CHECKPOINT_VERSION: u32 = 1;
/// Keys read per block when a run is verified at open.
const VERIFY_BLOCK: usize = 65_536;

impl TimerKey {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.due.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
    }

    fn decode(bytes: &[u8]) -> TimerKey {
        TimerKey {
            due: i64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        }
    }
}

/// How much of the pending set memory holds.
#[derive(Clone, Copy, Debug)]
pub struct TimerLimits {
    /// Entries the buffer takes before they are written out as a run.
    pub buffer_entries: usize,
    /// Keys of each run held in memory at a time.
    pub block_entries: usize,
}

impl Default for TimerLimits {
    fn default() -> TimerLimits {
        TimerLimits {
            buffer_entries: 65_536,
            block_entries: 512,
        }
    }
}

/// Where the next due key comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Indexed after a later-due key was taken: due already, delivered first.
    Late,
    /// The buffer or a run, in key order.
    Normal,
}

#[derive(Debug)]
struct Run {
    seq: u64,
    len: u64,
    min_offset: u64,
    last: TimerKey,
    /// Keys `[next, len)` are still on disk only.
    next: u64,
    block: VecDeque<TimerKey>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunInfo {
    seq: u64,
    len: u64,
    min_offset: u64,
    last: TimerKey,
}

/// Which queue entries recovery does not index again: those at offsets below `below`
/// whose key is at or below `delivered`, or is one of `late` (late-lane keys).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SkipRule {
    below: u64,
    delivered: Option<TimerKey>,
    #[serde(default)]
    late: Vec<TimerKey>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Checkpoint {
    version: u32,
    runs: Vec<RunInfo>,
    runs_cover: u64,
    indexed: u64,
    delivered: Option<TimerKey>,
    /// Written while recovery has not yet indexed the queue again up to what the
    /// checkpoint it opened had indexed: the skip rule of that checkpoint, kept (see
    /// [`TimerStore::index_recovered`]). Absent: `indexed` and `delivered` are the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovering: Option<SkipRule>,
    late: Vec<TimerKey>,
    /// Late-lane keys delivered that are above `delivered` (taken from a late lane this
    /// store restored): recovery does not index them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    late_done: Vec<TimerKey>,
    cancelled: BTreeMap<String, i64>,
    next_seq: u64,
}

/// One shard's pending timers.
pub struct TimerStore {
    files: Arc<dyn MetaFiles>,
    dir: PathBuf,
    limits: TimerLimits,
    buffer: BTreeSet<TimerKey>,
    late: VecDeque<TimerKey>,
    /// Late keys taken whose delivery is not acknowledged yet.
    late_in_flight: BTreeSet<TimerKey>,
    /// Late keys acknowledged above `delivered` (see the checkpoint's `late_done`).
    late_done: BTreeSet<TimerKey>,
    /// Normal keys taken whose delivery is not acknowledged yet, in taking order: their
    /// records are still needed (a crash delivers them again).
    normal_in_flight: VecDeque<TimerKey>,
    runs: BTreeMap<u64, Run>,
    /// Each run with keys left: its head.
    heads: BinaryHeap<Reverse<(TimerKey, u64)>>,
    /// Runs with nothing left to take, kept until `delivered` passes their last key.
    drained: Vec<RunInfo>,
    /// Files of runs no checkpoint names any more, removed after the next one.
    removable: Vec<u64>,
    taken: Option<TimerKey>,
    delivered: Option<TimerKey>,
    runs_cover: u64,
    indexed: u64,
    /// The opened checkpoint's rule for the entries recovery indexes again: below its
    /// `indexed`, keys at or below its `delivered` were delivered (or are in the saved late
    /// lane). Fixed at the open: `delivered` moves on during recovery, and keys above the
    /// checkpoint's were not delivered, whatever was delivered since.
    recovered: SkipRule,
    /// The late-lane keys the checkpoint saved (and those its own recovery had not met
    /// yet), while recovery may still meet them in the queue: they are not indexed twice.
    recovered_late: BTreeSet<TimerKey>,
    cancelled: BTreeMap<String, i64>,
    next_seq: u64,
    dirty: bool,
}

impl std::fmt::Debug for TimerStore {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.debug_struct("TimerStore")
            .field("dir", &self.dir)
            .field("pending", &self.pending())
            .field("runs", &self.runs.len())
            .field("taken", &self.taken)
            .field("delivered", &self.delivered)
            .field("indexed", &self.indexed)
            .finish()
    }
}

fn invalid(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("timer store {}: {why}", path.display()),
    )
}

/// The checkpoint in `path`, or an empty one if there is none yet.
fn read_checkpoint(files: &dyn MetaFiles, checkpoint_path: &Path) -> io::Result<Checkpoint> {
    match files.read_file(checkpoint_path) {
        Ok(bytes) => {
            let checkpoint: Checkpoint =
                serde_json::from_slice(&bytes).map_err(|error| invalid(checkpoint_path, error))?;
            if checkpoint.version != CHECKPOINT_VERSION {
                return Err(invalid(
                    checkpoint_path,
                    format!(
                        "version {} (this build reads {CHECKPOINT_VERSION})",
                        checkpoint.version
                    ),
                ));
            }
            Ok(checkpoint)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Checkpoint {
            version: CHECKPOINT_VERSION,
            ..Checkpoint::default()
        }),
        Err(error) => Err(error),
    }
}

/// Removes from `dir` the runs the checkpoint does not list and the temporary files.
fn remove_orphans(files: &dyn MetaFiles, dir: &Path, runs: &[RunInfo]) -> io::Result<()> {
    let listed: BTreeSet<u64> = runs.iter().map(|run| run.seq).collect();
    for name in files.list_dir(dir)? {
        // A run written but never checkpointed (a crash between the two), or one whose
        // removal a crash interrupted: nothing refers to it.
        let orphan = name
            .strip_prefix("run-")
            .and_then(|rest| rest.strip_suffix(".bin"))
            .and_then(|seq| seq.parse::<u64>().ok())
            .is_some_and(|seq| !listed.contains(&seq));
        if orphan || name.ends_with(".tmp") {
            files.remove_file(&dir.join(&name))?;
        }
    }
    Ok(())
}

/// Checks run `info`'s trailer (length, magic) against the checkpoint; its CRC32C.
fn read_trailer(files: &dyn MetaFiles, path: &Path, info: &RunInfo) -> io::Result<u32> {
    let keys_len = info.len as usize * KEY_LEN;
    let trailer = files.read_range(path, keys_len as u64, TRAILER_LEN + 1)?;
    if trailer.len() != TRAILER_LEN {
        return Err(invalid(
            path,
            format!(
                "{} bytes after its {} keys, not a {TRAILER_LEN}-byte trailer",
                trailer.len(),
                info.len
            ),
        ));
    }
    let len = u64::from_be_bytes(trailer[..8].try_into().expect("8 bytes"));
    let crc = u32::from_be_bytes(trailer[8..12].try_into().expect("4 bytes"));
    let magic = u32::from_be_bytes(trailer[12..16].try_into().expect("4 bytes"));
    if magic != RUN_MAGIC || len != info.len {
        return Err(invalid(
            path,
            format!(
                "trailer says {len} keys (magic {magic:#x}), the checkpoint {}",
                info.len
            ),
        ));
    }
    Ok(crc)
}

impl TimerStore {
    /// Opens the store in `dir` (created if missing) as its checkpoint left it; the caller
    /// then indexes the timer queue from [`TimerStore::indexed`] with
    /// [`TimerStore::index_recovered`]. A run or checkpoint that does not check out is an
    /// error naming the file: the timers would otherwise be lost without a word.
    pub fn open(
        files: Arc<dyn MetaFiles>,
        dir: &Path,
        limits: TimerLimits,
    ) -> io::Result<TimerStore> {
        assert!(
            limits.buffer_entries > 0 && limits.block_entries > 0,
            "timer limits must be positive: {limits:?}"
        );
        files.create_dir_all(dir)?;
        let checkpoint = read_checkpoint(files.as_ref(), &dir.join(CHECKPOINT))?;
        let mut store = TimerStore {
            files: files.clone(),
            dir: dir.to_path_buf(),
            limits,
            buffer: BTreeSet::new(),
            late: checkpoint.late.iter().copied().collect(),
            late_in_flight: BTreeSet::new(),
            normal_in_flight: VecDeque::new(),
            late_done: checkpoint.late_done.iter().copied().collect(),
            runs: BTreeMap::new(),
            heads: BinaryHeap::new(),
            drained: Vec::new(),
            removable: Vec::new(),
            taken: checkpoint.delivered,
            delivered: checkpoint.delivered,
            runs_cover: checkpoint.runs_cover,
            indexed: checkpoint.runs_cover,
            recovered_late: checkpoint
                .late
                .iter()
                .chain(&checkpoint.late_done)
                .chain(checkpoint.recovering.iter().flat_map(|rule| &rule.late))
                .copied()
                .collect(),
            recovered: checkpoint.recovering.unwrap_or(SkipRule {
                below: checkpoint.indexed.max(checkpoint.runs_cover),
                delivered: checkpoint.delivered,
                late: Vec::new(),
            }),
            cancelled: checkpoint.cancelled,
            next_seq: checkpoint.next_seq,
            dirty: false,
        };
        remove_orphans(files.as_ref(), dir, &checkpoint.runs)?;
        for info in checkpoint.runs {
            store.open_run(info)?;
        }
        Ok(store)
    }

    fn run_path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("run-{seq:020}.bin"))
    }

    /// Verifies run `info` whole and positions it at its first key above `delivered`.
    fn open_run(&mut self, info: RunInfo) -> io::Result<()> {
        let path = self.run_path(info.seq);
        let keys_len = info.len as usize * KEY_LEN;
        let crc = read_trailer(self.files.as_ref(), &path, &info)?;
        let consumed = self.verify_keys(&path, keys_len, crc)?;
        let mut run = Run {
            seq: info.seq,
            len: info.len,
            min_offset: info.min_offset,
            last: info.last,
            next: consumed,
            block: VecDeque::new(),
        };
        if consumed == info.len {
            self.drained.push(info);
            return Ok(());
        }
        self.refill(&mut run)?;
        let head = *run.block.front().expect("a run with keys left has a head");
        self.heads.push(Reverse((head, run.seq)));
        self.runs.insert(run.seq, run);
        Ok(())
    }

    /// Reads a run's `keys_len` key bytes in blocks: every key above the one before it and
    /// the whole matching `crc`. How many keys are at or below `delivered`.
    fn verify_keys(&self, path: &Path, keys_len: usize, crc: u32) -> io::Result<u64> {
        let mut computed = 0u32;
        let mut consumed = 0u64;
        let mut previous: Option<TimerKey> = None;
        let mut at = 0usize;
        while at < keys_len {
            let chunk = (keys_len - at).min(VERIFY_BLOCK * KEY_LEN);
            let bytes = self.files.read_range(path, at as u64, chunk)?;
            if bytes.len() != chunk {
                return Err(invalid(
                    path,
                    format!("ends at {} of {keys_len} key bytes", at + bytes.len()),
                ));
            }
            computed = crc32c::crc32c_append(computed, &bytes);
            for raw in bytes.chunks_exact(KEY_LEN) {
                let key = TimerKey::decode(raw);
                if previous.is_some_and(|previous| previous >= key) {
                    return Err(invalid(path, format!("keys out of order at {key:?}")));
                }
                previous = Some(key);
                if self.delivered.is_some_and(|delivered| key <= delivered) {
                    consumed += 1;
                }
            }
            at += chunk;
        }
        if computed != crc {
            return Err(invalid(
                path,
                format!("CRC32C {computed:#x}, trailer {crc:#x}"),
            ));
        }
        Ok(consumed)
    }

    fn refill(&self, run: &mut Run) -> io::Result<()> {
        if run.next >= run.len {
            return Ok(());
        }
        let count = (run.len - run.next).min(self.limits.block_entries as u64) as usize;
        let path = self.run_path(run.seq);
        let bytes = self
            .files
            .read_range(&path, run.next * KEY_LEN as u64, count * KEY_LEN)?;
        if bytes.len() != count * KEY_LEN {
            return Err(invalid(&path, "shorter than when it was opened"));
        }
        run.block
            .extend(bytes.chunks_exact(KEY_LEN).map(TimerKey::decode));
        run.next += count as u64;
        Ok(())
    }

    /// How far into the timer queue the opened checkpoint says it indexed (its runs'
    /// cover, and the bound of its skip rule); never past the queue's end in a store that
    /// was not tampered with.
    pub fn checkpoint_claims(&self) -> u64 {
        self.runs_cover.max(self.recovered.below)
    }

    /// The files the store is written through.
    pub fn files(&self) -> Arc<dyn MetaFiles> {
        self.files.clone()
    }

    /// The checkpoint file.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.dir.join(CHECKPOINT)
    }

    /// The next queue offset to index.
    pub fn indexed(&self) -> u64 {
        self.indexed
    }

    /// Timers indexed and not yet taken.
    pub fn pending(&self) -> u64 {
        let in_runs: u64 = self
            .runs
            .values()
            .map(|run| run.len - run.next + run.block.len() as u64)
            .sum();
        self.buffer.len() as u64 + self.late.len() as u64 + in_runs
    }

    /// The lowest queue offset a pending (or unacknowledged) timer may have: what the
    /// store's retention must keep (a run counts from its lowest offset while it lasts).
    pub fn lowest_needed_offset(&self) -> u64 {
        let buffer = self.buffer.iter().map(|key| key.offset).min();
        let late = self
            .late
            .iter()
            .chain(&self.late_in_flight)
            .chain(&self.normal_in_flight)
            .map(|key| key.offset)
            .min();
        let runs = self.runs.values().map(|run| run.min_offset).min();
        let drained = self.drained.iter().map(|run| run.min_offset).min();
        [buffer, late, runs, drained]
            .into_iter()
            .flatten()
            .fold(self.indexed, u64::min)
    }

    /// Indexes the entry at `key.offset` (the next queue offset: the caller indexes in
    /// queue order).
    pub fn index(&mut self, key: TimerKey) {
        assert_eq!(
            key.offset, self.indexed,
            "timer queue entries are indexed in order: {key:?} after {}",
            self.indexed
        );
        self.indexed += 1;
        if self.taken.is_some_and(|taken| key <= taken) {
            self.late.push_back(key);
        } else {
            self.buffer.insert(key);
        }
    }

    /// [`TimerStore::index`] for the entries recovery indexes again: below the opened
    /// checkpoint's `indexed`, a key at or below that checkpoint's `delivered` was
    /// delivered already, or is in the saved late lane, and is not indexed twice.
    pub fn index_recovered(&mut self, key: TimerKey) {
        if key.offset < self.recovered.below {
            let delivered = self.recovered.delivered.is_some_and(|d| key <= d);
            // Kept once met: a checkpoint while recovering names them all again.
            if delivered || self.recovered_late.contains(&key) {
                assert_eq!(key.offset, self.indexed, "indexed in order: {key:?}");
                self.indexed += 1;
                return;
            }
        } else if !self.recovered_late.is_empty() {
            self.recovered_late = BTreeSet::new();
        }
        self.index(key);
    }

    /// The late lane as a checkpoint (or a slave's copy) keeps it: the keys in flight and
    /// the ones waiting, which the skip rule never skips.
    fn late_keys(&self) -> Vec<TimerKey> {
        self.late_in_flight
            .iter()
            .chain(&self.late)
            .copied()
            .collect()
    }

    /// The skip rule of the checkpoint opened, while recovery still indexes below it: a
    /// checkpoint written meanwhile (or a slave's copy) must keep it.
    fn recovering_rule(&self) -> Option<SkipRule> {
        self.recovering().then(|| SkipRule {
            late: self.recovered_late.iter().copied().collect(),
            ..self.recovered.clone()
        })
    }

    /// Whether recovery has not yet indexed the queue again up to where the opened
    /// checkpoint had: a checkpoint until then keeps that checkpoint's rule, so deliveries
    /// acknowledged meanwhile of keys indexed again may be made again after a crash.
    pub fn recovering(&self) -> bool {
        self.indexed < self.recovered.below
    }

    /// Whether the buffer is full: the caller spills ([`TimerStore::spill`]) once no
    /// delivery is in flight.
    pub fn needs_spill(&self) -> bool {
        self.buffer.len() >= self.limits.buffer_entries
    }

    /// The earliest key to deliver, and its lane; the late lane first (it is due already).
    pub fn peek(&self) -> Option<(TimerKey, Lane)> {
        if let Some(&key) = self.late.front() {
            return Some((key, Lane::Late));
        }
        let buffer = self.buffer.first().copied();
        let run = self.heads.peek().map(|Reverse((key, _))| *key);
        match (buffer, run) {
            (Some(a), Some(b)) => Some((a.min(b), Lane::Normal)),
            (Some(key), None) | (None, Some(key)) => Some((key, Lane::Normal)),
            (None, None) => None,
        }
    }

    /// Takes the key [`TimerKey::peek`] returned; its delivery is then in flight until
    /// [`TimerStore::acknowledge`].
    pub fn take(&mut self, key: TimerKey, lane: Lane) -> io::Result<()> {
        match lane {
            Lane::Late => {
                let front = self.late.pop_front();
                assert_eq!(front, Some(key), "the late lane's front is what was peeked");
                self.late_in_flight.insert(key);
            }
            Lane::Normal => {
                assert!(
                    self.taken.is_none_or(|taken| key > taken),
                    "normal keys are taken in order: {key:?} after {:?}",
                    self.taken
                );
                if self.buffer.first() == Some(&key) {
                    self.buffer.pop_first();
                } else {
                    let Reverse((head, seq)) = self.heads.pop().expect("a run head was peeked");
                    assert_eq!(head, key, "the peeked key is the lowest run head");
                    let mut run = self.runs.remove(&seq).expect("a head's run is open");
                    run.block.pop_front();
                    if run.block.is_empty() {
                        self.refill(&mut run)?;
                    }
                    match run.block.front() {
                        Some(&next) => {
                            self.heads.push(Reverse((next, seq)));
                            self.runs.insert(seq, run);
                        }
                        None => self.drained.push(RunInfo {
                            seq: run.seq,
                            len: run.len,
                            min_offset: run.min_offset,
                            last: run.last,
                        }),
                    }
                }
                self.taken = Some(key);
                self.normal_in_flight.push_back(key);
            }
        }
        Ok(())
    }

    /// The delivery of `key` (taken from `lane`) was acknowledged; normal keys are
    /// acknowledged in the order they were taken.
    pub fn acknowledge(&mut self, key: TimerKey, lane: Lane) {
        self.dirty = true;
        match lane {
            Lane::Late => {
                assert!(
                    self.late_in_flight.remove(&key),
                    "{key:?} was not in flight"
                );
                // A key of a late lane saved by a checkpoint can be above `delivered` (the
                // key taken before it was not acknowledged before the crash).
                if self.delivered.is_none_or(|delivered| key > delivered) {
                    self.late_done.insert(key);
                }
            }
            Lane::Normal => {
                assert!(
                    self.delivered.is_none_or(|delivered| key > delivered)
                        && self.taken.is_some_and(|taken| key <= taken),
                    "acknowledged {key:?} out of order (delivered {:?}, taken {:?})",
                    self.delivered,
                    self.taken
                );
                let oldest = self.normal_in_flight.pop_front();
                assert_eq!(
                    oldest,
                    Some(key),
                    "normal keys are acknowledged in taking order"
                );
                self.delivered = Some(key);
                let delivered = key;
                if self
                    .late_done
                    .first()
                    .is_some_and(|first| *first <= delivered)
                {
                    self.late_done.retain(|done| *done > delivered);
                }
                // A cancellation is forgotten once no key due at or before it can still be
                // taken: none can while recovery may still index old entries, and a key in
                // the late lane can be due before what was delivered.
                if !self.recovering() {
                    let floor = self
                        .late
                        .iter()
                        .chain(&self.late_in_flight)
                        .map(|key| key.due)
                        .fold(delivered.due, i64::min);
                    self.cancelled.retain(|_, due| *due >= floor);
                }
            }
        }
    }

    /// Remembers that the message with `uniq_key`, due at `due`, is cancelled.
    pub fn cancel(&mut self, uniq_key: String, due: i64) {
        self.cancelled.insert(uniq_key, due);
        self.dirty = true;
    }

    /// Whether the message with `uniq_key` was cancelled. The cancellation is kept until
    /// no key due at or before it can be taken any more (see [`TimerStore::acknowledge`]),
    /// not forgotten here: a checkpoint before the cancelled key's acknowledgement (the
    /// one at a stop) must still name it, or the key, taken again after the restart, would
    /// be delivered.
    pub fn is_cancelled(&self, uniq_key: &str) -> bool {
        self.cancelled.contains_key(uniq_key)
    }

    /// Whether something changed since the last checkpoint.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Writes the buffer out as a run and checkpoints. Only with no delivery in flight
    /// (see the module's invariants).
    pub fn spill(&mut self) -> io::Result<()> {
        assert!(
            self.late_in_flight.is_empty() && self.taken == self.delivered,
            "spill with deliveries in flight (taken {:?}, delivered {:?})",
            self.taken,
            self.delivered
        );
        if !self.buffer.is_empty() {
            let seq = self.next_seq;
            let mut bytes = Vec::with_capacity(self.buffer.len() * KEY_LEN + TRAILER_LEN);
            for key in &self.buffer {
                key.encode(&mut bytes);
            }
            let crc = crc32c::crc32c(&bytes);
            let len = self.buffer.len() as u64;
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(&crc.to_be_bytes());
            bytes.extend_from_slice(&RUN_MAGIC.to_be_bytes());
            self.files.write_file_synced(&self.run_path(seq), &bytes)?;
            // The run's name must be durable before a checkpoint names it: the checkpoint's
            // rename can reach the disk without the run's creation otherwise.
            self.files.sync_dir(&self.dir)?;
            self.next_seq += 1;
            let keys = std::mem::take(&mut self.buffer);
            let min_offset = keys.iter().map(|key| key.offset).min().expect("not empty");
            let last = *keys.last().expect("not empty");
            let mut run = Run {
                seq,
                len,
                min_offset,
                last,
                next: 0,
                block: VecDeque::new(),
            };
            // The first block from memory; the rest is read back when it is needed.
            let block = keys.iter().take(self.limits.block_entries).copied();
            run.block.extend(block);
            run.next = run.block.len() as u64;
            self.heads
                .push(Reverse((*run.block.front().expect("not empty"), seq)));
            self.runs.insert(seq, run);
        }
        self.runs_cover = self.indexed;
        self.checkpoint()
    }

    /// Makes the state durable: after this returns, a crash re-delivers nothing
    /// acknowledged so far.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        let delivered = self.delivered;
        let (kept, gone): (Vec<RunInfo>, Vec<RunInfo>) = std::mem::take(&mut self.drained)
            .into_iter()
            .partition(|run| delivered.is_none_or(|delivered| run.last > delivered));
        self.drained = kept;
        let mut runs: Vec<RunInfo> = self
            .runs
            .values()
            .map(|run| RunInfo {
                seq: run.seq,
                len: run.len,
                min_offset: run.min_offset,
                last: run.last,
            })
            .collect();
        runs.extend(self.drained.iter().copied());
        runs.sort_by_key(|run| run.seq);
        let checkpoint = Checkpoint {
            version: CHECKPOINT_VERSION,
            runs,
            runs_cover: self.runs_cover,
            indexed: self.indexed,
            delivered,
            late_done: self.late_done.iter().copied().collect(),
            recovering: self.recovering_rule(),
            late: self.late_keys(),
            cancelled: self.cancelled.clone(),
            next_seq: self.next_seq,
        };
        let bytes = serde_json::to_vec(&checkpoint).expect("a checkpoint serializes");
        replace_file(&*self.files, &self.dir.join(CHECKPOINT), &bytes)?;
        self.dirty = false;
        self.removable.extend(gone.iter().map(|run| run.seq));
        let mut removed = false;
        for seq in std::mem::take(&mut self.removable) {
            match self.files.remove_file(&self.run_path(seq)) {
                Ok(()) => removed = true,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    self.removable.push(seq);
                    return Err(error);
                }
            }
        }
        if removed {
            self.files.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Run files open (for the pending figures and tests).
    pub fn run_count(&self) -> usize {
        self.runs.len() + self.drained.len()
    }

    /// Checks the module's invariants that one state shows (for the crash simulation): the
    /// first one broken, named, as an error. Reads the store's directory listing only.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_positions()?;
        self.check_buffer()?;
        self.check_lanes()?;
        self.check_runs()?;
        self.check_run_files()
    }

    /// delivered ≤ taken; runs cover ≤ indexed.
    fn check_positions(&self) -> Result<(), String> {
        if self.delivered > self.taken {
            return Err(format!(
                "delivered {:?} past taken {:?}",
                self.delivered, self.taken
            ));
        }
        if self.runs_cover > self.indexed {
            return Err(format!(
                "runs cover {} past indexed {}",
                self.runs_cover, self.indexed
            ));
        }
        Ok(())
    }

    /// The buffer is within its bound, above taken, and holds only keys the runs do not
    /// cover and the index reached.
    fn check_buffer(&self) -> Result<(), String> {
        let above_taken = |key: &TimerKey| self.taken.is_none_or(|taken| *key > taken);
        if self.buffer.len() > self.limits.buffer_entries {
            return Err(format!(
                "{} keys in a buffer of {}",
                self.buffer.len(),
                self.limits.buffer_entries
            ));
        }
        if let Some(key) = self.buffer.iter().find(|key| !above_taken(key)) {
            return Err(format!(
                "buffer key {key:?} at or below taken {:?}",
                self.taken
            ));
        }
        if let Some(key) = self
            .buffer
            .iter()
            .find(|key| key.offset < self.runs_cover || key.offset >= self.indexed)
        {
            return Err(format!(
                "buffer key {key:?} outside [runs cover {}, indexed {})",
                self.runs_cover, self.indexed
            ));
        }
        Ok(())
    }

    /// The normal keys in flight are the ones taken after delivered, in order, up to taken;
    /// late keys done are above delivered; no late key is both waiting and in flight.
    fn check_lanes(&self) -> Result<(), String> {
        let after_delivered = |key: &TimerKey| self.delivered.is_none_or(|d| *key > d);
        let in_order = self
            .normal_in_flight
            .iter()
            .zip(self.normal_in_flight.iter().skip(1))
            .all(|(a, b)| a < b);
        if !in_order
            || !self.normal_in_flight.iter().all(after_delivered)
            || self
                .normal_in_flight
                .back()
                .is_some_and(|last| Some(*last) != self.taken)
        {
            return Err(format!(
                "normal keys in flight {:?} are not the ones taken after delivered {:?} up \
                 to taken {:?}",
                self.normal_in_flight, self.delivered, self.taken
            ));
        }
        if let Some(key) = self.late_done.iter().find(|key| !after_delivered(key)) {
            return Err(format!(
                "{key:?} kept as a late key delivered above delivered {:?}",
                self.delivered
            ));
        }
        if let Some(key) = self
            .late
            .iter()
            .find(|key| self.late_in_flight.contains(key))
        {
            return Err(format!("{key:?} both in the late lane and in flight"));
        }
        Ok(())
    }

    /// One head per open run, each its block's first key and above taken, no run read
    /// past its end, and every drained run wholly at or below taken.
    fn check_runs(&self) -> Result<(), String> {
        let above_taken = |key: &TimerKey| self.taken.is_none_or(|taken| *key > taken);
        if self.heads.len() != self.runs.len() {
            return Err(format!(
                "{} run heads for {} open runs",
                self.heads.len(),
                self.runs.len()
            ));
        }
        for Reverse((head, seq)) in self.heads.iter() {
            let Some(run) = self.runs.get(seq) else {
                return Err(format!("head {head:?} of run {seq}, which is not open"));
            };
            if run.block.front() != Some(head) {
                return Err(format!(
                    "run {seq}'s head {head:?}, its block starts at {:?}",
                    run.block.front()
                ));
            }
            if !above_taken(head) {
                return Err(format!(
                    "run {seq}'s head {head:?} at or below taken {:?}",
                    self.taken
                ));
            }
            if run.next > run.len || run.block.iter().any(|key| *key > run.last) {
                return Err(format!("run {seq} read past its end: {run:?}"));
            }
        }
        if let Some(run) = self.drained.iter().find(|run| above_taken(&run.last)) {
            return Err(format!(
                "drained run {} ends at {:?}, above taken {:?}",
                run.seq, run.last, self.taken
            ));
        }
        Ok(())
    }

    /// Every open or drained run's file is in the store, and below `next_seq`.
    fn check_run_files(&self) -> Result<(), String> {
        let names = self
            .files
            .list_dir(&self.dir)
            .map_err(|error| format!("cannot list {}: {error}", self.dir.display()))?;
        let seqs = self
            .runs
            .keys()
            .chain(self.drained.iter().map(|run| &run.seq));
        for seq in seqs {
            let name = format!("run-{seq:020}.bin");
            if !names.contains(&name) {
                return Err(format!("run {seq} is open but {name} is not in the store"));
            }
            if *seq >= self.next_seq {
                return Err(format!("run {seq} at or past next_seq {}", self.next_seq));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sim::SimDisk;

    fn key(due: i64, offset: u64) -> TimerKey {
        TimerKey { due, offset }
    }

    fn small() -> TimerLimits {
        TimerLimits {
            buffer_entries: 4,
            block_entries: 2,
        }
    }

    /// Takes and acknowledges every key due at or before `now`, in order.
    fn drain_due(store: &mut TimerStore, now: i64) -> Vec<TimerKey> {
        let mut out = Vec::new();
        while let Some((key, lane)) = store.peek() {
            if key.due > now {
                break;
            }
            store.take(key, lane).unwrap();
            store.acknowledge(key, lane);
            out.push(key);
        }
        out
    }

    #[test]
    fn keys_come_out_in_due_order_across_buffer_and_runs() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(1)));
        let dir = Path::new("/timer");
        let mut store = TimerStore::open(disk.clone(), dir, small()).unwrap();
        let dues = [50, 10, 40, 30, 20, 70, 60, 5, 80, 15];
        for (offset, &due) in dues.iter().enumerate() {
            store.index(key(due, offset as u64));
            if store.needs_spill() {
                store.spill().unwrap();
            }
        }
        assert_eq!(store.run_count(), 2, "ten keys, four per run");
        assert_eq!(store.pending(), 10);
        let order: Vec<i64> = drain_due(&mut store, 1000).iter().map(|k| k.due).collect();
        assert_eq!(order, vec![5, 10, 15, 20, 30, 40, 50, 60, 70, 80]);
        assert_eq!(store.pending(), 0);
        store.checkpoint().unwrap();
        assert_eq!(store.run_count(), 0, "delivered runs are removed");
        let left: Vec<String> = disk.list_dir(dir).unwrap();
        assert_eq!(left, vec![CHECKPOINT.to_string()]);
    }

    #[test]
    fn a_key_indexed_below_what_was_taken_is_delivered_late_and_first() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(2)));
        let mut store = TimerStore::open(disk, Path::new("/t"), TimerLimits::default()).unwrap();
        store.index(key(100, 0));
        store.index(key(300, 1));
        assert_eq!(drain_due(&mut store, 200), vec![key(100, 0)]);
        store.index(key(90, 2));
        assert_eq!(store.peek(), Some((key(90, 2), Lane::Late)));
        assert_eq!(drain_due(&mut store, 200), vec![key(90, 2)]);
        assert_eq!(store.peek(), Some((key(300, 1), Lane::Normal)));
    }

    #[test]
    fn a_reopened_store_resumes_after_what_was_acknowledged() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(3)));
        let dir = Path::new("/timer");
        let queue: Vec<TimerKey> = (0..11u64)
            .map(|i| key(((i * 37) % 11) as i64 * 10, i))
            .collect();
        let mut store = TimerStore::open(disk.clone(), dir, small()).unwrap();
        for &k in &queue {
            store.index(k);
            if store.needs_spill() {
                store.spill().unwrap();
            }
        }
        let first = drain_due(&mut store, 45);
        store.checkpoint().unwrap();
        // Delivered after the checkpoint: may come again, never lost.
        let after = drain_due(&mut store, 65);
        drop(store);
        let mut store = TimerStore::open(disk, dir, small()).unwrap();
        for &k in &queue[store.indexed() as usize..] {
            store.index_recovered(k);
        }
        let again = drain_due(&mut store, i64::MAX);
        let mut seen: Vec<TimerKey> = first.iter().chain(&again).copied().collect();
        seen.sort();
        seen.dedup();
        let mut all = queue.clone();
        all.sort();
        assert_eq!(seen, all, "every key delivered");
        assert!(
            first.iter().all(|k| !again.contains(k)),
            "nothing before the checkpoint twice"
        );
        assert!(
            again.starts_with(&after),
            "after the checkpoint, again: {again:?} {after:?}"
        );
    }

    #[test]
    fn a_key_in_flight_keeps_its_record_held_until_acknowledged() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(6)));
        let mut store = TimerStore::open(disk, Path::new("/t"), TimerLimits::default()).unwrap();
        store.index(key(100, 0));
        store.index(key(200, 1));
        assert_eq!(store.lowest_needed_offset(), 0);
        let (first, lane) = store.peek().unwrap();
        assert_eq!((first, lane), (key(100, 0), Lane::Normal));
        store.take(first, lane).unwrap();
        // Taken, not delivered: a crash delivers it again from its record.
        assert_eq!(store.lowest_needed_offset(), 0);
        store.acknowledge(first, lane);
        assert_eq!(store.lowest_needed_offset(), 1);
        store.index(key(50, 2));
        let (late, lane) = store.peek().unwrap();
        assert_eq!(lane, Lane::Late);
        store.take(late, lane).unwrap();
        assert_eq!(store.lowest_needed_offset(), 1, "the key at 1 still waits");
        drain_due(&mut store, 1000);
        store.acknowledge(late, lane);
        assert_eq!(
            store.lowest_needed_offset(),
            3,
            "nothing left: the queue's end"
        );
    }

    #[test]
    fn recovery_indexes_again_what_the_opened_checkpoint_had_not_delivered() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(7)));
        let dir = Path::new("/timer");
        let limits = TimerLimits {
            buffer_entries: 2,
            block_entries: 2,
        };
        let mut store = TimerStore::open(disk.clone(), dir, limits).unwrap();
        store.index(key(10, 0));
        store.index(key(20, 1));
        store.spill().unwrap();
        store.index(key(15, 2)); // in the buffer only: the crash loses it
        store.checkpoint().unwrap();
        drop(store);
        let mut store = TimerStore::open(disk.clone(), dir, limits).unwrap();
        assert_eq!(store.indexed(), 2, "indexed again from the runs' cover");
        assert!(store.recovering());
        // The run is delivered before the queue is indexed again (the scheduler delivers
        // between index batches): `delivered` passes the key the crash took from memory.
        assert_eq!(drain_due(&mut store, 1000), vec![key(10, 0), key(20, 1)]);
        // A checkpoint now keeps the opened rule.
        store.checkpoint().unwrap();
        store.index_recovered(key(15, 2));
        assert!(!store.recovering());
        assert_eq!(
            drain_due(&mut store, 1000),
            vec![key(15, 2)],
            "not skipped as delivered"
        );
        drop(store);
        // The crash came before a checkpoint with recovery caught up: the key at 2 comes
        // again (a duplicate, never a loss).
        let mut store = TimerStore::open(disk, dir, limits).unwrap();
        assert!(
            drain_due(&mut store, 1000).is_empty(),
            "the run was delivered"
        );
        store.index_recovered(key(15, 2));
        assert_eq!(drain_due(&mut store, 1000), vec![key(15, 2)]);
    }

    #[test]
    fn a_damaged_run_stops_the_open_naming_it() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(4)));
        let dir = Path::new("/timer");
        let mut store = TimerStore::open(disk.clone(), dir, small()).unwrap();
        for offset in 0..4 {
            store.index(key(offset as i64, offset));
        }
        store.spill().unwrap();
        let path = store.run_path(0);
        drop(store);
        let mut bytes = disk.read_file(&path).unwrap();
        bytes[15] ^= 1; // the first key's offset: still in order, only the CRC tells
        disk.write_file_synced(&path, &bytes).unwrap();
        let error = TimerStore::open(disk, dir, small()).unwrap_err();
        assert!(
            error.to_string().contains("run-00000000000000000000.bin"),
            "{error}"
        );
        assert!(error.to_string().contains("CRC32C"), "{error}");
    }

    #[test]
    fn a_cancellation_survives_a_stop_while_the_cancelled_key_is_in_flight() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(8)));
        let dir = Path::new("/t");
        let queue = [key(100, 0), key(99, 1)]; // a message, then its cancellation
        let mut store = TimerStore::open(disk.clone(), dir, TimerLimits::default()).unwrap();
        for k in queue {
            store.index(k);
        }
        let (cancellation, lane) = store.peek().unwrap();
        assert_eq!(cancellation, key(99, 1));
        store.take(cancellation, lane).unwrap();
        store.cancel("T".into(), 100);
        store.acknowledge(cancellation, lane);
        let (message, lane) = store.peek().unwrap();
        store.take(message, lane).unwrap();
        assert!(store.is_cancelled("T"));
        // The stop's checkpoint comes before the cancelled key's outcome is acknowledged
        // (the scheduler is aborted with it in flight).
        store.checkpoint().unwrap();
        drop(store);
        let mut store = TimerStore::open(disk, dir, TimerLimits::default()).unwrap();
        for k in queue[store.indexed() as usize..].iter().copied() {
            store.index_recovered(k);
        }
        let (again, lane) = store.peek().unwrap();
        assert_eq!(again, message, "not acknowledged: taken again");
        store.take(again, lane).unwrap();
        assert!(store.is_cancelled("T"), "still cancelled after the restart");
    }

    #[test]
    fn cancellations_are_kept_until_their_due_time_passes() {
        let disk = Arc::new(SimDisk::new(crate::io::sim::SimConfig::with_seed(5)));
        let mut store = TimerStore::open(disk, Path::new("/t"), TimerLimits::default()).unwrap();
        store.cancel("A".into(), 100);
        store.cancel("B".into(), 300);
        store.index(key(200, 0));
        drain_due(&mut store, 250);
        assert!(!store.is_cancelled("A"), "passed its due time: forgotten");
        assert!(store.is_cancelled("B"));
        assert!(
            store.is_cancelled("B"),
            "kept until a later key is delivered"
        );
        store.index(key(300, 1));
        store.index(key(301, 2));
        drain_due(&mut store, 300);
        assert!(store.is_cancelled("B"), "its own due time delivered: kept");
        drain_due(&mut store, 301);
        assert!(!store.is_cancelled("B"), "a later one delivered: forgotten");
    }
}
