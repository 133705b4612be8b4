//! The broker's subscription groups: how each consumer group may consume and how often its
//! failed messages are retried, persisted in `<store dir>/config/subscriptionGroup.json` in
//! RocketMQ's shape:
//!
//! ```json
//! {"subscriptionGroupTable":{"g":{"groupName":"g","consumeEnable":true,
//!   "consumeFromMinEnable":true,"consumeBroadcastEnable":true,
//!   "consumeMessageOrderly":false,"retryQueueNums":1,"retryMaxTimes":16,"brokerId":0,
//!   "whichBrokerWhenConsumeSlowly":1,"notifyConsumerIdsChangedEnable":true,
//!   "groupSysFlag":0,"consumeTimeoutMinute":15}},
//!  "forbiddenTable":{},
//!  "dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000}}
//! ```
//!
//! A group is created with RocketMQ's defaults by its first heartbeat or pull when
//! `autoCreateSubscriptionGroup` is on (the default), or by
//! UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200). Fields the node does not act on (Java's
//! `groupRetryPolicy`, `subscriptionDataSet`, `attributes`, ...) are kept as they came and
//! written back, so a table written by Java or a tool survives a round trip.
//!
//! What the node acts on today: `consumeEnable` (a pull of a disabled group is
//! NO_PERMISSION) and the group's existence (with auto-creation off, a pull of an unknown
//! group is SUBSCRIPTION_GROUP_NOT_EXIST). `retryMaxTimes` and `retryQueueNums` are for
//! the retry path (issue 12).
//!
//! Invariants: the file is always a whole table (temp file, fsync, rename, directory
//! fsync through the [`MetaFiles`] seam, as the topic table's, [`crate::broker::tables::topics`]); a file
//! that exists but does not parse, or holds an entry [`check_config`] refuses, stops the
//! start naming the file and the entry; `dataVersion.counter` grows by one per change.
//! Auto-creation stops at `maxSubscriptionGroups` groups in the table (the pull or pop
//! is then SUBSCRIPTION_GROUP_NOT_EXIST naming the key; a heartbeat still registers its
//! client), so a flood of invented group names cannot grow the file without bound.
//!
//! Writes leave the reactor: the table is a [`PersistedTable`] changed memory first (readers
//! see a change at once) and written whole by a task on tokio's blocking pool. While one
//! write runs, the changes that arrive are taken by the next, so a flood of new groups
//! costs a few writes, not one fsync each, and no shard waits for any of them.
//!
//! What is durable when:
//! - UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and DELETE_SUBSCRIPTIONGROUP are answered SUCCESS
//!   only once the file holds the change ([`SubscriptionGroups::put_durable`]); a failed
//!   write answers SYSTEM_ERROR naming why (the change stays in memory and the next write
//!   retries it).
//! - A group auto-created by a heartbeat, pull or pop is in the file after the write that
//!   follows it, normally within milliseconds; a crash before that loses it, which costs
//!   nothing a client was promised: the group had RocketMQ's defaults and the client's
//!   next heartbeat or pull creates it again. RocketMQ 5.5 too adds the group in memory
//!   before it writes the file (`SubscriptionGroupManager.findSubscriptionGroupConfig`),
//!   though on the request thread.
//! - A failed background write is logged and tried again by the next change or by the
//!   node's once-a-second table flush ([`SubscriptionGroups::write_if_behind`]); a clean
//!   stop writes what is pending ([`SubscriptionGroups::flush`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::io::meta::{MetaFiles, RealFiles};

use crate::broker::tables::mirror::MirrorError;
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};
use crate::broker::tables::topics::DataVersion;

/// The groups every RocketMQ broker knows from its start: the admin tools pull as
/// `TOOLS_CONSUMER` (`mqadmin queryMsgByOffset`, `ringmq admin query-offset`).
pub const SYSTEM_GROUPS: [&str; 1] = ["TOOLS_CONSUMER"];

/// Most retries a group may ask for; RocketMQ has no bound, but past 18 every retry waits
/// the longest delay level anyway.
pub const MAX_RETRY_TIMES: i32 = 1000;
/// Most retry queues a group may have.
pub const MAX_RETRY_QUEUE_NUMS: i32 = 64;

fn yes() -> bool {
    true
}
fn one() -> i32 {
    1
}
fn one_long() -> i64 {
    1
}
fn sixteen() -> i32 {
    16
}
fn fifteen() -> i32 {
    15
}

/// One group's configuration, field names as Java's `SubscriptionGroupConfig`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupConfig {
    pub group_name: String,
    #[serde(default = "yes")]
    pub consume_enable: bool,
    #[serde(default = "yes")]
    pub consume_from_min_enable: bool,
    #[serde(default = "yes")]
    pub consume_broadcast_enable: bool,
    #[serde(default)]
    pub consume_message_orderly: bool,
    #[serde(default = "one")]
    pub retry_queue_nums: i32,
    #[serde(default = "sixteen")]
    pub retry_max_times: i32,
    #[serde(default)]
    pub broker_id: i64,
    #[serde(default = "one_long")]
    pub which_broker_when_consume_slowly: i64,
    #[serde(default = "yes")]
    pub notify_consumer_ids_changed_enable: bool,
    #[serde(default)]
    pub group_sys_flag: i32,
    #[serde(default = "fifteen")]
    pub consume_timeout_minute: i32,
    /// Everything else the file or request carried, kept as is.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl SubscriptionGroupConfig {
    /// RocketMQ's defaults for `group`.
    pub fn new(group: &str) -> SubscriptionGroupConfig {
        SubscriptionGroupConfig {
            group_name: group.to_owned(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            other: serde_json::Map::new(),
        }
    }
}

/// Checks one group's configuration; the error says what is wrong. What request 200 and
/// loading both apply.
pub fn check_config(config: &SubscriptionGroupConfig) -> Result<(), GroupConfigError> {
    crate::broker::naming::names::validate_group(&config.group_name)?;
    if !(0..=MAX_RETRY_TIMES).contains(&config.retry_max_times) {
        return Err(GroupConfigError::RetryMaxTimes(config.retry_max_times));
    }
    if !(1..=MAX_RETRY_QUEUE_NUMS).contains(&config.retry_queue_nums) {
        return Err(GroupConfigError::RetryQueueNums(config.retry_queue_nums));
    }
    if config.consume_timeout_minute < 1 {
        return Err(GroupConfigError::ConsumeTimeout(
            config.consume_timeout_minute,
        ));
    }
    Ok(())
}

/// Why a subscription group's configuration is refused (by request 200 or the load).
#[derive(Debug, thiserror::Error)]
pub enum GroupConfigError {
    #[error(transparent)]
    Name(#[from] crate::broker::naming::names::NameError),
    #[error("retryMaxTimes {0} is out of range: 0 to {MAX_RETRY_TIMES}")]
    RetryMaxTimes(i32),
    #[error("retryQueueNums {0} is out of range: 1 to {MAX_RETRY_QUEUE_NUMS}")]
    RetryQueueNums(i32),
    #[error("consumeTimeoutMinute {0} must be at least 1")]
    ConsumeTimeout(i32),
}

/// The file's shape.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupWrapper {
    #[serde(default)]
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
    #[serde(default)]
    pub forbidden_table: BTreeMap<String, BTreeMap<String, i32>>,
    #[serde(default)]
    pub data_version: DataVersion,
}

/// The subscription groups of one node.
#[derive(Debug)]
pub struct SubscriptionGroups {
    /// `autoCreateTopicEnable` / `autoCreateSubscriptionGroup`: live (UPDATE_BROKER_CONFIG).
    auto_create: std::sync::atomic::AtomicBool,
    table: PersistedTable<SubscriptionGroupWrapper>,
}

/// Every entry against the rules the requests apply: `entry "<key>": <why>` for the first
/// that breaks one.
fn check_entries(table: &SubscriptionGroupWrapper) -> Result<(), String> {
    for (key, config) in &table.subscription_group_table {
        let why = if *key != config.group_name {
            Some(format!("holds the groupName {:?}", config.group_name))
        } else {
            check_config(config).err().map(|why| why.to_string())
        };
        if let Some(why) = why {
            return Err(format!("entry {key:?}: {why}"));
        }
    }
    Ok(())
}

/// Why a group was not auto-created.
pub const TABLE_FULL: &str = "maxSubscriptionGroups";

impl SubscriptionGroups {
    /// `<store dir>/config/subscriptionGroup.json`.
    pub fn file_path(store_dir: &Path) -> PathBuf {
        store_dir.join("config").join("subscriptionGroup.json")
    }

    /// Loads the table from the real filesystem; a missing file is an empty table.
    pub fn load(store_dir: &Path, auto_create: bool) -> anyhow::Result<SubscriptionGroups> {
        SubscriptionGroups::load_from(Arc::new(RealFiles), store_dir, auto_create)
    }

    /// [`SubscriptionGroups::load`] through `files`, which the table also writes through.
    pub fn load_from(
        files: Arc<dyn MetaFiles>,
        store_dir: &Path,
        auto_create: bool,
    ) -> anyhow::Result<SubscriptionGroups> {
        let path = SubscriptionGroups::file_path(store_dir);
        let state = match files.read_file(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<SubscriptionGroupWrapper>(&bytes).map_err(|error| {
                    anyhow::anyhow!(
                        "the subscription group table {} is corrupt: {error}; fix or remove it",
                        path.display()
                    )
                })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                SubscriptionGroupWrapper::default()
            }
            Err(error) => anyhow::bail!(
                "cannot read the subscription group table {}: {error}",
                path.display()
            ),
        };
        if let Err(why) = check_entries(&state) {
            anyhow::bail!(
                "the subscription group table {} has a bad {why}; fix or remove it",
                path.display()
            );
        }
        let mut state = state;
        for group in SYSTEM_GROUPS {
            // Known from the start, as Java's, so tools that pull as them create nothing;
            // written with the next change.
            state
                .subscription_group_table
                .entry(group.to_string())
                .or_insert_with(|| SubscriptionGroupConfig::new(group));
        }
        Ok(SubscriptionGroups {
            auto_create: std::sync::atomic::AtomicBool::new(auto_create),
            table: PersistedTable::new(files, path, state, encode),
        })
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        self.table.path()
    }

    pub fn auto_create(&self) -> bool {
        self.auto_create.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes the flag for every later lookup (UPDATE_BROKER_CONFIG).
    pub fn set_auto_create(&self, enabled: bool) {
        self.auto_create
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.table
            .read(|table| table.subscription_group_table.get(group).cloned())
    }

    /// Groups in the table.
    pub fn len(&self) -> usize {
        self.table
            .read(|table| table.subscription_group_table.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `group`'s config, created with the defaults when auto-creation allows and the
    /// table holds fewer than `max_groups`; else SUBSCRIPTION_GROUP_NOT_EXIST (code and
    /// remark; past the bound the remark names [`TABLE_FULL`]). A created group is in the
    /// file after the next background write (see the module doc).
    pub fn find_or_create(
        &self,
        group: &str,
        now_ms: i64,
        max_groups: usize,
    ) -> Result<SubscriptionGroupConfig, (i32, String)> {
        use crate::remoting::codes::response;
        if let Some(config) = self.get(group) {
            return Ok(config);
        }
        let missing = format!("subscription group [{group}] does not exist");
        if !self.auto_create() {
            return Err((response::SUBSCRIPTION_GROUP_NOT_EXIST, missing));
        }
        match self.create_if_absent(SubscriptionGroupConfig::new(group), now_ms, max_groups) {
            Ok(_) => Ok(self
                .get(group)
                .unwrap_or_else(|| SubscriptionGroupConfig::new(group))),
            Err(held) => Err((
                response::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!(
                    "{missing} and is not created: the node holds {held} subscription groups, at most {max_groups} ({TABLE_FULL})"
                ),
            )),
        }
    }

    /// Whether a pull of `group` may go on: `Ok` with its config, created with the
    /// defaults when auto-creation allows (up to `max_groups` in the table); `Err` with a
    /// response code and remark.
    pub fn for_consumption(
        &self,
        group: &str,
        now_ms: i64,
        max_groups: usize,
    ) -> Result<SubscriptionGroupConfig, (i32, String)> {
        use crate::remoting::codes::response;
        let config = self.find_or_create(group, now_ms, max_groups)?;
        if !config.consume_enable {
            return Err((
                response::NO_PERMISSION,
                format!("subscription group no permission, {group}"),
            ));
        }
        Ok(config)
    }

    /// Every group, by name.
    pub fn all(&self) -> Vec<SubscriptionGroupConfig> {
        self.table
            .read(|table| table.subscription_group_table.values().cloned().collect())
    }

    /// The table as the file holds it (once the pending write, if any, lands).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&*self.table.snapshot())
            .expect("the subscription group table serialises")
    }

    /// Auto-creation: creates `config`'s group unless it exists (another shard may have
    /// just created it) or the table holds `max_groups` already (`Err` with the count).
    /// Never waits for the disk: the write is queued ([`Self::schedule_write`]). True if it
    /// was created.
    pub fn create_if_absent(
        &self,
        config: SubscriptionGroupConfig,
        now_ms: i64,
        max_groups: usize,
    ) -> Result<bool, usize> {
        let mut full = None;
        let created = self.change(now_ms, |table| {
            let groups = &table.subscription_group_table;
            if groups.contains_key(&config.group_name) {
                return false;
            }
            if groups.len() >= max_groups {
                full = Some(groups.len());
                return false;
            }
            let name = config.group_name.clone();
            table.subscription_group_table.insert(name, config);
            true
        });
        if let Some(held) = full {
            return Err(held);
        }
        if created.is_some() {
            self.table.schedule_write();
        }
        Ok(created.is_some())
    }

    /// Creates `config`'s group unless it exists, and writes the table before returning
    /// (on the calling thread: for tools and tests, never a shard's reactor); true if it
    /// was created.
    pub fn put_if_absent(
        &self,
        config: SubscriptionGroupConfig,
        now_ms: i64,
    ) -> Result<bool, WriteFailed> {
        let created = self
            .create_if_absent(config, now_ms, usize::MAX)
            .unwrap_or(false);
        self.table.flush()?;
        Ok(created)
    }

    /// Creates or replaces a group and writes the table before returning (on the calling
    /// thread: for tools and tests; the admin request uses [`Self::put_durable`]).
    pub fn put(&self, config: SubscriptionGroupConfig, now_ms: i64) -> Result<(), WriteFailed> {
        self.change(now_ms, |table| {
            let name = config.group_name.clone();
            table.subscription_group_table.insert(name, config);
            true
        });
        self.table.flush().map(drop)
    }

    /// Removes a group and writes the table before returning (on the calling thread);
    /// `false` if there was no such group.
    pub fn remove(&self, group: &str, now_ms: i64) -> Result<bool, WriteFailed> {
        let removed = self
            .change(now_ms, |table| {
                table.subscription_group_table.remove(group).is_some()
            })
            .is_some();
        self.table.flush()?;
        Ok(removed)
    }

    /// [`Self::put`] for a shard's reactor: the write runs on tokio's blocking pool, and
    /// this returns once the file holds the change (or the write that should have taken
    /// it failed, naming why).
    pub async fn put_durable(
        &self,
        config: SubscriptionGroupConfig,
        now_ms: i64,
    ) -> Result<(), WriteFailed> {
        let version = self.change(now_ms, |table| {
            let name = config.group_name.clone();
            table.subscription_group_table.insert(name, config);
            true
        });
        self.table.durable(version).await
    }

    /// [`Self::remove`] for a shard's reactor, as [`Self::put_durable`]; `false` if there
    /// was no such group.
    pub async fn remove_durable(&self, group: &str, now_ms: i64) -> Result<bool, WriteFailed> {
        let version = self.change(now_ms, |table| {
            table.subscription_group_table.remove(group).is_some()
        });
        self.table.durable(version).await?;
        Ok(version.is_some())
    }

    /// A slave takes its master's whole table (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body,
    /// checked as the file is) when its data version differs from this one's, memory
    /// first with the write queued ([`super::mirror`]). True if the table changed.
    pub fn mirror(&self, body: &[u8]) -> Result<bool, MirrorError> {
        let master: SubscriptionGroupWrapper = serde_json::from_slice(body)
            .map_err(|error| MirrorError::invalid("subscription group table", error))?;
        check_entries(&master)
            .map_err(|why| MirrorError::invalid("subscription group table", why))?;
        let changed = self.table.change(|table| {
            if table.data_version == master.data_version {
                return false;
            }
            *table = master;
            true
        });
        if changed.is_some() {
            self.table.schedule_write();
        }
        Ok(changed.is_some())
    }

    /// Queues a write if the file is behind the table (after a failed write); the node's
    /// periodic table flush calls it.
    pub fn write_if_behind(&self) {
        self.table.write_if_behind();
    }

    /// Writes the table now if the file is behind it, on the calling thread (a clean stop).
    pub fn flush(&self) -> Result<(), WriteFailed> {
        self.table.flush().map(drop)
    }

    /// Applies `edit` to the table in place; if it changed something (`edit` returns
    /// true), bumps the data version and returns the change's number. Readers see it at
    /// once; the file follows (the caller writes or queues the write).
    fn change(
        &self,
        now_ms: i64,
        edit: impl FnOnce(&mut SubscriptionGroupWrapper) -> bool,
    ) -> Option<u64> {
        self.table.change(|table| {
            if !edit(table) {
                return false;
            }
            table.data_version.counter += 1;
            table.data_version.timestamp = now_ms;
            true
        })
    }
}

/// The file's bytes: the table in RocketMQ's shape.
fn encode(table: &SubscriptionGroupWrapper) -> Vec<u8> {
    serde_json::to_vec_pretty(table).expect("the subscription group table serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::meta::test_files::RecordingFiles;

    #[test]
    fn a_change_survives_a_reload_with_the_fields_the_node_does_not_know() {
        let dir = tempfile::tempdir().unwrap();
        let table = SubscriptionGroups::load(dir.path(), true).unwrap();
        let mut config: SubscriptionGroupConfig = serde_json::from_str(
            r#"{"groupName":"g","retryMaxTimes":3,"groupRetryPolicy":{"type":"CUSTOMIZED"}}"#,
        )
        .unwrap();
        assert!(config.consume_enable, "defaults fill what is absent");
        assert_eq!(config.retry_queue_nums, 1);
        table.put(config.clone(), 1000).unwrap();
        assert!(table
            .put_if_absent(SubscriptionGroupConfig::new("h"), 2000)
            .unwrap());
        assert!(!table
            .put_if_absent(SubscriptionGroupConfig::new("h"), 3000)
            .unwrap());
        assert!(table.remove("h", 4000).unwrap());
        assert!(!table.remove("h", 4000).unwrap());

        let reloaded = SubscriptionGroups::load(dir.path(), true).unwrap();
        assert_eq!(reloaded.get("g"), Some(config.clone()));
        let text = std::fs::read_to_string(SubscriptionGroups::file_path(dir.path())).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["dataVersion"]["counter"], 3);
        assert_eq!(
            value["subscriptionGroupTable"]["g"]["groupRetryPolicy"]["type"],
            "CUSTOMIZED"
        );
        config.retry_max_times = MAX_RETRY_TIMES + 1;
        assert!(check_config(&config)
            .unwrap_err()
            .to_string()
            .contains("retryMaxTimes"));
    }

    #[test]
    fn consumption_needs_an_enabled_group_that_exists_or_may_be_created() {
        use crate::remoting::codes::response;
        let dir = tempfile::tempdir().unwrap();
        let strict = SubscriptionGroups::load(dir.path(), false).unwrap();
        let (code, remark) = strict.for_consumption("g", 1, 100).unwrap_err();
        assert_eq!(code, response::SUBSCRIPTION_GROUP_NOT_EXIST, "{remark}");
        let mut off = SubscriptionGroupConfig::new("g");
        off.consume_enable = false;
        strict.put(off, 2).unwrap();
        let (code, _) = strict.for_consumption("g", 3, 100).unwrap_err();
        assert_eq!(code, response::NO_PERMISSION);

        let auto = SubscriptionGroups::load(tempfile::tempdir().unwrap().path(), true).unwrap();
        assert_eq!(
            auto.for_consumption("new", 1, 100).unwrap().retry_max_times,
            16
        );
        assert!(auto.get("new").is_some(), "created on first use");
    }

    #[test]
    fn auto_creation_stops_at_the_bound_and_explicit_creation_does_not() {
        use crate::remoting::codes::response;
        let dir = tempfile::tempdir().unwrap();
        let table = SubscriptionGroups::load(dir.path(), true).unwrap();
        // TOOLS_CONSUMER is one of the three.
        assert_eq!(table.len(), 1);
        table.find_or_create("a", 1, 3).unwrap();
        table.find_or_create("b", 2, 3).unwrap();
        let (code, remark) = table.find_or_create("c", 3, 3).unwrap_err();
        assert_eq!(code, response::SUBSCRIPTION_GROUP_NOT_EXIST, "{remark}");
        assert!(remark.contains("maxSubscriptionGroups"), "{remark}");
        assert_eq!(
            table.create_if_absent(SubscriptionGroupConfig::new("c"), 4, 3),
            Err(3)
        );
        // Groups that exist are found at the bound; an admin creation is not bounded.
        table.find_or_create("a", 5, 3).unwrap();
        table.put(SubscriptionGroupConfig::new("d"), 6).unwrap();
        assert_eq!(table.len(), 4);
        // Outside a runtime the writes were made at once: the file holds all of them.
        let reloaded = SubscriptionGroups::load(dir.path(), true).unwrap();
        assert_eq!(reloaded.len(), 4);
    }

    #[test]
    fn auto_created_groups_are_written_off_the_reactor_many_to_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(RecordingFiles::slow(std::time::Duration::from_millis(20)));
        let table = SubscriptionGroups::load_from(files.clone(), dir.path(), true).unwrap();
        let path = dir.path().to_owned();
        std::thread::Builder::new()
            .name("reactor".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let began = std::time::Instant::now();
                    for n in 0..500 {
                        table
                            .create_if_absent(
                                SubscriptionGroupConfig::new(&format!("g{n}")),
                                n,
                                10_000,
                            )
                            .unwrap();
                    }
                    // One 20 ms fsync each would take 10 s.
                    let took = began.elapsed();
                    assert!(
                        took < std::time::Duration::from_millis(200),
                        "500 creations took {took:?}"
                    );
                    // An admin change is answered once a write holds it and all before it.
                    table
                        .put_durable(SubscriptionGroupConfig::new("admin"), 600)
                        .await
                        .unwrap();
                });
            })
            .unwrap()
            .join()
            .unwrap();
        let writes = files.writes();
        assert!(writes < 50, "{writes} writes for 501 changes");
        assert!(
            !files
                .names()
                .iter()
                .any(|name| name.as_deref() == Some("reactor")),
            "a write ran on the reactor"
        );
        let reloaded = SubscriptionGroups::load(&path, true).unwrap();
        assert_eq!(reloaded.len(), 502, "TOOLS_CONSUMER, 500 created, admin");
        let text = std::fs::read_to_string(SubscriptionGroups::file_path(&path)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["dataVersion"]["counter"], 501);
    }

    #[test]
    fn a_bad_entry_stops_the_load_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = SubscriptionGroups::file_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for (text, expected) in [
            (
                r#"{"subscriptionGroupTable":{"g":{"groupName":"h"}}}"#,
                "groupName",
            ),
            (
                r#"{"subscriptionGroupTable":{"g":{"groupName":"g","retryQueueNums":0}}}"#,
                "retryQueueNums",
            ),
            (r#"{"subscriptionGroupTable":"#, "corrupt"),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = SubscriptionGroups::load(dir.path(), true)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.contains("subscriptionGroup.json"), "{error}");
        }
    }
}
