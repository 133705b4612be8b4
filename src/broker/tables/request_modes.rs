//! The table SET_MESSAGE_REQUEST_MODE (401,
//! [`crate::broker::requests::request_mode_requests`]) fills: per (topic, consumer group),
//! whether the group's clients pull or pop (reference part 2 §2.1). QUERY_ASSIGNMENT
//! ([`crate::broker::requests::assignment`]) answers `mode:"POP"` for a group switched to POP.
//!
//! The table is node-wide and persisted in `config/messageRequestMode.json` (Java's file
//! and shape: `{"messageRequestModeMap": {topic: {group: body}}}`) through the disk seam, a
//! [`PersistedTable`] changed file first: written (replaced, fsynced) on tokio's blocking
//! pool before the request is answered. Loading refuses (stops the
//! start, naming the file and the entry) an entry that fails the request's checks or is
//! filed under another topic or group than it names. A mode other than PULL or
//! POP, a `%RETRY%` topic (always PULL in Java), or a bad name is INVALID_PARAMETER; an
//! unknown topic is TOPIC_NOT_EXIST.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::broker::naming::names;
use crate::broker::pop::wire::MessageRequestMode;
use crate::broker::tables::mirror::MirrorError;
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};
use crate::io::meta::{MetaFiles, RealFiles};

pub const FILE_NAME: &str = "messageRequestMode.json";

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModeFile {
    #[serde(default)]
    message_request_mode_map: BTreeMap<String, BTreeMap<String, MessageRequestMode>>,
}

/// The node's request modes.
#[derive(Debug)]
pub struct RequestModes {
    table: PersistedTable<ModeFile>,
}

impl RequestModes {
    pub fn file_path(store_dir: &Path) -> PathBuf {
        store_dir.join("config").join(FILE_NAME)
    }

    pub fn load(store_dir: &Path) -> anyhow::Result<RequestModes> {
        RequestModes::load_from(Arc::new(RealFiles), store_dir)
    }

    /// Loads through `files` (a missing file is an empty table); a corrupt file or a bad
    /// entry stops the node, naming the file.
    pub fn load_from(files: Arc<dyn MetaFiles>, store_dir: &Path) -> anyhow::Result<RequestModes> {
        let path = RequestModes::file_path(store_dir);
        let table = match files.read_file(&path) {
            Ok(bytes) => serde_json::from_slice::<ModeFile>(&bytes)
                .with_context(|| format!("corrupt {}; fix or remove it", path.display()))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => ModeFile::default(),
            Err(error) => {
                return Err(error).with_context(|| format!("cannot read {}", path.display()))
            }
        };
        if let Err(why) = check_entries(&table) {
            anyhow::bail!("{} has a bad {why}; fix or remove it", path.display());
        }
        Ok(RequestModes {
            table: PersistedTable::new(files, path, table, encode),
        })
    }

    /// An empty table writing to `path` (tests, and the table a node replaces at start).
    pub fn in_memory(path: PathBuf) -> RequestModes {
        RequestModes {
            table: PersistedTable::new(Arc::new(RealFiles), path, ModeFile::default(), encode),
        }
    }

    /// Whether `group` pops `topic`.
    pub fn is_pop(&self, topic: &str, group: &str) -> bool {
        self.table.read(|table| {
            table
                .message_request_mode_map
                .get(topic)
                .and_then(|groups| groups.get(group))
                .is_some_and(|mode| mode.mode == "POP")
        })
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// The whole table as its file holds it: GET_ALL_MESSAGE_REQUEST_MODE's body.
    pub fn to_json(&self) -> Vec<u8> {
        self.table.encoded()
    }

    /// A slave takes its master's whole table (GET_ALL_MESSAGE_REQUEST_MODE's body,
    /// checked as the file is) when it differs from this one, file first
    /// ([`super::mirror`]). True if the table changed.
    pub async fn mirror(&self, body: &[u8]) -> Result<bool, MirrorError> {
        let master: ModeFile = serde_json::from_slice(body)
            .map_err(|error| MirrorError::invalid("request modes", error))?;
        check_entries(&master).map_err(|why| MirrorError::invalid("request modes", why))?;
        if self.table.read(|table| *table == master) {
            return Ok(false);
        }
        Ok(self
            .table
            .change_written(move |table| {
                *table = master;
                true
            })
            .await?)
    }

    /// Stores `mode`, on disk first, on the calling thread (tools, tests).
    pub fn set(&self, mode: MessageRequestMode) -> Result<(), WriteFailed> {
        self.table.change_synced(with_mode(mode)).map(|_| ())
    }

    /// Stores `mode`, on disk first, written on tokio's blocking pool (a shard's reactor).
    pub async fn set_written(&self, mode: MessageRequestMode) -> Result<(), WriteFailed> {
        self.table.change_written(with_mode(mode)).await.map(|_| ())
    }
}

/// Every entry against the request's checks: `entry <topic>/<group>: <why>` for the first
/// that fails one.
fn check_entries(table: &ModeFile) -> Result<(), String> {
    for (topic, groups) in &table.message_request_mode_map {
        for (group, mode) in groups {
            // The map's keys are what lookups use; an entry filed under another topic or
            // group (or under a name no request could create, `../x`) would switch a group
            // nobody asked for.
            let misfiled = (mode.topic != *topic || mode.consumer_group != *group).then(|| {
                format!(
                    "it is filed under {topic}/{group} but names {}/{}",
                    mode.topic, mode.consumer_group
                )
            });
            if let Some(why) = misfiled.or_else(|| check(mode).err().map(|why| why.to_string())) {
                return Err(format!("entry {topic}/{group}: {why}"));
            }
        }
    }
    Ok(())
}

/// The edit that files `mode` under its topic and group.
fn with_mode(mode: MessageRequestMode) -> impl FnOnce(&mut ModeFile) -> bool {
    move |table| {
        table
            .message_request_mode_map
            .entry(mode.topic.clone())
            .or_default()
            .insert(mode.consumer_group.clone(), mode);
        true
    }
}

/// The file's bytes, in Java's shape.
fn encode(table: &ModeFile) -> Vec<u8> {
    serde_json::to_vec_pretty(table).expect("the request modes serialise")
}

/// The checks SET_MESSAGE_REQUEST_MODE and the load apply to one entry: the error is the
/// reason the request answers.
pub(crate) fn check(mode: &MessageRequestMode) -> Result<(), ModeError> {
    names::validate_group(&mode.consumer_group)?;
    names::validate_topic(&mode.topic)?;
    if mode.mode != "PULL" && mode.mode != "POP" {
        return Err(ModeError::Mode(mode.mode.clone()));
    }
    if mode.topic.starts_with(names::RETRY_PREFIX) {
        return Err(ModeError::RetryTopic(mode.topic.clone()));
    }
    Ok(())
}

/// Why a request mode is refused (by SET_MESSAGE_REQUEST_MODE or the load).
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    #[error(transparent)]
    Name(#[from] names::NameError),
    #[error("mode {0:?} is neither PULL nor POP")]
    Mode(String),
    #[error("{0} is a retry topic; those are always PULL")]
    RetryTopic(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(topic: &str, group: &str, value: &str) -> MessageRequestMode {
        MessageRequestMode {
            topic: topic.into(),
            consumer_group: group.into(),
            mode: value.into(),
            pop_share_queue_num: -1,
        }
    }

    #[test]
    fn a_mode_survives_a_reload_in_javas_shape() {
        let dir = tempfile::tempdir().unwrap();
        let table = RequestModes::load(dir.path()).unwrap();
        assert!(!table.is_pop("T", "g"));
        table.set(mode("T", "g", "POP")).unwrap();
        assert!(table.is_pop("T", "g"));
        assert!(!table.is_pop("T", "h"));
        let text = std::fs::read_to_string(RequestModes::file_path(dir.path())).unwrap();
        assert!(text.contains("messageRequestModeMap"), "{text}");
        let reloaded = RequestModes::load(dir.path()).unwrap();
        assert!(reloaded.is_pop("T", "g"));
        reloaded.set(mode("T", "g", "PULL")).unwrap();
        assert!(!RequestModes::load(dir.path()).unwrap().is_pop("T", "g"));
    }

    #[test]
    fn bad_modes_are_refused_naming_why() {
        assert!(check(&mode("T", "g", "PUSH"))
            .unwrap_err()
            .to_string()
            .contains("PUSH"));
        assert!(check(&mode("%RETRY%g", "g", "POP"))
            .unwrap_err()
            .to_string()
            .contains("retry topic"));
        assert!(check(&mode("T", "g", "POP")).is_ok());
    }

    #[test]
    fn a_corrupt_file_stops_the_load_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = RequestModes::file_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        let error = format!("{:#}", RequestModes::load(dir.path()).unwrap_err());
        assert!(error.contains(FILE_NAME), "{error}");
    }
}
