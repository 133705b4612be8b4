//! The send request header (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and the
//! reply variants) and the batch body format (reference §9.3).
//!
//! Java clients send the same header under two sets of names: the field names of
//! `SendMessageRequestHeader` with code 10, and single letters (`SendMessageRequestHeaderV2`,
//! smaller on the wire) with codes 310 and 320, the default since `sendSmartMsg` is on.
//! Both decode into one [`SendMessageRequestHeader`], so the send path has one shape.
//!
//! ```text
//! V1 name                V2   type    required
//! producerGroup          a    string  yes
//! topic                  b    string  yes
//! defaultTopic           c    string  yes
//! defaultTopicQueueNums  d    int     yes
//! queueId                e    int     yes      (< 0: broker picks)
//! sysFlag                f    int     yes
//! bornTimestamp          g    long    yes
//! flag                   h    int     yes
//! properties             i    string  no       (absent = empty)
//! reconsumeTimes         j    int     no       (absent = 0)
//! unitMode               k    bool    no       (absent = false)
//! maxReconsumeTimes      l    int     no       (absent = use the group's)
//! batch                  m    bool    no       (absent = false)
//! bname                  n    string  no       (broker name; V2 falls back to bname)
//! ```
//!
//! Java's decoder only logs a missing required field and lets it surface later as a
//! NullPointerException; we refuse the request up front with the field's wire name.
//!
//! # Batch body (SEND_BATCH_MESSAGE), repeated until the body ends
//!
//! ```text
//! offset  size  field
//!      0     4  TOTALSIZE   i32 = 20 + B + 2 + P (this message, including the field)
//!      4     4  MAGICCODE   ignored (clients write 0)
//!      8     4  BODYCRC     ignored (the broker computes its own)
//!     12     4  FLAG        i32
//!     16     4  BODY len B  i32
//!     20     B  BODY
//!   20+B     2  PROPS len P i16
//!   22+B     P  PROPERTIES  `key\x01value\x02`... (UTF-8)
//! ```
//!
//! Java ignores TOTALSIZE when decoding; we require it to match the lengths inside, since a
//! mismatch means the body is not what the client meant to send.

use bytes::Bytes;

use super::codes::request;
use super::command::{ExtFields, FieldError, HeaderFields, RemotingCommand};

/// A decoded send request header, whichever names it arrived under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessageRequestHeader {
    pub producer_group: String,
    pub topic: String,
    /// The template topic for auto-creation (`TBW102`).
    pub default_topic: String,
    pub default_topic_queue_nums: i32,
    /// Negative: the broker picks a queue.
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    /// Encoded properties (`key\x01value\x02`...); empty when absent.
    pub properties: String,
    pub reconsume_times: i32,
    pub unit_mode: bool,
    /// `None`: the subscription group's `retryMaxTimes` applies.
    pub max_reconsume_times: Option<i32>,
    pub batch: bool,
    pub broker_name: Option<String>,
}

/// Wire names of the header fields, one set per naming scheme.
struct Names {
    producer_group: &'static str,
    topic: &'static str,
    default_topic: &'static str,
    default_topic_queue_nums: &'static str,
    queue_id: &'static str,
    sys_flag: &'static str,
    born_timestamp: &'static str,
    flag: &'static str,
    properties: &'static str,
    reconsume_times: &'static str,
    unit_mode: &'static str,
    max_reconsume_times: &'static str,
    batch: &'static str,
    broker_name: &'static str,
}

const V1: Names = Names {
    producer_group: "producerGroup",
    topic: "topic",
    default_topic: "defaultTopic",
    default_topic_queue_nums: "defaultTopicQueueNums",
    queue_id: "queueId",
    sys_flag: "sysFlag",
    born_timestamp: "bornTimestamp",
    flag: "flag",
    properties: "properties",
    reconsume_times: "reconsumeTimes",
    unit_mode: "unitMode",
    max_reconsume_times: "maxReconsumeTimes",
    batch: "batch",
    broker_name: "bname",
};

const V2: Names = Names {
    producer_group: "a",
    topic: "b",
    default_topic: "c",
    default_topic_queue_nums: "d",
    queue_id: "e",
    sys_flag: "f",
    born_timestamp: "g",
    flag: "h",
    properties: "i",
    reconsume_times: "j",
    unit_mode: "k",
    max_reconsume_times: "l",
    batch: "m",
    broker_name: "n",
};

/// Why a send request's header cannot be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SendHeaderError {
    #[error("request code {0} is not a send request")]
    NotASend(i32),
    #[error(transparent)]
    Field(#[from] FieldError),
}

impl SendMessageRequestHeader {
    /// Decodes the long-name header of SEND_MESSAGE (10) and SEND_REPLY_MESSAGE (324).
    pub fn from_v1(fields: &ExtFields) -> Result<SendMessageRequestHeader, FieldError> {
        Self::decode(fields, &V1)
    }

    /// Decodes the single-letter header of SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
    /// and SEND_REPLY_MESSAGE_V2 (325).
    pub fn from_v2(fields: &ExtFields) -> Result<SendMessageRequestHeader, FieldError> {
        // The V2 names `a`..`n` are read in key order: one pass over the sorted fields.
        let mut header = Self::decode(&fields.in_order(), &V2)?;
        if header.broker_name.is_none() {
            header.broker_name = fields.opt_str(V1.broker_name).map(str::to_owned);
        }
        Ok(header)
    }

    /// Decodes a send request's header under the names its code implies.
    pub fn from_command(
        cmd: &RemotingCommand,
    ) -> Result<SendMessageRequestHeader, SendHeaderError> {
        match cmd.code {
            request::SEND_MESSAGE | request::SEND_REPLY_MESSAGE => {
                Ok(Self::from_v1(&cmd.ext_fields)?)
            }
            request::SEND_MESSAGE_V2
            | request::SEND_BATCH_MESSAGE
            | request::SEND_REPLY_MESSAGE_V2 => Ok(Self::from_v2(&cmd.ext_fields)?),
            other => Err(SendHeaderError::NotASend(other)),
        }
    }

    fn decode(f: &impl HeaderFields, n: &Names) -> Result<SendMessageRequestHeader, FieldError> {
        Ok(SendMessageRequestHeader {
            producer_group: f.get_str(n.producer_group)?.to_owned(),
            topic: f.get_str(n.topic)?.to_owned(),
            default_topic: f.get_str(n.default_topic)?.to_owned(),
            default_topic_queue_nums: f.get_i32(n.default_topic_queue_nums)?,
            queue_id: f.get_i32(n.queue_id)?,
            sys_flag: f.get_i32(n.sys_flag)?,
            born_timestamp: f.get_i64(n.born_timestamp)?,
            flag: f.get_i32(n.flag)?,
            properties: f.opt_str(n.properties).unwrap_or("").to_owned(),
            reconsume_times: f.opt_i32(n.reconsume_times)?.unwrap_or(0),
            unit_mode: f.opt_bool(n.unit_mode)?.unwrap_or(false),
            max_reconsume_times: f.opt_i32(n.max_reconsume_times)?,
            batch: f.opt_bool(n.batch)?.unwrap_or(false),
            broker_name: f.opt_str(n.broker_name).map(str::to_owned),
        })
    }
}

/// One message of a batch body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchItem {
    pub flag: i32,
    /// A slice of the request body, not a copy.
    pub body: Bytes,
    /// Encoded properties of this message alone.
    pub properties: String,
}

/// Bytes of the fixed fields of one batch entry: TOTALSIZE, MAGICCODE, BODYCRC, FLAG,
/// body length and properties length.
pub const BATCH_ENTRY_OVERHEAD: usize = 4 + 4 + 4 + 4 + 4 + 2;

/// Why a batch body is malformed; `index` is the message, `offset` its first byte.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch body holds no messages")]
    Empty,
    #[error("message {index} at byte {offset}: {field} needs {needed} bytes, {available} left")]
    Truncated {
        index: usize,
        offset: usize,
        field: &'static str,
        needed: usize,
        available: usize,
    },
    #[error("message {index} at byte {offset}: {field} length {len} is negative")]
    NegativeLength {
        index: usize,
        offset: usize,
        field: &'static str,
        len: i32,
    },
    #[error("message {index} at byte {offset}: TOTALSIZE {stored} but its fields take {computed}")]
    SizeMismatch {
        index: usize,
        offset: usize,
        stored: i32,
        computed: usize,
    },
    #[error("message {index} at byte {offset}: properties are not valid UTF-8")]
    BadUtf8 { index: usize, offset: usize },
    #[error("message {index}: {field} is {len} bytes; at most {max} fit")]
    TooLong {
        index: usize,
        field: &'static str,
        len: usize,
        max: usize,
    },
}

/// Splits a SEND_BATCH_MESSAGE body into its messages. Never panics; an empty body is an
/// error because no client sends one and storing nothing would still look like success.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchItem>, BatchError> {
    if body.is_empty() {
        return Err(BatchError::Empty);
    }
    let mut items = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let (item, end) = decode_item(body, items.len(), pos)?;
        items.push(item);
        pos = end;
    }
    Ok(items)
}

/// Decodes message `index` of a batch body, which starts at byte `offset`; with it, where
/// the next one starts.
fn decode_item(
    body: &Bytes,
    index: usize,
    offset: usize,
) -> Result<(BatchItem, usize), BatchError> {
    let pos = offset;
    let truncated = |field, at: usize, needed| BatchError::Truncated {
        index,
        offset,
        field,
        needed,
        available: body.len() - at,
    };
    let word = |field, at: usize| -> Result<i32, BatchError> {
        body.get(at..at + 4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| truncated(field, at, 4))
    };
    let stored = word("TOTALSIZE", pos)?;
    // MAGICCODE and BODYCRC are read over, not trusted.
    word("MAGICCODE", pos + 4)?;
    word("BODYCRC", pos + 8)?;
    let flag = word("FLAG", pos + 12)?;
    let body_len = word("BODY length", pos + 16)?;
    let body_len = usize::try_from(body_len).map_err(|_| BatchError::NegativeLength {
        index,
        offset,
        field: "BODY",
        len: body_len,
    })?;
    let body_start = pos + 20;
    if body_len > body.len() - body_start {
        return Err(truncated("BODY", body_start, body_len));
    }
    let props_at = body_start + body_len;
    let props_len = body
        .get(props_at..props_at + 2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| truncated("PROPERTIES length", props_at, 2))?;
    let props_len = usize::try_from(props_len).map_err(|_| BatchError::NegativeLength {
        index,
        offset,
        field: "PROPERTIES",
        len: props_len.into(),
    })?;
    let props_start = props_at + 2;
    if props_len > body.len() - props_start {
        return Err(truncated("PROPERTIES", props_start, props_len));
    }
    let end = props_start + props_len;
    let computed = end - pos;
    if usize::try_from(stored) != Ok(computed) {
        return Err(BatchError::SizeMismatch {
            index,
            offset,
            stored,
            computed,
        });
    }
    let properties = std::str::from_utf8(&body[props_start..end])
        .map_err(|_| BatchError::BadUtf8 { index, offset })?
        .to_owned();
    let item = BatchItem {
        flag,
        body: body.slice(body_start..props_at),
        properties,
    };
    Ok((item, end))
}

/// Appends `items` in the batch body format, as a Java client's
/// `MessageDecoder.encodeMessages` would (MAGICCODE and BODYCRC 0). Appends nothing on
/// error.
pub fn encode_batch(items: &[BatchItem], out: &mut Vec<u8>) -> Result<(), BatchError> {
    let mut total = 0usize;
    for (index, item) in items.iter().enumerate() {
        let too_long = |field, len, max: usize| BatchError::TooLong {
            index,
            field,
            len,
            max,
        };
        if item.properties.len() > i16::MAX as usize {
            return Err(too_long(
                "properties",
                item.properties.len(),
                i16::MAX as usize,
            ));
        }
        let size = BATCH_ENTRY_OVERHEAD + item.body.len() + item.properties.len();
        if size > i32::MAX as usize {
            return Err(too_long("message", size, i32::MAX as usize));
        }
        total += size;
    }
    out.reserve(total);
    for item in items {
        let size = BATCH_ENTRY_OVERHEAD + item.body.len() + item.properties.len();
        out.extend_from_slice(&(size as i32).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&item.flag.to_be_bytes());
        out.extend_from_slice(&(item.body.len() as i32).to_be_bytes());
        out.extend_from_slice(&item.body);
        out.extend_from_slice(&(item.properties.len() as i16).to_be_bytes());
        out.extend_from_slice(item.properties.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn optional_fields_default() {
        let f = fields(&[
            ("a", "pg"),
            ("b", "T"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "-1"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("bname", "broker-a"),
        ]);
        let h = SendMessageRequestHeader::from_v2(&f).unwrap();
        assert_eq!(h.queue_id, -1);
        assert_eq!(h.properties, "");
        assert_eq!(h.reconsume_times, 0);
        assert!(!h.unit_mode && !h.batch);
        assert_eq!(h.max_reconsume_times, None);
        assert_eq!(h.broker_name.as_deref(), Some("broker-a"));
    }

    #[test]
    fn not_a_send_code() {
        let cmd = RemotingCommand::request(request::PULL_MESSAGE, ExtFields::new());
        assert_eq!(
            SendMessageRequestHeader::from_command(&cmd),
            Err(SendHeaderError::NotASend(11))
        );
    }

    #[test]
    fn batch_round_trip_shares_the_body() {
        let items = vec![
            BatchItem {
                flag: 1,
                body: Bytes::from_static(b"one"),
                properties: "UNIQ_KEY\u{1}A\u{2}".into(),
            },
            BatchItem {
                flag: 0,
                body: Bytes::new(),
                properties: String::new(),
            },
        ];
        let mut out = Vec::new();
        encode_batch(&items, &mut out).unwrap();
        let body = Bytes::from(out);
        let back = decode_batch(&body).unwrap();
        assert_eq!(back, items);
        assert_eq!(
            back[0].body.as_ptr(),
            body[20..].as_ptr(),
            "zero-copy slice"
        );
    }
}
