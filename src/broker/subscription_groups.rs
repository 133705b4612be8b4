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
//! Invariants, as the topic table's ([`super::topics`]): the file is always a whole table
//! (temp file, fsync, rename, directory fsync through the [`MetaFiles`] seam); a change is
//! visible only once it is on disk, and a failed write changes nothing; readers (every
//! pull looks its group up) never wait for a write's fsync, since a change is made on a
//! copy that is swapped in after the write; a file that
//! exists but does not parse, or holds an entry [`check_config`] refuses, stops the start
//! naming the file and the entry; `dataVersion.counter` grows by one per change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::io::meta::{replace_file, MetaFiles, RealFiles};
use crate::sync::Locked;

use super::topics::DataVersion;

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
pub fn check_config(config: &SubscriptionGroupConfig) -> Result<(), String> {
    super::names::validate_group(&config.group_name)?;
    if !(0..=MAX_RETRY_TIMES).contains(&config.retry_max_times) {
        return Err(format!(
            "retryMaxTimes {} is out of range: 0 to {MAX_RETRY_TIMES}",
            config.retry_max_times
        ));
    }
    if !(1..=MAX_RETRY_QUEUE_NUMS).contains(&config.retry_queue_nums) {
        return Err(format!(
            "retryQueueNums {} is out of range: 1 to {MAX_RETRY_QUEUE_NUMS}",
            config.retry_queue_nums
        ));
    }
    if config.consume_timeout_minute < 1 {
        return Err(format!(
            "consumeTimeoutMinute {} must be at least 1",
            config.consume_timeout_minute
        ));
    }
    Ok(())
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
    files: Arc<dyn MetaFiles>,
    path: PathBuf,
    /// `autoCreateTopicEnable` / `autoCreateSubscriptionGroup`: live (UPDATE_BROKER_CONFIG).
    auto_create: std::sync::atomic::AtomicBool,
    /// What readers see: swapped whole once a change is on disk.
    state: Locked<Arc<SubscriptionGroupWrapper>>,
    /// Held by a change from its copy of the table to its swap, so changes land (on disk
    /// and in `state`) one at a time and in order, while readers (every pull) never wait
    /// for the file's fsync.
    writer: Locked<()>,
}

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
        for (key, config) in &state.subscription_group_table {
            let why = if *key != config.group_name {
                Some(format!("holds the groupName {:?}", config.group_name))
            } else {
                check_config(config).err()
            };
            if let Some(why) = why {
                anyhow::bail!(
                    "the subscription group table {} has a bad entry {key:?}: {why}; fix or remove it",
                    path.display()
                );
            }
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
            files,
            path,
            auto_create: std::sync::atomic::AtomicBool::new(auto_create),
            state: Locked::new(Arc::new(state)),
            writer: Locked::new(()),
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

    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.state
            .lock()
            .subscription_group_table
            .get(group)
            .cloned()
    }

    /// `group`'s config, created with the defaults when auto-creation allows; else
    /// SUBSCRIPTION_GROUP_NOT_EXIST (code and remark).
    pub fn find_or_create(
        &self,
        group: &str,
        now_ms: i64,
    ) -> Result<SubscriptionGroupConfig, (i32, String)> {
        use crate::remoting::codes::response;
        if let Some(config) = self.get(group) {
            return Ok(config);
        }
        if !self.auto_create() {
            return Err((
                response::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group [{group}] does not exist"),
            ));
        }
        let config = SubscriptionGroupConfig::new(group);
        self.put_if_absent(config, now_ms).map_err(|error| {
            (
                response::SYSTEM_ERROR,
                format!("cannot create subscription group {group}: {error}"),
            )
        })?;
        Ok(self
            .get(group)
            .unwrap_or_else(|| SubscriptionGroupConfig::new(group)))
    }

    /// Whether a pull of `group` may go on: `Ok` with its config, created with the
    /// defaults when auto-creation allows; `Err` with a response code and remark.
    pub fn for_consumption(
        &self,
        group: &str,
        now_ms: i64,
    ) -> Result<SubscriptionGroupConfig, (i32, String)> {
        use crate::remoting::codes::response;
        let config = self.find_or_create(group, now_ms)?;
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
        self.state
            .lock()
            .subscription_group_table
            .values()
            .cloned()
            .collect()
    }

    /// The table as the file holds it.
    pub fn to_json(&self) -> String {
        let state = self.state.lock().clone();
        serde_json::to_string(&*state).expect("the subscription group table serialises")
    }

    /// Creates `config`'s group unless it exists (another shard may have just created it);
    /// true if it was created.
    pub fn put_if_absent(
        &self,
        config: SubscriptionGroupConfig,
        now_ms: i64,
    ) -> std::io::Result<bool> {
        self.change(now_ms, |table| {
            if table
                .subscription_group_table
                .contains_key(&config.group_name)
            {
                return false;
            }
            let name = config.group_name.clone();
            table.subscription_group_table.insert(name, config);
            true
        })
    }

    /// Creates or replaces a group and persists the table.
    pub fn put(&self, config: SubscriptionGroupConfig, now_ms: i64) -> std::io::Result<()> {
        self.change(now_ms, |table| {
            let name = config.group_name.clone();
            table.subscription_group_table.insert(name, config);
            true
        })
        .map(|_| ())
    }

    /// Removes a group and persists the table; `false` if there was no such group.
    pub fn remove(&self, group: &str, now_ms: i64) -> std::io::Result<bool> {
        self.change(now_ms, |table| {
            table.subscription_group_table.remove(group).is_some()
        })
    }

    /// Applies `edit` to a copy of the table; if it changed something (`edit` returns
    /// true), bumps the version, writes the file and only then lets readers see the copy.
    /// A failed write changes nothing. Returns whether `edit` changed something.
    fn change(
        &self,
        now_ms: i64,
        edit: impl FnOnce(&mut SubscriptionGroupWrapper) -> bool,
    ) -> std::io::Result<bool> {
        let _writer = self.writer.lock();
        let mut next = SubscriptionGroupWrapper::clone(&self.state.lock());
        if !edit(&mut next) {
            return Ok(false);
        }
        next.data_version.counter += 1;
        next.data_version.timestamp = now_ms;
        let json =
            serde_json::to_vec_pretty(&next).expect("the subscription group table serialises");
        replace_file(&*self.files, &self.path, &json)?;
        *self.state.lock() = Arc::new(next);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(check_config(&config).unwrap_err().contains("retryMaxTimes"));
    }

    #[test]
    fn consumption_needs_an_enabled_group_that_exists_or_may_be_created() {
        use crate::remoting::codes::response;
        let dir = tempfile::tempdir().unwrap();
        let strict = SubscriptionGroups::load(dir.path(), false).unwrap();
        let (code, remark) = strict.for_consumption("g", 1).unwrap_err();
        assert_eq!(code, response::SUBSCRIPTION_GROUP_NOT_EXIST, "{remark}");
        let mut off = SubscriptionGroupConfig::new("g");
        off.consume_enable = false;
        strict.put(off, 2).unwrap();
        let (code, _) = strict.for_consumption("g", 3).unwrap_err();
        assert_eq!(code, response::NO_PERMISSION);

        let auto = SubscriptionGroups::load(tempfile::tempdir().unwrap().path(), true).unwrap();
        assert_eq!(auto.for_consumption("new", 1).unwrap().retry_max_times, 16);
        assert!(auto.get("new").is_some(), "created on first use");
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
