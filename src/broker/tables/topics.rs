//! The broker's topic table: which topics exist and how many queues each has, persisted in
//! `<store dir>/config/topics.json` in RocketMQ's shape (reference §0, §9.14):
//!
//! ```json
//! {"topicConfigTable":{"TopicTest":{"topicName":"TopicTest","readQueueNums":8,
//!   "writeQueueNums":8,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,
//!   "order":false,"attributes":{}}},
//!  "dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000}}
//! ```
//!
//! Invariants:
//! - The file on disk is always a complete table: every change is written to a temp file,
//!   fsynced, renamed over `topics.json`, and the directory fsynced. A crash leaves the old
//!   table or the new one, never half of either.
//! - A change is visible in memory only once it is on disk: it is made on a copy, written,
//!   and only then swapped in; if persisting fails nothing changed and the caller gets the
//!   error. Readers (every send looks its topic up) never wait for the write's fsync.
//! - A `topics.json` that exists but cannot be parsed stops the start with an error naming
//!   the file; it is never silently replaced by an empty table. So does one holding an
//!   entry the admin requests would refuse ([`check_config`]: the name rules of
//!   [`crate::broker::naming::names`], 1 to [`MAX_QUEUE_NUMS`] read and write queues, known perm bits and
//!   filter type, the key equal to `topicName`), naming the file and the entry.
//! - `dataVersion.counter` grows by one with every change.
//!
//! The table is a [`PersistedTable`] changed file first, through the disk seam's
//! [`MetaFiles`] (the real filesystem in the node, the simulated disk in crash tests). The
//! admin requests ([`TopicTable::put_written`], [`TopicTable::remove_written`]) write on
//! tokio's blocking pool and answer once the file holds the change. Auto-creation by a
//! send or a route query ([`TopicTable::get_or_create`]) is answered from the shard's
//! routing, which is synchronous, so it still writes on the shard thread: that shard
//! stalls for one write per new topic, the others do not.
//!
//! Auto-creation (`autoCreateTopicEnable`, default true): a send to, or a route query for,
//! an unknown topic creates it with `defaultTopicQueueNums` queues. System topics
//! (`%RETRY%<group>`, `%DLQ%<group>`) are always created on demand, with one queue.

use crate::io::meta::{MetaFiles, RealFiles};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::remoting::codes::response;

use crate::broker::tables::mirror::MirrorError;
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};

/// PermName: READ 4 | WRITE 2.
pub const PERM_READ_WRITE: i32 = 6;
pub const PERM_READ: i32 = 4;
pub const PERM_WRITE: i32 = 2;
/// Every PermName bit: PRIORITY 8 | READ 4 | WRITE 2 | INHERIT 1.
pub const PERM_ALL: i32 = 0xF;
/// The `topicFilterType` values Java knows.
pub const FILTER_TYPES: [&str; 2] = ["SINGLE_TAG", "MULTI_TAG"];

pub use crate::broker::naming::names::MAX_QUEUE_NUMS;

/// Checks one topic's configuration against the rules every writer of the table follows;
/// the error says what is wrong. What admin requests and loading both apply.
pub fn check_config(config: &TopicConfig) -> Result<(), TopicConfigError> {
    crate::broker::naming::names::validate_topic(&config.topic_name)?;
    for (field, value) in [
        ("readQueueNums", config.read_queue_nums),
        ("writeQueueNums", config.write_queue_nums),
    ] {
        if !(1..=MAX_QUEUE_NUMS).contains(&value) {
            return Err(TopicConfigError::QueueNums { field, value });
        }
    }
    if config.perm & !PERM_ALL != 0 {
        return Err(TopicConfigError::Perm(config.perm));
    }
    if !FILTER_TYPES.contains(&config.topic_filter_type.as_str()) {
        return Err(TopicConfigError::FilterType(
            config.topic_filter_type.clone(),
        ));
    }
    Ok(())
}

/// Why a topic's configuration is refused (by an admin request or the load).
#[derive(Debug, thiserror::Error)]
pub enum TopicConfigError {
    #[error(transparent)]
    Name(#[from] crate::broker::naming::names::NameError),
    #[error("{field} {value} is out of range: 1 to {MAX_QUEUE_NUMS}")]
    QueueNums { field: &'static str, value: u32 },
    #[error("perm {0} has bits other than {PERM_ALL:#x}")]
    Perm(i32),
    #[error("topicFilterType {0:?}: expected SINGLE_TAG or MULTI_TAG")]
    FilterType(String),
}

/// Why a loaded topic table is refused: the entry, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    #[error("entry {key:?} holds the topicName {name:?}")]
    Renamed { key: String, name: String },
    #[error("entry {key:?}: {why}")]
    Config { key: String, why: TopicConfigError },
}

/// Every entry of a loaded table by [`check_config`], its key equal to its name; the error
/// names the entry.
fn check_table(table: &TopicConfigWrapper) -> Result<(), BadEntry> {
    for (key, config) in &table.topic_config_table {
        if *key != config.topic_name {
            return Err(BadEntry::Renamed {
                key: key.clone(),
                name: config.topic_name.clone(),
            });
        }
        check_config(config).map_err(|why| BadEntry::Config {
            key: key.clone(),
            why,
        })?;
    }
    Ok(())
}

/// One topic's configuration, field names as Java's `TopicConfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    pub topic_name: String,
    pub read_queue_nums: u32,
    pub write_queue_nums: u32,
    #[serde(default = "default_perm")]
    pub perm: i32,
    #[serde(default = "default_filter_type")]
    pub topic_filter_type: String,
    #[serde(default)]
    pub topic_sys_flag: i32,
    #[serde(default)]
    pub order: bool,
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

fn default_perm() -> i32 {
    PERM_READ_WRITE
}

fn default_filter_type() -> String {
    "SINGLE_TAG".into()
}

impl TopicConfig {
    /// A read-write, single-tag topic with `queues` read and write queues.
    pub fn new(name: &str, queues: u32) -> TopicConfig {
        TopicConfig {
            topic_name: name.to_owned(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: PERM_READ_WRITE,
            topic_filter_type: default_filter_type(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// `DataVersion`: bumped on every change so name servers can tell tables apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVersion {
    pub counter: i64,
    #[serde(default)]
    pub state_version: i64,
    pub timestamp: i64,
}

/// The file's shape.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigWrapper {
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    #[serde(default)]
    pub data_version: DataVersion,
}

/// Whether `topic` is a system topic created on demand with one queue.
pub fn is_system_topic(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
}

/// The topic table of one broker.
#[derive(Debug)]
pub struct TopicTable {
    /// `autoCreateTopicEnable` / `autoCreateSubscriptionGroup`: live (UPDATE_BROKER_CONFIG).
    auto_create: std::sync::atomic::AtomicBool,
    default_queue_nums: u32,
    /// What readers see (every send looks its topic up): swapped whole once a change is
    /// on disk, so readers never wait for the file's fsync.
    state: PersistedTable<TopicConfigWrapper>,
}

impl TopicTable {
    /// Loads `<store_dir>/config/topics.json` from the real filesystem; a missing file is
    /// an empty table.
    pub fn load(
        store_dir: &Path,
        auto_create: bool,
        default_queue_nums: u32,
    ) -> anyhow::Result<TopicTable> {
        TopicTable::load_from(
            Arc::new(RealFiles),
            store_dir,
            auto_create,
            default_queue_nums,
        )
    }

    /// [`TopicTable::load`] through `files`, which the table also writes through.
    pub fn load_from(
        files: Arc<dyn MetaFiles>,
        store_dir: &Path,
        auto_create: bool,
        default_queue_nums: u32,
    ) -> anyhow::Result<TopicTable> {
        let path = store_dir.join("config").join("topics.json");
        let state = match files.read_file(&path) {
            Ok(bytes) => serde_json::from_slice::<TopicConfigWrapper>(&bytes).map_err(|error| {
                anyhow::anyhow!(
                    "the topic table {} is corrupt: {error}; fix or remove it",
                    path.display()
                )
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                TopicConfigWrapper::default()
            }
            Err(error) => {
                anyhow::bail!("cannot read the topic table {}: {error}", path.display())
            }
        };
        check_table(&state).map_err(|why| {
            anyhow::anyhow!(
                "the topic table {} has a bad {why}; fix or remove it",
                path.display()
            )
        })?;
        Ok(TopicTable {
            auto_create: std::sync::atomic::AtomicBool::new(auto_create),
            default_queue_nums: default_queue_nums.max(1),
            state: PersistedTable::new(files, path, state, encode),
        })
    }

    pub fn auto_create(&self) -> bool {
        self.auto_create.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes the flag for every later lookup (UPDATE_BROKER_CONFIG).
    pub fn set_auto_create(&self, enabled: bool) {
        self.auto_create
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn default_queue_nums(&self) -> u32 {
        self.default_queue_nums
    }

    pub fn path(&self) -> &Path {
        self.state.path()
    }

    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.state
            .read(|table| table.topic_config_table.get(topic).cloned())
    }

    /// Every topic, by name.
    pub fn all(&self) -> Vec<TopicConfig> {
        self.state
            .read(|table| table.topic_config_table.values().cloned().collect())
    }

    /// The table as `topics.json` holds it.
    /// The table's data version: it moves on every change, so a reader that keeps the
    /// last one it acted on (the name-server registration) sees changes by comparing.
    pub fn data_version(&self) -> DataVersion {
        self.state.read(|table| table.data_version.clone())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&*self.state.snapshot()).expect("the topic table serialises")
    }

    /// The topic a send or a route query needs: the existing one, else a new one when the
    /// rules allow (system topics always, others under auto-create), else TOPIC_NOT_EXIST.
    /// The error is a response code and remark. `now_ms` stamps a topic created here; it is
    /// called only then, so a send to an existing topic reads no clock for it.
    pub fn get_or_create(
        &self,
        topic: &str,
        now_ms: impl FnOnce() -> i64,
    ) -> Result<TopicConfig, (i32, String)> {
        if let Some(config) = self.get(topic) {
            return Ok(config);
        }
        let queues = if is_system_topic(topic) {
            1
        } else if self.auto_create() {
            self.default_queue_nums
        } else {
            return Err((
                response::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please! (autoCreateTopicEnable is false)"),
            ));
        };
        let config = TopicConfig::new(topic, queues);
        self.put(config.clone(), now_ms()).map_err(|error| {
            (
                response::SYSTEM_ERROR,
                format!("cannot create topic {topic}: {error}"),
            )
        })?;
        Ok(config)
    }

    /// Creates or replaces a topic and persists the table, on the calling thread.
    pub fn put(&self, config: TopicConfig, now_ms: i64) -> Result<(), WriteFailed> {
        self.state
            .change_synced(inserted(config, now_ms))
            .map(|_| ())
    }

    /// Removes a topic and persists the table, on the calling thread; `false` if there was
    /// no such topic.
    pub fn remove(&self, topic: &str, now_ms: i64) -> Result<bool, WriteFailed> {
        self.state.change_synced(removed(topic.to_owned(), now_ms))
    }

    /// [`Self::put`] for a shard's reactor: written on tokio's blocking pool; returns once
    /// the file holds the change (readers see it from then on).
    pub async fn put_written(&self, config: TopicConfig, now_ms: i64) -> Result<(), WriteFailed> {
        self.state
            .change_written(inserted(config, now_ms))
            .await
            .map(|_| ())
    }

    /// A slave takes its master's whole table (GET_ALL_TOPIC_CONFIG's body, checked as the
    /// file is) when its data version differs from this one's, file first
    /// ([`super::mirror`]). True if the table changed.
    pub async fn mirror(&self, body: &[u8]) -> Result<bool, MirrorError> {
        let master: TopicConfigWrapper = serde_json::from_slice(body)
            .map_err(|error| MirrorError::invalid("topic table", error))?;
        check_table(&master).map_err(|why| MirrorError::invalid("topic table", why))?;
        if master.data_version == self.data_version() {
            return Ok(false);
        }
        let changed = self
            .state
            .change_written(move |table| {
                *table = master;
                true
            })
            .await?;
        Ok(changed)
    }

    /// [`Self::remove`] for a shard's reactor, as [`Self::put_written`].
    pub async fn remove_written(&self, topic: &str, now_ms: i64) -> Result<bool, WriteFailed> {
        self.state
            .change_written(removed(topic.to_owned(), now_ms))
            .await
    }
}

/// The edit that creates or replaces `config`'s topic, stamped `now_ms`.
fn inserted(config: TopicConfig, now_ms: i64) -> impl FnOnce(&mut TopicConfigWrapper) -> bool {
    move |table| {
        let name = config.topic_name.clone();
        table.topic_config_table.insert(name, config);
        bump(table, now_ms);
        true
    }
}

/// The edit that removes `topic` if it is there, stamped `now_ms`.
fn removed(topic: String, now_ms: i64) -> impl FnOnce(&mut TopicConfigWrapper) -> bool {
    move |table| {
        let found = table.topic_config_table.remove(&topic).is_some();
        if found {
            bump(table, now_ms);
        }
        found
    }
}

/// Every change grows `dataVersion.counter` by one.
fn bump(table: &mut TopicConfigWrapper, now_ms: i64) {
    table.data_version.counter += 1;
    table.data_version.timestamp = now_ms;
}

/// The file's bytes: the table in RocketMQ's shape.
fn encode(table: &TopicConfigWrapper) -> Vec<u8> {
    serde_json::to_vec_pretty(table).expect("the topic table serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_survives_a_reload_in_rocketmq_shape() {
        let dir = tempfile::tempdir().unwrap();
        let table = TopicTable::load(dir.path(), true, 8).unwrap();
        table.put(TopicConfig::new("A", 4), 1000).unwrap();
        assert_eq!(
            table.get_or_create("B", || 2000).unwrap().write_queue_nums,
            8
        );
        assert_eq!(
            table
                .get_or_create("%RETRY%g", || 3000)
                .unwrap()
                .read_queue_nums,
            1
        );
        assert!(table.remove("B", 4000).unwrap());
        assert!(!table.remove("B", 4000).unwrap());

        let text = std::fs::read_to_string(dir.path().join("config/topics.json")).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["dataVersion"]["counter"], 4);
        assert_eq!(value["dataVersion"]["timestamp"], 4000);
        assert_eq!(
            value["topicConfigTable"]["A"],
            serde_json::json!({"topicName":"A","readQueueNums":4,"writeQueueNums":4,"perm":6,
                "topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}})
        );

        let again = TopicTable::load(dir.path(), true, 8).unwrap();
        let names: Vec<String> = again.all().into_iter().map(|t| t.topic_name).collect();
        assert_eq!(names, ["%RETRY%g", "A"]);
    }

    #[test]
    fn unknown_topics_are_refused_without_auto_create_except_system_ones() {
        let dir = tempfile::tempdir().unwrap();
        let table = TopicTable::load(dir.path(), false, 8).unwrap();
        let (code, remark) = table.get_or_create("Nope", || 1).unwrap_err();
        assert_eq!(code, response::TOPIC_NOT_EXIST);
        assert!(remark.contains("Nope"));
        assert!(table.get("Nope").is_none());
        assert_eq!(
            table
                .get_or_create("%DLQ%g", || 1)
                .unwrap()
                .write_queue_nums,
            1
        );
    }

    #[test]
    fn every_kind_of_bad_entry_stops_the_load_naming_the_file_and_entry() {
        let good = TopicConfig::new("Good", 4);
        let bad = |change: fn(&mut TopicConfig)| {
            let mut config = TopicConfig::new("Bad", 4);
            change(&mut config);
            config
        };
        let cases = [
            (
                "Bad",
                bad(|c| c.read_queue_nums = 1_000_000),
                "readQueueNums",
            ),
            (
                "Bad",
                bad(|c| c.write_queue_nums = u32::MAX),
                "writeQueueNums",
            ),
            ("Bad", bad(|c| c.read_queue_nums = 0), "readQueueNums"),
            ("Bad", bad(|c| c.perm = 0x40), "perm"),
            (
                "Bad",
                bad(|c| c.topic_filter_type = "SQL".into()),
                "topicFilterType",
            ),
            ("../x", bad(|c| c.topic_name = "../x".into()), "'.'"),
            ("Bad", bad(|c| c.topic_name = "Other".into()), "Other"),
        ];
        for (key, config, why) in cases {
            let dir = tempfile::tempdir().unwrap();
            let mut table = TopicConfigWrapper::default();
            table.topic_config_table.insert("Good".into(), good.clone());
            table.topic_config_table.insert(key.into(), config);
            std::fs::create_dir_all(dir.path().join("config")).unwrap();
            std::fs::write(
                dir.path().join("config/topics.json"),
                serde_json::to_vec(&table).unwrap(),
            )
            .unwrap();
            let error = TopicTable::load(dir.path(), true, 8)
                .unwrap_err()
                .to_string();
            assert!(error.contains("topics.json"), "{error}");
            assert!(error.contains(&format!("entry {key:?}")), "{error}");
            assert!(error.contains(why), "{error}");
        }
    }

    #[test]
    fn a_failed_write_leaves_the_table_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let table = TopicTable::load(dir.path(), true, 8).unwrap();
        // `config` is a file, so the table cannot be written below it.
        std::fs::write(dir.path().join("config"), b"not a directory").unwrap();
        assert!(table.put(TopicConfig::new("A", 4), 1).is_err());
        assert!(table.get("A").is_none());
        assert_eq!(table.state.read(|table| table.data_version.counter), 0);
    }
}
