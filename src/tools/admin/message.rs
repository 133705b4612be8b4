//! Messages found by the query commands: the stored records of a QUERY_MESSAGE,
//! VIEW_MESSAGE_BY_ID or PULL_MESSAGE body, decoded with the store's own record codec and
//! described by the fields an operator looks for.

use serde::Serialize;

use super::error::AdminError;
use crate::broker::naming::ids::offset_msg_id;
use crate::store::properties;
use crate::store::record::{decode, DecodeError, Decoded, Verify, RECORD_CRC_KEY};

/// Bytes of body text shown in human output before it is cut.
pub const BODY_PREVIEW: usize = 200;

/// One stored message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub keys: Option<String>,
    pub tags: Option<String>,
    pub uniq_key: Option<String>,
    pub offset_msg_id: String,
    pub born_timestamp: i64,
    pub store_timestamp: i64,
    pub born_host: String,
    pub store_host: String,
    pub reconsume_times: i32,
    pub body_size: usize,
    /// The body when it is UTF-8, whole (human output shortens it).
    pub body: Option<String>,
    /// The user and system properties, without ringmq's record CRC.
    pub properties: Vec<(String, String)>,
}

impl Message {
    /// Whether KEYS holds `key` as one of its space-separated entries.
    pub fn has_key(&self, key: &str) -> bool {
        self.keys
            .as_deref()
            .is_some_and(|keys| keys.split(' ').any(|k| k == key))
    }
}

/// Why a body of records could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    /// A blank (end-of-segment) record, which no answer carries.
    #[error("a blank record in a message body")]
    Blank,
    #[error("a record in the answer is unreadable: {0}")]
    Unreadable(#[source] DecodeError),
}

/// A body of records the node sent that cannot be read is the node's error (exit 3).
impl From<RecordsError> for AdminError {
    fn from(error: RecordsError) -> Self {
        AdminError::Node(error.to_string())
    }
}

/// The records of a body, in order. Only structure is checked: records from a Java broker
/// carry no record CRC to verify.
pub fn decode_records(body: &[u8]) -> Result<Vec<Message>, RecordsError> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        match decode(rest, Verify::Structure) {
            Ok(Decoded::Record(view)) => {
                let pairs: Vec<(String, String)> = properties::parse(view.properties)
                    .into_iter()
                    .filter(|(key, _)| format!("{key}#") != RECORD_CRC_KEY)
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                let get = |name: &str| {
                    pairs
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                };
                out.push(Message {
                    topic: view.topic.to_owned(),
                    queue_id: view.queue_id,
                    queue_offset: view.queue_offset,
                    commit_log_offset: view.phys_offset,
                    keys: get(properties::KEYS),
                    tags: get(properties::TAGS),
                    uniq_key: get(properties::UNIQ_KEY),
                    offset_msg_id: offset_msg_id(view.store_host, view.phys_offset as u64),
                    born_timestamp: view.born_timestamp,
                    store_timestamp: view.store_timestamp,
                    born_host: view.born_host.to_string(),
                    store_host: view.store_host.to_string(),
                    reconsume_times: view.reconsume_times,
                    body_size: view.body.len(),
                    body: std::str::from_utf8(view.body).ok().map(str::to_owned),
                    properties: pairs,
                });
                rest = &rest[view.total_size as usize..];
            }
            Ok(Decoded::Blank { .. }) => return Err(RecordsError::Blank),
            Err(error) => return Err(RecordsError::Unreadable(error)),
        }
    }
    Ok(out)
}

/// `text` cut to at most `max` bytes at a character boundary, with `...` when cut.
pub fn preview(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Whether `id` has the shape of a UNIQ_KEY or offsetMsgId: 32 or 56 hex digits.
pub fn is_message_id_shape(id: &str) -> bool {
    matches!(id.len(), 32 | 56) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{body_crc, encode_into, RecordInput};
    use std::net::SocketAddr;

    fn record(body: &[u8], props: &str) -> Vec<u8> {
        let input = RecordInput {
            topic: "T".into(),
            queue_id: 2,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: body_crc(body),
            body: bytes::Bytes::copy_from_slice(body),
            properties: props.into(),
        };
        let mut out = Vec::new();
        encode_into(&input, 5, 4096, 1_700_000_000_500, &mut out).unwrap();
        out
    }

    #[test]
    fn records_decode_to_messages() {
        let props = properties::encode([
            (properties::KEYS, "k1 k2"),
            (properties::TAGS, "TagA"),
            (properties::UNIQ_KEY, "0A0000070001000000000000000000AA"),
        ]);
        let mut body = record(b"hello", &props);
        body.extend(record(&[0xff, 0xfe], ""));
        let messages = decode_records(&body).unwrap();
        assert_eq!(messages.len(), 2);
        let first = &messages[0];
        assert_eq!(first.topic, "T");
        assert_eq!(first.queue_id, 2);
        assert_eq!(first.queue_offset, 5);
        assert_eq!(first.commit_log_offset, 4096);
        assert_eq!(first.offset_msg_id, "7F00000100002A9F0000000000001000");
        assert!(first.has_key("k2") && !first.has_key("k"));
        assert_eq!(first.tags.as_deref(), Some("TagA"));
        assert_eq!(first.body.as_deref(), Some("hello"));
        assert_eq!(first.store_timestamp, 1_700_000_000_500);
        assert_eq!(messages[1].body, None, "not UTF-8");
        assert_eq!(messages[1].body_size, 2);
        assert!(decode_records(&body[..body.len() - 3]).is_err());
    }

    #[test]
    fn previews_cut_at_a_character() {
        assert_eq!(preview("short", 10), "short");
        assert_eq!(preview("abcdef", 3), "abc...");
        assert_eq!(preview("ééé", 3), "é...");
    }

    #[test]
    fn id_shapes() {
        assert!(is_message_id_shape("7F00000100002A9F0000000000001000"));
        assert!(is_message_id_shape(&"a".repeat(56)));
        assert!(!is_message_id_shape("7F00000100002A9F000000000000100"));
        assert!(!is_message_id_shape("7F00000100002A9F000000000000100G"));
    }
}
