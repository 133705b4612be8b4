//! The delay schedulers' cursors (reference-2 §1.4): per delay level, the next
//! `SCHEDULE_TOPIC_XXXX` queue offset its scheduler examines, kept in
//! `<store dir>/config/delayOffset.json` in RocketMQ's shape:
//!
//! ```text
//! {"offsetTable":{"1":5,"3":17},"dataVersion":{"counter":9,"stateVersion":0,"timestamp":…}}
//! ```
//!
//! Keys are delay levels (not queue ids). Java (fastjson) writes them unquoted (`{1:5}`);
//! loading accepts both and ignores unknown fields, writing always quotes the keys. The
//! same encoding ([`DelayOffsets::to_json`]) is the body of GET_ALL_DELAY_OFFSET (45),
//! Java's `DelayOffsetSerializeWrapper`, which a slave copies the table with.
//! `dataVersion` counts the changes of the table (every cursor move bumps it, as Java's
//! `ScheduleMessageService.updateOffset` does with the default version step of 1), so a
//! reader can tell two tables apart; a file without one loads as version 0.
//!
//! Invariants:
//! - A cursor only moves forward past a message once that message's delivered copy is
//!   durable (the scheduler advances it after the put is acknowledged, `crate::broker::delay`),
//!   so the file never names an offset whose message was not delivered. It may lag: a
//!   crash (or an abort mid-delivery at a stop) delivers the messages between the written
//!   cursor and the real one again (at-least-once, as Java).
//! - The file is only ever replaced whole through the disk seam's [`MetaFiles`]
//!   (temp file, fsync, rename, directory fsync), as `config/consumerOffset.json` is
//!   ([`crate::broker::tables::consumer_offsets`]): the table is a [`PersistedTable`] changed memory first,
//!   and the periodic write runs on tokio's blocking pool, off every reactor.
//! - The node writes it every `flushDelayOffsetInterval` (default
//!   [`crate::broker::DELAY_OFFSET_FLUSH_INTERVAL`]) when a cursor moved,
//!   and once more at a clean shutdown, after every shard (and so every scheduler) has
//!   stopped: a clean restart resumes each level exactly where it stopped.
//! - A file that cannot be read or parsed, or that names a level below 1 or an offset
//!   below 0, stops the node's start with an error naming the file; a missing file is an
//!   empty table (every level from its queue's first offset). A level past the configured
//!   ones is kept (and written back) untouched, so shrinking `messageDelayLevel` and
//!   growing it again loses nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::io::meta::{MetaFiles, RealFiles};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::tables::mirror::MirrorError;
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};
use crate::broker::tables::topics::DataVersion;
use crate::broker::Broker;

/// The file's name inside `<store dir>/config/`.
pub const FILE_NAME: &str = "delayOffset.json";

/// The file's (and GET_ALL_DELAY_OFFSET's body's) shape, `DelayOffsetSerializeWrapper`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct OffsetFile {
    #[serde(default)]
    offset_table: BTreeMap<i64, i64>,
    #[serde(default)]
    data_version: DataVersion,
}

/// The table and the version of its last change, behind one lock so a snapshot is whole.
#[derive(Clone, Debug, Default)]
struct State {
    cursors: BTreeMap<u32, u64>,
    version: DataVersion,
}

/// Delay level → next queue offset to examine.
#[derive(Debug)]
pub struct DelayOffsets {
    table: PersistedTable<State>,
}

impl DelayOffsets {
    /// `<store dir>/config/delayOffset.json`.
    pub fn file_path(store_dir: &Path) -> PathBuf {
        store_dir.join("config").join(FILE_NAME)
    }

    /// Loads the table of the store in `store_dir` from the real filesystem.
    pub fn load(store_dir: &Path) -> anyhow::Result<DelayOffsets> {
        DelayOffsets::load_from(Arc::new(RealFiles), store_dir)
    }

    /// [`DelayOffsets::load`] through `files`, which the table also writes through.
    pub fn load_from(files: Arc<dyn MetaFiles>, store_dir: &Path) -> anyhow::Result<DelayOffsets> {
        let path = DelayOffsets::file_path(store_dir);
        let table = match files.read_file(&path) {
            Ok(bytes) => std::str::from_utf8(&bytes)
                .map_err(anyhow::Error::from)
                .and_then(parse)
                .with_context(|| format!("corrupt {}", path.display()))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", path.display()))
            }
        };
        Ok(DelayOffsets::with(files, path, table))
    }

    /// An empty table that [`DelayOffsets::persist`] writes to `path` (tests, and the
    /// tables a node replaces at start).
    pub fn in_memory(path: PathBuf) -> DelayOffsets {
        DelayOffsets::with(Arc::new(RealFiles), path, State::default())
    }

    fn with(files: Arc<dyn MetaFiles>, path: PathBuf, table: State) -> DelayOffsets {
        DelayOffsets {
            table: PersistedTable::new(files, path, table, encode),
        }
    }

    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// The cursor of `level`, if one was ever stored.
    pub fn get(&self, level: u32) -> Option<u64> {
        self.table.read(|state| state.cursors.get(&level).copied())
    }

    /// Every stored cursor, by level.
    pub fn all(&self) -> BTreeMap<u32, u64> {
        self.table.read(|state| state.cursors.clone())
    }

    /// The version of the table's last change.
    pub fn data_version(&self) -> DataVersion {
        self.table.read(|state| state.version.clone())
    }

    /// Sets the cursor of `level`; a change bumps the table's version, stamped `now_ms`.
    pub fn set(&self, level: u32, offset: u64, now_ms: i64) {
        assert!(level >= 1, "delay levels start at 1, not {level}");
        self.table.change(|state| {
            if state.cursors.insert(level, offset) == Some(offset) {
                return false;
            }
            state.version.counter += 1;
            state.version.timestamp = now_ms;
            true
        });
    }

    /// The whole table and its version in Java's `DelayOffsetSerializeWrapper` JSON: what
    /// the file holds and what GET_ALL_DELAY_OFFSET answers.
    pub fn to_json(&self) -> Vec<u8> {
        self.table.encoded()
    }

    /// A slave takes its master's cursors (GET_ALL_DELAY_OFFSET's body, checked as the
    /// file is) when their version differs from this one's, memory first with the write
    /// queued ([`crate::broker::tables::mirror`]). True if the table changed.
    pub fn mirror(&self, body: &[u8]) -> Result<bool, MirrorError> {
        let master = std::str::from_utf8(body)
            .map_err(anyhow::Error::from)
            .and_then(parse)
            .map_err(|why| MirrorError::invalid("delay offsets", format!("{why:#}")))?;
        let changed = self.table.change(|state| {
            if state.version == master.version && state.cursors == master.cursors {
                return false;
            }
            *state = master;
            true
        });
        if changed.is_some() {
            self.table.schedule_write();
        }
        Ok(changed.is_some())
    }

    /// Queues a write of the table on tokio's blocking pool if a cursor moved since the
    /// last write: the node's periodic flush, which never waits for the disk.
    pub fn write_if_behind(&self) {
        self.table.write_if_behind();
    }

    /// Writes the file on the calling thread if a cursor moved since the last write; true
    /// if it wrote (tools, tests).
    pub fn persist_if_changed(&self) -> Result<bool, WriteFailed> {
        self.table.flush()
    }

    /// Writes the whole table on the calling thread unless the file holds it already (a
    /// clean stop, tools, tests; never a shard's reactor).
    pub fn persist(&self) -> Result<(), WriteFailed> {
        self.table.flush().map(drop)
    }
}

/// [`DelayOffsets::to_json`]'s encoding of a table.
fn encode(state: &State) -> Vec<u8> {
    let file = OffsetFile {
        offset_table: state
            .cursors
            .iter()
            .map(|(&level, &offset)| (i64::from(level), offset as i64))
            .collect(),
        data_version: state.version.clone(),
    };
    serde_json::to_vec_pretty(&file).expect("integer maps always serialize")
}

/// GET_ALL_DELAY_OFFSET (45): the node's whole cursor table as [`DelayOffsets::to_json`]
/// encodes it. Every shard's schedulers set their levels in the one node-wide table
/// ([`crate::broker::NodeTables`]), so the shard a request reaches answers for all of them
/// without asking the others; cursors moved since the last write are included (Java
/// answers from memory too).
pub fn get_all(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(broker.delay_offsets.to_json())
}

fn parse(text: &str) -> anyhow::Result<State> {
    let file: OffsetFile = match serde_json::from_str(text) {
        Ok(file) => file,
        // fastjson's unquoted integer keys.
        Err(error) => serde_json::from_str(
            &crate::broker::tables::consumer_offsets::quote_bare_keys(text),
        )
        .map_err(|_| error)?,
    };
    let mut table = BTreeMap::new();
    for (level, offset) in file.offset_table {
        let level = u32::try_from(level)
            .ok()
            .filter(|&level| level >= 1)
            .ok_or_else(|| anyhow::anyhow!("level {level}: delay levels start at 1"))?;
        let offset = u64::try_from(offset)
            .map_err(|_| anyhow::anyhow!("level {level} has the offset {offset}"))?;
        table.insert(level, offset);
    }
    Ok(State {
        cursors: table,
        version: file.data_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_java_and_own_files_and_writes_them_back_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let path = DelayOffsets::file_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            r#"{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1},"offsetTable":{1:0,3:17}}"#,
        )
        .unwrap();
        let offsets = DelayOffsets::load(dir.path()).unwrap();
        assert_eq!(offsets.get(1), Some(0));
        assert_eq!(offsets.get(3), Some(17));
        assert_eq!(offsets.get(2), None);
        assert!(!offsets.persist_if_changed().unwrap(), "nothing moved");
        offsets.set(2, 4, 50);
        // No change: the version stays.
        offsets.set(3, 17, 60);
        assert!(offsets.persist_if_changed().unwrap());
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({
                "offsetTable": {"1": 0, "2": 4, "3": 17},
                "dataVersion": {"counter": 4, "stateVersion": 0, "timestamp": 50}
            })
        );
        assert_eq!(
            written,
            serde_json::from_slice::<serde_json::Value>(&offsets.to_json()).unwrap()
        );
        let again = DelayOffsets::load(dir.path()).unwrap();
        assert_eq!(again.all(), offsets.all());
        assert_eq!(again.data_version(), offsets.data_version());
    }

    #[test]
    fn a_bad_file_names_what_is_wrong() {
        for (text, why) in [
            (r#"{"offsetTable":{"0":1}}"#, "delay levels start at 1"),
            (r#"{"offsetTable":{"2":-1}}"#, "level 2 has the offset -1"),
            ("{not json", ""),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = DelayOffsets::file_path(dir.path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", DelayOffsets::load(dir.path()).unwrap_err());
            assert!(error.contains("delayOffset.json"), "{error}");
            assert!(error.contains(why), "{error}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(DelayOffsets::load(dir.path()).unwrap().all().is_empty());
    }
}
