//! CommitLog record codec (ARCHITECTURE D2): RocketMQ message format v1 byte for byte
//! (v2 for topics longer than 127 chars), big-endian, plus a whole-record CRC32C carried
//! in a reserved trailing property. Pure: no I/O.
//!
//! (The helper filling this in replaces this doc with the layout diagram.)

use std::net::SocketAddr;

use bytes::Bytes;

pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
pub const MAGIC_BLANK: i32 = 0xCBD4_3194_u32 as i32;
/// `[TOTALSIZE = rest of segment][MAGIC_BLANK]`, written at the end of a segment.
pub const BLANK_RECORD_LEN: usize = 8;
/// Key of the trailing property that carries the whole-record CRC32C.
pub const RECORD_CRC_KEY: &str = "__CRC32C#";
/// Bytes the CRC property takes: key, `\x01`, 10 decimal digits, `\x02`.
pub const RECORD_CRC_PROPERTY_LEN: usize = RECORD_CRC_KEY.len() + 1 + 10 + 1;
/// Topics longer than this (in chars) are written with the v2 magic and a 2-byte topic length.
pub const V1_TOPIC_MAX_CHARS: usize = 127;
/// Properties length is a signed 16-bit field.
pub const PROPERTIES_MAX_LEN: usize = i16::MAX as usize;

pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;

/// A message as handed to the CommitLog, before the append assigns its offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordInput {
    pub topic: String,
    pub queue_id: i32,
    pub flag: i32,
    /// Bits other than the host-family bits; the encoder sets 0x10/0x20 from the hosts.
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    /// Encoded RocketMQ properties (`key\x01value\x02` pairs), without the CRC property.
    pub properties: String,
    /// `crc32(body) & 0x7FFFFFFF`, as RocketMQ computes it; see [`body_crc`].
    pub body_crc: i32,
}

/// Why a record cannot be encoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EncodeError {
    #[error("topic is empty")]
    EmptyTopic,
    #[error("topic is {0} bytes; at most 32767 fit the v2 format")]
    TopicTooLong(usize),
    #[error("properties are {0} bytes with the CRC property; at most 32767 fit")]
    PropertiesTooLong(usize),
    #[error("body is {0} bytes; at most {1}")]
    BodyTooLong(usize, usize),
}

/// Why bytes are not a valid record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("unknown magic code {0:#010x}")]
    BadMagic(u32),
    #[error("total size {stored} does not match the {computed} bytes its fields need")]
    SizeMismatch { stored: i64, computed: i64 },
    #[error("body CRC {stored:#x} does not match computed {computed:#x}")]
    BodyCrc { stored: i32, computed: i32 },
    #[error("record CRC32C property is missing")]
    MissingRecordCrc,
    #[error("record CRC32C {stored:#x} does not match computed {computed:#x}")]
    RecordCrc { stored: u32, computed: u32 },
    #[error("{0} is not valid UTF-8")]
    BadUtf8(&'static str),
}

/// A decoded record borrowing from the buffer it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub total_size: u32,
    pub magic: i32,
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub phys_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    /// The whole properties string as stored, including the CRC property.
    pub properties: &'a str,
}

/// What is at a record position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    Record(RecordView<'a>),
    /// The end-of-segment marker; `len` is the rest of the segment including the 8 bytes.
    Blank {
        len: u32,
    },
}

/// How much of a record `decode` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Magic and size only (the dispatch hot path).
    Structure,
    /// Structure, body CRC and whole-record CRC32C (recovery, verify).
    Full,
}

/// `crc32(body) & 0x7FFFFFFF` (IEEE polynomial, as `java.util.zip.CRC32`).
pub fn body_crc(body: &[u8]) -> i32 {
    todo!("{body:?}")
}

/// The record length `input` will encode to, including the CRC property.
pub fn encoded_len(input: &RecordInput) -> Result<usize, EncodeError> {
    todo!("{input:?}")
}

/// Appends the encoded record to `out`, with the offsets and store time the append
/// assigned, and the CRC32C over everything before the CRC property.
pub fn encode_into(
    input: &RecordInput,
    queue_offset: i64,
    phys_offset: i64,
    store_timestamp: i64,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    todo!("{input:?}{queue_offset}{phys_offset}{store_timestamp}{out:?}")
}

/// Appends a blank record of `len` (>= 8) bytes' worth: only its 8-byte header is written.
pub fn encode_blank(len: u32, out: &mut Vec<u8>) {
    todo!("{len}{out:?}")
}

/// Decodes the record at the start of `buf` (which may run past it). Never panics.
pub fn decode(buf: &[u8], verify: Verify) -> Result<Decoded<'_>, DecodeError> {
    todo!("{buf:?}{verify:?}")
}
