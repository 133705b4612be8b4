//! The wire shapes of POP consumption (reference part 2 §2.2, §2.3), pure: the receipt
//! handle a client acknowledges with, the offset strings a pop response carries, the
//! BATCH_ACK body, and SET_MESSAGE_REQUEST_MODE's body. No state, no I/O.
//!
//! Invariants:
//! - [`offset_info`] writes each (mark, queue) once: both clients throw on a repeated key.
//! - [`BatchAck`] accepts the bitset as Java sends it (a base64 string of
//!   `BitSet.toByteArray()`) and as the Rust client 1.0 sends it (a JSON array of byte
//!   values); bit `i` of byte `i / 8` (little-endian) acknowledges offset `so + i`.
//! - The work of a batch ack is bounded before it is done: at most `maxBatchAckEntries`
//!   entries, `maxBatchAckBitsetBytes` of bitset in all (node keys, checked by
//!   [`crate::broker::pop::batch_ack`]), and [`MAX_POP_BATCH`] bits set per entry (what one pop
//!   can hand out, a protocol bound).

use serde::{Deserialize, Serialize};

/// `mark` of a message popped from a normal topic (ringmq redelivers from the topic's own
/// queue, so it never hands out the retry marks 1 and 2).
pub const NORMAL_TOPIC_MARK: &str = "0";
/// Most messages one POP_MESSAGE may ask for (Java answers INVALID_PARAMETER above it).
pub const MAX_POP_BATCH: i32 = 32;
/// `reviveQid` of an orderly pop in Java; ringmq refuses orderly pops.
pub const ORDERLY_REVIVE_QID: i32 = 999;

/// The fields of a receipt handle (`POP_CK`) that an acknowledgement needs:
/// `<ckStartOffset> <popTime> <invisibleTime> <reviveQid> <mark> <brokerName> <queueId>
/// <msgQueueOffset>` (the last may be missing in old handles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptHandle {
    pub start_offset: i64,
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub mark: String,
    pub broker_name: String,
    pub queue_id: i32,
    pub queue_offset: Option<i64>,
}

/// Why an `extraInfo` is not a receipt handle; the text names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandleError {
    /// Fewer than the 7 fields of a handle.
    TooFewFields { text: String, fields: usize },
    /// A numeric field that does not parse.
    NotANumber {
        text: String,
        name: &'static str,
        value: String,
    },
    /// A field beyond its type's range.
    OutOfRange {
        text: String,
        name: &'static str,
        value: i64,
    },
}

impl std::fmt::Display for HandleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandleError::TooFewFields { text, fields } => write!(
                f,
                "extraInfo {text:?} has {fields} fields; a receipt handle has at least 7"
            ),
            HandleError::NotANumber { text, name, value } => {
                write!(f, "extraInfo {text:?}: {name} {value:?} is not a number")
            }
            HandleError::OutOfRange { text, name, value } => {
                write!(f, "extraInfo {text:?}: {name} {value} is out of range")
            }
        }
    }
}

impl std::error::Error for HandleError {}

impl ReceiptHandle {
    /// Parses `extraInfo`, naming the field that is wrong.
    pub fn parse(text: &str) -> Result<ReceiptHandle, HandleError> {
        let parts: Vec<&str> = text.split(' ').collect();
        if parts.len() < 7 {
            return Err(HandleError::TooFewFields {
                text: text.to_owned(),
                fields: parts.len(),
            });
        }
        let number = |index: usize, name: &'static str| -> Result<i64, HandleError> {
            parts[index]
                .parse::<i64>()
                .map_err(|_| HandleError::NotANumber {
                    text: text.to_owned(),
                    name,
                    value: parts[index].to_owned(),
                })
        };
        let narrow = |value: i64, name: &'static str| -> Result<i32, HandleError> {
            i32::try_from(value).map_err(|_| HandleError::OutOfRange {
                text: text.to_owned(),
                name,
                value,
            })
        };
        let queue_id = number(6, "queueId")?;
        let revive_qid = number(3, "reviveQid")?;
        Ok(ReceiptHandle {
            start_offset: number(0, "ckStartOffset")?,
            pop_time: number(1, "popTime")?,
            invisible_time: number(2, "invisibleTime")?,
            revive_qid: narrow(revive_qid, "reviveQid")?,
            mark: parts[4].to_owned(),
            broker_name: parts[5].to_owned(),
            queue_id: narrow(queue_id, "queueId")?,
            queue_offset: if parts.len() > 7 {
                Some(number(7, "msgQueueOffset")?)
            } else {
                None
            },
        })
    }
}

/// `startOffsetInfo` and `msgOffsetInfo` of a pop response that served `offsets` (in
/// body order) of `queue_id`: `0 <queueId> <first>` and `0 <queueId> <o1>,<o2>,...`.
/// The start offset is the lowest served, so every offset is at or above it (a batch ack
/// sets bit `offset - start`). Empty strings when nothing was served.
pub fn offset_info(queue_id: i32, offsets: &[u64]) -> (String, String) {
    let Some(start) = offsets.iter().min() else {
        return (String::new(), String::new());
    };
    let list: Vec<String> = offsets.iter().map(u64::to_string).collect();
    (
        format!("{NORMAL_TOPIC_MARK} {queue_id} {start}"),
        format!("{NORMAL_TOPIC_MARK} {queue_id} {}", list.join(",")),
    )
}

/// BATCH_ACK_MESSAGE's body: `{"brokerName", "acks": [...]}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchAckBody {
    #[serde(default)]
    pub broker_name: Option<String>,
    #[serde(default)]
    pub acks: Vec<BatchAck>,
}

/// One entry of a batch ack: the acknowledged offsets of one pop of one queue.
#[derive(Debug, Deserialize)]
pub struct BatchAck {
    /// consumerGroup
    pub c: String,
    /// topic (the real one)
    pub t: String,
    /// retry mark: "0" normal, "1"/"2" retry topics
    #[serde(default)]
    pub r: Option<String>,
    /// ckStartOffset
    pub so: i64,
    /// queueId
    pub q: i32,
    /// reviveQid
    #[serde(default)]
    pub rq: i32,
    /// popTime
    pub pt: i64,
    /// invisibleTime
    #[serde(default)]
    pub it: i64,
    /// the bitset, either encoding
    pub b: Bitset,
}

/// A batch ack's bitset as either client sends it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Bitset {
    /// Java: base64 of `BitSet.toByteArray()`.
    Base64(String),
    /// Rust client 1.0: the bytes as numbers.
    Bytes(Vec<u8>),
}

impl Bitset {
    /// How many bytes the bitset decodes to (base64 without decoding it).
    pub fn decoded_len(&self) -> usize {
        match self {
            Bitset::Base64(text) => text.trim_end_matches('=').len() * 3 / 4,
            Bitset::Bytes(bytes) => bytes.len(),
        }
    }

    /// The set bit indexes, in order; an error past `max_set` of them (a bitset that
    /// acknowledges more than one pop hands out is not one pop's, and reading on would
    /// let a body cost the shard time in proportion to its length), or when it decodes to
    /// more than `max_bytes`.
    pub fn indexes(&self, max_set: usize, max_bytes: usize) -> Result<Vec<u64>, BitsetError> {
        let decoded;
        let bytes: &[u8] = match self {
            Bitset::Base64(text) => {
                decoded = decode_base64(text)?;
                &decoded
            }
            Bitset::Bytes(bytes) => bytes,
        };
        if bytes.len() > max_bytes {
            return Err(BitsetError::TooManyBytes {
                bytes: bytes.len(),
                max_bytes,
            });
        }
        let mut set = Vec::new();
        for (index, byte) in bytes.iter().enumerate() {
            if set.len() + byte.count_ones() as usize > max_set {
                return Err(BitsetError::TooManyBits { max_set });
            }
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    set.push(index as u64 * 8 + bit);
                }
            }
        }
        Ok(set)
    }
}

/// Why a batch ack's bitset is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BitsetError {
    /// A byte outside base64's alphabet.
    NotBase64(u8),
    /// More bytes than `maxBatchAckBitsetBytes`.
    TooManyBytes { bytes: usize, max_bytes: usize },
    /// More set bits than one pop hands out.
    TooManyBits { max_set: usize },
}

impl std::fmt::Display for BitsetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BitsetError::NotBase64(byte) => write!(f, "the bitset is not base64: byte {byte:#04x}"),
            BitsetError::TooManyBytes { bytes, max_bytes } => write!(
                f,
                "the bitset is {bytes} bytes; at most {max_bytes} (maxBatchAckBitsetBytes)"
            ),
            BitsetError::TooManyBits { max_set } => write!(
                f,
                "the bitset sets more than {max_set} bits; one pop hands out at most {MAX_POP_BATCH} messages"
            ),
        }
    }
}

impl std::error::Error for BitsetError {}

/// Standard base64 (with or without padding), as fastjson writes byte arrays.
fn decode_base64(text: &str) -> Result<Vec<u8>, BitsetError> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for ch in text.bytes() {
        let value = match ch {
            b'A'..=b'Z' => ch - b'A',
            b'a'..=b'z' => ch - b'a' + 26,
            b'0'..=b'9' => ch - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            other => return Err(BitsetError::NotBase64(other)),
        };
        buffer = (buffer << 6) | value as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// SET_MESSAGE_REQUEST_MODE's body (`SetMessageRequestModeRequestBody`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRequestMode {
    pub topic: String,
    pub consumer_group: String,
    /// "PULL" or "POP".
    #[serde(default = "pull_mode")]
    pub mode: String,
    #[serde(default = "no_share")]
    pub pop_share_queue_num: i32,
}

fn pull_mode() -> String {
    "PULL".into()
}

fn no_share() -> i32 {
    -1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_handle_parses_every_field() {
        let handle = ReceiptHandle::parse("5 1700000000000 60000 2 0 broker-a 3 7").unwrap();
        assert_eq!(
            handle,
            ReceiptHandle {
                start_offset: 5,
                pop_time: 1_700_000_000_000,
                invisible_time: 60_000,
                revive_qid: 2,
                mark: "0".into(),
                broker_name: "broker-a".into(),
                queue_id: 3,
                queue_offset: Some(7),
            }
        );
        assert_eq!(
            ReceiptHandle::parse("5 1 2 3 0 b 4").unwrap().queue_offset,
            None
        );
        let short = ReceiptHandle::parse("5 1 2").unwrap_err().to_string();
        assert!(short.contains("3 fields"), "{short}");
        let bad = ReceiptHandle::parse("5 x 2 3 0 b 4 7")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("popTime \"x\""), "{bad}");
    }

    #[test]
    fn offset_info_starts_at_the_lowest_offset_served() {
        assert_eq!(
            offset_info(3, &[9, 4, 10]),
            ("0 3 4".to_string(), "0 3 9,4,10".to_string())
        );
        assert_eq!(offset_info(1, &[]), (String::new(), String::new()));
    }

    #[test]
    fn both_bitset_encodings_give_the_same_bits() {
        // Bits 0, 2 and 9: bytes [0b101, 0b10] little-endian.
        let rust: BatchAckBody = serde_json::from_str(
            r#"{"brokerName":"b","acks":[{"c":"g","t":"T","r":"0","so":10,"q":1,"rq":0,"pt":5,"it":60000,"b":[5,2]}]}"#,
        )
        .unwrap();
        let java: BatchAckBody = serde_json::from_str(
            r#"{"brokerName":"b","acks":[{"c":"g","t":"T","r":"0","so":10,"q":1,"rq":0,"pt":5,"it":60000,"b":"BQI="}]}"#,
        )
        .unwrap();
        assert_eq!(rust.acks[0].b.indexes(32, 1024).unwrap(), vec![0, 2, 9]);
        assert_eq!(java.acks[0].b.indexes(32, 1024).unwrap(), vec![0, 2, 9]);
        // Unpadded base64 too.
        assert_eq!(
            Bitset::Base64("BQI".into()).indexes(32, 1024).unwrap(),
            vec![0, 2, 9]
        );
        assert!(Bitset::Base64("B*".into()).indexes(32, 1024).is_err());
        // One byte past the bound, with a bit in each.
        assert!(Bitset::Bytes(vec![1; 1025])
            .indexes(usize::MAX, 1024)
            .unwrap_err()
            .to_string()
            .contains("maxBatchAckBitsetBytes"));
        assert!(Bitset::Bytes(vec![1; 1024])
            .indexes(usize::MAX, 1024)
            .is_ok());
        // One bit too many for one pop.
        assert!(Bitset::Bytes(vec![0xFF; 4]).indexes(32, 1024).is_ok());
        assert!(Bitset::Bytes(vec![0xFF, 0xFF, 0xFF, 0xFF, 1])
            .indexes(32, 1024)
            .unwrap_err()
            .to_string()
            .contains("more than 32 bits"));
    }

    #[test]
    fn a_request_mode_body_takes_defaults() {
        let mode: MessageRequestMode =
            serde_json::from_str(r#"{"topic":"T","consumerGroup":"g","mode":"POP"}"#).unwrap();
        assert_eq!(mode.pop_share_queue_num, -1);
        assert_eq!(mode.mode, "POP");
    }
}
