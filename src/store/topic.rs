//! Topic name rules, as RocketMQ's `TopicValidator`: the characters `%|a-zA-Z0-9_-`,
//! at most 127 characters, or 255 for `%RETRY%` and `%DLQ%` topics. Names become
//! directory names under `consumequeue/`, so these rules also keep paths safe.

pub const TOPIC_MAX_LEN: usize = 127;
pub const SYSTEM_TOPIC_MAX_LEN: usize = 255;

/// What is wrong with a topic name. The text is what clients see in a refusal's remark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicNameError {
    Empty,
    BadCharacter { topic: String, bad: char },
    TooLong { len: usize, limit: usize },
}

impl std::fmt::Display for TopicNameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicNameError::Empty => write!(f, "topic is empty"),
            TopicNameError::BadCharacter { topic, bad } => write!(
                f,
                "topic '{topic}' has the character {bad:?}; allowed are %|a-zA-Z0-9_-"
            ),
            TopicNameError::TooLong { len, limit } => {
                write!(f, "topic is {len} characters; at most {limit} are allowed")
            }
        }
    }
}

impl std::error::Error for TopicNameError {}

/// For callers that report refusals as text (the broker's name checks).
impl From<TopicNameError> for String {
    fn from(error: TopicNameError) -> String {
        error.to_string()
    }
}

/// Checks a topic name; the error says what is wrong with it.
pub fn validate_topic(topic: &str) -> Result<(), TopicNameError> {
    if topic.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if let Some(bad) = topic
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-')))
    {
        return Err(TopicNameError::BadCharacter {
            topic: topic.to_string(),
            bad,
        });
    }
    let limit = if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") {
        SYSTEM_TOPIC_MAX_LEN
    } else {
        TOPIC_MAX_LEN
    };
    if topic.len() > limit {
        return Err(TopicNameError::TooLong {
            len: topic.len(),
            limit,
        });
    }
    Ok(())
}

/// RocketMQ's `TopicValidator.RMQ_SYS_SCHEDULE_TOPIC`: the topic delayed messages wait in,
/// queue `level - 1` per delay level (`crate::broker::delay`). Its ConsumeQueue entries
/// carry the delivery time (ms) where other topics carry the tag hash, as Java's
/// `CommitLog.checkMessageAndReturnSize` writes them.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// RocketMQ's `TimerMessageStore.TIMER_TOPIC`: the topic timer messages (`TIMER_*`
/// properties) wait in, one queue per shard (`crate::broker::timer`). Its ConsumeQueue
/// entries carry the due time (ms), as the schedule topic's do.
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// `MessageConst.PROPERTY_TIMER_OUT_MS`: when a timer message is due (absolute ms).
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";

/// `MessageConst.PROPERTY_TIMER_DEL_UNIQKEY`: a timer message that cancels another.
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";

/// The due time a timer record's ConsumeQueue entry carries: its `TIMER_OUT_MS`, never
/// before its store time (a clock that ran on, or a record without the property, is due
/// at once), and for a cancellation 1 ms earlier, so the timer store meets it before the
/// message it cancels (same due time, a later queue offset).
pub fn timer_due(properties: &str, store_timestamp: i64) -> i64 {
    let out = super::properties::get(properties, TIMER_OUT_MS)
        .and_then(|value| value.parse::<i64>().ok())
        .unwrap_or(i64::MIN);
    let cancels = super::properties::get(properties, TIMER_DEL_UNIQKEY).is_some();
    let due = if cancels { out.saturating_sub(1) } else { out };
    due.max(store_timestamp)
}

/// The ConsumeQueue tags code of a record of `topic` queue `queue_id` stored at
/// `store_timestamp` with `properties`: for [`SCHEDULE_TOPIC`] the delivery time, the store
/// time plus the delay of level `queue_id + 1` in `schedule_delays_ms` (a level past the
/// table gets 1 s, as Java's `computeDeliverTimestamp`); for [`TIMER_TOPIC`] the due time
/// ([`timer_due`]); for any other topic Java's
/// `String.hashCode` of `TAGS`, 0 without one.
pub fn tags_code(
    topic: &str,
    queue_id: i32,
    properties: &str,
    store_timestamp: i64,
    schedule_delays_ms: &[u64],
) -> i64 {
    if topic == SCHEDULE_TOPIC {
        let delay = usize::try_from(queue_id)
            .ok()
            .and_then(|index| schedule_delays_ms.get(index).copied())
            .unwrap_or(1000);
        return store_timestamp.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
    }
    if topic == TIMER_TOPIC {
        return timer_due(properties, store_timestamp);
    }
    super::properties::get(properties, super::properties::TAGS)
        .map(|tags| i64::from(super::properties::java_string_hash(tags)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_rocketmq_names_and_refuses_the_rest() {
        assert!(validate_topic("TopicTest").is_ok());
        assert!(validate_topic("%RETRY%group_a").is_ok());
        assert!(validate_topic(&format!("%RETRY%{}", "g".repeat(200))).is_ok());
        assert!(validate_topic(&"t".repeat(128))
            .unwrap_err()
            .to_string()
            .contains("at most 127"));
        assert!(validate_topic("a/b")
            .unwrap_err()
            .to_string()
            .contains("'/'"));
        assert!(validate_topic("..").is_err());
        assert!(validate_topic("").is_err());
    }

    #[test]
    fn a_schedule_entry_carries_its_delivery_time_and_others_the_tag_hash() {
        let delays = [1000, 5000];
        let props = "TAGS\u{1}TagA\u{2}";
        assert_eq!(tags_code(SCHEDULE_TOPIC, 0, props, 10_000, &delays), 11_000);
        assert_eq!(tags_code(SCHEDULE_TOPIC, 1, props, 10_000, &delays), 15_000);
        // A level past the table (the levels shrank): one second, as Java.
        assert_eq!(tags_code(SCHEDULE_TOPIC, 7, props, 10_000, &delays), 11_000);
        let timer = "TIMER_OUT_MS\u{1}25000\u{2}";
        assert_eq!(tags_code(TIMER_TOPIC, 0, timer, 10_000, &delays), 25_000);
        assert_eq!(tags_code(TIMER_TOPIC, 0, timer, 30_000, &delays), 30_000);
        let cancel = "TIMER_OUT_MS\u{1}25000\u{2}TIMER_DEL_UNIQKEY\u{1}T+AB\u{2}";
        assert_eq!(tags_code(TIMER_TOPIC, 0, cancel, 10_000, &delays), 24_999);
        assert_eq!(tags_code(TIMER_TOPIC, 0, "", 10_000, &delays), 10_000);
        assert_eq!(
            tags_code("Orders", 0, props, 10_000, &delays),
            i64::from(crate::store::properties::java_string_hash("TagA"))
        );
        assert_eq!(tags_code("Orders", 0, "", 10_000, &delays), 0);
    }
}
