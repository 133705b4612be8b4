//! Request builders: the remoting commands a producer, a consumer or a tool sends, built
//! the way the Java client fills them (header field names, the default properties), and
//! the `PullSysFlag` bits. Pure: no I/O. The in-project client, the load generator and the
//! tests send what these build; the broker reads the same bits from a pull's `sysFlag`.

use std::time::Duration;

use bytes::Bytes;
use compact_str::{CompactString, ToCompactString};

use crate::remoting::codes::request as codes;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::properties;

/// `PullSysFlag` bits.
pub const FLAG_COMMIT_OFFSET: i32 = 0x1;
pub const FLAG_SUSPEND: i32 = 0x2;
pub const FLAG_SUBSCRIPTION: i32 = 0x4;
pub const FLAG_CLASS_FILTER: i32 = 0x8;
pub const FLAG_LITE_PULL: i32 = 0x10;

/// The common fields of the send headers, as a Java producer fills them.
fn send_properties(tags: Option<&str>, keys: Option<&str>) -> String {
    let pairs = [
        tags.map(|tags| (properties::TAGS, tags)),
        keys.map(|keys| (properties::KEYS, keys)),
        Some((properties::WAIT, "true")),
    ];
    properties::encode(pairs.into_iter().flatten())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// The send header's field names in SEND_MESSAGE (10) spelling, in the order
/// [`send_request`] lists their values.
const SEND_NAMES_V1: [&str; 12] = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
];

/// The same fields under SEND_MESSAGE_V2's single letters (`l`, maxReconsumeTimes, is
/// not sent).
const SEND_NAMES_V2: [&str; 12] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"];

/// A send request with `names` (one of the tables above) for its header fields, so both
/// spellings carry the same values and each is built once.
fn send_request(
    code: i32,
    names: &[&'static str; 12],
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    let values = [
        CompactString::const_new("ringmq-producer"),
        CompactString::from(topic),
        CompactString::const_new("TBW102"),
        CompactString::const_new("4"),
        queue_id.to_compact_string(),
        CompactString::const_new("0"),
        now_ms().to_compact_string(),
        CompactString::const_new("0"),
        CompactString::from(send_properties(tags, keys)),
        CompactString::const_new("0"),
        CompactString::const_new("false"),
        CompactString::const_new("false"),
    ];
    let fields: ExtFields = names.iter().copied().zip(values).collect();
    RemotingCommand::request(code, fields).with_body(Bytes::copy_from_slice(body))
}

/// SEND_MESSAGE (10) with the long header names.
pub fn send_request_v1(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    send_request(
        codes::SEND_MESSAGE,
        &SEND_NAMES_V1,
        topic,
        queue_id,
        body,
        tags,
        keys,
    )
}

/// SEND_MESSAGE_V2 (310) with the single-letter header names, as Java producers send.
pub fn send_request_v2(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RemotingCommand {
    send_request(
        codes::SEND_MESSAGE_V2,
        &SEND_NAMES_V2,
        topic,
        queue_id,
        body,
        tags,
        keys,
    )
}

/// PULL_MESSAGE (11). `suspend_timeout` sets the suspend bit (long polling); `subscription`
/// (a tag expression) sets the subscription bit.
pub fn pull_request(
    topic: &str,
    queue_id: i32,
    offset: u64,
    max: i32,
    suspend_timeout: Option<Duration>,
    subscription: Option<&str>,
) -> RemotingCommand {
    let mut sys_flag = 0;
    if suspend_timeout.is_some() {
        sys_flag |= FLAG_SUSPEND;
    }
    if subscription.is_some() {
        sys_flag |= FLAG_SUBSCRIPTION;
    }
    let mut fields = ExtFields::with_capacity(11);
    fields.insert("consumerGroup".into(), "ringmq-consumer");
    fields.insert("topic".into(), topic);
    fields.insert("queueId".into(), queue_id.to_compact_string());
    fields.insert("queueOffset".into(), offset.to_compact_string());
    fields.insert("maxMsgNums".into(), max.to_compact_string());
    fields.insert("sysFlag".into(), sys_flag.to_compact_string());
    fields.insert("commitOffset".into(), "0");
    fields.insert(
        "suspendTimeoutMillis".into(),
        suspend_timeout
            .map_or(0, |timeout| timeout.as_millis())
            .to_compact_string(),
    );
    fields.insert("subVersion".into(), "0");
    if let Some(subscription) = subscription {
        fields.insert("subscription".into(), subscription);
        fields.insert("expressionType".into(), "TAG");
    }
    RemotingCommand::request(codes::PULL_MESSAGE, fields)
}

/// A query naming a queue (GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME).
pub fn queue_request(code: i32, topic: &str, queue_id: i32) -> RemotingCommand {
    let fields = ExtFields::from([
        ("topic", CompactString::from(topic)),
        ("queueId", queue_id.to_compact_string()),
    ]);
    RemotingCommand::request(code, fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::SendMessageRequestHeader;

    #[test]
    fn send_requests_carry_the_same_header_under_both_spellings() {
        let v1 = send_request_v1("TopicA", 3, b"body", Some("TagA"), Some("k1"));
        let mut v2 = send_request_v2("TopicA", 3, b"body", Some("TagA"), Some("k1"));
        assert_eq!(v1.code, codes::SEND_MESSAGE);
        assert_eq!(v2.code, codes::SEND_MESSAGE_V2);
        let names: Vec<&str> = v1.ext_fields.iter().map(|(k, _)| k).collect();
        let mut expected = SEND_NAMES_V1.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(v1.opt_str("defaultTopic"), Some("TBW102"));
        assert_eq!(v1.opt_str("unitMode"), Some("false"));
        assert_eq!(v2.opt_str("b"), Some("TopicA"));
        assert_eq!(v2.opt_str("e"), Some("3"));
        assert_eq!(v2.ext_fields.len(), 12);
        assert_eq!(&v1.body[..], b"body");
        assert_eq!(v1.body, v2.body);
        // The two were built a moment apart; only their timestamps may differ.
        let born = v1.get_str("bornTimestamp").unwrap().to_owned();
        v2.ext_fields.insert("g".into(), born);
        let from_v1 = SendMessageRequestHeader::from_command(&v1).unwrap();
        let from_v2 = SendMessageRequestHeader::from_command(&v2).unwrap();
        assert_eq!(from_v1, from_v2);
        assert_eq!(
            from_v1.properties,
            "TAGS\u{1}TagA\u{2}KEYS\u{1}k1\u{2}WAIT\u{1}true\u{2}"
        );
    }
}
