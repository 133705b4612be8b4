//! CommitLog record codec (D2): RocketMQ message format v1 byte for byte
//! (v2 for long topics), big-endian, plus a whole-record CRC32C carried in a reserved
//! trailing property. Pure: no I/O, no allocation on decode.
//!
//! This module owns the byte layout of one CommitLog record and of the end-of-segment
//! blank marker. Everything that reads or writes records (append, dispatch, recovery,
//! pull) goes through [`encode_into`] and [`decode`], so a Java RocketMQ tool reading our
//! segments sees ordinary v1 records whose properties carry one extra key.
//!
//! # Layout (magic v1, IPv4 born host, IPv4 store host)
//!
//! ```text
//! offset  size  field
//!      0     4  TOTALSIZE            i32, whole record including this field
//!      4     4  MAGICCODE            DA A3 20 A7 (v1) | DA A3 20 AB (v2)
//!      8     4  BODYCRC              crc32(body) & 0x7FFFFFFF
//!     12     4  QUEUEID
//!     16     4  FLAG
//!     20     8  QUEUEOFFSET          assigned at append
//!     28     8  PHYSICALOFFSET       assigned at append
//!     36     4  SYSFLAG              0x10 born host v6, 0x20 store host v6
//!     40     8  BORNTIMESTAMP
//!     48     8  BORNHOST             4 addr + i32 port   (v6: 16 + 4, later fields +12)
//!     56     8  STORETIMESTAMP       assigned at append
//!     64     8  STOREHOST            4 addr + i32 port   (v6: 16 + 4, later fields +12)
//!     72     4  RECONSUMETIMES
//!     76     8  PREPARED_TX_OFFSET
//!     84     4  BODY length B
//!     88     B  BODY
//!   88+B     1  TOPIC length T       (v2: i16, every later field +1)
//!   89+B     T  TOPIC                UTF-8
//! 89+B+T     2  PROPERTIES length P  i16, includes the CRC pair
//! 91+B+T     P  PROPERTIES           user pairs `k\x01v\x02`..., then the CRC pair:
//!
//!               +-----------+----+------------+----+
//!               | __CRC32C# | 01 | dddddddddd | 02 |   21 bytes, last in the record
//!               +-----------+----+------------+----+
//!                 9 bytes          10 ASCII digits, most significant first
//!
//! total = 91 + B + T + P
//! ```
//!
//! The digits are the CRC32C (Castagnoli) of bytes `[0, TOTALSIZE - 21)`: every byte of
//! the record before the CRC pair, taken after QUEUEOFFSET, PHYSICALOFFSET and
//! STORETIMESTAMP are filled in. The body CRC alone (RocketMQ's own check) misses damage
//! to the header, topic and properties; the CRC32C catches it, and keeping it in a
//! property rather than a new field leaves the record readable by stock RocketMQ.
//!
//! # Invariants
//!
//! - `encoded_len(input)` is exactly the number of bytes `encode_into` appends, and
//!   `encode_into` appends nothing when it fails.
//! - The host-family SYSFLAG bits always agree with the stored host widths: the encoder
//!   derives them from the addresses (IPv4-mapped IPv6 is written as IPv4) and ignores
//!   those bits of `RecordInput::sys_flag`.
//! - v2 is used exactly when the topic is longer than 127 bytes (which includes every
//!   topic longer than 127 chars): Java reads the v1 topic length as a *signed* byte.
//! - The body CRC is written as given; the encoder never recomputes it.
//! - `decode` never panics and never allocates; a record it returns as `Ok` lies within
//!   `buf[..total_size]` and its TOTALSIZE equals the size its length fields imply.
//!
//! # Blank record
//!
//! `[TOTALSIZE = rest of segment][MAGIC_BLANK]`: 8 bytes ending the used part of a
//! segment; readers skip to the next segment.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;

use super::position::{to_i16, to_i32, to_i64, to_u32, to_u8, to_usize};
use super::properties;
use super::properties::{NAME_VALUE_SEPARATOR_BYTE, PROPERTY_SEPARATOR_BYTE};

pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32.cast_signed();
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32.cast_signed();
pub const MAGIC_BLANK: i32 = 0xCBD4_3194_u32.cast_signed();
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

/// Byte offsets of the fixed-position fields (valid for every host family and version).
pub const TOTAL_SIZE_POS: usize = 0;
pub const MAGIC_POS: usize = 4;
pub const BODY_CRC_POS: usize = 8;
pub const QUEUE_ID_POS: usize = 12;
pub const FLAG_POS: usize = 16;
pub const QUEUE_OFFSET_POS: usize = 20;
pub const PHYS_OFFSET_POS: usize = 28;
pub const SYSFLAG_POS: usize = 36;
pub const BORN_TIMESTAMP_POS: usize = 40;
pub const BORN_HOST_POS: usize = 48;

/// Sum of the fixed-width fields other than the two hosts (RocketMQ's `calMsgLength` 68).
const FIXED_FIELDS_LEN: usize = 68;
/// Smallest possible record: v1, IPv4/IPv4, empty body, topic and properties.
pub const MIN_RECORD_LEN: usize = FIXED_FIELDS_LEN + 8 + 8 + 4 + 1 + 2;
const HOST_V4_LEN: usize = 8;
const HOST_V6_LEN: usize = 20;
const CRC_DIGITS: usize = 10;
/// The CRC pair up to its digits: key and name/value separator.
const CRC_PREFIX_LEN: usize = RECORD_CRC_KEY.len() + 1;
const TOPIC_MAX_LEN: usize = i16::MAX as usize;

// The layout above, checked when compiling: each fixed field starts where the one before
// it ends, the fixed part adds up to RocketMQ's 68 bytes, and the CRC pair fits the
// properties field.
const _: () = assert!(TOTAL_SIZE_POS == 0 && MAGIC_POS == TOTAL_SIZE_POS + 4);
const _: () = assert!(BODY_CRC_POS == MAGIC_POS + 4 && QUEUE_ID_POS == BODY_CRC_POS + 4);
const _: () = assert!(FLAG_POS == QUEUE_ID_POS + 4 && QUEUE_OFFSET_POS == FLAG_POS + 4);
const _: () = assert!(PHYS_OFFSET_POS == QUEUE_OFFSET_POS + 8);
const _: () = assert!(SYSFLAG_POS == PHYS_OFFSET_POS + 8);
const _: () = assert!(BORN_TIMESTAMP_POS == SYSFLAG_POS + 4);
const _: () = assert!(BORN_HOST_POS == BORN_TIMESTAMP_POS + 8);
// totalsize, magic, bodyCRC, queueId, flag, queueOffset, physOffset, sysFlag,
// bornTimestamp, storeTimestamp, reconsumeTimes, preparedTransactionOffset.
const _: () = assert!(FIXED_FIELDS_LEN == 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8);
// Fixed part, two IPv4 hosts, body length, a 1-byte topic length, properties length.
const _: () = assert!(MIN_RECORD_LEN == FIXED_FIELDS_LEN + 2 * HOST_V4_LEN + 4 + 1 + 2);
const _: () = assert!(HOST_V4_LEN == 4 + 4 && HOST_V6_LEN == 16 + 4);
const _: () = assert!(RECORD_CRC_PROPERTY_LEN == CRC_PREFIX_LEN + CRC_DIGITS + 1);
const _: () = assert!(RECORD_CRC_PROPERTY_LEN < PROPERTIES_MAX_LEN);
// A blank is its two header ints, and fits in front of any record's place.
const _: () = assert!(BLANK_RECORD_LEN == 4 + 4 && BLANK_RECORD_LEN < MIN_RECORD_LEN);
// u32::MAX has 10 decimal digits.
const _: () = assert!(CRC_DIGITS == 10);

/// RocketMQ's `calMsgLength`: the TOTALSIZE a record with these field lengths must have.
///
/// `props_len` is the full properties length as stored (including any CRC pair).
pub fn record_len(
    v2: bool,
    sys_flag: i32,
    body_len: usize,
    topic_len: usize,
    props_len: usize,
) -> usize {
    FIXED_FIELDS_LEN
        + host_len(sys_flag & SYSFLAG_BORNHOST_V6 != 0)
        + host_len(sys_flag & SYSFLAG_STOREHOST_V6 != 0)
        + 4
        + body_len
        + topic_len_size(v2)
        + topic_len
        + 2
        + props_len
}

/// Where a record's STORETIMESTAMP is: right after its born host, whose length its
/// sysFlag gives.
pub fn store_timestamp_pos(sys_flag: i32) -> usize {
    BORN_HOST_POS + host_len(sys_flag & SYSFLAG_BORNHOST_V6 != 0)
}

fn host_len(v6: bool) -> usize {
    if v6 {
        HOST_V6_LEN
    } else {
        HOST_V4_LEN
    }
}

fn topic_len_size(v2: bool) -> usize {
    if v2 {
        2
    } else {
        1
    }
}

/// Whether `topic` needs the v2 format. Java picks v2 for topics over 127 chars; we also
/// need it for shorter non-ASCII topics over 127 bytes, whose v1 length byte Java would
/// read back negative.
fn needs_v2(topic: &str) -> bool {
    topic.len() > V1_TOPIC_MAX_CHARS
}

/// Maps IPv4-mapped IPv6 to IPv4 so that the stored width matches the real family.
fn normalise(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        SocketAddr::V4(_) => addr,
    }
}

/// Properties bytes before the CRC pair: the input plus a `\x02` if it lacks its final one.
fn user_props_len(properties: &str) -> usize {
    let p = properties.as_bytes();
    match p.last() {
        Some(&b) if b != PROPERTY_SEPARATOR_BYTE => p.len() + 1,
        _ => p.len(),
    }
}

/// `crc32(body) & 0x7FFFFFFF` (IEEE polynomial, as `java.util.zip.CRC32`).
pub fn body_crc(body: &[u8]) -> i32 {
    i32::try_from(crc32fast::hash(body) & 0x7FFF_FFFF).expect("masked to 31 bits")
}

/// The record length `input` will encode to, including the CRC property.
pub fn encoded_len(input: &RecordInput) -> Result<usize, EncodeError> {
    let topic_len = input.topic.len();
    if topic_len == 0 {
        return Err(EncodeError::EmptyTopic);
    }
    if topic_len > TOPIC_MAX_LEN {
        return Err(EncodeError::TopicTooLong(topic_len));
    }
    let props_len = user_props_len(&input.properties) + RECORD_CRC_PROPERTY_LEN;
    if props_len > PROPERTIES_MAX_LEN {
        return Err(EncodeError::PropertiesTooLong(props_len));
    }
    let sys_flag = host_sys_flag(input);
    let overhead = record_len(needs_v2(&input.topic), sys_flag, 0, topic_len, props_len);
    // TOTALSIZE is an i32 too, so the body gets whatever the other fields leave.
    let body_max = to_usize(i32::MAX) - overhead;
    if input.body.len() > body_max {
        return Err(EncodeError::BodyTooLong(input.body.len(), body_max));
    }
    Ok(overhead + input.body.len())
}

/// The SYSFLAG to store: the input's bits with the host-family bits taken from the hosts.
fn host_sys_flag(input: &RecordInput) -> i32 {
    let mut flag = input.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    if normalise(input.born_host).is_ipv6() {
        flag |= SYSFLAG_BORNHOST_V6;
    }
    if normalise(input.store_host).is_ipv6() {
        flag |= SYSFLAG_STOREHOST_V6;
    }
    flag
}

fn put_host(out: &mut Vec<u8>, addr: SocketAddr) {
    match normalise(addr) {
        SocketAddr::V4(a) => out.extend_from_slice(&a.ip().octets()),
        SocketAddr::V6(a) => out.extend_from_slice(&a.ip().octets()),
    }
    out.extend_from_slice(&i32::from(addr.port()).to_be_bytes());
}

/// Where RECONSUMETIMES starts in a record with `sys_flag`: 72, plus 12 for each IPv6
/// host before it (the layout in the module doc).
pub fn reconsume_times_at(sys_flag: i32) -> usize {
    let mut at = 72;
    if sys_flag & SYSFLAG_BORNHOST_V6 != 0 {
        at += 12;
    }
    if sys_flag & SYSFLAG_STOREHOST_V6 != 0 {
        at += 12;
    }
    at
}

/// Why [`set_reconsume_times`] refused its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconsumeTimesError {
    /// They do not start with a record: what the decoder found, as it prints it.
    NotARecord(String),
    /// They start with a record of `record` bytes but hold `bytes`.
    NotOneRecord { bytes: usize, record: usize },
}

impl fmt::Display for ReconsumeTimesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconsumeTimesError::NotARecord(found) => write!(f, "not a record: {found}"),
            ReconsumeTimesError::NotOneRecord { bytes, record } => {
                write!(f, "{bytes} bytes hold a record of {record}")
            }
        }
    }
}

impl std::error::Error for ReconsumeTimesError {}

/// For the POP path, which reports a delivery's failure as text.
impl From<ReconsumeTimesError> for String {
    fn from(error: ReconsumeTimesError) -> String {
        error.to_string()
    }
}

/// Sets RECONSUMETIMES of the one record `rec` holds (a copy handed to a consumer) to
/// `times` and rewrites its CRC32C property to match, so the copy verifies as any record
/// does. Refuses bytes that are not exactly one whole record.
pub fn set_reconsume_times(rec: &mut [u8], times: i32) -> Result<(), ReconsumeTimesError> {
    let (at, total) = match decode(rec, Verify::Structure) {
        Ok(Decoded::Record(view)) => (reconsume_times_at(view.sys_flag), to_usize(view.total_size)),
        other => return Err(ReconsumeTimesError::NotARecord(format!("{other:?}"))),
    };
    if total != rec.len() {
        return Err(ReconsumeTimesError::NotOneRecord {
            bytes: rec.len(),
            record: total,
        });
    }
    rec[at..at + 4].copy_from_slice(&times.to_be_bytes());
    let crc = crc32c::crc32c(&rec[..total - RECORD_CRC_PROPERTY_LEN]);
    let digits_at = total - 1 - 10;
    rec[digits_at..total - 1].copy_from_slice(&crc_digits(crc));
    Ok(())
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
    let total = encoded_len(input)?;
    let start = out.len();
    out.reserve(total);
    let v2 = needs_v2(&input.topic);
    let magic = if v2 { MAGIC_V2 } else { MAGIC_V1 };

    // The length checks above bound every cast below.
    out.extend_from_slice(&to_i32(total).to_be_bytes());
    out.extend_from_slice(&magic.to_be_bytes());
    out.extend_from_slice(&input.body_crc.to_be_bytes());
    out.extend_from_slice(&input.queue_id.to_be_bytes());
    out.extend_from_slice(&input.flag.to_be_bytes());
    out.extend_from_slice(&queue_offset.to_be_bytes());
    out.extend_from_slice(&phys_offset.to_be_bytes());
    out.extend_from_slice(&host_sys_flag(input).to_be_bytes());
    out.extend_from_slice(&input.born_timestamp.to_be_bytes());
    put_host(out, input.born_host);
    out.extend_from_slice(&store_timestamp.to_be_bytes());
    put_host(out, input.store_host);
    out.extend_from_slice(&input.reconsume_times.to_be_bytes());
    out.extend_from_slice(&input.prepared_transaction_offset.to_be_bytes());
    out.extend_from_slice(&to_i32(input.body.len()).to_be_bytes());
    out.extend_from_slice(&input.body);
    let topic = input.topic.as_bytes();
    if v2 {
        out.extend_from_slice(&to_i16(topic.len()).to_be_bytes());
    } else {
        out.push(to_u8(topic.len()));
    }
    out.extend_from_slice(topic);
    let props_len = user_props_len(&input.properties) + RECORD_CRC_PROPERTY_LEN;
    out.extend_from_slice(&to_i16(props_len).to_be_bytes());
    out.extend_from_slice(input.properties.as_bytes());
    if user_props_len(&input.properties) != input.properties.len() {
        out.push(PROPERTY_SEPARATOR_BYTE);
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(RECORD_CRC_KEY.as_bytes());
    out.push(NAME_VALUE_SEPARATOR_BYTE);
    out.extend_from_slice(&crc_digits(crc));
    out.push(PROPERTY_SEPARATOR_BYTE);
    assert_eq!(
        out.len() - start,
        total,
        "record encoded to {} bytes, but its length was computed as {total}",
        out.len() - start
    );
    Ok(())
}

fn crc_digits(mut crc: u32) -> [u8; CRC_DIGITS] {
    let mut digits = [b'0'; CRC_DIGITS];
    for d in digits.iter_mut().rev() {
        *d = b'0' + to_u8(crc % 10);
        crc /= 10;
    }
    digits
}

/// The CRC the digits spell, or `None` if they are not 10 ASCII digits of a u32.
fn parse_crc_digits(digits: &[u8]) -> Option<u32> {
    if digits.len() != CRC_DIGITS {
        return None;
    }
    let mut value: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(d - b'0');
    }
    u32::try_from(value).ok()
}

/// The stored CRC32C if `props` ends with a well-formed CRC pair that is a whole pair
/// (preceded by nothing or by a `\x02`).
fn trailing_crc(props: &[u8]) -> Option<u32> {
    let split = props.len().checked_sub(RECORD_CRC_PROPERTY_LEN)?;
    let (before, pair) = props.split_at(split);
    if before.last().is_some_and(|&b| b != PROPERTY_SEPARATOR_BYTE) {
        return None;
    }
    let (prefix, rest) = pair.split_at(CRC_PREFIX_LEN);
    let (digits, end) = rest.split_at(CRC_DIGITS);
    if &prefix[..RECORD_CRC_KEY.len()] != RECORD_CRC_KEY.as_bytes()
        || prefix[RECORD_CRC_KEY.len()] != NAME_VALUE_SEPARATOR_BYTE
        || end != [PROPERTY_SEPARATOR_BYTE]
    {
        return None;
    }
    parse_crc_digits(digits)
}

/// Appends a blank record of `len` (>= 8) bytes' worth: only its 8-byte header is written.
pub fn encode_blank(len: u32, out: &mut Vec<u8>) {
    assert!(
        to_usize(len) >= BLANK_RECORD_LEN,
        "blank record of {len} bytes; at least {BLANK_RECORD_LEN} are needed"
    );
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&MAGIC_BLANK.to_be_bytes());
}

/// Bounds-checked big-endian reads over one record. Every failed read becomes a
/// `SizeMismatch`, because the record's own TOTALSIZE is what the read overran.
struct Reader<'a> {
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let bytes = self.rec.get(self.pos..end)?;
        self.pos = end;
        Some(bytes)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn i16(&mut self) -> Option<i16> {
        self.array().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Option<i32> {
        self.array().map(i32::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.array().map(i64::from_be_bytes)
    }

    fn host(&mut self, v6: bool) -> Option<SocketAddr> {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))
        };
        // The port field is a Java int; only its low 16 bits can be a port. Out-of-range
        // values only come from damage, which Verify::Full reports through the CRC32C.
        let port = u16::try_from(self.i32()? & 0xFFFF).expect("masked to 16 bits");
        Some(SocketAddr::new(ip, port))
    }
}

/// Decodes the record at the start of `buf` (which may run past it). Never panics.
pub fn decode(buf: &[u8], verify: Verify) -> Result<Decoded<'_>, DecodeError> {
    if buf.len() < BLANK_RECORD_LEN {
        return Err(DecodeError::Truncated {
            needed: BLANK_RECORD_LEN,
            available: buf.len(),
        });
    }
    let stored = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let magic = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let v2 = match magic {
        MAGIC_BLANK => {
            let len = u32::try_from(stored).ok();
            let Some(len) = len.filter(|&len| to_usize(len) >= BLANK_RECORD_LEN) else {
                return Err(DecodeError::SizeMismatch {
                    stored: i64::from(stored),
                    computed: to_i64(BLANK_RECORD_LEN),
                });
            };
            return Ok(Decoded::Blank { len });
        }
        MAGIC_V1 => false,
        MAGIC_V2 => true,
        other => return Err(DecodeError::BadMagic(other.cast_unsigned())),
    };
    let mismatch = |computed: i64| DecodeError::SizeMismatch {
        stored: i64::from(stored),
        computed,
    };
    let total = usize::try_from(stored).ok();
    let Some(total) = total.filter(|&total| total >= MIN_RECORD_LEN) else {
        return Err(mismatch(to_i64(MIN_RECORD_LEN)));
    };
    let rec = buf.get(..total).ok_or(DecodeError::Truncated {
        needed: total,
        available: buf.len(),
    })?;
    let view = parse_fields(rec, v2).map_err(mismatch)?;

    // The CRCs come before the UTF-8 checks, so that under Verify::Full a BadUtf8 always
    // means a record written whole (recovery must not discard it as torn; see scan.rs).
    if verify == Verify::Full {
        verify_crcs(rec, &view)?;
    }

    let topic = std::str::from_utf8(view.topic).map_err(|_| DecodeError::BadUtf8("topic"))?;
    let props =
        std::str::from_utf8(view.properties).map_err(|_| DecodeError::BadUtf8("properties"))?;

    Ok(Decoded::Record(RecordView {
        total_size: to_u32(total),
        magic,
        body_crc: view.body_crc,
        queue_id: view.queue_id,
        flag: view.flag,
        queue_offset: view.queue_offset,
        phys_offset: view.phys_offset,
        sys_flag: view.sys_flag,
        born_timestamp: view.born_timestamp,
        born_host: view.born_host,
        store_timestamp: view.store_timestamp,
        store_host: view.store_host,
        reconsume_times: view.reconsume_times,
        prepared_transaction_offset: view.prepared_transaction_offset,
        body: view.body,
        topic,
        properties: props,
    }))
}

/// Checks the body CRC and the whole-record CRC32C of `rec` (exactly TOTALSIZE bytes).
fn verify_crcs(rec: &[u8], view: &RawFields<'_>) -> Result<(), DecodeError> {
    let computed = body_crc(view.body);
    if computed != view.body_crc {
        return Err(DecodeError::BodyCrc {
            stored: view.body_crc,
            computed,
        });
    }
    let stored = trailing_crc(view.properties).ok_or(DecodeError::MissingRecordCrc)?;
    let computed = crc32c::crc32c(&rec[..rec.len() - RECORD_CRC_PROPERTY_LEN]);
    if computed != stored {
        return Err(DecodeError::RecordCrc { stored, computed });
    }
    Ok(())
}

/// A record's fields before the UTF-8 checks.
struct RawFields<'a> {
    body_crc: i32,
    queue_id: i32,
    flag: i32,
    queue_offset: i64,
    phys_offset: i64,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: SocketAddr,
    store_timestamp: i64,
    store_host: SocketAddr,
    reconsume_times: i32,
    prepared_transaction_offset: i64,
    body: &'a [u8],
    topic: &'a [u8],
    properties: &'a [u8],
}

/// Reads the fields of `rec` (exactly TOTALSIZE bytes). On failure returns the size the
/// length fields read so far imply (`calMsgLength` with the unread lengths taken as 0),
/// for the caller to report against TOTALSIZE.
fn parse_fields(rec: &[u8], v2: bool) -> Result<RawFields<'_>, i64> {
    let total = to_i64(rec.len());
    let sys_flag = Reader {
        rec,
        pos: SYSFLAG_POS,
    }
    .i32()
    .ok_or(to_i64(MIN_RECORD_LEN))?;
    let mut need = to_i64(record_len(v2, sys_flag, 0, 0, 0));
    // Past this check the fixed-width reads cannot fail.
    if need > total {
        return Err(need);
    }
    let mut r = Reader { rec, pos: 8 };
    let body_crc = r.i32().ok_or(need)?;
    let queue_id = r.i32().ok_or(need)?;
    let flag = r.i32().ok_or(need)?;
    let queue_offset = r.i64().ok_or(need)?;
    let phys_offset = r.i64().ok_or(need)?;
    r.pos += 4; // SYSFLAG, read above
    let born_timestamp = r.i64().ok_or(need)?;
    let born_host = r.host(sys_flag & SYSFLAG_BORNHOST_V6 != 0).ok_or(need)?;
    let store_timestamp = r.i64().ok_or(need)?;
    let store_host = r.host(sys_flag & SYSFLAG_STOREHOST_V6 != 0).ok_or(need)?;
    let reconsume_times = r.i32().ok_or(need)?;
    let prepared_transaction_offset = r.i64().ok_or(need)?;

    // Each length may be negative or huge; i64 holds any sum of them without overflow,
    // and a negative one can never add up to a TOTALSIZE that is at least the fixed part.
    let body_len = r.i32().ok_or(need)?;
    need += i64::from(body_len);
    if body_len < 0 || need > total {
        return Err(need);
    }
    let body = r.take(to_usize(body_len)).ok_or(need)?;
    let topic_len = if v2 {
        i64::from(r.i16().ok_or(need)?)
    } else {
        i64::from(r.take(1).ok_or(need)?[0])
    };
    need += topic_len;
    if topic_len < 0 || need > total {
        return Err(need);
    }
    let topic = r.take(to_usize(topic_len)).ok_or(need)?;
    let props_len = i64::from(r.i16().ok_or(need)?);
    need += props_len;
    if props_len < 0 || need != total {
        return Err(need);
    }
    let properties = r.take(to_usize(props_len)).ok_or(need)?;
    // Guaranteed by the `need != total` check above; a plain comparison per record.
    assert_eq!(
        r.pos,
        rec.len(),
        "record fields end at {} of its {} bytes",
        r.pos,
        rec.len()
    );

    Ok(RawFields {
        body_crc,
        queue_id,
        flag,
        queue_offset,
        phys_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

impl RecordView<'_> {
    /// The value of a property, as [`properties::get`] reads the whole stored string
    /// (so the CRC pair is visible under [`RECORD_CRC_KEY`]).
    pub fn property(&self, key: &str) -> Option<&str> {
        properties::get(self.properties, key)
    }

    /// The properties without the trailing CRC pair: what the producer sent plus any
    /// broker-added pairs. The whole string if the CRC pair is absent or malformed.
    pub fn user_properties(&self) -> &str {
        match trailing_crc(self.properties.as_bytes()) {
            // The pair is ASCII, so the cut is on a char boundary.
            Some(_) => &self.properties[..self.properties.len() - RECORD_CRC_PROPERTY_LEN],
            None => self.properties,
        }
    }

    /// The CRC32C the record carries, if its CRC pair is well formed.
    pub fn record_crc(&self) -> Option<u32> {
        trailing_crc(self.properties.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> RecordInput {
        let body = Bytes::from_static(b"body");
        RecordInput {
            topic: "T".to_owned(),
            queue_id: 1,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:1".parse().unwrap(),
            store_host: "127.0.0.1:2".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties: String::new(),
        }
    }

    #[test]
    fn body_crc_is_masked_ieee() {
        // crc32("123456789") = 0xCBF43926; the mask clears the top bit.
        assert_eq!(body_crc(b"123456789"), 0x4BF4_3926);
        assert_eq!(body_crc(b""), 0);
    }

    #[test]
    fn crc_digits_are_ten_most_significant_first() {
        assert_eq!(&crc_digits(0), b"0000000000");
        assert_eq!(&crc_digits(123), b"0000000123");
        assert_eq!(&crc_digits(u32::MAX), b"4294967295");
        for v in [0, 1, 123, 0xDEAD_BEEF, u32::MAX] {
            assert_eq!(parse_crc_digits(&crc_digits(v)), Some(v));
        }
        assert_eq!(parse_crc_digits(b"4294967296"), None);
        assert_eq!(parse_crc_digits(b"9999999999"), None);
        assert_eq!(parse_crc_digits(b"000000012x"), None);
        assert_eq!(parse_crc_digits(b"123"), None);
    }

    #[test]
    fn trailing_crc_needs_a_whole_well_formed_pair() {
        let pair = format!("{RECORD_CRC_KEY}\u{1}0000000123\u{2}");
        assert_eq!(pair.len(), RECORD_CRC_PROPERTY_LEN);
        assert_eq!(trailing_crc(pair.as_bytes()), Some(123));
        assert_eq!(
            trailing_crc(format!("a\u{1}b\u{2}{pair}").as_bytes()),
            Some(123)
        );
        // Glued onto a pair that lacks its separator: the key would read as "bX__CRC32C#".
        assert_eq!(trailing_crc(format!("a\u{1}bX{pair}").as_bytes()), None);
        assert_eq!(trailing_crc(&pair.as_bytes()[..20]), None);
        assert_eq!(trailing_crc(b""), None);
        let mut wrong_key = pair.clone().into_bytes();
        wrong_key[2] = b'X';
        assert_eq!(trailing_crc(&wrong_key), None);
    }

    #[test]
    fn encoded_len_matches_the_formula() {
        let i = input();
        assert_eq!(encoded_len(&i), Ok(91 + 4 + 1 + RECORD_CRC_PROPERTY_LEN));
        assert_eq!(
            encoded_len(&i).unwrap(),
            record_len(false, 0, 4, 1, RECORD_CRC_PROPERTY_LEN)
        );
        let mut v6 = i.clone();
        v6.born_host = "[::1]:1".parse().unwrap();
        assert_eq!(encoded_len(&v6).unwrap(), encoded_len(&i).unwrap() + 12);
        assert_eq!(host_sys_flag(&v6), SYSFLAG_BORNHOST_V6);
    }

    #[test]
    fn short_non_ascii_topic_over_127_bytes_uses_v2() {
        let mut i = input();
        i.topic = "é".repeat(64); // 64 chars, 128 bytes
        let mut out = Vec::new();
        encode_into(&i, 0, 0, 0, &mut out).unwrap();
        assert_eq!(&out[4..8], &MAGIC_V2.to_be_bytes());
        match decode(&out, Verify::Full).unwrap() {
            Decoded::Record(v) => assert_eq!(v.topic, i.topic),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decode_rejects_headers_before_reading_fields() {
        assert_eq!(
            decode(&[0; 3], Verify::Structure),
            Err(DecodeError::Truncated {
                needed: 8,
                available: 3
            })
        );
        let mut buf = vec![0u8; 200];
        buf[4..8].copy_from_slice(&MAGIC_V1.to_be_bytes());
        for total in [-1i32, 0, 90, i32::MIN] {
            buf[0..4].copy_from_slice(&total.to_be_bytes());
            assert!(matches!(
                decode(&buf, Verify::Structure),
                Err(DecodeError::SizeMismatch { .. })
            ));
        }
        buf[0..4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(
            decode(&buf, Verify::Structure),
            Err(DecodeError::Truncated {
                needed: to_usize(i32::MAX),
                available: 200
            })
        );
        // Both hosts v6 needs 115 bytes of fixed fields; a 100-byte TOTALSIZE cannot hold them.
        buf[0..4].copy_from_slice(&100i32.to_be_bytes());
        buf[36..40].copy_from_slice(&0x30i32.to_be_bytes());
        assert_eq!(
            decode(&buf, Verify::Structure),
            Err(DecodeError::SizeMismatch {
                stored: 100,
                computed: 115
            })
        );
    }

    #[test]
    fn negative_and_huge_lengths_are_size_mismatches() {
        let mut out = Vec::new();
        encode_into(&input(), 0, 0, 0, &mut out).unwrap();
        for value in [-1i32, i32::MIN, i32::MAX, 5] {
            let mut bad = out.clone();
            bad[84..88].copy_from_slice(&value.to_be_bytes());
            assert!(
                matches!(
                    decode(&bad, Verify::Structure),
                    Err(DecodeError::SizeMismatch { .. })
                ),
                "body length {value}"
            );
        }
        let props_pos = 88 + 4 + 1 + 1;
        for value in [-1i16, i16::MIN, i16::MAX] {
            let mut bad = out.clone();
            bad[props_pos..props_pos + 2].copy_from_slice(&value.to_be_bytes());
            assert!(matches!(
                decode(&bad, Verify::Structure),
                Err(DecodeError::SizeMismatch { .. })
            ));
        }
    }
}
