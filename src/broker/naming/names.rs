//! The one set of rules for the topic names, group names and queue ids that requests carry
//! and the node's tables hold. Pure: no I/O, no locks.
//!
//! What this module owns:
//! - Names: a topic follows [`crate::store::topic::validate_topic`] (RocketMQ's
//!   `TopicValidator`: `^[%|a-zA-Z0-9_-]+$`, at most 127 characters, 255 for `%RETRY%` and
//!   `%DLQ%` topics); a group uses the same characters, at most [`GROUP_MAX_LEN`].
//! - Queue ids: non-negative and, for a topic the table knows, below its queue count (the
//!   larger of read and write: consumers may commit on either).
//! - Which topics a client may not send to ([`is_not_allowed_send_topic`]).
//!
//! Invariants:
//! - Every request that names a topic or a group (send, pull and its `commitOffset`,
//!   UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET, the offset queries, heartbeat, topic
//!   admin) checks it here, and every table checks its entries here when it loads, so a
//!   name the node refuses on the wire can never be stored, nor come back from a file.
//! - Neither kind of name can hold `@`, so the `topic@group` keys of
//!   `consumerOffset.json` split one way only.
//! - The send refusal applies to the wire's send path only: the node's own components
//!   (scheduler, transactions, timers) will write these topics through
//!   [`crate::store::Store::put`], which a peer cannot reach without a send request.

use std::fmt;

use crate::store::topic;

use crate::broker::tables::topics::TopicConfig;

/// Why a name or queue id is refused. Its text is the remark (or the load error) that
/// clients, tools and tests see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// A topic the store's rule refuses, with its reason.
    Topic(String),
    /// An empty group name.
    EmptyGroup,
    /// A group with a character outside `%|a-zA-Z0-9_-`.
    GroupCharacter { group: String, bad: char },
    /// A group longer than [`GROUP_MAX_LEN`].
    GroupTooLong { len: usize },
    /// A queue id below 0 or not below the topic's queue count.
    QueueOutOfRange {
        topic: String,
        queue_id: i32,
        queues: u32,
    },
    /// A `consumerOffset.json` key without `@`.
    NotAnOffsetKey,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Topic(why) => f.write_str(why),
            NameError::EmptyGroup => f.write_str("group is empty"),
            NameError::GroupCharacter { group, bad } => write!(
                f,
                "group '{group}' has the character {bad:?}; allowed are %|a-zA-Z0-9_-"
            ),
            NameError::GroupTooLong { len } => write!(
                f,
                "group is {len} characters; at most {GROUP_MAX_LEN} are allowed"
            ),
            NameError::QueueOutOfRange {
                topic,
                queue_id,
                queues,
            } => write!(
                f,
                "queueId {queue_id} is out of range: topic {topic} has {queues} queues"
            ),
            NameError::NotAnOffsetKey => f.write_str("the key is not topic@group"),
        }
    }
}

impl std::error::Error for NameError {}

/// For the callers that still report their refusals as text (config parsing, the admin
/// CLI): the same text.
impl From<NameError> for String {
    fn from(error: NameError) -> String {
        error.to_string()
    }
}

/// Longest group name (RocketMQ's `Validators.CHARACTER_MAX_LENGTH`).
pub const GROUP_MAX_LEN: usize = 255;

/// Most queues a topic may have, read or write (Java caps `defaultTopicQueueNums`
/// likewise); so no queue id of any topic reaches it.
pub const MAX_QUEUE_NUMS: u32 = 1024;

/// `MixAll.RETRY_GROUP_TOPIC_PREFIX`.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// `MixAll.DLQ_GROUP_TOPIC_PREFIX`.
pub const DLQ_PREFIX: &str = "%DLQ%";

/// The topics RocketMQ's `TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET` lists (4.x and 5.x):
/// the broker writes them itself (delay levels, transactions, self test, offset-moved
/// events), so a client's send to one is refused.
pub const NOT_ALLOWED_SEND_TOPICS: [&str; 9] = [
    "SCHEDULE_TOPIC_XXXX",
    "SCHEDULE_TOPIC_XXXX_V2",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
];

/// RocketMQ's `SYSTEM_TOPIC_PREFIX`: the timer wheel (`rmq_sys_wheel_timer`) and pop's
/// revive logs live under it. Java does not list them for clients; ringmq refuses client
/// sends to them too, because its own components are the only writers those topics have.
/// `RMQ_SYS_TRACE_TOPIC` is not refused: clients write message traces there.
pub const INTERNAL_TOPIC_PREFIX: &str = "rmq_sys_";

/// The topics RocketMQ 5's `TopicValidator.SYSTEM_TOPIC_SET` lists, plus the ones ringmq
/// refuses client sends to ([`NOT_ALLOWED_SEND_TOPICS`]): the broker owns them, so an admin
/// request may neither create, change nor delete one.
pub const SYSTEM_TOPICS: [&str; 14] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "SCHEDULE_TOPIC_XXXX_V2",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
    "rmq_sys_wheel_timer",
];

/// Whether `topic` is a system topic in the sense of RocketMQ's
/// `TopicValidator.isSystemTopic` (the set, or the `rmq_sys_` prefix, which covers the
/// timer wheel and the POP revive log): UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC refuse it.
pub fn is_reserved_topic(topic: &str) -> bool {
    SYSTEM_TOPICS.contains(&topic) || topic.starts_with(INTERNAL_TOPIC_PREFIX)
}

/// The remark RocketMQ 5's `AdminBrokerProcessor` answers (with SYSTEM_ERROR) a create,
/// update or delete of a system topic with.
pub fn reserved_topic_remark(topic: &str) -> String {
    format!("The topic[{topic}] is conflict with system topic.")
}

/// Whether a client's send to `topic` must be refused (NO_PERMISSION, as Java's
/// `TopicValidator.isNotAllowedSendTopic`).
pub fn is_not_allowed_send_topic(topic: &str) -> bool {
    NOT_ALLOWED_SEND_TOPICS.contains(&topic) || topic.starts_with(INTERNAL_TOPIC_PREFIX)
}

/// The remark Java answers a send to a refused system topic with.
pub fn not_allowed_send_remark(topic: &str) -> String {
    format!("Sending message to topic[{topic}] is forbidden.")
}

/// Checks a topic name; the error says what is wrong with it.
pub fn validate_topic(name: &str) -> Result<(), NameError> {
    topic::validate_topic(name).map_err(|error| NameError::Topic(error.to_string()))
}

/// Checks a group name: the topic characters, 1 to [`GROUP_MAX_LEN`] of them.
pub fn validate_group(group: &str) -> Result<(), NameError> {
    if group.is_empty() {
        return Err(NameError::EmptyGroup);
    }
    if let Some(bad) = group
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
    {
        return Err(NameError::GroupCharacter {
            group: group.to_owned(),
            bad,
        });
    }
    if group.len() > GROUP_MAX_LEN {
        return Err(NameError::GroupTooLong { len: group.len() });
    }
    Ok(())
}

/// Checks a queue id against the topic's configuration when the table has one (`None`
/// for a topic not created yet: then only the sign and [`MAX_QUEUE_NUMS`] bound it).
pub fn validate_queue(
    topic: &str,
    config: Option<&TopicConfig>,
    queue_id: i32,
) -> Result<(), NameError> {
    let queues = config.map_or(MAX_QUEUE_NUMS, |config| {
        config.read_queue_nums.max(config.write_queue_nums)
    });
    if queue_id < 0 || queue_id as i64 >= queues as i64 {
        return Err(NameError::QueueOutOfRange {
            topic: topic.to_owned(),
            queue_id,
            queues,
        });
    }
    Ok(())
}

/// The check for a request that names a group, a topic and one of its queues (offset
/// commits and queries, pulls): the first rule broken, in that order.
pub fn validate_group_topic_queue(
    group: &str,
    topic: &str,
    config: Option<&TopicConfig>,
    queue_id: i32,
) -> Result<(), NameError> {
    validate_group(group)?;
    validate_topic(topic)?;
    validate_queue(topic, config, queue_id)
}

/// The `consumerOffset.json` key of a (topic, group) pair.
pub fn offset_key(topic: &str, group: &str) -> String {
    assert!(
        !topic.contains('@') && !group.contains('@'),
        "an offset key would be ambiguous: topic {topic:?}, group {group:?}"
    );
    format!("{topic}@{group}")
}

/// Splits a `topic@group` key; both names must pass their rules, so exactly one `@`.
pub fn split_offset_key(key: &str) -> Result<(&str, &str), NameError> {
    let (topic, group) = key.split_once('@').ok_or(NameError::NotAnOffsetKey)?;
    validate_topic(topic)?;
    validate_group(group)?;
    Ok((topic, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_the_topic_characters_up_to_255() {
        assert!(validate_group("please_rename_unique_group_name-4|%").is_ok());
        assert!(validate_group(&"g".repeat(255)).is_ok());
        assert!(validate_group(&"g".repeat(256))
            .unwrap_err()
            .to_string()
            .contains("at most 255"));
        assert!(validate_group("").is_err());
        assert!(validate_group("a@b")
            .unwrap_err()
            .to_string()
            .contains("'@'"));
        assert!(validate_group("../x")
            .unwrap_err()
            .to_string()
            .contains("'.'"));
        assert!(validate_group("grüppe").is_err());
    }

    #[test]
    fn queue_ids_are_bounded_by_the_topic_or_the_queue_cap() {
        let mut config = TopicConfig::new("T", 4);
        config.write_queue_nums = 2;
        assert!(validate_queue("T", Some(&config), 3).is_ok());
        assert!(validate_queue("T", Some(&config), 4)
            .unwrap_err()
            .to_string()
            .contains("4 queues"));
        assert!(validate_queue("T", Some(&config), -5).is_err());
        assert!(validate_queue("T", None, 1023).is_ok());
        assert!(validate_queue("T", None, 1024).is_err());
        assert!(validate_queue("T", None, i32::MIN).is_err());
    }

    #[test]
    fn the_send_refusal_covers_the_java_set_and_the_internal_prefix_but_not_traces() {
        for topic in NOT_ALLOWED_SEND_TOPICS {
            assert!(is_not_allowed_send_topic(topic), "{topic}");
        }
        assert!(is_not_allowed_send_topic("rmq_sys_wheel_timer"));
        assert!(is_not_allowed_send_topic(
            "rmq_sys_REVIVE_LOG_DefaultCluster"
        ));
        assert!(!is_not_allowed_send_topic("RMQ_SYS_TRACE_TOPIC"));
        assert!(!is_not_allowed_send_topic("TBW102"));
        assert!(!is_not_allowed_send_topic("%RETRY%g"));
        assert!(!is_not_allowed_send_topic("SCHEDULE_TOPIC_XXXXY"));
    }

    #[test]
    fn offset_keys_split_one_way_only() {
        assert_eq!(split_offset_key("T@g"), Ok(("T", "g")));
        assert_eq!(split_offset_key("%RETRY%g@g"), Ok(("%RETRY%g", "g")));
        assert_eq!(offset_key("T", "g"), "T@g");
        assert!(split_offset_key("abuse@topic@grp")
            .unwrap_err()
            .to_string()
            .contains("'@'"));
        assert!(split_offset_key("nogroup").is_err());
        assert!(split_offset_key("@g").is_err());
        assert!(split_offset_key("T@").is_err());
        assert!(split_offset_key("../../etc/x@g").is_err());
    }

    #[test]
    #[should_panic(expected = "ambiguous")]
    fn an_ambiguous_offset_key_is_never_written() {
        offset_key("abuse@topic", "grp");
    }
}
