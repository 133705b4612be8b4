//! The revive log of POP consumption on one shard: every checkpoint (a pop, or an
//! invisible time change, handing out offsets) and every acknowledgement is a record of
//! the shard's own queue of [`POP_LOG_TOPIC`], stored through the CommitLog like any
//! message, so it is exactly as durable as the node's flush mode makes a send
//! (reference part 2 §2.5: "CK durable before the response, acks durable or replayable").
//! After a restart [`replay`] reads the queue from the replay mark and rebuilds the
//! shard's [`PopTable`].
//!
//! The record body is a small JSON object (ringmq's own; Java's revive records are
//! timer messages of another shape, so the topic has a ringmq name and no Java tool
//! mistakes these for its own):
//! - checkpoint: `{"k":"ck","c":group,"t":topic,"q":queueId,"pt":popTime,"it":invisibleTime,"d":[[offset,reconsumeTimes],...]}`
//! - ack: `{"k":"ack","c":group,"t":topic,"q":queueId,"pt":popTime,"o":[offset,...]}`
//! - reset: `{"k":"reset","c":group,"t":topic,"q":queueId,"pt":0,"o":[offset]}`: the
//!   group's committed offset was moved from outside ([`crate::broker::pop::reset`]); the queue
//!   starts over there and what was in flight before is forgotten.
//!
//! The replay mark ([`Mark`], `<shard dir>/pop/replay.json`, written with `replace_file`
//! through the disk seam) is a log queue offset at or below the checkpoint of every
//! offset in flight when it was written ([`PopTable::lowest_ck`], or the log's end when
//! nothing was in flight), with every open queue's watermark and cursor at that moment.
//! Invariants:
//! - The mark only moves forward, and never past the lowest checkpoint in flight, so a
//!   replay from it sees every checkpoint still needed; a stale (lower) mark only makes
//!   the replay read more, since replaying a record twice in order gives the same table.
//! - A replay skips offsets below its queue's floor: the mark's watermark (never above an
//!   offset in flight, [`PopTable::watermark`]), or for a queue the mark does not name
//!   (all its records come after the mark) the group's committed offset. The floors come
//!   from the mark, not from `config/consumerOffset.json`, which is written on its own
//!   schedule: a mark past acks whose effect that file had not yet recorded would
//!   otherwise bring acknowledged offsets back.
//! - After a replay a queue's cursor is at least the mark's: offsets below it that are not
//!   in flight were acknowledged, and their checkpoints may lie before `replay_from`
//!   (found by `tests/process/kill_during_pop.rs`: without it acknowledged messages came again).
//! - A mark that names a delivery in flight (a floor's watermark below its cursor) whose
//!   checkpoint the replay from it does not meet disagrees with the log (edited by hand,
//!   or the record is unreadable): that queue starts over at the watermark with a
//!   warning, so its deliveries are handed out again rather than counted acknowledged.
//! - A reset record replaces everything before it for its queue: from it on the queue's
//!   floor is the reset offset (not the mark's), and the mark's floor and cursor are not
//!   applied after the replay, so a reset survives a restart in either direction (before
//!   reset records, the replay brought the old offsets and the whole backlog back).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::broker::pop::state::{Delivery, LogRecord, PopTable, QueueKey};
use crate::io::meta::{replace_file, MetaFiles};

use crate::broker::tables::persisted_table::PersistedTable;
use crate::store::record::{self, Decoded, RecordInput, Verify};
use crate::store::{PutStatus, Store, StoreError};

/// The system topic of the revive logs: one queue per shard
/// ([`crate::shard::routing::queue_of_shard`]).
pub const POP_LOG_TOPIC: &str = "rmq_sys_ringmq_pop_log";
/// Entries read per step of a replay.
const REPLAY_BATCH: usize = 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    k: String,
    c: String,
    t: String,
    q: i32,
    pt: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    it: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    d: Vec<(u64, i32)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    o: Vec<u64>,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

/// The body of `record`.
pub fn encode(record: &LogRecord) -> Vec<u8> {
    let wire = match record {
        LogRecord::Checkpoint {
            key,
            pop_time,
            invisible_time,
            deliveries,
        } => Wire {
            k: "ck".into(),
            c: key.group.clone(),
            t: key.topic.clone(),
            q: key.queue_id,
            pt: *pop_time,
            it: *invisible_time,
            d: deliveries.iter().map(|d| (d.offset, d.attempts)).collect(),
            o: Vec::new(),
        },
        LogRecord::Ack {
            key,
            offsets,
            pop_time,
        } => Wire {
            k: "ack".into(),
            c: key.group.clone(),
            t: key.topic.clone(),
            q: key.queue_id,
            pt: *pop_time,
            it: 0,
            d: Vec::new(),
            o: offsets.clone(),
        },
        LogRecord::Reset { key, offset } => Wire {
            k: "reset".into(),
            c: key.group.clone(),
            t: key.topic.clone(),
            q: key.queue_id,
            pt: 0,
            it: 0,
            d: Vec::new(),
            o: vec![*offset],
        },
    };
    serde_json::to_vec(&wire).expect("a revive log record serialises")
}

/// Why a revive log body holds no record.
#[derive(Debug)]
pub enum RecordError {
    /// Not the record JSON.
    Json(serde_json::Error),
    /// A reset record must name exactly one offset.
    ResetOffsets(usize),
    /// A kind this node never writes.
    UnknownKind(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Json(error) => write!(f, "{error}"),
            RecordError::ResetOffsets(count) => {
                write!(f, "a reset record names {count} offsets, not 1")
            }
            RecordError::UnknownKind(kind) => write!(f, "unknown record kind {kind:?}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// Why the revive log could not be written or read.
#[derive(Debug)]
pub enum PopLogError {
    /// The store refused the record.
    NotStored(StoreError),
    /// The record was not acknowledged in time; the put's status.
    NotInTime(PutStatus),
    /// The log queue's entries could not be read from log queue offset `at`.
    QueueUnreadable { at: u64, error: StoreError },
    /// The record of log queue offset `at` could not be read.
    RecordUnreadable { at: u64, error: StoreError },
    /// The replay mark could not be read (or does not check out).
    MarkUnreadable(std::io::Error),
}

impl std::fmt::Display for PopLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PopLogError::NotStored(error) => write!(f, "cannot store a POP log record: {error}"),
            PopLogError::NotInTime(status) => {
                write!(f, "a POP log record was not stored in time ({status:?})")
            }
            PopLogError::QueueUnreadable { at, error } => {
                write!(f, "cannot read the POP log at {at}: {error}")
            }
            PopLogError::RecordUnreadable { at, error } => {
                write!(f, "cannot read POP log record {at}: {error}")
            }
            PopLogError::MarkUnreadable(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for PopLogError {}

/// The record `body` holds, or why it holds none.
pub fn decode(body: &[u8]) -> Result<LogRecord, RecordError> {
    let wire: Wire = serde_json::from_slice(body).map_err(RecordError::Json)?;
    let key = QueueKey {
        group: wire.c,
        topic: wire.t,
        queue_id: wire.q,
    };
    match wire.k.as_str() {
        "ck" => Ok(LogRecord::Checkpoint {
            key,
            pop_time: wire.pt,
            invisible_time: wire.it,
            deliveries: wire
                .d
                .into_iter()
                .map(|(offset, attempts)| Delivery { offset, attempts })
                .collect(),
        }),
        "ack" => Ok(LogRecord::Ack {
            key,
            offsets: wire.o,
            pop_time: wire.pt,
        }),
        "reset" => match wire.o.as_slice() {
            [offset] => Ok(LogRecord::Reset {
                key,
                offset: *offset,
            }),
            other => Err(RecordError::ResetOffsets(other.len())),
        },
        other => Err(RecordError::UnknownKind(other.to_owned())),
    }
}

/// The message that carries `record` in log queue `queue`.
pub fn record_input(record: &LogRecord, queue: i32, host: SocketAddr, now_ms: i64) -> RecordInput {
    let body = Bytes::from(encode(record));
    let tag = match record {
        LogRecord::Checkpoint { .. } => "ck",
        LogRecord::Ack { .. } => "ack",
        LogRecord::Reset { .. } => "reset",
    };
    RecordInput {
        topic: POP_LOG_TOPIC.to_owned(),
        queue_id: queue,
        flag: 0,
        sys_flag: 0,
        born_timestamp: now_ms,
        born_host: host,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: record::body_crc(&body),
        body,
        properties: crate::store::properties::encode([("TAGS", tag)]),
    }
}

/// Appends `record` to log queue `queue` of `store`; its log queue offset once it is
/// stored as durably as a send.
pub async fn append(
    store: &Store,
    queue: i32,
    record: &LogRecord,
    host: SocketAddr,
    now_ms: i64,
) -> Result<u64, PopLogError> {
    let result = store
        .put(record_input(record, queue, host, now_ms))
        .await
        .map_err(PopLogError::NotStored)?;
    match (result.status, result.placement) {
        (PutStatus::Ok, Some(placement)) => Ok(placement.queue_offset),
        (status, _) => Err(PopLogError::NotInTime(status)),
    }
}

/// Replays log queue `queue` of `store` from `from` into `table`; `floor` gives each
/// queue's committed offset. Returns how many records it applied. A record that does
/// not decode is logged and skipped (it can only be one this node never wrote).
pub fn replay(
    store: &Store,
    queue: i32,
    from: u64,
    table: &mut PopTable,
    floor: impl Fn(&QueueKey) -> u64,
) -> Result<u64, PopLogError> {
    replay_with_resets(store, queue, from, table, floor, &BTreeMap::new())
        .map(|replayed| replayed.applied)
}

/// What [`replay_with_resets`] met.
struct Replayed {
    applied: u64,
    /// The queues a reset record started over, with the last reset offset: from its reset
    /// on, a queue's floor is that offset.
    resets: BTreeMap<QueueKey, u64>,
    /// The queues of `wanted` whose offset a checkpoint record handed out.
    found: BTreeSet<QueueKey>,
}

/// [`replay`], also noting resets and which of the `wanted` (queue, offset) deliveries
/// a checkpoint record names.
fn replay_with_resets(
    store: &Store,
    queue: i32,
    from: u64,
    table: &mut PopTable,
    floor: impl Fn(&QueueKey) -> u64,
    wanted: &BTreeMap<QueueKey, u64>,
) -> Result<Replayed, PopLogError> {
    let mut at = from.max(store.min_offset(POP_LOG_TOPIC, queue));
    let mut applied = 0;
    let mut resets: BTreeMap<QueueKey, u64> = BTreeMap::new();
    let mut found = BTreeSet::new();
    loop {
        let entries = store
            .queue_entries(POP_LOG_TOPIC, queue, at, REPLAY_BATCH)
            .map_err(|error| PopLogError::QueueUnreadable { at, error })?;
        if entries.is_empty() {
            return Ok(Replayed {
                applied,
                resets,
                found,
            });
        }
        for entry in &entries {
            let bytes = store
                .read_record(entry.phys_offset as u64, entry.size as usize)
                .map_err(|error| PopLogError::RecordUnreadable { at, error })?;
            match record::decode(&bytes, Verify::Structure) {
                Ok(Decoded::Record(view)) => match decode(view.body) {
                    Ok(record) => {
                        match &record {
                            LogRecord::Reset { key, offset } => {
                                resets.insert(key.clone(), *offset);
                            }
                            LogRecord::Checkpoint {
                                key, deliveries, ..
                            } => {
                                if let Some(offset) = wanted.get(key) {
                                    if deliveries.iter().any(|d| d.offset == *offset) {
                                        found.insert(key.clone());
                                    }
                                }
                            }
                            LogRecord::Ack { .. } => {}
                        }
                        table.apply(&record, at, |key| {
                            resets.get(key).copied().unwrap_or_else(|| floor(key))
                        });
                        applied += 1;
                    }
                    Err(why) => tracing::warn!(at, "POP log record skipped: {why}"),
                },
                other => tracing::warn!(at, "POP log entry points at no record: {other:?}"),
            }
            at += 1;
        }
    }
}

/// Where a replay starts, and what it starts from: `replay_from` is at or below the
/// checkpoint record of every delivery in flight when the mark was taken, and `floors`
/// is every open queue's watermark then (everything below it acknowledged). Written
/// together, so a replay from `replay_from` with these floors rebuilds the table as it
/// stood at the log's end, whatever `config/consumerOffset.json` was last written with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    pub replay_from: u64,
    pub floors: BTreeMap<QueueKey, Floor>,
}

/// One queue's state in a [`Mark`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    /// Its lowest offset in flight, or its cursor: everything below is acknowledged.
    pub watermark: u64,
    /// Its cursor: offsets below it that are not in flight are acknowledged (or were
    /// skipped by a filter), so they are never handed out as new again.
    pub cursor: u64,
}

/// The mark to write now: the lowest checkpoint in flight in `table` (or the log's end,
/// `log_end`, when nothing is), never below the `written` one (it only moves forward),
/// and the table's watermarks.
pub fn next_mark(table: &PopTable, log_end: u64, written: &Mark) -> Mark {
    Mark {
        replay_from: table
            .lowest_ck()
            .unwrap_or(log_end)
            .max(written.replay_from),
        floors: table
            .keys()
            .into_iter()
            .filter_map(|key| {
                let watermark = table.watermark(&key)?;
                let cursor = table.queue(&key)?.cursor;
                Some((key, Floor { watermark, cursor }))
            })
            .collect(),
    }
}

/// The table as it stood at the log's end: replays from `mark` with its floors (or
/// `fallback`, the committed offset, for a queue the mark does not name), then opens the
/// mark's queues that no record after it touched at their floors, so none of them starts
/// over from an older committed offset. Every queue's `committed` is its watermark.
/// Returns the table and the records applied.
pub fn rebuild(
    store: &Store,
    queue: i32,
    mark: &Mark,
    fallback: impl Fn(&QueueKey) -> u64,
) -> Result<(PopTable, u64), PopLogError> {
    let mut table = PopTable::default();
    // Each queue's lowest delivery in flight by the mark: its checkpoint is at or after
    // `replay_from`, so the replay must meet it.
    let wanted: BTreeMap<QueueKey, u64> = mark
        .floors
        .iter()
        .filter(|(_, floor)| floor.watermark < floor.cursor)
        .map(|(key, floor)| (key.clone(), floor.watermark))
        .collect();
    let replayed = replay_with_resets(
        store,
        queue,
        mark.replay_from,
        &mut table,
        |key| {
            mark.floors
                .get(key)
                .map_or_else(|| fallback(key), |floor| floor.watermark)
        },
        &wanted,
    )?;
    let applied = replayed.applied;
    for (key, floor) in &mark.floors {
        if replayed.resets.contains_key(key) {
            // Reset after the mark was taken: the mark's floor and cursor are older news.
            continue;
        }
        if wanted.contains_key(key) && !replayed.found.contains(key) {
            // The mark disagrees with the log (moved forward by hand, or the checkpoint
            // is unreadable): believing its cursor would count every delivery in flight
            // as acknowledged. Start the queue over at the mark's watermark instead, so
            // they are handed out again.
            tracing::warn!(
                group = %crate::remoting::log_safe::log_safe(&key.group),
                topic = %crate::remoting::log_safe::log_safe(&key.topic),
                queue = key.queue_id,
                replay_from = mark.replay_from,
                log_start = store.min_offset(POP_LOG_TOPIC, queue),
                log_end = store.max_offset(POP_LOG_TOPIC, queue),
                watermark = floor.watermark,
                cursor = floor.cursor,
                "the POP replay mark says offset {} was in flight, but no checkpoint for it follows the mark; \
                 the queue starts over at {} and the messages from there on are handed out again",
                floor.watermark,
                floor.watermark
            );
            table.reset(key, floor.watermark);
            continue;
        }
        let cursor = table.open(key, floor.watermark).cursor;
        if cursor < floor.cursor {
            table.take_new(key, &[], floor.cursor, 0, 0);
        }
    }
    for key in table.keys() {
        let watermark = table.watermark(&key).expect("an open queue");
        table.open(&key, watermark).committed = Some(watermark);
    }
    table.check();
    Ok((table, applied))
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MarkFile {
    replay_from: u64,
    /// `[group, topic, queueId, watermark, cursor]`.
    #[serde(default)]
    floors: Vec<(String, String, i32, u64, u64)>,
}

/// The mark's file, `<shard dir>/pop/replay.json`.
#[derive(Debug)]
pub struct ReplayMark {
    files: Arc<dyn MetaFiles>,
    path: PathBuf,
}

impl ReplayMark {
    pub fn new(files: Arc<dyn MetaFiles>, shard_dir: &Path) -> ReplayMark {
        ReplayMark {
            files,
            path: shard_dir.join("pop").join("replay.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored mark; the empty one when there is none yet. A damaged file stops the
    /// start.
    pub fn read(&self) -> std::io::Result<Mark> {
        match self.files.read_file(&self.path) {
            Ok(bytes) => serde_json::from_slice::<MarkFile>(&bytes)
                .map(|file| Mark {
                    replay_from: file.replay_from,
                    floors: file
                        .floors
                        .into_iter()
                        .map(|(group, topic, queue_id, watermark, cursor)| {
                            (
                                QueueKey {
                                    group,
                                    topic,
                                    queue_id,
                                },
                                Floor { watermark, cursor },
                            )
                        })
                        .collect(),
                })
                .map_err(|error| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("corrupt {}: {error}; fix or remove it", self.path.display()),
                    )
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Mark::default()),
            Err(error) => Err(error),
        }
    }

    /// Stores `mark`, replacing the file whole, on the calling thread (tests, tools).
    pub fn write(&self, mark: &Mark) -> std::io::Result<()> {
        replace_file(&*self.files, &self.path, &encode_mark(mark))
    }

    /// The written mark as a table changed file first, starting from `stored` (what
    /// [`ReplayMark::read`] returned): what the shard writes its mark through, off its
    /// reactor ([`crate::broker::tables::persisted_table`]).
    pub fn table(&self, stored: Mark) -> PersistedTable<Mark> {
        PersistedTable::new(self.files.clone(), self.path.clone(), stored, encode_mark)
    }
}

/// The mark file's bytes.
pub fn encode_mark(mark: &Mark) -> Vec<u8> {
    let file = MarkFile {
        replay_from: mark.replay_from,
        floors: mark
            .floors
            .iter()
            .map(|(key, floor)| {
                (
                    key.group.clone(),
                    key.topic.clone(),
                    key.queue_id,
                    floor.watermark,
                    floor.cursor,
                )
            })
            .collect(),
    };
    serde_json::to_vec(&file).expect("the mark serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let key = QueueKey::new("g", "T", 3);
        for record in [
            LogRecord::Checkpoint {
                key: key.clone(),
                pop_time: 1_700_000_000_000,
                invisible_time: 60_000,
                deliveries: vec![
                    Delivery {
                        offset: 7,
                        attempts: 0,
                    },
                    Delivery {
                        offset: 9,
                        attempts: 2,
                    },
                ],
            },
            LogRecord::Ack {
                key: key.clone(),
                offsets: vec![7, 9],
                pop_time: 5,
            },
            LogRecord::Reset {
                key: key.clone(),
                offset: 3000,
            },
        ] {
            assert_eq!(decode(&encode(&record)).unwrap(), record);
        }
        assert!(decode(br#"{"k":"nope","c":"g","t":"T","q":1,"pt":1}"#)
            .unwrap_err()
            .to_string()
            .contains("nope"));
        assert!(decode(b"{").is_err());
    }

    #[test]
    fn the_mark_survives_a_reopen_and_a_damaged_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let files: Arc<dyn MetaFiles> = Arc::new(crate::io::meta::RealFiles);
        let mark = ReplayMark::new(files.clone(), dir.path());
        assert_eq!(mark.read().unwrap(), Mark::default());
        let written = Mark {
            replay_from: 42,
            floors: BTreeMap::from([(
                QueueKey::new("g", "T", 2),
                Floor {
                    watermark: 7,
                    cursor: 9,
                },
            )]),
        };
        mark.write(&written).unwrap();
        assert_eq!(ReplayMark::new(files, dir.path()).read().unwrap(), written);
        std::fs::write(mark.path(), b"{oops").unwrap();
        let error = mark.read().unwrap_err().to_string();
        assert!(error.contains("replay.json"), "{error}");
    }
}
